#!/usr/bin/env bash
# test-gpu.sh - the one prepared check for a CUDA GPU machine (issue 26).
# Every step prints what it checks, runs under its own time limit, and is
# recorded PASS, FAIL, TIMEOUT or SKIP in $OUT/summary.txt as soon as it
# ends; a failed step never stops the ones after it. The whole run stays
# within BUDGET_S (a lease is 15 minutes, a start costs one or two, and a
# second run must fit): a step gets at most what is left, and steps are
# skipped once it is spent. Steps, most telling first:
#
#   env        the GPU, driver, the binaries' libraries, python/numpy/gguf
#   data       the generated test models of GPU_TEST_MODELS (names) and
#              their float64 reference logits, made when TEST_DATA_DIR
#              lacks them (tools/gen_gpu_testdata.py: a bundle carries none)
#   unit       the GPU unit tests and whole-model checks (`cuda_*`, `gpu_*`:
#              every kernel against the CPU or float64, batch invariance
#              bit for bit, the paged pass, the tiers on cuda_devmem),
#              each test in its own process with its own time limit
#   model      a SmolLM2-135M-shaped random-weight model (made here)
#   greedy     `strata run` on both devices: the same text? (near-ties of
#              random weights may differ: reported, not failed)
#   serve      `strata serve --device cuda`: one request cold, from the GPU
#              pool, from the RAM tier, from the disk after a restart, the
#              same bytes (scripts/gpu-serve-check.py)
#   serve3     the same on the generated gemma3-q8_0 (window 16): its
#              sliding layers' parts in the GPU pool's slots, a hit's
#              window brought back from each tier
#   serve35    the same on the generated qwen35-f32: each sequence's
#              recurrent state in GPU memory, a hit resumed from a
#              snapshot (downloaded, kept in memory and on disk, uploaded)
#   servemoe   the same on the generated qwen3moe-q8_0: experts routed on
#              the device, decode steps as graphs (step 9)
#   bench      `strata bench --device cuda` pp512/tg128, then at depth 4096
#   sanitizer  compute-sanitizer memcheck over the paged pass, the tiers
#              on the GPU, gemma3, qwen35, MoE and the matmuls (the code
#              newest to the GPU); racecheck over the double-buffered
#              kernels (prefill's matmul, the delta rule, attention)
#   qwen35     the issue's speed anchor: a Qwen3.5-0.8B-shaped random-weight
#              model (Q4_0, made here: tools/synth_qwen35.py), `strata run`
#              on both devices (the same text?), `strata bench --device
#              cuda` pp512/tg128, then at depth 4096
#   nograph, nofuse, cpu   decode without the graph, separate kernels, the
#              machine's CPU: for comparison
#   nostage    tg128 on both models without, then with, the decode
#              matmul's staged weight loads (STRATA_CUDA_MMV_STAGE)
#   optional   PREV (another strata binary, benched beside this one),
#              QT_SWEEP=1 (attention tile sizes), PROFILE=1 (ncu: each
#              kernel's time in decode, prefill, attention at depth;
#              PROFILE=quick: decode, and one of qwen35's decode
#              attention launches at depth in detail)
#
#   scripts/test-gpu.sh        (`make test-gpu` builds first; a bundle's run.sh
#                               sets the paths: scripts/gpu-bundle.sh)
#
# Env: STRATA (./strata), TESTS (build/strata-tests), SERVE_CHECK
# (scripts/gpu-serve-check.py), TEST_DATA_DIR (tests/data/gen), TOOLS
# (tools), PYTHON (python3), OUT (where the logs go: a temp dir), REPS (10:
# bench repetitions), BUDGET_S (360), KEEP_MODEL, KEEP_Q35 (make the
# SmolLM2-shaped, the qwen35 synthetic model at this path and leave it:
# gpu-peer.sh times llama.cpp on them),
# PREV, QT_SWEEP, PROFILE (above), STEPS (names of the steps to run, e.g.
# "env unit"; all by default).
# Files in $OUT (at most 8 come back from the lent machine): summary.txt,
# test-gpu.log (everything printed), serve-gpu.log (the servers' output),
# sanitizer.log, ncu.txt (PROFILE), ncu-attn.txt (PROFILE=quick).
# Exit status: 0 only when every step that ran passed.
set -u
STRATA=${STRATA:-./strata}
TESTS=${TESTS:-build/strata-tests}
TOOLS=${TOOLS:-tools}
PYTHON=${PYTHON:-python3}
REPS=${REPS:-10}
BUDGET_S=${BUDGET_S:-360}
STEPS=${STEPS:-env data unit model greedy serve serve3 serve35 servemoe bench sanitizer qwen35 nograph nofuse nostage cpu optional}
# what the chosen steps need runs too: the test models, the synthetic model
case " $STEPS " in *" unit "* | *" sanitizer "* | *" serve3 "* | *" serve35 "* | *" servemoe "*) STEPS="data $STEPS" ;; esac
case " $STEPS " in *" greedy "* | *" serve "* | *" bench "* | *" nograph "* | *" nofuse "* | *" nostage "* | *" cpu "* | *" optional "*)
    STEPS="model $STEPS" ;;
