#!/usr/bin/env python3
"""A random-weight qwen3moe GGUF shaped like Qwen3-30B-A3B, in llama.cpp's
Q4_K_M mix, for speed comparisons (bench/bench_depth.py).

    python3 tools/synth_qwen3moe.py --out /data/qwen3moe-30b-a3b-synth-q4_k_m.gguf [--layers 48]

Shape (Qwen3-30B-A3B's published configuration): 48 layers, embedding
2048, 32 query heads and 4 KV heads of 128 (QK-norm), 128 experts of
width 768, 8 used per token (softmax, renormalised), vocabulary 151,936,
own output matrix. --layers N keeps the width and cuts the depth (speed
per layer is the same; ~360 MiB a layer). Types as llama.cpp's Q4_K_M
picks them: Q4_K, with Q6_K for attn_v and ffn_down_exps on the layers it
gives more bits (the first and last eighth, every third between) and for
the output; the router and norms F32. About 17 GiB at 48 layers.

Speed, not text, is the point, so the generator spends its time on bytes,
not on random numbers: every matrix of one (type, shape) is drawn from a
pool of a few quantized random matrices (experts of one stack cycle
through 4 of them), each router is its own random F32 matrix, so routing
spreads over all experts. The tokenizer is the tiny byte-level BPE of
tools/testdata_models.py padded to the real vocabulary size.
Does not: make a model anyone should talk to, or run in `make test`.
"""
import argparse
import os

import numpy as np

import gguf
from gguf import GGMLQuantizationType as QT

import testdata_models as tm
from synth_qwen35 import padded_vocab, write_common_metadata, write_synth

CFG = dict(n_layer=48, n_embd=2048, n_head=32, n_head_kv=4, head_dim=128, n_expert=128, n_used=8,
           n_ff_exp=768, n_ff=6144, n_vocab=151936, n_ctx=40960, rope_base=1000000.0, rms_eps=1e-6)
POOL = 4


def more_bits(il, n):
    """llama.cpp's use_more_bits: Q4_K_M's Q6_K layers for attn_v / ffn_down."""
    return il < n // 8 or il >= 7 * n // 8 or (il - n // 8) % 3 == 2


def tensor_specs(c):
    """(name, rows, cols, type, kind) in file order (synth_qwen35.write_synth's
    specs): rows 0: an F32 vector, rows (n, r): a stack of n experts of r
    rows. kind: 'norm', 'router' or a std."""
    e, hd, n, f = c["n_embd"], c["head_dim"], c["n_expert"], c["n_ff_exp"]
    q, kv = c["n_head"] * hd, c["n_head_kv"] * hd
    out = [("token_embd.weight", c["n_vocab"], e, QT.Q4_K, 0.05)]
    for il in range(c["n_layer"]):
        p, hi = f"blk.{il}.", QT.Q6_K if more_bits(il, c["n_layer"]) else QT.Q4_K
        out += [(p + "attn_norm.weight", 0, e, QT.F32, "norm"),
                (p + "attn_q.weight", q, e, QT.Q4_K, e ** -0.5),
                (p + "attn_k.weight", kv, e, QT.Q4_K, e ** -0.5),
                (p + "attn_v.weight", kv, e, hi, e ** -0.5),
                (p + "attn_output.weight", e, q, QT.Q4_K, 0.5 * q ** -0.5),
                (p + "attn_q_norm.weight", 0, hd, QT.F32, "norm"),
                (p + "attn_k_norm.weight", 0, hd, QT.F32, "norm"),
                (p + "ffn_norm.weight", 0, e, QT.F32, "norm"),
                (p + "ffn_gate_inp.weight", n, e, QT.F32, "router"),
                (p + "ffn_gate_exps.weight", (n, f), e, QT.Q4_K, e ** -0.5),
                (p + "ffn_up_exps.weight", (n, f), e, QT.Q4_K, e ** -0.5),
                (p + "ffn_down_exps.weight", (n, e), f, hi, 0.5 * f ** -0.5)]
    out += [("output_norm.weight", 0, e, QT.F32, "norm"),
            ("output.weight", c["n_vocab"], e, QT.Q6_K, 0.05)]
    return out


class Pool:
    """A few quantized random matrices per (rows, cols, type): the bytes
    every matrix of that shape is cut from."""

    def __init__(self, seed):
        self.g = np.random.default_rng(seed)
        self.mats = {}

    def get(self, rows, cols, qt, std, i):
        mats = self.mats.setdefault((rows, cols, qt), [])
        while len(mats) <= i % POOL:  # drawn on first use
            parts = []  # by row chunks: the vocabulary-sized matrices are large
            for r0 in range(0, rows, 16384):
                n = min(16384, rows - r0)
                parts.append(tm.quantize((std * self.g.standard_normal((n, cols))).astype(np.float32), qt))
            mats.append(np.concatenate(parts))
        return mats[i % POOL]


def tensor_data(pool, g, i, spec):
    """Spec i's bytes: pooled matrices, or fresh random norms and routers."""
    name, rows, cols, qt, kind = spec
    if kind == "norm":
        return (1.0 + 0.1 * g.standard_normal(cols)).astype(np.float32)
    if kind == "router":  # its own random matrix: routing spreads over the experts
        return (4 * cols ** -0.5 * g.standard_normal((rows, cols))).astype(np.float32)
    if isinstance(rows, tuple):
        return np.stack([pool.get(rows[1], cols, qt, kind, i + k) for k in range(rows[0])])
    return pool.get(rows, cols, qt, kind, i)


def write_metadata(w, c):
    a = "qwen3moe"
    write_common_metadata(w, f"qwen3moe-30b-a3b-synth ({c['n_layer']} layers)", c)
    tm._write_moe_keys(w, dict(arch=a, moe=dict(n_expert=c["n_expert"], n_used=c["n_used"], n_ff_exp=c["n_ff_exp"])))
    w.add_uint32("general.quantization_version", 2)
    w.add_uint32("general.file_type", 15)  # MOSTLY_Q4_K_M
    tm._write_tokenizer(w, dict(arch=a), padded_vocab(c["n_vocab"], specials_first=False))


def synth_main(doc, arch, cfg, seed, specs, metadata, data):
    """The command line of a pooled MoE synth script (this one and
    tools/synth_gptoss.py): --out, --layers, --seed; specs(c),
    metadata(writer, c) and data(pool, generator, index, spec) for the
    shape c (cfg with the layers asked for)."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=cfg["n_layer"])
    ap.add_argument("--seed", type=int, default=seed)
    args = ap.parse_args()
    c = {**cfg, "n_layer": args.layers}
    pool = Pool(args.seed)
    write_synth(args.out, arch, specs(c), lambda w: metadata(w, c), args.seed,
                data=lambda g, i, spec: data(pool, g, i, spec))


def main():
    synth_main(__doc__, "qwen3moe", CFG, 30, tensor_specs, write_metadata, tensor_data)


if __name__ == "__main__":
    main()
