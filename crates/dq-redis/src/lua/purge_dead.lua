-- purge_dead: deletes up to `max` dead letters, oldest first.
-- KEYS: the topic's keys (see common.lua).
-- ARGV: topic, max
-- Returns: number deleted
-- Side effects: HDEL job records, ZREM dead.
local ids = redis.call('ZRANGE', K.dead, 0, tonumber(ARGV[2]) - 1)
if #ids > 0 then
  redis.call('HDEL', K.jobs, unpack(ids))
  redis.call('ZREMRANGEBYRANK', K.dead, 0, #ids - 1)
end
return #ids
