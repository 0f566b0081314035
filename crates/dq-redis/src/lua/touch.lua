-- touch: pushes a held lease's deadline to now + lease_ms.
-- KEYS: the topic's keys (see common.lua).
-- ARGV: topic, id, token, lease_ms or '' (job's, then topic's), now
-- Returns: {1, deadline} | {NOT_FOUND} | {TOKEN_MISMATCH} | {NOT_IN_STATE, DEAD} dead
-- Side effects: the lease ZSET score (the record is not rewritten: a
--   lease's deadline is its score, see "Leases" in common.lua).
local id = ARGV[2]
local j, err = held(id, ARGV[3])
if not j then return err end
local lease = tonumber(ARGV[4]) or j.L or topic_cfg(K).lease_ms
local deadline = clock_ms(ARGV[5]) + lease
redis.call('ZADD', K.lease, deadline, id)
return {1, deadline}
