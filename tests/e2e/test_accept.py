"""Requests the official APIs accept are served (DESIGN.md, principle 7).

The shapes are the real clients' own (Claude Code, Codex): a system role
inside Anthropic `messages`, content parts of every documented type, hosted
and server tools declared beside the client's, Codex `namespace` tools.
What the server cannot honour is left out and named in the
`x-strata-ignored` header, the log line and the --trace line;
`--strict-requests` turns each of those into a 400 naming the field.
"""
import json
import os

import httpx
import pytest

from conftest import GEN, TINY_MODEL, Server

TMPL = os.path.join(os.path.dirname(__file__), "..", "data", "tmpl")
READ = {"name": "Read", "description": "Read a file.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}
SPAWN = {"type": "function", "name": "spawn_agent", "description": "Spawn an agent.",
         "parameters": {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}}


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    trace = str(tmp_path_factory.mktemp("trace") / "trace.jsonl")
    s = Server(TINY_MODEL, "--parallel", "2", "--ctx", "2048", "--trace", trace)
    s.trace = trace
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def gemma_tmpl():
    s = Server(TINY_MODEL, "--parallel", "1", "--ctx", "2048", "--chat-template-file",
               os.path.join(TMPL, "gemma3.jinja"))
    yield s
    assert s.stop() == 0


def messages(server, body, **kw):
    return httpx.post(server.url + "/v1/messages", json={"model": "", "max_tokens": 4, **body}, timeout=60, **kw)


def claude_code_shape(extra_tools=()):
    """The request shape Claude Code sends: a system message after the first
    user turn, cache_control on blocks, tool results with tool references."""
    return {
        "system": [{"type": "text", "text": "You are a coding agent."}],
        "tools": [READ, *extra_tools],
        "metadata": {"user_id": json.dumps({"device_id": "d", "session_id": "s"})},
        "thinking": {"type": "adaptive"},
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Read a.txt"}]},
            {"role": "system", "content": [{"type": "text", "text": "# Environment\nplatform: linux",
                                            "cache_control": {"type": "ephemeral"}}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Read",
                                               "input": {"path": "a.txt"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1",
                 "content": [{"type": "tool_reference", "tool_name": "ExitWorktree"}, {"type": "text", "text": "hello"}]},
                {"type": "document", "title": "notes", "source": {"type": "text", "media_type": "text/plain",
                                                                  "data": "doc body"}},
                {"type": "search_result", "source": "https://example.invalid/a", "title": "A result",
                 "content": [{"type": "text", "text": "snippet"}]},
                {"type": "text", "text": "go on"}]}]}


def prompt_tokens(r):
    u = r.json()["usage"]
    return u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"]


def test_claude_code_system_message_and_parts_are_served(traced):
    r = messages(traced, claude_code_shape())
    assert r.status_code == 200, r.text
    assert "x-strata-ignored" not in r.headers  # every part here was read as text
    without = claude_code_shape()
    del without["messages"][1]
    r2 = messages(traced, without)
    assert r2.status_code == 200
    assert prompt_tokens(r) > prompt_tokens(r2)  # the system text is in the prompt


