package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/dedup"
)

// TestDedupProgress: off a terminal, a plain line per report and none for
// the end (the summary follows); on one, a bar redrawn in place.
func TestDedupProgress(t *testing.T) {
	var b bytes.Buffer
	p := &dedupProgress{progressLine{w: &b, interval: time.Second}}
	p.print(dedup.RunProgress{Manifests: 4, Layers: 10, Done: 3, Errors: 1, Elapsed: 12 * time.Second})
	p.print(dedup.RunProgress{Manifests: 4, Layers: 10, Done: 10, Final: true})
	if got, want := b.String(), "dedup run: 4 manifests read, 3 of 10 layers done, 1 failed, 12s\n"; got != want {
		t.Fatalf("log lines %q, want %q", got, want)
	}
	b.Reset()
	p = &dedupProgress{progressLine{w: &b, tty: true, interval: time.Millisecond}}
	p.print(dedup.RunProgress{Manifests: 4, Layers: 10, Done: 5, Elapsed: time.Second})
	p.finish()
	if got := b.String(); !strings.HasPrefix(got, "\r\x1b[Kdedup run [###############---------------] 5/10 layers  4 manifests  0 failed  1s") || !strings.HasSuffix(got, "\n") {
		t.Fatalf("terminal line %q", got)
	}
}
