-- reserve: promotes due jobs, then leases up to `max` ready jobs, most urgent
-- first (priority, then due, then enqueue order), within the topic's flow
-- control: nothing while it is paused, and no more than its rate limit's
-- token bucket allows (see dq-core's flow.rs: the same integer sums).
-- KEYS: the topic's keys (see common.lua).
-- ARGV: topic, now, max, lease_ms override or '', token prefix (random per call)
-- Returns: {next_due (-1 none; now if ready jobs remain and may go; the next
--   token's time if they wait for one), then 8 per job:
--   id, token, attempt, due, lease deadline, priority, kind, body}
-- Side effects: sched -> ready (at most MAX_BATCH), ready -> lease, job records
--   (s=r, a+1, t, u); with a rate limit, ctr.rl_credit and ctr.rl_at (the
--   bucket after this call) and ctr.rate_limited (ready jobs held back).
local now, max = clock_ms(ARGV[2]), tonumber(ARGV[3])
local lease_override = tonumber(ARGV[4])
-- A paused topic hands nothing out; the pause's end is when to look again.
local paused = tonumber(redis.call('HGET', K.ctr, 'paused_until') or '0')
if paused > now then return {paused} end
-- Paused until resumed: no time to look again (the resume wakes waiters).
local flow = redis.call('HMGET', K.cfg, 'paused', 'rate_limit', 'partitions')
if flow[1] == '1' then return {-1} end
-- The rate limit: `limit` credits a ms, a hand-out costs `per`, at most
-- `burst * per` kept; each of P partitions has 1/P of the rate and burst.
local rate = nil
local take = max
if flow[2] then
  local l, per, burst = string.match(flow[2], '^(%d+),(%d+),(%d+)$')
  local parts = num(flow[3], 1)
  rate = {limit = tonumber(l), per = tonumber(per) * parts}
  burst = math.floor(tonumber(burst) / parts)
  if burst < 1 then burst = 1 end
  local cap = burst * rate.per
  local st = redis.call('HMGET', K.ctr, 'rl_credit', 'rl_at')
  local credit = num(st[1], cap)
  if credit > cap then credit = cap end
  local at = num(st[2], now)
  -- A clock that went back refills nothing.
  if now > at then
    credit = credit + (now - at) * rate.limit
    if credit > cap then credit = cap end
  end
  rate.credit = credit
  rate.at = math.max(now, at)
  local allowed = math.floor(credit / rate.per)
  if allowed < take then take = allowed end
end
promote(K, now, MAX_BATCH)
local members = {}
if take > 0 then members = redis.call('ZRANGE', K.ready, 0, take - 1) end
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
local left = redis.call('ZCARD', K.ready)
if rate then
  local leased = (#out - 1) / 8
  rate.credit = rate.credit - leased * rate.per
  redis.call('HSET', K.ctr, 'rl_credit', fmt(rate.credit), 'rl_at', fmt(rate.at))
  if take < max then
    local held = math.min(max - leased, left)
    if held > 0 then redis.call('HINCRBY', K.ctr, 'rate_limited', held) end
  end
  if left > 0 and rate.credit < rate.per then
    -- Ready jobs wait for the next token: that is when to look again.
    out[1] = now + math.ceil((rate.per - rate.credit) / rate.limit)
    return out
  end
end
if left > 0 then
  out[1] = now
else
  out[1] = next_due(K)
end
return out
