"""The real agent CLIs against Strata (issue 23): Claude Code (Anthropic
Messages) and Codex (Responses API), installed from the package index at the
versions pinned in scripts/install-agent-clis.sh, each run unchanged but for
its base URL, a key and the settings that keep it offline
(tests/e2e/agent_clis.py), in a scratch project of a few files.

Per client and model, a session of `-p` / `exec` runs (each later one
continuing the conversation, or starting a new one after FRESH_AFTER runs
in a row with no completed round; at most MAX_RUNS) until the model has made two
rounds of tool calls that the CLI ran and answered: a 135M model does not
always call a tool when asked, and neither CLI can force one (tool_choice is
the client's); a run is stopped once the rounds are in, since a small model
may also call tools forever. Asserted, from the server's log and
`--trace` lines:
- every request the CLI sent was answered 200; a CLI run that failed did
  so only because a reply hit the server's `--max-output-tokens` (Codex
  fails a turn on any `incomplete` response; Claude Code reports its
  output limit), never over a malformed or refused reply;
- at least two tool rounds completed (calls, results sent back, the model
  answered them), counted from the CLI's own records (Claude Code's
  stream-json, Codex's session files);
- every warm request (each after the first of a conversation) reused the
  whole previous prompt plus the previous reply (assert_warm_reuse; its share
  of the prompt is printed: Codex's tool results can be 5% of a 6k prompt);
- Claude Code `--continue` after a server restart on the same `--cache-dir`
  starts from the disk tier (>= 0.98 of its prompt from memory or disk,
  disk > 0, nothing live yet).

Claude Code's first prompt is ~12k tokens, Codex's ~6k: the server runs with
`--ctx 32768`. SmolLM2's own context is 8k, so past it the model writes
noise, but the noise is constrained to the declared tool schemas: it still
makes valid tool calls, which is what these tests need. Neither CLI bounds
a reply usefully (Claude Code asks for 128000 tokens, Codex for none), so
the server runs with `--max-output-tokens` (an operator's setting) to keep
a session to minutes on 2 cores.
"""
import json
import os
import re
import shutil
import tempfile

import pytest

import agent_clis as A
from conftest import GEN, REAL_MODEL, Server

GEMMA3_MODEL = os.environ.get("STRATA_GEMMA3_MODEL", os.path.join(A.ROOT, "models", "gemma-3-270m-q4_k_m.gguf"))
CTX = "32768"
MAX_RUNS = 8          # CLI invocations per session at most (a sampled tiny model
                      # sometimes answers 6 runs in a row without a completed tool call)
WANT_ROUNDS = 2       # tool rounds per session at least
FRESH_AFTER = 3       # runs in a row of one conversation with no completed round
                      # before the next run starts a new one: a tiny model copies its
                      # own earlier replies, so a conversation that began with noise, or
                      # turned to it after a round (or calls too long for MAX_OUTPUT),
                      # stays so (CI once: 0 rounds in 8 runs of one Gemma 3
                      # conversation; a clean clone once: 1 round, then 7 runs of
                      # '"arguments"')
WARM_REUSE = 0.98  # the share of its prompt the first request after a restart reads back
# Replies bounded so a session on 2 cores takes minutes, not hours: a model
# writing noise otherwise runs to the context's end.
MAX_OUTPUT = "256"
RUN_TIMEOUT = 900
# The only ways a CLI run may fail: a reply cut by MAX_OUTPUT.
CUT_BY_LIMIT = ("Incomplete response returned", "output token maximum", "max_tokens")

PROJECT = {
    "notes.txt": "The secret word is pelican.\n",
    "hello.py": "def greet(name):\n    return f'Hello, {name}!'\n\nprint(greet('world'))\n",
    "README.md": "# scratch\n\nA tiny project for the agent CLI tests.\n",
}
# Claude Code: each run names a tool and a file (the model still decides:
# tool_choice is the client's). Codex: each run shows the call to make in
# the generic tool format the server teaches a model without tool syntax
# (src/text/toolcall_prompt.c): a small model copies a call it is shown
# far more often than it follows a request in words (Codex on Gemma 3:
# about 2 in 3 replies a completed call, against 1 in 8 for "Read
# notes.txt and tell me the secret word"; Codex fails a turn on a call cut
# by --max-output-tokens). Claude Code keeps the plain requests: shown
# Claude Code calls, Gemma 3 writes runs of parallel calls cut by the
# limit. (A Gemma 3 session with shown calls once missed the exact replay
# of a call: Claude Code sends a call back with its schema's defaults
# filled in, an Edit with "replace_all": false; the server now remembers
# that spelling too, test_tools.py.)
CLAUDE_PROMPTS = ["Use the Read tool to read notes.txt, then tell me the secret word.",
                  "Use the Read tool to read hello.py and tell me what it prints.",
                  "Use the Bash tool to run `ls`.",
                  "Use the Read tool to read README.md.",
                  "Use the Bash tool to run `cat notes.txt`.",
                  "Use the Read tool to read notes.txt again.",
                  "Use the Bash tool to run `pwd`.",
                  "Use the Read tool to read hello.py again."]


