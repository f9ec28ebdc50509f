package recompress

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestCopyList: a member's copies go to its JSON as a copy list and come
// back the same; copies written as JSON by earlier recipes still read; a
// copy list that does not decode leaves the member without copies.
func TestCopyList(t *testing.T) {
	m := Member{Encoder: "stdlib-gzip/6", Size: 1 << 20, Copies: []Copy{
		{In: 512, Size: 700, Source: 0, First: 0, Count: 300},
		{In: 1300, Size: 40, Source: 0, First: 320, Count: 12},
		{In: 5000, Size: 9000, Source: 3, First: 0, Count: 2000},
		{In: 14000, Size: 100, Source: 2, First: 77, Count: 100},
		{In: 14100, Size: 64, Source: 3, First: 2000, Count: 9},
	}}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), `"copies"`) || !strings.Contains(string(b), `"copyList"`) {
		t.Fatalf("member JSON %s: want a copy list and no JSON copies", b)
	}
	var got Member
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Copies, m.Copies) || got.Size != m.Size || got.Encoder != m.Encoder {
		t.Fatalf("read back %+v, want %+v", got, m)
	}

	old := `{"encoder":"stdlib-gzip/6","size":1048576,"copies":[{"i":512,"b":700,"s":0,"f":0,"n":300}]}`
	if err := json.Unmarshal([]byte(old), &got); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Copies, m.Copies[:1]) {
		t.Fatalf("JSON copies read as %+v", got.Copies)
	}

	list, err := encodeCopies(m.Copies)
	if err != nil {
		t.Fatal(err)
	}
	list[len(list)-1] ^= 0xff // zstd's checksum
	damaged, _ := json.Marshal(map[string]any{"encoder": "stdlib-gzip/6", "size": 1 << 20, "copyList": list})
	if err := json.Unmarshal(damaged, &got); err != nil || got.Copies != nil {
		t.Fatalf("a damaged copy list read as %+v (%v), want no copies", got.Copies, err)
	}
	if _, err := decodeCopies(list, 1<<20); !errors.Is(err, errBadCopies) {
		t.Fatalf("damaged copy list: %v", err)
	}
}
