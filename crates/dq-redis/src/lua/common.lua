-- common.lua: helpers shared by every dq script. Prepended to each script at
-- load time, after generated lines (scripts.rs) that define the reply codes
-- (NOT_FOUND, TOKEN_MISMATCH, NOT_IN_STATE, TARGET_REFUSED, NONE: codes.rs),
-- DEFAULTS (the topic config defaults from dq-core), WAKE_CHANNEL, WHEEL_MS
-- and MAX_BATCH (dq-core's one batch bound), so Rust stays the one source of
-- them.
--
-- Keys (all in one hash tag, passed in KEYS by every script in this order):
--   K.sched  ZSET  score = due ms,        member = id (the score is always
--                  the record's d: promote() reads d, not the score)
--   K.ready  ZSET  score = priority,      member = ready_member(rank, seq, id)
--                  (rank: the due, or the put time of a job in put order,
--                  see rank())
--   K.lease  ZSET  score = lease deadline, member = id
--   K.dead   ZSET  score = died-at ms,    member = id
--   K.ctr    HASH  counters and the enqueue sequence (field "seq")
--   K.cfg    HASH  topic config fields (missing fields take DEFAULTS)
--   K.jobs   HASH  id -> the job's record (see load/save)
--   K.wheel  ZSET  score = bucket start ms, member = the same as text:
--                  buckets (WHEEL_MS wide) holding jobs not due soon
--   K.wp     prefix of the bucket lists: K.wp .. bucket = LIST of ids
--   K.dedup  ZSET  score = end of the id's dedup window (ms), member = id:
--                  ids of jobs that ended (acked, cancelled, dead) whose
--                  enqueue is refused as a duplicate until then
--   K.kp     prefix of the flow-control keys' structures (issue #18), see
--            "Keys" below
--   K.tokens HASH  id -> the token of the job's current lease (layout 2):
--                  a job is reserved while it has one (see "Leases")
-- The timing wheel: a job due later than the next bucket waits as one LIST
-- entry (~15 bytes) in its bucket instead of a schedule ZSET entry (~110);
-- a bucket is moved ("rolled") into the schedule one bucket ahead of time
-- by promote(), so the schedule always holds every job due before
-- bucket(now) + 2 * WHEEL_MS. A record in the wheel has w = true; cancelled
-- or moved jobs leave stale list entries, skipped when rolled (an entry is
-- live when its record is scheduled, in the wheel, and due in that bucket).
-- ctr.far counts the jobs in the wheel.
-- A job record is one MessagePack string of up to 25 values in this order,
-- ending with the last one set (8 for a job just enqueued or leased,
-- 16 in the wheel or dead, 20 once one of the job's counts is set, 21 with
-- a dedup window, 22 with a flow-control key, 23 for a job in put order,
-- 24 once it was released or replayed, 25 with a trace context; a value
-- left off or nil is absent), read by load() into a table with these
-- fields:
--   d due ms, p priority, q seq, a attempts handed out,
--   s state (s scheduled | y ready | r reserved | d dead), c created ms,
--   k kind (j json | b bytes), b body, m max_attempts override,
--   L lease override, r retry override (encoded), e last error,
--   t lease token and u lease deadline (layout 1 only: see "Leases"; load()
--   sets them), x died-at ms, w true while in the wheel,
--   and the job's counts: to leases expired, rl attempts given back by the
--   holder (nack to retry, release), bu times dead, ki times replayed,
--   dd its dedup window in ms (nil: none), g its flow-control key,
--   pd its put delay in ms, set only for (and on every) job in put order
--   (dq-core's NewJob::put_order, beanstalkd's jobs): the delay it was put
--   with, then that of its last nack to retry or release (a lease expiry,
--   a reschedule, a replay or a dropped release leave it); such a job is
--   ranked among the ready ones of its priority by its put time c, not
--   its due (see rank()), and
--   rv hand-outs that no longer count in a (nil: 0): a release gives the
--   attempt back (a - 1, rv + 1) and a replay starts the attempts again
--   (rv + a, a = 0), so the job's hand-outs in its whole life (its count
--   of reserves) are a + rv and a hand-out writes nothing more, and
--   tc its W3C trace context as dq-core's TraceContext::to_stored writes
--   it (the traceparent, then a space and the tracestate when there is
--   one; at most 568 bytes), set only for a job enqueued (or imported)
--   with one and kept for its whole life; reserve hands it back inside
--   the record it answers (verbs/reserve/record.rs reads it there).
-- Values 23, 24 and 25 come last so that a job in due order that was never
-- released nor replayed and has no trace context (nearly every job) keeps
-- the bytes it had, and promote's 8-value fast path never meets a job in
-- put order or with a trace context.
-- One string per job in one hash per topic keeps a job at ~150 bytes of
-- Redis memory (a hash per job with a 64-byte body is several times that).
-- Time: every script takes "now" from clock_ms(ARGV[...]): the Redis server's
-- clock (TIME) unless the caller passes a time (tests drive a manual clock).
-- So every dq instance decides due times, promotions, reserves, lease expiry
-- and retry times by one clock, whatever its own says; Redis 7 replicates
-- scripts by effects, so replicas and the AOF get the values, not the call.

-- A job record's state (field s), one letter each (decode.rs reads them).
local SCHEDULED, READY, RESERVED, DEAD = 's', 'y', 'r', 'd'

-- Every script gets the same KEYS (see keys.rs) and ARGV[1] = topic name.
local K = {
  sched = KEYS[1], ready = KEYS[2], lease = KEYS[3], dead = KEYS[4],
  ctr = KEYS[5], cfg = KEYS[6], jobs = KEYS[7], wheel = KEYS[8], wp = KEYS[9],
  dedup = KEYS[10], kp = KEYS[11], tokens = KEYS[12],
}

-- Keys (issue #18). A ready job with a flow-control key waits in its key's
-- lane instead of K.ready; every key with ready jobs is in exactly one of
-- ring (may go), held (at key_concurrency) or wait (out of key_rate_limit
-- tokens), and a key without ready jobs in none of them:
--   KR.ring  ZSET  score = turn, member = key: keys that may go, in turn
--                  order (ctr.kturn numbers the turns; the jobs without a
--                  key take their turn as one more key, ctr.uturn)
--   KR.held  SET   keys at their key_concurrency
--   KR.wait  ZSET  score = next token ms, member = key
--   KR.act   HASH  key -> its unexpired leases
--   KR.due   ZSET  score = due ms of the lane's head, member = key (the
--                  oldest-overdue figure)
--   KR.rl    HASH  key -> its key_rate_limit bucket, 'credit,at'
--   KR.full  ZSET  score = when that bucket is full again, member = key
--                  (a full bucket is the same as none: dropped then)
--   lane(g)  ZSET  as K.ready, the ready jobs of key g
-- ctr.kready counts the jobs in the lanes (0: the topic has none, and the
-- scripts take the plain path).
local KR = {
  ring = K.kp .. 'ring', held = K.kp .. 'held', wait = K.kp .. 'wait',
  act = K.kp .. 'act', due = K.kp .. 'due', rl = K.kp .. 'rl', full = K.kp .. 'full',
}
local function lane(g)
  return K.kp .. 'q:' .. g
end

-- Now in ms: the caller's time when it passes one, else the server's clock.
local function clock_ms(arg)
  if arg ~= nil and arg ~= '' then
    return tonumber(arg)
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

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
  local v = redis.call('HMGET', K.cfg, 'max_attempts', 'lease_ms', 'dead_cap', 'default_delay_ms', 'retry', 'dedup_ms')
  return {
    max_attempts = num(v[1], DEFAULTS.max_attempts),
    lease_ms = num(v[2], DEFAULTS.lease_ms),
    dead_cap = num(v[3], DEFAULTS.dead_cap),
    default_delay_ms = num(v[4], DEFAULTS.default_delay_ms),
    retry = v[5] or DEFAULTS.retry,
    dedup_ms = num(v[6], 0),
  }
end

-- Ready members sort by (rank, seq) within one priority: fixed-width
-- lower-case hex compares like the numbers. 11 hex digits of ms reach the
-- year 2527. (The rank part is kept for the next call: a batch's jobs
-- mostly share one.)
local rm_due, rm_hex = nil, nil
local function ready_member(due, seq, id)
  if due ~= rm_due then rm_due, rm_hex = due, string.format('%011x', due) end
  return rm_hex .. string.format('%012x', seq) .. id
end
local READY_PREFIX = 23

-- The time a ready job (put delay `pd`, created `c`, due `due`) is ranked
-- by among those of its priority: its put time when it is in put order,
-- else its due. Every ready member (and its removal) is made with it.
local function rank(pd, c, due)
  if pd then return c end
  return due
end

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

-- The record stored as `raw` (nil: none).
local function decode(raw)
  if not raw then return nil end
  local d, p, q, a, s, c, k, b, m, L, r, e, t, u, x, w, to, rl, bu, ki, dd, g, pd, rv, tc = cmsgpack.unpack(raw)
  return {d = d, p = p, q = q, a = a, s = s, c = c, k = k, b = b,
          m = m, L = L, r = r, e = e, t = t, u = u, x = x, w = w,
          to = to, rl = rl, bu = bu, ki = ki, dd = dd, g = g, pd = pd, rv = rv,
          tc = tc}
end

-- Leases (layout 2). Handing a job out does not rewrite its record: the
-- record keeps s = READY and the attempts before this lease, the token is
-- K.tokens[id] and the deadline K.lease's score. So a reserve writes a
-- token (~30 bytes) instead of packing and writing the whole record, and an
-- ack reads the token instead of the record. load() shows such a job as
-- before (s = RESERVED, a counting this lease, t, u) and save() writes it
-- back in the stored form; every lease's end (ack, nack, expiry, release,
-- cancel, forward, delete) drops its token. A token ending in TOKEN_RECORD
-- says the ack needs the record (a dedup window to open, a flow-control
-- key to free); other acks never read it. A record layout 1 wrote with
-- s = RESERVED (t and u in it) is still read as reserved.
local TOKEN_RECORD = 'k'

