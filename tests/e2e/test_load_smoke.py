"""Smoke run of the load test (bench/load.py --duration 5 --clients 4).

Both APIs streamed, planned disconnects, prompts up to ~1.5k tokens: the
server must lose no request, send no 5xx (and no 4xx), be idle afterwards,
still answer and exit cleanly on SIGTERM. Nothing here is timed.
"""
import json
import os
import subprocess
import sys

import pytest

from conftest import REAL_MODEL, ROOT, STRATA


def test_load_smoke(tmp_path):
    if not os.path.exists(REAL_MODEL):
        pytest.skip("default model not downloaded (make model)")
    out = tmp_path / "load"
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "load.py"), "--strata", STRATA,
                        "--model", REAL_MODEL, "--duration", "5", "--clients", "4", "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert (out / "summary.json").exists(), p.stdout + p.stderr
    s = json.loads((out / "summary.json").read_text())
    assert s["sent"] > 0
    assert s["lost"] == 0, s["errors"]
    assert s["other_5xx"] == 0 and s["http_4xx"] == 0, s["errors"]
    assert s["idle_after_s"] is not None, "a slot or queue place is still held after the load"
    assert s["serves_after"] and s["exit_code"] == 0
