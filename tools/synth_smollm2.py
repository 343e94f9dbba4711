#!/usr/bin/env python3
"""A random-weight llama GGUF shaped like SmolLM2-135M-Instruct.Q4_1, for
speed runs where the real file cannot go (the GPU machine: 64 MiB of
working tree travel, no network; `make test-gpu` makes it there).

    python3 tools/synth_smollm2.py [--out models/smollm2-135m-synth-q4_1.gguf]

Shape and types as the real file (read with the gguf package): 30 layers,
embedding 576, feed-forward 1536, 9 heads, 3 KV heads (head dim 64),
vocabulary 49,152, rope base 100000; every matrix Q4_1, token embedding
Q8_0 and tied to the output, norms F32 (~98 MB). The tokenizer is the tiny
byte-level BPE of tools/testdata_models.py padded with unused tokens.
Weights are random (seeded): the text is nonsense, the arithmetic per
token is the real model's.
Does not: make a model anyone should talk to, or run in `make test`.
"""
import argparse

from gguf import GGMLQuantizationType as QT

import synth_qwen35 as sq
import testdata_models as tm

CFG = dict(n_layer=30, n_embd=576, n_ff=1536, n_head=9, n_head_kv=3, n_vocab=49152, n_ctx=8192,
           rope_base=100000.0, rms_eps=1e-5)


def vocab():
    return sq.padded_vocab(CFG["n_vocab"], specials_first=True)


def tensor_specs():
    """(name, rows, cols, type, std) in file order; rows 0 = a vector."""
    c = CFG
    e, ff, kv = c["n_embd"], c["n_ff"], c["n_head_kv"] * c["n_embd"] // c["n_head"]
    out = [("token_embd.weight", c["n_vocab"], e, QT.Q8_0, 0.05)]
    for il in range(c["n_layer"]):
        p = f"blk.{il}."
        out += [(p + "attn_norm.weight", 0, e, QT.F32, "norm"),
                (p + "attn_q.weight", e, e, QT.Q4_1, e ** -0.5),
                (p + "attn_k.weight", kv, e, QT.Q4_1, e ** -0.5),
                (p + "attn_v.weight", kv, e, QT.Q4_1, e ** -0.5),
                (p + "attn_output.weight", e, e, QT.Q4_1, 0.5 * e ** -0.5),
                (p + "ffn_norm.weight", 0, e, QT.F32, "norm"),
                (p + "ffn_gate.weight", ff, e, QT.Q4_1, e ** -0.5),
                (p + "ffn_up.weight", ff, e, QT.Q4_1, e ** -0.5),
                (p + "ffn_down.weight", e, ff, QT.Q4_1, 0.5 * ff ** -0.5)]
    out.append(("output_norm.weight", 0, e, QT.F32, "norm"))
    return out


def write_metadata(w):
    c = CFG
    sq.write_common_metadata(w, "smollm2-135m-synth", c)
    w.add_rope_dimension_count(c["n_embd"] // c["n_head"])
    w.add_uint32("general.quantization_version", 2)
    tm._write_tokenizer(w, dict(arch="llama"), vocab())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="models/smollm2-135m-synth-q4_1.gguf")
    ap.add_argument("--seed", type=int, default=135)
    args = ap.parse_args()
    sq.write_synth(args.out, "llama", tensor_specs(), write_metadata, args.seed)


if __name__ == "__main__":
    main()
