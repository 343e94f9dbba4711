#!/usr/bin/env python3
"""Strata against llama.cpp's llama-bench at several context depths.

    python3 bench/bench_depth.py --model models/SmolLM2-135M-Instruct.Q4_1.gguf
    python3 bench/bench_depth.py --long             # + pp512 @ 16k/32k, tg128 @ 8192
    python3 bench/bench_depth.py --tests pp512@0,pp512@4096,tg128@0,tg128@4096

Tests are llama-bench's: ppN@D = N prompt tokens evaluated on top of D
tokens already in the cache (the D are prefilled untimed), tgN@D = N
single-token steps after D tokens; tok/s = N / time. ppN+tgM@D measures
both in one process per engine (the table still has the two rows): the D
tokens are prefilled once (llama-bench keeps the depth's state for its
second test), which halves the untimed work of big models at depth; the
rows' wall and peak RSS are then that one process's. `load` is the wall
time of a process that opens the model and evaluates one token (pp1,
after each engine's own warm-up): start-up cost, reported in seconds.
Every process runs under /usr/bin/time: each row also gives the
processes' mean wall time and largest peak resident memory. Both engines get the
same GGUF, thread count and tests, one repetition per process start, and
the runs interleave: rep 1 of test 1 on Strata, then on llama-bench, then
test 2, ...; the next rep starts with llama-bench, so slow drift in the
machine's load hits both alike. Each process does its own untimed warm-up.
Prints the machine, load average before and after, versions and one table:
mean ± sd (sample sd over the reps; the best rep in brackets) per engine
and the ratio of the means (above 1: Strata faster). --json FILE saves every run.

Strata: `strata bench -m M -t T -r 1 -d D -p N -n 0 --json` (or -p 0 -n N),
plus --strata-args (e.g. '--kv-type q8_0', with --llama-args '-fa on -ctk
q8_0 -ctv q8_0' for the peer).
llama-bench: `llama-bench -m M -t T -r 1 -d D -p N -n 0 -o json` with its
defaults otherwise (batch 2048, ubatch 512, F16 KV, flash attention auto,
repack on). Built by scripts/build-llama-bench.sh (make llama-bench).
Does not pin CPUs or frequencies: on a shared machine read the sd and the
load average before trusting a ratio.

--peak adds the fraction of the CPU's int8 dot-product peak per pp row:
`strata bench --peak --json -t T` (backend/peak.h: independent VPDPBUSD
chains) runs before and after the reps; a row's int8 ops/s is tok/s times
the model's weight multiply-adds per token x 2 (every 2-D `blk.*` tensor
of the GGUF: the layers' matmuls; the embedding lookup, the output head,
which pp runs for its last token only, and attention are left out; dense
models only), divided by the best AVX-512 VNNI peak seen at T threads
(--peak-gops G: a fixed denominator instead, e.g. a quiet machine's),
whatever STRATA_CPU asks of Strata: the denominator is the machine's.
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
        pp, plus, tg = name.partition("+")
        if plus:  # ppN+tgM@D: both in one process, the depth prefilled once
            if pp[:2] != "pp" or tg[:2] != "tg" or not pp[2:].isdigit() or not tg[2:].isdigit() \
                    or not (depth or "0").isdigit():
                sys.exit(f"bad test {item!r}: want ppN+tgM@D")
            out.append(("pptg", (int(pp[2:]), int(tg[2:])), int(depth or 0)))
            continue
        kind, n = name[:2], name[2:]
        if name == "load":
            kind, n = "load", "1"
        if kind not in ("pp", "tg", "load") or not n.isdigit() or not (depth or "0").isdigit():
            sys.exit(f"bad test {item!r}: want ppN@D, tgN@D, ppN+tgM@D or load")
        out.append((kind, int(n), int(depth or 0)))
    return out


def parts(t):
    """The tests one process measures: a ppN+tgM@D test is ppN@D and tgM@D."""
    kind, n, d = t
    return [("pp", n[0], d), ("tg", n[1], d)] if kind == "pptg" else [t]


def label(t):
    kind, n, d = t
    if kind == "load":
        return "load"
    name = f"pp{n[0]}+tg{n[1]}" if kind == "pptg" else f"{kind}{n}"
    return name + (f" @ d{d}" if d else "")


TIME = "/usr/bin/time"
PROC = []  # (wall s, peak RSS KiB, CPU s, major page faults) of the last process run, for the caller


def run(cmd, timeout, env=None):
    """(stdout, error or None); env: variables set for this command only.
    The process's wall time and peak resident memory (from /usr/bin/time,
    when there), its CPU time (user + system) and major page faults (pages
    read from disk: a model file that does not stay in the page cache) go to PROC."""
    timed = os.path.exists(TIME)
    if timed:
        cmd = [TIME, "-f", "BENCH_TIME %e %M %U %S %F"] + cmd
    PROC.clear()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                           env=dict(os.environ, **env) if env else None)
    except subprocess.TimeoutExpired:
        return "", f"timed out after {timeout} s"
    except OSError as e:
        return "", str(e)
    for line in p.stderr.splitlines():
        if line.startswith("BENCH_TIME "):
            wall, rss, user, sys_s, major = line.split()[1:6]
            PROC.append((float(wall), int(rss), float(user) + float(sys_s), int(major)))
    if p.returncode != 0:
        tail = [ln for ln in (p.stderr or p.stdout).strip().splitlines() if not ln.startswith("BENCH_TIME")][-3:]
        return "", f"exit {p.returncode}: " + " | ".join(tail)
    return p.stdout, None


def test_args(t):
    """(-p, -n) of one test: load evaluates one prompt token."""
    kind, n, _ = t
    if kind == "load":
        return "1", "0"
    if kind == "pptg":
        return str(n[0]), str(n[1])
    return str(n if kind == "pp" else 0), str(n if kind == "tg" else 0)


def values(speeds):
    """A run's numbers from [(test, tok/s)]: {label: tok/s, or for load the
    process's wall seconds}, or (None, error)."""
    if any(q[0] == "load" for q, _ in speeds) and not PROC:
        return None, "no /usr/bin/time"
    return {label(q): PROC[0][0] if q[0] == "load" else v for q, v in speeds}, None


