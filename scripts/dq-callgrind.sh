#!/usr/bin/env bash
# dq's instructions per job, thread by thread, for one `dq bench` scenario on
# the embedded store, counted by valgrind's callgrind: a fresh `dq serve`
# (fresh data directory) runs under callgrind, the bench runs against it,
# dq is stopped, and each thread's instructions are divided by the jobs.
# Instruction counts move by about 1 % between runs of one build, where
# wall-clock and CPU time on this 2-core machine move by a third: compare
# two builds with this when a change is a few per cent. (This VM exposes no
# hardware counters, so `perf stat -e instructions` cannot do it.)
#
#   scripts/dq-callgrind.sh DQ_BIN [OUT_DIR] [BENCH ARGS…]
#   scripts/dq-callgrind.sh target/release/dq /tmp/cg
#   DQ_BENCH_BIN=/tmp/dq-new scripts/dq-callgrind.sh /tmp/dq-base /tmp/cg-base drain --jobs 20000 --window 0s..0s
#
# The bench defaults to `drain --jobs 20000 --window 0s..0s` (the lifecycle;
# dq runs ~50 times slower under callgrind: ~30 s). The bench client is
# DQ_BENCH_BIN (default DQ_BIN): use one client for both builds. OUT_DIR
# (default /tmp/dq-callgrind) keeps callgrind's file per thread
# (cg.out-NN): `callgrind_annotate --inclusive=no OUT_DIR/cg.out-05` shows
# where that thread's instructions go. Threads are named by what runs in
# them: `main` (start-up), `writer` (the embedded store's one writer),
# `runtime` (the async runtime's workers: HTTP, JSON, the dispatcher),
# `other`. Needs valgrind (installed with apt-get the first time, as root).
set -euo pipefail
if [ $# -lt 1 ]; then
  sed -n "2,23p" "$0" >&2
  exit 2
fi
bin=$1
out=${2:-/tmp/dq-callgrind}
shift $(($# >= 2 ? 2 : 1))
bench=("$@")
[ ${#bench[@]} -eq 0 ] && bench=(drain --jobs 20000 --window 0s..0s)
client=${DQ_BENCH_BIN:-$bin}
if ! command -v valgrind >/dev/null; then
  apt-get update >/dev/null && apt-get install -y valgrind >/dev/null
fi
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# OUT_DIR is emptied first: only a new directory or one this script wrote.
if [ -e "$out" ] && [ -n "$(ls -A "$out")" ] && [ ! -e "$out/dq.log" ]; then
  echo "$out is not empty and not one of this script's directories" >&2
  exit 2
fi
rm -rf "$out"
mkdir -p "$out"
port=$(free_port)
valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$out/cg.out" \
  "$bin" serve --listen "127.0.0.1:$port" --data-dir "$out/data" --log-level warn \
  >"$out/dq.log" 2>&1 &
dq_pid=$!
trap 'kill "$dq_pid" 2>/dev/null || true' EXIT
for _ in $(seq 600); do
  curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done
line=$("$client" bench --server "http://127.0.0.1:$port" "${bench[@]}" | grep '^{' | tail -1)
kill -TERM "$dq_pid"
wait "$dq_pid" 2>/dev/null || true
trap - EXIT
rm -rf "$out/data"
python3 - "$out" "$line" <<'EOF'
import glob, json, os, sys
out, line = sys.argv[1], json.loads(sys.argv[2])
jobs = line["jobs"]
print(f"jobs {jobs}  lost {line.get('lost')}  duplicated {line.get('duplicated')}  early {line.get('early')}")
rows, total = [], 0
for f in sorted(glob.glob(os.path.join(out, "cg.out-*"))):
    text = open(f, errors="replace").read()
    ir = next((int(l.split()[1]) for l in text.splitlines() if l.startswith(("summary:", "totals:"))), 0)
    if f.endswith("cg.out-01"):
        name = "main"
    elif "dq_embedded::writer::run" in text:
        name = "writer"
    elif "tokio::runtime::scheduler::multi_thread::worker" in text:
        name = "runtime"
    else:
        name = "other"
    total += ir
    rows.append((os.path.basename(f), name, ir))
for f, name, ir in rows:
    if ir / jobs >= 100:
        print(f"{f:10} {name:8} {ir / jobs:10,.0f} instructions/job")
print(f"{'all':10} {'':8} {total / jobs:10,.0f} instructions/job")
EOF
