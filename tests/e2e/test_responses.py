"""OpenAI Responses API end to end, with the official SDK's
client.responses (and the Agents SDK, whose default model speaks only this
API): string and item input, instructions, function tools, the streamed
event sequence, previous_response_id across a restart with the cached
tokens covering the earlier turn, GET/DELETE, store: false, and errors."""
import json
import re

import httpx
import openai
import pytest

from conftest import REAL_MODEL, TINY_MODEL, Server

WEATHER = {"type": "function", "name": "get_weather", "description": "Current weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
SYSTEM = " ".join(f"rule {i}: answer briefly and cite source {i * 7}." for i in range(40))


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)


def test_string_input_and_instructions(real):
    c = client(real)
    plain = c.responses.create(model="gpt-4o", input="What is the capital of France?", temperature=0,
                               max_output_tokens=16)
    told = c.responses.create(model="gpt-4o", input="What is the capital of France?", temperature=0,
                              max_output_tokens=16, instructions="You are a geography teacher.")
    for r in (plain, told):
        assert r.object == "response" and r.id.startswith("resp_")
        assert r.status in ("completed", "incomplete")
        assert r.output[0].type == "message" and r.output[0].role == "assistant"
        assert r.output_text and r.output_text == r.output[0].content[0].text
        assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert told.instructions == "You are a geography teacher."
    # the instructions are the prompt's system message (the template's
    # default system prompt otherwise)
    chat = c.chat.completions.create(model="", temperature=0, max_tokens=16, messages=[
        {"role": "system", "content": "You are a geography teacher."},
        {"role": "user", "content": "What is the capital of France?"}])
    assert told.usage.input_tokens == chat.usage.prompt_tokens != plain.usage.input_tokens
    assert told.output_text == chat.choices[0].message.content


