#!/usr/bin/env bash
# `make bench-agent MODEL=gemma3|qwen35|FILE.gguf`: in one run, Strata against
# llama.cpp's llama-server (newest llama.cpp, scripts/build-llama-server.sh),
# same GGUF, same threads, one after another:
#   1. bench/agent_loop.py: the 12-turn agent loop (each server's own
#      fixed-length replies sent back), both servers restarted before turn 9;
#   2. bench/replay.py: the agentic replay (recorded sessions), both servers
#      restarted halfway.
# Strata: memory + disk tiers (its default), a fresh --cache-dir per part.
# llama-server: its defaults (context checkpoints: 32 per slot; prompt cache in
# RAM: --cache-ram 8192 MiB) but the context, 16384 tokens per slot as Strata's
# --ctx 16384; tools as text (Strata's generic format) on both, so both render
# the same prompt text.
# Environment: MODEL (gemma3, qwen35 or a path; default gemma3), THREADS
# (default: cores), OUT (default bench/out/agent-NAME), LLAMA_SERVER (binary).
# Extra arguments go to bench/agent_loop.py.
set -euo pipefail
cd "$(dirname "$0")/.."
# The synthetic qwen35's tokenizer is a tiny byte-level BPE (~5 tokens a
# word, where gemma3 needs ~1.3): its workload has fewer words, so its
# prompts are about as long in tokens (turn 0 ~1k, turn 11 ~3k).
small="--system-tokens 100 --tools 2 --result-tokens 30-60"
case "${MODEL:-gemma3}" in
  gemma3) M=models/gemma-3-270m-q4_k_m.gguf; loop=(); replay=(--system-tokens 800 --tools 5-10 --result-tokens 100-400)
          # the GGUF has no chat template: Strata renders Gemma's turns, llama-server
          # would fall back to ChatML; give it Strata's format as a Jinja file
          peer_extra="--jinja --chat-template-file bench/data/gemma3-strata.jinja" ;;
  qwen35) M=models/qwen35-0.8b-synth-q4_0.gguf; loop=($small --reply-tokens 16); replay=($small); peer_extra= ;;
  *) M=$MODEL; loop=(); replay=(--system-tokens 800 --tools 5-10 --result-tokens 100-400); peer_extra= ;;
esac
[ -f "$M" ] || { echo "bench-agent: no model $M (make model-gemma3 / make model-qwen35-synth)" >&2; exit 1; }
name=$(basename "$M" .gguf)
THREADS=${THREADS:-$(nproc)}
OUT=${OUT:-bench/out/agent-$name}
LLAMA_SERVER=${LLAMA_SERVER:-build/llama-server/llama-server}
[ -x "$LLAMA_SERVER" ] || scripts/build-llama-server.sh
work=$(mktemp -d /tmp/strata-agent.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$OUT"
cp ./strata "$work/strata"  # one binary for the whole run, even if ./strata is rebuilt meanwhile

strata() {  # strata PORT PART
  echo "$work/strata serve -m $M --host 127.0.0.1 --port $1 --ctx 16384 --parallel 2 -t $THREADS \
--cache-dir $work/kv-$2 --trace $work/trace-$2.jsonl"
}
peer="$LLAMA_SERVER -m $M --host 127.0.0.1 --port 8624 -t $THREADS --kv-unified-per-slot 16384 --no-webui $peer_extra"

echo "bench-agent: load average before: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/load.txt"
python3 bench/agent_loop.py --serve "strata=$(strata 8621 loop)" --serve "llama-server=$peer" \
  "${loop[@]}" --out "$OUT" "$@"
python3 bench/replay.py --serve "strata=$(strata 8622 replay)" --serve "llama-server=$peer" \
  --tools-as-text strata --tools-as-text llama-server \
  --sessions 2 --turns 5-6 "${replay[@]}" --interleave 2 \
  --restart-after 0.5 --out "$OUT/replay"
echo "bench-agent: load average after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/load.txt"
