-- import_jobs: writes up to MAX_BATCH jobs as they were in another store
-- (an import): due time, attempts, overrides, last error, failed attempts
-- and dead letters kept. Idempotent by id: an existing job is left as it is.
-- KEYS: the topic's keys (see common.lua).
-- ARGV: topic, now, then 18 per job:
--   id, state (w waiting | d dead), due ms, priority, attempts,
--   max_attempts or '', lease_ms or '', retry (encoded) or '',
--   dedup window ms or '', kind (j | b), body, last error or '',
--   created ms, died-at ms or '' (dead jobs), has-error (1 | 0),
--   flow-control key or '', its last failed attempts as JSON or '',
--   its trace context (as stored: tc in common.lua) or ''.
-- Returns: 2 per job: outcome (1 created | 0 exists | 3 deduplicated: the
--   id is in its dedup window, nothing written), state letter (s | y | r | d).
-- Side effects: job records (HSETNX), sched/ready/wheel (place()) or dead,
--   ctr.enqueued, ctr.seq and ctr.far; dead letters over the cap trimmed
--   (trim_dead); one PUBLISH on WAKE_CHANNEL when a job is due now or
--   makes the next event earlier.
local now = clock_ms(ARGV[2])
local out = {}
local woke = false
local created, dead = 0, 0
local seq = tonumber(redis.call('HGET', K.ctr, 'seq') or '0')
local seq0 = seq
local dedup = redis.call('EXISTS', K.dedup) == 1
if dedup then
  redis.call('ZREMRANGEBYSCORE', K.dedup, '-inf', now)
  dedup = redis.call('EXISTS', K.dedup) == 1
end
for i = 3, #ARGV, 18 do
  local id = ARGV[i]
  -- A live job first (a replayed dead letter may still be in its window).
  local old = load(id)
  if old then
    out[#out + 1] = 0
    out[#out + 1] = old.s
  elseif dedup and redis.call('ZSCORE', K.dedup, id) then
    out[#out + 1] = 3
    out[#out + 1] = SCHEDULED
  else
    seq = seq + 1
    local j = {p = tonumber(ARGV[i + 3]), q = seq, a = tonumber(ARGV[i + 4]),
               m = tonumber(ARGV[i + 5]), L = tonumber(ARGV[i + 6]),
               k = ARGV[i + 9], b = ARGV[i + 10], c = tonumber(ARGV[i + 12])}
    if ARGV[i + 7] ~= '' then j.r = ARGV[i + 7] end
    local dd = tonumber(ARGV[i + 8])
    if dd and dd > 0 then j.dd = dd end
    if ARGV[i + 14] == '1' then j.e = ARGV[i + 11] end
    if ARGV[i + 16] ~= '' then j.e = joined_errors(ARGV[i + 16], j.e) end
    if ARGV[i + 15] ~= '' then j.g = ARGV[i + 15] end
    if ARGV[i + 17] ~= '' then j.tc = ARGV[i + 17] end
    local due = tonumber(ARGV[i + 2])
    if ARGV[i + 1] == 'd' then
      j.d, j.s, j.x = due, DEAD, tonumber(ARGV[i + 13])
      redis.call('ZADD', K.dead, j.x, id)
      dead = dead + 1
    elseif place(K, id, j, due, now) then
      woke = true
    end
    save(id, j)
    created = created + 1
    out[#out + 1] = 1
    out[#out + 1] = j.s
  end
end
if seq ~= seq0 then redis.call('HSET', K.ctr, 'seq', seq) end
if created > 0 then redis.call('HINCRBY', K.ctr, 'enqueued', created) end
if dead > 0 then trim_dead(K, topic_cfg(K).dead_cap) end
if woke then wake() end
return out
