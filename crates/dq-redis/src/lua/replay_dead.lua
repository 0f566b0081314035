-- replay_dead: makes dead letters due now with a fresh attempt count.
-- KEYS: the topic's keys (see common.lua).
-- ARGV: topic, now, max, then ids (none: the `max` oldest dead letters)
-- Returns: number replayed (ids not dead are skipped)
-- Side effects: dead -> ready, job record a=0 (its hand-outs kept in rv),
--   x cleared, ki + 1; ctr.replayed + n; PUBLISH.
local now, max = clock_ms(ARGV[2]), tonumber(ARGV[3])
local ids = {}
if #ARGV > 3 then
  for i = 4, #ARGV do ids[#ids + 1] = ARGV[i] end
else
  ids = redis.call('ZRANGE', K.dead, 0, max - 1)
end
local n = 0
for _, id in ipairs(ids) do
  local j = load(id)
  if j and j.s == DEAD then
    redis.call('ZREM', K.dead, id)
    if (j.a or 0) > 0 then j.rv = (j.rv or 0) + j.a end
    j.a, j.x = 0, nil
    j.ki = (j.ki or 0) + 1
    place(K, id, j, now, now)
    save(id, j)
    n = n + 1
  end
end
if n > 0 then
  redis.call('HINCRBY', K.ctr, 'replayed', n)
  wake()
end
return n
