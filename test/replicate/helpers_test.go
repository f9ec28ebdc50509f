// Package replicate tests replication between real cairn processes: images
// pushed with go-containerregistry as clients push them, replicated to (or
// from) a second cairn, with filters, outages of either side (a process
// stopped and started again on the same port and storage) and a source
// killed mid-way; every manifest and blob compared byte for byte.
package replicate

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/logbuf"
	"github.com/cairn-registry/cairn/internal/testutil/poll"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

func TestMain(m *testing.M) { os.Exit(cairnproc.Main(m)) }

// hangGuard bounds every wait: replication is prompt, but the machine may
// be busy; past this something hangs.
const hangGuard = 3 * time.Minute

// node is a registry process (cairn serve, or another registry's command)
// that can be stopped and started again on the same address and storage
// (cairnproc picks a new port each start).
type node struct {
	t                 *testing.T
	name              string
	addr, debug, root string
	config            string // "" for none
	// command, when set, runs another registry instead of cairn serve.
	command []string
	cmd     *exec.Cmd
	logs    *logbuf.Buffer
	done    chan struct{}
}

func newNode(t *testing.T, name string) *node {
	t.Helper()
	n := &node{t: t, name: name, addr: cairnproc.FreeAddr(t), debug: cairnproc.FreeAddr(t), root: t.TempDir(), logs: &logbuf.Buffer{}}
	t.Cleanup(func() {
		n.stop()
		if t.Failed() {
			t.Logf("%s log:\n%s", n.name, n.logs.String())
		}
	})
	return n
}

func (n *node) url() string { return "http://" + n.addr }

// configure writes the node's configuration: the debug listener (for
// metrics) and extra, a replication section.
func (n *node) configure(extra string) {
	n.config = cairnproc.WriteConfig(n.t, "version: 0.1\nhttp:\n  debug:\n    addr: "+n.debug+"\n"+extra)
}

func (n *node) start() {
	t := n.t
	t.Helper()
	argv := n.command
	if argv == nil {
		argv = []string{cairnproc.Binary(t), "serve", "--addr", n.addr, "--root", n.root}
		if n.config != "" {
			argv = append(argv, "--config", n.config)
		}
	}
	fmt.Fprintf(n.logs, "---- %s start\n", n.name)
	n.cmd = exec.Command(argv[0], argv[1:]...)
	n.cmd.Stdout, n.cmd.Stderr = n.logs, n.logs
	if err := n.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", n.name, err)
	}
	done := make(chan struct{})
	n.done = done
	go func() { n.cmd.Wait(); close(done) }()
	hc := &http.Client{Timeout: time.Second}
	poll.Within(t, hangGuard, 50*time.Millisecond, func() string {
		select {
		case <-done:
			t.Fatalf("%s exited at start:\n%s", n.name, n.logs.String())
		default:
		}
		resp, err := hc.Get(n.url() + "/v2/")
		if err != nil {
			return n.name + " answering"
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusUnauthorized {
			return n.name + " answering 200 (or 401)"
		}
		return ""
	})
}

// stop ends the process by its PID: SIGTERM, SIGKILL after 10 s.
func (n *node) stop() {
	if n.cmd == nil {
		return
	}
	select {
	case <-n.done:
	default:
		n.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-n.done:
		case <-time.After(10 * time.Second):
			n.cmd.Process.Kill()
			<-n.done
		}
	}
	n.cmd = nil
}

// kill ends the process with SIGKILL, as a crash.
func (n *node) kill() {
	if n.cmd == nil {
		return
	}
	n.cmd.Process.Kill()
	<-n.done
	n.cmd = nil
}

func (n *node) ref(s string) name.Reference { return regtest.Ref(n.t, n.addr, s) }

func (n *node) metric(series string) float64 { return regtest.Metric(n.t, n.debug, series) }

// push writes img to n as ref and returns its digest.
func (n *node) push(ref string, img v1.Image) v1.Hash {
	n.t.Helper()
	if err := remote.Write(n.ref(ref), img); err != nil {
		n.t.Fatalf("push %s to %s: %v", ref, n.name, err)
	}
	d, err := img.Digest()
	if err != nil {
		n.t.Fatal(err)
	}
	return d
}

// pushIndex writes an index of count random images to n as ref.
func (n *node) pushIndex(ref string, count int) v1.Hash {
	n.t.Helper()
	idx, err := random.Index(512, 2, int64(count))
	if err != nil {
		n.t.Fatal(err)
	}
	if err := remote.WriteIndex(n.ref(ref), idx); err != nil {
		n.t.Fatalf("push index %s to %s: %v", ref, n.name, err)
	}
	d, err := idx.Digest()
	if err != nil {
		n.t.Fatal(err)
	}
	return d
}

