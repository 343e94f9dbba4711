#!/usr/bin/env python3
"""Tiny synthetic GGUF models and corrupt GGUF files for the loader tests.

generate(outdir) writes
  outdir/models/*.gguf   small random-weight models (llama, qwen2, qwen3,
                         qwen35, the mixture-of-experts qwen3moe and
                         qwen35moe with 3-D expert stacks, and gemma3 with
                         its sliding window) in
                         every weight format Strata reads, each with a tiny
                         byte-level BPE tokenizer and a ChatML template, so
                         the loader, kernels, tokenizer and CLI can run
                         without the real model;
  outdir/models/MANIFEST.txt   one line per model (see MODELS below);
  outdir/bad/*.gguf      truncated, corrupt and unsupported files;
  outdir/bad/MANIFEST.txt      what error each bad file must give.

Everything is deterministic: numpy Generators with fixed seeds, a fixed BPE
training corpus, no timestamps. Weights are random, so the models produce
nonsense text; what they pin down is the file format and the arithmetic.

The gguf package has no quantizer for the K-quants, so Q4_K, Q5_K and Q6_K
are quantized here (plain round-to-nearest into the ggml block layout) and
checked against the package's dequantizer before they are written.

Does not: produce reference logits (tools/oracle_refs.py does that for the
real model) or test anything itself.
"""
import os
import re
import struct

import numpy as np

import gguf
from gguf import GGMLQuantizationType as QT

QK_K = 256

# ---------------------------------------------------------------------------
# K-quant quantizers (round-to-nearest; layouts as ggml's block_q*_K)
# ---------------------------------------------------------------------------


def _f16(x):
    """float32 array -> float16 array, and back, so scales match the file."""
    h = np.asarray(x, dtype=np.float32).astype(np.float16)
    return h, h.astype(np.float32)


def _pack_k_scales(sc, mn):
    """Pack 8 six-bit scales and 8 six-bit mins into 12 bytes (Q4_K/Q5_K).

    Bytes 0-3: sc[0..3] low 6 bits, sc[4..7] bits 4-5 in bits 6-7.
    Bytes 4-7: mn[0..3] low 6 bits, mn[4..7] bits 4-5 in bits 6-7.
    Bytes 8-11: sc[4..7] low nibble | mn[4..7] low nibble << 4.
    """
    sc = sc.astype(np.uint8)
    mn = mn.astype(np.uint8)
    out = np.zeros((sc.shape[0], 12), dtype=np.uint8)
    out[:, 0:4] = (sc[:, 0:4] & 63) | ((sc[:, 4:8] >> 4) << 6)
    out[:, 4:8] = (mn[:, 0:4] & 63) | ((mn[:, 4:8] >> 4) << 6)
    out[:, 8:12] = (sc[:, 4:8] & 15) | ((mn[:, 4:8] & 15) << 4)
    return out


