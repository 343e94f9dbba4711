"""qwen3moe (attention + mixture-of-experts feed-forward) served end to
end on the tiny generated Q4_K_M-mix model, with the prefix cache in every
tier. (qwen35moe, recurrent, runs the snapshot tests of
test_qwen35_snapshots.py and the cache-off tests of test_qwen35.py.)

Every answer is compared with a server whose prefix cache is off: greedy
text and logprobs must be identical whether the prefix came from the live
pool, from disk after a restart, or from Redis on another replica, and a
12-turn agent loop prefills only each turn's new tokens. Prefill groups a
batch's tokens by expert, so a cached prefix computed in one chunking
being resumed in another is exactly what batch invariance must survive.
"""
import os
import subprocess

import pytest

from conftest import STRATA
from test_qwen35_snapshots import (SYSTEM, chat, cold, complete, end_of, next_turn, on_fresh_replicas, redis_server,
                                   start, turns_then_stop, user_turn, workdir)

MODEL = "qwen3moe-q4_k_m"


@pytest.fixture(scope="module")
def tmp():
    with workdir(MODEL) as w:
        yield w


def test_serve_matches_run(tmp, cold):
    prompt = "The quick brown fox jumps over the lazy dog. A cache that never forgets"
    out = subprocess.run([STRATA, "run", "-m", tmp.model, "-p", prompt, "-n", "24", "--temp", "0", "-q"],
                         capture_output=True, timeout=60, check=True).stdout.decode("utf-8", "replace")
    text, _ = complete(cold, prompt, 24)
    assert text in (out, out.rstrip("\n"))


def test_agent_loop_12_turns_prefills_only_new_tokens(tmp, cold):
    warm = start(tmp, "loop")
    try:
        msgs, prev, prev_text, prefilled = [{"role": "system", "content": SYSTEM}], None, "", []
        for i in range(12):
            text, tr = next_turn(warm, cold, msgs, i)
            if prev is None:
                assert tr["prefilled_tokens"] == tr["prompt_tokens"]
            else:
                # A reply the API returned without text (random weights emit
                # bytes that are not UTF-8; the server then leaves "content"
                # out) cannot be replayed: the turn resumes at its prompt.
                resume = end_of(prev) if prev_text else prev["prompt_tokens"]
                assert tr["prefilled_tokens"] == tr["prompt_tokens"] - resume, f"turn {i}"
            prefilled.append(tr["prefilled_tokens"])
            prev, prev_text = tr, text
            msgs.append({"role": "assistant", "content": text})
        print("prefilled per turn:", prefilled, "prompt tokens at turn 12:", prev["prompt_tokens"])
        assert sum(prefilled[1:]) < prev["prompt_tokens"]
    finally:
        assert warm.stop() == 0


def test_restart_resumes_from_disk(tmp, cold):
    cache = os.path.join(tmp, "kv-restart")
    msgs, prev = turns_then_stop(tmp, cold, 3, "--cache-dir", cache)
    msgs.append({"role": "user", "content": user_turn(3)})
    srv = start(tmp, "after", "--cache-dir", cache)
    try:
        text, tr, lp = chat(srv, msgs, logprobs=True)
    finally:
        assert srv.stop() == 0
    ref, _, ref_lp = chat(cold, msgs, logprobs=True)
    assert text == ref and lp == ref_lp
    # Whole blocks of the earlier turns come from disk; only the rest is prefilled.
    assert tr["cached_tokens"]["disk"] >= end_of(prev) // 16 * 16 > 0, tr["cached_tokens"]
    assert tr["prefilled_tokens"] <= tr["prompt_tokens"] - end_of(prev) // 16 * 16


def test_shared_tier_replica_resumes_from_redis(tmp, cold):
    x = SYSTEM + " The first task: find every TODO in the tree and list the files."
    y = x + " Then open each one"
    with redis_server() as port:
        shared = ("--cache-redis", f"redis://127.0.0.1:{port}", "--no-cache-disk")
        (_, t1), (text, t2) = on_fresh_replicas(tmp, shared, [x, y])
    assert text == complete(cold, y, 6)[0]
    assert t2["cached_tokens"]["redis"] >= t1["prompt_tokens"] // 16 * 16 > 0, t2["cached_tokens"]
    assert t2["prefilled_tokens"] == t2["prompt_tokens"] - t2["cached_tokens"]["redis"]
