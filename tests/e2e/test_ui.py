"""The /ui page in a real browser (headless Chromium, tests/e2e/cdp.py).

A scripted agent loop talks to a server with two tenant keys and an
operator key while the page is open: three turns, a restart (the disk
tier serves the next turn), then a turn with an edited system prompt. The
tests read what the page shows, from the DOM it renders: each bar's
segments (tokens per tier), the miss marker on the edited turn (message 0,
the system prompt), the text around the first difference, the
conversation's turns with the restart between them, the tiers (operator
only), and that a tenant sees only its own requests. Screenshots go to
build/ui-screens/ (UI_SCREENS to change).
"""
import os

import httpx
import pytest

import conftest
from conftest import ROOT, TINY_MODEL, Server

SCREENS = os.environ.get("UI_SCREENS", os.path.join(ROOT, "build", "ui-screens"))
KEYS = {"a": "tenant-a-key", "b": "tenant-b-key", "op": "operator-key"}
SYSTEM = ("You are a careful coding agent working in a small C repository. " +
          "Read files before editing them, run the tests after every change, and keep answers short. " * 8)

# What the page shows of each request, read from its DOM.
ROWS = """[...document.querySelectorAll('#requests .req')].map(r => ({
  id: +r.dataset.id, tenant: r.dataset.tenant || null, finish: r.dataset.finish,
  conversation: r.dataset.conversation, prompt: +r.dataset.prompt, boot: r.dataset.boot,
  segs: Object.fromEntries([...r.querySelectorAll('.bar .seg')].map(s => [s.dataset.tier, +s.dataset.tokens])),
  marker: (m => m && {message: +m.dataset.message, role: m.dataset.role, token: +m.dataset.token,
                       lost: +m.dataset.lost})(r.querySelector('.miss')),
  why: [...r.querySelectorAll('.why')].map(w => w.textContent).join(' | ')}))"""


def start(cache_dir, port=None):
    args = ("--parallel", "2", "--ctx", "2048", "--api-key", f"{KEYS['a']},{KEYS['b']}", "--metrics-key", KEYS["op"],
            "--cache-dir", cache_dir)
    if port is None:
        return Server(TINY_MODEL, *args)
    saved = conftest.free_port
    conftest.free_port = lambda: port  # the same address: the open page carries on across the restart
    try:
        return Server(TINY_MODEL, *args)
    finally:
        conftest.free_port = saved


class Agent:
    """A scripted agent: each turn sends the whole conversation, appends the
    reply and a tool result, as a coding agent does."""

    def __init__(self, key, name):
        self.key, self.name = key, name
        self.messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "List the files."}]

    def turn(self, url, n, headers=None):
        body = {"messages": self.messages, "max_tokens": 6, "temperature": 0}
        if self.name:  # the conversation's name; without it, a session header or the anchor names it
            body["prompt_cache_key"] = self.name
        r = httpx.post(url + "/v1/chat/completions", timeout=60, json=body,
                       headers={**({"Authorization": f"Bearer {self.key}"} if self.key else {}), **(headers or {})})
        assert r.status_code == 200, r.text
        self.messages.append({"role": "assistant", "content": r.json()["choices"][0]["message"]["content"]})
        self.messages.append({"role": "user", "content": f"Tool result {n}: src/main.c src/util.c README.md"})
        return r.json()["usage"]


def rows(browser, n, what):
    """The page's request rows once it shows n of them (it polls every second)."""
    browser.wait(f"document.querySelectorAll('#requests .req').length === {n} && "
                 f"!document.querySelector('#requests .bar.running')", what=what)
    return {r["id"]: r for r in browser.js(ROWS)}


@pytest.fixture(scope="module")
def browser():
    from cdp import Browser
    b = Browser()
    yield b
    b.close()


