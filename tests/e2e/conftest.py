"""Fixtures for end-to-end tests: a real `strata serve` process per model.

Each server listens on a free loopback port; tests talk to it with the
official `openai` / `anthropic` SDKs or raw HTTP. Servers are stopped with
SIGTERM at the end of the session and must exit cleanly.
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import httpx
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
STRATA = os.environ.get("STRATA_BIN", os.path.join(ROOT, "strata"))
GEN = os.environ.get("TEST_DATA_DIR", os.path.join(ROOT, "tests", "data", "gen"))
REAL_MODEL = os.environ.get("STRATA_MODEL", os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
TINY_MODEL = os.path.join(GEN, "models", "llama-q4_1.gguf")


def _pid_alive(name):
    try:
        os.kill(int(name), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        pass
    return True


# Server logs of this session only, in a folder of its own (serve-logs/PID):
# a failure points at its log, finished sessions' logs do not pile up, and
# two sessions sharing GEN (worktrees, a second pytest) never delete each
# other's open logs.
LOGS_ROOT = os.path.join(GEN, "serve-logs")
os.makedirs(LOGS_ROOT, exist_ok=True)
for _old in os.listdir(LOGS_ROOT):
    if not _pid_alive(_old):
        _path = os.path.join(LOGS_ROOT, _old)
        shutil.rmtree(_path, ignore_errors=True) if os.path.isdir(_path) else os.remove(_path)
LOGS = os.path.join(LOGS_ROOT, str(os.getpid()))
os.makedirs(LOGS, exist_ok=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, model, *extra, env=None):
        self.tmp_cache = None
        if "--cache-dir" not in extra:  # never touch the user's own cache
            self.tmp_cache = tempfile.mkdtemp(prefix="strata-kv-")
            extra = (*extra, "--cache-dir", self.tmp_cache)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(os.path.join(LOGS, f"serve-{self.port}.log"), "w")
        self.proc = subprocess.Popen([STRATA, "serve", "-m", model, "--port", str(self.port), *extra],
                                     stdout=self.log, stderr=subprocess.STDOUT,
                                     env={**os.environ, **env} if env else None)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"strata serve exited with {self.proc.returncode}; see {self.log.name}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("strata serve did not become healthy in 60 s")

    def hang_report(self):
        """Every thread's stack (gdb) and the log's last lines, for a
        server that does not stop: what CI prints is all there is to go on."""
        report = ""
        if shutil.which("gdb"):
            r = subprocess.run(["gdb", "-p", str(self.proc.pid), "-batch", "-ex", "thread apply all bt"],
                               capture_output=True, text=True, timeout=60)
            frames = (re.sub(r"^(#\d+)\s+(?:0x\w+ in )?(\S+) \(.*\) (at|from) ", r"\1 \2 \3 ", l)
                      for l in r.stdout.splitlines() if l.startswith(("#", "Thread")))
            report += "thread stacks:\n" + "\n".join(frames)
        self.log.flush()
        with open(self.log.name) as f:
            report += "\nlog tail:\n" + "".join(f.readlines()[-30:])
        return report

    def metrics(self):
        """/metrics as {name: value} (comment lines dropped)."""
        text = httpx.get(self.url + "/metrics", timeout=10).text
        return {l.split()[0]: float(l.split()[1]) for l in text.splitlines() if l and not l.startswith("#")}

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"strata serve did not stop within 30 s of SIGTERM\n{self.hang_report()}") from None
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self.log.close()
            if self.tmp_cache:
                shutil.rmtree(self.tmp_cache, ignore_errors=True)
        return rc


@pytest.fixture(scope="session")
def tiny():
    s = Server(TINY_MODEL, "--parallel", "4", "--ctx", "2048", "--max-body-mb", "1")
    yield s
    assert s.stop() == 0, "server did not shut down cleanly on SIGTERM"


@pytest.fixture(scope="session")
def real():
    if not os.path.exists(REAL_MODEL):
        pytest.skip("default model not downloaded (make model)")
    s = Server(REAL_MODEL, "--parallel", "4", "--ctx", "2048")
    yield s
    assert s.stop() == 0, "server did not shut down cleanly on SIGTERM"


@pytest.fixture(scope="module")
def strict():
    """The tiny model under --strict-requests (a part it cannot honour is a 400)."""
    s = Server(TINY_MODEL, "--parallel", "1", "--ctx", "2048", "--strict-requests")
    yield s
    assert s.stop() == 0