def call_prompt(tool, **args):
    return json.dumps({"tool_calls": [{"name": tool, "arguments": args}]})


CODEX_PROMPTS = [call_prompt("exec_command", cmd=c) for c in
                 ("cat notes.txt", "cat hello.py", "ls", "cat README.md", "pwd", "cat notes.txt", "ls -l", "cat hello.py")]


@pytest.fixture(scope="module")
def clis():
    return A.cli_paths()  # installs the pinned versions when missing


def models():
    out = [pytest.param(REAL_MODEL, id="smollm2")]
    out.append(pytest.param(GEMMA3_MODEL, id="gemma3"))
    return out


def sampling(model):
    """The sampling a user runs the model with, for the fields neither CLI
    sends (server flags): Gemma 3's published top_k 64 and top_p 0.95 (its
    GGUF carries no sampling keys). Without them it samples from the whole
    distribution at temperature 1, and a first reply of noise text (about
    1 session in 5) makes every later turn of the conversation copy it."""
    return ("--top-k", "64", "--top-p", "0.95") if model == GEMMA3_MODEL else ()


class Session:
    """One scratch project, home, cache dir and trace; a server over them
    that can be restarted."""

    def __init__(self, model):
        if not os.path.exists(model):
            pytest.skip(f"{model} not downloaded (make model / make model-gemma3)")
        self.model = model
        self.root = tempfile.mkdtemp(prefix="strata-agent-")
        self.work = os.path.join(self.root, "project")
        self.home = os.path.join(self.root, "home")
        self.cache = os.path.join(self.root, "kv")
        for d in (self.work, self.home, self.cache):
            os.makedirs(d)
        for name, text in PROJECT.items():
            with open(os.path.join(self.work, name), "w") as f:
                f.write(text)
        self.traces = []
        self.logs = []
        self.server = None
        self.start()

    def start(self):
        trace = os.path.join(self.root, f"trace{len(self.traces)}.jsonl")
        self.traces.append(trace)
        self.server = Server(self.model, "--ctx", CTX, "--parallel", "2", "--cache-dir", self.cache,
                             "--trace", trace, "--max-output-tokens", MAX_OUTPUT, "--verbose", *sampling(self.model))
        self.logs.append(self.server.log.name)

    def restart(self):
        assert self.server.stop() == 0
        self.start()

    def trace(self, i=-1):
        with open(self.traces[i]) as f:
            return [json.loads(l) for l in f if l.strip()]

    def statuses(self):
        """Status of every API request in the current server's log."""
        with open(self.server.log.name) as f:
            return [(m[1], int(m[2])) for m in re.finditer(r"request POST (\S+) status=(\d+)", f.read())]

    def misses(self):
        """The text around each first difference the server saw (the /ui
        page's records): what the earlier prompt had there, what this one
        has. For a failure's message."""
        import httpx
        recs = httpx.get(self.server.url + "/ui/state", timeout=10).json().get("requests", [])
        return [{"id": r.get("id"), "first_difference": r.get("first_difference"), "excerpt": r.get("excerpt")}
                for r in recs if r.get("excerpt")]

    def replay_lines(self):
        """The servers' debug lines about exact replay (replies remembered,
        assistant turns sent back that were not), in order: a miss inside a
        reply shows whether the server kept it and under what text."""
        out = []
        for name in self.logs:
            with open(name, errors="replace") as f:
                out += [l.rstrip() for l in f if "replay: " in l]
        return out

    def settle(self):
        """Waits until no request is running (one the test stopped the CLI
        in is cancelled), so the log and the trace are complete."""
        import httpx
        import time
        for _ in range(300):
            if httpx.get(self.server.url + "/health", timeout=5).json().get("active") == 0:
                return
            time.sleep(0.1)

    def close(self):
        if self.server and self.server.proc.poll() is None:
            self.server.stop()
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def session(request):
    s = Session(request.param)
    yield s
    s.close()


