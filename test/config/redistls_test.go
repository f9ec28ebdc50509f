package config

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/redis/go-redis/v9"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

// pki writes a CA and a certificate it signs for each of names (server
// certificates name 127.0.0.1), and returns the CA's path and each
// certificate's and key's paths.
func pki(t *testing.T, dir string, names ...string) (ca string, certs map[string][2]string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ca = write("ca.pem", "CERTIFICATE", caDER)
	certs = map[string][2]string{}
	for i, n := range names {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(int64(i + 2)), Subject: pkix.Name{CommonName: n},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, _ := x509.MarshalECPrivateKey(key)
		certs[n] = [2]string{write(n+".pem", "CERTIFICATE", der), write(n+".key", "EC PRIVATE KEY", kder)}
	}
	return ca, certs
}

// The redis section's tls keys: cairn reaches a Redis that speaks only TLS
// and wants client certificates with redis.tls.{certificate,key,rootcas},
// and cannot without its client certificate.
func TestRedisTLS(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("redis-server is not installed")
		}
		t.Skip("redis-server is not installed")
	}
	dir := t.TempDir()
	ca, certs := pki(t, dir, "server", "client")
	addr := cairnproc.FreeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	srv := exec.Command(bin, "--port", "0", "--tls-port", port, "--bind", "127.0.0.1",
		"--tls-cert-file", certs["server"][0], "--tls-key-file", certs["server"][1],
		"--tls-ca-cert-file", ca, "--tls-auth-clients", "yes",
		"--save", "", "--appendonly", "no", "--dir", dir)
	var srvLog strings.Builder
	srv.Stdout, srv.Stderr = &srvLog, &srvLog
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { srv.Wait(); close(done) }()
	t.Cleanup(func() {
		srv.Process.Signal(syscall.SIGTERM)
		<-done
	})

	pool := x509.NewCertPool()
	caPEM, _ := os.ReadFile(ca)
	pool.AppendCertsFromPEM(caPEM)
	clientCert, err := tls.LoadX509KeyPair(certs["client"][0], certs["client"][1])
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(&redis.Options{Addr: addr, TLSConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{clientCert}}})
	defer rc.Close()
	eventually(t, "redis over TLS", func() (bool, string) {
		err := rc.Ping(context.Background()).Err()
		return err == nil, fmt.Sprint(err, " ", srvLog.String())
	})

	base := fmt.Sprintf(`redis:
  addrs: [%s]
  tls:
    rootcas: [%s]
%%s
storage:
  cache:
    blobdescriptor: redis
`, addr, ca)
	// Without its client certificate cairn cannot start, and says why.
	out, err := exec.Command(cairnproc.Binary(t), "serve", "--addr", cairnproc.FreeAddr(t), "--root", t.TempDir(),
		"--config", cairnproc.WriteConfig(t, fmt.Sprintf(base, ""))).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "storage.cache.blobdescriptor: redis at "+addr) {
		t.Fatalf("without a client certificate: %v, %q", err, out)
	}

	s := serve(t, fmt.Sprintf(base, "    certificate: "+certs["client"][0]+"\n    key: "+certs["client"][1]))
	img := regtest.RandomImage(t, 1, 512)
	if err := remote.Write(regtest.Ref(t, s.Addr, "tls/app:v1"), img); err != nil {
		t.Fatal(err)
	}
	layers, _ := img.Layers()
	ld, _ := layers[0].Digest()
	size, _ := layers[0].Size()
	if r := regtest.Do(t, hc, http.MethodHead, s.URL+"/v2/tls/app/blobs/"+ld.String(), nil); r.Status != http.StatusOK {
		t.Fatal(r)
	}
	if v, err := rc.Get(context.Background(), "cairn:blobdesc:tls/app@"+ld.String()).Result(); err != nil || v != strconv.FormatInt(size, 10) {
		t.Errorf("descriptor in the TLS redis: %q, %v", v, err)
	}
}
