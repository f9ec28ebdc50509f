package dataset

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// formatVersion is part of every layer key: bump it when the tar layout
// changes, so layers cached in a work dir by older code are not reused.
const formatVersion = "dataset-v1"

// builder holds the state of one Build.
type builder struct {
	apt  *apt
	work string
	logf func(format string, args ...any)

	debs map[string]pkg // every package used, by deb file name

	mu    sync.Mutex
	tars  map[string]*tarResult // by layer key
	blobs map[blobKey]*Layer
}

// layerPlan is one distinct layer tar.
type layerPlan struct {
	key  string // hash of everything the tar's bytes depend on
	desc string
	// pkgs are the packages this layer installs; installed are all the
	// packages of the image up to and including this layer (dpkg's status).
	pkgs, installed []pkg
	app             *appSpec
	epoch           time.Time
}

type imagePlan struct {
	spec   imageSpec
	layers []*layerPlan
	comps  []Compression
}

type blobKey struct {
	layer string
	comp  Compression
}

// plan resolves every layer's package set and the versions to use.
func (b *builder) plan(ctx context.Context, sp []imageSpec) ([]imagePlan, error) {
	sets, err := b.resolveAll(ctx, sp)
	if err != nil {
		return nil, err
	}
	var olderNames []string
	for _, s := range sp {
		for _, l := range s.layers {
			if l.older {
				for _, p := range sets[setKey(l)] {
					olderNames = append(olderNames, p.Name)
				}
			}
		}
	}
	older := map[string]string{}
	if len(olderNames) > 0 {
		slices.Sort(olderNames)
		if older, err = b.apt.olderVersions(ctx, slices.Compact(olderNames)); err != nil {
			return nil, err
		}
	}

	b.debs = make(map[string]pkg)
	byKey := make(map[string]*layerPlan)
	var plans []imagePlan
	for _, s := range sp {
		ip := imagePlan{spec: s}
		var installed []pkg
		for _, l := range s.layers {
			lp, err := planLayer(l, sets[setKey(l)], installed, older)
			if err != nil {
				return nil, fmt.Errorf("dataset: %s:%s: %w", s.repo, s.tag, err)
			}
			if prev, ok := byKey[lp.key]; ok {
				lp = prev
			} else {
				byKey[lp.key] = lp
			}
			installed = lp.installed
			for _, p := range lp.pkgs {
				b.debs[p.debFile()] = p
			}
			comp := l.comp
			if comp == "" {
				comp = s.builder.compression()
			}
			if _, err := mediaType(s.builder, comp); err != nil {
				return nil, fmt.Errorf("dataset: %s:%s: %w", s.repo, s.tag, err)
			}
			ip.layers = append(ip.layers, lp)
			ip.comps = append(ip.comps, comp)
		}
		plans = append(plans, ip)
	}
	all := make([]pkg, 0, len(b.debs))
	for _, p := range b.debs {
		all = append(all, p)
	}
	slices.SortFunc(all, func(x, y pkg) int { return strings.Compare(x.debFile(), y.debFile()) })
	if err := b.apt.fetch(ctx, all); err != nil {
		return nil, err
	}
	return plans, nil
}

func setKey(l layerSpec) string {
	return strconv.FormatBool(l.resolve) + ":" + strings.Join(slices.Sorted(slices.Values(l.pkgs)), " ")
}

// resolveAll asks apt, a few requests at a time, for each distinct package
// request: the dependency closure, or just the candidates for fixed lists.
func (b *builder) resolveAll(ctx context.Context, sp []imageSpec) (map[string][]pkg, error) {
	reqs := make(map[string]layerSpec)
	for _, s := range sp {
		for _, l := range s.layers {
			if l.app == nil {
				reqs[setKey(l)] = l
			}
		}
	}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs []error
		sem  = make(chan struct{}, 4)
		sets = make(map[string][]pkg)
	)
	for k, l := range reqs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			var ps []pkg
			var err error
			if l.resolve {
				ps, err = b.apt.resolve(ctx, l.pkgs)
			} else {
				ps, err = b.apt.candidates(ctx, l.pkgs)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			sets[k] = ps
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, errs[0]
	}
	return sets, nil
}

