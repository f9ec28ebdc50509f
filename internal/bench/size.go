package bench

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseSize parses a byte size such as "512", "64KiB", "1MiB", "2GiB" or
// "10MB" (decimal). Units are case-insensitive; the number must be a positive
// integer.
func ParseSize(s string) (int64, error) {
	// Binary units are the norm for blob sizes; decimal ones are accepted
	// because people type them. "b" comes last: it ends every other suffix.
	units := [...]struct {
		suffix string
		mult   int64
	}{
		{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30},
		{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9},
		{"b", 1},
	}
	t := strings.ToLower(strings.TrimSpace(s))
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("invalid size %q: want a positive integer with an optional unit (B, KiB, MiB, GiB, KB, MB, GB)", s)
	}
	if n > (1<<62)/mult {
		return 0, fmt.Errorf("invalid size %q: too large", s)
	}
	return n * mult, nil
}

// ParseSizes parses a comma-separated list of sizes ("1MiB,64MiB,512MiB").
func ParseSizes(s string) ([]int64, error) {
	var out []int64
	for _, part := range strings.Split(s, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		n, err := ParseSize(part)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("invalid size list %q: no sizes", s)
	}
	return out, nil
}

// FormatSize prints n in the largest binary unit that divides it exactly,
// so that ParseSize(FormatSize(n)) == n.
func FormatSize(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return strconv.FormatInt(n>>30, 10) + "GiB"
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + "MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + "KiB"
	default:
		return strconv.FormatInt(n, 10) + "B"
	}
}
