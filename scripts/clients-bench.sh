#!/usr/bin/env bash
# Jobs per second through each client package's worker (clients/*/bench)
# and the Rust Worker (crates/dq-client/examples/worker_bench.rs), each
# with a no-op handler at concurrency 16, against ONE `dq serve` on the
# embedded store, in ROUNDS rounds whose order rotates (so no worker always
# runs first or last on this noisy machine). Each run enqueues JOBS jobs due
# now to a fresh topic, then prints `jobs/s: N`. A benchmark, never a test.
#
#   cargo build --release -p dq-cli -p dq-client --bins --examples
#   scripts/clients-bench.sh            # JOBS=20000 ROUNDS=3
#
# Needs: php-cli with php-curl, go, node with clients/node built
# (npm ci && npm run build), and a Python with clients/python installed
# (PYTHON=…/bin/python; default python3).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
JOBS=${JOBS:-20000}
ROUNDS=${ROUNDS:-3}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
DQ=${DQ_BIN:-$TARGET/release/dq}
RUST_BENCH=${RUST_BENCH:-$TARGET/release/examples/worker_bench}
PYTHON=${PYTHON:-python3}
for f in "$DQ" "$RUST_BENCH"; do
  [ -x "$f" ] || { echo "missing $f: cargo build --release -p dq-cli -p dq-client --bins --examples" >&2; exit 1; }
done

work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$DQ" serve --listen "127.0.0.1:$port" --data-dir "$work/data" --config /dev/null --log-level warn &
dq_pid=$!
trap 'kill $dq_pid 2>/dev/null; wait $dq_pid 2>/dev/null; rm -rf "$work"' EXIT
export DQ_URL="http://127.0.0.1:$port" JOBS
for _ in $(seq 100); do curl -sf "$DQ_URL/readyz" >/dev/null && break; sleep 0.1; done
(cd clients/go && go build -o "$work/gobench" ./bench)

run() {
  case $1 in
    rust) "$RUST_BENCH" ;;
    go) "$work/gobench" ;;
    python-asyncio) FORM=asyncio "$PYTHON" clients/python/bench/bench.py ;;
    python-threads) FORM=threads "$PYTHON" clients/python/bench/bench.py ;;
    node) node clients/node/bench/bench.mjs ;;
    php) PROCESSES=16 php clients/php/bench/bench.php ;;
  esac
}

workers=(rust go python-asyncio python-threads node php)
declare -A got
for r in $(seq 0 $((ROUNDS - 1))); do
  for i in "${!workers[@]}"; do
    w=${workers[$(((i + r) % ${#workers[@]}))]}
    n=$(run "$w" | awk '/^jobs\/s:/ {print $2}' | tail -1)
    echo "round $((r + 1)) $w: ${n:-failed}"
    got[$w]="${got[$w]:-} ${n:-0}"
  done
done
echo
echo "| worker (concurrency 16, no-op) | median jobs/s | runs |"
echo "| --- | --- | --- |"
for w in "${workers[@]}"; do
  # shellcheck disable=SC2086
  med=$(printf '%s\n' ${got[$w]} | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  echo "| $w | $med | $(echo ${got[$w]} | tr ' ' '/') |"
done
