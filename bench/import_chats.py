#!/usr/bin/env python3
"""Import multi-turn tool-use conversations in OpenAI message format as replay
sessions (the "messages" form of bench/workload.py's session format).

    python3 bench/import_chats.py FILE [-o sessions.jsonl]
    python3 bench/replay.py --import FILE ...            # same conversion, then replay

FILE is JSON (one record or a list of records) or JSONL (one record a line).
A record is either {"messages": [...], "tools": [...]} (also accepted:
"conversation"/"conversations" for the messages, legacy "functions" for the
tools, tools given as a JSON string) or a bare list of messages.

Normalization, so that every server accepts the messages:
  - role "developer" becomes "system"; roles other than system, user,
    assistant and tool are dropped (with a count in the warnings);
  - content given as a list of parts keeps its text parts, joined;
  - legacy assistant "function_call" becomes one tool call, role "function"
    becomes "tool";
  - tool-call arguments given as objects are serialized to JSON; missing
    tool-call ids are generated, and tool messages without tool_call_id get
    the id of the matching earlier call (in order);
  - assistant/tool messages before the first system or user message are
    dropped; a record without any assistant message is skipped (nothing to
    replay).

Each assistant message becomes one request: its prompt is every message
before it. When the conversation does not end with an assistant message, one
more request carries all its messages.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

ROLES = {"system", "user", "assistant", "tool"}


def _text(content):
    if content is None:
        return None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if isinstance(p, str):
                parts.append(p)
            elif isinstance(p, dict) and isinstance(p.get("text"), str):
                parts.append(p["text"])
        return "\n".join(parts)
    return json.dumps(content)


def _args(a):
    if a is None:
        return "{}"
    return a if isinstance(a, str) else json.dumps(a)


def _tools(rec):
    tools = rec.get("tools")
    if tools is None and rec.get("functions") is not None:
        tools = rec["functions"]
    if isinstance(tools, str):
        tools = json.loads(tools) if tools.strip() else []
    out = []
    for t in tools or []:
        if isinstance(t, dict) and t.get("type") == "function" and isinstance(t.get("function"), dict):
            out.append(t)
        elif isinstance(t, dict) and "name" in t:  # bare function schema
            out.append({"type": "function", "function": t})
    return out


def normalize_messages(msgs, sid, warn):
    out, pending, n_call = [], [], 0  # pending: ids of tool calls not answered yet
    dropped = 0
    for m in msgs:
        if not isinstance(m, dict):
            dropped += 1
            continue
        role = m.get("role") or m.get("from")
        role = {"developer": "system", "function": "tool", "human": "user", "gpt": "assistant"}.get(role, role)
        if role not in ROLES:
            dropped += 1
            continue
        content = _text(m.get("content", m.get("value")))
        if role == "assistant":
            calls = []
            raw = list(m.get("tool_calls") or [])
            if not raw and isinstance(m.get("function_call"), dict):
                raw = [{"function": m["function_call"]}]
            for c in raw:
                fn = c.get("function", c) if isinstance(c, dict) else {}
                cid = c.get("id") if isinstance(c, dict) else None
                if not cid:
                    cid = f"call_{sid}_{n_call}"
                n_call += 1
                calls.append({"id": cid, "type": "function",
                              "function": {"name": fn.get("name", ""), "arguments": _args(fn.get("arguments"))}})
            msg = {"role": "assistant", "content": content or None}
            if calls:
                msg["tool_calls"] = calls
                pending = [c["id"] for c in calls]
            elif not content:
                msg["content"] = ""
            out.append(msg)
        elif role == "tool":
            cid = m.get("tool_call_id")
            if not cid:
                if pending:
                    cid = pending.pop(0)
                else:
                    cid = f"call_{sid}_orphan{len(out)}"
                    warn(f"{sid}: tool message without a matching call")
            elif cid in pending:
                pending.remove(cid)
            out.append({"role": "tool", "tool_call_id": cid, "content": content or ""})
        else:
            out.append({"role": role, "content": content or ""})
    if dropped:
        warn(f"{sid}: dropped {dropped} message(s) with an unknown role")
    return out


def records(path):
    """Records of a JSON file (a record or a list of them) or a JSONL file (one a line)."""
    with open(path) as f:
        text = f.read()
    if not text.strip():
        return []
    try:
        data = json.loads(text)
    except json.JSONDecodeError:  # JSONL
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    if isinstance(data, dict):
        return [data]
    if data and isinstance(data[0], dict) and ("role" in data[0] or "from" in data[0]):
        return [data]  # one bare list of messages
    return data


def to_session(rec, idx, warn):
    if isinstance(rec, list):
        rec = {"messages": rec}
    msgs = rec.get("messages") or rec.get("conversation") or rec.get("conversations")
    sid = str(rec.get("id") or f"imp{idx:04d}")
    if not isinstance(msgs, list):
        warn(f"record {idx}: no messages list; skipped")
        return None
    msgs = normalize_messages(msgs, sid, warn)
    lead = 0  # a prompt cannot be empty: drop replies before the first system/user message
    while lead < len(msgs) and msgs[lead]["role"] in ("assistant", "tool"):
        lead += 1
    if lead:
        warn(f"{sid}: dropped {lead} leading assistant/tool message(s)")
        msgs = msgs[lead:]
    if not any(m["role"] == "assistant" for m in msgs):
        warn(f"{sid}: no assistant message; skipped")
        return None
    return {"id": sid, "tools": _tools(rec), "messages": msgs}


def import_file(path, warn=None):
    """Sessions (list of dicts in the "messages" form) from an OpenAI-format file."""
    warn = warn or (lambda m: print("import: " + m, file=sys.stderr))
    out = []
    for i, rec in enumerate(records(path)):
        s = to_session(rec, i, warn)
        if s:
            out.append(s)
    ids = set()
    for s in out:  # ids must be unique (they name sessions in the report)
        base, n = s["id"], 1
        while s["id"] in ids:
            s["id"] = f"{base}-{n}"
            n += 1
        ids.add(s["id"])
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file")
    p.add_argument("-o", "--output", help="write sessions as JSONL (replay.py --sessions-file)")
    a = p.parse_args()
    import workload
    ss = import_file(a.file)
    n = sum(workload.n_requests(s) for s in ss)
    print(f"{len(ss)} sessions, {n} requests", file=sys.stderr)
    if a.output:
        workload.save(ss, a.output)


if __name__ == "__main__":
    main()
