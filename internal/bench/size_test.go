package bench

import (
	"slices"
	"testing"
)

func TestParseSize(t *testing.T) {
	good := map[string]int64{
		"1":       1,
		"512B":    512,
		"64KiB":   64 << 10,
		"1MiB":    1 << 20,
		"512mib":  512 << 20,
		" 2GiB ":  2 << 30,
		"10MB":    10_000_000,
		"3kb":     3000,
		"1GB":     1_000_000_000,
		"100 MiB": 100 << 20,
	}
	for in, want := range good {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "0", "-1MiB", "1.5MiB", "1TiB", "12x", "99999999999GiB"} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
}

func TestParseSizes(t *testing.T) {
	got, err := ParseSizes("1MiB,64MiB, 512MiB,")
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{1 << 20, 64 << 20, 512 << 20}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for _, in := range []string{"", ",", "1MiB,nope"} {
		if _, err := ParseSizes(in); err == nil {
			t.Errorf("ParseSizes(%q): want an error", in)
		}
	}
}

func TestFormatSizeRoundTrips(t *testing.T) {
	cases := map[int64]string{
		1:             "1B",
		1000:          "1000B",
		1 << 10:       "1KiB",
		1536:          "1536B",
		64 << 10:      "64KiB",
		1 << 20:       "1MiB",
		(1 << 20) + 1: "1048577B",
		512 << 20:     "512MiB",
		3 << 30:       "3GiB",
	}
	for n, want := range cases {
		got := FormatSize(n)
		if got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
		if back, err := ParseSize(got); err != nil || back != n {
			t.Errorf("ParseSize(FormatSize(%d)) = %d, %v", n, back, err)
		}
	}
}
