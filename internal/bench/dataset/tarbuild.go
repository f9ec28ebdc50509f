package dataset

import (
	"github.com/cairn-registry/cairn/internal/iowatch"

	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
)

// tarResult is a built layer tar.
type tarResult struct {
	Path   string        `json:"-"`
	DiffID digest.Digest `json:"diffID"`
	Size   int64         `json:"size"`
	Files  int           `json:"files"`
	// Epoch is when the layer was "built": the time of the files it adds.
	Epoch time.Time `json:"epoch"`
	Desc  string    `json:"-"`
}

// entry is one member of a layer tar being built.
type entry struct {
	hdr tar.Header
	// sortKey orders entries as a file-system walk does: the name with
	// '/' as the lowest byte, so a directory's children follow it directly.
	sortKey string
	// Content comes from a section of a package's data tar, or data.
	src  *os.File
	off  int64
	data []byte
}

// buildTar writes lp's tar into the work dir, or reuses the one a previous
// Build left there.
func (b *builder) buildTar(ctx context.Context, lp *layerPlan) (*tarResult, error) {
	p := filepath.Join(b.work, "tars", lp.key+".tar")
	meta := p + ".json"
	if raw, err := os.ReadFile(meta); err == nil {
		var r tarResult
		if json.Unmarshal(raw, &r) == nil && r.DiffID != "" {
			if fi, err := os.Stat(p); err == nil && fi.Size() == r.Size {
				r.Path, r.Desc = p, lp.desc
				return &r, nil
			}
		}
	}
	var entries []*entry
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	var err error
	epoch := lp.epoch
	if lp.app != nil {
		entries = appEntries(lp.app, epoch)
	} else {
		entries, files, epoch, err = b.packageEntries(lp)
		if err != nil {
			return nil, err
		}
	}
	entries = withParents(entries, epoch)
	slices.SortFunc(entries, func(x, y *entry) int { return strings.Compare(x.sortKey, y.sortKey) })

	f, err := os.CreateTemp(filepath.Dir(p), ".tmp-")
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	defer os.Remove(f.Name())
	h := sha256.New()
	cw := &iowatch.Writer{W: io.MultiWriter(f, h)}
	n, err := writeTar(ctx, cw, entries)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("dataset: layer %s: %w", lp.desc, err)
	}
	r := &tarResult{DiffID: digest.NewDigest(digest.SHA256, h), Size: cw.N, Files: n, Epoch: epoch, Path: p, Desc: lp.desc}
	if err := os.Rename(f.Name(), p); err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	raw, _ := json.Marshal(r)
	if err := os.WriteFile(meta, raw, 0o644); err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	return r, nil
}

func writeTar(ctx context.Context, w io.Writer, entries []*entry) (int, error) {
	tw := tar.NewWriter(w)
	files := 0
	for i, e := range entries {
		if i%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
		}
		if err := tw.WriteHeader(&e.hdr); err != nil {
			return 0, fmt.Errorf("%s: %w", e.hdr.Name, err)
		}
		if e.hdr.Typeflag != tar.TypeReg || e.hdr.Size == 0 {
			continue
		}
		files++
		var r io.Reader = bytes.NewReader(e.data)
		if e.src != nil {
			r = io.NewSectionReader(e.src, e.off, e.hdr.Size)
		}
		if _, err := io.CopyN(tw, r, e.hdr.Size); err != nil {
			return 0, fmt.Errorf("%s: %w", e.hdr.Name, err)
		}
	}
	return files, tw.Close()
}