esac
abs() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; } # the tools run from $TOOLS
export TEST_DATA_DIR=$(abs "${TEST_DATA_DIR:-tests/data/gen}")
LOGS=${OUT:-$(mktemp -d)}
mkdir -p "$LOGS"
WORK=$(mktemp -d)
SMOL=$(abs "${KEEP_MODEL:-$WORK/smollm2-135m-synth-q4_1.gguf}")
Q35=$(abs "${KEEP_Q35:-$WORK/qwen35-0.8b-synth-q4_0.gguf}")
SUMMARY=$LOGS/summary.txt
T0=$(date +%s)
export STRATA TESTS TOOLS PYTHON REPS WORK SMOL Q35 LOGS
exec > >(tee -a "$LOGS/test-gpu.log") 2>&1
TEE_PID=$!
: > "$SUMMARY"
fail=0

note() { printf '%s\n' "$*" | tee -a "$SUMMARY"; }
left() { echo $((BUDGET_S - ($(date +%s) - T0))); }
wanted() { case " $STEPS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

# step NAME LIMIT_S WHAT FUNCTION: prints what it checks, runs FUNCTION
# under timeout (LIMIT_S, or the budget left if less; the whole process
# group goes when it runs over), records the result and the seconds.
step() {
    local name=$1 limit=$2 what=$3 fn=$4 l st rc t
    wanted "$name" || return 0
    l=$(left)
    if [ "$l" -lt 15 ]; then
        note "SKIP       $name: the budget of ${BUDGET_S} s is spent ($what)"
        return 0
    fi
    [ "$limit" -gt "$l" ] && limit=$l
    printf '\n== %s: %s (limit %d s, %s)\n' "$name" "$what" "$limit" "$(date -u +%H:%M:%S)"
    t=$(date +%s)
    timeout -k 5 "$limit" bash -c "$fn"
    rc=$?
    case $rc in
        0) st=PASS ;;
        124 | 137) st=TIMEOUT ;;
        *) st="FAIL(rc=$rc)" ;;
    esac
    [ $rc -eq 0 ] || fail=1
    note "$(printf '%-10s %-9s %4d s  %s' "$st" "$name" $(($(date +%s) - t)) "$what")"
}

# ---- the steps (each runs in its own bash: exported functions) ----

env_info() {
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv 2>&1 | head -3
    "$STRATA" --version 2>&1 | head -1
    local missing
    missing=$(ldd "$STRATA" "$TESTS" 2>&1 | grep -F "not found")
    [ -z "$missing" ] || { echo "missing libraries: $missing"; return 1; }
    "$PYTHON" -c 'import sys, numpy, gguf; print("python", sys.version.split()[0], "numpy", numpy.__version__, "gguf ok")' || return 1
    command -v compute-sanitizer > /dev/null && echo "compute-sanitizer: $(command -v compute-sanitizer)"
    command -v ncu > /dev/null && echo "ncu: $(command -v ncu)"
    return 0
}

unit_tests() {
    # a hung kernel fails its test after 90 s, the others still run
    STRATA_TEST_GPU=1 STRATA_TEST_TIMEOUT_S=90 STRATA_BIN="$STRATA" "$TESTS" 'cuda_*' 'gpu_*' > "$WORK/unit.log" 2>&1
    local rc=$?
    cat "$WORK/unit.log"
    return $rc
}

test_data() {
    # the generated models the GPU tests open, made here when missing (a bundle carries none)
    local missing="" m
    for m in ${GPU_TEST_MODELS:-}; do [ -s "$TEST_DATA_DIR/models/$m.gguf" ] || missing="$missing $m"; done
    [ -z "$missing" ] && { echo "present in $TEST_DATA_DIR/models: ${GPU_TEST_MODELS:-(none named)}"; return 0; }
    (cd "$TOOLS" && "$PYTHON" gen_gpu_testdata.py "$TEST_DATA_DIR" $missing)
}