// pushReferrer pushes an artifact (an SBOM, say) to repo whose subject is
// the manifest subject of that repository, by digest as clients do.
func (n *node) pushReferrer(repo string, subject v1.Hash, artifactType, content string) v1.Hash {
	n.t.Helper()
	desc, err := remote.Head(n.ref(repo + "@" + subject.String()))
	if err != nil {
		n.t.Fatalf("head subject %s: %v", subject, err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.MediaType(artifactType))
	img, err = mutate.Append(img, mutate.Addendum{Layer: static.NewLayer([]byte(content), types.MediaType("application/spdx+json"))})
	if err != nil {
		n.t.Fatal(err)
	}
	img = mutate.Subject(img, *desc).(v1.Image)
	d, err := img.Digest()
	if err != nil {
		n.t.Fatal(err)
	}
	if err := remote.Write(n.ref(repo+"@"+d.String()), img); err != nil {
		n.t.Fatalf("push referrer to %s: %v", n.name, err)
	}
	return d
}

// get fetches path from n; status and body.
func get(t *testing.T, base, path string, accept string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil
	}
	return resp.StatusCode, b
}

// head sends a HEAD for path to base; status and Content-Length.
func head(t *testing.T, base, path string) (int, int64) {
	t.Helper()
	resp, err := http.Head(base + path)
	if err != nil {
		return 0, 0
	}
	resp.Body.Close()
	return resp.StatusCode, resp.ContentLength
}

var manifestAccept = strings.Join([]string{
	string(types.OCIManifestSchema1), string(types.OCIImageIndex),
	string(types.DockerManifestSchema2), string(types.DockerManifestList),
}, ", ")

// has reports whether n serves manifest ref of repo.
func has(t *testing.T, n *node, repo, ref string) bool {
	code, _ := get(t, n.url(), "/v2/"+repo+"/manifests/"+ref, manifestAccept)
	return code == http.StatusOK
}

// referrers lists the digests of the referrers n serves for subject: from
// the referrers API, else (a registry without it) the tag schema's index.
func referrers(t *testing.T, n *node, repo string, subject v1.Hash) []string {
	code, b := get(t, n.url(), "/v2/"+repo+"/referrers/"+subject.String(), "")
	if code == http.StatusNotFound {
		code, b = get(t, n.url(), "/v2/"+repo+"/manifests/"+subject.Algorithm+"-"+subject.Hex, manifestAccept)
	}
	if code != http.StatusOK {
		return nil
	}
	var idx ocispec.Index
	if err := json.Unmarshal(b, &idx); err != nil {
		t.Fatalf("referrers of %s: %v", subject, err)
	}
	var out []string
	for _, m := range idx.Manifests {
		out = append(out, m.Digest.String())
	}
	return out
}

// waitFor waits until dst serves every ref ("repo:tag" or "repo@digest").
func waitFor(t *testing.T, dst *node, refs ...string) {
	t.Helper()
	poll.Within(t, hangGuard, 100*time.Millisecond, func() string {
		for _, r := range refs {
			repo, ref := splitRef(r)
			if !has(t, dst, repo, ref) {
				return r + " on " + dst.name
			}
		}
		return ""
	})
}

// waitReferrer waits until dst lists want among subject's referrers.
func waitReferrer(t *testing.T, dst *node, repo string, subject, want v1.Hash) {
	t.Helper()
	poll.Within(t, hangGuard, 100*time.Millisecond, func() string {
		for _, d := range referrers(t, dst, repo, subject) {
			if d == want.String() {
				return ""
			}
		}
		return fmt.Sprintf("referrer %s of %s on %s", want, subject, dst.name)
	})
}

// checkAbsent fails the test for each ref ("repo:tag" or "repo@digest")
// that n serves: one a filter kept out.
func checkAbsent(t *testing.T, n *node, refs ...string) {
	t.Helper()
	for _, r := range refs {
		repo, ref := splitRef(r)
		if has(t, n, repo, ref) {
			t.Errorf("%s was replicated though filtered out", r)
		}
	}
}

// waitFailing waits until n has counted two failed passes of its
// replication target: the peer is down.
func waitFailing(t *testing.T, n *node, target string) {
	t.Helper()
	poll.Within(t, hangGuard, 100*time.Millisecond, poll.Unless(func() bool {
		return n.metric(`cairn_replication_failures_total{target="`+target+`"}`) >= 2
	}, "passes to "+target+" failing while the peer is down"))
}

