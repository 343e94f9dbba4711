#!/usr/bin/env python3
"""Strata's speculative decoding beside llama.cpp's own prompt-lookup
(n-gram) speculative modes, on bench_spec.py's copy tasks (issue 27).

    python3 bench/spec_peer.py --peer /work/oracle/cmake/bin/llama-speculative-simple \\
        [--model NAME=PATH ...] [--reps 2] [--threads 1] [--tasks file-edit,tool-retry] [--modes off,ngram-simple,...]

The peer is llama.cpp's `llama-speculative-simple` (examples/, built with
LLAMA_BUILD_EXAMPLES=ON): one prompt, greedy, decoded with the speculative
types of `--spec-type` that need no draft model. Each task's prompt is the
text Strata renders for it (`POST /apply-template`, the model's own chat
template, tools included), given to llama.cpp as `-p TEXT --no-escape`
(`-f` would drop its final newline, and escapes would turn the tool
call's `\\n` into newlines), so both engines start from the same tokens
(the table shows both prompt counts). Each
repetition runs every configuration once, Strata off and on, then each
peer mode, in reversed order on odd repetitions, so the machine's load,
which other people's work changes from minute to minute, hits all alike.

Speeds are each engine's own decode rate: Strata's (generated - 1) /
decode_ms from its --trace line (the first token comes from the prefill),
llama.cpp's "decoded N tokens in S seconds" (from its first decode step,
which computes the prompt's last token, to the end). Acceptance is
accepted / drafted tokens. The peer's "off" is ngram-simple with a lookup
n-gram longer than the context (it never finds one, so every step feeds
one token: plain decoding in the same loop; `--spec-type none` makes the
tool refuse to start).
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

import httpx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import machine  # noqa: E402
from bench_spec import TASKS, Server, others, run  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))

# llama-speculative-simple options of each mode (common/arg.cpp, --spec-*).
MODES = {
    "off": ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "1024",
            "--spec-ngram-simple-size-m", "1024"],
    "ngram-simple": ["--spec-type", "ngram-simple"],  # its defaults: lookup 12 tokens, draft 48
    "ngram-simple-3-8": ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3",
                         "--spec-ngram-simple-size-m", "8"],  # near Strata's: lookup 4/3/2, draft <= 8
    "ngram-map-k": ["--spec-type", "ngram-map-k"],
    "ngram-mod": ["--spec-type", "ngram-mod"],
    "ngram-cache": ["--spec-type", "ngram-cache"],  # llama-lookup's n-gram cache
}


def prompt_text(srv, body, bos):
    """The prompt Strata gives the request, for the peer (which adds the
    model's BOS itself: a leading BOS text is dropped)."""
    r = httpx.post(srv.url + "/apply-template", json={k: body[k] for k in ("messages", "tools") if k in body},
                   timeout=60)
    r.raise_for_status()
    text = r.json()["prompt"]
    return text[len(bos):] if bos and text.startswith(bos) else text


def num(pattern, text, cast=float):
    m = re.search(pattern, text)
    if not m:
        raise SystemExit(f"peer output lacks /{pattern}/:\n{text[-3000:]}")
    return cast(m.group(1))


def peer_run(args, model, prompt, max_tokens, mode):
    # -n: the tool stops once it has more than n tokens
    cmd = [args.peer, "-m", model, "-p", prompt, "--no-escape", "-n", str(max_tokens - 1), "--temp", "0",
           "-t", str(args.threads), "-c", "4096", *MODES[mode]]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    log = p.stderr + p.stdout
    if p.returncode != 0:
        raise SystemExit(f"{args.peer} {mode}: exit {p.returncode}\n{log[-3000:]}")
    drafted = num(r"n_drafted\s*=\s*(\d+)", log, int)
    return {"prompt": num(r"encoded\s+(\d+) tokens", log, int), "tokens": num(r"decoded\s+(\d+) tokens", log, int),
            "tok_s": num(r"decoded\s+\d+ tokens in\s+[\d.]+ seconds, speed:\s+([\d.]+)", log),
            "drafted": drafted, "accepted": num(r"n_accept\s*=\s*(\d+)", log, int) if drafted else 0}


def strata_run(srv, body, spec):
    got = run(srv, body, spec)
    got["prompt"] = srv.last_trace().get("prompt_tokens", 0)
    return got


def bench_task(args, srv, model, task, bos):
    body = TASKS[task]
    prompt = prompt_text(srv, body, bos)
    configs = [("strata", "off"), ("strata", "on")] + [("llama.cpp", m) for m in args.modes]
    runs = {c: [] for c in configs}
    for rep in range(args.reps):
        for c in (configs if rep % 2 == 0 else configs[::-1]):
            got = (strata_run(srv, body, c[1] == "on") if c[0] == "strata"
                   else peer_run(args, model, prompt, body["max_tokens"], c[1]))
            runs[c].append(got)
            print(f"  {task} rep {rep} {c[0]} {c[1]}: {got['tok_s']:.1f} tok/s, {got['tokens']} tokens, "
                  f"{got['accepted']}/{got['drafted']} accepted; load {machine.loadavg()}", file=sys.stderr, flush=True)
    rows = []
    for c in configs:
        rs = runs[c]
        off = runs[(c[0], "off")]
        ratios = [r["tok_s"] / o["tok_s"] for r, o in zip(rs, off) if o["tok_s"] > 0]
        rows.append({"task": task, "engine": c[0], "mode": c[1], "prompt": rs[0]["prompt"],
                     "tokens": statistics.median(r["tokens"] for r in rs),
                     "tok_s": statistics.median(r["tok_s"] for r in rs), "all": [r["tok_s"] for r in rs],
                     "vs_off": statistics.median(ratios) if ratios else 0.0,
                     "accepted": sum(r["accepted"] for r in rs), "drafted": sum(r["drafted"] for r in rs)})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peer", required=True, help="llama.cpp's llama-speculative-simple")
    ap.add_argument("--model", action="append", default=[], help="NAME=PATH[:BOS text] (repeatable)")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="threads of both engines")
    ap.add_argument("--tasks", default="file-edit,tool-retry")
    ap.add_argument("--modes", default="off,ngram-simple,ngram-simple-3-8,ngram-mod,ngram-cache")
    args = ap.parse_args()
    args.modes = [m for m in args.modes.split(",") if m]
    if args.modes[0] != "off" or any(m not in MODES for m in args.modes):
        raise SystemExit(f"--modes: 'off' first, then any of {', '.join(MODES)}")
    models = [m.split("=", 1) for m in args.model] or [["SmolLM2-135M", os.path.join(
        ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")]]
    print(f"machine: {machine.describe()}; load {machine.loadavg()}; busy: {others()}")
    print(f"threads: {args.threads} per engine; peer: {args.peer}")
    print("\n| model | task | engine | speculation | prompt tokens | tokens | decode tok/s (median; runs) "
          "| x its own off | accepted/drafted |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, spec in models:
        path, _, bos = spec.partition(":")
        srv = Server(path, ["-t", str(args.threads)])
        try:
            run(srv, TASKS["chat"], True)  # warm-up: page the weights in
            for task in args.tasks.split(","):
                for r in bench_task(args, srv, path, task, bos):
                    rate = f" ({100.0 * r['accepted'] / r['drafted']:.0f}%)" if r["drafted"] else ""
                    print(f"| {name} | {r['task']} | {r['engine']} | {r['mode']} | {r['prompt']} | {r['tokens']:.0f} "
                          f"| {r['tok_s']:.2f} ({', '.join(f'{x:.2f}' for x in r['all'])}) | {r['vs_off']:.2f} "
                          f"| {r['accepted']}/{r['drafted']}{rate} |", flush=True)
        finally:
            srv.stop()
        print(f"after {name}: load {machine.loadavg()}; busy: {others()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
