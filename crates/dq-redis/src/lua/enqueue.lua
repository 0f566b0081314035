-- enqueue: writes up to MAX_BATCH new jobs of one topic.
-- KEYS: the topic's keys (see common.lua).
-- ARGV: topic, now, the form of the jobs (f | c), then per job:
--   f (full), 13 values: id, when-kind (d delay | a absolute | t topic
--   default), when-value (ms), priority, max_attempts or '', lease_ms or '',
--   retry (encoded) or '', kind (j | b), body, flags (the sum of 1
--   replace and 2 put order: 0 | 1 | 2 | 3), dedup window ms or '' (the
--   topic's), flow-control key or '', trace context (as stored: tc in
--   common.lua) or ''. A job in put order (dq-core's
--   NewJob::put_order) keeps its delay (due - now) as pd and is ranked
--   among the ready jobs by its put time (see common.lua);
--   c (compact, when no job of the call sets any of the seven after
--   priority but kind and body, nor put order), 5 values: id, when-kind,
--   when-value, priority, kind-and-body: kind and body as the record
--   stores them, two MessagePack strings packed by the caller
--   (`packed_kind_body` in verbs/enqueue.rs, byte for byte what
--   cmsgpack.pack writes). (Every
--   value is a string Redis reads and Lua interns: the compact form passes
--   eight fewer per job.) A compact call writes its new records with one HMGET (which ids
--   exist) and one HSET instead of a command per job, and builds each
--   record from pieces: cmsgpack.pack(due, priority, seq), the call's
--   (attempts 0, state, created) packed once per state, the caller's
--   kind-and-body, and the call's tail (wheel flag, the topic's dedup
--   window) packed once: 3 values packed per job instead of 8 or more
--   (cmsgpack makes a Lua string of every value it packs, then joins
--   them). What each of these saves, measured: docs/performance-log.md,
--   "Records spliced, not packed: the Redis scripts".
-- Returns: 3 per job: outcome (1 created | 2 replaced | 0 exists |
--   3 deduplicated: the id is in its dedup window, nothing written),
--   due ms, state letter (s | y | r | d).
-- The dedup set is trimmed of ended windows once per call, and only read
-- when it exists (one EXISTS per call otherwise); the topic's default window
-- is one HGET per call. A job that exists is answered as existing, in its
-- window or not (a replayed dead letter is live again).
-- Side effects: job records (the full form: HSETNX for a new id, HSET when
--   replacing; the compact form: one HSET of the new ids),
--   sched/ready (or the key's lane)/wheel, ctr.enqueued, ctr.seq (once per call) and ctr.far;
--   one PUBLISH on WAKE_CHANNEL when a job is due now or makes the next
--   event earlier.
-- The next event is read once and kept in `head` over the batch (it decides
-- the wake-up exactly as place() does, without a read per job).
local now = clock_ms(ARGV[2])
local cfg = nil
local topic_dd = nil
local out = {}
local woke = false
local created = 0
local head = next_due(K)
local far = 0
-- Wheel entries of this batch, pushed once per bucket at the end.
local wheel, buckets = {}, {}
-- Enqueue order within the topic: read once, written back once.
local seq = tonumber(redis.call('HGET', K.ctr, 'seq') or '0')
local seq0 = seq
-- Schedule entries (due, id, ...) and ready entries without a key
-- (priority, member, ...) of this batch, each added with one ZADD: before a
-- replace reads them, and at the end.
local sched, ready = {}, {}
local function flush_pending()
  if #sched > 0 then
    redis.call('ZADD', K.sched, unpack(sched))
    sched = {}
  end
  if #ready > 0 then
    redis.call('ZADD', K.ready, unpack(ready))
    ready = {}
  end
end
local dedup = redis.call('EXISTS', K.dedup) == 1
if dedup then
  redis.call('ZREMRANGEBYSCORE', K.dedup, '-inf', now)
  dedup = redis.call('EXISTS', K.dedup) == 1
end
local compact = ARGV[3] == 'c'
local stride = compact and 5 or 13
-- The compact form: which ids exist (one HMGET), the jobs written earlier
-- in this call (id -> its place n in the call: a later one of the same id
-- exists),
-- the records to write (id, record, ... for one HSET), the pieces of a
-- record packed once per call, and the last priority and when-value read
-- (a batch's jobs mostly share them, and tonumber parses its string anew
-- each time: see docs/performance-log.md, "Records spliced, not packed").
local existing, batch, records, mids, tails
local last_ps, last_p, last_wvs, last_wv
-- The last due time made a string for the schedule's ZADD.
local last_due, last_due_s
if compact then
  local ids = {}
  for i = 4, #ARGV, stride do ids[#ids + 1] = ARGV[i] end
  existing = #ids > 0 and redis.call('HMGET', K.jobs, unpack(ids)) or {}
  batch, records, mids, tails = {}, {}, {}, {}
end
local n = 0
for i = 4, #ARGV, stride do
  n = n + 1
  local id = ARGV[i]
  local wk, wvs = ARGV[i + 1], ARGV[i + 2]
  local wv
  if compact then
    if wvs ~= last_wvs then last_wvs, last_wv = wvs, tonumber(wvs) end
    wv = last_wv
  else
    wv = tonumber(wvs)
  end
  local replace, put_order = false, false
  if not compact then
    local f = ARGV[i + 9]
    replace, put_order = f == '1' or f == '3', f == '2' or f == '3'
  end
  local outcome = 1
  -- In its dedup window and not a job now: nothing written. (A job of the
  -- same id earlier in a compact call was deduplicated too: neither exists.)
  if dedup and redis.call('ZSCORE', K.dedup, id)
    and (compact and not existing[n] or not compact and redis.call('HEXISTS', K.jobs, id) == 0) then
    out[#out + 1] = 3
    out[#out + 1] = 0
    out[#out + 1] = SCHEDULED
    outcome = 0
  elseif replace then
    flush_pending()
    local old = load(id)
    if old then
      if old.s == SCHEDULED or old.s == READY then
        unplace(K, id, old)
        if old.s == SCHEDULED and not old.w and old.d == head then head = next_due(K) end
        outcome = 2
      else
        out[#out + 1] = 0
        out[#out + 1] = old.d
        out[#out + 1] = old.s
        outcome = 0
      end
    end
  end
  if outcome ~= 0 then
    local due
    if wk == 'd' then
      due = now + wv
    elseif wk == 'a' then
      -- A due time in the past is now: lateness counts from the enqueue.
      due = math.max(wv, now)
    else
      if cfg == nil then cfg = topic_cfg(K) end
      due = now + cfg.default_delay_ms
    end
    seq = seq + 1
    -- The record's values as locals (see pack_values), not a table.
    local p, k, b, m, L, r, g, dd, pd, tc
    if compact then
      local ps = ARGV[i + 3]
      if ps ~= last_ps then last_ps, last_p = ps, tonumber(ps) end
      p = last_p
    else
      p, k, b = tonumber(ARGV[i + 3]), ARGV[i + 7], ARGV[i + 8]
      m, L = tonumber(ARGV[i + 4]), tonumber(ARGV[i + 5])
      r, g, tc = ARGV[i + 6], ARGV[i + 11], ARGV[i + 12]
      if r == '' then r = nil end
      if g == '' then g = nil end
      if tc == '' then tc = nil end
      dd = tonumber(ARGV[i + 10])
      if put_order then pd = due - now end
    end
    if dd == nil then
      if topic_dd == nil then topic_dd = num(redis.call('HGET', K.cfg, 'dedup_ms'), 0) end
      dd = topic_dd
    end
    if dd <= 0 then dd = nil end
    -- Where it goes, decided before anything is written.
    local near_due = due > now and near(due, now)
    local st, w = READY, nil
    if due > now then
      st = SCHEDULED
      if not near_due then w = true end
    end
    local written = true
    if compact then
      -- pack_values(due, p, seq, 0, st, now, k, b, nil × 7, w, nil × 4,
      -- dd) byte for byte, from pieces (see the header).
      -- An existing record is already read (the HMGET): decoded, not read again.
      local old = existing[n] and lease_view(id, decode(existing[n]))
      local earlier = batch[id]
      if old or earlier then
        written = false
        out[#out + 1] = 0
        if old then
          out[#out + 1] = old.d
          out[#out + 1] = old.s
        else
          -- As this call answered the earlier job (3 values per job).
          out[#out + 1] = out[3 * earlier - 1]
          out[#out + 1] = out[3 * earlier]
        end
      else
        local mid = mids[st]
        if not mid then
          mid = cmsgpack.pack(0, st, now)
          mids[st] = mid
        end
        -- dd is the topic's (the same for the whole call): only w varies.
        local tk = w and 2 or 1
        local tail = tails[tk]
        if not tail then
          tail = ''
          if dd then
            tail = cmsgpack.pack(nil, nil, nil, nil, nil, nil, nil, w, nil, nil, nil, nil, dd)
          elseif w then
            tail = cmsgpack.pack(nil, nil, nil, nil, nil, nil, nil, w)
          end
          tails[tk] = tail
        end
        records[#records + 1] = id
        records[#records + 1] = cmsgpack.pack(due, p, seq) .. mid .. ARGV[i + 4] .. tail
        batch[id] = n
      end
    elseif replace then
      redis.call('HSET', K.jobs, id,
        pack_values(due, p, seq, 0, st, now, k, b, m, L, r, nil, nil, nil, nil, w, nil, nil, nil, nil, dd, g, pd,
          nil, tc))
    else
      local record = pack_values(due, p, seq, 0, st, now, k, b, m, L, r, nil, nil, nil, nil, w,
        nil, nil, nil, nil, dd, g, pd, nil, tc)
      -- One hash lookup for the common case of a new id; an existing job
      -- is left as it is and reported.
      written = redis.call('HSETNX', K.jobs, id, record) == 1
      if not written then
        local old = load(id)
        out[#out + 1] = 0
        out[#out + 1] = old.d
        out[#out + 1] = old.s
      end
    end
    if written then
      if st == READY then
        -- Ranked by its put time (now) when in put order (rank()).
        ready_later(ready, id, p, seq, g, pd and now or due, ARGV[i + 3])
        woke = true
      else
        local event = due
        if near_due then
          -- The due as a string (a number costs Redis a "%.17g"): the
          -- caller's when it is the due, else made once per due time.
          if wk == 'a' and due == wv then
            sched[#sched + 1] = wvs
          else
            if due ~= last_due then last_due, last_due_s = due, fmt(due) end
            sched[#sched + 1] = last_due_s
          end
          sched[#sched + 1] = id
        else
          local b = bucket(due)
          if not wheel[b] then
            wheel[b] = {}
            buckets[#buckets + 1] = b
          end
          local ids = wheel[b]
          ids[#ids + 1] = id
          far = far + 1
          event = b
        end
        if head < 0 or event < head then
          woke = true
          head = event
        end
      end
      if outcome == 1 then created = created + 1 end
      out[#out + 1] = outcome
      out[#out + 1] = due
      out[#out + 1] = st
    end
  end
end
if compact and #records > 0 then redis.call('HSET', K.jobs, unpack(records)) end
flush_pending()
if seq ~= seq0 then redis.call('HSET', K.ctr, 'seq', seq) end
if created > 0 then redis.call('HINCRBY', K.ctr, 'enqueued', created) end
if far > 0 then redis.call('HINCRBY', K.ctr, 'far', far) end
for _, b in ipairs(buckets) do
  redis.call('RPUSH', K.wp .. b, unpack(wheel[b]))
  redis.call('ZADD', K.wheel, b, b)
end
if woke then wake() end
return out
