// Package auth tests production serving of a real `cairn serve` process:
// htpasswd and token authentication with real clients (crane, skopeo) and
// raw HTTP, TLS and mutual TLS, and the debug listener's metrics, health and
// readiness. Client tools missing from PATH skip their tests unless
// CAIRN_REQUIRE_CLIENTS=1.
package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"golang.org/x/crypto/bcrypt"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/clitool"
	"github.com/cairn-registry/cairn/internal/testutil/htpasswdtest"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

// TestMain builds cairn once for the package.
func TestMain(m *testing.M) { os.Exit(cairnproc.Main(m)) }

// writeFile writes content to name in a new temp dir and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// htpasswd returns an htpasswd file of bcrypt entries for user, password
// pairs, at the cheapest cost.
func htpasswd(t *testing.T, userPass ...string) string {
	t.Helper()
	return htpasswdtest.File(t, bcrypt.MinCost, userPass...)
}

// startConfig runs cairn with the configuration document cfg on a fresh
// storage root. The server must answer plain HTTP.
func startConfig(t *testing.T, cfg string) *cairnproc.Server {
	t.Helper()
	return cairnproc.Start(t, "", "--config", cairnproc.WriteConfig(t, cfg))
}

// startTLS runs cairn with cfg (which configures http.tls) and waits until
// it answers GET /v2/ over HTTPS for a client trusting roots and, for mutual
// TLS, presenting cert.
func startTLS(t *testing.T, cfg string, roots *x509.CertPool, cert *tls.Certificate) *cairnproc.Server {
	t.Helper()
	hc := httpsClient(roots, cert)
	defer hc.CloseIdleConnections()
	root := t.TempDir()
	s := cairnproc.StartTLS(t, cairnproc.Binary(t), hc, "--root", root, "--config", cairnproc.WriteConfig(t, cfg))
	s.Root = root
	return s
}

func httpsClient(roots *x509.CertPool, cert *tls.Certificate) *http.Client {
	tc := &tls.Config{RootCAs: roots}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	tr := &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// testCA is a certificate authority made for one test.
type testCA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	pemPath string // the CA certificate as a PEM file
	pool    *x509.CertPool
}

// randomSerial returns a random 127-bit certificate serial number.
func randomSerial(t *testing.T) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// newCert makes a certificate of tmpl for a fresh key, with a random
// serial, valid from an hour ago for a day, signed by parent's key (self-
// signed when parent is nil).
func newCert(t *testing.T, tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = randomSerial(t)
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func newCA(t *testing.T, name string) *testCA {
	t.Helper()
	cert, key := newCert(t, &x509.Certificate{
		Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}, nil, nil)
	ca := &testCA{cert: cert, key: key, pool: x509.NewCertPool()}
	ca.pool.AddCert(cert)
	ca.pemPath = writeFile(t, "ca.pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})))
	return ca
}

// issued is a certificate the CA issued, with its key, also as PEM files.
type issued struct {
	cert              *x509.Certificate
	key               *ecdsa.PrivateKey
	certPath, keyPath string
	tls               tls.Certificate
}

// issue makes a certificate for cn; ips become IP SANs (a server
// certificate), none makes a client certificate.
func (ca *testCA) issue(t *testing.T, cn string, ips ...net.IP) *issued {
	t.Helper()
	tmpl := &x509.Certificate{
		Subject: pkix.Name{CommonName: cn}, KeyUsage: x509.KeyUsageDigitalSignature, IPAddresses: ips,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if len(ips) > 0 {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	cert, key := newCert(t, tmpl, ca.cert, ca.key)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return &issued{
		cert: cert, key: key, tls: pair,
		certPath: writeFile(t, "cert.pem", string(certPEM)),
		keyPath:  writeFile(t, "key.pem", string(keyPEM)),
	}
}

// skopeoSession finds skopeo (skipping the test without it) and returns
// functions that run it in a session of its own, with --insecure-policy
// (no /etc/containers/policy.json needed: these tests are about
// authentication): run's command must succeed, fail's fail. Both return
// the output.
func skopeoSession(t *testing.T) (run, fail func(args ...string) string) {
	t.Helper()
	skopeo := clitool.Path(t, "skopeo")
	e := clitool.NewSession(t)
	run = func(args ...string) string {
		t.Helper()
		return string(e.Run(t, skopeo, append([]string{"--insecure-policy"}, args...)...))
	}
	fail = func(args ...string) string {
		t.Helper()
		return e.Fail(t, skopeo, append([]string{"--insecure-policy"}, args...)...)
	}
	return run, fail
}

// skopeoRoundTrip copies img to ref (docker://...) with skopeo as push,
// back into a fresh layout as pull (user:password each), and checks it
// came back whole.
func skopeoRoundTrip(t *testing.T, skopeo func(args ...string) string, img *testImage, ref, push, pull string) {
	t.Helper()
	skopeo("copy", "--preserve-digests", "--dest-tls-verify=false", "--dest-creds", push, "oci:"+img.dir+":v1", ref)
	out := filepath.Join(t.TempDir(), "out")
	skopeo("copy", "--preserve-digests", "--src-tls-verify=false", "--src-creds", pull, ref, "oci:"+out+":v1")
	if got := ociDigest(t, out); got != img.digest.String() {
		t.Errorf("pulled %s, want %s", got, img.digest)
	}
}

// testImage is a random image written as a one-image OCI layout (what crane
// push and skopeo's oci: transport read), tagged "v1".
type testImage struct {
	img    v1.Image
	digest v1.Hash
	dir    string
	size   int64 // bytes of config and layers
}

func newImage(t *testing.T, layers int) *testImage {
	t.Helper()
	// OCI media types throughout: skopeo's oci: transport finds only OCI
	// manifests in a layout.
	img := regtest.RandomImage(t, layers, 64<<10)
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "layout")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "v1"})); err != nil {
		t.Fatal(err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	size := m.Config.Size
	for _, l := range m.Layers {
		size += l.Size
	}
	return &testImage{img: img, digest: d, dir: dir, size: size}
}

// ociDigest reads the digest of the single image in an OCI layout.
func ociDigest(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	var idx struct {
		Manifests []struct {
			Digest string `json:"digest"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(b, &idx); err != nil || len(idx.Manifests) != 1 {
		t.Fatalf("index.json of %s: %v\n%s", dir, err, b)
	}
	return idx.Manifests[0].Digest
}
