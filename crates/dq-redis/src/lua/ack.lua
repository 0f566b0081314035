-- ack: completes a reserved job; its record (and body) is deleted.
-- KEYS: the topic's keys (see common.lua).
-- ARGV: topic, id, token, now
-- Returns: {1} | {NOT_FOUND} | {TOKEN_MISMATCH} | {NOT_IN_STATE, DEAD} dead
--   (the refusal codes: codes.rs)
-- Side effects: HDEL job record and lease token, ZREM lease, ctr.acked + 1, the id's dedup
--   window (if it has one) from now; a keyed job's lease count (a key
--   held at its key_concurrency rejoins the ring, with a PUBLISH).
local id = ARGV[2]
local j, err = held(id, ARGV[3])
if not j then return err end
forget(id, j)
remember(K, id, j, clock_ms(ARGV[4]))
redis.call('ZREM', K.lease, id)
if j.g and key_unlease(j.g) then wake() end
redis.call('HINCRBY', K.ctr, 'acked', 1)
return {1}
