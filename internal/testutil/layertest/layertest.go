// Package layertest makes layer blobs for dedup tests: deterministic file
// bodies, tars of them, and the compressors real image builders use (Go's
// compress/gzip, klauspost gzip, pgzip and zstd, and the gzip program).
package layertest

import (
	"archive/tar"
	"bytes"
	stdgzip "compress/gzip"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	kgzip "github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/klauspost/pgzip"
)

// Layer media types.
const (
	OCIGzip    = "application/vnd.oci.image.layer.v1.tar+gzip"
	OCIZstd    = "application/vnd.oci.image.layer.v1.tar+zstd"
	OCITar     = "application/vnd.oci.image.layer.v1.tar"
	DockerGzip = "application/vnd.docker.image.rootfs.diff.tar.gzip"
	DockerTar  = "application/vnd.docker.image.rootfs.diff.tar"
	DockerZstd = "application/vnd.docker.image.rootfs.diff.tar.zstd"
)

// Body returns n deterministic bytes for seed: even seeds are text-like
// (compressible), odd ones random (not).
func Body(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 0xca1))
	b := make([]byte, n)
	if seed%2 == 0 {
		words := []string{"cairn ", "layer ", "registry ", "dedup ", "file\n", "recipe ", "exact "}
		for i := 0; i < n; {
			i += copy(b[i:], words[r.IntN(len(words))])
		}
		return b
	}
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// File is a regular file of a test layer.
type File struct {
	Name string
	Body []byte
}

// Tar is a PAX tar of files, each mode 0644 with one fixed modification
// time: the same files make the same bytes.
func Tar(t testing.TB, files ...File) []byte {
	t.Helper()
	w := NewWriter(t, tar.FormatPAX, time.Date(2025, 3, 1, 8, 0, 0, 0, time.UTC))
	for _, f := range files {
		w.Add(&tar.Header{Typeflag: tar.TypeReg, Name: f.Name, Mode: 0o644, Size: int64(len(f.Body))}, f.Body)
	}
	return w.Close()
}

// Writer writes a test tar in memory, failing the test on any error.
type Writer struct {
	t      testing.TB
	buf    bytes.Buffer
	tw     *tar.Writer
	format tar.Format
	mod    time.Time
}

// NewWriter starts a tar whose members are in format unless their header
// names one, all modified at mod.
func NewWriter(t testing.TB, format tar.Format, mod time.Time) *Writer {
	w := &Writer{t: t, format: format, mod: mod}
	w.tw = tar.NewWriter(&w.buf)
	return w
}

// Add writes one member.
func (w *Writer) Add(h *tar.Header, body []byte) {
	w.t.Helper()
	h.ModTime = w.mod
	if h.Format == tar.FormatUnknown {
		h.Format = w.format
	}
	if err := w.tw.WriteHeader(h); err != nil {
		w.t.Fatalf("tar header %s: %v", h.Name, err)
	}
	if _, err := w.tw.Write(body); err != nil {
		w.t.Fatalf("tar body %s: %v", h.Name, err)
	}
}

// Close ends the tar and returns its bytes.
func (w *Writer) Close() []byte {
	w.t.Helper()
	if err := w.tw.Close(); err != nil {
		w.t.Fatal(err)
	}
	return w.buf.Bytes()
}

// compress writes raw through the writer w wraps around a buffer.
func compress(t testing.TB, raw []byte, open func(io.Writer) (io.WriteCloser, error)) []byte {
	t.Helper()
	var b bytes.Buffer
	w, err := open(&b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(raw); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// Gzip compresses with the toolchain's compress/gzip at level (docker,
// containerd, BuildKit, crane).
func Gzip(t testing.TB, raw []byte, level int) []byte {
	return compress(t, raw, func(w io.Writer) (io.WriteCloser, error) { return stdgzip.NewWriterLevel(w, level) })
}

// KlausGzip compresses with klauspost/compress/gzip at level.
func KlausGzip(t testing.TB, raw []byte, level int) []byte {
	return compress(t, raw, func(w io.Writer) (io.WriteCloser, error) { return kgzip.NewWriterLevel(w, level) })
}

// PGzip compresses with klauspost/pgzip at level; block 0 keeps its
// default block size (podman, buildah, skopeo).
func PGzip(t testing.TB, raw []byte, level, block int) []byte {
	return compress(t, raw, func(w io.Writer) (io.WriteCloser, error) {
		z, err := pgzip.NewWriterLevel(w, level)
		if err == nil && block > 0 {
			err = z.SetConcurrency(block, 4)
		}
		return z, err
	})
}

// Zstd compresses with klauspost/compress/zstd at level.
func Zstd(t testing.TB, raw []byte, level zstd.EncoderLevel) []byte {
	return compress(t, raw, func(w io.Writer) (io.WriteCloser, error) {
		return zstd.NewWriter(w, zstd.WithEncoderLevel(level))
	})
}

// GNUGzip compresses with the gzip program (zlib's deflate), which no Go
// encoder reproduces; the test is skipped without the program.
func GNUGzip(t testing.TB, raw []byte) []byte {
	t.Helper()
	if _, err := exec.LookPath("gzip"); err != nil {
		t.Skip("gzip program not installed")
	}
	cmd := exec.Command("gzip", "-6", "-n", "-c")
	cmd.Stdin = bytes.NewReader(raw)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("gzip: %v", err)
	}
	return out
}

// GoSources returns real text as a layer's files: Go's own sources,
// joined into files of about fileSize bytes (a source file each when 0),
// about n bytes in all. It skips the test where GOROOT holds no sources.
func GoSources(t testing.TB, n, fileSize int) []File {
	t.Helper()
	var files []File
	var body []byte
	total := 0
	for _, dir := range []string{"net/http", "go/types", "runtime", "crypto/tls", "encoding/json"} {
		names, err := filepath.Glob(filepath.Join(runtime.GOROOT(), "src", dir, "*.go"))
		if err != nil || len(names) == 0 {
			t.Skipf("no Go sources under GOROOT: %v", err)
		}
		for _, name := range names {
			b, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			body = append(body, b...)
			if len(body) < fileSize {
				continue
			}
			files = append(files, File{Name: fmt.Sprintf("src/%s/%d.go", dir, len(files)), Body: body})
			total += len(body)
			body = nil
			if total >= n {
				return files
			}
		}
	}
	return files
}