def test_images_and_server_tools_are_left_out_and_named(traced):
    body = claude_code_shape([{"type": "web_search_20250305", "name": "web_search", "max_uses": 2},
                              {"type": "bash_20250124", "name": "bash"}])
    body["messages"][0]["content"].append({"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                        "data": "iVBORw0KGgo="}})
    r = messages(traced, body)
    assert r.status_code == 200, r.text
    ignored = r.headers["x-strata-ignored"]
    assert "tools[1]: server tool 'web_search_20250305'" in ignored
    assert "tools[2]: the schema of Anthropic-defined tool 'bash_20250124'" in ignored
    assert "messages[0].content[1]: image part" in ignored
    with open(traced.trace) as f:
        lines = [json.loads(l) for l in f if l.strip()]
    assert any("messages[0].content[1]: image part" in l.get("ignored", "") for l in lines)
    with open(traced.log.name) as f:
        assert "ignored=\"tools[1]: server tool" in f.read()


def test_strict_requests_refuses_what_it_would_leave_out(strict):
    r = messages(strict, claude_code_shape([{"type": "web_search_20250305", "name": "web_search"}]))
    assert r.status_code == 400
    msg = r.json()["error"]["message"]
    assert "tools[1]" in msg and "web_search_20250305" in msg and "--strict-requests" in msg
    assert messages(strict, claude_code_shape()).status_code == 200  # nothing left out: served


def test_ignored_header_is_ascii_even_for_hostile_type_names(traced):
    body = {"messages": [{"role": "user", "content": "hi"},
                         {"role": "assistant", "content": [{"type": "\u4e2d" * 300 + "\r\nX-Evil: 1"}]},
                         {"role": "user", "content": "again"}]}
    r = messages(traced, body)
    assert r.status_code == 200, r.text
    assert "x-evil" not in r.headers
    assert r.headers["x-strata-ignored"].startswith("messages[1].content[0]: assistant block")


def responses(server, body, **kw):
    return httpx.post(server.url + "/v1/responses", json={"model": "", "max_output_tokens": 16, **body},
                      timeout=60, **kw)


CODEX_TOOLS = [{"type": "web_search", "external_web_access": False},
               {"type": "namespace", "name": "multi_agent_v1", "description": "Agents.", "tools": [SPAWN]}]


def test_codex_namespace_and_web_search_are_served(traced):
    r = responses(traced, {"input": "spawn an agent", "tools": CODEX_TOOLS, "tool_choice": "required",
                           "store": False, "prompt_cache_key": "k", "include": ["reasoning.encrypted_content"],
                           "parallel_tool_calls": False, "reasoning": {"effort": "low"}})
    assert r.status_code == 200, r.text
    assert "tools[0]: hosted tool 'web_search'" in r.headers["x-strata-ignored"]
    call = r.json()["output"][-1]
    assert call["type"] == "function_call" and call["name"] == "spawn_agent"
    assert call["namespace"] == "multi_agent_v1"
    assert call["arguments"].startswith("{")  # the tiny random model may be cut short inside it
    # the call sent back (with its namespace) and its output: the next turn is served
    r2 = responses(traced, {"input": [{"role": "user", "content": "spawn an agent"}, call,
                                      {"type": "function_call_output", "call_id": call["call_id"],
                                       "output": "spawned"}],
                            "tools": CODEX_TOOLS})
    assert r2.status_code == 200, r2.text


def test_codex_namespace_call_streams_with_its_namespace(traced):
    events = []
    with httpx.stream("POST", traced.url + "/v1/responses", timeout=60,
                      json={"model": "", "input": "spawn", "tools": CODEX_TOOLS, "tool_choice": "required",
                            "stream": True, "max_output_tokens": 16}) as r:
        assert r.status_code == 200
        assert "web_search" in r.headers["x-strata-ignored"]
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    done = [e for e in events if e["type"] == "response.output_item.done"]
    assert done and done[-1]["item"]["namespace"] == "multi_agent_v1"


def test_responses_items_and_parts_it_cannot_use_are_named(traced):
    r = responses(traced, {"input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "what is this"},
                                                        {"type": "input_image", "image_url": "data:image/png;base64,AA"}]},
        {"type": "web_search_call", "id": "ws_1", "status": "completed"}]})
    assert r.status_code == 200, r.text
    ignored = r.headers["x-strata-ignored"]
    assert "input[0].content[1]: input_image part" in ignored and "input[1]: item type 'web_search_call'" in ignored


def test_chat_completions_custom_tools_and_response_format_beside_tools(traced):
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},
             {"type": "custom", "custom": {"name": "apply_patch"}}]
    r = httpx.post(traced.url + "/v1/chat/completions", timeout=60, json={
        "model": "", "max_tokens": 8, "tools": tools, "response_format": {"type": "json_object"}, "n": 2,
        "messages": [{"role": "developer", "content": "d1"}, {"role": "system", "content": "d2"},
                     {"role": "user", "content": [{"type": "text", "text": "hi"},
                                                  {"type": "image_url", "image_url": {"url": "data:,"}}]}]})
    assert r.status_code == 200, r.text
    ignored = r.headers["x-strata-ignored"]
    assert "tools[1]" not in ignored and "response_format json_object" in ignored
    assert "messages[2].content[1]: image_url part" in ignored
    assert "n=" not in ignored and [c["index"] for c in r.json()["choices"]] == [0, 1]  # n is served (test_openai_n.py)