def strata_once(args, t, binary=None, env=None):
    kind, n, d = t
    p, g = test_args(t)
    cmd = [binary or args.strata, "bench", "-m", args.model, "-t", str(args.threads), "-r", "1", "-d", str(d),
           "-p", p, "-n", g, "--json"] + args.strata_args.split()
    out, err = run(cmd, args.timeout, env)
    if err:
        return None, err
    for line in reversed(out.strip().splitlines()):
        if line.startswith("{"):
            try:
                obj = json.loads(line)
                return values([(q, float(obj["pp" if q[0] == "load" else q[0]]["mean"])) for q in parts(t)])
            except (ValueError, KeyError, TypeError) as e:
                return None, f"bad JSON: {e}"
    return None, "no JSON line"


def llama_once(args, t):
    kind, n, d = t
    p, g = test_args(t)
    cmd = [args.llama_bench, "-m", args.model, "-t", str(args.threads), "-r", "1", "-d", str(d),
           "-p", p, "-n", g, "-o", "json"] + args.llama_args.split()
    out, err = run(cmd, args.timeout)
    if err:
        return None, err
    try:
        rows = json.loads(out)
        got = []
        for q in parts(t):  # its row: the test's (n_prompt, n_gen)
            want = tuple(int(a) for a in test_args(q))
            row = next(r for r in rows if (int(r["n_prompt"]), int(r["n_gen"])) == want)
            got.append((q, float(row["avg_ts"])))
        return values(got)
    except (ValueError, KeyError, StopIteration, TypeError) as e:
        return None, f"bad JSON: {e!r}"


def summary(xs):
    if not xs:
        return None
    return {"mean": statistics.fmean(xs), "sd": statistics.stdev(xs) if len(xs) > 1 else 0.0, "runs": xs}


def proc_cell(ps):
    """Mean wall seconds and the largest peak RSS of a row's processes."""
    if not ps:
        return "-"
    return f"{statistics.fmean(q[0] for q in ps):.0f} s, {max(q[1] for q in ps) / 2**20:.1f} GiB"


def cell(s, seconds=False):
    """mean ± sd, and the best rep where there are several (the fastest:
    the most tok/s, the fewest seconds): on a host shared with other
    tenants one slow rep moves the mean, the best moves less."""
    if not s:
        return "-"
    best = f" (best {(min if seconds else max)(s['runs']):.2f})" if len(s["runs"]) > 1 else ""
    return f"{s['mean']:.2f} ± {s['sd']:.2f}{best}"