// packageEntries lists the members of lp's packages (the first package
// to ship a path wins, as for shared directories) and the files dpkg writes
// when it installs them: its status and each package's info files, dated
// after the newest packaged file, as an install would be.
func (b *builder) packageEntries(lp *layerPlan) (_ []*entry, _ []*os.File, epoch time.Time, err error) {
	byName := make(map[string]*entry)
	var entries []*entry
	var files []*os.File
	var lists [][]string
	add := func(e *entry) {
		if _, dup := byName[e.hdr.Name]; dup {
			return
		}
		byName[e.hdr.Name] = e
		entries = append(entries, e)
	}
	for _, p := range lp.pkgs {
		f, err := os.Open(b.apt.fsysPath(p))
		if err != nil {
			return nil, files, epoch, fmt.Errorf("dataset: %w", err)
		}
		files = append(files, f)
		list, links, err := indexTar(f, add)
		if err != nil {
			return nil, files, epoch, fmt.Errorf("dataset: %s: %w", p.debFile(), err)
		}
		resolveHardlinks(byName, links)
		lists = append(lists, list)
	}
	var newest time.Time
	for _, e := range entries {
		if e.hdr.ModTime.After(newest) {
			newest = e.hdr.ModTime
		}
	}
	// The plan's epoch spreads layers over a year; keep that spread, as
	// days, after the newest file.
	epoch = lp.epoch
	if epoch.Before(newest) {
		epoch = newest.Add(time.Duration(lp.epoch.Unix()%(7*24*3600)) * time.Second).Truncate(time.Second)
	}
	for i, p := range lp.pkgs {
		info, err := b.infoFiles(p, lists[i], epoch)
		if err != nil {
			return nil, files, epoch, err
		}
		for _, e := range info {
			add(e)
		}
	}
	var status bytes.Buffer
	for _, p := range lp.installed {
		ctrl, err := b.readControl(p)
		if err != nil {
			return nil, files, epoch, err
		}
		st, ok := ctrl["control"]
		if !ok {
			return nil, files, epoch, fmt.Errorf("dataset: %s has no control file", p.debFile())
		}
		// dpkg's status is the control stanza with a Status field after
		// Package.
		pkgLine, rest, _ := bytes.Cut(st, []byte("\n"))
		status.Write(pkgLine)
		status.WriteString("\nStatus: install ok installed\n")
		status.Write(bytes.TrimRight(rest, "\n"))
		status.WriteString("\n\n")
	}
	add(fileEntry("var/lib/dpkg/status", status.Bytes(), epoch))
	return entries, files, epoch, nil
}

// indexTar reads the headers of a package's data tar, handing add an entry
// per member (content left in place, at its offset in f). It returns the
// dpkg file list and the hard links met.
func indexTar(f *os.File, add func(*entry)) ([]string, []*entry, error) {
	tr := tar.NewReader(f)
	list := []string{"/."}
	var links []*entry
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return list, links, nil
		}
		if err != nil {
			return nil, nil, err
		}
		name := cleanName(h.Name)
		if name == "" {
			continue
		}
		// tar.Reader reads exactly the header blocks, so the file offset
		// is where the member's content starts.
		off, err := f.Seek(0, io.SeekCurrent)
		if err != nil {
			return nil, nil, err
		}
		list = append(list, "/"+name)
		e := &entry{src: f, off: off, hdr: tar.Header{
			Typeflag: h.Typeflag,
			Name:     name,
			Linkname: h.Linkname,
			Size:     h.Size,
			Mode:     h.Mode,
			Uid:      h.Uid,
			Gid:      h.Gid,
			Uname:    h.Uname,
			Gname:    h.Gname,
			ModTime:  h.ModTime,
			Devmajor: h.Devmajor,
			Devminor: h.Devminor,
		}}
		switch h.Typeflag {
		case tar.TypeDir:
			e.hdr.Name += "/"
		case tar.TypeLink:
			e.hdr.Linkname = cleanName(h.Linkname)
			links = append(links, e)
		case tar.TypeReg:
		case tar.TypeSymlink, tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			e.hdr.Size = 0
		default:
			continue
		}
		e.sortKey = sortKey(e.hdr.Name)
		add(e)
	}
}

