-- reschedule: moves a waiting (scheduled or ready) job to a new due time.
-- KEYS: the topic's keys (see common.lua).
-- ARGV: topic, id, due ms, now
-- Returns: {1} | {-1} not found | {-3, state} reserved or dead
-- Side effects: sched/ready, job hash d and s; PUBLISH when it becomes due
--   now or the new head.
local id = ARGV[2]
local jk = K.job .. id
local state = redis.call('HGET', jk, 's')
if not state then return {-1} end
if state ~= 's' and state ~= 'y' then return {-3, state} end
unplace(K, id, jk, state)
local due = tonumber(ARGV[3])
redis.call('HSET', jk, 'd', fmt(due))
if place(K, id, jk, due, tonumber(ARGV[4])) then wake() end
return {1}
