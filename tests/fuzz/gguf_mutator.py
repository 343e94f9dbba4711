"""GGUF mutator: damaged model files through `strata model info` and a
short `strata run`. Each must end in exit 0 (the file still works) or a
nonzero exit with an error message; a signal, a sanitizer report, a
timeout or a silent failure is a finding.

Sources: the tiny generated models and vocabularies (tests/data/gen), and
in the long run also the real model, mutated in its metadata and tensor
info region only (the rest of the 98 MB is copied as is)."""
import glob
import os
import struct
import tempfile

import harness

INFO_TIMEOUT_S = 20
RUN_TIMEOUT_S = 60


def small_sources():
    files = sorted(glob.glob(os.path.join(harness.GEN, "models", "*.gguf")))
    files += sorted(glob.glob(os.path.join(harness.GEN, "tok", "*.gguf")))
    return [f for f in files if os.path.getsize(f) < 8 << 20]


def header_end(data):
    """Rough end of the metadata and tensor infos: the real model's first
    megabyte holds them all (its vocabulary is ~1.6 MB of strings)."""
    n_kv = struct.unpack_from("<Q", data, 16)[0] if len(data) >= 24 else 0
    return min(len(data), 4 << 20) if n_kv else min(len(data), 1 << 20)


class Source:
    """A file to mutate: its bytes (small files) or its header (the real model)."""

    def __init__(self, path):
        self.path = path
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            self.head = f.read(min(size, 4 << 20))
        self.whole = size == len(self.head)

    def write_mutant(self, rng, out_path):
        region = (0, len(self.head)) if self.whole else (0, header_end(self.head))
        # Headers hold the interesting fields: bias a third of mutations there.
        if rng.random() < 0.33:
            region = (0, min(region[1], 256))
        mutant = harness.mutate_bytes(rng, self.head, region=region)
        with open(out_path, "wb") as out:
            out.write(mutant)
            if not self.whole and len(mutant) >= len(self.head) - 64:
                with open(self.path, "rb") as src:
                    src.seek(len(self.head))
                    while chunk := src.read(8 << 20):
                        out.write(chunk)
        return mutant


def check_case(strata, path):
    """None when clean, else (kind, why)."""
    rc, _, err, hung = harness.run_cmd([strata, "model", "info", path], INFO_TIMEOUT_S)
    bad = harness.classify_exit(rc, err, hung)
    if bad or rc != 0:
        return bad
    argv = [strata, "run", "-m", path, "-p", "Hello there", "-n", "4", "--temp", "0", "-q", "-t", "1",
            "--ctx", "64"]
    rc, _, err, hung = harness.run_cmd(argv, RUN_TIMEOUT_S)
    return harness.classify_exit(rc, err, hung)


def run(strata, seed, count, seconds, out_dir, real_every=0):
    """Mutates count files (real_every: one in N from the real model)."""
    tally = harness.Tally("gguf", out_dir)
    rng = harness.seeded(seed, "gguf")
    sources = [Source(p) for p in small_sources()]
    real = Source(harness.REAL_MODEL) if real_every and os.path.exists(harness.REAL_MODEL) else None
    with tempfile.TemporaryDirectory(prefix="strata-fuzz-gguf-") as tmp:
        path = os.path.join(tmp, "case.gguf")
        for i in harness.Budget(count, seconds).cases():
            src = real if real and i % real_every == real_every - 1 else rng.choice(sources)
            mutant = src.write_mutant(rng, path)
            index = tally.case()
            bad = check_case(strata, path)
            if bad:
                kind, why = bad
                tally.fail(kind, index, f"{os.path.basename(src.path)}: {why}",
                           mutant if src.whole else None, ".gguf")
    return tally
