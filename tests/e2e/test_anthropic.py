"""Anthropic Messages API end to end, with the official `anthropic` SDK."""
import json

import anthropic
import httpx
import pytest


def client(server):
    return anthropic.Anthropic(base_url=server.url, api_key="none", max_retries=0)


# This SDK version has no `temperature` argument; sampling fields go in the body.
GREEDY = {"extra_body": {"temperature": 0}}


def ask(server, content, **kw):
    kw.setdefault("max_tokens", 12)
    return client(server).messages.create(model="", messages=[{"role": "user", "content": content}],
                                          **GREEDY, **kw)


def test_message_plain(tiny):
    # Its own cache salt: a first request shares no block with other tests' (cache reads 0).
    m = client(tiny).messages.create(model="", messages=[{"role": "user", "content": "hello"}], max_tokens=12,
                                     extra_body={"temperature": 0, "cache_salt": "message-plain"})
    assert m.type == "message" and m.role == "assistant"
    assert m.id.startswith("msg_") and len(m.id) == 4 + 32
    assert m.content and m.content[0].type == "text" and m.content[0].text
    assert m.stop_reason in ("end_turn", "max_tokens")
    assert m.usage.input_tokens > 3 and m.usage.output_tokens >= 1
    assert m.usage.cache_read_input_tokens == 0


def test_system_as_string_and_blocks_render_the_same(tiny):
    c = client(tiny)
    a = c.messages.count_tokens(model="", system="be brief", messages=[{"role": "user", "content": "hi"}])
    b = c.messages.count_tokens(model="", system=[{"type": "text", "text": "be brief",
                                                   "cache_control": {"type": "ephemeral"}}],
                                messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}]}])
    assert a.input_tokens == b.input_tokens > 5


def test_stream_event_sequence_and_text(tiny):
    whole = ask(tiny, "tell me more", max_tokens=16)
    events = list(client(tiny).messages.create(model="", messages=[{"role": "user", "content": "tell me more"}],
                                                max_tokens=16, stream=True, **GREEDY))
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[1] == "content_block_start"
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta")
    assert text == whole.content[0].text
    delta = [e for e in events if e.type == "message_delta"][0]
    assert delta.delta.stop_reason == whole.stop_reason
    assert delta.usage.output_tokens == whole.usage.output_tokens


def test_stop_sequences(tiny):
    full = ask(tiny, "count", max_tokens=24).content[0].text
    if len(full) < 6:
        pytest.skip("reply too short to cut")
    stop = full[3:5]
    m = ask(tiny, "count", max_tokens=24, stop_sequences=[stop])
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == stop
    assert m.content[0].text == full[:full.index(stop)]


