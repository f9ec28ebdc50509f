package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/bench/dataset"
	"github.com/cairn-registry/cairn/internal/dedup"
	"github.com/cairn-registry/cairn/internal/dedup/pack"
	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/meta/bolt"
	"github.com/cairn-registry/cairn/internal/storage/driver/filesystem"
)

const followUsage = `usage: cairn-lab follow [--profile small|full] [--cache DIR] [--work DIR] [--workers N] [--procs 1,2] [--repeat N] [--keep] [--cpuprofile FILE]

Measures rebuild-by-following (storage.dedup.packs.parses, issue 27) on the
production path, in this process: for parses off and on, every layer of the
Debian dataset is stored intact in a filesystem store of its own with a bbolt
metadata store and processed by a dedup.Worker in mode full (--workers at
once), then restored cold (no preconstruct cache) through dedup.Source, the
pack store and recompress.RebuildFollowing, digest checked. Prints per
setting: worker wall and CPU time, storage ratio and stored bytes, the share
of each compress/flate level-6 layer's input its recipe's copies cover, and
restore MB/s per producer under each GOMAXPROCS of --procs, and what keeping
the original compressed segments no other layer's files are in would give
(unshared.go). Restores of the two settings alternate layer by layer, each
first on every other layer, so that load on a shared machine falls on both
alike.`

// followSetting is one store processed with parses off or on.
type followSetting struct {
	Parses  bool    `json:"parses"`
	Wall    float64 `json:"workerWallSecs"`
	CPU     float64 `json:"workerCPUSecs"`
	Ratio   float64 `json:"ratio"`
	Stored  int64   `json:"storedBytes"`
	Files   int64   `json:"fileBytes"`
	Recipes int64   `json:"recipeBytes"`
	// Dead is what packs hold that no file uses: files written twice.
	Dead int64 `json:"deadBytes"`
	// Coverage is, per compress/flate level-6 layer, the share of its
	// uncompressed input its copies cover.
	Coverage []float64 `json:"coverage"`
	// Layers are the level-6 layers' figures behind Coverage.
	Layers []followLayer `json:"layers"`
	// Gaps are where those layers' input copies do not cover lies;
	// GapBits what the original's tokens there take (gapbits.go).
	Gaps    gapKinds `json:"gaps"`
	GapBits gapBits  `json:"gapBits"`
	// SpanFormats is what their uncovered tokens take as spans written
	// otherwise (chainspans.go).
	SpanFormats spanFormats `json:"spanFormats"`
	// Unshared is what keeping unshared segments would give (unshared.go).
	Unshared unsharedFigures `json:"unshared"`
	// Restore is MB/s of blob bytes per producer and GOMAXPROCS.
	Restore map[string]map[int]float64 `json:"restoreMBps"`

	eng   *dedup.Engine
	store *bolt.Store
	dir   string
}

// followLayer is one compress/flate level-6 layer's coverage.
type followLayer struct {
	Digest   string  `json:"digest"`
	TarBytes int64   `json:"tarBytes"`
	Restarts int     `json:"restarts"`
	Copies   int     `json:"copies"`
	Share    float64 `json:"share"`
	// Spanned is the share of its input its spans cover (the original's
	// tokens in the recipe), SpanBytes what they take there.
	Spanned   float64 `json:"spanned"`
	SpanBytes int     `json:"spanBytes"`
}