def test_page_shows_hits_misses_restart_and_tenants(browser, tmp_path):
    cache = str(tmp_path / "kv")
    srv = start(cache)
    port = srv.port
    try:
        browser.headers(Authorization=f"Bearer {KEYS['a']}")
        browser.open(srv.url + "/ui")
        browser.wait("document.body.dataset.polls >= 1 && document.body.dataset.view", what="the first poll")
        assert browser.js("document.body.dataset.view") == "tenant"
        assert browser.js("document.querySelectorAll('#requests .req').length") == 0

        agent, other = Agent(KEYS["a"], "agent-1"), Agent(KEYS["b"], "agent-b")
        for n in range(3):
            agent.turn(srv.url, n)
        other.turn(srv.url, 0)
        seen = rows(browser, 3, "the agent's three turns, live")  # tenant b's request is not shown
        ids = sorted(seen)
        first, second, third = (seen[i] for i in ids)
        assert first["segs"] == {"computed": first["prompt"]}  # a cold start: everything computed
        for r in (second, third):  # each turn extends the last: its prefix from the live pool
            assert r["segs"]["live"] > 0.8 * r["prompt"] and r["marker"] is None, r
            assert r["segs"]["live"] + r["segs"]["computed"] == r["prompt"]
        assert {r["conversation"] for r in seen.values()} == {"agent-1"}
        assert all(r["tenant"] for r in seen.values())

        assert srv.stop() == 0
        srv = start(cache, port)  # a restart: the live pool is empty, the disk tier is not
        agent.turn(srv.url, 3)
        agent.messages[0]["content"] = SYSTEM.replace("careful", "reckless")  # the client edits its system prompt
        agent.turn(srv.url, 4)
        seen = rows(browser, 5, "two more turns after the restart")
        after, edited = seen[max(seen) - 1], seen[max(seen)]
        assert after["boot"] != third["boot"]
        assert after["segs"].get("disk", 0) > 0.8 * after["prompt"] and "live" not in after["segs"], after
        assert after["marker"] is None
        assert edited["marker"] == {"message": 0, "role": "system", "token": edited["marker"]["token"],
                                    "lost": edited["marker"]["lost"]}, edited
        assert edited["marker"]["lost"] > 300 and edited["segs"]["computed"] > 0.9 * edited["prompt"]
        assert "message 0 (system)" in edited["why"]

        # the conversation's turns, with the restart between the third and the fourth
        conv = browser.js("""(c => c && {turns: +c.dataset.turns, marks: c.querySelectorAll('.boot-mark').length,
            missed: [...c.querySelectorAll('.turn.missed')].map(t => +t.dataset.id)})
            (document.querySelector('#conversations .conv[data-key="agent-1"]'))""")
        assert conv == {"turns": 5, "marks": 1, "missed": [edited["id"]]}

        # clicking the edited turn shows the rendered prompt around the difference
        browser.js(f"document.querySelector('#req-{edited['id']}').click()")
        ex = browser.wait(f"""document.querySelector('#detail').dataset.id === '{edited["id"]}' &&
            !document.querySelector('#excerpt').hidden && {{was: document.querySelector('#excerpt .was').textContent,
            now: document.querySelector('#excerpt .now').textContent,
            diff: document.querySelector('#detail-messages li.diff').dataset.role}}""", what="the excerpt")
        assert ex["was"].strip().startswith("careful") and ex["now"].strip().startswith("reckless") and ex["diff"] == "system", ex
        assert browser.js("document.querySelector('#tier-disk')") is None  # the tiers are the operator's
        own = browser.js("Object.fromEntries([...document.querySelectorAll('#own-tiers span')]"
                         ".map(s => [s.dataset.tier, +s.dataset.tokens]))")
        for tier in ("live", "disk", "computed"):  # the tenant's own tokens by tier: the sum of its bars
            assert own[tier] == sum(r["segs"].get(tier, 0) for r in seen.values()), (tier, own, seen)
        marks = browser.js(f"[...document.querySelectorAll('#req-{edited['id']} .mark')].map(m => +m.dataset.end)")
        assert marks and all(0 < m <= edited["prompt"] for m in marks)  # its retention marks (the anchor)
        browser.screenshot(os.path.join(SCREENS, "ui-tenant.png"))

        # the operator sees every tenant's requests and the tiers
        browser.headers(Authorization=f"Bearer {KEYS['op']}")
        browser.open(srv.url + "/ui")
        browser.wait("document.body.dataset.view === 'operator'", what="the operator view")
        seen = rows(browser, 6, "every tenant's requests")
        assert len({r["tenant"] for r in seen.values()}) == 2
        disk = browser.wait("(t => t && +t.dataset.bytes > 0 && {bytes: +t.dataset.bytes, blocks: +t.dataset.blocks})"
                            "(document.querySelector('#tier-disk'))", what="the disk tier")
        assert disk["blocks"] > 0
        tiers = httpx.get(srv.url + "/ui/state", headers={"Authorization": f"Bearer {KEYS['op']}"}).json()["tiers"]
        assert tiers["disk"]["hit_tokens"] == after["segs"]["disk"]  # this run's only disk hit
        assert tiers["live"]["hit_tokens"] == edited["segs"].get("live", 0)  # and its only live one
        assert tiers["totals"]["hit_tokens"] == tiers["disk"]["hit_tokens"] + tiers["live"]["hit_tokens"]
        assert browser.js("!!document.querySelector('#tier-live') && !!document.querySelector('#hit-rate svg')")
        browser.js(f"document.querySelector('#req-{edited['id']}').click()")
        browser.wait(f"document.querySelector('#detail').dataset.id === '{edited['id']}'")
        browser.screenshot(os.path.join(SCREENS, "ui-operator.png"))

        # a turn while the operator watches: the tiers' hit rate over time gets a point
        agent.turn(srv.url, 5)
        rate = browser.wait("+document.querySelector('#tier-hit-rate').dataset.samples >= 1 && "
                            "+document.querySelector('#tier-hit-rate').dataset.max",
                            what="a point of the tiers' hit rate")
        assert rate > 0.8  # the turn extended the last one: nearly all of it from the live pool
    finally:
        assert srv.stop() == 0


