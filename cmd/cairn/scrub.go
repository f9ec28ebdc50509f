package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/cairn-registry/cairn/internal/meta"
	"github.com/cairn-registry/cairn/internal/scrub"
	"github.com/cairn-registry/cairn/internal/webui"
)

const scrubUsage = `usage: cairn scrub [--config FILE] [--root DIR] [--repair] [--json] [--recipes all|sample|none]
                  [--sample N] [--seed N] [--workers N] [--read-links] [--quiet]

Checks the whole store and reports what is wrong, one line per finding (kind,
path, digest, detail), then a summary:
  - every blob's data against its digest (corrupt-blob);
  - every unique dedup file, decompressed, against its digest (corrupt-file):
    objects of their own under cairn/files, and every pack under cairn/packs,
    read from its own index (damaged-pack when that cannot be read) and
    streamed, each file in it checked (corrupt-file names the pack and the
    file's offset);
  - every dedup recipe: it must parse (bad-recipe) and every file it names be
    stored where the metadata store locates it (missing-file); with --recipes
    all every recipe is rebuilt, with sample (the default) --sample of them
    chosen by --seed, and the rebuild must reproduce the blob (rebuild-failed);
  - every repository: _layers links name stored blobs (missing-blob, also a
    deduplicated layer whose recipe is gone), revisions have manifest data
    (missing-manifest), tags name revisions (dangling-tag), what each
    manifest names is linked as its push required (missing-link), referrers
    links name revisions (dangling-referrer); with --read-links every link's
    content must be the digest its path names (bad-link). Upload sessions
    are not looked at.
It reads with flat listings and one streamed read per object (per pack), never a
stat per file. It opens the dedup metadata store as cairn gc does, to locate
files in packs: a bolt store is refused while a cairn serve holds it (stop it
first); a Redis store is shared with running servers. Without a metadata store
configured, packs are verified all the same, but layers whose files are in
packs are not rebuilt (the report says so once), nor packed files repaired.

--repair never deletes anything. It writes a missing or corrupt dedup file anew
from a layer whose intact data holds it: into a new pack, which the metadata
store then locates it in (the old bytes are dead, for gc to reclaim), or as an
object of its own for a file with no location (stores from before packs). It
rebuilds a corrupt blob that has a recipe, writes back a missing revision link (a dangling tag's, an index
child's), referrers link or _layers link when what it names is stored, and with
--read-links rewrites a link holding the wrong digest. The report says what was
repaired and what remains.

Exit status: 0 nothing wrong (or everything repaired), 1 findings remain,
2 bad usage, configuration or storage failure.

Keys it reads (the whole file is loaded and checked as serve does; an unknown
key stops it): the storage driver (storage.filesystem.rootdirectory, s3, gcs,
azure), storage.dedup.metadata and redis.* (to locate files in packs),
validation.manifests (what a manifest's push required to be linked), log.*.`

// runScrub runs `cairn scrub`: findings and the summary (or one JSON
// report) on stdout, progress on stderr.
func runScrub(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, done, err := parseScrubFlags(args, stdout)
	if done || err != nil {
		return err
	}
	cfg, _, err := loadConfig(f.configPath, f.root, nil)
	if err != nil {
		return exitError{2, err}
	}
	if err := checkStored(cfg, "scrub", "; nothing to check"); err != nil {
		return exitError{2, err}
	}
	d, err := newDriver(ctx, cfg)
	if err != nil {
		return exitError{2, err}
	}
	// The metadata store locates files in packs; as for gc, a bolt store
	// held by a running serve is refused rather than waited for.
	store, err := openMeta(ctx, cfg, time.Second, newLogger(stderr, cfg.Log))
	if errors.Is(err, meta.ErrLocked) {
		return exitError{2, errors.New("scrub: the dedup metadata store is in use by a running cairn serve; stop it, or share a Redis metadata store (storage.dedup.metadata.redis)")}
	}
	if err != nil {
		return exitError{2, fmt.Errorf("scrub: %w", err)}
	}
	log := newLogger(stderr, cfg.Log)
	opts := f.opts
	v := cfg.Validation.Manifests
	opts.Log, opts.Packs = log, packOptions(cfg)
	opts.Sparse = v.Sparse
	opts.IndexChildrenOptional = v.Indexes.Platforms != "" && v.Indexes.Platforms != "all"
	if store != nil {
		defer store.Close()
		// Locations an incomplete index lacks would read as missing files.
		if err := ensureIndexed(ctx, "scrub", d, store, false, f.quiet, stderr); err != nil {
			return exitError{2, err}
		}
		opts.Meta = store
	}
	finish := func() {}
	if !f.quiet {
		p := newScrubProgress(stderr, log)
		opts.Progress, opts.ProgressInterval, finish = p.print, p.interval, p.finish
	}
	rep, err := scrub.Run(ctx, d, opts)
	finish() // end the progress line before the report
	if err != nil {
		return exitError{2, errors.New(oneLine(err.Error()))}
	}
	return f.report(rep, stdout)
}

