#!/usr/bin/env bash
# Redis instructions per job of one `dq bench` scenario, counted by
# valgrind's callgrind: a private redis-server runs under callgrind, a fresh
# `dq serve` on it, the bench, then the instructions spent in scripts
# (evalGenericCommand, inclusive) divided by the jobs. Instruction counts
# barely move between runs, where wall-clock and CPU time on this 2-core
# machine move by a third: compare two builds with this when a change is
# a few per cent.
#
#   scripts/redis-callgrind.sh DQ_BIN [OUT] [BENCH ARGS…]
#   scripts/redis-callgrind.sh target/release/dq /tmp/cg.out
#   REDIS=/tmp/redis-src/src/redis-server scripts/redis-callgrind.sh /tmp/dq /tmp/cg.out drain --jobs 20000 --window 0s..0s
#
# The bench defaults to `drain --jobs 20000 --window 0s..0s` (the lifecycle;
# Redis runs ~50 times slower under callgrind, ~20 s). OUT (default
# /tmp/redis-callgrind.out) is callgrind's file: `callgrind_annotate OUT`
# shows where the instructions go, `--inclusive=yes` with callees. Names
# inside redis-server need a build with symbols: REDIS= a redis-server built
# from source (`make` in a checkout of the same version); Debian's is
# stripped (the totals are right, the names are not). Needs valgrind
# (installed with apt-get the first time, as root).
set -euo pipefail
if [ $# -lt 1 ]; then
  sed -n "2,21p" "$0" >&2
  exit 2
fi
bin=$1
out=${2:-/tmp/redis-callgrind.out}
shift $(( $# >= 2 ? 2 : 1 ))
bench=("$@")
[ ${#bench[@]} -eq 0 ] && bench=(drain --jobs 20000 --window 0s..0s)
redis=${REDIS:-$(command -v redis-server)}
if ! command -v valgrind >/dev/null; then
  apt-get install -y valgrind >/dev/null
fi
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
dir=$(mktemp -d)
redis_port=$(free_port)
port=$(free_port)
cleanup() {
  [ -n "${dq_pid:-}" ] && kill "$dq_pid" 2>/dev/null && wait "$dq_pid" 2>/dev/null || true
  redis-cli -p "$redis_port" shutdown nosave >/dev/null 2>&1 || true
  [ -n "${vg_pid:-}" ] && wait "$vg_pid" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
valgrind --tool=callgrind --callgrind-out-file="$out" "$redis" --port "$redis_port" --bind 127.0.0.1 \
  --save "" --appendonly no --dir "$dir" --logfile "$dir/redis.log" >"$dir/valgrind.log" 2>&1 &
vg_pid=$!
for _ in $(seq 1 200); do
  redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
  sleep 0.1
done
"$bin" serve --listen "127.0.0.1:$port" --redis "redis://127.0.0.1:$redis_port" --redis-timeout 30s \
  --log-level warn >"$dir/dq.log" 2>&1 &
dq_pid=$!
for _ in $(seq 1 200); do
  curl -sf "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done
line=$("$bin" bench --server "http://127.0.0.1:$port" "${bench[@]}" | grep '^{' | tail -1)
kill "$dq_pid" && wait "$dq_pid" 2>/dev/null || true
dq_pid=
redis-cli -p "$redis_port" shutdown nosave >/dev/null 2>&1 || true
wait "$vg_pid" 2>/dev/null || true
vg_pid=
python3 - "$line" "$out" <<'EOF'
import json, re, subprocess, sys
bench = json.loads(sys.argv[1])
jobs = bench.get("jobs") or 1
ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", sys.argv[2]],
                     capture_output=True, text=True).stdout
total = scripts = None
for line in ann.splitlines():
    m = re.match(r"\s*([\d,]+) .*PROGRAM TOTALS", line)
    if m and total is None:
        total = int(m.group(1).replace(",", ""))
    m = re.match(r"\s*([\d,]+) .*:evalGenericCommand ", line)
    if m and scripts is None:
        scripts = int(m.group(1).replace(",", ""))
print(f"jobs {jobs}  lost {bench.get('lost')}  duplicated {bench.get('duplicated')}")
print(f"redis-server instructions: total {total:,}  in scripts {scripts:,}  per job in scripts {scripts / jobs:,.0f}")
EOF
