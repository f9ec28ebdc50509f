package redis

import "github.com/redis/go-redis/v9"

// The Lua scripts behind every Redis step that reads before it writes: Redis runs a
// script alone, so each is one atomic step, like a bolt transaction.
//
// The file, recipe and pack scripts share one KEYS layout (redisKeys.std):
//
//	KEYS[1] files       hash: file key -> refs*8 + flags (meta.FlagTombstoned 1,
//	                    FlagRevived 2, FlagMissing 4), then,
//	                    for a file in a pack, ":offset:length:pack id" (luaFiles)
//	KEYS[2] zero        sorted set (all scores 0, so ordered by key bytes): files
//	                    with no references
//	KEYS[3] layerfiles  hash: layer key -> its file keys, FileSet.Encode
//	KEYS[4] recipes     hash: layer key -> state byte, recipe
//	KEYS[5..8]          sorted sets (scores 0) of the layers in states 1..4
//	KEYS[9]  packs      hash: pack id -> "size:live:changed:tombstoned" (luaPacks)
//	KEYS[10] packids    sorted set (scores 0) of the pack ids, for ListPacks
//
// File and layer keys are keyOf's: 32 raw bytes for sha256, so the index takes
// half the memory of digest strings and pages in the same order as bolt.

// luaFiles reads and writes file entries. The location is kept as the string
// the entry holds after its number (locString), which the scripts compare and
// copy whole; entries written before packs hold only the number.
const luaFiles = `
local function file_get(k)
  local v = redis.call('HGET', KEYS[1], k)
  if not v then return nil, '' end
  local i = string.find(v, ':', 1, true)
  if not i then return tonumber(v), '' end
  return tonumber(string.sub(v, 1, i - 1)), string.sub(v, i)
end
-- %d, not tostring: Lua prints numbers past 1e14 with an exponent.
local function file_set(k, n, loc)
  redis.call('HSET', KEYS[1], k, string.format('%d', n) .. loc)
end
`

// luaKeysOf parses a layerfiles value: each key after its length as a uvarint.
const luaKeysOf = `
local function keys_of(v)
  local out, i, n = {}, 1, #v
  while i <= n do
    local len, mul = 0, 1
    while true do
      local b = string.byte(v, i)
      if not b then error('meta: corrupt layer file list') end
      i = i + 1
      len = len + (b % 128) * mul
      if b < 128 then break end
      mul = mul * 128
    end
    out[#out + 1] = string.sub(v, i, i + len - 1)
    i = i + len
  end
  return out
end
`

// luaDeleteLayer removes a layer's recipe and its state index entry.
const luaDeleteLayer = `
local function delete_recipe(layer)
  local r = redis.call('HGET', KEYS[4], layer)
  if not r then return end
  redis.call('HDEL', KEYS[4], layer)
  redis.call('ZREM', KEYS[4 + string.byte(r, 1)], layer)
end
`

// scriptAddLayerRefs: ARGV[1] layer key, ARGV[2] the encoded file set. It returns
// -1 when the layer holds another set, else one code per file of the set:
// refs*4 + write*2 + revived, where revived is tombstoned or revived-pending
// (refOf in the bolt store) and write adds unknown and Missing.
var scriptAddLayerRefs = redis.NewScript(luaFiles + luaKeysOf + `
local held = redis.call('HGET', KEYS[3], ARGV[1])
if held and held ~= ARGV[2] then return -1 end
local keys = keys_of(ARGV[2])
local change = (not held) and #keys > 0
local out = {}
for j, k in ipairs(keys) do
  local v, loc = file_get(k)
  local refs, flags = 0, 0
  if v then
    flags = v % 8
    refs = (v - flags) / 8
  end
  local revived = bit.band(flags, 3) ~= 0
  local write = (not v) or revived or bit.band(flags, 4) ~= 0
  if change then
    if bit.band(flags, 1) ~= 0 then flags = bit.bor(flags, 2) end
    -- a write is handed out, so Missing is settled; the tombstone is lifted
    flags = bit.band(flags, 2)
    if v and refs == 0 then redis.call('ZREM', KEYS[2], k) end
    refs = refs + 1
    file_set(k, refs * 8 + flags, loc)
  end
  local code = refs * 4
  if write then code = code + 2 end
  if revived then code = code + 1 end
  out[j] = code
end
if change then redis.call('HSET', KEYS[3], ARGV[1], ARGV[2]) end
return out
`)

// scriptRelease: ARGV[1] layer key, ARGV[2] "1" to delete the layer's recipe too
// (ReleaseLayers). It returns {0, zeroed file keys...}, or {1, file key} when a
// held file has no references: then nothing changed.
var scriptRelease = redis.NewScript(luaFiles + luaKeysOf + luaDeleteLayer + `
local out = {0}
local held = redis.call('HGET', KEYS[3], ARGV[1])
if held then
  local keys = keys_of(held)
  local vals, locs = {}, {}
  for j, k in ipairs(keys) do
    local v, loc = file_get(k)
    if not v or v < 8 then return {1, k} end
    vals[j], locs[j] = v, loc
  end
  for j, k in ipairs(keys) do
    local v = vals[j] - 8
    file_set(k, v, locs[j])
    if v < 8 then
      redis.call('ZADD', KEYS[2], 0, k)
      out[#out + 1] = k
    end
  end
  redis.call('HDEL', KEYS[3], ARGV[1])
end
if ARGV[2] == '1' then delete_recipe(ARGV[1]) end
return out
`)

