-- reschedule: moves a waiting (scheduled or ready) job to a new due time;
-- a kick (beanstalkd's kick of a delayed job) counts in its kicks.
-- KEYS: the topic's keys (see common.lua).
-- ARGV: topic, id, due ms, now, kick (1 | 0)
-- Returns: {1} | {NOT_FOUND} | {NOT_IN_STATE, state} reserved or dead
-- Side effects: sched/ready, job record d and s (a kick: ki + 1); PUBLISH
--   when it becomes due now or the new head.
local id = ARGV[2]
local j = load(id)
if not j then return {NOT_FOUND} end
if j.s ~= SCHEDULED and j.s ~= READY then return {NOT_IN_STATE, j.s} end
unplace(K, id, j)
local now = clock_ms(ARGV[4])
if ARGV[5] == '1' then j.ki = (j.ki or 0) + 1 end
-- A due time in the past is now: lateness counts from the reschedule.
local woke = place(K, id, j, math.max(tonumber(ARGV[3]), now), now)
save(id, j)
if woke then wake() end
return {1}
