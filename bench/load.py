#!/usr/bin/env python3
"""Load test: many concurrent streaming clients against one `strata serve`.

    bench/load.py [--duration 180] [--clients 64] [--parallel 4] [--queue 64] [--ctx 2048]
    bench/load.py --duration 5 --clients 4          # smoke (tests/e2e/test_load_smoke.py)

It starts `./strata serve` on the default model on 127.0.0.1 (a free port,
a fresh --cache-dir that it removes at the end, small stated cache budgets),
runs closed-loop clients for --duration seconds (each sends a request, reads
its stream, sends the next), then lets the requests in flight finish, checks
the server is idle and still answers, stops it with SIGTERM and writes
OUT/report.md (printed too), OUT/summary.json, OUT/requests.jsonl and
OUT/serve.log.

Requests: both APIs (/v1/chat/completions and /v1/messages, streamed), four
prompt kinds (short question; medium text; a long system prompt shared by
all clients + a short question, which the prefix cache should serve; long
unique text near 1.5k tokens), mixed max_tokens, and a share that
disconnect on purpose: after a few deltas, or by giving up after a short
read timeout (while queued or prefilling). Prompt sizes are calibrated with
the server's /tokenize.

Outcomes: completed (the stream's terminator arrived: `data: [DONE]` or
`event: message_stop`), disconnected (on purpose), refused (503/529 from
the queue: --queue full or --queue-timeout; the client waits
min(Retry-After, 2 s) and goes on), 5xx other, 4xx, and lost: no reply,
a connection error or timeout the client did not cause, a stream that ends
without its terminator or carries an error event.

Hostile connections beside them (--idle-clients, --slow-clients): idle ones
connect and send nothing; slow ones send a request header one byte per
second. Each reconnects once the server closes it, for the whole run. The
server must close every one within --header-timeout + 3 s, while the
regular clients see the same bar as without them.

The bar (exit status 0): 0 lost, no 5xx other than the stated queue
refusals, the server idle afterwards (no slot or queue place held), a clean
exit on SIGTERM, and RSS after <= RSS before + the KV pool (slots + the
--cache-mem-mb budget) + 64 MiB of slack. Every loop is bounded in count and
time; nothing here runs in `make test` (the smoke test asserts no timings).
"""
import argparse
import json
import os
import platform
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import httpx

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
DEFAULT_MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
RSS_SLACK_MB = 64
MAX_REQUESTS_PER_CLIENT = 10000

WORDS = ("the of and to in is was for on that with as by at from this be are an or which have it not but "
         "cache block token server request stream client prefix memory disk model layer queue slot batch "
         "river mountain garden window yellow quiet number letter winter summer market engine signal "
         "history science music travel kitchen forest ocean bridge castle planet silver morning").split()

# (kind, weight): prompt shapes; tokens are targets, calibrated by /tokenize.
KINDS = (("short", 35), ("medium", 25), ("shared", 30), ("long", 10))
MAX_TOKENS = ((1, 10), (8, 20), (32, 25), (64, 25), (128, 15), (256, 5))


# ---------------------------------------------------------------- machine

