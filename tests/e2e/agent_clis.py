"""The real Claude Code and Codex CLIs, run offline against a local server.

Shared by tests/e2e/test_agent_clis.py (the CLIs against Strata) and by
`python3 tests/e2e/agent_clis.py capture` (the CLIs against a tiny capture
server, to record what they send: tests/data/clients/).

Each CLI is run unchanged but for three things: where its API is (base URL),
a key (any string: Strata runs without `--api-key` here), and the settings
that keep it offline (no telemetry, no update check, no login), since no
network is reachable here but the package index. Each run gets a scratch
HOME / CODEX_HOME so nothing of the user's own configuration leaks in.
"""
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
INSTALL = os.path.join(ROOT, "scripts", "install-agent-clis.sh")

_bins = None


def cli_paths():
    """(claude, codex): installs the pinned versions when missing
    (scripts/install-agent-clis.sh holds the pins)."""
    global _bins
    if _bins is None:
        out = subprocess.run([INSTALL], check=True, capture_output=True, text=True).stdout.split()
        _bins = (out[-2], out[-1])
    return _bins


# Environment both CLIs run with. PATH keeps the system tools (Claude Code's
# Bash tool and Codex's shell need them); nothing else of ours is inherited.
def _base_env(home):
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "LANG": "C.UTF-8",
            "TERM": "dumb", "TMPDIR": os.environ.get("TMPDIR", "/tmp"), "NO_COLOR": "1"}


def claude_env(home, base_url, key="strata-test"):
    """Claude Code: ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY (sent as
    x-api-key) are what point it at Strata; the rest keeps it offline."""
    env = _base_env(home)
    env.update({
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": key,
        "CLAUDE_CONFIG_DIR": os.path.join(home, ".claude"),
        # No telemetry, error reports, update checks, feedback surveys or
        # other calls to Anthropic's own hosts (one switch for all of them),
        # and the finer-grained ones too, should a version split them up.
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_BUG_COMMAND": "1",
        "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1",
    })
    return env


def claude_cmd(prompt, cont=False):
    claude, _ = cli_paths()
    # Default permission mode: in -p mode a tool that needs a permission
    # (Bash, Write, Edit, ...) is refused and the model told so; read-only
    # tools in the project run. A small model's arguments are arbitrary text:
    # nothing it says is run with write access. Agent is left out: it starts
    # sub-agents, whose requests are another conversation.
    cmd = [claude, "-p", prompt, "--output-format", "stream-json", "--verbose",
           "--disallowedTools", "Agent"]
    if cont:
        cmd.append("--continue")
    return cmd


CODEX_CONFIG = """\
# A custom provider speaking the Responses API: what Codex needs to use Strata.
model = "{model}"
model_provider = "strata"
# Offline: no update check at start-up.
check_for_update_on_startup = false

[model_providers.strata]
name = "Strata"
base_url = "{base_url}/v1"
wire_api = "responses"
env_key = "STRATA_API_KEY"

# Offline: no analytics or OpenTelemetry export.
[analytics]
enabled = false
[otel]
exporter = "none"
"""


def codex_env(home, base_url, key="strata-test", model="smollm2"):
    """Codex: a scratch CODEX_HOME whose config.toml declares the provider."""
    env = _base_env(home)
    codex_home = os.path.join(home, ".codex")
    os.makedirs(codex_home, exist_ok=True)
    with open(os.path.join(codex_home, "config.toml"), "w") as f:
        f.write(CODEX_CONFIG.format(model=model, base_url=base_url))
    env.update({"CODEX_HOME": codex_home, "STRATA_API_KEY": key})
    return env


def codex_cmd(prompt, workdir, resume=False):
    _, codex = cli_paths()
    # A read-only sandbox (Codex's own, bundled bubblewrap): a small model's
    # shell commands are arbitrary text, never run with write access here.
    # `codex exec` never asks for approval; --skip-git-repo-check: the
    # scratch project is no git repository.
    cmd = [codex, "exec", "--json", "--skip-git-repo-check", "--sandbox", "read-only", "-C", workdir]
    return cmd + (["resume", "--last", prompt] if resume else [prompt])


def run(cmd, env, cwd, timeout=600):
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


class Outcome:
    def __init__(self, returncode, stdout, stderr, stopped):
        self.returncode, self.stdout, self.stderr, self.stopped = returncode, stdout, stderr, stopped


