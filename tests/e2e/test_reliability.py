"""Regressions of the third reliability campaign (issue 24), end to end on
the tiny model: each finding has tests that failed before its fix.

- a tool whose input schema is not an object: 400 before generating, in
  all three APIs (was 500, or 200 with empty arguments);
- an id in the URL that is not valid UTF-8 (or is cut inside a character):
  an error body that says so in the API's schema (was `{}`);
- /metrics and /props under several API keys: the operator's
  (--metrics-key), never a tenant's (one tenant read another's counters);
- idle and slow connections: a request header not complete within
  --header-timeout closes the connection, and one client address holds at
  most --max-client-connections places (60 idle connections held all 8
  places and /health timed out for the whole --idle-timeout);
- /v1/responses `metadata` is checked as the API does (16 string pairs,
  keys up to 64 and values up to 512 characters; was echoed unchecked,
  1,000 levels deep included);
- NUL: the server never emits a U+0000 it would refuse (model output turns
  it into U+FFFD, as it does invalid UTF-8, and exact replay keeps the
  tokens), and U+0000 in request text is served, read as U+FFFD (was a
  400 for any `\\u0000`, while /detokenize answered "X\\u0000Y").
"""
import socket
import subprocess
import time

import httpx
import pytest

from conftest import STRATA, TINY_MODEL, Server, free_port

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


# ---- /metrics and /props are the operator's ---------------------------------------------

def bearer(key):
    return {"Authorization": f"Bearer {key}"}


def tenant_request(s, key):
    r = post(s, CHAT, {"messages": [{"role": "user", "content": "hello there"}], "max_tokens": 2},
             headers=bearer(key))
    assert r.status_code == 200, r.text


def test_tenants_cannot_read_metrics_without_a_metrics_key():
    s = Server(TINY_MODEL, "--api-key", "k1,k2")
    try:
        tenant_request(s, "k1")
        for path in ("/metrics", "/props"):
            for key in ("k1", "k2"):
                r = httpx.get(s.url + path, headers=bearer(key), timeout=10)
                assert r.status_code == 403, (path, key, r.text)
                assert "requests_total" not in r.text and "metrics-key" in r.json()["error"]["message"]
            assert httpx.get(s.url + path, timeout=10).status_code == 401
    finally:
        assert s.stop() == 0


def test_metrics_key_reads_the_counters_and_tenants_get_403():
    s = Server(TINY_MODEL, "--api-key", "k1,k2", "--metrics-key", "ops")
    try:
        before = httpx.get(s.url + "/metrics", headers=bearer("ops"), timeout=10)
        assert before.status_code == 200 and "requests_total" in before.text
        tenant_request(s, "k1")
        assert httpx.get(s.url + "/props", headers={"x-api-key": "ops"}, timeout=10).status_code == 200
        for key, status in (("k1", 403), ("k2", 403), ("wrong", 401), (None, 401)):
            r = httpx.get(s.url + "/metrics", headers=bearer(key) if key else None, timeout=10)
            assert r.status_code == status, (key, r.text)
            assert "requests_total" not in r.text
        # The metrics key is no tenant: the APIs refuse it.
        assert post(s, CHAT, {"messages": [{"role": "user", "content": "x"}], "max_tokens": 1},
                    headers=bearer("ops")).status_code == 401
    finally:
        assert s.stop() == 0


def test_one_tenant_still_reads_its_metrics():
    s = Server(TINY_MODEL, "--api-key", "only")
    try:
        assert httpx.get(s.url + "/metrics", headers=bearer("only"), timeout=10).status_code == 200
    finally:
        assert s.stop() == 0


@pytest.mark.parametrize("key,why", [("", "empty"), ("k2", "also an --api-key")])
def test_bad_metrics_key_refuses_to_start(key, why):
    p = subprocess.run([STRATA, "serve", "-m", TINY_MODEL, "--port", str(free_port()), "--no-cache-disk",
                        "--api-key", "k1,k2", "--metrics-key", key], capture_output=True, text=True, timeout=15)
    assert p.returncode != 0 and why in p.stderr


# ---- idle and slow connections ------------------------------------------------------------

def other_client():
    """An httpx client whose connections come from another loopback address."""
    return httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2"), timeout=3)


def idle_sockets(port, n):
    out = []
    for _ in range(n):
        try:
            out.append(socket.create_connection(("127.0.0.1", port), timeout=2))
        except OSError:
            pass
    return out


def closed_by_server(sock, within):
    """True when the server closes sock (EOF, reset, or a 408) within `within` s."""
    sock.settimeout(within)
    try:
        data = sock.recv(4096)
        return data == b"" or data.startswith(b"HTTP/1.1 408")
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_idle_connections_do_not_lock_the_door():
    s = Server(TINY_MODEL, "--max-connections", "8", "--header-timeout", "2", "--idle-timeout", "60")
    idle = []
    try:
        t0 = time.time()
        idle = idle_sockets(s.port, 60)
        time.sleep(0.3)
        with other_client() as c:  # one address cannot take every place
            assert c.get(s.url + "/health").status_code == 200
        # Headers never sent: every idle connection is cut after the header timeout, well
        # before the idle timeout, and the door opens for the same address too.
        assert all(closed_by_server(k, 6) for k in idle)
        assert time.time() - t0 < 10
        assert httpx.get(s.url + "/health", timeout=3).status_code == 200
    finally:
        for k in idle:
            k.close()
        assert s.stop() == 0