// bigLayers and bigLayerSize make the image pushBig pushes: large enough
// that a replication of it can be caught midway.
const bigLayers, bigLayerSize = 8, 2 << 20

// pushBig pushes a large image to from as repo:v1 and returns once to
// serves its first layer: the image's replication to to is under way.
func pushBig(t *testing.T, from, to *node, repo string) {
	t.Helper()
	big := regtest.RandomImage(t, bigLayers, bigLayerSize)
	layers, err := big.Layers()
	if err != nil {
		t.Fatal(err)
	}
	first, err := layers[0].Digest()
	if err != nil {
		t.Fatal(err)
	}
	from.push(repo+":v1", big)
	poll.Within(t, hangGuard, 2*time.Millisecond, poll.Unless(func() bool {
		code, _ := head(t, to.url(), "/v2/"+repo+"/blobs/"+first.String())
		return code == http.StatusOK
	}, "the first layer of "+repo+" on "+to.name))
}

// checkResumed checks the first pass of n, started again after a kill in
// the middle of pushBig's image (repo:v1): it copied at most that image's
// manifest, and not all of its layers again.
func checkResumed(t *testing.T, n *node, target, direction, repo string) {
	t.Helper()
	poll.Within(t, hangGuard, 100*time.Millisecond, poll.Unless(func() bool {
		return n.metric(`cairn_replication_passes_total{target="`+target+`"}`) >= 1
	}, "a pass after the restart"))
	if m := n.metric(`cairn_replication_manifests_total{direction="` + direction + `",target="` + target + `"}`); m > 1 {
		t.Errorf("after the restart %v manifests were copied; want at most %s:v1's", m, repo)
	}
	if b := n.metric(`cairn_replication_blob_bytes_total{direction="` + direction + `",target="` + target + `"}`); b >= bigLayers*bigLayerSize {
		t.Errorf("after the restart %v blob bytes were copied: the layers that had arrived were copied again", b)
	}
}

func splitRef(r string) (repo, ref string) {
	if i := strings.Index(r, "@"); i >= 0 {
		return r[:i], r[i+1:]
	}
	i := strings.LastIndex(r, ":")
	return r[:i], r[i+1:]
}

// sameTree checks that dst serves ref of repo exactly as src does: the
// manifest's bytes (so its digest), every child manifest's and every
// blob's.
func sameTree(t *testing.T, src, dst *node, repo, ref string) {
	t.Helper()
	code, want := get(t, src.url(), "/v2/"+repo+"/manifests/"+ref, manifestAccept)
	if code != http.StatusOK {
		t.Fatalf("%s: %s:%s answers %d", src.name, repo, ref, code)
	}
	code, got := get(t, dst.url(), "/v2/"+repo+"/manifests/"+ref, manifestAccept)
	if code != http.StatusOK {
		t.Fatalf("%s: %s:%s answers %d", dst.name, repo, ref, code)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s:%s differs on %s (%d bytes, %s) from %s (%d bytes, %s)", repo, ref, dst.name, len(got), sum(got), src.name, len(want), sum(want))
	}
	var m struct {
		Config    *ocispec.Descriptor  `json:"config"`
		Layers    []ocispec.Descriptor `json:"layers"`
		Manifests []ocispec.Descriptor `json:"manifests"`
	}
	if err := json.Unmarshal(want, &m); err != nil {
		t.Fatal(err)
	}
	for _, c := range m.Manifests {
		sameTree(t, src, dst, repo, c.Digest.String())
	}
	blobs := m.Layers
	if m.Config != nil {
		blobs = append(blobs, *m.Config)
	}
	for _, b := range blobs {
		_, want := get(t, src.url(), "/v2/"+repo+"/blobs/"+b.Digest.String(), "")
		code, got := get(t, dst.url(), "/v2/"+repo+"/blobs/"+b.Digest.String(), "")
		if code != http.StatusOK || !bytes.Equal(got, want) || "sha256:"+sum(got) != b.Digest.String() {
			t.Fatalf("blob %s of %s:%s on %s: status %d, %d bytes hashing to %s (want %d bytes)", b.Digest, repo, ref, dst.name, code, len(got), sum(got), len(want))
		}
	}
}

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// cli runs `cairn args...` to its end and returns its output and error.
func cli(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	out, err := exec.CommandContext(ctx, cairnproc.Binary(t), args...).CombinedOutput()
	return string(out), err
}
