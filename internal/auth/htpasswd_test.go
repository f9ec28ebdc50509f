package auth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/crypto/bcrypt"
)

func bcryptHash(t *testing.T, pass string) string {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(pass), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	return string(h)
}

func TestParseHtpasswd(t *testing.T) {
	alice := bcryptHash(t, "wonderland")
	// htpasswd -B writes $2y$; x/crypto writes $2a$; both are bcrypt.
	bob := "$2y$" + strings.TrimPrefix(bcryptHash(t, "builder"), "$2a$")
	users, err := ParseHtpasswd(strings.NewReader("# users\n\nalice:" + alice + "\n  bob:" + bob + "  \n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(users) != 2 || string(users["alice"]) != alice || string(users["bob"]) != bob {
		t.Errorf("users = %q", users)
	}

	bad := []struct{ name, line, want string }{
		{"md5", "carol:$apr1$Wk3bOemC$jZ6TFpSGiKX6lYc9yLkMA1", `line 2: user "carol" has a MD5 (apr1) hash; cairn accepts only bcrypt`},
		{"sha1", "carol:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=", `line 2: user "carol" has a SHA-1 hash`},
		{"sha512 crypt", "carol:$6$salt$abc", `line 2: user "carol" has a SHA-512-crypt hash`},
		{"plain", "carol:password", `line 2: user "carol" has a crypt or plain-text hash`},
		{"malformed bcrypt", "carol:$2y$10$short", `line 2: user "carol": malformed bcrypt hash`},
		{"no colon", "carol", `line 2: not of the form user:hash`},
		{"empty user", ":" + alice, `line 2: not of the form user:hash`},
		{"duplicate", "alice:" + alice, `line 2: user "alice" given twice`},
	}
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			_, err := ParseHtpasswd(strings.NewReader("alice:" + alice + "\n" + b.line + "\n"))
			if err == nil || !strings.HasPrefix(err.Error(), b.want) {
				t.Errorf("err = %v\nwant prefix %s", err, b.want)
			}
		})
	}
	if _, err := ParseHtpasswd(strings.NewReader("# nobody\n")); err == nil {
		t.Error("a file without users was accepted")
	}
}

func TestLoadHtpasswdErrorsNameTheFile(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadHtpasswd("r", filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: err = %v", err)
	}
	p := filepath.Join(dir, "htpasswd")
	if err := os.WriteFile(p, []byte("u:{SHA}x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadHtpasswd("r", p); err == nil || !strings.HasPrefix(err.Error(), p+": line 1:") {
		t.Errorf("err = %v, want it to name %s and the line", err, p)
	}
}

func TestHtpasswdAuthorize(t *testing.T) {
	h, err := NewHtpasswd("cairn realm", map[string][]byte{"alice": []byte(bcryptHash(t, "wonderland"))})
	if err != nil {
		t.Fatal(err)
	}
	need := Needed(EndpointManifest, "a", http.MethodPut)
	req := func(set func(*http.Request)) *http.Request {
		r := httptest.NewRequest(http.MethodPut, "/v2/a/manifests/latest", nil)
		if set != nil {
			set(r)
		}
		return r
	}
	cases := []struct {
		name    string
		set     func(*http.Request)
		wantErr error
	}{
		{"no credentials", nil, ErrNoCredentials},
		{"bearer instead of basic", func(r *http.Request) { r.Header.Set("Authorization", "Bearer abc") }, ErrNoCredentials},
		{"wrong password", func(r *http.Request) { r.SetBasicAuth("alice", "looking-glass") }, ErrInvalidCredentials},
		{"unknown user", func(r *http.Request) { r.SetBasicAuth("mallory", "wonderland") }, ErrInvalidCredentials},
		{"empty password", func(r *http.Request) { r.SetBasicAuth("alice", "") }, ErrInvalidCredentials},
		// What skopeo and podman send without credentials.
		{"empty user and password", func(r *http.Request) { r.SetBasicAuth("", "") }, ErrNoCredentials},
		{"right password", func(r *http.Request) { r.SetBasicAuth("alice", "wonderland") }, nil},
		// Twice: the second answer comes from the verified cache and must
		// not differ.
		{"right password again", func(r *http.Request) { r.SetBasicAuth("alice", "wonderland") }, nil},
		{"wrong password after a right one", func(r *http.Request) { r.SetBasicAuth("alice", "wonderland!") }, ErrInvalidCredentials},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, err := h.Authorize(req(c.set), need)
			if c.wantErr == nil {
				if err != nil || g.Subject != "alice" || !g.Allows(Access{TypeRegistry, "catalog", "*"}) {
					t.Fatalf("grant %+v, err %v; want alice with full access", g, err)
				}
				return
			}
			var ch *Challenge
			if !errors.As(err, &ch) || !errors.Is(err, c.wantErr) {
				t.Fatalf("err = %v, want a challenge for %v", err, c.wantErr)
			}
			if ch.Status() != http.StatusUnauthorized || ch.Code() != "UNAUTHORIZED" {
				t.Errorf("status %d code %s, want 401 UNAUTHORIZED", ch.Status(), ch.Code())
			}
			if got, want := ch.Header(), `Basic realm="cairn realm"`; got != want {
				t.Errorf("WWW-Authenticate = %q, want %q", got, want)
			}
			if strings.Contains(ch.Message(), "mallory") || strings.Contains(ch.Message(), "alice") {
				t.Errorf("message %q names the user", ch.Message())
			}
		})
	}
}

