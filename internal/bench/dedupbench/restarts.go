package dedupbench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"

	"github.com/cairn-registry/cairn/internal/bench/dataset"
	"github.com/cairn-registry/cairn/internal/dedup/recompress/deflate"
)

// RestartFigures is the research figure behind parallel compress/gzip
// restores: how many of a real layer's block boundaries restart its
// encoder exactly (recompress/deflate's package doc tells how), per level.
type RestartFigures struct {
	Levels []RestartLevel `json:"levels"`
}

// RestartLevel counts, over the dataset's compress/gzip layers of one
// level, the block boundaries (the last block of a layer left out), those
// whose window index the walk of the blob knows (levels 2–9 need it; level
// 1 does not), and those from which a segment to the next boundary,
// compressed alone, equals the blob's bits: the points a restore can use.
type RestartLevel struct {
	Level      int   `json:"level"`
	Layers     int   `json:"layers"`
	TarBytes   int64 `json:"tarBytes"`
	Boundaries int   `json:"boundaries"`
	Known      int   `json:"knownWindow"`
	Exact      int   `json:"exact"`
	// Points is how many restart points the layers' recipes keep (one per
	// MiB or so, of the exact ones).
	Points int `json:"points"`
}

// measureRestarts tries every block boundary of every compress/gzip layer
// of ds as a restart point, using every core.
func measureRestarts(ctx context.Context, ds *dataset.Dataset, logf func(string, ...any)) (*RestartFigures, error) {
	levels := map[dataset.Compression]int{dataset.GzipStdlib: 6, dataset.GzipStdlibBestSpeed: 1}
	byLevel := map[int]*RestartLevel{}
	for _, l := range ds.Layers {
		level, ok := levels[l.Compression]
		if !ok {
			continue
		}
		st := byLevel[level]
		if st == nil {
			st = &RestartLevel{Level: level}
			byLevel[level] = st
		}
		if err := restartLayer(ctx, l, level, st); err != nil {
			return nil, fmt.Errorf("dedupbench: restarts of %s: %w", l.Digest, err)
		}
		logf("restarts: %s (level %d): %d of %d boundaries so far restart exactly", l.Description, level, st.Exact, st.Boundaries)
	}
	f := &RestartFigures{}
	for _, level := range []int{6, 1} {
		if st := byLevel[level]; st != nil {
			f.Levels = append(f.Levels, *st)
		}
	}
	return f, nil
}

// restartLayer adds layer l's figures to st.
func restartLayer(ctx context.Context, l *dataset.Layer, level int, st *RestartLevel) error {
	blob, err := readAll(l.Open)
	if err != nil {
		return err
	}
	tar, err := readAll(l.OpenTar)
	if err != nil {
		return err
	}
	// compress/gzip writes a bare 10-byte header and an 8-byte trailer.
	if len(blob) < 18 || blob[3] != 0 {
		return fmt.Errorf("not a bare compress/gzip member")
	}
	body := blob[10 : len(blob)-8]
	var bs []deflate.Boundary
	if _, _, err := deflate.Walk(bytes.NewReader(body), func(b deflate.Boundary) { bs = append(bs, b) }); err != nil {
		return err
	}
	// The walk ends at the last block; segments need a successor.
	var tries []int
	for i := 0; i+1 < len(bs); i++ {
		if bs[i+1].In+deflate.Lookahead > int64(len(tar)) {
			break
		}
		st.Boundaries++
		if level == 1 || bs[i].Win >= 0 {
			st.Known++
			tries = append(tries, i)
		}
	}
	exact := make([]bool, len(bs))
	var wg sync.WaitGroup
	next := make(chan int)
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				from, to := bs[i], bs[i+1]
				if level == 1 {
					from.Win = 0
				}
				seg, err := deflate.CompressSegment(level, from, tar[:from.In], tar[from.In:to.In+deflate.Lookahead], &to)
				exact[i] = err == nil && bytes.Equal(seg, bitsOf(body, from.Bit, to.Bit))
			}
		}()
	}
	for _, i := range tries {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	last := int64(0)
	for _, i := range tries {
		if !exact[i] {
			continue
		}
		st.Exact++
		if b := bs[i]; b.In-last >= 1<<20 && b.In+1<<19 <= int64(len(tar)) {
			st.Points++
			last = b.In
		}
	}
	st.Layers++
	st.TarBytes += int64(len(tar))
	return nil
}

// bitsOf is the stream's bits from bit from to bit to as CompressSegment
// writes them: from the byte holding bit from, the bits before it and
// after to zero.
func bitsOf(body []byte, from, to int64) []byte {
	out := append([]byte(nil), body[from/8:(to+7)/8]...)
	deflate.MaskSegment(out, from, to)
	return out
}

func readAll(open func() (*os.File, error)) ([]byte, error) {
	f, err := open()
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}
