"""What the /ui page costs the server: request rate and the server's CPU
time per request without the ring of request records (--ui-records 0),
with it (--ui-records 256), and with it and pages polling /ui/state once a
second, on the same model, in rotating rounds so that the machine's other
load falls on each alike. CPU time (the server process's user + system
time, from /proc) is the steadier number on a shared machine.

Each request is an agent turn (a system prompt, a growing history, a new
tool result; 2 tokens generated), so every record carries a message list
and the first-difference excerpt of an edited turn now and then. The
tiny test model keeps each request short: the ring's share of a request
is largest there.

    python3 bench/ui_cost.py [--model M] [--rounds 3] [--requests 200] [--clients 4] [--pollers 4]
"""
import argparse
import os
import signal
import statistics
import sys
import tempfile
import threading
import time

import httpx

import bench_cache

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
TINY = os.path.join(os.environ.get("TEST_DATA_DIR", os.path.join(ROOT, "tests", "data", "gen")), "models",
                    "llama-q4_1.gguf")
SYSTEM = "You are a coding agent. Read files before editing them and keep answers short. " * 4


def serve(model, records):
    cache = tempfile.mkdtemp(prefix="strata-uicost-")
    return bench_cache.serve(model, "--parallel", "4", "--ctx", "2048", "--cache-dir", cache,
                             "--ui-records", str(records))


def client(url, n, k, out):
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"Client {k}: list the files."}]
    with httpx.Client(timeout=60) as h:
        for i in range(n):
            if i % 10 == 9:  # now and then the client edits its system prompt: a miss with an excerpt
                msgs[0]["content"] = SYSTEM.replace("coding", f"coding{i}")
            r = h.post(url + "/v1/chat/completions", json={"messages": msgs, "max_tokens": 2, "temperature": 0,
                                                           "prompt_cache_key": f"c{k}"})
            r.raise_for_status()
            msgs += [{"role": "assistant", "content": r.json()["choices"][0]["message"]["content"]},
                     {"role": "user", "content": f"Tool result {i}: ok"}]
            if len(msgs) > 40:
                del msgs[2:12]
    out.append(n)


def poller(url, stop, polls):
    """A page open on /ui: asks for what changed, once a second."""
    rev = 0
    with httpx.Client(timeout=10) as h:
        while not stop.is_set():
            r = h.get(url + f"/ui/state?since={rev}")
            if r.status_code == 200:
                rev = r.json()["rev"]
                polls.append(1)
            stop.wait(1.0)


def cpu_s(pid):
    """User + system CPU seconds of a process so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def round_once(model, records, n_req, n_clients, n_pollers):
    proc, url = serve(model, records)
    try:
        stop, polls, done = threading.Event(), [], []
        ps = [threading.Thread(target=poller, args=(url, stop, polls)) for _ in range(n_pollers)]
        cpu0 = cpu_s(proc.pid)
        for p in ps:
            p.start()
        cs = [threading.Thread(target=client, args=(url, n_req // n_clients, k, done)) for k in range(n_clients)]
        t0 = time.perf_counter()
        for c in cs:
            c.start()
        for c in cs:
            c.join()
        dt = time.perf_counter() - t0
        stop.set()
        for p in ps:
            p.join()
        return sum(done) / dt, 1000 * (cpu_s(proc.pid) - cpu0) / sum(done), len(polls)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=TINY)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--pollers", type=int, default=4)
    a = ap.parse_args()
    configs = [("off (--ui-records 0)", 0, 0), ("ring (--ui-records 256)", 256, 0),
               (f"ring + {a.pollers} pages polling", 256, a.pollers)]
    got = {c[0]: ([], []) for c in configs}
    for r in range(a.rounds):
        for name, records, pollers in configs[r % 3:] + configs[:r % 3]:
            rate, cpu, polls = round_once(a.model, records, a.requests, a.clients, pollers)
            got[name][0].append(rate)
            got[name][1].append(cpu)
            print(f"round {r + 1}: {name:28s} {rate:6.1f} req/s, server CPU {cpu:5.2f} ms/request"
                  + (f" ({polls} polls)" if polls else ""), flush=True)
    base = statistics.median(got[configs[0][0]][1])
    for name, _, _ in configs:
        rates, cpus = got[name]
        print(f"{name:28s} median {statistics.median(rates):6.1f} req/s, CPU {statistics.median(cpus):5.2f} ms/request "
              f"({100 * (statistics.median(cpus) - base) / base:+.1f}% CPU)")

if __name__ == "__main__":
    sys.exit(main())
