-- common.lua: helpers shared by every dq script. Prepended to each script at
-- load time, after a generated line that defines DEFAULTS (the topic config
-- defaults from dq-core, so Rust stays the one source of them).
--
-- Keys (all in one hash tag, passed in KEYS by every script in this order):
--   K.sched  ZSET  score = due ms,        member = id
--   K.ready  ZSET  score = priority,      member = ready_member(due, seq, id)
--   K.lease  ZSET  score = lease deadline, member = id
--   K.dead   ZSET  score = died-at ms,    member = id
--   K.ctr    HASH  counters and the enqueue sequence (field "seq")
--   K.cfg    HASH  topic config fields (missing fields take DEFAULTS)
--   K.jobs   HASH  id -> the job's record (see load/save)
-- A job record is one MessagePack string of 15 values, in this order (nil
-- when absent), read by load() into a table with these fields:
--   d due ms, p priority, q seq, a attempts handed out,
--   s state (s scheduled | y ready | r reserved | d dead), c created ms,
--   k kind (j json | b bytes), b body, m max_attempts override,
--   L lease override, r retry override (encoded), e last error,
--   t lease token, u lease deadline, x died-at ms.
-- One string per job in one hash per topic keeps a job at ~150 bytes of
-- Redis memory (a hash per job with a 64-byte body is several times that).
-- Time is always ARGV "now"; no script reads the server clock.

-- Every script gets the same KEYS (see keys.rs) and ARGV[1] = topic name.
local K = {
  sched = KEYS[1], ready = KEYS[2], lease = KEYS[3], dead = KEYS[4],
  ctr = KEYS[5], cfg = KEYS[6], jobs = KEYS[7],
}

local function num(v, default)
  local n = tonumber(v)
  if n == nil then return default end
  return n
end

local function fmt(n)
  return string.format('%d', n)
end

-- The topic's config, with defaults for fields never set.
local function topic_cfg(K)
  local v = redis.call('HMGET', K.cfg, 'max_attempts', 'lease_ms', 'dead_cap', 'default_delay_ms', 'retry')
  return {
    max_attempts = num(v[1], DEFAULTS.max_attempts),
    lease_ms = num(v[2], DEFAULTS.lease_ms),
    dead_cap = num(v[3], DEFAULTS.dead_cap),
    default_delay_ms = num(v[4], DEFAULTS.default_delay_ms),
    retry = v[5] or DEFAULTS.retry,
  }
end

-- Ready members sort by (due, seq) within one priority: fixed-width lower-case
-- hex compares like the numbers. 11 hex digits of ms reach the year 2527.
local function ready_member(due, seq, id)
  return string.format('%011x%012x', due, seq) .. id
end
local READY_PREFIX = 23

