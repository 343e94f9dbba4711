"""The queue, API keys and connection limits, end to end.

Each test starts its own tiny-model server with the flags it needs. A
server with --parallel 1 and a long streamed generation (greedy decoding
of the tiny model never stops before max_tokens) has its only slot busy
for as long as the test keeps that stream open; closing it frees the slot.
"""
import contextlib
import json
import socket
import subprocess
import threading
import time

import httpx
import pytest

from conftest import STRATA, TINY_MODEL, Server, free_port

ONE_SLOT = ("--parallel", "1", "--queue", "4", "--ctx", "65536", "--no-prefix-cache")
LONG = {"messages": [{"role": "user", "content": "go"}], "max_tokens": 60000, "temperature": 0, "stream": True}


def short(words=1):
    return {"messages": [{"role": "user", "content": " ".join(["go"] * words)}], "max_tokens": 2, "temperature": 0}


def anthropic_short():
    return {"model": "", "max_tokens": 2, "messages": [{"role": "user", "content": "go"}]}


@contextlib.contextmanager
def busy_slot(server):
    """Holds the server's only slot until the block ends."""
    with httpx.Client(timeout=30) as h, h.stream("POST", server.url + "/v1/chat/completions", json=LONG) as r:
        assert r.status_code == 200
        lines = r.iter_lines()  # kept: dropping the iterator would close the stream
        while not next(lines).startswith("data: "):
            pass
        yield


def health(server):
    return httpx.get(server.url + "/health", timeout=5).json()


