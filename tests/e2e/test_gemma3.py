"""Gemma 3 270M served end to end: the architecture, Gemma's chat format
(the GGUF has no template, so the built-in one), and the prefix cache on a
model with sliding-window layers: a prompt longer than the 512-token window
answered from the cache gives the same greedy text as cold; a 12-turn
agent loop prefills only each turn's new tokens, and after a restart on the
same --cache-dir the next turn resumes from disk with cold's text and
logprobs (issue 11, item 6 (a) and (c)).

Skipped without the model (`make model-gemma3`; `make test` fetches it)."""
import json
import os
import shutil
import tempfile

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


# ---- issue 11 item 6 (a), (c): an agent loop on the real model ---------------

LOOP_SYSTEM = ("You are a coding agent working in a C repository. Tools: read_file(path), run(cmd), "
               "grep(pattern). Think briefly, then answer with one tool call per turn.")


def loop_user(i):
    if i % 3 == 2:  # a tool result sent back as a user message
        return f"Tool result {i}:\n" + "\n".join(f"src/file_{i}_{k}.c:{k * 11}: TODO fix the cache path {k}"
                                                  for k in range(4 + i % 5))
    return f"Step {i}: look at src/module_{i}.c and tell me what to check next about its cache handling."


def loop_chat(srv, msgs, n=16):
    r = httpx.post(srv.url + "/v1/chat/completions", timeout=120, json={
        "messages": msgs, "temperature": 0, "max_tokens": n, "logprobs": True, "top_logprobs": 3})
    assert r.status_code == 200, r.text
    j = r.json()
    return j["choices"][0], j["usage"]


def held(choice, usage):
    """Tokens the sequence holds when the request ends: the prompt and each
    generated token but the last one sampled (never fed back); a reply ended
    by <end_of_turn> holds all its content tokens (the stop token is not
    counted in completion_tokens)."""
    return usage["prompt_tokens"] + usage["completion_tokens"] - (1 if choice["finish_reason"] == "length" else 0)


