"""Speculative decoding never changes the output (issue 27, part 1).

Every architecture the project runs (the tiny llama, the tiny qwen35 with
its recurrent layers, with and without state snapshots, the tiny
mixture-of-experts qwen3moe and qwen35moe (recurrent too), the tiny
gpt-oss with its sinks, sliding window and MXFP4 experts, a tiny Gemma 3
with a window of 16, the tiny qwen35 with an MTP block drafting (random,
and one that echoes the trunk's map so its drafts are often accepted),
SmolLM2, Gemma 3 270M with its window of 512) serves the same request with speculation on
(the default) and off (`"speculative": false`, and a server started with
`--no-speculative`): the same bytes, the same token count and the same
logprobs, greedy and seeded sampling (with penalties), whole and streamed
(OpenAI and Anthropic SSE), JSON-schema
output, tool calls held to their schema (the generic format and Hermes'
native one through the call guard) including a call that repeats the
previous call's arguments, short limits, and two requests decoded side
by side. The prompts are copy-heavy, and /metrics must show drafts made
and (on the real models) accepted, so the comparison is not vacuous.
"""
import json
import os
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from conftest import GEN, REAL_MODEL, ROOT, TINY_MODEL, Server

GEMMA3 = os.environ.get("STRATA_GEMMA3_MODEL", os.path.join(ROOT, "models", "gemma-3-270m-q4_k_m.gguf"))
QWEN35 = os.path.join(GEN, "models", "qwen35-f32.gguf")
MODELS = {
    "llama-tiny": (TINY_MODEL, ()),
    "qwen35-tiny": (QWEN35, ()),
    "qwen35-tiny-nocache": (QWEN35, ("--no-prefix-cache",)),
    "qwen3moe-tiny": (os.path.join(GEN, "models", "qwen3moe-q4_k_m.gguf"), ()),
    "qwen35moe-tiny": (os.path.join(GEN, "models", "qwen35moe-q4_k_m.gguf"), ()),
    "gpt-oss-tiny": (os.path.join(GEN, "models", "gpt-oss-mxfp4.gguf"), ()),
    "gemma3-tiny": (os.path.join(GEN, "models", "gemma3-q8_0.gguf"), ()),  # a window of 16
    # qwen35 with an MTP block: lookup, and the block where lookup finds nothing
    "qwen35-mtp-tiny": (os.path.join(GEN, "bad", "qwen35-f32-mtp.gguf"), ()),
    # the echoing block (testdata_models.py, _echo) alone: drafts accepted and refused
    "qwen35-mtp-echo": (os.path.join(GEN, "bad", "qwen35-f32-mtp-echo.gguf"), ("--spec-drafter", "mtp")),
    "smollm2": (REAL_MODEL, ()),
    "gemma3": (GEMMA3, ()),
}
REAL = {"smollm2", "gemma3"}
MTP = {"qwen35-mtp-tiny", "qwen35-mtp-echo"}

FILE = """def area(w, h):
    return w * h


def perimeter(w, h):
    return 2 * (w + h)


def describe(w, h):
    return f"{w}x{h}: area {area(w, h)}, perimeter {perimeter(w, h)}"
"""
COPY = [{"role": "user", "content": "Here is shapes.py:\n\n" + FILE +
         "\nWrite shapes.py again in full, with the function area renamed to surface. Only the code."}]

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
                   "required": ["city", "unit"]}}}
