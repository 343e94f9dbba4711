#!/usr/bin/env bash
# Installs what Strata needs on a fresh Debian machine: the C toolchain and
# libraries for the build, and (with --test) the Python packages the tests
# use. Safe to run again: it only installs what is missing.
set -euo pipefail

SYSTEM_PKGS=(build-essential libpcre2-dev libjansson-dev libmicrohttpd-dev libssl-dev libhiredis-dev python3 python3-pip unzip)
# name or name:module where the import name differs (openai-agents: the
# Agents SDK, whose default model speaks the Responses API; langchain-openai,
# pydantic-ai and smolagents: the agent libraries of tests/e2e/test_clients.py)
PY_TEST_PKGS=(numpy gguf pytest httpx openai anthropic openai-agents:agents jsonschema pydantic
              langchain-openai:langchain_openai "pydantic-ai-slim[openai]:pydantic_ai" smolagents
              "websockets>=12:websockets")
# clang (Debian's) builds the libFuzzer targets (make fuzz-targets, tests/fuzz);
# the shared KV tier's tests start a real Redis and HAProxy on loopback;
# the /ui page's tests drive a headless Chromium (tests/e2e/test_ui.py,
# over the DevTools protocol: websockets above, whose sync client is 12+);
# faketime's library moves a server's clock past midnight
# (tests/e2e/test_template_date.py: a conversation keeps its date);
# gdb prints a server's thread stacks when it does not stop on SIGTERM
# (tests/e2e/conftest.py: a hang in CI shows where it waited).
TEST_SYSTEM_PKGS=(clang redis-server haproxy chromium faketime gdb)

"$(dirname "$0")/apt-install.sh" "${SYSTEM_PKGS[@]}"

if [ "${1:-}" = "--test" ]; then
  "$(dirname "$0")/apt-install.sh" "${TEST_SYSTEM_PKGS[@]}"
  PY=${PYTHON:-python3}
  need=()
  for p in "${PY_TEST_PKGS[@]}"; do
    $PY -c "import ${p#*:}" >/dev/null 2>&1 || need+=("${p%%:*}")
  done
  if [ ${#need[@]} -gt 0 ]; then
    echo "install-deps: pip installing ${need[*]}"
    $PY -m pip install -q "${need[@]}" 2>&1 | grep -v "Running pip as the 'root' user" || true
  fi
  # Claude Code and Codex, pinned there (tests/e2e/test_agent_clis.py).
  PYTHON=$PY "$(dirname "$0")/install-agent-clis.sh" >/dev/null
fi