make_model() {
    [ -s "$SMOL" ] && { echo "kept: $SMOL"; return 0; }
    (cd "$TOOLS" && "$PYTHON" synth_smollm2.py --out "$SMOL")
}

# compare_greedy MODEL N FILE: N tokens of `strata run --temp 0` on both
# devices; the verdict also to FILE (near-ties of random weights may
# differ: reported, not failed).
compare_greedy() {
    local cpu gpu
    cpu=$("$STRATA" run -m "$1" -p "The cache is" -n "$2" --temp 0 -q --device cpu 2>&1) || { echo "cpu run failed: $cpu"; return 1; }
    gpu=$("$STRATA" run -m "$1" -p "The cache is" -n "$2" --temp 0 -q --device cuda 2>&1) || { echo "gpu run failed: $gpu"; return 1; }
    printf 'cpu: %q\ngpu: %q\n' "$cpu" "$gpu"
    if [ "$cpu" = "$gpu" ]; then echo "greedy text ($(basename "$1")): same" | tee "$3"
    else echo "greedy text ($(basename "$1")): DIFFERENT (random weights: near-ties possible; see the unit step's per-model checks)" | tee "$3"; fi
}

# bench_model MODEL FILE: `strata bench --device cuda` pp512/tg128 (REPS
# reps), then at depth 4096 (3 reps), printed and to FILE.
bench_model() {
    "$STRATA" bench -m "$1" --device cuda -p 512 -n 128 -r "$REPS" 2>&1 | tee "$2"
    [ "${PIPESTATUS[0]}" -eq 0 ] || return 1
    "$STRATA" bench -m "$1" --device cuda -p 512 -n 128 -d 4096 -r 3 2>&1 | tee -a "$2"
    return "${PIPESTATUS[0]}"
}

greedy() {
    [ -s "$SMOL" ] || { echo "no synthetic model (the model step failed)"; return 1; }
    compare_greedy "$SMOL" 32 "$WORK/greedy.txt" || return 1
    "$STRATA" run -m "$SMOL" -p "The cache is" -n 32 --temp 0 --device cuda 2>&1 > /dev/null | tail -1
}

# serve_check MODEL NAME DEADLINE_S [ARGS]: gpu-serve-check.py on MODEL, its lines to $WORK/NAME.txt
serve_check() {
    local model=$1 name=$2 deadline=$3
    shift 3
    PYTHONUNBUFFERED=1 "$PYTHON" "${SERVE_CHECK:-scripts/gpu-serve-check.py}" --strata "$STRATA" --model "$model" \
        --dir "$WORK/kv-$name" --log "$LOGS/serve-gpu.log" --deadline "$deadline" "$@" | tee "$WORK/$name.txt"
    local rc=${PIPESTATUS[0]}
    [ $rc -eq 0 ] || tail -30 "$LOGS/serve-gpu.log"
    return $rc
}

serve() {
    [ -s "$SMOL" ] || { echo "no synthetic model (the model step failed)"; return 1; }
    serve_check "$SMOL" serve 130
}

serve_gemma3() {
    # 2 s on the CPU (`--device cpu --ram-mb 0`, a dry run: every hit as asked)
    local m=$TEST_DATA_DIR/models/gemma3-q8_0.gguf
    [ -s "$m" ] || { echo "no $m (the data step failed)"; return 1; }
    serve_check "$m" serve3 50 --port 19481
}

serve_qwen35() {
    # 3 s on the CPU (`--device cpu --ram-mb 0 --recurrent`, a dry run)
    local m=$TEST_DATA_DIR/models/qwen35-f32.gguf
    [ -s "$m" ] || { echo "no $m (the data step failed)"; return 1; }
    serve_check "$m" serve35 60 --port 19482 --recurrent
}

serve_moe() {
    # 2 s on the CPU (`--device cpu --ram-mb 0`, a dry run)
    local m=$TEST_DATA_DIR/models/qwen3moe-q8_0.gguf
    [ -s "$m" ] || { echo "no $m (the data step failed)"; return 1; }
    serve_check "$m" servemoe 50 --port 19483
}

bench_gpu() {
    [ -s "$SMOL" ] || { echo "no synthetic model (the model step failed)"; return 1; }
    bench_model "$SMOL" "$WORK/bench-gpu.txt"
}