-- Wait after failed attempt `attempt` under an encoded retry policy (see
-- RetryPolicy::encode and RetryPolicy::delay_ms in dq-core; they must agree).
local function backoff(enc, attempt, rand)
  local parts = {}
  for p in string.gmatch(enc, '[^,]+') do parts[#parts + 1] = p end
  local kind = parts[1]
  if attempt < 1 then attempt = 1 end
  if kind == 'f' then
    return tonumber(parts[2])
  elseif kind == 'l' then
    local i = attempt
    if i > #parts - 1 then i = #parts - 1 end
    return tonumber(parts[i + 1])
  else
    local initial, factor, max, jitter = tonumber(parts[2]), tonumber(parts[3]), tonumber(parts[4]), tonumber(parts[5])
    local e = attempt - 1
    if e > 1000 then e = 1000 end
    local base = initial * (factor ^ e)
    if base > max then base = max end
    local v = base + base * jitter * (2 * rand - 1)
    if v < 0 then v = 0 end
    if v > max then v = max end
    return math.floor(v)
  end
end

-- The i-th of a spread of numbers in [0, 1) from one random seed in ARGV
-- (scripts have no randomness of their own that differs between calls).
local function rand_at(seed, i)
  local x = seed + i * 0.6180339887498949
  return x - math.floor(x)
end

-- The job record of `id`, or nil.
local function load(id)
  local raw = redis.call('HGET', K.jobs, id)
  if not raw then return nil end
  local d, p, q, a, s, c, k, b, m, L, r, e, t, u, x = cmsgpack.unpack(raw)
  return {d = d, p = p, q = q, a = a, s = s, c = c, k = k, b = b,
          m = m, L = L, r = r, e = e, t = t, u = u, x = x}
end

-- Writes the job record of `id`.
local function save(id, j)
  redis.call('HSET', K.jobs, id, cmsgpack.pack(j.d, j.p, j.q, j.a, j.s, j.c, j.k, j.b,
    j.m, j.L, j.r, j.e, j.t, j.u, j.x))
end

-- Puts job `id` (record `j`, not yet saved) where `due` says: ready if due,
-- else scheduled; sets j.d and j.s. Returns true if a waiting consumer should
-- be woken (the job is due now or is the new head of the schedule).
local function place(K, id, j, due, now)
  j.d = due
  if due <= now then
    redis.call('ZADD', K.ready, j.p, ready_member(due, j.q, id))
    j.s = 'y'
    return true
  end
  local head = redis.call('ZRANGE', K.sched, 0, 0, 'WITHSCORES')
  redis.call('ZADD', K.sched, due, id)
  j.s = 's'
  return head[2] == nil or due < tonumber(head[2])
end

-- Takes a waiting job out of the schedule or the ready set.
local function unplace(K, id, j)
  if j.s == 's' then
    redis.call('ZREM', K.sched, id)
  elseif j.s == 'y' then
    redis.call('ZREM', K.ready, ready_member(j.d, j.q, id))
  end
end

-- Moves up to `max` due jobs from the schedule to the ready set.
-- Returns the number moved.
local function promote(K, now, max)
  local ids = redis.call('ZRANGEBYSCORE', K.sched, '-inf', now, 'WITHSCORES', 'LIMIT', 0, max)
  local moved = 0
  for i = 1, #ids, 2 do
    local id, due = ids[i], tonumber(ids[i + 1])
    local j = load(id)
    redis.call('ZREM', K.sched, id)
    if j and j.s == 's' then
      redis.call('ZADD', K.ready, j.p, ready_member(due, j.q, id))
      j.s = 'y'
      save(id, j)
      moved = moved + 1
    end
  end
  return moved
end

-- Due time of the schedule's head, or -1.
local function next_due(K)
  local head = redis.call('ZRANGE', K.sched, 0, 0, 'WITHSCORES')
  if head[2] == nil then return -1 end
  return tonumber(head[2])
end

-- Drops the oldest dead letters over the cap, at most 1000 per call.
local function trim_dead(K, cap)
  local over = redis.call('ZCARD', K.dead) - cap
  if over <= 0 then return 0 end
  if over > 1000 then over = 1000 end
  local ids = redis.call('ZRANGE', K.dead, 0, over - 1)
  if #ids > 0 then redis.call('HDEL', K.jobs, unpack(ids)) end
  redis.call('ZREMRANGEBYRANK', K.dead, 0, over - 1)
  redis.call('HINCRBY', K.ctr, 'dead_dropped', #ids)
  return #ids
end

-- A failed attempt of reserved job `id` (record `j`): retry after a wait, or
-- dead when it was the last attempt (or `bury` is true). `retry_in` (ms)
-- overrides the policy when given. Saves the record. Returns due ms of the
-- retry (or -1 when dead), whether to wake, and the failed attempt's number.
local function fail(K, cfg, id, j, now, err, retry_in, rand, bury)
  local attempts = j.a or 0
  local max = j.m or cfg.max_attempts
  redis.call('ZREM', K.lease, id)
  j.t, j.u, j.e = nil, nil, err
  redis.call('HINCRBY', K.ctr, 'failed', 1)
  if bury or attempts >= max then
    j.s, j.x = 'd', now
    save(id, j)
    redis.call('ZADD', K.dead, now, id)
    redis.call('HINCRBY', K.ctr, 'dead', 1)
    trim_dead(K, cfg.dead_cap)
    return -1, false, attempts
  end
  local wait = retry_in
  if wait == nil then wait = backoff(j.r or cfg.retry, attempts, rand) end
  local due = now + wait
  local woke = place(K, id, j, due, now)
  save(id, j)
  return due, woke, attempts
end

-- The lease holder check of ack, nack, touch, bury and release: returns the
-- record, or a status reply. A waiting job has no lease, so any token is
-- stale; a dead one says so.
local function held(id, token)
  local j = load(id)
  if not j then return nil, {-1} end
  if j.s == 'd' then return nil, {-3, 'd'} end
  if j.s ~= 'r' or j.t ~= token then return nil, {-2} end
  return j, nil
end

-- Tells every dq instance (in-process waiters and the dispatcher) that
-- topic ARGV[1] has a job due earlier than they may think.
local function wake()
  redis.call('PUBLISH', WAKE_CHANNEL, ARGV[1])
end


