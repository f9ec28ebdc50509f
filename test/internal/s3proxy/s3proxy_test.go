package s3proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		method, target string
		header         map[string]string
		want           Op
	}{
		{"GET", "/b/k/data", nil, Get},
		{"GET", "/b/k/data", map[string]string{"Range": "bytes=0-9"}, GetRange},
		{"HEAD", "/b/k/data", nil, Head},
		{"HEAD", "/b", nil, Head},
		{"PUT", "/b/k/data", nil, Put},
		{"PUT", "/b/k/data", map[string]string{"X-Amz-Copy-Source": "/b/k/old"}, Copy},
		{"GET", "/b?list-type=2&prefix=k%2F", nil, List},
		{"GET", "/b/", nil, List},
		{"GET", "/b?location", nil, BucketOp},
		{"PUT", "/b", nil, BucketOp},
		{"DELETE", "/b/k/data", nil, Delete},
		{"POST", "/b?delete", nil, DeleteBulk},
		{"POST", "/b/k/data?uploads", nil, MultipartCreate},
		{"PUT", "/b/k/data?partNumber=2&uploadId=u", nil, MultipartPart},
		{"PUT", "/b/k/data?partNumber=2&uploadId=u", map[string]string{"X-Amz-Copy-Source": "/b/k/old"}, MultipartCopy},
		{"POST", "/b/k/data?uploadId=u", nil, MultipartComplete},
		{"DELETE", "/b/k/data?uploadId=u", nil, MultipartAbort},
		{"GET", "/b/k/data?uploadId=u", nil, MultipartList},
		{"GET", "/b?uploads&prefix=k", nil, MultipartList},
		{"OPTIONS", "/b/k", nil, Other},
	}
	for _, c := range cases {
		r := httptest.NewRequest(c.method, c.target, nil)
		for k, v := range c.header {
			r.Header.Set(k, v)
		}
		if got := Classify(r); got != c.want {
			t.Errorf("%s %s %v: %s, want %s", c.method, c.target, c.header, got, c.want)
		}
	}
}

func TestPriceClasses(t *testing.T) {
	for op, want := range map[Op]Class{
		Get: ClassTier2, GetRange: ClassTier2, Head: ClassTier2, Other: ClassTier2,
		Put: ClassTier1, Copy: ClassTier1, List: ClassTier1, MultipartPart: ClassTier1, MultipartComplete: ClassTier1,
		Delete: ClassFree, DeleteBulk: ClassFree, MultipartAbort: ClassFree,
	} {
		if got := op.Class(); got != want {
			t.Errorf("%s: class %d, want %d", op, got, want)
		}
	}
}

// TestProxy forwards to a stub server: the Host the client used reaches the
// server (SigV4 signs it), bodies pass both ways, and counts add up.
func TestProxy(t *testing.T) {
	var hosts []string
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hosts = append(hosts, r.Host)
		body, _ := io.ReadAll(r.Body)
		if r.Method == http.MethodHead {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		io.WriteString(w, "got "+string(body))
	}))
	defer backend.Close()
	p, err := Start(backend.URL, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	do := func(method, path, body string) string {
		req, err := http.NewRequest(method, p.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	start := time.Now()
	if got := do("PUT", "/b/k", "abc"); got != "got abc" {
		t.Fatalf("PUT through the proxy returned %q", got)
	}
	before := p.Snapshot()
	do("HEAD", "/b/k", "")
	do("GET", "/b/k", "")
	if elapsed := time.Since(start); elapsed < 30*time.Millisecond {
		t.Errorf("3 requests took %s through a 10ms proxy", elapsed)
	}
	c := p.Snapshot()
	if c.Of(Put) != 1 || c.Of(Head) != 1 || c.Of(Get) != 1 || c.Total() != 3 || c.Failed != 1 {
		t.Errorf("counts %s, failed %d; want PUT 1, HEAD 1 (failed), GET 1", c, c.Failed)
	}
	if c.Up != 3 || c.Down != int64(len("got abc")+len("got ")) {
		t.Errorf("bytes up %d, down %d", c.Up, c.Down)
	}
	if d := c.Sub(before); d.Total() != 2 || d.Of(Put) != 0 {
		t.Errorf("difference %s, want HEAD 1, GET 1", d)
	}
	proxyHost := strings.TrimPrefix(p.URL, "http://")
	for _, h := range hosts {
		if h != proxyHost {
			t.Errorf("backend saw Host %q, want the proxy's %q", h, proxyHost)
		}
	}
	p.Reset()
	if c := p.Snapshot(); c.Total() != 0 || c.Up != 0 || c.Down != 0 {
		t.Errorf("after Reset: %s", c)
	}
}
