#!/usr/bin/env python3
"""Strata against llama.cpp on the same GGUF, same threads, same machine.

    python3 bench/bench_vs_llamacpp.py --model models/SmolLM2-135M-Instruct.Q4_1.gguf

Two tests, as llama-bench defines them:
  pp<N>  prompt processing: N prompt tokens evaluated from an empty cache
         (batches of 512), tokens/s = N / time;
  tg<M>  text generation: M single-token evaluations after that prompt,
         tokens/s = M / time.
Each runs --reps times after one untimed warm-up; the table shows mean and
standard deviation and the ratio strata / llama.cpp (above 1: Strata is
faster).

Strata side: `STRATA bench -m MODEL -p N -n M -t T -r R --json`, which
prints one JSON object (its last line of output):
  {"model": ..., "threads": T, "pp": {"n": N, "mean": tok_s, "sd": ...},
   "tg": {"n": M, "mean": tok_s, "sd": ...}}
llama.cpp side: llama-cpp-python in this process (n_batch = n_ubatch =
512, no logits kept except the last, flash attention off, mmap on).
Either side may be missing; the other still runs and the table says why.
Does not: check output quality (tests/ do that) or pin CPU frequency.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from machine import describe

# ---------------------------------------------------------------------------
# Machine
# ---------------------------------------------------------------------------


def machine():
    return describe(with_flags=False)


def load_note():
    """A warning when other work shares the CPU: llama.cpp's OpenMP threads
    spin, so contention can cut its speed by 10x and void the comparison."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        return ""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if load > 0.5 * cores:
        return f"warning: load average {load:.2f} on {cores} cores: other work shares the CPU; timings unreliable"
    return ""


def mean_sd(xs):
    """Summary of per-rep tok/s; max is the least disturbed rep."""
    return {"mean": statistics.fmean(xs), "sd": statistics.stdev(xs) if len(xs) > 1 else 0.0,
            "max": max(xs), "runs": [round(x, 3) for x in xs]}


# ---------------------------------------------------------------------------
# Strata
# ---------------------------------------------------------------------------


def run_strata(args):
    """Result dict (the bench JSON), or {"error": reason}."""
    if not os.path.exists(args.strata):
        return {"error": f"{args.strata} not found: run `make` first"}
    cmd = [args.strata, "bench", "-m", args.model, "-p", str(args.pp), "-n", str(args.tg),
           "-t", str(args.threads), "-r", str(args.reps), "--json"]
    print("strata:", " ".join(cmd), file=sys.stderr)
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"strata bench timed out after {args.timeout} s"}
    except OSError as e:
        return {"error": f"cannot run {args.strata}: {e}"}
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
        return {"error": f"strata bench exited {p.returncode}: " + " | ".join(tail)}
    return parse_strata_json(p.stdout)


def parse_strata_json(out):
    for line in reversed(out.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                return {"error": f"strata bench printed bad JSON: {e}"}
            if isinstance(r, dict) and all(isinstance(r.get(k), dict) and
                                           isinstance(r[k].get("mean"), (int, float))
                                           for k in ("pp", "tg")):
                for k in ("pp", "tg"):
                    r[k].setdefault("sd", 0.0)
                return r
            return {"error": "strata bench JSON lacks pp/tg mean"}
    return {"error": "strata bench printed no JSON object"}


# ---------------------------------------------------------------------------
# llama.cpp
# ---------------------------------------------------------------------------


def bench_tokens(n_vocab, n):
    """Deterministic ordinary token ids (ids 0..99 are often control)."""
    x, out = 12345, []
    for _ in range(n):
        x = (x * 1103515245 + 12345) % (1 << 31)
        out.append(100 + x % (n_vocab - 100))
    return out


def llama_once(llm, toks, tg):
    """(pp seconds, tg seconds) from an empty cache."""
    llm.reset()  # the next eval drops every cached position
    t0 = time.perf_counter()
    llm.eval(toks)
    t1 = time.perf_counter()
    for i in range(tg):
        llm.eval([toks[i % len(toks)]])
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1


def run_llamacpp(args):
    try:
        import llama_cpp
    except ImportError:
        return {"error": "llama-cpp-python not installed: pip install llama-cpp-python"}
    try:
        llm = llama_cpp.Llama(model_path=args.model, n_ctx=args.pp + args.tg + 16,
                              n_threads=args.threads, n_threads_batch=args.threads,
                              n_batch=512, n_ubatch=512, logits_all=False, verbose=False)
    except Exception as e:  # llama-cpp-python raises ValueError, RuntimeError, ...
        return {"error": f"llama.cpp could not load {args.model}: {e}"}
    toks = bench_tokens(llm.n_vocab(), args.pp)
    print(f"llama.cpp: llama-cpp-python {llama_cpp.__version__}, warm-up + {args.reps} reps",
          file=sys.stderr)
    llama_once(llm, toks, min(args.tg, 16))
    pp, tg = [], []
    for _ in range(args.reps):
        a, b = llama_once(llm, toks, args.tg)
        pp.append(args.pp / a)
        tg.append(args.tg / b)
    llm.close()
    return {"version": llama_cpp.__version__, "threads": args.threads,
            "pp": dict(n=args.pp, **mean_sd(pp)), "tg": dict(n=args.tg, **mean_sd(tg))}


# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------


def cell(r, key):
    if "error" in r:
        return "-"
    return f"{r[key]['mean']:.2f} ± {r[key]['sd']:.2f}"


def ratio(s, l, key):
    if "error" in s or "error" in l or not l[key]["mean"]:
        return "-"
    return f"{s[key]['mean'] / l[key]['mean']:.2f}"


def report(args, s, l):
    print(f"machine: {machine()}")
    print(f"model:   {args.model}")
    print(f"threads: {args.threads}, reps: {args.reps}")
    for name, r in (("strata", s), ("llama.cpp", l)):
        if "error" in r:
            print(f"{name}: {r['error']}")
    rows = [("test", "strata tok/s", "llama.cpp tok/s", "ratio")]
    for key, n in (("pp", args.pp), ("tg", args.tg)):
        rows.append((f"{key}{n}", cell(s, key), cell(l, key), ratio(s, l, key)))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for i, r in enumerate(rows):
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")
        if i == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")


def main():
    ap = argparse.ArgumentParser(description="Strata vs llama.cpp: pp and tg tokens/s")
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--pp", type=int, default=512)
    ap.add_argument("--tg", type=int, default=128)
    ap.add_argument("--strata", default="./strata")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds for strata bench")
    ap.add_argument("--skip-strata", action="store_true")
    ap.add_argument("--skip-llamacpp", action="store_true")
    ap.add_argument("--json", metavar="FILE", help="also write both results as JSON")
    args = ap.parse_args()
    if not os.path.exists(args.model):
        sys.exit(f"model {args.model} not found: run `make model` first")
    before = load_note()
    s = {"error": "skipped"} if args.skip_strata else run_strata(args)
    l = {"error": "skipped"} if args.skip_llamacpp else run_llamacpp(args)
    report(args, s, l)
    for note in dict.fromkeys([before, load_note()]):
        if note:
            print(note)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine(), "model": args.model, "strata": s,
                       "llama.cpp": l}, f, indent=1)
    return 0 if "error" not in s or "error" not in l else 1


if __name__ == "__main__":
    sys.exit(main())