@pytest.fixture(scope="module")
def loop_cache():
    if not os.path.exists(GEMMA3):
        pytest.skip("Gemma 3 270M not downloaded (make model-gemma3)")
    d = tempfile.mkdtemp(prefix="strata-g3loop-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_agent_loop_12_turns_prefills_only_new_tokens(loop_cache):
    """(a) 12 turns, the replies sent back verbatim: each turn after the
    first finds the whole previous sequence cached (prompt and reply) and
    prefills only the new tokens; the history passes the 512-token window.
    Every turn equals (text and logprobs) a server with the prefix cache
    off that is sent the same turns."""
    srv = Server(GEMMA3, "--parallel", "1", "--ctx", "2048", "--cache-dir", loop_cache)
    cold = Server(GEMMA3, "--parallel", "1", "--ctx", "2048", "--no-prefix-cache")
    try:
        msgs, prev, rows = [{"role": "system", "content": LOOP_SYSTEM}], None, []
        for i in range(12):
            msgs.append({"role": "user", "content": loop_user(i)})
            choice, u = loop_chat(srv, msgs)
            ref, _ = loop_chat(cold, msgs)
            assert choice["message"]["content"] == ref["message"]["content"], f"turn {i}: differs from cache off"
            assert choice["logprobs"] == ref["logprobs"], f"turn {i}: logprobs differ from cache off"
            cached, sc = u["prompt_tokens_details"]["cached_tokens"], u["strata_cache"]
            assert sc["live_tokens"] + sc["disk_tokens"] + sc["redis_tokens"] == cached
            if prev is None:
                assert cached == 0
            else:
                want = held(*prev)
                assert cached == want, f"turn {i}: {cached} cached, the previous sequence held {want}"
                assert sc["live_tokens"] == cached and sc["prefix_end"]["token"] == cached
            rows.append((u["prompt_tokens"], cached, u["prompt_tokens"] - cached, u["completion_tokens"],
                         choice["finish_reason"]))
            prev = (choice, u)
            msgs.append({"role": "assistant", "content": choice["message"]["content"]})
        print("turn: prompt cached prefilled completion finish")
        for i, r in enumerate(rows):
            print(i, *r)
        assert rows[-1][0] > 512 and any(r[1] > 512 for r in rows), "the history never passed the sliding window"
        assert sum(r[2] for r in rows[1:]) < rows[-1][0] - rows[0][0]
    finally:
        assert srv.stop() == 0
        assert cold.stop() == 0
    with open(os.path.join(loop_cache, "msgs.json"), "w") as f:
        json.dump({"messages": msgs, "held": held(*prev)}, f)


def test_restart_resumes_from_disk_equal_to_cold(loop_cache):
    """(c) A new server on the same --cache-dir resumes the next turn from
    the disk tier, with the text and logprobs of a cold server."""
    path = os.path.join(loop_cache, "msgs.json")
    if not os.path.exists(path):
        pytest.skip("the agent loop did not run")
    with open(path) as f:
        saved = json.load(f)
    msgs = saved["messages"]
    msgs.append({"role": "user", "content": loop_user(12)})
    srv = Server(GEMMA3, "--parallel", "1", "--ctx", "2048", "--cache-dir", loop_cache)
    try:
        choice, u = loop_chat(srv, msgs)
    finally:
        assert srv.stop() == 0
    cold = Server(GEMMA3, "--parallel", "1", "--ctx", "2048", "--no-prefix-cache")
    try:
        ref, ru = loop_chat(cold, msgs)
    finally:
        assert cold.stop() == 0
    sc = u["strata_cache"]
    print("after restart:", u["prompt_tokens"], "prompt,", sc, "; cold:", ru["prompt_tokens_details"])
    assert ru["prompt_tokens_details"]["cached_tokens"] == 0 and ru["prompt_tokens"] == u["prompt_tokens"]
    # the whole sequence the loop's last turn held, from disk, past the window
    assert sc["disk_tokens"] == saved["held"] == u["prompt_tokens_details"]["cached_tokens"] > 512
    assert sc["live_tokens"] == 0 and sc["prefix_end"]["token"] == saved["held"]
    assert choice["message"]["content"] == ref["message"]["content"]
    assert choice["logprobs"] == ref["logprobs"]


# ---- issue 11 item 2: the sliding window's K/V kept for the window only ------


def test_window_dropped_from_memory_reloads_from_disk_equal_to_cold(tmp_path):
    """A running sequence keeps the sliding layers' K/V of its window only,
    and a cached block's sliding part is kept while slots are spare. After
    four other long prompts took every spare slot, a hit on the first
    prompt reads its window's sliding parts back from the disk tier (the
    trace says how many) and answers with cold's text and logprobs."""
    if not os.path.exists(GEMMA3):
        pytest.skip("Gemma 3 270M not downloaded (make model-gemma3)")
    trace = tmp_path / "trace.jsonl"
    srv = Server(GEMMA3, "--parallel", "1", "--ctx", "2048", "--trace", str(trace))
    cold = Server(GEMMA3, "--parallel", "1", "--ctx", "2048", "--no-prefix-cache")

    def doc(k):
        return " ".join(f"Record {k}-{i}: value {i * 7 % 13 + k} is stored in slot {i % 5}." for i in range(55))

    try:
        first = [{"role": "user", "content": doc(0) + "\nSummarize."}]
        loop_chat(srv, first)
        for k in range(1, 5):
            loop_chat(srv, [{"role": "user", "content": doc(k) + "\nSummarize."}])
        again = [{"role": "user", "content": doc(0) + "\nSummarize."}, {"role": "assistant", "content": "Sure."},
                 {"role": "user", "content": "Which slot holds record 0-7?"}]
        choice, u = loop_chat(srv, again)
        ref, ru = loop_chat(cold, again)
        m = srv.metrics()
    finally:
        assert srv.stop() == 0
        assert cold.stop() == 0
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    assert len(lines) == 6 and all(line["prompt_tokens"] > 600 for line in lines)  # past the 512-token window
    last = lines[-1]
    print("hit:", last["cached_tokens"], last["window"], "prompt", u["prompt_tokens"])
    assert last["window"]["reloaded_blocks"] > 0 and last["window"]["cut_tokens"] == 0
    # /metrics counts what the trace lines say, in total
    assert m["strata_window_reloaded_blocks_total"] == sum(line["window"]["reloaded_blocks"] for line in lines)
    assert m["strata_window_cut_tokens_total"] == sum(line["window"]["cut_tokens"] for line in lines)
    assert u["prompt_tokens_details"]["cached_tokens"] > 512
    assert ru["prompt_tokens"] == u["prompt_tokens"]
    assert choice["message"]["content"] == ref["message"]["content"]
    assert choice["logprobs"] == ref["logprobs"]
