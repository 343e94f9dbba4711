"""Restoring from the disk tier while other requests run: the prefix is read
in the background while another stream decodes; both answers stay
bit-identical to a server without any cache."""
import concurrent.futures as cf
import random
import re
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


def cpu_level(server):
    """The kernel level a server runs at, from its log's "cpu (LEVEL)"."""
    with open(server.log.name) as f:
        m = re.search(r"cpu \((\w+)\)", f.read())
    return m[1] if m else None


def test_blocks_of_another_cpu_level_are_not_served(cache_dir):
    """The CPU's kernel levels give other bits (backend/README.md), so
    blocks one level wrote to a shared disk (or Redis) tier are another
    model's to a replica at another level: it prefills them itself, with
    its own cold bits, and the first level still finds its own blocks."""
    rng = random.Random(12)
    prompt = [rng.randrange(3, 500) for _ in range(700)]
    first = Server(TINY_MODEL, "--ctx", "2048", "--cache-dir", cache_dir)
    try:
        level = cpu_level(first)
        complete(first, prompt, 1)  # its blocks go to disk
    finally:
        assert first.stop() == 0
    lower = {"avx512": "avx2", "avx2": "scalar"}.get(level)
    if lower is None:
        pytest.skip(f"the CPU runs only the {level} level: no other level to share a tier with")
    cold = Server(TINY_MODEL, "--ctx", "2048", "--no-prefix-cache", env={"STRATA_CPU": lower})
    try:
        want = complete(cold, prompt, 4)
    finally:
        assert cold.stop() == 0
    other = Server(TINY_MODEL, "--ctx", "2048", "--cache-dir", cache_dir, env={"STRATA_CPU": lower})
    try:
        assert cpu_level(other) == lower
        got = complete(other, prompt, 4)
    finally:
        assert other.stop() == 0
    assert got[2]["strata_cache"]["disk_tokens"] == 0, got[2]
    assert got[:2] == want[:2]
    again = Server(TINY_MODEL, "--ctx", "2048", "--cache-dir", cache_dir)
    try:
        back = complete(again, prompt, 1)
    finally:
        assert again.stop() == 0
    assert back[2]["strata_cache"]["disk_tokens"] >= 640, back[2]
