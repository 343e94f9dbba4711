"""Restoring from the disk tier while other requests run: the prefix is read
in the background while another stream decodes; both answers stay
bit-identical to a server without any cache."""
import concurrent.futures as cf
import random
import shutil
import tempfile

import httpx
import pytest

from conftest import Server, TINY_MODEL


def complete(server, tokens, max_tokens):
    r = httpx.post(server.url + "/v1/completions", timeout=600,
                   json={"prompt": tokens, "max_tokens": max_tokens, "temperature": 0, "logprobs": 2})
    assert r.status_code == 200, r.text
    j = r.json()
    return j["choices"][0]["text"], j["choices"][0]["logprobs"], j["usage"]


@pytest.fixture(scope="module")
def cache_dir():
    d = tempfile.mkdtemp(prefix="strata-restore-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_disk_restore_overlaps_a_running_stream_and_changes_nothing(cache_dir):
    rng = random.Random(11)
    long_prompt = [rng.randrange(3, 500) for _ in range(6000)]
    other = [rng.randrange(3, 500) for _ in range(40)]
    cold = Server(TINY_MODEL, "--ctx", "8192", "--parallel", "2", "--no-prefix-cache")
    try:
        want_long, want_other = complete(cold, long_prompt, 4), complete(cold, other, 200)
    finally:
        assert cold.stop() == 0
    first = Server(TINY_MODEL, "--ctx", "8192", "--parallel", "2", "--cache-dir", cache_dir)
    try:
        complete(first, long_prompt, 1)  # its blocks go to disk
    finally:
        assert first.stop() == 0
    warm = Server(TINY_MODEL, "--ctx", "8192", "--parallel", "2", "--cache-dir", cache_dir)
    try:
        with cf.ThreadPoolExecutor(2) as pool:
            decoding = pool.submit(complete, warm, other, 200)
            restoring = pool.submit(complete, warm, long_prompt, 4)
            got_other, got_long = decoding.result(), restoring.result()
    finally:
        assert warm.stop() == 0
    assert got_long[2]["strata_cache"]["disk_tokens"] >= 5952, got_long[2]
    assert len(want_long[1]["token_logprobs"]) == 4 and len(want_long[1]["top_logprobs"][0]) == 2
    assert got_long[:2] == want_long[:2]
    assert got_other[:2] == want_other[:2]
