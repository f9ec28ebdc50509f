package dedup

import (
	"archive/tar"
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/klauspost/pgzip"

	"github.com/cairn-registry/cairn/internal/testutil/layertest"
)

// testLayer is one layer blob with how it was made.
type testLayer struct {
	name      string
	mediaType string
	blob      []byte
	intact    bool // expected to stay intact (irreproducible)
}

const (
	mtGzip   = layertest.OCIGzip
	mtZstd   = layertest.OCIZstd
	mtTar    = layertest.OCITar
	mtDocker = layertest.DockerGzip
)

func content(seed uint64, n int) []byte { return layertest.Body(seed, n) }

// featureTar builds a tar with the features dedup must keep byte-exact: PAX
// and GNU headers, long names, hard links, symlinks, xattrs, duplicate
// paths, empty files, directories, and files shared with other layers
// (seeds below 10 are common to every variant).
func featureTar(t testing.TB, variant int, format tar.Format) []byte {
	t.Helper()
	w := layertest.NewWriter(t, format, time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC))
	add := w.Add
	file := func(name string, body []byte) {
		add(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(body)), Uid: 0, Gid: 0, Uname: "root", Gname: "root"}, body)
	}
	add(&tar.Header{Typeflag: tar.TypeDir, Name: "usr/", Mode: 0o755}, nil)
	add(&tar.Header{Typeflag: tar.TypeDir, Name: "usr/lib/", Mode: 0o755}, nil)
	for i := range 10 {
		file(fmt.Sprintf("usr/lib/shared-%d.so", i), content(uint64(i), 20_000+i*3000))
	}
	for i := range 6 {
		file(fmt.Sprintf("app/v%d/own-%d.dat", variant, i), ownBody(variant, i))
	}
	file("etc/empty", nil)
	file("etc/dup", []byte("first version\n"))
	file("etc/dup", []byte("second version, same path\n"))
	add(&tar.Header{Typeflag: tar.TypeLink, Name: "usr/lib/hardlink.so", Linkname: "usr/lib/shared-1.so"}, nil)
	add(&tar.Header{Typeflag: tar.TypeSymlink, Name: "usr/lib/symlink.so", Linkname: "shared-2.so"}, nil)
	long := "very/" + string(bytes.Repeat([]byte("long-directory-name/"), 12)) + "file.txt"
	file(long, content(3, 5000))
	if format != tar.FormatGNU {
		add(&tar.Header{
			Typeflag: tar.TypeReg, Name: "etc/xattr", Mode: 0o600, Size: 4, Format: tar.FormatPAX,
			PAXRecords: map[string]string{"SCHILY.xattr.security.capability": "\x01\x00\x00\x02", "SCHILY.xattr.user.note": "cairn"},
		}, []byte("caps"))
	}
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "etc/big-uid", Mode: 0o644, Uid: 3_000_000, Gid: 3_000_000, Size: 3}, []byte("uid"))
	return w.Close()
}

// ownBody is the body of file i of the six only featureTar(variant) holds.
func ownBody(variant, i int) []byte {
	return content(uint64(100*variant+10+i), 40_000+i*17_000)
}

func gzipStd(t testing.TB, raw []byte, level int) []byte { return layertest.Gzip(t, raw, level) }

// allLayers is every encoder and tar format the issue lists.
func allLayers(t testing.TB) []testLayer {
	var ls []testLayer
	v := 0
	next := func(format tar.Format) []byte { v++; return featureTar(t, v, format) }
	for _, level := range []int{-2, -1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9} {
		ls = append(ls, testLayer{name: fmt.Sprintf("stdlib-gzip/%d", level), mediaType: mtDocker, blob: gzipStd(t, next(tar.FormatPAX), level)})
	}
	for _, level := range []int{1, 5, 9} {
		ls = append(ls, testLayer{name: fmt.Sprintf("klauspost-gzip/%d", level), mediaType: mtGzip, blob: layertest.KlausGzip(t, next(tar.FormatPAX), level)})
	}
	ls = append(ls,
		testLayer{name: "pgzip/default", mediaType: mtGzip, blob: layertest.PGzip(t, next(tar.FormatPAX), pgzip.DefaultCompression, 0)},
		testLayer{name: "pgzip/1/256KiB", mediaType: mtGzip, blob: layertest.PGzip(t, next(tar.FormatGNU), pgzip.BestSpeed, 256<<10)},
	)
	for _, level := range []zstd.EncoderLevel{zstd.SpeedFastest, zstd.SpeedDefault, zstd.SpeedBetterCompression, zstd.SpeedBestCompression} {
		ls = append(ls, testLayer{name: "klauspost-zstd/" + level.String(), mediaType: mtZstd, blob: layertest.Zstd(t, next(tar.FormatPAX), level)})
	}
	ls = append(ls,
		testLayer{name: "tar/pax", mediaType: mtTar, blob: next(tar.FormatPAX)},
		testLayer{name: "tar/gnu", mediaType: mtTar, blob: next(tar.FormatGNU)},
		testLayer{name: "gnu-gzip", mediaType: mtGzip, blob: layertest.GNUGzip(t, next(tar.FormatPAX)), intact: true},
	)
	return ls
}
