"""Request fuzzer: mutated bodies over the server's POST endpoints, and
mutated URLs (paths and ids: bytes that are not UTF-8, cut characters,
NULs, long ids, every method), one at a time, against one `strata serve`
of the tiny generated model.

A finding: the server died (crash), a 5xx answer, a sanitizer report in
its log, no answer within REQUEST_TIMEOUT_S (hang), or an error answer
whose body is not a JSON error with a message (bad load: a client cannot
tell what was wrong; `{}` was one). Every other answer, a 400 included, is
fine. After a crash or hang the server is restarted.
Long runs also switch the chat template (each of tests/data/tmpl, through
--chat-template-file) so tool and template paths see the same bodies."""
import glob
import json
import os
import shutil
import tempfile

import harness
import template_mutator

# A body without max_tokens generates up to the context (2,048 tokens, with
# logprobs on /v1/completions): 15 s on the ASan build, over 60 s when the
# 2 cores are shared with other work, which counted as hangs. A hang is no
# answer within 3 minutes.
REQUEST_TIMEOUT_S = 180
URL_SHARE = 0.2  # of the cases: a mutated URL instead of a mutated body
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
                                           "parameters": {"type": "object",
                                                          "properties": {"city": {"type": "string"}}}}}]
BASES = {
    "/v1/chat/completions": {
        "model": harness.TINY_MODEL_ID, "max_tokens": 8, "temperature": 0, "seed": 1,
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"},
                     {"role": "assistant", "content": "",
                      "tool_calls": [{"id": "c1", "type": "function",
                                      "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
                     {"role": "tool", "tool_call_id": "c1", "content": "18C"}],
        "tools": TOOLS, "stop": ["\n\n"], "logprobs": True, "top_logprobs": 2},
    "/v1/completions": {"model": harness.TINY_MODEL_ID, "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0,
                        "logprobs": 2, "stop": "zz", "stream": False},
    "/v1/messages": {
        "model": harness.TINY_MODEL_ID, "max_tokens": 8, "system": [{"type": "text", "text": "Be brief.",
                                                   "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
                     {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "get_weather",
                                                        "input": {"city": "Paris"}}]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "18C"}]}],
        "tools": [{"name": "get_weather", "description": "Weather",
                   "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
        "temperature": 0, "stop_sequences": ["END"]},
    "/v1/messages/count_tokens": {"model": harness.TINY_MODEL_ID, "messages": [{"role": "user", "content": "Hello"}]},
    "/tokenize": {"content": "Hello <|im_start|> world", "parse_special": True},
    "/detokenize": {"tokens": [1, 2, 3, 4]},
    "/apply-template": {"messages": [{"role": "user", "content": "Hello"}], "tools": TOOLS},
    "/v1/responses": {
        "model": harness.TINY_MODEL_ID, "max_output_tokens": 8, "temperature": 0, "instructions": "Be brief.",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
                  {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
                  {"type": "function_call_output", "call_id": "c1", "output": "18C"}],
        "tools": [{"type": "function", "name": "get_weather", "parameters": TOOLS[0]["function"]["parameters"]}],
        "metadata": {"k": "v"}, "store": True},
}
# Keys the handlers read, with odd values to put there.
KEYS = ["temperature", "top_p", "top_k", "min_p", "max_tokens", "max_completion_tokens", "stop", "seed",
        "stream", "stream_options", "logprobs", "top_logprobs", "tools", "tool_choice", "response_format",
        "prefix_cache", "cache_salt", "n", "system", "messages", "prompt", "presence_penalty",
        "frequency_penalty", "repetition_penalty", "parallel_tool_calls", "echo", "suffix", "content",
        "tokens", "parse_special", "metadata", "thinking", "stop_sequences", "input", "instructions",
        "previous_response_id", "max_output_tokens", "store", "text"]
ODD = [None, True, False, 0, -1, 1, 2 ** 31, 2 ** 63 - 1, -2 ** 63, 1e308, -1e-308, 0.5, "", "auto", "none",
       "required", "auto:3", "full", "off", "x" * 3000, "\u0000", "\ud7ff\U0010ffff", [], {}, [None], [[]],
       {"type": "json_object"}, {"type": "function", "function": {"name": "get_weather"}},
       {"scope": "auto:99"}, {"include_usage": True}, ["a"] * 20, list(range(600)),
       [{"role": "user", "content": [{"type": "image", "source": {}}]}]]


def mutate_body(rng, path):
    """(path, body bytes): a structural mutation, a byte mutation, or a
    body sent to another endpoint."""
    body = json.loads(json.dumps(BASES[path]))
    op = rng.randrange(10)
    if op < 4:
        body = template_mutator.mutate_value(rng, body)
    elif op < 7 and isinstance(body, dict):
        for _ in range(rng.randint(1, 3)):
            body[rng.choice(KEYS)] = rng.choice(ODD)
    elif op == 7:
        path = rng.choice(sorted(BASES))
    if isinstance(body, dict) and isinstance(body.get("max_tokens"), int) and body["max_tokens"] > 64:
        if rng.random() < 0.9:
            body["max_tokens"] = 64  # keep generation short; a few stay long
    raw = json.dumps(body, ensure_ascii=rng.random() < 0.5).encode("utf-8", "surrogatepass")
    if op >= 8:
        raw = harness.mutate_bytes(rng, raw)
    return path, raw


# URL cases: a path with an id made of these parts, under any method.
ID_PARTS = ["%FF", "%C3", "%C3%A9", "%00", "%E2%82", "%F0%9F%98%80", "%ED%A0%80", "%C0%80", "resp_", "a" * 300,
            "%2F", "..", "x", "%25", "%20", "%0A", "%7B%7D", "%22"]
URL_PATHS = ["/v1/responses/{id}", "/v1/responses/{id}/input_items", "/v1/responses/{id}/{id}", "/v1/models/{id}",
             "/v1/{id}", "/{id}", "/v1/messages/{id}", "/v1/chat/completions{id}", "/health/{id}", "/metrics{id}",
             "/v1/nonexist/{id}", "/tokenize?{id}"]
METHODS = ["GET", "POST", "DELETE", "PUT", "OPTIONS", "PATCH"]


def mutate_url(rng):
    """(method, path, body or None): a request whose URL is the mutation."""
    ident = "".join(rng.choice(ID_PARTS) for _ in range(rng.randint(1, 4)))
    method = rng.choice(METHODS)
    return method, rng.choice(URL_PATHS).replace("{id}", ident), b"{}" if method in ("POST", "PUT", "PATCH") else None


def error_body_ok(status, data):
    """An error answer carries a JSON error with a message (either API's shape)."""
    if status < 400:
        return True
    try:
        err = json.loads(data).get("error")
    except (ValueError, AttributeError):
        return False
    return isinstance(err, dict) and isinstance(err.get("message"), str) and bool(err["message"])


class Target:
    """The server under test; restarted after a crash or hang."""

    def __init__(self, strata, out_dir, template=None):
        self.strata, self.template = strata, template
        self.cache = tempfile.mkdtemp(prefix="strata-fuzz-req-kv-")
        self.log_dir = out_dir
        self.server = None
        self.start()

    def start(self):
        extra = ["--ctx", "2048", "--parallel", "2", "-t", "1", "--max-body-mb", "1", "--cache-dir", self.cache,
                 "--cache-block-tokens", "16", "--idle-timeout", "30"]
        if self.template:
            extra += ["--chat-template-file", self.template]
        os.makedirs(self.log_dir, exist_ok=True)
        log = os.path.join(self.log_dir, f"serve-{os.getpid()}.log")
        self.server = harness.Server(self.strata, harness.TINY_MODEL, log, *extra)
        if not self.server.ready:
            raise RuntimeError(f"request fuzzer: server did not start; see {log}")

    def stop(self):
        """Stops the server; the sanitizer text it printed at exit (leaks), if any."""
        rc = self.server.stop()
        rep = harness.sanitizer_report(self.server.new_log_text())
        return rc, rep

    def close(self):
        out = self.stop()
        shutil.rmtree(self.cache, ignore_errors=True)
        return out


def one_case(tally, target, index, path, raw, method="POST"):
    s = target.server
    what = f"{method} {path}"
    saved = raw if raw is not None else what.encode()
    try:
        status, data = s.request(method, path, raw, timeout=REQUEST_TIMEOUT_S)
    except OSError as e:
        kind = "crashes" if not s.alive() else "hangs"
        tally.fail(kind, index, f"{what}: {type(e).__name__}: {e}", saved, ".json")
        target.stop()
        target.start()
        return
    rep = harness.sanitizer_report(s.new_log_text())
    if rep:
        tally.fail("sanitizer", index, f"{what}: {rep}", saved, ".json")
    if status >= 500:
        tally.fail("http_5xx", index, f"{what}: HTTP {status}", saved, ".json")
    elif not error_body_ok(status, data):
        tally.fail("bad_loads", index, f"{what}: HTTP {status} with body {data[:80]!r}", saved, ".json")


def templates_for(count):
    """The server's template for each stretch of a run: the model's own
    first, then each real template (long runs only)."""
    files = sorted(glob.glob(os.path.join(harness.ROOT, "tests", "data", "tmpl", "*.jinja")))
    return [None] + files if count >= 1000 else [None]


def run(strata, seed, count, seconds, out_dir):
    tally = harness.Tally("requests", out_dir)
    rng = harness.seeded(seed, "requests")
    budget = harness.Budget(count, seconds)
    stretches = templates_for(count)
    per = -(-count // len(stretches))
    target = None
    try:
        for i in budget.cases():
            if i % per == 0:
                if target:
                    finish_server(tally, target)
                target = Target(strata, tally.out_dir, stretches[i // per])
            if rng.random() < URL_SHARE:
                method, path, raw = mutate_url(rng)
                one_case(tally, target, tally.case(), path, raw, method)
                continue
            path, raw = mutate_body(rng, rng.choice(sorted(BASES)))
            one_case(tally, target, tally.case(), path, raw)
    finally:
        if target:
            finish_server(tally, target)
    return tally


def finish_server(tally, target):
    rc, rep = target.close()
    if rep:
        tally.fail("sanitizer", tally.counts["cases"], f"at server exit: {rep}")
    if rc != 0:
        tally.fail("crashes", tally.counts["cases"], f"server exit status {rc} on SIGTERM")
