#!/usr/bin/env bash
# The body of scripts/bench-churn.sh, run by scripts/bench-fresh.sh against a
# fresh server at $DQ_SERVER (process $DQ_PID). Argument: the store's name.
set -euo pipefail
store=$1
lua=$(dirname "$0")/wrk-enqueue.lua
state() { # prints "<fds> fds, <rss> MB resident"
  local fds rss
  fds=$(ls "/proc/$DQ_PID/fd" | wc -l)
  rss=$(awk '/^VmRSS:/ {printf "%.1f", $2 / 1024}' "/proc/$DQ_PID/status")
  echo "$fds fds, $rss MB resident"
}
slice() { # slice <duration>: runs wrk, prints "<requests> <req/s>", fails on errors
  local out
  out=$(wrk -t "$THREADS" -c "$CONNECTIONS" -d "$1" -H "Connection: close" -s "$lua" \
    "$DQ_SERVER/v1/topics/bench/jobs")
  if grep -q "Non-2xx" <<<"$out" || grep -q "Socket errors" <<<"$out"; then
    echo "$out" >&2
    echo "$store: errors (above)" >&2
    exit 1
  fi
  echo "$(awk '/requests in/ {print $1}' <<<"$out") $(awk '/^Requests\/sec:/ {print $2}' <<<"$out")"
}
echo "$store start: $(state)"
read -r warm _ < <(slice 3s)
after_warm=$(ls "/proc/$DQ_PID/fd" | wc -l)
echo "$store after a warm-up of $warm requests: $(state)"
done=$warm
rates=()
while [ "$done" -lt "$REQUESTS" ]; do
  read -r n rate < <(slice 10s)
  done=$((done + n))
  rates+=("$rate")
  echo "$store slice: $n requests, $rate req/s (total $done)"
done
echo "$store after $done requests: $(state)"
sleep 2
idle_fds=$(ls "/proc/$DQ_PID/fd" | wc -l)
echo "$store idle 2 s later: $(state)"
python3 - "$store" "${rates[@]}" <<'PY'
import statistics, sys
store, rates = sys.argv[1], [float(r) for r in sys.argv[2:]]
print(f"{store}: new connection per request: median {statistics.median(rates):,.0f} jobs/s "
      f"({min(rates):,.0f}–{max(rates):,.0f}) over {len(rates)} slices of 10 s")
PY
if [ "$idle_fds" -gt $((after_warm + 16)) ]; then
  echo "$store: dq holds $idle_fds file descriptors idle, $after_warm after the warm-up: a leak" >&2
  exit 1
fi
