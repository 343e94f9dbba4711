"""Tool calling end to end: forced calls, the result sent back, a final
answer; OpenAI and Anthropic, streamed and not. Round trips run on the
default model (SmolLM2 has no tool syntax of its own, so the server uses
the generic JSON format and guarantees the forced call with constrained
sampling); argument checks that need no sensible model run on the tiny one."""
import json

import anthropic
import openai
import pytest

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Current time", "parameters": {"type": "object", "properties": {}}}}


def oai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)


def test_openai_forced_call_then_answer(real):
    c = oai(real)
    msgs = [{"role": "user", "content": "What's the weather in Paris?"}]
    r = c.chat.completions.create(model="", messages=msgs, tools=[WEATHER, TIME], temperature=0, max_tokens=80,
                                  tool_choice={"type": "function", "function": {"name": "get_weather"}})
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls"
    call = ch.message.tool_calls[0]
    assert call.function.name == "get_weather"
    assert isinstance(json.loads(call.function.arguments), dict)
    assert call.id.startswith("call_") and len(call.id) == 5 + 32
    msgs += [{"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
             {"role": "tool", "tool_call_id": call.id, "content": "sunny, 24 C"}]
    final = c.chat.completions.create(model="", messages=msgs, tools=[WEATHER], tool_choice="none",
                                      temperature=0, max_tokens=30)
    assert final.choices[0].finish_reason in ("stop", "length")
    assert final.choices[0].message.tool_calls is None


def test_openai_streamed_tool_call_matches_whole(real):
    kw = dict(model="", messages=[{"role": "user", "content": "What time is it?"}], tools=[WEATHER, TIME],
              temperature=0, max_tokens=80, tool_choice={"type": "function", "function": {"name": "get_time"}})
    whole = oai(real).chat.completions.create(**kw)
    assert whole.choices[0].finish_reason == "tool_calls"
    chunks = list(oai(real).chat.completions.create(stream=True, **kw))
    deltas = [tc for ch in chunks if ch.choices for tc in (ch.choices[0].delta.tool_calls or [])]
    assert deltas[0].function.name == "get_time" and deltas[0].id.startswith("call_")
    args = "".join(d.function.arguments or "" for d in deltas)
    assert args == whole.choices[0].message.tool_calls[0].function.arguments
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason] == ["tool_calls"]


def test_openai_required_picks_some_tool(tiny):
    r = oai(tiny).chat.completions.create(model="", messages=[{"role": "user", "content": "do something"}],
                                          tools=[WEATHER, TIME], tool_choice="required", temperature=0, max_tokens=60)
    assert r.choices[0].finish_reason in ("tool_calls", "tool_call_error", "length")
    if r.choices[0].finish_reason == "tool_calls":
        assert r.choices[0].message.tool_calls[0].function.name


def test_openai_json_object_is_valid_json(tiny):
    for seed in range(3):
        r = oai(tiny).chat.completions.create(model="", messages=[{"role": "user", "content": "json please"}],
                                              response_format={"type": "json_object"}, temperature=1.0,
                                              seed=seed, max_tokens=200)
        if r.choices[0].finish_reason == "stop":
            assert isinstance(json.loads(r.choices[0].message.content), dict)


def test_bad_tool_definitions(tiny):
    with pytest.raises(openai.BadRequestError):
        oai(tiny).chat.completions.create(model="", messages=[{"role": "user", "content": "x"}],
                                          tools=[{"type": "function", "function": {}}])
    with pytest.raises(openai.BadRequestError):
        oai(tiny).chat.completions.create(model="", messages=[{"role": "user", "content": "x"}], tools=[WEATHER],
                                          tool_choice={"type": "function", "function": {"name": "nope"}})


ANT_TOOL = {"name": "get_weather", "description": "Current weather", "input_schema": WEATHER["function"]["parameters"]}


def ant(server):
    return anthropic.Anthropic(base_url=server.url, api_key="none", max_retries=0)