CALL = {"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}
AGAIN = [{"role": "user", "content": "What's the weather in Paris, in celsius?"},
         {"role": "assistant", "content": None, "tool_calls": [CALL]},
         {"role": "tool", "tool_call_id": "call_1", "content": "error: timeout, try again"},
         {"role": "user", "content": "The call timed out. Call get_weather again with the same arguments."}]


@pytest.fixture(scope="module", params=list(MODELS))
def srv(request):
    path, extra = MODELS[request.param]
    if not os.path.exists(path):
        pytest.skip(f"{path} not present (make model / model-gemma3 / testdata)")
    s = Server(path, "--parallel", "2", "--ctx", "2048", *extra)
    s.name = request.param
    yield s
    assert s.stop() == 0, "server did not shut down cleanly on SIGTERM"


def post(srv, path, body):
    r = httpx.post(srv.url + path, json=body, timeout=600)
    assert r.status_code == 200, r.text
    return r.json()


def both(srv, path, body):
    """The reply with speculation on (the default) and off. Each under a
    cache salt of its own: replies are remembered per salt (exact replay),
    and a call the model made in one would change how the other's prompt
    renders the conversation's earlier call."""
    salt = uuid.uuid4().hex
    return (post(srv, path, {**body, "cache_salt": "on-" + salt}),
            post(srv, path, {**body, "speculative": False, "cache_salt": "off-" + salt}))


def chat_out(r):
    m = r["choices"][0]["message"]
    calls = [{k: v for k, v in c.items() if k != "id"} for c in m.get("tool_calls") or []]  # ids are random
    return (m.get("content"), json.dumps(calls, sort_keys=True), r["choices"][0]["finish_reason"],
            r["usage"]["completion_tokens"], json.dumps(r["choices"][0].get("logprobs"), sort_keys=True))


def spec_counts(srv):
    m = srv.metrics()
    return m["strata_spec_drafted_tokens_total"], m["strata_spec_accepted_tokens_total"]


def test_greedy_copy_same_bytes(srv):
    before = spec_counts(srv)
    on, off = both(srv, "/v1/chat/completions", {"messages": COPY, "max_tokens": 120, "temperature": 0,
                                                 "logprobs": True, "top_logprobs": 3})
    assert chat_out(on) == chat_out(off)
    drafted, accepted = (a - b for a, b in zip(spec_counts(srv), before))
    if srv.name in REAL:  # random weights may write nothing their context has (test_drafts_were_verified)
        assert drafted > 0, "no draft was made: the comparison says nothing"
        assert accepted > 0, "no draft was accepted on a copy task"


@pytest.mark.parametrize("sampling", [
    {"temperature": 1.0, "seed": 7},
    {"temperature": 0.8, "top_p": 0.9, "top_k": 40, "seed": 123, "repetition_penalty": 1.1,
     "presence_penalty": 0.3, "frequency_penalty": 0.2},
], ids=["plain", "truncated-penalties"])
def test_seeded_sampling_same_bytes(srv, sampling):
    body = {"messages": COPY, "max_tokens": 100, **sampling}
    on, off = both(srv, "/v1/chat/completions", body)
    assert chat_out(on) == chat_out(off)
    assert chat_out(post(srv, "/v1/chat/completions", body)) == chat_out(on)  # and again (the cache on)


def test_completions_logprobs_and_short_limits(srv):
    prompt = "one two three four five six seven eight nine ten. one two three four five six seven eight"
    for n in (1, 2, 5, 40):
        on, off = both(srv, "/v1/completions", {"prompt": prompt, "max_tokens": n, "temperature": 0, "logprobs": 2})
        assert on["choices"][0] == off["choices"][0] and on["usage"]["completion_tokens"] == off["usage"]["completion_tokens"]
    on, off = both(srv, "/v1/completions", {"prompt": prompt, "max_tokens": 60, "temperature": 0, "stop": ["seven"]})
    assert on["choices"][0] == off["choices"][0]


def test_json_schema_same_bytes(srv):
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "lines": {"type": "array", "items": {
        "type": "string"}}}, "required": ["name", "lines"], "additionalProperties": False}
    fmt = {"type": "json_schema", "json_schema": {"name": "file", "schema": schema, "strict": True}}
    for sampling in ({"temperature": 0}, {"temperature": 0.9, "seed": 3}):
        on, off = both(srv, "/v1/chat/completions", {"messages": COPY, "max_tokens": 120, "response_format": fmt,
                                                     **sampling})
        assert chat_out(on) == chat_out(off)


