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
local acked = 0
local freed = false
for i = 3, #ARGV, 2 do
  local id = ARGV[i]
  local j, err = held(id, ARGV[i + 1])
  if not j then
    out[#out + 1] = err
  else
    redis.call('HDEL', K.jobs, id)
    remember(K, id, j, now)
    redis.call('ZREM', K.lease, id)
    if j.g and key_unlease(j.g) then freed = true end
    acked = acked + 1
    out[#out + 1] = { 1 }
  end
end
if acked > 0 then redis.call('HINCRBY', K.ctr, 'acked', acked) end
if freed then wake() end
return out
