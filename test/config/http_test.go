package config

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

// http.headers are on every response: the base, errors, unknown paths,
// blob and manifest writes and reads, as distribution sends them.
func TestHeadersOnEveryResponse(t *testing.T) {
	s := serve(t, `http:
  headers:
    X-Content-Type-Options: [nosniff]
    Strict-Transport-Security: [max-age=31536000]
    X-Two: [one, two]
`)
	api := s.URL + "/v2/"
	put := pushImage(t, api, "hdr/app", "v1")
	_, blobPut := pushBlob(t, api, "hdr/app", []byte("another blob"))
	responses := []regtest.Response{
		regtest.Do(t, hc, http.MethodGet, api, nil),
		regtest.Do(t, hc, http.MethodGet, s.URL+"/not/an/endpoint", nil),
		regtest.Do(t, hc, http.MethodGet, api+"hdr/app/manifests/missing", nil),
		regtest.Do(t, hc, http.MethodGet, api+"hdr/app/manifests/v1", nil, "Accept", regtest.ManifestAccept),
		regtest.Do(t, hc, http.MethodHead, api+"hdr/app/manifests/v1", nil, "Accept", regtest.ManifestAccept),
		regtest.Do(t, hc, http.MethodGet, api+"hdr/app/tags/list", nil),
		regtest.Do(t, hc, http.MethodGet, api+"_catalog", nil),
		put, blobPut,
	}
	for _, r := range responses {
		if got := r.Header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("%v: X-Content-Type-Options %q", r, got)
		}
		if got := r.Header.Get("Strict-Transport-Security"); got != "max-age=31536000" {
			t.Errorf("%v: Strict-Transport-Security %q", r, got)
		}
		if got := r.Header.Values("X-Two"); len(got) != 2 || got[0] != "one" || got[1] != "two" {
			t.Errorf("%v: X-Two %q, want both values", r, got)
		}
	}
	// The header comes with the error status, not instead of it.
	if r := responses[2]; r.Status != http.StatusNotFound || r.ErrorCode() != "MANIFEST_UNKNOWN" {
		t.Errorf("%v", r)
	}
}

// With http.prefix the API lives under the prefix only, Locations lead
// back under it, and a push and pull work there.
func TestPrefixRoutes(t *testing.T) {
	cfg := `http:
  prefix: /my/nested/registry/
`
	s := startAt(t, cfg, "/my/nested/registry/v2/")
	api := s.URL + "/my/nested/registry/v2/"
	put := pushImage(t, api, "pre/app", "v1")
	if loc := put.Header.Get("Location"); !strings.HasPrefix(loc, "/my/nested/registry/v2/pre/app/manifests/sha256:") {
		t.Errorf("manifest Location %q is not under the prefix", loc)
	}
	r := regtest.Do(t, hc, http.MethodGet, api+"pre/app/manifests/v1", nil, "Accept", regtest.ManifestAccept)
	if r.Status != http.StatusOK {
		t.Fatalf("%v", r)
	}
	if r := regtest.Do(t, hc, http.MethodGet, api+"pre/app/tags/list", nil); r.Status != http.StatusOK || !strings.Contains(string(r.Body), `"v1"`) {
		t.Errorf("%v", r)
	}
	// The same paths without the prefix name nothing.
	for _, p := range []string{"/v2/", "/v2/pre/app/manifests/v1", "/my/v2/"} {
		if r := regtest.Do(t, hc, http.MethodGet, s.URL+p, nil); r.Status != http.StatusNotFound {
			t.Errorf("%v: want 404 outside the prefix", r)
		}
	}
	// A page's Link stays under the prefix.
	pushImage(t, api, "pre/app", "v2")
	r = regtest.Do(t, hc, http.MethodGet, api+"pre/app/tags/list?n=1", nil)
	if link := r.Header.Get("Link"); !strings.HasPrefix(link, "</my/nested/registry/v2/pre/app/tags/list?") {
		t.Errorf("Link %q is not under the prefix", link)
	}
}

