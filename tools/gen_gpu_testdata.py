#!/usr/bin/env python3
"""The generated test models the GPU tests open, with their float64
reference logits, made where they run: the lent GPU machine receives at
most 64 MiB, and these random-weight files hardly compress (~17 MB), while
making them takes seconds (the same bytes as `make testdata`: fixed seeds).

    python3 tools/gen_gpu_testdata.py OUTDIR NAME...   (OUTDIR/models/NAME.gguf, NAME.ref)

scripts/test-gpu.sh runs it (its data step) when TEST_DATA_DIR lacks them.
"""
import os
import sys

import testdata_models as tm
import testdata_reflogits as tr


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    outdir, names = sys.argv[1], sys.argv[2:]
    unknown = sorted(set(names) - {m["name"] for m in tm.MODELS})
    if unknown:
        raise SystemExit(f"gen_gpu_testdata: no such model in testdata_models.MODELS: {' '.join(unknown)}")
    for path in tm.write_named(outdir, names):
        tr.write_ref(path)
        print(f"gen_gpu_testdata: {os.path.basename(path)} and its .ref")


if __name__ == "__main__":
    main()
