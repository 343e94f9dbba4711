"""`n` > 1 on the OpenAI APIs (Chat Completions and Completions): n
choices, each an independent sample through the single-choice path, the
prompt prefilled once (the later choices attach it from the live pool),
usage counting the prompt once and the completion tokens of every choice.
Choice 0 is the n = 1 reply; a seeded request gives the same choices again."""
import json
import time
import uuid

import httpx
import openai
import pytest

from conftest import TINY_MODEL, Server
from test_accept import traced  # noqa: F401 (a fixture: the tiny model, 2 slots, --trace)
from test_tools import TIME, WEATHER


@pytest.fixture(scope="module")
def one_slot():
    """One slot, no queue, replies capped at 6 tokens: choices run one
    after another, and each is capped."""
    s = Server(TINY_MODEL, "--parallel", "1", "--queue", "0", "--ctx", "2048", "--max-output-tokens", "6")
    yield s
    assert s.stop() == 0


def post(server, body, path="/v1/chat/completions"):
    r = httpx.post(server.url + path, json={"model": "", **body}, timeout=120)
    assert r.status_code == 200, r.text
    return r


def sse(server, body, path="/v1/chat/completions"):
    """The stream's JSON events, and whether it ended with one [DONE]."""
    with httpx.stream("POST", server.url + path, json={"model": "", "stream": True, **body}, timeout=120) as s:
        assert s.status_code == 200
        lines = [l for l in s.iter_lines() if l.startswith("data: ")]
    return [json.loads(l[6:]) for l in lines if l != "data: [DONE]"], lines.count("data: [DONE]") == 1 and \
        lines[-1] == "data: [DONE]"


def texts(reply):
    return [c["message"]["content"] if "message" in c else c["text"] for c in reply["choices"]]


def fresh(words="tell me a story about"):
    return f"{words} {uuid.uuid4().hex}"  # a prompt no earlier test left in the cache


def trace_lines(server):
    with open(server.trace) as f:
        return [json.loads(l) for l in f if l.strip()]


def test_n_choices_usage_and_the_prompt_prefilled_once(traced):
    msgs = [{"role": "user", "content": fresh()}]
    before = len(trace_lines(traced))
    r = post(traced, {"messages": msgs, "n": 3, "max_tokens": 8, "ignore_eos": True, "temperature": 1.0,
                      "seed": 5}).json()
    assert [c["index"] for c in r["choices"]] == [0, 1, 2]
    assert all(c["finish_reason"] == "length" and c["message"]["role"] == "assistant" for c in r["choices"])
    u = r["usage"]
    one = post(traced, {"messages": msgs, "max_tokens": 1}).json()["usage"]
    assert u["prompt_tokens"] == one["prompt_tokens"]  # counted once
    assert u["completion_tokens"] == 3 * 8 and u["total_tokens"] == u["prompt_tokens"] + 24
    p = u["prompt_tokens"]
    # the first choice prefilled the prompt; the later ones attached all of it but its last token
    assert u["prompt_tokens_details"]["cached_tokens"] == 0
    assert u["strata_cache"]["choice_cached_tokens"] == [0, p - 1, p - 1], u
    lines = trace_lines(traced)[before:before + 3]
    assert sorted(l["choice"] for l in lines) == [0, 1, 2], lines
    by = {l["choice"]: l for l in lines}
    assert by[0]["prefilled_tokens"] == p and by[1]["prefilled_tokens"] == by[2]["prefilled_tokens"] == 1
    assert by[1]["cached_tokens"]["live"] == p - 1 and all(l["generated_tokens"] == 8 for l in lines)
    assert "ignored" not in by[0] or "n=" not in by[0]["ignored"]


def test_n_seeded_choices_are_reproducible_and_choice_0_is_the_n1_reply(tiny):
    body = {"messages": [{"role": "user", "content": "pick some words"}], "max_tokens": 16, "temperature": 1.0,
            "seed": 123}
    a = post(tiny, dict(body, n=3)).json()
    b = post(tiny, dict(body, n=3)).json()
    one = post(tiny, body).json()
    assert texts(a) == texts(b)
    assert texts(a)[0] == texts(one)[0]
    assert len(set(texts(a))) > 1, texts(a)  # independent samples
    other = post(tiny, dict(body, n=3, seed=124)).json()
    assert texts(other) != texts(a)
    greedy = post(tiny, dict(body, n=3, temperature=0)).json()
    assert len(set(texts(greedy))) == 1  # greedy: n identical choices


