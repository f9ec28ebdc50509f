// Package regtest talks to a registry under test as the end-to-end tests
// do: raw HTTP requests read whole, OCI images built with
// go-containerregistry, and pulls checked byte for byte.
package regtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// ManifestAccept is the Accept header of a client that understands every
// manifest kind: OCI and Docker schema2 images and indexes.
const ManifestAccept = "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json, " +
	"application/vnd.docker.distribution.manifest.v2+json, application/vnd.docker.distribution.manifest.list.v2+json"

// Response is a fully read HTTP response.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
	Req    string // "METHOD /request/uri", for messages
}

// String shows the request, the status, any challenge and the start of
// the body, for failure messages.
func (r Response) String() string {
	b := r.Body
	if len(b) > 512 {
		b = b[:512]
	}
	s := fmt.Sprintf("%s -> %d", r.Req, r.Status)
	if c := r.Header.Get("WWW-Authenticate"); c != "" {
		s += " " + c
	}
	return fmt.Sprintf("%s %q", s, b)
}

// ErrorCode returns the first code of an OCI error body, "" when the body
// is no such thing.
func (r Response) ErrorCode() string {
	var e struct {
		Errors []struct {
			Code string `json:"code"`
		} `json:"errors"`
	}
	if json.Unmarshal(r.Body, &e) != nil || len(e.Errors) == 0 {
		return ""
	}
	return e.Errors[0].Code
}

// Do sends one request with an in-memory body (nil: none) and headers
// given as key, value pairs, and reads the whole response.
func Do(t testing.TB, hc *http.Client, method, url string, body []byte, hdr ...string) Response {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return Send(t, hc, req)
}

// Send performs req and reads the whole response.
func Send(t testing.TB, hc *http.Client, req *http.Request) Response {
	t.Helper()
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", req.Method, req.URL, err)
	}
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: b, Req: req.Method + " " + req.URL.RequestURI()}
}

// RefusalTime sends GET url with Basic credentials user and pass,
// requires 401 and returns how long the refusal took, body read. The
// timing tests take the fastest of many samples: never a deadline.
func RefusalTime(t testing.TB, hc *http.Client, url, user, pass string) time.Duration {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth(user, pass)
	start := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	d := time.Since(start)
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET %s as %s: %d, %v; want 401", url, user, resp.StatusCode, err)
	}
	return d
}

// CheckSameCost fails the test unless a refusal of an unknown name costs
// what a known name's wrong secret does, within a factor of 4 either way:
// else names can be probed by timing. unknown and known each time one
// refusal; what names the pair in messages.
//
// Why the margin holds on a busy machine: the two kinds alternate (on one
// connection, when the callers reuse one), so a slow spell of the machine
// falls on both; load only ever adds time, so the fastest of samples of
// each is its undisturbed cost; and a factor of 4 each way is far both from
// 1 (the same work) and from the ~22 of a dummy hash 32x the work. Failing
// falsely takes every sample of one kind slowed 4x while one of the other
// kind is not.
func CheckSameCost(t testing.TB, what string, samples int, unknown, known func() time.Duration) {
	t.Helper()
	u, k := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
	for range samples {
		u = min(u, unknown())
		k = min(k, known())
	}
	ratio := float64(u) / float64(k)
	t.Logf("%s: fastest of %d refusals: unknown %v, known %v: ratio %.2f", what, samples, u, k, ratio)
	if ratio >= 4 || ratio <= 1.0/4 {
		t.Errorf("%s: an unknown name's refusal takes %.2fx a known name's wrong secret (%v against %v), want within 4x either way: names can be probed by timing", what, ratio, u, k)
	}
}

// Resolve makes a Location (absolute or a path) absolute against base.
func Resolve(t testing.TB, base, loc string) string {
	t.Helper()
	b, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u, err := b.Parse(loc)
	if err != nil {
		t.Fatalf("Location %q: %v", loc, err)
	}
	return u.String()
}

// Ref parses "<repo>:<tag>" or "<repo>@<digest>" as a reference on the
// registry at addr (host:port, plain HTTP).
func Ref(t testing.TB, addr, s string) name.Reference {
	t.Helper()
	r, err := name.ParseReference(addr+"/"+s, name.Insecure)
	if err != nil {
		t.Fatalf("reference %q: %v", s, err)
	}
	return r
}

// OCIImage is an image of layers with OCI media types throughout (the
// empty image's are Docker's).
func OCIImage(layers ...v1.Layer) (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	return mutate.AppendLayers(img, layers...)
}

// RandomImage is an OCI image of n random layers of size bytes each.
func RandomImage(t testing.TB, n int, size int64) v1.Image {
	t.Helper()
	layers := make([]v1.Layer, n)
	for i := range layers {
		l, err := random.Layer(size, types.OCILayer)
		if err != nil {
			t.Fatal(err)
		}
		layers[i] = l
	}
	img, err := OCIImage(layers...)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// CheckPull pulls ref with go-containerregistry as a client would and
// checks that it is the image want names and that every layer stream
// hashes to its digest.
func CheckPull(ctx context.Context, ref name.Reference, want string, opts ...remote.Option) error {
	img, err := remote.Image(ref, append([]remote.Option{remote.WithContext(ctx)}, opts...)...)
	if err != nil {
		return err
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	if d.String() != want {
		return fmt.Errorf("%s is %s, want %s", ref, d, want)
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range layers {
		ld, err := l.Digest()
		if err != nil {
			return err
		}
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		h, _, err := v1.SHA256(rc)
		rc.Close()
		if err != nil || h != ld {
			return fmt.Errorf("%s: layer %s reads back as %s (%v)", ref, ld, h, err)
		}
	}
	return nil
}

// Metric returns the value of the sample named series (name{labels}, as
// exported) from the /metrics of the debug listener at debugAddr
// (host:port), 0 when absent: a counter not yet incremented is not
// exported.
func Metric(t testing.TB, debugAddr, series string) float64 {
	t.Helper()
	r := Do(t, http.DefaultClient, http.MethodGet, "http://"+debugAddr+"/metrics", nil)
	for _, line := range strings.Split(string(r.Body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.Fields(v)[0], 64)
			if err != nil {
				t.Fatalf("metric %s: %v", series, err)
			}
			return f
		}
	}
	return 0
}
