-- get: reads jobs (read-only).
-- KEYS: the topic's keys (see common.lua).
-- ARGV: topic, mode (i: the ids that follow | d: dead letters), then ids, or
--   offset and limit for mode d
-- Returns: 14 per job found: id, state, due, priority, attempts, created,
--   kind, body, max_attempts or -1, lease_ms or -1, lease deadline or -1,
--   died-at or -1, has-error (1 | 0), error or ''
-- Side effects: none.
local ids
if ARGV[2] == 'd' then
  local off, lim = tonumber(ARGV[3]), tonumber(ARGV[4])
  ids = redis.call('ZRANGE', K.dead, off, off + lim - 1)
else
  ids = {}
  for i = 3, #ARGV do ids[#ids + 1] = ARGV[i] end
end
local out = {}
for _, id in ipairs(ids) do
  local j = load(id)
  if j then
    local n = #out
    out[n + 1] = id
    out[n + 2] = j.s
    out[n + 3] = j.d
    out[n + 4] = j.p
    out[n + 5] = j.a or 0
    out[n + 6] = j.c or 0
    out[n + 7] = j.k
    out[n + 8] = j.b
    out[n + 9] = j.m or -1
    out[n + 10] = j.L or -1
    out[n + 11] = j.u or -1
    out[n + 12] = j.x or -1
    out[n + 13] = j.e and 1 or 0
    out[n + 14] = j.e or ''
  end
end
return out
