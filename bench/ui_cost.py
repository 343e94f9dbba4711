"""What the /ui page costs the server, side by side: three servers of the
same model run at once, without the ring of request records
(--ui-records 0), with it (--ui-records 256), and with it and pages
polling /ui/state once a second. One client sends each agent turn to the
three in turn (the order rotating), so whatever else the machine does
falls on all three alike, request by request; each request's latency and
each server's CPU time per request (user + system, from /proc) are
compared.

Each request is an agent turn (a system prompt, a growing history, a new
tool result; 2 tokens generated), so every record carries a message list,
and one turn in ten edits the system prompt (a miss with the text around
it). The tiny test model keeps each request short: the ring's share of a
request is largest there.

    python3 bench/ui_cost.py [--model M] [--turns 300] [--pollers 4]
"""
import argparse
import multiprocessing
import os
import re
import signal
import statistics
import sys
import tempfile
import time

import httpx

import bench_cache

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
TINY = os.path.join(os.environ.get("TEST_DATA_DIR", os.path.join(ROOT, "tests", "data", "gen")), "models",
                    "llama-q4_1.gguf")
REV = re.compile(rb'"rev":(\d+)')
SYSTEM = "You are a coding agent. Read files before editing them and keep answers short. " * 4


def serve(model, records):
    cache = tempfile.mkdtemp(prefix="strata-uicost-")
    return bench_cache.serve(model, "--parallel", "1", "--ctx", "2048", "--cache-dir", cache,
                             "--ui-records", str(records))


def cpu_s(pid):
    """User + system CPU seconds of a process so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def poller(url, stop, polls):
    """A page open on /ui: asks for what changed, once a second. In a
    process of its own, reading only the revision from the reply (little
    client CPU)."""
    rev = 0
    with httpx.Client(timeout=10) as h:
        while not stop.is_set():
            r = h.get(url + f"/ui/state?since={rev}")
            if r.status_code == 200:
                rev = int(REV.search(r.content).group(1))
                with polls.get_lock():
                    polls.value += 1
            stop.wait(1.0)


class Conversation:
    """One agent's turns against one server."""

    def __init__(self, url):
        self.url, self.h = url, httpx.Client(timeout=60)
        self.msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "List the files."}]
        self.ms = []

    def turn(self, i):
        if i % 10 == 9:  # the client edits its system prompt: a miss with an excerpt
            self.msgs[0]["content"] = SYSTEM.replace("coding", f"coding{i}")
        t0 = time.perf_counter()
        r = self.h.post(self.url + "/v1/chat/completions", json={"messages": self.msgs, "max_tokens": 2,
                                                                 "temperature": 0, "prompt_cache_key": "c"})
        self.ms.append(1000 * (time.perf_counter() - t0))
        r.raise_for_status()
        self.msgs += [{"role": "assistant", "content": r.json()["choices"][0]["message"]["content"]},
                      {"role": "user", "content": f"Tool result {i}: ok"}]
        if len(self.msgs) > 40:
            del self.msgs[2:12]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=TINY)
    ap.add_argument("--turns", type=int, default=300)
    ap.add_argument("--pollers", type=int, default=4)
    a = ap.parse_args()
    names = ["off (--ui-records 0)", "ring (--ui-records 256)", f"ring + {a.pollers} pages polling"]
    servers = [serve(a.model, r) for r in (0, 256, 256)]
    stop, polls = multiprocessing.Event(), multiprocessing.Value("i", 0)
    ps = [multiprocessing.Process(target=poller, args=(servers[2][1], stop, polls)) for _ in range(a.pollers)]
    try:
        for p in ps:
            p.start()
        convs = [Conversation(url) for _, url in servers]
        cpu0 = [cpu_s(p.pid) for p, _ in servers]
        for i in range(a.turns):
            for k in range(3):
                convs[(i + k) % 3].turn(i)
        cpu = [1000 * (cpu_s(p.pid) - c0) / a.turns for (p, _), c0 in zip(servers, cpu0)]
    finally:
        stop.set()
        for p in ps:
            p.join()
        for p, _ in servers:
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=30)
    base = statistics.median(convs[0].ms)
    print(f"{a.turns} agent turns to each server, interleaved; {polls.value} polls of /ui/state")
    for name, c, ms in zip(names, convs, cpu):
        med = statistics.median(c.ms)
        p90 = statistics.quantiles(c.ms, n=10)[-1]
        print(f"{name:28s} median {med:6.2f} ms ({100 * (med - base) / base:+5.1f}%), p90 {p90:6.2f} ms, "
              f"mean {statistics.mean(c.ms):6.2f} ms; server CPU {ms:5.2f} ms/request")


if __name__ == "__main__":
    sys.exit(main())
