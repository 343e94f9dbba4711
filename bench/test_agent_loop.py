#!/usr/bin/env python3
"""Checks of bench/agent_loop.py's bookkeeping (no server needed):

    python3 -m pytest -q bench/test_agent_loop.py
"""
import os
import sys
from types import SimpleNamespace

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import agent_loop  # noqa: E402


def row(prompt, cached, completion=32, finish="length", prompt_n=None):
    return {"prompt_tokens": prompt, "cached_tokens": cached, "completion_tokens": completion,
            "finish_reason": finish, "timings_prompt_n": prompt_n, "ttft_s": 1.0, "total_s": 2.0}


def test_ideal_is_what_the_previous_turn_never_ran():
    # turn 1 extends turn 0's 100 prompt + 31 fed-back reply tokens by 50
    rows = [row(100, 0), row(181, 131)]
    agent_loop.annotate(rows, [])
    assert [r["ideal"] for r in rows] == [100, 50]
    assert [r["prefilled"] for r in rows] == [100, 50]
    # a reply that stopped by itself fed back all its tokens
    rows = [row(100, 0, completion=10, finish="stop"), row(160, 110)]
    agent_loop.annotate(rows, [])
    assert rows[1]["ideal"] == 50


def test_llama_server_prefill_comes_from_timings():
    rows = [row(100, 0, prompt_n=100), row(181, 131, prompt_n=181)]  # it reprocessed everything
    agent_loop.annotate(rows, [])
    assert rows[1]["prefilled"] == 181 and rows[1]["ideal"] == 50


def test_recurrent_ideal_adds_tokens_since_the_snapshot():
    traces = [{"prefill_ms": 5.0, "snapshot": {"restored": 0, "from": "none"}},
              {"prefill_ms": 1.0, "snapshot": {"restored": 128, "from": "disk"}}]
    rows = [row(100, 0), row(181, 128)]
    agent_loop.annotate(rows, traces)
    # seen 131, resumed at 128: 3 tokens recomputed beside the 50 new ones
    assert rows[1]["ideal"] == 53 and rows[1]["prefilled"] == 53
    assert rows[1]["snapshot_from"] == "disk" and rows[1]["server_prefill_ms"] == 1.0


def test_summary_splits_at_the_restart():
    rows = [row(100, 0), row(181, 131), row(262, 212)]
    for k, r in enumerate(rows):
        r["turn"] = k
    agent_loop.annotate(rows, [])
    s = agent_loop.summarize(rows, 2)
    assert s["all"]["prefilled"] == 200 and s["all"]["ideal"] == 200 and s["all"]["work_over_ideal"] == 1.0
    assert s["after_restart"]["turns"] == 1 and s["after_restart"]["prefilled"] == 50
    assert s["cold_prefill_tps"] == 100.0 and abs(s["decode_tps"] - 31.0) < 1e-9


def test_script_has_one_result_per_later_turn():
    a = SimpleNamespace(seed=3, turns=12, system_tokens=(200, 200), tools=(3, 3), result_tokens=(50, 80))
    sc = agent_loop.make_script(a)
    assert len(sc["results"]) == 11 and "# Tools" in sc["system"]
    msgs = agent_loop.turn_messages(sc, ["r0", "r1"])
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert msgs[2]["content"] == "r0" and msgs[5]["content"] == sc["results"][1]
