-- ack_batch: completes many reserved jobs of one topic in one call, each
-- exactly as ack.lua does, in order (a duplicate id answers NOT_FOUND after its
-- first ack). A refused item changes nothing.
-- KEYS: the topic's keys (see common.lua).
-- ARGV: topic, now, then per job: id, token (at most MAX_BATCH jobs).
-- Returns: per job a status, in order, as a plain integer (a table per job
--   cost Redis ~2,500 instructions each to reply): 1 acked | NOT_FOUND |
--   TOKEN_MISMATCH | NOT_IN_STATE (dead)
-- Side effects: per job acked, as ack.lua's: HDEL job record and lease
--   token, ZREM lease, the id's dedup window (if it has one) from now;
--   ctr.acked + the number acked, once; keyed jobs' lease counts (a key freed from held: one
--   PUBLISH).
local n = (#ARGV - 2) / 2
if n > MAX_BATCH then return redis.error_reply('ERR ack_batch: more than MAX_BATCH jobs') end
local out = {}
local now = clock_ms(ARGV[2])
local ids = {}
for i = 3, #ARGV, 2 do ids[#ids + 1] = ARGV[i] end
-- Every lease token read with one HMGET; a record only for the acks that
-- need it (a token ending in TOKEN_RECORD: a dedup window, a flow-control
-- key) and for refusals (to say why); the acked ones deleted with one HDEL
-- of records, one of tokens and one ZREM. An id acked earlier in this batch
-- is gone for the rest.
local toks = redis.call('HMGET', K.tokens, unpack(ids))
local gone = {}
local done, tokens, need = {}, {}, {}
local freed = false
-- Job `id` (record `j`, or nil when it is not read) acked.
local function acked(id, j)
  gone[id] = true
  done[#done + 1] = id
  if j then
    remember(K, id, j, now)
    if j.g and key_unlease(j.g) then freed = true end
  end
end
for i, id in ipairs(ids) do
  local token = ARGV[2 * i + 2]
  local v = toks[i]
  if gone[id] then
    out[i] = NOT_FOUND
  elseif v then
    if v ~= token then
      out[i] = TOKEN_MISMATCH
    else
      tokens[#tokens + 1] = id
      if string.sub(v, -1) == TOKEN_RECORD then need[#need + 1] = id end
      acked(id, nil)
      out[i] = 1
    end
  else
    -- Not reserved (why, from its record), or a lease layout 1 wrote.
    local j, err = held(id, token)
    if not j then
      out[i] = err[1]
    else
      acked(id, j)
      out[i] = 1
    end
  end
end
if #need > 0 then
  local raws = redis.call('HMGET', K.jobs, unpack(need))
  for i, id in ipairs(need) do
    if raws[i] then
      local _, dd, g
      _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, dd, g = cmsgpack.unpack(raws[i])
      remember(K, id, {dd = dd}, now)
      if g and key_unlease(g) then freed = true end
    end
  end
end
if #done > 0 then
  redis.call('HDEL', K.jobs, unpack(done))
  redis.call('ZREM', K.lease, unpack(done))
  redis.call('HINCRBY', K.ctr, 'acked', #done)
end
if #tokens > 0 then tokens_drop(unpack(tokens)) end
if freed then wake() end
return out
