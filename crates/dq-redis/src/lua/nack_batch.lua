-- nack_batch: fails the current attempts of many reserved jobs of one topic
-- in one call, each exactly as nack.lua does, in order (a duplicate id
-- answers {TOKEN_MISMATCH} after its first nack: the job waits;
-- {NOT_IN_STATE, DEAD} if it went
-- dead). A refused item changes nothing.
-- KEYS: the topic's keys (see common.lua).
-- ARGV: topic, now, random seed in [0,1), then per job: id, token, error
--   text, retry_in_ms or '', dead (1 | 0), new priority or ''
--   (at most MAX_BATCH jobs). Job i's jitter is rand_at(seed, i).
-- Returns: per job, in order, nack.lua's reply: {1, due, attempt} retried |
--   {2, attempt} dead | {NOT_FOUND} | {TOKEN_MISMATCH} |
--   {NOT_IN_STATE, DEAD} dead already
-- Side effects: per job nacked, fail()'s in common.lua; one PUBLISH when
--   any of them asks for a wake-up.
local n = (#ARGV - 3) / 6
if n > MAX_BATCH then return redis.error_reply('ERR nack_batch: more than MAX_BATCH jobs') end
local out = {}
local now = clock_ms(ARGV[2])
local seed = tonumber(ARGV[3])
local cfg = nil
local woke = false
local i = 0
for a = 4, #ARGV, 6 do
  i = i + 1
  local id = ARGV[a]
  local j, err = held(id, ARGV[a + 1])
  if not j then
    out[#out + 1] = err
  else
    local bury = ARGV[a + 4] == '1'
    if ARGV[a + 5] ~= '' then j.p = tonumber(ARGV[a + 5]) end
    if not bury then j.rl = (j.rl or 0) + 1 end
    cfg = cfg or topic_cfg(K)
    local due, w, attempt = fail(K, cfg, id, j, now, ARGV[a + 2],
      tonumber(ARGV[a + 3]), rand_at(seed, i), bury, true)
    if w then woke = true end
    if due < 0 then out[#out + 1] = {2, attempt} else out[#out + 1] = {1, due, attempt} end
  end
end
if woke then wake() end
return out
