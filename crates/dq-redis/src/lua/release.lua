-- release: gives a reserved job back without counting the attempt (as
-- beanstalkd's release): due again after delay_ms.
-- KEYS: the topic's keys (see common.lua).
-- ARGV: topic, id, token, delay_ms, now
-- Returns: {1, due} | {-1} not found | {-2} token mismatch | {-3, 'd'} dead
-- Side effects: ZREM lease; job hash a-1, t and u removed, d; sched/ready;
--   PUBLISH when due now or the new head.
local id = ARGV[2]
local jk = K.job .. id
local f = redis.call('HMGET', jk, 's', 't')
if not f[1] then return {-1} end
if f[1] == 'd' then return {-3, 'd'} end
if f[1] ~= 'r' or f[2] ~= ARGV[3] then return {-2} end
local now = tonumber(ARGV[5])
local due = now + tonumber(ARGV[4])
redis.call('ZREM', K.lease, id)
redis.call('HDEL', jk, 't', 'u')
redis.call('HINCRBY', jk, 'a', -1)
redis.call('HSET', jk, 'd', fmt(due))
if place(K, id, jk, due, now) then wake() end
return {1, due}
