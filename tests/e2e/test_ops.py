"""Everyday operation: the version, the log file, one log line per request."""
import os
import re
import subprocess
import tempfile

import httpx

from conftest import STRATA, TINY_MODEL, Server


def test_version():
    out = subprocess.run([STRATA, "--version"], capture_output=True, text=True, check=True).stdout
    assert re.fullmatch(r"strata \S+\n", out), out


def test_log_file_has_one_timestamped_line_per_request():
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "strata.log")
        s = Server(TINY_MODEL, "--ctx", "512", "--log-file", log)
        try:
            ok = httpx.post(s.url + "/v1/chat/completions", json={
                "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "temperature": 0})
            bad = httpx.post(s.url + "/v1/chat/completions", json={"messages": []})
            assert ok.status_code == 200 and bad.status_code == 400
        finally:
            assert s.stop() == 0
        lines = [l for l in open(log) if " request " in l]
        assert len(lines) == 2, lines
        stamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z strata info request POST /v1/chat/completions "
        assert re.match(stamp + r"status=200 prompt=\d+ cached=\d+ live=\d+ disk=\d+ prefilled=\d+ generated=3 "
                        r"prefill_tok_s=[\d.]+ decode_tok_s=[\d.]+ finish=length$", lines[0]), lines[0]
        assert re.match(stamp + r"status=400$", lines[1]), lines[1]


def test_default_context_fits_agent_prompts():
    # the model's training context, but at least 32768 tokens: Claude Code's
    # first prompt is ~13k tokens, and the tiny model was trained on 2048
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "strata.log")
        s = Server(TINY_MODEL, "--log-file", log)
        try:
            n_ctx = httpx.get(s.url + "/props").json()["n_ctx"]
        finally:
            assert s.stop() == 0
        line = next(l for l in open(log) if " context: " in l)
        m = re.search(r"context: (\d+) tokens per sequence \(the model's training context is (\d+)", line)
        assert m and int(m.group(1)) == n_ctx == 32768 and int(m.group(2)) == 2048, line
        assert "past it the model extrapolates" in line


def test_help_shows_placeholders_and_defaults():
    out = subprocess.run([STRATA, "serve", "--help"], capture_output=True, text=True, check=True).stdout
    assert "--model FILE" in out and "--port N" in out and "--cache-dir DIR" in out and "--cors " in out
    assert "(8080" in out and "(64)" in out  # defaults beside the options


def test_log_line_decode_speed_is_the_schedulers():
    """The request line's decode speed comes from when the scheduler made
    the tokens, as the trace line's does, not from when the HTTP thread read
    them (a reader that takes a whole reply at once once logged millions of
    tokens a second)."""
    import json
    with tempfile.TemporaryDirectory() as tmp:
        log, trace = os.path.join(tmp, "strata.log"), os.path.join(tmp, "trace.jsonl")
        s = Server(TINY_MODEL, "--ctx", "512", "--log-file", log, "--trace", trace)
        try:
            for stream in (False, True):
                r = httpx.post(s.url + "/v1/chat/completions", json={
                    "messages": [{"role": "user", "content": "hi"}], "max_tokens": 48, "ignore_eos": True,
                    "stream": stream}, timeout=60)
                assert r.status_code == 200
        finally:
            assert s.stop() == 0
        logged = [float(m) for m in re.findall(r"decode_tok_s=([\d.]+)", open(log).read())]
        traced = [json.loads(l)["decode_tok_s"] for l in open(trace) if l.strip()]
        assert len(logged) == len(traced) == 2, (logged, traced)
        for a, b in zip(logged, traced):
            assert b > 0 and 0.8 < a / b < 1.25, (logged, traced)
