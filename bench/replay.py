#!/usr/bin/env python3
"""Agentic replay benchmark: replay recorded coding-agent sessions against
one or more OpenAI-compatible servers and compare the prefill work each does
with the ideal (every prompt token that was never seen before, once).

    python3 bench/replay.py --target strata=http://127.0.0.1:8080 \\
        [--target nocache=http://127.0.0.1:8081] [--sessions-file S.jsonl | workload flags] \\
        [--interleave 4] [--out /tmp/strata-replay]

Request k of a session carries the system prompt, the tools and the messages
up to turn k with the RECORDED assistant messages; max_tokens 16,
temperature 0, streamed. Targets run one after another on the same requests
in the same order. See bench/README.md.
"""
import argparse
import array
import hashlib
import json
import os
import sys
import time

import httpx
import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
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


def tokenize_chat(cli, url, messages, tools):
    r = cli.post(url + "/apply-template", json={"messages": messages, "tools": tools})
    r.raise_for_status()
    r = cli.post(url + "/tokenize", json={"content": r.json()["prompt"], "parse_special": True})
    r.raise_for_status()
    return r.json()["tokens"]


def one_request(client, model, messages, tools, max_tokens):
    t0 = time.perf_counter()
    ttft, usage, finish, err = None, None, None, None
    try:
        stream = client.chat.completions.create(
            model=model, messages=messages, tools=tools, max_tokens=max_tokens, temperature=0,
            stream=True, stream_options={"include_usage": True})
        for ch in stream:
            if ch.usage:
                usage = ch.usage
            for c in ch.choices or []:
                d = c.delta
                if ttft is None and d is not None and (d.content or d.tool_calls):
                    ttft = time.perf_counter() - t0
                if c.finish_reason:
                    finish = c.finish_reason
    except Exception as e:  # keep going: record the error
        err = f"{type(e).__name__}: {e}"[:300]
    total = time.perf_counter() - t0
    row = {"ttft_s": ttft if ttft is not None else total, "total_s": total, "finish_reason": finish,
           "prompt_tokens": None, "cached_tokens": None}
    if usage:
        row["prompt_tokens"] = usage.prompt_tokens
        det = getattr(usage, "prompt_tokens_details", None)
        row["cached_tokens"] = (getattr(det, "cached_tokens", None) if det else None) or 0
    if err:
        row["error"] = err
    return row


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
    ideal = sum(r["ideal_new_tokens"] for r in ok if r.get("ideal_new_tokens") is not None)
    return {"requests": len(rows), "errors": len(rows) - len(ok), "prefill_s": sum(tt),
            "ttft_p50": pct(tt, 50), "ttft_p90": pct(tt, 90), "ttft_p99": pct(tt, 99),
            "prompt_tokens": prompt, "cached_tokens": cached, "prefill_work": prompt - cached,
            "ideal_tokens": ideal, "hit_rate": cached / prompt if prompt else float("nan"),
            "work_over_ideal": (prompt - cached) / ideal if ideal else float("nan")}


