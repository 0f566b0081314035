#!/usr/bin/env bash
# Runs one `dq bench` scenario against a fresh `dq serve` on a fresh store,
# then stops both. Prints the bench's output (last line: JSON).
#
#   scripts/bench-fresh.sh embedded drain --jobs 100000 --window 1s..10s
#   scripts/bench-fresh.sh redis enqueue --jobs 200000
#
# Uses target/release/dq (cargo build --release -p dq-cli) unless DQ_BIN is set.
# The redis store gets a private redis-server (no persistence) on a free port.
set -euo pipefail
store=$1; shift
scenario=$1
bin=${DQ_BIN:-target/release/dq}
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
listen="127.0.0.1:$port"
cleanup() {
  [ -n "${dq_pid:-}" ] && kill "$dq_pid" 2>/dev/null && wait "$dq_pid" 2>/dev/null || true
  [ -n "${redis_port:-}" ] && redis-cli -p "$redis_port" shutdown nosave >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT
extra=()
case $store in
  embedded)
    "$bin" serve --listen "$listen" --data-dir "$dir/data" --log-level warn >"$dir/dq.log" 2>&1 &
    [ "$scenario" = storage ] && extra=(--data-dir "$dir/data")
    ;;
  redis)
    redis_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" --logfile "$dir/redis.log" --daemonize yes
    sleep 0.2
    "$bin" serve --listen "$listen" --redis "redis://127.0.0.1:$redis_port" --log-level warn >"$dir/dq.log" 2>&1 &
    [ "$scenario" = storage ] && extra=(--redis "redis://127.0.0.1:$redis_port")
    ;;
  *) echo "store must be embedded or redis" >&2; exit 2 ;;
esac
dq_pid=$!
python3 - "$listen" <<'PY'
import sys, time, urllib.request
for _ in range(400):
    try:
        urllib.request.urlopen(f"http://{sys.argv[1]}/readyz", timeout=1)
        sys.exit(0)
    except Exception:
        time.sleep(0.05)
sys.exit("dq serve did not become ready")
PY
"$bin" bench --server "http://$listen" "$@" "${extra[@]}"
