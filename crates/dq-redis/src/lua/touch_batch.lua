-- touch_batch: pushes the deadlines of many held leases of one topic in one
-- call, each exactly as touch.lua does, in order. A refused item changes
-- nothing.
-- KEYS: the topic's keys (see common.lua).
-- ARGV: topic, now, then per job: id, token, lease_ms or '' (job's, then
--   topic's) (at most MAX_BATCH jobs).
-- Returns: per job, in order: {1, deadline} | {NOT_FOUND} |
--   {TOKEN_MISMATCH} | {NOT_IN_STATE, DEAD} dead
-- Side effects: per job touched, its lease ZSET score (as touch.lua).
local n = (#ARGV - 2) / 3
if n > MAX_BATCH then return redis.error_reply('ERR touch_batch: more than MAX_BATCH jobs') end
local out = {}
local now = clock_ms(ARGV[2])
local default_lease = nil
for a = 3, #ARGV, 3 do
  local id = ARGV[a]
  local j, err = held(id, ARGV[a + 1])
  if not j then
    out[#out + 1] = err
  else
    local lease = tonumber(ARGV[a + 2]) or j.L
    if not lease then
      default_lease = default_lease or topic_cfg(K).lease_ms
      lease = default_lease
    end
    local deadline = now + lease
    redis.call('ZADD', K.lease, deadline, id)
    out[#out + 1] = {1, deadline}
  end
end
return out
