package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// progressLine is where a long command shows its progress: one line redrawn
// every 200 ms on a terminal, else a report every 10 seconds (a log is no
// place for a redrawn line).
type progressLine struct {
	w        io.Writer
	tty      bool
	interval time.Duration
	drawn    bool // a line is on the terminal, not ended yet
}

func newProgressLine(w io.Writer) progressLine {
	p := progressLine{w: w, interval: 10 * time.Second}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.tty, p.interval = true, 200*time.Millisecond
		}
	}
	return p
}

// draw replaces the terminal's line.
func (p *progressLine) draw(format string, args ...any) {
	fmt.Fprintf(p.w, "\r\x1b[K"+format, args...)
	p.drawn = true
}

// finish ends a drawn line, so that what follows starts on its own.
func (p *progressLine) finish() {
	if p.tty && p.drawn {
		fmt.Fprintln(p.w)
	}
}

// bar draws done of total as a bar of 30 cells (blank while total is
// unknown).
func bar[N int | int64](done, total N) string {
	const width = 30
	if total <= 0 {
		return strings.Repeat(" ", width)
	}
	n := int(min(done, total) * width / total)
	return strings.Repeat("#", n) + strings.Repeat("-", width-n)
}
