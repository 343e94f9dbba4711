#!/usr/bin/env python3
"""Prefix cache benchmark: time to first token for a prompt of L tokens
computed cold, restored from the live tier (same server), and restored
from the disk tier (after a restart), on the same model in one run; plus
the disk's sequential read bandwidth measured in the same run.

    bench/bench_cache.py --model models/SmolLM2-135M-Instruct.Q4_1.gguf [--lengths 1024,2048,4096,8000]

Each prompt is a token array (no template), max_tokens 1, greedy; the
prompt+1 token must fit the server's --ctx.
"""
import argparse
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import httpx

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(model, cache_dir, ctx, extra=()):
    port = free_port()
    p = subprocess.Popen([os.path.join(ROOT, "strata"), "serve", "-m", model, "--port", str(port), "--ctx", str(ctx),
                          "--parallel", "1", "--cache-dir", cache_dir, *extra],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return p, url
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit("server did not start")


def stop(p):
    p.send_signal(signal.SIGTERM)
    p.wait(60)


def ttft(url, tokens):
    t0 = time.perf_counter()
    r = httpx.post(url + "/v1/completions", json={"prompt": tokens, "max_tokens": 1, "temperature": 0}, timeout=3600)
    r.raise_for_status()
    return time.perf_counter() - t0, r.json()["usage"]


def disk_read_bandwidth(folder, mb=512):
    path = os.path.join(folder, "bw.bin")
    with open(path, "wb") as f:
        for _ in range(mb):
            f.write(os.urandom(1 << 20))
        f.flush()
        os.fsync(f.fileno())
    try:  # drop the page cache for this file so the read hits the device
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    except (AttributeError, OSError):
        pass
    t0 = time.perf_counter()
    with open(path, "rb") as f:
        while f.read(8 << 20):
            pass
    dt = time.perf_counter() - t0
    os.remove(path)
    return mb / dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--lengths", default="1024,2048,4096,8000")
    a = ap.parse_args()
    lengths = [int(x) for x in a.lengths.split(",")]
    ctx = max(lengths) + 64
    work = tempfile.mkdtemp(prefix="strata-bench-cache-")
    rng = random.Random(1)
    print(f"model {a.model}; cache dir {work}; prompts are random token arrays; TTFT in seconds")
    print(f"disk sequential read (page cache dropped for the file where allowed): {disk_read_bandwidth(work):.0f} MB/s")
    print("| prompt tokens | cold s | live hit s | disk hit s | cold/live | cold/disk | disk tokens |")
    print("|---|---|---|---|---|---|---|")
    for L in lengths:
        toks = [rng.randrange(100, 40000) for _ in range(L)]
        cache = os.path.join(work, f"kv{L}")
        p, url = start(a.model, cache, ctx)
        cold, _ = ttft(url, toks)
        live, u_live = ttft(url, toks)
        stop(p)
        p, url = start(a.model, cache, ctx)
        disk, u_disk = ttft(url, toks)
        stop(p)
        d = u_disk.get("strata_cache", {}).get("disk_tokens", 0)
        print(f"| {L} | {cold:.2f} | {live:.3f} | {disk:.3f} | {cold / live:.0f}x | {cold / disk:.0f}x | {d} |")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