// runFollow runs `cairn-lab follow [flags]`.
func runFollow(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("cairn-lab follow", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	profile := fs.String("profile", "small", "dataset size: small or full")
	cache := fs.String("cache", "", "deb cache `DIR` (default "+dataset.DefaultCacheDir()+")")
	work := fs.String("work", "", "work `DIR`; the dataset is built in DIR/dataset (default <cache>/work-<profile>)")
	workers := fs.Int("workers", 2, "layers processed at once")
	procs := fs.String("procs", "1,2", "comma-separated GOMAXPROCS `VALUES` the restores are timed under (none: no restores)")
	repeat := fs.Int("repeat", 1, "timed restores per layer and setting, best kept")
	asJSON := fs.Bool("json", false, "print one JSON object instead of tables")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the timed restores to `FILE`")
	keep := fs.Bool("keep", false, "keep the processed stores in the work DIR and reuse them on the next run (worker figures are then not measured)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, followUsage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return nil
		}
		return fmt.Errorf("%w: follow: %s", errUsage, strings.Join(strings.Fields(err.Error()), " "))
	}
	p := dataset.Profile(*profile)
	if fs.NArg() > 0 || (p != dataset.ProfileSmall && p != dataset.ProfileFull) || *workers < 1 || *repeat < 1 {
		return fmt.Errorf("%w: follow: want --profile small|full, --workers and --repeat >= 1, no arguments", errUsage)
	}
	var procList []int // "none": coverage and storage only
	for _, f := range strings.Split(strings.TrimPrefix(*procs, "none"), ",") {
		if f == "" && *procs == "none" {
			break
		}
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("%w: follow: --procs %q: want values >= 1 such as 1,2", errUsage, *procs)
		}
		procList = append(procList, n)
	}
	unlock, err := lockWork(cache, work, p)
	if err != nil {
		return fmt.Errorf("follow: %w", err)
	}
	defer unlock()
	ds, err := dataset.Build(ctx, dataset.Options{Profile: p, CacheDir: *cache, WorkDir: filepath.Join(*work, "dataset"), Log: stderr})
	if err != nil {
		return fmt.Errorf("follow: %w", err)
	}
	var settings []*followSetting
	defer func() {
		for _, s := range settings {
			s.eng.Close()
			s.store.Close()
			if !*keep {
				os.RemoveAll(s.dir)
			}
		}
	}()
	for _, parses := range []bool{false, true} {
		s, err := ingest(ctx, ds, *work, parses, *workers, *keep, stderr)
		if s != nil {
			settings = append(settings, s)
		}
		if err != nil {
			return fmt.Errorf("follow: %w", err)
		}
	}
	stop, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return fmt.Errorf("follow: %w", err)
	}
	defer stop()
	producers := map[string]string{} // layer digest → producer
	for _, n := range procList {
		if err := timeFollowRestores(ctx, ds, settings, n, *repeat, producers); err != nil {
			return fmt.Errorf("follow: %w", err)
		}
		fmt.Fprintf(stderr, "follow: restores timed under GOMAXPROCS %d\n", n)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(settings)
	}
	return writeFollow(stdout, ds, settings, procList, producers)
}