def table(summ):
    out = ["| target | requests | errors | prefill s (sum TTFT) | TTFT p50 s | TTFT p90 s | TTFT p99 s "
           "| prompt tok | cached tok | token hit rate | prefill work | ideal | work / ideal |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, s in summ.items():
        out.append(f"| {name} | {s['requests']} | {s['errors']} | {s['prefill_s']:.1f} | {s['ttft_p50']:.2f} "
                   f"| {s['ttft_p90']:.2f} | {s['ttft_p99']:.2f} | {s['prompt_tokens']} | {s['cached_tokens']} "
                   f"| {s['hit_rate']:.1%} | {s['prefill_work']} | {s['ideal_tokens']} | {s['work_over_ideal']:.2f} |")
    return "\n".join(out)


def plot(all_rows, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed (pip install matplotlib): no plot", file=sys.stderr)
        return False
    fig, ax = plt.subplots(figsize=(10, 4.5))
    for name, rows in all_rows.items():
        ax.plot([r["index"] for r in rows], [r["ttft_s"] for r in rows], marker=".", lw=1, label=name)
    ax.set_xlabel("request index")
    ax.set_ylabel("TTFT (s)")
    ax.set_title("TTFT per request")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return True


def parse_target(t):
    name, sep, url = t.partition("=")
    if not sep:
        name, url = t, t
    return name, url.rstrip("/")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", action="append", required=True, metavar="NAME=URL",
                   help="server base URL (without /v1); repeat for several targets")
    p.add_argument("--tokenize-url", help="server whose /apply-template and /tokenize give the ideal "
                   "(default: each target's own URL)")
    p.add_argument("--no-ideal", action="store_true", help="skip tokenization (no ideal column)")
    p.add_argument("--sessions-file", help="load sessions (JSONL from bench/workload.py) instead of generating")
    p.add_argument("--save-sessions", help="write the generated sessions to this JSONL file")
    p.add_argument("--interleave", type=int, default=4, help="sessions live at once, served round robin")
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--model", help="model name sent (default: the target's first /v1/models entry)")
    p.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY", "none"))
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per request")
    p.add_argument("--out", default="/tmp/strata-replay", help="folder for requests.jsonl, summary.json, "
                   "report.md, ttft.png")
    workload.add_args(p)
    a = p.parse_args()

    sessions = workload.load(a.sessions_file) if a.sessions_file else workload.generate(a)
    if a.save_sessions:
        workload.save(sessions, a.save_sessions)
    order = schedule(sessions, a.interleave)
    os.makedirs(a.out, exist_ok=True)
    print(f"{len(sessions)} sessions, {len(order)} requests, interleave {a.interleave}", file=sys.stderr)

    hx = httpx.Client(timeout=a.timeout)
    ideal_cache = {}  # tokenize url -> per-request ideal new tokens
    all_rows, summ = {}, {}
    with open(os.path.join(a.out, "requests.jsonl"), "w") as out:
        for t in a.target:
            name, url = parse_target(t)
            model = a.model
            if not model:
                try:
                    model = hx.get(url + "/v1/models").json()["data"][0]["id"]
                except Exception:
                    model = "default"
            client = openai.OpenAI(base_url=url + "/v1", api_key=a.api_key, timeout=a.timeout, max_retries=0)
            turl = (a.tokenize_url or url).rstrip("/")
            ideals = ideal_cache.get(turl)
            fresh = ideals is None and not a.no_ideal
            index = PrefixIndex() if fresh else None
            if fresh:
                ideals = ideal_cache[turl] = []
            rows = []
            for i, (si, k) in enumerate(order):
                s = sessions[si]
                msgs = workload.messages_upto(s, k)
                row = {"target": name, "index": i, "session": s["id"], "k": k}
                row.update(one_request(client, model, msgs, s["tools"], a.max_tokens))
                if fresh:  # tokenize outside the timed request
                    try:
                        toks = tokenize_chat(hx, turl, msgs, s["tools"])
                        ideals.append(len(toks) - index.add(toks))
                    except Exception as e:
                        print(f"tokenize failed ({e}); no ideal", file=sys.stderr)
                        ideals.append(None)
                row["ideal_new_tokens"] = ideals[i] if ideals and i < len(ideals) else None
                rows.append(row)
                out.write(json.dumps(row) + "\n")
                out.flush()
                print(f"[{name}] {i + 1}/{len(order)} {s['id']} k={k} ttft={row['ttft_s']:.2f}s "
                      f"prompt={row['prompt_tokens']} cached={row['cached_tokens']} "
                      f"ideal_new={row['ideal_new_tokens']}" + (f" ERROR {row['error']}" if "error" in row else ""),
                      file=sys.stderr)
            all_rows[name], summ[name] = rows, summarize(rows)

    md = table(summ)
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summ, f, indent=1)
    with open(os.path.join(a.out, "report.md"), "w") as f:
        f.write(md + "\n")
    print(md)
    png = os.path.join(a.out, "ttft.png")
    if plot(all_rows, png):
        print(f"plot: {png}")
    print(f"per request: {os.path.join(a.out, 'requests.jsonl')}")


if __name__ == "__main__":
    main()
