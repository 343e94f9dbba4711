#!/usr/bin/env python3
"""Runs each libFuzzer target (build-fuzz/fuzz-<target>, `make
fuzz-targets`) for a bounded time from its committed seed corpus, one at a
time, and prints executions, coverage and findings per target. New inputs
go to a scratch corpus, not the committed one; crash files to --out."""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
ENV = {"ASAN_OPTIONS": "detect_leaks=1:allocator_may_return_null=1", "UBSAN_OPTIONS": "print_stacktrace=1"}
MAX_LEN = {"gguf": 65536, "tok": 4096, "tmpl": 16384, "json": 16384, "diskhdr": 8192}


def run_target(name, seconds, out):
    corpus = os.path.join(ROOT, "tests", "fuzz", "corpus", name)
    scratch = tempfile.mkdtemp(prefix=f"strata-libfuzzer-{name}-")
    crashes = os.path.join(out, name)
    os.makedirs(crashes, exist_ok=True)
    gen = os.path.join(ROOT, "tests", "data", "gen")  # well-formed GGUF seeds: the generated test models
    seeds = [corpus] + ([os.path.join(gen, "models"), os.path.join(gen, "tok")] if name == "gguf" else [])
    argv = [os.path.join(ROOT, "build-fuzz", f"fuzz-{name}"), scratch, *seeds, f"-max_total_time={seconds}",
            f"-max_len={MAX_LEN.get(name, 4096)}", "-timeout=20", "-rss_limit_mb=4096", "-print_final_stats=1",
            f"-artifact_prefix={crashes}/", "-seed=16"]
    p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, errors="replace",
                       env={**os.environ, **ENV}, timeout=seconds + 600)
    shutil.rmtree(scratch, ignore_errors=True)
    log = p.stderr
    with open(os.path.join(out, f"{name}.log"), "w") as f:
        f.write(log)
    execs = re.search(r"stat::number_of_executed_units:\s*(\d+)", log)
    cov = re.findall(r"cov: (\d+) ft: (\d+)", log)
    found = sorted(os.listdir(crashes))
    return {"target": name, "execs": int(execs.group(1)) if execs else 0, "cov": cov[-1][0] if cov else "?",
            "ft": cov[-1][1] if cov else "?", "rc": p.returncode, "findings": found}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("targets", nargs="+")
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--out", default=os.path.join(ROOT, "build-fuzz", "findings"))
    a = ap.parse_args()
    rows = [run_target(t, a.seconds, a.out) for t in a.targets]
    print(f"{'target':<10}{'seconds':>8}{'execs':>12}{'cov':>7}{'ft':>7}{'exit':>6}  findings")
    for r in rows:
        print(f"{r['target']:<10}{a.seconds:>8}{r['execs']:>12}{r['cov']:>7}{r['ft']:>7}{r['rc']:>6}  "
              f"{', '.join(r['findings']) or 'none'}")
    print(f"logs and crash inputs: {a.out}")
    return 1 if any(r["rc"] or r["findings"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