-- K.tokens is kept a hash table: Redis keeps a hash of at most 128 short
-- entries as a listpack, which every HSET, HMGET and HDEL scans from the
-- start (a drain of 20,000 jobs spent 24 % of Redis's instructions in
-- lpFind under callgrind). One field that no job id can be (ids hold no
-- space) with a value longer than 64 bytes makes it a hash table from the
-- start. Called before the tokens are written, once per call.
local tokens_ready = false
local function tokens_table()
  if not tokens_ready then
    redis.call('HSETNX', K.tokens, ' ', string.rep('-', 65))
    tokens_ready = true
  end
end

-- Drops the lease tokens of these ids, and the hash once only that field
-- is left (a topic without leases keeps no key for them).
local function tokens_drop(...)
  redis.call('HDEL', K.tokens, ...)
  if redis.call('HLEN', K.tokens) <= 1 then
    redis.call('DEL', K.tokens)
    tokens_ready = false
  end
end

-- Shows record `j` of `id` as reserved while it has a lease token.
local function lease_view(id, j)
  if j.s == READY then
    local t = redis.call('HGET', K.tokens, id)
    if t then
      j.s, j.t, j.a, j.held = RESERVED, t, (j.a or 0) + 1, true
      j.u = tonumber(redis.call('ZSCORE', K.lease, id))
    end
  elseif j.s == RESERVED then
    j.u = tonumber(redis.call('ZSCORE', K.lease, id)) or j.u
  end
  return j
