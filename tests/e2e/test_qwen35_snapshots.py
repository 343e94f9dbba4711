"""qwen35 (hybrid recurrent) with the prefix cache: recurrent-state
snapshots in the block store (issue 11, items 4-6), for the dense qwen35
and the mixture-of-experts qwen35moe (every test runs on both; MODELS).

The tiny generated models run with small blocks (16 tokens) so a short
conversation crosses many block boundaries. Every test compares against a
server with the prefix cache off: greedy output must be byte-identical on
every turn (cache on, off, after a restart, and on a branch; the cold
server is sent every turn too, so both splice the replies' exact tokens
back into the next prompt and see the same tokens), and the
--trace line says where each request resumed (`snapshot.restored`), from
which tier, and where it stored snapshots (`snapshot.stored`).
"""
import contextlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time

import httpx
import pytest

from conftest import GEN, STRATA, Server, free_port

# Each test runs once per model (the tmp fixture's params).
MODELS = ["qwen35-f32", "qwen35moe-q4_k_m"]
SYSTEM = ("You are a coding agent. Tools: read_file(path), run(cmd), grep(pattern). "
          "Answer with one tool call per turn, then a summary.")


class Workdir(str):
    """The module's temporary folder, carrying the model its tests run."""
    model = None


def model_path(name):
    path = os.path.join(GEN, "models", name + ".gguf")
    if not os.path.exists(path):
        pytest.skip(f"tiny {name} model not generated (make testdata)")
    return path


def start(tmp, name, *extra):
    trace = os.path.join(tmp, name + ".jsonl")
    srv = Server(tmp.model, "--parallel", "2", "--ctx", "4096", "--cache-block-tokens", "16", "--trace", trace,
                 *extra)
    srv.trace = trace
    return srv


def last_trace(srv):
    with open(srv.trace) as f:
        return json.loads(f.read().strip().splitlines()[-1])


def chat(srv, msgs, n=10, logprobs=False):
    body = {"messages": msgs, "max_tokens": n, "temperature": 0}
    if logprobs:
        body.update(logprobs=True, top_logprobs=5)
    r = httpx.post(srv.url + "/v1/chat/completions", timeout=120, json=body)
    r.raise_for_status()
    choice = r.json()["choices"][0]
    choice["message"].setdefault("content", "")  # a reply that ends at once has none
    if logprobs:  # every generated token's top-5 logprobs: equal floats mean equal logits rows
        return choice["message"]["content"], last_trace(srv), choice["logprobs"]
    return choice["message"]["content"], last_trace(srv)


def end_of(tr):
    """Tokens the sequence held at the end: the prompt and every generated
    token but the last one sampled (never fed back)."""
    fed = tr["generated_tokens"] - (1 if tr["finish"] == "length" else 0)
    return tr["prompt_tokens"] + fed


def user_turn(i):
    return f"Tool result {i}: " + " ".join(f"line{i}_{k}" for k in range(3 + i % 4))


@contextlib.contextmanager
def workdir(name):
    """A temporary Workdir for the generated model `name` (skips when it
    was not generated)."""
    path = model_path(name)
    with tempfile.TemporaryDirectory(prefix="strata-cache-") as d:
        w = Workdir(d)
        w.model = path
        yield w


@pytest.fixture(scope="module", params=MODELS)
def tmp(request):
    with workdir(request.param) as w:
        yield w


@pytest.fixture(scope="module")
def cold(tmp):
    s = start(tmp, "cold", "--no-prefix-cache")
    yield s
    assert s.stop() == 0


def next_turn(warm, cold, msgs, i):
    """Agent turn i on warm, whose reply text and logprobs must be the
    cache-off server's; returns the text and warm's trace."""
    msgs.append({"role": "user", "content": user_turn(i)})
    text, tr, lp = chat(warm, msgs, logprobs=True)
    ref, _, ref_lp = chat(cold, msgs, logprobs=True)
    assert text == ref, f"turn {i}: cache on differs from cache off"
    assert lp == ref_lp, f"turn {i}: logprobs differ from cache off"
    return text, tr


