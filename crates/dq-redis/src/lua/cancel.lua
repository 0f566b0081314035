-- cancel: removes a job in any state; a reserved job's holder will find it gone.
-- KEYS: the topic's keys (see common.lua).
-- ARGV: topic, id
-- Returns: the state letter it had, or false (nil) if there was no job.
-- Side effects: DEL job hash; ZREM from sched/ready/lease/dead; ctr.cancelled + 1.
local id = ARGV[2]
local jk = K.job .. id
local state = redis.call('HGET', jk, 's')
if not state then return false end
unplace(K, id, jk, state)
if state == 'r' then redis.call('ZREM', K.lease, id) end
if state == 'd' then redis.call('ZREM', K.dead, id) end
redis.call('DEL', jk)
redis.call('HINCRBY', K.ctr, 'cancelled', 1)
return state