def test_a_person_gives_the_key_as_basic_credentials(browser, tmp_path):
    """The way a person opens the page: no header, the browser asks (or
    the URL carries user:key@) and sends Basic credentials, for the page,
    its files and every poll."""
    srv = start(str(tmp_path / "kv"))
    try:
        Agent(KEYS["b"], "b-only").turn(srv.url, 0)
        browser.headers()
        browser.open(srv.url.replace("http://", f"http://anyone:{KEYS['b']}@") + "/ui")
        browser.wait("document.body.dataset.polls >= 2", what="two polls with Basic credentials")
        assert browser.js("document.body.dataset.view") == "tenant"
        assert browser.js("document.querySelector('#status').dataset.state") == "live"
        assert browser.js("getComputedStyle(document.querySelector('header')).display") == "flex"  # app.css ran
        assert rows(browser, 1, "tenant b's one request")[1]["conversation"] == "b-only"
    finally:
        assert srv.stop() == 0


def test_recurrent_model_shows_snapshots(browser, tmp_path):
    """qwen35 (recurrent layers): the tiers show state snapshots, and a
    turn's detail where it resumed from one."""
    model = os.path.join(conftest.GEN, "models", "qwen35-f32.gguf")
    srv = Server(model, "--parallel", "1", "--ctx", "2048", "--cache-block-tokens", "16",
                 "--cache-dir", str(tmp_path / "kv"))
    try:
        agent = Agent(None, "q35")
        agent.messages[0]["content"] = "You are a coding agent. Answer with one tool call per turn."
        for n in range(2):
            agent.turn(srv.url, n)
        browser.headers()
        browser.open(srv.url + "/ui")
        seen = rows(browser, 2, "two qwen35 turns")
        second = seen[max(seen)]
        assert second["segs"].get("live", 0) > 0
        snaps = browser.wait("(t => t && {stored: +t.dataset.stored, restored: +t.dataset.restored})"
                             "(document.querySelector('#tier-snapshots'))", what="the snapshots")
        assert snaps["stored"] > 0 and snaps["restored"] >= 1, snaps
        browser.js(f"document.querySelector('#req-{second['id']}').click()")
        fact = browser.wait("(d => d && d.textContent)(document.querySelector('#detail dd[data-fact=snapshots]'))",
                            what="the turn's snapshot fact")
        assert fact.startswith(f"resumed at {second['segs']['live']} from live"), fact
    finally:
        assert srv.stop() == 0


def test_sliding_window_model_shows_window_facts(browser, tmp_path):
    """gemma3 (sliding-window layers): the tiers show the window's reload
    counters and a request's detail its own."""
    gemma = os.environ.get("STRATA_GEMMA3_MODEL", os.path.join(ROOT, "models", "gemma-3-270m-q4_k_m.gguf"))
    if not os.path.exists(gemma):
        pytest.skip("Gemma 3 270M not downloaded (make model-gemma3)")
    srv = Server(gemma, "--parallel", "1", "--ctx", "1024", "--cache-dir", str(tmp_path / "kv"))
    try:
        Agent(None, "g3").turn(srv.url, 0)
        browser.headers()
        browser.open(srv.url + "/ui")
        seen = rows(browser, 1, "one gemma3 request")
        win = browser.wait("(t => t && {reloaded: t.dataset.reloaded, cut: t.dataset.cut})"
                           "(document.querySelector('#tier-window'))", what="the window counters")
        assert win == {"reloaded": "0", "cut": "0"}  # one cold request: nothing read back, nothing cut
        browser.js(f"document.querySelector('#req-{min(seen)}').click()")
        fact = browser.wait("(d => d && d.textContent)(document.querySelector('#detail dd[data-fact=window]'))",
                            what="the request's window fact")
        assert fact == "0 blocks reloaded, 0 tokens cut"
        assert browser.js("document.querySelector('#tier-snapshots')") is None  # no recurrent layers
    finally:
        assert srv.stop() == 0


