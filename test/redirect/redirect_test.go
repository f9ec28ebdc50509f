// Package redirect tests blob redirects: a real `cairn serve` on MinIO,
// fake-gcs-server and Azurite answers blob GETs with a 307 to a presigned
// URL of the store, and real clients (crane, skopeo, podman) pull through
// them byte for byte; HEAD, deduplicated layers, a store that cannot sign
// and storage.redirect.disable are served by cairn; an unauthenticated GET
// is refused before any redirect; the redirect and cloudfront storage
// middlewares choose the URL.
package redirect

import (
	"bytes"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/testutil/clitool"
	"github.com/cairn-registry/cairn/internal/testutil/drivertest"
	"github.com/cairn-registry/cairn/internal/testutil/htpasswdtest"
	"github.com/cairn-registry/cairn/internal/testutil/objstore"
	"github.com/cairn-registry/cairn/internal/testutil/poll"
	"github.com/cairn-registry/cairn/internal/testutil/testenv"
)

const repo = "redirect/img"

// checkStoreRedirects pushes an image to srv, on store st, and checks that
// every blob GET is redirected to st and pulls byte-exact from there, that
// HEAD and Range behave, and that clients pull through the redirects.
func checkStoreRedirects(t *testing.T, srv *server, st store) {
	im := newImage(t, 1, 3)
	im.push(t, srv.Addr, repo+":v1")
	before := srv.counter(t, redirectsOK)
	for d, b := range im.layers {
		checkRedirected(t, srv.URL, repo, d, b, st.host)
		checkHead(t, srv.URL, repo, d, len(b))
	}
	if got := srv.counter(t, redirectsOK) - before; got != float64(len(im.layers)) {
		t.Errorf("%s counted %v redirects for %d GETs", redirectsOK, got, len(im.layers))
	}

	// A Range travels with the client to the store, which honours it.
	d := im.order[1]
	resp := do(t, http.DefaultClient, http.MethodGet, srv.URL+"/v2/"+repo+"/blobs/"+d.String(), "Range", "bytes=100-1123")
	if resp.Status != http.StatusPartialContent || !bytes.Equal(resp.Body, im.layers[d][100:1124]) {
		t.Errorf("GET blob with Range through the redirect: status %d, %d bytes; want 206 and bytes 100-1123", resp.Status, len(resp.Body))
	}
	// A conditional GET is answered by cairn: the store's ETag is not the digest.
	resp = do(t, noFollow, http.MethodGet, srv.URL+"/v2/"+repo+"/blobs/"+d.String(), "If-None-Match", `"`+d.String()+`"`)
	if resp.Status != http.StatusNotModified {
		t.Errorf("GET blob If-None-Match its digest: status %d, want 304", resp.Status)
	}

	before = srv.counter(t, redirectsOK)
	pullWithClients(t, srv.Addr, repo, "v1", im)
	if srv.counter(t, redirectsOK) == before {
		t.Errorf("the clients' pulls made no redirect")
	}
}

func TestS3(t *testing.T) {
	t.Parallel()
	st := s3Store(t)
	srv := start(t, "version: 0.1\nstorage:\n"+st.section)
	checkStoreRedirects(t, srv, st)
	// A blob is handed out only where it is linked: another repository
	// gets BLOB_UNKNOWN, not a URL.
	im := newImage(t, 1, 3)
	resp := do(t, noFollow, http.MethodGet, srv.URL+"/v2/redirect/other/blobs/"+im.order[0].String())
	if resp.Status != http.StatusNotFound || resp.Header.Get("Location") != "" || resp.ErrorCode() != "BLOB_UNKNOWN" {
		t.Errorf("GET of a blob not linked in the repository: status %d, Location %q, %s; want 404 BLOB_UNKNOWN",
			resp.Status, resp.Header.Get("Location"), resp.Body)
	}
}

func TestGCS(t *testing.T) {
	t.Parallel()
	st := gcsStore(t, true)
	srv := start(t, "version: 0.1\nstorage:\n"+st.section)
	checkStoreRedirects(t, srv, st)
}

func TestAzure(t *testing.T) {
	t.Parallel()
	st := azureStore(t)
	srv := start(t, "version: 0.1\nstorage:\n"+st.section)
	checkStoreRedirects(t, srv, st)
}

// TestGCSWithoutKey: with no service account key there is nothing to sign
// with (Application Default Credentials would need the IAM API per URL), so
// cairn serves every blob, and clients pull as before.
func TestGCSWithoutKey(t *testing.T) {
	t.Parallel()
	st := gcsStore(t, false)
	srv := start(t, "version: 0.1\nstorage:\n"+st.section)
	if logs, ok := srv.LogsWith("blob redirects off"); !ok {
		t.Errorf("start-up log does not say redirects are off:\n%s", logs)
	}
	checkNoRedirects(t, srv, newImage(t, 2, 2))
}

