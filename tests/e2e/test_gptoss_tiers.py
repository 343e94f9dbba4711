"""gpt-oss through the prefix cache's tiers: test_moe.py's checks (serve ==
run, a 12-turn agent loop with the cache on == off that prefills only new
tokens, a restart resuming from disk, a Redis replica) on the tiny
gpt-oss model: its sliding-window layers, sinks and MXFP4 experts, under
its own harmony template (text turns replayed as the model's tokens). The
fixtures are test_qwen35_snapshots.py's, given this model."""
import pytest

from test_moe import (test_agent_loop_12_turns_prefills_only_new_tokens, test_restart_resumes_from_disk,  # noqa: F401
                      test_serve_matches_run, test_shared_tier_replica_resumes_from_redis)
from test_qwen35_snapshots import cold, tmp  # noqa: F401

pytestmark = pytest.mark.parametrize("tmp", ["gpt-oss-mxfp4"], indirect=True, scope="module")
