#!/usr/bin/env python3
"""Synthetic coding-agent sessions in OpenAI message format (seeded).

    python3 bench/workload.py --sessions 8 --seed 1 -o /tmp/sessions.jsonl

A session is one JSON object per line:
  {"id", "system": str, "tools": [OpenAI function tools], "task": str,
   "turns": [{"reasoning": str, "call": {"name", "arguments": JSON str},
              "result": str}], "drop_reasoning": bool}
Sessions of one workload are drawn from `--agents` agent profiles (a system
prompt and a tool set each), as many sessions of one agent share them.
Token counts are approximate: tokens ~ words * 1.3.

A session may instead carry its whole conversation ("messages" form, made by
bench/import_chats.py from recorded OpenAI-format conversations):
  {"id", "tools": [...], "messages": [OpenAI messages]}
Then request k carries every message before the k-th assistant message, plus
one last request with all messages when they do not end with an assistant one.
"""
import argparse
import json
import random

WORDS = ("module function handler request response buffer cache block token "
         "session client server config option value error retry timeout queue "
         "worker thread lock index table column schema record batch stream "
         "parser lexer render template prompt model layer tensor kernel weight "
         "test fixture assert mock patch commit branch merge review deploy build "
         "lint format type import export package path file folder line offset "
         "length count limit budget score rank key hash chain store tier disk "
         "memory page entry list map set tree node edge graph cycle order").split()
VERBS = "use avoid prefer keep never always check run write read update remove add rename move".split()
LANGS = [("py", "def", "    ", ":"), ("c", "static int", "    ", " {"), ("ts", "function", "  ", " {")]


def n_words(tokens):
    return max(1, int(tokens / 1.3))


def sentence(r, k=None):
    k = k or r.randint(6, 16)
    w = [r.choice(WORDS) for _ in range(k)]
    return (" ".join(w)).capitalize() + "."


def prose(r, tokens):
    out, left = [], n_words(tokens)
    while left > 0:
        s = sentence(r)
        out.append(s)
        left -= len(s.split())
    return " ".join(out)


def ident(r, parts=2):
    return "_".join(r.choice(WORDS) for _ in range(parts))


def system_prompt(r, tokens):
    """Rules and project notes; line 2 is the early block that may change."""
    lines = ["You are a coding agent working in a repository. Follow the rules below.",
             "git status: " + git_status(r), ""]
    left = n_words(tokens) - 30
    sec = 0
    while left > 0:
        sec += 1
        title = r.choice(["Rules", "Project notes", "Style", "Testing", "Layout", "Conventions"])
        lines.append(f"## {title} {sec}")
        for _ in range(r.randint(4, 12)):
            s = f"- {r.choice(VERBS).capitalize()} {ident(r)}: {sentence(r)}"
            lines.append(s)
            left -= len(s.split())
        lines.append("")
    return "\n".join(lines)


def git_status(r):
    return (f"on branch {ident(r, 1)}-{r.randint(1, 999)}, "
            f"{r.randint(0, 9)} files modified, head {r.getrandbits(28):07x}")


def tool_schema(r, name):
    props, req = {}, []
    for _ in range(r.randint(1, 6)):
        p = ident(r, r.randint(1, 2))
        t = r.choice(["string", "integer", "boolean", "array"])
        d = {"type": t, "description": sentence(r, r.randint(4, 10))}
        if t == "array":
            d["items"] = {"type": "string"}
        if t == "string" and r.random() < 0.2:
            d["enum"] = [r.choice(WORDS) for _ in range(3)]
        props[p] = d
        if r.random() < 0.6:
            req.append(p)
    return {"type": "function", "function": {
        "name": name, "description": sentence(r, r.randint(8, 24)),
        "parameters": {"type": "object", "properties": props, "required": req}}}


def tools_for(r, lo, hi):
    names = set()
    n = r.randint(lo, hi)
    while len(names) < n:
        names.add(r.choice(VERBS) + "_" + ident(r, r.randint(1, 2)))
    return [tool_schema(r, nm) for nm in sorted(names)]


def arg_value(r, spec):
    t = spec["type"]
    if "enum" in spec:
        return r.choice(spec["enum"])
    if t == "integer":
        return r.randint(0, 5000)
    if t == "boolean":
        return r.random() < 0.5
    if t == "array":
        return [f"src/{ident(r)}.py" for _ in range(r.randint(1, 3))]
    return f"src/{ident(r)}/{ident(r)}.{r.choice(LANGS)[0]}" if r.random() < 0.5 else sentence(r, 5)


def file_contents(r, tokens):
    ext, kw, ind, colon = r.choice(LANGS)
    out, left = [], n_words(tokens)
    while left > 0:
        fn = ident(r, 3)
        args = ", ".join(ident(r, 1) for _ in range(r.randint(0, 3)))
        block = [f"{kw} {fn}({args}){colon}"]
        for _ in range(r.randint(2, 10)):
            block.append(f"{ind}{ident(r, 1)} = {ident(r)}({ident(r, 1)}, {r.randint(0, 99)})  # {sentence(r, 5)}")
        out += block + [""]
        left -= sum(len(b.split()) for b in block)
    return "\n".join(out)


