"""Gemma 3 270M served end to end: the architecture, Gemma's chat format
(the GGUF has no template, so the built-in one), and the prefix cache on a
model with sliding-window layers: a prompt longer than the 512-token window
answered from the cache gives the same greedy text as cold.

Skipped without the model (`make model-gemma3`; `make test` fetches it)."""
import os

import httpx
import pytest

from conftest import ROOT, Server

GEMMA3 = os.environ.get("STRATA_GEMMA3_MODEL", os.path.join(ROOT, "models", "gemma-3-270m-q4_k_m.gguf"))


@pytest.fixture(scope="module")
def gemma():
    if not os.path.exists(GEMMA3):
        pytest.skip("Gemma 3 270M not downloaded (make model-gemma3)")
    s = Server(GEMMA3, "--parallel", "2", "--ctx", "2048")
    yield s
    assert s.stop() == 0, "server did not shut down cleanly on SIGTERM"


def chat(server, content, max_tokens=8):
    r = httpx.post(server.url + "/v1/chat/completions", timeout=120, json={
        "messages": [{"role": "user", "content": content}], "temperature": 0, "max_tokens": max_tokens})
    assert r.status_code == 200, r.text
    return r.json()


def test_props_and_chat_format(gemma):
    props = httpx.get(gemma.url + "/props").json()
    assert props["architecture"] == "gemma3"
    assert props["n_vocab"] == 262144
    # <bos> <start_of_turn> user \n What is the capital of France ? <end_of_turn> \n
    # <start_of_turn> model \n: 16 tokens, one BOS.
    r = chat(gemma, "What is the capital of France?")
    assert r["usage"]["prompt_tokens"] == 16
    assert r["usage"]["completion_tokens"] >= 1


def test_cache_hit_past_the_window_equals_cold(gemma):
    text = " ".join(f"Note {i}: the cache keeps block {i * 7 % 13} warm." for i in range(60))
    cold = chat(gemma, text + "\nSummarize.", max_tokens=16)
    assert cold["usage"]["prompt_tokens"] > 600  # past the 512-token sliding window
    warm = chat(gemma, text + "\nSummarize.", max_tokens=16)
    assert warm["usage"]["prompt_tokens_details"]["cached_tokens"] > 512
    assert warm["choices"][0]["message"]["content"] == cold["choices"][0]["message"]["content"]
