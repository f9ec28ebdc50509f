// Package redis is the meta.Store that several cairn nodes share: one Redis
// server (not Cluster), each read-then-write step one Lua script. It keeps
// the key encoding of package meta, so its order and layer file lists are the
// bolt store's; metatest checks the two against each other.
package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/cairn-registry/cairn/internal/meta"
)

// Options configures the Redis store; zero fields take the defaults.
type Options struct {
	// Client, when set, is the connection to use (the redis section's,
	// shared with other Redis users); Addr, Username, Password and DB are
	// then not read, and Close leaves it open. It must reach one server
	// (or a sentinel-managed primary), not a Redis Cluster.
	Client redis.UniversalClient
	// OwnClient makes Close close Client too (it was opened for the store).
	OwnClient bool

	Addr     string // host:port
	Username string // ACL user; empty: the default user
	Password string
	DB       int
	// Prefix starts every key the store uses (default "cairn:"), so several
	// registries, or tests, can share one server.
	Prefix string
	// MaxLayersPerClient caps ULmap entries per client (default 4096).
	MaxLayersPerClient int
	// PopularityBucket is the width of one popularity counter (default 1h).
	PopularityBucket time.Duration
	// PopularityBuckets is how many counters each layer keeps (default 48).
	PopularityBuckets int
	// Log receives Open's warnings about the server's configuration
	// (nil: slog.Default()).
	Log *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.Prefix == "" {
		o.Prefix = "cairn:"
	}
	l := meta.PullLimits{
		MaxLayersPerClient: o.MaxLayersPerClient,
		PopularityBucket:   o.PopularityBucket,
		PopularityBuckets:  o.PopularityBuckets,
	}.WithDefaults()
	o.MaxLayersPerClient, o.PopularityBucket, o.PopularityBuckets = l.MaxLayersPerClient, l.PopularityBucket, l.PopularityBuckets
	return o
}

// Store is the metadata store shared by several cairn nodes (and the CLI beside a
// running server): every step that reads before it writes is one Lua script, which
// Redis runs alone. One server, not Redis Cluster: the scripts name keys of
// different hash slots.
//
// Redis must not lose what it acknowledged: run it with appendonly yes and
// maxmemory-policy noeviction. An evicted or lost file entry breaks the reference
// counts that keep GC from deleting live files.
type Store struct {
	c     redis.UniversalClient
	owned bool // c was opened here, and is closed by Close
	opts  Options
	k     redisKeys
}

var _ meta.Store = (*Store)(nil)

// redisKeys names the store's keys; see scripts.go for what each holds.
type redisKeys struct {
	prefix              string
	images, stats       string
	storeID             string   // Identity: the storage's id
	std                 []string // the KEYS of the file, recipe and pack scripts
	files, zero, layers string   // std[0:3]
	recipes             string   // std[3]
	byState             []string // std[4:8], state 1..4
	packs, packIDs      string   // std[8:10]
	popPrefix           string
}

func newRedisKeys(prefix string) redisKeys {
	k := redisKeys{
		prefix: prefix,
		images: prefix + "images", stats: prefix + "stats", storeID: prefix + "storeid",
		files: prefix + "files", zero: prefix + "zero", layers: prefix + "layerfiles",
		recipes: prefix + "recipes", popPrefix: prefix + "pop:",
		packs: prefix + "packs", packIDs: prefix + "packids",
	}
	k.std = []string{k.files, k.zero, k.layers, k.recipes}
	for _, st := range meta.States {
		k.std = append(k.std, prefix+"state:"+strconv.Itoa(int(st)))
	}
	k.byState = k.std[4:8:8]
	k.std = append(k.std, k.packs, k.packIDs)
	return k
}

func (k redisKeys) state(st meta.LayerState) string { return k.byState[st-1] }

func (k redisKeys) pop(lk []byte) string { return k.popPrefix + string(lk) }

// client returns the keys of a client's layer hash, time index and counters.
// The suffixes have one length, so no two clients' keys collide.
func (k redisKeys) client(name string) []string {
	base := k.prefix + "client:" + name
	return []string{base + ":l", base + ":t", base + ":m"}
}

// Open connects to the Redis server at o.Addr and checks that it answers.
func Open(ctx context.Context, o Options) (*Store, error) {
	o = o.withDefaults()
	var c redis.UniversalClient
	closeOwned := func() {}
	switch {
	case o.Client != nil:
		if _, cluster := o.Client.(*redis.ClusterClient); cluster {
			return nil, errors.New("meta: redis: the metadata store needs one server, not a Redis Cluster (its scripts touch keys of several hash slots)")
		}
		c = o.Client
		if o.Addr == "" {
			o.Addr = "the redis section's server"
		}
	case o.Addr == "":
		return nil, errors.New("meta: redis: no address")
	default:
		owned := redis.NewClient(&redis.Options{
			Addr: o.Addr, Username: o.Username, Password: o.Password, DB: o.DB,
			// A managed-cloud handshake that a plain server refuses: skip the round trip.
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		})
		c, closeOwned = owned, func() { owned.Close() }
	}
	if err := c.Ping(ctx).Err(); err != nil {
		closeOwned()
		return nil, fmt.Errorf("meta: redis at %s: %w", o.Addr, err)
	}
	if err := checkRedisConfig(ctx, c, o); err != nil {
		closeOwned()
		return nil, err
	}
	// Loaded now so pipelined EVALSHAs usually find them; runAll reloads a script
	// a restarted server lost.
	for _, s := range allScripts {
		if err := s.Load(ctx, c).Err(); err != nil {
			closeOwned()
			return nil, fmt.Errorf("meta: redis at %s: load script: %w", o.Addr, err)
		}
	}
	return &Store{c: c, owned: o.Client == nil || o.OwnClient, opts: o, k: newRedisKeys(o.Prefix)}, nil
}