def test_anthropic_tool_use_round_trip(real):
    c = ant(real)
    msgs = [{"role": "user", "content": "What's the weather in Oslo?"}]
    m = c.messages.create(model="", messages=msgs, tools=[ANT_TOOL], max_tokens=80,
                          tool_choice={"type": "tool", "name": "get_weather"}, extra_body={"temperature": 0})
    assert m.stop_reason == "tool_use"
    use = [b for b in m.content if b.type == "tool_use"][0]
    assert use.name == "get_weather" and isinstance(use.input, dict) and use.id.startswith("toolu_")
    msgs += [{"role": "assistant", "content": [b.model_dump() for b in m.content]},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "rain"}]}]
    final = c.messages.create(model="", messages=msgs, tools=[ANT_TOOL], max_tokens=40,
                              tool_choice={"type": "none"}, extra_body={"temperature": 0})
    assert final.content and final.content[0].type == "text"


# Claude Code parses each tool_use input with the tool's schema before it
# sends the call back, and so adds every default the model left out (an
# Edit comes back with "replace_all": false).
DEFAULTS_TOOL = {"name": "get_forecast", "description": "Weather forecast", "input_schema": {
    "type": "object", "properties": {"city": {"type": "string"},
                                     "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
                                     "days": {"type": "integer", "default": 3},
                                     "hourly": {"type": "boolean", "default": False}},
    "required": ["city"], "additionalProperties": False}}


def test_call_sent_back_with_schema_defaults_replays_exactly(real):
    """A call that comes back with the schema's defaults filled in is still
    the model's own turn: the next request reuses the whole previous prompt
    and the call's tokens (exact replay), not only the prompt."""
    import httpx
    url = real.url + "/v1/messages"
    msgs = [{"role": "user", "content": "Forecast for Oslo, please."}]
    body = {"model": "", "max_tokens": 80, "temperature": 1.0, "tools": [DEFAULTS_TOOL], "messages": msgs,
            "tool_choice": {"type": "tool", "name": "get_forecast"}}
    defaults = {k: p["default"] for k, p in DEFAULTS_TOOL["input_schema"]["properties"].items() if "default" in p}
    for seed in range(30):  # a sampled call that leaves a defaulted property out
        r = httpx.post(url, json=dict(body, seed=seed), timeout=120).json()
        use = [b for b in r["content"] if b["type"] == "tool_use"]
        if r["stop_reason"] == "tool_use" and len(use) == 1 and set(defaults) - set(use[0]["input"]):
            break
    else:
        pytest.fail("no seed gave a call without some defaulted property")
    use = use[0]
    filled = {**{k: v for k, v in defaults.items() if k not in use["input"]}, **use["input"]}
    sent = [dict(b, input=filled) if b["type"] == "tool_use" else b for b in r["content"]]
    msgs += [{"role": "assistant", "content": sent},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use["id"], "content": "rain"}]}]
    r2 = httpx.post(url, json=dict(body, messages=msgs, max_tokens=1), timeout=120).json()
    u1, u2 = r["usage"], r2["usage"]
    prompt1 = u1["input_tokens"] + u1.get("cache_read_input_tokens", 0)
    assert u2["cache_read_input_tokens"] >= prompt1 + u1["output_tokens"] - 1, (u1, u2)


def test_anthropic_streamed_tool_use(real):
    kw = dict(model="", messages=[{"role": "user", "content": "Weather in Rome?"}], tools=[ANT_TOOL], max_tokens=80,
              tool_choice={"type": "tool", "name": "get_weather"}, extra_body={"temperature": 0})
    whole = ant(real).messages.create(**kw)
    assert whole.stop_reason == "tool_use"
    events = list(ant(real).messages.create(stream=True, **kw))
    starts = [e for e in events if e.type == "content_block_start" and e.content_block.type == "tool_use"]
    assert starts and starts[0].content_block.name == "get_weather"
    partial = "".join(e.delta.partial_json for e in events
                      if e.type == "content_block_delta" and e.delta.type == "input_json_delta")
    use = [b for b in whole.content if b.type == "tool_use"][0]
    assert json.loads(partial) == use.input
    assert [e for e in events if e.type == "message_delta"][0].delta.stop_reason == "tool_use"


