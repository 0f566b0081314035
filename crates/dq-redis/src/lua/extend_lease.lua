-- extend_lease: pushes a held lease's deadline to now + lease_ms.
-- KEYS: the topic's keys (see common.lua).
-- ARGV: topic, id, token, lease_ms or '' (job's, then topic's), now
-- Returns: {1, deadline} | {-1} not found | {-2} token mismatch |
--   {-3, 'd'} dead
-- Side effects: job hash u, lease ZSET score.
local id = ARGV[2]
local jk = K.job .. id
local f = redis.call('HMGET', jk, 's', 't', 'L')
if not f[1] then return {-1} end
-- A waiting job has no lease, so any token is stale; a dead one says so.
if f[1] == 'd' then return {-3, 'd'} end
if f[1] ~= 'r' or f[2] ~= ARGV[3] then return {-2} end
local lease = tonumber(ARGV[4]) or tonumber(f[3]) or topic_cfg(K).lease_ms
local deadline = tonumber(ARGV[5]) + lease
redis.call('HSET', jk, 'u', fmt(deadline))
redis.call('ZADD', K.lease, deadline, id)
return {1, deadline}