def test_slow_header_is_cut_but_a_slow_body_is_served():
    s = Server(TINY_MODEL, "--header-timeout", "2", "--idle-timeout", "60")
    try:
        # One header byte every 0.5 s: never complete within 2 s.
        slow = socket.create_connection(("127.0.0.1", s.port), timeout=5)
        head = b"GET /health HTTP/1.1\r\nHost: t\r\nX-Slow: " + b"a" * 40
        t0, cut = time.time(), False
        for b in head:
            try:
                slow.sendall(bytes([b]))
            except OSError:
                cut = True
                break
            time.sleep(0.5)
            if time.time() - t0 > 8:
                break
        cut = cut or closed_by_server(slow, 2)
        assert cut and time.time() - t0 < 8, "a trickled header held its place past the header timeout"
        slow.close()
        # Headers at once, then the body trickled over 3 s (past the header timeout): served.
        body = b'{"content": "hello world"}'
        k = socket.create_connection(("127.0.0.1", s.port), timeout=10)
        k.sendall(b"POST /tokenize HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body))
        for i in range(0, len(body), 3):
            k.sendall(body[i:i + 3])
            time.sleep(0.3)
        reply = k.recv(4096)
        k.close()
        assert reply.startswith(b"HTTP/1.1 200"), reply
    finally:
        assert s.stop() == 0


def test_max_client_connections_limits_one_address():
    s = Server(TINY_MODEL, "--max-connections", "8", "--max-client-connections", "2")
    held = []
    try:
        time.sleep(0.5)  # the start-up health checks' connections are counted until cleaned up
        held = [socket.create_connection(("127.0.0.1", s.port), timeout=2) for _ in range(2)]
        assert not any(closed_by_server(k, 0.3) for k in held)  # both hold a place
        with pytest.raises(httpx.HTTPError):  # a third from the same address is refused
            httpx.get(s.url + "/health", timeout=1)
        with other_client() as c:
            assert c.get(s.url + "/health").status_code == 200
    finally:
        for k in held:
            k.close()
        assert s.stop() == 0


# ---- Responses metadata -------------------------------------------------------------------

def responses(server, **kw):
    return post(server, "/v1/responses", {"model": "", "input": "hi", "max_output_tokens": 2, **kw})


DEEP = '{"a":' * 1000 + '"x"' + "}" * 1000  # 1,000 levels: raw text (Python's json recurses)


@pytest.mark.parametrize("metadata,says", [
    ({f"k{i}": "v" for i in range(17)}, "16"),
    ("DEEP", "string"),
    ({"k": 5}, "string"),
    ({"k" * 65: "v"}, "64"),
    ({"k": "v" * 513}, "512"),
    ({"k": "\u00e9" * 513}, "512"),
    ([["k", "v"]], "object"),
    ("k=v", "object")])
def test_responses_metadata_is_checked(tiny, metadata, says):
    if metadata == "DEEP":
        r = httpx.post(tiny.url + "/v1/responses", timeout=30, headers={"Content-Type": "application/json"},
                       content='{"model": "", "input": "hi", "max_output_tokens": 2, "metadata": {"k": %s}}' % DEEP)
    else:
        r = responses(tiny, metadata=metadata)
    assert r.status_code == 400, r.text[:300]
    msg = r.json()["error"]["message"]
    assert "metadata" in msg and says in msg, msg


def test_responses_metadata_at_the_limits_is_echoed(tiny):
    md = {f"{i:02d}" + "k" * 62: "\u00e9" * 512 for i in range(16)}
    r = responses(tiny, metadata=md)
    assert r.status_code == 200, r.text[:300]
    assert r.json()["metadata"] == md
    assert responses(tiny, metadata=None).json()["metadata"] == {}


# ---- NUL in text ---------------------------------------------------------------------------

NUL_BYTE_TOKEN = 3  # the tiny llama's vocabulary: 3 specials, then the 256 byte tokens


def test_server_never_emits_nul(tiny):
    r = post(tiny, "/detokenize", {"tokens": [60, NUL_BYTE_TOKEN, 61]})
    assert r.status_code == 200
    assert "\\u0000" not in r.text and r.json()["content"] == "9\ufffd:", r.text


@pytest.mark.parametrize("path,body", [
    (CHAT, {"messages": [{"role": "user", "content": "a\u0000b"}], "max_tokens": 1}),
    (CHAT, {"messages": [{"role": "user", "content": [{"type": "text", "text": "a\u0000b"}]}], "max_tokens": 1}),
    ("/v1/messages", {"model": "", "max_tokens": 1, "messages": [{"role": "user", "content": "a\u0000b"}]}),
    ("/v1/messages", {"model": "", "max_tokens": 1, "system": "s\u0000",
                      "messages": [{"role": "user", "content": [{"type": "text", "text": "\u0000"}]}]}),
    ("/v1/responses", {"model": "", "max_output_tokens": 1, "input": "a\u0000b", "instructions": "\u0000"}),
    ("/tokenize", {"content": "a\u0000b"})])
def test_nul_in_request_text_is_served(tiny, path, body):
    r = post(tiny, path, body)
    assert r.status_code == 200, r.text


def test_nul_is_read_as_the_replacement_character(tiny):
    a = post(tiny, "/tokenize", {"content": "a\u0000b"}).json()["tokens"]
    b = post(tiny, "/tokenize", {"content": "a\ufffdb"}).json()["tokens"]
    assert a == b


def test_a_reply_sent_back_is_served(tiny):
    # What the server emitted for a NUL byte token, sent back as an assistant turn.
    text = post(tiny, "/detokenize", {"tokens": [60, NUL_BYTE_TOKEN, 61]}).json()["content"]
    r = post(tiny, CHAT, {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": text},
                                       {"role": "user", "content": "y"}], "max_tokens": 1})
    assert r.status_code == 200, r.text
