-- claim: promotes due jobs, then leases up to `max` ready jobs, most urgent
-- first (priority, then due, then enqueue order).
-- KEYS: the topic's keys (see common.lua).
-- ARGV: topic, now, max, lease_ms override or '', token prefix (random per call)
-- Returns: {next_due (-1 none; now if ready jobs remain), then 8 per job:
--   id, token, attempt, due, lease deadline, priority, kind, body}
-- Side effects: sched -> ready (at most 1000), ready -> lease, job hashes
--   (s=r, a+1, t, u).
local now, max = tonumber(ARGV[2]), tonumber(ARGV[3])
local lease_override = tonumber(ARGV[4])
promote(K, now, 1000)
local members = redis.call('ZRANGE', K.ready, 0, max - 1)
local out = {0}
local cfg = nil
for i, m in ipairs(members) do
  redis.call('ZREM', K.ready, m)
  local id = string.sub(m, READY_PREFIX + 1)
  local jk = K.job .. id
  local f = redis.call('HMGET', jk, 'L', 'd', 'p', 'k', 'b', 's')
  if f[6] == 'y' then
    local lease = lease_override or tonumber(f[1])
    if lease == nil then
      if cfg == nil then cfg = topic_cfg(K) end
      lease = cfg.lease_ms
    end
    local deadline = now + lease
    local token = ARGV[5] .. string.format('%x', i)
    local attempt = redis.call('HINCRBY', jk, 'a', 1)
    redis.call('HSET', jk, 's', 'r', 't', token, 'u', fmt(deadline))
    redis.call('ZADD', K.lease, deadline, id)
    out[#out + 1] = id
    out[#out + 1] = token
    out[#out + 1] = attempt
    out[#out + 1] = tonumber(f[2])
    out[#out + 1] = deadline
    out[#out + 1] = tonumber(f[3])
    out[#out + 1] = f[4]
    out[#out + 1] = f[5]
  end
end
if redis.call('ZCARD', K.ready) > 0 then
  out[1] = now
else
  out[1] = next_due(K)
end
return out
