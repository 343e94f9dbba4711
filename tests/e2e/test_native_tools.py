"""Native tool-call formats held to the declared tools: the default model
served with the chat templates of Qwen 2.5 (Hermes <tool_call>), Llama 3.1
(a bare JSON call), Mistral ([TOOL_CALLS][...]) and gpt-oss (harmony:
to=functions.NAME in a message header; its markers are text in this
vocabulary), so it writes each format's own markup. Once a call opens (by the model, or forced by
tool_choice) its name is a declared tool and its arguments validate, in
Chat Completions, Responses and Anthropic Messages alike; a turn with a
forced call sent back replays as the exact tokens, the forced opening
included."""
import json

import anthropic
import httpx
import jsonschema
import openai
import pytest

from conftest import REAL_MODEL, ROOT, Server

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather forecast for a city", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo", "Rome"]},
                                     "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city", "days"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "Current time in a time zone", "parameters": {
    "type": "object", "properties": {"tz": {"type": "string", "enum": ["UTC", "CET"]}}, "required": ["tz"],
    "additionalProperties": False}}}
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, TIME)}
TEMPLATES = ["qwen2.5", "llama3.1", "mistral", "gpt-oss"]
ASK = [{"role": "user", "content": "What's the weather in Paris for the next 3 days?"}]


@pytest.fixture(scope="module", params=TEMPLATES)
def native(request):
    s = Server(REAL_MODEL, "--parallel", "2", "--ctx", "4096", "--chat-template-file",
               f"{ROOT}/tests/data/tmpl/{request.param}.jinja")
    s.template = request.param
    yield s
    assert s.stop() == 0


def oai(s):
    return openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0)


def check_call(name, args, allowed=SCHEMAS):
    assert name in allowed, name
    jsonschema.validate(json.loads(args) if isinstance(args, str) else args, allowed[name])


def test_template_is_native(native):
    r = httpx.post(native.url + "/apply-template", json={"messages": ASK, "tools": [WEATHER]}).json()
    listed = "type get_weather = " if native.template == "gpt-oss" else '"get_weather"'  # harmony: TypeScript
    assert listed in r["prompt"] and "tool_calls" not in r["prompt"]  # not the generic format


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_time"}}],
                         ids=["required", "named"])
def test_forced_calls_validate(native, choice):
    for seed in range(3):
        r = oai(native).chat.completions.create(model="", messages=ASK, tools=[WEATHER, TIME], tool_choice=choice,
                                                temperature=1.0, seed=seed, max_tokens=80)
        ch = r.choices[0]
        if ch.finish_reason == "length":
            continue  # cut inside the call: nothing to validate
        assert ch.finish_reason == "tool_calls", ch
        for call in ch.message.tool_calls:
            check_call(call.function.name, call.function.arguments)
            if isinstance(choice, dict):
                assert call.function.name == "get_time"


def test_forced_call_streams_like_whole(native):
    kw = dict(model="", messages=ASK, tools=[WEATHER, TIME], tool_choice="required", temperature=0, max_tokens=80)
    whole = oai(native).chat.completions.create(**kw).choices[0]
    assert whole.finish_reason == "tool_calls"
    check_call(whole.message.tool_calls[0].function.name, whole.message.tool_calls[0].function.arguments)
    args = "".join(c.choices[0].delta.tool_calls[0].function.arguments or ""
                   for c in oai(native).chat.completions.create(stream=True, **kw)
                   if c.choices and c.choices[0].delta.tool_calls)
    assert args == whole.message.tool_calls[0].function.arguments


def test_auto_calls_that_open_validate(native):
    # The model chooses; whatever calls it makes hold to the tools.
    for seed in range(4):
        r = oai(native).chat.completions.create(model="", messages=ASK, tools=[WEATHER, TIME], temperature=1.0,
                                                seed=seed, max_tokens=60)
        ch = r.choices[0]
        assert ch.finish_reason in ("stop", "length", "tool_calls"), ch
        if ch.finish_reason == "tool_calls":
            for call in ch.message.tool_calls:
                check_call(call.function.name, call.function.arguments)


def test_pattern_tool_schema_is_enforced(native):
    # pattern is enforced now (issue 23): the call is served and its arguments match.
    zip_tool = {"type": "function", "function": {"name": "zip", "parameters": {
        "type": "object", "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
        "required": ["zip"], "additionalProperties": False}}}
    # Room for a preamble: SmolLM2 under the harmony template writes 44 to
    # 170 tokens before its call (12 days tried), and how many depends on
    # the date the template renders (strftime_now): 60 cut it from 11-27 on.
    r = oai(native).chat.completions.create(model="", messages=ASK, tools=[zip_tool], tool_choice="required",
                                            temperature=1.0, seed=1, max_tokens=400)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls", ch
    jsonschema.validate(json.loads(ch.message.tool_calls[0].function.arguments), zip_tool["function"]["parameters"])


