#!/usr/bin/env bash
# Runs one `dq bench` scenario against two `dq` binaries alternately, N times
# each (base, new, base, new, …), every run on a fresh store through
# scripts/bench-fresh.sh, and prints each run's figures, then the medians
# (min–max in brackets) and the ratio new/base. The machine's speed drifts
# over minutes, so only figures of the same alternating run are compared.
#
#   scripts/bench-compare.sh BASE_BIN NEW_BIN N STORE SCENARIO [ARGS…]
#   scripts/bench-compare.sh /tmp/base/dq target/release/dq 3 redis drain --jobs 50000 --window 0s..0s
#
# Figures read from the last JSON line of each run: jobs_per_s (push:
# deliveries_per_s), the p99 and max of `lateness` (ms) and `cpu_us_per_job` (dq's
# and its Redis server's) when the scenario reports them, and the embedded
# writer's busy and commit shares and calls per commit (`writer`, drain).
# Each run's line ends with what went wrong in it (lost, duplicated, early,
# refused acks, failed enqueues), or "ok".
set -euo pipefail
if [ $# -lt 5 ]; then
  sed -n "2,16p" "$0" >&2
  exit 2
fi
base=$1 new=$2 n=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for i in $(seq 1 "$n"); do
  for which in base new; do
    bin=$base
    [ "$which" = new ] && bin=$new
    line=$(DQ_BIN=$bin "$here/bench-fresh.sh" "$@" | grep '^{' | tail -1)
    echo "$which $line" >>"$results"
    python3 - "$which" "$i" "$line" <<'EOF'
import json, sys
which, i, line = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
late = line.get("lateness", {}) or {}
rate = line.get("jobs_per_s", line.get("deliveries_per_s"))
cpu = line.get("cpu_us_per_job") or {}
# What went wrong in the run, if anything: each correctness figure the
# scenario reports that is not 0.
wrong = [f"{k} {line[k]}" for k in ("lost", "duplicated", "early", "ack_errors", "enqueue_errors")
         if isinstance(line.get(k), (int, float)) and line[k]]
print(f"run {i} {which:4}: jobs_per_s {rate}  lateness p99 {late.get('p99_ms', '-')} ms max {late.get('max_ms', '-')} ms"
      f"  CPU us/job dq {cpu.get('dq', '-')} store {cpu.get('store', '-')}"
      f"  {'WRONG: ' + ', '.join(wrong) if wrong else 'ok (nothing lost, duplicated, early or refused)'}")
EOF
  done
done
python3 - "$results" <<'EOF'
import json, statistics, sys
runs = {"base": [], "new": []}
for l in open(sys.argv[1]):
    which, rest = l.split(" ", 1)
    runs[which].append(json.loads(rest))
def figures(which, f):
    xs = [f(r) for r in runs[which]]
    return sorted(x for x in xs if isinstance(x, (int, float)))
def show(xs, d):
    if not xs:
        return "-"
    return f"{statistics.median(xs):.{d}f} ({xs[0]:.{d}f}–{xs[-1]:.{d}f})"
for name, f in [("jobs_per_s", lambda r: r.get("jobs_per_s", r.get("deliveries_per_s"))),
                ("lateness p99 ms", lambda r: (r.get("lateness") or {}).get("p99_ms")),
                ("lateness max ms", lambda r: (r.get("lateness") or {}).get("max_ms")),
                ("dq CPU us/job", lambda r: (r.get("cpu_us_per_job") or {}).get("dq")),
                ("store CPU us/job", lambda r: (r.get("cpu_us_per_job") or {}).get("store")),
                ("writer busy share", lambda r: (r.get("writer") or {}).get("busy_share")),
                ("writer commit share", lambda r: (r.get("writer") or {}).get("commit_share")),
                ("writer calls/commit", lambda r: (r.get("writer") or {}).get("calls_per_commit"))]:
    b, n = figures("base", f), figures("new", f)
    if not b and not n:
        continue
    d = 3 if max(b + n) < 2 else 1
    ratio = "-"
    if b and n and statistics.median(b):
        ratio = f"{statistics.median(n) / statistics.median(b):.3f}"
    # Medians with min–max; a figure only one build reports (the writer's,
    # against a build without its counters) shows for that build alone.
    print(f"median {name}: base {show(b, d)}  new {show(n, d)}  new/base {ratio}")
EOF
