"""The shared KV tier on Redis, with a real redis-server and HAProxy on
loopback (installed by scripts/install-deps.sh --test).

- A session served by one replica continues on another, through HAProxy,
  with its prefix restored from Redis: usage says which tokens came from
  the redis tier, and the reply is bit-identical to a cold server's.
- Redis killed mid-run loses no request, is counted, and a Redis restarted
  empty is reconnected to and written again.
- A forged value under a real key is rejected, counted and never loaded.
- A session continuing on another replica gets its partial last block
  (the tail) from Redis too, bit-identical to a cold server.
- Keys expire: unmarked ones after --cache-redis-ttl, an anchor's (the
  system prompt's blocks) and an Anthropic cache_control ttl's blocks
  after their longer retention.
"""
import concurrent.futures as cf
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import httpx
import pytest

from conftest import ROOT, STRATA, TINY_MODEL, Server, free_port

REDIS = shutil.which("redis-server")
HAPROXY = shutil.which("haproxy") or (os.path.exists("/usr/sbin/haproxy") and "/usr/sbin/haproxy")
# Not skipped when missing: `make test` installs both (scripts/install-deps.sh --test).
assert REDIS and HAPROXY, "redis-server and haproxy are needed: run scripts/install-deps.sh --test"


# ---- a minimal RESP client (no Python package needed) ----

