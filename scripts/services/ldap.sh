# shellcheck shell=bash
# scripts/services/ldap.sh — an OpenLDAP server (Debian's slapd) for the LDAP
# identity source's tests (test/identity/ldap_test.go).
# Sourced by scripts/test.sh (or by hand):
#
#   REPO=/work/main; source scripts/services/ldap.sh
#   start_ldap && go test ./test/identity/; stop_ldap
#
#   start_ldap  runs the Debian package's slapd (apt-get install slapd
#               ldap-utils; test.sh installs them), after checking that its
#               major version is $LDAP_MAJOR, as a foreground child with a
#               slapd.conf and an mdb database in a fresh directory under the
#               cache dir; TLS from a CA made here (openssl), served as ldaps://
#               and through StartTLS on ldap://; seeds the directory below with
#               ldapadd; and exports
#                 CAIRN_TEST_LDAP_URL      ldap://127.0.0.1:<port> (StartTLS offered)
#                 CAIRN_TEST_LDAPS_URL     ldaps://127.0.0.1:<port>
#                 CAIRN_TEST_LDAP_CA       the CA's PEM file
#                 CAIRN_TEST_LDAP_BASE     dc=cairn,dc=test
#                 CAIRN_TEST_LDAP_BINDDN   the service account cairn searches as
#                 CAIRN_TEST_LDAP_BINDPW   its password
#   stop_ldap   stops the PID start_ldap started (never by name) and removes
#               the directory.
#
# The directory (passwords are "<name>-secret"):
#   ou=people:   alice (groups developers, readers), bob (readers),
#                carol (no group), twin twice (two entries, an ambiguous name)
#   ou=groups:   developers, readers (groupOfNames, member=<user DN>)
#   ou=services: cairn (the service account: reads people and groups)
# Users may read only their own entry, so groups must be searched as the
# service account.
#
# The pin is by major version, as for redis: Debian's exact versions leave the
# mirrors with each security update. The exact version is logged.

LDAP_MAJOR=2
LDAP_PID=
LDAP_DIR=
LDAP_SUFFIX=dc=cairn,dc=test

# shellcheck source=scripts/services/lib.sh
source "${BASH_SOURCE[0]%/*}/lib.sh"

_ldap_log() { printf '==> ldap: %s\n' "$*" >&2; }

# _ldap_check_version prints slapd's Debian version when its major is LDAP_MAJOR.
_ldap_check_version() {
	local version
	version=$(dpkg-query -W -f='${Version}' slapd 2>/dev/null) || {
		_ldap_log "slapd is not a Debian package here (apt-get install slapd ldap-utils)"
		return 1
	}
	if [[ ${version%%.*} != "$LDAP_MAJOR" ]]; then
		_ldap_log "slapd is version '$version'; the tests pin major version $LDAP_MAJOR.x"
		return 1
	fi
	echo "$version"
}

# _ldap_tls DIR — a CA and a server certificate for localhost and 127.0.0.1.
_ldap_tls() {
	local d=$1
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 7 \
		-subj /CN=cairn-test-ldap-ca -keyout "$d/ca.key" -out "$d/ca.pem" 2>/dev/null &&
		openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \
			-addext 'subjectAltName=DNS:localhost,IP:127.0.0.1' \
			-keyout "$d/server.key" -out "$d/server.csr" 2>/dev/null &&
		openssl x509 -req -in "$d/server.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial \
			-days 7 -copy_extensions copy -out "$d/server.pem" 2>/dev/null
}

# _ldap_config DIR ROOTPW SERVICEPW — slapd.conf: one mdb database, TLS, ACLs.
_ldap_config() {
	local d=$1 rootpw=$2
	cat >"$d/slapd.conf" <<EOF
include /etc/ldap/schema/core.schema
include /etc/ldap/schema/cosine.schema
include /etc/ldap/schema/inetorgperson.schema
pidfile $d/slapd.pid
argsfile $d/slapd.args
modulepath /usr/lib/ldap
moduleload back_mdb
TLSCACertificateFile $d/ca.pem
TLSCertificateFile $d/server.pem
TLSCertificateKeyFile $d/server.key
database mdb
maxsize 104857600
suffix "$LDAP_SUFFIX"
rootdn "cn=admin,$LDAP_SUFFIX"
rootpw $rootpw
directory $d/db
index objectClass eq
index uid eq
index member eq
access to attrs=userPassword
	by self read
	by anonymous auth
	by * none
access to *
	by dn.exact="cn=cairn,ou=services,$LDAP_SUFFIX" read
	by self read
	by * none
EOF
}

