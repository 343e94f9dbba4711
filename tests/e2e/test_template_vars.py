"""The request's reasoning settings reach the chat template (issue: real
clients' requests served as asked): OpenAI "reasoning_effort", Responses
"reasoning.effort", Anthropic "output_config.effort" and "thinking", and
llama.cpp/vLLM's "chat_template_kwargs", as the template variables
reasoning_effort (gpt-oss's "Reasoning: high") and enable_thinking (Qwen3's
switch). A value the official API refuses is a 400; a chat_template_kwargs
key the template never reads is served and named in x-strata-ignored.
Top-level fields served without (web_search_options, background, ...) are
named too; logit_bias is applied.
"""
import os

import httpx
import pytest

from conftest import GEN, TINY_MODEL, Server

TMPL = os.path.join(os.path.dirname(__file__), "..", "data", "tmpl", "reasoning_switches.jinja")
GPT_OSS = os.path.join(GEN, "models", "gpt-oss-parrot.gguf")


@pytest.fixture(scope="module")
def switches():
    s = Server(TINY_MODEL, "--parallel", "2", "--ctx", "2048", "--chat-template-file", TMPL)
    yield s
    assert s.stop() == 0


def prompt(server, body):
    r = httpx.post(server.url + "/apply-template", json={"messages": [{"role": "user", "content": "hi"}], **body},
                   timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["prompt"]


def test_gpt_oss_reasoning_effort_reaches_its_template():
    if not os.path.exists(GPT_OSS):
        pytest.skip("make testdata")
    s = Server(GPT_OSS, "--parallel", "1", "--ctx", "1024")
    try:
        assert "Reasoning: medium" in prompt(s, {})  # the template's default
        assert "Reasoning: high" in prompt(s, {"reasoning_effort": "high"})
        assert "Reasoning: low" in prompt(s, {"reasoning_effort": "minimal"})  # gpt-oss knows low/medium/high
        assert "Reasoning: low" in prompt(s, {"chat_template_kwargs": {"reasoning_effort": "low"}})
        r = httpx.post(s.url + "/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "reasoning_effort": "high"}, timeout=60)
        assert r.status_code == 200 and "x-strata-ignored" not in r.headers, (r.status_code, r.headers, r.text)
    finally:
        assert s.stop() == 0


def test_each_api_sets_the_switches(switches):
    assert prompt(switches, {}).startswith("<|user|>hi")
    assert prompt(switches, {"reasoning_effort": "xhigh"}).startswith("[effort high] ")
    assert prompt(switches, {"reasoning_effort": "none"}).startswith("[thinking off] [effort low] ")
    assert prompt(switches, {"chat_template_kwargs": {"enable_thinking": False}}).startswith("[thinking off] ")
    # chat_template_kwargs win over what the API fields set
    assert prompt(switches, {"reasoning_effort": "high",
                             "chat_template_kwargs": {"reasoning_effort": "low"}}).startswith("[effort low] ")

    def ant(extra):
        r = httpx.post(switches.url + "/v1/messages", json={
            "model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}], **extra}, timeout=60)
        assert r.status_code == 200, r.text
        u = r.json()["usage"]
        return u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"]

    def resp(extra):
        r = httpx.post(switches.url + "/v1/responses", json={"input": "hi", "max_output_tokens": 1, **extra},
                       timeout=60)
        assert r.status_code == 200, r.text
        return r.json()["usage"]["input_tokens"]

    plain = ant({})
    assert ant({"thinking": {"type": "adaptive"}}) == plain  # thinking on: the template's default
    assert ant({"thinking": {"type": "disabled"}}) > plain   # "[thinking off] " in the prompt
    assert ant({"output_config": {"effort": "high"}}) > plain
    assert resp({"reasoning": {"effort": "low"}}) > resp({"reasoning": {"summary": "auto"}})


@pytest.mark.parametrize("body, field", [
    ({"reasoning_effort": "extreme"}, "reasoning_effort"),
    ({"chat_template_kwargs": ["enable_thinking"]}, "chat_template_kwargs"),
])
def test_values_the_api_refuses_are_400(switches, body, field):
    r = httpx.post(switches.url + "/v1/chat/completions", json={
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, **body}, timeout=60)
    assert r.status_code == 400 and field in r.json()["error"]["message"], r.text


def test_anthropic_thinking_type_is_checked(switches):
    r = httpx.post(switches.url + "/v1/messages", json={
        "model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}],
        "thinking": {"type": "sometimes"}}, timeout=60)
    assert r.status_code == 400 and "thinking.type" in r.text, r.text


def test_unread_kwargs_and_unserved_fields_are_named(switches, strict):
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
            "chat_template_kwargs": {"no_such_switch": True}, "web_search_options": {}}
    r = httpx.post(switches.url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    ignored = r.headers["x-strata-ignored"]
    assert "chat_template_kwargs.no_such_switch" in ignored and "web_search_options" in ignored, ignored
    # the tiny model's own template reads no reasoning setting, and an
    # agent client's effort is not noted for it (sent on every request)
    r = httpx.post(strict.url + "/v1/messages", json={
        "model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}],
        "thinking": {"type": "adaptive"}, "output_config": {"effort": "medium"}}, timeout=60)
    assert r.status_code == 200 and "x-strata-ignored" not in r.headers, r.text
    # Claude Code sends context_management on every request: served as
    # sent, not named (under --strict-requests it would refuse them all)
    r = httpx.post(strict.url + "/v1/messages", json={
        "model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}],
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}}, timeout=60)
    assert r.status_code == 200 and "x-strata-ignored" not in r.headers, r.text
    r = httpx.post(strict.url + "/v1/responses", json={"input": "hi", "max_output_tokens": 1, "background": True},
                   timeout=60)
    assert r.status_code == 400 and "background" in r.text, r.text
    # state kept on the providers' servers: served without, and named
    for path, body, field in (
            ("/v1/responses", {"input": "hi", "max_output_tokens": 1, "conversation": "conv_1"}, "conversation"),
            ("/v1/responses", {"input": "hi", "max_output_tokens": 1, "prompt": {"id": "pmpt_1"}}, "prompt")):
        r = httpx.post(switches.url + path, json=body, timeout=60)
        assert r.status_code == 200 and r.headers["x-strata-ignored"].startswith(field), (field, r.text)


def test_qwen3_template_thinking_switch():
    """Qwen3's own template: thinking off writes the empty think block the
    model was trained to skip reasoning after."""
    s = Server(TINY_MODEL, "--parallel", "1", "--ctx", "1024", "--chat-template-file",
               os.path.join(os.path.dirname(TMPL), "qwen3.jinja"))
    try:
        assert prompt(s, {}).endswith("<|im_start|>assistant\n")
        for body in ({"chat_template_kwargs": {"enable_thinking": False}}, {"reasoning_effort": "none"}):
            assert prompt(s, body).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n"), body
    finally:
        assert s.stop() == 0


def test_logit_bias_bans_and_forces_tokens(switches):
    """OpenAI logit_bias: -100 bans a token (the greedy reply changes where
    it had that token), +100 makes one token the whole reply."""
    url = switches.url + "/v1/chat/completions"
    base = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 6, "temperature": 0, "ignore_eos": True,
            "logprobs": True}

    def ids(body):
        r = httpx.post(url, json=body, timeout=60)
        assert r.status_code == 200 and "x-strata-ignored" not in r.headers, r.text
        return [t["token"] for t in r.json()["choices"][0]["logprobs"]["content"]]

    plain = ids(base)
    # the first token that is plain text (a byte token has no text to look up)
    i = next(k for k, t in enumerate(plain) if t.isascii() and t.strip() and t.isprintable())
    tok = httpx.post(switches.url + "/tokenize", json={"content": plain[i], "add_special": False}, timeout=60).json()
    assert len(tok["tokens"]) == 1, tok
    banned = ids({**base, "logit_bias": {str(tok["tokens"][0]): -100}})
    assert banned[:i] == plain[:i] and banned[i] != plain[i], (plain, banned)
    forced = ids({**base, "logit_bias": {str(tok["tokens"][0]): 100}})
    assert forced == [plain[i]] * 6, forced
    for bad in ({"x": 1}, {"5": 101}, {"-1": 0}, ["5"]):
        r = httpx.post(url, json={**base, "logit_bias": bad}, timeout=60)
        assert r.status_code == 400 and "logit_bias" in r.text, (bad, r.text)