def test_malformed_tool_schema_is_a_400(native):
    bad = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": 5}}}}}
    r = httpx.post(native.url + "/v1/chat/completions", json={"model": "", "messages": ASK, "tools": [bad]})
    assert r.status_code == 400 and "type" in r.json()["error"]["message"]


def test_anthropic_forced_tool_validates(native):
    c = anthropic.Anthropic(base_url=native.url, api_key="none", max_retries=0)
    tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
              "input_schema": t["function"]["parameters"]} for t in (WEATHER, TIME)]
    r = c.messages.create(model="claude", max_tokens=80, messages=ASK, tools=tools,
                          tool_choice={"type": "tool", "name": "get_weather"}, extra_body={"temperature": 0})
    use = [b for b in r.content if b.type == "tool_use"]
    assert r.stop_reason == "tool_use" and use and use[0].name == "get_weather"
    check_call(use[0].name, use[0].input)


def test_responses_custom_and_local_shell_on_a_native_template(native):
    patch = {"type": "custom", "name": "apply_patch", "description": "Apply a patch."}
    r = oai(native).responses.create(model="", input="Fix the typo in README.", tools=[patch],
                                     tool_choice={"type": "custom", "name": "apply_patch"}, temperature=0,
                                     max_output_tokens=80)
    # forced, so even a call cut by max_output_tokens comes back as the call
    assert r.status in ("completed", "incomplete"), r.status
    assert r.output[-1].type == "custom_tool_call" and isinstance(r.output[-1].input, str)
    r = oai(native).responses.create(model="", input="List the files.", tools=[{"type": "local_shell"}],
                                     tool_choice={"type": "local_shell"}, temperature=0, max_output_tokens=80)
    # forced: cut by the limit (the small model may write a long argv) or
    # not, the reply is the call, held to local_shell's shape
    assert r.status in ("completed", "incomplete"), r.status
    call = r.output[-1]
    assert call.type == "local_shell_call" and call.action.type == "exec"
    assert all(isinstance(a, str) for a in call.action.command)
    assert call.status == r.status and (call.action.command or r.status == "incomplete")


def test_responses_forced_call_cut_by_the_limit_is_returned(native):
    # whole and streamed: the cut call is an item with status "incomplete"
    # and the arguments as generated, never an empty message
    tool = {"type": "function", **WEATHER["function"]}
    kw = dict(model="", input=ASK[0]["content"], tools=[tool], tool_choice="required", temperature=0,
              max_output_tokens=12)
    r = oai(native).responses.create(**kw)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert [o.type for o in r.output] == ["function_call"], r.output
    assert r.output[0].status == "incomplete" and r.output[0].name == "get_weather"
    assert r.output[0].arguments.startswith("{")
    events = list(oai(native).responses.create(stream=True, **kw))
    assert events[-1].type == "response.incomplete", events[-1].type
    final = events[-1].response
    assert [(o.type, o.status, o.arguments) for o in final.output] == \
        [("function_call", "incomplete", r.output[0].arguments)]


# Not Mistral: its template renders the system prompt and tools into the
# last user turn, so a longer conversation shares almost nothing with the
# shorter one.
@pytest.mark.parametrize("native", ["qwen2.5", "llama3.1", "gpt-oss"], indirect=True)
def test_forced_native_call_sent_back_hits_the_cache(native):
    # The forced opening is in the prompt, not generated: the turn must
    # still replay as the tokens the model saw, so the next request's
    # cached tokens cover the whole call.
    system = {"role": "system", "content": "You are a weather agent. " * 30}
    kw = dict(model="", tools=[WEATHER, TIME], temperature=0, max_tokens=80)
    r1 = oai(native).chat.completions.create(messages=[system, *ASK], tool_choice="required", **kw)
    msg = r1.choices[0].message
    assert r1.choices[0].finish_reason == "tool_calls"
    ids = [f"call{i:05d}" for i in range(len(msg.tool_calls))]  # Mistral's template wants 9 alphanumerics
    back = [system, *ASK, {"role": "assistant", "content": msg.content, "tool_calls": [
        {"id": i, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
        for i, c in zip(ids, msg.tool_calls)]}] + [{"role": "tool", "tool_call_id": i, "content": "sunny"} for i in ids]
    r2 = oai(native).chat.completions.create(messages=back, tool_choice="required", **kw)
    u1 = r1.usage
    got = r2.usage.prompt_tokens_details.cached_tokens
    assert got >= (u1.prompt_tokens + u1.completion_tokens - 8) // 64 * 64, (got, u1)
    # token for token: the new prompt parts from turn 1's prompt nowhere
    # inside it (the forced opening's tokens are its last ones)
    diff = r2.usage.model_extra["strata_cache"].get("first_difference")
    assert diff is None or diff["token"] >= u1.prompt_tokens, diff
