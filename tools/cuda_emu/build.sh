#!/usr/bin/env bash
# build.sh - strata and strata-tests with the CUDA kernels emulated on the
# host (tools/cuda_emu/README.md): the .cu files but cuda_rt.cu through
# convert.py (with CUDA_EMU defined: cuda_mmq.cu's tensor-core instruction
# is emu.cpp's emu_mma_s8), compiled as C++ against inc/, linked
# with emu.cpp and the CPU objects of the regular build (run `make strata
# build/strata-tests` first, either CUDA mode). Outputs in build/cuda-emu/.
#
#   tools/cuda_emu/build.sh
#   STRATA_TEST_GPU=1 TEST_DATA_DIR=tests/data/gen build/cuda-emu/strata-tests 'gpu_qwen35_*'
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${EMU_OUT:-$root/build/cuda-emu} # EMU_OUT: another folder (a second build beside one in use)
mkdir -p "$out"
[ -f "$root/build/src/main.o" ] && [ -f "$root/build/tests/test_main.o" ] ||
    { echo "cuda_emu: build strata and build/strata-tests first (make strata build/strata-tests)"; exit 1; }
CXX=${CXX:-g++}
# -ffp-contract=off: a * b + c stays two roundings, as nvcc -fmad=false; -mf16c: half conversions in hardware
flags="-std=c++17 -O2 -ffp-contract=off -mf16c -w -DCUDA_EMU -I$here/inc -I$root/src"
objs=()
for cu in "$root"/src/backend/cuda/*.cu; do
    base=$(basename "$cu" .cu)
    case $base in cuda_rt) continue ;; esac # emu.cpp stands in
    python3 "$here/convert.py" "$cu" "$out/$base.cpp"
    $CXX $flags -c "$out/$base.cpp" -o "$out/$base.o"
    objs+=("$out/$base.o")
done
$CXX $flags -c "$here/emu.cpp" -o "$out/emu.o"
objs+=("$out/emu.o")
# the CPU objects of the regular build, none of the CUDA backend's
mapfile -t cpu < <(find "$root/build/src" -name '*.o' ! -path '*/backend/cuda/*' ! -name main.o | sort)
libs="-lm -lpcre2-8 -ljansson -lmicrohttpd -lcrypto -lhiredis -pthread"
$CXX -o "$out/strata-tests" "${objs[@]}" "$root"/build/tests/*.o "${cpu[@]}" $libs
$CXX -o "$out/strata" "${objs[@]}" "$root/build/src/main.o" "${cpu[@]}" $libs
echo "cuda_emu: $out/strata-tests and $out/strata (the kernels on the host, emulated)"
