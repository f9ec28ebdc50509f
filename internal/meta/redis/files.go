package redis

import (
	"context"
	"errors"
	"fmt"

	"github.com/opencontainers/go-digest"
	"github.com/redis/go-redis/v9"

	"github.com/cairn-registry/cairn/internal/meta"
)

const (
	// redisChunk bounds the files one script call of a bulk step takes, so Redis,
	// which serves no one else while a script runs, pauses for about a millisecond.
	redisChunk = 1024
	// redisPipeline bounds the calls sent in one round trip.
	redisPipeline = 64
)

// AddLayerRefs implements FileIndex. The layer's whole file set goes to Redis as
// one argument (FileSet.Encode), so a 50k-file layer is one atomic script call.
func (s *Store) AddLayerRefs(ctx context.Context, layer digest.Digest, files []digest.Digest) ([]meta.FileRef, error) {
	lk, fs, err := meta.LayerFileSet(layer, files)
	if err != nil {
		return nil, err
	}
	v, err := s.run(ctx, scriptAddLayerRefs, s.k.std, lk, fs.Encode())
	if err == nil && v == int64(-1) {
		err = fmt.Errorf("%w: %s", meta.ErrLayerFilesDiffer, layer)
	}
	var codes []int64
	if err == nil {
		codes, err = ints(v)
	}
	if err == nil && len(codes) != len(fs.Keys) {
		err = fmt.Errorf("meta: redis: %d results for %d files", len(codes), len(fs.Keys))
	}
	if err != nil {
		return nil, fmt.Errorf("meta: add layer refs %s: %w", layer, err)
	}
	refs := make([]meta.FileRef, len(codes))
	for j, c := range codes {
		refs[j] = meta.FileRef{Refs: c >> 2, Write: c&2 != 0, Revived: c&1 != 0}
	}
	return fs.Refs(files, refs), nil
}

// releaseReply parses scriptRelease's reply: the zeroed files, or ErrInvalidRelease.
func releaseReply(v any) ([]digest.Digest, error) {
	arr, ok := v.([]any)
	if !ok || len(arr) == 0 {
		return nil, fmt.Errorf("meta: redis: unexpected reply %T", v)
	}
	var out []digest.Digest
	for _, e := range arr[1:] {
		k, ok := e.(string)
		if !ok {
			return nil, fmt.Errorf("meta: redis: unexpected reply element %T", e)
		}
		out = append(out, meta.DigestOf([]byte(k)))
	}
	if arr[0] == int64(1) && len(out) == 1 {
		return nil, fmt.Errorf("%w: %s", meta.ErrInvalidRelease, out[0])
	}
	return out, nil
}

// ReleaseLayerRefs implements FileIndex.
func (s *Store) ReleaseLayerRefs(ctx context.Context, layer digest.Digest) ([]digest.Digest, error) {
	lk, err := meta.KeyOf(layer)
	if err != nil {
		return nil, err
	}
	v, err := s.run(ctx, scriptRelease, s.k.std, lk, "0")
	var zeroed []digest.Digest
	if err == nil {
		zeroed, err = releaseReply(v)
	}
	if err != nil {
		return nil, fmt.Errorf("meta: release layer refs %s: %w", layer, err)
	}
	return zeroed, nil
}

// LayerFiles implements FileIndex.
func (s *Store) LayerFiles(ctx context.Context, layer digest.Digest) ([]digest.Digest, error) {
	lk, err := meta.KeyOf(layer)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	held, err := s.c.HGet(ctx, s.k.layers, string(lk)).Bytes()
	if errors.Is(err, redis.Nil) {
		err = meta.ErrNotFound
	}
	var out []digest.Digest
	if err == nil {
		err = meta.EachKey(held, func(k []byte) error {
			out = append(out, meta.DigestOf(k))
			return nil
		})
	}
	if err != nil {
		return nil, fmt.Errorf("meta: layer files %s: %w", layer, err)
	}
	return out, nil
}

// Tombstone implements FileIndex.
func (s *Store) Tombstone(ctx context.Context, d digest.Digest) (bool, error) {
	k, err := meta.KeyOf(d)
	if err != nil {
		return false, err
	}
	v, err := s.run(ctx, scriptTombstone, s.k.std, k)
	var r []int64
	if err == nil {
		r, err = ints(v)
	}
	if err == nil && len(r) != 1 {
		err = fmt.Errorf("meta: redis: %d results for 1 file", len(r))
	}
	if err != nil {
		return false, fmt.Errorf("meta: tombstone %s: %w", d, err)
	}
	return r[0] == 1, nil
}

// DropFileEntry implements FileIndex.
func (s *Store) DropFileEntry(ctx context.Context, d digest.Digest) (bool, error) {
	k, err := meta.KeyOf(d)
	if err != nil {
		return false, err
	}
	v, err := s.run(ctx, scriptDeleteFiles, s.k.std, "0", k)
	var r []int64
	if err == nil {
		r, err = ints(v)
	}
	switch {
	case err == nil && len(r) != 1:
		err = fmt.Errorf("meta: redis: %d results for 1 file", len(r))
	case err == nil && r[0] == -1:
		err = fmt.Errorf("%w: %s", meta.ErrNotTombstoned, d)
	}
	if err != nil {
		return false, fmt.Errorf("meta: delete file: %w", err)
	}
	return r[0] == 1, nil
}

