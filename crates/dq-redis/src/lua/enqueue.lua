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
-- The schedule's head is read once and kept in `head` over the batch (it
-- decides the wake-up exactly as place() does, without a read per job).
local now = tonumber(ARGV[2])
local cfg = nil
local out = {}
local woke = false
local created = 0
local head = next_due(K)
for i = 3, #ARGV, 10 do
  local id = ARGV[i]
  local jk = K.job .. id
  local wk, wv = ARGV[i + 1], tonumber(ARGV[i + 2])
  local old = redis.call('HMGET', jk, 's', 'd')
  local outcome = 1
  if old[1] then
    if ARGV[i + 9] == '1' and (old[1] == 's' or old[1] == 'y') then
      unplace(K, id, jk, old[1])
      redis.call('DEL', jk)
      if old[1] == 's' and tonumber(old[2]) == head then head = next_due(K) end
      outcome = 2
    else
      out[#out + 1] = 0
      out[#out + 1] = tonumber(old[2])
      out[#out + 1] = old[1]
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
    local state = 's'
    if due <= now then state = 'y' end
    redis.call('HSET', jk, 'b', ARGV[i + 8], 'k', ARGV[i + 7], 'd', fmt(due),
      'p', ARGV[i + 3], 'q', fmt(seq), 'a', '0', 'c', fmt(now), 's', state)
    if ARGV[i + 4] ~= '' then redis.call('HSET', jk, 'm', ARGV[i + 4]) end
    if ARGV[i + 5] ~= '' then redis.call('HSET', jk, 'L', ARGV[i + 5]) end
    if ARGV[i + 6] ~= '' then redis.call('HSET', jk, 'r', ARGV[i + 6]) end
    if state == 'y' then
      redis.call('ZADD', K.ready, tonumber(ARGV[i + 3]), ready_member(due, seq, id))
      woke = true
    else
      redis.call('ZADD', K.sched, due, id)
      if head < 0 or due < head then
        woke = true
        head = due
      end
    end
    if outcome == 1 then created = created + 1 end
    out[#out + 1] = outcome
    out[#out + 1] = due
    out[#out + 1] = state
  end
end
if created > 0 then redis.call('HINCRBY', K.ctr, 'enqueued', created) end
if woke then wake() end
return out
