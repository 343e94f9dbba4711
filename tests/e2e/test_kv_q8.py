"""K/V stored as q8_0 (--kv-type q8_0): a hit from every tier (live pool,
disk after a restart, Redis on another replica) is bit-identical to a
cold q8_0 server, blocks take 17/32 of the f16 bytes on disk and on Redis
(q4_0: a disk hit too, 9/32 the bytes),
and blocks of the other type are never served: a disk tier written with
f16 is reported and skipped, and an f16 replica on the same Redis finds
nothing of the q8_0 one. (On the CPU the RAM tier is the live pool's own
memory, so the live hit covers it.)"""
import os
import random
import shutil
import subprocess
import tempfile

import httpx
import pytest

from conftest import GEN, ROOT, STRATA, TINY_MODEL, Server
from test_redis_tier import Redis, complete, metrics, resp, wait_metric

Q8 = ("--kv-type", "q8_0")
BASE = ("--parallel", "2", "--ctx", "2048")


def prompts(seed, n_first=640, n_more=100):
    rng = random.Random(seed)
    first = [rng.randrange(3, 500) for _ in range(n_first)]
    return first, first + [rng.randrange(3, 500) for _ in range(n_more)]


@pytest.fixture(scope="module")
def cold():
    """A server without a cache for each KV type: the references."""
    servers = {t: Server(TINY_MODEL, *BASE, "--no-prefix-cache", "--kv-type", t) for t in ("f16", "q8_0", "q4_0")}
    yield servers
    assert all(s.stop() == 0 for s in servers.values())


@pytest.fixture
def cache_dir():
    d = tempfile.mkdtemp(prefix="strata-kvq-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def block_file_sizes(d):
    return sorted({os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs if f.endswith(".kv")})


def test_q8_0_differs_from_f16_but_a_live_hit_equals_its_cold_run(cold):
    turn1, turn2 = prompts(1)
    want = complete(cold["q8_0"].url, turn2)
    assert want[1] != complete(cold["f16"].url, turn2)[1], "q8_0 K/V gave f16's logprobs: not in effect"
    s = Server(TINY_MODEL, *BASE, *Q8)
    try:
        props = httpx.get(s.url + "/props", timeout=10).json()["cache"]
        f16_props = httpx.get(cold["f16"].url + "/props", timeout=10).json()["cache"]
        assert props["kv_type"] == "q8_0" and f16_props["kv_type"] == "f16"
        assert props["kv_bytes_per_token"] * 32 == f16_props["kv_bytes_per_token"] * 17, (props, f16_props)
        complete(s.url, turn1)
        got = complete(s.url, turn2)
        assert got[2]["strata_cache"]["live_tokens"] >= 640, got[2]
        assert got[:2] == want[:2]
    finally:
        assert s.stop() == 0


@pytest.mark.parametrize("kv,halves", [("q8_0", 17), ("q4_0", 9)])
def test_quantized_disk_hit_after_restart_equals_cold_and_files_are_smaller(cold, cache_dir, kv, halves):
    turn1, turn2 = prompts(2)
    want = complete(cold[kv].url, turn2)
    assert want[1] != complete(cold["f16"].url, turn2)[1]
    for _ in range(2):  # first run writes turn1's blocks, the restarted one reads them
        s = Server(TINY_MODEL, *BASE, "--kv-type", kv, "--cache-dir", cache_dir)
        try:
            got = complete(s.url, turn2 if _ else turn1)
        finally:
            assert s.stop() == 0
    assert got[2]["strata_cache"]["disk_tokens"] >= 640, got[2]
    assert got[:2] == want[:2]
    # The same prompt's blocks written by an f16 server: 32/17 (32/9) the payload.
    f16_dir = tempfile.mkdtemp(prefix="strata-kvq-f16-")
    try:
        s = Server(TINY_MODEL, *BASE, "--cache-dir", f16_dir)
        try:
            complete(s.url, turn1)
        finally:
            assert s.stop() == 0
        q8_size, f16_size = max(block_file_sizes(cache_dir)), max(block_file_sizes(f16_dir))
        hdr = 136 + 4 * 64 + 4  # disk_file.h: header, token ids, CRC
        assert (q8_size - hdr) * 32 == (f16_size - hdr) * halves, (q8_size, f16_size)
    finally:
        shutil.rmtree(f16_dir, ignore_errors=True)


def test_disk_tier_of_the_other_kv_type_is_reported_and_never_served(cold, cache_dir):
    turn1, turn2 = prompts(3)
    s = Server(TINY_MODEL, *BASE, "--cache-dir", cache_dir)  # f16
    try:
        complete(s.url, turn1)
    finally:
        assert s.stop() == 0
    s = Server(TINY_MODEL, *BASE, *Q8, "--cache-dir", cache_dir)
    try:
        got = complete(s.url, turn2)
    finally:
        assert s.stop() == 0
    log = open(s.log.name).read()
    assert "hold KV type f16, not this server's q8_0" in log, log[-2000:]
    assert got[2]["strata_cache"]["disk_tokens"] == 0, got[2]
    assert got[:2] == complete(cold["q8_0"].url, turn2)[:2]


def test_q8_0_redis_hit_on_another_replica_equals_cold_and_f16_finds_none(cold):
    turn1, turn2 = prompts(4)
    r = Redis()
    reps = []
    try:
        a = Server(TINY_MODEL, *BASE, *Q8, "--cache-redis", r.url)
        reps.append(a)
        complete(a.url, turn1)
        wait_metric(a, "strata_redis_writes_total", 10)  # 640 tokens + 8 generated: 10 whole blocks
        b = Server(TINY_MODEL, *BASE, *Q8, "--cache-redis", r.url)
        reps.append(b)
        got = complete(b.url, turn2)
        assert got[2]["strata_cache"]["redis_tokens"] == 640, got[2]
        assert got[:2] == complete(cold["q8_0"].url, turn2)[:2]
        c = Server(TINY_MODEL, *BASE, "--cache-redis", r.url)  # f16: other block names
        reps.append(c)
        got = complete(c.url, turn2)
        assert got[2]["strata_cache"]["redis_tokens"] == 0, got[2]
        assert metrics(c)["strata_redis_rejected_total"] == 0
        assert got[:2] == complete(cold["f16"].url, turn2)[:2]
        wait_metric(c, "strata_redis_writes_total", 10)
        # Both types' whole blocks now sit in Redis: q8_0 values carry 17/32 the payload.
        sizes = {}
        for k in resp(r.port, "KEYS", "strata:kv:*"):
            v = resp(r.port, "GET", k)
            if int.from_bytes(v[16:20], "little") == 64:  # whole blocks (disk_file.h: n_tokens at 16)
                sizes.setdefault(int.from_bytes(v[12:16], "little"), set()).add(len(v))
        hdr = 136 + 4 * 64 + 4
        (q8_len,), (f16_len,) = sizes[3], sizes[1]  # kv dtype: 3 = q8_0, 1 = f16
        assert (q8_len - hdr) * 32 == (f16_len - hdr) * 17, sizes
    finally:
        for s in reps:
            assert s.stop() == 0
        r.stop()


GEMMA3 = os.environ.get("STRATA_GEMMA3_MODEL", os.path.join(ROOT, "models", "gemma-3-270m-q4_k_m.gguf"))
QWEN35 = os.path.join(GEN, "models", "qwen35-f32.gguf")


SYSTEM = " ".join(f"rule {i}: answer briefly and cite source {i * 7}." for i in range(40))


def chat(server, user):
    r = httpx.post(server.url + "/v1/chat/completions", timeout=120, json={
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}], "max_tokens": 8,
        "temperature": 0, "logprobs": True, "top_logprobs": 2})
    assert r.status_code == 200, r.text
    j = r.json()
    return j["choices"][0]["message"]["content"], j["choices"][0]["logprobs"], j["usage"]


