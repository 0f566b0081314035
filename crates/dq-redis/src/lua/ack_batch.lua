-- ack_batch: completes many reserved jobs of one topic in one call, each
-- exactly as ack.lua does, in order (a duplicate id answers {-1} after its
-- first ack). A refused item changes nothing.
-- KEYS: the topic's keys (see common.lua).
-- ARGV: topic, now, then per job: id, token (at most MAX_BATCH jobs).
-- Returns: per job a status, in order: {1} | {-1} not found |
--   {-2} token mismatch | {-3, DEAD} dead
-- Side effects: per job acked, as ack.lua's: HDEL job record, ZREM lease,
--   the id's dedup window (if it has one) from now; ctr.acked + the number
--   acked, once; keyed jobs' lease counts (a key freed from held: one
--   PUBLISH).
local n = (#ARGV - 2) / 2
if n > MAX_BATCH then return redis.error_reply('ERR ack_batch: more than MAX_BATCH jobs') end
local out = {}
local now = clock_ms(ARGV[2])
local ids = {}
for i = 3, #ARGV, 2 do ids[#ids + 1] = ARGV[i] end
-- Every record read with one HMGET (and only the fields an ack needs
-- kept), the acked ones deleted with one HDEL and one ZREM; an id acked
-- earlier in this batch is gone for the rest.
local raws = redis.call('HMGET', K.jobs, unpack(ids))
local gone = {}
local done = {}
local freed = false
for i, id in ipairs(ids) do
  local rec = nil
  if raws[i] and not gone[id] then
    local _, s, t, dd, g
    _, _, _, _, s, _, _, _, _, _, _, _, t, _, _, _, _, _, _, _, dd, g = cmsgpack.unpack(raws[i])
    rec = {s = s, t = t, dd = dd, g = g}
  end
  local j, err = held_record(rec, ARGV[2 * i + 2])
  if not j then
    out[#out + 1] = err
  else
    gone[id] = true
    done[#done + 1] = id
    remember(K, id, j, now)
    if j.g and key_unlease(j.g) then freed = true end
    out[#out + 1] = { 1 }
  end
end
if #done > 0 then
  redis.call('HDEL', K.jobs, unpack(done))
  redis.call('ZREM', K.lease, unpack(done))
  redis.call('HINCRBY', K.ctr, 'acked', #done)
end
if freed then wake() end
return out
