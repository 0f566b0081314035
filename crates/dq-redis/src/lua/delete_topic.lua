-- delete_topic: deletes up to `max` of a topic's jobs (a reserved one with
-- its lease token); when none are left, also its records hash, lease
-- tokens, config and counters.
-- KEYS: the topic's keys (see common.lua).
-- ARGV: topic, max
-- Returns: {deleted, 1 if the topic is now empty and forgotten else 0}
local left = tonumber(ARGV[2])
local deleted = 0
for _, z in ipairs({K.sched, K.lease, K.dead, K.ready}) do
  if left > 0 then
    local ms = redis.call('ZRANGE', z, 0, left - 1)
    if #ms > 0 then
      local ids = ms
      if z == K.ready then
        ids = {}
        for i, m in ipairs(ms) do ids[i] = string.sub(m, READY_PREFIX + 1) end
      elseif z == K.lease then
        -- A keyed lease deleted frees its key's slot (a delete cut short
        -- leaves no key held for good).
        for _, id in ipairs(ids) do
          local j = load(id)
          if j and j.g then key_unlease(j.g) end
        end
        tokens_drop(unpack(ids))
      end
      redis.call('HDEL', K.jobs, unpack(ids))
      redis.call('ZREMRANGEBYRANK', z, 0, #ms - 1)
    end
    deleted = deleted + #ms
    left = left - #ms
  end
end
-- The keys' lanes (every key with ready jobs is in the ring, held or wait).
while left > 0 do
  local g = redis.call('ZRANGE', KR.ring, 0, 0)[1]
    or redis.call('SRANDMEMBER', KR.held)
    or redis.call('ZRANGE', KR.wait, 0, 0)[1]
  if not g then break end
  local ms = redis.call('ZRANGE', lane(g), 0, left - 1)
  if #ms > 0 then
    local ids = {}
    for i, m in ipairs(ms) do ids[i] = string.sub(m, READY_PREFIX + 1) end
    redis.call('HDEL', K.jobs, unpack(ids))
    redis.call('ZREMRANGEBYRANK', lane(g), 0, #ms - 1)
    redis.call('HINCRBY', K.ctr, 'kready', -#ms)
  end
  key_lane_left(g)
  deleted = deleted + #ms
  left = left - #ms
end
-- The wheel: pop bucket lists, deleting the records of the jobs still there.
while left > 0 do
  local w = redis.call('ZRANGE', K.wheel, 0, 0)
  if not w[1] then break end
  local lk = K.wp .. w[1]
  local ids = redis.call('LPOP', lk, left)
  if ids then
    local mine = {}
    for _, id in ipairs(ids) do
      local j = load(id)
      if j and j.s == SCHEDULED and j.w and bucket(j.d) == tonumber(w[1]) then mine[#mine + 1] = id end
    end
    if #mine > 0 then
      redis.call('HDEL', K.jobs, unpack(mine))
      redis.call('HINCRBY', K.ctr, 'far', -#mine)
    end
    deleted = deleted + #mine
    left = left - #ids
  end
  if redis.call('EXISTS', lk) == 0 then redis.call('ZREM', K.wheel, w[1]) end
end
local rest = redis.call('ZCARD', K.sched) + redis.call('ZCARD', K.ready)
  + redis.call('ZCARD', K.lease) + redis.call('ZCARD', K.dead) + redis.call('ZCARD', K.wheel)
  + redis.call('ZCARD', KR.ring) + redis.call('SCARD', KR.held) + redis.call('ZCARD', KR.wait)
if rest == 0 then
  redis.call('DEL', K.cfg, K.ctr, K.jobs, K.tokens, K.dedup, KR.act, KR.due, KR.rl, KR.full)
  return {deleted, 1}
end
return {deleted, 0}
