"""The sampling a request gets for the fields it leaves out (agent clients
send no temperature, top_p or top_k): the operator's flags (--temp,
--top-k, --top-p, --min-p, --repeat-penalty), else the model file's
general.sampling.* keys (as llama.cpp reads them), else the APIs' own
(temperature 1, no truncation). A request's own field always wins.
llama-q6_k carries temp 0.25, top_k 7, top_p 0.5 in its metadata
(tools/testdata_models.py)."""
import os

import httpx
import pytest

from conftest import GEN, TINY_MODEL, Server

KEYED = os.path.join(GEN, "models", "llama-q6_k.gguf")
MSGS = [{"role": "user", "content": "Tell me a story about a lighthouse."}]


@pytest.fixture(scope="module")
def keyed():
    s = Server(KEYED, "--parallel", "2", "--ctx", "1024")
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def flagged():
    s = Server(KEYED, "--parallel", "2", "--ctx", "1024", "--temp", "0", "--min-p", "0.1")
    yield s
    assert s.stop() == 0


def defaults(srv):
    return httpx.get(srv.url + "/props", timeout=10).json()["default_sampling"]


def reply(srv, **fields):
    r = httpx.post(srv.url + "/v1/chat/completions",
                   json={"messages": MSGS, "max_tokens": 24, "ignore_eos": True, **fields}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]["content"]


def test_model_file_keys_are_the_defaults(keyed):
    d = defaults(keyed)
    assert (d["temperature"], d["top_k"], d["top_p"], d["min_p"]) == (0.25, 7, 0.5, 0.0), d
    # a request that sets nothing samples exactly as one that sets those
    assert reply(keyed, seed=5) == reply(keyed, seed=5, temperature=0.25, top_k=7, top_p=0.5)


def test_flags_win_over_the_model_file(flagged):
    d = defaults(flagged)
    assert (d["temperature"], d["top_k"], d["top_p"], d["min_p"]) == (0, 7, 0.5, 0.1), d
    assert reply(flagged, seed=1) == reply(flagged, seed=2) == reply(flagged, temperature=0)  # greedy


def test_a_request_field_wins_over_every_default(keyed, flagged):
    mine = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "seed": 3}
    assert reply(keyed, **mine) == reply(flagged, **mine)


def test_without_keys_or_flags_the_api_defaults_hold():
    s = Server(TINY_MODEL, "--parallel", "1", "--ctx", "512")
    try:
        d = defaults(s)
        assert (d["temperature"], d["top_k"], d["top_p"], d["min_p"], d["repetition_penalty"]) == (1, 0, 1, 0, 1), d
    finally:
        assert s.stop() == 0


def test_flag_out_of_range_is_refused():
    import subprocess
    from conftest import STRATA
    r = subprocess.run([STRATA, "serve", "-m", TINY_MODEL, "--temp", "3"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--temp" in r.stderr, r.stderr
