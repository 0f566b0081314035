#!/usr/bin/env bash
# Runs schemathesis (from PyPI, in a venv under target/) with every check
# against a fresh `dq serve` on the embedded store, with a fixed seed, and
# prints its summary. Exit status: schemathesis's (0: no failure).
#
#   scripts/schemathesis.sh [--max-examples N] [other schemathesis flags]
#
# Uses target/debug/dq (cargo build -p dq-cli) unless DQ_BIN is set. The
# instance operations (/v1/admin/…: drain, backup) are left out: a drain
# would refuse every later reserve.
set -euo pipefail
bin=${DQ_BIN:-target/debug/dq}
venv=${SCHEMATHESIS_VENV:-target/schemathesis-venv}
if [ ! -x "$venv/bin/schemathesis" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "schemathesis==4.32.5"
fi
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
token=schemathesis-token-0123456789
# The document's latest due time holds until the end of the UTC day
# (Limits::latest_due): the server runs on a clock set just after a
# midnight (libfaketime, wall clock only), so a run never crosses one.
lib=$(ls /usr/lib/*/faketime/libfaketime.so.1 2>/dev/null | head -1)
if [ -z "$lib" ]; then
  echo "schemathesis.sh needs libfaketime (Debian package faketime; .ci/run installs it)" >&2
  exit 2
fi
now=$(date -u +%s)
offset=$((86400 - now % 86400 + 1))
# Reserves wait at most 2 s here (--max-wait, served in the document), so
# a long-poll never outlasts schemathesis's 10 s read timeout.
LD_PRELOAD="$lib" FAKETIME="+${offset}s" FAKETIME_DONT_FAKE_MONOTONIC=1 \
  "$bin" serve --listen "127.0.0.1:$port" --data-dir "$dir/data" --config /dev/null \
  --admin-token "$token" --max-wait 2s --log-level error >"$dir/dq.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break
  sleep 0.1
done
# scripts/schemathesis_hooks.py lets through the one refusal JSON Schema
# cannot state (an expiry not later than the job's due time).
SCHEMATHESIS_HOOKS="$(dirname "$0")/schemathesis_hooks.py" \
  "$venv/bin/schemathesis" run "http://127.0.0.1:$port/openapi.json" --checks all \
  -H "Authorization: Bearer $token" --exclude-path-regex '/v1/admin/.*' \
  --seed 1 --workers 1 --max-examples 50 "$@"
