package redis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cairn-registry/cairn/internal/meta"
)

// luaPacks reads and changes pack records (KEYS[9]) for one script run: each
// record is read once, changed in a table, and written back by pack_flush.
// Changed is the server's TIME in unix microseconds, read once per run; all
// numbers stay below 2^53, so Lua's doubles hold them exactly.
const luaPacks = `
local packs, dirty, now = {}, {}, nil
local function clock()
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return now
end
-- pack_get returns the record of id, or false for none.
local function pack_get(id)
  local p = packs[id]
  if p == nil then
    p = false
    local v = redis.call('HGET', KEYS[9], id)
    if v then
      local size, live, changed, tomb = string.match(v, '^(%-?%d+):(%-?%d+):(%-?%d+):([01])$')
      if not size then error('meta: corrupt pack record ' .. id) end
      p = {size = tonumber(size), live = tonumber(live), changed = tonumber(changed), tomb = tomb == '1'}
    end
    packs[id] = p
  end
  return p
end
local function pack_mark(id, p)
  if not p.dirty then
    p.dirty = true
    dirty[#dirty + 1] = id
  end
end
local function pack_flush()
  for _, id in ipairs(dirty) do
    local p = packs[id]
    local t = 0
    if p.tomb then t = 1 end
    redis.call('HSET', KEYS[9], id, string.format('%d:%d:%d:%d', p.size, p.live, p.changed, t))
  end
  dirty = {}
end
-- loc_leave takes a file at loc (a file entry's location string, '' for
-- none) out of its pack's Live. A pack without a record cannot hold a
-- located file, so none is left alone rather than made up.
local function loc_leave(loc)
  if loc == '' then return end
  local len, id = string.match(loc, '^:%d+:(%d+):(.*)$')
  local p = id and pack_get(id)
  if not p then return end
  p.live = p.live - tonumber(len)
  p.changed = clock()
  pack_mark(id, p)
end
`

// scriptBeginPack: ARGV[1] pack id.
var scriptBeginPack = redis.NewScript(luaPacks + `
if redis.call('HEXISTS', KEYS[9], ARGV[1]) == 0 then
  redis.call('HSET', KEYS[9], ARGV[1], string.format('0:0:%d:0', clock()))
  redis.call('ZADD', KEYS[10], 0, ARGV[1])
end
return 1
`)

// scriptPlaceFiles: ARGV[1] pack id, ARGV[2] size, then three per file: its
// key, the new location and the From location (locString, empty for none). It
// returns -1 when the pack is gone (nothing changed), else 1 or 0 per file:
// placed or not. Files are taken in order, so a file named twice ends where
// the later placement puts it.
var scriptPlaceFiles = redis.NewScript(luaFiles + luaPacks + `
local id = ARGV[1]
local p = pack_get(id)
if not p or p.tomb then return -1 end
p.size = tonumber(ARGV[2])
pack_mark(id, p)
local out = {}
for i = 3, #ARGV, 3 do
  local k, to, from = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local v, loc = file_get(k)
  local placed = 0
  if v and (from == '' or from == loc) then
    placed = 1
    if loc ~= to then
      -- a move within this pack goes through p too: pack_get caches it
      loc_leave(loc)
      p.live = p.live + tonumber(string.match(to, '^:%d+:(%d+):'))
      file_set(k, v, to)
    end
  end
  out[#out + 1] = placed
end
pack_flush()
return out
`)

// scriptListPacks: ARGV[1] the ZRANGEBYLEX min, ARGV[2] limit. It returns the
// ids and records in turn, read at one instant.
var scriptListPacks = redis.NewScript(`
local ids = redis.call('ZRANGEBYLEX', KEYS[10], ARGV[1], '+', 'LIMIT', 0, ARGV[2])
local out = {}
for _, id in ipairs(ids) do
  local v = redis.call('HGET', KEYS[9], id)
  if v then
    out[#out + 1] = id
    out[#out + 1] = v
  end
end
return out
`)

// scriptTombstonePack: ARGV[1] pack id, ARGV[2] olderThan in µs. 1: tombstoned.
var scriptTombstonePack = redis.NewScript(luaPacks + `
local p = pack_get(ARGV[1])
if not p then return 0 end
if p.tomb then return 1 end
if p.live ~= 0 or clock() - p.changed < tonumber(ARGV[2]) then return 0 end
p.tomb = true
pack_mark(ARGV[1], p)
pack_flush()
return 1
`)

// scriptDeletePack: ARGV[1] pack id. 0: not tombstoned, left alone.
var scriptDeletePack = redis.NewScript(luaPacks + `
local p = pack_get(ARGV[1])
if not p then return 1 end
if not p.tomb then return 0 end
redis.call('HDEL', KEYS[9], ARGV[1])
redis.call('ZREM', KEYS[10], ARGV[1])
return 1
`)

// locString is how a file entry holds a location after its number:
// ":offset:length:pack id", the id last so it may hold any byte. It is
// canonical (decimal without leading zeros), so scripts compare locations as
// strings. The zero Location is "".
func locString(l meta.Location) string {
	if l.IsZero() {
		return ""
	}
	b := make([]byte, 0, 2+2*20+1+len(l.Pack))
	b = append(b, ':')
	b = strconv.AppendInt(b, l.Offset, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, l.Length, 10)
	b = append(b, ':')
	return string(append(b, l.Pack...))
}