# _ldap_seed FILE — the entries, passwords hashed with slappasswd.
_ldap_seed() {
	local f=$1 u
	{
		printf 'dn: %s\nobjectClass: dcObject\nobjectClass: organization\ndc: cairn\no: cairn tests\n\n' "$LDAP_SUFFIX"
		for u in people groups services; do
			printf 'dn: ou=%s,%s\nobjectClass: organizationalUnit\nou: %s\n\n' "$u" "$LDAP_SUFFIX" "$u"
		done
		for u in alice bob carol; do
			printf 'dn: uid=%s,ou=people,%s\nobjectClass: inetOrgPerson\nuid: %s\ncn: %s\nsn: %s\nuserPassword: %s\n\n' \
				"$u" "$LDAP_SUFFIX" "$u" "$u" "$u" "$(slappasswd -s "$u-secret")"
		done
		# Two entries with one uid: a login of that name is ambiguous.
		for u in one two; do
			printf 'dn: cn=twin-%s,ou=people,%s\nobjectClass: inetOrgPerson\nuid: twin\ncn: twin-%s\nsn: twin\nuserPassword: %s\n\n' \
				"$u" "$LDAP_SUFFIX" "$u" "$(slappasswd -s twin-secret)"
		done
		printf 'dn: cn=cairn,ou=services,%s\nobjectClass: organizationalRole\nobjectClass: simpleSecurityObject\ncn: cairn\nuserPassword: %s\n\n' \
			"$LDAP_SUFFIX" "$(slappasswd -s cairn-secret)"
		printf 'dn: cn=developers,ou=groups,%s\nobjectClass: groupOfNames\ncn: developers\nmember: uid=alice,ou=people,%s\n\n' \
			"$LDAP_SUFFIX" "$LDAP_SUFFIX"
		printf 'dn: cn=readers,ou=groups,%s\nobjectClass: groupOfNames\ncn: readers\nmember: uid=alice,ou=people,%s\nmember: uid=bob,ou=people,%s\n\n' \
			"$LDAP_SUFFIX" "$LDAP_SUFFIX" "$LDAP_SUFFIX"
	} >"$f"
}

# _ldap_exec PORT TLSPORT — slapd serving ldap:// on PORT and ldaps:// on
# TLSPORT. -d: stay in the foreground (our child, stopped by its PID) and log
# connections and operations (256: stats) to the log.
_ldap_exec() {
	exec slapd -f "$LDAP_DIR/slapd.conf" -h "ldap://127.0.0.1:$1/ ldaps://127.0.0.1:$2/" -d 256
}

# _ldap_listening PORT TLSPORT — slapd accepts connections on both.
_ldap_listening() {
	svc_listening "$1" && svc_listening "$2"
}

start_ldap() {
	local version port tlsport log rootpw cmd
	for cmd in slapd slappasswd ldapadd ldapwhoami openssl; do
		if ! command -v "$cmd" >/dev/null; then
			_ldap_log "$cmd not found (apt-get install slapd ldap-utils openssl)"
			return 1
		fi
	done
	version=$(_ldap_check_version) || return 1
	mkdir -p "${CACHE:-${TMPDIR:-/tmp}}"
	LDAP_DIR=$(mktemp -d "${CACHE:-${TMPDIR:-/tmp}}/cairn-ldap.XXXXXX") || return 1
	mkdir -p "$LDAP_DIR/db"
	if ! _ldap_tls "$LDAP_DIR"; then
		_ldap_log "making the test CA and certificate with openssl failed"
		stop_ldap
		return 1
	fi
	rootpw=$(slappasswd -s admin-secret) || { stop_ldap; return 1; }
	_ldap_config "$LDAP_DIR" "$rootpw"
	_ldap_seed "$LDAP_DIR/seed.ldif"
	log=${SERVER_LOGS:-$LDAP_DIR}/ldap.log
	if ! svc_start_on_free_port ldap LDAP_PID 2 "$log" 30 _ldap_exec _ldap_listening; then
		_ldap_log "failed to start"
		stop_ldap
		return 1
	fi
	port=${SVC_PORTS[0]} tlsport=${SVC_PORTS[1]}
	if ! ldapadd -x -H "ldap://127.0.0.1:$port" -D "cn=admin,$LDAP_SUFFIX" -w admin-secret \
		-f "$LDAP_DIR/seed.ldif" >"$LDAP_DIR/seed.log" 2>&1; then
		_ldap_log "seeding with ldapadd failed:"
		cat "$LDAP_DIR/seed.log" >&2
		_ldap_fail "$log"
		return 1
	fi
	# The service account binds over StartTLS against our CA: the TLS setup
	# works before any test relies on it.
	if ! LDAPTLS_CACERT=$LDAP_DIR/ca.pem ldapwhoami -ZZ -x -H "ldap://127.0.0.1:$port" \
		-D "cn=cairn,ou=services,$LDAP_SUFFIX" -w cairn-secret >/dev/null 2>"$LDAP_DIR/tls.log"; then
		_ldap_log "StartTLS bind check failed:"
		cat "$LDAP_DIR/tls.log" >&2
		_ldap_fail "$log"
		return 1
	fi
	export CAIRN_TEST_LDAP_URL=ldap://127.0.0.1:$port
	export CAIRN_TEST_LDAPS_URL=ldaps://127.0.0.1:$tlsport
	export CAIRN_TEST_LDAP_CA=$LDAP_DIR/ca.pem
	export CAIRN_TEST_LDAP_BASE=$LDAP_SUFFIX
	export CAIRN_TEST_LDAP_BINDDN=cn=cairn,ou=services,$LDAP_SUFFIX
	export CAIRN_TEST_LDAP_BINDPW=cairn-secret
	_ldap_log "slapd $version (pid $LDAP_PID) at $CAIRN_TEST_LDAP_URL and $CAIRN_TEST_LDAPS_URL"
}

# _ldap_fail LOG — after a failed check of a running slapd: show the end of
# its LOG and stop it.
_ldap_fail() {
	_ldap_log "failed to start; log:"
	tail -n 20 "$1" >&2 2>/dev/null || true
	stop_ldap
}

stop_ldap() {
	svc_stop "$LDAP_PID"
	svc_record ldap
	LDAP_PID=
	if [[ -n $LDAP_DIR ]]; then
		rm -rf "$LDAP_DIR"
	fi
	LDAP_DIR=
	unset CAIRN_TEST_LDAP_URL CAIRN_TEST_LDAPS_URL CAIRN_TEST_LDAP_CA CAIRN_TEST_LDAP_BASE \
		CAIRN_TEST_LDAP_BINDDN CAIRN_TEST_LDAP_BINDPW
}