@pytest.mark.parametrize("model", [GEMMA3, QWEN35], ids=["gemma3-sliding", "qwen35-hybrid"])
def test_q8_0_disk_hit_equals_cold_on_sliding_and_hybrid_models(model, cache_dir):
    """A system prompt of 580-1,200 tokens from disk after a restart: on Gemma 3
    past its 512-position window (the window's blocks come back from
    disk), on qwen35 the attention layers' q8_0 K/V with the recurrent
    state's snapshot at the message boundary."""
    if not os.path.exists(model):
        pytest.skip(f"{model} not there (make model-gemma3 / make testdata)")
    run = (*BASE, "--cache-block-tokens", "16", *Q8)
    c = Server(model, *run, "--no-prefix-cache")
    try:
        want = chat(c, "what is rule 9?")
    finally:
        assert c.stop() == 0
    for user in ("what is rule 3?", "what is rule 9?"):
        s = Server(model, *run, "--cache-dir", cache_dir)
        try:
            got = chat(s, user)
        finally:
            assert s.stop() == 0
    assert got[2]["strata_cache"]["disk_tokens"] >= got[2]["prompt_tokens"] - 32 > 512, got[2]
    assert got[:2] == want[:2]


def test_bad_kv_type_is_a_clear_error():
    for cmd in (["serve", "-m", TINY_MODEL, "--port", "18599"], ["run", "-m", TINY_MODEL, "-p", "hi"],
                ["bench", "-m", TINY_MODEL, "-p", "8", "-n", "1"]):
        p = subprocess.run([STRATA, *cmd, "--kv-type", "q4_1"], capture_output=True, text=True, timeout=60)
        assert p.returncode != 0
        assert "--kv-type q4_1: unknown (f16, q8_0 or q4_0)" in p.stderr + p.stdout, (cmd, p.stderr)