// parseFileValue parses a files hash value: refs*8+flags, then the location
// if any.
func parseFileValue(v string) (n int64, loc meta.Location, err error) {
	num, rest, located := strings.Cut(v, ":")
	if n, err = strconv.ParseInt(num, 10, 64); err != nil || !located {
		return n, meta.Location{}, err
	}
	off, rest, ok1 := strings.Cut(rest, ":")
	length, pack, ok2 := strings.Cut(rest, ":")
	loc = meta.Location{Pack: pack}
	var err1, err2 error
	loc.Offset, err1 = strconv.ParseInt(off, 10, 64)
	loc.Length, err2 = strconv.ParseInt(length, 10, 64)
	if !ok1 || !ok2 || err1 != nil || err2 != nil || pack == "" {
		return n, meta.Location{}, fmt.Errorf("meta: corrupt location %q", v)
	}
	return n, loc, nil
}

// parsePackRecord parses a packs hash value.
func parsePackRecord(id, v string) (meta.PackInfo, error) {
	f := strings.Split(v, ":")
	if len(f) != 4 {
		return meta.PackInfo{}, fmt.Errorf("meta: corrupt pack record %s: %q", id, v)
	}
	var n [3]int64
	for i := range n {
		var err error
		if n[i], err = strconv.ParseInt(f[i], 10, 64); err != nil {
			return meta.PackInfo{}, fmt.Errorf("meta: corrupt pack record %s: %w", id, err)
		}
	}
	return meta.PackInfo{ID: id, Size: n[0], Live: n[1], Changed: time.UnixMicro(n[2]), Tombstoned: f[3] == "1"}, nil
}

// BeginPack implements Packs.
func (s *Store) BeginPack(ctx context.Context, id string) error {
	if err := meta.CheckPackID(id); err != nil {
		return err
	}
	if _, err := s.run(ctx, scriptBeginPack, s.k.std, id); err != nil {
		return fmt.Errorf("meta: begin pack %s: %w", id, err)
	}
	return nil
}

// PlaceFiles implements Packs: the whole call is one script, as the contract
// makes it one atomic step.
func (s *Store) PlaceFiles(ctx context.Context, id string, size int64, files []meta.Placement) ([]bool, error) {
	keys, err := meta.CheckPlacements(id, size, files)
	if err != nil {
		return nil, err
	}
	args := make([]any, 0, 2+3*len(files))
	args = append(args, id, size)
	for i, f := range files {
		to := meta.Location{Pack: id, Offset: f.Offset, Length: f.Length}
		args = append(args, keys[i], locString(to), locString(f.From))
	}
	v, err := s.run(ctx, scriptPlaceFiles, s.k.std, args...)
	if err == nil && v == int64(-1) {
		err = meta.ErrPackGone
	}
	var codes []int64
	if err == nil {
		codes, err = ints(v)
	}
	if err == nil && len(codes) != len(files) {
		err = fmt.Errorf("meta: redis: %d results for %d files", len(codes), len(files))
	}
	if err != nil {
		return nil, fmt.Errorf("meta: place files in pack %s: %w", id, err)
	}
	placed := make([]bool, len(files))
	for i, c := range codes {
		placed[i] = c == 1
	}
	return placed, nil
}

// ListPacks implements Packs.
func (s *Store) ListPacks(ctx context.Context, after string, limit int) ([]meta.PackInfo, error) {
	if limit <= 0 {
		return nil, nil
	}
	start := "-"
	if after != "" {
		start = "(" + after
	}
	v, err := s.run(ctx, scriptListPacks, s.k.std, start, limit)
	if err != nil {
		return nil, fmt.Errorf("meta: list packs: %w", err)
	}
	arr, ok := v.([]any)
	if !ok || len(arr)%2 != 0 {
		return nil, fmt.Errorf("meta: list packs: unexpected reply %T", v)
	}
	var out []meta.PackInfo
	for i := 0; i < len(arr); i += 2 {
		id, ok1 := arr[i].(string)
		rec, ok2 := arr[i+1].(string)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("meta: list packs: unexpected reply elements %T, %T", arr[i], arr[i+1])
		}
		p, err := parsePackRecord(id, rec)
		if err != nil {
			return nil, fmt.Errorf("meta: list packs: %w", err)
		}
		out = append(out, p)
	}
	return out, nil
}

// TombstonePack implements Packs.
func (s *Store) TombstonePack(ctx context.Context, id string, olderThan time.Duration) (bool, error) {
	if err := meta.CheckPackID(id); err != nil {
		return false, err
	}
	v, err := s.run(ctx, scriptTombstonePack, s.k.std, id, meta.OlderThanMicros(olderThan))
	if err != nil {
		return false, fmt.Errorf("meta: tombstone pack %s: %w", id, err)
	}
	return v == int64(1), nil
}

// DeletePack implements Packs.
func (s *Store) DeletePack(ctx context.Context, id string) (bool, error) {
	if err := meta.CheckPackID(id); err != nil {
		return false, err
	}
	v, err := s.run(ctx, scriptDeletePack, s.k.std, id)
	if err != nil {
		return false, fmt.Errorf("meta: delete pack %s: %w", id, err)
	}
	return v == int64(1), nil
}
