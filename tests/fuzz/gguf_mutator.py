"""GGUF mutator: damaged model files through `strata model info` and a
short `strata run`. Each must end in exit 0 (the file still works) or a
nonzero exit with an error message; a signal, a sanitizer report, a
timeout or a silent failure is a finding.

Sources: the tiny generated models and vocabularies (tests/data/gen), and
in the long run also the real model, mutated in its metadata and tensor
info region only (the rest of the 98 MB is copied as is).

run_layouts() reaches the kernels instead: models written afresh by
tools/testdata_models.py with what byte mutations rarely get right, so
they load and run a few forward steps:
  types   every weight in a random supported type (weights of one matmul
          group in different activation formats, as in Q4_K_M files):
          a valid file, which must run (exit 0);
  blocks  such a model with quant blocks of one weight overwritten (scales
          inf, NaN, huge or subnormal, all-ones, random bytes): numbers,
          not structure, so it must run too;
  shapes  such a model with one weight in another shape (a row more or
          less, columns halved or doubled; never the vocabulary's rows, which
          real files pad past the tokenizer): refused with a message naming
          the tensor; exit 0 is a bad load, a crash or a sanitizer report
          a finding as everywhere.
Needs numpy and the gguf package (make test-deps)."""
import glob
import os
import struct
import sys
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


# ---- valid models with mixed types, damaged blocks, other shapes ---------------------------

LAYOUT_KINDS = ("types", "types", "blocks", "shapes")


def _tools():
    sys.path.insert(0, os.path.join(harness.ROOT, "tools"))
    import numpy as np  # noqa: F401 (fails early and clearly without test deps)
    import testdata_models
    return testdata_models


def _weight_types(tm):
    qt = tm.QT
    return [qt.F32, qt.F16, qt.BF16, qt.Q4_0, qt.Q4_1, qt.Q5_0, qt.Q5_1, qt.Q8_0, qt.Q4_K, qt.Q5_K, qt.Q6_K]


def _weights(tm, spec):
    """(name, rows, cols) of every 2-D weight that may take any type."""
    vocab = tm.build_vocab(tm.HPARAMS["n_merges"], specials_first=spec["arch"] == "llama")
    ts = tm._model_tensors(spec, tm.HPARAMS, len(vocab[0]), tm._Rng(0))
    return [(n, a.shape[0], a.shape[1]) for n, a, kind in ts if a.ndim == 2 and kind != "norm"]


def layout_spec(tm, rng, kind):
    """A model spec (tools/testdata_models.py MODELS form) with random types
    per weight, and for `shapes` one weight reshaped. Returns (spec, note)."""
    base = dict(rng.choice([m for m in tm.MODELS if m["arch"] != "qwen35" or m["name"] == "qwen35-f32"]))
    base["name"] = "fuzz-" + base["name"]
    weights = _weights(tm, base)
    types = {}
    for name, _, cols in weights:
        fits = [t for t in _weight_types(tm) if cols % tm.gguf.GGML_QUANT_SIZES[t][0] == 0]
        types[name] = rng.choice(fits)
    base["types"] = types
    note = ",".join(f"{n.replace('.weight', '')}={t.name}" for n, t in sorted(types.items()))
    if kind == "shapes":
        name, rows, cols = rng.choice(weights)
        blck = tm.gguf.GGML_QUANT_SIZES[types[name]][0]
        shapes = [(rows, cols * 2), (rows, cols // 2 // blck * blck)]
        if name not in VOCAB_ROWS:  # a vocabulary may be padded past the tokenizer's: more rows are fine
            shapes += [(rows + 1, cols), (rows - 1, cols)]
        shape = rng.choice([s for s in shapes if s != (rows, cols) and min(s) > 0])
        base["reshape"] = {name: shape}
        note += f"; {name} as {shape[0]}x{shape[1]}"
    return base, note


VOCAB_ROWS = ("token_embd.weight", "output.weight")
BLOCK_PATTERNS = (b"\x00\x7c", b"\xff\x7f", b"\xff\x7b", b"\x01\x00", b"\xff\xff", b"\x00\x00")


def damage_blocks(rng, path):
    """Overwrites some quant blocks of one quantized weight of the file at
    path. Returns what was done."""
    import gguf
    r = gguf.GGUFReader(path)
    quant = [t for t in r.tensors if t.tensor_type not in (gguf.GGMLQuantizationType.F32,)
             and len(t.shape) == 2]
    t = rng.choice(quant)
    blck, size = gguf.GGML_QUANT_SIZES[t.tensor_type]
    start, n_blocks = t.data_offset, t.n_bytes // size
    data = bytearray(open(path, "rb").read())
    how = rng.choice(["scales", "ones", "random"])
    for _ in range(rng.randint(1, 8)):
        b = start + rng.randrange(n_blocks) * size
        if how == "ones":
            data[b:b + size] = b"\xff" * size
        elif how == "random":
            data[b:b + size] = bytes(rng.randrange(256) for _ in range(size))
        else:  # an f16 scale field (where each layout keeps one) set to inf, NaN, max, subnormal, 0
            off = size - 2 if t.tensor_type.name in ("Q6_K",) else 0
            data[b + off:b + off + 2] = rng.choice(BLOCK_PATTERNS)
    with open(path, "wb") as f:
        f.write(data)
    return f"{t.name} ({t.tensor_type.name}) blocks: {how}"


def check_layout(strata, path, kind):
    """None when the outcome is the one `kind` expects, else (kind, why)."""
    argv = [strata, "run", "-m", path, "-p", "Hello there, how are you", "-n", "3", "--temp", "0", "-q",
            "-t", "2", "--ctx", "64"]
    rc, _, err, hung = harness.run_cmd(argv, RUN_TIMEOUT_S)
    bad = harness.classify_exit(rc, err, hung)
    if bad:
        return bad
    if kind == "shapes" and rc == 0:
        return "bad_loads", "a mis-shaped weight was accepted"
    if kind != "shapes" and rc != 0:
        return "bad_loads", "a valid model was refused: " + err.strip().splitlines()[-1][:160]
    return None


def run_layouts(strata, seed, count, seconds, out_dir):
    tally = harness.Tally("layouts", out_dir)
    rng = harness.seeded(seed, "layouts")
    tm = _tools()
    with tempfile.TemporaryDirectory(prefix="strata-fuzz-layout-") as tmp:
        path = os.path.join(tmp, "case.gguf")
        for i in harness.Budget(count, seconds).cases():
            kind = LAYOUT_KINDS[i % len(LAYOUT_KINDS)]
            spec, note = layout_spec(tm, rng, kind)
            tm.write_model(path, spec, seed=rng.randrange(1 << 30))
            if kind == "blocks":
                note += "; " + damage_blocks(rng, path)
            index = tally.case()
            bad = check_layout(strata, path, kind)
            if bad:
                with open(path, "rb") as f:
                    tally.fail(bad[0], index, f"{kind} {spec['name']}: {bad[1]} [{note}]", f.read(), ".gguf")
    return tally
