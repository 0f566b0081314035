-- raise_mark: raises the mark of a named record if it is lower (Store::raise_mark).
-- Runs on its own (no common.lua; the codes of codes.rs only): one key,
-- the records HASH (keys.rs).
-- KEYS: the records hash. ARGV: name, mark
-- Returns: the mark after the call, or NOT_FOUND if there is no such record.
local v = 'v:' .. ARGV[1]
local m = 'm:' .. ARGV[1]
if redis.call('HEXISTS', KEYS[1], v) == 0 then return NOT_FOUND end
local cur = tonumber(redis.call('HGET', KEYS[1], m) or '0')
local want = tonumber(ARGV[2])
if want > cur then
  redis.call('HSET', KEYS[1], m, ARGV[2])
  return want
end
return cur