def machine():
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "?")
    except OSError:
        pass
    mem = "?"
    try:
        with open("/proc/meminfo") as f:
            mem = f"{int(f.readline().split()[1]) / 2**20:.1f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return f"{cpu}, {os.cpu_count()} cores, {mem} RAM, {platform.system()} {platform.release()}"


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def commit():
    try:
        sha = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--", "src"], capture_output=True,
                               text=True, timeout=10).stdout.strip()
        return sha + (" (src/ modified)" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "?"


def rss_mb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def kv_block_mb(strata, model, block_tokens):
    """Bytes of one KV block: layers x 2 (K, V) x tokens x kv heads x head dim x fp16."""
    out = subprocess.run([strata, "model", "info", model], capture_output=True, text=True, timeout=60).stdout
    m = re.search(r"layers (\d+),.*\(kv (\d+)\), head dim (\d+)", out)
    if not m:
        return None
    layers, kv, hd = map(int, m.groups())
    return layers * 2 * block_tokens * kv * hd * 2 / 2**20


# ---------------------------------------------------------------- server

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`strata serve` on a free loopback port, its log in OUT/serve.log."""

    def __init__(self, a, out):
        self.cache_dir = tempfile.mkdtemp(prefix="strata-load-kv-")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cmd = [a.strata, "serve", "-m", a.model, "--host", "127.0.0.1", "--port", str(self.port),
                    "--parallel", str(a.parallel), "--queue", str(a.queue), "--queue-timeout",
                    str(a.queue_timeout), "--ctx", str(a.ctx), "--cache-mem-mb", str(a.cache_mem_mb),
                    "--cache-disk-mb", str(a.cache_disk_mb), "--cache-dir", self.cache_dir,
                    "--header-timeout", str(a.header_timeout)]
        self.log = open(os.path.join(out, "serve.log"), "w")
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT)
        self.rc = None

    def wait_healthy(self, limit_s=60):
        deadline = time.time() + limit_s
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"strata serve exited with {self.proc.returncode}; see {self.log.name}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise SystemExit(f"strata serve not healthy after {limit_s} s")

    def stop(self, limit_s=60):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(limit_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.rc = self.proc.returncode
        self.log.close()
        shutil.rmtree(self.cache_dir, ignore_errors=True)
        return self.rc


def metrics(url):
    text = httpx.get(url + "/metrics", timeout=10).text
    return {k: float(v) for k, v in re.findall(r"^(strata_\w+) (\S+)$", text, re.M)}


class RssSampler(threading.Thread):
    """VmRSS of the server once a second, (wall time, MiB), until stopped (at most 24 h of samples)."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.samples, self.stop_ev = pid, [], threading.Event()

    def run(self):
        for _ in range(86400):
            v = rss_mb(self.pid)
            if v is not None:
                self.samples.append((time.time(), v))
            if self.stop_ev.wait(1.0):
                return


# ---------------------------------------------------------------- prompts

class Prompts:
    """Seeded prompt text; words_per_token measured on the server's tokenizer."""

    def __init__(self, url, seed, ctx):
        self.ctx = ctx
        rng = random.Random(seed)
        sample = " ".join(rng.choice(WORDS) for _ in range(2000))
        n = len(httpx.post(url + "/tokenize", json={"content": sample}, timeout=60).json()["tokens"])
        self.tok_per_word = n / 2000
        self.system = "You are a careful assistant. Reference notes follow. " + self.text(rng, 1200)

    def text(self, rng, tokens):
        return " ".join(rng.choice(WORDS) for _ in range(max(1, int(tokens / self.tok_per_word))))

    def make(self, rng, kind):
        """(system or None, user text, estimated prompt tokens)."""
        q = f"Question {rng.randrange(10**6)}: in one sentence, what is a {rng.choice(WORDS)}?"
        if kind == "short":
            return None, q, 40
        if kind == "medium":
            n = rng.randint(150, 500)
            return None, self.text(rng, n) + "\n" + q, n + 40
        if kind == "shared":
            return self.system, q, 1250
        n = rng.randint(1200, 1500)
        return None, self.text(rng, n) + "\n" + q, n + 40


def weighted(rng, pairs):
    return rng.choices([p[0] for p in pairs], weights=[p[1] for p in pairs])[0]


# ---------------------------------------------------------------- one request

def model_id(url):
    return httpx.get(url + "/v1/models", timeout=10).json()["data"][0]["id"]


def body(api, system, user, max_tokens, rng, model):
    if api == "openai":
        msgs = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
        return "/v1/chat/completions", {"messages": msgs, "max_tokens": max_tokens, "stream": True,
                                        "temperature": 0.8, "seed": rng.randrange(2**31),
                                        "stream_options": {"include_usage": True}}
    b = {"model": model, "messages": [{"role": "user", "content": user}], "max_tokens": max_tokens,
         "stream": True, "temperature": 0.8}
    if system:
        b["system"] = system
    return "/v1/messages", b


def read_stream(resp, api, rec, stop_after, t0):
    """Read SSE events; returns 'completed', 'disconnected' (stop_after deltas seen) or 'lost'."""
    event = None
    for line in resp.iter_lines():
        if line.startswith("event:"):
            event = line[6:].strip()
            continue
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if api == "openai" and data == "[DONE]":
            return "completed" if rec.get("finish") else "lost"
        try:
            ev = json.loads(data)
        except ValueError:
            rec["error"] = "bad SSE data: " + data[:80]
            return "lost"
        if event == "error" or "error" in ev:
            rec["error"] = "error event: " + json.dumps(ev)[:160]
            return "lost"
        if note_event(api, ev, rec, t0):
            rec["deltas"] = rec.get("deltas", 0) + 1
            if stop_after and rec["deltas"] >= stop_after:
                return "disconnected"
        if api == "anthropic" and ev.get("type") == "message_stop":
            return "completed" if rec.get("finish") else "lost"
    rec["error"] = "stream ended without its terminator"
    return "lost"


def note_event(api, ev, rec, t0):
    """Record usage, finish reason and TTFT; True when the event carries generated text."""
    text = False
    if api == "openai":
        for ch in ev.get("choices") or []:
            text = text or bool((ch.get("delta") or {}).get("content"))
            rec["finish"] = ch.get("finish_reason") or rec.get("finish")
        u = ev.get("usage")
        if u:
            rec["prompt_tokens"], rec["completion_tokens"] = u.get("prompt_tokens"), u.get("completion_tokens")
            rec["cached_tokens"] = (u.get("prompt_tokens_details") or {}).get("cached_tokens")
    else:
        t = ev.get("type")
        if t == "message_start":
            u = ev["message"].get("usage") or {}
            rec["prompt_tokens"] = (u.get("input_tokens") or 0) + (u.get("cache_read_input_tokens") or 0)
            rec["cached_tokens"] = u.get("cache_read_input_tokens")
        elif t == "content_block_delta":
            text = True
        elif t == "message_delta":  # its usage is final; message_start's shows no cache reads yet
            u = ev.get("usage") or {}
            rec["finish"] = (ev.get("delta") or {}).get("stop_reason")
            rec["completion_tokens"] = u.get("output_tokens")
            if "input_tokens" in u:
                rec["prompt_tokens"] = (u.get("input_tokens") or 0) + (u.get("cache_read_input_tokens") or 0)
                rec["cached_tokens"] = u.get("cache_read_input_tokens")
    if text and "ttft" not in rec:
        rec["ttft"] = time.perf_counter() - t0
    return text


def one_request(client, url, api, path, payload, rec, plan, timeout_s):
    """Send one streamed request; fill rec (outcome, status, times). plan: (mode, arg)."""
    mode, arg = plan
    read_to = arg if mode == "giveup" else timeout_s
    t0 = time.perf_counter()
    try:
        with client.stream("POST", url + path, json=payload,
                           timeout=httpx.Timeout(read_to, connect=10, write=30, pool=10)) as resp:
            rec["status"] = resp.status_code
            if resp.status_code != 200:
                resp.read()
                rec["outcome"] = classify_status(resp.status_code)
                rec["error"] = resp.text[:200]
                rec["retry_after"] = resp.headers.get("retry-after")
            else:
                rec["outcome"] = read_stream(resp, api, rec, arg if mode == "mid" else (1 if mode == "giveup" else 0), t0)
    except httpx.TimeoutException as e:
        if mode == "giveup":
            rec["outcome"] = "disconnected"
        else:
            rec["outcome"], rec["error"] = "lost", f"timeout: {type(e).__name__}"
    except httpx.HTTPError as e:
        rec["outcome"], rec["error"] = "lost", f"{type(e).__name__}: {e}"[:200]
    rec["total"] = time.perf_counter() - t0


def classify_status(code):
    if code in (503, 529):
        return "refused"
    return "5xx" if code >= 500 else "4xx"


# ---------------------------------------------------------------- clients

class Run:
    """Shared state of the clients: the records and the stop time."""

    def __init__(self, a, url, prompts):
        self.a, self.url, self.prompts = a, url, prompts
        self.records, self.lock = [], threading.Lock()
        self.conns = []  # idle and slow connections: {"kind", "closed_after"}
        self.deadline = None
        self.model = model_id(url)

    def plan(self, rng):
        r = rng.random()
        if r < self.a.disconnect_share * 0.75:
            return ("mid", rng.randint(1, 6))
        if r < self.a.disconnect_share:
            return ("giveup", round(rng.uniform(0.3, 3.0), 2))
        return ("full", 0)

    def client_loop(self, cid):
        rng = random.Random(self.a.seed * 1000 + cid)
        with httpx.Client() as client:
            for n in range(MAX_REQUESTS_PER_CLIENT):
                if time.time() >= self.deadline:
                    return
                rec = self.request(client, rng, cid, n)
                if rec["outcome"] == "refused":
                    try:
                        wait = min(float(rec.get("retry_after") or 1), 2.0)
                    except ValueError:
                        wait = 1.0
                    time.sleep(max(0.0, min(wait, self.deadline - time.time())))

    def request(self, client, rng, cid, n):
        api = "openai" if rng.random() < 0.5 else "anthropic"
        kind = weighted(rng, KINDS)
        system, user, est = self.prompts.make(rng, kind)
        max_tokens = min(weighted(rng, MAX_TOKENS), max(1, self.a.ctx - est - 64))
        path, payload = body(api, system, user, max_tokens, rng, self.model)
        plan = self.plan(rng)
        rec = {"client": cid, "n": n, "api": api, "kind": kind, "max_tokens": max_tokens, "plan": plan[0],
               "sent_at": time.time()}
        one_request(client, self.url, api, path, payload, rec, plan, self.a.request_timeout)
        with self.lock:
            self.records.append(rec)
        return rec

    def hostile_loop(self, kind):
        """An idle or slow connection, again each time the server closes it."""
        host, port = self.url.split("//")[1].split(":")
        head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"X-Padding: " + b"p" * 200 + b"\r\nContent-Length: 20\r\n\r\n")
        limit = self.a.header_timeout + 3
        while time.time() < self.deadline:
            t0, closed, sent = time.time(), None, 0
            try:
                s = socket.create_connection((host, int(port)), timeout=limit)
            except OSError:
                time.sleep(0.5)
                continue
            with s:
                s.settimeout(1.0)
                while closed is None and time.time() - t0 < limit:
                    try:
                        if kind == "slow" and sent < len(head):
                            s.sendall(head[sent:sent + 1])
                            sent += 1
                        data = s.recv(4096)
                        if data == b"" or data.startswith(b"HTTP/1.1 408"):
                            closed = time.time() - t0
                    except socket.timeout:
                        pass
                    except OSError:
                        closed = time.time() - t0
            with self.lock:
                self.conns.append({"kind": kind, "closed_after": None if closed is None else round(closed, 2),
                                   "bytes_sent": sent})

    def run(self):
        self.deadline = time.time() + self.a.duration
        hostile = [threading.Thread(target=self.hostile_loop, args=(k,), daemon=True)
                   for k, n in (("idle", self.a.idle_clients), ("slow", self.a.slow_clients)) for _ in range(n)]
        for t in hostile:
            t.start()
        threads = [threading.Thread(target=self.client_loop, args=(i,), daemon=True) for i in range(self.a.clients)]
        for t in threads:
            t.start()
        # Each request is bounded by --request-timeout per read (and the server's --queue-timeout).
        join_by = self.deadline + self.a.request_timeout + 60
        for t in threads:
            t.join(max(0.0, join_by - time.time()))
        for t in hostile:
            t.join(self.a.header_timeout + 5)
        return sum(t.is_alive() for t in threads)


