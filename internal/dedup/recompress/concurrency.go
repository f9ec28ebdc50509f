package recompress

import (
	"io"
	"runtime"

	"github.com/klauspost/compress/zstd"
	"github.com/klauspost/pgzip"
)

// How many cores the pgzip and zstd encoders use, and why their output does
// not depend on it (concurrency_test.go compresses the same inputs at every
// concurrency and pins the hashes; read it with the library source):
//
// pgzip cuts its input into blocks of exactly the size the encoder id names.
// Each block is compressed on its own goroutine by a klauspost flate writer
// that is Reset (so a pooled writer starts as a new one) with the previous
// block's last 16 KiB of input as its dictionary: input bytes, never another
// writer's state. One goroutine writes the blocks in input order. A block's
// bytes thus depend only on its own input and its predecessor's tail, and
// the number of blocks in flight (SetConcurrency's second argument) only
// bounds how many compress at once, plus one the writer goroutine has taken
// off the queue to wait for. That is real parallelism: a core per block.
//
// klauspost zstd's streaming encoder (without WithConcurrentBlocks) has one
// match finder, as its window spans blocks. With concurrency 1 it finds the
// matches of a 128 KiB block and entropy-codes it, then the next. With any
// n > 1 it entropy-codes and writes block k on a second goroutine while it
// finds block k+1's matches: a two-stage pipeline, at most two cores, the
// same for n = 2 and n = 64. The output is the same because the entropy
// coder's tables are handed from block to block in input order
// (swapEncoders), and the match finders ignore the repeat offsets a block
// starts with (canRepeat waits for three sequences of the block's own), the
// one state the two paths hand over differently. WithConcurrentBlocks would
// use every core, but it compresses sections with a shortened history: its
// output differs, and no producer we reproduce enables it.

// pgzipInFlightBytes bounds the input a pgzip rebuild holds in blocks in
// flight (each also holds up to 1.06x its size of output), so a rebuild on
// a many-core machine does not take hundreds of MB for 4 MiB blocks.
const pgzipInFlightBytes = 64 << 20

// pgzipInFlight is pgzip's blocks in flight for a rebuild: one per core, at
// most what pgzipInFlightBytes allows. (More than one per core was measured
// no faster, on one core or two.)
func pgzipInFlight(block, procs int) int {
	return max(1, min(procs, pgzipInFlightBytes/block))
}

// cores is the cores a rebuild may use: procs, or GOMAXPROCS for 0. The
// streaming zstd encoder takes it as its concurrency, where any value
// above 1 runs the same two-stage pipeline.
func cores(procs int) int {
	if procs <= 0 {
		return runtime.GOMAXPROCS(0)
	}
	return procs
}

// newPgzip opens pgzip at level with block-sized blocks, inFlight at once,
// writing the deflate body alone to w.
func newPgzip(w io.Writer, level, block, inFlight int) (bodyEncoder, error) {
	hw := &stripWriter{w: w, skip: pgzipHeader}
	z, err := pgzip.NewWriterLevel(hw, level)
	if err != nil {
		return nil, err
	}
	if err := z.SetConcurrency(block, inFlight); err != nil {
		return nil, err
	}
	return &pgzipBody{z: z, hw: hw}, nil
}

// zstdOptions configure klauspost zstd's streaming encoder at level with
// the given concurrency.
func zstdOptions(level, concurrency int) []zstd.EOption {
	return []zstd.EOption{zstd.WithEncoderLevel(zstd.EncoderLevel(level)), zstd.WithEncoderConcurrency(concurrency)}
}
