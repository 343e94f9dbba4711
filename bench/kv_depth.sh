#!/bin/sh
# tg128 at depth with f16 and quantized K/V (--kv-type), interleaved so
# the types see the same neighbours on a shared machine: for each round,
# each model and each depth, each type in turn. Prints one markdown row per run,
# with the load average before it (what else was running).
#   bench/kv_depth.sh [ROUNDS] [DEPTHS...]     (defaults: 2 rounds, 4096 16384)
# Env: MODELS (space-separated GGUF paths), TYPES (f16 q8_0), THREADS (2),
# REPS (2), STRATA (./strata), PEER (llama.cpp's llama-bench: each Strata
# run is followed by the peer's, same model, depth, type and threads,
# `-fa on -ctk T -ctv T`: llama.cpp needs flash attention for a quantized V).
set -eu
cd "$(dirname "$0")/.."
ROUNDS=${1:-2}
[ $# -gt 0 ] && shift
DEPTHS=${*:-4096 16384}
MODELS=${MODELS:-models/SmolLM2-135M-Instruct.Q4_1.gguf models/gemma-3-270m-q4_k_m.gguf}
TYPES=${TYPES:-f16 q8_0}
THREADS=${THREADS:-2}
REPS=${REPS:-2}
STRATA=${STRATA:-./strata}
PEER=${PEER:-}
echo "| round | model | depth | kv | engine | tg128 t/s | ± | load avg before |"
echo "|---|---|---|---|---|---|---|---|"
r=1
while [ "$r" -le "$ROUNDS" ]; do
    for m in $MODELS; do
        [ -f "$m" ] || { echo "| $r | $(basename "$m") | - | - | not downloaded | | |"; continue; }
        for d in $DEPTHS; do
            for t in $TYPES; do
                load=$(cut -d' ' -f1-3 /proc/loadavg)
                j=$("$STRATA" bench -m "$m" -p 0 -n 128 -d "$d" -r "$REPS" -t "$THREADS" --kv-type "$t" --json)
                tg=$(echo "$j" | python3 -c 'import json,sys; j=json.load(sys.stdin)["tg"]; print("%.2f | %.2f" % (j["mean"], j["sd"]))')
                echo "| $r | $(basename "$m" .gguf) | $d | $t | strata | $tg | $load |"
                [ -n "$PEER" ] || continue
                load=$(cut -d' ' -f1-3 /proc/loadavg)
                j=$("$PEER" -m "$m" -p 0 -n 128 -d "$d" -r "$REPS" -t "$THREADS" -fa on -ctk "$t" -ctv "$t" -o json 2>/dev/null)
                tg=$(echo "$j" | python3 -c 'import json,sys; j=json.load(sys.stdin)[0]; print("%.2f | %.2f" % (j["avg_ts"], j["stddev_ts"]))')
                echo "| $r | $(basename "$m" .gguf) | $d | $t | llama.cpp | $tg | $load |"
            done
        done
    done
    r=$((r + 1))
done
