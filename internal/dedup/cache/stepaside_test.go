package cache

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

// failingFile is a partial file whose writes fail with err once it has
// taken left bytes (a short write first), as on a volume filling up; its
// Sync fails with syncErr.
type failingFile struct {
	*os.File
	left    int64
	err     error
	syncErr error
}

func (f *failingFile) Write(p []byte) (int, error) {
	if int64(len(p)) <= f.left {
		n, err := f.File.Write(p)
		f.left -= int64(n)
		return n, err
	}
	n, _ := f.File.Write(p[:f.left])
	f.left = 0
	return n, f.err
}

func (f *failingFile) Sync() error {
	if f.syncErr != nil {
		return f.syncErr
	}
	return f.File.Sync()
}

// failures collects what a Disk reports.
type failures struct {
	mu   sync.Mutex
	seen []WriteFailure
}

func (f *failures) add(w WriteFailure) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen = append(f.seen, w)
}

func (f *failures) get() []WriteFailure {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]WriteFailure(nil), f.seen...)
}

// observed is openDisk with its failures collected and a volume that has
// room, unless a test says otherwise.
func observed(t *testing.T, capacity int64) (*Disk, string, *failures) {
	t.Helper()
	d, dir := openDisk(t, capacity)
	d.statfs = func(string) (int64, int64, error) { return 1 << 40, 1 << 41, nil }
	fs := &failures{}
	d.OnWriteFailure(fs.add)
	return d, dir, fs
}

// readConcurrently reads every reader to its end at once, as several GETs
// do (a fill that stepped aside waits for the slowest).
func readConcurrently(rs ...io.ReadCloser) ([][]byte, []error) {
	out, errs := make([][]byte, len(rs)), make([]error, len(rs))
	var wg sync.WaitGroup
	for i, r := range rs {
		wg.Go(func() {
			defer r.Close()
			out[i], errs[i] = io.ReadAll(r)
		})
	}
	wg.Wait()
	return out, errs
}

func wantOneFailure(t *testing.T, d *Disk, fs *failures, reason string, cause error) {
	t.Helper()
	waitFor(t, "the failure reported", func() bool { return len(fs.get()) > 0 })
	waitFor(t, "no fill running", func() bool { return d.Stats().Filling == 0 })
	got := fs.get()
	if len(got) != 1 || got[0].Reason != reason {
		t.Fatalf("reported %+v, want one with reason %s", got, reason)
	}
	if cause == nil && got[0].Err != nil || cause != nil && !errors.Is(got[0].Err, cause) {
		t.Fatalf("reported cause %v, want %v", got[0].Err, cause)
	}
}

// A write that fails mid-fill (ENOSPC after a short write) abandons the
// cache copy only: readers that joined before and after the failure point
// get every byte, the partial file goes, the failure is reported once, and
// the next Open fills afresh.
func TestDiskWriteFailureStepsAside(t *testing.T) {
	d, dir, fs := observed(t, 1<<30)
	data := testData(256<<10, 20)
	key := digestKey(20)
	d.create = func(dir, pattern string) (file, error) {
		f, err := os.CreateTemp(dir, pattern)
		if err != nil {
			return nil, err
		}
		return &failingFile{File: f, left: 100_001, err: syscall.ENOSPC}, nil
	}
	fill, release, calls := gatedFill(data)
	var rs []io.ReadCloser
	for _, off := range []int64{0, 5000, 100_000, 200_000} {
		r, hit, err := d.Open(t.Context(), key, int64(len(data)), off, fill)
		if err != nil || hit {
			t.Fatalf("open at %d: hit %v, %v", off, hit, err)
		}
		rs = append(rs, r)
	}
	close(release)
	got, errs := readConcurrently(rs...)
	for i, off := range []int64{0, 5000, 100_000, 200_000} {
		if errs[i] != nil || !bytes.Equal(got[i], data[off:]) {
			t.Fatalf("reader at %d: %d bytes, err %v; want %d bytes", off, len(got[i]), errs[i], len(data)-int(off))
		}
	}
	wantOneFailure(t, d, fs, ReasonNoSpace, syscall.ENOSPC)
	if calls.Load() != 1 {
		t.Fatalf("%d fills, want one shared", calls.Load())
	}
	if names := dirNames(t, dir); len(names) != 0 || d.Contains(key) {
		t.Fatalf("left %v (cached %v) after stepping aside", names, d.Contains(key))
	}
	if s := d.Stats(); s.WriteFailures != 1 || s.FillErrors != 0 {
		t.Fatalf("stats %+v", s)
	}
	d.create = createTemp
	good, _ := countingFill(data)
	r, _, err := d.Open(t.Context(), key, int64(len(data)), 0, good)
	if err != nil {
		t.Fatal(err)
	}
	if b := readAll(t, r); !bytes.Equal(b, data) {
		t.Fatal("refill after stepping aside did not deliver")
	}
	waitFor(t, "the refill kept", func() bool { return d.Contains(key) })
}