end

-- The job record of `id`, or nil.
local function load(id)
  local j = decode(redis.call('HGET', K.jobs, id))
  if j then lease_view(id, j) end
  return j
end

-- The stored form of a record's values, in decode()'s order, up to the last
-- one set: a value left off reads back as nil, so a fresh job is 8 values
-- (fewer bytes and a cheaper pack: cmsgpack makes a string of every value
-- it packs, nil included). The hot paths (promote, reserve, ack_batch,
-- enqueue) unpack a record into locals and pack them back with this: a
-- record as a table costs more to build than to encode.
local function pack_values(d, p, q, a, s, c, k, b, m, L, r, e, t, u, x, w, to, rl, bu, ki, dd, g, pd, rv, tc)
  if tc ~= nil then
    return cmsgpack.pack(d, p, q, a, s, c, k, b, m, L, r, e, t, u, x, w, to, rl, bu, ki, dd, g, pd, rv, tc)
  end
  if rv ~= nil then
    return cmsgpack.pack(d, p, q, a, s, c, k, b, m, L, r, e, t, u, x, w, to, rl, bu, ki, dd, g, pd, rv)
  end
  if pd ~= nil then
    return cmsgpack.pack(d, p, q, a, s, c, k, b, m, L, r, e, t, u, x, w, to, rl, bu, ki, dd, g, pd)
  end
  if g ~= nil then
    return cmsgpack.pack(d, p, q, a, s, c, k, b, m, L, r, e, t, u, x, w, to, rl, bu, ki, dd, g)
  end
  if dd ~= nil then
    return cmsgpack.pack(d, p, q, a, s, c, k, b, m, L, r, e, t, u, x, w, to, rl, bu, ki, dd)
  end
  if to ~= nil or rl ~= nil or bu ~= nil or ki ~= nil then
    return cmsgpack.pack(d, p, q, a, s, c, k, b, m, L, r, e, t, u, x, w, to, rl, bu, ki)
  end
  if w ~= nil or x ~= nil then
    return cmsgpack.pack(d, p, q, a, s, c, k, b, m, L, r, e, t, u, x, w)
  end
  if u ~= nil or t ~= nil or e ~= nil then
    return cmsgpack.pack(d, p, q, a, s, c, k, b, m, L, r, e, t, u)
  end
  if r ~= nil or L ~= nil or m ~= nil then
    return cmsgpack.pack(d, p, q, a, s, c, k, b, m, L, r)
  end
  return cmsgpack.pack(d, p, q, a, s, c, k, b)
