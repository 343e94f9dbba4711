"""Smoke run of the load test (bench/load.py --duration 5 --clients 4).

Both APIs streamed, planned disconnects, prompts up to ~1.5k tokens: the
server must lose no request, send no 5xx (and no 4xx), be idle afterwards,
still answer and exit cleanly on SIGTERM. The second run adds idle
connections and slow ones (a header at 1 byte/s): the server must close
each within its header timeout (2 s here) + 3 s, and the regular clients
meet the same bar. Nothing here is timed otherwise.
"""
import json
import os
import subprocess
import sys

import pytest

from conftest import REAL_MODEL, ROOT, STRATA


@pytest.mark.parametrize("hostile", [[], ["--idle-clients", "12", "--slow-clients", "6", "--header-timeout", "2"]],
                         ids=["plain", "idle-and-slow"])
def test_load_smoke(tmp_path, hostile):
    if not os.path.exists(REAL_MODEL):
        pytest.skip("default model not downloaded (make model)")
    out = tmp_path / "load"
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "load.py"), "--strata", STRATA,
                        "--model", REAL_MODEL, "--duration", "5", "--clients", "4", "--out", str(out), *hostile],
                       capture_output=True, text=True, timeout=600)
    assert (out / "summary.json").exists(), p.stdout + p.stderr
    s = json.loads((out / "summary.json").read_text())
    assert s["sent"] > 0
    assert s["lost"] == 0, s["errors"]
    assert s["other_5xx"] == 0 and s["http_4xx"] == 0, s["errors"]
    assert s["idle_after_s"] is not None, "a slot or queue place is still held after the load"
    assert s["serves_after"] and s["exit_code"] == 0
    for kind in ("idle", "slow") if hostile else ():
        c = s[f"{kind}_connections"]
        assert c["opened"] >= 6 and c["closed_by_server"] == c["opened"], c
        assert c["closed_after_max_s"] <= 2 + 3, c
