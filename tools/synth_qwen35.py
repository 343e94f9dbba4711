#!/usr/bin/env python3
"""A random-weight qwen35 GGUF shaped like a small real model, for speed
comparisons (`make model-qwen35-synth`, then bench/bench_vs_llamacpp.py).

    python3 tools/synth_qwen35.py [--out models/qwen35-0.8b-synth-q4_0.gguf] [--mtp]

Shape (Qwen3.5-0.8B's published configuration as we read it): 24 layers,
every 4th gated full attention (8 heads, 2 KV heads, head dim 256, 64 of
them rotated, M-RoPE sections 11/11/10/0), the others gated delta net
(16 key and 16 value heads of 128, conv kernel 4), embedding 1024,
feed-forward 3584, vocabulary 248,320 (tied output). Matrices are Q4_0
(~0.45 GB), norms, conv kernels and the per-head dt/A vectors F32. The
tokenizer is the tiny byte-level BPE of tools/testdata_models.py padded
with unused tokens to the real vocabulary size, so the output matmul costs
what it costs on the real model. Weights are random (seeded): the text is
nonsense, the arithmetic per token is the real model's.

Tensors are generated and quantized one at a time (by row chunks), so the
script needs ~1.5 GB of memory, not the whole model in float32.
Does not: make a model anyone should talk to, or run in `make test`.
"""
import argparse
import os

import numpy as np

import gguf
from gguf import GGMLQuantizationType as QT

import testdata_models as tm

CFG = dict(n_layer=24, n_embd=1024, n_ff=3584, n_head=8, n_head_kv=2, head_dim=256, rope_dim=64,
           sections=[11, 11, 10, 0], interval=4, d_conv=4, d_state=128, n_k_heads=16, n_v_heads=16,
           n_vocab=248320, n_ctx=32768, rope_base=10000000.0, rms_eps=1e-6)


def padded_vocab(n_vocab, specials_first):
    """Tiny BPE vocabulary plus unused tokens up to n_vocab (shared with
    tools/synth_smollm2.py)."""
    tokens, types, merges = tm.build_vocab(250, specials_first=specials_first)
    extra = n_vocab - len(tokens)
    return tokens + [f"<|synth_{i}|>" for i in range(extra)], types + [1] * extra, merges


def vocab():
    return padded_vocab(CFG["n_vocab"], specials_first=False)


def tensor_specs(mtp=False):
    """(name, rows, cols, type, std) in file order; rows 0 = a vector. With
    mtp, the multi-token-prediction block after the trunk (as real
    Qwen3.5 GGUFs carry it: a full-attention block, nextn.eh_proj,
    enorm, hnorm, shared_head_norm)."""
    c = CFG
    e, ff, hd = c["n_embd"], c["n_ff"], c["head_dim"]
    q, kv = c["n_head"] * hd, c["n_head_kv"] * hd
    S, hk, hv = c["d_state"], c["n_k_heads"], c["n_v_heads"]
    conv, vd = 2 * hk * S + hv * S, hv * S
    out = [("token_embd.weight", c["n_vocab"], e, QT.Q4_0, 0.05)]
    for il in range(c["n_layer"] + (1 if mtp else 0)):
        p = f"blk.{il}."
        out.append((p + "attn_norm.weight", 0, e, QT.F32, "norm"))
        if (il + 1) % c["interval"] and il < c["n_layer"]:
            out += [(p + "attn_qkv.weight", conv, e, QT.Q4_0, e ** -0.5),
                    (p + "attn_gate.weight", vd, e, QT.Q4_0, e ** -0.5),
                    (p + "ssm_conv1d.weight", conv, c["d_conv"], QT.F32, 0.5),
                    (p + "ssm_dt.bias", 0, hv, QT.F32, 0.5),
                    (p + "ssm_a", 0, hv, QT.F32, "neg"),
                    (p + "ssm_beta.weight", hv, e, QT.Q4_0, e ** -0.5),
                    (p + "ssm_alpha.weight", hv, e, QT.Q4_0, e ** -0.5),
                    (p + "ssm_norm.weight", 0, S, QT.F32, "norm"),
                    (p + "ssm_out.weight", e, vd, QT.Q4_0, 0.5 * vd ** -0.5)]
        else:
            out += [(p + "attn_q.weight", 2 * q, e, QT.Q4_0, e ** -0.5),
                    (p + "attn_k.weight", kv, e, QT.Q4_0, e ** -0.5),
                    (p + "attn_v.weight", kv, e, QT.Q4_0, e ** -0.5),
                    (p + "attn_output.weight", e, q, QT.Q4_0, 0.5 * q ** -0.5),
                    (p + "attn_q_norm.weight", 0, hd, QT.F32, "norm"),
                    (p + "attn_k_norm.weight", 0, hd, QT.F32, "norm")]
        out += [(p + "post_attention_norm.weight", 0, e, QT.F32, "norm"),
                (p + "ffn_gate.weight", ff, e, QT.Q4_0, e ** -0.5),
                (p + "ffn_up.weight", ff, e, QT.Q4_0, e ** -0.5),
                (p + "ffn_down.weight", e, ff, QT.Q4_0, 0.5 * ff ** -0.5)]
    if mtp:
        p = f"blk.{c['n_layer']}.nextn."
        out += [(p + "eh_proj.weight", e, 2 * e, QT.Q4_0, (2 * e) ** -0.5),
                (p + "enorm.weight", 0, e, QT.F32, "norm"), (p + "hnorm.weight", 0, e, QT.F32, "norm"),
                (p + "shared_head_norm.weight", 0, e, QT.F32, "norm")]
    out.append(("output_norm.weight", 0, e, QT.F32, "norm"))
    return out


