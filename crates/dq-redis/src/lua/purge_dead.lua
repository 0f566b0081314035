-- purge_dead: deletes up to `max` dead letters, oldest first.
-- KEYS: the topic's keys (see common.lua).
-- ARGV: topic, max
-- Returns: number deleted
-- Side effects: DEL job hashes, ZREM dead.
local ids = redis.call('ZRANGE', K.dead, 0, tonumber(ARGV[2]) - 1)
for _, id in ipairs(ids) do redis.call('DEL', K.job .. id) end
if #ids > 0 then redis.call('ZREMRANGEBYRANK', K.dead, 0, #ids - 1) end
return #ids
