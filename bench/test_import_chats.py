#!/usr/bin/env python3
"""Checks of bench/import_chats.py (no server needed):

    python3 bench/test_import_chats.py      # or: python3 -m pytest -q bench/test_import_chats.py
"""
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import import_chats  # noqa: E402
import workload  # noqa: E402

EXAMPLE = os.path.join(HERE, "data", "example-chats.jsonl")


def _quiet(_msg):
    pass


def test_example_imports():
    ss = import_chats.import_file(EXAMPLE, warn=_quiet)
    assert [s["id"] for s in ss] == ["fix-fractional-durations", "weekly-signups", "imp0002"]
    assert [workload.n_requests(s) for s in ss] == [5, 5, 2]
    s0, s1, s2 = ss
    # every request's prompt: non-empty, never ends with an assistant message, tool replies answer calls
    for s in ss:
        for k in range(workload.n_requests(s)):
            msgs = workload.messages_upto(s, k)
            assert msgs and msgs[-1]["role"] != "assistant"
            ids = set()
            for m in msgs:
                assert m["role"] in ("system", "user", "assistant", "tool")
                for c in m.get("tool_calls") or []:
                    ids.add(c["id"])
                    json.loads(c["function"]["arguments"])
                if m["role"] == "tool":
                    assert m["tool_call_id"] in ids
    # request k is a prefix of request k+1 (what a prefix cache can use)
    for s in ss:
        prev = []
        for k in range(workload.n_requests(s)):
            msgs = workload.messages_upto(s, k)
            assert msgs[:len(prev)] == prev
            prev = msgs
    assert len(s0["tools"]) == 3 and s0["tools"][0]["function"]["name"] == "read_file"
    # parallel calls stay in one assistant message, both answered
    last = workload.messages_upto(s0, 4)
    assert len(last[6]["tool_calls"]) == 2 and last[7]["tool_call_id"] == "call_a3"
    # legacy shapes: developer role, content parts, functions, function_call with object arguments
    m1 = workload.messages_upto(s1, 4)
    assert m1[0] == {"role": "system", "content": s1["messages"][0]["content"]}
    assert isinstance(m1[0]["content"], str) and m1[1]["content"].startswith("How many")
    assert [t["function"]["name"] for t in s1["tools"]] == ["sql_query", "list_tables"]
    call = m1[4]["tool_calls"][0]
    assert call["function"]["name"] == "sql_query" and json.loads(call["function"]["arguments"])["sql"]
    assert m1[5] == {"role": "tool", "tool_call_id": call["id"], "content": m1[5]["content"]}
    assert m1[-1]["role"] == "tool"  # the conversation ends with a tool result: one more request
    assert s2["tools"] == [] and workload.messages_upto(s2, 0)[0]["role"] == "user"


def test_json_shapes():
    convo = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    with tempfile.TemporaryDirectory() as d:
        for data, n in ((convo, 1), ({"messages": convo, "tools": "[]"}, 1), ([convo, {"messages": convo}], 2),
                        ([{"messages": [{"role": "user", "content": "no reply"}]}], 0)):
            p = os.path.join(d, "x.json")
            with open(p, "w") as f:
                json.dump(data, f, indent=1)
            ss = import_chats.import_file(p, warn=_quiet)
            assert len(ss) == n, data
            assert len({s["id"] for s in ss}) == n
            for s in ss:
                assert workload.n_requests(s) == 1 and workload.messages_upto(s, 0) == convo[:1]


def test_sessions_roundtrip():
    ss = import_chats.import_file(EXAMPLE, warn=_quiet)
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "s.jsonl")
        workload.save(ss, p)
        assert workload.load(p) == ss


if __name__ == "__main__":
    for name, fn in list(globals().items()):
        if name.startswith("test_") and callable(fn):
            fn()
            print(f"ok {name}")
