#!/usr/bin/env bash
# Runs one `dq bench` scenario against a fresh `dq serve` on a fresh store,
# then stops both. Prints the bench's output (last line: JSON).
#
#   scripts/bench-fresh.sh embedded drain --jobs 100000 --window 1s..10s
#   scripts/bench-fresh.sh redis enqueue --jobs 200000
#   scripts/bench-fresh.sh shards drain --jobs 100000 --window 0s..0s --partitions 12
#   scripts/bench-fresh.sh cluster drain --jobs 100000 --window 0s..0s --partitions 12
#   scripts/bench-fresh.sh postgres drain --jobs 20000 --window 1s..10s --consumers 8
#
#   scripts/bench-fresh.sh redis forward --target self --rate 0 --jobs 50000
#
#   scripts/bench-fresh.sh embedded exec scripts/wrk-enqueue.sh
#     (`exec CMD ARGS…` runs CMD instead of `dq bench`, with DQ_SERVER set
#     to the fresh server's address and DQ_PID to its process: scripts/bench-http.sh
#     and scripts/bench-churn.sh use them)
#
# Uses target/release/dq (cargo build --release -p dq-cli) unless DQ_BIN is set;
# the server logs at DQ_LOG_LEVEL (default warn: no access log);
# DQ_BENCH_BIN, when set, is the binary that runs the bench itself (a newer
# bench, e.g. `topics`, against an older server).
# `--target self` (forward) names the store's own Redis (the redis store);
# `--target other` a second private redis-server.
# The redis store gets a private redis-server (no persistence) on a free port;
# shards: three of them; cluster: a 3-master Redis Cluster of them;
# postgres: a private PostgreSQL (Debian's, /usr/lib/postgresql/<v>/bin;
# initdb in the temp dir, its default settings: fsync and synchronous_commit
# on), as the postgres user when run as root.
set -euo pipefail
store=$1; shift
scenario=$1
bin=${DQ_BIN:-target/release/dq}
log_level=${DQ_LOG_LEVEL:-warn}
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
listen="127.0.0.1:$port"
cleanup() {
  [ -n "${dq_pid:-}" ] && kill "$dq_pid" 2>/dev/null && wait "$dq_pid" 2>/dev/null || true
  [ -n "${redis_port:-}" ] && redis-cli -p "$redis_port" shutdown nosave >/dev/null 2>&1 || true
  [ -n "${pg_bin:-}" ] && as_pg "$pg_bin/pg_ctl" -D "$dir/pg/data" -m immediate stop >/dev/null 2>&1 || true
  for p in "${extra_ports[@]}"; do redis-cli -p "$p" shutdown nosave >/dev/null 2>&1 || true; done
  rm -rf "$dir"
}
trap cleanup EXIT
as_pg() { # PostgreSQL refuses to run as root
  if [ "$(id -u)" = 0 ]; then setpriv --reuid=postgres --regid=postgres --init-groups --reset-env -- "$@"; else "$@"; fi
}
extra=()
extra_ports=()
case $store in
  embedded)
    "$bin" serve --listen "$listen" --data-dir "$dir/data" --log-level "$log_level" >"$dir/dq.log" 2>&1 &
    [ "$scenario" = storage ] && extra=(--data-dir "$dir/data")
    ;;
  redis)
    redis_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" --logfile "$dir/redis.log" --daemonize yes
    sleep 0.2
    "$bin" serve --listen "$listen" --redis "redis://127.0.0.1:$redis_port" --log-level "$log_level" >"$dir/dq.log" 2>&1 &
    [ "$scenario" = storage ] && extra=(--redis "redis://127.0.0.1:$redis_port")
    ;;
  shards)
    # Three private redis-servers as shards.
    urls=()
    for i in 1 2 3; do
      p=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
      mkdir -p "$dir/s$i"
      redis-server --port "$p" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir/s$i" --logfile "$dir/s$i/redis.log" --daemonize yes
      urls+=("redis://127.0.0.1:$p"); extra_ports+=("$p")
    done
    sleep 0.2
    "$bin" serve --listen "$listen" --redis-shards "$(IFS=,; echo "${urls[*]}")" --log-level "$log_level" >"$dir/dq.log" 2>&1 &
    ;;
  cluster)
    # A private 3-master Redis Cluster (no replicas).
    urls=(); hosts=()
    for i in 1 2 3; do
      # A cluster node also listens on port + 10000 (its bus): stay below 55536.
      p=$(python3 -c '
import random, socket
while True:
    p = random.randint(20000, 45000)
    try:
        for q in (p, p + 10000):
            s = socket.socket(); s.bind(("127.0.0.1", q)); s.close()
        print(p); break
    except OSError:
        pass')
      mkdir -p "$dir/c$i"
      redis-server --port "$p" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir/c$i" --logfile "$dir/c$i/redis.log" \
        --cluster-enabled yes --cluster-config-file nodes.conf --daemonize yes
      urls+=("redis://127.0.0.1:$p"); hosts+=("127.0.0.1:$p"); extra_ports+=("$p")
    done
    sleep 0.3
    redis-cli --cluster create "${hosts[@]}" --cluster-replicas 0 --cluster-yes >"$dir/cluster.log" 2>&1
    for _ in $(seq 100); do
      redis-cli -p "${extra_ports[0]}" cluster info | grep -q cluster_state:ok && break
      sleep 0.1
    done
    "$bin" serve --listen "$listen" --redis-cluster "$(IFS=,; echo "${urls[*]}")" --log-level "$log_level" >"$dir/dq.log" 2>&1 &
    ;;
  postgres)
    pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
    [ -n "$pg_bin" ] || { echo "no /usr/lib/postgresql/<v>/bin: apt-get install postgresql" >&2; exit 2; }
    pg_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    mkdir -p "$dir/pg"; chmod 755 "$dir"
    [ "$(id -u)" = 0 ] && chown postgres "$dir/pg"
    as_pg "$pg_bin/initdb" -D "$dir/pg/data" -U postgres --auth=trust --encoding=UTF8 --locale=C >"$dir/pg/initdb.log" 2>&1
    as_pg "$pg_bin/pg_ctl" -D "$dir/pg/data" -l "$dir/pg/postgres.log" -w \
      -o "-p $pg_port -c listen_addresses=127.0.0.1 -c unix_socket_directories=$dir/pg" start >/dev/null
    "$bin" serve --listen "$listen" --postgres "postgres://postgres@127.0.0.1:$pg_port/postgres" --log-level "$log_level" >"$dir/dq.log" 2>&1 &
    ;;
  *) echo "store must be embedded, redis, shards, cluster or postgres" >&2; exit 2 ;;
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
args=()
for a in "$@"; do
  case $a in
    self) args+=("redis://127.0.0.1:${redis_port:?--target self needs the redis store}") ;;
    other)
      p=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
      mkdir -p "$dir/t"
      redis-server --port "$p" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir/t" --logfile "$dir/t/redis.log" --daemonize yes
      extra_ports+=("$p"); sleep 0.2
      args+=("redis://127.0.0.1:$p") ;;
    *) args+=("$a") ;;
  esac
done
if [ "$scenario" = exec ]; then
  DQ_SERVER="http://$listen" DQ_PID="$dq_pid" "${args[@]:1}"
else
  "${DQ_BENCH_BIN:-$bin}" bench --server "http://$listen" "${args[@]}" "${extra[@]}"
fi