// An entry that cannot be created (a read-only volume) is streamed from
// memory to its reader, from any offset; a prefill is dropped, reported.
func TestDiskCreateFailureStepsAside(t *testing.T) {
	d, dir, fs := observed(t, 1<<30)
	d.create = func(string, string) (file, error) {
		return nil, &os.PathError{Op: "open", Path: "x", Err: syscall.EROFS}
	}
	data := testData(300<<10, 21)
	key := digestKey(21)
	for _, off := range []int64{0, 77_777, int64(len(data))} {
		fill, calls := countingFill(data)
		r, _, err := d.Open(t.Context(), key, int64(len(data)), off, fill)
		if err != nil {
			t.Fatal(err)
		}
		if b := readAll(t, r); !bytes.Equal(b, data[off:]) || calls.Load() != 1 {
			t.Fatalf("offset %d: %d bytes from %d fills", off, len(b), calls.Load())
		}
	}
	waitFor(t, "three reports", func() bool { return len(fs.get()) == 3 })
	for _, f := range fs.get() {
		if f.Reason != ReasonReadOnly || !errors.Is(f.Err, syscall.EROFS) {
			t.Fatalf("reported %+v", f)
		}
	}
	fill, calls := countingFill(data)
	d.Prefill(t.Context(), digestKey(22), int64(len(data)), fill)
	waitFor(t, "the prefill reported", func() bool { return len(fs.get()) == 4 })
	if calls.Load() != 0 || len(dirNames(t, dir)) != 0 {
		t.Fatalf("a prefill with no file ran (%d) or left files", calls.Load())
	}
}

// A fill that stepped aside and then fails its check gives no reader a
// complete body: the last byte still waits for the verdict.
func TestDiskStepAsideKeepsLastByte(t *testing.T) {
	d, _, fs := observed(t, 1<<30)
	d.create = func(string, string) (file, error) { return nil, syscall.EIO }
	data := testData(64<<10, 23)
	errBad := errors.New("digest mismatch")
	fill := func(ctx context.Context, w io.Writer) error {
		writeAll(w, data)
		return errBad
	}
	r, _, err := d.Open(t.Context(), digestKey(23), int64(len(data)), 0, fill)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(r)
	r.Close()
	if !errors.Is(err, errBad) || len(b) >= len(data) {
		t.Fatalf("read %d of %d bytes, err %v; want the fill's error before the last byte", len(b), len(data), err)
	}
	wantOneFailure(t, d, fs, ReasonIO, syscall.EIO)
}

