package cache

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func testData(n int, seed uint64) []byte {
	p := make([]byte, n)
	rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)}).Read(p)
	return p
}

func digestKey(seed uint64) string { return fmt.Sprintf("sha256:%064x", seed) }

// writeAll writes p in 4 KiB chunks, as a restore writes in pieces.
// gatedFill returns a fill writing data once release is closed, and how
// many times it was called.
func gatedFill(data []byte) (fill func(context.Context, io.Writer) error, release chan struct{}, calls *atomic.Int32) {
	release, calls = make(chan struct{}), new(atomic.Int32)
	fill = func(ctx context.Context, w io.Writer) error {
		calls.Add(1)
		<-release
		return writeAll(w, data)
	}
	return fill, release, calls
}

func writeAll(w io.Writer, p []byte) error {
	for len(p) > 0 {
		n := min(len(p), 4096)
		if _, err := w.Write(p[:n]); err != nil {
			return err
		}
		p = p[n:]
	}
	return nil
}

// countingFill returns a fill writing data and a counter of its calls.
func countingFill(data []byte) (FillFunc, *atomic.Int32) {
	var calls atomic.Int32
	return func(ctx context.Context, w io.Writer) error {
		calls.Add(1)
		return writeAll(w, data)
	}, &calls
}

func openDisk(t *testing.T, capacity int64) (*Disk, string) {
	t.Helper()
	dir := t.TempDir()
	d, err := OpenDisk(dir, capacity)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, dir
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func readAll(t *testing.T, r io.ReadCloser) []byte {
	t.Helper()
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// waitFor waits until cond holds; publication happens just after the last
// byte is released, so tests give it a moment. It sets no deadline of its
// own (a busy machine is slow, not wrong): a wait that never ends is
// stopped by the test binary's -timeout, and shortly before that this
// fails naming what it waited for.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline, ok := t.Deadline()
	for !cond() {
		if ok && time.Until(deadline) < 10*time.Second {
			t.Fatalf("still waiting for %s as the test binary's -timeout nears", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestDiskSingleflight(t *testing.T) {
	d, _ := openDisk(t, 1<<30)
	data := testData(1<<20, 1)
	key := digestKey(1)
	release := make(chan struct{})
	var calls atomic.Int32
	fill := func(ctx context.Context, w io.Writer) error {
		calls.Add(1)
		<-release // every Open below happens while the fill runs
		return writeAll(w, data)
	}
	const n = 16
	readers := make([]io.ReadCloser, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r, hit, err := d.Open(t.Context(), key, int64(len(data)), 0, fill)
			if err != nil || hit {
				t.Errorf("Open: hit %v, err %v", hit, err)
				return
			}
			readers[i] = r
		})
	}
	wg.Wait()
	close(release)
	got := make([][]byte, n)
	for i, r := range readers {
		wg.Go(func() {
			if r != nil {
				b, err := io.ReadAll(r)
				r.Close()
				if err != nil {
					t.Error(err)
				}
				got[i] = b
			}
		})
	}
	wg.Wait()
	for i, b := range got {
		if !bytes.Equal(b, data) {
			t.Fatalf("reader %d got %d bytes differing from the %d filled", i, len(b), len(data))
		}
	}
	if c := calls.Load(); c != 1 {
		t.Fatalf("fill called %d times, want 1", c)
	}
	waitFor(t, "entry published", func() bool { return d.Contains(key) })
	r, hit, err := d.Open(t.Context(), key, int64(len(data)), 0, fill)
	if err != nil || !hit {
		t.Fatalf("Open after fill: hit %v, err %v", hit, err)
	}
	if b := readAll(t, r); !bytes.Equal(b, data) || calls.Load() != 1 {
		t.Fatalf("hit returned other bytes or refilled (%d calls)", calls.Load())
	}
	if s := d.Stats(); s.Hits != 1 || s.Misses != 1 || s.Shared != n-1 || s.Entries != 1 || s.Bytes != int64(len(data)) {
		t.Fatalf("stats %+v", s)
	}
}

func TestDiskStreamsWhileFilling(t *testing.T) {
	d, _ := openDisk(t, 1<<30)
	data := testData(256<<10, 2)
	half := len(data) / 2
	resume := make(chan struct{})
	fill := func(ctx context.Context, w io.Writer) error {
		if err := writeAll(w, data[:half]); err != nil {
			return err
		}
		<-resume
		return writeAll(w, data[half:])
	}
	r, _, err := d.Open(t.Context(), digestKey(2), int64(len(data)), 0, fill)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	first := make([]byte, half)
	if _, err := io.ReadFull(r, first); err != nil { // fill is still blocked
		t.Fatal(err)
	}
	if !bytes.Equal(first, data[:half]) {
		t.Fatal("first half differs")
	}
	// A reader at an offset not yet written waits for it.
	late, _, err := d.Open(t.Context(), digestKey(2), int64(len(data)), int64(half+100), fill)
	if err != nil {
		t.Fatal(err)
	}
	lateDone := make(chan []byte)
	go func() { lateDone <- readAll(t, late) }()
	select {
	case <-lateDone:
		t.Fatal("reader past the written bytes returned before they were written")
	case <-time.After(50 * time.Millisecond):
	}
	close(resume)
	rest, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(rest, data[half:]) {
		t.Fatal("second half differs")
	}
	if b := <-lateDone; !bytes.Equal(b, data[half+100:]) {
		t.Fatal("offset reader got wrong bytes")
	}
}

func TestDiskOffsets(t *testing.T) {
	d, _ := openDisk(t, 1<<30)
	data := testData(100_000, 3)
	key := digestKey(3)
	fill, calls := countingFill(data)
	size := int64(len(data))
	for _, off := range []int64{0, 1, 4095, 4096, 99_999, 100_000} {
		r, _, err := d.Open(t.Context(), key, size, off, fill)
		if err != nil {
			t.Fatal(err)
		}
		if b := readAll(t, r); !bytes.Equal(b, data[off:]) {
			t.Fatalf("offset %d: got %d bytes, want %d", off, len(b), size-off)
		}
	}
	waitFor(t, "entry published", func() bool { return d.Contains(key) })
	for _, off := range []int64{0, 7, 65_536, 100_000} {
		r, hit, err := d.Open(t.Context(), key, size, off, fill)
		if err != nil || !hit {
			t.Fatalf("offset %d: hit %v err %v", off, hit, err)
		}
		if b := readAll(t, r); !bytes.Equal(b, data[off:]) {
			t.Fatalf("cached offset %d: wrong bytes", off)
		}
	}
	if calls.Load() > 6 { // sequential Opens may each start a fill before publication, never more
		t.Fatalf("fill called %d times", calls.Load())
	}
	for _, off := range []int64{-1, size + 1} {
		if _, _, err := d.Open(t.Context(), key, size, off, fill); !errors.Is(err, ErrInvalidOffset) {
			t.Errorf("offset %d: err %v, want ErrInvalidOffset", off, err)
		}
	}
}

func TestDiskFillError(t *testing.T) {
	d, dir := openDisk(t, 1<<30)
	data := testData(64<<10, 4)
	key := digestKey(4)
	errBad := errors.New("digest mismatch")
	resume := make(chan struct{})
	fill := func(ctx context.Context, w io.Writer) error {
		writeAll(w, data[:len(data)/2])
		<-resume
		return errBad
	}
	r1, _, err := d.Open(t.Context(), key, int64(len(data)), 0, fill)
	if err != nil {
		t.Fatal(err)
	}
	r2, _, err := d.Open(t.Context(), key, int64(len(data)), 1000, fill)
	if err != nil {
		t.Fatal(err)
	}
	close(resume)
	for _, r := range []io.ReadCloser{r1, r2} {
		if _, err := io.ReadAll(r); !errors.Is(err, errBad) {
			t.Fatalf("reader err %v, want the fill's error", err)
		}
		r.Close()
	}
	waitFor(t, "no fill running", func() bool { return d.Stats().Filling == 0 })
	if names := dirNames(t, dir); len(names) != 0 {
		t.Fatalf("files left after a failed fill: %v", names)
	}
	if d.Contains(key) {
		t.Fatal("failed entry is cached")
	}
	// The next Open fills afresh.
	good, calls := countingFill(data)
	r, _, err := d.Open(t.Context(), key, int64(len(data)), 0, good)
	if err != nil {
		t.Fatal(err)
	}
	if b := readAll(t, r); !bytes.Equal(b, data) || calls.Load() != 1 {
		t.Fatal("refill after failure did not deliver")
	}
}

// A fill that wrote every byte and then fails its check must not give any
// reader a complete body.
func TestDiskLastByteWaitsForVerdict(t *testing.T) {
	d, _ := openDisk(t, 1<<30)
	data := testData(10_000, 5)
	verdict := make(chan error)
	fill := func(ctx context.Context, w io.Writer) error {
		if err := writeAll(w, data); err != nil {
			return err
		}
		return <-verdict
	}
	r, _, err := d.Open(t.Context(), digestKey(5), int64(len(data)), 0, fill)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := make([]byte, len(data)-1)
	if _, err := io.ReadFull(r, got); err != nil {
		t.Fatal(err)
	}
	errBad := errors.New("bad digest")
	verdict <- errBad
	n, err := r.Read(make([]byte, 10))
	if n != 0 || !errors.Is(err, errBad) {
		t.Fatalf("final read: %d bytes, err %v; want 0 bytes and the fill's error", n, err)
	}
}

func TestDiskWrongSize(t *testing.T) {
	d, _ := openDisk(t, 1<<30)
	data := testData(1000, 6)
	for name, fill := range map[string]FillFunc{
		"short": func(ctx context.Context, w io.Writer) error { return writeAll(w, data[:999]) },
		"long":  func(ctx context.Context, w io.Writer) error { return writeAll(w, append(data, 0)) },
	} {
		r, _, err := d.Open(t.Context(), digestKey(6)+name, 1000, 0, fill)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadAll(r); !errors.Is(err, ErrSizeMismatch) {
			t.Errorf("%s fill: err %v, want ErrSizeMismatch", name, err)
		}
		r.Close()
	}
}

func TestDiskReaderContext(t *testing.T) {
	d, _ := openDisk(t, 1<<30)
	data := testData(10_000, 7)
	resume := make(chan struct{})
	var fillErr atomic.Value
	fill := func(ctx context.Context, w io.Writer) error {
		writeAll(w, data[:100])
		<-resume
		err := writeAll(w, data[100:])
		if err != nil {
			fillErr.Store(err)
		}
		return err
	}
	ctx, cancel := context.WithCancel(t.Context())
	r1, _, err := d.Open(ctx, digestKey(7), int64(len(data)), 0, fill)
	if err != nil {
		t.Fatal(err)
	}
	r2, _, err := d.Open(t.Context(), digestKey(7), int64(len(data)), 0, fill)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadFull(r1, make([]byte, 100))
	cancel() // the first client hangs up while waiting
	if _, err := r1.Read(make([]byte, 10)); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled reader: err %v", err)
	}
	r1.Close()
	close(resume)
	if b := readAll(t, r2); !bytes.Equal(b, data) {
		t.Fatal("other reader broken by the first one hanging up")
	}
	if e := fillErr.Load(); e != nil {
		t.Fatalf("fill was disturbed: %v", e)
	}
}

func TestDiskEviction(t *testing.T) {
	const size = 10_000
	d, dir := openDisk(t, 3*size)
	var held io.ReadCloser
	for i := range uint64(5) {
		fill, _ := countingFill(testData(size, 100+i))
		r, _, err := d.Open(t.Context(), digestKey(100+i), size, 0, fill)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			held = r // read only after its entry is evicted
		} else {
			readAll(t, r)
		}
		waitFor(t, "entry published", func() bool { return d.Contains(digestKey(100 + i)) })
	}
	names := dirNames(t, dir)
	if len(names) != 3 {
		t.Fatalf("files on disk %v, want 3", names)
	}
	var total int64
	for _, n := range names {
		fi, err := os.Stat(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		total += fi.Size()
	}
	if total > 3*size {
		t.Fatalf("%d bytes on disk > capacity %d", total, 3*size)
	}
	for i := range uint64(5) {
		if got, want := d.Contains(digestKey(100+i)), i >= 2; got != want {
			t.Errorf("Contains(%d) = %v, want %v", i, got, want)
		}
	}
	if s := d.Stats(); s.Evictions != 2 || s.Entries != 3 || s.Bytes != 3*size {
		t.Fatalf("stats %+v", s)
	}
	// Its file is gone, but a reader opened before the eviction still reads.
	if b := readAll(t, held); !bytes.Equal(b, testData(size, 100)) {
		t.Fatal("reader of an evicted entry lost its bytes")
	}
}

func TestDiskOversizeAndZeroCapacity(t *testing.T) {
	for _, capacity := range []int64{0, 5000} {
		t.Run(fmt.Sprint(capacity), func(t *testing.T) {
			d, dir := openDisk(t, capacity)
			data := testData(10_000, 8)
			key := digestKey(8)
			fill, release, calls := gatedFill(data)
			r1, _, err := d.Open(t.Context(), key, int64(len(data)), 0, fill)
			if err != nil {
				t.Fatal(err)
			}
			r2, _, err := d.Open(t.Context(), key, int64(len(data)), 5000, fill)
			if err != nil {
				t.Fatal(err)
			}
			close(release)
			if b := readAll(t, r1); !bytes.Equal(b, data) {
				t.Fatal("reader 1 wrong bytes")
			}
			waitFor(t, "fill finished", func() bool { return d.Stats().Filling == 0 })
			if names := dirNames(t, dir); len(names) != 0 {
				t.Fatalf("files kept: %v", names)
			}
			// r2 opened the file before it was removed and still reads it.
			if b := readAll(t, r2); !bytes.Equal(b, data[5000:]) {
				t.Fatal("reader 2 wrong bytes")
			}
			if calls.Load() != 1 || d.Contains(key) {
				t.Fatalf("%d fills, contains %v", calls.Load(), d.Contains(key))
			}
			r3, hit, err := d.Open(t.Context(), key, int64(len(data)), 0, fill)
			if err != nil || hit {
				t.Fatalf("hit %v err %v", hit, err)
			}
			readAll(t, r3)
			if calls.Load() != 2 {
				t.Fatalf("nothing is kept, so a later Open fills again; fills = %d", calls.Load())
			}
		})
	}
}

func TestDiskCloseCancelsFills(t *testing.T) {
	dir := t.TempDir()
	d, err := OpenDisk(dir, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	fill := func(ctx context.Context, w io.Writer) error {
		w.Write([]byte("partial"))
		close(started)
		<-ctx.Done()
		return ctx.Err()
	}
	r, _, err := d.Open(t.Context(), digestKey(9), 1000, 0, fill)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	<-started
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(r); !errors.Is(err, context.Canceled) {
		t.Fatalf("reader err %v, want context.Canceled", err)
	}
	if names := dirNames(t, dir); len(names) != 0 {
		t.Fatalf("files left after Close: %v", names)
	}
	if _, _, err := d.Open(t.Context(), digestKey(9), 1000, 0, fill); !errors.Is(err, ErrClosed) {
		t.Fatalf("Open after Close: %v", err)
	}
}

func TestDiskPrefill(t *testing.T) {
	d, _ := openDisk(t, 1<<20)
	data := testData(50_000, 10)
	key := digestKey(10)
	fill, release, calls := gatedFill(data)
	d.Prefill(t.Context(), key, int64(len(data)), fill)
	d.Prefill(t.Context(), key, int64(len(data)), fill) // already running: no-op
	r, hit, err := d.Open(t.Context(), key, int64(len(data)), 0, fill)
	if err != nil || hit {
		t.Fatalf("hit %v err %v", hit, err)
	}
	close(release)
	if b := readAll(t, r); !bytes.Equal(b, data) {
		t.Fatal("wrong bytes")
	}
	waitFor(t, "entry published", func() bool { return d.Contains(key) })
	d.Prefill(t.Context(), key, int64(len(data)), fill) // complete: no-op
	d.Prefill(t.Context(), digestKey(11), 2<<20, fill)  // larger than capacity: no-op
	if c := calls.Load(); c != 1 {
		t.Fatalf("fill called %d times, want 1", c)
	}
}

func TestDiskNames(t *testing.T) {
	for _, key := range []string{"sha256:" + strings.Repeat("ab", 32), "a.b/c", "%", "x y", "sha512+zstd:AZaz09_-="} {
		name, err := encodeName(key)
		if err != nil {
			t.Fatal(err)
		}
		if strings.ContainsAny(name, "./: ") {
			t.Errorf("%q -> unsafe name %q", key, name)
		}
		if back, ok := decodeName(name); !ok || back != key {
			t.Errorf("%q -> %q -> %q, %v", key, name, back, ok)
		}
	}
	for _, bad := range []string{"", strings.Repeat("x", 300)} {
		if _, err := encodeName(bad); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("encodeName(%d bytes) err %v", len(bad), err)
		}
	}
	for _, foreign := range []string{"notes.txt", "sha256%3aab", "x%2", ".hidden"} {
		if _, ok := decodeName(foreign); ok {
			t.Errorf("decodeName(%q) accepted a name the cache never makes", foreign)
		}
	}
}

const killDirEnv = "CAIRN_CACHE_TEST_KILL_DIR"

// TestDiskKillHelper is the child process of TestDiskSurvivesKill: it
// publishes one entry, then blocks halfway through filling another.
func TestDiskKillHelper(t *testing.T) {
	dir := os.Getenv(killDirEnv)
	if dir == "" {
		t.Skip("helper process for TestDiskSurvivesKill")
	}
	d, err := OpenDisk(dir, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	fill, _ := countingFill(testData(300_000, 20))
	r, _, err := d.Open(t.Context(), digestKey(20), 300_000, 0, fill)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, r)
	d.Close() // waits for publication

	d, err = OpenDisk(dir, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	r, _, err = d.Open(t.Context(), digestKey(21), 300_000, 0, func(ctx context.Context, w io.Writer) error {
		writeAll(w, testData(150_000, 21))
		select {} // killed here
	})
	if err != nil {
		t.Fatal(err)
	}
	io.ReadFull(r, make([]byte, 150_000))
	fmt.Println("ready")
	select {}
}

func TestDiskSurvivesKill(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDiskKillHelper$")
	cmd.Env = append(os.Environ(), killDirEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	ready := false
	for sc.Scan() {
		if sc.Text() == "ready" {
			ready = true
			break
		}
	}
	if !ready {
		cmd.Wait()
		t.Fatal("helper exited before getting ready")
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL mid-fill
		t.Fatal(err)
	}
	cmd.Wait()

	names := dirNames(t, dir)
	if !slices.ContainsFunc(names, func(n string) bool { return strings.HasSuffix(n, ".partial") }) {
		t.Fatalf("expected a partial file after the kill, found %v", names)
	}
	d, err := OpenDisk(dir, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	want, _ := encodeName(digestKey(20))
	if names := dirNames(t, dir); !slices.Equal(names, []string{want}) {
		t.Fatalf("after reopening: %v, want only %s", names, want)
	}
	if d.Contains(digestKey(21)) || !d.Contains(digestKey(20)) {
		t.Fatal("wrong entries re-admitted")
	}
	fill, calls := countingFill(nil)
	r, hit, err := d.Open(t.Context(), digestKey(20), 300_000, 0, fill)
	if err != nil || !hit {
		t.Fatalf("hit %v err %v", hit, err)
	}
	if b := readAll(t, r); !bytes.Equal(b, testData(300_000, 20)) || calls.Load() != 0 {
		t.Fatal("re-admitted entry has wrong bytes or was refilled")
	}
}

func TestOpenDiskReadmitsWithinCapacity(t *testing.T) {
	dir := t.TempDir()
	d, err := OpenDisk(dir, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for i := range uint64(4) {
		fill, _ := countingFill(testData(1000, 30+i))
		r, _, err := d.Open(t.Context(), digestKey(30+i), 1000, 0, fill)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, r)
		waitFor(t, "published", func() bool { return d.Contains(digestKey(30 + i)) })
		name, _ := encodeName(digestKey(30 + i))
		// Distinct ages, oldest first.
		mt := time.Now().Add(time.Duration(i-10) * time.Minute)
		os.Chtimes(filepath.Join(dir, name), mt, mt)
	}
	d.Close()
	os.WriteFile(filepath.Join(dir, "README"), []byte("not ours"), 0o644)

	d, err = OpenDisk(dir, 2500) // room for the two newest
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for i := range uint64(4) {
		if got, want := d.Contains(digestKey(30+i)), i >= 2; got != want {
			t.Errorf("Contains(%d) = %v, want %v", i, got, want)
		}
	}
	if names := dirNames(t, dir); len(names) != 3 || !slices.Contains(names, "README") {
		t.Fatalf("dir after reopen: %v", names)
	}
}
