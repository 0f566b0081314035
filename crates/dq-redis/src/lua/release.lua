-- release: gives a reserved job back without counting the attempt (as
-- beanstalkd's release): due again after delay_ms.
-- KEYS: the topic's keys (see common.lua).
-- ARGV: topic, id, token, delay_ms, now
-- Returns: {1, due} | {NOT_FOUND} | {TOKEN_MISMATCH} | {NOT_IN_STATE, DEAD} dead
-- Side effects: ZREM lease and the lease token; job record (attempts as
--   before the lease, rl + 1, d, s); sched/ready; PUBLISH when due now or
--   the new head.
local id = ARGV[2]
local j, err = held(id, ARGV[3])
if not j then return err end
local now = clock_ms(ARGV[5])
local due = now + tonumber(ARGV[4])
redis.call('ZREM', K.lease, id)
local freed = j.g and key_unlease(j.g)
j.t, j.u = nil, nil
j.a = (j.a or 1) - 1
j.rl = (j.rl or 0) + 1
local woke = place(K, id, j, due, now)
save(id, j)
if woke or freed then wake() end
return {1, due}
