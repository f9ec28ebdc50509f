package pack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cairn-registry/cairn/internal/dedup/layer"
	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// onePack ingests payloads into one pack and returns its id and entries,
// read from the object alone.
func (e *env) onePack(payloads [][]byte) (string, []Entry) {
	e.t.Helper()
	ctx := context.Background()
	e.ingest("l", payloads, 1<<40)
	packs, err := e.meta.ListPacks(ctx, "", 10)
	if err != nil || len(packs) != 1 {
		e.t.Fatalf("packs %v, %v", packs, err)
	}
	id := packs[0].ID
	fi, err := e.d.Stat(ctx, layout.Pack(id))
	if err != nil {
		e.t.Fatal(err)
	}
	entries, _, err := ObjectIndex(ctx, e.d, id, fi.Size)
	if err != nil {
		e.t.Fatal(err)
	}
	return id, entries
}

// verify runs VerifyFrames and returns the outcome of each entry checked,
// by offset.
func (e *env) verify(d driver.Driver, id string, entries []Entry) (map[int64]error, int64, error) {
	e.t.Helper()
	got := map[int64]error{}
	last := int64(-1)
	read, err := VerifyFrames(context.Background(), d, id, entries, func(en Entry, err error) error {
		if en.Offset <= last {
			e.t.Errorf("entry at %d checked after %d", en.Offset, last)
		}
		last = en.Offset
		got[en.Offset] = err
		return nil
	})
	return got, read, err
}

// TestVerifyFrames checks packs of zstd frames, and of parse frames.
func TestVerifyFrames(t *testing.T) {
	for _, level := range []int{0, 6} {
		t.Run(fmt.Sprintf("parses at %d", level), func(t *testing.T) { testVerifyFrames(t, level) })
	}
}

func testVerifyFrames(t *testing.T, parseLevel int) {
	e := newEnv(t, Options{})
	e.parseLevel = parseLevel
	payloads := files(11, 40, 6000)
	// One large file (over smallFile, and 1 MiB or more stored), decoded
	// as a stream, between small ones.
	large := make([]byte, 0, 6<<20)
	r := rand.New(rand.NewPCG(12, 1))
	for len(large) < 6<<20 {
		large = fmt.Appendf(large, "%x\n", r.Uint64())
	}
	payloads = append(payloads[:20], append([][]byte{large}, payloads[20:]...)...)
	id, entries := e.onePack(payloads)
	if len(entries) != len(payloads) {
		t.Fatalf("%d entries, want %d", len(entries), len(payloads))
	}

	// Every frame in one ranged read, entries in any order.
	reversed := make([]Entry, len(entries))
	for i, en := range entries {
		reversed[len(entries)-1-i] = en
	}
	e.d.ranges.Store(0)
	got, read, err := e.verify(e.d, id, reversed)
	last := entries[len(entries)-1]
	if err != nil || len(got) != len(entries) || read != last.Offset+last.Length-entries[0].Offset {
		t.Fatalf("%d checked, %d bytes read, %v", len(got), read, err)
	}
	for off, err := range got {
		if err != nil {
			t.Errorf("frame at %d: %v", off, err)
		}
	}
	if n := e.d.ranges.Load(); n != 1 {
		t.Errorf("%d ranged reads, want 1", n)
	}

	// The first and the last frame, the large one between: two reads.
	e.d.ranges.Store(0)
	if got, _, err := e.verify(e.d, id, []Entry{entries[0], last}); err != nil || len(got) != 2 || got[0] != nil || got[1] != nil {
		t.Fatalf("%v, %v", got, err)
	}
	if n := e.d.ranges.Load(); n != 2 {
		t.Errorf("%d ranged reads across the large file, want 2", n)
	}

	// A flipped byte in one frame, an entry claiming another size: those
	// two fail, the frames after them still verify.
	ctx := context.Background()
	p := layout.Pack(id)
	b, err := e.d.GetContent(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	bad := entries[3]
	b[bad.Offset+bad.Length/2] ^= 0x10
	if err := e.d.PutContent(ctx, p, b); err != nil {
		t.Fatal(err)
	}
	es := append([]Entry(nil), entries...)
	es[5].Size++
	got, _, err = e.verify(e.d, id, es)
	if err != nil || len(got) != len(es) {
		t.Fatalf("%d checked, %v", len(got), err)
	}
	for _, en := range es {
		err := got[en.Offset]
		var fe *FrameError
		switch en.Offset {
		case bad.Offset, es[5].Offset:
			if !errors.Is(err, layer.ErrCorruptFile) || !errors.As(err, &fe) || fe.Entry != en || fe.Pack != id {
				t.Errorf("frame at %d: %v, want a FrameError", en.Offset, err)
			}
		default:
			if err != nil {
				t.Errorf("frame at %d: %v", en.Offset, err)
			}
		}
	}
	if !strings.Contains(got[es[5].Offset].Error(), "decompresses to") {
		t.Errorf("wrong size: %v", got[es[5].Offset])
	}

	// A read failing halfway: the frames checked before it are a prefix,
	// the error is the storage's.
	fail := &failAfter{Driver: e.d, n: (last.Offset + last.Length) / 2}
	got, _, err = e.verify(fail, id, entries)
	if !errors.Is(err, errBroken) || len(got) == 0 || len(got) == len(entries) {
		t.Fatalf("%d of %d checked, %v; want a prefix and the read's error", len(got), len(entries), err)
	}
	for _, en := range entries[:len(got)] {
		if _, ok := got[en.Offset]; !ok {
			t.Fatalf("checked %d frames, not a prefix", len(got))
		}
	}

	// An error from check ends the run with it.
	stop := errors.New("stop")
	if _, err := VerifyFrames(ctx, e.d, id, entries, func(Entry, error) error { return stop }); err != stop {
		t.Fatalf("check's error: %v", err)
	}
	// A pack gone is the storage's not found, nothing checked.
	if _, err := e.d.DeleteFiles(ctx, []string{p}); err != nil {
		t.Fatal(err)
	}
	if got, _, err := e.verify(e.d, id, entries); !errors.Is(err, driver.ErrNotFound) || len(got) != 0 {
		t.Fatalf("gone pack: %d checked, %v", len(got), err)
	}
}

var errBroken = errors.New("connection reset")

// failAfter's ranged reads fail once they pass byte n of the object.
type failAfter struct {
	driver.Driver
	n int64
}

func (f *failAfter) ReadRange(ctx context.Context, p string, off, n int64) (io.ReadCloser, error) {
	rc, err := f.Driver.ReadRange(ctx, p, off, n)
	if err != nil {
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{io.MultiReader(io.LimitReader(rc, max(f.n-off, 0)), errReader{}), rc}, nil
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errBroken }
