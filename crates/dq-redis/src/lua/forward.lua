-- forward: acks reserved jobs and writes each into a stream or list on this
-- same server, in one step (a forwarding topic whose target is the store's
-- own Redis): nothing acked goes unwritten, nothing is written twice.
-- KEYS: the topic's keys (see common.lua). The target keys are not among
-- them: dq runs this on one server only, never on a Cluster.
-- ARGV: topic, now, then per job: id, token, kind (x XADD | l LPUSH | r RPUSH),
--   target key, then for x: maxlen or '', number of field-value pairs, the
--   pairs; for l and r: the element.
-- Returns: per job a status: {1} written and acked | {NOT_FOUND} |
--   {TOKEN_MISMATCH} | {NOT_IN_STATE, DEAD} dead | {TARGET_REFUSED, error}
--   the target refused the write (the job stays reserved, not acked).
-- Side effects: per job written as ack.lua's, plus the write.
local out = {}
local freed = false
local now = clock_ms(ARGV[2])
local i = 3
while i <= #ARGV do
  local id, token, kind, key = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  i = i + 4
  local cmd, args
  if kind == 'x' then
    local maxlen, n = ARGV[i], tonumber(ARGV[i + 1])
    cmd, args = 'XADD', { key }
    if maxlen ~= '' then
      args[#args + 1] = 'MAXLEN'
      args[#args + 1] = '~'
      args[#args + 1] = maxlen
    end
    args[#args + 1] = '*'
    for k = 0, 2 * n - 1 do args[#args + 1] = ARGV[i + 2 + k] end
    i = i + 2 + 2 * n
  else
    cmd, args = (kind == 'l') and 'LPUSH' or 'RPUSH', { key, ARGV[i] }
    i = i + 1
  end
  local j, err = held(id, token)
  if not j then
    out[#out + 1] = err
  else
    local r = redis.pcall(cmd, unpack(args))
    if type(r) == 'table' and r.err then
      out[#out + 1] = { TARGET_REFUSED, r.err }
    else
      forget(id, j)
      remember(K, id, j, now)
      redis.call('ZREM', K.lease, id)
      if j.g and key_unlease(j.g) then freed = true end
      redis.call('HINCRBY', K.ctr, 'acked', 1)
      out[#out + 1] = { 1 }
    end
  end
end
if freed then wake() end
return out