// Location headers: paths by default; absolute URLs from the request
// (honouring X-Forwarded-*) with http.relativeurls: false, distribution's
// default; the configured host with http.host.
func TestLocationURLs(t *testing.T) {
	def := serve(t, "")
	put := pushImage(t, def.URL+"/v2/", "loc/app", "v1")
	if loc := put.Header.Get("Location"); !strings.HasPrefix(loc, "/v2/loc/app/manifests/sha256:") {
		t.Errorf("default Location %q, want a path", loc)
	}

	abs := serve(t, "http:\n  relativeurls: false\n")
	r := regtest.Do(t, hc, http.MethodPost, abs.URL+"/v2/loc/app/blobs/uploads/", nil)
	if loc := r.Header.Get("Location"); !strings.HasPrefix(loc, abs.URL+"/v2/loc/app/blobs/uploads/") {
		t.Errorf("relativeurls: false Location %q, want an absolute URL from the request", loc)
	}
	r = regtest.Do(t, hc, http.MethodPost, abs.URL+"/v2/loc/app/blobs/uploads/", nil,
		"X-Forwarded-Proto", "https", "X-Forwarded-Host", "registry.example, proxy.internal")
	if loc := r.Header.Get("Location"); !strings.HasPrefix(loc, "https://registry.example/v2/loc/app/blobs/uploads/") {
		t.Errorf("forwarded Location %q", loc)
	}
	r = regtest.Do(t, hc, http.MethodPost, abs.URL+"/v2/loc/app/blobs/uploads/", nil,
		"Forwarded", `for=10.0.0.1;proto=https;host="reg.example:8443"`)
	if loc := r.Header.Get("Location"); !strings.HasPrefix(loc, "https://reg.example:8443/v2/loc/app/blobs/uploads/") {
		t.Errorf("Forwarded Location %q", loc)
	}

	host := serve(t, "http:\n  host: https://myregistryaddress.org:5000\n  relativeurls: true\n")
	r = regtest.Do(t, hc, http.MethodPost, host.URL+"/v2/loc/app/blobs/uploads/", nil, "X-Forwarded-Host", "other.example")
	if loc := r.Header.Get("Location"); !strings.HasPrefix(loc, "https://myregistryaddress.org:5000/v2/loc/app/blobs/uploads/") {
		t.Errorf("http.host Location %q", loc)
	}
}

// log.formatter json and logstash write one JSON object per line, with
// log.fields on each; log.accesslog.disabled drops the request lines.
func TestLogFormats(t *testing.T) {
	for _, tc := range []struct {
		formatter, msgKey, timeKey string
	}{{"json", "msg", "time"}, {"logstash", "message", "@timestamp"}} {
		t.Run(tc.formatter, func(t *testing.T) {
			s := serve(t, `log:
  formatter: `+tc.formatter+`
  fields:
    service: registry
    environment: staging
`)
			regtest.Do(t, hc, http.MethodGet, s.URL+"/v2/_catalog", nil)
			s.Stop() // every line is written once it has exited
			requests := 0
			sc := bufio.NewScanner(strings.NewReader(s.Logs()))
			for sc.Scan() {
				var line map[string]any
				if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
					t.Fatalf("log line is not JSON: %q", sc.Text())
				}
				if line["service"] != "registry" || line["environment"] != "staging" {
					t.Errorf("line without log.fields: %q", sc.Text())
				}
				if line[tc.msgKey] == nil || line[tc.timeKey] == nil {
					t.Errorf("line without %s and %s: %q", tc.msgKey, tc.timeKey, sc.Text())
				}
				if tc.formatter == "logstash" && line["@version"] != "1" {
					t.Errorf("logstash line without @version: %q", sc.Text())
				}
				if line[tc.msgKey] == "request" && line["path"] == "/v2/_catalog" {
					requests++
				}
			}
			if requests != 1 {
				t.Errorf("%d request lines for /v2/_catalog, want 1; log:\n%s", requests, s.Logs())
			}
		})
	}
	t.Run("accesslog disabled", func(t *testing.T) {
		s := serve(t, "log:\n  accesslog:\n    disabled: true\n")
		regtest.Do(t, hc, http.MethodGet, s.URL+"/v2/_catalog", nil)
		s.Stop()
		if lines := logLines(s, "msg=request"); len(lines) > 0 {
			t.Errorf("request lines with the access log disabled: %q", lines)
		}
		if lines := logLines(s, "msg=stopped"); len(lines) != 1 {
			t.Errorf("other lines are still logged: %q", s.Logs())
		}
	})
	t.Run("loglevel alias", func(t *testing.T) {
		s := serve(t, "loglevel: error\n")
		regtest.Do(t, hc, http.MethodGet, s.URL+"/v2/_catalog", nil)
		s.Stop()
		if lines := logLines(s, "level=INFO"); len(lines) > 0 {
			t.Errorf("info lines with loglevel: error: %q", lines)
		}
	})
}