def test_real_model_forced_tool_call(real):
    r = oai(real).chat.completions.create(
        model="", messages=[{"role": "user", "content": "What's the weather in Paris?"}], tools=[WEATHER],
        tool_choice={"type": "function", "function": {"name": "get_weather"}}, temperature=0, max_tokens=40)
    assert r.choices[0].finish_reason == "tool_calls"
    args = json.loads(r.choices[0].message.tool_calls[0].function.arguments)
    assert isinstance(args, dict)


def test_malformed_tool_output_ends_turn_clearly(tiny):
    # required without a forced name: the random model writes some JSON that
    # is seldom a valid call; whatever it writes, the turn ends with a clear
    # finish reason and the raw text, never a crash or a 500.
    for seed in range(4):
        r = oai(tiny).chat.completions.create(model="", messages=[{"role": "user", "content": "go"}],
                                              tools=[WEATHER], tool_choice="required", temperature=1.0,
                                              seed=seed, max_tokens=30)
        ch = r.choices[0]
        assert ch.finish_reason in ("tool_calls", "tool_call_error", "length")
        if ch.finish_reason == "tool_call_error":
            assert ch.message.content and ch.message.refusal


def test_native_tool_template_renders_tools(tmp_path):
    # A model whose template has tool syntax (Qwen2.5 here, via the
    # override flag) gets the tools rendered by its own template.
    import httpx
    from conftest import ROOT, Server, TINY_MODEL
    s = Server(TINY_MODEL, "--chat-template-file", f"{ROOT}/tests/data/tmpl/qwen2.5.jinja")
    try:
        props = httpx.get(s.url + "/props").json()
        assert props["chat_template_source"] == "file"
        r = httpx.post(s.url + "/apply-template", json={
            "messages": [{"role": "user", "content": "weather?"}], "tools": [WEATHER]}).json()
        assert "<tools>" in r["prompt"] and '"get_weather"' in r["prompt"]
        assert r["prompt"].endswith("<|im_start|>assistant\n")
    finally:
        assert s.stop() == 0


