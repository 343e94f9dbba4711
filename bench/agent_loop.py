#!/usr/bin/env python3
"""The 12-turn agent loop against several servers, one after another on the
same turns (`make bench-agent`, bench/README.md):

    python3 bench/agent_loop.py --serve strata='./strata serve -m M --port 8621 --trace T.jsonl ...' \\
        --serve llama-server='build/llama-server/llama-server -m M --port 8624 ...' \\
        [--turns 12] [--reply-tokens 32] [--restart-after 9] [--out bench/out/agent]

Turn k sends the system prompt (with the tool schemas as text, Strata's
generic tool format: bench/replay.py tools_as_text), the task, and for each
earlier turn the server's OWN reply, sent back verbatim, then a tool result
of a few hundred tokens as a user message. Replies are fixed-length:
max_tokens N with ignore_eos (both servers know the field), temperature 0,
so every turn's prompt grows by the same amount of history whatever the
weights say (random-weight models write nonsense). After turn
--restart-after the server is restarted (SIGTERM, same command): Strata
keeps its disk tier; llama-server's prompt cache lives in RAM and is lost.

Per turn and server: TTFT (first streamed content), prompt tokens, tokens
the server prefilled (Strata: prompt - usage cached_tokens, which for a
recurrent model is the position of the snapshot it resumed at; llama-server:
timings.prompt_n) and the ideal: the tokens the server never ran before,
prompt_k - held_(k-1), where held = prompt + completion - 1 is the sequence
the previous turn ran (its last sampled token is never fed back). The
ideal forgets nothing at a restart: that is what a restart costs.
"""
import argparse
import datetime
import json
import os
import random
import sys

import openai

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import replay  # noqa: E402
import workload  # noqa: E402


def make_script(a):
    """The loop's fixed text: a system prompt with tool schemas, a task, and
    one tool result per later turn (bench/workload.py, seeded)."""
    r = random.Random(a.seed)
    agent = workload.make_agent(r, a)
    results = []
    for _ in range(a.turns - 1):
        size = r.randint(*a.result_tokens)
        out = workload.file_contents(r, size) if r.random() < 0.5 else workload.command_output(r, size)
        results.append("Tool result:\n" + out)
    system = agent["system"] + "\n\n" + replay.tools_text(agent["tools"])
    return {"system": system, "task": "Task: " + workload.prose(r, 120), "results": results}


def turn_messages(script, replies):
    """Messages of turn len(replies): system, task, then (reply, tool result) per earlier turn."""
    msgs = [{"role": "system", "content": script["system"]}, {"role": "user", "content": script["task"]}]
    for i, rep in enumerate(replies):
        msgs.append({"role": "assistant", "content": rep})
        msgs.append({"role": "user", "content": script["results"][i]})
    return msgs


def held(row):
    """Tokens the sequence ran when the turn ended: the prompt and every
    generated token but the last sampled one (a reply cut by max_tokens)."""
    cut = 1 if row.get("finish_reason") == "length" else 0
    return row["prompt_tokens"] + row["completion_tokens"] - cut


def trace_lines(path, skip):
    """Strata's --trace lines after the first `skip` ones."""
    try:
        with open(path) as f:
            return [json.loads(x) for x in f.read().splitlines()[skip:] if x.strip()]
    except OSError:
        return []


def annotate(rows, traces):
    """Adds prefilled, ideal and the snapshot position to each turn's row.
    prefilled: llama-server's timings.prompt_n, else prompt - cached.
    ideal: prompt - held(previous turn); with a Strata trace of a recurrent
    model also the tokens between the snapshot it resumed at and the end of
    the longest prefix it had run (the issue's "tokens since the snapshot")."""
    prev = None
    for i, r in enumerate(rows):
        if r.get("prompt_tokens") is None:
            r["prefilled"] = r["ideal"] = None
            continue
        r["prefilled"] = (r["timings_prompt_n"] if r.get("timings_prompt_n") is not None
                          else r["prompt_tokens"] - (r["cached_tokens"] or 0))
        seen = min(held(prev), r["prompt_tokens"]) if prev else 0
        r["ideal_new"] = r["prompt_tokens"] - seen
        tr = traces[i] if i < len(traces) else None
        snap = (tr or {}).get("snapshot")
        r["snapshot_restored"] = snap.get("restored") if snap else None
        r["snapshot_from"] = snap.get("from") if snap else None
        r["server_prefill_ms"] = (tr["prefill_ms"] if tr else r.get("timings_prompt_ms"))
        since = max(0, seen - snap["restored"]) if snap and prev else 0
        r["ideal"] = r["ideal_new"] + since
        prev = r