// auth.silly lets in a request with any Authorization header and
// challenges one without.
func TestSillyAuth(t *testing.T) {
	// The server answers 401 at /v2/ until then, which counts as up.
	s := serve(t, "auth:\n  silly:\n    realm: silly-realm\n    service: silly-service\n")
	r := regtest.Do(t, hc, http.MethodGet, s.URL+"/v2/sil/app/tags/list", nil)
	if r.Status != http.StatusUnauthorized {
		t.Fatalf("%v: want 401", r)
	}
	want := `Bearer realm="silly-realm",service="silly-service",scope="repository:sil/app:pull"`
	if got := r.Header.Get("WWW-Authenticate"); got != want {
		t.Errorf("challenge %q, want %q", got, want)
	}
	pushAPI := s.URL + "/v2/"
	authed := &http.Client{Transport: headerTransport{"Authorization", "Bearer anything"}}
	old := hc
	hc = authed
	defer func() { hc = old }()
	pushImage(t, pushAPI, "sil/app", "v1")
	if r := regtest.Do(t, hc, http.MethodGet, pushAPI+"sil/app/tags/list", nil); r.Status != http.StatusOK {
		t.Errorf("%v", r)
	}
}

type headerTransport struct{ name, value string }

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(h.name, h.value)
	return http.DefaultTransport.RoundTrip(r)
}

// catalog.maxentries and tags.maxtags bound pages as distribution does.
func TestListingLimits(t *testing.T) {
	s := serve(t, "catalog:\n  maxentries: 2\ntags:\n  maxtags: 2\n")
	api := s.URL + "/v2/"
	for _, repo := range []string{"lim/a", "lim/b", "lim/c"} {
		pushImage(t, api, repo, "v1")
	}
	pushImage(t, api, "lim/a", "v2")
	pushImage(t, api, "lim/a", "v3")

	r := regtest.Do(t, hc, http.MethodGet, api+"_catalog?n=3", nil)
	if r.Status != http.StatusBadRequest || r.ErrorCode() != "PAGINATION_NUMBER_INVALID" {
		t.Errorf("%v: want 400 PAGINATION_NUMBER_INVALID above maxentries", r)
	}
	r = regtest.Do(t, hc, http.MethodGet, api+"_catalog", nil)
	var cat struct{ Repositories []string }
	json.Unmarshal(r.Body, &cat)
	if r.Status != http.StatusOK || len(cat.Repositories) != 2 || r.Header.Get("Link") == "" {
		t.Errorf("%v: want a page of maxentries repositories with a Link", r)
	}
	r = regtest.Do(t, hc, http.MethodGet, api+"lim/a/tags/list?n=10", nil)
	var tags struct{ Tags []string }
	json.Unmarshal(r.Body, &tags)
	if r.Status != http.StatusOK || len(tags.Tags) != 2 || !strings.Contains(r.Header.Get("Link"), "n=2") {
		t.Errorf("%v (Link %q): want n clamped to maxtags with a Link", r, r.Header.Get("Link"))
	}
	r = regtest.Do(t, hc, http.MethodGet, api+"lim/a/tags/list", nil)
	json.Unmarshal(r.Body, &tags)
	if len(tags.Tags) != 3 {
		t.Errorf("%v: without n every tag", r)
	}
}