end

-- The stored form of record `j`.
local function pack(j)
  return pack_values(j.d, j.p, j.q, j.a, j.s, j.c, j.k, j.b, j.m, j.L, j.r, j.e,
    j.t, j.u, j.x, j.w, j.to, j.rl, j.bu, j.ki, j.dd, j.g, j.pd, j.rv, j.tc)
end

-- Writes the job record of `id`: a reserved one as its lease token and the
-- stored form (see "Leases"); a job whose lease ended drops its token.
-- Returns the record as written.
local function save(id, j)
  local raw
  if j.s == RESERVED then
    tokens_table()
    redis.call('HSET', K.tokens, id, j.t)
    j.held = true
    raw = pack_values(j.d, j.p, j.q, (j.a or 1) - 1, READY, j.c, j.k,
      j.b, j.m, j.L, j.r, j.e, nil, nil, j.x, j.w, j.to, j.rl, j.bu, j.ki, j.dd, j.g, j.pd, j.rv, j.tc)
  else
    if j.held then
      tokens_drop(id)
      j.held = nil
    end
    raw = pack(j)
  end
  redis.call('HSET', K.jobs, id, raw)
  return raw
end

-- A record's `e`: its last error, or, once an attempt failed through
-- fail(), ERRS .. the JSON list of its last ERRORS_KEPT failed attempts
-- ({attempt, at_ms, error}, oldest first) .. ERRS .. its last error. ERRS is
-- a byte no UTF-8 text holds, so no error sent can be taken for it.
local ERRS = '\255'

-- `e` as its last error and the JSON list of failed attempts (or nil).
local function split_errors(e)
  if not e or string.byte(e, 1) ~= 255 then return e, nil end
  local at = string.find(e, ERRS, 2, true)
  if not at then return e, nil end
  local last = string.sub(e, at + 1)
  if last == '' then last = nil end
  return last, string.sub(e, 2, at - 1)
end

-- The marked `e` of the JSON list `json` and last error `last` (or nil):
-- what split_errors reads back.
local function joined_errors(json, last)
  return ERRS .. json .. ERRS .. (last or '')
end

