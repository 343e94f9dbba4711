"""qwen35 (hybrid recurrent) served end to end on the tiny generated models:
the dense qwen35 and the mixture-of-experts qwen35moe (each test runs on
both).

Checked here with the prefix cache off (`--no-prefix-cache`: every
request prefills from zero): greedy output of `strata serve` equals
`strata run` on the same raw prompt; repeating a request, or extending a
conversation, gives the same bytes with zero cached tokens; two requests
decoded side by side in one batch give what each gives alone (their
states stay apart). With the cache on, recurrent-state snapshots let a
request resume at a cached prefix: test_qwen35_snapshots.py.
"""
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from conftest import GEN, STRATA, Server

MODELS = ["qwen35-f32", "qwen35moe-q4_k_m"]


@pytest.fixture(scope="module", params=MODELS)
def q35(request):
    path = os.path.join(GEN, "models", request.param + ".gguf")
    if not os.path.exists(path):
        pytest.skip(f"tiny {request.param} model not generated (make testdata)")
    s = Server(path, "--parallel", "2", "--ctx", "1024", "--no-prefix-cache")
    s.model = path
    yield s
    assert s.stop() == 0, "server did not shut down cleanly on SIGTERM"


def complete(srv, prompt, n=24):
    r = httpx.post(srv.url + "/v1/completions", timeout=60,
                   json={"prompt": prompt, "max_tokens": n, "temperature": 0})
    r.raise_for_status()
    return r.json()


def cached(body):
    return ((body.get("usage") or {}).get("prompt_tokens_details") or {}).get("cached_tokens", 0)


def test_serve_matches_run(q35):
    prompt = "The quick brown fox jumps over the lazy dog. A cache that never forgets"
    out = subprocess.run([STRATA, "run", "-m", q35.model, "-p", prompt, "-n", "24", "--temp", "0", "-q"],
                         capture_output=True, timeout=60, check=True).stdout.decode("utf-8", "replace")
    body = complete(q35, prompt)
    assert body["choices"][0]["text"] == out.rstrip("\n") or body["choices"][0]["text"] == out


def test_repeat_and_extend_prefill_from_zero(q35):
    a = "Hello, world! Hello there, how are you today? I am fine"
    first, again = complete(q35, a), complete(q35, a)
    assert first["choices"][0]["text"] == again["choices"][0]["text"]
    assert cached(first) == 0 and cached(again) == 0
    longer = a + first["choices"][0]["text"] + " What is the capital"
    ext = complete(q35, longer)
    assert cached(ext) == 0
    assert ext["choices"][0]["text"] == complete(q35, longer)["choices"][0]["text"]


def test_side_by_side_equals_alone(q35):
    p1, p2 = "def main(argc, argv): return 0", "Once upon a time, there was a little server"
    alone = [complete(q35, p)["choices"][0]["text"] for p in (p1, p2)]
    with ThreadPoolExecutor(2) as ex:
        both = list(ex.map(lambda p: complete(q35, p)["choices"][0]["text"], (p1, p2)))
    assert both == alone
