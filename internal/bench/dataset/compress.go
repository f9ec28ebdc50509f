package dataset

import (
	"github.com/cairn-registry/cairn/internal/iowatch"

	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/klauspost/compress/zstd"
	"github.com/klauspost/pgzip"
	"github.com/opencontainers/go-digest"
)

// compress writes the blob of tar t under compression c into the work dir,
// or reuses the one a previous Build left there.
func (b *builder) compress(ctx context.Context, t *tarResult, c Compression) (*Layer, error) {
	if c == GzipGNU {
		if _, err := exec.LookPath("gzip"); err != nil {
			// Without GNU gzip the layer is still a gzip layer, just one
			// dedup can reproduce.
			b.logf("dataset: gzip not installed; layer %q compressed with compress/gzip instead", t.Desc)
			c = GzipStdlib
		}
	}
	l := &Layer{Compression: c, DiffID: t.DiffID, TarSize: t.Size, Files: t.Files, Description: t.Desc, tarPath: t.Path}
	l.blobPath = filepath.Join(b.work, "blobs", t.DiffID.Encoded()+"."+string(c))
	meta := l.blobPath + ".json"
	var m struct {
		Digest digest.Digest `json:"digest"`
		Size   int64         `json:"size"`
	}
	if raw, err := os.ReadFile(meta); err == nil && json.Unmarshal(raw, &m) == nil && m.Digest != "" {
		if fi, err := os.Stat(l.blobPath); err == nil && fi.Size() == m.Size {
			l.Digest, l.Size = m.Digest, m.Size
			return l, nil
		}
	}
	src, err := os.Open(t.Path)
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	defer src.Close()
	f, err := os.CreateTemp(filepath.Dir(l.blobPath), ".tmp-")
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	defer os.Remove(f.Name())
	h := sha256.New()
	cw := &iowatch.Writer{W: io.MultiWriter(f, h)}
	err = compressTo(ctx, cw, src, c)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("dataset: compress %q (%s): %w", t.Desc, c, err)
	}
	l.Digest, l.Size = digest.NewDigest(digest.SHA256, h), cw.N
	if err := os.Rename(f.Name(), l.blobPath); err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	m.Digest, m.Size = l.Digest, l.Size
	raw, _ := json.Marshal(m)
	if err := os.WriteFile(meta, raw, 0o644); err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	return l, nil
}

// compressTo compresses r into w the way the producer modelled by c does.
func compressTo(ctx context.Context, w io.Writer, r io.Reader, c Compression) error {
	var enc io.WriteCloser
	var err error
	switch c {
	case Uncompressed:
		_, err := io.Copy(w, r)
		return err
	case GzipGNU:
		// -n: no name or timestamp in the header, so builds are
		// reproducible.
		cmd := exec.CommandContext(ctx, "gzip", "-n", "-c")
		var stderr bytes.Buffer
		cmd.Stdin, cmd.Stdout, cmd.Stderr = r, w, &stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("gzip: %w: %s", err, lastLine(stderr.String()))
		}
		return nil
	case GzipStdlib:
		enc, err = gzip.NewWriterLevel(w, gzip.DefaultCompression)
	case GzipStdlibBestSpeed:
		enc, err = gzip.NewWriterLevel(w, gzip.BestSpeed)
	case GzipPgzip:
		// containers/image calls pgzip.NewWriter (or NewWriterLevel with
		// the default level) and never SetConcurrency: 1 MiB blocks.
		enc = pgzip.NewWriter(w)
	case Zstd:
		enc, err = zstd.NewWriter(w)
	default:
		return fmt.Errorf("unknown compression %q", c)
	}
	if err != nil {
		return err
	}
	if _, err := io.Copy(enc, r); err != nil {
		enc.Close()
		return err
	}
	return enc.Close()
}
