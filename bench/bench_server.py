#!/usr/bin/env python3
"""Server load benchmark: requests/s and time to first token (TTFT) for
short chat prompts at several concurrency levels, and aggregate decode
tokens/s with N parallel sequences vs one (continuous batching).

    bench/bench_server.py --url http://127.0.0.1:8080 [--levels 1,4,16] [--requests 32]

Run it against `strata serve` (or any OpenAI-compatible server). It
measures TTFT on the stream (first content delta) and prints one table.
"""
import argparse
import concurrent.futures as cf
import statistics
import time

import openai


def one_request(client, i, max_tokens):
    t0 = time.perf_counter()
    ttft, n = None, 0
    stream = client.chat.completions.create(
        model="", messages=[{"role": "user", "content": f"Question {i}: name a colour."}],
        max_tokens=max_tokens, temperature=0, stream=True, stream_options={"include_usage": True})
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content and ttft is None:
            ttft = time.perf_counter() - t0
        if chunk.usage:
            n = chunk.usage.completion_tokens
    return ttft if ttft is not None else time.perf_counter() - t0, time.perf_counter() - t0, n


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def run_level(client, conc, n_req, max_tokens):
    t0 = time.perf_counter()
    with cf.ThreadPoolExecutor(conc) as pool:
        res = list(pool.map(lambda i: one_request(client, i, max_tokens), range(n_req)))
    wall = time.perf_counter() - t0
    ttfts = [r[0] * 1000 for r in res]
    toks = sum(r[2] for r in res)
    return {"conc": conc, "req_s": n_req / wall, "ttft_p50": pct(ttfts, 50), "ttft_p99": pct(ttfts, 99),
            "decode_tok_s": toks / wall}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--levels", default="1,4,16")
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=32)
    a = ap.parse_args()
    client = openai.OpenAI(base_url=a.url + "/v1", api_key="none", max_retries=0, timeout=600)
    one_request(client, -1, 4)  # warm-up
    print(f"server {a.url}, {a.requests} requests per level, max_tokens {a.max_tokens}, greedy")
    print("| clients | req/s | TTFT p50 ms | TTFT p99 ms | aggregate tok/s |")
    print("|---|---|---|---|---|")
    for conc in [int(x) for x in a.levels.split(",")]:
        r = run_level(client, conc, a.requests, a.max_tokens)
        print(f"| {conc} | {r['req_s']:.2f} | {r['ttft_p50']:.0f} | {r['ttft_p99']:.0f} | {r['decode_tok_s']:.1f} |")


if __name__ == "__main__":
    main()
