// Package testenv reads the addresses of the servers tests need (Redis,
// MinIO, fake-gcs-server, Azurite, Hydra), which scripts/test.sh starts and
// exports. It imports nothing of cairn, so any test may use it.
package testenv

import (
	"os"
	"testing"
)

// Need returns the variables' values, skipping the test when one is unset
// (failing it under CI, where the test script starts every server).
func Need(t testing.TB, vars ...string) []string {
	t.Helper()
	vals := make([]string, len(vars))
	for i, v := range vars {
		vals[i] = os.Getenv(v)
		if vals[i] == "" {
			msg := v + " is not set (scripts/test.sh starts the servers tests need)"
			if os.Getenv("CI") == "true" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
	return vals
}

// RedisAddr is the test Redis server's address ($CAIRN_TEST_REDIS_ADDR).
func RedisAddr(t testing.TB) string {
	t.Helper()
	return Need(t, "CAIRN_TEST_REDIS_ADDR")[0]
}

// LDAP is the test OpenLDAP server that scripts/services/ldap.sh starts and
// seeds (its comment lists the users, groups and passwords).
type LDAP struct {
	URL    string // ldap://127.0.0.1:<port>, StartTLS offered
	LDAPS  string // ldaps://127.0.0.1:<port>
	CA     string // the PEM file of the CA that signed the server's certificate
	Base   string // the directory's suffix (dc=cairn,dc=test)
	BindDN string // the service account
	BindPW string
}

// LDAPServer is the test LDAP server ($CAIRN_TEST_LDAP_URL and its
// companions).
func LDAPServer(t testing.TB) LDAP {
	t.Helper()
	v := Need(t, "CAIRN_TEST_LDAP_URL", "CAIRN_TEST_LDAPS_URL", "CAIRN_TEST_LDAP_CA",
		"CAIRN_TEST_LDAP_BASE", "CAIRN_TEST_LDAP_BINDDN", "CAIRN_TEST_LDAP_BINDPW")
	return LDAP{URL: v[0], LDAPS: v[1], CA: v[2], Base: v[3], BindDN: v[4], BindPW: v[5]}
}

// Hydra is the test OIDC provider (Ory Hydra) that
// scripts/services/hydra.sh starts: its public URL (the issuer) and its
// admin API's URL.
type Hydra struct {
	Public, Admin string
}

// HydraServer is the test Hydra ($CAIRN_TEST_HYDRA_PUBLIC and
// $CAIRN_TEST_HYDRA_ADMIN).
func HydraServer(t testing.TB) Hydra {
	t.Helper()
	v := Need(t, "CAIRN_TEST_HYDRA_PUBLIC", "CAIRN_TEST_HYDRA_ADMIN")
	return Hydra{Public: v[0], Admin: v[1]}
}
