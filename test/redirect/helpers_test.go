package redirect

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/clitool"
	"github.com/cairn-registry/cairn/internal/testutil/layertest"
	"github.com/cairn-registry/cairn/internal/testutil/objstore"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

func TestMain(m *testing.M) { os.Exit(cairnproc.Main(m)) }

// store is an object store section for config.yml and where its signed URLs
// must point.
type store struct {
	section string // YAML below "storage:"
	host    string // host:port of the store's URLs
}

func s3Store(t *testing.T) store {
	p, section := objstore.S3Bucket(t, "cairn-redirect-")
	return store{section: section, host: hostOf(t, p.RegionEndpoint)}
}

// gcsStore creates a bucket on fake-gcs-server. With sign, the driver is
// given a service account key file (a fresh RSA key, whose tokens come from
// tokenServer; fake-gcs-server checks neither tokens nor URL signatures), so
// it can sign URLs; without, it has no key and serves blobs itself.
func gcsStore(t *testing.T, sign bool) store {
	p, section := objstore.GCSBucket(t, "cairn-redirect-")
	if sign {
		section += fmt.Sprintf("    keyfile: %s\n", serviceAccountKey(t))
	}
	return store{section: section, host: hostOf(t, p.Endpoint)}
}

// tokenServer is an OAuth token endpoint that grants any JWT assertion, for
// the service account key: the client trades its signed JWT for an access
// token there, and fake-gcs-server has no such endpoint (nor checks tokens).
func tokenServer(t *testing.T) string {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.ParseForm() != nil || r.PostForm.Get("assertion") == "" {
			http.Error(w, "want a JWT bearer grant", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"access_token":"cairn-test","token_type":"Bearer","expires_in":3600}`)
	}))
	t.Cleanup(ts.Close)
	return ts.URL + "/token"
}

// serviceAccountKey writes a service account key file of a new RSA key.
func serviceAccountKey(t *testing.T) string {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	key := map[string]string{
		"type":           "service_account",
		"project_id":     "cairn-redirect",
		"private_key_id": "cairn-test-key",
		"private_key":    string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email":   "cairn@cairn-redirect.iam.gserviceaccount.com",
		"client_id":      "1",
		"token_uri":      tokenServer(t),
	}
	b, err := json.Marshal(key)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "key.json")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func azureStore(t *testing.T) store {
	p, section := objstore.AzureContainer(t, "cairn-redirect-")
	return store{section: section, host: hostOf(t, p.ServiceURL)}
}

func hostOf(t *testing.T, rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// server is a running cairn with its debug listener.
type server struct {
	*cairnproc.Server
	debug string // http://host:port of the debug listener
}

// start serves yml (a whole config.yml without http.debug) with a debug
// listener added.
func start(t *testing.T, yml string) *server {
	t.Helper()
	debug := cairnproc.FreeAddr(t)
	yml += fmt.Sprintf("http:\n  debug:\n    addr: %s\n", debug)
	srv := cairnproc.StartArgs(t, cairnproc.Binary(t), "--config", cairnproc.WriteConfig(t, yml))
	return &server{Server: srv, debug: "http://" + debug}
}

// counter returns the value of the metric line that starts with series
// (name and labels as exported), 0 when absent.
func (s *server) counter(t *testing.T, series string) float64 {
	t.Helper()
	return regtest.Metric(t, strings.TrimPrefix(s.debug, "http://"), series)
}

const redirectsOK = `cairn_blob_redirects_total{result="ok"}`

// image is a pushed test image: its layers' bytes by digest.
type image struct {
	img    v1.Image
	digest digest.Digest
	layers map[digest.Digest][]byte // layer and config blobs
	order  []digest.Digest          // layers, manifest order
	// diffIDs are the digests of the uncompressed layers.
	diffIDs []digest.Digest
}

// newImage builds an OCI image of n layers of tars of random files,
// compressed by Go's compress/gzip (which dedup reproduces), distinct per
// seed.
func newImage(t *testing.T, seed uint64, n int) *image {
	t.Helper()
	im := &image{layers: map[digest.Digest][]byte{}}
	var ls []v1.Layer
	for i := range n {
		s := seed*100 + uint64(i)*2 + 1 // odd seeds: random bytes
		raw := layertest.Tar(t,
			layertest.File{Name: fmt.Sprintf("l%d/a", i), Body: layertest.Body(s, 200<<10)},
			layertest.File{Name: fmt.Sprintf("l%d/b", i), Body: layertest.Body(s+1000, 150<<10+i)})
		gz := layertest.Gzip(t, raw, gzip.DefaultCompression)
		im.diffIDs = append(im.diffIDs, digest.FromBytes(raw))
		d := digest.FromBytes(gz)
		im.layers[d] = gz
		im.order = append(im.order, d)
		// A tarball layer keeps gz as its compressed bytes and hashes the
		// tar for its diff ID (a static layer would give the blob digest).
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(gz)), nil },
			tarball.WithMediaType(types.OCILayer))
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	img, err := regtest.OCIImage(ls...)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	im.layers[digest.FromBytes(cfg)] = cfg
	h, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	im.img, im.digest = img, digest.Digest(h.String())
	return im
}

// push writes the image to repo:tag on srv, with opts (credentials).
func (im *image) push(t *testing.T, addr, ref string, opts ...remote.Option) {
	t.Helper()
	if err := remote.Write(regtest.Ref(t, addr, ref), im.img, opts...); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
}

// noFollow is a client that returns redirects instead of following them.
var noFollow = &http.Client{
	Timeout:       time.Minute,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// do sends a request with headers given as key, value pairs.
func do(t *testing.T, hc *http.Client, method, u string, hdr ...string) regtest.Response {
	t.Helper()
	return regtest.Do(t, hc, method, u, nil, hdr...)
}

// checkRedirected GETs blob d of repo without following and checks the 307
// and its Location (on host), then GETs the Location with no credentials
// and checks the bytes. It returns the Location.
func checkRedirected(t *testing.T, base, repo string, d digest.Digest, want []byte, host string, hdr ...string) string {
	t.Helper()
	resp := do(t, noFollow, http.MethodGet, base+"/v2/"+repo+"/blobs/"+d.String(), hdr...)
	if resp.Status != http.StatusTemporaryRedirect {
		t.Fatalf("GET blob %s: status %d, want 307: %s", d, resp.Status, resp.Body)
	}
	loc := resp.Header.Get("Location")
	u, err := url.Parse(loc)
	if err != nil || u.Host != host {
		t.Fatalf("GET blob %s: Location %q, want a URL on %s", d, loc, host)
	}
	if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("GET blob %s: redirect Cache-Control %q, want no-store", d, cc)
	}
	got := do(t, http.DefaultClient, http.MethodGet, loc)
	if got.Status != http.StatusOK || !bytes.Equal(got.Body, want) {
		t.Fatalf("GET %s: status %d, %d bytes (digest %s), want 200 and blob %s", loc, got.Status, len(got.Body), digest.FromBytes(got.Body), d)
	}
	return loc
}

// checkNoRedirects pushes im to srv as repo:v1 and checks that cairn,
// redirecting nothing, serves every blob itself and clients pull through it.
func checkNoRedirects(t *testing.T, srv *server, im *image) {
	t.Helper()
	im.push(t, srv.Addr, repo+":v1")
	for d, b := range im.layers {
		checkServed(t, srv.URL, repo, d, b)
	}
	pullWithClients(t, srv.Addr, repo, "v1", im)
	if n := srv.counter(t, redirectsOK); n != 0 {
		t.Errorf("%s = %v, want 0", redirectsOK, n)
	}
}

// checkServed GETs blob d of repo without following and checks that cairn
// answers it with the bytes itself.
func checkServed(t *testing.T, base, repo string, d digest.Digest, want []byte, hdr ...string) {
	t.Helper()
	resp := do(t, noFollow, http.MethodGet, base+"/v2/"+repo+"/blobs/"+d.String(), hdr...)
	if resp.Status != http.StatusOK || !bytes.Equal(resp.Body, want) {
		t.Fatalf("GET blob %s: status %d, %d bytes, Location %q; want 200 with the blob from cairn",
			d, resp.Status, len(resp.Body), resp.Header.Get("Location"))
	}
}

// checkHead checks that HEAD of blob d answers 200 from cairn with its
// size and digest, never a redirect.
func checkHead(t *testing.T, base, repo string, d digest.Digest, size int) {
	t.Helper()
	resp := do(t, noFollow, http.MethodHead, base+"/v2/"+repo+"/blobs/"+d.String())
	if resp.Status != http.StatusOK || resp.Header.Get("Location") != "" {
		t.Fatalf("HEAD blob %s: status %d, Location %q; want 200 from cairn", d, resp.Status, resp.Header.Get("Location"))
	}
	if cl := resp.Header.Get("Content-Length"); cl != strconv.Itoa(size) {
		t.Errorf("HEAD blob %s: Content-Length %s, want %d", d, cl, size)
	}
	if dg := resp.Header.Get("Docker-Content-Digest"); dg != d.String() {
		t.Errorf("HEAD blob %s: Docker-Content-Digest %s", d, dg)
	}
}

// pullWithClients pulls repo:tag with crane, skopeo and podman (each
// skipped when not installed) and checks what each got is im, byte for
// byte.
func pullWithClients(t *testing.T, addr, repo, tag string, im *image) {
	t.Helper()
	ref := addr + "/" + repo + ":" + tag
	t.Run("crane", func(t *testing.T) {
		crane := clitool.Path(t, "crane")
		out := filepath.Join(t.TempDir(), "pulled")
		clitool.NewSession(t).Run(t, crane, "pull", "--insecure", "--format=oci", ref, out)
		checkLayout(t, out, im)
	})
	t.Run("skopeo", func(t *testing.T) {
		skopeo := clitool.Path(t, "skopeo")
		out := filepath.Join(t.TempDir(), "pulled")
		clitool.NewSession(t).Run(t, skopeo, "--insecure-policy", "copy", "--preserve-digests", "--src-tls-verify=false",
			"docker://"+ref, "oci:"+out+":"+tag)
		checkLayout(t, out, im)
	})
	t.Run("podman", func(t *testing.T) {
		podman := clitool.Path(t, "podman")
		// podman refuses a runroot path over 50 bytes; test names are long.
		state, err := os.MkdirTemp("", "cairn-pm-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(state) }) // after podman's rmi below
		global := []string{
			"--root", filepath.Join(state, "root"), "--runroot", filepath.Join(state, "runroot"),
			"--tmpdir", filepath.Join(state, "tmp"), "--storage-driver", "vfs",
			"--events-backend", "none", "--cgroup-manager", "cgroupfs",
		}
		e := clitool.NewSession(t)
		t.Cleanup(func() { _, _, _ = e.Exec(podman, append(slices.Clone(global), "rmi", "--all", "--force")...) })
		// podman checks every blob against its manifest digest as it pulls
		// (containers/image refuses a mismatch), and its layers by diff ID.
		e.Run(t, podman, append(slices.Clone(global), "pull", "-q", "--tls-verify=false", ref)...)
		raw := e.Run(t, podman, append(slices.Clone(global), "image", "inspect", ref)...)
		var info []struct {
			Digest digest.Digest
			RootFS struct{ Layers []digest.Digest }
		}
		if err := json.Unmarshal(raw, &info); err != nil || len(info) != 1 {
			t.Fatalf("podman image inspect: %v\n%s", err, raw)
		}
		if info[0].Digest != im.digest {
			t.Errorf("podman pulled %s, want %s", info[0].Digest, im.digest)
		}
		if !slices.Equal(info[0].RootFS.Layers, im.diffIDs) {
			t.Errorf("podman layers %v, want %v", info[0].RootFS.Layers, im.diffIDs)
		}
	})
}

// ociIndex is the part of index.json and manifests the checks read.
type ociIndex struct {
	Manifests []v1.Descriptor `json:"manifests"`
	Config    v1.Descriptor   `json:"config"`
	Layers    []v1.Descriptor `json:"layers"`
}

func readBlob(t *testing.T, dir string, d v1.Descriptor) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "blobs", d.Digest.Algorithm, d.Digest.Hex))
	if err != nil {
		t.Fatal(err)
	}
	if got := digest.FromBytes(b).String(); got != d.Digest.String() {
		t.Fatalf("layout blob %s hashes to %s", d.Digest, got)
	}
	return b
}

// layoutManifest returns the single manifest of the OCI layout in dir.
func layoutManifest(t *testing.T, dir string) (v1.Descriptor, ociIndex) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	var idx ociIndex
	if err := json.Unmarshal(raw, &idx); err != nil || len(idx.Manifests) != 1 {
		t.Fatalf("index.json: %v\n%s", err, raw)
	}
	var m ociIndex
	if err := json.Unmarshal(readBlob(t, dir, idx.Manifests[0]), &m); err != nil {
		t.Fatal(err)
	}
	return idx.Manifests[0], m
}

// checkLayout checks that the OCI layout in dir holds exactly im: its
// manifest digest, config and layers byte for byte.
func checkLayout(t *testing.T, dir string, im *image) {
	t.Helper()
	desc, _ := layoutManifest(t, dir)
	if desc.Digest.String() != im.digest.String() {
		t.Errorf("pulled manifest %s, want %s", desc.Digest, im.digest)
	}
	checkLayoutLayers(t, dir, im)
}

// checkLayoutLayers checks the config and layers of the layout's manifest
// against im, byte for byte.
func checkLayoutLayers(t *testing.T, dir string, im *image) {
	t.Helper()
	_, m := layoutManifest(t, dir)
	if got := digest.Digest(m.Config.Digest.String()); !bytes.Equal(readBlob(t, dir, m.Config), im.layers[got]) {
		t.Errorf("config %s is not the pushed one", got)
	}
	var got []digest.Digest
	for _, l := range m.Layers {
		b := readBlob(t, dir, l)
		d := digest.Digest(l.Digest.String())
		if !bytes.Equal(b, im.layers[d]) {
			t.Errorf("layer %s is not a pushed layer", d)
		}
		got = append(got, d)
	}
	if !slices.Equal(got, im.order) {
		t.Errorf("layers %v, want %v", got, im.order)
	}
}

// basicAuth is the remote option that sends user and password.
func basicAuth(user, pass string) remote.Option {
	return remote.WithAuth(&authn.Basic{Username: user, Password: pass})
}
