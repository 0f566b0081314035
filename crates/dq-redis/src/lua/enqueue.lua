-- enqueue: writes up to 1000 new jobs of one topic.
-- KEYS: the topic's keys (see common.lua).
-- ARGV: topic, now, then 10 per job:
--   id, when-kind (d delay | a absolute | t topic default), when-value (ms),
--   priority, max_attempts or '', lease_ms or '', retry (encoded) or '',
--   kind (j | b), body, replace (1 | 0)
-- Returns: 3 per job: outcome (1 created | 2 replaced | 0 exists),
--   due ms, state letter (s | y | r | d).
-- Side effects: job hashes, sched/ready, ctr.enqueued and ctr.seq; one
--   PUBLISH on WAKE_CHANNEL when a job is due now or is the new schedule head.
local now = tonumber(ARGV[2])
local cfg = nil
local out = {}
local woke = false
local created = 0
for i = 3, #ARGV, 10 do
  local id = ARGV[i]
  local jk = K.job .. id
  local wk, wv = ARGV[i + 1], tonumber(ARGV[i + 2])
  local state = redis.call('HGET', jk, 's')
  local outcome = 1
  if state then
    if ARGV[i + 9] == '1' and (state == 's' or state == 'y') then
      unplace(K, id, jk, state)
      redis.call('DEL', jk)
      outcome = 2
    else
      out[#out + 1] = 0
      out[#out + 1] = tonumber(redis.call('HGET', jk, 'd'))
      out[#out + 1] = state
      outcome = 0
    end
  end
  if outcome ~= 0 then
    local due
    if wk == 'd' then
      due = now + wv
    elseif wk == 'a' then
      due = wv
    else
      if cfg == nil then cfg = topic_cfg(K) end
      due = now + cfg.default_delay_ms
    end
    local seq = redis.call('HINCRBY', K.ctr, 'seq', 1)
    redis.call('HSET', jk, 'b', ARGV[i + 8], 'k', ARGV[i + 7], 'd', fmt(due),
      'p', ARGV[i + 3], 'q', fmt(seq), 'a', '0', 'c', fmt(now))
    if ARGV[i + 4] ~= '' then redis.call('HSET', jk, 'm', ARGV[i + 4]) end
    if ARGV[i + 5] ~= '' then redis.call('HSET', jk, 'L', ARGV[i + 5]) end
    if ARGV[i + 6] ~= '' then redis.call('HSET', jk, 'r', ARGV[i + 6]) end
    if place(K, id, jk, due, now) then woke = true end
    if outcome == 1 then created = created + 1 end
    out[#out + 1] = outcome
    out[#out + 1] = due
    out[#out + 1] = redis.call('HGET', jk, 's')
  end
end
if created > 0 then redis.call('HINCRBY', K.ctr, 'enqueued', created) end
if woke then wake() end
return out
