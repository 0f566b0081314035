#!/usr/bin/env bash
# CPU seconds per thread of a fresh `dq serve` on the embedded store over one
# `dq bench` run, and the bench client's own: which thread bounds a scenario.
# dq's threads are summed by name (`dq-embedded-wri`: the store's one
# writer; `tokio-rt-worker`: the async runtime's workers, HTTP and JSON),
# from utime + stime in /proc/PID/task/*/stat before and after the bench;
# `(all threads)` is the process's total, threads that ended included.
#
#   scripts/dq-thread-cpu.sh DQ_BIN [BENCH ARGS…]
#   scripts/dq-thread-cpu.sh target/release/dq
#   DQ_BENCH_BIN=/tmp/dq-new scripts/dq-thread-cpu.sh /tmp/dq-base drain --jobs 100000 --window 0s..0s
#
# The bench defaults to `drain --jobs 100000 --window 0s..0s` (the
# lifecycle); its client is DQ_BENCH_BIN (default DQ_BIN).
set -euo pipefail
if [ $# -lt 1 ]; then
  sed -n "2,14p" "$0" >&2
  exit 2
fi
bin=$1
shift
bench=("$@")
[ ${#bench[@]} -eq 0 ] && bench=(drain --jobs 100000 --window 0s..0s)
client=${DQ_BENCH_BIN:-$bin}
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$bin" serve --listen "127.0.0.1:$port" --data-dir "$dir/data" --log-level warn >"$dir/dq.log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
for _ in $(seq 100); do
  curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done
if ! curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; then
  echo "dq serve did not become ready in 10 s:" >&2
  cat "$dir/dq.log" >&2
  exit 1
fi
ticks=$(getconf CLK_TCK)
# "name ticks" per thread name, summed.
snapshot() {
  for t in /proc/"$pid"/task/*; do
    # comm may hold spaces: the name is what stands between the parentheses.
    # A thread that ended since the glob has no stat left: skipped.
    { sed -E 's/^[0-9]+ \((.*)\) [A-Za-z] (.*)$/\1\t\2/' "$t/stat" 2>/dev/null || true; } |
      awk -F'\t' '{split($2, f, " "); printf "%s\t%d\n", $1, f[11] + f[12]}'
  done | awk -F'\t' '{a[$1] += $2} END {for (k in a) printf "%s\t%d\n", k, a[k]}' | sort
  # The whole process, threads that ended included: the cross-check.
  sed -E 's/^[0-9]+ \((.*)\) [A-Za-z] (.*)$/(all threads)\t\2/' "/proc/$pid/stat" |
    awk -F'\t' '{split($2, f, " "); printf "%s\t%d\n", $1, f[11] + f[12]}'
}
snapshot >"$dir/before"
line=$(/usr/bin/time -f "client %U %S" -o "$dir/client" "$client" bench \
  --server "http://127.0.0.1:$port" "${bench[@]}" | grep '^{' | tail -1)
snapshot >"$dir/after"
python3 - "$dir" "$ticks" "$line" <<'EOF'
import json, sys
d, ticks, line = sys.argv[1], int(sys.argv[2]), sys.argv[3]
read = lambda f: {k: int(v) for k, v in (l.rstrip("\n").split("\t") for l in open(f"{d}/{f}"))}
before, after = read("before"), read("after")
r = json.loads(line)
print(f"jobs/s {r.get('jobs_per_s')}  lost {r.get('lost')}  duplicated {r.get('duplicated')}  early {r.get('early')}")
for name in sorted(after):
    cpu = (after[name] - before.get(name, 0)) / ticks
    if cpu > 0:
        print(f"dq {name:<18} {cpu:6.2f} s")
_, user, sys_ = open(f"{d}/client").read().split()
print(f"bench client          {float(user) + float(sys_):6.2f} s")
EOF
