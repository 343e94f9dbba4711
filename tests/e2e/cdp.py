"""A headless Chromium driven over the DevTools protocol, for tests of
Strata's /ui page (tests/e2e/test_ui.py).

Chromium is Debian's `chromium` package (scripts/install-deps.sh --test);
the protocol runs over a websocket (`websockets`, pip). Only what the tests
need: set request headers (the API key), open a URL, evaluate JavaScript
in the page and read back JSON values, and take screenshots.
"""
import base64
import json
import os
import shutil
import subprocess
import tempfile
import time

import httpx
from websockets.sync.client import connect

CHROMIUM = os.environ.get("CHROMIUM", shutil.which("chromium") or shutil.which("chromium-browser") or "chromium")


class Browser:
    def __init__(self, width=1400, height=1000):
        if not shutil.which(CHROMIUM):
            raise RuntimeError("chromium is not installed: scripts/install-deps.sh --test installs it")
        self.profile = tempfile.mkdtemp(prefix="strata-chromium-")
        # --remote-debugging-port=0: Chromium picks a free port and writes it
        # into DevToolsActivePort in the profile, so parallel runs never clash.
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--no-default-browser-check", "--disable-extensions",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={self.profile}", "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1",
             f"--window-size={width},{height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.next_id = 0
        try:
            port = self._devtools_port()
            page = self._page_target(port)
            self.ws = connect(page["webSocketDebuggerUrl"], max_size=64 << 20, open_timeout=10)
            self.call("Page.enable")
            self.call("Network.enable")
            self.call("Emulation.setDeviceMetricsOverride",
                      width=width, height=height, deviceScaleFactor=1, mobile=False)
        except Exception:
            self.close()
            raise

    def _devtools_port(self):
        path = os.path.join(self.profile, "DevToolsActivePort")
        deadline = time.time() + 20
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode}")
            try:
                with open(path) as f:
                    return int(f.readline())
            except (FileNotFoundError, ValueError):
                time.sleep(0.05)
        raise RuntimeError("chromium did not open its DevTools port in 20 s")

    @staticmethod
    def _page_target(port):
        deadline = time.time() + 10
        while time.time() < deadline:
            pages = [t for t in httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=5).json()
                     if t.get("type") == "page"]
            if pages:
                return pages[0]
            time.sleep(0.05)
        raise RuntimeError("chromium has no page target")

    def call(self, method, **params):
        """Sends one command and returns its result (events are skipped)."""
        self.next_id += 1
        my = self.next_id
        self.ws.send(json.dumps({"id": my, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=30))
            if msg.get("id") == my:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def headers(self, **h):
        """Headers sent with every request the page makes from now on."""
        self.call("Network.setExtraHTTPHeaders", headers=h)

    def open(self, url):
        self.call("Page.navigate", url=url)

    def js(self, expr):
        """The value of a JavaScript expression in the page (JSON-able)."""
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expr}: {r['exceptionDetails'].get('text')} "
                               f"{r['exceptionDetails'].get('exception', {}).get('description', '')}")
        return r["result"].get("value")

    def wait(self, expr, timeout=15, what=None):
        """Waits until expr is truthy in the page; returns its value."""
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            try:
                last = self.js(expr)
            except RuntimeError as e:  # the page is loading: no document yet
                last = str(e)
            else:
                if last:
                    return last
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what or expr} (last: {last!r})")

    def screenshot(self, path, full=True):
        """A PNG of the page, the whole of it (full) or the viewport."""
        params = {"format": "png"}
        if full:
            size = self.call("Page.getLayoutMetrics")["cssContentSize"]
            params.update(captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1})
        data = self.call("Page.captureScreenshot", **params)["data"]
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
        return path

    def close(self):
        ws = getattr(self, "ws", None)
        if ws:
            ws.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)
