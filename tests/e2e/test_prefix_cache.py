"""Prefix cache (live tier): hits are reported truthfully and change
nothing the model says — every reply and logprob equals a cold server's."""
import json

import httpx
import pytest

from conftest import Server, TINY_MODEL

SYSTEM = " ".join(f"rule {i}: answer briefly and cite source {i * 7}." for i in range(40))


def chat(server, messages, **kw):
    body = {"messages": messages, "temperature": 0, "max_tokens": 8, "logprobs": True, "top_logprobs": 2}
    body.update(kw)
    r = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def turn(server, user):
    return chat(server, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}])


@pytest.fixture(scope="module")
def cold():
    s = Server(TINY_MODEL, "--ctx", "2048", "--no-prefix-cache")
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def warm():
    s = Server(TINY_MODEL, "--ctx", "2048")
    yield s
    assert s.stop() == 0


def strip(r):
    """What the model said: text, finish reason and every logprob (exact floats)."""
    c = r["choices"][0]
    return c["message"]["content"], c["finish_reason"], json.dumps(c["logprobs"])


def test_second_request_hits_and_matches_cold(warm, cold):
    first = turn(warm, "what is rule 3?")
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    second = turn(warm, "what is rule 9?")
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    # token granularity: the first prompt's partial last block is reused as
    # far as the prompts agree, not just its full 64-token blocks
    assert cached >= 64 and cached % 64 != 0, cached
    assert cached < second["usage"]["prompt_tokens"]
    assert strip(second) == strip(turn(cold, "what is rule 9?"))


def test_identical_request_is_bit_identical(warm, cold):
    a, b = turn(warm, "repeat me"), turn(warm, "repeat me")
    assert b["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    assert strip(a) == strip(b) == strip(turn(cold, "repeat me"))


def test_multi_turn_extends_previous_prompt(warm, cold):
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "start"}]
    for i in range(3):
        r = chat(warm, msgs)
        prompt = r["usage"]["prompt_tokens"]
        if i:
            # the whole previous prompt is reused, its partial last block too
            assert r["usage"]["prompt_tokens_details"]["cached_tokens"] >= prev
        assert strip(r) == strip(chat(cold, msgs))
        prev = prompt
        msgs += [{"role": "assistant", "content": r["choices"][0]["message"]["content"]},
                 {"role": "user", "content": f"and then {i}?"}]


def test_metrics_count_hits(warm):
    turn(warm, "metrics please")
    values = warm.metrics()
    assert values["strata_cache_hit_tokens_total"] > 0
    assert values["strata_cache_blocks"] > 0


def test_cache_salt_isolates_tenants(warm):
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "salted"}]
    a = chat(warm, msgs, cache_salt="tenant-a")
    b = chat(warm, msgs, cache_salt="tenant-b")
    a2 = chat(warm, msgs, cache_salt="tenant-a")
    assert b["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert a2["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    assert strip(a) == strip(b) == strip(a2)


def test_trace_lines_record_cache_decisions(tmp_path):
    trace = tmp_path / "trace.jsonl"
    s = Server(TINY_MODEL, "--ctx", "2048", "--trace", str(trace))
    try:
        turn(s, "first")
        second = turn(s, "second")
    finally:
        assert s.stop() == 0
    lines = [json.loads(l) for l in trace.read_text().splitlines()]
    assert len(lines) == 2
    assert lines[0]["cached_tokens"]["live"] == 0 and lines[0]["blocks"]["published"] > 0
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert lines[1]["cached_tokens"]["live"] == cached > 0
    assert lines[1]["prefilled_tokens"] == lines[1]["prompt_tokens"] - cached
    assert lines[1]["first_miss"]["pos"] == cached and lines[1]["first_miss"]["tokens"]
    assert lines[1]["finish"] in ("stop", "length")


def test_exact_replay_extends_cache_through_the_reply(warm):
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "write a long reply"}]
    r1 = chat(warm, msgs, max_tokens=100, temperature=1.0, seed=11)
    p1, g1 = r1["usage"]["prompt_tokens"], r1["usage"]["completion_tokens"]
    msgs += [{"role": "assistant", "content": r1["choices"][0]["message"]["content"]},
             {"role": "user", "content": "and?"}]
    r2 = chat(warm, msgs)
    # Every block of turn 1's prompt and generated tokens (the last sampled
    # one is never fed) is reused: the reply came back as its exact tokens.
    assert r2["usage"]["prompt_tokens_details"]["cached_tokens"] >= (p1 + g1 - 1) // 64 * 64