def _k_scale_min(blocks, qmax):
    """Per 32-element sub-block affine fit x ~ d*sc*q - dmin*m, q in [0,qmax].

    Returns (d16, dmin16, sc, mn, q) with q as uint8 (n, 256)."""
    n = blocks.shape[0]
    sub = blocks.reshape(n, 8, 32)
    lo = np.minimum(sub.min(axis=2), 0.0)
    hi = sub.max(axis=2)
    scale = (hi - lo) / qmax
    mins = -lo
    d16, d = _f16(scale.max(axis=1) / 63.0)
    m16, dm = _f16(mins.max(axis=1) / 63.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(d[:, None] > 0, np.round(scale / d[:, None]), 0)
        mn = np.where(dm[:, None] > 0, np.round(mins / dm[:, None]), 0)
    sc = np.clip(sc, 0, 63)
    mn = np.clip(mn, 0, 63)
    eff_d = (d[:, None] * sc)[:, :, None]
    eff_m = (dm[:, None] * mn)[:, :, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(eff_d > 0, np.round((sub + eff_m) / eff_d), 0)
    q = np.clip(q, 0, qmax).astype(np.uint8).reshape(n, QK_K)
    return d16, m16, sc, mn, q


def _nibbles_k(q):
    """Low 4 bits of q (n, 256) into 128 bytes: byte 32*g + l holds element
    64*g + l (low nibble) and 64*g + 32 + l (high nibble)."""
    n = q.shape[0]
    g = (q & 15).reshape(n, 4, 2, 32)
    return (g[:, :, 0, :] | (g[:, :, 1, :] << 4)).reshape(n, 128)


def quantize_q4_k(blocks):
    """(n, 256) float32 -> (n, 144) bytes: d, dmin, scales[12], qs[128]."""
    d16, m16, sc, mn, q = _k_scale_min(blocks, 15)
    n = blocks.shape[0]
    head = np.stack([d16, m16], axis=1).view(np.uint8).reshape(n, 4)
    return np.concatenate([head, _pack_k_scales(sc, mn), _nibbles_k(q)], axis=1)


def quantize_q5_k(blocks):
    """(n, 256) -> (n, 176): d, dmin, scales[12], qh[32], qs[128].
    Bit i of qh[l] is the fifth bit of element 32*i + l."""
    d16, m16, sc, mn, q = _k_scale_min(blocks, 31)
    n = blocks.shape[0]
    head = np.stack([d16, m16], axis=1).view(np.uint8).reshape(n, 4)
    hb = ((q >> 4) & 1).reshape(n, 8, 32)
    qh = np.zeros((n, 32), dtype=np.uint8)
    for i in range(8):
        qh |= (hb[:, i, :] << i).astype(np.uint8)
    return np.concatenate([head, _pack_k_scales(sc, mn), qh, _nibbles_k(q)], axis=1)


def quantize_q6_k(blocks):
    """(n, 256) -> (n, 210): ql[128], qh[64], scales[16] (int8), d.
    Element 128*h + 32*k + l: low nibble in ql[64*h + 32*(k&1) + l] (high
    nibble when k >= 2), top two bits in qh[32*h + l] bits 2k..2k+1."""
    n = blocks.shape[0]
    sub = blocks.reshape(n, 16, 16)
    scale = np.abs(sub).max(axis=2) / 31.0
    d16, d = _f16(np.abs(scale).max(axis=1) / 127.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(d[:, None] > 0, np.round(scale / d[:, None]), 0)
    sc = np.clip(sc, -128, 127)
    eff = (d[:, None] * sc)[:, :, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(eff != 0, np.round(sub / eff), 0)
    q = (np.clip(q, -32, 31) + 32).astype(np.uint8).reshape(n, 2, 4, 32)
    lo = q & 15
    ql = (lo[:, :, 0:2, :] | (lo[:, :, 2:4, :] << 4)).reshape(n, 128)
    hi = (q >> 4) & 3
    qh = (hi[:, :, 0] | (hi[:, :, 1] << 2) | (hi[:, :, 2] << 4) | (hi[:, :, 3] << 6)).reshape(n, 64)
    scales = sc.astype(np.int8).view(np.uint8)
    dd = d16.view(np.uint8).reshape(n, 2)
    return np.concatenate([ql, qh.astype(np.uint8), scales, dd], axis=1)


_K_QUANTIZERS = {QT.Q4_K: quantize_q4_k, QT.Q5_K: quantize_q5_k, QT.Q6_K: quantize_q6_k}


def quantize(w, qtype):
    """2-D float32 weight (rows, cols) -> array for GGUFWriter.add_tensor."""
    if qtype == QT.F32:
        return w.astype(np.float32)
    if qtype == QT.F16:
        return w.astype(np.float16)
    if qtype in _K_QUANTIZERS:
        rows, cols = w.shape
        blocks = w.astype(np.float32).reshape(-1, QK_K)
        out = _K_QUANTIZERS[qtype](blocks).reshape(rows, -1)
        _check_roundtrip(w, out, qtype)
        return out
    return gguf.quants.quantize(w.astype(np.float32), qtype)


def _check_roundtrip(w, q, qtype):
    """Our K-quant packing must decode (with the gguf package) to ~w."""
    back = gguf.quants.dequantize(q, qtype).reshape(w.shape)
    err = np.abs(back - w).max() / (np.abs(w).max() + 1e-12)
    limit = {QT.Q4_K: 0.12, QT.Q5_K: 0.06, QT.Q6_K: 0.03}[qtype]
    if not err < limit:
        raise AssertionError(f"{qtype.name} round trip error {err:.4f} >= {limit}")


# ---------------------------------------------------------------------------
# Tokenizer: byte-level BPE trained on a fixed corpus
# ---------------------------------------------------------------------------

CORPUS = """
The quick brown fox jumps over the lazy dog. A cache that never forgets is a
cache that never has to compute the same thing twice. Tokens are the truth.
Hello, world! Hello there, how are you today? I am fine, thank you.
def main(argc, argv): return 0 if argc > 1 else 1
for (int i = 0; i < n; i++) { sum += x[i] * y[i]; }
The model reads the prompt, then writes the answer one token at a time.
What is the capital of France? The capital of France is Paris.
user assistant system tool function call result content message role
Once upon a time, there was a little server that kept every block on disk.
1234567890 3.14159 2024-01-01 100% 42 is the answer.
"""

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# ChatML, as SmolLM2 and Qwen use it (SmolLM2 adds a default system turn).
TEMPLATE_SMOL = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant.<|im_end|>\\n' }}"
    "{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
TEMPLATE_CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def byte_to_unicode():
    """GPT-2's reversible byte -> printable character map."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def train_bpe(n_merges):
    """Deterministic BPE over CORPUS: returns merges as (left, right) strings
    in byte-unicode form. Ties go to the lexicographically smallest pair."""
    b2u = byte_to_unicode()
    words = {}
    for w in re.findall(r" ?[A-Za-z]+| ?[0-9]| ?[^\sA-Za-z0-9]+|\s+", CORPUS):
        key = tuple(b2u[b] for b in w.encode("utf-8"))
        words[key] = words.get(key, 0) + 1
    merges = []
    for _ in range(n_merges):
        pairs = {}
        for word, cnt in words.items():
            for a, b in zip(word, word[1:]):
                pairs[(a, b)] = pairs.get((a, b), 0) + cnt
        if not pairs:
            break
        best = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        merges.append(best)
        words = {_merge_word(w, best): c for w, c in words.items()}
    return merges


def _merge_word(word, pair):
    out, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
            out.append(word[i] + word[i + 1])
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


def build_vocab(n_merges, specials_first):
    """Token strings, token types and merges. specials_first puts the control
    tokens at ids 0.. (SmolLM layout), otherwise after the merges (Qwen)."""
    b2u = byte_to_unicode()
    merges = train_bpe(n_merges)
    body = [b2u[b] for b in range(256)]
    seen = set(body)
    for a, b in merges:
        if a + b not in seen:
            body.append(a + b)
            seen.add(a + b)
    if specials_first:
        tokens = SPECIALS + body
        types = [3] * len(SPECIALS) + [1] * len(body)
    else:
        tokens = body + SPECIALS
        types = [1] * len(body) + [3] * len(SPECIALS)
    return tokens, types, [f"{a} {b}" for a, b in merges]


# ---------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------

# name, arch, main weight type, per-tensor overrides, hyperparameters.
# "output": None = tied embeddings (no output.weight), else its type.
MODELS = [
    dict(name="llama-f32", arch="llama", wtype=QT.F32, output=None, n_layer=2, n_ff=256),
    dict(name="llama-f16", arch="llama", wtype=QT.F16, output=QT.F16, n_layer=2, add_bos=True),
    dict(name="llama-bf16", arch="llama", wtype=QT.BF16, output=None, n_layer=2, n_ff=256),
    dict(name="llama-q8_0", arch="llama", wtype=QT.Q8_0, output=QT.Q8_0, n_layer=2,
         rope_scaling=("linear", 2.0)),
    dict(name="llama-q4_0", arch="llama", wtype=QT.Q4_0, output=None, n_layer=2),
    dict(name="llama-q4_1", arch="llama", wtype=QT.Q4_1, output=None, n_layer=3),
    dict(name="llama-q4_k", arch="llama", wtype=QT.Q4_K, output=QT.Q6_K, n_layer=3,
         overrides={"ffn_down": QT.Q6_K}),
    dict(name="llama-q5_k", arch="llama", wtype=QT.Q5_K, output=QT.Q8_0, n_layer=2),
    # with llama.cpp's general.sampling.* keys (the server's request defaults)
    dict(name="llama-q6_k", arch="llama", wtype=QT.Q6_K, output=None, n_layer=2,
         sampling=dict(temp=0.25, top_k=7, top_p=0.5)),
    dict(name="qwen2-q5_0", arch="qwen2", wtype=QT.Q5_0, output=None, n_layer=2),
    dict(name="qwen3-q5_1", arch="qwen3", wtype=QT.Q5_1, output=QT.Q8_0, n_layer=2, head_dim=128),
    # Qwen3.5 dense: layers 0 and 2 gated delta net, 1 and 3 gated attention
    # (full_attention_interval 2); partial rope (32 of 64 dims) whose last
    # M-RoPE section (text position 0) leaves 2 of the 16 pairs unrotated.
    # F32 weights: no activation quantization in either engine, so the
    # llama.cpp oracle test can be sharp (differences ~1e-3: F16 K/V).
    dict(name="qwen35-f32", arch="qwen35", wtype=QT.F32, output=QT.F32, n_layer=4, head_dim=64,
         rope_dim=32, qwen35=dict(interval=2, d_conv=4, d_state=32, n_k_heads=2, n_v_heads=4,
                                  sections=[5, 5, 4, 2])),
    # Mixed types inside one matmul group (Q/K/V; gate/up; qwen35's delta-net
    # qkv/gate/beta/alpha), as real Q4_K_M files mix them: every pair of the
    # four activation formats (F32 for F32/F16/BF16, Q8_0, Q8_1, Q8_K) shares
    # a group below, and in each group a later weight needs a larger
    # activation row than an earlier one (for 256 columns Q8_K 292 < Q8_0 =
    # Q8_1 640 < F32 1024 bytes): the order that once freed a group's first
    # buffer under its running job (forward.c, fwd__matmul_group).
    # Appended last: a model's seed is its index here.
    dict(name="llama-mix-k", arch="llama", wtype=QT.Q4_K, output=QT.Q8_0, n_layer=2,
         overrides={"attn_k": QT.Q5_0, "attn_v": QT.BF16, "attn_output": QT.Q6_K,
                    "ffn_gate": QT.Q4_1, "ffn_up": QT.F16, "ffn_down": QT.Q6_K}),
    dict(name="qwen2-mix-legacy", arch="qwen2", wtype=QT.Q5_0, output=None, n_layer=2,
         overrides={"attn_q": QT.Q6_K, "attn_k": QT.Q8_0, "attn_v": QT.Q5_1,
                    "ffn_gate": QT.Q4_K, "ffn_up": QT.Q4_1}),
    dict(name="llama-mix-kf", arch="llama", wtype=QT.Q4_K, output=None, n_layer=2,
         overrides={"attn_k": QT.Q6_K, "attn_v": QT.Q5_K, "attn_output": QT.Q4_0,
                    "ffn_gate": QT.Q6_K, "ffn_up": QT.F32, "ffn_down": QT.Q4_1}),
    dict(name="qwen35-mix", arch="qwen35", wtype=QT.F32, output=QT.F32, n_layer=4, head_dim=64,
         rope_dim=32, overrides={"attn_q": QT.Q4_K, "attn_k": QT.Q8_0, "ffn_gate": QT.Q6_K,
                                 "ffn_up": QT.BF16},
         qwen35=dict(interval=2, d_conv=4, d_state=32, n_k_heads=2, n_v_heads=4,
                     sections=[5, 5, 4, 2])),
    # Mixture of experts, llama.cpp's names: ffn_gate_inp (router, kept F32
    # as llama.cpp's quantizer keeps it), 3-D ffn_{gate,up,down}_exps
    # [n_expert][rows][cols]; qwen35moe adds a shared expert with a sigmoid
    # gate (ffn_gate_inp_shexp, ffn_*_shexp). F32 fixtures for the llama.cpp
    # oracle (tests/data/oracle/tiny/); the Q4_K_M mix (Q4_K, Q6_K for
    # attn_v and the down experts, Q6_K output) and Q8_0 as the real files
    # ship. qwen35moe's ssm_out has 128 columns (too few for a K-quant
    # block): Q8_0 there.
    dict(name="qwen3moe-f32", arch="qwen3moe", wtype=QT.F32, output=QT.F32, n_layer=2,
         moe=dict(n_expert=8, n_used=3, n_ff_exp=128, router_seed=5)),
    dict(name="qwen3moe-q4_k_m", arch="qwen3moe", wtype=QT.Q4_K, output=QT.Q6_K, n_layer=3,
         overrides={"attn_v": QT.Q6_K, "ffn_down_exps": QT.Q6_K},
         moe=dict(n_expert=8, n_used=2, n_ff_exp=256, router_seed=4)),
    dict(name="qwen3moe-q8_0", arch="qwen3moe", wtype=QT.Q8_0, output=QT.Q8_0, n_layer=2,
         moe=dict(n_expert=4, n_used=2, n_ff_exp=256, router_seed=3)),
    dict(name="qwen35moe-f32", arch="qwen35moe", wtype=QT.F32, output=QT.F32, n_layer=4, head_dim=64,
         rope_dim=32, qwen35=dict(interval=2, d_conv=4, d_state=32, n_k_heads=2, n_v_heads=4,
                                  sections=[5, 5, 4, 2]),
         moe=dict(n_expert=8, n_used=2, n_ff_exp=128, n_ff_shexp=192, router_seed=6)),
    dict(name="qwen35moe-q4_k_m", arch="qwen35moe", wtype=QT.Q4_K, output=QT.Q6_K, n_layer=4, head_dim=64,
         rope_dim=32, overrides={"attn_v": QT.Q6_K, "ffn_down_exps": QT.Q6_K, "ffn_down": QT.Q6_K,
                                 "attn_output": QT.Q8_0},
         qwen35=dict(interval=2, d_conv=4, d_state=32, n_k_heads=2, n_v_heads=4,
                     sections=[5, 5, 4, 2]),
         moe=dict(n_expert=4, n_used=2, n_ff_exp=256, n_ff_shexp=256, router_seed=8)),
    # Gemma 3: QK-norm, norms after attention and feed-forward, GELU, inputs
    # scaled by sqrt(n_embd), tied output; layers 0 and 1 slide over the
    # last 16 positions (pattern period 3: layer 2 is global), so the
    # reference tokens and any test prompt pass the window (the real 270M's
    # is 512, beyond most tests).
    dict(name="gemma3-q8_0", arch="gemma3", wtype=QT.Q8_0, output=None, n_layer=3,
         gemma3=dict(window=16, period=3)),
]

HPARAMS = dict(n_embd=256, n_ff=512, n_head=4, n_head_kv=2, n_ctx=2048,
               rope_base=10000.0, rms_eps=1e-5, n_merges=250)


class _Rng:
    """Weight generator: one numpy Generator per model, fixed seed."""

    def __init__(self, seed):
        self.g = np.random.default_rng(seed)

    def mat(self, rows, cols, std):
        return (self.g.standard_normal((rows, cols)) * std).astype(np.float32)

    def norm(self, n):
        return (1.0 + 0.1 * self.g.standard_normal(n)).astype(np.float32)

    def bias(self, n):
        return (0.1 * self.g.standard_normal(n)).astype(np.float32)

    def mat3(self, n, rows, cols, std):
        return (self.g.standard_normal((n, rows, cols)) * std).astype(np.float32)


def _moe_ffn(spec, hp, rng, p):
    """Mixture-of-experts feed-forward tensors of one block (after its
    norm): router, expert stacks, and the shared expert when the spec has
    n_ff_shexp. The router comes from its own generator (router_seed,
    layer), so trying router seeds leaves every other weight as it is:
    each model's router_seed was picked so that every routing decision of
    the float64 reference on its reference tokens has a clear logit gap
    (testdata_reflogits.py checks it), or the engine's 8-bit activations
    could flip a near-tie and move the logits far from the reference."""
    mo, e = spec["moe"], hp["n_embd"]
    n, f = mo["n_expert"], mo["n_ff_exp"]
    il = int(p.split(".")[1])
    router = _Rng([mo.get("router_seed", 0), il]).mat(n, e, 4 * e ** -0.5)
    out = [(p + "ffn_gate_inp.weight", router, "router"),
           (p + "ffn_gate_exps.weight", rng.mat3(n, f, e, e ** -0.5), "ffn_gate_exps"),
           (p + "ffn_up_exps.weight", rng.mat3(n, f, e, e ** -0.5), "ffn_up_exps"),
           (p + "ffn_down_exps.weight", rng.mat3(n, e, f, f ** -0.5), "ffn_down_exps")]
    fs = mo.get("n_ff_shexp")
    if fs:
        out += [(p + "ffn_gate_inp_shexp.weight", (e ** -0.5 * rng.g.standard_normal(e)).astype(np.float32),
                 "norm"),
                (p + "ffn_gate_shexp.weight", rng.mat(fs, e, e ** -0.5), "ffn_gate"),
                (p + "ffn_up_shexp.weight", rng.mat(fs, e, e ** -0.5), "ffn_up"),
                (p + "ffn_down_shexp.weight", rng.mat(e, fs, fs ** -0.5), "ffn_down")]
    return out


def _qwen35_recurrent(spec, hp, rng, il):
    """A gated delta-net block's own tensors (llama.cpp's names and shapes)."""
    q = spec["qwen35"]
    e, S, hk, hv, K = hp["n_embd"], q["d_state"], q["n_k_heads"], q["n_v_heads"], q["d_conv"]
    conv, vd = 2 * hk * S + hv * S, hv * S
    g = rng.g
    p = f"blk.{il}."
    return [
        (p + "attn_qkv.weight", rng.mat(conv, e, e ** -0.5), "attn_q"),
        (p + "attn_gate.weight", rng.mat(vd, e, e ** -0.5), "attn_q"),
        (p + "ssm_conv1d.weight", rng.mat(conv, K, 0.5), "norm"),
        (p + "ssm_dt.bias", (0.5 * g.standard_normal(hv)).astype(np.float32), "norm"),
        (p + "ssm_a", (-g.uniform(0.1, 1.0, hv)).astype(np.float32), "norm"),
        (p + "ssm_beta.weight", rng.mat(hv, e, e ** -0.5), "attn_k"),
        (p + "ssm_alpha.weight", rng.mat(hv, e, e ** -0.5), "attn_k"),
        (p + "ssm_norm.weight", rng.norm(S), "norm"),
        (p + "ssm_out.weight", rng.mat(e, vd, vd ** -0.5), "attn_output"),
    ]


def _qwen35_layer(spec, hp, rng, il):
    """Qwen3.5: recurrent or gated-attention block, post_attention_norm
    before the feed-forward."""
    e, ff = hp["n_embd"], spec.get("n_ff", hp["n_ff"])
    hd = spec["head_dim"]
    q_out, kv_out = hp["n_head"] * hd, hp["n_head_kv"] * hd
    p = f"blk.{il}."
    out = [(p + "attn_norm.weight", rng.norm(e), "norm")]
    if (il + 1) % spec["qwen35"]["interval"] != 0:
        out += _qwen35_recurrent(spec, hp, rng, il)
    else:
        out += [(p + "attn_q.weight", rng.mat(2 * q_out, e, e ** -0.5), "attn_q"),
                (p + "attn_k.weight", rng.mat(kv_out, e, e ** -0.5), "attn_k"),
                (p + "attn_v.weight", rng.mat(kv_out, e, e ** -0.5), "attn_v"),
                (p + "attn_output.weight", rng.mat(e, q_out, q_out ** -0.5), "attn_output"),
                (p + "attn_q_norm.weight", rng.norm(hd), "norm"),
                (p + "attn_k_norm.weight", rng.norm(hd), "norm")]
    out.append((p + "post_attention_norm.weight", rng.norm(e), "norm"))
    if "moe" in spec:
        return out + _moe_ffn(spec, hp, rng, p)
    return out + [
        (p + "ffn_gate.weight", rng.mat(ff, e, e ** -0.5), "ffn_gate"),
        (p + "ffn_up.weight", rng.mat(ff, e, e ** -0.5), "ffn_up"),
        (p + "ffn_down.weight", rng.mat(e, ff, ff ** -0.5), "ffn_down"),
    ]


def _layer_tensors(spec, hp, rng, il):
    """(name, float32 array, kind) for one block; kind picks the type."""
    if "qwen35" in spec:
        return _qwen35_layer(spec, hp, rng, il)
    e, ff = hp["n_embd"], spec.get("n_ff", hp["n_ff"])
    hd = spec.get("head_dim", e // hp["n_head"])
    q_out, kv_out = hp["n_head"] * hd, hp["n_head_kv"] * hd
    p = f"blk.{il}."
    out = [
        (p + "attn_norm.weight", rng.norm(e), "norm"),
        (p + "attn_q.weight", rng.mat(q_out, e, e ** -0.5), "attn_q"),
        (p + "attn_k.weight", rng.mat(kv_out, e, e ** -0.5), "attn_k"),
        (p + "attn_v.weight", rng.mat(kv_out, e, e ** -0.5), "attn_v"),
        (p + "attn_output.weight", rng.mat(e, q_out, q_out ** -0.5), "attn_output"),
        (p + "ffn_norm.weight", rng.norm(e), "norm"),
    ]
    if "moe" in spec:
        out += _moe_ffn(spec, hp, rng, p)
    else:
        out += [(p + "ffn_gate.weight", rng.mat(ff, e, e ** -0.5), "ffn_gate"),
                (p + "ffn_up.weight", rng.mat(ff, e, e ** -0.5), "ffn_up"),
                (p + "ffn_down.weight", rng.mat(e, ff, ff ** -0.5), "ffn_down")]
    if spec["arch"] == "qwen2":
        out += [(p + "attn_q.bias", rng.bias(q_out), "norm"),
                (p + "attn_k.bias", rng.bias(kv_out), "norm"),
                (p + "attn_v.bias", rng.bias(kv_out), "norm")]
    if spec["arch"] in ("qwen3", "qwen3moe", "gemma3"):
        out += [(p + "attn_q_norm.weight", rng.norm(hd), "norm"),
                (p + "attn_k_norm.weight", rng.norm(hd), "norm")]
    if spec["arch"] == "gemma3":
        out += [(p + "post_attention_norm.weight", rng.norm(e), "norm"),
                (p + "post_ffw_norm.weight", rng.norm(e), "norm")]
    return out


def _model_tensors(spec, hp, n_vocab, rng):
    e = hp["n_embd"]
    ts = [("token_embd.weight", rng.mat(n_vocab, e, 0.1), "token_embd")]
    for il in range(spec["n_layer"]):
        ts += _layer_tensors(spec, hp, rng, il)
    ts.append(("output_norm.weight", rng.norm(e), "norm"))
    if spec["output"] is not None:
        ts.append(("output.weight", rng.mat(n_vocab, e, 0.1), "output"))
    if spec.get("mtp"):  # drawn last: the trunk's weights are the plain model's
        il, n_trunk = spec["n_layer"], len(ts)
        ts += _qwen35_layer({**spec, "qwen35": {**spec["qwen35"], "interval": 1}}, hp, rng, il)
        ts.append((f"blk.{il}.nextn.eh_proj.weight", rng.mat(e, 2 * e, (2 * e) ** -0.5), "attn_q"))
        ts.append((f"blk.{il}.nextn.enorm.weight", rng.norm(e), "norm"))
        ts.append((f"blk.{il}.nextn.hnorm.weight", rng.norm(e), "norm"))
        # real Qwen3.5/3.6 files carry the block's own head norm (mtp.norm);
        # the head and the embedding are the trunk's
        ts.append((f"blk.{il}.nextn.shared_head_norm.weight", rng.norm(e), "norm"))
        if spec["mtp"] == "echo":
            ts = _echo(ts, n_trunk, e)
    return ts


ECHO_QUIET = 0.02  # the echo fixture's trunk layers' output scale (see _echo)


def _echo(ts, n_trunk, e):
    """A trunk whose next token is mostly a function of the current one,
    and an MTP block that knows the function (mtp: "echo"). The trunk's
    layers write ECHO_QUIET of their output into the residual stream, so
    its logits are mostly W_out (output_norm(embed(token))): greedy
    decoding follows that map, and the context (attention, the recurrent
    state) turns it elsewhere now and then. The block passes the token's
    normed embedding through (eh_proj = [I | 0]), its matrices are zero
    (its residual stream keeps its input), its norms ones, its head norm
    the trunk's output norm: its logits are the map's. Its drafts are
    accepted where the trunk follows the map and refused where the context
    turns it: every path of verification, on a fixture."""
    out_norm = next(arr for name, arr, _ in ts if name == "output_norm.weight")
    quiet = ("attn_output.weight", "ssm_out.weight", "ffn_down.weight")
    res = [(n, a * ECHO_QUIET if n.endswith(quiet) else a, k) for n, a, k in ts[:n_trunk]]
    for name, arr, kind in ts[n_trunk:]:
        if name.endswith("eh_proj.weight"):
            arr = np.concatenate([np.eye(e), np.zeros((e, e))], axis=1)
        elif name.endswith("shared_head_norm.weight"):
            arr = out_norm
        else:
            arr = np.ones_like(arr) if arr.ndim == 1 else np.zeros_like(arr)
        res.append((name, arr.astype(np.float32), kind))
    return res


def _tensor_type(spec, kind, name=None):
    if kind in ("norm", "router"):
        return QT.F32
    if name in spec.get("types", {}):  # per tensor (tests/fuzz/gguf_mutator.py)
        return spec["types"][name]
    if kind == "output":
        return spec["output"]
    return spec.get("overrides", {}).get(kind, spec["wtype"])


def _write_metadata(w, spec, hp, vocab):
    arch = spec["arch"]
    hd = spec.get("head_dim", hp["n_embd"] // hp["n_head"])
    w.add_name(spec["name"])
    w.add_block_count(spec["n_layer"] + (1 if spec.get("mtp") else 0))
    w.add_context_length(hp["n_ctx"])
    w.add_embedding_length(hp["n_embd"])
    w.add_feed_forward_length(spec.get("n_ff", hp["n_ff"]))
    w.add_head_count(hp["n_head"])
    w.add_head_count_kv(hp["n_head_kv"])
    w.add_rope_freq_base(hp["rope_base"])
    w.add_layer_norm_rms_eps(hp["rms_eps"])
    w.add_rope_dimension_count(spec.get("rope_dim", hd))
    if "qwen35" in spec:
        _write_qwen35_keys(w, spec)
    if "moe" in spec:
        _write_moe_keys(w, spec)
    if "gemma3" in spec:
        w.add_uint32(f"{arch}.attention.sliding_window", spec["gemma3"]["window"])
        w.add_uint32(f"{arch}.attention.sliding_window_pattern", spec["gemma3"]["period"])
    if "head_dim" in spec:
        w.add_key_length(hd)
        w.add_value_length(hd)
    if "rope_scaling" in spec:
        kind, factor = spec["rope_scaling"]
        w.add_string(f"{arch}.rope.scaling.type", kind)
        w.add_float32(f"{arch}.rope.scaling.factor", factor)
    w.add_uint32("general.quantization_version", 2)
    if "sampling" in spec:  # the types llama.cpp writes: float32, top_k an int32
        for k, v in spec["sampling"].items():
            (w.add_int32 if isinstance(v, int) else w.add_float32)(f"general.sampling.{k}", v)
    _write_tokenizer(w, spec, vocab)


def _write_qwen35_keys(w, spec):
    """llama.cpp's qwen35 keys (raw names: the gguf package may predate them)."""
    q, a = spec["qwen35"], spec["arch"]
    w.add_uint32(f"{a}.ssm.conv_kernel", q["d_conv"])
    if spec.get("drop_key") != "ssm.state_size":
        w.add_uint32(f"{a}.ssm.state_size", q["d_state"])
    w.add_uint32(f"{a}.ssm.group_count", q["n_k_heads"])
    w.add_uint32(f"{a}.ssm.time_step_rank", q["n_v_heads"])
    w.add_uint32(f"{a}.ssm.inner_size", q["n_v_heads"] * q["d_state"])
    w.add_uint32(f"{a}.full_attention_interval", q["interval"])
    if spec.get("mtp"):  # one multi-token-prediction block after the trunk
        w.add_uint32(f"{a}.nextn_predict_layers", 1)
    w.add_array(f"{a}.rope.dimension_sections", [int(x) for x in q["sections"]])


def _write_moe_keys(w, spec):
    """llama.cpp's expert keys (drop_key / set_key: the bad-file variants)."""
    mo, a = spec["moe"], spec["arch"]
    keys = {"expert_count": mo["n_expert"], "expert_used_count": mo["n_used"],
            "expert_feed_forward_length": mo["n_ff_exp"]}
    if mo.get("n_ff_shexp"):
        keys["expert_shared_feed_forward_length"] = mo["n_ff_shexp"]
    keys.update(spec.get("set_key", {}))
    for k, v in keys.items():
        if spec.get("drop_key") != k:
            w.add_uint32(f"{a}.{k}", v)


def _write_tokenizer(w, spec, vocab):
    tokens, types, merges = vocab
    smol = spec["arch"] == "llama"
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm" if smol else "default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    start, end, eot = (tokens.index(s) for s in ("<|im_start|>", "<|im_end|>", "<|endoftext|>"))
    w.add_bos_token_id(start if smol else eot)
    w.add_eos_token_id(end if smol else eot)
    w.add_uint32("tokenizer.ggml.padding_token_id", eot)
    w.add_add_bos_token(bool(spec.get("add_bos", False)))
    w.add_chat_template(TEMPLATE_SMOL if smol else TEMPLATE_CHATML)


def write_model(path, spec, seed):
    hp = HPARAMS
    vocab = build_vocab(hp["n_merges"], specials_first=spec["arch"] == "llama")
    rng = _Rng(seed)
    w = gguf.GGUFWriter(path, spec["arch"])
    _write_metadata(w, spec, hp, vocab)
    for name, arr, kind in _model_tensors(spec, hp, len(vocab[0]), rng):
        if name == spec.get("drop_tensor"):
            continue
        if name == spec.get("short_tensor"):  # one row fewer: a mis-shaped file
            arr = arr[:-1]
        if name in spec.get("reshape", {}):  # another shape, same values repeated (fuzzing)
            arr = np.resize(arr, spec["reshape"][name])
        qt = _tensor_type(spec, kind, name)
        if arr.ndim == 3:  # an expert stack: each expert's matrix quantized by rows
            data = quantize(arr.reshape(-1, arr.shape[2]), qt)
            data = data.reshape(arr.shape[0], arr.shape[1], -1)
        else:
            data = quantize(arr, qt) if arr.ndim == 2 else arr
        w.add_tensor(name, data, raw_dtype=qt if data.dtype == np.uint8 else None)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return len(vocab[0])


def write_named(outdir, names):
    """Only the models of MODELS named (the GPU machine makes its own:
    tools/gen_gpu_testdata.py); the same bytes as _write_models."""
    d = os.path.join(outdir, "models")
    os.makedirs(d, exist_ok=True)
    for i, spec in enumerate(MODELS):
        if spec["name"] in names:
            write_model(os.path.join(d, spec["name"] + ".gguf"), spec, seed=1000 + i)
    return [os.path.join(d, n + ".gguf") for n in names]


def _write_models(outdir):
    d = os.path.join(outdir, "models")
    os.makedirs(d, exist_ok=True)
    lines = ["# name arch weight_type output_type n_layer n_vocab (tools/testdata_models.py)"]
    for i, spec in enumerate(MODELS):
        n_vocab = write_model(os.path.join(d, spec["name"] + ".gguf"), spec, seed=1000 + i)
        out = spec["output"].name if spec["output"] is not None else "tied"
        lines.append(f"{spec['name']} {spec['arch']} {spec['wtype'].name} {out} "
                     f"{spec['n_layer']} {n_vocab}")
    with open(os.path.join(d, "MANIFEST.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


# ---------------------------------------------------------------------------
# Bad files: a raw GGUF writer that remembers where every field starts
# ---------------------------------------------------------------------------

GGUF_MAGIC = b"GGUF"
V_U32, V_F32, V_STR, V_ARR = 4, 6, 8, 9
ALIGN = 32


class RawGGUF:
    """Serializes a GGUF v3 file byte by byte and records offsets
    (marks[name] = file offset) so tests can cut or patch exact fields."""

    def __init__(self):
        self.kvs = []      # (key, vtype, payload bytes)
        self.tensors = []  # (name, dims, type, data bytes)
        self.marks = {}

    def kv_str(self, key, val):
        self.kvs.append((key, V_STR, _gstr(val)))

    def kv_u32(self, key, val):
        self.kvs.append((key, V_U32, struct.pack("<I", val)))

    def kv_f32(self, key, val):
        self.kvs.append((key, V_F32, struct.pack("<f", val)))

    def kv_str_arr(self, key, vals):
        payload = struct.pack("<IQ", V_STR, len(vals)) + b"".join(_gstr(v) for v in vals)
        self.kvs.append((key, V_ARR, payload))

    def kv_i32_arr(self, key, vals):
        payload = struct.pack("<IQ", 5, len(vals)) + struct.pack(f"<{len(vals)}i", *vals)
        self.kvs.append((key, V_ARR, payload))

    def tensor(self, name, dims, ttype, data):
        self.tensors.append((name, list(dims), ttype, data))

    def build(self, version=3, n_kv=None, offsets=None):
        """Bytes of the file. n_kv / offsets override the true values."""
        b = bytearray(GGUF_MAGIC)
        b += struct.pack("<I", version)
        self.marks["n_tensors"] = len(b)
        b += struct.pack("<Q", len(self.tensors))
        self.marks["n_kv"] = len(b)
        b += struct.pack("<Q", len(self.kvs) if n_kv is None else n_kv)
        for key, vt, payload in self.kvs:
            self.marks["kv:" + key] = len(b)
            b += _gstr(key) + struct.pack("<I", vt)
            self.marks["kv_value:" + key] = len(b)
            b += payload
        offs = self._offsets()
        for i, (name, dims, tt, _) in enumerate(self.tensors):
            self.marks["ti:" + name] = len(b)
            b += _gstr(name) + struct.pack("<I", len(dims))
            self.marks["ti_dims:" + name] = len(b)
            b += struct.pack(f"<{len(dims)}Q", *dims)
            self.marks["ti_type:" + name] = len(b)
            off = offsets[i] if offsets and i in offsets else offs[i]
            b += struct.pack("<IQ", tt, off)
        b += b"\0" * (-len(b) % ALIGN)
        self.marks["data"] = len(b)
        for (name, _, _, data), off in zip(self.tensors, offs):
            b += b"\0" * (self.marks["data"] + off - len(b))
            self.marks["td:" + name] = len(b)
            b += data
        return bytes(b)

    def _offsets(self):
        offs, pos = [], 0
        for _, _, _, data in self.tensors:
            offs.append(pos)
            pos += len(data)
            pos += -pos % ALIGN
        return offs


def _gstr(s):
    raw = s.encode("utf-8") if isinstance(s, str) else s
    return struct.pack("<Q", len(raw)) + raw


def _tiny_llama(arch="llama", wtype=0, e=32):
    """A structurally complete 1-layer llama in RawGGUF form: F32 weights,
    except attn_q in type wtype (raw bytes from _raw_weight)."""
    ff, nv = 64, 260
    g = np.random.default_rng(7)
    r = RawGGUF()
    r.kv_str("general.architecture", arch)
    for k, v in [("block_count", 1), ("context_length", 128), ("embedding_length", e),
                 ("feed_forward_length", ff), ("attention.head_count", 4),
                 ("attention.head_count_kv", 2)]:
        r.kv_u32(f"{arch}.{k}", v)
    r.kv_f32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)
    r.kv_str("tokenizer.ggml.model", "gpt2")
    b2u = byte_to_unicode()
    toks = ["<|endoftext|>"] + [b2u[i] for i in range(256)] + ["<|im_start|>", "<|im_end|>", "Ġt"]
    r.kv_str_arr("tokenizer.ggml.tokens", toks)
    r.kv_i32_arr("tokenizer.ggml.token_type", [3] + [1] * 256 + [3, 3, 1])
    r.kv_str_arr("tokenizer.ggml.merges", ["Ġ t"])

    def f32(*shape):
        return g.standard_normal(shape).astype(np.float32).tobytes()

    r.tensor("token_embd.weight", [e, nv], 0, f32(nv, e))
    r.tensor("blk.0.attn_norm.weight", [e], 0, f32(e))
    for n, rows in [("attn_q", e), ("attn_k", e // 2), ("attn_v", e // 2), ("attn_output", e)]:
        r.tensor(f"blk.0.{n}.weight", [e, rows], wtype if n == "attn_q" else 0,
                 _raw_weight(wtype if n == "attn_q" else 0, rows, e, g))
    r.tensor("blk.0.ffn_norm.weight", [e], 0, f32(e))
    r.tensor("blk.0.ffn_gate.weight", [e, ff], 0, f32(ff, e))
    r.tensor("blk.0.ffn_up.weight", [e, ff], 0, f32(ff, e))
    r.tensor("blk.0.ffn_down.weight", [ff, e], 0, f32(e, ff))
    r.tensor("output_norm.weight", [e], 0, f32(e))
    return r


def _raw_weight(wtype, rows, cols, g):
    if wtype == 0:
        return g.standard_normal((rows, cols)).astype(np.float32).tobytes()
    if wtype == 16:  # IQ2_XXS: 256 elements in 66 bytes; contents irrelevant
        assert cols % 256 == 0
        return g.integers(0, 256, rows * cols // 256 * 66, dtype=np.uint8).tobytes()
    if wtype == 39:  # MXFP4: 32 elements in 17 bytes (E8M0 byte, 16 nibble bytes)
        blk = g.integers(0, 256, (rows * -(-cols // 32), 17), dtype=np.uint8)
        blk[:, 0] = g.integers(118, 127, blk.shape[0])  # scales 2^-10 .. 2^-2
        return blk.tobytes()
    raise ValueError(wtype)


def _bad_files():
    """(filename, bytes, code, fields) for every bad-input case. fields:
    alternatives separated by '|'; the error message must contain one."""
    base = _tiny_llama()
    good = base.build()
    m = base.marks
    out = [("ok-tiny-llama.gguf", good, "OK", "-")]

    def cut(name, at, code, fields):
        out.append((name, good[:at], code, fields))

    cut("empty.gguf", 0, "EFORMAT", "magic|truncated|empty|header")
    cut("trunc-magic.gguf", 2, "EFORMAT", "magic|truncated|header")
    cut("trunc-header.gguf", m["n_tensors"] + 3, "EFORMAT", "n_tensors|header|truncated")
    cut("trunc-kv-key.gguf", m["kv:llama.block_count"] + 10, "EFORMAT", "key|kv|truncated")
    cut("trunc-kv-value.gguf", m["kv_value:llama.context_length"] + 2, "EFORMAT",
        "llama.context_length")
    cut("trunc-kv-array.gguf", m["kv_value:tokenizer.ggml.tokens"] + 700, "EFORMAT",
        "tokenizer.ggml.tokens")
    cut("trunc-tensor-info.gguf", m["ti_dims:blk.0.attn_k.weight"] + 4, "EFORMAT",
        "blk.0.attn_k.weight")
    cut("trunc-data.gguf", m["td:blk.0.ffn_up.weight"] + 100, "EFORMAT", "blk.0.ffn_up.weight")
    cut("trunc-data-last.gguf", len(good) - 1, "EFORMAT", "output_norm.weight")

    out.append(("garbage.gguf", np.random.default_rng(99).integers(0, 256, 4096, dtype=np.uint8)
                .tobytes(), "EFORMAT", "magic"))
    out.append(("wrong-magic.gguf", b"GGML" + good[4:], "EFORMAT", "magic"))
    out.append(("version1.gguf", _patch(good, 4, "<I", 1), "EUNSUPPORTED|EFORMAT", "version"))
    out.append(("version4.gguf", _patch(good, 4, "<I", 4), "EUNSUPPORTED|EFORMAT", "version"))
    out.append(("huge-n-kv.gguf", _patch(good, m["n_kv"], "<Q", 1 << 60), "EFORMAT", "n_kv"))
    out.append(("huge-n-tensors.gguf", _patch(good, m["n_tensors"], "<Q", 1 << 60), "EFORMAT",
                "n_tensors"))
    out.append(("huge-key-len.gguf", _patch(good, m["kv:llama.block_count"], "<Q", 1 << 62),
                "EFORMAT", "key|string|length"))
    out.append(("huge-str-len.gguf", _patch(good, m["kv_value:general.architecture"], "<Q",
                                            1 << 62), "EFORMAT", "general.architecture"))
    out.append(("huge-arr-len.gguf", _patch(good, m["kv_value:tokenizer.ggml.merges"] + 4, "<Q",
                                            1 << 61), "EFORMAT", "tokenizer.ggml.merges"))
    out.append(("bad-value-type.gguf", _patch(good, m["kv_value:llama.block_count"] - 4, "<I", 77),
                "EFORMAT", "llama.block_count"))
    out += _bad_tensor_files(base, m, good)
    return out


def _bad_tensor_files(base, m, good):
    out = []
    t = "blk.0.attn_v.weight"
    out.append(("unknown-type.gguf", _patch(good, m["ti_type:" + t], "<I", 99),
                "EFORMAT|EUNSUPPORTED", t))
    out.append(("huge-dims.gguf", _patch(good, m["ti_dims:" + t], "<Q", 1 << 40),
                "EFORMAT", t))
    out.append(("bad-n-dims.gguf", _patch(good, m["ti_dims:" + t] - 4, "<I", 9),
                "EFORMAT", t))
    # Offset so far out that offset + size runs past the end of the file.
    idx = [x[0] for x in base.tensors].index(t)
    past = base.build(offsets={idx: 1 << 30})
    out.append(("offset-past-end.gguf", past, "EFORMAT", t))
    misaligned = base.build(offsets={idx: base._offsets()[idx] + 4})
    out.append(("misaligned-offset.gguf", misaligned, "EFORMAT", t))
    # Valid files the model layer must refuse.
    out.append(("unknown-arch.gguf", _tiny_llama(arch="gpt-nonexistent").build(),
                "EUNSUPPORTED", "gpt-nonexistent"))
    iq = _tiny_llama_iq2()
    out.append(("unsupported-type-iq2_xxs.gguf", iq, "EUNSUPPORTED", "blk.0.attn_q.weight|IQ2_XXS"))
    # MXFP4 attn_q: loads at a row length of whole blocks; 48 is not one.
    out.append(("ok-mxfp4-attn_q.gguf", _tiny_llama(wtype=39).build(), "OK", "-"))
    out.append(("mxfp4-bad-row-length.gguf", _tiny_llama(wtype=39, e=48).build(), "EFORMAT",
                "blk.0.attn_q.weight"))
    missing = _drop_tensor(base, "blk.0.ffn_up.weight")
    out.append(("missing-tensor.gguf", missing, "EFORMAT|EINVAL", "blk.0.ffn_up.weight"))
    return out


def _tiny_llama_iq2():
    """IQ2_XXS (type 16, 256 elements in 66 bytes) needs rows of 256, so
    this one is 256 wide; attn_q holds random IQ2_XXS bytes."""
    return _tiny_llama(wtype=16, e=256).build()


def _drop_tensor(base, name):
    r = RawGGUF()
    r.kvs = list(base.kvs)
    r.tensors = [t for t in base.tensors if t[0] != name]
    return r.build()


def _patch(buf, off, fmt, val):
    b = bytearray(buf)
    struct.pack_into(fmt, b, off, val)
    return bytes(b)


def _bad_qwen35(d):
    """The tiny qwen35 with one tensor missing, one mis-shaped, one key
    missing: each error must name it. Returns the manifest lines."""
    base = next(m for m in MODELS if m["arch"] == "qwen35")
    cases = [("qwen35-missing-ssm_a.gguf", dict(drop_tensor="blk.0.ssm_a"), "EFORMAT", "blk.0.ssm_a"),
             ("qwen35-short-conv1d.gguf", dict(short_tensor="blk.2.ssm_conv1d.weight"), "EFORMAT",
              "blk.2.ssm_conv1d.weight"),
             ("qwen35-short-attn_q.gguf", dict(short_tensor="blk.1.attn_q.weight"), "EFORMAT",
              "blk.1.attn_q.weight"),
             ("qwen35-no-state-size.gguf", dict(drop_key="ssm.state_size"), "EFORMAT",
              "qwen35.ssm.state_size")]
    lines = []
    for name, change, code, field in cases:
        write_model(os.path.join(d, name), {**base, **change}, seed=5)
        lines.append(f"{name} {code} {field}")
    # Not bad: the fixture plus an MTP block (block_count 5,
    # nextn_predict_layers 1), the draft block of model/mtp.h; same seed,
    # so its trunk is qwen35-f32's exactly (tests/test_forward.c).
    mtp = {**base, "mtp": True}
    write_model(os.path.join(d, "qwen35-f32-mtp.gguf"), mtp, seed=1000 + MODELS.index(base))
    lines.append("qwen35-f32-mtp.gguf OK -")
    write_model(os.path.join(d, "qwen35-f32-mtp-echo.gguf"), {**mtp, "mtp": "echo"}, seed=1000 + MODELS.index(base))
    lines.append("qwen35-f32-mtp-echo.gguf OK -")
    # ... and its MTP block broken: the load fails naming the tensor
    for name, change, field in [
            ("qwen35-mtp-missing-eh_proj.gguf", dict(drop_tensor="blk.4.nextn.eh_proj.weight"), "blk.4.nextn.eh_proj.weight"),
            ("qwen35-mtp-short-hnorm.gguf", dict(short_tensor="blk.4.nextn.hnorm.weight"), "blk.4.nextn.hnorm.weight"),
            ("qwen35-mtp-short-attn_q.gguf", dict(short_tensor="blk.4.attn_q.weight"), "blk.4.attn_q.weight")]:
        write_model(os.path.join(d, name), {**mtp, **change}, seed=5)
        lines.append(f"{name} EFORMAT {field}")
    return lines


def _bad_moe(d):
    """The tiny mixture-of-experts models with a bad expert key or tensor:
    each error must name the key or tensor. Returns the manifest lines."""
    q3 = next(m for m in MODELS if m["name"] == "qwen3moe-f32")
    q35 = next(m for m in MODELS if m["name"] == "qwen35moe-f32")
    n, f, e = q3["moe"]["n_expert"], q3["moe"]["n_ff_exp"], HPARAMS["n_embd"]
    cases = [(q3, "qwen3moe-expert-count-0.gguf", dict(set_key={"expert_count": 0}), "qwen3moe.expert_count"),
             (q3, "qwen3moe-topk-above-count.gguf", dict(set_key={"expert_used_count": n + 1}),
              "qwen3moe.expert_used_count"),
             (q3, "qwen3moe-no-expert-count.gguf", dict(drop_key="expert_count"), "qwen3moe.expert_count"),
             (q3, "qwen3moe-missing-down-exps.gguf", dict(drop_tensor="blk.1.ffn_down_exps.weight"),
              "blk.1.ffn_down_exps.weight"),
             (q3, "qwen3moe-short-gate-exps.gguf", dict(short_tensor="blk.0.ffn_gate_exps.weight"),
              "blk.0.ffn_gate_exps.weight"),
             (q3, "qwen3moe-misshaped-up-exps.gguf", dict(reshape={"blk.1.ffn_up_exps.weight": (n, f // 2, e)}),
              "blk.1.ffn_up_exps.weight"),
             (q3, "qwen3moe-missing-router.gguf", dict(drop_tensor="blk.0.ffn_gate_inp.weight"),
              "blk.0.ffn_gate_inp.weight"),
             (q35, "qwen35moe-missing-shexp-gate.gguf", dict(drop_tensor="blk.2.ffn_gate_inp_shexp.weight"),
              "blk.2.ffn_gate_inp_shexp.weight"),
             (q35, "qwen35moe-short-down-shexp.gguf", dict(short_tensor="blk.1.ffn_down_shexp.weight"),
              "blk.1.ffn_down_shexp.weight")]
    lines = []
    for base, name, change, field in cases:
        write_model(os.path.join(d, name), {**base, **change}, seed=6)
        lines.append(f"{name} EFORMAT {field}")
    return lines


def _write_bad(outdir):
    d = os.path.join(outdir, "bad")
    os.makedirs(d, exist_ok=True)
    lines = [
        "# Bad GGUF files for the loader tests (tools/testdata_models.py).",
        "# file  expected-code(s)  field(s)",
        "# Open with gguf_open, then load the model if that succeeds; the first",
        "# error must have one of the codes (STRATA_E*, '|' = any of) and its",
        "# message must contain one of the fields ('|' = any of). OK = loads.",
    ]
    for name, data, code, fields in _bad_files():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
        lines.append(f"{name} {code} {fields}")
    lines += _bad_qwen35(d)
    lines += _bad_moe(d)
    with open(os.path.join(d, "MANIFEST.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def generate(outdir):
    _write_models(outdir)
    _write_bad(outdir)


if __name__ == "__main__":
    import sys
    generate(sys.argv[1] if len(sys.argv) > 1 else "tests/data/gen")