// hashAt returns a bcrypt hash of pass at cost, with the $2y$ prefix that
// htpasswd -B writes.
func hashAt(t testing.TB, pass string, cost int) []byte {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(pass), cost)
	if err != nil {
		t.Fatal(err)
	}
	return []byte("$2y$" + strings.TrimPrefix(string(h), "$2a$"))
}

// basicRequest is a GET /v2/ with Basic credentials and ctx.
func basicRequest(ctx context.Context, user, pass string) *http.Request {
	r := httptest.NewRequestWithContext(ctx, http.MethodGet, "/v2/", nil)
	r.SetBasicAuth(user, pass)
	return r
}

// TestHtpasswdComparesOnceAtTheFilesCost: an unknown user and a known
// user's wrong password each cost exactly one bcrypt comparison, against
// a hash of the cost most of the file's entries have: what the time of a
// refusal depends on, so that it cannot tell unknown users from known.
func TestHtpasswdComparesOnceAtTheFilesCost(t *testing.T) {
	files := []struct {
		name  string
		costs []int // of users u0, u1, ...
		want  int
	}{
		{"cost 5 (htpasswd -B)", []int{5, 5}, 5},
		{"cost 10", []int{10}, 10},
		{"mixed: the most common cost", []int{5, 10, 5, 4}, 5},
		{"mixed: a tie takes the higher cost", []int{5, 10}, 10},
	}
	for _, f := range files {
		t.Run(f.name, func(t *testing.T) {
			users := make(map[string][]byte)
			for i, c := range f.costs {
				users[fmt.Sprint("u", i)] = hashAt(t, "right", c)
			}
			h, err := NewHtpasswd("r", users)
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := bcrypt.Cost(h.dummy); got != f.want {
				t.Errorf("dummy cost %d, want %d", got, f.want)
			}
			var costs []int
			h.compare = func(hash, pass []byte) error {
				c, _ := bcrypt.Cost(hash)
				costs = append(costs, c)
				return bcrypt.CompareHashAndPassword(hash, pass)
			}
			cases := []struct {
				user, pass string
				ok         bool
				costs      []int // of the comparisons made
			}{
				{"mallory", "right", false, []int{f.want}},
				{"mallory", "", false, []int{f.want}},
				{"u0", "wrong", false, []int{f.costs[0]}},
				{"u0", "right", true, []int{f.costs[0]}},
				{"u0", "right", true, nil}, // from the cache
			}
			for _, c := range cases {
				costs = nil
				_, err := h.Authorize(basicRequest(t.Context(), c.user, c.pass), nil)
				if (err == nil) != c.ok {
					t.Errorf("%s:%s: err = %v", c.user, c.pass, err)
				}
				if !slices.Equal(costs, c.costs) {
					t.Errorf("%s:%s: comparisons at costs %v, want %v", c.user, c.pass, costs, c.costs)
				}
			}
		})
	}
	if _, err := NewHtpasswd("r", map[string][]byte{"u": []byte("$2y$xx$bad")}); err == nil || !strings.Contains(err.Error(), `user "u"`) {
		t.Errorf("a malformed hash: err = %v, want one naming the user", err)
	}
}

func TestHtpasswdDefaultBound(t *testing.T) {
	h, err := NewHtpasswd("r", map[string][]byte{"u": hashAt(t, "p", bcrypt.MinCost)})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cap(h.slots), max(1, runtime.GOMAXPROCS(0)/2); got != want {
		t.Errorf("%d comparisons at once, want %d (half of GOMAXPROCS %d, at least 1)", got, want, runtime.GOMAXPROCS(0))
	}
}

