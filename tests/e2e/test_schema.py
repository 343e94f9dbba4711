"""Schema-constrained decoding end to end (issue 12 item 1): response_format
json_schema replies on many seeds validated with the `jsonschema` package,
tool calls under required / named held to declared tools and their schemas,
a forced call cut by max_tokens returned with finish_reason "length",
pattern/lengths/format/allOf enforced, unenforced keywords served, a 400
for malformed schemas, and the SDK's .parse() with a pydantic model.
Sampling runs at temperature > 0 so that each seed writes something else."""
import json
from concurrent.futures import ThreadPoolExecutor
from typing import List, Literal, Optional

import httpx
import jsonschema
import openai
import pydantic
import pytest

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "city": {"enum": ["Paris", "Rome", "Oslo"]},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        "address": {"type": "object", "properties": {"street": {"type": "string"}, "zip": {"type": ["string", "null"]}},
                    "required": ["street", "zip"], "additionalProperties": False},
        "pet": {"anyOf": [{"type": "null"},
                          {"type": "object", "properties": {"kind": {"const": "dog"}, "barks": {"type": "boolean"}},
                           "required": ["kind", "barks"], "additionalProperties": False},
                          {"type": "object", "properties": {"kind": {"const": "cat"}, "lives": {"type": "integer"}},
                           "required": ["kind", "lives"], "additionalProperties": False}]},
    },
    "required": ["name", "age", "city", "tags", "address", "pet"],
    "additionalProperties": False,
}

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}
ADD = {"type": "function", "function": {
    "name": "add", "description": "Add two integers",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                   "required": ["a", "b"], "additionalProperties": False}}}
TOOLS = [WEATHER, ADD]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


def oai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)


def person_format(strict=True):
    return {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": strict}}


@pytest.mark.parametrize("strict", [True, False])
def test_json_schema_replies_validate(real, strict):
    c = oai(real)

    def one(seed):  # four at a time: the server generates them together
        return c.chat.completions.create(model="", messages=[{"role": "user", "content": "Describe a person as JSON."}],
                                         response_format=person_format(strict), temperature=0.9, seed=seed,
                                         max_tokens=200).choices[0]
    with ThreadPoolExecutor(4) as pool:
        replies = list(pool.map(one, range(10)))
    closed = 0
    for ch in replies:
        if ch.finish_reason == "length":
            continue
        assert ch.finish_reason == "stop"
        jsonschema.validate(json.loads(ch.message.content), PERSON)
        closed += 1
    assert closed >= 5, f"only {closed} of 10 replies finished"


def check_call(call, allowed):
    assert call.function.name in allowed, f"undeclared tool {call.function.name!r}"
    jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "add"}}])
def test_tool_calls_are_declared_and_validate(real, choice):
    c = oai(real)
    allowed = {"get_weather", "add"} if choice == "required" else {"add"}
    for seed in range(8):
        r = c.chat.completions.create(model="", messages=[{"role": "user", "content": "What is the capital of France?"}],
                                      tools=TOOLS, tool_choice=choice, temperature=0.9, seed=seed, max_tokens=120)
        ch = r.choices[0]
        assert ch.finish_reason == "tool_calls", ch
        check_call(ch.message.tool_calls[0], allowed)


def test_auto_calls_validate(tiny):
    """Under auto the reply is content or calls; calls are held to the tools."""
    c = oai(tiny)
    for seed in range(10):
        r = c.chat.completions.create(model="", messages=[{"role": "user", "content": "x"}], tools=TOOLS,
                                      temperature=1.0, seed=seed, max_tokens=200)
        ch = r.choices[0]
        if ch.finish_reason == "tool_calls":
            for call in ch.message.tool_calls:
                check_call(call, {"get_weather", "add"})
        else:
            assert ch.finish_reason in ("stop", "length")


@pytest.mark.parametrize("stream", [False, True])
def test_forced_call_cut_by_max_tokens(real, stream):
    c = oai(real)
    args = dict(model="", messages=[{"role": "user", "content": "Weather in Paris?"}], tools=TOOLS,
                tool_choice={"type": "function", "function": {"name": "get_weather"}}, temperature=0, max_tokens=3)
    if not stream:
        ch = c.chat.completions.create(**args).choices[0]
        assert ch.finish_reason == "length"
        call = ch.message.tool_calls[0]
        name, partial = call.function.name, call.function.arguments
    else:
        name, partial, finish = None, "", None
        for ev in c.chat.completions.create(stream=True, **args):
            if not ev.choices:
                continue
            d = ev.choices[0].delta
            for tc in d.tool_calls or []:
                name = tc.function.name or name
                partial += tc.function.arguments or ""
            finish = ev.choices[0].finish_reason or finish
        assert finish == "length"
    assert name == "get_weather"
    assert partial.startswith("{") and partial != "{}", partial  # cut inside the arguments


def test_required_call_cut_before_arguments_is_not_dropped(real):
    c = oai(real)
    ch = c.chat.completions.create(model="", messages=[{"role": "user", "content": "Weather?"}], tools=TOOLS,
                                   tool_choice="required", temperature=0, max_tokens=1).choices[0]
    assert ch.finish_reason == "length"
    assert ch.message.tool_calls or ch.message.content, "a cut reply came back empty"


STRINGS = {"type": "object", "properties": {
    "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
    "code": {"type": "string", "minLength": 3, "maxLength": 6},
    "when": {"type": "string", "format": "date-time"},
    "to": {"type": "string", "allOf": [{}, {}]}},
    "required": ["zip", "code", "when", "to"], "additionalProperties": False}


