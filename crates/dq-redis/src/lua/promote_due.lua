-- promote_due: moves up to `max` due jobs from the schedule to the ready set.
-- KEYS: the topic's keys (see common.lua).
-- ARGV: topic, now, max
-- Returns: {moved, next due ms of the schedule or NONE}
-- Side effects: sched -> ready, job hashes s=y; PUBLISH when any moved.
local moved = promote(K, clock_ms(ARGV[2]), tonumber(ARGV[3]))
if moved > 0 then wake() end
return {moved, next_due(K)}
