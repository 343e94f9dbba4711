"""Retention policy under memory pressure: a conversation's anchor (system
prompt) and an Anthropic cache_control breakpoint outlive a flood of other
prompts that evicts everything unmarked (memory only, no disk tier)."""
import json
import random

import httpx
import pytest

from conftest import Server, TINY_MODEL

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
         "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango"]


def text(seed, n_words=80):
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) + str(rng.randrange(100)) for _ in range(n_words))


@pytest.fixture(scope="module")
def small():
    s = Server(TINY_MODEL, "--ctx", "2048", "--parallel", "1", "--cache-mem-mb", "1", "--no-cache-disk",
               "--trace", "/dev/null")
    yield s
    assert s.stop() == 0


def messages(server, body):
    body = {"model": "", "max_tokens": 2, "temperature": 0, **body}
    r = httpx.post(server.url + "/v1/messages", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()["usage"]


def chat(server, body):
    body = {"max_tokens": 2, "temperature": 0, **body}
    r = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()["usage"]


def uncached(u):
    """Prompt tokens not read from the cache (computed; some newly written to it)."""
    return u["input_tokens"] + u["cache_creation_input_tokens"]


def flood(server, seed):
    """Distinct prompts without marks until twice the KV pool went through."""
    props = httpx.get(server.url + "/props").json()["cache"]
    capacity, sent, k = props["kv_blocks"] * props["block_tokens"], 0, 0
    while sent < 2 * capacity:
        u = messages(server, {"messages": [{"role": "user", "content": text(seed + k)}]})
        sent += uncached(u)
        k += 1
    return capacity


def test_cache_control_and_anchor_outlive_a_flood(small):
    marked = {"role": "user", "content": [{"type": "text", "text": text(1),
                                           "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}
    plain = {"role": "user", "content": text(2)}
    system = text(3, 50)
    anchored = {"system": system, "messages": [{"role": "user", "content": "first question"}]}
    keyed = [{"role": "user", "content": text(4)}, {"role": "assistant", "content": "ok"},
             {"role": "user", "content": "next"}]
    messages(small, {"messages": [marked]})
    messages(small, {"messages": [plain]})
    messages(small, anchored)
    keyed_first = chat(small, {"messages": keyed, "prompt_cache_key": "session-42"})
    capacity = flood(small, 1000)

    again_marked = messages(small, {"messages": [marked, {"role": "assistant", "content": "ok"},
                                                 {"role": "user", "content": "next"}]})
    again_plain = messages(small, {"messages": [plain, {"role": "assistant", "content": "ok"},
                                                {"role": "user", "content": "next"}]})
    new_session = messages(small, {"system": system, "messages": [{"role": "user", "content": "another question"}]})
    # the marked message (all its full blocks) and the system prompt survived...
    assert again_marked["cache_read_input_tokens"] >= uncached(again_marked) - 64 - 20, again_marked
    assert new_session["cache_read_input_tokens"] >= uncached(new_session) - 64 - 10, new_session
    # an OpenAI prompt_cache_key kept its conversation before the newest message, like an anchor
    keyed_again = chat(small, {"messages": keyed + [{"role": "assistant", "content": "ok"},
                                                   {"role": "user", "content": "and then"}],
                               "prompt_cache_key": "session-42"})
    cached = keyed_again["prompt_tokens_details"]["cached_tokens"]
    assert cached >= keyed_first["prompt_tokens"] - 64 - 20, (keyed_first, keyed_again)
    # ...while the same amount of unmarked text was evicted by the flood, but
    # for its first block: every flood prompt reused that block's first
    # tokens (the template's header), which kept it warm
    assert again_plain["cache_read_input_tokens"] <= 64, (again_plain, capacity)


def test_bad_cache_control_ttl_is_a_clear_400(small):
    body = {"model": "", "max_tokens": 2, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral", "ttl": "soon"}}]}]}
    r = httpx.post(small.url + "/v1/messages", json=body, timeout=60)
    assert r.status_code == 400 and "cache_control.ttl" in r.json()["error"]["message"]