// validation.manifests.urls decides which layer URLs a push may name;
// validation.disabled turns the rule off.
func TestManifestURLRules(t *testing.T) {
	rules := `validation:
  manifests:
    urls:
      allow:
        - ^https?://([^/]+\.)*example\.com/
      deny:
        - ^https?://www\.example\.com/
`
	foreign := func(u string) map[string]any {
		return map[string]any{"mediaType": "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
			"digest": "sha256:" + strings.Repeat("ab", 32), "size": 10, "urls": []string{u}}
	}
	push := func(t *testing.T, api, u string) regtest.Response {
		cfg := []byte(`{"architecture":"amd64","os":"windows"}`)
		cd, _ := pushBlob(t, api, "url/app", cfg)
		m := imageManifest(cd, len(cfg), foreign(u))
		return regtest.Do(t, hc, http.MethodPut, api+"url/app/manifests/v1", m, "Content-Type", "application/vnd.oci.image.manifest.v1+json")
	}
	s := serve(t, rules)
	api := s.URL + "/v2/"
	if r := push(t, api, "https://layers.example.com/l.tgz"); r.Status != http.StatusCreated {
		t.Errorf("allowed URL: %v", r)
	}
	for _, u := range []string{"https://www.example.com/l.tgz", "https://elsewhere.org/l.tgz", "ftp://layers.example.com/l.tgz"} {
		if r := push(t, api, u); r.Status != http.StatusBadRequest || r.ErrorCode() != "MANIFEST_INVALID" {
			t.Errorf("%s: %v, want 400 MANIFEST_INVALID", u, r)
		}
	}
	off := serve(t, rules+"  disabled: true\n")
	if r := push(t, off.URL+"/v2/", "https://www.example.com/l.tgz"); r.Status != http.StatusCreated {
		t.Errorf("validation disabled: %v", r)
	}
}

// http.h2c.enabled serves HTTP/2 without TLS to a client that speaks it.
func TestH2C(t *testing.T) {
	s := serve(t, "http:\n  h2c:\n    enabled: true\n")
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	c := &http.Client{Transport: tr}
	resp, err := c.Get(s.URL + "/v2/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusOK {
		t.Errorf("GET /v2/ over h2c: %s %d", resp.Proto, resp.StatusCode)
	}
}

// policy.repository.classes limits the image manifests a push may store.
func TestPolicyClasses(t *testing.T) {
	s := serve(t, "policy:\n  repository:\n    classes: [plugin]\n")
	api := s.URL + "/v2/"
	cfg := []byte(`{"architecture":"amd64","os":"linux"}`)
	cd, _ := pushBlob(t, api, "pol/app", cfg)
	m := imageManifest(cd, len(cfg))
	r := regtest.Do(t, hc, http.MethodPut, api+"pol/app/manifests/v1", m, "Content-Type", "application/vnd.oci.image.manifest.v1+json")
	if r.Status != http.StatusForbidden || r.ErrorCode() != "DENIED" {
		t.Errorf("image manifest with classes [plugin]: %v, want 403 DENIED", r)
	}
	s2 := serve(t, "policy:\n  repository:\n    classes: [image]\n")
	cd, _ = pushBlob(t, s2.URL+"/v2/", "pol/app", cfg)
	r = regtest.Do(t, hc, http.MethodPut, s2.URL+"/v2/pol/app/manifests/v1", imageManifest(cd, len(cfg)), "Content-Type", "application/vnd.oci.image.manifest.v1+json")
	if r.Status != http.StatusCreated {
		t.Errorf("image manifest with classes [image]: %v", r)
	}
}

