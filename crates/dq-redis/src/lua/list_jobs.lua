-- list_jobs: one page of a topic's jobs, for an export (read-only).
-- The order is the job table's own (HSCAN over K.jobs): a job keeps its
-- place whatever state it moves to (a state change rewrites its record in
-- place), so a listing is stable under concurrent writes; a job may come
-- twice only if Redis shrinks the table meanwhile (most jobs removed).
-- KEYS: the topic's keys (see common.lua).
-- ARGV: topic, cursor (HSCAN's; '0' to start), count (jobs looked at, about),
--   state letter (s | y | r | d) or '' for every state.
-- Returns: the next cursor ('0': done), then 27 per job: the 23 of get.lua
--   (id, state, due, priority, attempts, created, kind, body, max_attempts
--   and lease_ms in effect, lease deadline or NONE, died-at or NONE, has-error,
--   error or '', leases expired, given back, times dead, times replayed,
--   key or '', failed attempts as JSON or '', hand-outs, put delay or NONE,
--   trace context or ''),
--   then the job's own overrides: max_attempts or NONE, lease_ms or NONE,
--   retry (encoded) or '', dedup window ms or NONE.
-- Side effects: none.
local res = redis.call('HSCAN', K.jobs, ARGV[2], 'COUNT', tonumber(ARGV[3]))
local want = ARGV[4]
local cfg = topic_cfg(K)
local out = {res[1]}
local kv = res[2]
for i = 1, #kv, 2 do
  local id = kv[i]
  -- (A reserved job is shown as such: see "Leases" in common.lua.)
  local j = lease_view(id, decode(kv[i + 1]))
  if want == '' or j.s == want then
    job_info(out, id, j, cfg)
    local n = #out
    out[n + 1] = j.m or NONE
    out[n + 2] = j.L or NONE
    out[n + 3] = j.r or ''
    out[n + 4] = j.dd or NONE
  end
end
return out
