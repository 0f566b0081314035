-- nack: fails the current attempt of a reserved job; retried after
-- retry_in_ms (or the job's / topic's retry policy), or dead when out of
-- attempts or when buried (ARGV[8] = '1': dead at once, e.g. a permanent error).
-- KEYS: the topic's keys (see common.lua).
-- ARGV: topic, id, token, error text, retry_in_ms or '', now, random in [0,1), bury (1 | 0)
-- Returns: {1, due, attempt} retried | {2, attempt} dead | {-1} not found | {-2} token mismatch |
--   {-3, 'd'} dead
-- Side effects: see fail() in common.lua.
local id = ARGV[2]
local jk = K.job .. id
local f = redis.call('HMGET', jk, 's', 't')
if not f[1] then return {-1} end
-- A waiting job has no lease, so any token is stale; a dead one says so.
if f[1] == 'd' then return {-3, 'd'} end
if f[1] ~= 'r' or f[2] ~= ARGV[3] then return {-2} end
local due, woke, attempt = fail(K, topic_cfg(K), id, jk, tonumber(ARGV[6]), ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[7]), ARGV[8] == '1')
if woke then wake() end
if due < 0 then return {2, attempt} end
return {1, due, attempt}