sanitizer() {
    command -v compute-sanitizer > /dev/null || { echo "no compute-sanitizer on this machine"; return 1; }
    # the code new to the GPU: the paged pass, the tiers on cuda_devmem, gemma3's window, qwen35, MoE, the decode matmul
    STRATA_TEST_GPU=1 compute-sanitizer --tool memcheck --error-exitcode 3 --target-processes all \
        "$TESTS" 'gpu_paged_*' 'gpu_tiers_*' 'gpu_gemma3_*' 'gpu_qwen35_*' 'gpu_moe_*' 'gpu_matmul_*' > "$LOGS/sanitizer.log" 2>&1
    local rc=$?
    # shared-memory races in the kernels that fill one buffer while using the other (cp.async, two stages)
    STRATA_TEST_GPU=1 compute-sanitizer --tool racecheck --error-exitcode 3 \
        "$TESTS" 'gpu_matmul_long_rows' 'gpu_qwen35_kernels_*' 'gpu_attention_*' >> "$LOGS/sanitizer.log" 2>&1 || rc=$?
    grep -E "^(ok|FAIL|skip) |passed|ERROR SUMMARY|RACECHECK SUMMARY|Invalid|out of bounds|[Hh]azard" "$LOGS/sanitizer.log" | head -40
    return $rc
}

qwen35_anchor() {
    [ -s "$Q35" ] || (cd "$TOOLS" && "$PYTHON" synth_qwen35.py --out "$Q35") || { echo "no qwen35 model"; return 1; }
    compare_greedy "$Q35" 16 "$WORK/qwen35.txt" || return 1
    bench_model "$Q35" "$WORK/bench-qwen35.txt"
}

bench_nograph() {
    [ -s "$SMOL" ] || return 1
    STRATA_CUDA_GRAPH=0 "$STRATA" bench -m "$SMOL" --device cuda -p 0 -n 128 -r 3 2>&1 | tee "$WORK/bench-nograph.txt"
    return "${PIPESTATUS[0]}"
}

bench_nofuse() {
    [ -s "$SMOL" ] || return 1
    STRATA_CUDA_FUSE=0 "$STRATA" bench -m "$SMOL" --device cuda -p 512 -n 128 -r 3 2>&1 | tee "$WORK/bench-nofuse.txt"
    return "${PIPESTATUS[0]}"
}

# The decode matmul without and with its staged weight loads, back to
# back on both models (tg128; STRATA_CUDA_MMV_STAGE=0 turns them off).
bench_nostage() {
    local rc=0 m s
    : > "$WORK/bench-nostage.txt"
    for m in "$SMOL" "$Q35"; do
        [ -s "$m" ] || continue
        for s in 0 1; do
            echo "STRATA_CUDA_MMV_STAGE=$s $(basename "$m")" | tee -a "$WORK/bench-nostage.txt"
            STRATA_CUDA_MMV_STAGE=$s "$STRATA" bench -m "$m" --device cuda -p 0 -n 128 -r 5 > "$WORK/nostage.out" 2>&1 ||
                rc=1
            grep -E "^\| tg" "$WORK/nostage.out" | tee -a "$WORK/bench-nostage.txt"
        done
    done
    return $rc
}

bench_cpu() {
    [ -s "$SMOL" ] || return 1
    "$STRATA" bench -m "$SMOL" -p 512 -n 128 -r 3 2>&1 | tee "$WORK/bench-cpu.txt"
    return "${PIPESTATUS[0]}"
}

bench_prev() {
    [ -s "$SMOL" ] && [ -x "$PREV" ] || return 1
    "$PREV" --version 2>&1 | head -1
    : > "$WORK/bench-prev.txt"
    local m
    for m in "$SMOL" "$Q35"; do # the previous build, then this one again: the same machine, minutes apart
        [ -s "$m" ] || continue
        echo "$(basename "$m"): the previous build, then this one"
        "$PREV" bench -m "$m" --device cuda -p 512 -n 128 -r "$REPS" 2>&1 | tee -a "$WORK/bench-prev.txt" | tail -2
        "$PREV" bench -m "$m" --device cuda -p 512 -n 128 -d 4096 -r 3 2>&1 | tee -a "$WORK/bench-prev.txt" | tail -2
        "$STRATA" bench -m "$m" --device cuda -p 512 -n 128 -r "$REPS" 2>&1 | tee -a "$WORK/bench-again.txt" | tail -2
        "$STRATA" bench -m "$m" --device cuda -p 512 -n 128 -d 4096 -r 3 2>&1 | tee -a "$WORK/bench-again.txt" | tail -2
    done
}

