#!/usr/bin/env python3
"""Decode speed with speculative decoding off and on (issue 27), on
copy-heavy agent tasks and on plain chat, with byte-identical output.

    python3 bench/bench_spec.py [--model NAME=PATH ...] [--reps 3] [-- SERVE OPTIONS]
    make bench-spec

One `strata serve --parallel 1` per model. Each task runs --reps times
with speculation off (`"speculative": false`) and on (the default),
interleaved (off, on, then on, off, ...) so that the machine's load, which
other people's builds change from minute to minute, hits both alike. Every
request has a cache salt of its own (a cold prompt, and no reply of an
earlier run replayed into the next prompt). Decode tok/s is the server's
own measure from its --trace line: (generated - 1) / decode_ms (the first
token comes from the prefill and is not decode). The ratio is on/off per
repetition (the two runs next to each other), then the median. Each pair's
output (text and tool calls) must be the same bytes; the table says so.

Tasks:
  file-edit   the model is given a 40-line Python file and asked to write
              it out again with one function renamed (greedy, <= 300 tokens)
  tool-retry  a tool call (write_file with a path and a 12-line body)
              failed; the user asks for the same call again (greedy, tools)
  chat        a short story, nothing in the context to copy (greedy, 200)
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import uuid

import httpx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import machine  # noqa: E402
from bench_cache import last_trace, start, stop  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))

FILE = '''import json
import os


class Store:
    """A tiny key-value store kept in one JSON file."""

    def __init__(self, path):
        self.path = path
        self.data = {}
        if os.path.exists(path):
            with open(path) as f:
                self.data = json.load(f)

    def get(self, key, default=None):
        return self.data.get(key, default)

    def put(self, key, value):
        self.data[key] = value
        self.save()

    def delete(self, key):
        if key in self.data:
            del self.data[key]
            self.save()

    def keys(self):
        return sorted(self.data)

    def save(self):
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.data, f, indent=2)
        os.replace(tmp, self.path)


def open_store(path):
    return Store(path)
'''

BODY = "\n".join(f"line {i}: the quick brown fox jumps over the lazy dog" for i in range(1, 13))
WRITE = {"type": "function", "function": {
    "name": "write_file", "description": "Write text to a file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                   "required": ["path", "content"]}}}
CALL = {"id": "call_1", "type": "function", "function": {
    "name": "write_file", "arguments": json.dumps({"path": "notes/fox.txt", "content": BODY})}}

TASKS = {
    "file-edit": {"messages": [{"role": "user", "content": "Here is store.py:\n\n```python\n" + FILE + "```\n\n"
                                "Write store.py again in full, with the method `keys` renamed to `names`. "
                                "Output only the code."}],
                  "max_tokens": 300, "temperature": 0},
    "tool-retry": {"messages": [{"role": "user", "content": "Save these lines to notes/fox.txt:\n" + BODY},
                                {"role": "assistant", "content": None, "tool_calls": [CALL]},
                                {"role": "tool", "tool_call_id": "call_1", "content": "error: disk busy, try again"},
                                {"role": "user", "content": "It failed. Make exactly the same write_file call again."}],
                   "tools": [WRITE], "max_tokens": 300, "temperature": 0},
    "chat": {"messages": [{"role": "user", "content": "Write a short story about a lighthouse keeper who finds a "
                           "message in a bottle."}], "max_tokens": 200, "temperature": 0},
}


class Server:
    """strata serve --parallel 1 with a trace file and a cache folder of
    its own (bench_cache.py starts it)."""

    def __init__(self, model, extra):
        self.trace = tempfile.NamedTemporaryFile(prefix="strata-spec-trace-", suffix=".jsonl", delete=False).name
        self.cache = tempfile.mkdtemp(prefix="strata-spec-kv-")
        self.proc, self.url = start(model, self.cache, 4096, self.trace, ("--no-cache-disk", *extra))

    def last_trace(self):
        return last_trace(self.trace)

    def stop(self):
        stop(self.proc)
        shutil.rmtree(self.cache, ignore_errors=True)
        os.unlink(self.trace)


def run(srv, body, spec):
    body = {**body, "speculative": spec, "cache_salt": uuid.uuid4().hex}
    r = httpx.post(srv.url + "/v1/chat/completions", json=body, timeout=1800)
    r.raise_for_status()
    m = r.json()["choices"][0]["message"]
    calls = [c["function"] for c in m.get("tool_calls") or []]
    t = srv.last_trace()
    n = t["generated_tokens"]
    return {"out": json.dumps([m.get("content"), calls]), "tokens": n,
            "tok_s": (n - 1) * 1000.0 / t["decode_ms"] if t["decode_ms"] > 0 and n > 1 else 0.0,
            "drafted": t.get("spec", {}).get("drafted", 0), "accepted": t.get("spec", {}).get("accepted", 0)}


def others():
    """What else ran on the machine (the busiest processes but this one's)."""
    out = subprocess.run(["ps", "-eo", "pcpu,comm", "--sort=-pcpu"], capture_output=True, text=True).stdout
    rows = [l.split(None, 1) for l in out.splitlines()[1:] if l.strip()]
    return ", ".join(f"{c.strip()} {p}%" for p, c in rows[:6] if float(p) >= 5.0) or "nothing above 5% CPU"


def bench_model(args, name, path):
    srv = Server(path, args.extra)
    rows = []
    try:
        run(srv, TASKS["chat"], True)  # warm-up: page the weights in
        for task, body in TASKS.items():
            pairs = []
            for rep in range(args.reps):
                order = (False, True) if rep % 2 == 0 else (True, False)
                got = {spec: run(srv, body, spec) for spec in order}
                pairs.append(got)
                print(f"  {name} {task} rep {rep}: off {got[False]['tok_s']:.1f} on {got[True]['tok_s']:.1f} tok/s "
                      f"({got[True]['accepted']}/{got[True]['drafted']} accepted) same={got[False]['out'] == got[True]['out']}",
                      file=sys.stderr, flush=True)
            ratios = [p[True]["tok_s"] / p[False]["tok_s"] for p in pairs if p[False]["tok_s"] > 0]
            rows.append({"model": name, "task": task, "tokens": pairs[0][False]["tokens"],
                         "off": statistics.median(p[False]["tok_s"] for p in pairs),
                         "on": statistics.median(p[True]["tok_s"] for p in pairs),
                         "ratio": statistics.median(ratios) if ratios else 0.0,
                         "ratios": ratios,
                         "accepted": sum(p[True]["accepted"] for p in pairs),
                         "drafted": sum(p[True]["drafted"] for p in pairs),
                         "same": all(p[False]["out"] == p[True]["out"] for p in pairs)})
    finally:
        srv.stop()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", default=[], help="NAME=PATH (repeatable)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", help="write the rows here too")
    ap.add_argument("extra", nargs="*", help="more `strata serve` options (after --)")
    args = ap.parse_args()
    models = [m.split("=", 1) for m in args.model] or [["SmolLM2-135M", os.path.join(ROOT, "models",
                                                                                     "SmolLM2-135M-Instruct.Q4_1.gguf")]]
    print(f"machine: {machine.describe()}; load {machine.loadavg()}; busy: {others()}")
    rows = []
    for name, path in models:
        if not os.path.exists(path):
            print(f"{name}: {path} missing, skipped")
            continue
        rows += bench_model(args, name, path)
        print(f"after {name}: load {machine.loadavg()}; busy: {others()}")
    print("\n| model | task | tokens | off tok/s | on tok/s | on/off (median of pairs) | accepted/drafted | same bytes |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['task']} | {r['tokens']} | {r['off']:.1f} | {r['on']:.1f} | **{r['ratio']:.2f}** "
              f"({', '.join(f'{x:.2f}' for x in r['ratios'])}) | {r['accepted']}/{r['drafted']} | "
              f"{'yes' if r['same'] else 'NO'} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0 if all(r["same"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
