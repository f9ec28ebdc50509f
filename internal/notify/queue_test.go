package notify

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
)

func datas(prefix string, from, to int) [][]byte {
	var out [][]byte
	for i := from; i < to; i++ {
		out = append(out, fmt.Appendf(nil, "%s%d", prefix, i))
	}
	return out
}

func peekAll(t *testing.T, q *Queue, ep string) []string {
	t.Helper()
	items, err := q.Peek(ep, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i, it := range items {
		if i > 0 && it.Seq <= items[i-1].Seq {
			t.Fatalf("sequence %d after %d", it.Seq, items[i-1].Seq)
		}
		out = append(out, string(it.Data))
	}
	return out
}

func strs(b [][]byte) []string {
	var out []string
	for _, x := range b {
		out = append(out, string(x))
	}
	return out
}

// TestQueueOrderBoundRestart: items come back oldest first, per endpoint; a
// full queue keeps the newest max items and reports what it dropped;
// removal takes only what was delivered; everything survives a reopen, and
// new items after it still sort after the old ones.
func TestQueueOrderBoundRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "queue.db")
	q, err := OpenQueue(path, 5)
	if err != nil {
		t.Fatal(err)
	}
	dropped, err := q.Append(map[string][][]byte{"a": datas("a", 0, 3), "b": datas("b", 0, 1)})
	if err != nil || len(dropped) != 0 {
		t.Fatalf("dropped %v, err %v", dropped, err)
	}
	dropped, err = q.Append(map[string][][]byte{"a": datas("a", 3, 8)})
	if err != nil {
		t.Fatal(err)
	}
	if dropped["a"] != 3 || dropped["b"] != 0 {
		t.Fatalf("dropped %v, want a:3", dropped)
	}
	if got, want := peekAll(t, q, "a"), strs(datas("a", 3, 8)); !slices.Equal(got, want) {
		t.Fatalf("a = %v, want %v", got, want)
	}
	if got := peekAll(t, q, "b"); !slices.Equal(got, []string{"b0"}) {
		t.Fatalf("b = %v", got)
	}
	if q.Len("a") != 5 || q.Len("b") != 1 || q.Len("none") != 0 {
		t.Fatalf("lengths a=%d b=%d", q.Len("a"), q.Len("b"))
	}

	first, err := q.Peek("a", 2)
	if err != nil || len(first) != 2 {
		t.Fatalf("peek 2: %v %v", first, err)
	}
	// A seq already pushed out (or never queued) is skipped.
	if err := q.Remove("a", []uint64{first[0].Seq, first[1].Seq, 1}); err != nil {
		t.Fatal(err)
	}
	if got, want := peekAll(t, q, "a"), strs(datas("a", 5, 8)); !slices.Equal(got, want) {
		t.Fatalf("after remove a = %v, want %v", got, want)
	}
	if q.Len("a") != 3 {
		t.Fatalf("len a = %d, want 3", q.Len("a"))
	}

	// The file is locked while open.
	if _, err := OpenQueue(path, 5); !errors.Is(err, ErrQueueLocked) {
		t.Fatalf("second open: %v, want ErrQueueLocked", err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q, err = OpenQueue(path, 5)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if q.Len("a") != 3 || q.Len("b") != 1 {
		t.Fatalf("after reopen a=%d b=%d", q.Len("a"), q.Len("b"))
	}
	if _, err := q.Append(map[string][][]byte{"a": datas("a", 8, 10)}); err != nil {
		t.Fatal(err)
	}
	if got, want := peekAll(t, q, "a"), strs(datas("a", 5, 10)); !slices.Equal(got, want) {
		t.Fatalf("after reopen a = %v, want %v", got, want)
	}
}