qt_sweep() {
    for qt in 0 2 4 8 16 32; do # 0: attn_qt's own choice
        echo "qt=$qt"
        STRATA_CUDA_ATTN_QT=$qt "$STRATA" bench -m "$SMOL" --device cuda -p 512 -n 0 -r 3 2>&1 | grep -E "^\| pp"
        STRATA_CUDA_ATTN_QT=$qt "$STRATA" bench -m "$SMOL" --device cuda -p 512 -n 0 -d 4096 -r 2 2>&1 | grep -E "^\| pp"
    done
}

# ncu_run TITLE PASSES FILTER PROGRAM...: the program under ncu (each
# kernel's own time; FILTER: a kernel-name regex or ""), the table of
# tools/ncu_table.py to the output and $LOGS/ncu.txt
ncu_run() {
    local title=$1 passes=$2 filter=$3
    shift 3
    ncu --csv --print-units base --metrics gpu__time_duration.sum ${filter:+-k "regex:$filter"} \
        --log-file "$WORK/ncu.csv" "$@" > /dev/null 2>&1 || { echo "ncu failed: $title"; return 1; }
    "$PYTHON" "$TOOLS/ncu_table.py" --passes "$passes" --top 16 --title "$title" "$WORK/ncu.csv" | tee -a "$LOGS/ncu.txt"
}

profile() {
    command -v ncu > /dev/null || { echo "no ncu"; return 1; }
    : > "$LOGS/ncu.txt"
    local m rc=0
    # decode: a 4-token prompt, then 16 steps, each kernel on its own (no graph: ncu times a graph's kernels alike)
    for m in "$SMOL" "$Q35"; do
        [ -s "$m" ] || continue
        STRATA_CUDA_GRAPH=0 ncu_run "decode, 17 passes: $(basename "$m")" 17 "" \
            "$STRATA" run -m "$m" -p "The cache is" -n 16 --temp 0 -q --device cuda || rc=1
    done
    if [ "${PROFILE:-1}" = quick ]; then
        # one decode attention launch of qwen35 at depth 4096 (its 41st: the depth's prefill runs 18, ncu 2026-11-28), every section
        [ -s "$Q35" ] && { ncu --set full --kernel-name-base demangled -k 'regex:k_attn_seg<8>' --launch-skip 40 --launch-count 1 \
            "$STRATA" bench -m "$Q35" --device cuda -p 0 -n 16 -d 4096 -r 1 > "$LOGS/ncu-attn.txt" 2>&1 || rc=1; }
        # a filter that matches nothing is no error to ncu (2026-11-28: the template's name needs the demangled base)
        grep -q "No kernels were profiled" "$LOGS/ncu-attn.txt" && { echo "ncu: no attention launch matched"; rc=1; }
        grep -E "Duration|Registers|Achieved Occupancy|Theoretical Occupancy|Grid Size|Shared Memory Config|Dynamic Shared|Issue Slots Busy|Warp Cycles Per Issued|stall" "$LOGS/ncu-attn.txt" | head -30
        return $rc
    fi
    # prefill: the warm-up's pp512 and one more
    [ -s "$Q35" ] && { ncu_run "pp512, 2 passes: $(basename "$Q35")" 2 "" "$STRATA" bench -m "$Q35" --device cuda -p 512 -n 0 -r 1 || rc=1; }
    # attention at depth 4096: the depth's prefill, then the warm-up's and one run's 16 decode steps (graphs)
    for m in "$SMOL" "$Q35"; do
        [ -s "$m" ] || continue
        ncu_run "attention at depth 4096 (the depth's prefill, then 2 x 16 decode steps as graphs): $(basename "$m")" 0 "attn" \
            "$STRATA" bench -m "$m" --device cuda -p 0 -n 16 -d 4096 -r 1 || rc=1
    done
    return $rc
}

export -f ncu_run env_info test_data unit_tests make_model compare_greedy bench_model greedy serve_check serve serve_gemma3 serve_qwen35 serve_moe \
    bench_gpu sanitizer qwen35_anchor bench_nograph bench_nofuse bench_nostage bench_cpu \
    bench_prev qt_sweep profile
export SERVE_CHECK=${SERVE_CHECK:-} PREV=${PREV:-} GPU_TEST_MODELS=${GPU_TEST_MODELS:-}