def test_tool_call_repeating_arguments_same_bytes(srv):
    for sampling in ({"temperature": 0}, {"temperature": 1.0, "seed": 11}):
        for choice in ("required", "auto"):
            body = {"messages": AGAIN, "tools": [WEATHER], "tool_choice": choice, "max_tokens": 80, **sampling}
            on, off = both(srv, "/v1/chat/completions", body)
            assert chat_out(on) == chat_out(off)


def test_side_by_side_same_bytes(srv):
    bodies = [{"messages": COPY, "max_tokens": 80, "temperature": 0},
              {"messages": AGAIN, "tools": [WEATHER], "tool_choice": "required", "max_tokens": 60,
               "temperature": 1.0, "seed": 5}]
    salt = uuid.uuid4().hex
    alone = [chat_out(post(srv, "/v1/chat/completions", {**b, "speculative": False, "cache_salt": "a" + salt}))
             for b in bodies]
    with ThreadPoolExecutor(2) as ex:  # decoded in the same batches, each drafting
        together = list(ex.map(lambda b: chat_out(post(srv, "/v1/chat/completions", {**b, "cache_salt": "t" + salt})),
                               bodies))
    assert together == alone


def test_anthropic_stream_same_bytes(srv):
    body = {"model": "x", "max_tokens": 80, "messages": COPY, "temperature": 0, "stream": True}

    def text(extra):
        with httpx.stream("POST", srv.url + "/v1/messages", json={**body, **extra}, timeout=600) as r:
            assert r.status_code == 200
            out = []
            for line in r.iter_lines():
                if line.startswith("data: "):
                    ev = json.loads(line[6:])
                    if ev.get("type") == "content_block_delta":
                        out.append(ev["delta"].get("text", ""))
            return "".join(out)

    salt = uuid.uuid4().hex
    assert text({"cache_salt": "on" + salt}) == text({"speculative": False, "cache_salt": "off" + salt})


def openai_stream(srv, body):
    """A streamed chat reply as (content, reasoning, call arguments by
    index, finish reason): the deltas joined."""
    content, reasoning, calls, finish = [], [], {}, None
    with httpx.stream("POST", srv.url + "/v1/chat/completions", json={**body, "stream": True}, timeout=600) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            for ch in json.loads(line[6:]).get("choices", []):
                d = ch.get("delta", {})
                content.append(d.get("content") or "")
                reasoning.append(d.get("reasoning_content") or "")
                for c in d.get("tool_calls") or []:
                    calls.setdefault(c["index"], []).append((c.get("function") or {}).get("arguments") or "")
                finish = ch.get("finish_reason") or finish
    return "".join(content), "".join(reasoning), {k: "".join(v) for k, v in calls.items()}, finish


@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 0.9, "top_k": 40, "seed": 17,
                                                           "repetition_penalty": 1.1}], ids=["greedy", "seeded"])
def test_openai_stream_same_bytes(srv, sampling):
    """Streamed with speculation on and off, and whole: the same text.
    A step that yields several tokens streams them all, in order."""
    body = {"messages": COPY, "max_tokens": 100, **sampling}
    salt = uuid.uuid4().hex
    on = openai_stream(srv, {**body, "cache_salt": "on" + salt})
    assert on == openai_stream(srv, {**body, "speculative": False, "cache_salt": "off" + salt})
    whole = post(srv, "/v1/chat/completions", {**body, "speculative": False, "cache_salt": "w" + salt})
    m = whole["choices"][0]["message"]
    assert (on[0], on[1], on[3]) == (m.get("content") or "", m.get("reasoning_content") or "",
                                     whole["choices"][0]["finish_reason"])


def test_bad_speculative_field(srv):
    r = httpx.post(srv.url + "/v1/chat/completions", json={"messages": COPY, "speculative": "yes"}, timeout=60)
    assert r.status_code == 400 and "speculative" in r.text