def test_n_streamed_choices_each_end_with_their_finish(tiny):
    body = {"messages": [{"role": "user", "content": "tell me a story"}], "n": 3, "max_tokens": 12,
            "temperature": 1.0, "seed": 9, "stream_options": {"include_usage": True}}
    whole = post(tiny, body).json()
    events, done_once = sse(tiny, body)
    assert done_once
    chunks = [e for e in events if e["choices"]]
    assert {len(e["choices"]) for e in chunks} == {1}
    got = {}
    finishes = {}
    for e in chunks:
        c = e["choices"][0]
        got[c["index"]] = got.get(c["index"], "") + (c["delta"].get("content") or "")
        if c["finish_reason"]:
            finishes.setdefault(c["index"], []).append(c["finish_reason"])
    assert [got[i] for i in range(3)] == texts(whole)
    assert finishes == {i: [whole["choices"][i]["finish_reason"]] for i in range(3)}
    roles = [e["choices"][0]["index"] for e in chunks if e["choices"][0]["delta"].get("role") == "assistant"]
    assert roles == [0, 1, 2]
    # each choice's finish chunk is its last
    last = {e["choices"][0]["index"]: k for k, e in enumerate(chunks)}
    assert all(chunks[last[i]]["choices"][0]["finish_reason"] for i in range(3))
    usage = [e for e in events if e.get("usage")]
    assert len(usage) == 1 and events[-1] is usage[0] and not usage[0]["choices"]
    assert usage[0]["usage"]["completion_tokens"] == whole["usage"]["completion_tokens"]
    assert usage[0]["usage"]["prompt_tokens"] == whole["usage"]["prompt_tokens"]