# ---------------------------------------------------------------- checks after

def wait_idle(url, limit_s=30):
    """Seconds until no request holds a slot or a queue place (None: not within limit_s)."""
    t0 = time.time()
    while time.time() - t0 < limit_s:
        m = metrics(url)
        if m.get("strata_requests_active", 1) == 0 and m.get("strata_requests_queued", 1) == 0:
            return round(time.time() - t0, 1)
        time.sleep(0.5)
    return None


def still_serves(url):
    """One short request per API after the load: both must answer 200."""
    ok, model = [], model_id(url)
    for path, b in (("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}),
                    ("/v1/messages", {"model": model, "messages": [{"role": "user", "content": "Hi"}],
                                      "max_tokens": 4})):
        try:
            ok.append(httpx.post(url + path, json=b, timeout=120).status_code == 200)
        except httpx.HTTPError:
            ok.append(False)
    return all(ok)


def warm_up(url):
    """Touch the weights and both code paths before RSS 'before' is read."""
    still_serves(url)
    time.sleep(1)


# ---------------------------------------------------------------- report

def pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(-(-p * len(xs) // 100)) - 1))]  # nearest rank


def summarize(a, recs, wall, rss, met0, met1, extra):
    count = lambda o: sum(r["outcome"] == o for r in recs)
    done = [r for r in recs if r["outcome"] == "completed"]
    ttft = [r["ttft"] for r in done if "ttft" in r]
    total = [r["total"] for r in done]
    gen = sum(r.get("completion_tokens") or 0 for r in done)
    s = {"sent": len(recs), "completed": count("completed"), "disconnected": count("disconnected"),
         "lost": count("lost"), "refused_503_529": count("refused"), "other_5xx": count("5xx"),
         "http_4xx": count("4xx"), "wall_s": round(wall, 1),
         "ttft_p50": pct(ttft, 50), "ttft_p99": pct(ttft, 99), "total_p50": pct(total, 50),
         "total_p99": pct(total, 99), "completed_tokens": gen, "tok_s_completed": gen / wall if wall else 0,
         "tok_s_server": (met1.get("strata_generated_tokens_total", 0) - met0.get("strata_generated_tokens_total", 0)) / wall
         if wall else 0, **rss, **extra}
    s["by_api"] = {api: sum(r["api"] == api for r in recs) for api in ("openai", "anthropic")}
    s["by_kind"] = {k: sum(r["kind"] == k for r in recs) for k, _ in KINDS}
    for api in ("openai", "anthropic"):
        sh = [r for r in done if r["kind"] == "shared" and r["api"] == api and r.get("prompt_tokens")]
        s[f"shared_{api}"] = {"completed": len(sh), "hits": sum((r.get("cached_tokens") or 0) > 0 for r in sh),
                              "prompt": sum(r["prompt_tokens"] for r in sh),
                              "cached": sum(r.get("cached_tokens") or 0 for r in sh)}
    for kind in ("idle", "slow"):
        cs = [c for c in extra.get("conns", []) if c["kind"] == kind]
        cut = [c["closed_after"] for c in cs if c["closed_after"] is not None]
        s[f"{kind}_connections"] = {"opened": len(cs), "closed_by_server": len(cut), "closed_after_max_s": max(cut)
                                    if cut else None}
    s.pop("conns", None)
    s["errors"] = sorted({r["error"] for r in recs if r["outcome"] in ("lost", "5xx", "4xx") and r.get("error")})[:20]
    return s


def verdicts(s):
    v = {"0 lost": s["lost"] == 0,
         "no 5xx but queue refusals": s["other_5xx"] == 0,
         "no 4xx": s["http_4xx"] == 0,
         "idle after (no slot or queue place held)": s["idle_after_s"] is not None,
         "still serves after": s["serves_after"],
         "clean exit on SIGTERM": s["exit_code"] == 0,
         **{f"every {k} connection closed within the header timeout + 3 s":
            s[f"{k}_connections"]["closed_by_server"] == s[f"{k}_connections"]["opened"]
            for k in ("idle", "slow") if s[f"{k}_connections"]["opened"]},
         f"RSS after <= before + KV pool + {RSS_SLACK_MB} MiB": s["rss_after"] is not None
         and s["rss_after"] <= s["rss_bound"]}
    return v


def fmt(x, unit=""):
    if x is None:
        return "-"
    return f"{x:.2f}{unit}" if isinstance(x, float) else f"{x}{unit}"


def report(a, s, v, met0, met1, cmd):
    L = ["# Strata load test", "",
         f"- machine: {s['machine']}",
         f"- load average (1/5/15 min): before {s['load_before']}, after {s['load_after']}",
         f"- strata {s['commit']}; model {os.path.basename(a.model)}",
         f"- server: `{' '.join(cmd[1:])}` (cache-dir: a fresh temporary folder)",
         f"- clients: {a.clients} closed-loop streaming, {a.duration} s, seed {a.seed}; "
         f"{int(a.disconnect_share * 100)}% planned disconnects (3/4 after 1-6 deltas, 1/4 give up after a "
         f"0.3-3 s read timeout); APIs {s['by_api']}; kinds {s['by_kind']}",
         f"- beside them: {a.idle_clients} idle and {a.slow_clients} slow (header at 1 byte/s) connections, "
         f"--header-timeout {a.header_timeout}",
         f"- queue refusals (503/529) are allowed: --queue {a.queue}, --queue-timeout {a.queue_timeout}", "",
         "| measure | value |", "|---|---|"]
    rows = [("requests sent", s["sent"]), ("completed", s["completed"]),
            ("disconnected on purpose", s["disconnected"]), ("lost", s["lost"]),
            ("503/529 queue refusals (stated)", s["refused_503_529"]), ("other 5xx", s["other_5xx"]),
            ("4xx", s["http_4xx"]), ("TTFT p50 / p99 s (completed)", f"{fmt(s['ttft_p50'])} / {fmt(s['ttft_p99'])}"),
            ("total p50 / p99 s (completed)", f"{fmt(s['total_p50'])} / {fmt(s['total_p99'])}"),
            ("tokens/s (completed replies' tokens / wall)", fmt(s["tok_s_completed"])),
            ("tokens/s (server generated_tokens delta / wall)", fmt(s["tok_s_server"])),
            ("wall s (load + drain)", s["wall_s"]),
            *[(f"shared system prompt, {api}: requests with a cache hit; cached / prompt tokens",
               f"{x['hits']} of {x['completed']}; {x['cached']} / {x['prompt']}")
              for api, x in (("openai", s["shared_openai"]), ("anthropic", s["shared_anthropic"]))],
            ("RSS MiB before / peak / after", f"{fmt(s['rss_before'])} / {fmt(s['rss_peak'])} / {fmt(s['rss_after'])}"),
            ("RSS bound MiB (before + KV pool " + fmt(s["kv_pool_mb"]) + f" + {RSS_SLACK_MB})", fmt(s["rss_bound"])),
            ("RSS MiB at 1/3 of the load, at its end", f"{fmt(s['rss_third'])}, {fmt(s['rss_load_end'])}"),
            ("idle after load (s until active = queued = 0)", fmt(s["idle_after_s"])),
            *[(f"{k} connections: opened; closed by the server; latest close s",
               f"{x['opened']}; {x['closed_by_server']}; {fmt(x['closed_after_max_s'])}")
              for k, x in (("idle", s["idle_connections"]), ("slow", s["slow_connections"])) if x["opened"]],
            ("server exit code on SIGTERM", s["exit_code"])]
    L += [f"| {k} | {val} |" for k, val in rows]
    L += ["", "| /metrics | before | after | delta |", "|---|---|---|---|"]
    for k in sorted(set(met0) | set(met1)):
        b, e = met0.get(k, 0), met1.get(k, 0)
        L.append(f"| {k} | {b:.0f} | {e:.0f} | {e - b:+.0f} |")
    L += ["", "Bar: " + ", ".join(f"{k}: {'yes' if ok else 'NO'}" for k, ok in v.items())]
    if s["errors"]:
        L += ["", "Errors (distinct, first 20):", ""] + [f"- `{e}`" for e in s["errors"]]
    if s["threads_left"]:
        L += ["", f"{s['threads_left']} client threads still running at the end (their requests are not counted)"]
    return "\n".join(L) + "\n"


# ---------------------------------------------------------------- main

def rss_stats(sampler, load_t0, load_t1):
    xs = sampler.samples
    during = [v for t, v in xs if load_t0 <= t <= load_t1]
    third = load_t0 + (load_t1 - load_t0) / 3
    at = lambda when: min(xs, key=lambda p: abs(p[0] - when))[1] if xs else None
    return {"rss_peak": max(v for _, v in xs) if xs else None, "rss_third": at(third) if during else None,
            "rss_load_end": at(load_t1) if during else None}


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--strata", default=os.path.join(ROOT, "strata"))
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--duration", type=float, default=180, help="seconds of load (new requests stop then)")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--queue", type=int, default=64)
    ap.add_argument("--queue-timeout", type=int, default=60)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--cache-mem-mb", type=int, default=128)
    ap.add_argument("--cache-disk-mb", type=int, default=256)
    ap.add_argument("--disconnect-share", type=float, default=0.2)
    ap.add_argument("--request-timeout", type=float, default=300, help="client read timeout per request")
    ap.add_argument("--idle-clients", type=int, default=0, help="connections that send nothing")
    ap.add_argument("--slow-clients", type=int, default=0, help="connections that send a header at 1 byte/s")
    ap.add_argument("--header-timeout", type=int, default=10, help="the server's --header-timeout")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out", "load"))
    return ap.parse_args(argv)


def main(argv=None):
    a = parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    info = {"machine": machine(), "commit": commit(), "load_before": loadavg()}
    srv = Server(a, a.out)
    sampler = RssSampler(srv.proc.pid)
    try:
        srv.wait_healthy()
        sampler.start()
        warm_up(srv.url)
        prompts = Prompts(srv.url, a.seed, a.ctx)
        met0, rss_before = metrics(srv.url), rss_mb(srv.proc.pid)
        run = Run(a, srv.url, prompts)
        t0 = time.time()
        left = run.run()
        t1 = time.time()
        wall = t1 - t0
        idle = wait_idle(srv.url)
        time.sleep(2)
        rss_after, met1 = rss_mb(srv.proc.pid), metrics(srv.url)
        serves = still_serves(srv.url)
    finally:
        sampler.stop_ev.set()
        rc = srv.stop()
    block = kv_block_mb(a.strata, a.model, 64)
    pool = block * (a.parallel * -(-a.ctx // 64) + int(a.cache_mem_mb / block) + 1) if block else a.cache_mem_mb
    info.update(load_after=loadavg(), threads_left=left, conns=run.conns, idle_after_s=idle, serves_after=serves, exit_code=rc,
                rss_before=rss_before, rss_after=rss_after, kv_pool_mb=pool,
                rss_bound=(rss_before or 0) + pool + RSS_SLACK_MB, **rss_stats(sampler, t0, t1))
    s = summarize(a, run.records, wall, {}, met0, met1, info)
    v = verdicts(s)
    s["bar"] = v
    text = report(a, s, v, met0, met1, srv.cmd)
    write_outputs(a.out, text, s, run.records, met0, met1)
    print(text)
    return 0 if all(v.values()) else 1


def write_outputs(out, text, s, recs, met0, met1):
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write(text)
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump({**s, "metrics_before": met0, "metrics_after": met1}, f, indent=1)
    with open(os.path.join(out, "requests.jsonl"), "w") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    sys.exit(main())