// Readers that leave do not hold up the ones that stay; with none left the
// fill stops, as a prefill that steps aside does at once.
func TestDiskStepAsideReadersLeave(t *testing.T) {
	d, dir, _ := observed(t, 1<<30)
	d.create = func(dir, pattern string) (file, error) {
		f, err := os.CreateTemp(dir, pattern)
		if err != nil {
			return nil, err
		}
		return &failingFile{File: f, left: 8192, err: syscall.EIO}, nil
	}
	data := testData(512<<10, 24)
	key := digestKey(24)
	fill, release, _ := gatedFill(data)
	stays, _, err := d.Open(t.Context(), key, int64(len(data)), 0, fill)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	goesAway, _, _ := d.Open(ctx, key, int64(len(data)), 0, fill)
	closes, _, _ := d.Open(t.Context(), key, int64(len(data)), 0, fill)
	close(release)
	stayed := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(stays)
		stays.Close()
		stayed <- b
	}()
	cancel() // goesAway never read: its context's end lets the fill go on
	if _, err := io.ReadFull(closes, make([]byte, 20_000)); err != nil {
		t.Fatal(err)
	}
	closes.Close()
	if b := <-stayed; !bytes.Equal(b, data) {
		t.Fatalf("the remaining reader got %d of %d bytes", len(b), len(data))
	}
	goesAway.Close()

	// A prefill has no reader: once its write fails it stops.
	stopped := make(chan error, 1)
	d.Prefill(t.Context(), digestKey(25), int64(len(data)), func(ctx context.Context, w io.Writer) error {
		err := writeAll(w, data)
		stopped <- err
		return err
	})
	if err := <-stopped; !errors.Is(err, errNoReaders) {
		t.Fatalf("prefill fill got %v, want errNoReaders", err)
	}
	waitFor(t, "no fill running", func() bool { return d.Stats().Filling == 0 })
	if names := dirNames(t, dir); len(names) != 0 {
		t.Fatalf("files left: %v", names)
	}
}

// A sync that fails after every byte was served keeps no entry and is
// reported; the reader was not affected.
func TestDiskSyncFailure(t *testing.T) {
	d, dir, fs := observed(t, 1<<30)
	d.create = func(dir, pattern string) (file, error) {
		f, err := os.CreateTemp(dir, pattern)
		if err != nil {
			return nil, err
		}
		return &failingFile{File: f, left: 1 << 40, syncErr: syscall.EIO}, nil
	}
	data := testData(32<<10, 26)
	fill, _ := countingFill(data)
	r, _, err := d.Open(t.Context(), digestKey(26), int64(len(data)), 0, fill)
	if err != nil {
		t.Fatal(err)
	}
	if b := readAll(t, r); !bytes.Equal(b, data) {
		t.Fatal("short read")
	}
	wantOneFailure(t, d, fs, ReasonIO, syscall.EIO)
	if names := dirNames(t, dir); len(names) != 0 || d.Contains(digestKey(26)) {
		t.Fatalf("left %v after a failed sync", names)
	}
}

// volume fakes a small volume of total bytes whose use is what dir holds
// plus other.
func volume(t *testing.T, d *Disk, dir string, total, other int64) *int {
	t.Helper()
	calls := new(int)
	d.statfs = func(string) (int64, int64, error) {
		*calls++
		used := other
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if fi, err := e.Info(); err == nil {
				used += fi.Size()
			}
		}
		return total - used, total, nil
	}
	return calls
}

