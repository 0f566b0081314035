-- get: reads jobs (read-only).
-- KEYS: the topic's keys (see common.lua).
-- ARGV: topic, mode (i: the ids that follow | d: dead letters | u: scheduled
--   jobs, earliest due first | r: ready jobs in hand-out order), then ids,
--   or offset and limit for mode d, or limit and offset for modes u and r
--   (the first offset + limit ids are found, the first offset dropped; u:
--   the schedule first, then the wheel's buckets in order; at most 10000
--   entries of one bucket are looked at)
-- Returns: 23 per job found: id, state, due, priority, attempts, created,
--   kind, body, max_attempts and lease_ms in effect (the job's override, else
--   the topic's), lease deadline or NONE,
--   died-at or NONE, has-error (1 | 0), error or '', then its counts:
--   leases expired, given back, times dead, times replayed or kicked, then
--   its flow-control key or '', then its last failed attempts as JSON or
--   '', then its hand-outs in its whole life (a + rv), its put delay
--   (a job in put order) or NONE, and its trace context (as stored) or ''
--   (23 in all; common.lua's job_info)
-- Side effects: none.
local ids
if ARGV[2] == 'd' then
  local off, lim = tonumber(ARGV[3]), tonumber(ARGV[4])
  ids = redis.call('ZRANGE', K.dead, off, off + lim - 1)
elseif ARGV[2] == 'r' then
  ids = {}
  local lim = tonumber(ARGV[3]) + tonumber(ARGV[4] or 0)
  for _, m in ipairs(redis.call('ZRANGE', K.ready, 0, lim - 1)) do
    ids[#ids + 1] = string.sub(m, READY_PREFIX + 1)
  end
  -- Then the keys' lanes: the ring in turn order, the held, the waiting.
  local keys = redis.call('ZRANGE', KR.ring, 0, lim - 1)
  -- The held keys in name order: the same from one page to the next.
  for _, g in ipairs(redis.call('SORT', KR.held, 'ALPHA', 'LIMIT', 0, lim)) do keys[#keys + 1] = g end
  for _, g in ipairs(redis.call('ZRANGE', KR.wait, 0, lim - 1)) do keys[#keys + 1] = g end
  for _, g in ipairs(keys) do
    if #ids >= lim then break end
    for _, m in ipairs(redis.call('ZRANGE', lane(g), 0, lim - #ids - 1)) do
      ids[#ids + 1] = string.sub(m, READY_PREFIX + 1)
    end
  end
elseif ARGV[2] == 'u' then
  local lim = tonumber(ARGV[3]) + tonumber(ARGV[4] or 0)
  ids = redis.call('ZRANGE', K.sched, 0, lim - 1)
  local seen = {}
  local off = 0
  while #ids < lim do
    local w = redis.call('ZRANGE', K.wheel, off, off)
    if not w[1] then break end
    local b = tonumber(w[1])
    local live = {}
    for _, id in ipairs(redis.call('LRANGE', K.wp .. w[1], 0, 9999)) do
      local j = load(id)
      if not seen[id] and j and j.s == SCHEDULED and j.w and bucket(j.d) == b then
        seen[id] = true
        live[#live + 1] = { j.d, j.q, id }
      end
    end
    table.sort(live, function(x, y)
      if x[1] ~= y[1] then return x[1] < y[1] end
      return x[2] < y[2]
    end)
    for _, e in ipairs(live) do
      if #ids >= lim then break end
      ids[#ids + 1] = e[3]
    end
    off = off + 1
  end
else
  ids = {}
  for i = 3, #ARGV do ids[#ids + 1] = ARGV[i] end
end
if ARGV[2] == 'r' or ARGV[2] == 'u' then
  -- The page: what follows the first offset.
  local off = tonumber(ARGV[4] or 0)
  if off > 0 then
    local page = {}
    for i = off + 1, #ids do page[#page + 1] = ids[i] end
    ids = page
  end
end
local out = {}
local cfg = topic_cfg(K)
for _, id in ipairs(ids) do
  local j = load(id)
  if j then
    job_info(out, id, j, cfg)
  end
end
return out