def run_until(cmd, env, cwd, enough, timeout=600, poll_s=1.0):
    """Runs a CLI until it exits, or until enough(stdout so far) says the
    test has what it needs: then it is stopped (SIGTERM). An agent CLI runs
    tool rounds for as long as the model keeps calling tools, and a small
    model may never stop. stopped tells which; a timeout raises."""
    import signal
    import tempfile
    import time
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, text=True)
        deadline, stopped = time.time() + timeout, False
        try:
            while p.poll() is None:
                if time.time() > deadline:
                    raise subprocess.TimeoutExpired(cmd, timeout)
                out.seek(0)
                if enough(out.read()):
                    stopped = True
                    p.send_signal(signal.SIGTERM)
                    try:
                        p.wait(timeout=20)
                    except subprocess.TimeoutExpired:
                        p.kill()
                    break
                time.sleep(poll_s)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        out.seek(0), err.seek(0)
        return Outcome(p.returncode, out.read(), err.read(), stopped)


# --- capture server -----------------------------------------------------

def _sse(events):
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode()


def _anthropic_reply(body, tool_call):
    """A minimal valid Messages reply: one text block, or one tool_use."""
    block = ({"type": "tool_use", "id": f"toolu_cap{tool_call[2]}", "name": tool_call[0], "input": {}}
             if tool_call else {"type": "text", "text": ""})
    stop = "tool_use" if tool_call else "end_turn"
    msg = {"id": "msg_cap", "type": "message", "role": "assistant", "model": body.get("model", "m"),
           "content": [], "stop_reason": None, "stop_sequence": None,
           "usage": {"input_tokens": 1, "output_tokens": 0}}
    if not body.get("stream"):
        full = dict(msg, content=[dict(block, input=tool_call[1]) if tool_call else dict(block, text="Done.")],
                    stop_reason=stop, usage={"input_tokens": 1, "output_tokens": 1})
        return "application/json", json.dumps(full).encode()
    delta = ({"type": "input_json_delta", "partial_json": json.dumps(tool_call[1])} if tool_call
             else {"type": "text_delta", "text": "Done."})
    return "text/event-stream", _sse([
        ("message_start", {"type": "message_start", "message": msg}),
        ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                           "usage": {"output_tokens": 1}}),
        ("message_stop", {"type": "message_stop"})])