def generations(statuses):
    """The requests that generate (one trace line each): not count_tokens."""
    return [p for p, _ in statuses if p.split("?")[0].endswith(("/messages", "/responses"))]


def cached(line):
    c = line["cached_tokens"]
    return c["live"] + c["disk"] + c["redis"]


def assert_warm_reuse(lines, what, earlier=()):
    """Every warm request reuses the whole previous prompt plus the previous
    reply (the model's own tokens, replayed): what is new in its prompt is
    only what the client added (tool results, the next prompt). Where those
    are long against a ~6k prompt the share reused can be under 0.98 with
    nothing lost, so the share is reported, the tokens are asserted. After a
    reply cut by --max-output-tokens or cancelled (a run the test stopped)
    the client sends back what it made of it (Claude Code: an unparsed tool
    input and an error): the whole previous prompt, then. One token of slack
    for the end-of-turn token, which a template may write its own way.
    earlier: the conversation's requests before lines (another server's)."""
    assert lines, f"{what}: no request reached the trace"
    for i, l in enumerate(lines[1:], 1):
        prev = lines[i - 1]
        want = prev["prompt_tokens"] + (prev["generated_tokens"] - 1 if prev["finish"] == "stop" else 0)
        print(f"{what}: request {i} reused {cached(l)} of {l['prompt_tokens']} "
              f"({cached(l) / l['prompt_tokens']:.3f}), previous prompt+reply {want}")
        cut = rewritten_cut_reply(list(earlier) + lines[:i], l)
        if cut is not None and cached(l) < want:
            print(f"{what}: request {i} leaves the cache at {cached(l)}, in what the client sent back for "
                  f"the reply cut at {cut}: text the model never wrote, not the server's to keep")
            continue
        assert cached(l) >= want, (f"{what}: request {i} reused {cached(l)} of {l['prompt_tokens']}, "
                                   f"under the previous prompt+reply {want}; first miss {l.get('first_miss')}")


def rewritten_cut_reply(before, line):
    """Where a reply the server cut (max output tokens) or the client
    cancelled began, when line's prompt leaves the cache inside what the
    client sent back for it: Claude Code sends a cut call back as an
    unparsed input at first, and after --continue it may send a repaired
    one, text the model never wrote and the cache cannot hold. That span
    runs from the cut request's prompt end to the next request's."""
    pos = cached(line)
    for j, b in enumerate(before[:-1]):
        if b["finish"] in ("length", "cancelled") and b["prompt_tokens"] <= pos < before[j + 1]["prompt_tokens"]:
            return b["prompt_tokens"]
    return None


def assert_warm_reuse_shown(s, lines, what, earlier=()):
    """assert_warm_reuse, a failure showing where the prompts parted (the
    server's /ui records: what the earlier prompt had there, what this one
    has)."""
    try:
        assert_warm_reuse(lines, what, earlier)
    except AssertionError as e:
        replay = "\n".join(s.replay_lines()[-40:])
        raise AssertionError(f"{e}\nwhere prompts left the one before (/ui/state): {s.misses()}\n"
                             f"exact replay (server logs, last 40 lines):\n{replay}") from None


# --- Claude Code ---

def claude_events(stdout):
    out = []
    for l in stdout.splitlines():
        try:
            e = json.loads(l)
        except ValueError:  # not an event, or a line still being written
            continue
        if isinstance(e, dict):  # a line cut short can still parse, as a number or a string
            out.append(e)
    return out


def answered(seq):
    """seq: ("call", id) / ("result", id) / ("reply",) in the order the
    client saw them. A tool round is complete when its calls got results and
    the model spoke after them (so the results went back in a request that
    was answered); parallel calls of one reply are one round."""
    calls, pending, done = set(), set(), 0
    for e in seq:
        if e[0] == "call":
            calls.add(e[1])
        elif e[0] == "result" and e[1] in calls:
            pending.add(e[1])
        if e[0] in ("call", "reply") and pending:  # the model spoke: the results before went back
            done += 1
            pending.clear()
    return done


def claude_rounds(events):
    """Complete tool rounds in Claude Code's stream-json events."""
    seq = []
    for e in events:
        msg = e.get("message")  # an object in assistant and user events; error events carry a string
        content = msg.get("content") if isinstance(msg, dict) else None
        if e.get("type") == "assistant" and isinstance(content, list):
            seq += [("call", p["id"]) if p.get("type") == "tool_use" else ("reply",) for p in content]
        elif e.get("type") == "user" and isinstance(content, list):
            seq += [("result", p["tool_use_id"]) for p in content if p.get("type") == "tool_result"]
    return answered(seq)


