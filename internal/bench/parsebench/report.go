package parsebench

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteJSON writes r as one indented JSON object.
func WriteJSON(w io.Writer, r *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes r as three tables: agreement between layers sharing a
// file, stored parses and their exceptions, and block structure.
func WriteText(w io.Writer, r *Report) error {
	var err error
	// table writes a title and rows of tab-separated cells, aligned.
	table := func(title string, rows [][]string) {
		if err != nil {
			return
		}
		if _, err = fmt.Fprintf(w, "%s\n", title); err != nil {
			return
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		for _, row := range rows {
			fmt.Fprintf(tw, "%s\t\n", strings.Join(row, "\t"))
		}
		if err = tw.Flush(); err == nil {
			_, err = fmt.Fprintln(w)
		}
	}

	rows := [][]string{{"producer", "layers", "blob MB", "tar MB", "<4K", "4K-64K", "64K-1M", ">1M", "all", "past 32K"}}
	for _, g := range r.Groups {
		row := []string{g.Name, fmt.Sprint(g.Layers), fmt.Sprintf("%.1f", mb(g.CompressedBytes)), fmt.Sprintf("%.1f", mb(g.TarBytes))}
		for _, a := range g.Shared.Classes {
			row = append(row, cell(a, true))
		}
		rows = append(rows, append(row, cell(g.Shared.Total(), true), cell(g.Shared.Interior, false)))
	}
	table("(a) files two layers of a group share: % of bytes whose tokens agree at the same offset in the file\n"+
		"    (strict | counting equal matches that reach back before the file as agreeing; MB compared)", rows)

	rows = [][]string{{"producer", "<4K", "4K-64K", "64K-1M", ">1M", "past 32K", "layer covered", "whole files",
		"exc runs/MiB", "exc B/MiB", "outside files", "own deflate/zstd"}}
	for _, g := range r.Groups {
		s := g.Stored
		if s == nil {
			rows = append(rows, []string{g.Name, "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-"})
			continue
		}
		row := []string{g.Name}
		for _, a := range s.Classes {
			row = append(row, cell(a, false))
		}
		blobMiB := float64(g.CompressedBytes) / (1 << 20)
		rows = append(rows, append(row, cell(s.Interior, false),
			pct(s.CoveredBytes, g.TarBytes), pct(s.WholeFileBytes, g.TarBytes),
			fmt.Sprintf("%.0f", float64(s.Exceptions.Runs)/blobMiB), fmt.Sprintf("%.0f", float64(s.Exceptions.Size)/blobMiB),
			pct(s.InHeaders.Size, s.Exceptions.Size), ratio(s.DeflateBytes, s.ZstdBytes)))
	}
	table("(b) each file compressed on its own at the producer's settings: % of bytes whose tokens agree with the layer's (MB);\n"+
		"    % of tar bytes covered, in files covered whole; exception list per MiB of blob, % of it outside file contents;\n"+
		"    the group's distinct files as their own raw DEFLATE against zstd frames", rows)

	rows = [][]string{{"producer", "blocks", "dynamic", "fixed", "stored", "boundaries in files", "in shared files", "header B/MiB", "B/dynamic block"}}
	for _, g := range r.Groups {
		b := g.Blocks
		perBlock := "-"
		if b.Dynamic > 0 {
			perBlock = fmt.Sprintf("%.1f", float64(b.HeaderBits)/8/float64(b.Dynamic))
		}
		rows = append(rows, []string{g.Name, fmt.Sprint(b.Blocks), fmt.Sprint(b.Dynamic), fmt.Sprint(b.Fixed), fmt.Sprint(b.Stored),
			pct(int64(b.InFiles), int64(b.Boundaries)), pct(int64(b.InShared), int64(b.Boundaries)),
			fmt.Sprintf("%.0f", float64(b.HeaderBits)/8/(float64(g.CompressedBytes)/(1<<20))), perBlock})
	}
	table("(c) blocks: % of boundaries strictly inside a file's contents, inside a file shared in the group;\n"+
		"    dynamic block headers (3 bits + code lengths) per MiB of blob and per block", rows)
	if err != nil {
		return err
	}
	var dec, enc float64
	for _, g := range r.Groups {
		dec += g.DecodeSecs
		if g.Stored != nil {
			enc += g.Stored.EncodeSecs
		}
	}
	_, err = fmt.Fprintf(w, "%.1fs in all (token decode %.1fs, own parses %.1fs)\n", r.Secs, dec, enc)
	return err
}

func mb(n int64) float64 { return float64(n) / 1e6 }

// cell prints an agreement, with back also AgreeBack's share.
func cell(a Agreement, back bool) string {
	if a.Bytes == 0 {
		return "-"
	}
	if back {
		return fmt.Sprintf("%s | %s (%.1f)", share(a.Share()), pct(a.AgreeBack, a.Bytes), mb(a.Bytes))
	}
	return fmt.Sprintf("%s (%.1f)", share(a.Share()), mb(a.Bytes))
}

func pct(n, of int64) string {
	if of == 0 {
		return "-"
	}
	return share(float64(n) / float64(of))
}

// share prints a fraction as a percentage, never rounding a shortfall up
// to 100.
func share(f float64) string {
	s := fmt.Sprintf("%.2f", 100*f)
	if f < 1 && s == "100.00" {
		s = "99.99+"
	}
	return s
}

func ratio(a, b int64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", float64(a)/float64(b))
}