// Files implements FileIndex.
func (s *Store) Files(ctx context.Context, digests []digest.Digest) ([]meta.FileInfo, error) {
	keys, err := meta.KeysOf(digests)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var cmds []*redis.SliceCmd
	_, err = s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for start := 0; start < len(keys); start += redisChunk {
			fields := make([]string, 0, redisChunk)
			for _, k := range keys[start:min(start+redisChunk, len(keys))] {
				fields = append(fields, string(k))
			}
			cmds = append(cmds, p.HMGet(ctx, s.k.files, fields...))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("meta: files: %w", err)
	}
	out := make([]meta.FileInfo, 0, len(digests))
	for _, cmd := range cmds {
		for _, v := range cmd.Val() {
			fi := meta.FileInfo{Digest: digests[len(out)]}
			if v != nil {
				str, _ := v.(string)
				n, loc, err := parseFileValue(str)
				if err != nil {
					return nil, fmt.Errorf("meta: files: entry of %s: %w", fi.Digest, err)
				}
				flags := byte(n & 7)
				fi.Exists, fi.Refs, fi.Location = true, n>>3, loc
				fi.Tombstoned, fi.Missing = flags&meta.FlagTombstoned != 0, flags&meta.FlagMissing != 0
			}
			out = append(out, fi)
		}
	}
	return out, nil
}

// ZeroFiles implements FileIndex.
func (s *Store) ZeroFiles(ctx context.Context, after digest.Digest, limit int) ([]digest.Digest, error) {
	out, err := s.zpage(ctx, s.k.zero, after, limit)
	if err != nil {
		return nil, fmt.Errorf("meta: zero files: %w", err)
	}
	return out, nil
}

// ReleaseLayers implements Bulk: one scriptRelease per layer, many per round trip.
func (s *Store) ReleaseLayers(ctx context.Context, layers []digest.Digest) ([]digest.Digest, error) {
	keys, err := meta.KeysOf(layers)
	if err != nil {
		return nil, err
	}
	var out []digest.Digest
	var errs []error
	for start := 0; start < len(keys); start += redisPipeline {
		end := min(start+redisPipeline, len(keys))
		calls := make([]scriptCall, 0, end-start)
		for _, k := range keys[start:end] {
			calls = append(calls, scriptCall{scriptRelease, s.k.std, []any{k, "1"}})
		}
		cmds, err := s.runAll(ctx, calls)
		if err != nil {
			errs = append(errs, err)
			break
		}
		failed := false
		for i, cmd := range cmds {
			v, err := cmd.Result()
			var zeroed []digest.Digest
			if err == nil {
				zeroed, err = releaseReply(v)
			}
			if err != nil {
				// An inconsistent layer changed nothing: the others go on.
				failed = failed || !errors.Is(err, meta.ErrInvalidRelease)
				errs = append(errs, fmt.Errorf("%s: %w", layers[start+i], err))
				continue
			}
			out = append(out, zeroed...)
		}
		if failed {
			break
		}
	}
	if err := errors.Join(errs...); err != nil {
		return out, fmt.Errorf("meta: release layers: %w", err)
	}
	return out, nil
}

// fileSteps runs script over files, redisChunk files per call, with args before
// the file keys, and returns the script's per-file result, in order; ok[i] is
// false where the call for files[i] failed (or was not sent).
func (s *Store) fileSteps(ctx context.Context, script *redis.Script, args []any, files []digest.Digest) (res []int64, ok []bool, err error) {
	keys, err := meta.KeysOf(files)
	if err != nil {
		return nil, nil, err
	}
	res, ok = make([]int64, len(keys)), make([]bool, len(keys))
	var errs []error
	step := redisChunk * redisPipeline
	for start := 0; start < len(keys) && len(errs) == 0; start += step {
		end := min(start+step, len(keys))
		var calls []scriptCall
		for c := start; c < end; c += redisChunk {
			a := append([]any{}, args...)
			for _, k := range keys[c:min(c+redisChunk, end)] {
				a = append(a, k)
			}
			calls = append(calls, scriptCall{script, s.k.std, a})
		}
		cmds, err := s.runAll(ctx, calls)
		if err != nil {
			return res, ok, err
		}
		for i, cmd := range cmds {
			c := start + i*redisChunk
			n := min(redisChunk, end-c)
			v, err := cmd.Result()
			var r []int64
			if err == nil {
				r, err = ints(v)
			}
			if err == nil && len(r) != n {
				err = fmt.Errorf("meta: redis: %d results for %d files", len(r), n)
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
			copy(res[c:], r)
			for j := c; j < c+n; j++ {
				ok[j] = true
			}
		}
	}
	return res, ok, errors.Join(errs...)
}

// TombstoneFiles implements Bulk.
func (s *Store) TombstoneFiles(ctx context.Context, files []digest.Digest) ([]digest.Digest, error) {
	res, ok, err := s.fileSteps(ctx, scriptTombstone, nil, files)
	out := meta.Pick(files, func(i int) bool { return i < len(ok) && ok[i] && res[i] == 1 })
	if err != nil {
		return out, fmt.Errorf("meta: tombstone files: %w", err)
	}
	return out, nil
}

// DropFileEntries implements Bulk.
func (s *Store) DropFileEntries(ctx context.Context, files []digest.Digest) ([]digest.Digest, error) {
	res, ok, err := s.fileSteps(ctx, scriptDeleteFiles, []any{"1"}, files)
	out := meta.Pick(files, func(i int) bool { return i < len(ok) && ok[i] && res[i] == 1 })
	if err != nil {
		return out, fmt.Errorf("meta: delete files: %w", err)
	}
	return out, nil
}