-- `e` with one more failed attempt (the oldest dropped past ERRORS_KEPT).
local function with_error(e, attempt, now, err)
  local _, json = split_errors(e)
  local list = json and cjson.decode(json) or {}
  list[#list + 1] = {attempt = attempt, at_ms = now, error = err}
  while #list > ERRORS_KEPT do table.remove(list, 1) end
  return joined_errors(cjson.encode(list), err)
end

-- Appends job `id` (record `j` as loaded) to `out` as the 23 values of
-- get.lua's reply (`cfg`: the topic's config, for the defaults in effect).
local function job_info(out, id, j, cfg)
  local n = #out
  out[n + 1] = id
  out[n + 2] = j.s
  out[n + 3] = j.d
  out[n + 4] = j.p
  out[n + 5] = j.a or 0
  out[n + 6] = j.c or 0
  out[n + 7] = j.k
  out[n + 8] = j.b
  out[n + 9] = j.m or cfg.max_attempts
  out[n + 10] = j.L or cfg.lease_ms
  out[n + 11] = j.u or NONE
  out[n + 12] = j.x or NONE
  local last, errors = split_errors(j.e)
  out[n + 13] = last and 1 or 0
  out[n + 14] = last or ''
  out[n + 15] = j.to or 0
  out[n + 16] = j.rl or 0
  out[n + 17] = j.bu or 0
  out[n + 18] = j.ki or 0
  out[n + 19] = j.g or ''
  out[n + 20] = errors or ''
  out[n + 21] = (j.a or 0) + (j.rv or 0)
  out[n + 22] = j.pd or NONE
  out[n + 23] = j.tc or ''
end

-- Deletes the record of `id` (`j` as loaded) and its lease token.
local function forget(id, j)
  redis.call('HDEL', K.jobs, id)
  if j.held then tokens_drop(id) end
end

-- The token of a lease handed out now of a job with dedup window `dd` and
-- flow-control key `g` (see TOKEN_RECORD).
local function lease_token(t, dd, g)
  if dd or g then return t .. TOKEN_RECORD end
  return t
end

local function bucket(ms)
  return ms - (ms % WHEEL_MS)
end

-- The topic's key_concurrency for this partition (nil: none), read once
-- per script call: each of P partitions allows 1/P of it (at least 1).
local key_limit_read, key_limit = false, nil
local function key_concurrency()
  if not key_limit_read then
    local v = redis.call('HMGET', K.cfg, 'key_concurrency', 'partitions')
    key_limit = tonumber(v[1])
    if key_limit then
      key_limit = math.max(1, math.floor(key_limit / num(v[2], 1)))
    end
    key_limit_read = true
  end
  return key_limit
end

-- Set when a job went into a key's lane during this call.
local KEYED = false

-- Key `g` takes its turn at the end of the round (into the ring, or a new
-- place in it).
local function ring_add(g)
  redis.call('ZADD', KR.ring, redis.call('HINCRBY', K.ctr, 'kturn', 1), g)
end

-- Key `g`, out of the ring, waits in held for a lease to end.
local function to_held(g)
  redis.call('ZREM', KR.ring, g)
  redis.call('SADD', KR.held, g)
end

-- A key that has ready jobs again (in none of ring, held, wait) joins the
-- ring at the end of the round, or held when at its key_concurrency.
local function key_enter(g)
  local lim = key_concurrency()
  if lim and num(redis.call('HGET', KR.act, g), 0) >= lim then
    redis.call('SADD', KR.held, g)
  else
    ring_add(g)
  end
end

-- The due time at the front of a ready member.
local function member_due(m)
  return tonumber(string.sub(m, 1, 11), 16)
end

-- Ready job (member `m`, priority `p`) of key `g` into its lane.
local function key_ready(g, p, m)
  KEYED = true
  local lk = lane(g)
  redis.call('ZADD', lk, p, m)
  redis.call('HINCRBY', K.ctr, 'kready', 1)
  local head = redis.call('ZRANGE', lk, 0, 0)[1]
  if head == m then redis.call('ZADD', KR.due, member_due(m), g) end
  if redis.call('ZCARD', lk) == 1 then key_enter(g) end
end

