#!/usr/bin/env python3
"""Generate every test fixture into one folder (default tests/data/gen).

Each tools/testdata_*.py module has generate(outdir) and writes only its own
files. Fixtures are deterministic (fixed seeds) and small, so `make test`
regenerates them on every run instead of committing binaries.
"""
import importlib
import os
import pkgutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else "tests/data/gen"
    os.makedirs(outdir, exist_ok=True)
    sys.path.insert(0, HERE)
    names = sorted(m.name for m in pkgutil.iter_modules([HERE]) if m.name.startswith("testdata_"))
    for name in names:
        importlib.import_module(name).generate(outdir)
        print(f"testdata: {name} done")


if __name__ == "__main__":
    main()