// scriptTombstone: ARGV file keys. It returns 1 per file tombstoned (or found
// tombstoned), 0 per file with references or no entry.
var scriptTombstone = redis.NewScript(luaFiles + `
local out = {}
for i, k in ipairs(ARGV) do
  local flags, loc = file_get(k)
  out[i] = 0
  if flags and flags < 8 then
    out[i] = 1
    if bit.band(flags, 1) == 0 then
      -- a fresh tombstone starts a new generation: an earlier revive is settled
      file_set(k, bit.band(bit.bor(flags, 1), 5), loc)
    end
  end
end
return out
`)

// scriptDeleteFiles: ARGV[1] "1" for DeleteFiles (settled), "0" for DeleteFile;
// ARGV[2...] file keys. Per file it returns 0 (deleted, or no entry), 1 (revived:
// marked Missing) or -1 (not tombstoned, DeleteFile only: unchanged). A deleted
// entry's location leaves its pack's Live; a revived one keeps it.
var scriptDeleteFiles = redis.NewScript(luaFiles + luaPacks + `
local settled = ARGV[1] == '1'
local out = {}
for i = 2, #ARGV do
  local k = ARGV[i]
  local v, loc = file_get(k)
  local r = 0
  if v then
    local flags = v % 8
    if bit.band(flags, 1) ~= 0 then
      redis.call('HDEL', KEYS[1], k)
      redis.call('ZREM', KEYS[2], k)
      loc_leave(loc)
    elseif settled or bit.band(flags, 2) ~= 0 then
      file_set(k, v - flags + bit.band(bit.bor(flags, 4), 5), loc)
      r = 1
    else
      r = -1
    end
  end
  out[i - 1] = r
end
pack_flush()
return out
`)

// scriptPutLayer: ARGV[1] layer key, ARGV[2] state, ARGV[3] the record.
var scriptPutLayer = redis.NewScript(`
local st = tonumber(ARGV[2])
local old = redis.call('HGET', KEYS[4], ARGV[1])
if old and string.byte(old, 1) ~= st then
  redis.call('ZREM', KEYS[4 + string.byte(old, 1)], ARGV[1])
end
redis.call('HSET', KEYS[4], ARGV[1], ARGV[3])
redis.call('ZADD', KEYS[4 + st], 0, ARGV[1])
return 1
`)

// scriptSetLayerState: ARGV[1] layer key, ARGV[2] state. 0: no recipe.
var scriptSetLayerState = redis.NewScript(`
local st = tonumber(ARGV[2])
local old = redis.call('HGET', KEYS[4], ARGV[1])
if not old then return 0 end
local o = string.byte(old, 1)
if o ~= st then
  redis.call('HSET', KEYS[4], ARGV[1], string.char(st) .. string.sub(old, 2))
  redis.call('ZREM', KEYS[4 + o], ARGV[1])
  redis.call('ZADD', KEYS[4 + st], 0, ARGV[1])
end
return 1
`)

// scriptDeleteLayer: ARGV[1] layer key.
var scriptDeleteLayer = redis.NewScript(luaDeleteLayer + `
delete_recipe(ARGV[1])
return 1
`)

// scriptRecordPull: KEYS a client's layer hash (layer key -> "pulls,last unix
// nanos"), its time index (sorted set, score unix micros: exact in a double), its
// counters hash (pulls, repulls), and the layer's popularity hash (bucket slot ->
// pulls). ARGV: layer key, nanos, micros, max entries, slot, buckets kept, TTL of
// the popularity hash in ms. It returns the client's earlier pulls of the layer.
var scriptRecordPull = redis.NewScript(`
local prev = 0
local v = redis.call('HGET', KEYS[1], ARGV[1])
if v then
  prev = tonumber(string.sub(v, 1, string.find(v, ',', 1, true) - 1))
  redis.call('HINCRBY', KEYS[3], 'repulls', 1)
else
  -- evict before inserting so the new entry is never its own victim
  local max = tonumber(ARGV[4])
  while redis.call('ZCARD', KEYS[2]) >= max do
    local old = redis.call('ZPOPMIN', KEYS[2])
    if #old == 0 then break end
    redis.call('HDEL', KEYS[1], old[1])
  end
end
redis.call('HINCRBY', KEYS[3], 'pulls', 1)
redis.call('HSET', KEYS[1], ARGV[1], (prev + 1) .. ',' .. ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
redis.call('HINCRBY', KEYS[4], ARGV[5], 1)
local n = tonumber(ARGV[6])
if redis.call('HLEN', KEYS[4]) > n then
  local oldest = tonumber(ARGV[5]) - n
  for _, f in ipairs(redis.call('HKEYS', KEYS[4])) do
    if tonumber(f) <= oldest then redis.call('HDEL', KEYS[4], f) end
  end
end
redis.call('PEXPIRE', KEYS[4], ARGV[7])
return prev
`)

var allScripts = []*redis.Script{
	scriptAddLayerRefs, scriptRelease, scriptTombstone, scriptDeleteFiles,
	scriptPutLayer, scriptSetLayerState, scriptDeleteLayer, scriptRecordPull,
	scriptTryLease, scriptReleaseLease,
	scriptBeginPack, scriptPlaceFiles, scriptListPacks, scriptTombstonePack, scriptDeletePack,
}
