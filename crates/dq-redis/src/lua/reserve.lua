-- reserve: promotes due jobs, then leases up to `max` ready jobs, most urgent
-- first (priority, then due, then enqueue order).
-- KEYS: the topic's keys (see common.lua).
-- ARGV: topic, now, max, lease_ms override or '', token prefix (random per call)
-- Returns: {next_due (-1 none; now if ready jobs remain), then 8 per job:
--   id, token, attempt, due, lease deadline, priority, kind, body}
-- Side effects: sched -> ready (at most MAX_BATCH), ready -> lease, job records
--   (s=r, a+1, t, u).
local now, max = clock_ms(ARGV[2]), tonumber(ARGV[3])
local lease_override = tonumber(ARGV[4])
-- A paused topic hands nothing out; the pause's end is when to look again.
local paused = tonumber(redis.call('HGET', K.ctr, 'paused_until') or '0')
if paused > now then return {paused} end
promote(K, now, MAX_BATCH)
local members = redis.call('ZRANGE', K.ready, 0, max - 1)
local out = {0}
local cfg = nil
if #members > 0 then redis.call('ZREM', K.ready, unpack(members)) end
for i, m in ipairs(members) do
  local id = string.sub(m, READY_PREFIX + 1)
  local j = load(id)
  if j and j.s == READY then
    local lease = lease_override or j.L
    if lease == nil then
      if cfg == nil then cfg = topic_cfg(K) end
      lease = cfg.lease_ms
    end
    local deadline = now + lease
    j.a = (j.a or 0) + 1
    j.s, j.t, j.u = RESERVED, ARGV[5] .. string.format('%x', i), deadline
    save(id, j)
    redis.call('ZADD', K.lease, deadline, id)
    out[#out + 1] = id
    out[#out + 1] = j.t
    out[#out + 1] = j.a
    out[#out + 1] = j.d
    out[#out + 1] = deadline
    out[#out + 1] = j.p
    out[#out + 1] = j.k
    out[#out + 1] = j.b
  end
end
if redis.call('ZCARD', K.ready) > 0 then
  out[1] = now
else
  out[1] = next_due(K)
end
return out