def test_state_endpoint_keys_and_assets(browser, tmp_path):
    srv = start(str(tmp_path / "kv"))
    try:
        url = srv.url
        r = httpx.get(url + "/ui")
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Basic ")
        page = httpx.get(url + "/ui", auth=("anyone", KEYS["a"]))  # a browser's Basic credentials
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        assert "default-src 'self'" in page.headers["content-security-policy"]
        total = sum(len(httpx.get(url + f"/ui/{f}", auth=("x", KEYS["a"])).content)
                    for f in ("", "app.js", "app.css"))
        assert 2000 < total < 300_000  # small: the page's three files, no framework
        assert httpx.get(url + "/ui/nothing.js", auth=("x", KEYS["a"])).status_code == 404
        assert httpx.get(url + "/ui/state", auth=("x", "wrong")).status_code == 401
        assert httpx.get(url + "/ui/state?since=x", auth=("x", KEYS["a"])).status_code == 400

        Agent(KEYS["a"], "a1").turn(url, 0)
        Agent(KEYS["b"], "b1").turn(url, 0)
        mine = httpx.get(url + "/ui/state", headers={"Authorization": f"Bearer {KEYS['a']}"}).json()
        assert mine["view"] == "tenant" and "tiers" not in mine
        assert [q["conversation"]["key"] for q in mine["requests"]] == ["a1"]
        assert KEYS["a"] not in httpx.get(url + "/ui/state", auth=("x", KEYS["a"])).text  # a hash names tenants
        op = httpx.get(url + "/ui/state", headers={"Authorization": f"Bearer {KEYS['op']}"}).json()
        assert op["view"] == "operator" and {"live", "disk", "totals"} <= set(op["tiers"])
        assert sorted(q["conversation"]["key"] for q in op["requests"]) == ["a1", "b1"]
        later = httpx.get(url + f"/ui/state?since={op['rev']}", headers={"Authorization": f"Bearer {KEYS['op']}"})
        assert later.json()["requests"] == []  # nothing changed since

        # conversations a client did not name: by a session header, else by the anchor
        # (the first user message), which stays when the system prompt is edited
        Agent(KEYS["a"], None).turn(url, 0, headers={"x-session-id": ("sess-x" + "\u00e9" * 80).encode()})
        plain = Agent(KEYS["a"], None)
        plain.turn(url, 0)
        plain.messages[0]["content"] = SYSTEM.replace("careful", "hasty")
        plain.turn(url, 1)
        later = httpx.get(url + f"/ui/state?since={mine['rev']}", auth=("x", KEYS["a"])).json()["requests"]
        convs = [q["conversation"] for q in later]
        assert convs[0]["from"] == "header" and convs[0]["key"].startswith("sess-x\u00e9")
        assert convs[0]["key"].endswith("\ufffd")  # cut to fit inside a character: still UTF-8
        assert convs[1]["from"] == convs[2]["from"] == "anchor" and convs[1]["key"] == convs[2]["key"]
        assert later[2]["first_difference"]["role"] == "system"

        # a request that never ran (longer than a sequence's context) shows as refused, with why
        long = httpx.post(url + "/v1/chat/completions", headers={"Authorization": f"Bearer {KEYS['a']}"}, timeout=60,
                          json={"messages": [{"role": "user", "content": "word " * 3000}], "max_tokens": 2})
        assert long.status_code == 400
        last = httpx.get(url + "/ui/state", auth=("x", KEYS["a"])).json()["requests"][-1]
        assert last["finish"] == "refused" and "context" in last["error"], last
        browser.headers(Authorization=f"Bearer {KEYS['a']}")
        browser.open(url + "/ui")
        shown = rows(browser, len(mine["requests"]) + 4, "the refused request too")[last["id"]]
        assert shown["finish"] == "refused" and shown["segs"] == {} and "context" in shown["why"], shown
    finally:
        assert srv.stop() == 0


def test_ui_records_zero_turns_the_page_off(tmp_path):
    srv = Server(TINY_MODEL, "--parallel", "1", "--ctx", "1024", "--ui-records", "0")
    try:
        assert httpx.get(srv.url + "/ui").status_code == 404
        assert httpx.get(srv.url + "/ui/state").status_code == 404
    finally:
        assert srv.stop() == 0
