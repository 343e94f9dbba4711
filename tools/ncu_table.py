#!/usr/bin/env python3
"""ncu_table.py - where a GPU run's time goes, from Nsight Compute's CSV.

Reads what `ncu --csv --print-units base --metrics gpu__time_duration.sum
--log-file FILE PROGRAM` wrote (one row per kernel launch) and prints a
short table: each kernel (its name without the argument list), its
launches, the microseconds they took in all and on average, and its share
of the whole; with --passes N also the microseconds per pass (a decode
step, a prefill), so runs of different lengths compare.

    tools/ncu_table.py --passes 17 --title "decode" ncu.csv

ncu runs each kernel alone with its clocks fixed: the sums are the
kernels' own time, not the run's (no launch gaps, no overlap).
"""
import argparse
import csv
import re
import sys
from collections import defaultdict


def short_name(name):
    """`void k_attn_seg<16>(float *, ...)` -> `k_attn_seg<16>`."""
    name = re.sub(r"^void\s+", "", name.strip())
    depth, out = 0, []
    for ch in name:  # cut at the argument list's "(" (templates may hold parentheses)
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            break
        out.append(ch)
    return "".join(out)


def read_launches(path):
    """(kernel name, nanoseconds) of each launch in ncu's CSV."""
    with open(path, newline="") as f:
        lines = [ln for ln in f if ln.startswith('"')]  # ncu's own messages start with ==
    rows = csv.DictReader(lines)
    out = []
    for r in rows:
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = r.get("Metric Unit", "nsecond")
        scale = {"nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9}.get(unit, 1.0)
        out.append((short_name(r["Kernel Name"]), float(r["Metric Value"].replace(",", "")) * scale))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--passes", type=int, default=0, help="passes in the run: adds microseconds per pass")
    ap.add_argument("--title", default="")
    ap.add_argument("--top", type=int, default=20)
    a = ap.parse_args()
    launches = read_launches(a.csv)
    if not launches:
        print(f"ncu_table: no kernel times in {a.csv}", file=sys.stderr)
        return 1
    count, total = defaultdict(int), defaultdict(float)
    for name, ns in launches:
        count[name] += 1
        total[name] += ns
    whole = sum(total.values())
    print(f"== {a.title or a.csv}: {len(launches)} launches, {whole / 1e3:.1f} us of kernels"
          + (f", {whole / 1e3 / a.passes:.1f} us a pass" if a.passes else ""))
    print(f"{'kernel':<40} {'launches':>8} {'us all':>10} {'us mean':>9} {'share':>6}" + ("  us/pass" if a.passes else ""))
    for name in sorted(total, key=total.get, reverse=True)[: a.top]:
        line = f"{name[:40]:<40} {count[name]:>8} {total[name] / 1e3:>10.1f} {total[name] / 1e3 / count[name]:>9.2f} {total[name] / whole:>6.1%}"
        if a.passes:
            line += f"  {total[name] / 1e3 / a.passes:>7.1f}"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
