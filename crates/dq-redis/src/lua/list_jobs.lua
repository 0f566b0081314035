-- list_jobs: one page of a topic's jobs, for an export (read-only).
-- The order is the job table's own (HSCAN over K.jobs): a job keeps its
-- place whatever state it moves to (a state change rewrites its record in
-- place), so a listing is stable under concurrent writes; a job may come
-- twice only if Redis shrinks the table meanwhile (most jobs removed).
-- KEYS: the topic's keys (see common.lua).
-- ARGV: topic, cursor (HSCAN's; '0' to start), count (jobs looked at, about),
--   state letter (s | y | r | d) or '' for every state.
-- Returns: the next cursor ('0': done), then 23 per job: the 19 of get.lua
--   (id, state, due, priority, attempts, created, kind, body, max_attempts
--   and lease_ms in effect, lease deadline or -1, died-at or -1, has-error,
--   error or '', leases expired, given back, times dead, times replayed,
--   key or ''),
--   then the job's own overrides: max_attempts or -1, lease_ms or -1,
--   retry (encoded) or '', dedup window ms or -1.
-- Side effects: none.
local res = redis.call('HSCAN', K.jobs, ARGV[2], 'COUNT', tonumber(ARGV[3]))
local want = ARGV[4]
local cfg = topic_cfg(K)
local out = {res[1]}
local kv = res[2]
for i = 1, #kv, 2 do
  local id = kv[i]
  local d, p, q, a, s, c, k, b, m, L, r, e, t, u, x, w, to, rl, bu, ki, dd, g = cmsgpack.unpack(kv[i + 1])
  if want == '' or s == want then
    local n = #out
    out[n + 1] = id
    out[n + 2] = s
    out[n + 3] = d
    out[n + 4] = p
    out[n + 5] = a or 0
    out[n + 6] = c or 0
    out[n + 7] = k
    out[n + 8] = b
    out[n + 9] = m or cfg.max_attempts
    out[n + 10] = L or cfg.lease_ms
    out[n + 11] = u or -1
    out[n + 12] = x or -1
    out[n + 13] = e and 1 or 0
    out[n + 14] = e or ''
    out[n + 15] = to or 0
    out[n + 16] = rl or 0
    out[n + 17] = bu or 0
    out[n + 18] = ki or 0
    out[n + 19] = g or ''
    out[n + 20] = m or -1
    out[n + 21] = L or -1
    out[n + 22] = r or ''
    out[n + 23] = dd or -1
  end
end
return out
