#!/usr/bin/env bash
# `make bench-replay`: a short agentic replay (a few minutes here) against
# Strata with its cache and with --no-prefix-cache, each on a fresh cache
# folder, in one run. Extra arguments go to bench/replay.py (e.g. longer
# sessions: --sessions 4 --turns 10-20 --system-tokens 3000).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
start() { # port, extra flags...
  local port=$1; shift
  ./strata serve -m "$MODEL" --port "$port" --ctx 8192 --parallel 2 --cache-dir "$work/kv-$port" "$@" \
    >"$work/serve-$port.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 600); do
    python3 -c "import httpx,sys; sys.exit(httpx.get('http://127.0.0.1:$port/health').status_code != 200)" \
      >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "bench-replay: server on port $port did not start; see $work/serve-$port.log" >&2
  exit 1
}
python3 -c "import matplotlib" 2>/dev/null || python3 -m pip install -q matplotlib 2>&1 | grep -v "Running pip as the 'root' user" || true
start 8611
start 8612 --no-prefix-cache
python3 bench/replay.py --target strata=http://127.0.0.1:8611 --target strata-nocache=http://127.0.0.1:8612 \
  --sessions 2 --turns 3-4 --system-tokens 800 --result-tokens 100-400 --tools 5-10 --interleave 2 \
  --out bench/out/replay "$@"
