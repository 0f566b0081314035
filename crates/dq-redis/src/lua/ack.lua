-- ack: completes a reserved job; its hash (and body) is deleted.
-- KEYS: the topic's keys (see common.lua).
-- ARGV: topic, id, token
-- Returns: {1} | {-1} not found | {-2} token mismatch | {-3, state} not reserved
-- Side effects: DEL job hash, ZREM lease, ctr.acked + 1.
local id = ARGV[2]
local jk = K.job .. id
local f = redis.call('HMGET', jk, 's', 't')
if not f[1] then return {-1} end
if f[1] ~= 'r' then
  -- A stale holder whose job went back to waiting or dead: its token is stale.
  if f[1] ~= 'd' and f[2] == false then return {-2} end
  return {-3, f[1]}
end
if f[2] ~= ARGV[3] then return {-2} end
redis.call('DEL', jk)
redis.call('ZREM', K.lease, id)
redis.call('HINCRBY', K.ctr, 'acked', 1)
return {1}