// The cache keeps the volume's margin free: it evicts the least valuable
// entries when that makes room, and declines (streaming from memory, no
// file) when even all of them would not. One Statfs per admission.
func TestDiskFreeSpaceMargin(t *testing.T) {
	d, dir, fs := observed(t, 1<<30)
	const total, entry = 10 << 20, 100 << 10 // margin 1 MiB
	// Room for two entries above the margin, not three.
	statfs := volume(t, d, dir, total, total-(1<<20)-250<<10)
	put := func(seed uint64) {
		t.Helper()
		data := testData(entry, seed)
		fill, _ := countingFill(data)
		r, _, err := d.Open(t.Context(), digestKey(seed), entry, 0, fill)
		if err != nil {
			t.Fatal(err)
		}
		if b := readAll(t, r); !bytes.Equal(b, data) {
			t.Fatalf("entry %d: short read", seed)
		}
		waitFor(t, "no fill running", func() bool { return d.Stats().Filling == 0 })
	}
	put(30)
	put(31)
	if !d.Contains(digestKey(30)) || !d.Contains(digestKey(31)) {
		t.Fatal("entries within the margin not kept")
	}
	put(32)
	if d.Contains(digestKey(30)) || !d.Contains(digestKey(31)) || !d.Contains(digestKey(32)) {
		t.Fatalf("want the oldest evicted for room: %v", dirNames(t, dir))
	}
	if s := d.Stats(); s.Evictions != 1 || *statfs != 3 {
		t.Fatalf("evictions %d, statfs calls %d; want 1 and 3", s.Evictions, *statfs)
	}

	// Larger than what evicting everything would free: declined, and the
	// entries stay.
	big := testData(400<<10, 33)
	fill, _ := countingFill(big)
	r, _, err := d.Open(t.Context(), digestKey(33), int64(len(big)), 0, fill)
	if err != nil {
		t.Fatal(err)
	}
	if b := readAll(t, r); !bytes.Equal(b, big) {
		t.Fatal("declined entry: short read")
	}
	wantOneFailure(t, d, fs, ReasonDeclined, nil)
	if s := d.Stats(); s.Declined != 1 || s.Entries != 2 || d.Contains(digestKey(33)) {
		t.Fatalf("stats %+v", s)
	}
	if len(dirNames(t, dir)) != 2 {
		t.Fatalf("files %v", dirNames(t, dir))
	}
}

// A fill under way holds its room: a second one is judged with what the
// first has still to write.
func TestDiskMarginCountsFillsUnderWay(t *testing.T) {
	d, dir, fs := observed(t, 1<<30)
	const total, entry = 10 << 20, 100 << 10
	volume(t, d, dir, total, total-(1<<20)-150<<10) // room for one
	a := testData(entry, 40)
	fillA, release, _ := gatedFill(a)
	ra, _, err := d.Open(t.Context(), digestKey(40), entry, 0, fillA)
	if err != nil {
		t.Fatal(err)
	}
	b := testData(entry, 41)
	fillB, _ := countingFill(b)
	rb, _, err := d.Open(t.Context(), digestKey(41), entry, 0, fillB)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, rb); !bytes.Equal(got, b) {
		t.Fatal("declined fill: short read")
	}
	close(release)
	if got := readAll(t, ra); !bytes.Equal(got, a) {
		t.Fatal("admitted fill: short read")
	}
	wantOneFailure(t, d, fs, ReasonDeclined, nil)
	waitFor(t, "the first kept", func() bool { return d.Contains(digestKey(40)) })
}

// On a real full volume (a 1 MiB tmpfs the margin check is told is large),
// a fill runs into ENOSPC and still serves every byte. Needs root.
func TestDiskFullTmpfs(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", dir).CombinedOutput(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("mount tmpfs: %v: %s", err, out)
		}
		t.Skipf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", dir).Run() })
	cdir := filepath.Join(dir, "cache")
	d, err := OpenDisk(cdir, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	d.statfs = func(string) (int64, int64, error) { return 1 << 40, 1 << 41, nil }
	fs := &failures{}
	d.OnWriteFailure(fs.add)
	data := testData(3<<20, 50)
	fill, release, _ := gatedFill(data)
	r1, _, err := d.Open(t.Context(), digestKey(50), int64(len(data)), 0, fill)
	if err != nil {
		t.Fatal(err)
	}
	r2, _, err := d.Open(t.Context(), digestKey(50), int64(len(data)), 2<<20, fill)
	if err != nil {
		t.Fatal(err)
	}
	close(release)
	got, errs := readConcurrently(r1, r2)
	if errs[0] != nil || errs[1] != nil || !bytes.Equal(got[0], data) || !bytes.Equal(got[1], data[2<<20:]) {
		t.Fatalf("read %d and %d bytes (%v, %v)", len(got[0]), len(got[1]), errs[0], errs[1])
	}
	wantOneFailure(t, d, fs, ReasonNoSpace, syscall.ENOSPC)
	if names := dirNames(t, cdir); len(names) != 0 {
		t.Fatalf("left %v", names)
	}
}
