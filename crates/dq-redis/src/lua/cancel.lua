-- cancel: removes a job in any state; a reserved job's holder will find it gone.
-- KEYS: the topic's keys (see common.lua).
-- ARGV: topic, id, now
-- Returns: the state letter it had, or false (nil) if there was no job.
-- Side effects: HDEL job record (and a lease token); ZREM from sched/ready/lease/dead; ctr.cancelled + 1;
--   the id's dedup window (if it has one) from now.
local id = ARGV[2]
local j = load(id)
if not j then return false end
unplace(K, id, j)
if j.s == RESERVED then
  redis.call('ZREM', K.lease, id)
  if j.g and key_unlease(j.g) then wake() end
end
if j.s == DEAD then redis.call('ZREM', K.dead, id) end
forget(id, j)
remember(K, id, j, clock_ms(ARGV[3]))
redis.call('HINCRBY', K.ctr, 'cancelled', 1)
return j.s