def decode_tps(r):
    n = (r.get("completion_tokens") or 0) - 1
    dt = r["total_s"] - r["ttft_s"]
    return n / dt if n > 0 and dt > 0 else None


def summarize(rows, restart_after):
    ok = [r for r in rows if r.get("prompt_tokens") is not None and "error" not in r]
    after = [r for r in ok if r["turn"] >= restart_after] if restart_after else []
    dec = [d for d in (decode_tps(r) for r in ok) if d]
    first = ok[0] if ok else None

    def part(rs):
        pre, ideal = sum(r["prefilled"] for r in rs), sum(r["ideal"] for r in rs)
        return {"turns": len(rs), "prefill_s": sum(r["ttft_s"] for r in rs), "prefilled": pre, "ideal": ideal,
                "work_over_ideal": pre / ideal if ideal else float("nan")}
    return {"errors": len(rows) - len(ok), "all": part(ok), "after_restart": part(after) if after else None,
            "cold_prefill_tps": first["prompt_tokens"] / first["ttft_s"] if first else None,
            "decode_tps": sum(dec) / len(dec) if dec else None}


def run_target(name, cmd, script, a, log_dir):
    """The whole loop on one server: rows per turn (replay.one_request's, plus turn, text)."""
    server = replay.Server(name, cmd, os.path.join(log_dir, f"serve-{name}.log"), a.start_timeout)
    trace = replay._flag(server.argv, "--trace")
    n_trace = len(trace_lines(trace, 0)) if trace else 0
    st = server.start()
    print(f"[{name}] healthy after {st:.1f} s", file=sys.stderr)
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", timeout=a.timeout, max_retries=0)
    replies, rows, restarts = [], [], []
    try:
        for k in range(a.turns):
            if a.restart_after and k == a.restart_after:
                stop_s, start_s = server.restart()
                restarts.append({"after_turn": k, "stop_s": stop_s, "start_s": start_s})
                print(f"[{name}] restarted: stop {stop_s:.1f} s, start {start_s:.1f} s", file=sys.stderr)
            row = replay.one_request(client, "default", turn_messages(script, replies), None, a.reply_tokens,
                                     extra_body={"ignore_eos": True})
            row["turn"] = k
            rows.append(row)
            replies.append(row["text"])
            print(f"[{name}] turn {k}: ttft {row['ttft_s']:.2f} s prompt {row['prompt_tokens']} "
                  f"cached {row['cached_tokens']} completion {row['completion_tokens']} {row.get('error', '')}",
                  file=sys.stderr)
    finally:
        server.stop()
    annotate(rows, trace_lines(trace, n_trace) if trace else [])
    return rows, restarts


def _f(x, fmt):
    return "-" if x is None or x != x else format(x, fmt)