def llama_version(args):
    """The VERSION file the project's peer build writes beside llama-bench,
    else what llama-bench says of itself (a build from a source
    distribution has no git: its build number and commit may be unknown)."""
    vf = os.path.join(os.path.dirname(args.llama_bench), "VERSION")
    try:
        with open(vf) as f:
            return f.readline().strip()
    except OSError:
        pass
    try:
        p = subprocess.run([args.llama_bench, "--version"], capture_output=True, text=True, timeout=30)
        lines = (p.stdout + p.stderr).strip().splitlines()
        return lines[0].removeprefix("version: ") if lines else "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


def peak_gops(args):
    """Peaks at args.threads threads, G int8 ops/s by kind, from strata bench --peak."""
    env = {k: v for k, v in os.environ.items() if k != "STRATA_CPU"}  # every kind, whatever level is benched
    try:
        p = subprocess.run([args.strata, "bench", "--peak", "--json", "-t", str(args.threads)],
                           capture_output=True, text=True, timeout=args.timeout, env=env)
        out, err = p.stdout, None if p.returncode == 0 else f"exit {p.returncode}"
    except (OSError, subprocess.TimeoutExpired) as e:
        out, err = "", str(e)
    if err:
        print(f"peak: {err}", file=sys.stderr)
        return {}
    for line in reversed(out.strip().splitlines()):
        if line.startswith("{"):
            obj = json.loads(line)
            return {k: v.get(str(args.threads), 0.0) for k, v in obj["peak"].items()}
    return {}


