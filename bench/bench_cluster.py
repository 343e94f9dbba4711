"""Three replicas behind HAProxy, one killed half-way: prefill work with the
shared KV tier on Redis against without it (bench/README.md).

Starts the cluster with deploy/cluster.sh (SHARED=1, then SHARED=0), replays
S agent-like sessions of T turns through HAProxy (each turn resends the
whole conversation plus new tokens, keyed by x-session-id), SIGKILLs
replica 2 after half the turns, and sums from each reply's usage: prompt
tokens, cached tokens per tier, prefilled tokens, failed requests. Every
process started is stopped (cluster.sh stop), also on errors.
"""
import argparse
import concurrent.futures as cf
import json
import os
import random
import signal
import subprocess
import time

import httpx

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def run_mode(a, shared):
    env = dict(os.environ, MODEL=a.model, RUN=a.run, LB_PORT=str(a.port), REPLICA_PORTS=" ".join(
        str(a.port + i) for i in (1, 2, 3)), REDIS_PORT=str(a.port + 9), SHARED="1" if shared else "0",
        SERVE_ARGS=f"--threads 1 --parallel 2 --ctx {a.ctx}")
    cluster = os.path.join(ROOT, "deploy", "cluster.sh")
    subprocess.run(["rm", "-rf", a.run])
    subprocess.run([cluster, "start"], env=env, check=True)
    try:
        return replay(a, env)
    finally:
        subprocess.run([cluster, "stop"], env=env)


def turn(url, sid, tokens):
    try:
        r = httpx.post(url + "/v1/completions", timeout=600, headers={"x-session-id": sid},
                       json={"prompt": tokens, "max_tokens": 16, "temperature": 0})
        if r.status_code != 200:
            return {"error": r.status_code}
        return r.json()["usage"]
    except httpx.HTTPError as e:
        return {"error": str(e)}


def replay(a, env):
    rng = random.Random(5)
    convs = [[rng.randrange(3, 40000) for _ in range(a.first)] for _ in range(a.sessions)]
    url, rows, t0 = f"http://127.0.0.1:{a.port}", [], time.time()
    for t in range(a.turns):
        if t == a.turns // 2:  # a replica dies; its sessions move
            with open(os.path.join(a.run, "replica-2.pid")) as f:
                os.kill(int(f.read()), signal.SIGKILL)
        with cf.ThreadPoolExecutor(3) as pool:
            futs = [pool.submit(turn, url, f"s{i}", c) for i, c in enumerate(convs)]
            rows += [f.result() for f in futs]
        for c in convs:
            c += [rng.randrange(3, 40000) for _ in range(a.grow)]
    ok = [r for r in rows if "error" not in r]
    s = lambda k: sum(r["strata_cache"][k] for r in ok)
    prompt = sum(r["prompt_tokens"] for r in ok)
    cached = sum(r["prompt_tokens_details"]["cached_tokens"] for r in ok)
    return {"requests": len(rows), "failed": len(rows) - len(ok), "prompt_tokens": prompt,
            "cached": cached, "live": s("live_tokens"), "disk": s("disk_tokens"), "redis": s("redis_tokens"),
            "prefilled": prompt - cached, "wall_s": round(time.time() - t0, 1)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    p.add_argument("--sessions", type=int, default=8)
    p.add_argument("--turns", type=int, default=6)
    p.add_argument("--first", type=int, default=800)
    p.add_argument("--grow", type=int, default=150)
    p.add_argument("--ctx", type=int, default=4096)
    p.add_argument("--port", type=int, default=18300)
    p.add_argument("--run", default="/tmp/strata-bench-cluster")
    a = p.parse_args()
    res = {"shared_tier": run_mode(a, True), "no_shared_tier": run_mode(a, False)}
    print(json.dumps(res, indent=1))
    print("| mode | requests | failed | prompt tokens | cached (live/disk/redis) | prefilled | wall s |")
    print("|---|---|---|---|---|---|---|")
    for k, r in res.items():
        print(f"| {k} | {r['requests']} | {r['failed']} | {r['prompt_tokens']} | {r['cached']} "
              f"({r['live']}/{r['disk']}/{r['redis']}) | {r['prefilled']} | {r['wall_s']} |")


if __name__ == "__main__":
    main()
