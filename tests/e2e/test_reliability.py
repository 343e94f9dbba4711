"""Regressions of the third reliability campaign (issue 24), end to end on
the tiny model: each test failed before its fix.

- a tool whose input schema is not an object: 400 before generating, in
  all three APIs (was 500, or 200 with empty arguments);
- an id in the URL that is not valid UTF-8 (or is cut inside a character):
  an error body that says so in the API's schema (was `{}`);
"""
import httpx
import pytest

CHAT = "/v1/chat/completions"


def post(server, path, body, **kw):
    return httpx.post(server.url + path, json=body, timeout=30, **kw)


# ---- tool input schemas that are not objects -------------------------------------------

@pytest.mark.parametrize("schema", [{"type": "string"}, {"type": "integer"}, {"type": "array"}, "string"])
def test_anthropic_tool_schema_must_be_an_object(tiny, schema):
    r = post(tiny, "/v1/messages", {
        "model": "", "max_tokens": 8, "messages": [{"role": "user", "content": "go"}],
        "tools": [{"name": "t", "input_schema": schema}], "tool_choice": {"type": "tool", "name": "t"}})
    assert r.status_code == 400, r.text
    err = r.json()
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
    assert "'t'" in err["error"]["message"] and '"object"' in err["error"]["message"]


@pytest.mark.parametrize("choice", ["required", {"type": "function", "name": "t"}, "auto"])
def test_responses_tool_schema_must_be_an_object(tiny, choice):
    r = post(tiny, "/v1/responses", {
        "model": "", "input": "go", "max_output_tokens": 8, "tool_choice": choice,
        "tools": [{"type": "function", "name": "t", "parameters": {"type": "array"}}]})
    assert r.status_code == 400, r.text
    assert "'t'" in r.json()["error"]["message"]


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "t"}}])
def test_chat_tool_schema_must_be_an_object(tiny, choice):
    r = post(tiny, CHAT, {
        "messages": [{"role": "user", "content": "go"}], "max_tokens": 8, "tool_choice": choice,
        "tools": [{"type": "function", "function": {"name": "t", "parameters": {"type": "string"}}}]})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert "'t'" in r.json()["error"]["message"]


def test_tool_schema_without_type_or_without_schema_is_served(tiny):
    # No parameters, or a schema with no "type": any object (as the APIs take them).
    for fn in [{"name": "t"}, {"name": "t", "parameters": {"properties": {"a": {"type": "string"}}}}]:
        r = post(tiny, CHAT, {"messages": [{"role": "user", "content": "go"}], "max_tokens": 8,
                              "tools": [{"type": "function", "function": fn}]})
        assert r.status_code == 200, r.text


# ---- URL ids that are not valid UTF-8 ---------------------------------------------------

LONG_ID = "resp_" + "\u00e9" * 200  # cut inside a character by any fixed-size buffer


@pytest.mark.parametrize("method,path,status", [
    ("GET", "/v1/responses/%FF", 404), ("DELETE", "/v1/responses/%FF", 404),
    ("GET", "/v1/responses/%FF/input_items", 404), ("GET", "/v1/responses/%C3", 404),
    ("GET", "/v1/responses/" + LONG_ID, 404), ("DELETE", "/v1/responses/" + LONG_ID, 404),
    ("POST", "/v1/nonexist/%FF", 404), ("GET", "/v1/%FF%FE", 404), ("POST", "/v1/models/%FF", 405),
    ("POST", "/v1/" + "\u00e9" * 200, 404)])
def test_error_body_for_an_id_that_is_not_utf8(tiny, method, path, status):
    r = httpx.request(method, tiny.url + path, json={} if method == "POST" else None, timeout=10)
    assert r.status_code == status, r.text
    msg = r.json()["error"]["message"]
    assert msg and ("not found" in msg or "no endpoint" in msg or "not allowed" in msg), r.text


@pytest.mark.parametrize("path", ["/v1/messages/%FF", "/v1/messages/" + "\u00e9" * 200])
def test_anthropic_error_body_for_a_path_that_is_not_utf8(tiny, path):
    r = httpx.post(tiny.url + path, json={}, timeout=10)
    assert r.status_code == 404, r.text
    err = r.json()
    assert err["type"] == "error" and err["error"]["type"] == "not_found_error" and err["error"]["message"]
