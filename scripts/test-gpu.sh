#!/usr/bin/env bash
# test-gpu.sh - the one check for a CUDA GPU machine (issue 26): the GPU
# unit tests (every kernel against the CPU or float64, batch invariance bit
# for bit), the whole-model checks on the synthetic models (GPU logits vs
# the CPU backend and the float64 reference, greedy agreement), then a
# SmolLM2-135M-shaped random-weight model (tools/synth_smollm2.py, made
# here) through `strata run` on both devices, `strata serve --device cuda`
# (one request cold, from the GPU pool, from the RAM tier, from the disk
# after a restart: the same bytes; scripts/gpu-serve-check.py) and `strata
# bench` (pp512, tg128) on the GPU, with the CPU's numbers beside them.
#
#   scripts/test-gpu.sh            (`make test-gpu` runs it after building)
#
# Env: STRATA (./strata), TESTS (build/strata-tests), SERVE_CHECK
# (scripts/gpu-serve-check.py), TEST_DATA_DIR
# (tests/data/gen), TOOLS (tools), PYTHON (python3), OUT (where logs go;
# a temp dir), REPS (10: bench repetitions on the GPU), KEEP_MODEL (make
# the synthetic model at this path and leave it there: gpu-peer.sh times
# llama.cpp on it next), PREV (another strata binary, e.g. the last
# session's: benched beside this one in the same run, same card).
# Exit status: 0 only when every check passed.
set -u
STRATA=${STRATA:-./strata}
TESTS=${TESTS:-build/strata-tests}
TOOLS=${TOOLS:-tools}
PYTHON=${PYTHON:-python3}
REPS=${REPS:-10}
export TEST_DATA_DIR=${TEST_DATA_DIR:-tests/data/gen}
LOGS=${OUT:-$(mktemp -d)}
mkdir -p "$LOGS"
WORK=$(mktemp -d)
fail=0
step() { printf '\n== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; }

step "device"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv 2>&1 | head -3
"$STRATA" --version 2>&1 | head -1

step "GPU unit tests and whole-model checks"
# Time limits: a hung kernel must not eat the machine's lease.
STRATA_TEST_GPU=1 STRATA_BIN="$STRATA" timeout 180 "$TESTS" 'cuda_*' 'gpu_*' 2>&1 | tee "$LOGS/gpu-tests.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || fail=1

step "SmolLM2-135M-shaped model (random weights, Q4_1 + Q8_0)"
SMOL=${KEEP_MODEL:-$WORK/smollm2-135m-synth-q4_1.gguf}
if ! (cd "$TOOLS" && "$PYTHON" synth_smollm2.py --out "$SMOL"); then
    echo "test-gpu: could not make the synthetic model"; exit 1
fi

step "greedy text, CPU and GPU (32 tokens)"
cpu_txt=$("$STRATA" run -m "$SMOL" -p "The cache is" -n 32 --temp 0 -q --device cpu 2>&1)
gpu_txt=$(timeout 60 "$STRATA" run -m "$SMOL" -p "The cache is" -n 32 --temp 0 -q --device cuda 2>&1)
printf 'cpu: %q\ngpu: %q\n' "$cpu_txt" "$gpu_txt"
if [ "$cpu_txt" = "$gpu_txt" ]; then echo "greedy text: same"; else echo "greedy text: DIFFERENT (random weights: near-ties possible; see the per-model checks above)"; fi
timeout 60 "$STRATA" run -m "$SMOL" -p "The cache is" -n 32 --temp 0 --device cuda > /dev/null 2> "$LOGS/run-gpu.txt" || fail=1
tail -1 "$LOGS/run-gpu.txt"

step "serve on the GPU: cold, GPU pool hit, RAM tier hit, disk hit after a restart (same bytes)"
# `strata serve --device cuda`: the live KV pool in GPU memory, --cache-ram-mb
# pinned host memory below it, the disk below that (scripts/gpu-serve-check.py).
timeout 300 "$PYTHON" "${SERVE_CHECK:-scripts/gpu-serve-check.py}" --strata "$STRATA" --model "$SMOL" --dir "$WORK/kv" \
    --log "$LOGS/serve-gpu.log" 2>&1 | tee "$LOGS/serve-gpu.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || { fail=1; tail -20 "$LOGS/serve-gpu.log"; }

step "bench on the GPU: pp512, tg128 ($REPS reps)"
timeout 120 "$STRATA" bench -m "$SMOL" --device cuda -p 512 -n 128 -r "$REPS" 2>&1 | tee "$LOGS/bench-gpu.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || fail=1
timeout 120 "$STRATA" bench -m "$SMOL" --device cuda -p 512 -n 128 -d 4096 -r 3 2>&1 | tee -a "$LOGS/bench-gpu.txt" | tail -3

if [ -n "${PREV:-}" ] && [ -x "$PREV" ]; then
    step "the previous build ($PREV) then this one again, pp512/tg128 ($REPS reps)"
    "$PREV" --version 2>&1 | head -1
    timeout 120 "$PREV" bench -m "$SMOL" --device cuda -p 512 -n 128 -r "$REPS" 2>&1 | tee "$LOGS/bench-prev.txt" | tail -3
    timeout 120 "$PREV" bench -m "$SMOL" --device cuda -p 512 -n 128 -d 4096 -r 3 2>&1 | tee -a "$LOGS/bench-prev.txt" | tail -2
    timeout 120 "$STRATA" bench -m "$SMOL" --device cuda -p 512 -n 128 -r "$REPS" 2>&1 | tee -a "$LOGS/bench-gpu.txt" | tail -2
fi

if [ "${QT_SWEEP:-0}" = 1 ]; then
    step "attention: query tokens a block (STRATA_CUDA_ATTN_QT; the default sizes it for the SMs; same bits)"
    for qt in 1 2 4 8; do
        echo "qt=$qt"
        STRATA_CUDA_ATTN_QT=$qt timeout 60 "$STRATA" bench -m "$SMOL" --device cuda -p 512 -n 0 -r 3 2>&1 | grep -E "^\| pp"
        STRATA_CUDA_ATTN_QT=$qt timeout 60 "$STRATA" bench -m "$SMOL" --device cuda -p 512 -n 0 -d 4096 -r 2 2>&1 | grep -E "^\| pp"
    done
fi

step "decode without the graph (STRATA_CUDA_GRAPH=0), for comparison"
STRATA_CUDA_GRAPH=0 timeout 60 "$STRATA" bench -m "$SMOL" --device cuda -p 0 -n 128 -r 3 2>&1 | tee -a "$LOGS/bench-gpu.txt" | tail -1

step "separate kernels (STRATA_CUDA_FUSE=0: 17 launches a layer, not 9), for comparison"
STRATA_CUDA_FUSE=0 timeout 60 "$STRATA" bench -m "$SMOL" --device cuda -p 512 -n 128 -r 3 2>&1 | tee -a "$LOGS/bench-gpu.txt" | tail -2

step "bench on this machine's CPU, for scale (3 reps)"
timeout 120 "$STRATA" bench -m "$SMOL" -p 512 -n 128 -r 3 2>&1 | tee "$LOGS/bench-cpu.txt"

if [ "${PROFILE:-0}" = 1 ] && command -v ncu > /dev/null; then
    step "kernel times (ncu, PROFILE=1): pp512 then decode"
    # The warm-up's prefill (~430 launches), then its first decode steps.
    timeout 150 ncu --metrics gpu__time_duration.sum --print-summary per-kernel --launch-count 860 \
        "$STRATA" bench -m "$SMOL" --device cuda -p 512 -n 8 -r 1 > "$LOGS/ncu.txt" 2>&1
    grep -E "k_[a-z_]+|gpu__time_duration" "$LOGS/ncu.txt" | tail -60
fi

step "summary"
grep -E "^(ok|FAIL|skip) |passed" "$LOGS/gpu-tests.log"
grep -E "^gpu-serve-check:" "$LOGS/serve-gpu.txt"
grep -E "^\| (pp|tg)" "$LOGS/bench-gpu.txt" "$LOGS/bench-cpu.txt" ${PREV:+"$LOGS/bench-prev.txt"} 2>/dev/null
rm -rf "$WORK"
if [ $fail -eq 0 ]; then echo "test-gpu: PASS"; else echo "test-gpu: FAIL"; fi
exit $fail
