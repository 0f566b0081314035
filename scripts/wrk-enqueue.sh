#!/usr/bin/env bash
# The body of scripts/bench-http.sh, run by scripts/bench-fresh.sh against a
# fresh server at $DQ_SERVER: ROUNDS × (healthz, enqueue) with wrk, then the
# medians, ranges and ratio. Argument: the store's name (for the printout).
set -euo pipefail
store=$1
lua=$(dirname "$0")/wrk-enqueue.lua
close=()
[ -n "${WRK_CLOSE:-}" ] && close=(-H "Connection: close")
run() { # run <name> <wrk args…>: prints "<name> <req/s>", fails on non-2xx
  local name=$1 out; shift
  out=$(wrk -t "$THREADS" -c "$CONNECTIONS" -d "$DURATION" "${close[@]}" "$@")
  if grep -q "Non-2xx" <<<"$out" || grep -q "Socket errors" <<<"$out"; then
    echo "$out" >&2
    echo "$store $name: errors (above)" >&2
    exit 1
  fi
  echo "$name $(awk '/^Requests\/sec:/ {print $2}' <<<"$out")"
}
results=$(for r in $(seq "$ROUNDS"); do
  run healthz "$DQ_SERVER/healthz"
  run enqueue -s "$lua" "$DQ_SERVER/v1/topics/bench/jobs"
done)
echo "$results" | sed "s/^/$store round: /"
python3 - "$store" <<PY
import statistics, sys
rows = [l.split() for l in """$results""".splitlines()]
by = {}
for name, v in rows:
    by.setdefault(name, []).append(float(v))
h, e = by["healthz"], by["enqueue"]
med = lambda xs: statistics.median(xs)
print(f"{sys.argv[1]}: healthz {med(h):,.0f} req/s ({min(h):,.0f}–{max(h):,.0f}), "
      f"enqueue {med(e):,.0f} jobs/s ({min(e):,.0f}–{max(e):,.0f}), "
      f"ratio {med(e)/med(h):.2f} (connections $CONNECTIONS, threads $THREADS, {len(h)} rounds of $DURATION"
      + (", Connection: close" if "${WRK_CLOSE:-}" else "") + ")")
PY
