#!/usr/bin/env python3
"""Reference vectors for tests/test_quant.c, made with the gguf package.

generate(outdir) writes
  outdir/quant/<TYPE>.bin   random weight blocks of one ggml type and the
                            gguf package's dequantization of them;
  outdir/quant/fp16.bin     every half -> float, and random floats -> half,
                            as numpy converts them.

File layout (little-endian):
  <TYPE>.bin: "SQDQ", u32 ggml type, u32 n elements, u32 n bytes,
              u8 blocks[n bytes], f32 values[n]
  fp16.bin:   "SQ16", u32 65536, u32 m,
              u32 f32 bits of half h for h = 0..65535,
              u32 float bits[m], u16 half bits[m]

Blocks are random bytes, except that every f16 scale field is redrawn from
finite halves (subnormals included), so the reference has no NaN/Inf noise
in it. F16, BF16 and F32 tensors are raw random bits (NaNs included: the C
conversion must keep their payloads exactly as numpy does). MXFP4 keeps
every E8M0 byte (0 and 1: subnormal scales; the top ones overflow to inf,
in both).
Does not: test anything itself; deterministic (fixed seed)."""
import os
import struct

import numpy as np

import gguf
from gguf import GGMLQuantizationType as QT

# type -> byte offsets of f16 scale fields inside one block
SCALE_FIELDS = {
    QT.Q4_0: [0], QT.Q4_1: [0, 2], QT.Q5_0: [0], QT.Q5_1: [0, 2],
    QT.Q8_0: [0], QT.Q4_K: [0, 2], QT.Q5_K: [0, 2], QT.Q6_K: [208],
    QT.F16: [], QT.BF16: [], QT.F32: [],
}
# types drawn from their own seed, so adding one leaves the others' bytes as they were
LATER_TYPES = [QT.MXFP4]
N_ELEMS = 256 * 64  # a multiple of every block size


def finite_halves(rng, n):
    h = rng.integers(0, 1 << 16, size=n, dtype=np.uint32).astype(np.uint16)
    bad = (h & 0x7C00) == 0x7C00
    h[bad] &= 0xBFFF  # clear the top exponent bit: finite now
    return h


def write_type(rng, qt, path):
    bsize, tsize = gguf.GGML_QUANT_SIZES[qt]
    nblk = N_ELEMS // bsize
    raw = rng.integers(0, 256, size=(nblk, tsize), dtype=np.uint16).astype(np.uint8)
    for off in SCALE_FIELDS.get(qt, []):
        raw[:, off:off + 2] = finite_halves(rng, nblk).view(np.uint8).reshape(nblk, 2)
    ref = gguf.quants.dequantize(raw.reshape(-1), qt).astype(np.float32).reshape(-1)
    assert ref.size == N_ELEMS, (qt, ref.size)
    with open(path, "wb") as f:
        f.write(b"SQDQ" + struct.pack("<III", int(qt), N_ELEMS, raw.size))
        f.write(raw.tobytes())
        f.write(ref.tobytes())


def fp16_floats(rng):
    """Random bit patterns plus values right at half rounding boundaries."""
    bits = rng.integers(0, 1 << 32, size=100000, dtype=np.uint64).astype(np.uint32)
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    f = h.view(np.float16).astype(np.float32)
    f = f[np.isfinite(f)].view(np.uint32)
    near = np.concatenate([f, f + 0x1000, f + 0xfff, f + 0x1001, f - 1, f + 1])
    return np.concatenate([bits, near.astype(np.uint32)])


def write_fp16(rng, path):
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    h2f = h.view(np.float16).astype(np.float32).view(np.uint32)
    fb = fp16_floats(rng)
    with np.errstate(over="ignore", invalid="ignore"):
        f2h = fb.view(np.float32).astype(np.float16).view(np.uint16)
    with open(path, "wb") as f:
        f.write(b"SQ16" + struct.pack("<II", 1 << 16, fb.size))
        f.write(h2f.astype("<u4").tobytes())
        f.write(fb.astype("<u4").tobytes())
        f.write(f2h.astype("<u2").tobytes())


def generate(outdir):
    rng = np.random.default_rng(20240607)
    qdir = os.path.join(outdir, "quant")
    os.makedirs(qdir, exist_ok=True)
    for qt in SCALE_FIELDS:
        write_type(rng, qt, os.path.join(qdir, qt.name + ".bin"))
    write_fp16(rng, os.path.join(qdir, "fp16.bin"))
    for i, qt in enumerate(LATER_TYPES):
        write_type(np.random.default_rng(20251126 + i), qt, os.path.join(qdir, qt.name + ".bin"))


if __name__ == "__main__":
    import sys
    generate(sys.argv[1] if len(sys.argv) > 1 else "tests/data/gen")