// scrubFlags is what `cairn scrub`'s command line says; opts holds the
// run's options the flags set.
type scrubFlags struct {
	configPath, root string
	asJSON, quiet    bool
	opts             scrub.Options
}

// parseScrubFlags parses `cairn scrub`'s command line; done after -h. The
// sample's seed is random unless --seed is given.
func parseScrubFlags(args []string, stdout io.Writer) (f scrubFlags, done bool, err error) {
	fs := flag.NewFlagSet("cairn scrub", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&f.configPath, "config", "", "configuration `file` (distribution's config.yml keys)")
	fs.StringVar(&f.root, "root", "", "filesystem storage root `directory` (overrides the storage section)")
	fs.BoolVar(&f.opts.Repair, "repair", false, "repair what can be repaired from intact copies; never deletes")
	fs.BoolVar(&f.asJSON, "json", false, "print the report as one JSON object")
	recipes := fs.String("recipes", string(scrub.RecipesSample), "recipes to rebuild: all, sample or none (every recipe's files are checked in all three)")
	fs.IntVar(&f.opts.Sample, "sample", scrub.DefaultSample, "how many recipes --recipes sample rebuilds")
	fs.Uint64Var(&f.opts.Seed, "seed", 0, "seed choosing the sample (default random; the report prints it)")
	fs.IntVar(&f.opts.Workers, "workers", scrub.DefaultWorkers, "objects verified in parallel (tags and manifests: four times as many small reads)")
	fs.BoolVar(&f.opts.ReadLinks, "read-links", false, "also read every link's content (one GET per link)")
	fs.BoolVar(&f.quiet, "quiet", false, "print no progress")
	if done, err := parseFlags(fs, args, "scrub", scrubUsage, stdout); done || err != nil {
		return f, true, err
	}
	if f.opts.Recipes, err = scrub.ParseRecipeMode(*recipes); err != nil {
		return f, true, fmt.Errorf("%w: scrub: --recipes %q is not all, sample or none", errUsage, *recipes)
	}
	if f.opts.Sample < 1 || f.opts.Workers < 1 {
		return f, true, fmt.Errorf("%w: scrub: --sample and --workers must be >= 1", errUsage)
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if !set["seed"] {
		f.opts.Seed = rand.Uint64()
	}
	return f, false, nil
}

// report prints the report (findings and a summary, or JSON); findings
// that remain are exit status 1.
func (f scrubFlags) report(rep *scrub.Report, stdout io.Writer) error {
	if f.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return exitError{2, err}
		}
	} else {
		writeScrubReport(stdout, rep)
	}
	if n := rep.Remaining(); n > 0 {
		return exitError{1, fmt.Errorf("scrub: %d findings remain", n)}
	}
	return nil
}

