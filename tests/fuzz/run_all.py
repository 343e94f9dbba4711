#!/usr/bin/env python3
"""Runs the five harnesses and prints one summary table; exit 1 on any
finding. --short is the seeded slice `make test` runs (seconds each);
--long is `make fuzz` (tens of thousands of cases, against build-asan/).
Counts and seconds can be changed per harness, e.g. --requests 500."""
import argparse
import os
import shutil
import signal
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import disk_faults  # noqa: E402
import gguf_mutator  # noqa: E402
import harness  # noqa: E402
import request_fuzzer  # noqa: E402
import template_mutator  # noqa: E402

# (count, seconds) per harness; the time limit ends a harness early.
SHORT = {"requests": (150, 10), "gguf": (40, 10), "layouts": (12, 20), "template": (150, 8), "disk": (6, 20),
         "sigkills": 1}
LONG = {"requests": (20000, 1500), "gguf": (800, 400), "layouts": (400, 900), "template": (5000, 300),
        "disk": (98, 600), "sigkills": 30}
HARNESSES = ("requests", "gguf", "layouts", "template", "disk")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--short", action="store_true", help="the seeded slice (default)")
    mode.add_argument("--long", action="store_true", help="the long run")
    ap.add_argument("--bin", default="build-asan", help="folder with strata and fuzz-tmpl (build-asan)")
    ap.add_argument("--strata", help="strata binary (default: BIN/strata)")
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--out", help="where failing cases and server logs go (default: a temp folder)")
    ap.add_argument("--only", nargs="*", choices=HARNESSES)
    for name in HARNESSES:
        ap.add_argument(f"--{name}", type=int, metavar="N", help=f"cases for the {name} harness")
    return ap.parse_args()


def main():
    # SIGTERM unwinds like Ctrl-C, so every server started gets stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    a = parse_args()
    plan = dict(LONG if a.long else SHORT)
    for name in HARNESSES:
        if getattr(a, name) is not None:
            plan[name] = (getattr(a, name), plan[name][1] * max(1, getattr(a, name) // max(1, plan[name][0])))
    bin_dir = os.path.join(harness.ROOT, a.bin) if not os.path.isabs(a.bin) else a.bin
    strata = os.path.abspath(a.strata) if a.strata else os.path.join(bin_dir, "strata")
    out = a.out or tempfile.mkdtemp(prefix="strata-fuzz-out-")
    only = a.only or list(HARNESSES)
    print(f"fuzz: {'long' if a.long else 'short'} run, seed {a.seed}, strata {strata}, output {out}", flush=True)
    runs = {
        "requests": lambda: request_fuzzer.run(strata, a.seed, *plan["requests"], out),
        "gguf": lambda: gguf_mutator.run(strata, a.seed, *plan["gguf"], out, real_every=20 if a.long else 0),
        "layouts": lambda: gguf_mutator.run_layouts(strata, a.seed, *plan["layouts"], out),
        "template": lambda: template_mutator.run(bin_dir, a.seed, *plan["template"], out),
        "disk": lambda: disk_faults.run(strata, a.seed, *plan["disk"], out, sigkills=plan["sigkills"]),
    }
    tallies = []
    for name in only:
        tallies.append(runs[name]().done())
        c = tallies[-1].counts
        print(f"fuzz: {name}: {c['cases']} cases, {tallies[-1].bad()} findings, {tallies[-1].seconds():.0f} s", flush=True)
    harness.print_table(tallies)
    bad = sum(t.bad() for t in tallies)
    print(f"fuzz: {'FAILED' if bad else 'ok'}: {sum(t.counts['cases'] for t in tallies)} cases, {bad} findings")
    if not bad and not a.out:
        shutil.rmtree(out, ignore_errors=True)  # server logs only: nothing to look at
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