CONVS = [
    [{"role": "system", "content": "BASE-INSTRUCTIONS"}, {"role": "developer", "content": "SKILLS-LIST"},
     {"role": "user", "content": "QUESTION-ONE"}],
    [{"role": "system", "content": "BASE-INSTRUCTIONS"}, {"role": "user", "content": "QUESTION-ONE"},
     {"role": "system", "content": "ENVIRONMENT"}, {"role": "assistant", "content": "ANSWER-ONE"},
     {"role": "user", "content": "QUESTION-TWO"}, {"role": "developer", "content": "LATE-NOTE"}],
]


@pytest.mark.parametrize("conv", CONVS)
def test_no_message_text_is_dropped_by_a_template_that_cannot_place_it(gemma_tmpl, conv):
    # Gemma 3's template raises on a second system message and keeps only the first
    r = httpx.post(gemma_tmpl.url + "/apply-template", json={"messages": conv}, timeout=30)
    assert r.status_code == 200, r.text
    prompt = r.json()["prompt"]
    for m in conv:
        assert m["content"] in prompt
    turn = httpx.post(gemma_tmpl.url + "/v1/chat/completions", timeout=60,
                      json={"model": "", "max_tokens": 2, "messages": conv})
    assert turn.status_code == 200, turn.text


def test_tool_search_loading_deferred_tools_keeps_the_cached_prefix(traced):
    # Claude Code adds each tool a ToolSearch loads to `tools` (defer_loading,
    # in name order) and names it in the result with a tool_reference: the
    # listed tools must not change, or every turn re-prefills its history.
    cron = {"name": "CronCreate", "description": "Create a cron job.", "defer_loading": True,
            "input_schema": {"type": "object", "properties": {"spec": {"type": "string"}}, "required": ["spec"]}}
    search = {"name": "ToolSearch", "description": "Find tools.",
              "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}}}
    monitor = {"name": "Monitor", "description": "Watch.", "defer_loading": True, "input_schema": {"type": "object"}}
    first = [{"role": "user", "content": "Schedule a job with cron, please. " * 8}]
    r1 = messages(traced, {"system": "You help.", "tools": [READ, monitor, search], "messages": first})
    assert r1.status_code == 200, r1.text
    second = first + [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_s", "name": "ToolSearch",
                                           "input": {"query": "cron"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_s",
                                      "content": [{"type": "tool_reference", "tool_name": "CronCreate"}]}]}]
    body = {"system": "You help.", "tools": [READ, cron, monitor, search], "messages": second}
    r2 = messages(traced, body)
    assert r2.status_code == 200, r2.text
    turn1 = prompt_tokens(r1)
    u = r2.json()["usage"]
    assert u["cache_read_input_tokens"] >= turn1 - 8, (turn1, u)
    assert min(u["input_tokens"], u["cache_creation_input_tokens"]) >= 0  # read and written never overlap
    forced = messages(traced, {**body, "tool_choice": {"type": "tool", "name": "CronCreate"}})  # loaded: callable
    assert forced.status_code == 200 and forced.json()["content"][-1]["name"] == "CronCreate"


FN = {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "string"}}}}
GN = {"type": "function", "name": "g", "parameters": {"type": "object", "properties": {"b": {"type": "integer"}}}}


