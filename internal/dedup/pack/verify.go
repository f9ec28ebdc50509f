package pack

import (
	"bufio"
	"cmp"
	"compress/flate"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/dedup/layer"
	"github.com/cairn-registry/cairn/internal/iowatch"
	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// verifyGap is the largest run of bytes VerifyFrames reads through rather
// than end one ranged read and start another: on an object store a request
// costs a round trip, which moves about that much.
const verifyGap = 1 << 20

// VerifyFrames checks the frames of entries (some or all of pack id's, as
// its index lists them) against the object: each must decompress to Size
// bytes hashing to Digest. It reads the frames in offset order with one
// ranged read per run of them (reading small gaps through), streaming, so
// that memory stays within one frame decoder whatever the pack's size;
// scrub verifies packs this way, from the objects alone.
//
// check is called once per entry in offset order, with nil or a
// *FrameError saying what is wrong; an error check
// returns ends the run with it. A failed read ends the run with an error
// wrapping the storage's (driver.ErrNotFound for an object gone): the
// entries check was not called for are unverified, and may be tried again.
// read is the stored bytes read.
func VerifyFrames(ctx context.Context, d driver.Driver, id string, entries []Entry, check func(Entry, error) error) (read int64, err error) {
	es := slices.Clone(entries)
	slices.SortStableFunc(es, func(a, b Entry) int { return cmp.Compare(a.Offset, b.Offset) })
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
	if err != nil {
		return 0, fmt.Errorf("pack: %w", err)
	}
	defer dec.Close()
	for len(es) > 0 {
		// A run: entries in order, each starting at or after the end of
		// the one before, no more than verifyGap past it.
		n, end := 1, es[0].Offset+es[0].Length
		for ; n < len(es) && es[n].Offset >= end && es[n].Offset-end <= verifyGap; n++ {
			end = es[n].Offset + es[n].Length
		}
		k, err := verifyRun(ctx, d, dec, id, es[:n], end, check)
		read += k
		if err != nil {
			return read, err
		}
		es = es[n:]
	}
	return read, nil
}

// FrameError is a frame of a pack that is not its entry's file: it wraps
// layer.ErrCorruptFile.
type FrameError struct {
	Pack   string
	Entry  Entry
	Reason string // what is wrong, e.g. "decompresses to 10 bytes, want 12"
}

func (e *FrameError) Error() string {
	return fmt.Sprintf("pack %s: file %s at %d+%d: %s", e.Pack, e.Entry.Digest, e.Entry.Offset, e.Entry.Length, e.Reason)
}

func (e *FrameError) Unwrap() error { return layer.ErrCorruptFile }

// verifyRun checks the entries of one run, which ends at end, with one
// ranged read.
func verifyRun(ctx context.Context, d driver.Driver, dec *zstd.Decoder, id string, es []Entry, end int64, check func(Entry, error) error) (int64, error) {
	start := es[0].Offset
	rc, err := d.ReadRange(ctx, layout.Pack(id), start, end-start)
	if err != nil {
		return 0, fmt.Errorf("pack: read %s: %w", id, err)
	}
	defer rc.Close()
	src := &iowatch.ErrReader{R: rc}
	br := bufio.NewReaderSize(src, 64<<10)
	pos := start
	for _, e := range es {
		if _, err := br.Discard(int(e.Offset - pos)); err != nil {
			return pos - start, readErr(id, src, e, err)
		}
		frame := io.LimitReader(br, e.Length)
		ferr := verifyFrame(dec, frame, e)
		// What the decoder left of the frame (after a corrupt one) is
		// skipped, so that the next frame starts where it should.
		_, derr := io.Copy(io.Discard, frame)
		if src.Err != nil || derr != nil {
			// A decoding error caused by a failed read is the read's.
			return pos - start, readErr(id, src, e, derr)
		}
		pos = e.Offset + e.Length
		if ferr != nil {
			ferr = &FrameError{Pack: id, Entry: e, Reason: ferr.Error()}
		}
		if err := check(e, ferr); err != nil {
			return pos - start, err
		}
	}
	return pos - start, nil
}

// verifyFrame decompresses one frame (its stored bytes are r) and checks
// its size and digest; the error says what is wrong.
func verifyFrame(dec *zstd.Decoder, r io.Reader, e Entry) error {
	if !e.Digest.Algorithm().Available() {
		return fmt.Errorf("digest algorithm %s is not available", e.Digest.Algorithm())
	}
	br := bufio.NewReader(r)
	var content io.Reader = dec
	if head, _ := br.Peek(len(parseMagic) + 1); isParse(head) {
		br.Discard(len(head))
		fr := flate.NewReader(br)
		defer fr.Close()
		content = fr
	} else {
		if err := dec.Reset(br); err != nil {
			return fmt.Errorf("does not decompress: %w", err)
		}
		defer dec.Reset(nil)
	}
	h := e.Digest.Algorithm().Hash()
	// One byte more than the entry says: a frame that decompresses to
	// more is wrong, and is not read to its end.
	n, err := io.Copy(h, io.LimitReader(content, e.Size+1))
	switch {
	case err != nil:
		return fmt.Errorf("does not decompress: %w", err)
	case n != e.Size:
		if n > e.Size {
			return fmt.Errorf("decompresses to more than %d bytes", e.Size)
		}
		return fmt.Errorf("decompresses to %d bytes, want %d", n, e.Size)
	}
	if got := digest.NewDigest(e.Digest.Algorithm(), h); got != e.Digest {
		return fmt.Errorf("decompresses to %d bytes hashing to %s", n, got)
	}
	return nil
}

// readErr is the error that ends a run at entry e: the storage's when
// reading failed, or the object ending early.
func readErr(id string, src *iowatch.ErrReader, e Entry, err error) error {
	if src.Err != nil {
		err = src.Err
	} else if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("pack: read %s at %d: %w", id, e.Offset, err)
}
