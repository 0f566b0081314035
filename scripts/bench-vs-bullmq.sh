#!/usr/bin/env bash
# BullMQ beside dq in one run: the same drain (N jobs due uniformly in a
# window, consumers started with the producers, 64-byte bodies, finished jobs
# removed), alternately BullMQ (its own Queue and Worker, Node) and dq
# (`dq bench drain` on the Redis store), each on a fresh private redis-server
# without persistence. Prints each run, then the medians and dq/BullMQ.
#
#   scripts/bench-vs-bullmq.sh N [WINDOW] [JOBS] [CONCURRENCY]
#   scripts/bench-vs-bullmq.sh 3                      # 100k jobs all due at once (lifecycle capacity)
#   scripts/bench-vs-bullmq.sh 3 1s..10s              # 100k jobs due over 1-10 s (lateness)
#
# BullMQ (BULLMQ_VERSION, default 6.7.0) and ioredis are installed with npm into
# BULLMQ_DIR (default ~/.cache/dq-bullmq) the first time. dq is DQ_BIN
# (default target/release/dq). CONCURRENCY (default 50) is the BullMQ
# worker's; dq's bench uses its defaults (8 consumers reserving up to 100).
set -euo pipefail
n=${1:?N runs}
window=${2:-0s..0s}
jobs=${3:-100000}
concurrency=${4:-50}
here=$(cd "$(dirname "$0")" && pwd)
bullmq_dir=${BULLMQ_DIR:-$HOME/.cache/dq-bullmq}
version=${BULLMQ_VERSION:-6.7.0}
ms() { # 1s -> 1000, 250ms -> 250
  python3 -c 'import re,sys; m=re.fullmatch(r"(\d+)(ms|s)",sys.argv[1]); print(int(m[1])*(1 if m[2]=="ms" else 1000))' "$1"
}
from=$(ms "${window%%..*}") to=$(ms "${window##*..}")
if [ "$(node -e "try{console.log(require('$bullmq_dir/node_modules/bullmq/package.json').version)}catch{}" 2>/dev/null)" != "$version" ]; then
  mkdir -p "$bullmq_dir"
  (cd "$bullmq_dir" && { [ -f package.json ] || npm init -y >/dev/null; } && npm install -s "bullmq@$version" ioredis >/dev/null)
fi
cp "$here/bullmq-bench.mjs" "$bullmq_dir/bullmq-bench.mjs"
results=$(mktemp)
dir=$(mktemp -d)
cleanup() {
  [ -n "${rport:-}" ] && redis-cli -p "$rport" shutdown nosave >/dev/null 2>&1 || true
  rm -rf "$dir" "$results"
}
trap cleanup EXIT
for i in $(seq 1 "$n"); do
  rport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
    --logfile "$dir/redis.log" --pidfile "$dir/redis.pid" --daemonize yes
  for _ in $(seq 50); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.1; done
  line=$(cd "$bullmq_dir" && node bullmq-bench.mjs "$rport" "$jobs" "$from" "$to" "$concurrency" "$(cat "$dir/redis.pid")")
  redis-cli -p "$rport" shutdown nosave >/dev/null 2>&1 || true
  rport=
  echo "bullmq $line" >>"$results"
  line2=$("$here/bench-fresh.sh" redis drain --jobs "$jobs" --window "$window" | grep '^{' | tail -1)
  echo "dq $line2" >>"$results"
  python3 - "$i" "$line" "$line2" <<'EOF'
import json, sys
i = sys.argv[1]
for who, l in (("bullmq", sys.argv[2]), ("dq", sys.argv[3])):
    r = json.loads(l)
    late, cpu = r.get("lateness") or {}, r.get("cpu_us_per_job") or {}
    print(f"run {i} {who:6}: jobs_per_s {r['jobs_per_s']}  lateness p99 {late.get('p99_ms')} ms max {late.get('max_ms')} ms"
          f"  store CPU {cpu.get('store')} us/job  lost {r.get('lost')}")
EOF
done
python3 - "$results" <<'EOF'
import json, statistics, sys
runs = {"bullmq": [], "dq": []}
for l in open(sys.argv[1]):
    who, rest = l.split(" ", 1)
    runs[who].append(json.loads(rest))
def fig(who, f):
    xs = [x for x in (f(r) for r in runs[who]) if isinstance(x, (int, float))]
    return (statistics.median(xs), min(xs), max(xs)) if xs else None
for name, f in [("jobs_per_s", lambda r: r["jobs_per_s"]),
                ("lateness p99 ms", lambda r: (r.get("lateness") or {}).get("p99_ms")),
                ("store CPU us/job", lambda r: (r.get("cpu_us_per_job") or {}).get("store"))]:
    b, d = fig("bullmq", f), fig("dq", f)
    if not b or not d:
        continue
    ratio = f"{d[0] / b[0]:.2f}" if b[0] else "-"
    print(f"median {name}: bullmq {b[0]:.1f} ({b[1]:.1f}-{b[2]:.1f})  dq {d[0]:.1f} ({d[1]:.1f}-{d[2]:.1f})  dq/bullmq {ratio}")
EOF