def claude_replies(events):
    """What the model said in each assistant message, shortened: for a
    failure's message."""
    out = []
    for e in events:
        msg = e.get("message")
        if e.get("type") == "assistant" and isinstance(msg, dict):
            out += [json.dumps(p.get("input") if p.get("type") == "tool_use" else p.get("text"))[:120]
                    for p in msg.get("content") or []]
    return out


def check_cli_outcome(ok, what, output):
    """A CLI run either succeeded or failed over a reply cut by the limit."""
    assert ok or any(m in output for m in CUT_BY_LIMIT), f"{what} failed:\n{output[-3000:]}"


def enough(s, rounds):
    """The session has its tool rounds, each answered by a later request."""
    return rounds >= WANT_ROUNDS and len(s.trace()) >= WANT_ROUNDS + 1


def run_claude(s, prompt, cont, enough_now):
    """One `claude -p` run, stopped once enough_now(its events so far)."""
    r = A.run_until(A.claude_cmd(prompt, cont=cont), A.claude_env(s.home, s.server.url), s.work,
                    lambda out: enough_now(claude_events(out)), timeout=RUN_TIMEOUT)
    events = claude_events(r.stdout)
    result = [e for e in events if e.get("type") == "result"]
    ok = r.stopped or (r.returncode == 0 and result and not result[-1].get("is_error"))
    check_cli_outcome(ok, f"claude (exit {r.returncode})", r.stdout + r.stderr)
    return events


def test_max_output_tokens_bounds_every_reply():
    """--max-output-tokens caps a reply that asks for no limit or a larger
    one, and leaves a smaller request's limit alone."""
    import httpx
    from conftest import TINY_MODEL
    srv = Server(TINY_MODEL, "--ctx", "512", "--max-output-tokens", "5")
    try:
        for asked, want in ((None, 5), (100, 5), (3, 3)):
            body = {"messages": [{"role": "user", "content": "hi"}], "ignore_eos": True}
            if asked:
                body["max_tokens"] = asked
            r = httpx.post(srv.url + "/v1/chat/completions", json=body, timeout=60).json()
            assert r["usage"]["completion_tokens"] == want and r["choices"][0]["finish_reason"] == "length", r
        r = httpx.post(srv.url + "/v1/responses", json={"input": "hi", "ignore_eos": True}, timeout=60).json()
        assert r["usage"]["output_tokens"] == 5 and r["status"] == "incomplete", r
    finally:
        assert srv.stop() == 0


