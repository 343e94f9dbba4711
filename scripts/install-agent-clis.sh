#!/usr/bin/env bash
# Installs the real agent command-line clients that tests/e2e/test_agent_clis.py
# runs against Strata, from the Python package index (both ship their
# native binary inside a wheel):
#   claude-agent-sdk      bundles the Claude Code CLI at claude_agent_sdk/_bundled/claude
#   openai-codex-cli-bin  bundles the Codex CLI at codex_cli_bin/bin/codex
# The wheels are large (~100-200 MB each): pip's own cache is reused, and
# nothing is downloaded when the pinned versions are already installed.
#
# The pins live here and only here. To bump: `pip index versions NAME`,
# change the version below, run this script, then run
# `python3 -m pytest -v tests/e2e/test_agent_clis.py` and refresh the captured
# first requests (tests/data/clients/, `tools/capture_clients.py --write`)
# so the fixtures show what the new version sends.
# Prints the two binaries' paths, one per line (claude, then codex).
set -euo pipefail

CLAUDE_AGENT_SDK_VERSION=0.2.189   # Claude Code CLI 2.1.332
CODEX_CLI_BIN_VERSION=0.163.0      # Codex CLI 0.163.0

PY=${PYTHON:-python3}
have() { # name version: is exactly that version installed?
  [ "$($PY -c "import importlib.metadata as m; print(m.version('$1'))" 2>/dev/null || true)" = "$2" ]
}
need=()
have claude-agent-sdk "$CLAUDE_AGENT_SDK_VERSION" || need+=("claude-agent-sdk==$CLAUDE_AGENT_SDK_VERSION")
have openai-codex-cli-bin "$CODEX_CLI_BIN_VERSION" || need+=("openai-codex-cli-bin==$CODEX_CLI_BIN_VERSION")
if [ ${#need[@]} -gt 0 ]; then
  echo "install-agent-clis: pip installing ${need[*]}" >&2
  $PY -m pip install -q "${need[@]}" 2>&1 | grep -v "Running pip as the 'root' user" >&2 || true
fi
$PY - <<'PY'
import os, claude_agent_sdk, codex_cli_bin
claude = os.path.join(os.path.dirname(claude_agent_sdk.__file__), "_bundled", "claude")
codex = str(codex_cli_bin.bundled_codex_path())
for p in (claude, codex):
    if not os.access(p, os.X_OK):
        raise SystemExit(f"install-agent-clis: {p} is missing or not executable")
print(claude)
print(codex)
PY
