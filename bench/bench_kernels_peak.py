#!/usr/bin/env python3
"""Per-kernel matmul rate against the CPU's int8 peak (issue 29).

    python3 bench/bench_kernels_peak.py [--strata ./strata] [--base OLD] [--reps 3] [--levels avx512,avx2]
    python3 bench/bench_kernels_peak.py --levels amx --base-level avx512   # AMX vs AVX-512, one binary
    python3 bench/bench_kernels_peak.py --levels amx,avx512 --base OLD --types q4_k,q6_k   # some types only

For each weight format and shape prefill runs (SmolLM2's Q4_1, Gemma 3's
Q5_0 / Q8_0 / Q4_K / Q6_K, the qwen35 synthetic's Q4_0, the MoE experts'
Q4_K / Q6_K at ~32 tokens), runs `strata bench-kernels TYPE ROWS K N_TOK
--level L` (one thread, thread CPU time; ops = 2 * rows * k * n_tok) and
prints G int8 ops/s and its fraction of the one-thread peak measured by
`strata bench --peak -t 1` in the same run (VPDPBUSD zmm chains for the
avx512 level; for avx2 both that and VPMADDUBSW chains, the avx2 kernels'
instruction). With --base, an older binary runs each shape too,
interleaved (base, new, base, new ...): best of --reps each; with
--base-level L the base is the same binary at level L instead. The amx
level's rows also get their fraction of the AMX-INT8 TDPBUSD peak (K = 64,
and K = 32: one legacy block per tile product, as that kernel runs it).
Single-thread CPU time hides the other jobs' share of the core but not
their cache and frequency effects: compare rows of one run.
"""
import argparse
import json
import subprocess
import sys

SHAPES = [  # (what, type, rows, k, n_tok)
    ("SmolLM2 attn q, o", "q4_1", 576, 576, 512),
    ("SmolLM2 attn k, v", "q4_1", 192, 576, 512),
    ("SmolLM2 ffn gate, up", "q4_1", 1536, 576, 512),
    ("SmolLM2 ffn down", "q4_1", 576, 1536, 512),
    ("Gemma 3 attn q", "q5_0", 1024, 640, 512),
    ("Gemma 3 attn k, v", "q5_0", 256, 640, 512),
    ("Gemma 3 ffn gate, up", "q5_0", 2048, 640, 512),
    ("Gemma 3 ffn gate, up (Q8_0 layers)", "q8_0", 2048, 640, 512),
    ("Gemma 3 attn out", "q4_k", 640, 1024, 512),
    ("Gemma 3 ffn down", "q4_k", 640, 2048, 512),
    ("Gemma 3 ffn down (Q6_K layers)", "q6_k", 640, 2048, 512),
    ("qwen35 synth ffn gate, up", "q4_0", 3584, 1024, 512),
    ("qwen35 synth ffn down", "q4_0", 1024, 3584, 512),
    ("MoE expert gate, up, 32 tokens", "q4_k", 768, 2048, 32),
    ("MoE expert gate, up, 33 tokens", "q4_k", 768, 2048, 33),
    ("MoE expert down, 32 tokens", "q6_k", 2048, 768, 32),
    ("MoE expert down, 33 tokens", "q6_k", 2048, 768, 33),
]


def kernel_gops(binary, ty, rows, k, n, level):
    out = subprocess.run([binary, "bench-kernels", ty, str(rows), str(k), str(n), "--level", level],
                         capture_output=True, text=True, check=True).stdout
    return float(out.split()[-2])


def peak(binary):
    out = subprocess.run([binary, "bench", "--peak", "--json", "-t", "1"], capture_output=True, text=True,
                         check=True).stdout
    return {k: v["1"] for k, v in json.loads(out.strip().splitlines()[-1])["peak"].items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--strata", default="./strata")
    ap.add_argument("--base", help="an older strata binary, interleaved")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--levels", default="avx512,avx2")
    ap.add_argument("--base-level", help="the base is --strata at this level (e.g. avx512 beside amx)")
    ap.add_argument("--types", help="only these weight types, e.g. q4_k,q6_k")
    args = ap.parse_args()
    pk = peak(args.strata)
    bins = [("base", args.base, None)] if args.base else []
    if args.base_level:
        bins = [(args.base_level, args.strata, args.base_level)]
    bins.append(("new", args.strata, None))
    pk2 = peak(args.strata)
    pk = {k: max(v, pk2.get(k, 0)) for k, v in pk.items()}
    print("one-thread peak, G int8 ops/s (best of two runs): " + ", ".join(f"{k} {v:.0f}" for k, v in pk.items()))
    vnni, madd = pk.get("avx512-vnni vpdpbusd zmm", 0), pk.get("avx2 vpmaddubsw ymm", 0)
    amx64, amx32 = pk.get("amx-int8 tdpbusd k=64", 0), pk.get("amx-int8 tdpbusd k=32", 0)
    head = ["level", "kernel", "type", "rows x k", "n_tok"]
    head += ([f"{n} G ops/s" for n, _, _ in bins]) + ["% of VNNI-512 peak"] + (["% of VPMADDUBSW peak"] if "avx2" in args.levels else [])
    head += ["% of AMX peak (K 64 / K 32)"] if "amx" in args.levels else []
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" for _ in head) + "|")
    for level in args.levels.split(","):
        for what, ty, rows, k, n in SHAPES:
            if args.types and ty not in args.types.split(","):
                continue
            best = {name: 0.0 for name, _, _ in bins}
            for _ in range(args.reps):
                for name, b, lv in bins:
                    best[name] = max(best[name], kernel_gops(b, ty, rows, k, n, lv or level))
            g = best["new"]
            row = [level, what, ty.upper(), f"{rows} x {k}", str(n)] + [f"{best[name]:.1f}" for name, _, _ in bins]
            row.append(f"{100 * g / vnni:.0f}%" if vnni else "-")
            if "avx2" in args.levels:
                row.append(f"{100 * g / madd:.0f}%" if level == "avx2" and madd else "-")
            if "amx" in args.levels:
                row.append(f"{100 * g / amx64:.0f}% / {100 * g / amx32:.0f}%" if level == "amx" and amx64 and amx32 else "-")
            print("| " + " | ".join(row) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
