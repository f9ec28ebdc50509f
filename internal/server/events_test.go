package server

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cairn-registry/cairn/internal/manifest"
	"github.com/cairn-registry/cairn/internal/notify"
	"github.com/cairn-registry/cairn/internal/registry"
	"github.com/cairn-registry/cairn/internal/storage/driver/inmemory"
)

// eventLog records the events a server sends.
type eventLog struct {
	mu     sync.Mutex
	events []notify.Event
}

func (l *eventLog) Notify(ev notify.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, ev)
}

func (l *eventLog) take() []notify.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	evs := l.events
	l.events = nil
	return evs
}

// TestManifestParsedOncePerRequest: with notifications on (references
// included), a manifest PUT parses its body once and a GET its stored
// bytes once; the events read the manifest the registry parsed. Before,
// the events parsed the captured body again, twice on a PUT.
func TestManifestParsedOncePerRequest(t *testing.T) {
	var parser manifest.Parser
	events := &eventLog{}
	reg := registry.New(inmemory.New(), registry.Options{Parser: &parser})
	srv := httptest.NewServer(New(reg, Options{Events: events, EventReferences: true}))
	defer srv.Close()

	do := func(method, path, ct string, body []byte, want int) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("%s %s: status %d, want %d", method, path, resp.StatusCode, want)
		}
		return resp
	}
	blob := func(content string, mt string) ocispec.Descriptor {
		d := digest.FromString(content)
		do(http.MethodPost, "/v2/a/blobs/uploads/?digest="+string(d), "", []byte(content), http.StatusCreated)
		return ocispec.Descriptor{MediaType: mt, Digest: d, Size: int64(len(content))}
	}
	cfg := blob("{}", ocispec.MediaTypeImageConfig)
	layer := blob("layer", ocispec.MediaTypeImageLayer)
	content, err := json.Marshal(ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest,
		Config: cfg, Layers: []ocispec.Descriptor{layer},
	})
	if err != nil {
		t.Fatal(err)
	}
	events.take()

	before := parser.Parsed()
	do(http.MethodPut, "/v2/a/manifests/v1", ocispec.MediaTypeImageManifest, content, http.StatusCreated)
	if n := parser.Parsed() - before; n != 1 {
		t.Errorf("a manifest PUT parsed %d times, want 1", n)
	}
	checkManifestEvent(t, events.take(), notify.ActionPush, content, cfg, layer)

	before = parser.Parsed()
	do(http.MethodGet, "/v2/a/manifests/v1", "", nil, http.StatusOK)
	if n := parser.Parsed() - before; n != 1 {
		t.Errorf("a manifest GET parsed %d times, want 1", n)
	}
	checkManifestEvent(t, events.take(), notify.ActionPull, content, cfg, layer)
}

// checkManifestEvent checks that evs is the one event of action on the
// manifest content, naming refs.
func checkManifestEvent(t *testing.T, evs []notify.Event, action string, content []byte, refs ...ocispec.Descriptor) {
	t.Helper()
	if len(evs) != 1 {
		t.Fatalf("%d events, want 1: %+v", len(evs), evs)
	}
	tg := evs[0].Target
	if evs[0].Action != action || tg.Digest != digest.FromBytes(content) || tg.Size != int64(len(content)) ||
		tg.MediaType != ocispec.MediaTypeImageManifest || tg.Tag != "v1" {
		t.Errorf("event %s %+v", evs[0].Action, tg)
	}
	if len(tg.References) != len(refs) {
		t.Fatalf("references %+v, want %+v", tg.References, refs)
	}
	for i, r := range refs {
		if tg.References[i].Digest != r.Digest {
			t.Errorf("reference %d is %s, want %s", i, tg.References[i].Digest, r.Digest)
		}
	}
}

// TestServerParsesNoManifest: the server parses no manifest itself, so the
// registry's count above is every parse of a request (a parse added here,
// as events once did, would not be counted there).
func TestServerParsesNoManifest(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "manifest" && strings.HasPrefix(sel.Sel.Name, "Parse") {
				t.Errorf("%s: the server calls manifest.%s; use the manifest the registry parsed", fset.Position(sel.Pos()), sel.Sel.Name)
			}
			return true
		})
	}
}
