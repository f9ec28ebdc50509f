// Package gc tests cairn's garbage collector end to end: real `cairn serve`
// processes filled through the registry API, real `cairn gc` processes
// collecting the same storage, and every pulled byte checked against the
// digest that names it.
package gc

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/cairn-registry/cairn/internal/gc"
	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

// TestMain builds cairn once for the package.
func TestMain(m *testing.M) { os.Exit(cairnproc.Main(m)) }

// node is one running cairn serve and a client for it.
type node struct {
	srv *cairnproc.Server
	tr  *http.Transport
	hc  *http.Client
}

func startNode(t *testing.T, root string, args ...string) *node {
	t.Helper()
	srv := cairnproc.Start(t, root, args...)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	return &node{srv: srv, tr: tr, hc: &http.Client{Transport: tr, Timeout: 2 * time.Minute}}
}

func (n *node) ref(t testing.TB, s string) name.Reference {
	t.Helper()
	return regtest.Ref(t, n.srv.Addr, s)
}

func (n *node) opts(ctx context.Context) []remote.Option {
	return []remote.Option{remote.WithContext(ctx), remote.WithTransport(n.tr)}
}

// runGC runs `cairn gc --root root --json --quiet args...`, requires exit
// status 0 and returns the report.
func runGC(t testing.TB, root string, args ...string) *gc.Report {
	t.Helper()
	rep, out, err := tryGC(root, args...)
	if err != nil {
		t.Fatalf("cairn gc %v: %v\n%s", args, err, out)
	}
	return rep
}

func tryGC(root string, args ...string) (*gc.Report, string, error) {
	cmd := exec.Command(os.Getenv("CAIRN_BIN"), append([]string{"gc", "--root", root, "--json", "--quiet"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, stdout.String() + stderr.String(), err
	}
	var rep gc.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		return nil, stdout.String() + stderr.String(), fmt.Errorf("report is not JSON: %w", err)
	}
	return &rep, stderr.String(), nil
}

// get fetches a URL path and returns the body; status must be 200.
func (n *node) get(ctx context.Context, path string, hdr ...string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.srv.URL+path, nil)
	if err != nil {
		return nil, err
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := n.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, bytes.TrimSpace(b))
	}
	return b, nil
}

// pullTree pulls repo:ref and everything it references, checking each
// manifest and blob against its digest: byte-exact or an error.
func (n *node) pullTree(ctx context.Context, repo, ref, want string) error {
	raw, err := n.get(ctx, "/v2/"+repo+"/manifests/"+ref, "Accept", regtest.ManifestAccept)
	if err != nil {
		return err
	}
	if got := sha(raw); got != want {
		return fmt.Errorf("%s:%s: manifest hashes to %s, want %s", repo, ref, got, want)
	}
	var m struct {
		Config    *v1.Descriptor  `json:"config"`
		Layers    []v1.Descriptor `json:"layers"`
		Manifests []v1.Descriptor `json:"manifests"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return err
	}
	blobs := slices.Clone(m.Layers)
	if m.Config != nil {
		blobs = append(blobs, *m.Config)
	}
	for _, b := range blobs {
		data, err := n.get(ctx, "/v2/"+repo+"/blobs/"+b.Digest.String())
		if err != nil {
			return fmt.Errorf("%s:%s: %w", repo, ref, err)
		}
		if got := sha(data); got != b.Digest.String() || int64(len(data)) != b.Size {
			return fmt.Errorf("%s:%s: blob %s hashes to %s (%d bytes)", repo, ref, b.Digest, got, len(data))
		}
	}
	for _, c := range m.Manifests {
		if err := n.pullTree(ctx, repo, c.Digest.String(), c.Digest.String()); err != nil {
			return err
		}
	}
	return nil
}

// pullImage pulls a tagged image with go-containerregistry as a client
// would, hashing every layer stream.
func (n *node) pullImage(ctx context.Context, t testing.TB, repo, tag, want string) error {
	return regtest.CheckPull(ctx, n.ref(t, repo+":"+tag), want, remote.WithTransport(n.tr))
}

func sha(b []byte) string { s := sha256.Sum256(b); return "sha256:" + hex.EncodeToString(s[:]) }

// disk is what a storage root holds, read from the filesystem directly.
type disk struct {
	blobs     map[string]bool            // digest
	revisions map[string]map[string]bool // repo -> digest
	layers    map[string]map[string]bool // repo -> digest
	tagIndex  map[string]map[string]bool // repo -> tag@digest
}

func readDisk(t testing.TB, root string) *disk {
	t.Helper()
	base := filepath.Join(root, "docker", "registry", "v2")
	d := &disk{blobs: map[string]bool{}, revisions: map[string]map[string]bool{}, layers: map[string]map[string]bool{}, tagIndex: map[string]map[string]bool{}}
	add := func(m map[string]map[string]bool, repo, v string) {
		if m[repo] == nil {
			m[repo] = map[string]bool{}
		}
		m[repo][v] = true
	}
	err := filepath.WalkDir(base, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		if e.IsDir() || strings.Contains(e.Name(), "~") {
			return nil
		}
		rel := filepath.ToSlash(strings.TrimPrefix(p, base+string(filepath.Separator)))
		parts := strings.Split(rel, "/")
		switch {
		case parts[0] == "blobs" && len(parts) == 5:
			d.blobs[parts[1]+":"+parts[3]] = true
		case parts[0] == "repositories":
			i := slices.IndexFunc(parts, func(s string) bool { return strings.HasPrefix(s, "_") })
			if i < 0 {
				return nil
			}
			repo, rest := strings.Join(parts[1:i], "/"), parts[i:]
			switch {
			case rest[0] == "_layers" && len(rest) == 4:
				add(d.layers, repo, rest[1]+":"+rest[2])
			case rest[0] == "_manifests" && rest[1] == "revisions" && len(rest) == 5:
				add(d.revisions, repo, rest[2]+":"+rest[3])
			case rest[0] == "_manifests" && rest[1] == "tags" && len(rest) == 7 && rest[3] == "index":
				add(d.tagIndex, repo, rest[2]+"@"+rest[4]+":"+rest[5])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// diffSets describes how got differs from want, or "" when equal.
func diffSets(got, want map[string]bool) string {
	var missing, extra []string
	for k := range want {
		if !got[k] {
			missing = append(missing, k)
		}
	}
	for k := range got {
		if !want[k] {
			extra = append(extra, k)
		}
	}
	if len(missing)+len(extra) == 0 {
		return ""
	}
	slices.Sort(missing)
	slices.Sort(extra)
	return fmt.Sprintf("missing %v, unexpected %v", missing, extra)
}