// http.net: unix serves the API on a Unix socket at http.addr.
func TestUnixSocket(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "cairn.sock")
	cfg := cairnproc.WriteConfig(t, "http:\n  net: unix\n  addr: "+sock+"\n")
	_, alive := serveRaw(t, "--root", filepath.Join(dir, "root"), "--config", cfg)
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	eventually(t, "an answer on the socket", func() (bool, string) {
		alive()
		resp, err := c.Get("http://cairn/v2/")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
}

// storage.tag.concurrencylimit bounds the tag reads of a manifest delete,
// which still removes every tag naming the manifest and no other.
func TestTagConcurrencyLimit(t *testing.T) {
	s := serve(t, "storage:\n  tag:\n    concurrencylimit: 2\n")
	api := s.URL + "/v2/"
	put := pushImage(t, api, "tagc/app", "keep")
	other := put.Header.Get("Docker-Content-Digest")
	put = pushImage(t, api, "tagc/app", "t0")
	d := put.Header.Get("Docker-Content-Digest")
	m := regtest.Do(t, hc, http.MethodGet, api+"tagc/app/manifests/t0", nil, "Accept", regtest.ManifestAccept)
	for i := 1; i < 20; i++ {
		r := regtest.Do(t, hc, http.MethodPut, api+"tagc/app/manifests/t"+strconv.Itoa(i), m.Body, "Content-Type", "application/vnd.oci.image.manifest.v1+json")
		if r.Status != http.StatusCreated {
			t.Fatalf("%v", r)
		}
	}
	if d == other {
		t.Fatal("the two images are one")
	}
	if r := regtest.Do(t, hc, http.MethodDelete, api+"tagc/app/manifests/"+d, nil); r.Status != http.StatusAccepted {
		t.Fatalf("%v", r)
	}
	r := regtest.Do(t, hc, http.MethodGet, api+"tagc/app/tags/list", nil)
	var tags struct{ Tags []string }
	json.Unmarshal(r.Body, &tags)
	if len(tags.Tags) != 1 || tags.Tags[0] != "keep" {
		t.Errorf("tags after deleting the manifest of t0..t19: %q, want [keep]", tags.Tags)
	}
}

// http.draintimeout bounds how long shutdown waits for requests in flight:
// an upload whose body never ends does not keep the process alive.
func TestDrainTimeout(t *testing.T) {
	debug := cairnproc.FreeAddr(t)
	s := serve(t, "http:\n  draintimeout: 1s\n  debug:\n    addr: "+debug+"\n")
	r := regtest.Do(t, hc, http.MethodPost, s.URL+"/v2/drain/app/blobs/uploads/", nil)
	if r.Status != http.StatusAccepted {
		t.Fatal(r)
	}
	pr, pw := io.Pipe()
	defer pw.Close()
	req, _ := http.NewRequest(http.MethodPatch, regtest.Resolve(t, s.URL, r.Header.Get("Location")), pr)
	req.Header.Set("Content-Type", "application/octet-stream")
	sent := make(chan struct{})
	go func() {
		pw.Write([]byte("the first bytes of a body that never ends"))
		close(sent)
	}()
	go func() {
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	<-sent
	eventually(t, "the upload in flight", func() (bool, string) {
		n := metric(t, debug, "cairn_uploads_in_progress")
		return n == 1, fmt.Sprint(n, " uploads in progress")
	})
	if err := s.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The hang guard is far above the drain timeout; cairn's default
	// (60s) would outlast it.
	if !s.Wait(30 * time.Second) {
		t.Fatal("cairn still runs 30s after SIGTERM with draintimeout: 1s")
	}
	if !strings.Contains(s.Logs(), "timeout=1s") {
		t.Errorf("the shutdown did not use the drain timeout:\n%s", s.Logs())
	}
}
