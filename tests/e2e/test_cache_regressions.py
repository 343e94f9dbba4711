"""Regression tests for the failures seen in other servers' prompt caches
(issue 4, item 6), on the tiny model. Each checks what was reported
missing: hits, and only the new tokens prefilled."""
import concurrent.futures as cf
import random

import httpx
import pytest

from conftest import Server, TINY_MODEL

B = 64  # block tokens


def complete(server, tokens, **kw):
    r = httpx.post(server.url + "/v1/completions", timeout=600,
                   json={"prompt": tokens, "max_tokens": kw.pop("max_tokens", 1), "temperature": 0, **kw})
    assert r.status_code == 200, r.text
    return r.json()


def cached(r):
    return r["usage"]["prompt_tokens_details"]["cached_tokens"]


@pytest.fixture(scope="module")
def big():
    s = Server(TINY_MODEL, "--ctx", "24000", "--parallel", "8")
    yield s
    assert s.stop() == 0


def test_f_long_cached_prefix_prefills_only_the_new_tokens(big):
    rng = random.Random(3)
    prefix = [rng.randrange(3, 500) for _ in range(20000)]
    complete(big, prefix)
    r = complete(big, prefix + [rng.randrange(3, 500) for _ in range(100)])
    assert cached(r) == 20000  # the whole cached prefix, its partial last block too
    assert r["usage"]["prompt_tokens"] - cached(r) == 100  # only the new tokens are prefilled


def test_c_changed_early_block_first_session_partial_second_full(big):
    rng = random.Random(4)
    head, tail = [rng.randrange(3, 500) for _ in range(B)], [rng.randrange(3, 500) for _ in range(20 * B)]
    complete(big, head + tail)
    changed = [(t + 1) % 500 for t in head]  # like a git-status line at the top of the system prompt
    first = complete(big, changed + tail + [7])
    assert cached(first) == 0 or cached(first) < len(changed) + len(tail)  # partial at most
    second = complete(big, changed + tail + [8])
    assert cached(second) == (len(changed) + len(tail)) // B * B  # the whole new prefix


def test_e_interleaved_sessions_each_hit_their_own_history(big):
    rng = random.Random(5)
    sessions = [[rng.randrange(3, 500) for _ in range(3 * B)] for _ in range(8)]
    for turn in range(4):
        def step(i):
            r = complete(big, sessions[i], max_tokens=4)
            return i, r

        with cf.ThreadPoolExecutor(8) as pool:
            results = list(pool.map(step, range(8)))
        for i, r in results:
            if turn:
                assert cached(r) >= prev_len[i], (turn, i, cached(r), prev_len[i])
        prev_len = [len(s) for s in sessions]
        for i in range(8):  # each session grows by a turn of its own
            sessions[i] = sessions[i] + [rng.randrange(3, 500) for _ in range(B + 17)]


def test_b_one_request_never_stores_a_prefix_twice(big):
    rng = random.Random(6)
    toks = [rng.randrange(3, 500) for _ in range(10 * B)]
    before = big.metrics()["strata_cache_published_blocks_total"]
    complete(big, toks)
    complete(big, toks)  # the same prompt again: found, not stored again
    after = big.metrics()["strata_cache_published_blocks_total"]
    assert after - before == 10  # 10 full blocks, published once; the repeat finds them


def test_scope_off_tokens_and_auto(big):
    rng = random.Random(7)
    base = [rng.randrange(3, 500) for _ in range(8 * B)]
    # off: nothing of this prompt is published, so a repeat cannot hit
    complete(big, base, prefix_cache={"scope": "off"})
    assert cached(complete(big, base + [1], prefix_cache={"scope": "off"})) == 0
    # a token count: only that prefix is published
    other = [rng.randrange(3, 500) for _ in range(8 * B)]
    complete(big, other, prefix_cache={"scope": 2 * B})
    assert cached(complete(big, other + [2], prefix_cache={"scope": "off"})) == 2 * B
    # auto:N: the prefix shared with one of the last N prompts (the stable
    # part of agent prompts) is published, the varying tail is not
    stable = [rng.randrange(3, 500) for _ in range(4 * B)]
    a = stable + [rng.randrange(3, 500) for _ in range(3 * B)]
    b = stable + [rng.randrange(3, 500) for _ in range(3 * B)]
    complete(big, a, prefix_cache={"scope": "auto:4"})
    complete(big, b, prefix_cache={"scope": "auto:4"})  # learns the 4-block boundary
    c = stable + [rng.randrange(3, 500) for _ in range(3 * B)]
    assert cached(complete(big, c, prefix_cache={"scope": "off"})) == 4 * B
    assert cached(complete(big, b + [3], prefix_cache={"scope": "off"})) == 4 * B  # b's tail was not kept


def test_scope_rejects_nonsense(big):
    r = httpx.post(big.url + "/v1/completions", json={"prompt": [5, 6], "prefix_cache": {"scope": "sometimes"}})
    assert r.status_code == 400 and "cache scope" in r.json()["error"]["message"]