func TestDisabled(t *testing.T) {
	t.Parallel()
	st := s3Store(t)
	srv := start(t, "version: 0.1\nstorage:\n"+st.section+"  redirect:\n    disable: true\n")
	checkNoRedirects(t, srv, newImage(t, 3, 2))
}

// TestAuth: authorization comes before the redirect, so an anonymous GET of
// a blob gets 401 and no URL; with credentials it is redirected.
func TestAuth(t *testing.T) {
	t.Parallel()
	st := s3Store(t)
	srv := start(t, "version: 0.1\nstorage:\n"+st.section+
		"auth:\n  htpasswd:\n    realm: cairn\n    path: "+htpasswdtest.File(t, bcrypt.MinCost, "alice", "secret")+"\n")
	im := newImage(t, 4, 1)
	im.push(t, srv.Addr, repo+":v1", basicAuth("alice", "secret"))
	d := im.order[0]
	u := srv.URL + "/v2/" + repo + "/blobs/" + d.String()
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		resp := do(t, noFollow, method, u)
		if resp.Status != http.StatusUnauthorized || resp.Header.Get("Location") != "" {
			t.Errorf("%s blob without credentials: status %d, Location %q; want 401 and no URL",
				method, resp.Status, resp.Header.Get("Location"))
		}
	}
	resp := do(t, noFollow, http.MethodGet, u, "Authorization", "Basic YWxpY2U6d3Jvbmc=") // alice:wrong
	if resp.Status != http.StatusUnauthorized || resp.Header.Get("Location") != "" {
		t.Errorf("GET blob with a wrong password: status %d, Location %q; want 401", resp.Status, resp.Header.Get("Location"))
	}
	checkRedirected(t, srv.URL, repo, d, im.layers[d], st.host, "Authorization", "Basic YWxpY2U6c2VjcmV0") // alice:secret
	if n := srv.counter(t, redirectsOK); n != 1 {
		t.Errorf("%s = %v, want 1 (only the authorized GET)", redirectsOK, n)
	}
	t.Run("skopeo", func(t *testing.T) {
		skopeo := clitool.Path(t, "skopeo")
		out := filepath.Join(t.TempDir(), "pulled")
		clitool.NewSession(t).Run(t, skopeo, "--insecure-policy", "copy", "--src-creds", "alice:secret", "--src-tls-verify=false",
			"docker://"+srv.Addr+"/"+repo+":v1", "oci:"+out+":v1")
		checkLayout(t, out, im)
	})
	t.Run("crane", func(t *testing.T) {
		crane := clitool.Path(t, "crane")
		e := clitool.NewSession(t)
		e.Run(t, crane, "auth", "login", "--insecure", srv.Addr, "-u", "alice", "-p", "secret")
		out := filepath.Join(t.TempDir(), "pulled")
		e.Run(t, crane, "pull", "--insecure", "--format=oci", srv.Addr+"/"+repo+":v1", out)
		checkLayout(t, out, im)
	})
}

// TestDedupNotRedirected: a layer dedup rebuilt (no intact copy in the
// store) is served by cairn; the config blob beside it, intact, is
// redirected, and clients pull the image byte-exact.
func TestDedupNotRedirected(t *testing.T) {
	t.Parallel()
	d, section := objstore.S3Store(t, "cairn-redirect-")
	host := hostOf(t, testenv.Need(t, "CAIRN_TEST_S3_ENDPOINT")[0])
	srv := start(t, "version: 0.1\nstorage:\n"+section+"  dedup:\n    mode: full\n    predictor: {enabled: false}\n"+objstore.DedupLocal(t))
	im := newImage(t, 5, 2)
	im.push(t, srv.Addr, repo+":v1")
	poll.Within(t, 3*time.Minute, 200*time.Millisecond, func() string {
		for _, l := range im.order {
			if drivertest.Exists(t, d, layout.BlobData(l)) || !drivertest.Exists(t, d, layout.BlobRecipe(l)) {
				return "layer " + l.String() + " to be deduplicated"
			}
		}
		return ""
	})
	for dg, b := range im.layers {
		if slices.Contains(im.order, dg) {
			checkServed(t, srv.URL, repo, dg, b)
		} else {
			checkRedirected(t, srv.URL, repo, dg, b, host)
		}
	}
	pullWithClients(t, srv.Addr, repo, "v1", im)
}