// resolveHardlinks makes the first path of each hard-linked group (in walk
// order) carry the content and the others link to it: a tar reader needs
// the target before the link, and the deb's order is not walk order.
func resolveHardlinks(byName map[string]*entry, links []*entry) {
	groups := make(map[string][]*entry)
	for _, l := range links {
		if byName[l.hdr.Name] != l {
			continue // another package shipped this path first
		}
		t, ok := byName[l.hdr.Linkname]
		if !ok || t.hdr.Typeflag != tar.TypeReg {
			l.hdr.Typeflag, l.hdr.Linkname = tar.TypeReg, "" // dangling: keep as empty file
			continue
		}
		groups[t.hdr.Name] = append(groups[t.hdr.Name], l)
	}
	for target, ls := range groups {
		t := byName[target]
		first := t
		for _, l := range ls {
			if l.sortKey < first.sortKey {
				first = l
			}
		}
		if first != t {
			name, key := first.hdr.Name, first.sortKey
			*first = *t
			first.hdr.Name, first.sortKey = name, key
			t.hdr.Typeflag, t.hdr.Size, t.src, t.data = tar.TypeLink, 0, nil, nil
			t.hdr.Linkname = name
		}
		for _, l := range ls {
			if l != first {
				l.hdr.Linkname = first.hdr.Name
			}
		}
	}
}

// infoFiles are what dpkg keeps per installed package under
// /var/lib/dpkg/info: its file list and its control files (md5sums,
// conffiles, maintainer scripts).
func (b *builder) infoFiles(p pkg, list []string, epoch time.Time) ([]*entry, error) {
	ctrl, err := b.readControl(p)
	if err != nil {
		return nil, err
	}
	base := p.Name
	if bytes.Contains(ctrl["control"], []byte("\nMulti-Arch: same\n")) {
		base += ":" + p.Arch
	}
	dir := "var/lib/dpkg/info/" + base + "."
	out := []*entry{fileEntry(dir+"list", []byte(strings.Join(list, "\n")+"\n"), epoch)}
	for _, name := range slices.Sorted(maps.Keys(ctrl)) {
		if name == "control" {
			continue
		}
		e := fileEntry(dir+name, ctrl[name], epoch)
		if name == "preinst" || name == "postinst" || name == "prerm" || name == "postrm" || name == "config" {
			e.hdr.Mode = 0o755
		}
		out = append(out, e)
	}
	return out, nil
}

// readControl returns the regular files of a package's control tar by
// name.
func (b *builder) readControl(p pkg) (map[string][]byte, error) {
	f, err := os.Open(b.apt.ctrlPath(p))
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	defer f.Close()
	out := make(map[string][]byte)
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("dataset: %s control: %w", p.debFile(), err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("dataset: %s control: %w", p.debFile(), err)
		}
		out[path.Base(cleanName(h.Name))] = data
	}
}

// cleanName turns "./usr/bin/x" into "usr/bin/x" ("" for the root).
func cleanName(n string) string {
	n = strings.TrimPrefix(n, "./")
	n = strings.TrimPrefix(n, "/")
	return strings.TrimSuffix(n, "/")
}

func sortKey(name string) string {
	return strings.ReplaceAll(strings.TrimSuffix(name, "/"), "/", "\x00")
}

func fileEntry(name string, data []byte, mtime time.Time) *entry {
	return &entry{data: data, sortKey: sortKey(name), hdr: tar.Header{
		Typeflag: tar.TypeReg, Name: name, Size: int64(len(data)), Mode: 0o644,
		Uname: "root", Gname: "root", ModTime: mtime,
	}}
}

// withParents adds the directories that entries need and lack, as a layer
// diff includes the parents of what changed.
func withParents(entries []*entry, mtime time.Time) []*entry {
	have := make(map[string]bool, len(entries))
	for _, e := range entries {
		have[strings.TrimSuffix(e.hdr.Name, "/")] = true
	}
	for _, e := range entries {
		for d := path.Dir(strings.TrimSuffix(e.hdr.Name, "/")); d != "." && !have[d]; d = path.Dir(d) {
			have[d] = true
			entries = append(entries, &entry{sortKey: sortKey(d), hdr: tar.Header{
				Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755,
				Uname: "root", Gname: "root", ModTime: mtime,
			}})
		}
	}
	return entries
}
