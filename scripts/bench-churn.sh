#!/usr/bin/env bash
# Connection churn (#54 item 3): one job per request over a new TCP
# connection each (`Connection: close`, PHP-FPM's way), REQUESTS in all
# (default 1,000,000), with `wrk` against a fresh `dq serve` per store; prints
# the rate of each 10 s slice, and dq's open file descriptors and resident
# memory before, after a warm-up, at the end and after 2 s idle. Fails if a
# request answered other than 2xx, or if dq holds more file descriptors at
# the end (idle) than after the warm-up plus a slack of 16.
#
#   scripts/bench-churn.sh                      # embedded and redis
#   REQUESTS=200000 scripts/bench-churn.sh embedded
#
# Uses target/release/dq unless DQ_BIN is set (see scripts/bench-fresh.sh);
# CONNECTIONS (32) and THREADS (2) as scripts/bench-http.sh; the server logs
# at warn unless DQ_LOG_LEVEL says otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install wrk" >&2; exit 2; }
stores=("$@")
[ ${#stores[@]} -gt 0 ] || stores=(embedded redis)
export REQUESTS=${REQUESTS:-1000000} CONNECTIONS=${CONNECTIONS:-32} THREADS=${THREADS:-2}
for store in "${stores[@]}"; do
  scripts/bench-fresh.sh "$store" exec scripts/wrk-churn.sh "$store"
done