-- Forgets key `g` in the ring, held and wait once its lane is empty, else
-- keeps KR.due at the lane's head.
local function key_lane_left(g)
  local head = redis.call('ZRANGE', lane(g), 0, 0)[1]
  if head then
    redis.call('ZADD', KR.due, member_due(head), g)
    return true
  end
  redis.call('ZREM', KR.ring, g)
  redis.call('SREM', KR.held, g)
  redis.call('ZREM', KR.wait, g)
  redis.call('ZREM', KR.due, g)
  return false
end

-- Ready job (member `m`) of key `g` out of its lane (cancel, reschedule,
-- replace, reserve by id).
local function key_unready(g, m)
  if redis.call('ZREM', lane(g), m) == 0 then return end
  redis.call('HINCRBY', K.ctr, 'kready', -1)
  key_lane_left(g)
end

-- A lease of key `g` began.
local function key_lease(g)
  return redis.call('HINCRBY', KR.act, g, 1)
end

-- A lease of key `g` ended (ack, nack, expiry, release, cancel): a key held
-- at its key_concurrency under the limit again rejoins the ring, and the
-- topic's waiters are told (returns true then).
local function key_unlease(g)
  local n = redis.call('HINCRBY', KR.act, g, -1)
  if n <= 0 then redis.call('HDEL', KR.act, g) end
  if redis.call('SISMEMBER', KR.held, g) == 0 then return false end
  local lim = key_concurrency()
  if lim and n >= lim then return false end
  redis.call('SREM', KR.held, g)
  ring_add(g)
  return true
end