def test_responses_tool_choice_kinds_are_served(traced):
    """Responses tool_choice allowed_tools holds calls to the allowed tools
    with every tool still listed; a hosted tool's type (not offered here)
    leaves the choice to the model and is named."""
    url = traced.url + "/v1/responses"
    base = {"input": "hi", "max_output_tokens": 40, "tools": [FN, GN], "temperature": 1.0}
    plain = httpx.post(url, json=dict(base, tool_choice="required", seed=0), timeout=60).json()
    names = set()
    for seed in range(5):
        r = httpx.post(url, json=dict(base, seed=seed, tool_choice={
            "type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "g"}]}), timeout=60)
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["input_tokens"] == plain["usage"]["input_tokens"]
        names |= {i["name"] for i in r.json()["output"] if i["type"] == "function_call"}
    assert names == {"g"}, names
    r = httpx.post(url, json=dict(base, tools=[{"type": "web_search"}, FN], tool_choice={"type": "web_search"}),
                   timeout=60)
    assert r.status_code == 200 and "tool_choice type 'web_search'" in r.headers["x-strata-ignored"], r.text


def test_completions_prompt_batch_answers_the_first(traced):
    url = traced.url + "/v1/completions"
    one = httpx.post(url, json={"prompt": "hello there", "max_tokens": 4, "temperature": 0}, timeout=60)
    batch = httpx.post(url, json={"prompt": ["hello there", "another"], "max_tokens": 4, "temperature": 0}, timeout=60)
    assert batch.status_code == 200 and "prompt[1..1]" in batch.headers["x-strata-ignored"], batch.text
    assert batch.json()["choices"][0]["text"] == one.json()["choices"][0]["text"]
    single = httpx.post(url, json={"prompt": ["hello there"], "max_tokens": 4, "temperature": 0}, timeout=60)
    assert single.status_code == 200 and "x-strata-ignored" not in single.headers
    assert single.json()["choices"][0]["text"] == one.json()["choices"][0]["text"]


def test_chat_completions_custom_tool_calls(real):
    """A Chat Completions custom tool (free-text input, e.g. apply_patch) is
    offered; its call comes back as {"type": "custom", "custom": {"name",
    "input"}}, streamed as input deltas that add up to the same input, and
    sent back in history it replays as the model's own turn."""
    url = real.url + "/v1/chat/completions"
    patch = {"type": "custom", "custom": {"name": "apply_patch", "description": "Apply a patch.",
                                          "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}}}
    msgs = [{"role": "user", "content": "patch it: change x to y in a.py"}]
    body = {"model": "", "max_tokens": 40, "temperature": 0, "tools": [patch], "messages": msgs,
            "tool_choice": {"type": "custom", "custom": {"name": "apply_patch"}}}
    r = httpx.post(url, json=body, timeout=60).json()
    call = r["choices"][0]["message"]["tool_calls"][0]
    assert call["type"] == "custom" and call["custom"]["name"] == "apply_patch", call
    assert isinstance(call["custom"]["input"], str) and "function" not in call
    with httpx.stream("POST", url, json=dict(body, stream=True), timeout=60) as s:
        deltas = [d for l in s.iter_lines() if l.startswith("data: {")
                  for ch in json.loads(l[6:])["choices"] for d in ch["delta"].get("tool_calls") or []]
    assert deltas[0]["type"] == "custom" and deltas[0]["custom"]["name"] == "apply_patch"
    assert "".join(d["custom"].get("input", "") for d in deltas) == call["custom"]["input"]
    assert r["choices"][0]["finish_reason"] == "tool_calls", r  # a whole call: sent back, it is the model's turn
    msgs += [{"role": "assistant", "content": None, "tool_calls": [call]},
             {"role": "tool", "tool_call_id": call["id"], "content": "done"}]
    r2 = httpx.post(url, json=dict(body, messages=msgs, max_tokens=1), timeout=60)
    assert r2.status_code == 200, r2.text
    u1, u2 = r["usage"], r2.json()["usage"]
    assert u2["prompt_tokens_details"]["cached_tokens"] >= u1["prompt_tokens"] + u1["completion_tokens"] - 1


def test_integers_beyond_64_bits_are_read_as_doubles(traced):
    """JSON numbers have no size limit, and a Python client writes big ints
    as digits (a tool call's input sent back, a tool result's JSON): the
    body is served, the big integers read as doubles (as a JavaScript
    client reads them); digits inside strings are left alone. Integers a
    field must hold still get its range check."""
    big = "123456789012345678901234"
    body = ('{"model": "x", "max_tokens": 2, "tools": [%s], "messages": ['
            '{"role": "user", "content": "read it %s \\\\"}, '
            '{"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", '
            '"input": {"path": "a", "limit": %s, "low": -9223372036854775809, "fits": -9223372036854775808}}]}, '
            '{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}]}'
            % (json.dumps(READ), big, big))
    r = httpx.post(traced.url + "/v1/messages", content=body, headers={"content-type": "application/json"}, timeout=60)
    assert r.status_code == 200, r.text
    chat = '{"messages": [{"role": "user", "content": "%s"}], "max_tokens": 2, "metadata": {"n": %s}}' % (big, big)
    r = httpx.post(traced.url + "/v1/chat/completions", content=chat, headers={"content-type": "application/json"},
                   timeout=60)
    assert r.status_code == 200, r.text
    bad = '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": %s}' % big
    r = httpx.post(traced.url + "/v1/chat/completions", content=bad, headers={"content-type": "application/json"},
                   timeout=60)
    assert r.status_code == 400 and "max_tokens" in r.json()["error"]["message"], r.text