// writeScrubReport prints one line per finding and a summary.
func writeScrubReport(w io.Writer, r *scrub.Report) {
	for _, f := range r.Findings {
		line := fmt.Sprintf("%s %s", f.Kind, f.Path)
		if f.Digest != "" {
			line += " " + f.Digest
		}
		if f.Ref != "" {
			line += " (ref " + f.Ref + ")"
		}
		line += ": " + f.Detail
		switch {
		case f.Repaired:
			line += " [repaired: " + f.Repair + "]"
		case f.Repair != "":
			line += " [not repaired: " + f.Repair + "]"
		}
		fmt.Fprintln(w, line)
	}
	c := r.Counts
	total := r.Remaining() + r.Repaired
	state := fmt.Sprintf("%d findings", total)
	if r.Repair {
		state += fmt.Sprintf(", %d repaired, %d remain", r.Repaired, r.Remaining())
	}
	if r.Dropped > 0 {
		state += fmt.Sprintf(" (%d not listed)", r.Dropped)
	}
	fmt.Fprintf(w, "scrub: %s in %.2fs\n", state, r.Seconds)
	fmt.Fprintf(w, "  read:     %d blobs (%s), %d dedup files (%s; %d packs, %s stored), %d recipes (%d rebuilt, %s)\n",
		c.Blobs, webui.HumanBytes(c.BlobBytes), c.Files, webui.HumanBytes(c.FileBytes), c.Packs, webui.HumanBytes(c.PackBytes),
		c.Recipes, c.Rebuilt, webui.HumanBytes(c.RebuiltBytes))
	fmt.Fprintf(w, "            %d repositories, %d manifests, %d tags, %d links\n", c.Repositories, c.Manifests, c.Tags, c.Links)
	if r.Recipes == scrub.RecipesSample {
		fmt.Fprintf(w, "  recipes:  a sample of up to %d rebuilt (--seed %d repeats it)\n", r.Sample, r.Seed)
	}
	if c.DeadPacks+c.DeadFiles > 0 {
		fmt.Fprintf(w, "  dead:     %d packs and %d files in packs no location names (gc reclaims them; not read)\n", c.DeadPacks, c.DeadFiles)
	}
	if !r.Metadata && c.Packs > 0 {
		fmt.Fprintln(w, "  metadata: none configured: files in packs could not be located")
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "  note:     %s\n", n)
	}
	if c.Vanished > 0 {
		fmt.Fprintf(w, "  vanished: %d objects deleted between listing and reading (not findings)\n", c.Vanished)
	}
	if total > 0 {
		fmt.Fprintf(w, "  findings: %s\n", counts(r.ByKind))
	}
	fmt.Fprintf(w, "  storage:  %s\n", counts(r.Requests))
}

// scrubProgress draws a live line on a terminal and logs counts every 10
// seconds otherwise.
type scrubProgress struct {
	progressLine
	log *slog.Logger
}

func newScrubProgress(w io.Writer, log *slog.Logger) *scrubProgress {
	return &scrubProgress{newProgressLine(w), log}
}

func (p *scrubProgress) print(pr scrub.Progress) {
	c := pr.Counts
	bytes := c.BlobBytes + c.FileBytes + c.RebuiltBytes
	rate := float64(bytes) / max(pr.Elapsed.Seconds(), 0.001) / (1 << 20)
	if !p.tty {
		if pr.Phase == "done" {
			return // the report follows
		}
		p.log.Info("scrub", "phase", pr.Phase, "blobs", c.Blobs, "files", c.Files, "packs", c.Packs, "recipes", c.Recipes, "rebuilt", c.Rebuilt,
			"repositories", c.Repositories, "manifests", c.Manifests, "bytes", bytes, "mib_per_s", fmt.Sprintf("%.1f", rate),
			"findings", pr.Findings, "elapsed", pr.Elapsed.Round(time.Second))
		return
	}
	p.draw("scrub %-12s %6d listed  %d blobs  %d files  %d packs  %d recipes (%d rebuilt)  %d repos  %d manifests  %s  %.1f MiB/s  %d findings  %s",
		pr.Phase, pr.Listed, c.Blobs, c.Files, c.Packs, c.Recipes, c.Rebuilt, c.Repositories, c.Manifests, webui.HumanBytes(bytes), rate, pr.Findings,
		pr.Elapsed.Round(100*time.Millisecond))
}
