-- delete_topic: deletes up to `max` of a topic's jobs; when none are left,
-- also its config and counters.
-- KEYS: the topic's keys (see common.lua).
-- ARGV: topic, max
-- Returns: {deleted, 1 if the topic is now empty and forgotten else 0}
local left = tonumber(ARGV[2])
local deleted = 0
for _, z in ipairs({K.sched, K.lease, K.dead}) do
  if left > 0 then
    local ids = redis.call('ZRANGE', z, 0, left - 1)
    for _, id in ipairs(ids) do redis.call('DEL', K.job .. id) end
    if #ids > 0 then redis.call('ZREMRANGEBYRANK', z, 0, #ids - 1) end
    deleted = deleted + #ids
    left = left - #ids
  end
end
if left > 0 then
  local ms = redis.call('ZRANGE', K.ready, 0, left - 1)
  for _, m in ipairs(ms) do redis.call('DEL', K.job .. string.sub(m, READY_PREFIX + 1)) end
  if #ms > 0 then redis.call('ZREMRANGEBYRANK', K.ready, 0, #ms - 1) end
  deleted = deleted + #ms
end
local rest = redis.call('ZCARD', K.sched) + redis.call('ZCARD', K.ready)
  + redis.call('ZCARD', K.lease) + redis.call('ZCARD', K.dead)
if rest == 0 then
  redis.call('DEL', K.cfg, K.ctr)
  return {deleted, 1}
end
return {deleted, 0}