def test_string_keywords_are_enforced(real):
    # pattern, lengths, format and allOf (issue 23): served, and every finished reply matches.
    c = oai(real)
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": STRINGS, "strict": True}}
    closed = 0
    for seed in range(6):
        ch = c.chat.completions.create(model="", messages=[{"role": "user", "content": "Fill the form as JSON."}],
                                       response_format=fmt, temperature=0.9, seed=seed, max_tokens=120).choices[0]
        if ch.finish_reason == "length":
            continue
        jsonschema.validate(json.loads(ch.message.content), STRINGS,
                            format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
        closed += 1
    assert closed >= 3, f"only {closed} of 6 replies finished"


@pytest.mark.parametrize("schema", [
    {"type": "object", "not": {"required": ["a"]}},
    {"type": "object", "properties": {"t": {"type": "array", "uniqueItems": True}}},
])
def test_unenforced_keyword_is_served(tiny, schema):
    # Not refused any more: the rest of the schema is enforced (the server reports what was not).
    r = httpx.post(tiny.url + "/v1/chat/completions", json={
        "messages": [{"role": "user", "content": "x"}], "max_tokens": 8,
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("schema, word", [
    ({"type": "object", "properties": {"zip": {"type": 5}}}, "type"),
    ({"type": "object", "properties": {"s": {"type": "string", "minLength": -1}}}, "minLength"),
    ({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}, "$ref"),
])
def test_malformed_schema_is_400(tiny, schema, word):
    r = httpx.post(tiny.url + "/v1/chat/completions", json={
        "messages": [{"role": "user", "content": "x"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}})
    assert r.status_code == 400
    assert word in r.json()["error"]["message"]


def test_pattern_tool_schema_is_served(tiny):
    tool = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"type": "string", "pattern": "a+"}}}}}
    r = httpx.post(tiny.url + "/v1/chat/completions", json={
        "messages": [{"role": "user", "content": "x"}], "tools": [tool], "tool_choice": "required", "max_tokens": 8})
    assert r.status_code == 200, r.text


def test_oversized_schema_is_400(tiny):
    props = {f"p{i}": {"type": "string"} for i in range(100)}
    r = httpx.post(tiny.url + "/v1/chat/completions", json={
        "messages": [{"role": "user", "content": "x"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
            "type": "object", "properties": props}}}})
    assert r.status_code == 400 and "too large" in r.json()["error"]["message"]


class Pet(pydantic.BaseModel):
    kind: Literal["dog", "cat"]
    name: str


class Owner(pydantic.BaseModel):
    name: str
    age: int
    pets: List[Pet]
    nickname: Optional[str]


def test_sdk_parse_with_pydantic(real):
    c = oai(real)
    for seed in range(3):
        r = c.chat.completions.parse(model="", messages=[{"role": "user", "content": "Describe a pet owner."}],
                                     response_format=Owner, temperature=0.8, seed=seed, max_tokens=200)
        ch = r.choices[0]
        if ch.finish_reason == "length":
            continue
        assert isinstance(ch.message.parsed, Owner)
        return
    pytest.fail("no parsed reply finished in 3 seeds")


@pytest.mark.parametrize("max_tokens", [3, 6, 9])
def test_anthropic_call_cut_by_max_tokens_is_returned_as_generated(real, max_tokens):
    # Whole replies: the cut call comes back as a tool_use whose input is the object its
    # arguments were on the way to (never dropped), with stop_reason max_tokens.
    fn = WEATHER["function"]
    r = httpx.post(real.url + "/v1/messages", timeout=60, json={
        "model": "", "max_tokens": max_tokens, "temperature": 0, "messages": [
            {"role": "user", "content": "What is the weather in Paris?"}],
        "tools": [{"name": fn["name"], "description": fn["description"], "input_schema": fn["parameters"]}],
        "tool_choice": {"type": "tool", "name": "get_weather"}})
    assert r.status_code == 200, r.text
    m = r.json()
    assert m["stop_reason"] == "max_tokens", m
    uses = [b for b in m["content"] if b["type"] == "tool_use"]
    assert len(uses) == 1 and uses[0]["name"] == "get_weather" and isinstance(uses[0]["input"], dict), m
    assert set(uses[0]["input"]) <= {"city", "unit"}, m


def test_tool_parameters_with_defs(real):
    # pydantic-style parameters ($defs and "#/$defs/.." refs inside them) resolve in the tool's own schema.
    params = {"type": "object", "properties": {"pets": {"type": "array", "maxItems": 2, "items": {"$ref": "#/$defs/Pet"}}},
              "required": ["pets"], "additionalProperties": False,
              "$defs": {"Pet": {"type": "object", "properties": {"kind": {"enum": ["dog", "cat"]},
                                                                 "name": {"type": "string", "pattern": "^[A-Z][a-z]+$", "maxLength": 12}},
                                "required": ["kind", "name"], "additionalProperties": False}}}
    tool = {"type": "function", "function": {"name": "adopt", "parameters": params}}
    c = oai(real)
    for seed in range(3):
        ch = c.chat.completions.create(model="", messages=[{"role": "user", "content": "Adopt two pets."}], tools=[tool],
                                       tool_choice="required", temperature=0.8, seed=seed, max_tokens=120).choices[0]
        if ch.finish_reason == "length":
            continue
        assert ch.finish_reason == "tool_calls", ch
        jsonschema.validate(json.loads(ch.message.tool_calls[0].function.arguments), params)
        return
    pytest.fail("no call finished in 3 seeds")
