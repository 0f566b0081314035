-- requeue_expired: takes back up to `max` leases whose deadline has passed;
-- each counts as a failed attempt ("lease expired").
-- KEYS: the topic's keys (see common.lua).
-- ARGV: topic, now, max, random seed in [0,1)
-- Returns: {retried, dead, next lease deadline or NONE, then 3 per job:
--   id, failed attempt, retry due ms or NONE when dead}
-- Side effects: see fail() in common.lua; ctr.expired + n.
local now, max, seed = clock_ms(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local ids = redis.call('ZRANGEBYSCORE', K.lease, '-inf', '(' .. now, 'LIMIT', 0, max)
local retried, dead, woke = 0, 0, false
local cfg = nil
local jobs = {}
for i, id in ipairs(ids) do
  local j = load(id)
  if j and j.s == RESERVED then
    if cfg == nil then cfg = topic_cfg(K) end
    j.to = (j.to or 0) + 1
    local due, w, attempt = fail(K, cfg, id, j, now, 'lease expired', nil, rand_at(seed, i), false, false)
    if due < 0 then dead = dead + 1 else retried = retried + 1 end
    if w then woke = true end
    jobs[#jobs + 1] = id
    jobs[#jobs + 1] = attempt
    jobs[#jobs + 1] = due
  else
    redis.call('ZREM', K.lease, id)
  end
end
if #jobs > 0 then redis.call('HINCRBY', K.ctr, 'expired', #jobs / 3) end
if woke then wake() end
local head = redis.call('ZRANGE', K.lease, 0, 0, 'WITHSCORES')
local nxt = NONE
if head[2] then nxt = tonumber(head[2]) end
local out = {retried, dead, nxt}
for _, v in ipairs(jobs) do out[#out + 1] = v end
return out