// ingest stores every layer of ds intact in a new store under work and
// processes them all in mode full, timing the worker. With keep, the store
// lives in a directory of work named after the setting, and one a former
// run completed is reused as it is.
func ingest(ctx context.Context, ds *dataset.Dataset, work string, parses bool, workers int, keep bool, log io.Writer) (*followSetting, error) {
	dir := filepath.Join(work, fmt.Sprintf("follow-parses-%v", parses))
	done := filepath.Join(dir, "processed")
	_, err := os.Stat(done)
	reuse := keep && err == nil
	switch {
	case reuse:
	case keep:
		if err := os.RemoveAll(dir); err != nil {
			return nil, err
		}
		err = os.MkdirAll(dir, 0o755)
	default:
		dir, err = os.MkdirTemp(work, "follow-")
	}
	if err != nil {
		return nil, err
	}
	drv, err := filesystem.New(filepath.Join(dir, "store"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	store, err := bolt.Open(filepath.Join(dir, "meta.db"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	eng, err := dedup.New(drv, store, dedup.Options{Mode: dedup.ModeFull, Workers: workers, Parses: parses, TempDir: filepath.Join(dir, "spool")}, nil, nil)
	if err != nil {
		store.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	s := &followSetting{Parses: parses, eng: eng, store: store, dir: dir, Restore: map[string]map[int]float64{}}
	if !reuse {
		if err := process(ctx, ds, drv, eng, workers, s); err != nil {
			return s, err
		}
		if keep {
			if err := os.WriteFile(done, nil, 0o644); err != nil {
				return s, err
			}
		}
	}
	if err := coverage(ctx, ds, drv, eng, s); err != nil {
		return s, err
	}
	fmt.Fprintf(log, "follow: parses %v: %d layers processed in %.1fs (CPU %.1fs, reused %v), ratio %.3f\n", parses, len(ds.Layers), s.Wall, s.CPU, reuse, s.Ratio)
	return s, nil
}

// process stores every layer of ds intact through drv and has eng process
// them, workers at once, timing it into s.
func process(ctx context.Context, ds *dataset.Dataset, drv *filesystem.Driver, eng *dedup.Engine, workers int, s *followSetting) error {
	for _, l := range ds.Layers {
		if err := putBlob(ctx, drv, l); err != nil {
			return err
		}
	}
	start, cpu0 := time.Now(), cpuTime()
	jobs := make(chan *dataset.Layer)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for l := range jobs {
				if _, err := eng.Process(ctx, l.Digest, dedup.ModeFull); err != nil {
					errs <- fmt.Errorf("layer %s: %w", l.Digest, err)
					return
				}
			}
		}()
	}
	for _, l := range ds.Layers {
		jobs <- l
	}
	close(jobs)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	s.Wall, s.CPU = time.Since(start).Seconds(), (cpuTime() - cpu0).Seconds()
	return nil
}

// coverage fills in s's storage figures and level-6 coverage.
func coverage(ctx context.Context, ds *dataset.Dataset, drv *filesystem.Driver, eng *dedup.Engine, s *followSetting) (err error) {
	st, err := eng.Stats(ctx)
	if err != nil {
		return err
	}
	s.Ratio, s.Stored, s.Files, s.Recipes = st.Ratio, st.StoredBytes.Total, st.StoredBytes.Files, st.StoredBytes.Recipes
	s.Dead = st.Files.DeadBytes
	recipes := map[digest.Digest]*dedup.Recipe{}
	files, err := pack.NewStore(drv, s.store, pack.Options{}, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err == nil {
			s.Unshared, err = measureUnshared(ctx, ds, recipes, s.store)
		}
	}()
	for _, l := range ds.Layers {
		b, err := drv.GetContent(ctx, layout.BlobRecipe(l.Digest))
		if err != nil {
			continue // irreproducible: kept intact
		}
		r, err := dedup.DecodeRecipe(l.Digest, b)
		if err != nil {
			return err
		}
		recipes[l.Digest] = r
		if len(r.Compression.Members) == 0 || r.Compression.Members[0].Encoder != "stdlib-gzip/6" {
			continue
		}
		var in int64
		fl := followLayer{Digest: l.Digest.Encoded()[:12], TarBytes: l.TarSize}
		for _, m := range r.Compression.Members {
			in += m.Size
			fl.Restarts += len(m.Restarts)
			fl.Copies += len(m.Copies)
			fl.SpanBytes += len(m.Spans)
		}
		fl.Share = float64(r.Compression.CopiedBytes()) / float64(max(in, 1))
		fl.Spanned = float64(r.Compression.SpannedBytes()) / float64(max(in, 1))
		g, err := gapsOf(r)
		if err != nil {
			return err
		}
		s.Gaps.add(g)
		if err := s.GapBits.measure(ctx, l, r, files); err != nil {
			return fmt.Errorf("layer %s: %w", l.Digest, err)
		}
		if err := s.SpanFormats.measure(l, r); err != nil {
			return fmt.Errorf("layer %s: span formats: %w", l.Digest, err)
		}
		s.Coverage = append(s.Coverage, fl.Share)
		s.Layers = append(s.Layers, fl)
	}
	return nil
}

// putBlob stores layer l's blob intact, as a push would.
func putBlob(ctx context.Context, d *filesystem.Driver, l *dataset.Layer) error {
	f, err := l.Open()
	if err != nil {
		return err
	}
	defer f.Close()
	w, err := d.Writer(ctx, layout.BlobData(l.Digest), false)
	if err != nil {
		return err
	}
	defer w.Close()
	if _, err := io.Copy(w, f); err != nil {
		w.Cancel(ctx)
		return err
	}
	return w.Commit(ctx)
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// timeFollowRestores restores every deduplicated layer from each setting
// under GOMAXPROCS procs, the settings alternating per layer, and records
// MB/s per producer.
func timeFollowRestores(ctx context.Context, ds *dataset.Dataset, settings []*followSetting, procs, repeat int, producers map[string]string) error {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
	type sum struct {
		bytes int64
		secs  float64
	}
	sums := make([]map[string]*sum, len(settings))
	for i := range sums {
		sums[i] = map[string]*sum{}
	}
	for k, l := range ds.Layers {
		// Each setting goes first on every other layer: whatever the
		// first restore leaves behind (a warmer page cache, a heap to
		// collect) falls on both alike.
		for j := range settings {
			i := (j + k) % len(settings)
			s := settings[i]
			b, err := s.eng.Source.BlobSize(ctx, l.Digest)
			if err != nil {
				continue // irreproducible: intact, no restore
			}
			p := producerName(l.Compression)
			best := time.Duration(-1)
			// Labelled, so that a --cpuprofile tells settings and
			// producers apart (pprof -tagfocus).
			pprof.Do(ctx, pprof.Labels("parses", fmt.Sprint(s.Parses), "producer", p), func(ctx context.Context) {
				for range repeat {
					var t time.Duration
					if t, err = timeOpenBlob(ctx, s.eng, l); err != nil {
						return
					}
					if best < 0 || t < best {
						best = t
					}
				}
			})
			if err != nil {
				return fmt.Errorf("restore %s (parses %v): %w", l.Digest, s.Parses, err)
			}
			producers[string(l.Digest)] = p
			for _, k := range []string{p, "all"} {
				if sums[i][k] == nil {
					sums[i][k] = &sum{}
				}
				sums[i][k].bytes += b
				sums[i][k].secs += best.Seconds()
			}
		}
	}
	for i, s := range settings {
		for p, v := range sums[i] {
			if s.Restore[p] == nil {
				s.Restore[p] = map[int]float64{}
			}
			s.Restore[p][procs] = float64(v.bytes) / 1e6 / v.secs
		}
	}
	return nil
}

// timeOpenBlob times a GET's restore of layer l: OpenBlob read to its end
// (it holds its last byte back until the digest matched).
func timeOpenBlob(ctx context.Context, eng *dedup.Engine, l *dataset.Layer) (time.Duration, error) {
	start := time.Now()
	rc, err := eng.Source.OpenBlob(ctx, l.Digest, 0)
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	n, err := io.Copy(io.Discard, rc)
	if err == nil && n != l.Size {
		err = fmt.Errorf("restored %d bytes, want %d", n, l.Size)
	}
	return time.Since(start), err
}

// producerName groups layers by what compressed them.
func producerName(c dataset.Compression) string {
	switch c {
	case dataset.GzipStdlib:
		return "compress/gzip 6"
	case dataset.GzipStdlibBestSpeed:
		return "compress/gzip 1"
	}
	return string(c)
}

// writeFollow prints the settings side by side.
func writeFollow(w io.Writer, ds *dataset.Dataset, settings []*followSetting, procs []int, producers map[string]string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "dataset %s: %d layers\n\n", ds.Profile, len(ds.Layers))
	fmt.Fprintf(&b, "%-34s", "")
	for _, s := range settings {
		fmt.Fprintf(&b, "%16s", fmt.Sprintf("parses %v", s.Parses))
	}
	row := func(name string, f func(s *followSetting) string) {
		fmt.Fprintf(&b, "\n%-34s", name)
		for _, s := range settings {
			fmt.Fprintf(&b, "%16s", f(s))
		}
	}
	row("worker wall", func(s *followSetting) string { return fmt.Sprintf("%.1f s", s.Wall) })
	row("worker CPU", func(s *followSetting) string { return fmt.Sprintf("%.1f s", s.CPU) })
	row("storage ratio", func(s *followSetting) string { return fmt.Sprintf("%.3f", s.Ratio) })
	row("stored (files + recipes)", func(s *followSetting) string { return fmt.Sprintf("%.1f MB", float64(s.Stored)/1e6) })
	row("  files", func(s *followSetting) string { return fmt.Sprintf("%.1f MB", float64(s.Files)/1e6) })
	row("  recipes", func(s *followSetting) string { return fmt.Sprintf("%.2f MB", float64(s.Recipes)/1e6) })
	row("  dead in packs", func(s *followSetting) string { return fmt.Sprintf("%.2f MB", float64(s.Dead)/1e6) })
	cov := func(q float64) func(s *followSetting) string {
		return func(s *followSetting) string {
			if len(s.Coverage) == 0 {
				return "-"
			}
			c := slices.Sorted(slices.Values(s.Coverage))
			return fmt.Sprintf("%.1f%%", 100*c[min(len(c)-1, int(q*float64(len(c))))])
		}
	}
	row("level-6 copies: min", cov(0))
	row("level-6 copies: median", cov(0.5))
	row("level-6 copies: max", cov(1))
	row("level-6 copies: mean", func(s *followSetting) string {
		var t float64
		for _, c := range s.Coverage {
			t += c
		}
		return fmt.Sprintf("%.1f%%", 100*t/float64(max(len(s.Coverage), 1)))
	})
	row("level-6 spans: mean", func(s *followSetting) string {
		var t float64
		for _, l := range s.Layers {
			t += l.Spanned
		}
		return fmt.Sprintf("%.1f%%", 100*t/float64(max(len(s.Layers), 1)))
	})
	row("level-6 spans in recipes", func(s *followSetting) string {
		var n int
		for _, l := range s.Layers {
			n += l.SpanBytes
		}
		return fmt.Sprintf("%.2f MB", float64(n)/1e6)
	})
	ps := slices.Sorted(func(yield func(string) bool) {
		seen := map[string]bool{}
		for _, p := range producers {
			if !seen[p] && !yield(p) {
				return
			}
			seen[p] = true
		}
	})
	for _, p := range append(ps, "all") {
		for _, n := range procs {
			row(fmt.Sprintf("restore %s, %d core(s), MB/s/core", p, n), func(s *followSetting) string {
				return fmt.Sprintf("%.1f", s.Restore[p][n]/float64(n))
			})
		}
	}
	b.WriteString("\n")
	for _, s := range settings {
		writeGaps(&b, s)
		writeGapBits(&b, s)
		writeSpanFormats(&b, s)
		writeUnshared(&b, s)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
