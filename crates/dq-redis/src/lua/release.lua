-- release: gives a reserved job back without counting the attempt (as
-- beanstalkd's release): due again after delay_ms.
-- KEYS: the topic's keys (see common.lua).
-- ARGV: topic, id, token, delay_ms, now, how (r released by its holder |
--   d dropped: its holder went away, nothing counted)
-- Returns: {1, due} | {NOT_FOUND} | {TOKEN_MISMATCH} | {NOT_IN_STATE, DEAD} dead
-- Side effects: ZREM lease and the lease token; job record (attempts as
--   before the lease, the hand-out kept in rv + 1, d, s; released: rl + 1
--   and a job in put order's pd = delay_ms); sched/ready; PUBLISH when due
--   now or the new head.
local id = ARGV[2]
local j, err = held(id, ARGV[3])
if not j then return err end
local now = clock_ms(ARGV[5])
local delay = tonumber(ARGV[4])
local due = now + delay
redis.call('ZREM', K.lease, id)
local freed = j.g and key_unlease(j.g)
j.t, j.u = nil, nil
j.a = (j.a or 1) - 1
j.rv = (j.rv or 0) + 1
if ARGV[6] ~= 'd' then
  j.rl = (j.rl or 0) + 1
  if j.pd then j.pd = delay end
end
local woke = place(K, id, j, due, now)
save(id, j)
if woke or freed then wake() end
return {1, due}