def test_items_input_is_the_chat_conversation(real):
    # Items normalise to the same messages as Chat Completions: the same
    # prompt, token for token, and so the same greedy reply.
    items = [{"role": "developer", "content": "Answer in one word."},
             {"role": "user", "content": "Name a colour."},
             {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Blue."}]},
             {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Another one?"}]}]
    msgs = [{"role": "system", "content": "Answer in one word."}, {"role": "user", "content": "Name a colour."},
            {"role": "assistant", "content": "Blue."}, {"role": "user", "content": "Another one?"}]
    c = client(real)
    r = c.responses.create(model="", input=items, temperature=0, max_output_tokens=12)
    chat = c.chat.completions.create(model="", messages=msgs, temperature=0, max_tokens=12)
    assert r.usage.input_tokens == chat.usage.prompt_tokens
    assert r.output_text == chat.choices[0].message.content


def test_required_function_call_then_its_output(real):
    c = client(real)
    r = c.responses.create(model="", input="What's the weather in Paris?", tools=[WEATHER], tool_choice="required",
                           temperature=0, max_output_tokens=60)
    assert r.status == "completed"
    calls = [o for o in r.output if o.type == "function_call"]
    assert calls and calls[0].name == "get_weather"
    assert isinstance(json.loads(calls[0].arguments), dict)
    assert calls[0].call_id.startswith("call_") and calls[0].id.startswith("fc_")
    # same tools and tool_choice: the generic tool format's system prompt
    # names them, so another choice is another prefix
    final = c.responses.create(model="", previous_response_id=r.id, tools=[WEATHER], tool_choice="required",
                               input=[{"type": "function_call_output", "call_id": calls[0].call_id,
                                       "output": "sunny, 24 C"}], temperature=0, max_output_tokens=20)
    assert final.status in ("completed", "incomplete") and final.previous_response_id == r.id
    # the earlier turn's input came from the cache, every full 64-token
    # block of it (its partial tail is a best effort on a shared server;
    # the call itself: test_tool_loop_by_previous_id_..., small blocks)
    assert final.usage.input_tokens_details.cached_tokens >= r.usage.input_tokens // 64 * 64


def event_types(events):
    return [e.type for e in events]


def test_streamed_text_events_in_order(real):
    events = list(client(real).responses.create(model="", input="Say hello.", temperature=0, max_output_tokens=16,
                                                stream=True))
    types = event_types(events)
    assert types[:5] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added", "response.output_text.delta"]
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert types[2 + 2 + len(deltas):] == ["response.output_text.done", "response.content_part.done",
                                           "response.output_item.done", events[-1].type]
    assert events[-1].type in ("response.completed", "response.incomplete")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    done = events[-1].response
    text = "".join(d.delta for d in deltas)
    assert text == done.output_text == events[-4].text
    assert done.usage.output_tokens > 0 and done.usage.input_tokens_details.cached_tokens >= 0
    assert {d.item_id for d in deltas} == {done.output[0].id}


def test_streamed_function_call_matches_whole(real):
    kw = dict(model="", input="Weather in Oslo?", tools=[WEATHER], temperature=0, max_output_tokens=60,
              tool_choice={"type": "function", "name": "get_weather"})
    whole = client(real).responses.create(**kw)
    events = list(client(real).responses.create(stream=True, **kw))
    types = event_types(events)
    assert types[2] == "response.output_item.added" and events[2].item.type == "function_call"
    assert events[2].item.name == "get_weather"
    deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert deltas and types[-3:] == ["response.function_call_arguments.done", "response.output_item.done",
                                     "response.completed"]
    args_done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert "".join(deltas) == args_done.arguments == whole.output[0].arguments
    assert events[-1].response.output[0].call_id == events[2].item.call_id


def turn(s, **kw):
    r = httpx.post(s.url + "/v1/responses", json={"temperature": 0, "max_output_tokens": 8, **kw}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def test_previous_response_id_survives_restart_and_extends_the_cache(tmp_path):
    # A Codex-style loop sends only the new input and the previous id; after
    # a restart the stored conversation and the reply's exact tokens are
    # back, so turn 2's cached tokens cover all of turn 1, input and output.
    cache = str(tmp_path / "kv")
    s = Server(TINY_MODEL, "--ctx", "2048", "--cache-dir", cache)
    try:
        r1 = turn(s, instructions=SYSTEM, input="a long story please", max_output_tokens=100, temperature=1.0, seed=5)
    finally:
        assert s.stop() == 0
    s = Server(TINY_MODEL, "--ctx", "2048", "--cache-dir", cache)
    try:
        r2 = turn(s, instructions=SYSTEM, input="more", previous_response_id=r1["id"])
        u1, u2 = r1["usage"], r2["usage"]
        assert u2["input_tokens_details"]["cached_tokens"] >= u1["input_tokens"] + u1["output_tokens"] - 1
        assert u2["strata_cache"]["disk_tokens"] >= u1["input_tokens"] + u1["output_tokens"] - 1
        got = httpx.get(f"{s.url}/v1/responses/{r1['id']}").json()
        assert got["output"] == r1["output"]
    finally:
        assert s.stop() == 0


def test_output_items_sent_back_replay_without_the_store(tiny):
    # store: false, the whole conversation sent each turn (output items as
    # returned): the reply still comes back as its exact tokens.
    r1 = turn(tiny, instructions=SYSTEM, input="tell me a tale", max_output_tokens=100, temperature=1.0, seed=9,
              store=False)
    items = [{"role": "user", "content": "tell me a tale"}, *r1["output"], {"role": "user", "content": "go on"}]
    r2 = turn(tiny, instructions=SYSTEM, input=items, store=False)
    u1 = r1["usage"]
    assert r2["usage"]["input_tokens_details"]["cached_tokens"] >= (u1["input_tokens"] + u1["output_tokens"] - 1) // 64 * 64


def test_tool_loop_by_previous_id_hits_everything_before_the_new_item(tmp_path):
    # Each turn sends only the tool's output and the previous id: the
    # prompt up to that item, the call the model wrote included, is cached
    # (small blocks make "the call included" visible).
    s = Server(REAL_MODEL, "--ctx", "2048", "--cache-block-tokens", "8")
    try:
        c = client(s)
        prev, new_input = None, "Check the weather in three cities."
        for city in ["Paris", "Oslo", "Rome"]:
            r = c.responses.create(model="", instructions="You are an agent. " * 40, input=new_input,
                                   previous_response_id=prev.id if prev else None, tools=[WEATHER],
                                   tool_choice={"type": "function", "name": "get_weather"}, temperature=0,
                                   max_output_tokens=80)
            assert r.output[-1].type == "function_call"
            if prev:
                u = prev.usage
                assert r.usage.input_tokens_details.cached_tokens >= (u.input_tokens + u.output_tokens - 8) // 8 * 8
            prev = r
            new_input = [{"type": "function_call_output", "call_id": r.output[-1].call_id,
                          "output": f'{{"city": "{city}", "sky": "clear"}}'}]
    finally:
        assert s.stop() == 0


def test_get_delete_and_store_false(tiny):
    c = client(tiny)
    r = c.responses.create(model="", input="hello", max_output_tokens=4)
    got = c.responses.retrieve(r.id)
    assert got.id == r.id and got.output_text == r.output_text and got.status == r.status
    items = httpx.get(f"{tiny.url}/v1/responses/{r.id}/input_items").json()
    assert items["object"] == "list" and items["data"][0]["content"] == "hello"
    c.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(r.id)
    assert httpx.delete(f"{tiny.url}/v1/responses/{r.id}").status_code == 404
    off = c.responses.create(model="", input="hello", max_output_tokens=4, store=False)
    assert off.store is False
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(off.id)


def test_clear_errors(tiny):
    c = client(tiny)
    with pytest.raises(openai.BadRequestError) as e:
        c.responses.create(model="", input=[{"id": "fs_1"}])
    assert "input[0]: an item needs a 'type'" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        c.responses.create(model="", input="hi", previous_response_id="resp_nope")
    assert e.value.code == "previous_response_not_found" and "resp_nope" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        c.responses.create(model="", input=[{"role": "user", "content": [{"image_url": "x"}]}])
    assert "input[0].content[0]" in str(e.value) and "'type'" in str(e.value)
    r = httpx.get(tiny.url + "/v1/responses/resp_missing")
    assert r.status_code == 404 and r.json()["error"]["code"] == "response_not_found"


def test_json_schema_format_is_enforced(tiny):
    # Bounded values (an enum, a small integer), so even the random-weight
    # model must finish the object well inside the limit, whatever it
    # samples: every run is complete and valid. (A free string could run
    # on past any limit, which says nothing about the format.)
    schema = {"type": "object", "properties": {"a": {"enum": ["x", "yes"]},
                                               "n": {"type": "integer", "minimum": 0, "maximum": 9}},
              "required": ["a", "n"], "additionalProperties": False}
    fmt = {"type": "json_schema", "name": "thing", "strict": True, "schema": schema}
    for seed in range(5):
        r = client(tiny).responses.create(model="", input="json please", text={"format": fmt}, temperature=1.0,
                                          max_output_tokens=200, extra_body={"seed": seed})
        assert r.text.format.type == "json_schema"
        assert r.status == "completed", (seed, r.output_text)
        out = json.loads(r.output_text)
        assert set(out) == {"a", "n"} and out["a"] in ("x", "yes") and 0 <= out["n"] <= 9, out


def test_json_schema_format_with_a_pattern_is_enforced(tiny):
    # pattern is enforced (issue 23), not refused: a bounded one, so that even the
    # random-weight model finishes; every finished reply matches.
    schema = {"type": "object", "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
              "required": ["zip"], "additionalProperties": False}
    fmt = {"type": "json_schema", "name": "zip", "strict": True, "schema": schema}
    for seed in range(3):
        r = client(tiny).responses.create(model="", input="x", text={"format": fmt}, temperature=1.0,
                                          max_output_tokens=200, extra_body={"seed": seed})
        assert r.status == "completed", (seed, r.output_text)
        out = json.loads(r.output_text)
        assert set(out) == {"zip"} and re.fullmatch(r"[0-9]{5}", out["zip"]), out


def test_agents_sdk_default_model_calls_a_function_tool(real):
    agents = pytest.importorskip("agents")  # scripts/install-deps.sh --test installs openai-agents
    calls = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """Current weather in a city."""
        calls.append(city)
        return f"sunny in {city}"

    oa = openai.AsyncOpenAI(base_url=real.url + "/v1", api_key="none", max_retries=0)
    model = agents.OpenAIResponsesModel(model="gpt-4o", openai_client=oa)  # the SDK's default model class
    agent = agents.Agent(name="weather", instructions="Use the tool.", tools=[get_weather], model=model,
                         model_settings=agents.ModelSettings(tool_choice="required", temperature=0),
                         tool_use_behavior="stop_on_first_tool")
    agents.set_tracing_disabled(True)
    result = agents.Runner.run_sync(agent, "What's the weather in Paris?")
    assert len(calls) == 1 and result.final_output == f"sunny in {calls[0]}"
