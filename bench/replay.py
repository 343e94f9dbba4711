#!/usr/bin/env python3
"""Agentic replay benchmark: replay recorded coding-agent sessions against
one or more OpenAI-compatible servers and compare the prefill work each does
with the ideal (every prompt token that was never seen before, once).

    python3 bench/replay.py --serve strata='./strata serve -m M.gguf --port 8611 --cache-dir /tmp/kv' \\
        [--serve peer='build/llama-server/llama-server -m M.gguf --port 8614 --jinja'] \\
        [--target other=http://127.0.0.1:8080] \\
        [--sessions-file S.jsonl | --import CHATS.jsonl | workload flags] \\
        [--interleave 4 | --concurrency K] [--restart-after N] [--out /tmp/strata-replay]

Request k of a session carries the system prompt, the tools and the messages
up to turn k with the RECORDED assistant messages; max_tokens 16,
temperature 0, streamed. Targets run one after another on the same requests;
a --serve target is started by this script (its URL comes from the command's
--port/--host), stopped after its turn, and restarted (SIGTERM, same command)
after the request(s) named by --restart-after. See bench/README.md.
"""
import argparse
import array
import concurrent.futures as cf
import datetime
import hashlib
import json
import os
import platform
import shlex
import signal
import socket
import subprocess
import sys
import time

import httpx
import openai

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import import_chats  # noqa: E402
import workload  # noqa: E402

BLOCK = 16  # granularity of the prefix index used for the ideal


def schedule(sessions, interleave):
    """(session index, k) in round-robin order, `interleave` sessions live at once."""
    waiting = list(range(len(sessions)))
    live, nxt, order = [], {}, []
    while waiting or live:
        while waiting and len(live) < max(1, interleave):
            s = waiting.pop(0)
            live.append(s)
            nxt[s] = 0
        for s in list(live):
            order.append((s, nxt[s]))
            nxt[s] += 1
            if nxt[s] >= workload.n_requests(sessions[s]):
                live.remove(s)
    return order


