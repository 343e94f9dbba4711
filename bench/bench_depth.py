#!/usr/bin/env python3
"""Strata against llama.cpp's llama-bench at several context depths.

    python3 bench/bench_depth.py --model models/SmolLM2-135M-Instruct.Q4_1.gguf
    python3 bench/bench_depth.py --long             # + pp512 @ 16k/32k, tg128 @ 8192
    python3 bench/bench_depth.py --tests pp512@0,pp512@4096,tg128@0,tg128@4096

Tests are llama-bench's: ppN@D = N prompt tokens evaluated on top of D
tokens already in the cache (the D are prefilled untimed), tgN@D = N
single-token steps after D tokens; tok/s = N / time. Both engines get the
same GGUF, thread count and tests, one repetition per process start, and
the runs interleave: rep 1 of test 1 on Strata, then on llama-bench, then
test 2, ...; the next rep starts with llama-bench, so slow drift in the
machine's load hits both alike. Each process does its own untimed warm-up.
Prints the machine, load average before and after, versions and one table:
mean ± sd (sample sd over the reps) per engine and their ratio (above 1:
Strata faster). --json FILE saves every run.

Strata: `strata bench -m M -t T -r 1 -d D -p N -n 0 --json` (or -p 0 -n N).
llama-bench: `llama-bench -m M -t T -r 1 -d D -p N -n 0 -o json` with its
defaults otherwise (batch 2048, ubatch 512, F16 KV, flash attention auto,
repack on). Built by scripts/build-llama-bench.sh (make llama-bench).
Does not pin CPUs or frequencies: on a shared machine read the sd and the
load average before trusting a ratio.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from machine import describe as machine, loadavg

DEFAULT_TESTS = "pp512@0,pp512@4096,tg128@0"
LONG_TESTS = "tg128@8192,pp512@16384,pp512@32768"


def parse_tests(spec):
    out = []
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        name, _, depth = item.partition("@")
        kind, n = name[:2], name[2:]
        if kind not in ("pp", "tg") or not n.isdigit() or not (depth or "0").isdigit():
            sys.exit(f"bad test {item!r}: want ppN@D or tgN@D")
        out.append((kind, int(n), int(depth or 0)))
    return out


def label(t):
    kind, n, d = t
    return f"{kind}{n}" + (f" @ d{d}" if d else "")


def run(cmd, timeout, env=None):
    """(stdout, error or None); env: variables set for this command only."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                           env=dict(os.environ, **env) if env else None)
    except subprocess.TimeoutExpired:
        return "", f"timed out after {timeout} s"
    except OSError as e:
        return "", str(e)
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
        return "", f"exit {p.returncode}: " + " | ".join(tail)
    return p.stdout, None


def strata_once(args, t, binary=None, env=None):
    kind, n, d = t
    cmd = [binary or args.strata, "bench", "-m", args.model, "-t", str(args.threads), "-r", "1", "-d", str(d),
           "-p", str(n if kind == "pp" else 0), "-n", str(n if kind == "tg" else 0), "--json"]
    out, err = run(cmd, args.timeout, env)
    if err:
        return None, err
    for line in reversed(out.strip().splitlines()):
        if line.startswith("{"):
            try:
                return float(json.loads(line)[kind]["mean"]), None
            except (ValueError, KeyError, TypeError) as e:
                return None, f"bad JSON: {e}"
    return None, "no JSON line"


def llama_once(args, t):
    kind, n, d = t
    cmd = [args.llama_bench, "-m", args.model, "-t", str(args.threads), "-r", "1", "-d", str(d),
           "-p", str(n if kind == "pp" else 0), "-n", str(n if kind == "tg" else 0), "-o", "json"]
    cmd += args.llama_args.split()
    out, err = run(cmd, args.timeout)
    if err:
        return None, err
    try:
        rows = json.loads(out)
        return float(rows[0]["avg_ts"]), None
    except (ValueError, KeyError, IndexError, TypeError) as e:
        return None, f"bad JSON: {e}"


def summary(xs):
    if not xs:
        return None
    return {"mean": statistics.fmean(xs), "sd": statistics.stdev(xs) if len(xs) > 1 else 0.0, "runs": xs}


def cell(s):
    return f"{s['mean']:.2f} ± {s['sd']:.2f}" if s else "-"


def llama_version(args):
    vf = os.path.join(os.path.dirname(args.llama_bench), "VERSION")
    try:
        with open(vf) as f:
            return f.readline().strip()
    except OSError:
        return "?"


def default_llama_bench():
    """The peer at Strata's level: with STRATA_CPU=avx2, llama.cpp built for
    AVX2 only, so neither engine uses AVX-512 (falls back to the native build)."""
    native = "build/llama-bench/llama-bench"
    avx2 = "build/llama-bench-avx2/llama-bench"
    if os.environ.get("STRATA_CPU") == "avx2" and os.path.exists(avx2):
        return avx2
    return native


