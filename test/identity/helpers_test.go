// Package identity tests cairn's own token service and robot keys through
// a real `cairn serve`: go-containerregistry (the library crane is built
// on) logs in with Bearer tokens from /auth/token as an htpasswd user, as
// a robot key and as an LDAP user (ldap_test.go, against the OpenLDAP that
// scripts/services/ldap.sh starts), under the access-control policy; raw HTTP checks what
// the library does not show (statuses, challenges, forged and expired
// tokens, the login limit).
package identity

import (
	"crypto"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/cairn-registry/cairn/internal/auth"
	"github.com/cairn-registry/cairn/internal/notify"
	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/htpasswdtest"
	"github.com/cairn-registry/cairn/internal/testutil/poll"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

// TestMain builds cairn once for the package.
func TestMain(m *testing.M) { os.Exit(cairnproc.Main(m)) }

const (
	service = "cairn-identity-test"
	realm   = "cairn identity test"
)

// users of every test's htpasswd file: alice is admin, bob may pull
// team/**, carol pull and push there.
var users = []string{"alice", "wonderland", "bob", "builder", "carol", "singer"}

const policy = `  accesscontrol:
    repositories:
      "team/**":
        policies:
          - users: [bob]
            actions: [pull]
          - users: [carol]
            actions: [pull, push]
    adminpolicy:
      users: [alice]
      actions: ["*"]
`

// registry is a running cairn with the token service.
type registry struct {
	*cairnproc.Server
	config string // the configuration file, for cairn robot
	hc     *http.Client
}

// start runs cairn with htpasswd (bcrypt cost 5, as htpasswd -B writes),
// the token service, the policy, extra lines under auth, and top-level
// sections top.
func start(t *testing.T, extra string, top ...string) *registry {
	t.Helper()
	hp := htpasswdtest.File(t, 5, users...)
	return startConfig(t, fmt.Sprintf("auth:\n  htpasswd:\n    realm: %s\n    path: %s\n  tokenservice:\n    service: %s\n%s%s%s", realm, hp, service, policy, extra, strings.Join(top, "")))
}

// startConfig runs cairn with the configuration document yml.
func startConfig(t *testing.T, yml string) *registry {
	t.Helper()
	cfg := cairnproc.WriteConfig(t, yml)
	srv := cairnproc.Start(t, "", "--config", cfg)
	hc := &http.Client{Timeout: 30 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	return &registry{Server: srv, config: cfg, hc: hc}
}

// cairn runs the cairn binary with args against r's configuration and
// root, and returns its stdout.
func (r *registry) cairn(t *testing.T, args ...string) string {
	t.Helper()
	args = append(args, "--config", r.config, "--root", r.Root)
	cmd := exec.CommandContext(t.Context(), cairnproc.Binary(t), args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("cairn %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

// createRobot makes robot name with scopes and returns its key.
func (r *registry) createRobot(t *testing.T, name string, scopes ...string) string {
	t.Helper()
	args := []string{"robot", "create", name}
	for _, s := range scopes {
		args = append(args, "--scope", s)
	}
	out := r.cairn(t, args...)
	for _, line := range strings.Split(out, "\n") {
		if k, ok := strings.CutPrefix(line, "key:"); ok {
			return strings.TrimSpace(k)
		}
	}
	t.Fatalf("cairn robot create printed no key:\n%s", out)
	return ""
}

// refusalTime asks the token endpoint for query as user and pass,
// requires a 401 and returns how long the refusal took.
func (r *registry) refusalTime(t *testing.T, query, user, pass string) time.Duration {
	return regtest.RefusalTime(t, r.hc, r.URL+"/auth/token?"+query, user, pass)
}

// firstLayer is the digest of img's first layer.
func firstLayer(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	d, err := layers[0].Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// eventHook is a notification endpoint keeping the events it receives.
type eventHook struct {
	URL    string
	mu     sync.Mutex
	events []notify.Event
}

func newEventHook(t *testing.T) *eventHook {
	h := &eventHook{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var env notify.Envelope
		if err := json.NewDecoder(req.Body).Decode(&env); err == nil {
			h.mu.Lock()
			h.events = append(h.events, env.Events...)
			h.mu.Unlock()
		}
	}))
	t.Cleanup(srv.Close)
	h.URL = srv.URL
	return h
}

// actionBy is an event's action and actor.
type actionBy struct{ action, actor string }

// waitFor waits until an event of each action and actor has arrived.
func (h *eventHook) waitFor(t *testing.T, want []actionBy) {
	t.Helper()
	poll.Until(t, 50*time.Millisecond, func() string {
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, w := range want {
			if !slices.ContainsFunc(h.events, func(e notify.Event) bool { return e.Action == w.action && e.Actor.Name == w.actor }) {
				return fmt.Sprintf("a %s event of %s (have %d events)", w.action, w.actor, len(h.events))
			}
		}
		return ""
	})
}

func (h *eventHook) received() []notify.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.events)
}

// tokenReply is the token endpoint's answer.
type tokenReply struct {
	Token        string `json:"token"`
	AccessToken  string `json:"access_token"`
	RefreshToken string `json:"refresh_token"`
	ExpiresIn    int    `json:"expires_in"`
}

// token asks the token endpoint (GET) for scopes as user ("" none) and
// returns the status and the reply.
func (r *registry) token(t *testing.T, user, pass, query string) (int, tokenReply) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, r.URL+auth.TokenPath+"?"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	resp := regtest.Send(t, r.hc, req)
	var tr tokenReply
	if resp.Status == http.StatusOK {
		if err := json.Unmarshal(resp.Body, &tr); err != nil {
			t.Fatalf("token reply %s: %v", resp.Body, err)
		}
	}
	return resp.Status, tr
}

// scopeQuery is the query of a token request for scopes.
func scopeQuery(scopes ...string) string {
	v := url.Values{"service": {service}, "scope": scopes}
	return v.Encode()
}

// bearer sends method path with the Bearer token raw.
func (r *registry) bearer(t *testing.T, method, path, raw string) regtest.Response {
	t.Helper()
	return regtest.Do(t, r.hc, method, r.URL+path, nil, "Authorization", "Bearer "+raw, "Accept", regtest.ManifestAccept)
}

// basic sends method path with Basic credentials.
func (r *registry) basic(t *testing.T, method, path, user, pass string) regtest.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, r.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", regtest.ManifestAccept)
	req.SetBasicAuth(user, pass)
	return regtest.Send(t, r.hc, req)
}