note "test-gpu $(date -u +%FT%TZ): budget ${BUDGET_S} s; $("$STRATA" --version 2>&1 | head -1)"
step env 30 "the GPU, the driver, the binaries' libraries, python" env_info
step data 90 "the generated test models and their float64 reference logits (made when missing)" test_data
step unit 300 "GPU unit tests and whole-model checks (90 s a test)" unit_tests
grep -E "^(FAIL|skip) |passed" "$WORK/unit.log" 2>/dev/null | sed 's/^/          /' >> "$SUMMARY"
step model 120 "the SmolLM2-135M-shaped random-weight model (Q4_1 + Q8_0)" make_model
step greedy 90 "greedy text, CPU and GPU, 32 tokens" greedy
sed 's/^/          /' "$WORK/greedy.txt" >> "$SUMMARY" 2>/dev/null
step serve 150 "serve --device cuda: cold, GPU pool, RAM tier, disk after a restart, the same bytes" serve
grep -E "^gpu-serve-check:|^(cold|again|evicted|restart)" "$WORK/serve.txt" 2>/dev/null | cut -c1-150 | sed 's/^/          /' >> "$SUMMARY"
step serve3 60 "serve --device cuda on gemma3 (sliding windows in the GPU pool): the same four places" serve_gemma3
grep -E "^gpu-serve-check:|^(cold|again|evicted|restart)" "$WORK/serve3.txt" 2>/dev/null | cut -c1-150 | sed 's/^/          /' >> "$SUMMARY"
step serve35 70 "serve --device cuda on qwen35 (recurrent states in the GPU pool, snapshots): the same four places" serve_qwen35
grep -E "^gpu-serve-check:|^(cold|again|evicted|restart)" "$WORK/serve35.txt" 2>/dev/null | cut -c1-150 | sed 's/^/          /' >> "$SUMMARY"
step servemoe 60 "serve --device cuda on qwen3moe (experts routed on the device, decode graphs): the same four places" serve_moe
grep -E "^gpu-serve-check:|^(cold|again|evicted|restart)" "$WORK/servemoe.txt" 2>/dev/null | cut -c1-150 | sed 's/^/          /' >> "$SUMMARY"
step bench 150 "bench on the GPU: pp512, tg128 ($REPS reps), then at depth 4096 (3 reps)" bench_gpu
step sanitizer 150 "compute-sanitizer memcheck: the paged pass, the tiers on the GPU, gemma3, qwen35, MoE; racecheck: the double-buffered kernels" sanitizer
step qwen35 150 "the qwen35 0.8B-shaped model: greedy text CPU and GPU, bench pp512/tg128 ($REPS reps), at depth 4096" qwen35_anchor
sed 's/^/          /' "$WORK/qwen35.txt" >> "$SUMMARY" 2>/dev/null
step nograph 60 "decode without the graph (STRATA_CUDA_GRAPH=0)" bench_nograph
step nofuse 60 "separate kernels (STRATA_CUDA_FUSE=0)" bench_nofuse
step nostage 90 "the decode matmul without, then with, staged weight loads (STRATA_CUDA_MMV_STAGE)" bench_nostage
sed 's/^/          /' "$WORK/bench-nostage.txt" >> "$SUMMARY" 2>/dev/null
step cpu 120 "bench on this machine's CPU, for scale (3 reps)" bench_cpu
if wanted optional; then
    [ -n "$PREV" ] && STEPS="$STEPS prev" step prev 200 "the previous build ($PREV), then this one again, on both models" bench_prev
    [ "${QT_SWEEP:-0}" = 1 ] && STEPS="$STEPS qt" step qt 150 "attention query tokens a block (STRATA_CUDA_ATTN_QT)" qt_sweep
    [ "${PROFILE:-0}" != 0 ] && STEPS="$STEPS ncu" step ncu 150 "kernel times (ncu): decode, qwen35's pp512, attention at depth" profile
fi

for f in bench-gpu bench-qwen35 bench-nograph bench-nofuse bench-cpu bench-prev bench-again; do
    [ -s "$WORK/$f.txt" ] && grep -E "^\| (pp|tg)" "$WORK/$f.txt" | sed "s/^/$f /" >> "$SUMMARY"
done
note "test-gpu: $([ $fail -eq 0 ] && echo PASS || echo FAIL) in $(($(date +%s) - T0)) s"
printf '\n== summary (%s)\n' "$SUMMARY"
cat "$SUMMARY"
rm -rf "$WORK"
exec > /dev/null 2>&1
wait "$TEE_PID" # test-gpu.log complete before $OUT is collected
exit $fail