// TestHtpasswdBoundsConcurrentComparisons: a burst of bad logins runs at
// most the bound's comparisons at once, and each still gets its answer.
func TestHtpasswdBoundsConcurrentComparisons(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, err := NewHtpasswd("r", map[string][]byte{"alice": hashAt(t, "wonderland", bcrypt.MinCost)})
		if err != nil {
			t.Fatal(err)
		}
		const bound, logins = 3, 40
		h.slots = make(chan struct{}, bound)
		var running, peak, calls atomic.Int64
		h.compare = func(hash, pass []byte) error {
			calls.Add(1)
			n := running.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			// The bubble's clock: every login is running or queued before
			// the first comparison ends.
			time.Sleep(time.Second)
			running.Add(-1)
			return bcrypt.ErrMismatchedHashAndPassword
		}
		var wg sync.WaitGroup
		for i := range logins {
			wg.Go(func() {
				user := "alice"
				if i%2 == 0 {
					user = fmt.Sprint("unknown", i)
				}
				if _, err := h.Authorize(basicRequest(t.Context(), user, "guess"), nil); !errors.Is(err, ErrInvalidCredentials) {
					t.Errorf("%s: err = %v, want invalid credentials", user, err)
				}
			})
		}
		wg.Wait()
		if peak.Load() != bound || calls.Load() != logins {
			t.Errorf("%d comparisons, at most %d at once; want %d, at most %d", calls.Load(), peak.Load(), logins, bound)
		}
	})
}

// TestHtpasswdWaitEndsWithTheRequest: a request waiting for a comparison
// slot stops waiting when its context ends, and is refused like a wrong
// password without any comparison.
func TestHtpasswdWaitEndsWithTheRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, err := NewHtpasswd("r", map[string][]byte{"alice": hashAt(t, "wonderland", bcrypt.MinCost)})
		if err != nil {
			t.Fatal(err)
		}
		h.slots = make(chan struct{}, 1)
		release := make(chan struct{})
		defer close(release)
		var calls atomic.Int64
		h.compare = func(hash, pass []byte) error {
			calls.Add(1)
			<-release
			return bcrypt.ErrMismatchedHashAndPassword
		}
		go h.Authorize(basicRequest(t.Context(), "mallory", "x"), nil) // holds the only slot
		synctest.Wait()

		for _, user := range []string{"alice", "nobody"} {
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() {
				_, err := h.Authorize(basicRequest(ctx, user, "wonderland"), nil)
				done <- err
			}()
			synctest.Wait()
			select {
			case err := <-done:
				t.Fatalf("%s: answered (%v) while the only slot was taken", user, err)
			default:
			}
			cancel()
			synctest.Wait()
			select {
			case err := <-done:
				var ch *Challenge
				if !errors.As(err, &ch) || !errors.Is(err, ErrInvalidCredentials) || !errors.Is(err, context.Canceled) {
					t.Errorf("%s: err = %v, want an invalid-credentials challenge wrapping context.Canceled", user, err)
				} else if ch.Status() != http.StatusUnauthorized || strings.Contains(ch.Message(), "cancel") {
					t.Errorf("%s: status %d message %q, want 401 saying no more than a wrong password", user, ch.Status(), ch.Message())
				}
			default:
				t.Fatalf("%s: still waiting after its request was cancelled", user)
			}
		}
		if n := calls.Load(); n != 1 {
			t.Errorf("%d comparisons, want 1 (the slot holder's)", n)
		}
	})
}

// BenchmarkHtpasswdUnknownVsKnown times a refusal of an unknown user
// against a known user's wrong password, alternately, for files written at
// cost 5 (as htpasswd -B does) and 10. The metric unknown/known, a ratio
// of medians (which a busy machine disturbs less than means), should be
// about 1: the further from 1, the more timing tells about user names.
func BenchmarkHtpasswdUnknownVsKnown(b *testing.B) {
	for _, cost := range []int{5, 10} {
		b.Run(fmt.Sprint("cost=", cost), func(b *testing.B) {
			h, err := NewHtpasswd("r", map[string][]byte{"alice": hashAt(b, "wonderland", cost)})
			if err != nil {
				b.Fatal(err)
			}
			unknown, known := basicRequest(b.Context(), "mallory", "guess"), basicRequest(b.Context(), "alice", "guess")
			var tu, tk []time.Duration
			for b.Loop() {
				start := time.Now()
				h.Authorize(unknown, nil)
				mid := time.Now()
				h.Authorize(known, nil)
				tu = append(tu, mid.Sub(start))
				tk = append(tk, time.Since(mid))
			}
			median := func(d []time.Duration) float64 {
				slices.Sort(d)
				return float64(d[len(d)/2].Nanoseconds())
			}
			mu, mk := median(tu), median(tk)
			b.ReportMetric(mu, "median-ns/unknown")
			b.ReportMetric(mk, "median-ns/known")
			b.ReportMetric(mu/mk, "unknown/known")
		})
	}
}