// schemes records the Authorization schemes go-containerregistry sends to
// the registry's /v2/ API, to show it went through Bearer tokens.
type schemes struct {
	mu   sync.Mutex
	seen map[string]int
	next http.RoundTripper
}

func (s *schemes) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasPrefix(r.URL.Path, "/v2/") {
		scheme, _, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		s.mu.Lock()
		s.seen[scheme]++
		s.mu.Unlock()
	}
	return s.next.RoundTrip(r)
}

func newSchemes() *schemes {
	return &schemes{seen: map[string]int{}, next: http.DefaultTransport}
}

// ref parses a reference on r.
func (r *registry) ref(t *testing.T, repo string) name.Reference {
	t.Helper()
	return regtest.Ref(t, r.Addr, repo+":v1")
}

// push writes img to repo as a.
func (r *registry) push(t *testing.T, repo string, img v1.Image, a authn.Authenticator, rt http.RoundTripper) error {
	t.Helper()
	opts := []remote.Option{remote.WithAuth(a), remote.WithContext(t.Context())}
	if rt != nil {
		opts = append(opts, remote.WithTransport(rt))
	}
	return remote.Write(r.ref(t, repo), img, opts...)
}

// pull reads repo's manifest as a.
func (r *registry) pull(t *testing.T, repo string, a authn.Authenticator) error {
	t.Helper()
	_, err := remote.Get(r.ref(t, repo), remote.WithAuth(a), remote.WithContext(t.Context()))
	return err
}

// checkReader checks what a, who may only pull team/**, is let do: pull
// team/app but not push there (another image: go-containerregistry skips
// pushing what is there), and pull neither other/app nor other/missing,
// refused alike whether the repository exists.
func (r *registry) checkReader(t *testing.T, who string, a authn.Authenticator) {
	t.Helper()
	if err := r.pull(t, "team/app", a); err != nil {
		t.Errorf("%s pulls team/app: %v", who, err)
	}
	if s := status(r.push(t, "team/app", regtest.RandomImage(t, 1, 4<<10), a, nil)); s != 403 {
		t.Errorf("%s pushes team/app: status %d, want 403", who, s)
	}
	for _, repo := range []string{"other/app", "other/missing"} {
		if s := status(r.pull(t, repo, a)); s != 403 {
			t.Errorf("%s pulls %s: status %d, want 403 (alike whether it exists)", who, repo, s)
		}
	}
}

// status is the HTTP status of a go-containerregistry error (0 for nil,
// -1 for an error without one).
func status(err error) int {
	if err == nil {
		return 0
	}
	var te *transport.Error
	if errors.As(err, &te) {
		return te.StatusCode
	}
	return -1
}

// signingKey reads the key cairn made at first start under its root.
func (r *registry) signingKey(t *testing.T) crypto.Signer {
	t.Helper()
	k, created, err := auth.LoadSigningKey(filepath.Join(r.Root, "cairn-token-key.pem"), false)
	if err != nil || created {
		t.Fatalf("cairn's signing key: %v", err)
	}
	return k
}

// kid is the key ID cairn names its key by (RFC 7638 thumbprint).
func kid(t *testing.T, pub crypto.PublicKey) string {
	t.Helper()
	tp, err := (&jose.JSONWebKey{Key: pub}).Thumbprint(crypto.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(tp)
}
