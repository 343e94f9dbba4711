#!/usr/bin/env python3
"""A tiny random-weight gpt-oss GGUF (llama.cpp's "gpt-oss" architecture).

generate(outdir) writes outdir/models/gpt-oss-mxfp4.gguf, the shapes of
gpt-oss-20b scaled down, with every feature the real file has, and
gpt-oss-f32.gguf, the same weights with F32 experts (the sharp oracle
check: no activation quantization in either engine):
  - attention with Q/K/V/O biases and a learned sink logit per head,
    sliding window 128 on even layers, full attention on odd ones, NeoX
    RoPE with YaRN scaling (factor 32 over 4096, base 150000);
  - a post-attention RMS norm before the mixture of experts: a router
    with a bias, softmax over the top-k logits, experts with biases on
    gate, up and down, in MXFP4 (the gguf package's quantizer);
  - gpt-oss-clamp-f32: gpt-oss-f32 with the experts' gate and up weights
    6x larger, so the clamped SwiGLU's limits are reached (the other two
    never reach them on the reference prompt);
  - the harmony vocabulary's special tokens (<|start|>, <|channel|>,
    <|message|>, <|end|>, <|call|>, <|return|>, <|constrain|>) over the
    tiny byte-level BPE of testdata_models.py, the gpt-4o pre-tokenizer,
    and the real gpt-oss chat template (tests/data/tmpl/gpt-oss.jinja).
Attention, router and embeddings are F32 (sharp oracle comparisons); the
experts carry MXFP4, the format gpt-oss ships them in.

It is not in models/MANIFEST.txt: the tests that load every listed model
would need the gpt-oss forward pass. Deterministic (fixed seed).
"""
import os

import numpy as np

import gguf
from gguf import GGMLQuantizationType as QT

from testdata_models import build_vocab

HERE = os.path.dirname(os.path.abspath(__file__))
ARCH = "gpt-oss"
HARMONY = ["<|startoftext|>", "<|endoftext|>", "<|start|>", "<|channel|>", "<|message|>", "<|end|>",
           "<|call|>", "<|return|>", "<|constrain|>"]
SHAPE = dict(n_layer=4, n_embd=256, n_head=8, n_head_kv=2, head_dim=64, n_expert=8, n_expert_used=2,
             n_ff_exp=256, n_swa=128, n_ctx=8192, rope_base=150000.0, yarn_factor=32.0, yarn_orig=4096,
             rms_eps=1e-5, n_merges=250)


def _vocab(n_vocab=0):
    """The tiny BPE's tokens, padded with unused ones to n_vocab if larger
    (tools/synth_gptoss.py), then the harmony special tokens."""
    tokens, types, merges = build_vocab(SHAPE["n_merges"], specials_first=False)
    body = [t for t, ty in zip(tokens, types) if ty == 1]
    body += [f"<|synth_{i}|>" for i in range(n_vocab - len(body) - len(HARMONY))]
    return body + HARMONY, [1] * len(body) + [3] * len(HARMONY), merges


def _tensors(g, n_vocab, expert_type=QT.MXFP4):
    """(name, float32 array in numpy order, ggml type) of the whole model."""
    s = SHAPE
    e, hd, ff, ne = s["n_embd"], s["head_dim"], s["n_ff_exp"], s["n_expert"]
    q_out, kv_out = s["n_head"] * hd, s["n_head_kv"] * hd

    def mat(*shape, std):
        return (g.standard_normal(shape) * std).astype(np.float32)

    def norm(n):
        return (1.0 + 0.1 * g.standard_normal(n)).astype(np.float32)

    def bias(*shape):
        return (0.1 * g.standard_normal(shape)).astype(np.float32)

    out = [("token_embd.weight", mat(n_vocab, e, std=0.1), QT.F32)]
    for il in range(s["n_layer"]):
        p = f"blk.{il}."
        out += [(p + "attn_norm.weight", norm(e), QT.F32),
                (p + "attn_q.weight", mat(q_out, e, std=e ** -0.5), QT.F32),
                (p + "attn_q.bias", bias(q_out), QT.F32),
                (p + "attn_k.weight", mat(kv_out, e, std=e ** -0.5), QT.F32),
                (p + "attn_k.bias", bias(kv_out), QT.F32),
                (p + "attn_v.weight", mat(kv_out, e, std=e ** -0.5), QT.F32),
                (p + "attn_v.bias", bias(kv_out), QT.F32),
                (p + "attn_output.weight", mat(e, q_out, std=q_out ** -0.5), QT.F32),
                (p + "attn_output.bias", bias(e), QT.F32),
                (p + "attn_sinks.weight", (g.standard_normal(s["n_head"])).astype(np.float32), QT.F32),
                (p + "post_attention_norm.weight", norm(e), QT.F32),
                (p + "ffn_gate_inp.weight", mat(ne, e, std=e ** -0.5), QT.F32),
                (p + "ffn_gate_inp.bias", bias(ne), QT.F32),
                (p + "ffn_gate_exps.weight", mat(ne, ff, e, std=e ** -0.5), expert_type),
                (p + "ffn_gate_exps.bias", bias(ne, ff), QT.F32),
                (p + "ffn_up_exps.weight", mat(ne, ff, e, std=e ** -0.5), expert_type),
                (p + "ffn_up_exps.bias", bias(ne, ff), QT.F32),
                (p + "ffn_down_exps.weight", mat(ne, e, ff, std=ff ** -0.5), expert_type),
                (p + "ffn_down_exps.bias", bias(ne, e), QT.F32)]
    out += [("output_norm.weight", norm(e), QT.F32), ("output.weight", mat(n_vocab, e, std=0.1), QT.F32)]
    return out


