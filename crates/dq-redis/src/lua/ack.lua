-- ack: completes a reserved job; its hash (and body) is deleted.
-- KEYS: the topic's keys (see common.lua).
-- ARGV: topic, id, token
-- Returns: {1} | {-1} not found | {-2} token mismatch | {-3, 'd'} dead
-- Side effects: DEL job hash, ZREM lease, ctr.acked + 1.
local id = ARGV[2]
local jk = K.job .. id
local f = redis.call('HMGET', jk, 's', 't')
if not f[1] then return {-1} end
-- A waiting job has no lease, so any token is stale; a dead one says so.
if f[1] == 'd' then return {-3, 'd'} end
if f[1] ~= 'r' or f[2] ~= ARGV[3] then return {-2} end
redis.call('DEL', jk)
redis.call('ZREM', K.lease, id)
redis.call('HINCRBY', K.ctr, 'acked', 1)
return {1}
