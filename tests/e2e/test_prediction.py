"""OpenAI Predicted Outputs ("prediction": {"type": "content", ...}): the
predicted text is the speculative drafter's first source, so a reply that
re-emits it (a file with one edit) is verified many tokens per forward
pass, and the reply is the same bytes as without a prediction, whatever
the prediction says (exact speculation: the sampler still picks every
token). /metrics shows the drafts taken from it.
"""
import os
import uuid

import httpx
import pytest

from conftest import REAL_MODEL, TINY_MODEL, Server
from test_speculative import COPY, FILE, chat_out


@pytest.fixture(scope="module", params=["llama-tiny", "smollm2"])
def srv(request):
    path = TINY_MODEL if request.param == "llama-tiny" else REAL_MODEL
    if not os.path.exists(path):
        pytest.skip(f"{path} not present")
    s = Server(path, "--parallel", "2", "--ctx", "2048")
    s.name = request.param
    yield s
    assert s.stop() == 0


def chat(srv, body):
    r = httpx.post(srv.url + "/v1/chat/completions", json={**body, "cache_salt": uuid.uuid4().hex}, timeout=600)
    assert r.status_code == 200 and "x-strata-ignored" not in r.headers, (r.status_code, r.headers, r.text)
    return r.json()


def accepted(srv):
    return srv.metrics()["strata_spec_accepted_tokens_total"]


@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 0.9, "seed": 11, "top_p": 0.95}],
                         ids=["greedy", "sampled"])
def test_prediction_never_changes_the_reply(srv, sampling):
    body = {"messages": COPY, "max_tokens": 64, "logprobs": True, **sampling}
    plain = chat(srv, {**body, "speculative": False})
    text = plain["choices"][0]["message"]["content"]
    for prediction in (text, FILE, "nothing like the reply at all", [{"type": "text", "text": text[:40]},
                                                                     {"type": "text", "text": text[40:]}]):
        got = chat(srv, {**body, "prediction": {"type": "content", "content": prediction}})
        assert chat_out(got) == chat_out(plain), prediction


def test_a_right_prediction_is_accepted_in_long_drafts(srv):
    body = {"messages": COPY, "max_tokens": 64, "temperature": 0, "ignore_eos": True}
    plain = chat(srv, {**body, "speculative": False})
    n = plain["usage"]["completion_tokens"]
    before = accepted(srv)
    chat(srv, body)
    own = accepted(srv) - before  # drafted from the sequence's own context only
    before = accepted(srv)
    got = chat(srv, {**body, "prediction": {"type": "content", "content": plain["choices"][0]["message"]["content"]}})
    assert chat_out(got) == chat_out(plain)
    predicted = accepted(srv) - before
    # every token the prediction holds, bar the first (sampled from the
    # prompt's row) and where the reply's text splits into other tokens
    assert predicted >= n // 2, (predicted, own, n)
    details = got["usage"]["completion_tokens_details"]  # OpenAI's fields: drafted from the prediction
    assert n // 2 <= details["accepted_prediction_tokens"] <= predicted, (details, predicted)
    assert details["rejected_prediction_tokens"] >= 0
    assert "completion_tokens_details" not in plain["usage"]  # no prediction, nothing to say
    if srv.name == "llama-tiny":  # random weights write noise: its own context predicts little
        assert predicted > own, (predicted, own, n)


@pytest.mark.parametrize("bad", [{"type": "text", "content": "x"}, {"type": "content"}, "x",
                                 {"type": "content", "content": [{"type": "image_url"}]}])
def test_bad_prediction_is_400(srv, bad):
    r = httpx.post(srv.url + "/v1/chat/completions", json={"messages": COPY, "max_tokens": 1, "prediction": bad},
                   timeout=60)
    assert r.status_code == 400 and "prediction" in r.json()["error"]["message"], r.text