def command_output(r, tokens):
    out, left = [], n_words(tokens)
    while left > 0:
        kind = r.random()
        if kind < 0.4:
            s = f"tests/test_{ident(r)}.py::test_{ident(r)} {r.choice(['PASSED', 'PASSED', 'FAILED', 'SKIPPED'])}"
        elif kind < 0.7:
            s = f"src/{ident(r)}.c:{r.randint(1, 4000)}: {sentence(r, 8)}"
        else:
            s = f"[{r.randint(0, 9999):04d}] {r.choice(['INFO', 'WARN', 'DEBUG'])} {sentence(r)}"
        out.append(s)
        left -= len(s.split())
    return "\n".join(out)


def make_agent(r, a):
    lo, hi = a.system_tokens
    return {"system": system_prompt(r, r.randint(lo, hi)), "tools": tools_for(r, *a.tools)}


def make_session(r, idx, agent, a):
    system = agent["system"]
    if r.random() < a.change_early_block:
        lines = system.split("\n")
        lines[1] = "git status: " + git_status(r)
        system = "\n".join(lines)
    turns = []
    for _ in range(r.randint(*a.turns)):
        tool = r.choice(agent["tools"])["function"]
        props = tool["parameters"]["properties"]
        args = {k: arg_value(r, v) for k, v in props.items() if k in tool["parameters"]["required"] or r.random() < 0.5}
        size = r.randint(*a.result_tokens)
        result = file_contents(r, size) if r.random() < 0.5 else command_output(r, size)
        turns.append({"reasoning": sentence(r, r.randint(8, 40)) if r.random() < 0.7 else "",
                      "call": {"name": tool["name"], "arguments": json.dumps(args)},
                      "result": result})
    return {"id": f"s{idx:04d}", "system": system, "tools": agent["tools"],
            "task": "Task: " + prose(r, r.randint(40, 200)), "turns": turns,
            "drop_reasoning": a.drop_reasoning and r.random() < 0.5}


def _assistant_positions(s):
    return [i for i, m in enumerate(s["messages"]) if m.get("role") == "assistant"]


def messages_upto(s, k):
    """Messages of request k (0-based): system, task, then k recorded turns.
    In a drop_reasoning session only the latest assistant message keeps its text.
    "messages" form: the messages before the k-th assistant message (all of them for the last
    request of a conversation that does not end with an assistant message)."""
    if "messages" in s:
        pos = _assistant_positions(s)
        return list(s["messages"][:pos[k]] if k < len(pos) else s["messages"])
    msgs = [{"role": "system", "content": s["system"]}, {"role": "user", "content": s["task"]}]
    for i, t in enumerate(s["turns"][:k]):
        text = t["reasoning"]
        if s.get("drop_reasoning") and i < k - 1:
            text = ""
        cid = f"call_{s['id']}_{i}"
        msgs.append({"role": "assistant", "content": text or None,
                     "tool_calls": [{"id": cid, "type": "function", "function": t["call"]}]})
        msgs.append({"role": "tool", "tool_call_id": cid, "content": t["result"]})
    return msgs


def n_requests(s):
    """Request k for k in 0..T: before any turn, then after each tool result.
    "messages" form: one per assistant message, +1 if the messages do not end with one."""
    if "messages" in s:
        pos = _assistant_positions(s)
        return len(pos) + (0 if pos and pos[-1] == len(s["messages"]) - 1 else 1)
    return len(s["turns"]) + 1


def rng_pair(text):
    lo, _, hi = text.partition("-")
    return (int(lo), int(hi or lo))


def add_args(p):
    g = p.add_argument_group("workload")
    g.add_argument("--sessions", type=int, default=8)
    g.add_argument("--agents", type=int, default=2, help="agent profiles (system prompt + tools) shared by sessions")
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--system-tokens", type=rng_pair, default=(3000, 4000), help="LO-HI or N")
    g.add_argument("--tools", type=rng_pair, default=(10, 60), help="tool schemas per agent, LO-HI")
    g.add_argument("--turns", type=rng_pair, default=(10, 40), help="tool turns per session, LO-HI")
    g.add_argument("--result-tokens", type=rng_pair, default=(200, 8000), help="tool result size, LO-HI")
    g.add_argument("--change-early-block", type=float, default=0.0, metavar="P",
                   help="probability that a session's system prompt has a different git status line")
    g.add_argument("--drop-reasoning", action="store_true",
                   help="some sessions drop earlier assistant text from their history")


def generate(a):
    r = random.Random(a.seed)
    agents = [make_agent(r, a) for _ in range(max(1, a.agents))]
    return [make_session(r, i, agents[i % len(agents)], a) for i in range(a.sessions)]


def save(sessions, path):
    with open(path, "w") as f:
        for s in sessions:
            f.write(json.dumps(s) + "\n")


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_args(p)
    p.add_argument("-o", "--output", required=True, help="JSONL file to write")
    a = p.parse_args()
    ss = generate(a)
    save(ss, a.output)
    words = sum(len(json.dumps(messages_upto(s, n_requests(s) - 1)).split()) for s in ss)
    print(f"{len(ss)} sessions, {sum(n_requests(s) for s in ss)} requests, "
          f"~{int(words * 1.3)} tokens in final prompts -> {a.output}")


if __name__ == "__main__":
    main()
