package gc

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/digestkey"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// countOnly is a driver that only counts what it is asked to delete: the
// scale benchmark measures the sweep's own cost, not a store's.
type countOnly struct {
	driver.Driver // nil: any other call panics
	calls, paths  atomic.Int64
	bytes         atomic.Int64
}

func (d *countOnly) DeleteFiles(_ context.Context, paths []string) (int, error) {
	if len(paths) == 1 && strings.Contains(paths[0], "/cairn/gc/") {
		return 1, nil // a fence
	}
	d.calls.Add(1)
	d.paths.Add(int64(len(paths)))
	n := 0
	for _, p := range paths {
		n += len(p)
	}
	d.bytes.Add(int64(n))
	return len(paths), nil
}

func (d *countOnly) PutContent(context.Context, string, []byte) error { return nil }

func (d *countOnly) Stat(_ context.Context, p string) (driver.FileInfo, error) {
	return driver.FileInfo{Path: p, ModTime: time.Now()}, nil
}

func (d *countOnly) Walk(_ context.Context, p string, _ driver.WalkFn) error {
	return driver.PathNotFoundError{Path: p, Driver: "count"}
}

// scalePlan builds the mark's result for one repository of manifests
// manifests, all to be deleted, each named by tags tag index entries.
func scalePlan(c *collector, manifests, tags int) {
	rs := &repoState{name: "scale/app", revs: make([]revision, manifests)}
	var seed [8]byte
	for i := range rs.revs {
		binary.LittleEndian.PutUint64(seed[:], uint64(i))
		sum := sha256.Sum256(seed[:])
		rs.revs[i].key, _ = digestkey.Parse("sha256", hex.EncodeToString(sum[:]))
		rs.revs[i].flags = fDelete
		rs.revs[i].subject = noSubject
	}
	rs.sortRevs()
	rs.nDelete = manifests
	rs.tags = make([]tagState, tags)
	for t := range rs.tags {
		rs.tags[t].name = "release-" + strconv.Itoa(t)
		for i := range manifests {
			rs.tags[t].index.add(uint32(i), manifests)
		}
	}
	c.repos = []*repoState{rs}
	c.repoIndex[rs.name] = 0
}

// runScale sweeps the plan against a counting driver and returns the
// wall time of the sweep and how many paths it deleted.
func runScale(manifests, tags int) (time.Duration, *countOnly, error) {
	d := &countOnly{}
	c := newCollector(d, Options{DeleteUntagged: true})
	if err := c.begin(context.Background()); err != nil {
		return 0, nil, err
	}
	defer c.journal.run.Stop()
	scalePlan(c, manifests, tags)
	start := time.Now()
	err := c.sweep(context.Background())
	return time.Since(start), d, err
}

func TestSweepPathsAndBatches(t *testing.T) {
	wall, d, err := runScale(300, 7)
	if err != nil {
		t.Fatal(err)
	}
	want := int64(300 + 300*7)
	if got := d.paths.Load(); got != want {
		t.Fatalf("deleted %d paths, want %d", got, want)
	}
	// Rounds of 8000 paths in batches of 1000: one call per full batch.
	if got, max := d.calls.Load(), (want+999)/1000+1; got > max {
		t.Errorf("%d DeleteFiles calls for %d paths, want at most %d", got, want, max)
	}
	t.Logf("%d paths in %v", want, wall)
}

// TestScaleSweep is the scale benchmark: 100,000 manifests with 1,000 tag
// index entries each (100M paths) through the sweep's path building and
// batching, in a child process whose wall time and peak RSS it prints.
// It runs with CAIRN_GC_SCALE=1 (CAIRN_GC_SCALE_MANIFESTS and
// CAIRN_GC_SCALE_TAGS change the size); targets: < 10 s and < 256 MB.
func TestScaleSweep(t *testing.T) {
	if os.Getenv("CAIRN_GC_SCALE_CHILD") == "1" {
		scaleChild(t)
		return
	}
	if os.Getenv("CAIRN_GC_SCALE") != "1" {
		t.Skip("set CAIRN_GC_SCALE=1 to run the 100M-path sweep benchmark")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestScaleSweep$", "-test.v")
	cmd.Env = append(os.Environ(), "CAIRN_GC_SCALE_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var line string
	for sc := bufio.NewScanner(strings.NewReader(string(out))); sc.Scan(); {
		if s, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "SCALE "); ok {
			line = s
		}
	}
	if line == "" {
		t.Fatalf("child printed no result:\n%s", out)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	rss := float64(ru.Maxrss) / 1024 // KiB on Linux
	msg := fmt.Sprintf("gc sweep scale: %s, peak RSS %.0f MiB (targets: wall < 10 s, RSS < 256 MB)", line, rss)
	fmt.Println(msg)
	t.Log(msg)
}

func scaleChild(t *testing.T) {
	manifests, tags := 100_000, 1_000
	if s := os.Getenv("CAIRN_GC_SCALE_MANIFESTS"); s != "" {
		manifests, _ = strconv.Atoi(s)
	}
	if s := os.Getenv("CAIRN_GC_SCALE_TAGS"); s != "" {
		tags, _ = strconv.Atoi(s)
	}
	wall, d, err := runScale(manifests, tags)
	if err != nil {
		t.Fatal(err)
	}
	want := int64(manifests) * int64(tags+1)
	if d.paths.Load() != want {
		t.Fatalf("deleted %d paths, want %d", d.paths.Load(), want)
	}
	fmt.Printf("SCALE manifests=%d tags=%d paths=%d path_bytes=%d delete_calls=%d wall=%.2fs\n",
		manifests, tags, want, d.bytes.Load(), d.calls.Load(), wall.Seconds())
}