// checkRedisConfig refuses a server that may evict keys: eviction would drop
// reference counts, and GC would then delete live files. volatile-* too: it
// spares the keys without a TTL today, but any given one later would go
// silently, where noeviction fails the write. It warns when the server persists nothing: a restart would lose the
// metadata, which cairn then rebuilds from storage, slowly. A server that
// hides its config (managed services, ACLs) is trusted, with a warning.
func checkRedisConfig(ctx context.Context, c redis.UniversalClient, o Options) error {
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	get := func(name string) (string, bool) {
		cfg, err := c.ConfigGet(ctx, name).Result()
		v, ok := cfg[name]
		return v, err == nil && ok
	}
	policy, ok := get("maxmemory-policy")
	if !ok {
		log.Warn("meta: redis: CONFIG GET is not allowed: cannot check that maxmemory-policy is noeviction and that the server persists its data (appendonly or save); make sure it does", "addr", o.Addr)
		return nil
	}
	if policy != "noeviction" {
		return fmt.Errorf("meta: redis at %s: maxmemory-policy %s may evict the file index; set noeviction", o.Addr, policy)
	}
	aof, okAOF := get("appendonly")
	save, okSave := get("save")
	if okAOF && okSave && aof != "yes" && strings.TrimSpace(save) == "" {
		log.Warn("meta: redis: the server persists nothing (appendonly no, save \"\"): a restart loses the dedup metadata, which cairn then rebuilds from storage; set appendonly yes", "addr", o.Addr)
	}
	return nil
}

// StoreID implements Identity. A flushed server, or one restarted without
// persistence, has lost the key: "" then.
func (s *Store) StoreID(ctx context.Context) (string, error) {
	id, err := s.c.Get(ctx, s.k.storeID).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return id, err
}

// SetStoreID implements Identity.
func (s *Store) SetStoreID(ctx context.Context, id string) error {
	if id == "" {
		return s.c.Del(ctx, s.k.storeID).Err()
	}
	return s.c.Set(ctx, s.k.storeID, id, 0).Err()
}

// Close closes the connections it opened; a shared Client stays open.
func (s *Store) Close() error {
	if !s.owned {
		return nil
	}
	return s.c.Close()
}

// run runs script as one atomic step.
func (s *Store) run(ctx context.Context, script *redis.Script, keys []string, args ...any) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return script.Run(ctx, s.c, keys, args...).Result()
}

// scriptCall is one script run of a pipeline.
type scriptCall struct {
	script *redis.Script
	keys   []string
	args   []any
}

// runAll runs calls in one pipeline, in order, and returns their commands; each
// call is atomic, the pipeline is not. A call whose script the server lacks
// (restarted, or SCRIPT FLUSH) runs again alone, sending the script.
func (s *Store) runAll(ctx context.Context, calls []scriptCall) ([]*redis.Cmd, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	pipe := s.c.Pipeline()
	cmds := make([]*redis.Cmd, len(calls))
	for i, c := range calls {
		cmds[i] = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx) // each command keeps its own error
	for i, cmd := range cmds {
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			cmds[i] = calls[i].script.Run(ctx, s.c, calls[i].keys, calls[i].args...)
		}
	}
	return cmds, nil
}

// ints converts a script's array of integers.
func ints(v any) ([]int64, error) {
	arr, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("meta: redis: unexpected reply %T", v)
	}
	out := make([]int64, len(arr))
	for i, e := range arr {
		n, ok := e.(int64)
		if !ok {
			return nil, fmt.Errorf("meta: redis: unexpected reply element %T", e)
		}
		out[i] = n
	}
	return out, nil
}