def test_drafts_were_verified(srv):
    """Runs after the tests above on each server (pytest keeps file order
    within a module-scoped parameter): over them, drafts were made, some
    accepted and some refused, so both verification paths (and, on the
    recurrent models, the state's rollback) ran under the comparisons.
    Random weights rarely write what their context holds, hence counted
    over the module, not per test."""
    drafted, accepted = spec_counts(srv)
    assert 0 < accepted < drafted, (drafted, accepted)
    m = srv.metrics()
    if srv.name in MTP:  # the block drafted (and on the echo, drafts were accepted and refused)
        mtp_drafted, mtp_accepted = m["strata_spec_mtp_drafted_tokens_total"], m["strata_spec_mtp_accepted_tokens_total"]
        assert mtp_drafted > 0 and m["strata_spec_mtp_seconds_total"] > 0, m
        if srv.name == "qwen35-mtp-echo":
            assert 0 < mtp_accepted < mtp_drafted == drafted, m
    else:
        assert "strata_spec_mtp_drafted_tokens_total" not in m


def test_native_hermes_tool_calls_same_bytes():
    """The call guard (native Hermes format) masks every verified row."""
    if not os.path.exists(REAL_MODEL):
        pytest.skip("default model not downloaded (make model)")
    s = Server(REAL_MODEL, "--parallel", "2", "--ctx", "2048", "--chat-template-file",
               f"{ROOT}/tests/data/tmpl/qwen2.5.jinja")
    try:
        before = spec_counts(s)
        for sampling in ({"temperature": 0}, {"temperature": 1.0, "seed": 2}):
            for choice in ("required", "auto"):
                on, off = both(s, "/v1/chat/completions", {"messages": AGAIN, "tools": [WEATHER], "tool_choice": choice,
                                                           "max_tokens": 80, **sampling})
                assert chat_out(on) == chat_out(off)
        assert spec_counts(s)[0] > before[0]
    finally:
        assert s.stop() == 0


def test_no_speculative_flag():
    """--no-speculative: nothing drafted, the same bytes as the default."""
    on = Server(TINY_MODEL, "--parallel", "1", "--ctx", "1024")
    off = Server(TINY_MODEL, "--parallel", "1", "--ctx", "1024", "--no-speculative")
    try:
        body = {"messages": COPY, "max_tokens": 60, "temperature": 0.7, "seed": 9}
        assert chat_out(post(on, "/v1/chat/completions", body)) == chat_out(post(off, "/v1/chat/completions", body))
        assert spec_counts(off) == (0, 0)
        assert spec_counts(on)[0] > 0
    finally:
        assert on.stop() == 0 and off.stop() == 0


def test_bad_spec_drafter_flag():
    """--spec-drafter takes auto, lookup or mtp: anything else is refused
    before the model loads."""
    import subprocess
    r = subprocess.run([os.path.join(ROOT, "strata"), "serve", "-m", TINY_MODEL, "--spec-drafter", "medusa"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--spec-drafter medusa: expected auto, lookup or mtp" in r.stderr, r.stderr


def test_mtp_drafter_counted_in_kv_budget():
    """With --ctx left to the model, the KV budget counts the MTP drafter's
    K/V when the drafter runs (auto, mtp) and the start-up context line says
    so; with lookup only, or no speculation, nothing of it (src/model/engine.c)."""
    import re
    import tempfile
    mtp_model = MODELS["qwen35-mtp-tiny"][0]
    share = re.compile(r"; the MTP drafter's K/V ([\d.]+) KiB a token plus ([\d.]+) MiB per sequence, counted in the budget")
    with tempfile.TemporaryDirectory() as tmp:
        for flags, counted in ((("--spec-drafter", "auto"), True), (("--spec-drafter", "mtp"), True),
                               (("--spec-drafter", "lookup"), False), (("--no-speculative",), False)):
            log = os.path.join(tmp, "-".join(flags) + ".log")
            s = Server(mtp_model, "--parallel", "2", "--log-file", log, *flags)
            assert s.stop() == 0
            line = next(l for l in open(log) if " context: " in l)
            m = share.search(line)
            assert bool(m) == counted, (flags, line)
            if m:
                assert float(m.group(1)) > 0 and float(m.group(2)) > 0, line
