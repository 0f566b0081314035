-- reserve: promotes due jobs, then leases up to `max` ready jobs within the
-- topic's flow control: nothing while it is paused, no more than its rate
-- limit's token bucket allows (see dq-core's flow.rs: the same integer
-- sums), and for jobs with a flow-control key, no more than key_concurrency
-- leases per key and its key_rate_limit, the keys taking turns (one job
-- each per turn; the jobs without a key take one turn as one more key).
-- Without keyed ready jobs (ctr.kready 0) the order is K.ready's: priority,
-- then due, then enqueue order; within a key it is the same.
-- KEYS: the topic's keys (see common.lua).
-- ARGV: topic, now, max, lease_ms override or '', token prefix (random per call)
-- Returns: {next_due (NONE none; now if ready jobs remain and may go; the next
--   token's time if they wait for one), then 4 per job:
--   id, token, lease deadline, the record as stored (verbs/reserve/record.rs reads the
--   due, priority, attempts before this lease, kind and body from it: four
--   values fewer per job than sending them apart, ~2,700 instructions; and
--   the trace context, value 25, when the record has one: nothing more in
--   the reply for it)}
-- Side effects: sched -> ready (at most MAX_BATCH), ready -> lease and a
--   lease token per job (K.tokens; the records are not rewritten, see
--   "Leases" in common.lua); with a rate limit, ctr.rl_credit and ctr.rl_at (the
--   bucket after this call) and ctr.rate_limited (ready jobs held back);
--   with keyed jobs, the key structures of common.lua.
local now, max = clock_ms(ARGV[2]), tonumber(ARGV[3])
local lease_override = tonumber(ARGV[4])
local st = redis.call('HMGET', K.ctr, 'paused_until', 'kready', 'uturn', 'klim', 'kwait_stale')
-- A paused topic hands nothing out; the pause's end is when to look again.
local paused = tonumber(st[1] or '0')
if paused > now then return {paused} end
-- Paused until resumed: no time to look again (the resume wakes waiters).
local flow = redis.call('HMGET', K.cfg, 'paused', 'rate_limit', 'partitions', 'key_rate_limit')
if flow[1] == '1' then return {NONE} end
local parts = num(flow[3], 1)
-- A token bucket of `enc` ('limit,per_ms,burst'): `limit` credits a ms, a
-- hand-out costs `per`, at most `cap` kept; each of P partitions has 1/P
-- of the rate and burst.
local function bucket_of(enc)
  local l, per, burst = string.match(enc, '^(%d+),(%d+),(%d+)$')
  local b = {limit = tonumber(l), per = tonumber(per) * parts}
  burst = math.floor(tonumber(burst) / parts)
  if burst < 1 then burst = 1 end
  b.cap = burst * b.per
  return b
end
-- `credit` (nil: full) kept at `at`, refilled to now; a clock that went
-- back refills nothing. Returns the credit and the bucket's new time.
local function refill(b, credit, at)
  credit = credit or b.cap
  if credit > b.cap then credit = b.cap end
  at = at or now
  if now > at then
    credit = credit + (now - at) * b.limit
    if credit > b.cap then credit = b.cap end
  end
  return credit, math.max(now, at)
end
-- When a bucket short of a hand-out has one.
local function next_token(b, credit)
  return now + math.ceil((b.per - credit) / b.limit)
end
local rate = nil
local take = max
if flow[2] then
  rate = bucket_of(flow[2])
  local s = redis.call('HMGET', K.ctr, 'rl_credit', 'rl_at')
  rate.credit, rate.at = refill(rate, tonumber(s[1]), tonumber(s[2]))
  local allowed = math.floor(rate.credit / rate.per)
  if allowed < take then take = allowed end
end
promote(K, now, MAX_BATCH)
local out = {0}
local cfg = nil
local n = 0
-- Leases ready job `id` (stored as `raw`, already out of its ready set;
-- `held` its lease token if it has one): adds it to the reply and returns
-- its lease token and deadline, or nil when it is not ready. A record that
-- says ready with a token is reserved (see "Leases" in common.lua): a ready
-- member left behind for it never hands it out twice. The caller writes
-- both.
local function lease_raw(id, raw, held)
  if not raw or held then return nil end
  local _, _, _, _, s, _, _, _, _, L, _, _, _, _, _, _, _, _, _, _, dd, g = cmsgpack.unpack(raw)
  if s ~= READY then return nil end
  local lease = lease_override or L
  if lease == nil then
    if cfg == nil then cfg = topic_cfg(K) end
    lease = cfg.lease_ms
  end
  local deadline = now + lease
  n = n + 1
  local t = lease_token(ARGV[5] .. string.format('%x', n), dd, g)
  local o = #out
  out[o + 1] = id
  out[o + 2] = t
  out[o + 3] = deadline
  out[o + 4] = raw
  return t, deadline
end
-- Leases ready job `id` (already out of its ready set); false when its
-- record is not ready.
local function hand_out(id)
  local token, deadline = lease_raw(id, redis.call('HGET', K.jobs, id), redis.call('HGET', K.tokens, id))
  if not token then return false end
  tokens_table()
  redis.call('HSET', K.tokens, id, token)
  redis.call('ZADD', K.lease, deadline, id)
  return true
end
local keyed = num(st[2], 0) > 0 or KEYED
local left, go, wait_at
if not keyed then
  local members = {}
  if take > 0 then members = redis.call('ZRANGE', K.ready, 0, take - 1) end
  if #members > 0 then redis.call('ZREM', K.ready, unpack(members)) end
  -- The batch read with one HMGET, its leases written with one HSET of
  -- the tokens and one ZADD.
  if #members > 0 then
    local ids = {}
    for i, m in ipairs(members) do ids[i] = string.sub(m, READY_PREFIX + 1) end
    local raws = redis.call('HMGET', K.jobs, unpack(ids))
    local held = redis.call('HMGET', K.tokens, unpack(ids))
    local tokens, leases = {}, {}
    -- The batch's deadlines are mostly one: made a string once (Redis
    -- would turn a number argument into one per job).
    local dl, dl_s = nil, nil
    for i, id in ipairs(ids) do
      local token, deadline = lease_raw(id, raws[i], held[i])
      if token then
        if deadline ~= dl then dl, dl_s = deadline, fmt(deadline) end
        tokens[#tokens + 1] = id
        tokens[#tokens + 1] = token
        leases[#leases + 1] = dl_s
        leases[#leases + 1] = id
      end
    end
    if #tokens > 0 then
      tokens_table()
      redis.call('HSET', K.tokens, unpack(tokens))
      redis.call('ZADD', K.lease, unpack(leases))
    end
  end
  left = redis.call('ZCARD', K.ready)
  go = left > 0
else
  local lim = key_concurrency()
  local krate = flow[4] and bucket_of(flow[4])
  -- A changed key_concurrency: keys held at the old one look again.
  local klim = lim and fmt(lim) or '0'
  if (st[4] or '0') ~= klim then
    for _, g in ipairs(redis.call('SMEMBERS', KR.held)) do
      if not lim or num(redis.call('HGET', KR.act, g), 0) < lim then
        redis.call('SREM', KR.held, g)
        ring_add(g)
      end
    end
    redis.call('HSET', K.ctr, 'klim', klim)
  end
  -- Keys whose next token has come take their turn again (all of them
  -- once the limit is gone or changed: their wait was the old limit's);
  -- full buckets are forgotten.
  local stale = st[5] == '1'
  local back
  if krate and not stale then
    back = redis.call('ZRANGEBYSCORE', KR.wait, '-inf', now, 'LIMIT', 0, MAX_BATCH)
    local full = redis.call('ZRANGEBYSCORE', KR.full, '-inf', now, 'LIMIT', 0, MAX_BATCH)
    if #full > 0 then
      redis.call('HDEL', KR.rl, unpack(full))
      redis.call('ZREM', KR.full, unpack(full))
    end
  else
    back = redis.call('ZRANGE', KR.wait, 0, MAX_BATCH - 1)
    if redis.call('EXISTS', KR.full) == 1 then redis.call('DEL', KR.rl, KR.full) end
  end
  for _, g in ipairs(back) do
    redis.call('ZREM', KR.wait, g)
    key_enter(g)
  end
  -- More waiting keys than one call moves: the next call goes on.
  local more_back = (stale or not krate) and redis.call('EXISTS', KR.wait) == 1
  if stale and not more_back then redis.call('HDEL', K.ctr, 'kwait_stale') end
  local uturn = num(st[3], 0)
  local uturn0 = uturn
  local ulen = redis.call('ZCARD', K.ready)
  -- Key `g` out of the ring until its next token.
  -- (A key held back with ready jobs counts in ctr.rate_limited.)
  local function to_wait(g, credit)
    redis.call('ZREM', KR.ring, g)
    redis.call('ZADD', KR.wait, next_token(krate, credit), g)
    redis.call('HINCRBY', K.ctr, 'rate_limited', 1)
  end
  while n < take do
    local r = redis.call('ZRANGE', KR.ring, 0, 0, 'WITHSCORES')
    if ulen > 0 and (not r[1] or uturn <= tonumber(r[2])) then
      local m = redis.call('ZPOPMIN', K.ready)
      ulen = ulen - 1
      hand_out(string.sub(m[1], READY_PREFIX + 1))
      uturn = redis.call('HINCRBY', K.ctr, 'kturn', 1)
    elseif r[1] then
      local g = r[1]
      local credit, at
      if krate then
        local v = redis.call('HGET', KR.rl, g)
        local c, a
        if v then c, a = string.match(v, '^(%-?%d+),(%d+)$') end
        credit, at = refill(krate, tonumber(c), tonumber(a))
      end
      if lim and num(redis.call('HGET', KR.act, g), 0) >= lim then
        -- At a key_concurrency lowered since it joined the ring.
        to_held(g)
      elseif krate and credit < krate.per then
        to_wait(g, credit)
      else
        local m = redis.call('ZPOPMIN', lane(g))
        local act = 0
        if m[1] then
          redis.call('HINCRBY', K.ctr, 'kready', -1)
          if hand_out(string.sub(m[1], READY_PREFIX + 1)) then act = key_lease(g) end
        end
        if krate and act > 0 then
          credit = credit - krate.per
          redis.call('HSET', KR.rl, g, fmt(credit) .. ',' .. fmt(at))
          redis.call('ZADD', KR.full, at + math.ceil((krate.cap - credit) / krate.limit), g)
        end
        if key_lane_left(g) then
          if lim and act >= lim then
            to_held(g)
          elseif krate and credit < krate.per then
            to_wait(g, credit)
          else
            ring_add(g)
          end
        end
      end
    else
      break
    end
  end
  if uturn ~= uturn0 then redis.call('HSET', K.ctr, 'uturn', uturn) end
  left = ulen + num(redis.call('HGET', K.ctr, 'kready'), 0)
  go = ulen > 0 or more_back or redis.call('EXISTS', KR.ring) == 1
  local w = redis.call('ZRANGE', KR.wait, 0, 0, 'WITHSCORES')
  if w[2] then wait_at = tonumber(w[2]) end
end
if rate then
  rate.credit = rate.credit - n * rate.per
  redis.call('HSET', K.ctr, 'rl_credit', fmt(rate.credit), 'rl_at', fmt(rate.at))
  if take < max then
    local held = math.min(max - n, left)
    if held > 0 then redis.call('HINCRBY', K.ctr, 'rate_limited', held) end
  end
  if go and rate.credit < rate.per then
    -- Ready jobs wait for the next token: that is when to look again.
    out[1] = next_token(rate, rate.credit)
    return out
  end
end
if go then
  out[1] = now
else
  -- Nothing may go now: the next due job, or a key's next token (a key
  -- held at its key_concurrency goes again when a lease ends, which
  -- announces a wake-up).
  local t = next_due(K)
  if wait_at and (t < 0 or wait_at < t) then t = wait_at end
  out[1] = t
end
return out