def test_n_streamed_with_the_sdk(tiny):
    c = openai.OpenAI(base_url=tiny.url + "/v1", api_key="none", max_retries=0)
    kw = dict(model="", messages=[{"role": "user", "content": "hello"}], n=2, max_tokens=10, temperature=1.0, seed=3)
    whole = c.chat.completions.create(**kw)
    stream = list(c.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    text = {0: "", 1: ""}
    for ch in stream:
        for choice in ch.choices:
            text[choice.index] += choice.delta.content or ""
    assert [text[0], text[1]] == [ch.message.content for ch in whole.choices]
    assert stream[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_completions_n_whole_and_streamed(tiny):
    body = {"prompt": "Once upon a time", "n": 3, "max_tokens": 8, "temperature": 1.0, "seed": 17, "logprobs": 2}
    whole = post(tiny, body, "/v1/completions").json()
    assert [c["index"] for c in whole["choices"]] == [0, 1, 2]
    assert whole["object"] == "text_completion"
    for c in whole["choices"]:  # logprobs per choice: offsets restart at 0
        lp = c["logprobs"]
        assert lp["text_offset"][0] == 0 and len(lp["tokens"]) == len(lp["token_logprobs"])
        assert "".join(lp["tokens"]) == c["text"] or "\ufffd" in c["text"]
    one = post(tiny, dict(body, n=1), "/v1/completions").json()
    assert texts(whole)[0] == texts(one)[0]
    assert whole["usage"]["prompt_tokens"] == one["usage"]["prompt_tokens"]
    events, done_once = sse(tiny, body, "/v1/completions")
    assert done_once
    got = {}
    for e in events:
        for c in e["choices"]:
            got[c["index"]] = got.get(c["index"], "") + c["text"]
    assert [got[i] for i in range(3)] == texts(whole)


def test_n_with_stop_strings_and_json_per_choice(tiny):
    body = {"messages": [{"role": "user", "content": "count with me"}], "n": 2, "max_tokens": 24,
            "temperature": 1.0, "seed": 31}
    full = texts(post(tiny, body).json())
    stop = next((t[3:5] for t in full[::-1] if len(t) >= 6), None)
    if stop is None:
        pytest.skip("replies too short to cut")
    cut = post(tiny, dict(body, stop=[stop])).json()
    assert texts(cut) == [t[:t.index(stop)] if stop in t else t for t in full]
    assert all(c["finish_reason"] == "stop" for c, t in zip(cut["choices"], full) if stop in t)
    js = post(tiny, {"messages": [{"role": "user", "content": "json please"}], "n": 3, "max_tokens": 200,
                     "temperature": 1.0, "seed": 2, "response_format": {"type": "json_object"}}).json()
    assert len(js["choices"]) == 3
    for c in js["choices"]:
        if c["finish_reason"] == "stop":
            assert isinstance(json.loads(c["message"]["content"]), dict)


def test_n_with_tools(real):
    c = openai.OpenAI(base_url=real.url + "/v1", api_key="none", max_retries=0)
    kw = dict(model="", messages=[{"role": "user", "content": "What's the weather in Paris?"}], tools=[WEATHER, TIME],
              temperature=1.0, seed=4, max_tokens=80, n=2,
              tool_choice={"type": "function", "function": {"name": "get_weather"}})
    whole = c.chat.completions.create(**kw)
    assert [ch.index for ch in whole.choices] == [0, 1]
    ids = set()
    for ch in whole.choices:
        assert ch.finish_reason == "tool_calls", ch
        call = ch.message.tool_calls[0]
        assert call.function.name == "get_weather" and isinstance(json.loads(call.function.arguments), dict)
        ids.add(call.id)
    assert len(ids) == 2  # each choice's calls have ids of their own
    one = c.chat.completions.create(**dict(kw, n=1))
    assert one.choices[0].message.tool_calls[0].function.arguments == \
        whole.choices[0].message.tool_calls[0].function.arguments
    # streamed: each choice's call as deltas under its index, then its own finish
    args, finishes = {0: "", 1: ""}, {}
    for chunk in c.chat.completions.create(stream=True, **kw):
        for ch in chunk.choices:
            for tc in ch.delta.tool_calls or []:
                args[ch.index] += tc.function.arguments or ""
            if ch.finish_reason:
                finishes.setdefault(ch.index, []).append(ch.finish_reason)
    assert [args[0], args[1]] == [ch.message.tool_calls[0].function.arguments for ch in whole.choices]
    assert finishes == {0: ["tool_calls"], 1: ["tool_calls"]}
    # the deprecated function-calling API: one function_call per choice
    legacy = post(real, {"messages": kw["messages"], "functions": [WEATHER["function"]], "n": 2,
                         "function_call": {"name": "get_weather"}, "max_tokens": 80, "temperature": 1.0,
                         "seed": 4}).json()
    for ch in legacy["choices"]:
        assert ch["finish_reason"] == "function_call", ch
        assert ch["message"]["function_call"]["name"] == "get_weather" and "tool_calls" not in ch["message"]


def test_n_beyond_the_slots_and_the_queue_runs_one_after_another(one_slot):
    body = {"messages": [{"role": "user", "content": "hi"}], "n": 3, "max_tokens": 100, "ignore_eos": True,
            "temperature": 1.0}
    r = post(one_slot, body).json()
    # one slot, --queue 0: the later choices still run (after the first);
    # --max-output-tokens 6 caps each choice
    assert [c["finish_reason"] for c in r["choices"]] == ["length"] * 3
    assert r["usage"]["completion_tokens"] == 18
    assert r["usage"]["strata_cache"]["choice_cached_tokens"][1:] == [r["usage"]["prompt_tokens"] - 1] * 2
    events, done_once = sse(one_slot, body)
    assert done_once and [e["choices"][0]["index"] for e in events if e["choices"] and
                          e["choices"][0]["finish_reason"]] == [0, 1, 2]
    h = httpx.get(one_slot.url + "/health").json()
    assert h["active"] == 0 and h["queued"] == 0


def test_n_client_gone_mid_stream_cancels_every_choice(real):
    body = {"model": "", "messages": [{"role": "user", "content": fresh("write a long essay on")}], "n": 3,
            "max_tokens": 1500, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", real.url + "/v1/chat/completions", json=body, timeout=120) as s:
        seen = 0
        for line in s.iter_lines():
            if line.startswith("data: {"):
                assert json.loads(line[6:])["choices"][0]["finish_reason"] is None
                seen += 1
                if seen == 4:
                    break
    # 3 x 1500 tokens would take minutes; every choice leaves within a step or two
    deadline = time.time() + 5
    while time.time() < deadline:
        h = httpx.get(real.url + "/health").json()
        if h["active"] == 0 and h["queued"] == 0:
            break
        time.sleep(0.2)
    assert h["active"] == 0 and h["queued"] == 0, h
    r = post(real, {"messages": [{"role": "user", "content": "hi"}], "n": 4, "max_tokens": 2})
    assert len(r.json()["choices"]) == 4  # every slot free again


def test_n_out_of_range_is_a_clear_error(tiny):
    for n in (0, 129, "2"):
        r = httpx.post(tiny.url + "/v1/chat/completions", timeout=30,
                       json={"model": "", "messages": [{"role": "user", "content": "hi"}], "n": n})
        assert r.status_code == 400 and "'n'" in r.json()["error"]["message"], r.text