def write_metadata(w, vocab, drop_key=None, s=SHAPE, name="gpt-oss-tiny"):
    """Every key of a gpt-oss file of shape s (SHAPE's keys), tokenizer and
    chat template included (tools/synth_gptoss.py writes its own shape)."""
    tokens, types, merges = vocab
    w.add_name(name)
    w.add_block_count(s["n_layer"])
    w.add_context_length(s["n_ctx"])
    w.add_embedding_length(s["n_embd"])
    w.add_feed_forward_length(s["n_ff_exp"])
    w.add_head_count(s["n_head"])
    w.add_head_count_kv(s["n_head_kv"])
    w.add_key_length(s["head_dim"])
    w.add_value_length(s["head_dim"])
    w.add_rope_freq_base(s["rope_base"])
    w.add_layer_norm_rms_eps(s["rms_eps"])
    w.add_uint32(f"{ARCH}.expert_count", s["n_expert"])
    w.add_uint32(f"{ARCH}.expert_used_count", s["n_expert_used"])
    w.add_uint32(f"{ARCH}.expert_feed_forward_length", s["n_ff_exp"])
    if drop_key != "attention.sliding_window":
        w.add_uint32(f"{ARCH}.attention.sliding_window", s["n_swa"])
    w.add_string(f"{ARCH}.rope.scaling.type", "yarn")
    w.add_float32(f"{ARCH}.rope.scaling.factor", s["yarn_factor"])
    w.add_uint32(f"{ARCH}.rope.scaling.original_context_length", s["yarn_orig"])
    w.add_uint32("general.quantization_version", 2)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-4o")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(tokens.index("<|startoftext|>"))
    w.add_eos_token_id(tokens.index("<|return|>"))
    w.add_uint32("tokenizer.ggml.padding_token_id", tokens.index("<|endoftext|>"))
    w.add_add_bos_token(False)
    with open(os.path.join(HERE, "..", "tests", "data", "tmpl", "gpt-oss.jinja"), encoding="utf-8") as f:
        w.add_chat_template(f.read())