class PrefixIndex:
    """Longest token prefix shared with any earlier prompt: whole blocks of BLOCK tokens through
    a chained hash, then token by token against the latest 32 prompts sharing those blocks
    (exact unless more than 32 earlier prompts share them and diverge inside the next block)."""

    def __init__(self):
        self.prompts = []  # array('i') per prompt
        self.owner = {}    # chained hash of the first n*BLOCK tokens -> indices of prompts (latest 32)

    def add(self, toks):
        toks = array.array("i", toks)
        h, best_owner, nblocks, matching = b"", None, 0, True
        hashes = []
        for b in range(len(toks) // BLOCK):
            h = hashlib.blake2b(h + toks[b * BLOCK:(b + 1) * BLOCK].tobytes(), digest_size=16).digest()
            hashes.append(h)
            o = self.owner.get(h) if matching else None
            if o is None:
                matching = False
            else:
                best_owner, nblocks = o, b + 1
        shared = nblocks * BLOCK
        if best_owner is None and len(toks):
            best_owner = self.owner.get(("first", toks[0]), [])
        cands = best_owner or []
        best = shared
        for c in cands:  # refine inside the next block (or short prompts)
            other, n = self.prompts[c], shared
            while n < len(toks) and n < len(other) and toks[n] == other[n]:
                n += 1
            best = max(best, n)
        i = len(self.prompts)
        self.prompts.append(toks)
        for h in hashes + ([("first", toks[0])] if len(toks) else []):
            lst = self.owner.setdefault(h, [])
            lst.append(i)
            del lst[:-32]
        return best


def tools_arg(tools):
    return tools if tools else None


def _compact(x):
    return json.dumps(x, separators=(",", ":"), ensure_ascii=False)


def tools_text(tools):
    """The tool instructions Strata's generic tool format adds to the system message (the same
    text as src/text/toolcall_prompt.c writes for tool_choice auto)."""
    out = ["# Tools\n\nYou can call these tools (functions):\n\n"]
    for t in tools:
        fn = t.get("function") if isinstance(t.get("function"), dict) else t
        if not fn.get("name"):
            continue
        out.append("- " + fn["name"] + (": " + fn["description"] if fn.get("description") else ""))
        schema = fn.get("parameters", fn.get("input_schema"))
        out.append("\n  Arguments (JSON Schema): "
                   + (_compact(schema) if schema is not None else '{"type":"object","properties":{}}') + "\n")
    out.append("\n# How to reply\n\nReply with exactly one JSON object and nothing else: no code fence, "
               "no text before or after it.\n\n"
               "To call tools, reply:\n"
               '{"tool_calls": [{"name": "<tool name>", "arguments": {<arguments>}}]}\n'
               '"arguments" is a JSON object that follows the tool\'s schema. Put several calls in the list to '
               "run them together. Each tool's result comes back in a later message; then reply again in this "
               "same JSON form.\n"
               "\nTo answer the user directly, without a tool, reply:\n"
               '{"content": "<your answer>"}\n')
    return "".join(out)


def tools_as_text(messages, tools):
    """For a server whose chat template drops tools and tool calls (llama-server with SmolLM2's
    template): the same conversation with Strata's generic tool format applied on the client side,
    so that the server renders the same text Strata does: the tool instructions join the first
    system message ("\n\n" between) or become one, an assistant message with tool calls becomes
    their compact JSON {"tool_calls":[{"name","arguments"}]} (its text dropped, as Strata does)."""
    if not tools:
        return messages, None
    block = tools_text(tools)
    out = []
    for i, m in enumerate(messages):
        m = dict(m)
        if i == 0 and m.get("role") == "system":
            m["content"] = (m.get("content") or "") + "\n\n" + block
        elif m.get("role") == "assistant" and m.get("tool_calls"):
            calls = []
            for c in m["tool_calls"]:
                fn = c.get("function", {})
                args = fn.get("arguments")
                if isinstance(args, str):
                    try:
                        args = json.loads(args)
                    except ValueError:
                        pass
                calls.append({"name": fn.get("name"), "arguments": args})
            m = {"role": "assistant", "content": _compact({"tool_calls": calls})}
        out.append(m)
    if not (messages and messages[0].get("role") == "system"):
        out.insert(0, {"role": "system", "content": block})
    return out, None


def tokenize_chat(cli, url, messages, tools):
    body = {"messages": messages}
    if tools:
        body["tools"] = tools
    r = cli.post(url + "/apply-template", json=body)
    r.raise_for_status()
    r = cli.post(url + "/tokenize", json={"content": r.json()["prompt"], "parse_special": True})
    r.raise_for_status()
    return r.json()["tokens"]


# ----------------------------------------------------------------------------- servers

def _flag(argv, *names):
    """Value of the last --name V / --name=V in argv (None if absent)."""
    val = None
    for i, x in enumerate(argv):
        for n in names:
            if x == n and i + 1 < len(argv):
                val = argv[i + 1]
            elif x.startswith(n + "=") and n.startswith("--"):
                val = x[len(n) + 1:]
    return val


class Server:
    """A server this script starts from a command line, stops and restarts."""

    def __init__(self, name, cmd, log_path, start_timeout):
        self.name, self.cmd, self.log_path, self.start_timeout = name, cmd, log_path, start_timeout
        self.argv = shlex.split(cmd)
        port = _flag(self.argv, "--port")
        if not port:
            raise SystemExit(f"--serve {name}: the command needs --port N (the URL is taken from it)")
        host = _flag(self.argv, "--host") or "127.0.0.1"
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        self.host, self.port = host, int(port)
        self.url = f"http://{host}:{self.port}"
        self.proc = None

    def _port_busy(self):
        try:
            with socket.create_connection((self.host, self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def start(self):
        """Start and wait for GET /health 200; seconds taken."""
        if self._port_busy():
            raise RuntimeError(f"port {self.port} is already in use (another server running?)")
        t0 = time.perf_counter()
        log = open(self.log_path, "a")
        log.write(f"\n=== replay.py: start {datetime.datetime.now().isoformat(timespec='seconds')}: {self.cmd}\n")
        log.flush()
        self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        log.close()
        with httpx.Client(timeout=2.0) as cli:
            while time.perf_counter() - t0 < self.start_timeout:
                if self.proc.poll() is not None:
                    rc = self.proc.returncode
                    self.proc = None
                    raise RuntimeError(f"exited with status {rc} while starting (log: {self.log_path})")
                try:
                    if cli.get(self.url + "/health").status_code == 200:
                        return time.perf_counter() - t0
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"no /health 200 within {self.start_timeout:.0f} s (log: {self.log_path})")

    def stop(self):
        """SIGTERM, wait for the exit (SIGKILL after 60 s); seconds taken."""
        t0 = time.perf_counter()
        p, self.proc = self.proc, None
        if p is None or p.poll() is not None:
            return 0.0
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            print(f"[{self.name}] did not exit 60 s after SIGTERM: SIGKILL", file=sys.stderr)
            p.kill()
            p.wait()
        return time.perf_counter() - t0

    def restart(self):
        t_stop = self.stop()
        return t_stop, self.start()

    def exited(self):
        """The exit status if the server died on its own, else None."""
        if self.proc is not None and self.proc.poll() is not None:
            return self.proc.returncode
        return None


# ----------------------------------------------------------------------------- one request

def _extra(obj, key):
    ex = getattr(obj, "model_extra", None) or {}
    return ex.get(key)


def one_request(client, model, messages, tools, max_tokens, extra_body=None):
    """One streamed chat request: TTFT, usage, llama-server's timings, the reply text (row["text"])."""
    t0 = time.perf_counter()
    ttft, first_chunk, usage, timings, finish, err = None, None, None, None, None, None
    text = []
    try:
        stream = client.chat.completions.create(
            model=model, messages=messages, tools=tools_arg(tools) or openai.NOT_GIVEN, max_tokens=max_tokens,
            temperature=0, stream=True, stream_options={"include_usage": True}, extra_body=extra_body)
        for ch in stream:
            if first_chunk is None:
                first_chunk = time.perf_counter() - t0
            if ch.usage:
                usage = ch.usage
            t = _extra(ch, "timings")
            if t:
                timings = t
            for c in ch.choices or []:
                d = c.delta
                if ttft is None and d is not None and (d.content or d.tool_calls):
                    ttft = time.perf_counter() - t0
                if d is not None and d.content:
                    text.append(d.content)
                if c.finish_reason:
                    finish = c.finish_reason
    except Exception as e:  # keep going: record the error
        err = f"{type(e).__name__}: {e}"[:300]
    total = time.perf_counter() - t0
    row = {"ttft_s": ttft if ttft is not None else total, "ttft_at": "delta" if ttft is not None else "end",
           "first_chunk_s": first_chunk, "total_s": total, "finish_reason": finish,
           "prompt_tokens": None, "completion_tokens": None,
           "usage_cached_tokens": None, "timings_cache_n": None, "timings_prompt_n": None,
           "timings_prompt_ms": None, "text": "".join(text)}
    if usage:
        row["prompt_tokens"] = usage.prompt_tokens
        row["completion_tokens"] = usage.completion_tokens
        det = getattr(usage, "prompt_tokens_details", None)
        if det is not None and getattr(det, "cached_tokens", None) is not None:
            row["usage_cached_tokens"] = det.cached_tokens
        sc = _extra(usage, "strata_cache")  # Strata: where the cached tokens came from
        if isinstance(sc, dict):
            row["strata_live_tokens"] = sc.get("live_tokens")
            row["strata_disk_tokens"] = sc.get("disk_tokens")
    if timings:
        row["timings_cache_n"] = timings.get("cache_n")
        row["timings_prompt_n"] = timings.get("prompt_n")
        row["timings_prompt_ms"] = timings.get("prompt_ms")
    # cached tokens as reported: usage.prompt_tokens_details.cached_tokens, else timings.cache_n, else 0
    if row["usage_cached_tokens"] is not None:
        row["cached_tokens"], row["cached_from"] = row["usage_cached_tokens"], "usage"
    elif row["timings_cache_n"] is not None:
        row["cached_tokens"], row["cached_from"] = row["timings_cache_n"], "timings"
    else:
        row["cached_tokens"], row["cached_from"] = (0 if usage else None), "none"
    if err:
        row["error"] = err
    return row


# ----------------------------------------------------------------------------- replay of one target

class Runner:
    def __init__(self, name, client, model, sessions, max_tokens, server, restart_points, log, render):
        self.name, self.client, self.model, self.sessions = name, client, model, sessions
        self.render = render  # (messages, tools) -> (messages, tools) sent
        self.max_tokens, self.server, self.log = max_tokens, server, log
        self.restart_points = sorted(set(restart_points))
        self.restarts = []  # {"after_request", "stop_s", "start_s"}
        self.crashes = []   # {"after_request", "status", "log_tail"}
        self.t0 = None

    def _check_alive(self, n_sent, had_error=False):
        """A --serve target that died by itself is recorded and started again (same command), so the
        rest of the run goes on; requests sent to it in the meantime carry their errors."""
        if not self.server:
            return
        rc = self.server.exited()
        t0 = time.perf_counter()
        while rc is None and had_error and time.perf_counter() - t0 < 3:  # it may still be dying
            time.sleep(0.1)
            rc = self.server.exited()
        if rc is None:
            return
        tail = ""
        try:
            with open(self.server.log_path, errors="replace") as f:
                tail = " | ".join(ln.strip() for ln in f.read().splitlines()[-3:])
        except OSError:
            pass
        print(f"[{self.name}] SERVER DIED (status {rc}) by request {n_sent}; log: {tail}; starting it again",
              file=sys.stderr)
        self.crashes.append({"after_request": n_sent, "status": rc, "log_tail": tail[-300:]})
        self.server.stop()
        self.server.start()

    def _restart(self, n_sent):
        if not self.server:
            return
        print(f"[{self.name}] restarting after request {n_sent} (SIGTERM, same command)", file=sys.stderr)
        stop_s, start_s = self.server.restart()
        self.restarts.append({"after_request": n_sent, "stop_s": stop_s, "start_s": start_s})
        print(f"[{self.name}] restarted: stop {stop_s:.1f} s, start {start_s:.1f} s", file=sys.stderr)

    def _do(self, index, si, k):
        s = self.sessions[si]
        msgs, tools = self.render(workload.messages_upto(s, k), s.get("tools"))
        row = {"index": index, "session": s["id"], "k": k, "restarts_before": len(self.restarts),
               "start_s": time.perf_counter() - self.t0}
        row.update(one_request(self.client, self.model, msgs, tools, self.max_tokens))
        return row

    def run_round_robin(self, order, emit):
        """One request at a time in `order`; restart after the requests named by restart_points."""
        self.t0 = time.perf_counter()
        for i, (si, k) in enumerate(order):
            row = self._do(i, si, k)
            emit(row)
            self._check_alive(i + 1, "error" in row)
            if i + 1 in self.restart_points and i + 1 < len(order):
                self._restart(i + 1)

    def run_concurrent(self, conc, emit):
        """`conc` lanes, each replays one session at a time (its requests in order) and then takes
        the next session; at a restart point no new request is sent until all in flight are done."""
        self.t0 = time.perf_counter()
        queue = list(range(len(self.sessions)))
        total = sum(workload.n_requests(s) for s in self.sessions)
        lanes = [None] * conc  # [session index, next k] or None
        busy = {}  # future -> lane
        sent = 0
        pending_restarts = [p for p in self.restart_points if p < total]
        drain = False  # after an error: send nothing until all in flight are done, then check the server
        with cf.ThreadPoolExecutor(max_workers=conc) as ex:
            while True:
                barrier = bool(pending_restarts) and sent >= pending_restarts[0]
                if not barrier and not drain:
                    for li in range(conc):
                        if li in busy.values():
                            continue
                        if lanes[li] is None or lanes[li][1] >= workload.n_requests(self.sessions[lanes[li][0]]):
                            lanes[li] = [queue.pop(0), 0] if queue else None
                        if lanes[li] is None:
                            continue
                        si, k = lanes[li]
                        lanes[li][1] += 1
                        busy[ex.submit(self._do, sent, si, k)] = li
                        sent += 1
                        if pending_restarts and sent >= pending_restarts[0]:
                            break
                if not busy:
                    self._check_alive(sent, drain)
                    if drain:
                        drain = False
                        continue
                    if barrier:
                        self._restart(sent)
                        pending_restarts.pop(0)
                        continue
                    break
                done, _ = cf.wait(list(busy), return_when=cf.FIRST_COMPLETED)
                for f in done:
                    busy.pop(f)
                    row = f.result()
                    emit(row)
                    if "error" in row:
                        drain = True


# ----------------------------------------------------------------------------- report

def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def summarize(rows):
    ok = [r for r in rows if "error" not in r and r["prompt_tokens"] is not None]
    tt = [r["ttft_s"] for r in ok]
    prompt = sum(r["prompt_tokens"] for r in ok)
    cached = sum(r["cached_tokens"] for r in ok)
    have_ideal = ok and all(r.get("ideal_new_tokens") is not None for r in ok)
    ideal = sum(r["ideal_new_tokens"] for r in ok) if have_ideal else None
    after = [r for r in ok if r["restarts_before"] > 0]
    srcs = sorted({r["cached_from"] for r in ok})
    pn = [r["timings_prompt_n"] for r in ok if r["timings_prompt_n"] is not None]
    pms = [r["timings_prompt_ms"] for r in ok if r["timings_prompt_ms"] is not None]
    s = {"requests": len(rows), "errors": len(rows) - len(ok), "prefill_s": sum(tt),
         "ttft_p50": pct(tt, 50), "ttft_p90": pct(tt, 90), "ttft_p99": pct(tt, 99),
         "total_s": sum(r["total_s"] for r in ok),
         "ttft_at_end": sum(1 for r in ok if r["ttft_at"] == "end"),
         "prompt_tokens": prompt, "cached_tokens": cached, "prefill_work": prompt - cached,
         "ideal_tokens": ideal, "hit_rate": cached / prompt if prompt else float("nan"),
         "work_over_ideal": (prompt - cached) / ideal if ideal else float("nan"),
         "cached_from": ",".join(srcs),
         "server_prompt_n": sum(pn) if len(pn) == len(ok) and ok else None,
         "server_prompt_s": sum(pms) / 1000 if len(pms) == len(ok) and ok else None,
         "after_restart": {"requests": len(after), "prefill_s": sum(r["ttft_s"] for r in after),
                           "prompt_tokens": sum(r["prompt_tokens"] for r in after),
                           "cached_tokens": sum(r["cached_tokens"] for r in after),
                           "prefill_work": sum(r["prompt_tokens"] - r["cached_tokens"] for r in after),
                           "ideal_tokens": (sum(r["ideal_new_tokens"] for r in after) if have_ideal else None)}}
    return s


def _f(x, fmt):
    return "-" if x is None or x != x else format(x, fmt)


def table(summ):
    out = ["| target | requests | errors | prefill s (sum TTFT) | TTFT p50 s | TTFT p90 s | TTFT p99 s "
           "| prompt tok | cached tok | token hit rate | prefill work | ideal | work / ideal |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, s in summ.items():
        if s.get("skipped"):
            out.append(f"| {name} | skipped: {s['skipped']} |" + " |" * 11)
            continue
        out.append(f"| {name} | {s['requests']} | {s['errors']} | {s['prefill_s']:.1f} | {_f(s['ttft_p50'], '.2f')} "
                   f"| {_f(s['ttft_p90'], '.2f')} | {_f(s['ttft_p99'], '.2f')} | {s['prompt_tokens']} "
                   f"| {s['cached_tokens']} | {_f(s['hit_rate'], '.1%')} | {s['prefill_work']} "
                   f"| {_f(s['ideal_tokens'], 'd')} | {_f(s['work_over_ideal'], '.2f')} |")
    return "\n".join(out)


def restart_table(summ):
    rows = [(n, s) for n, s in summ.items() if not s.get("skipped") and s.get("restarts")]
    if not rows:
        return ""
    out = ["| target | restarts (stop s + start s) | requests after | prefill s after | prompt tok after "
           "| cached tok after | prefill work after | ideal after |",
           "|---|---|---|---|---|---|---|---|"]
    for n, s in rows:
        a = s["after_restart"]
        rs = ", ".join(f"after #{r['after_request']}: {r['stop_s']:.1f} + {r['start_s']:.1f}" for r in s["restarts"])
        out.append(f"| {n} | {rs} | {a['requests']} | {a['prefill_s']:.1f} | {a['prompt_tokens']} "
                   f"| {a['cached_tokens']} | {a['prefill_work']} | {_f(a['ideal_tokens'], 'd')} |")
    return "\n".join(out)


def plot(all_rows, restarts, path, title=""):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed (pip install matplotlib): no plot", file=sys.stderr)
        return False
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(10, 8), sharex=True)
    ideal_done = False
    for name, rows in all_rows.items():
        rows = sorted(rows, key=lambda r: r["index"])
        x = [r["index"] for r in rows]
        line, = ax.plot(x, [r["ttft_s"] for r in rows], marker=".", lw=1, label=name)
        cum, work = 0, []
        for r in rows:
            if r.get("prompt_tokens") is not None:
                cum += r["prompt_tokens"] - r["cached_tokens"]
            work.append(cum)
        ax2.plot(x, work, lw=1.5, color=line.get_color(), label=name)
        if not ideal_done and rows and all(r.get("ideal_new_tokens") is not None for r in rows):
            cum, ideal = 0, []
            for r in rows:
                cum += r["ideal_new_tokens"]
                ideal.append(cum)
            ax2.plot(x, ideal, "k--", lw=1, label="ideal")
            ideal_done = True
    for n in sorted(set(restarts)):
        for a in (ax, ax2):
            a.axvline(n - 0.5, color="grey", ls=":", lw=1)
    if restarts:
        ax.text(min(restarts) - 0.4, ax.get_ylim()[1] * 0.95, "restart", color="grey", fontsize=8, va="top")
    from matplotlib.ticker import MaxNLocator
    ax2.xaxis.set_major_locator(MaxNLocator(integer=True))
    if title:
        fig.suptitle(title, fontsize=9)
    ax.set_ylabel("TTFT (s)")
    ax.set_title("TTFT per request")
    ax2.set_xlabel("request index (order sent)")
    ax2.set_ylabel("prompt - cached tokens (cumulative)")
    ax2.set_title("prefill work (cumulative) vs the ideal")
    for a in (ax, ax2):
        a.grid(alpha=0.3)
        a.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


# ----------------------------------------------------------------------------- machine description

def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def machine_info():
    cpu = next((ln.split(":", 1)[1].strip() for ln in _read("/proc/cpuinfo").splitlines()
                if ln.startswith("model name")), platform.processor() or "?")
    mem = next((int(ln.split()[1]) for ln in _read("/proc/meminfo").splitlines() if ln.startswith("MemTotal")), 0)
    osr = dict(ln.split("=", 1) for ln in _read("/etc/os-release").splitlines() if "=" in ln)
    repo = os.path.dirname(HERE)
    try:
        commit = subprocess.run(["git", "-C", repo, "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip() or "?"
        dirty = subprocess.run(["git", "-C", repo, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        if dirty:
            commit += " (+ uncommitted changes)"
    except OSError:
        commit = "?"
    return {"cpu": cpu, "cores": os.cpu_count(), "ram_gib": round(mem / 1048576, 1),
            "os": f"{osr.get('PRETTY_NAME', platform.system()).strip(chr(34))}, kernel {platform.release()}",
            "python": platform.python_version(), "strata_commit": commit}


_sha = {}


def file_sha(path):
    if path not in _sha:
        h = hashlib.sha256()
        try:
            with open(path, "rb") as f:
                for b in iter(lambda: f.read(1 << 20), b""):
                    h.update(b)
            _sha[path] = h.hexdigest()
        except OSError:
            _sha[path] = None
    return _sha[path]


def target_info(kind, value):
    """What the report says about a target: command, threads, model file and hash, binary version."""
    info = {"kind": kind, "value": value}
    if kind != "serve":
        return info
    argv = shlex.split(value)
    info["threads"] = _flag(argv, "-t", "--threads") or "default (one per core)"
    m = _flag(argv, "-m", "--model")
    if m:
        sha = file_sha(m)
        info["model"] = m
        info["model_sha256"] = sha[:16] if sha else "?"
    if "llama-server" in os.path.basename(argv[0]):
        try:
            r = subprocess.run([argv[0], "--version"], capture_output=True, text=True, timeout=30)
            v = " ".join(ln.strip() for ln in (r.stdout + r.stderr).splitlines() if ln.strip())
            info["version"] = v or "?"
        except (OSError, subprocess.SubprocessError) as e:
            info["version"] = f"? ({e})"
    return info


# ----------------------------------------------------------------------------- main

def parse_restarts(text, n_req):
    """Request counts after which to restart: "5", "3,7", "0.5" (half of the requests), "none"."""
    out = []
    for item in (text or "").replace(" ", "").split(","):
        if not item or item in ("none", "0"):
            continue
        n = max(1, round(float(item) * n_req)) if "." in item else int(item)
        if 0 < n < n_req:
            out.append(n)
    return sorted(set(out))


class TargetAction(argparse.Action):
    def __call__(self, parser, ns, value, option_string=None):
        name, sep, rest = value.partition("=")
        if not sep:
            if self.dest == "serve":
                parser.error("--serve needs NAME=COMMAND")
            name, rest = value, value
        lst = getattr(ns, "targets", None) or []
        lst.append(("serve" if self.dest == "serve" else "url", name, rest.strip()))
        ns.targets = lst


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", action=TargetAction, metavar="NAME=URL",
                   help="a running server's base URL (without /v1); repeatable")
    p.add_argument("--serve", action=TargetAction, metavar="NAME=COMMAND",
                   help="a server this script starts (URL from the command's --port/--host), stops after its "
                   "turn and restarts at --restart-after; repeatable, targets run in command-line order")
    p.add_argument("--tokenize-url", help="server whose /apply-template and /tokenize give the ideal "
                   "(default: each target's own URL)")
    p.add_argument("--no-ideal", action="store_true", help="skip tokenization (no ideal column)")
    p.add_argument("--sessions-file", help="load sessions (JSONL from bench/workload.py) instead of generating")
    p.add_argument("--import", dest="import_file", metavar="FILE",
                   help="replay conversations in OpenAI message format (JSON or JSONL; see bench/import_chats.py)")
    p.add_argument("--save-sessions", help="write the sessions replayed to this JSONL file")
    p.add_argument("--interleave", type=int, default=4, help="sessions live at once, served round robin, "
                   "one request at a time (when --concurrency is 1)")
    p.add_argument("--concurrency", type=int, default=1, metavar="K",
                   help="K sessions in flight at once, each sequential within itself (K > 1 replaces round robin)")
    p.add_argument("--restart-after", default="", metavar="N[,N...]",
                   help="restart each --serve target after its N-th request; comma-separated for several; "
                   "a fraction such as 0.5 means that share of the requests; 0 or none: no restart")
    p.add_argument("--tools-as-text", action="append", default=[], metavar="NAME",
                   help="for target NAME, send the tools and tool calls as text in Strata's generic tool format "
                   "(system message + JSON assistant turns, no `tools` field): for servers whose chat template "
                   "drops them (llama-server with SmolLM2); repeatable")
    p.add_argument("--max-tokens", type=int, default=1,
                   help="tokens generated per request (default 1: TTFT = end of the stream for every server)")
    p.add_argument("--model", help="model name sent (default: the target's first /v1/models entry)")
    p.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY", "none"))
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per request")
    p.add_argument("--start-timeout", type=float, default=300.0, help="seconds for a --serve target to be healthy")
    p.add_argument("--note", action="append", default=[], help="a line for the report's notes (repeatable)")
    p.add_argument("--out", default="/tmp/strata-replay", help="folder for requests.jsonl, summary.json, "
                   "report.md, replay.png and the servers' logs")
    workload.add_args(p)
    a = p.parse_args()
    targets = getattr(a, "targets", None) or []
    if not targets:
        p.error("give at least one --target or --serve")
    if sum(bool(x) for x in (a.sessions_file, a.import_file)) > 1:
        p.error("--sessions-file and --import exclude each other")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally blocks (servers stopped)

    if a.import_file:
        sessions = import_chats.import_file(a.import_file)
        source = f"imported from {a.import_file}"
    elif a.sessions_file:
        sessions = workload.load(a.sessions_file)
        source = f"sessions file {a.sessions_file}"
    else:
        sessions = workload.generate(a)
        source = (f"bench/workload.py: {a.sessions} sessions, seed {a.seed}, {a.agents} agents, system "
                  f"{a.system_tokens[0]}-{a.system_tokens[1]} tok, tools {a.tools[0]}-{a.tools[1]}, turns "
                  f"{a.turns[0]}-{a.turns[1]}, results {a.result_tokens[0]}-{a.result_tokens[1]} tok, "
                  f"change-early-block {a.change_early_block}, drop-reasoning {a.drop_reasoning}")
    if not sessions:
        raise SystemExit("no sessions to replay")
    if a.save_sessions:
        workload.save(sessions, a.save_sessions)
    conc = max(1, a.concurrency)
    order = schedule(sessions, conc if conc > 1 else a.interleave)  # the ideal's order (and round robin's)
    n_req = len(order)
    try:
        restart_points = parse_restarts(a.restart_after, n_req)
    except ValueError:
        p.error(f"--restart-after {a.restart_after!r}: give request counts or fractions, comma-separated")
    a.restart_after = restart_points
    mode = (f"concurrent: {conc} sessions in flight" if conc > 1 else f"round robin, interleave {a.interleave}")
    os.makedirs(a.out, exist_ok=True)
    print(f"{len(sessions)} sessions, {n_req} requests, {mode}"
          + (f", restart after request {a.restart_after}" if a.restart_after else ""), file=sys.stderr)

    machine = machine_info()
    machine["loadavg_start"] = os.getloadavg()
    started = datetime.datetime.now()
    t_run = time.perf_counter()
    hx = httpx.Client(timeout=a.timeout)
    prompt_hashes = {}  # target -> {(si, k): sha256 of the prompt's token ids}
    ideal_by_url = {}  # tokenize url -> {(si, k): new tokens} (only with --tokenize-url: shared by targets)
    all_rows, summ, infos, notes = {}, {}, {}, list(a.note)
    with open(os.path.join(a.out, "requests.jsonl"), "w") as out:
        for kind, name, value in targets:
            infos[name] = target_info(kind, value)
            if name in a.tools_as_text:
                infos[name]["tools_as_text"] = True
                render = tools_as_text
            else:
                render = lambda m, t: (m, t)  # noqa: E731
            server = None
            try:
                if kind == "serve":
                    server = Server(name, value, os.path.join(a.out, f"serve-{name}.log"), a.start_timeout)
                    url = server.url
                    print(f"[{name}] starting: {value}", file=sys.stderr)
                    try:
                        st = server.start()
                    except RuntimeError as e:
                        reason = f"did not start: {e}"
                        print(f"[{name}] {reason}; skipped", file=sys.stderr)
                        summ[name] = {"skipped": reason}
                        notes.append(f"{name} skipped: {reason}")
                        continue
                    print(f"[{name}] healthy after {st:.1f} s at {url}", file=sys.stderr)
                else:
                    url = value.rstrip("/")
                    if a.restart_after:
                        notes.append(f"{name}: given by URL, so not restarted (--restart-after needs --serve)")
                model = a.model
                if not model:
                    try:
                        model = hx.get(url + "/v1/models").json()["data"][0]["id"]
                    except Exception:
                        model = "default"
                # The ideal: tokenized before the timed requests, in the round-robin order.
                ideals = None
                if not a.no_ideal:
                    turl = (a.tokenize_url or url).rstrip("/")
                    ideals = ideal_by_url.get(turl) if a.tokenize_url else None
                    if ideals is None:
                        t0 = time.perf_counter()
                        index, ideals, hashes = PrefixIndex(), {}, {}
                        try:
                            for si, k in order:
                                s = sessions[si]
                                toks = tokenize_chat(hx, turl, *render(workload.messages_upto(s, k), s.get("tools")))
                                ideals[(si, k)] = len(toks) - index.add(toks)
                                hashes[(si, k)] = hashlib.sha256(array.array("i", toks).tobytes()).hexdigest()
                            if not a.tokenize_url:
                                prompt_hashes[name] = hashes
                        except Exception as e:
                            print(f"[{name}] tokenize failed ({e}); no ideal", file=sys.stderr)
                            notes.append(f"{name}: no ideal (tokenize at {turl} failed: {str(e)[:120]})")
                            ideals = {}
                        if a.tokenize_url:
                            ideal_by_url[turl] = ideals
                        print(f"[{name}] ideal: {sum(ideals.values())} new tokens "
                              f"(tokenized in {time.perf_counter() - t0:.1f} s)", file=sys.stderr)
                client = openai.OpenAI(base_url=url + "/v1", api_key=a.api_key, timeout=a.timeout, max_retries=0)
                sid_index = {s["id"]: i for i, s in enumerate(sessions)}
                rows = []

                def emit(row, name=name, ideals=ideals, rows=rows):
                    row = {"target": name, **row}
                    si = sid_index[row["session"]]
                    row["ideal_new_tokens"] = (ideals or {}).get((si, row["k"]))
                    rows.append(row)
                    out.write(json.dumps(row) + "\n")
                    out.flush()
                    print(f"[{name}] {len(rows)}/{n_req} {row['session']} k={row['k']} ttft={row['ttft_s']:.2f}s "
                          f"({row['ttft_at']}) prompt={row['prompt_tokens']} cached={row['cached_tokens']} "
                          f"ideal_new={row['ideal_new_tokens']}"
                          + (f" restarts={row['restarts_before']}" if row["restarts_before"] else "")
                          + (f" ERROR {row['error']}" if "error" in row else ""), file=sys.stderr)

                runner = Runner(name, client, model, sessions, a.max_tokens, server,
                                a.restart_after if server else [], emit, render)
                t0 = time.perf_counter()
                try:
                    if conc > 1:
                        runner.run_concurrent(conc, emit)
                    else:
                        runner.run_round_robin(order, emit)
                except RuntimeError as e:  # a (re)start that failed: keep what was measured
                    print(f"[{name}] stopped: {e}", file=sys.stderr)
                    notes.append(f"{name}: replay stopped after {len(rows)} of {n_req} requests: {e}")
                wall = time.perf_counter() - t0
                all_rows[name] = rows
                summ[name] = summarize(rows)
                summ[name]["wall_s"] = wall
                summ[name]["restarts"] = runner.restarts
                summ[name]["crashes"] = runner.crashes
                for c in runner.crashes:
                    notes.append(f"{name}: the server DIED by itself (exit status {c['status']}) by request "
                                 f"{c['after_request']} and was started again; its log ended: {c['log_tail']}")
                summ[name]["model_sent"] = model
            finally:
                if server:
                    server.stop()
    machine["loadavg_end"] = os.getloadavg()
    # Fairness check: did every target see the same prompt tokens?
    if len(prompt_hashes) > 1:
        ref, rh = next(iter(prompt_hashes.items()))
        for n, h in list(prompt_hashes.items())[1:]:
            same = sum(1 for key, v in h.items() if rh.get(key) == v)
            msg = (f"{n}: prompt tokens identical to {ref}'s in {same} of {len(h)} requests "
                   "(rendered and tokenized by each server's /apply-template + /tokenize)")
            print(msg, file=sys.stderr)
            notes.append(msg)
    done = [n for n in all_rows if all_rows[n]]
    if len(done) > 1:
        ref = done[0]
        pt = {n: {(r["session"], r["k"]): r["prompt_tokens"] for r in all_rows[n]} for n in done}
        for n in done[1:]:
            keys = [key for key in pt[n] if pt[n][key] is not None and pt[ref].get(key) is not None]
            diff = [pt[n][key] - pt[ref][key] for key in keys if pt[n][key] != pt[ref][key]]
            if diff:
                msg = (f"{n}: prompt_tokens reported differ from {ref}'s in {len(diff)} of {len(keys)} requests "
                       f"(by {min(diff):+d} to {max(diff):+d} tokens, {sum(diff):+d} in all)")
                print(msg, file=sys.stderr)
                notes.append(msg)
    run_s = time.perf_counter() - t_run

    restarts_at = [p for p in a.restart_after if p < n_req]
    md = report_md(machine, infos, summ, notes, source, mode, n_req, len(sessions), restarts_at, a, started, run_s)
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump({"machine": machine, "targets": infos, "summary": summ, "notes": notes, "workload": source,
                   "mode": mode, "restart_after": restarts_at, "max_tokens": a.max_tokens, "run_s": run_s},
                  f, indent=1, default=str)
    with open(os.path.join(a.out, "report.md"), "w") as f:
        f.write(md)
    print(md)
    png = os.path.join(a.out, "replay.png")
    title = (f"{machine['cpu']}, {machine['cores']} cores; {n_req} requests, {mode}, max_tokens {a.max_tokens}; "
             f"Strata {machine['strata_commit'].split()[0]}; {started.strftime('%Y-%m-%d %H:%M')}")
    if all_rows and plot(all_rows, restarts_at if any(s.get("restarts") for s in summ.values()) else [], png, title):
        print(f"plot: {png}")
    print(f"per request: {os.path.join(a.out, 'requests.jsonl')}")


def report_md(machine, infos, summ, notes, source, mode, n_req, n_sess, restarts_at, a, started, run_s):
    L = [f"# Agentic replay, {started.strftime('%Y-%m-%d %H:%M')}", ""]
    L.append(f"- Machine: {machine['cpu']}, {machine['cores']} cores, {machine['ram_gib']} GiB RAM, {machine['os']}; "
             f"load average at start {machine['loadavg_start'][0]:.2f}, at end {machine['loadavg_end'][0]:.2f}")
    L.append(f"- Strata commit: {machine['strata_commit']}")
    for n, i in infos.items():
        if i.get("version"):
            L.append(f"- {n}: {i['version']}")
    models = {(i.get("model"), i.get("model_sha256")) for i in infos.values() if i.get("model")}
    for m, h in sorted(models):
        L.append(f"- Model: {m} (SHA-256 {h}...)")
    L.append(f"- Workload: {source}; {n_sess} sessions, {n_req} requests, {mode}, max_tokens {a.max_tokens}, "
             "temperature 0, streamed" + (f"; each served target restarted after request {restarts_at}"
                                          if restarts_at else ""))
    L.append(f"- Wall time of the whole run: {run_s / 60:.1f} min")
    L.append("")
    L.append("Targets (run one after another on the same requests):")
    L.append("")
    for n, i in infos.items():
        s = summ.get(n, {})
        extra = []
        if i.get("threads"):
            extra.append(f"threads {i['threads']}")
        if i.get("tools_as_text"):
            extra.append("tools sent as text in Strata's generic tool format (--tools-as-text)")
        if s.get("cached_from"):
            extra.append("cached tokens from " + {"usage": "usage.prompt_tokens_details.cached_tokens",
                                                  "timings": "timings.cache_n"}.get(s["cached_from"], s["cached_from"]))
        if s.get("wall_s") is not None:
            extra.append(f"replay wall {s['wall_s']:.0f} s")
        what = f"`{i['value']}`" if i["kind"] == "serve" else f"URL {i['value']}"
        L.append(f"- **{n}**: {what}" + (f" ({'; '.join(extra)})" if extra else ""))
    L += ["", table(summ), ""]
    rt = restart_table(summ)
    if rt:
        L += ["After the restart (requests sent after it; stop = SIGTERM to exit, start = to /health 200):", "",
              rt, ""]
    srv = [(n, s) for n, s in summ.items() if not s.get("skipped") and s.get("server_prompt_n") is not None]
    if srv:
        L.append("Server-side prefill where the server reports it (timings.prompt_n tokens evaluated, prompt_ms): "
                 + "; ".join(f"{n}: {s['server_prompt_n']} tokens in {s['server_prompt_s']:.1f} s" for n, s in srv))
        L.append("")
    at_end = [(n, s["ttft_at_end"]) for n, s in summ.items() if not s.get("skipped") and s.get("ttft_at_end")]
    if at_end and a.max_tokens > 1:
        L.append("Requests whose first content/tool-call delta came only with the end of the stream (TTFT = total "
                 "time, includes the up to max_tokens decode steps): " + ", ".join(f"{n} {c}" for n, c in at_end))
        L.append("")
    if notes:
        L += ["Notes:", ""] + [f"- {x}" for x in notes] + [""]
    L += ["Definitions: prefill s = sum over requests of TTFT (client clock, from sending the request to the first "
          "content or tool-call delta on the stream, else to its end); p50/p90/p99 over requests (nearest rank); "
          "token hit rate = cached / prompt tokens, both as reported by the server; prefill work = prompt - cached "
          "tokens; ideal = prompt tokens never seen before in this run (each prompt's tokens minus the longest "
          "token prefix shared with any earlier prompt, tokenized by the target's /apply-template + /tokenize; "
          "restarts do not reset it); work / ideal = 1.0 means nothing was prefilled twice.", ""]
    return "\n".join(L)


if __name__ == "__main__":
    main()
