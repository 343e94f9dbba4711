#!/usr/bin/env python3
"""Prefix cache benchmark: time to first token for a prompt of L tokens
computed cold, restored from the live tier (same server), and restored
from the disk tier (after a restart, with the block files dropped from the
page cache so they come from the device), on the same model in one run;
plus, for each length, the disk's sequential read bandwidth (one stream,
8 MiB reads, over a file as large as that length's block files, written
once they are and dropped from the page cache like them), the
restore bandwidth (KV bytes loaded / load time, from the server's --trace
line) and the lookup overhead on a miss (trace load_ms of the cold
request, which hashes the prompt and probes both tiers, / its prefill_ms).

    bench/bench_cache.py --model models/SmolLM2-135M-Instruct.Q4_1.gguf [--lengths 1024,2048,4096,8000]

Each prompt is a token array (no template), max_tokens 1, greedy; --ctx is
set to fit the longest. After each restart one short unrelated request
warms the process up, so start-up costs are not counted as restore time.
"""
import argparse
import json
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


def start(model, cache_dir, ctx, trace, extra=()):
    return serve(model, "--ctx", str(ctx), "--parallel", "1", "--cache-dir", cache_dir, "--trace", trace, *extra)


def serve(model, *args):
    """`strata serve -m model args...` on a free port, once /health says 200:
    (process, url). Also bench/ui_cost.py's."""
    port = free_port()
    p = subprocess.Popen([os.path.join(ROOT, "strata"), "serve", "-m", model, "--port", str(port), *args],
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


def last_trace(path):
    with open(path) as f:
        return json.loads(f.read().splitlines()[-1])


def drop_page_cache(folder):
    """Asks the kernel to forget the cached pages of every block file."""
    for dirpath, _, files in os.walk(folder):
        for name in files:
            try:
                fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                os.close(fd)
            except (AttributeError, OSError):
                pass


def tree_bytes(folder, suffix):
    return sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(folder) for f in fs if f.endswith(suffix))


def disk_read_bandwidth(folder, nbytes):
    """MB/s of one sequential read of a fresh file of nbytes (rounded up to MiB)."""
    path = os.path.join(folder, "bw.bin")
    mb = max(1, -(-nbytes // (1 << 20)))
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
    return mb * (1 << 20) / 1e6 / dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--lengths", default="1024,2048,4096,8000")
    a = ap.parse_args()
    lengths = [int(x) for x in a.lengths.split(",")]
    ctx = max(lengths) + 64
    work = tempfile.mkdtemp(prefix="strata-bench-cache-")
    trace = os.path.join(work, "trace.jsonl")
    rng = random.Random(1)
    print(f"model {a.model}; cache dir {work}; prompts are random token arrays; TTFT in seconds")
    print("seq read: one stream over a file as large as the length's block files, written after them, page cache "
          "dropped for both where allowed")
    print("| prompt tokens | cold s | live hit s | disk hit s | cold/live | cold/disk | restored MB | load ms "
          "| restore MB/s | seq read MB/s | of seq read | miss lookup ms | of prefill |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for L in lengths:
        toks = [rng.randrange(100, 40000) for _ in range(L)]
        cache = os.path.join(work, f"kv{L}")
        p, url = start(a.model, cache, ctx, trace)
        cold, _ = ttft(url, toks)
        miss = last_trace(trace)
        live, u_live = ttft(url, toks)
        stop(p)
        seq_mb_s = disk_read_bandwidth(work, tree_bytes(cache, ".kv"))
        drop_page_cache(cache)
        p, url = start(a.model, cache, ctx, trace)
        ttft(url, [rng.randrange(100, 40000) for _ in range(8)])  # warm-up, unrelated
        disk, u_disk = ttft(url, toks)
        hit = last_trace(trace)
        stop(p)
        d = u_disk.get("strata_cache", {}).get("disk_tokens", 0)
        # Files read: every block touched, a partly used last one whole
        # (tails are a bit smaller: fewer token ids in the header).
        block_bytes = max(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(cache) for f in fs
                          if f.endswith(".kv"))
        mb = -(-d // 64) * block_bytes / 1e6
        bw = mb / (hit["load_ms"] / 1000) if hit["load_ms"] > 0 else float("nan")
        print(f"| {L} | {cold:.2f} | {live:.3f} | {disk:.3f} | {cold / live:.0f}x | {cold / disk:.0f}x | {mb:.0f} "
              f"| {hit['load_ms']:.0f} | {bw:.0f} | {seq_mb_s:.0f} | {bw / seq_mb_s:.0%} | {miss['load_ms']:.3f} "
              f"| {miss['load_ms'] / miss['prefill_ms']:.4%} |")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
