#!/usr/bin/env python3
"""A random-weight gpt-oss GGUF shaped like gpt-oss-20b, MXFP4 experts, for
speed comparisons (bench/README.md, "gpt-oss").

    python3 tools/synth_gptoss.py --out /data/gpt-oss-20b-synth-mxfp4.gguf [--layers 24]

Shape (gpt-oss-20b's published configuration): 24 layers, embedding 2880,
64 query heads and 8 KV heads of 64 with Q/K/V/O biases and a sink logit
per head, sliding window 128 on the even layers, YaRN (factor 32 over
4096, base 150000), 32 experts of width 2880, 4 used per token (router
with a bias, softmax over the top 4, expert biases, clamped SwiGLU),
vocabulary 201,088, own output matrix. Types as in the MXFP4 GGUF that
llama.cpp's users run (ggml-org's conversion, 12.1 GB): experts MXFP4,
attention, embeddings and output Q8_0, router, norms, biases and sinks
F32. About 11.2 GiB at 24 layers (~420 MiB a layer).

As tools/synth_qwen3moe.py: every matrix of one (type, shape) is cut from
a pool of a few quantized random ones (its Pool), each router is its own
random F32 matrix so that routing spreads over all experts, and the
tokenizer is the tiny fixtures' (tools/testdata_gptoss.py: harmony
special tokens, gpt-4o pre-tokenizer, the real template) padded to the
real vocabulary size.
Does not: make a model anyone should talk to, or run in `make test`.
"""
import numpy as np

from gguf import GGMLQuantizationType as QT

import testdata_gptoss as tg
from synth_qwen3moe import synth_main

CFG = dict(n_layer=24, n_embd=2880, n_head=64, n_head_kv=8, head_dim=64, n_expert=32, n_expert_used=4,
           n_ff_exp=2880, n_vocab=201088, n_swa=128, n_ctx=131072, rope_base=150000.0, yarn_factor=32.0,
           yarn_orig=4096, rms_eps=1e-5)


def tensor_specs(c):
    """(name, rows, cols, type, kind) in file order (synth_qwen35.write_synth's
    specs): rows 0 an F32 vector; rows (n, r) a stack of n experts of r
    rows; kind 'norm', 'router', 'bias' or a std."""
    e, hd, n, f = c["n_embd"], c["head_dim"], c["n_expert"], c["n_ff_exp"]
    q, kv = c["n_head"] * hd, c["n_head_kv"] * hd
    out = [("token_embd.weight", c["n_vocab"], e, QT.Q8_0, 0.05)]
    for il in range(c["n_layer"]):
        p = f"blk.{il}."
        out += [(p + "attn_norm.weight", 0, e, QT.F32, "norm"),
                (p + "attn_q.weight", q, e, QT.Q8_0, e ** -0.5),
                (p + "attn_q.bias", 0, q, QT.F32, "bias"),
                (p + "attn_k.weight", kv, e, QT.Q8_0, e ** -0.5),
                (p + "attn_k.bias", 0, kv, QT.F32, "bias"),
                (p + "attn_v.weight", kv, e, QT.Q8_0, e ** -0.5),
                (p + "attn_v.bias", 0, kv, QT.F32, "bias"),
                (p + "attn_output.weight", e, q, QT.Q8_0, 0.5 * q ** -0.5),
                (p + "attn_output.bias", 0, e, QT.F32, "bias"),
                (p + "attn_sinks.weight", 0, c["n_head"], QT.F32, "bias"),
                (p + "post_attention_norm.weight", 0, e, QT.F32, "norm"),
                (p + "ffn_gate_inp.weight", n, e, QT.F32, "router"),
                (p + "ffn_gate_inp.bias", 0, n, QT.F32, "bias"),
                (p + "ffn_gate_exps.weight", (n, f), e, QT.MXFP4, e ** -0.5),
                (p + "ffn_gate_exps.bias", n, f, QT.F32, "bias"),
                (p + "ffn_up_exps.weight", (n, f), e, QT.MXFP4, e ** -0.5),
                (p + "ffn_up_exps.bias", n, f, QT.F32, "bias"),
                (p + "ffn_down_exps.weight", (n, e), f, QT.MXFP4, 0.5 * f ** -0.5),
                (p + "ffn_down_exps.bias", n, e, QT.F32, "bias")]
    out += [("output_norm.weight", 0, e, QT.F32, "norm"),
            ("output.weight", c["n_vocab"], e, QT.Q8_0, 0.05)]
    return out


def tensor_data(pool, g, i, spec):
    """Spec i's bytes: pooled matrices, or fresh random norms, biases and routers."""
    name, rows, cols, qt, kind = spec
    shape = (rows, cols) if rows else (cols,)
    if kind == "norm":
        return (1.0 + 0.1 * g.standard_normal(shape)).astype(np.float32)
    if kind == "bias":
        return (0.1 * g.standard_normal(shape)).astype(np.float32)
    if kind == "router":  # its own random matrix: routing spreads over the experts
        return (4 * cols ** -0.5 * g.standard_normal(shape)).astype(np.float32)
    if isinstance(rows, tuple):
        return np.stack([pool.get(rows[1], cols, qt, kind, i + k) for k in range(rows[0])])
    return pool.get(rows, cols, qt, kind, i)


def write_metadata(w, c):
    vocab = tg._vocab(c["n_vocab"])
    tg.write_metadata(w, vocab, s=c, name=f"gpt-oss-20b-synth ({c['n_layer']} layers)")
    w.add_uint32("general.file_type", 38)  # MOSTLY_MXFP4_MOE


def main():
    synth_main(__doc__, tg.ARCH, CFG, 20, tensor_specs, write_metadata, tensor_data)


if __name__ == "__main__":
    main()
