#!/usr/bin/env bash
# One job per request, as most applications send them (#54): `wrk` against a
# fresh `dq serve` on each store, alternating `GET /healthz` (the HTTP
# ceiling of this box) and `POST /v1/topics/bench/jobs` (one job, delay 1 h,
# no id: a new job each time), ROUNDS rounds of DURATION each, the same
# connections; prints each round, then per store the medians, the ranges and
# the ratio enqueue / healthz. Fails if any request answered other than 2xx.
#
#   scripts/bench-http.sh                      # embedded and redis
#   scripts/bench-http.sh embedded             # one store
#   CONNECTIONS=32 THREADS=2 DURATION=10s ROUNDS=3 scripts/bench-http.sh
#   WRK_CLOSE=1 scripts/bench-http.sh          # a new connection per request
#
# Uses target/release/dq unless DQ_BIN is set (see scripts/bench-fresh.sh);
# the server logs at `dq serve`'s default level, info (one access-log line
# per request), unless DQ_LOG_LEVEL says otherwise (e.g. warn).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install wrk" >&2; exit 2; }
stores=("$@")
[ ${#stores[@]} -gt 0 ] || stores=(embedded redis)
export DQ_LOG_LEVEL=${DQ_LOG_LEVEL:-info}
export CONNECTIONS=${CONNECTIONS:-32} THREADS=${THREADS:-2} DURATION=${DURATION:-10s} ROUNDS=${ROUNDS:-3}
for store in "${stores[@]}"; do
  scripts/bench-fresh.sh "$store" exec scripts/wrk-enqueue.sh "$store"
done
