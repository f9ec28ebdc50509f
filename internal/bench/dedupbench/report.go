package dedupbench

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
)

// WriteJSON prints r as one JSON object.
func WriteJSON(w io.Writer, r *Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func mb(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }

// WriteTable prints r as readable tables, one per figure measured.
func WriteTable(w io.Writer, r *Result) error {
	fmt.Fprintf(w, "dataset %s: %d images, %d distinct layer blobs (%s), %d layer tars (%s), from %d debs (%s); %s, %d CPUs\n",
		r.Profile, r.Images, r.Layers, mb(r.BlobBytes), r.Tars, mb(r.TarBytes), r.Debs, mb(r.DebBytes), r.GoVersion, r.CPUs)
	fmt.Fprintf(w, "MB = 10^6 bytes; figures are from this one run\n")
	if r.Storage != nil || r.Latency != nil || r.Prefetch != nil {
		parses := "off"
		if r.Parses {
			parses = "on (files of 4 KiB and more stored as parse frames, not zstd)"
		}
		fmt.Fprintf(w, "registry parts run with storage.dedup.packs.parses %s\n", parses)
	}

	if s := r.Storage; s != nil {
		fmt.Fprintf(w, "\n(a) storage, against the compressed layers (logical %s)\n", mb(s.LogicalBytes))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "stored as\tbytes\tratio")
		fmt.Fprintf(tw, "layer blobs, every image separately\t%s\t%.2f\n", mb(r.ImageBytes), ratio(s.LogicalBytes, r.ImageBytes))
		fmt.Fprintf(tw, "layer blobs, shared (plain registry)\t%s\t1.00\n", mb(s.LogicalBytes))
		fmt.Fprintf(tw, "file-level dedup, files uncompressed\t%s\t%.2f\n", mb(s.FileLevelBytes), s.FileLevelRatio)
		fmt.Fprintf(tw, "file-level dedup, zstd on unique files\t%s\t%.2f\n", mb(s.StoredBytes), s.ZstdRatio)
		if err := tw.Flush(); err != nil {
			return err
		}
		st := s.Stats
		fmt.Fprintf(w, "unique files %d (%d shared by several layers), %s uncompressed, %s zstd; recipes %s; intact copies %s\n",
			st.Files.Unique, st.Files.Shared, mb(st.Files.Bytes), mb(st.Files.StoredBytes), mb(st.StoredBytes.Recipes), mb(st.StoredBytes.Intact))
		fmt.Fprintf(w, "storage root on disk: %s apparent, %s allocated (du), %.1f%% more\n",
			mb(s.Apparent), mb(s.OnDisk), 100*(ratio(s.OnDisk, s.Apparent)-1))
		fmt.Fprintf(w, "\n(b) layers reproduced: %d of %d (%.0f%%); irreproducible %d, intact %d, pending %d\n",
			s.Deduplicated, s.Layers, 100*s.Reproduced, s.Irreproducible, s.Intact, s.Pending)
		if len(st.Encoders) > 0 {
			var parts []string
			for _, k := range slices.Sorted(maps.Keys(st.Encoders)) {
				parts = append(parts, fmt.Sprintf("%s %d", k, st.Encoders[k]))
			}
			fmt.Fprintf(w, "recipes by encoder: %s\n", strings.Join(parts, ", "))
		}
		fmt.Fprintf(w, "ingest (cairn dedup run): %s of layers in %.1f s, %.1f CPU s: %.1f MB/s, %.1f MB/s per core\n",
			mb(s.LogicalBytes), s.IngestSeconds, s.IngestCPUSeconds, s.IngestMBps, s.IngestMBpsPerCore)
	}

	if rs := r.Restarts; rs != nil {
		fmt.Fprintf(w, "\nrestart points: block boundaries of the compress/gzip layers tried as restart points\n")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "level\tlayers\ttar\tboundaries\twindow known\trestart exactly\tpoints kept (~1/MiB)")
		for _, l := range rs.Levels {
			fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%d\t%d (%.2f%%)\t%d\n", l.Level, l.Layers, mb(l.TarBytes), l.Boundaries, l.Known, l.Exact, 100*ratio(int64(l.Exact), int64(l.Boundaries)), l.Points)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}

	if c := r.Restore; c != nil {
		fmt.Fprintf(w, "\n(c) restore per producer against the same encoder alone on the plain tar and an intact read of the blob (filesystem driver); in process, under each GOMAXPROCS, best of %d per layer\n", c.Repeat)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "producer\tencoders\tlayers\tblob\tprocs\trestore MB/s\tencoder MB/s\tintact MB/s\trestore/encoder\trestore/intact\tassemble MB/s (tar)")
		derived := false
		for _, p := range c.Producers {
			name := p.Producer
			if p.Derived {
				name += " *"
				derived = true
			}
			for i, run := range p.Runs {
				head := fmt.Sprintf("%s\t%s\t%d\t%s", name, strings.Join(p.Encoders, ","), p.Layers, mb(p.BlobBytes))
				if i > 0 {
					head = "\t\t\t"
				}
				fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%.0f\t%.2f\t%.3f\t%.1f\n", head, run.Procs, run.RestoreMBps, run.CompressorMBps, run.IntactMBps, run.RestorePerCompressor, run.RestorePerIntact, run.AssembleMBps)
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if derived {
			fmt.Fprintln(w, "* with blobs no image pushes: the compress/gzip default layers' tars, compressed by the producer")
		}
		fmt.Fprintf(w, "file store: %d unique files, %s; irreproducible blobs: %d %s\n", c.StoreFiles, mb(c.StoreBytes), len(c.Irreproducible), strings.Join(c.Irreproducible, "; "))
	}

	if l := r.Latency; l != nil {
		fmt.Fprintf(w, "\n(d) layer GET latency, p50 over the %d layers restored on GET (%s); %d served otherwise, left out\n", l.Layers, mb(l.Bytes), l.Others)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "layer served\tp50 ms\tp99 ms\tmax ms\tMB/s (all bytes / all time)")
		for _, row := range []struct {
			name string
			t    GetTimes
		}{{"intact (dedup off)", l.Intact}, {"deduplicated, cold", l.Cold}, {"preconstruct cache hit", l.Hit}} {
			fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t%.1f\n", row.name, row.t.P50Ms, row.t.P99Ms, row.t.MaxMs, row.t.MBps)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if l.Cold.MBps > 0 {
			fmt.Fprintf(w, "all cold GETs take %.2fx the time of the same layers' intact GETs\n", l.Intact.MBps/l.Cold.MBps)
		}
	}

	if p := r.Prefetch; p != nil {
		fmt.Fprintf(w, "\n(e) cache hits replaying %d pull-once + %d always-repull clients, %d rounds, %d-%d ms from manifest to layers; prefetch cache %s\n",
			p.PullOnce, p.Repull, p.Rounds, p.DelayMs[0], p.DelayMs[1], p.PrefetchSize)
		fmt.Fprintln(w, "mode full rebuilds deduplicated layers on GET (preconstruct cache, on disk); mode index keeps the intact copies (prefetch cache, in memory); warmed: layers the predictor filled")
		fmt.Fprintln(w, "hit: on a rebuilt-layer GET, no rebuild started; on a predicted-layer GET (after the same client's manifest GET), the cache held the layer (preconstruct: or was rebuilding it)")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "mode\tpredictor\tmanifests\tlayers\tpreconstruct hit/miss\thit ratio\tfirst round\tpredicted: preconstruct\tprefetch\tfirst round\twarmed\tlayer p50 ms\tp99 ms")
		for _, run := range p.Runs {
			on := "off"
			if run.Predictor {
				on = "on"
			}
			a, f := run.All, run.First
			// Mode index rebuilds nothing: its preconstruct ratios are
			// over no GETs, shown as "-".
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d/%d\t%s\t%s\t%s\t%s\t%s\t%d\t%.1f\t%.1f\n", run.Mode, on, run.ManifestGets, run.LayerGets,
				a.Preconstruct.Hits, a.Preconstruct.Misses,
				ratioCell(a.HitRatio, a.Preconstruct.Hits+a.Preconstruct.Misses+a.Prefetch.Hits+a.Prefetch.Misses),
				ratioCell(f.HitRatio, f.Preconstruct.Hits+f.Preconstruct.Misses+f.Prefetch.Hits+f.Prefetch.Misses),
				predictedCell(a.PreconstructPredicted), predictedCell(a.PrefetchPredicted),
				ratioCell(f.PredictedHitRatio, f.PreconstructPredicted.Hits+f.PreconstructPredicted.Misses+f.PrefetchPredicted.Hits+f.PrefetchPredicted.Misses),
				a.Preconstruct.Predicted+a.Prefetch.Predicted, run.LayerP50Ms, run.LayerP99Ms)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if len(p.Pooled) > 0 && len(p.Runs) > len(p.Pooled) {
			fmt.Fprintln(w, "layer GET latency over every replay of a mode and predictor setting")
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "mode\tpredictor\treplays\tlayers\tp50 ms\tp99 ms")
			for _, pl := range p.Pooled {
				on := "off"
				if pl.Predictor {
					on = "on"
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.1f\t%.1f\n", pl.Mode, on, pl.Replays, pl.LayerGets, pl.P50Ms, pl.P99Ms)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
		}
	}

	if len(r.Errors) > 0 {
		fmt.Fprintln(w)
		for _, k := range slices.Sorted(maps.Keys(r.Errors)) {
			fmt.Fprintf(w, "%s: not measured: %s\n", k, r.Errors[k])
		}
	}
	return nil
}

// ratioCell prints a hit ratio, or "-" when it is over no lookups.
func ratioCell(r float64, lookups int64) string {
	if lookups == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", r)
}

func predictedCell(c predictedCounts) string {
	return fmt.Sprintf("%d/%d %s", c.Hits, c.Misses, ratioCell(c.HitRatio, c.Hits+c.Misses))
}
