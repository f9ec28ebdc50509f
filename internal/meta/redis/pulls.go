package redis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/redis/go-redis/v9"

	"github.com/cairn-registry/cairn/internal/meta"
)

// RecordPull implements Pulls.
func (s *Store) RecordPull(ctx context.Context, client string, layer digest.Digest, now time.Time) (int64, error) {
	lk, err := meta.KeyOf(layer)
	if err != nil {
		return 0, err
	}
	nowNs := now.UnixNano()
	bucket := s.opts.PopularityBucket
	keys := append(s.k.client(client), s.k.pop(lk))
	v, err := s.run(ctx, scriptRecordPull, keys, lk,
		strconv.FormatInt(nowNs, 10), strconv.FormatInt(now.UnixMicro(), 10),
		s.opts.MaxLayersPerClient, strconv.FormatInt(nowNs/int64(bucket), 10),
		s.opts.PopularityBuckets,
		// Counts older than the horizon are never read: a layer nobody pulled
		// for that long loses its key.
		max(1, (time.Duration(s.opts.PopularityBuckets)*bucket).Milliseconds()))
	if err != nil {
		return 0, fmt.Errorf("meta: record pull: %w", err)
	}
	prev, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("meta: record pull: unexpected reply %T", v)
	}
	return prev, nil
}

// LayerPulls implements Pulls. It counts the buckets at or after since that lie
// within PopularityBuckets of the newest one, as bolt's ring keeps.
func (s *Store) LayerPulls(ctx context.Context, layer digest.Digest, since time.Time) (int64, error) {
	lk, err := meta.KeyOf(layer)
	if err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m, err := s.c.HGetAll(ctx, s.k.pop(lk)).Result()
	if err != nil {
		return 0, fmt.Errorf("meta: layer pulls: %w", err)
	}
	type count struct{ slot, n int64 }
	counts := make([]count, 0, len(m))
	newest := int64(-1 << 63)
	for f, v := range m {
		slot, err1 := strconv.ParseInt(f, 10, 64)
		n, err2 := strconv.ParseInt(v, 10, 64)
		if err1 != nil || err2 != nil {
			return 0, fmt.Errorf("meta: layer pulls: corrupt bucket %q=%q", f, v)
		}
		counts = append(counts, count{slot, n})
		newest = max(newest, slot)
	}
	from := max(since.UnixNano()/int64(s.opts.PopularityBucket), newest-int64(s.opts.PopularityBuckets)+1)
	var total int64
	for _, c := range counts {
		if c.slot >= from {
			total += c.n
		}
	}
	return total, nil
}

// ClientLayers implements Pulls.
func (s *Store) ClientLayers(ctx context.Context, client string) ([]meta.LayerPull, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	keys := s.k.client(client)
	var (
		order *redis.StringSliceCmd
		pulls *redis.MapStringStringCmd
	)
	// MULTI: the time index and the entries from one moment.
	_, err := s.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		order = p.ZRevRange(ctx, keys[1], 0, -1)
		pulls = p.HGetAll(ctx, keys[0])
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("meta: client layers: %w", err)
	}
	entries := pulls.Val()
	var out []meta.LayerPull
	for _, lk := range order.Val() {
		v, ok := entries[lk]
		n, ns, found := strings.Cut(v, ",")
		pulls, err1 := strconv.ParseInt(n, 10, 64)
		last, err2 := strconv.ParseInt(ns, 10, 64)
		if !ok || !found || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("meta: client layers: client layer index is inconsistent")
		}
		out = append(out, meta.LayerPull{Layer: meta.DigestOf([]byte(lk)), Pulls: pulls, Last: time.Unix(0, last)})
	}
	return out, nil
}

// RepullRatio implements Pulls.
func (s *Store) RepullRatio(ctx context.Context, client string) (float64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	v, err := s.c.HMGet(ctx, s.k.client(client)[2], "pulls", "repulls").Result()
	if err != nil {
		return 0, fmt.Errorf("meta: repull ratio: %w", err)
	}
	var n [2]int64
	for i, e := range v {
		if e == nil {
			continue
		}
		str, _ := e.(string)
		if n[i], err = strconv.ParseInt(str, 10, 64); err != nil {
			return 0, fmt.Errorf("meta: repull ratio: %w", err)
		}
	}
	if n[0] == 0 {
		return 0, nil
	}
	return float64(n[1]) / float64(n[0]), nil
}