def _responses_reply(body, tool_call):
    """A minimal valid streamed Responses reply: one message, or one function_call."""
    if tool_call:
        item = {"type": "function_call", "id": f"fc_cap{tool_call[2]}", "call_id": f"call_cap{tool_call[2]}", "name": tool_call[0],
                "arguments": json.dumps(tool_call[1]), "status": "completed"}
    else:
        item = {"type": "message", "id": "msg_cap", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": "Done.", "annotations": []}]}
    resp = {"id": "resp_cap", "object": "response", "created_at": 0, "status": "in_progress",
            "model": body.get("model", "m"), "output": []}
    done = dict(resp, status="completed", output=[item],
                usage={"input_tokens": 1, "output_tokens": 1, "total_tokens": 2,
                       "input_tokens_details": {"cached_tokens": 0},
                       "output_tokens_details": {"reasoning_tokens": 0}})
    ev = [("response.created", {"type": "response.created", "response": resp}),
          ("response.output_item.added", {"type": "response.output_item.added", "output_index": 0,
                                          "item": dict(item, status="in_progress")}),
          ("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item}),
          ("response.completed", {"type": "response.completed", "response": done})]
    return "text/event-stream", _sse([(n, dict(d, sequence_number=i)) for i, (n, d) in enumerate(ev)])


def _wants_tool(body, script):
    """The capture server's script: a list of (tool name, arguments). A
    request that already carries k tool results is answered with the k-th
    call of the script when it declares that tool, so the client's next
    requests show tool rounds; else with text."""
    if "messages" in body:
        done = sum(1 for m in body["messages"] if isinstance(m.get("content"), list)
                   for p in m["content"] if p.get("type") == "tool_result")
    else:
        items = body.get("input") if isinstance(body.get("input"), list) else []
        done = sum(1 for i in items if i.get("type", "").endswith("_output"))
    names = {t.get("name") for t in body.get("tools") or []}
    if done < len(script) and script[done][0] in names:
        return (*script[done], done)
    return None


class CaptureServer:
    """Records every request (method, path, headers, body) and answers with a
    minimal valid reply (Messages or Responses, streamed when asked)."""

    def __init__(self, script=()):
        self.requests = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _handle(self):
                n = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(n) if n else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode(errors="replace")
                outer.requests.append({"method": self.command, "path": self.path,
                                       "headers": dict(self.headers.items()), "body": body})
                path = self.path.split("?")[0]
                status, ctype, data = 200, "application/json", b"{}"
                if self.command == "POST" and path.endswith("/messages/count_tokens"):
                    data = b'{"input_tokens": 1}'
                elif self.command == "POST" and path.endswith("/messages"):
                    ctype, data = _anthropic_reply(body, _wants_tool(body, script))
                elif self.command == "POST" and path.endswith("/responses"):
                    ctype, data = _responses_reply(body, _wants_tool(body, script))
                elif path.endswith("/models"):
                    data = b'{"object":"list","data":[{"id":"m","object":"model","created":0,"owned_by":"x"}]}'
                else:
                    status, data = 404, b'{"error":{"message":"not found"}}'
                self.send_response(status)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = _handle

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


# --- capturing the fixtures (tests/data/clients/) -----------------------

FIXTURES = os.path.join(ROOT, "tests", "data", "clients")
PROMPT = "Read notes.txt and tell me the secret word."
NOTES = "The secret word is pelican.\n"
# Claude Code declares these tools deferred (names only, in a system
# message); the capture's first reply loads them with ToolSearch so their
# schemas are captured too, and the next request carries the tool_result of
# `tool_reference` parts that a ToolSearch call produces.
CLAUDE_DEFERRED = ("CronCreate,CronDelete,CronList,EnterWorktree,ExitWorktree,Monitor,NotebookEdit,"
                   "SendMessage,TaskStop,WebFetch,WebSearch")


def _sanitise(requests, subs):
    """Machine-specific strings (scratch paths, kernel version, port, key)
    replaced by fixed ones, so the fixtures do not change with the machine."""
    text = json.dumps(requests, indent=1, ensure_ascii=False)
    for a, b in subs:
        text = text.replace(a, b)
    return json.loads(text)


def capture(which, workdir, home):
    """Runs one CLI against a capture server in a scratch project; returns
    (its recorded requests, the CLI's exit status)."""
    notes = os.path.join(workdir, "notes.txt")
    with open(notes, "w") as f:
        f.write(NOTES)
    if which == "claude":
        server = CaptureServer([("ToolSearch", {"query": "select:" + CLAUDE_DEFERRED}),
                                ("Read", {"file_path": notes})])
        r = run(claude_cmd(PROMPT), claude_env(home, server.url), workdir, timeout=300)
    else:
        server = CaptureServer([("exec_command", {"cmd": "cat notes.txt"}), ("exec_command", {"cmd": "ls"})])
        r = run(codex_cmd(PROMPT, workdir), codex_env(home, server.url), workdir, timeout=300)
    server.close()
    port = server.url.rsplit(":", 1)[1]
    subs = [(workdir.replace("/", "-"), "-tmp-project"), (workdir, "/tmp/project"), (home, "/tmp/home"), (os.uname().release, "6.1.0"),
            ("127.0.0.1:" + port, "127.0.0.1:8080"), ("strata-test", "KEY")]
    return _sanitise(server.requests, subs), r.returncode


def tool_schemas(requests):
    """Every tool input schema the requests declare, by tool name (a Codex
    namespace tool's functions as namespace.function)."""
    out = {}
    for q in requests:
        body = q["body"] if isinstance(q["body"], dict) else {}
        for t in body.get("tools") or []:
            if "input_schema" in t:
                out[t["name"]] = t["input_schema"]
            elif t.get("type") == "function":
                out[t["name"]] = t["parameters"]
            elif t.get("type") == "namespace":
                for f in t.get("tools") or []:
                    if f.get("type") == "function":
                        out[t["name"] + "." + f["name"]] = f["parameters"]
    return out


def main():
    import tempfile
    if sys.argv[1:] != ["capture"]:
        raise SystemExit("usage: python3 tests/e2e/agent_clis.py capture  (rewrites tests/data/clients/)")
    os.makedirs(FIXTURES, exist_ok=True)
    schemas = {}
    for which, name in (("claude", "claude_code"), ("codex", "codex")):
        with tempfile.TemporaryDirectory(prefix="strata-project-") as w, \
                tempfile.TemporaryDirectory(prefix="strata-home-") as h:
            reqs, rc = capture(which, w, h)
        if rc != 0:
            raise SystemExit(f"{which} exited with {rc}")
        reqs = [q for q in reqs if q["method"] == "POST"]
        with open(os.path.join(FIXTURES, name + "_requests.json"), "w") as f:
            json.dump(reqs, f, indent=1, ensure_ascii=False)
            f.write("\n")
        schemas[name] = tool_schemas(reqs)
        print(f"{name}: {len(reqs)} requests, {len(schemas[name])} tool schemas")
    with open(os.path.join(FIXTURES, "tool_schemas.json"), "w") as f:
        json.dump(schemas, f, indent=1, ensure_ascii=False, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