// planLayer fixes what one layer holds given the packages below it.
func planLayer(l layerSpec, set, below []pkg, older map[string]string) (*layerPlan, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n", formatVersion)
	lp := &layerPlan{}
	if l.app != nil {
		a := l.app
		fmt.Fprintf(h, "app %s %s %d %d\n", a.name, a.version, a.files, a.changed)
		lp.app = a
		lp.installed = below
		lp.desc = fmt.Sprintf("COPY %s %s /app/%s", a.name, a.version, a.name)
	} else {
		have := make(map[string]bool, len(below))
		for _, p := range below {
			have[p.Name] = true
		}
		for _, p := range set {
			if have[p.Name] {
				continue
			}
			if v, ok := older[p.Name]; ok && l.older {
				p.Version = v
			}
			lp.pkgs = append(lp.pkgs, p)
		}
		if len(lp.pkgs) == 0 {
			return nil, fmt.Errorf("layer %v installs nothing new", l.pkgs)
		}
		lp.installed = append(slices.Clone(below), lp.pkgs...)
		slices.SortFunc(lp.installed, func(x, y pkg) int { return strings.Compare(x.Name, y.Name) })
		for _, p := range lp.pkgs {
			fmt.Fprintf(h, "pkg %s\n", p.debFile())
		}
		// dpkg's status lists every installed package, so it differs
		// with the layers below.
		for _, p := range lp.installed {
			fmt.Fprintf(h, "installed %s\n", p.debFile())
		}
		verb := "apt-get install"
		if l.older {
			verb = "apt-get install (before the last updates)"
		}
		lp.desc = fmt.Sprintf("RUN %s %s", verb, strings.Join(l.pkgs, " "))
		if len(lp.desc) > 200 {
			lp.desc = lp.desc[:197] + "..."
		}
	}
	sum := h.Sum(nil)
	lp.key = hex.EncodeToString(sum[:16])
	// A fixed date plus up to a year from the key: deterministic, and
	// different layers get different times, as real builds do.
	secs := int64(sum[16])<<16 | int64(sum[17])<<8 | int64(sum[18])
	lp.epoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(secs%(365*24*3600)) * time.Second)
	return lp, nil
}

// debStats returns the number and total size of the debs used.
func (b *builder) debStats() (int, int64) {
	var n int64
	for f := range b.debs {
		if fi, err := os.Stat(filepath.Join(b.apt.cache, "debs", f)); err == nil {
			n += fi.Size()
		}
	}
	return len(b.debs), n
}

// buildLayers builds each distinct tar, then each distinct (tar,
// compression) blob, in parallel.
func (b *builder) buildLayers(ctx context.Context, plans []imagePlan) error {
	for _, d := range []string{"tars", "blobs"} {
		if err := os.MkdirAll(filepath.Join(b.work, d), 0o755); err != nil {
			return fmt.Errorf("dataset: %w", err)
		}
	}
	b.tars = make(map[string]*tarResult)
	b.blobs = make(map[blobKey]*Layer)
	var tarJobs []*layerPlan
	var blobJobs []blobKey
	seenTar := map[string]bool{}
	seenBlob := map[blobKey]bool{}
	for _, p := range plans {
		for i, l := range p.layers {
			if !seenTar[l.key] {
				seenTar[l.key] = true
				tarJobs = append(tarJobs, l)
			}
			k := blobKey{l.key, p.comps[i]}
			if !seenBlob[k] {
				seenBlob[k] = true
				blobJobs = append(blobJobs, k)
			}
		}
	}
	start := time.Now()
	if err := parallel(ctx, len(tarJobs), func(i int) error {
		r, err := b.buildTar(ctx, tarJobs[i])
		if err != nil {
			return err
		}
		b.mu.Lock()
		b.tars[tarJobs[i].key] = r
		b.mu.Unlock()
		return nil
	}); err != nil {
		return err
	}
	b.logf("dataset: %d layer tars in %s", len(tarJobs), time.Since(start).Round(time.Millisecond))
	start = time.Now()
	if err := parallel(ctx, len(blobJobs), func(i int) error {
		k := blobJobs[i]
		l, err := b.compress(ctx, b.tars[k.layer], k.comp)
		if err != nil {
			return err
		}
		b.mu.Lock()
		b.blobs[k] = l
		b.mu.Unlock()
		return nil
	}); err != nil {
		return err
	}
	b.logf("dataset: %d layer blobs in %s", len(blobJobs), time.Since(start).Round(time.Millisecond))
	return nil
}

// parallel runs f(0..n-1) on GOMAXPROCS goroutines and returns the first
// error (in job order), so a failure reads as one line.
func parallel(ctx context.Context, n int, f func(i int) error) error {
	jobs := make(chan int)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for range min(n, runtime.GOMAXPROCS(0)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if err := ctx.Err(); err != nil {
					errs[i] = err
					continue
				}
				errs[i] = f(i)
			}
		}()
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