def test_bad_template_file_is_a_startup_error(tmp_path):
    import subprocess
    from conftest import STRATA, TINY_MODEL
    bad = tmp_path / "bad.jinja"
    bad.write_text("{% for m in messages %}{{ m.content }")
    r = subprocess.run([STRATA, "serve", "-m", TINY_MODEL, "--port", "0", "--chat-template-file", str(bad)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "--chat-template-file" in r.stderr and "bad.jinja" in r.stderr


def test_d_agent_loop_hits_everything_before_the_new_message(tmp_path):
    # Each turn the client sends back the tool call it received (arguments
    # as a JSON string) and a tool result; the prompt up to that new
    # message must come from the cache, the call itself included (exact
    # replay of the tokens the model wrote). Small blocks make "the call
    # included" visible: without replay the match stops where it starts.
    from conftest import REAL_MODEL, Server
    s = Server(REAL_MODEL, "--ctx", "2048", "--cache-block-tokens", "8")
    try:
        c = oai(s)
        msgs = [{"role": "system", "content": "You are an agent. " * 40},
                {"role": "user", "content": "Check the weather in three cities."}]
        prev = None
        for turn, city in enumerate(["Paris", "Oslo", "Rome"]):
            r = c.chat.completions.create(model="", messages=msgs, tools=[WEATHER], temperature=0, max_tokens=80,
                                          tool_choice={"type": "function", "function": {"name": "get_weather"}})
            assert r.choices[0].finish_reason == "tool_calls"
            u = r.usage
            if prev:
                # every full block of the previous prompt and of the call the
                # model wrote (bar its last token and the closing we added)
                assert u.prompt_tokens_details.cached_tokens >= (prev.prompt_tokens + prev.completion_tokens - 8) // 8 * 8
            prev = u
            call = r.choices[0].message.tool_calls[0]
            msgs += [{"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                     {"role": "tool", "tool_call_id": call.id, "content": f'{{"city": "{city}", "sky": "clear"}}'}]
    finally:
        assert s.stop() == 0


# --- the deprecated function-calling API (`functions`, `function_call`,
# role "function"): still accepted by OpenAI's endpoint, so served here,
# the reply in its own shape.

def test_legacy_function_call_round_trip(real):
    import httpx
    url = real.url + "/v1/chat/completions"
    msgs = [{"role": "user", "content": "What's the weather in Paris?"}]
    body = {"model": "", "messages": msgs, "functions": [WEATHER["function"], TIME["function"]], "temperature": 0,
            "max_tokens": 80, "function_call": {"name": "get_weather"}}
    r = httpx.post(url, json=body, timeout=120).json()
    ch = r["choices"][0]
    assert ch["finish_reason"] == "function_call", r
    fc = ch["message"]["function_call"]
    assert fc["name"] == "get_weather" and isinstance(json.loads(fc["arguments"]), dict)
    assert "tool_calls" not in ch["message"]
    # streamed: the same call as function_call deltas
    with httpx.stream("POST", url, json=dict(body, stream=True), timeout=120) as s:
        chunks = [json.loads(l[6:]) for l in s.iter_lines() if l.startswith("data: {")]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert not any("tool_calls" in d for d in deltas)
    name = "".join(d["function_call"].get("name", "") for d in deltas if "function_call" in d)
    args = "".join(d["function_call"].get("arguments", "") for d in deltas if "function_call" in d)
    assert (name, args) == (fc["name"], fc["arguments"])
    assert chunks[-1]["choices"][0]["finish_reason"] == "function_call"
    # the call and its result sent back in that API's shape: served, and the
    # call is the model's own turn (exact replay through its tokens)
    msgs += [{"role": "assistant", "content": None, "function_call": fc},
             {"role": "function", "name": "get_weather", "content": "sunny, 24 C"}]
    r2 = httpx.post(url, json=dict(body, messages=msgs, max_tokens=1), timeout=120).json()
    u1, u2 = r["usage"], r2["usage"]
    assert u2["prompt_tokens_details"]["cached_tokens"] >= u1["prompt_tokens"] + u1["completion_tokens"] - 1, (u1, u2)


def test_allowed_tools_constrains_calls_and_keeps_the_prompt(tiny):
    """tool_choice allowed_tools: every tool stays listed (the prompt is the
    same whatever is allowed, so its prefix stays cached), and calls are
    only to the allowed ones."""
    import httpx
    url = tiny.url + "/v1/chat/completions"
    body = {"model": "", "messages": [{"role": "user", "content": "hi"}], "tools": [WEATHER, TIME], "max_tokens": 60,
            "temperature": 1.0}
    allowed = {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [
        {"type": "function", "function": {"name": "get_time"}}]}}
    plain = httpx.post(url, json=dict(body, tool_choice="required", seed=0), timeout=60).json()
    names = set()
    for seed in range(6):
        r = httpx.post(url, json=dict(body, tool_choice=allowed, seed=seed), timeout=60).json()
        assert r["usage"]["prompt_tokens"] == plain["usage"]["prompt_tokens"], (r["usage"], plain["usage"])
        names |= {c["function"]["name"] for c in r["choices"][0]["message"].get("tool_calls") or []}
    assert names == {"get_time"}, names
    bad = dict(allowed, allowed_tools={"mode": "required", "tools": [{"type": "function", "function": {"name": "nope"}}]})
    r = httpx.post(url, json=dict(body, tool_choice=bad), timeout=60)
    assert r.status_code == 400 and "allowed_tools" in r.text
