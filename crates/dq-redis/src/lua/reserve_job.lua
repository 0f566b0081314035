-- reserve_job: leases one job by id, whether scheduled, ready or dead
-- (beanstalkd's reserve-job); a reserved job is left to its holder.
-- KEYS: the topic's keys (see common.lua).
-- ARGV: topic, now, id, lease_ms override or '', token
-- Returns: {0} none (missing or reserved) | {0, id, token, lease deadline,
--   the record as stored} (reserve's reply shape)
-- Side effects: the job leaves sched/wheel/ready/dead for lease; its record
--   (died-at cleared) and lease token (see save() in common.lua).
local now = clock_ms(ARGV[2])
local id = ARGV[3]
local j = load(id)
if not j or j.s == RESERVED then return {0} end
if j.s == DEAD then
  redis.call('ZREM', K.dead, id)
  j.x = nil
else
  unplace(K, id, j)
end
local lease = tonumber(ARGV[4]) or j.L or topic_cfg(K).lease_ms
local deadline = now + lease
j.a = (j.a or 0) + 1
j.s, j.t, j.u = RESERVED, lease_token(ARGV[5], j.dd, j.g), deadline
local raw = save(id, j)
redis.call('ZADD', K.lease, deadline, id)
if j.g then key_lease(j.g) end
return {0, id, j.t, deadline, raw}
