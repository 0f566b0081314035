-- The request of scripts/wrk-enqueue.sh and scripts/wrk-churn.sh: one job
-- per request, delay 1 h, no id (a new job each time).
wrk.method = "POST"
wrk.body = '{"body":{"order":42},"delay_ms":3600000}'
wrk.headers["Content-Type"] = "application/json"