def resp(port, *args):
    """Sends one command, returns its reply (bytes, int, list, None; errors raise)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        s.sendall(out)
        f = s.makefile("rb")
        return read_reply(f)


def read_reply(f):
    line = f.readline()
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest
    if kind == b"-":
        raise RuntimeError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        return None if n < 0 else f.read(n + 2)[:-2]
    if kind == b"*":
        return [read_reply(f) for _ in range(int(rest))]
    raise RuntimeError(f"bad reply {line!r}")


class Redis:
    """redis-server with the shipped deploy/redis.conf, on a free port."""

    def __init__(self, port=None, maxmemory="256mb", policy=None):
        self.port = port or free_port()
        self.dir = tempfile.mkdtemp(prefix="strata-redis-")
        extra = ["--maxmemory-policy", policy] if policy else []
        self.proc = subprocess.Popen([REDIS, os.path.join(ROOT, "deploy", "redis.conf"), "--port", str(self.port),
                                      "--dir", self.dir, "--maxmemory", maxmemory, *extra],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                if resp(self.port, "PING") == b"PONG":
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not answer PING in 10 s")

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}"

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def redis():
    r = Redis()
    yield r
    r.stop()


def complete(url, tokens, max_tokens=8, headers=None):
    r = httpx.post(url + "/v1/completions", timeout=120, headers=headers or {},
                   json={"prompt": tokens, "max_tokens": max_tokens, "temperature": 0, "logprobs": 2})
    assert r.status_code == 200, r.text
    j = r.json()
    return j["choices"][0]["text"], j["choices"][0]["logprobs"], j["usage"]


def metrics(server):
    out = {}
    for line in httpx.get(server.url + "/metrics", timeout=5).text.splitlines():
        if line and not line.startswith("#"):
            k, v = line.split()
            out[k] = float(v)
    return out


def wait_metric(server, name, at_least, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if metrics(server).get(name, 0) >= at_least:
            return
        time.sleep(0.05)
    raise AssertionError(f"{name} stayed below {at_least}: {metrics(server)}")


def replica(redis_url, *extra):
    return Server(TINY_MODEL, "--parallel", "2", "--ctx", "2048", "--cache-redis", redis_url, *extra)


def prompts(seed, n_first=640, n_more=100):
    rng = random.Random(seed)
    first = [rng.randrange(3, 500) for _ in range(n_first)]
    return first, first + [rng.randrange(3, 500) for _ in range(n_more)]


def chain_order(port, block_tokens=64):
    """Keys of one chain of whole blocks, first block first, from the
    values' own headers (token count at byte 16, block hash at byte 64,
    parent hash at byte 96: disk_file.h); tails are left out."""
    parent_of = {}
    for k in resp(port, "KEYS", "strata:kv:*"):
        v = resp(port, "GET", k)
        if int.from_bytes(v[16:20], "little") == block_tokens:
            parent_of[v[64:96]] = (v[96:128], k)
    first = [h for h, (p, _) in parent_of.items() if p not in parent_of]
    assert len(first) == 1
    by_parent = {p: h for h, (p, _) in parent_of.items()}
    order, h = [], first[0]
    while h is not None:
        order.append(parent_of[h][1])
        h = by_parent.get(h)
    return order


@pytest.fixture(scope="module")
def cold():
    s = Server(TINY_MODEL, "--parallel", "2", "--ctx", "2048", "--no-prefix-cache")
    yield s
    assert s.stop() == 0


class HAProxy:
    """The shipped deploy/haproxy.cfg, ports from the environment."""

    def __init__(self, ports):
        self.port = free_port()
        env = dict(os.environ, STRATA_LB_PORT=str(self.port), STRATA_PORT_A=str(ports[0]),
                   STRATA_PORT_B=str(ports[1]), STRATA_PORT_C=str(ports[2]))
        self.proc = subprocess.Popen([HAPROXY, "-db", "-f", os.path.join(ROOT, "deploy", "haproxy.cfg")], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.05)
        raise RuntimeError("haproxy did not come up in 10 s")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)


def test_session_moves_to_another_replica_with_its_prefix_from_redis(redis, cold):
    turn1, turn2 = prompts(1)
    want = complete(cold.url, turn2)
    reps = [replica(redis.url) for _ in range(3)]
    lb = None
    try:
        lb = HAProxy([r.port for r in reps])
        sess = {"x-session-id": "session-42"}
        complete(lb.url, turn1, headers=sess)
        home = [r for r in reps if metrics(r)["strata_requests_total"] == 1]
        assert len(home) == 1, "one replica serves the session"
        home = home[0]
        wait_metric(home, "strata_redis_writes_total", 10)  # 640 tokens + 8 generated: 10 whole blocks
        # The same session again stays where it is (its live KV is there).
        assert complete(lb.url, turn1, headers=sess)[2]["strata_cache"]["live_tokens"] >= 576
        assert metrics(home)["strata_requests_total"] == 2
        home.proc.kill()  # the replica dies; HAProxy retries on another one
        home.proc.wait()
        got = complete(lb.url, turn2, headers=sess)
        cache = got[2]["strata_cache"]
        assert cache["redis_tokens"] == 640 and cache["live_tokens"] == 0 and cache["disk_tokens"] == 0, got[2]
        assert got[2]["prompt_tokens_details"]["cached_tokens"] == 640
        assert got[:2] == want[:2], "restored from Redis: bit-identical to a cold server"
        served = [r for r in reps if r is not home and metrics(r)["strata_requests_total"] == 1]
        assert len(served) == 1 and metrics(served[0])["strata_redis_hits_total"] == 10
    finally:
        if lb:
            lb.stop()
        for r in reps:
            if r.proc.poll() is None:
                assert r.stop() == 0
            else:
                r.log.close()
                shutil.rmtree(r.tmp_cache, ignore_errors=True)


def test_redis_killed_mid_run_loses_no_request_and_comes_back(cold):
    r = Redis()
    port = r.port
    a = replica(r.url, "--cache-redis-timeout-ms", "100")
    try:
        rng = random.Random(7)
        jobs = [[rng.randrange(3, 500) for _ in range(200 + 30 * i)] for i in range(12)]
        with cf.ThreadPoolExecutor(2) as pool:
            futs = [pool.submit(complete, a.url, p, 4) for p in jobs[:6]]
            r.stop(signal.SIGKILL)  # dies while requests run and writes are queued
            futs += [pool.submit(complete, a.url, p, 4) for p in jobs[6:]]
            t0 = time.time()
            results = [f.result() for f in futs]  # every request answers (asserted 200 inside)
        assert len(results) == 12 and time.time() - t0 < 60
        m = metrics(a)
        assert m["strata_redis_up"] == 0 and m["strata_redis_errors_total"] >= 1, m
        # The same prompt again is served from the local tiers meanwhile.
        assert complete(a.url, jobs[0], 4)[:2] == complete(cold.url, jobs[0], 4)[:2]
        r = Redis(port)  # restarted empty, same address
        before = m["strata_redis_writes_total"]
        fresh = prompts(8, 320, 0)[0]
        deadline = time.time() + 15  # reconnects after its backoff (at most 5 s)
        while metrics(a)["strata_redis_writes_total"] <= before and time.time() < deadline:
            complete(a.url, fresh + [rng.randrange(3, 500) for _ in range(70)], 1)
            time.sleep(0.2)
        assert metrics(a)["strata_redis_writes_total"] > before, metrics(a)
        assert metrics(a)["strata_redis_up"] == 1
        assert resp(r.port, "DBSIZE") > 0
    finally:
        assert a.stop() == 0
        r.stop()
    with open(a.log.name) as f:
        warnings = [l for l in f if "redis cache" in l and "warned once" in l]
    assert len(warnings) == 1, warnings


def test_forged_value_under_a_real_key_is_rejected_and_not_loaded(redis, cold):
    turn1, turn2 = prompts(3)
    want = complete(cold.url, turn2)
    a = replica(redis.url)
    try:
        complete(a.url, turn1)
        wait_metric(a, "strata_redis_writes_total", 10)
    finally:
        assert a.stop() == 0
    chain = chain_order(redis.port)
    assert len(chain) == 10
    # Every value is verified: a well-formed block under another block's
    # key (a replay of a real value) and plain garbage are both refused.
    resp(redis.port, "SET", chain[3], resp(redis.port, "GET", chain[5]))
    resp(redis.port, "SET", chain[6], b"STRKV\0\0\1" + os.urandom(4000))
    b = replica(redis.url)
    try:
        got = complete(b.url, turn2)
        m = metrics(b)
        assert got[:2] == want[:2]
        assert m["strata_redis_rejected_total"] == 2 and m["strata_redis_hits_total"] == 8, m
        # Nothing rejected was loaded: the prefix stops at the first forged
        # block (the blocks after it are read but cannot be attached).
        assert got[2]["strata_cache"]["redis_tokens"] == 3 * 64, got[2]
    finally:
        assert b.stop() == 0  # drains its write queue
    # The rejected values were deleted, and the blocks B computed itself
    # were written in their place: the key's value now names its own block.
    for k in (chain[3], chain[6]):
        assert resp(redis.port, "GET", k)[64:96].hex() == k.decode()[len("strata:kv:"):]


def test_haproxy_keeps_a_session_by_its_key_in_the_body(redis):
    """OpenAI's prompt_cache_key and Anthropic's metadata.user_id route like
    the header: every request of one key lands on one replica."""
    reps = [replica(redis.url) for _ in range(3)]
    lb = None
    try:
        lb = HAProxy([r.port for r in reps])
        for i, (path, body) in enumerate([
                ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
                                          "prompt_cache_key": "agent-7"}),
                ("/v1/messages", {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
                                  "metadata": {"user_id": "user-3"}})]):
            before = [metrics(r)["strata_requests_total"] for r in reps]
            for _ in range(4):
                assert httpx.post(lb.url + path, json=body, timeout=60).status_code == 200
            after = [metrics(r)["strata_requests_total"] for r in reps]
            assert sorted(a - b for a, b in zip(after, before)) == [0, 0, 4], (path, before, after)
    finally:
        if lb:
            lb.stop()
        for r in reps:
            assert r.stop() == 0


@pytest.mark.parametrize("policy", ["noeviction", "allkeys-lru"])
def test_full_or_evicting_redis_costs_only_cache_hits(cold, policy):
    # 2 MB holds about one session's blocks: noeviction refuses further writes
    # (OOM errors), allkeys-lru evicts earlier sessions. Either way every reply
    # equals a cold server's, nothing wrong is loaded, and serving goes on.
    r = Redis(maxmemory="2mb", policy=policy)
    s = replica(r.url, "--no-cache-disk", "--cache-mem-mb", "1")
    try:
        sessions = [prompts(100 + k) for k in range(4)]
        for turn1, _ in sessions:
            assert complete(s.url, turn1)[:2] == complete(cold.url, turn1)[:2]
        time.sleep(1)
        m = metrics(s)
        if policy == "noeviction":
            assert m.get("strata_redis_errors_total", 0) + m.get("strata_redis_dropped_writes_total", 0) > 0, m
        else:
            stats = resp(r.port, "INFO", "stats").decode()
            assert int(stats.split("evicted_keys:")[1].split()[0]) > 0, stats  # Redis did evict
        for turn1, turn2 in sessions:  # the live tier is 1 MB: earlier prefixes come from Redis, or are recomputed
            text, logprobs, usage = complete(s.url, turn2)
            assert (text, logprobs) == complete(cold.url, turn2)[:2], usage
        assert metrics(s).get("strata_redis_rejected_total", 0) == 0
    finally:
        assert s.stop() == 0
        r.stop()


def test_session_continues_on_another_replica_with_its_tail_from_redis(redis, cold):
    rng = random.Random(11)
    turn1 = [rng.randrange(3, 500) for _ in range(672)]  # 10 whole blocks and 32 tokens
    turn2 = turn1 + [rng.randrange(3, 500) for _ in range(100)]
    want = complete(cold.url, turn2)
    a = replica(redis.url)
    try:
        complete(a.url, turn1)  # 672 + 8 generated: a 40-token tail under block 9
        wait_metric(a, "strata_redis_writes_total", 11)
    finally:
        assert a.stop() == 0
    assert len(resp(redis.port, "KEYS", "strata:tails:*")) == 1
    b = replica(redis.url)
    try:
        got = complete(b.url, turn2)
        cache = got[2]["strata_cache"]
        # 640 tokens of whole blocks and the 32 prompt tokens of the tail
        # (its 8 generated ones are not in turn 2): nothing from 672 on.
        assert cache["redis_tokens"] == 672 and cache["live_tokens"] == 0 and cache["disk_tokens"] == 0, got[2]
        assert got[2]["prompt_tokens_details"]["cached_tokens"] == 672
        assert got[:2] == want[:2], "whole blocks and tail from Redis: bit-identical to a cold server"
        m = metrics(b)
        assert m["strata_redis_tail_hits_total"] == 1 and m["strata_redis_hits_total"] == 11, m
        assert m.get("strata_redis_rejected_total", 0) == 0
    finally:
        assert b.stop() == 0


def test_keys_expire_unmarked_after_the_flag_and_anchors_later(redis):
    a = replica(redis.url, "--cache-redis-ttl", "120")
    system = " ".join(f"Rule {i}: answer briefly and cite the file you used." for i in range(6))
    user = " ".join(f"Step {i} of the plan touches module m{i}." for i in range(12))
    try:
        r = httpx.post(a.url + "/v1/chat/completions", timeout=120, json={
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "max_tokens": 4, "temperature": 0})
        assert r.status_code == 200, r.text
        n_prompt = r.json()["usage"]["prompt_tokens"]
        assert n_prompt > 5 * 64
        deadline = time.time() + 10
        while time.time() < deadline:
            chain = chain_order(redis.port) if resp(redis.port, "KEYS", "strata:kv:*") else []
            ttl = [resp(redis.port, "PTTL", k) for k in chain]
            if len(chain) == n_prompt // 64 and ttl[0] > 120000:
                break
            time.sleep(0.1)
        assert len(chain) == n_prompt // 64, (len(chain), n_prompt)
        # The anchor (system prompt, 1 h after its use) outlives the flag's
        # 120 s; the user's blocks past it get the flag's expiry.
        assert 3500000 < ttl[0] <= 3600000 and 3500000 < ttl[1] <= 3600000, ttl
        assert 0 < ttl[-1] <= 120000, ttl
        for k in resp(redis.port, "KEYS", "strata:tails:*"):
            assert 0 < resp(redis.port, "PTTL", k) <= 3600000
    finally:
        assert a.stop() == 0


def test_anthropic_cache_control_ttl_becomes_the_keys_expiry(redis):
    a = replica(redis.url, "--cache-redis-ttl", "60")
    text = lambda word, n: " ".join(f"{word} {i} of the plan touches module m{i}." for i in range(n))
    try:
        r = httpx.post(a.url + "/v1/messages", timeout=120, json={
            "model": "m", "max_tokens": 4, "temperature": 0, "system": text("Rule", 12),
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": text("Step", 12),
                                              "cache_control": {"type": "ephemeral", "ttl": "5m"}}]},
                {"role": "assistant", "content": "Done."},
                {"role": "user", "content": text("Next", 12)}]})
        assert r.status_code == 200, r.text
        deadline = time.time() + 10
        while time.time() < deadline:
            chain = chain_order(redis.port) if resp(redis.port, "KEYS", "strata:kv:*") else []
            ttl = [resp(redis.port, "PTTL", k) for k in chain]
            if ttl and ttl[0] > 60000 and any(t > 60000 and t <= 300000 for t in ttl):
                break
            time.sleep(0.1)
        # System prompt (anchor: 1 h), then the first user message (its
        # breakpoint: 5 min), then the rest (the flag: 60 s); each block
        # keeps the longest mark covering any of it.
        assert 3500000 < ttl[0] <= 3600000, ttl
        assert any(290000 < t <= 300000 for t in ttl), ttl
        assert 0 < ttl[-1] <= 60000, ttl
        assert all(x > y - 2000 for x, y in zip(ttl, ttl[1:])), ttl  # never longer further on
    finally:
        assert a.stop() == 0


def test_unusable_redis_at_start_warns_and_serves_unless_required(tmp_path):
    # A URL that does not parse, or a Redis nobody answers on: the server
    # says so and serves from memory and disk; --cache-redis-required turns
    # either into a start-up error naming the reason.
    dead = f"redis://127.0.0.1:{free_port()}"
    for url, why in (("nope://x", "expected redis://"), (dead, "Connection refused")):
        s = Server(TINY_MODEL, "--cache-dir", str(tmp_path / "c"), "--cache-redis", url)
        try:
            r = httpx.post(s.url + "/v1/completions", json={"prompt": "Hello", "max_tokens": 4, "temperature": 0},
                           timeout=60)
            assert r.status_code == 200 and r.json()["choices"][0]["text"] is not None
        finally:
            assert s.stop() == 0
        with open(s.log.name) as f:
            log = f.read()
        assert why in log and "warn" in log, log
        r = subprocess.run([STRATA, "serve", "-m", TINY_MODEL, "--port", "0", "--cache-dir",
                            str(tmp_path / "c"), "--cache-redis", url, "--cache-redis-required"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 1, r.stderr
        assert "--cache-redis-required" in r.stderr and (why in r.stderr or "not usable at start" in r.stderr), r.stderr