def write_gptoss(path, seed=2600, expert_type=QT.MXFP4, drop_tensor=None, short_tensor=None, drop_key=None,
                 gate_up_gain=1.0):
    """gate_up_gain scales the experts' gate and up stacks: at 1 no gate or
    up value of the reference prompt reaches the SwiGLU's clamp (7), at 6
    a third of them do (gpt-oss-clamp-f32)."""
    vocab = _vocab()
    g = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, ARCH)
    write_metadata(w, vocab, drop_key)
    for name, arr, qt in _tensors(g, len(vocab[0]), expert_type):
        if name == drop_tensor:
            continue
        if name.endswith(("ffn_gate_exps.weight", "ffn_up_exps.weight")):
            arr = arr * np.float32(gate_up_gain)
        if name == short_tensor:  # one element (or row) fewer: mis-shaped
            arr = arr[:-1]
        if qt == QT.F32:
            w.add_tensor(name, arr)
        else:
            data = gguf.quants.quantize(arr, qt)
            w.add_tensor(name, data, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# The parrot: every weight zero but the embeddings, norms and output, so a
# token's logits depend on the token alone and greedy decoding follows a
# fixed chain: after any prompt it writes PARROT_TEXT, token by token, then
# <|return|> (an end of generation). A harmony reply with reasoning and no
# content, for the servers' reasoning output (tests/e2e/test_gptoss.py);
# llama.cpp plays no part.
PARROT_TEXT = "<|channel|>analysis<|message|>Thinking<|end|>"


def _segment(word, idx, used):
    """word as vocabulary tokens none of which is in used (longest first)."""
    if not word:
        return []
    for n in range(len(word), 0, -1):
        i = idx.get(word[:n])
        if i is not None and i not in used:
            rest = _segment(word[n:], idx, used | {i})
            if rest is not None:
                return [i] + rest
    return None


def _parrot_chain(tokens):
    idx = {t: i for i, t in enumerate(tokens)}
    chain = []
    for part in PARROT_TEXT.replace("<|", "\0<|").replace("|>", "|>\0").split("\0"):
        if part:
            chain += [idx[part]] if part in idx else _segment(part, idx, set(chain))
    assert len(set(chain)) == len(chain), "the parrot's tokens must all differ"
    return chain + [idx["<|return|>"]]


def write_parrot(path):
    vocab = _vocab()
    tokens = vocab[0]
    chain = _parrot_chain(tokens)
    n_vocab, e = len(tokens), SHAPE["n_embd"]
    assert len(chain) < e
    emb = np.zeros((n_vocab, e), np.float32)
    out = np.zeros((n_vocab, e), np.float32)
    emb[:, 0] = 1.0  # any other token: direction 0, followed by the chain's start
    out[chain[0], 0] = 1.0
    for k, (a, b) in enumerate(zip(chain, chain[1:])):
        emb[a] = 0.0
        emb[a, k + 1] = 1.0
        out[b, k + 1] = 1.0
    w = gguf.GGUFWriter(path, ARCH)
    write_metadata(w, vocab)
    for name, arr, _ in _tensors(np.random.default_rng(1), n_vocab, QT.F32):
        if name == "token_embd.weight":
            arr = emb
        elif name == "output.weight":
            arr = out
        elif name.endswith("norm.weight"):
            arr = np.ones_like(arr)
        else:
            arr = np.zeros_like(arr)
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def generate(outdir):
    d = os.path.join(outdir, "models")
    os.makedirs(d, exist_ok=True)
    write_gptoss(os.path.join(d, "gpt-oss-mxfp4.gguf"))
    write_gptoss(os.path.join(d, "gpt-oss-f32.gguf"), expert_type=QT.F32)
    write_gptoss(os.path.join(d, "gpt-oss-clamp-f32.gguf"), expert_type=QT.F32, gate_up_gain=6.0)
    write_parrot(os.path.join(d, "gpt-oss-parrot.gguf"))
    _write_bad(os.path.join(outdir, "bad"))


# Bad gpt-oss files: each load error must name what is wrong (the format
# of bad/MANIFEST.txt, in a manifest of their own: testdata_models.py
# writes that one).
BAD = [("gpt-oss-no-sinks.gguf", dict(drop_tensor="blk.1.attn_sinks.weight"), "EFORMAT", "blk.1.attn_sinks.weight"),
       ("gpt-oss-short-sinks.gguf", dict(short_tensor="blk.2.attn_sinks.weight"), "EFORMAT",
        "blk.2.attn_sinks.weight"),
       ("gpt-oss-no-out-bias.gguf", dict(drop_tensor="blk.0.attn_output.bias"), "EFORMAT", "blk.0.attn_output.bias"),
       ("gpt-oss-no-window.gguf", dict(drop_key="attention.sliding_window"), "EFORMAT",
        "gpt-oss.attention.sliding_window"),
       ("gpt-oss-short-expert-bias.gguf", dict(short_tensor="blk.3.ffn_down_exps.bias"), "EFORMAT",
        "blk.3.ffn_down_exps.bias")]


def _write_bad(d):
    os.makedirs(d, exist_ok=True)
    lines = ["# Bad gpt-oss files (tools/testdata_gptoss.py); format as bad/MANIFEST.txt"]
    for name, change, code, field in BAD:
        write_gptoss(os.path.join(d, name), expert_type=QT.F32, **change)
        lines.append(f"{name} {code} {field}")
    with open(os.path.join(d, "MANIFEST-gptoss.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    import sys
    generate(sys.argv[1] if len(sys.argv) > 1 else "tests/data/gen")
