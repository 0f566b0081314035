#!/usr/bin/env bash
# A flamegraph of one `dq bench` scenario: starts a fresh `dq serve` (on a
# fresh data directory, or on a private redis-server without persistence),
# records one process with `perf record --call-graph dwarf` while the bench
# runs, and writes OUT.svg (and OUT.folded, the collapsed stacks).
#
#   scripts/flamegraph.sh DQ_BIN STORE PROCESS OUT TITLE [BENCH ARGS…]
#   scripts/flamegraph.sh target/release/dq embedded dq /tmp/emb "embedded lifecycle"
#   scripts/flamegraph.sh target/release/dq redis redis /tmp/rs "redis-server under dq"
#   scripts/flamegraph.sh target/release/dq redis dq /tmp/w "dq, window" drain --jobs 100000 --window 1s..10s
#
# STORE is embedded or redis; PROCESS is dq or redis (the redis-server).
# The bench defaults to `drain --jobs 100000 --window 0s..0s` (the
# lifecycle); the bench client is DQ_BENCH_BIN (default DQ_BIN). Needs perf
# (apt-get install linux-perf) and inferno (installed with cargo the first
# time). The figures in docs/performance-log.md link the SVGs made this way.
set -euo pipefail
if [ $# -lt 5 ]; then
  sed -n "2,16p" "$0" >&2
  exit 2
fi
bin=$1 store=$2 process=$3 out=$4 title=$5
shift 5
bench=("$@")
[ ${#bench[@]} -eq 0 ] && bench=(drain --jobs 100000 --window 0s..0s)
client=${DQ_BENCH_BIN:-$bin}
command -v perf >/dev/null || { echo "perf is not installed (apt-get install linux-perf)" >&2; exit 1; }
if ! command -v inferno-flamegraph >/dev/null; then
  cargo install inferno --locked
fi
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
dir=$(mktemp -d)
port=$(free_port)
cleanup() {
  [ -n "${perf_pid:-}" ] && kill -INT "$perf_pid" 2>/dev/null || true
  [ -n "${dq_pid:-}" ] && kill "$dq_pid" 2>/dev/null && wait "$dq_pid" 2>/dev/null || true
  [ -n "${redis_port:-}" ] && redis-cli -p "$redis_port" shutdown nosave >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT
case $store in
  embedded)
    "$bin" serve --listen "127.0.0.1:$port" --data-dir "$dir/data" --log-level warn >"$dir/dq.log" 2>&1 &
    dq_pid=$!
    ;;
  redis)
    redis_port=$(free_port)
    redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
      --logfile "$dir/redis.log" --daemonize yes
    sleep 0.2
    "$bin" serve --listen "127.0.0.1:$port" --redis "redis://127.0.0.1:$redis_port" --log-level warn >"$dir/dq.log" 2>&1 &
    dq_pid=$!
    ;;
  *) echo "STORE must be embedded or redis" >&2; exit 2 ;;
esac
for _ in $(seq 100); do
  curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
  sleep 0.05
done
case $process in
  dq) target=$dq_pid ;;
  redis)
    [ "$store" = redis ] || { echo "PROCESS redis needs STORE redis" >&2; exit 2; }
    target=$(redis-cli -p "$redis_port" info server | sed -n 's/^process_id:\([0-9]*\).*/\1/p')
    ;;
  *) echo "PROCESS must be dq or redis" >&2; exit 2 ;;
esac
perf record -F 999 --call-graph dwarf,32768 -o "$dir/perf.data" -p "$target" >/dev/null 2>&1 &
perf_pid=$!
sleep 0.5
"$client" bench --server "http://127.0.0.1:$port" "${bench[@]}" | grep '^{' | tail -1
kill -INT "$perf_pid"
wait "$perf_pid" || true
perf_pid=
perf script -i "$dir/perf.data" 2>/dev/null | inferno-collapse-perf >"$out.folded"
inferno-flamegraph --title "$title" --minwidth 2 --width 1000 <"$out.folded" >"$out.svg"
echo "wrote $out.svg"