def test_tool_result_history_is_accepted(tiny):
    msgs = [{"role": "user", "content": "weather?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                               "input": {"city": "Paris"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}]}]
    m = client(tiny).messages.create(model="", messages=msgs, max_tokens=8, **GREEDY)
    assert m.content[0].type == "text"


def test_errors_use_anthropic_schema(tiny):
    r = httpx.post(tiny.url + "/v1/messages", content=b"{oops")
    assert r.status_code == 400 and r.json()["type"] == "error"
    assert r.json()["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.BadRequestError) as e:
        client(tiny).messages.create(model="", messages=[{"role": "user", "content": "x"}], max_tokens=0)
    assert "max_tokens" in str(e.value)
    m = client(tiny).messages.create(model="claude-sonnet-9", messages=[{"role": "user", "content": "x"}],
                                     max_tokens=4)  # any name: one model is served
    assert m.model != "claude-sonnet-9"
    with pytest.raises(anthropic.BadRequestError) as e:
        client(tiny).messages.create(model="", messages=[{"role": "user", "content": "w " * 3000}], max_tokens=4)
    assert "context" in str(e.value)


CJK = "中" * 400  # 1,200 bytes: longer than the 512-byte message buffers


@pytest.mark.parametrize("where", ["role", "cache_ttl"])
@pytest.mark.parametrize("pad", ["", "a", "ab"])  # one of the three cuts inside a character
def test_error_quoting_long_cjk_text_keeps_the_error_object(tiny, where, pad):
    # A quoted user string cut mid-character made the JSON build fail and the
    # body came back as {} with no error object.
    block = {"type": "text", "text": "hi"}
    role = "user"
    if where == "role":
        role = pad + CJK
    else:
        block["cache_control"] = {"type": "ephemeral", "ttl": pad + CJK}
    r = httpx.post(tiny.url + "/v1/messages", json={
        "model": "", "max_tokens": 4, "messages": [{"role": role, "content": [block]}]})
    assert r.status_code == 400
    body = r.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    msg = body["error"]["message"]
    assert isinstance(msg, str) and "\ufffd" not in msg
    assert ("role '" if where == "role" else "ttl must be") in msg
    assert "中" * 100 in msg and len(msg.encode()) <= 512

@pytest.mark.parametrize("ttl", ["infh", "1e308h", "nanm", "25h"])
def test_unbounded_cache_ttl_is_refused(tiny, ttl):
    # infh and 1e308h were kept forever (inf in the usage file, invalid JSON in the trace).
    block = {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral", "ttl": ttl}}
    r = httpx.post(tiny.url + "/v1/messages", json={
        "model": "", "max_tokens": 4, "messages": [{"role": "user", "content": [block]}]})
    assert r.status_code == 400 and "at most 24h" in r.json()["error"]["message"]


def test_strict_model_refuses_other_names():
    from conftest import TINY_MODEL, Server
    s = Server(TINY_MODEL, "--strict-model", "--ctx", "512")
    try:
        with pytest.raises(anthropic.NotFoundError):
            client(s).messages.create(model="claude-9", messages=[{"role": "user", "content": "x"}], max_tokens=4)
    finally:
        assert s.stop() == 0


def test_real_model_anthropic(real):
    m = ask(real, "What is the capital of France?", max_tokens=20, system="You are a helpful assistant.")
    assert "Paris" in m.content[0].text


def claude_code_system(cch):
    """Claude Code's system blocks: the billing header (a new cch nonce each request) first."""
    billing = f"x-anthropic-billing-header: cc_version=2.1.37.abc; cc_entrypoint=cli; cch={cch};"
    policy = "You are an interactive coding agent. Follow the repository's style. " * 12
    return [{"type": "text", "text": billing},
            {"type": "text", "text": policy, "cache_control": {"type": "ephemeral"}}]


def test_claude_code_billing_nonce_never_breaks_the_prefix(tiny):
    # Turn 2 carries a new cch value and must still hit the system prompt and turn 1.
    body = {"temperature": 0, "cache_salt": "claude-code-shape"}
    c = client(tiny)
    q1 = [{"role": "user", "content": "list the files"}]
    m1 = c.messages.create(model="claude-sonnet-9", system=claude_code_system("3f9a1"), messages=q1,
                           max_tokens=8, extra_body=body)
    q2 = q1 + [{"role": "assistant", "content": m1.content[0].text}, {"role": "user", "content": "now the tests"}]
    m2 = c.messages.create(model="claude-sonnet-9", system=claude_code_system("b07c2"), messages=q2,
                           max_tokens=8, extra_body=body)
    system_only = c.messages.count_tokens(model="", system=claude_code_system("00000")[1:],
                                          messages=[{"role": "user", "content": "x"}]).input_tokens
    assert m2.usage.cache_read_input_tokens > system_only  # the system prompt and turn 1, not ~20 tokens
    u1 = m1.usage
    assert m2.usage.cache_read_input_tokens >= (u1.input_tokens + u1.cache_creation_input_tokens
                                                + u1.cache_read_input_tokens - 1)


def sse_events(server, body, headers=None):
    """The (event, data) pairs of a streamed /v1/messages reply."""
    out, event = [], None
    with httpx.stream("POST", server.url + "/v1/messages", json={**body, "stream": True}, headers=headers or {},
                      timeout=60) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                out.append((event, json.loads(line[6:])))
    return out


LONG_SYSTEM = "You answer questions about the files in the repository, briefly and exactly. " * 20


def test_stream_has_one_block_and_message_start_usage_is_the_final_split(tiny):
    body = {"model": "", "max_tokens": 6, "temperature": 0, "system": LONG_SYSTEM, "cache_salt": "fidelity",
            "messages": [{"role": "user", "content": "which files changed?"}]}
    for turn in range(2):  # cold, then the prefix cached
        ev = sse_events(tiny, body)
        starts = [d for e, d in ev if e == "content_block_start"]
        assert len(starts) == 1 and starts[0]["content_block"]["type"] == "text"  # no extra empty block
        start = next(d for e, d in ev if e == "message_start")["message"]["usage"]
        final = next(d for e, d in ev if e == "message_delta")["usage"]
        for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
            assert start[k] == final[k], (turn, k, start, final)
        if turn == 0:
            assert final["cache_creation_input_tokens"] > 0 and final["cache_read_input_tokens"] == 0
        else:
            assert final["cache_read_input_tokens"] > 0 and final["cache_creation_input_tokens"] == 0


def test_cache_creation_is_split_by_ttl(tiny):
    system = [{"type": "text", "text": LONG_SYSTEM + " (split)", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    r = httpx.post(tiny.url + "/v1/messages", json={
        "model": "", "max_tokens": 2, "system": system, "cache_salt": "split",
        "messages": [{"role": "user", "content": "hi " * 150}]}).json()["usage"]
    cc = r["cache_creation"]
    assert cc["ephemeral_1h_input_tokens"] > 0 and cc["ephemeral_5m_input_tokens"] > 0
    assert cc["ephemeral_1h_input_tokens"] + cc["ephemeral_5m_input_tokens"] == r["cache_creation_input_tokens"]


def test_thinking_blocks_top_level_cache_control_and_beta_headers_are_accepted(tiny):
    body = {"model": "", "max_tokens": 2, "cache_control": {"type": "ephemeral"}, "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "x"},
                                          {"type": "redacted_thinking", "data": "abc"},
                                          {"type": "text", "text": "hello"}]},
        {"role": "user", "content": "again"}]}
    r = httpx.post(tiny.url + "/v1/messages", json=body,
                   headers={"anthropic-version": "2023-06-01", "anthropic-beta": "prompt-caching-2024-07-31"})
    assert r.status_code == 200, r.text


def test_cache_diagnosis_beta_names_the_changed_part(tiny):
    headers = {"anthropic-beta": "cache-diagnosis-2026-04-07"}

    def turn(system, messages, prev):
        r = httpx.post(tiny.url + "/v1/messages", headers=headers, json={
            "model": "", "max_tokens": 2, "temperature": 0, "system": system, "messages": messages,
            "cache_salt": "diagnosis", "diagnostics": {"previous_message_id": prev}})
        assert r.status_code == 200, r.text
        return r.json()
    system = "You review pull requests carefully. " * 15
    q = [{"role": "user", "content": "look at the diff " * 10}]
    t1 = turn(system, q, None)
    assert t1["diagnostics"] == {"cache_miss_reason": None}
    q2 = q + [{"role": "assistant", "content": t1["content"][0]["text"]}, {"role": "user", "content": "and now?"}]
    t2 = turn(system, q2, t1["id"])
    assert t2["diagnostics"]["cache_miss_reason"] is None  # extends turn 1: no divergence
    t3 = turn("You review commits carefully. " + system, q2, t2["id"])
    reason = t3["diagnostics"]["cache_miss_reason"]
    assert reason["type"] == "system_changed" and reason["cache_missed_input_tokens"] > 100, reason
    t4 = turn(system, [{"role": "user", "content": "other " * 40}], t2["id"])
    assert t4["diagnostics"]["cache_miss_reason"]["type"] == "messages_changed"
    assert turn(system, q, "msg_unknown")["diagnostics"]["cache_miss_reason"]["type"] == "previous_message_not_found"
