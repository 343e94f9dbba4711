"""Responses API tools beyond functions, end to end with the official SDK:
custom tools (free-form input, Codex's apply_patch), local_shell (argv
calls held to their shape), their call items streamed and sent back (the
next turn's cached tokens cover them), and hosted tools left out with a
400 naming them. The tiny random model uses the generic tool format, so
every call it makes is schema-constrained: the shapes below must hold
whatever it writes. Calls are made by the default model (the tiny random
one seldom closes a free-text string), sampled over a few seeds; each
test needs at least one call to end within its token limit."""
import httpx
import openai
import pytest


PATCH = {"type": "custom", "name": "apply_patch", "description": "Apply a patch to the repository."}
LARK = {**PATCH, "format": {"type": "grammar", "syntax": "lark",
                            "definition": 'start: "*** Begin Patch" LF body "*** End Patch"\nbody: /(.|\\n)*/\nLF: "\\n"'}}
SHELL = {"type": "local_shell"}
WEATHER = {"type": "function", "name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)


def create(server, seed=1, **kw):
    kw = {"temperature": 0.7, "max_output_tokens": 120, **kw}
    return client(server).responses.create(model="", extra_body={"seed": seed}, **kw)


def completed(server, **kw):
    """The first of a few seeds whose reply ends within the limit."""
    for seed in range(4):
        r = create(server, seed=seed, **kw)
        if r.status == "completed":
            return seed, r
    pytest.fail("no seed ended a call within max_output_tokens")


@pytest.mark.parametrize("tool", [PATCH, LARK, {**PATCH, "format": {"type": "text"}}], ids=["plain", "lark", "text"])
def test_custom_tool_call_is_raw_text_input(real, tool):
    _, r = completed(real, input="fix the bug", tools=[tool, WEATHER],
                     tool_choice={"type": "custom", "name": "apply_patch"})
    call = r.output[-1]
    assert call.type == "custom_tool_call" and call.name == "apply_patch"
    assert isinstance(call.input, str) and call.call_id.startswith("call_") and call.id.startswith("ctc_")
    assert r.tools[0].type == "custom"


def test_custom_tool_call_streams_its_input(real):
    kw = dict(input="fix it", tools=[PATCH], tool_choice={"type": "custom", "name": "apply_patch"})
    seed, whole = completed(real, **kw)
    events = list(create(real, seed=seed, stream=True, **kw))
    types = [e.type for e in events]
    assert types[2] == "response.output_item.added" and events[2].item.type == "custom_tool_call"
    assert "response.function_call_arguments.delta" not in types
    deltas = [e.delta for e in events if e.type == "response.custom_tool_call_input.delta"]
    done = next(e for e in events if e.type == "response.custom_tool_call_input.done")
    assert "".join(deltas) == done.input == whole.output[-1].input
    assert types[-3:] == ["response.custom_tool_call_input.done", "response.output_item.done",
                          "response.completed"]
    assert events[-2].item.input == done.input and events[-2].item.call_id == events[2].item.call_id
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_local_shell_call_has_the_exec_shape(real):
    n = 0
    for seed in range(4):
        r = create(real, seed=seed, input="list files", tools=[SHELL, WEATHER], tool_choice={"type": "local_shell"})
        if r.status != "completed":
            continue  # cut by max_output_tokens: no shape to check
        n += 1
        call = r.output[-1]
        assert call.type == "local_shell_call" and call.id.startswith("lsh_") and call.call_id.startswith("call_")
        assert call.action.type == "exec" and call.action.command
        assert all(isinstance(a, str) for a in call.action.command)
        assert set(call.action.model_dump(exclude_none=True)) <= {"type", "command", "env", "timeout_ms",
                                                                  "working_directory", "user"}
    assert n


def test_local_shell_call_streams_as_one_item(real):
    kw = dict(input="ls", tools=[SHELL], tool_choice={"type": "local_shell"})
    seed, whole = completed(real, **kw)
    events = list(create(real, seed=seed, stream=True, **kw))
    types = [e.type for e in events]
    assert types[2:] == ["response.output_item.added", "response.output_item.done", "response.completed"]
    added, done = events[2].item, events[3].item
    assert added.status == "in_progress" and done.status == "completed" and added.call_id == done.call_id
    assert done.action == whole.output[-1].action


@pytest.mark.parametrize("tool,choice", [(PATCH, {"type": "custom", "name": "apply_patch"}),
                                         (SHELL, {"type": "local_shell"})], ids=["custom", "local_shell"])
def test_calls_sent_back_keep_the_cache(real, tool, choice):
    # store: false, the whole conversation sent back each turn: the call
    # item and its output render as the model's call did, so the next
    # turn's cached tokens cover the whole first turn, the call included.
    instr = " ".join(f"rule {i}: be brief." for i in range(60))
    for seed in range(4):
        r1 = httpx.post(real.url + "/v1/responses", json={
            "model": "", "instructions": instr, "input": "do it", "tools": [tool], "tool_choice": choice,
            "temperature": 0.7, "seed": seed, "max_output_tokens": 120, "store": False}, timeout=120).json()
        if r1["status"] == "completed":
            break
    assert r1["status"] == "completed", r1
    call = r1["output"][-1]
    out_type = call["type"] + "_output"
    result = {"type": out_type, "call_id": call["call_id"], "output": "done: ok"}
    items = [{"role": "user", "content": "do it"}, *r1["output"], result]
    r2 = httpx.post(real.url + "/v1/responses", json={
        "model": "", "instructions": instr, "input": items, "tools": [tool], "tool_choice": choice,
        "temperature": 0, "max_output_tokens": 4, "store": False}, timeout=120)
    assert r2.status_code == 200, r2.text
    u1, u2 = r1["usage"], r2.json()["usage"]
    assert u2["input_tokens"] > u1["input_tokens"] + u1["output_tokens"]
    assert u2["input_tokens_details"]["cached_tokens"] >= (u1["input_tokens"] + u1["output_tokens"] - 8) // 64 * 64


def test_local_shell_output_by_id_and_previous_response(real):
    _, r1 = completed(real, input="ls", tools=[SHELL], tool_choice={"type": "local_shell"})
    # the API's local_shell_call_output names the call by "id"
    r2 = create(real, previous_response_id=r1.id, tools=[SHELL], max_output_tokens=4,
                input=[{"type": "local_shell_call_output", "id": r1.output[-1].call_id, "output": "a.txt"}])
    assert r2.status in ("completed", "incomplete")


HOSTED = ["web_search", "web_search_preview", "file_search", "code_interpreter", "computer_use_preview",
          "image_generation", "mcp"]


@pytest.mark.parametrize("kind", HOSTED)
def test_hosted_tools_are_left_out_and_named(tiny, kind):
    # Codex declares web_search on every request: serve the rest, say what was left out
    r = httpx.post(tiny.url + "/v1/responses", json={"model": "", "input": "hi", "tools": [WEATHER, {"type": kind}],
                                                      "max_output_tokens": 4})
    assert r.status_code == 200, r.text
    ignored = r.headers["x-strata-ignored"]
    assert f"tools[1]: hosted tool '{kind}'" in ignored and "not offered to the model" in ignored


@pytest.mark.parametrize("body,words", [
    ({"tools": [{"name": "x"}]}, ["tools[0]: a tool needs a 'type'"]),
    ({"tools": ["web_search"]}, ["tools[0] must be an object"]),
    ({"tools": [{"type": "custom"}]}, ["custom tool needs a non-empty string 'name'"]),
    ({"tools": [{**PATCH, "format": {"type": "regexp"}}]}, ["'apply_patch'", "'format'"]),
    ({"tools": [PATCH, {**WEATHER, "name": "apply_patch"}]}, ["a second tool named 'apply_patch'"]),
    ({"tools": [SHELL, {**WEATHER, "name": "local_shell"}]}, ["a second tool named 'local_shell'"]),
    ({"tools": [PATCH], "tool_choice": {"type": "function", "name": "apply_patch"}}, ["'tool_choice'"]),
    ({"tools": [WEATHER], "tool_choice": {"type": "custom", "name": "get_weather"}}, ["'tool_choice'"]),
    ({"tools": [WEATHER], "tool_choice": {"type": "local_shell"}}, ["'tool_choice'"]),
    ({"tools": [WEATHER], "tool_choice": {"type": "web_search_preview"}}, ["'tool_choice'", "web_search_preview"]),
    ({"input": [{"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch"}]}, ["input[0]", "'input'"]),
    ({"input": [{"type": "local_shell_call", "call_id": "c1"}]}, ["input[0]", "'action'"]),
    ({"input": [{"type": "custom_tool_call_output", "output": "x"}]}, ["input[0]", "custom_tool_call_output"]),
])
def test_bad_tools_and_items_are_clear_400s(tiny, body, words):
    r = httpx.post(tiny.url + "/v1/responses", json={"model": "", "input": "hi", **body})
    assert r.status_code == 400, r.text
    for w in words:
        assert w in r.json()["error"]["message"]
    # nothing leaked: the server still answers
    ok = httpx.post(tiny.url + "/v1/responses", json={"model": "", "input": "hi", "max_output_tokens": 2})
    assert ok.status_code == 200


def test_local_shell_call_sent_back_reordered_keeps_the_cache(real):
    # The Agents SDK sends a local_shell_call back with its action's keys
    # in its own model's order: the call must still replay as the model's
    # tokens (arguments render with sorted keys on both sides).
    instr = " ".join(f"rule {i}: be brief." for i in range(60))
    body = {"model": "", "instructions": instr, "tools": [SHELL], "tool_choice": {"type": "local_shell"},
            "temperature": 0.7, "max_output_tokens": 120, "store": False}
    for seed in range(4):
        r1 = httpx.post(real.url + "/v1/responses", json={**body, "input": "list", "seed": seed}, timeout=120).json()
        if r1["status"] == "completed" and len(r1["output"][-1]["action"]) > 2:
            break
    assert r1["status"] == "completed" and len(r1["output"][-1]["action"]) > 2, r1
    call = dict(r1["output"][-1])
    call["action"] = dict(reversed(list(call["action"].items())))
    items = [{"role": "user", "content": "list"}, call,
             {"type": "local_shell_call_output", "call_id": call["call_id"], "output": "a.txt"}]
    r2 = httpx.post(real.url + "/v1/responses", json={**body, "input": items, "max_output_tokens": 4},
                    timeout=120).json()
    u1 = r1["usage"]
    assert r2["usage"]["input_tokens_details"]["cached_tokens"] >= u1["input_tokens"] + u1["output_tokens"] - 1, \
        (r2["usage"], u1, r1["output"][-1])


def test_agents_sdk_runs_local_shell_and_custom_tools_unchanged(real):
    agents = pytest.importorskip("agents")
    if not hasattr(agents, "LocalShellTool") or not hasattr(agents, "CustomTool"):
        pytest.skip("this openai-agents has no LocalShellTool / CustomTool")
    agents.set_tracing_disabled(True)
    ran, patches = [], []

    def shell(req):
        ran.append(list(req.data.action.command))
        return "a.txt\nb.txt"

    def patch(ctx, text):
        patches.append(text)
        return "applied"

    oa = openai.AsyncOpenAI(base_url=real.url + "/v1", api_key="none", max_retries=0)
    model = agents.OpenAIResponsesModel(model="gpt-4o", openai_client=oa)
    # The small model sometimes writes an argv that runs past max_tokens
    # (the SDK then raises on response.incomplete); which seeds do depends
    # on the kernels' rounding (AVX2 or AVX-512), so a few seeds are tried
    # and at least one must run the tool through the SDK.
    for tool, done in ((agents.LocalShellTool(executor=shell), ran),
                       (agents.CustomTool(name="apply_patch", description="Apply a patch.", on_invoke_tool=patch),
                        patches)):
        for seed in range(1, 6):
            agent = agents.Agent(name="a", instructions="Use the tool.", tools=[tool], model=model,
                                 model_settings=agents.ModelSettings(tool_choice="required", temperature=0.7,
                                                                     max_tokens=200, extra_body={"seed": seed}))
            try:
                agents.Runner.run_sync(agent, "List the files.", max_turns=2)
                raise AssertionError("tool_choice required on every turn must keep calling")
            except agents.exceptions.MaxTurnsExceeded:
                pass
            except agents.exceptions.ModelBehaviorError as e:
                assert "max_output_tokens" in str(e), e  # a cut call, nothing else
            if done:
                break
    assert ran and all(cmd and all(isinstance(a, str) for a in cmd) for cmd in ran)
    assert patches and all(isinstance(p, str) for p in patches)
