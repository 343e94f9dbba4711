"""gpt-oss served end to end on the tiny generated model
(tools/testdata_gptoss.py: MXFP4 experts, sinks, sliding window 128,
harmony vocabulary and the real gpt-oss chat template).

Checked: a cache hit gives the bytes of a cold run (the same request
served by a server without the prefix cache); a 12-call tool loop under
the model's own template prefills only the new tokens each turn (the
model's harmony turns replayed as its exact tokens); every API answers
in its own shape whatever the random model writes. With the "parrot"
(the same file format, weights that make greedy decoding write a fixed
analysis message): reasoning comes out as Chat's reasoning_content,
Anthropic's thinking block and Responses' reasoning item, whole and
streamed, raw in /v1/completions, and a turn sent back (with or without
its reasoning) replays as the model's tokens.
"""
import os

import anthropic
import httpx
import openai
import pytest

from conftest import GEN, Server

MODEL = os.path.join(GEN, "models", "gpt-oss-mxfp4.gguf")
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather forecast for a city",
                                            "parameters": {"type": "object", "properties": {
                                                "city": {"type": "string", "enum": ["Paris", "Oslo", "Rome"]},
                                                "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                                                "required": ["city", "days"], "additionalProperties": False}}}
SYSTEM = {"role": "system", "content": "You are a weather agent. Use the tools. " * 20}


@pytest.fixture(scope="module")
def oss():
    if not os.path.exists(MODEL):
        pytest.skip("tiny gpt-oss model not generated (make testdata)")
    s = Server(MODEL, "--parallel", "2", "--ctx", "4096")
    yield s
    assert s.stop() == 0, "server did not shut down cleanly on SIGTERM"


@pytest.fixture(scope="module")
def cold():
    if not os.path.exists(MODEL):
        pytest.skip("tiny gpt-oss model not generated (make testdata)")
    s = Server(MODEL, "--parallel", "1", "--ctx", "4096", "--no-prefix-cache")
    yield s
    assert s.stop() == 0


def oai(s):
    return openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0)


def cached(usage):
    return usage.prompt_tokens_details.cached_tokens


def test_cache_hit_equals_cold(oss, cold):
    msgs = [SYSTEM, {"role": "user", "content": "Hello there, how are you today? Tell me about caches. " * 6}]
    kw = dict(model="", messages=msgs, temperature=0, max_tokens=40)
    first = oai(oss).chat.completions.create(**kw)
    again = oai(oss).chat.completions.create(**kw)
    ref = oai(cold).chat.completions.create(**kw)
    assert cached(again.usage) >= first.usage.prompt_tokens - 64  # past the sliding window of 128
    assert first.usage.prompt_tokens > 256
    for r in (first, again):
        assert r.choices[0].message.content == ref.choices[0].message.content
        assert getattr(r.choices[0].message, "reasoning_content", None) == \
            getattr(ref.choices[0].message, "reasoning_content", None)
    assert cached(ref.usage) == 0


def test_tool_loop_prefills_only_new_tokens(oss):
    msgs = [SYSTEM, {"role": "user", "content": "What's the weather in Paris for the next days?"}]
    prev = None
    for turn in range(12):
        r = oai(oss).chat.completions.create(model="", messages=msgs, tools=[WEATHER], tool_choice="required",
                                             temperature=0, max_tokens=400)
        ch = r.choices[0]
        assert ch.finish_reason == "tool_calls", ch
        call = ch.message.tool_calls[0]
        assert call.function.name == "get_weather"
        if prev is not None:  # everything the last turn saw and wrote is cached
            assert cached(r.usage) >= prev.prompt_tokens + prev.completion_tokens - 1, (turn, r.usage, prev)
            diff = r.usage.model_extra["strata_cache"].get("first_difference")
            assert diff is None or diff["token"] >= prev.prompt_tokens, (turn, diff)
        prev = r.usage
        back = {"role": "assistant", "content": ch.message.content, "tool_calls": [
            {"id": f"call_{turn}", "type": "function",
             "function": {"name": call.function.name, "arguments": call.function.arguments}}]}
        reasoning = getattr(ch.message, "reasoning_content", None)
        if reasoning:
            back["reasoning_content"] = reasoning
        msgs += [back, {"role": "tool", "tool_call_id": f"call_{turn}", "content": f"sunny, {20 + turn} C"}]


def test_every_api_answers(oss):
    ask = [{"role": "user", "content": "Think, then answer: what is 2+2?"}]
    for seed in range(3):
        r = oai(oss).chat.completions.create(model="", messages=ask, temperature=1.0, seed=seed, max_tokens=48)
        assert r.choices[0].finish_reason in ("stop", "length")
        rc = getattr(r.choices[0].message, "reasoning_content", None)
        assert rc is None or isinstance(rc, str)
        chunks = list(oai(oss).chat.completions.create(model="", messages=ask, temperature=1.0, seed=seed,
                                                       max_tokens=48, stream=True))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        thought = "".join(getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in chunks if c.choices)
        assert text == (r.choices[0].message.content or "") and thought == (rc or "")
    c = anthropic.Anthropic(base_url=oss.url, api_key="none", max_retries=0)
    m = c.messages.create(model="claude", max_tokens=48, messages=ask)
    assert m.stop_reason in ("end_turn", "max_tokens") and all(b.type in ("text", "thinking") for b in m.content)
    resp = oai(oss).responses.create(model="", input=ask[0]["content"], max_output_tokens=48)
    assert resp.output and all(o.type in ("message", "reasoning") for o in resp.output)


def test_harmony_template_is_used(oss):
    r = httpx.post(oss.url + "/apply-template", json={"messages": [{"role": "user", "content": "hi"}]}).json()
    assert r["prompt"].startswith("<|start|>system<|message|>") and r["prompt"].endswith("<|start|>assistant")


PARROT = os.path.join(GEN, "models", "gpt-oss-parrot.gguf")


@pytest.fixture(scope="module")
def parrot():
    # tools/testdata_gptoss.py: greedy decoding writes exactly
    # "<|channel|>analysis<|message|>Thinking<|end|>" then ends.
    if not os.path.exists(PARROT):
        pytest.skip("gpt-oss parrot model not generated (make testdata)")
    s = Server(PARROT, "--parallel", "1", "--ctx", "2048")
    yield s
    assert s.stop() == 0


def test_reasoning_in_every_api(parrot):
    ask = [{"role": "user", "content": "What is 2+2?"}]
    kw = dict(model="", messages=ask, temperature=0, max_tokens=40)
    r = oai(parrot).chat.completions.create(**kw)
    msg = r.choices[0].message
    assert msg.content == "" and msg.model_extra["reasoning_content"] == "Thinking" and r.choices[0].finish_reason == "stop"
    chunks = list(oai(parrot).chat.completions.create(stream=True, **kw))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert "".join((d.model_extra or {}).get("reasoning_content") or "" for d in deltas) == "Thinking"
    assert "".join(d.content or "" for d in deltas) == ""
    raw = oai(parrot).completions.create(model="", prompt="2+2?", temperature=0, max_tokens=40)
    assert raw.choices[0].text == "<|channel|>analysis<|message|>Thinking<|end|>"  # no template: raw text

    c = anthropic.Anthropic(base_url=parrot.url, api_key="none", max_retries=0)
    m = c.messages.create(model="claude", max_tokens=40, messages=ask, extra_body={"temperature": 0})
    assert [(b.type, b.thinking) for b in m.content] == [("thinking", "Thinking")]
    with c.messages.stream(model="claude", max_tokens=40, messages=ask, extra_body={"temperature": 0}) as st:
        final = st.get_final_message()
    assert [(b.type, b.thinking) for b in final.content if b.type == "thinking"] == [("thinking", "Thinking")]

    resp = oai(parrot).responses.create(model="", input=ask[0]["content"], temperature=0, max_output_tokens=40)
    items = [o for o in resp.output if o.type == "reasoning"]
    assert len(items) == 1 and items[0].content[0].text == "Thinking"
    events = list(oai(parrot).responses.create(model="", input=ask[0]["content"], temperature=0,
                                               max_output_tokens=40, stream=True))
    assert "".join(e.delta for e in events if e.type == "response.reasoning_text.delta") == "Thinking"
    done = events[-1].response
    assert [o.type for o in done.output][0] == "reasoning"


def test_reasoning_sent_back_replays_exactly(parrot):
    # The turn comes back with its reasoning (or without: the key is content and calls);
    # the next prompt carries the model's own tokens, so the cache covers the whole turn.
    ask = [{"role": "user", "content": "What is 2+2? " * 20}]
    r1 = oai(parrot).chat.completions.create(model="", messages=ask, temperature=0, max_tokens=40)
    for back in ({"role": "assistant", "content": "", "reasoning_content": "Thinking"},
                 {"role": "assistant", "content": ""}):
        r2 = oai(parrot).chat.completions.create(model="", messages=ask + [back, {"role": "user", "content": "And 3+3?"}],
                                                 temperature=0, max_tokens=40)
        assert cached(r2.usage) >= r1.usage.prompt_tokens + r1.usage.completion_tokens - 1, (r1.usage, r2.usage)