def test_generic_text_reply_replays_exactly(tiny):
    """A text reply in the generic tool format (a model whose template has no
    tool syntax: SmolLM2, Gemma 3; the reply may be plain text or
    {"content": ...} JSON) comes back as the model's own tokens: the next
    turn reuses the whole previous prompt plus the reply (issue 23 item 7:
    Codex turns on Gemma 3 missed from the first assistant message, which was
    re-tokenized instead of replayed)."""
    import httpx
    url = tiny.url + "/v1/chat/completions"
    tools = [{"type": "function", "function": {"name": "read", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]
    msgs = [{"role": "user", "content": "Say hi."}]
    for seed in range(40):  # the tiny model's random weights: find a seed that answers in text
        r = httpx.post(url, json={"messages": msgs, "tools": tools, "seed": seed, "max_tokens": 400,
                                  "temperature": 1.0}, timeout=60).json()
        c = r["choices"][0]
        if c["finish_reason"] == "stop" and not c["message"].get("tool_calls") and c["message"].get("content"):
            break
    else:
        pytest.fail("no seed gave a text reply")
    first = r["usage"]
    msgs += [{"role": "assistant", "content": c["message"]["content"]}, {"role": "user", "content": "again"}]
    r2 = httpx.post(url, json={"messages": msgs, "tools": tools, "max_tokens": 1}, timeout=60).json()
    cached = r2["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached >= first["prompt_tokens"] + first["completion_tokens"], (first, r2["usage"])


def drive(s, run_one, rounds_now):
    """Runs the CLI (run_one(i, continue_conversation)) until WANT_ROUNDS
    tool rounds are complete or MAX_RUNS runs are done. A conversation that
    has gone FRESH_AFTER runs in a row without completing a round (since it
    began or since its last round) is left and the next run starts a new
    one. Returns (rounds, runs, starts): starts are the indices in the trace
    where each conversation's requests begin."""
    starts, rounds, stale = [0], 0, 0
    for i in range(MAX_RUNS):
        fresh = stale == FRESH_AFTER
        if fresh:
            s.settle()  # the trace complete: the next line is the new conversation's
            starts.append(len(s.trace()))
            stale = 0
        run_one(i, i > 0 and not fresh)
        done = rounds_now()
        stale = 0 if done > rounds else stale + 1
        rounds = done
        if rounds >= WANT_ROUNDS:
            break
    return rounds, i + 1, starts


def assert_session(s, rounds, runs, starts, client, replies):
    """Every request answered 200, the tool rounds done, one trace line per
    generation, and each warm request reusing the previous prompt and reply
    of its conversation. replies: what the model said, for the message."""
    s.settle()
    statuses = s.statuses()
    assert statuses and all(code == 200 for _, code in statuses), statuses
    assert rounds >= WANT_ROUNDS, f"{rounds} tool rounds in {runs} runs ({len(starts)} conversations): {replies}"
    lines = s.trace()
    assert len(lines) == len(generations(statuses)), (lines, statuses)
    for a, b in zip(starts, starts[1:] + [len(lines)]):
        assert_warm_reuse_shown(s, lines[a:b], f"{client} conversation from request {a}")


@pytest.mark.parametrize("session", models(), indirect=True)
def test_claude_code(clis, session):
    s = session
    events = []

    def run_one(i, cont):
        events.extend(run_claude(s, CLAUDE_PROMPTS[i], cont, lambda new: enough(s, claude_rounds(events + new))))

    rounds, runs, starts = drive(s, run_one, lambda: claude_rounds(events))
    assert_session(s, rounds, runs, starts, "claude", claude_replies(events))

    # --continue after a restart: the conversation's prefix comes from disk.
    s.restart()
    run_claude(s, "Thanks. One more time: what is the secret word?", True, lambda new: len(s.trace()) >= 1)
    s.settle()
    statuses = s.statuses()
    assert statuses and all(code == 200 for _, code in statuses), statuses
    first = s.trace()[0]
    c = first["cached_tokens"]
    assert c["live"] == 0 and c["disk"] > 0, first
    # The conversation before the restart comes back from disk: the last
    # prompt the server answered, whole (whole 64-token blocks at least), or
    # 0.98 of this one. A last request the test cut before its first token
    # (the client gone mid-prefill) does not count: what of its prompt was
    # kept is not asserted. What the client appends on --continue (a long
    # tool result of the run the test stopped) can make the share lower
    # with nothing lost.
    last = [l["prompt_tokens"] for l in s.trace(-2) if l["generated_tokens"] > 0][-1]
    print(f"claude after restart: {cached(first)} of {first['prompt_tokens']} from disk, last prompt before {last}")
    assert cached(first) >= last // 64 * 64 or cached(first) / first["prompt_tokens"] >= WARM_REUSE, (first, last)
    assert_warm_reuse_shown(s, s.trace(), "claude after restart", earlier=s.trace(-2)[starts[-1]:])


# --- Codex ---

def codex_rounds(home):
    """Complete tool rounds in Codex's session files (CODEX_HOME/sessions:
    every response item it sent or got, in order). Its --json events show
    only some tools (commands run, files changed), not e.g. create_goal."""
    seq = []
    for root, _, files in sorted(os.walk(os.path.join(home, ".codex", "sessions"))):
        for name in sorted(files):
            with open(os.path.join(root, name)) as f:
                for line in f:
                    e = json.loads(line)
                    p = e.get("payload") or {}
                    if e.get("type") != "response_item":
                        continue
                    if "call_id" in p:
                        seq.append(("result" if p.get("type", "").endswith("_output") else "call", p["call_id"]))
                    elif p.get("type") == "message" and p.get("role") == "assistant":
                        seq.append(("reply",))
    return answered(seq)


@pytest.mark.parametrize("session", models(), indirect=True)
def test_codex(clis, session):
    s = session
    outputs = []

    def run_one(i, cont):
        r = A.run_until(A.codex_cmd(CODEX_PROMPTS[i], s.work, resume=cont), A.codex_env(s.home, s.server.url),
                        s.work, lambda out: enough(s, codex_rounds(s.home)), timeout=RUN_TIMEOUT)
        ok = r.stopped or (r.returncode == 0 and '"type":"turn.failed"' not in r.stdout)
        check_cli_outcome(ok, f"codex (exit {r.returncode})", r.stdout + r.stderr)
        outputs.append(r.stdout[-400:])

    rounds, runs, starts = drive(s, run_one, lambda: codex_rounds(s.home))
    assert_session(s, rounds, runs, starts, "codex", outputs)