-- Job `id` (priority `p`, seq `q`, key `g`, ranked by `due`: see rank())
-- into its key's lane now, or, without a key, into `pending` as (priority,
-- member) for one ZADD of a batch into the ready set later. `ps`, when
-- given, is `p` as a string (as the caller got it): Redis turns a number
-- argument into one on every call.
local rl_p, rl_ps = nil, nil
local function ready_later(pending, id, p, q, g, due, ps)
  local m = ready_member(due, q, id)
  if g then
    key_ready(g, p, m)
  else
    -- A number argument costs Redis a "%.17g" (~2,800 instructions); the
    -- string is made once per priority instead.
    if not ps then
      if p ~= rl_p then rl_p, rl_ps = p, fmt(p) end
      ps = rl_ps
    end
    pending[#pending + 1] = ps
    pending[#pending + 1] = m
  end
end

-- Job `id` (record `j`, due `due`) into the ready set, or its key's lane.
local function ready_add(id, j, due)
  local pending = {}
  ready_later(pending, id, j.p, j.q, j.g, rank(j.pd, j.c, due))
  if #pending > 0 then redis.call('ZADD', K.ready, unpack(pending)) end
end

-- Whether a job due at `due` belongs in the schedule (not the wheel) now.
local function near(due, now)
  return bucket(due) <= bucket(now) + WHEEL_MS
end

-- The earliest moment something of the schedule or the wheel needs doing:
-- the schedule's head, or the roll time of the wheel's first bucket; NONE
-- if neither holds anything.
local function next_due(K)
  local t = NONE
  local head = redis.call('ZRANGE', K.sched, 0, 0, 'WITHSCORES')
  if head[2] then t = tonumber(head[2]) end
  local w = redis.call('ZRANGE', K.wheel, 0, 0, 'WITHSCORES')
  if w[2] then
    local roll = tonumber(w[2]) - WHEEL_MS
    if t < 0 or roll < t then t = roll end
  end
  return t
end

-- Puts job `id` (record `j`, not yet saved) where `due` says: ready if due,
-- scheduled if due soon, else in its wheel bucket; sets j.d, j.s and j.w.
-- Returns true if a waiting consumer or dispatcher should be woken (the job
-- is due now or makes the next event earlier).
local function place(K, id, j, due, now)
  j.d = due
  j.w = nil
  if due <= now then
    ready_add(id, j, due)
    j.s = READY
    return true
  end
  local before = next_due(K)
  j.s = SCHEDULED
  local event = due
  if near(due, now) then
    redis.call('ZADD', K.sched, due, id)
  else
    local b = bucket(due)
    redis.call('RPUSH', K.wp .. b, id)
    redis.call('ZADD', K.wheel, b, b)
    redis.call('HINCRBY', K.ctr, 'far', 1)
    j.w = true
    -- Waiters sleep until next_due() (at the latest); the job cannot be due
    -- before its bucket starts, so only a bucket starting earlier wakes them.
    event = b
  end
  return before < 0 or event < before
end

-- Takes a waiting job out of the schedule, the wheel or the ready set (a
-- wheel entry stays in its list, stale, and is skipped when rolled).
local function unplace(K, id, j)
  if j.s == SCHEDULED then
    if j.w then
      redis.call('HINCRBY', K.ctr, 'far', -1)
      j.w = nil
    else
      redis.call('ZREM', K.sched, id)
    end
  elseif j.s == READY then
    local m = ready_member(rank(j.pd, j.c, j.d), j.q, id)
    if j.g then
      key_unready(j.g, m)
    else
      redis.call('ZREM', K.ready, m)
    end
  end
end

-- Moves up to `max` wheel entries of buckets due for rolling (bucket <=
-- bucket(now) + WHEEL_MS) into the schedule. Returns the entries handled.
local function roll(K, now, max)
  local limit = bucket(now) + WHEEL_MS
  local handled = 0
  while handled < max do
    local w = redis.call('ZRANGE', K.wheel, 0, 0, 'WITHSCORES')
    if not w[2] or tonumber(w[2]) > limit then break end
    local b = tonumber(w[2])
    local lk = K.wp .. w[1]
    local ids = redis.call('LPOP', lk, max - handled)
    if ids then
      local moved = 0
      for _, id in ipairs(ids) do
        local j = load(id)
        if j and j.s == SCHEDULED and j.w and bucket(j.d) == b then
          j.w = nil
          redis.call('ZADD', K.sched, j.d, id)
          save(id, j)
          moved = moved + 1
        end
      end
      handled = handled + #ids
      if moved > 0 then redis.call('HINCRBY', K.ctr, 'far', -moved) end
    end
    if redis.call('EXISTS', lk) == 0 then redis.call('ZREM', K.wheel, w[1]) end
  end
  return handled
end

-- Moves up to `max` due jobs from the schedule to the ready set, after
-- rolling what the wheel owes the schedule. Returns the jobs moved (rolled
-- wheel entries included).
local function promote(K, now, max)
  local rolled = roll(K, now, max)
  -- Ids only: a job's due is its record's (d, the score it was scheduled
  -- at); scores would cost Redis a "%.17g" each to answer and Lua a
  -- tonumber to read (~5,000 instructions a job).
  local ids = redis.call('ZRANGEBYSCORE', K.sched, '-inf', now, 'LIMIT', 0, max)
  if #ids == 0 then return rolled end
  redis.call('ZREM', K.sched, unpack(ids))
  -- Batches read and write with one call per command, not one per job (a
  -- redis.call costs 1.5-3 us of Redis CPU whatever it does): the records
  -- with one HMGET, one ZADD into the ready set (keyed jobs go to their
  -- lanes one by one), one HSET of the records.
  local raws = redis.call('HMGET', K.jobs, unpack(ids))
  local ready, records = {}, {}
  local moved = 0
  for i, id in ipairs(ids) do
    local raw = raws[i]
    if raw then
      -- The first four values, then the next four: a record of exactly
      -- eight (most: a job as enqueued) has no key and no value after its
      -- body, and its state is one letter right after the first four, so
      -- the ready record is the same bytes with that letter changed (a
      -- one-letter string both: 0xa1 and the letter), not unpacked and
      -- packed again (~900 instructions a value). Any other record is (a
      -- job in put order or with a trace context among them: it has at
      -- least 23 values).
      local off, d, p, q, a = cmsgpack.unpack_limit(raw, 4)
      local rest, s = cmsgpack.unpack_limit(raw, 4, off)
      if s == SCHEDULED then
        local record, g
        local at = d
        if rest == -1 and string.byte(raw, off + 1) == 0xa1 then
          record = string.sub(raw, 1, off + 1) .. READY .. string.sub(raw, off + 3)
        else
          local c, k, b, m, L, r, e, t, u, x, w, to, rl, bu, ki, dd, pd, rv, tc
          d, p, q, a, s, c, k, b, m, L, r, e, t, u, x, w, to, rl, bu, ki, dd, g, pd, rv, tc = cmsgpack.unpack(raw)
          record = pack_values(d, p, q, a, READY, c, k, b, m, L, r, e, t, u, x, w, to, rl, bu, ki, dd, g, pd, rv, tc)
          at = rank(pd, c, d)
        end
        ready_later(ready, id, p, q, g, at)
        records[#records + 1] = id
        records[#records + 1] = record
        moved = moved + 1
      end
    end
  end
  if #ready > 0 then redis.call('ZADD', K.ready, unpack(ready)) end
  if #records > 0 then redis.call('HSET', K.jobs, unpack(records)) end
  return moved + rolled
end

-- Starts the dedup window of job `id` (record `j`) that ended at `now`.
local function remember(K, id, j, now)
  if j.dd then redis.call('ZADD', K.dedup, now + j.dd, id) end
end

-- Drops the oldest dead letters over the cap, at most MAX_BATCH per call.
local function trim_dead(K, cap)
  local over = redis.call('ZCARD', K.dead) - cap
  if over <= 0 then return 0 end
  if over > MAX_BATCH then over = MAX_BATCH end
  local ids = redis.call('ZRANGE', K.dead, 0, over - 1)
  if #ids > 0 then redis.call('HDEL', K.jobs, unpack(ids)) end
  redis.call('ZREMRANGEBYRANK', K.dead, 0, over - 1)
  redis.call('HINCRBY', K.ctr, 'dead_dropped', #ids)
  return #ids
end

-- A failed attempt of reserved job `id` (record `j`): retry after a wait, or
-- dead when it was the last attempt (or `bury` is true). `retry_in` (ms)
-- overrides the policy when given. `nacked`: its holder failed it (not a
-- lease expiry), so a job in put order retried keeps the wait as its put
-- delay. Saves the record (which drops the lease token). Returns due ms of
-- the retry (or NONE when dead), whether to wake, and the failed attempt's
-- number.
local function fail(K, cfg, id, j, now, err, retry_in, rand, bury, nacked)
  local attempts = j.a or 0
  local max = j.m or cfg.max_attempts
  redis.call('ZREM', K.lease, id)
  local freed = j.g and key_unlease(j.g)
  j.t, j.u, j.e = nil, nil, with_error(j.e, attempts, now, err)
  redis.call('HINCRBY', K.ctr, 'failed', 1)
  if bury or attempts >= max then
    j.s, j.x = DEAD, now
    j.bu = (j.bu or 0) + 1
    save(id, j)
    redis.call('ZADD', K.dead, now, id)
    remember(K, id, j, now)
    redis.call('HINCRBY', K.ctr, 'dead', 1)
    trim_dead(K, cfg.dead_cap)
    return NONE, freed, attempts
  end
  local wait = retry_in
  if wait == nil then wait = backoff(j.r or cfg.retry, attempts, rand) end
  if nacked and j.pd then j.pd = wait end
  local due = now + wait
  local woke = place(K, id, j, due, now)
  save(id, j)
  return due, woke or freed, attempts
end

-- The lease holder check of ack, nack, touch, bury and release: returns the
-- record, or a status reply. A waiting job has no lease, so any token is
-- stale; a dead one says so.
local function held_record(j, token)
  if not j then return nil, {NOT_FOUND} end
  if j.s == DEAD then return nil, {NOT_IN_STATE, DEAD} end
  if j.s ~= RESERVED or j.t ~= token then return nil, {TOKEN_MISMATCH} end
  return j, nil
end

-- (`held_record` checks a record already read.)
local function held(id, token)
  return held_record(load(id), token)
end

-- Tells every dq instance (in-process waiters and the dispatcher) that
-- topic ARGV[1] has a job due earlier than they may think.
local function wake()
  redis.call('PUBLISH', WAKE_CHANNEL, ARGV[1])
end