def matmul_ops_per_token(model):
    """2 x the multiply-adds of every 2-D blk.* weight (the layers' matmuls), or None."""
    try:
        from gguf import GGUFReader
    except ImportError:
        return None
    r = GGUFReader(model)
    n = 0
    for t in r.tensors:
        if not t.name.startswith("blk."):
            continue
        dims = [int(d) for d in t.shape if int(d) > 1]
        if len(dims) == 3:  # MoE expert stacks: not what one token runs
            return None
        if len(dims) == 2:
            n += dims[0] * dims[1]
    return 2 * n


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
    ap.add_argument("--tests", default=DEFAULT_TESTS, help=f"comma list of ppN@D / tgN@D / ppN+tgM@D / load ({DEFAULT_TESTS})")
    ap.add_argument("--long", action="store_true", help=f"add {LONG_TESTS} (slow on 2 cores)")
    ap.add_argument("--strata", default="./strata")
    ap.add_argument("--strata-base", metavar="BINARY",
                    help="another strata binary (say, an older commit) run as a third engine, 'strata-base'")
    ap.add_argument("--base-env", metavar="VAR=VALUE", action="append", default=[],
                    help="set for strata-base only, e.g. --strata-base ./strata --base-env STRATA_CPU=avx512 "
                         "(the same binary at another kernel level)")
    ap.add_argument("--llama-bench", default=default_llama_bench(),
                    help="default: build/llama-bench/llama-bench, or with STRATA_CPU=avx2 the AVX2-only "
                         "build/llama-bench-avx2/llama-bench (LLAMA_CPU=avx2 make llama-bench) when it exists")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds per process")
    ap.add_argument("--llama-args", default="", help="more llama-bench arguments, e.g. '--repack 0'")
    ap.add_argument("--strata-args", default="",
                    help="more `strata bench` arguments (both Strata binaries), e.g. '--kv-type q8_0' "
                         "(with --llama-args '-fa on -ctk q8_0 -ctv q8_0')")
    ap.add_argument("--skip-strata", action="store_true")
    ap.add_argument("--skip-llamacpp", action="store_true")
    ap.add_argument("--json", metavar="FILE", help="also write every run as JSON")
    ap.add_argument("--peak", action="store_true", help="add each pp row's fraction of the int8 peak (strata bench --peak)")
    ap.add_argument("--peak-gops", type=float, help="with --peak: this peak (G int8 ops/s at --threads) instead of the measured one")
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
    peaks = [peak_gops(args)] if args.peak else []
    load_before, t_start = loadavg(), time.time()
    row_tests = [q for t in tests for q in parts(t)]  # the table's rows
    runs = {(e, label(q)): [] for e, _ in engines for q in row_tests}
    procs = {k: [] for k in runs}  # (wall s, peak RSS KiB) per process; a ppN+tgM process counts in both rows
    errors = {}
    for rep in range(args.reps):
        for t in tests:
            order = engines if rep % 2 == 0 else list(reversed(engines))
            for name, fn in order:
                if fn is None or (name, label(t)) in errors:
                    continue
                vs, err = fn(args, t)
                proc = (f" (wall {PROC[0][0]:.0f} s, CPU {PROC[0][2]:.0f} s, peak RSS {PROC[0][1] / 2**20:.2f} GiB,"
                        f" {PROC[0][3]} major faults)" if PROC else "")
                got = ", ".join(f"{q} {v:.2f} {'s' if q == 'load' else 'tok/s'}" for q, v in vs.items()) if vs else err
                print(f"rep {rep + 1} {label(t)} {name}: {got}{proc}", file=sys.stderr, flush=True)
                for q in parts(t):
                    procs[(name, label(q))] += PROC
                if vs is None:
                    errors[(name, label(t))] = err
                else:
                    for q, v in vs.items():
                        runs[(name, q)].append(v)
    load_after = loadavg()
    if args.peak:
        peaks.append(peak_gops(args))
    base = bool(args.strata_base)
    vnni = "avx512-vnni vpdpbusd zmm"
    peak = args.peak_gops or max([p.get(vnni, 0.0) for p in peaks] or [0.0])
    ops = matmul_ops_per_token(args.model) if args.peak else None
    print(f"machine: {machine()}")
    print(f"model:   {args.model}")
    print(f"threads: {args.threads}, reps: {args.reps} (interleaved), wall {time.time() - t_start:.0f} s")
    print(f"load average (1/5/15 min): before {load_before}, after {load_after}")
    print(f"llama.cpp: {args.llama_bench} ({llama_version(args)}) {args.llama_args}")
    print(f"strata ISA level: {os.environ.get('STRATA_CPU') or 'highest the CPU has'} (STRATA_CPU)"
          + (f"; strata args: {args.strata_args}" if args.strata_args else ""))
    if base:
        print(f"strata-base: {args.strata_base} {' '.join(args.base_env)}")
    if args.peak:
        seen = "; ".join(", ".join(f"{k} {v:.0f}" for k, v in p.items()) for p in peaks)
        print(f"int8 peak at {args.threads} threads, G ops/s: {peak:.0f}"
              + (" (--peak-gops)" if args.peak_gops else "") + f"; measured before / after: {seen}")
        print("matmul ops per token: " + (f"{ops / 1e9:.4f} G" if ops else "unknown (MoE or no gguf package)"))
    frac = lambda s: f"{100 * s['mean'] * ops / 1e9 / peak:.1f}%" if s and ops and peak else "-"
    for name, fn in engines:
        if fn is None:
            print(f"{name}: not found ({ {'strata': args.strata, 'strata-base': args.strata_base}.get(name, args.llama_bench)})")
    for (name, test), err in errors.items():
        print(f"{name} {test}: {err}")
    rows = [("test", "strata tok/s", "llama.cpp tok/s", "ratio")
            + (("strata-base tok/s", "strata / base") if base else ())
            + ("strata wall, peak RSS", "llama.cpp wall, peak RSS")
            + (("strata % of peak", "llama.cpp % of peak") + (("base % of peak",) if base else ()) if args.peak else ())]
    result = []
    for t in row_tests:
        s, l = summary(runs.get(("strata", label(t)), [])), summary(runs.get(("llama.cpp", label(t)), []))
        b = summary(runs.get(("strata-base", label(t)), []))
        r = f"{s['mean'] / l['mean']:.2f}" if s and l and l["mean"] else "-"
        if t[0] == "load":  # seconds: above 1 still means Strata faster
            r = f"{l['mean'] / s['mean']:.2f}" if s and l and s["mean"] else "-"
        rb = f"{s['mean'] / b['mean']:.2f}" if s and b and b["mean"] else "-"
        pr = [proc_cell(procs.get((e, label(t)), [])) for e in ("strata", "llama.cpp")]
        pk = t[0] == "pp" and args.peak
        sec = t[0] == "load"
        rows.append((label(t), cell(s, sec), cell(l, sec), r) + ((cell(b, sec), rb) if base else ()) + tuple(pr)
                    + ((frac(s) if pk else "-", frac(l) if pk else "-") + ((frac(b) if pk else "-",) if base else ())
                       if args.peak else ()))
        result.append({"test": label(t), "strata": s, "llama.cpp": l, "strata-base": b,
                       "procs": {e: procs.get((e, label(t)), []) for e in ("strata", "llama.cpp")}})
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