def main():
    ap = argparse.ArgumentParser(description="Strata vs llama-bench at context depths")
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tests", default=DEFAULT_TESTS, help=f"comma list of ppN@D / tgN@D ({DEFAULT_TESTS})")
    ap.add_argument("--long", action="store_true", help=f"add {LONG_TESTS} (slow on 2 cores)")
    ap.add_argument("--strata", default="./strata")
    ap.add_argument("--strata-base", metavar="BINARY",
                    help="another strata binary (say, an older commit) run as a third engine, 'strata-base'")
    ap.add_argument("--base-env", metavar="VAR=VALUE", action="append", default=[],
                    help="set for strata-base only, e.g. --strata-base ./strata --base-env STRATA_CPU=avx512 "
                         "(the same binary at another kernel level)")
    ap.add_argument("--llama-args", default="", help="more llama-bench options, e.g. '-fa on'")
    ap.add_argument("--llama-bench", default=default_llama_bench(),
                    help="default: build/llama-bench/llama-bench, or with STRATA_CPU=avx2 the AVX2-only "
                         "build/llama-bench-avx2/llama-bench (LLAMA_CPU=avx2 make llama-bench) when it exists")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds per process")
    ap.add_argument("--skip-strata", action="store_true")
    ap.add_argument("--skip-llamacpp", action="store_true")
    ap.add_argument("--json", metavar="FILE", help="also write every run as JSON")
    args = ap.parse_args()
    if not os.path.exists(args.model):
        sys.exit(f"model {args.model} not found: run `make model` first")
    tests = parse_tests(args.tests + ("," + LONG_TESTS if args.long else ""))
    engines = []
    if not args.skip_strata:
        engines.append(("strata", strata_once) if os.path.exists(args.strata)
                       else ("strata", None))
    if args.strata_base:
        base_env = dict(kv.split("=", 1) for kv in args.base_env)
        engines.append(("strata-base", (lambda a, t: strata_once(a, t, args.strata_base, base_env))
                        if os.path.exists(args.strata_base) else None))
    if not args.skip_llamacpp:
        engines.append(("llama.cpp", llama_once) if os.path.exists(args.llama_bench)
                       else ("llama.cpp", None))
    load_before, t_start = loadavg(), time.time()
    runs = {(e, label(t)): [] for e, _ in engines for t in tests}
    errors = {}
    for rep in range(args.reps):
        for t in tests:
            order = engines if rep % 2 == 0 else list(reversed(engines))
            for name, fn in order:
                if fn is None or (name, label(t)) in errors:
                    continue
                v, err = fn(args, t)
                print(f"rep {rep + 1} {label(t)} {name}: " + (f"{v:.2f} tok/s" if v is not None else err),
                      file=sys.stderr, flush=True)
                if v is None:
                    errors[(name, label(t))] = err
                else:
                    runs[(name, label(t))].append(v)
    load_after = loadavg()
    base = bool(args.strata_base)
    print(f"machine: {machine()}")
    print(f"model:   {args.model}")
    print(f"threads: {args.threads}, reps: {args.reps} (interleaved), wall {time.time() - t_start:.0f} s")
    print(f"load average (1/5/15 min): before {load_before}, after {load_after}")
    print(f"llama.cpp: {args.llama_bench} ({llama_version(args)})")
    print(f"strata ISA level: {os.environ.get('STRATA_CPU') or 'highest the CPU has'} (STRATA_CPU)")
    if base:
        print(f"strata-base: {args.strata_base} {' '.join(args.base_env)}")
    if args.llama_args:
        print(f"llama-bench options: {args.llama_args}")
    for name, fn in engines:
        if fn is None:
            print(f"{name}: not found ({ {'strata': args.strata, 'strata-base': args.strata_base}.get(name, args.llama_bench)})")
    for (name, test), err in errors.items():
        print(f"{name} {test}: {err}")
    rows = [("test", "strata tok/s", "llama.cpp tok/s", "ratio")
            + (("strata-base tok/s", "strata / base") if base else ())]
    result = []
    for t in tests:
        s, l = summary(runs.get(("strata", label(t)), [])), summary(runs.get(("llama.cpp", label(t)), []))
        b = summary(runs.get(("strata-base", label(t)), []))
        r = f"{s['mean'] / l['mean']:.2f}" if s and l and l["mean"] else "-"
        rb = f"{s['mean'] / b['mean']:.2f}" if s and b and b["mean"] else "-"
        rows.append((label(t), cell(s), cell(l), r) + ((cell(b), rb) if base else ()))
        result.append({"test": label(t), "strata": s, "llama.cpp": l, "strata-base": b})
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for i, r in enumerate(rows):
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")
        if i == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine(), "model": args.model, "threads": args.threads,
                       "strata_cpu": os.environ.get("STRATA_CPU", ""),
                       "load_before": load_before, "load_after": load_after,
                       "llama.cpp": llama_version(args), "results": result,
                       "errors": {f"{k[0]} {k[1]}": v for k, v in errors.items()}}, f, indent=1)
    return 0 if any(runs.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