def turn_table(results):
    names = list(results)
    head = "| turn | " + " | ".join(f"{n} prompt | {n} prefilled | {n} ideal | {n} TTFT s" for n in names) + " |"
    out = [head, "|---|" + "---|" * (4 * len(names))]
    n_turns = max(len(r["rows"]) for r in results.values())
    for k in range(n_turns):
        cells = []
        for n in names:
            rows = results[n]["rows"]
            r = rows[k] if k < len(rows) else {}
            snap = f" (snap {r['snapshot_restored']} {r['snapshot_from']})" if r.get("snapshot_restored") else ""
            cells += [_f(r.get("prompt_tokens"), "d"), _f(r.get("prefilled"), "d") + snap,
                      _f(r.get("ideal"), "d"), _f(r.get("ttft_s"), ".2f")]
        mark = " (after restart)" if results[names[0]]["restart_after"] == k else ""
        out.append(f"| {k}{mark} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def summary_table(results):
    out = ["| server | prefill s (sum TTFT) | prefilled tok | ideal tok | work / ideal | after restart: prefill s "
           "/ prefilled / ideal | cold prefill tok/s (turn 0) | decode tok/s (mean) |",
           "|---|---|---|---|---|---|---|---|"]
    for n, res in results.items():
        s, ar = res["summary"], res["summary"]["after_restart"]
        out.append(f"| {n} | {s['all']['prefill_s']:.2f} | {s['all']['prefilled']} | {s['all']['ideal']} "
                   f"| {_f(s['all']['work_over_ideal'], '.2f')} | "
                   + (f"{ar['prefill_s']:.2f} / {ar['prefilled']} / {ar['ideal']}" if ar else "-")
                   + f" | {_f(s['cold_prefill_tps'], '.1f')} | {_f(s['decode_tps'], '.1f')} |")
    return "\n".join(out)


def ratios(results, ours, peer):
    """The issue's targets, Strata against the peer on this run."""
    if ours not in results or peer not in results:
        return []
    s, p = results[ours]["summary"], results[peer]["summary"]
    lines = [f"- prefill work / ideal ({ours}): {_f(s['all']['work_over_ideal'], '.3f')} (target <= 1.05)",
             f"- prefill seconds {ours} / {peer}: {s['all']['prefill_s'] / p['all']['prefill_s']:.2f} (target <= 0.5)"]
    if s["cold_prefill_tps"] and p["cold_prefill_tps"]:
        lines.append(f"- cold prefill tok/s {ours} / {peer}: {s['cold_prefill_tps'] / p['cold_prefill_tps']:.2f} "
                     "(target >= 1.0)")
    if s["decode_tps"] and p["decode_tps"]:
        lines.append(f"- decode tok/s {ours} / {peer}: {s['decode_tps'] / p['decode_tps']:.2f} (target >= 1.0)")
    return lines


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--serve", action=replay.TargetAction, metavar="NAME=COMMAND", help="repeatable")
    p.add_argument("--reply-tokens", type=int, default=32, help="tokens per reply (max_tokens + ignore_eos)")
    p.add_argument("--restart-after", type=int, default=9, help="restart each server before this turn (0: never)")
    p.add_argument("--timeout", type=float, default=1800.0)
    p.add_argument("--start-timeout", type=float, default=300.0)
    p.add_argument("--out", default="bench/out/agent")
    workload.add_args(p)
    p.set_defaults(turns=12, system_tokens=(800, 800), tools=(6, 6), result_tokens=(150, 400))
    a = p.parse_args()
    if isinstance(a.turns, tuple):
        a.turns = a.turns[0]
    targets = getattr(a, "targets", None) or []
    if not targets:
        p.error("give at least one --serve NAME=COMMAND")
    os.makedirs(a.out, exist_ok=True)
    script = make_script(a)
    machine = replay.machine_info()
    machine["loadavg_start"] = os.getloadavg()
    started = datetime.datetime.now()
    results = {}
    for _, name, cmd in targets:
        try:
            rows, restarts = run_target(name, cmd, script, a, a.out)
        except RuntimeError as e:
            print(f"[{name}] skipped: {e}", file=sys.stderr)
            continue
        results[name] = {"rows": rows, "restarts": restarts, "restart_after": a.restart_after,
                         "summary": summarize(rows, a.restart_after), "info": replay.target_info("serve", cmd)}
    machine["loadavg_end"] = os.getloadavg()
    md = [f"# Agent loop, {started.strftime('%Y-%m-%d %H:%M')}", "",
          f"- Machine: {machine['cpu']}, {machine['cores']} cores, {machine['ram_gib']} GiB RAM; load average "
          f"{machine['loadavg_start'][0]:.2f} at start, {machine['loadavg_end'][0]:.2f} at end",
          f"- Strata commit: {machine['strata_commit']}",
          f"- {a.turns} turns, replies of {a.reply_tokens} tokens (ignore_eos), tool results "
          f"{a.result_tokens[0]}-{a.result_tokens[1]} tok, system ~{a.system_tokens[0]} tok + {a.tools[0]} tool "
          f"schemas, seed {a.seed}; servers restarted before turn {a.restart_after}"]
    for n, res in results.items():
        i = res["info"]
        md.append(f"- {n}: `{i['value']}`" + (f" ({i['version']})" if i.get("version") else ""))
    md += ["", summary_table(results), ""] + ratios(results, "strata", "llama-server") + ["", turn_table(results), ""]
    text = "\n".join(md)
    with open(os.path.join(a.out, "agent.md"), "w") as f:
        f.write(text)
    with open(os.path.join(a.out, "agent.json"), "w") as f:
        json.dump({"machine": machine, "results": results}, f, indent=1, default=str)
    print(text)


if __name__ == "__main__":
    main()