def test_cache_survives_restart_bit_identical(tmp_path, cold):
    cache = str(tmp_path / "kv")
    s = Server(TINY_MODEL, "--ctx", "2048", "--cache-dir", cache)
    try:
        first = turn(s, "before the restart")
    finally:
        assert s.stop() == 0  # drains the disk writes
    s = Server(TINY_MODEL, "--ctx", "2048", "--cache-dir", cache)
    try:
        again = turn(s, "after the restart")
        tiers = again["usage"]["strata_cache"]
        assert tiers["disk_tokens"] >= 64 and tiers["live_tokens"] == 0
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == tiers["disk_tokens"]
        assert strip(again) == strip(turn(cold, "after the restart"))
        same = turn(s, "before the restart")  # resent as is: one token to compute
        assert same["usage"]["prompt_tokens_details"]["cached_tokens"] == same["usage"]["prompt_tokens"] - 1
        assert strip(same) == strip(first)
        assert "strata_disk_blocks" in s.metrics()
    finally:
        assert s.stop() == 0


def test_corrupt_cache_file_is_skipped_not_fatal(tmp_path, cold):
    import glob
    import os
    cache = str(tmp_path / "kv")
    s = Server(TINY_MODEL, "--ctx", "2048", "--cache-dir", cache)
    try:
        turn(s, "corrupt me")
    finally:
        assert s.stop() == 0
    files = sorted(glob.glob(os.path.join(cache, "**", "*.kv"), recursive=True))
    assert files
    for f in files:  # flip one payload byte in every block file
        with open(f, "r+b") as fh:
            fh.seek(os.path.getsize(f) // 2)
            b = fh.read(1)
            fh.seek(-1, 1)
            fh.write(bytes([b[0] ^ 0xFF]))
    s = Server(TINY_MODEL, "--ctx", "2048", "--cache-dir", cache)
    try:
        r = turn(s, "corrupt me")
        assert r["usage"]["strata_cache"]["disk_tokens"] == 0  # nothing corrupt was loaded
        assert strip(r) == strip(turn(cold, "corrupt me"))
        m = s.metrics()
        assert m["strata_disk_quarantined_total"] >= 1
    finally:
        assert s.stop() == 0


def test_api_keys_are_tenants(tmp_path):
    s = Server(TINY_MODEL, "--ctx", "2048", "--api-key", "key-a,key-b")
    try:
        msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "tenants"}]

        def as_key(key):
            r = httpx.post(s.url + "/v1/chat/completions", headers={"Authorization": f"Bearer {key}"},
                           json={"messages": msgs, "temperature": 0, "max_tokens": 4}, timeout=60)
            assert r.status_code == 200, r.text
            return r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]

        assert httpx.post(s.url + "/v1/chat/completions", json={"messages": msgs}).status_code == 401
        assert as_key("key-a") == 0
        assert as_key("key-b") == 0  # same prompt, other tenant: no shared blocks
        assert as_key("key-a") > 0
        x = httpx.post(s.url + "/v1/messages", headers={"x-api-key": "key-b"},
                       json={"model": "", "max_tokens": 4, "system": SYSTEM,
                             "messages": [{"role": "user", "content": "tenants"}]})
        assert x.status_code == 200 and x.json()["usage"]["cache_read_input_tokens"] >= 0
    finally:
        assert s.stop() == 0


def test_exact_replay_survives_restart_and_a_corrupt_map_is_ignored(tmp_path):
    import glob
    cache = str(tmp_path / "kv")
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "a long story please"}]
    s = Server(TINY_MODEL, "--ctx", "2048", "--cache-dir", cache)
    try:
        r1 = chat(s, msgs, max_tokens=100, temperature=1.0, seed=5)
    finally:
        assert s.stop() == 0
    p1, g1 = r1["usage"]["prompt_tokens"], r1["usage"]["completion_tokens"]
    msgs += [{"role": "assistant", "content": r1["choices"][0]["message"]["content"]},
             {"role": "user", "content": "more"}]
    s = Server(TINY_MODEL, "--ctx", "2048", "--cache-dir", cache)
    try:
        r2 = chat(s, msgs)
        # All of turn 1 comes back from disk, its partial last block too.
        assert r2["usage"]["prompt_tokens_details"]["cached_tokens"] >= p1 + g1 - 1
        assert r2["usage"]["strata_cache"]["disk_tokens"] >= p1 + g1 - 1
    finally:
        assert s.stop() == 0
    for f in glob.glob(cache + "/replay-*.bin"):
        with open(f, "r+b") as fh:
            fh.seek(60)
            fh.write(b"\x00garbage\x00")
    s = Server(TINY_MODEL, "--ctx", "2048", "--cache-dir", cache)
    try:
        r3 = chat(s, msgs)  # starts and answers; the map was ignored, not half-loaded
        assert r3["usage"]["prompt_tokens"] > 0
    finally:
        assert s.stop() == 0