def wait_until(cond, timeout=5.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def raw_request(server, head, body=b""):
    """A connection with one request written on it (headers as given)."""
    s = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    s.sendall(head.encode() + body)
    return s


def raw_post(server, path, obj):
    body = json.dumps(obj).encode()
    return raw_request(server, f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                               f"Content-Length: {len(body)}\r\n\r\n", body)


def serving(*args):
    """Fixture body: a tiny-model server with these flags, stopped cleanly after."""
    s = Server(TINY_MODEL, *args)
    yield s
    assert s.stop() == 0


@pytest.fixture
def one_slot():
    yield from serving(*ONE_SLOT)


@pytest.fixture
def one_slot_timeout():
    yield from serving(*ONE_SLOT, "--queue-timeout", "1")


# ---- the queue ---------------------------------------------------------------------------


def test_departed_queued_clients_free_their_places(one_slot):
    s = one_slot
    with busy_slot(s):
        socks = [raw_post(s, "/v1/chat/completions", short()) for _ in range(4)]
        assert wait_until(lambda: health(s)["queued"] == 4)
        for k in socks:
            k.close()
        assert wait_until(lambda: health(s)["queued"] == 0), "departed clients still hold queue places"
        got = []
        t = threading.Thread(target=lambda: got.append(
            httpx.post(s.url + "/v1/messages", json=anthropic_short(), timeout=30)))
        t.start()
        assert wait_until(lambda: got or health(s)["queued"] == 1)
    t.join(30)
    assert got[0].status_code == 200, got[0].text  # was 529 "overloaded" with nobody waiting


def test_queue_zero_means_no_waiting_not_no_serving():
    s = Server(TINY_MODEL, *ONE_SLOT, "--queue", "0")  # the later flag wins
    try:
        assert httpx.post(s.url + "/v1/chat/completions", json=short(), timeout=30).status_code == 200
        with busy_slot(s):
            r = httpx.post(s.url + "/v1/chat/completions", json=short(), timeout=30)
            assert r.status_code == 503 and "already waiting" in r.json()["error"]["message"]
    finally:
        assert s.stop() == 0


def test_queue_is_first_come_first_served(tmp_path):
    trace = tmp_path / "trace.jsonl"
    s = Server(TINY_MODEL, *ONE_SLOT, "--trace", str(trace))
    try:
        threads = []
        with busy_slot(s):
            for i in range(3):  # prompts of 1, 2, 3 words: told apart by their token counts
                threads.append(threading.Thread(target=httpx.post, args=(s.url + "/v1/chat/completions",),
                                                kwargs={"json": short(i + 1), "timeout": 30}))
                threads[-1].start()
                assert wait_until(lambda: health(s)["queued"] == i + 1)
        for t in threads:
            t.join(30)
    finally:
        assert s.stop() == 0
    lines = [json.loads(l) for l in trace.read_text().splitlines()]
    served = [l["prompt_tokens"] for l in lines if l["finish"] != "cancelled"]
    assert len(served) == 3 and served == sorted(served), served  # one slot: finish order is admission order


def test_queue_timeout_answers_busy_with_retry_after(one_slot_timeout):
    s = one_slot_timeout
    with busy_slot(s):
        t0 = time.time()
        r = httpx.post(s.url + "/v1/chat/completions", json=short(), timeout=10)
        waited = time.time() - t0
        assert r.status_code == 503, r.text
        assert r.json()["error"]["type"] == "server_busy"
        assert int(r.headers["retry-after"]) >= 1
        assert 0.9 <= waited < 5
        a = httpx.post(s.url + "/v1/messages", json=anthropic_short(), timeout=10)
        assert a.status_code == 529 and a.json()["error"]["type"] == "overloaded_error"
        assert "retry-after" in a.headers
        # A stream's status is decided before it starts: 503, not a 200 that breaks off.
        st = httpx.post(s.url + "/v1/chat/completions", json={**short(), "stream": True}, timeout=10)
        assert st.status_code == 503
        assert health(s)["queued"] == 0


# ---- API keys ----------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["", ","])
def test_api_key_naming_no_key_refuses_to_start(key):
    p = subprocess.run([STRATA, "serve", "-m", TINY_MODEL, "--port", str(free_port()), "--no-cache-disk",
                        "--api-key", key], capture_output=True, text=True, timeout=15)
    assert p.returncode != 0
    assert "names no key" in p.stderr


@pytest.fixture(scope="module")
def keyed():
    yield from serving("--api-key", "key-a,key-b")


def test_key_is_checked_before_the_body_is_read(keyed):
    # Headers announce 8 MB, a few bytes follow: the 401 must not wait for the rest.
    sock = raw_request(keyed, "POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                              f"Content-Length: {8 << 20}\r\n\r\n", b'{"messages":')
    sock.settimeout(3)
    try:
        head = sock.recv(4096)
    finally:
        sock.close()
    assert head.startswith(b"HTTP/1.1 401"), head
    assert b"authentication_error" in head


def test_health_is_open_and_every_other_endpoint_needs_a_key(keyed):
    u = keyed.url
    assert httpx.get(u + "/health").status_code == 200
    for method, path in [("GET", "/metrics"), ("GET", "/props"), ("GET", "/v1/models"), ("POST", "/tokenize"),
                         ("POST", "/detokenize"), ("POST", "/apply-template"), ("POST", "/v1/completions"),
                         ("POST", "/v1/messages/count_tokens"), ("GET", "/v1/nothing")]:
        r = httpx.request(method, u + path, json={} if method == "POST" else None)
        assert r.status_code == 401, (path, r.status_code)
    r = httpx.post(u + "/v1/messages", json=anthropic_short(), headers={"x-api-key": "wrong"})
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    assert httpx.get(u + "/v1/models", headers={"x-api-key": "key-b"}).status_code == 200
    # Two tenants and no --metrics-key: the server-wide endpoints are nobody's (test_reliability.py).
    assert httpx.get(u + "/props", headers={"Authorization": "Bearer key-a"}).status_code == 403


# ---- connections -------------------------------------------------------------------------


def test_connection_limit():
    # No per-address limit: every connection here comes from 127.0.0.1 (test_reliability.py has that one).
    s = Server(TINY_MODEL, "--max-connections", "2", "--max-client-connections", "0")
    idle = []
    try:
        idle = [socket.create_connection(("127.0.0.1", s.port)) for _ in range(2)]
        time.sleep(0.3)
        with pytest.raises(httpx.HTTPError):  # refused, or left waiting: never answered
            httpx.get(s.url + "/health", timeout=1)
        idle.pop().close()
        assert wait_until(lambda: httpx.get(s.url + "/health", timeout=1).status_code == 200)
    finally:
        for k in idle:
            k.close()
        assert s.stop() == 0


def test_idle_connection_is_closed_but_a_waiting_request_is_not():
    s = Server(TINY_MODEL, *ONE_SLOT, "--idle-timeout", "1")
    try:
        sock = socket.create_connection(("127.0.0.1", s.port), timeout=5)
        t0 = time.time()
        assert sock.recv(1) == b""  # closed by the server, not by our timeout
        assert time.time() - t0 < 4
        sock.close()
        got = []
        with busy_slot(s):  # a request queued longer than the idle timeout still gets its answer
            t = threading.Thread(target=lambda: got.append(
                httpx.post(s.url + "/v1/chat/completions", json=short(), timeout=30)))
            t.start()
            assert wait_until(lambda: health(s)["queued"] == 1)
            time.sleep(2)
        t.join(30)
        assert got and got[0].status_code == 200
    finally:
        assert s.stop() == 0
