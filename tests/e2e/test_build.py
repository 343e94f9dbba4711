"""The build keeps its own flags when CFLAGS is given on the command line,
and every kernel file compiles at every optimisation level (an intrinsic's
immediate that is a constant only after -O2 unrolling fails at -O0/-O1)."""
import os
import subprocess
import tempfile

from conftest import ROOT


def test_command_line_cflags_keep_the_makefile_flags():
    out = subprocess.run(["make", "-n", "-B", "CFLAGS=-O1", "build/src/base/err.o"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    assert "-O1" in out and "-std=c11" in out and "-Isrc" in out, out


def test_simd_kernels_compile_at_every_level():
    flags = {"avx2": ["-mavx2", "-mfma", "-mf16c"]}
    flags["avx512"] = flags["avx2"] + ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512vnni"]
    src = os.path.join(ROOT, "src", "backend")
    files = [f for f in sorted(os.listdir(src)) if f.endswith(("_avx2.c", "_avx512.c"))]
    assert files
    with tempfile.TemporaryDirectory() as tmp:
        for f in files:
            level = "avx512" if f.endswith("_avx512.c") else "avx2"
            for opt in ("-O0", "-O1"):
                cmd = ["cc", opt, "-std=c11", "-D_GNU_SOURCE", "-I" + os.path.join(ROOT, "src"), *flags[level],
                       "-c", "-o", os.path.join(tmp, "k.o"), os.path.join(src, f)]
                r = subprocess.run(cmd, capture_output=True, text=True)
                assert r.returncode == 0, f"{f} {opt}: {r.stderr[-800:]}"
