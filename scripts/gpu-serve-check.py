#!/usr/bin/env python3
"""The serve-on-GPU check of scripts/test-gpu.sh (issue 26, "Tiers on a
GPU"): `strata serve --device cuda` answers one greedy request four times,
from four places, and every answer must be the same bytes:

  1. cold: nothing cached, the whole prompt prefilled on the GPU;
  2. the same request again: its blocks from the GPU pool (live_tokens);
  3. after other prompts pushed them out of the small GPU pool: from the
     RAM tier in pinned host memory (ram_tokens);
  4. after a restart (GPU pool and RAM tier empty): from the disk tier
     (disk_tokens).

A model with recurrent layers (qwen35: --recurrent) resumes only where a
snapshot of its state was kept, and a prompt's own end cannot serve that
prompt again (its last token's logits are needed): so the request is
TARGET, the prompt with a sentence more, and after the cold answer the
prompt alone is sent once (not compared), leaving a snapshot at its end
inside TARGET for steps 2 to 4.

Standard library only (the GPU machine has no network and no pip).

    scripts/gpu-serve-check.py --strata ./strata --model M.gguf [--port 19480] [--dir DIR]

Exit status 0 only when all four answers are equal and each came from the
tier it should have. Prints one line per request. Every wait has a limit
(the server's start, each request, --deadline for the whole check), and a
server it started never outlives it (SIGTERM and the deadline included).
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

# A prompt long enough for several 64-token blocks in any tokenizer, and
# distinct fillers that push it out of a GPU pool of a few blocks.
# About 1,200 characters: 5 to 20 blocks of 64 tokens, by tokenizer.
# Fillers are sent until the GPU pool (34 blocks) has evicted twice as
# many blocks as it held: far fewer than the RAM tier's 180 (1.4 MiB a block).
PROMPT = " ".join(f"step {i}: the cache keeps block {i * 7 % 31} warm." for i in range(30))
TAIL = " And then the next step comes."


def filler(k):
    return " ".join(f"filler {k}.{i} moves other blocks {i * k % 17} out." for i in range(30))


def metric(port, name):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return 0.0


class Deadline(Exception):
    """The whole check ran past --deadline."""


DEADLINE = [float("inf")]


def left():
    s = DEADLINE[0] - time.time()
    if s <= 0:
        raise Deadline()
    return s


def post(port, body, timeout=30):
    timeout = min(timeout, left())
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def complete(port, prompt):
    out = post(port, {"prompt": prompt, "max_tokens": 24, "temperature": 0, "seed": 1})
    sc = out.get("usage", {}).get("strata_cache", {})
    return out["choices"][0]["text"], out.get("usage", {}), sc


def wait_up(port, proc, limit_s=60):
    t0 = time.time()
    while time.time() - t0 < min(limit_s, left()):
        if proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return True
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        time.sleep(0.5)
    return False


def start(args, log):
    cmd = [args.strata, "serve", "-m", args.model, "--device", args.device, "--port", str(args.port), "--parallel",
           "1", "--ctx", "2048", "--cache-dir", args.dir, "--cache-mem-mb", "2", "--cache-ram-mb", str(args.ram_mb)]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        up = wait_up(args.port, proc)
    except BaseException:  # the deadline, SIGTERM: never leave it running
        up = False
    if not up:
        proc.kill()
        proc.wait()
        return None
    return proc


def stop(proc):
    if proc.poll() is not None:
        print(f"gpu-serve-check: the server had exited (status {proc.returncode}; see the log)")
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def session(args, log, steps):
    """steps() against a server of its own (started, then stopped); False
    when it did not start or a request failed."""
    proc = start(args, log)
    if not proc:
        print("gpu-serve-check: the server did not start" + (" (past --deadline)" if time.time() >= DEADLINE[0] else "")
              + " (see the log)")
        return False
    try:
        steps()
        return True
    except (urllib.error.URLError, KeyError, ValueError, OSError) as e:
        print(f"gpu-serve-check: request failed: {e}" + ("" if proc.poll() is None else f" (the server exited, status {proc.returncode})"))
        return False
    except Deadline:
        print("gpu-serve-check: past the deadline (--deadline)")
        return False
    finally:
        stop(proc)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata", default="./strata")
    ap.add_argument("--model", required=True)
    ap.add_argument("--port", type=int, default=19480)
    ap.add_argument("--dir", default=None, help="the disk tier (a temp dir)")
    ap.add_argument("--log", default=None, help="the servers' output (a temp file)")
    ap.add_argument("--device", default="cuda", help="cpu: a dry run of this script (no RAM tier: step 3 from disk)")
    ap.add_argument("--ram-mb", type=int, default=256)
    ap.add_argument("--deadline", type=float, default=240, help="seconds for the whole check")
    ap.add_argument("--recurrent", action="store_true", help="the model has recurrent layers (qwen35): see above")
    args = ap.parse_args()
    DEADLINE[0] = time.time() + args.deadline
    # a timeout's SIGTERM still stops the server (finally blocks run)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args.dir = args.dir or tempfile.mkdtemp(prefix="strata-gpu-kv-")
    os.makedirs(args.dir, exist_ok=True)
    log = open(args.log or os.path.join(args.dir, "serve.log"), "ab")
    ok = True
    answers = []

    def check(name, text, sc, want_key):
        nonlocal ok
        got = sc.get(want_key, 0) if want_key else 0
        good = (got > 0) if want_key else (sum(v for k, v in sc.items() if k.endswith("_tokens")) == 0)
        same = not answers or text == answers[0]
        answers.append(text)
        ok = ok and good and same
        print(f"{name:<28} {'ok  ' if good and same else 'FAIL'} text={text!r:.60} same={same} cache={json.dumps(sc)}")

    target = PROMPT + TAIL if args.recurrent else PROMPT

    def first_run():
        text, _, sc = complete(args.port, target)
        check("cold", text, sc, None)
        if args.recurrent:  # a snapshot at PROMPT's end, inside target
            complete(args.port, PROMPT)
        text, _, sc = complete(args.port, target)
        check("again: from the GPU pool", text, sc, "live_tokens")
        held = metric(args.port, "strata_cache_blocks")
        base = metric(args.port, "strata_cache_evicted_blocks_total")
        # Each filler as the prompt was (recurrent: and one hit more, as a
        # block's hits weigh more than its age in cache/policy.h and the
        # prompt has two), so the oldest, the prompt, goes first.
        for k in range(40):
            for text in [filler(k) + TAIL, filler(k)] + [filler(k) + TAIL] * 2 if args.recurrent else [filler(k)] * 2:
                complete(args.port, text)
            if metric(args.port, "strata_cache_evicted_blocks_total") - base >= 2 * held:
                break
        text, _, sc = complete(args.port, target)
        if args.device != "cpu":  # the pool's copies down went through the spill queue
            queued, written = (metric(args.port, f"strata_pool_{m}_total") for m in ("publish_queued", "publish_written"))
            errors = metric(args.port, "strata_pool_copy_errors_total")
            good = written > 0 and errors == 0
            print(f"{'pool copies down':<28} {'ok  ' if good else 'FAIL'} publish queued={queued:.0f} "
                  f"written={written:.0f} spilled={metric(args.port, 'strata_pool_spilled_blocks_total'):.0f} "
                  f"waits={metric(args.port, 'strata_pool_copy_waits_total'):.0f} errors={errors:.0f}")
            nonlocal ok
            ok = ok and good
        if args.device == "cpu" or args.ram_mb == 0:
            check("evicted: from the disk", text, sc, "disk_tokens")
        else:
            check("evicted: from the RAM tier", text, sc, "ram_tokens")

    def after_restart():
        text, _, sc = complete(args.port, target)
        check("restart: from the disk", text, sc, "disk_tokens")

    ok = session(args, log, first_run) and ok
    ok = session(args, log, after_restart) and ok
    print("gpu-serve-check: " + ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