// zpage lists up to limit members of a lexicographic sorted set after the key of
// the digest `after`.
func (s *Store) zpage(ctx context.Context, key string, after digest.Digest, limit int) ([]digest.Digest, error) {
	if limit <= 0 {
		return nil, nil
	}
	start := "-"
	if after != "" {
		k, err := meta.KeyOf(after)
		if err != nil {
			return nil, err
		}
		start = "(" + string(k)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	members, err := s.c.ZRangeByLex(ctx, key, &redis.ZRangeBy{Min: start, Max: "+", Count: int64(limit)}).Result()
	if err != nil {
		return nil, err
	}
	out := make([]digest.Digest, len(members))
	for i, m := range members {
		out[i] = meta.DigestOf([]byte(m))
	}
	return out, nil
}

// PutLayer implements Layers.
func (s *Store) PutLayer(ctx context.Context, layer digest.Digest, recipe []byte, state meta.LayerState) error {
	k, err := meta.CheckedLayerKey(layer, state)
	if err != nil {
		return err
	}
	if _, err := s.run(ctx, scriptPutLayer, s.k.std, k, int(state), meta.LayerValue(state, recipe)); err != nil {
		return fmt.Errorf("meta: put layer %s: %w", layer, err)
	}
	return nil
}

// SetLayerState implements Layers.
func (s *Store) SetLayerState(ctx context.Context, layer digest.Digest, state meta.LayerState) error {
	k, err := meta.CheckedLayerKey(layer, state)
	if err != nil {
		return err
	}
	v, err := s.run(ctx, scriptSetLayerState, s.k.std, k, int(state))
	if err == nil && v == int64(0) {
		err = meta.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("meta: set layer state %s: %w", layer, err)
	}
	return nil
}

// GetLayer implements Layers.
func (s *Store) GetLayer(ctx context.Context, layer digest.Digest) ([]byte, meta.LayerState, error) {
	k, err := meta.KeyOf(layer)
	if err != nil {
		return nil, 0, err
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	v, err := s.c.HGet(ctx, s.k.recipes, string(k)).Bytes()
	if errors.Is(err, redis.Nil) || err == nil && len(v) == 0 {
		err = meta.ErrNotFound
	}
	if err != nil {
		return nil, 0, fmt.Errorf("meta: get layer %s: %w", layer, err)
	}
	state, recipe := meta.SplitLayerValue(v)
	return recipe, state, nil
}

// DeleteLayer implements Layers.
func (s *Store) DeleteLayer(ctx context.Context, layer digest.Digest) error {
	k, err := meta.KeyOf(layer)
	if err != nil {
		return err
	}
	if _, err := s.run(ctx, scriptDeleteLayer, s.k.std, k); err != nil {
		return fmt.Errorf("meta: delete layer %s: %w", layer, err)
	}
	return nil
}

// ListLayers implements Layers.
func (s *Store) ListLayers(ctx context.Context, state meta.LayerState, after digest.Digest, limit int) ([]digest.Digest, error) {
	if err := meta.CheckState(state); err != nil {
		return nil, err
	}
	out, err := s.zpage(ctx, s.k.state(state), after, limit)
	if err != nil {
		return nil, fmt.Errorf("meta: list layers: %w", err)
	}
	return out, nil
}

// LayerCounts implements Layers. The state sets are the counters: ZCARD is
// constant time and cannot drift from the listings.
func (s *Store) LayerCounts(ctx context.Context) (map[meta.LayerState]int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cmds := make([]*redis.IntCmd, len(meta.States))
	_, err := s.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i, st := range meta.States {
			cmds[i] = p.ZCard(ctx, s.k.state(st))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("meta: layer counts: %w", err)
	}
	out := make(map[meta.LayerState]int64, len(meta.States))
	for i, st := range meta.States {
		out[st] = cmds[i].Val()
	}
	return out, nil
}

// SetImageLayers implements ImageMap.
func (s *Store) SetImageLayers(ctx context.Context, manifest digest.Digest, layers []digest.Digest) error {
	k, v, err := meta.ImageRecord(manifest, layers)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.c.HSet(ctx, s.k.images, string(k), v).Err(); err != nil {
		return fmt.Errorf("meta: set image layers %s: %w", manifest, err)
	}
	return nil
}

// ImageLayers implements ImageMap.
func (s *Store) ImageLayers(ctx context.Context, manifest digest.Digest) ([]digest.Digest, error) {
	k, err := meta.KeyOf(manifest)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	v, err := s.c.HGet(ctx, s.k.images, string(k)).Result()
	if errors.Is(err, redis.Nil) {
		err = meta.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("meta: image layers %s: %w", manifest, err)
	}
	return meta.DecodeImageLayers(v), nil
}

// DeleteImage implements ImageMap.
func (s *Store) DeleteImage(ctx context.Context, manifest digest.Digest) error {
	k, err := meta.KeyOf(manifest)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.c.HDel(ctx, s.k.images, string(k)).Err(); err != nil {
		return fmt.Errorf("meta: delete image %s: %w", manifest, err)
	}
	return nil
}

// AddStat implements Stats.
func (s *Store) AddStat(ctx context.Context, name string, delta int64) error {
	if err := meta.CheckStatName(name); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.c.HIncrBy(ctx, s.k.stats, name, delta).Err(); err != nil {
		return fmt.Errorf("meta: add stat %s: %w", name, err)
	}
	return nil
}

// Stats implements Stats.
func (s *Store) Stats(ctx context.Context) (map[string]int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m, err := s.c.HGetAll(ctx, s.k.stats).Result()
	if err != nil {
		return nil, fmt.Errorf("meta: stats: %w", err)
	}
	out := make(map[string]int64, len(m))
	for name, v := range m {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("meta: stats: %s: %w", name, err)
		}
		out[name] = n
	}
	return out, nil
}
