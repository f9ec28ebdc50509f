package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteTable prints r as readable tables.
func WriteTable(w io.Writer, r Result) error {
	where := "external server"
	if r.LocalServer {
		where = "server started by the bench"
	}
	fmt.Fprintf(w, "registry %s (%s), repository %s, %s, %d CPUs\n", r.URL, where, r.Repository, r.GoVersion, r.CPUs)
	fmt.Fprintf(w, "MB/s = 10^6 bytes/s; push/sha256 = median push MB/s / median sha256 MB/s of the same bytes\n\n")

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "size\toperation\truns\tbest MB/s\tmedian MB/s\tpush/sha256")
	for _, b := range r.Blobs {
		rows := []struct {
			name  string
			t     Throughput
			ratio string
		}{
			{"sha256 (baseline)", b.SHA256, ""},
			{"push (chunked-stream)", b.PushChunked, fmt.Sprintf("%.2f", b.PushChunkedPerSHA256)},
			{"push (chunked PATCHes)", b.PushPatches, fmt.Sprintf("%.2f", b.PushPatchesPerSHA256)},
			{"push (monolithic PUT)", b.PushMonolithic, fmt.Sprintf("%.2f", b.PushMonolithicPerSHA256)},
			{"push (monolithic + manifest)", b.PushImage, fmt.Sprintf("%.2f", b.PushImagePerSHA256)},
			{"pull", b.Pull, ""},
		}
		for _, row := range rows {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%.1f\t%.1f\t%s\n", b.SizeText, row.name, row.t.Runs, row.t.BestMBps, row.t.MedianMBps, row.ratio)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Manifests) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "requests\tcount\tclients\treq/s\tp50 ms\tp99 ms\tmax ms")
	for _, m := range r.Manifests {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%.3f\t%.3f\t%.3f\n", m.Name, m.Requests, m.Concurrency, m.ReqPerSec, m.P50Ms, m.P99Ms, m.MaxMs)
	}
	return tw.Flush()
}

// WriteJSON prints r as one JSON object.
func WriteJSON(w io.Writer, r Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