def test_agent_loop_12_turns_prefills_only_new_tokens(tmp, cold):
    """(b) Each turn after the first resumes at the previous turn's end and
    prefills only what came after it; output equals the cache-off run."""
    warm = start(tmp, "loop", "--cache-snapshot-blocks", "4")
    try:
        msgs, prev, prefilled = [{"role": "system", "content": SYSTEM}], None, []
        for i in range(12):
            text, tr = next_turn(warm, cold, msgs, i)
            snap = tr["snapshot"]
            if prev is None:
                assert snap["restored"] == 0 and tr["prefilled_tokens"] == tr["prompt_tokens"]
            else:
                assert snap["restored"] == end_of(prev), f"turn {i}: resumed at {snap['restored']}, not turn {i - 1}'s end"
                assert snap["from"] == "live"
                assert tr["prefilled_tokens"] == tr["prompt_tokens"] - end_of(prev)
            assert tr["prompt_tokens"] in snap["stored"], "no snapshot at the prompt's end"
            prefilled.append(tr["prefilled_tokens"])
            prev = tr
            msgs.append({"role": "assistant", "content": text})
        print("prefilled per turn:", prefilled, "prompt tokens at turn 12:", prev["prompt_tokens"])
        assert sum(prefilled[1:]) < prev["prompt_tokens"]
        m = warm.metrics()
        assert m["strata_cache_snapshots_restored_total"] == 11
        assert m["strata_cache_snapshot_bytes"] > 0 and m["strata_cache_snapshots"] > 0
        print("snapshots:", m["strata_cache_snapshots"], "bytes in memory:", m["strata_cache_snapshot_bytes"])
    finally:
        assert warm.stop() == 0


def turns_then_stop(tmp, cold, n, *flags):
    """n agent turns on a fresh server started with flags, each reply the
    cache-off server's too; stops it (its blocks go to disk). Returns the
    conversation and the last turn's trace."""
    msgs = [{"role": "system", "content": SYSTEM}]
    srv = start(tmp, "before", *flags)
    try:
        for i in range(n):
            msgs.append({"role": "user", "content": user_turn(i)})
            text, prev = chat(srv, msgs)
            assert text == chat(cold, msgs)[0]  # and cold remembers the reply's exact tokens too
            msgs.append({"role": "assistant", "content": text})
    finally:
        assert srv.stop() == 0
    return msgs, prev


def test_restart_resumes_from_disk(tmp, cold):
    """(c) After a restart the blocks and the snapshot come from disk."""
    cache = os.path.join(tmp, "kv-restart")
    msgs, prev = turns_then_stop(tmp, cold, 3, "--cache-dir", cache)
    assert any(f.endswith(".rs") for _, _, fs in os.walk(cache) for f in fs), "no snapshot file on disk"
    msgs.append({"role": "user", "content": user_turn(3)})
    srv = start(tmp, "after", "--cache-dir", cache)
    try:
        text, tr = chat(srv, msgs)
    finally:
        assert srv.stop() == 0
    assert text == chat(cold, msgs)[0]
    assert tr["snapshot"]["restored"] == end_of(prev) and tr["snapshot"]["from"] == "disk"
    assert tr["cached_tokens"]["disk"] > 0
    assert tr["prefilled_tokens"] == tr["prompt_tokens"] - end_of(prev)
    stat = subprocess.run([STRATA, "cache", "stat", "--cache-dir", cache], capture_output=True, text=True, check=True)
    n_snap = int(next(l for l in stat.stdout.splitlines() if l.startswith("snapshots")).split()[1])
    assert n_snap > 0, stat.stdout
    ls = subprocess.run([STRATA, "cache", "ls", "--cache-dir", cache], capture_output=True, text=True, check=True)
    assert f"{n_snap} recurrent-state snapshots" in ls.stdout, ls.stdout
    subprocess.run([STRATA, "cache", "purge", "--cache-dir", cache], capture_output=True, check=True)
    assert not any(f.endswith(".rs") for _, _, fs in os.walk(cache) for f in fs), "purge left snapshots"


def complete(srv, prompt, n):
    r = httpx.post(srv.url + "/v1/completions", timeout=120,
                   json={"prompt": prompt, "max_tokens": n, "temperature": 0})
    r.raise_for_status()
    return r.json()["choices"][0]["text"], last_trace(srv)


def test_snapshot_at_exact_end_of_prefill_is_stored_and_hit(tmp, cold):
    """(d) The prompt's end is a snapshot position even where no block
    ends and the prefill chunk would not be cut: request 1 stores it,
    request 2 (the same prompt continued differently) resumes there."""
    srv = start(tmp, "end", "--cache-snapshot-blocks", "0")
    try:
        a = "The quick brown fox jumps over the lazy dog and keeps running far away"
        text, t1 = complete(srv, a, 4)
        assert t1["prompt_tokens"] % 16 != 0
        assert t1["snapshot"]["stored"] == [t1["prompt_tokens"], end_of(t1)], t1["snapshot"]
        b = a + " zebra"
        assert not text.startswith(" zebra")
        text2, t2 = complete(srv, b, 4)
        assert t2["snapshot"]["restored"] == t1["prompt_tokens"], t2["snapshot"]
        assert t2["prefilled_tokens"] == t2["prompt_tokens"] - t1["prompt_tokens"]
        assert text2 == complete(cold, b, 4)[0]
    finally:
        assert srv.stop() == 0


