"""A conversation keeps the date its chat template wrote when it began
(server/prompt.c keep_date): gpt-oss's template writes "Current date:"
(strftime_now) near the top of the system message, so a turn served
after midnight would otherwise differ from the first block on and be
prefilled whole again.

The server's clock is libfaketime's (LD_PRELOAD, Debian package
faketime): a timestamp file read at every call, so a test moves a
running server to the next day, or starts one there. Nothing here
depends on today's real date.
"""
import os
import tempfile

import httpx
import pytest

from conftest import GEN, Server

MODEL = os.path.join(GEN, "models", "gpt-oss-mxfp4.gguf")
FAKETIME = next((p for p in ("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
                             "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
                             "/usr/lib/faketime/libfaketimeMT.so.1") if os.path.exists(p)), None)
SYSTEM = {"role": "system", "content": "You are a weather agent. Use the tools. " * 20}
FIRST = [SYSTEM, {"role": "user", "content": "Hello there, tell me about caches. " * 10}]
pytestmark = pytest.mark.skipif(not os.path.exists(MODEL), reason="tiny gpt-oss model not generated (make testdata)")


class Clock:
    """A fake clock for the servers started with env(): set(when) moves it."""

    def __init__(self, when):
        if not FAKETIME:
            pytest.fail("libfaketime not installed (scripts/install-deps.sh installs faketime)")
        fd, self.path = tempfile.mkstemp(prefix="strata-clock-")
        os.close(fd)
        self.set(when)

    def set(self, when):
        with open(self.path, "w") as f:  # "@" + a start: the clock runs on from there
            f.write(f"@{when}\n")

    def env(self):
        return {"LD_PRELOAD": FAKETIME, "FAKETIME_TIMESTAMP_FILE": self.path, "FAKETIME_NO_CACHE": "1",
                "FAKETIME_DONT_FAKE_MONOTONIC": "1", "TZ": "UTC"}


def chat(s, messages, **kw):
    r = httpx.post(s.url + "/v1/chat/completions", timeout=120,
                   json={"model": "", "messages": messages, "temperature": 0, "max_tokens": 30, **kw})
    assert r.status_code == 200, r.text
    return r.json()


def rendered(s, messages):
    return httpx.post(s.url + "/apply-template", json={"messages": messages}, timeout=30).json()["prompt"]


def next_turn(messages, reply):
    return messages + [{"role": "assistant", "content": reply["choices"][0]["message"]["content"]},
                       {"role": "user", "content": "And what about the disk tier?"}]


def cached(reply):
    return reply["usage"]["prompt_tokens_details"]["cached_tokens"]


def test_clock_moves_past_midnight():
    clock = Clock("2026-03-10 23:58:00")
    trace = tempfile.mktemp(prefix="strata-trace-")
    s = Server(MODEL, "--ctx", "4096", "--trace", trace, env=clock.env())
    try:
        assert "Current date: 2026-03-10" in rendered(s, FIRST)
        r1 = chat(s, FIRST)
        assert "template_date" not in r1["usage"]["strata_cache"]
        clock.set("2026-03-11 00:02:00")
        assert "Current date: 2026-03-11" in rendered(s, FIRST)  # what a new conversation gets
        second = next_turn(FIRST, r1)
        r2 = chat(s, second)
        # The whole first prompt and reply are reused: the turn kept its date.
        assert cached(r2) >= r1["usage"]["prompt_tokens"] + r1["usage"]["completion_tokens"] - 1
        assert r2["usage"]["strata_cache"]["template_date"] == "2026-03-10"
        # A conversation begun today renders today's date and says nothing.
        other = [{"role": "system", "content": "A different agent. " * 30}, FIRST[1]]
        r3 = chat(s, other)
        assert "template_date" not in r3["usage"]["strata_cache"]
    finally:
        assert s.stop() == 0
    lines = [l for l in open(trace) if '"api"' in l]
    os.remove(trace)
    assert len(lines) == 3
    assert '"template_date":"2026-03-10"' in lines[1] and "template_date" not in lines[0] + lines[2]


def test_restart_next_day_keeps_date_and_output():
    """Served from the disk tier after a restart the next day (the dates
    are kept beside it), and the hit gives the bytes of a cold run with
    the pinned date. The exactness check uses a conversation whose
    replies the client wrote: a cold server has no exact replay of the
    model's own turns, so it would render those differently."""
    clock = Clock("2026-03-10 18:00:00")
    cache = tempfile.mkdtemp(prefix="strata-kv-")
    written = FIRST + [{"role": "assistant", "content": "Caches keep what was computed."},
                       {"role": "user", "content": "Which tiers are there?"}]
    day1 = Server(MODEL, "--ctx", "4096", "--cache-dir", cache, env=clock.env())
    try:
        r1 = chat(day1, FIRST)
        w1 = chat(day1, written)
    finally:
        assert day1.stop() == 0
    second = next_turn(FIRST, r1)
    written2 = written + [{"role": "assistant", "content": "Memory, then disk."},
                          {"role": "user", "content": "And what about the disk tier?"}]
    cold = Server(MODEL, "--ctx", "4096", "--no-prefix-cache", env=clock.env())  # still 2026-03-10
    try:
        ref = chat(cold, written2, max_tokens=40)
    finally:
        assert cold.stop() == 0
    clock.set("2026-03-11 09:00:00")
    day2 = Server(MODEL, "--ctx", "4096", "--cache-dir", cache, env=clock.env())
    try:
        assert "Current date: 2026-03-11" in rendered(day2, FIRST)
        r2 = chat(day2, second)
        w2 = chat(day2, written2, max_tokens=40)  # from the disk tier
        again = chat(day2, written2, max_tokens=40)  # from memory
    finally:
        assert day2.stop() == 0
    for r, prev in ((r2, r1), (w2, w1)):
        sc = r["usage"]["strata_cache"]
        assert sc["template_date"] == "2026-03-10"
        assert sc["disk_tokens"] > 0
        # Whole blocks of the earlier turn come back from the disk tier
        # (its last partial block was a tail, kept in memory only).
        assert cached(r) >= prev["usage"]["prompt_tokens"] // 64 * 64
    assert cached(again) >= w2["usage"]["prompt_tokens"] - 1
    assert again["usage"]["strata_cache"]["template_date"] == "2026-03-10"
    assert ref["usage"]["prompt_tokens"] == w2["usage"]["prompt_tokens"] == again["usage"]["prompt_tokens"]
    for r in (w2, again):
        assert r["choices"][0]["message"] == ref["choices"][0]["message"]
