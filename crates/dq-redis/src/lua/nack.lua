-- nack: fails the current attempt of a reserved job; retried after
-- retry_in_ms (or the job's / topic's retry policy), or dead when out of
-- attempts or when the nack says dead (ARGV[8] = '1': dead at once, e.g. a
-- permanent error).
-- KEYS: the topic's keys (see common.lua).
-- ARGV: topic, id, token, error text, retry_in_ms or '', now, random in [0,1),
--   dead (1 | 0), new priority or 
-- Returns: {1, due, attempt} retried | {2, attempt} dead | {NOT_FOUND} |
--   {TOKEN_MISMATCH} | {NOT_IN_STATE, DEAD} dead already
-- Side effects: see fail() in common.lua (a job in put order retried keeps
--   the wait as its put delay, pd).
local id = ARGV[2]
local j, err = held(id, ARGV[3])
if not j then return err end
if ARGV[9] ~= nil and ARGV[9] ~= '' then j.p = tonumber(ARGV[9]) end
if ARGV[8] ~= '1' then j.rl = (j.rl or 0) + 1 end
local due, woke, attempt = fail(K, topic_cfg(K), id, j, clock_ms(ARGV[6]), ARGV[4],
  tonumber(ARGV[5]), tonumber(ARGV[7]), ARGV[8] == '1', true)
if woke then wake() end
if due < 0 then return {2, attempt} end
return {1, due, attempt}
