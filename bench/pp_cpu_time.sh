#!/bin/bash
# pp_cpu_time.sh MODEL [REPS] [BINARY...]: prefill tokens per CPU-second,
# one thread, for each strata binary given (default ./strata) and
# llama-bench ($LLAMA_BENCH, default the shared oracle build), interleaved
# REPS times (default 2). On a machine shared with other jobs a process's
# wall time measures the others; its own CPU time (user + sys, from
# /usr/bin/time) does not (their cache and memory traffic still shows).
# Each process prefills 512 tokens 3 times (strata: 1 warm-up + -r 2;
# llama-bench: its warm-up + -r 2) plus its start-up, which is counted
# too (the model maps in milliseconds; llama-bench's repacking is part of
# its cost). tok/CPU-s = 1536 / CPU seconds. STRATA_CPU applies to strata.
# Prints one line per run and the best per engine with its fraction of
# PEAK (G int8 ops/s of one core, default 467: issue 29's quiet-machine
# VPDPBUSD figure; `strata bench --peak -t 1` measures it) at OPS G int8
# ops per token (default: SmolLM2 0.2123; Gemma 3 270M is 0.2005).
set -u
model=$1; reps=${2:-2}; shift 2 || shift $#
bins=("$@"); [ ${#bins[@]} -eq 0 ] && bins=(./strata)
LB=${LLAMA_BENCH:-/work/oracle/cmake/bin/llama-bench}
PEAK=${PEAK:-467}; OPS=${OPS:-0.2123}
cpu_s() { /usr/bin/time -f "%U %S" "$@" 2>&1 >/dev/null | tail -1 | awk '{print $1 + $2}'; }
declare -A best
for r in $(seq "$reps"); do
  for b in "${bins[@]}"; do
    s=$(cpu_s "$b" bench -m "$model" -t 1 -r 2 -p 512 -n 0)
    v=$(awk -v s="$s" 'BEGIN{printf "%.1f", 1536 / s}'); echo "rep $r $b: $s CPU-s, $v tok/CPU-s"
    best[$b]=$(awk -v a="${best[$b]:-0}" -v v="$v" 'BEGIN{print (v > a ? v : a)}')
  done
  s=$(env -u STRATA_CPU /usr/bin/time -f "%U %S" "$LB" -m "$model" -t 1 -r 2 -p 512 -n 0 2>&1 >/dev/null | tail -1 | awk '{print $1 + $2}')
  v=$(awk -v s="$s" 'BEGIN{printf "%.1f", 1536 / s}'); echo "rep $r llama-bench: $s CPU-s, $v tok/CPU-s"
  best[llama]=$(awk -v a="${best[llama]:-0}" -v v="$v" 'BEGIN{print (v > a ? v : a)}')
done
for k in "${!best[@]}"; do
  awk -v k="$k" -v v="${best[$k]}" -v o="$OPS" -v p="$PEAK" 'BEGIN{printf "best %s: %.1f tok/CPU-s = %.1f G ops/s = %.1f%% of %g\n", k, v, v * o, 100 * v * o / p, p}'
done