def test_branch_restores_the_earlier_boundary(tmp, cold):
    """(e) A branch back to an earlier message boundary resumes at the
    snapshot there, not at a later one of the abandoned branch: back to
    turn 2's start (turn 1's end), and back to the system prompt's end."""
    srv = start(tmp, "branch", "--cache-snapshot-blocks", "0")
    try:
        msgs, trs = [{"role": "system", "content": SYSTEM}], []
        for i in range(3):
            msgs.append({"role": "user", "content": user_turn(i)})
            text, tr = chat(srv, msgs)
            assert text == chat(cold, msgs)[0]  # and cold remembers the reply's exact tokens too
            msgs.append({"role": "assistant", "content": text})
            trs.append(tr)
        first = trs[0]["snapshot"]["stored"]
        print("turn 1 stored", first, "turn 2 stored", trs[1]["snapshot"]["stored"])
        cases = [(msgs[:3] + [{"role": "user", "content": "Never mind: grep for TODO instead."}], end_of(trs[0])),
                 (msgs[:1] + [{"role": "user", "content": "Start over: what tools do you have?"}], first[0])]
        for branch, want in cases:
            text, tr = chat(srv, branch)
            assert text == chat(cold, branch)[0]
            got = tr["snapshot"]["restored"]
            assert got == want, (got, want, tr["snapshot"])
            assert tr["prefilled_tokens"] == tr["prompt_tokens"] - got
        assert 0 < first[0] < trs[0]["prompt_tokens"]
    finally:
        assert srv.stop() == 0


def redis_up(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as c:
            c.sendall(b"PING\r\n")
            return c.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@contextlib.contextmanager
def redis_server():
    """A private redis-server on a free loopback port (the test skips when
    none is installed); yields the port, stops it after."""
    if not shutil.which("redis-server"):
        pytest.skip("redis-server not installed")
    port = free_port()
    rdir = tempfile.mkdtemp(prefix="strata-redis-")
    redis = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", rdir],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 10
        while not redis_up(port) and time.time() < deadline:
            time.sleep(0.05)
        yield port
    finally:
        redis.terminate()
        redis.wait(timeout=10)
        shutil.rmtree(rdir, ignore_errors=True)


def on_fresh_replicas(tmp, flags, prompts, n=6):
    """Each prompt on a replica of its own (started with flags, stopped
    after, which drains its write queue): [(text, trace), ...]."""
    out = []
    for i, prompt in enumerate(prompts):
        srv = start(tmp, f"replica-{i}", *flags)
        try:
            out.append(complete(srv, prompt, n))
        finally:
            assert srv.stop() == 0
    return out


def test_shared_tier_replica_resumes_from_redis(tmp, cold):
    """Snapshots are written through to Redis like blocks: a second
    replica (empty memory, no disk) resumes a prompt that extends one the
    first replica served at the snapshot the first stored at that
    prompt's end, read from Redis, with the cache-off bytes. (Raw
    completions: a chat would differ on the second replica anyway, since
    replies' exact tokens are remembered per server.)"""
    x = SYSTEM + " The first task: find every TODO in the tree and list the files."
    y = x + " Then open each one"
    with redis_server() as port:
        shared = ("--cache-redis", f"redis://127.0.0.1:{port}", "--no-cache-disk")
        (_, t1), (text, t2) = on_fresh_replicas(tmp, shared, [x, y])
        assert t1["prompt_tokens"] in t1["snapshot"]["stored"]
        assert text == complete(cold, y, 6)[0]
        assert t2["snapshot"]["restored"] == t1["prompt_tokens"] and t2["snapshot"]["from"] == "redis", t2["snapshot"]
        assert t2["cached_tokens"]["redis"] >= t1["prompt_tokens"]
        assert t2["prefilled_tokens"] == t2["prompt_tokens"] - t1["prompt_tokens"]
        # damaged values: rejected, deleted, never loaded; the request is computed
        cli = ["redis-cli", "-p", str(port)]
        keys = subprocess.run([*cli, "--scan", "--pattern", "strata:rs:*"], capture_output=True, text=True,
                              check=True).stdout.split()
        assert keys
        for k in keys:
            subprocess.run([*cli, "SETRANGE", k, "200", "XXXX"], capture_output=True, check=True)
        c = start(tmp, "replica-c", *shared)
        try:
            text, t3 = complete(c, y, 6)
            m = c.metrics()
        finally:
            assert c.stop() == 0
        assert text == complete(cold, y, 6)[0]
        assert t3["snapshot"]["restored"] == 0 and t3["prefilled_tokens"] == t3["prompt_tokens"], t3["snapshot"]
        assert m["strata_redis_rejected_total"] >= 1