def make(g, rows, cols, qt, std):
    """The tensor's bytes as the writer wants them (quantized by chunks)."""
    if rows == 0:
        if std == "norm":
            return (1.0 + 0.1 * g.standard_normal(cols)).astype(np.float32)
        if std == "neg":
            return (-g.uniform(0.1, 1.0, cols)).astype(np.float32)
        return (std * g.standard_normal(cols)).astype(np.float32)
    if qt == QT.F32:
        return (std * g.standard_normal((rows, cols))).astype(np.float32)
    parts = []
    for r0 in range(0, rows, 16384):
        n = min(16384, rows - r0)
        parts.append(gguf.quants.quantize((std * g.standard_normal((n, cols))).astype(np.float32), qt))
    return np.concatenate(parts)


def write_common_metadata(w, name, c):
    """The keys every synthetic model writes, from its CFG-style dict c
    (key/value length only when c has head_dim); shared with
    tools/synth_smollm2.py and tools/synth_qwen3moe.py."""
    w.add_name(name)
    w.add_block_count(c["n_layer"])
    w.add_context_length(c["n_ctx"])
    w.add_embedding_length(c["n_embd"])
    w.add_feed_forward_length(c["n_ff"])
    w.add_head_count(c["n_head"])
    w.add_head_count_kv(c["n_head_kv"])
    if "head_dim" in c:
        w.add_key_length(c["head_dim"])
        w.add_value_length(c["head_dim"])
    w.add_rope_freq_base(c["rope_base"])
    w.add_layer_norm_rms_eps(c["rms_eps"])


def write_metadata(w, mtp=False):
    c, a = CFG, "qwen35"
    write_common_metadata(w, "qwen35-0.8b-synth", {**c, "n_layer": c["n_layer"] + (1 if mtp else 0)})
    w.add_rope_dimension_count(c["rope_dim"])
    tm._write_qwen35_keys(w, dict(arch=a, mtp=mtp, qwen35=dict(interval=c["interval"], d_conv=c["d_conv"],
                                                                d_state=c["d_state"], n_k_heads=c["n_k_heads"],
                                                                n_v_heads=c["n_v_heads"], sections=c["sections"])))
    w.add_uint32("general.quantization_version", 2)
    tm._write_tokenizer(w, dict(arch=a), vocab())


def write_synth(out, arch, specs, write_metadata, seed, data=None):
    """Writes a random-weight GGUF: metadata by write_metadata(writer), then
    the tensors of specs (name, rows, cols, type, std; rows 0: a vector,
    rows (n, r): a stack of n matrices of r rows, as MoE experts) drawn
    from seed, or given by data(generator, index, spec) when set, to out
    through a temporary file (tools/synth_smollm2.py and
    tools/synth_qwen3moe.py share this)."""
    w = gguf.GGUFWriter(out + ".tmp", arch)
    write_metadata(w)
    for name, rows, cols, qt, _ in specs:
        if rows == 0:
            w.add_tensor_info(name, [cols], np.dtype(np.float32), cols * 4)
        elif qt == QT.F32:
            w.add_tensor_info(name, [rows, cols], np.dtype(np.float32), rows * cols * 4)
        else:
            bs, ts = gguf.GGML_QUANT_SIZES[qt]
            shape = [*rows, cols // bs * ts] if isinstance(rows, tuple) else [rows, cols // bs * ts]
            w.add_tensor_info(name, shape, np.dtype(np.uint8), int(np.prod(shape)), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    g = np.random.default_rng(seed)
    for i, (name, rows, cols, qt, std) in enumerate(specs):
        w.write_tensor_data(data(g, i, specs[i]) if data else make(g, rows, cols, qt, std))
    w.close()
    os.replace(out + ".tmp", out)
    print(f"synth: wrote {out} ({os.path.getsize(out) / 2**20:.0f} MiB)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="models/qwen35-0.8b-synth-q4_0.gguf")
    ap.add_argument("--seed", type=int, default=35)
    ap.add_argument("--mtp", action="store_true", help="with the MTP block (for strata bench-mtp)")
    args = ap.parse_args()
    write_synth(args.out, "qwen35", tensor_specs(args.mtp), lambda w: write_metadata(w, args.mtp), args.seed)


if __name__ == "__main__":
    main()
