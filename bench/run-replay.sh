#!/usr/bin/env bash
# `make bench-replay`: a short agentic replay against four targets in one run,
# one after another on the same requests, each server restarted once in the
# middle (SIGTERM, same command):
#   strata-off   ./strata serve --no-prefix-cache
#   strata-mem   ./strata serve --no-cache-disk       (memory tier only)
#   strata       ./strata serve                       (memory + disk tiers)
#   llama-server llama.cpp's own server, prompt cache on (--cache-ram)
# llama-server is built once by scripts/build-llama-server.sh; when that
# fails (or SKIP_PEER=1) the Strata targets still run and the report says
# why the peer is missing. Extra arguments go to bench/replay.py (e.g.
# longer sessions: --sessions 4 --turns 10-20 --system-tokens 3000, or
# --concurrency 2); later flags override the defaults below.
# Environment: MODEL, THREADS (default: cores), OUT (default bench/out/replay),
# LLAMA_SERVER (binary), SKIP_PEER=1.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
THREADS=${THREADS:-$(nproc)}
OUT=${OUT:-bench/out/replay}
LLAMA_SERVER=${LLAMA_SERVER:-build/llama-server/llama-server}
work=$(mktemp -d /tmp/strata-replay.XXXXXX)
trap 'rm -rf "$work"' EXIT

for m in matplotlib httpx openai; do
  python3 -c "import $m" 2>/dev/null || python3 -m pip install -q "$m" 2>&1 | grep -v "Running pip as the 'root' user" || true
done

peer=()
if [ -n "${SKIP_PEER:-}" ]; then
  peer=(--note "llama-server skipped: SKIP_PEER is set")
else
  if [ ! -x "$LLAMA_SERVER" ] && [ "$LLAMA_SERVER" = build/llama-server/llama-server ]; then
    echo "bench-replay: llama-server not built yet: scripts/build-llama-server.sh (once; ~12 min on 2 cores)" >&2
    scripts/build-llama-server.sh || true
  fi
  if [ -x "$LLAMA_SERVER" ]; then
    # Default slots (auto: 4, one unified KV pool), 8192 tokens per slot, 1 GiB prompt cache in RAM
    # (Strata's --cache-mem-mb default); tools as text: its SmolLM2 chat template drops them.
    peer=(--serve "llama-server=$LLAMA_SERVER -m $MODEL --host 127.0.0.1 --port 8614 -t $THREADS \
--kv-unified-per-slot 8192 --cache-ram 1024 --no-webui" --tools-as-text llama-server)
  else
    if [ "$LLAMA_SERVER" = build/llama-server/llama-server ]; then
      why="scripts/build-llama-server.sh did not produce $LLAMA_SERVER (see its output above and build/llama-server/*.log)"
    else
      why="LLAMA_SERVER=$LLAMA_SERVER is not an executable"
    fi
    echo "bench-replay: llama-server SKIPPED: $why" >&2
    peer=(--note "llama-server skipped: $why")
  fi
fi

cp ./strata "$work/strata"  # one binary for the whole run, even if ./strata is rebuilt meanwhile
strata="$work/strata serve -m $MODEL --host 127.0.0.1 --ctx 8192 --parallel 2 -t $THREADS --cache-mem-mb 1024"
python3 bench/replay.py \
  --serve "strata-off=$strata --port 8611 --no-prefix-cache --cache-dir $work/kv-off" \
  --serve "strata-mem=$strata --port 8612 --no-cache-disk --cache-dir $work/kv-mem" \
  --serve "strata=$strata --port 8613 --cache-dir $work/kv-full" \
  "${peer[@]}" \
  --sessions 2 --turns 3-4 --system-tokens 800 --result-tokens 100-400 --tools 5-10 --interleave 2 \
  --restart-after 0.5 --out "$OUT" "$@"
