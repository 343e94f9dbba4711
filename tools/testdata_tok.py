#!/usr/bin/env python3
"""Vocabulary-only GGUF fixtures for the tokenizer tests (tests/test_tokenizer.c).

generate(outdir) writes
  outdir/tok/spm.gguf            synthetic SentencePiece-style vocabulary
                                 ("llama" model): <unk> <s> </s>, 256 byte
                                 tokens, user-defined and control tokens,
                                 a few thousand scored pieces;
  outdir/tok/spm_noprefix.gguf   the same with add_space_prefix = false;
  outdir/tok/llama_bpe.gguf      the real SmolLM2 vocabulary relabelled with
  outdir/tok/qwen2.gguf          tokenizer.ggml.pre = "llama-bpe", "qwen2",
  outdir/tok/qwen35.gguf         "qwen35",
  outdir/tok/default.gguf        "default" and "gpt-2"
  outdir/tok/gpt2.gguf           (only when the real model exists at
                                 $STRATA_MODEL or models/; their tests are
                                 real_ tests);
  outdir/tok/bad_*.gguf          malformed vocabularies (listed in BAD.txt)
                                 that tok_load must reject with an error.

Everything is deterministic (fixed seed, fixed word lists). The reference
token ids for these files come from llama.cpp and are committed under
tests/data/tok/ by tools/tok_refs.py, which imports this module.

Does not: produce reference ids (tools/tok_refs.py) or test anything.
"""
import os
import random

import gguf

# Token types as GGUF stores them (llama.cpp's llama_token_type).
T_NORMAL, T_UNKNOWN, T_CONTROL, T_USER, T_UNUSED, T_BYTE = 1, 2, 3, 4, 5, 6

SPACE = "\u2581"  # SentencePiece's visible space

WORDS = """the of and to in is you that it he was for on are as with his they I at
be this have from or one had by word but not what all were we when your can said
there use an each which she do how their if will up other about out many then them
these so some her would make like him into time has look two more write go see
number no way could people my than first water been call who oil its now find long
down day did get come made may part hello world token cache prefix server model
function return const static struct include define while break continue switch
int char void float double unsigned sizeof typedef import def class self print
café naïve über niño façade résumé Ärger straße jalapeño coöperate
привет мир γειά κόσμε שלום مرحبا नमस्ते
你好 世界 日本語 こんにちは 東京 한국어 안녕하세요
""".split()

# Characters that get their own single-character piece.
EXTRA_CHARS = "éèêëàâäçñöüßøåÆœ€£¥©®°±×÷¿¡—–‘’“”…•→←αβγδλπΣΩжзийклмн你好世界日本語中文한국어こんにちは東京😀🚀🎉👍"

USER_DEFINED = ["<tool_call>", "</tool_call>", "[INST]", "[/INST]", "<think>", "</think>",
                "<|end|>", SPACE + "<sep>", "user:"]
CONTROL = ["<|im_start|>", "<|im_end|>", "<|eot_id|>", "<|unused_0|>"]


def _spm_pieces(rng):
    """Scored pieces: every printable ASCII char, EXTRA_CHARS, and every
    substring (length 2..8) of each word with and without the space mark.
    Scores are random (seeded) with many exact ties, so the tokenizer's
    tie-breaking is exercised too."""
    pieces = {}
    singles = [chr(c) for c in range(0x21, 0x7F)] + list(EXTRA_CHARS) + [SPACE]
    for ch in singles:
        pieces.setdefault(ch, -10.0 - rng.randint(0, 8) * 0.5)
    for w in WORDS + [w.capitalize() for w in WORDS[:60]]:
        for base in (SPACE + w, w):
            for i in range(len(base)):
                for j in range(i + 2, min(len(base), i + 8) + 1):
                    sub = base[i:j]
                    if sub not in pieces:
                        # longer pieces score higher on average; 30% on
                        # quarter steps, which gives many exact ties
                        x = rng.uniform(-9.0, -1.0) + 0.2 * len(sub)
                        pieces[sub] = round(x * 4) / 4 if rng.random() < 0.3 else round(x, 3)
    letters = "abcdefghijklmnopqrstuvwxyz"
    for a in letters:  # every letter pair, and every letter after a space
        pieces.setdefault(SPACE + a, -6.0 - rng.randint(0, 8) * 0.25)
        for b in letters:
            pieces.setdefault(a + b, round(rng.uniform(-11.0, -6.0), 2))
    for d in "0123456789":
        pieces.setdefault(SPACE + d, -7.0)
    for n in range(2, 9):
        pieces.setdefault(SPACE * n, -5.0 - n)
    return sorted(pieces.items(), key=lambda kv: (-kv[1], kv[0]))


def spm_vocab():
    """(tokens, scores, types) of the synthetic SPM vocabulary."""
    rng = random.Random(20240601)
    toks, scores, types = ["<unk>", "<s>", "</s>"], [0.0, 0.0, 0.0], [T_UNKNOWN, T_CONTROL, T_CONTROL]
    for b in range(256):
        toks.append("<0x%02X>" % b)
        scores.append(0.0)
        types.append(T_BYTE)
    for t in USER_DEFINED:
        toks.append(t)
        scores.append(0.0)
        types.append(T_USER)
    for t in CONTROL:
        toks.append(t)
        scores.append(0.0)
        types.append(T_CONTROL)
    seen = set(toks)
    for text, score in _spm_pieces(rng):
        if text in seen:
            continue
        seen.add(text)
        toks.append(text)
        scores.append(float(score))
        types.append(T_NORMAL)
    return toks, scores, types


def _llama_hparams(w, n_vocab):
    """Just enough llama hyper-parameters for llama.cpp to open the file
    with vocab_only (it reads the architecture's keys before the vocab)."""
    w.add_context_length(256)
    w.add_embedding_length(64)
    w.add_block_count(1)
    w.add_feed_forward_length(128)
    w.add_head_count(4)
    w.add_head_count_kv(4)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(16)
    w.add_vocab_size(n_vocab)


def _write(path, fill):
    w = gguf.GGUFWriter(path, "llama")
    fill(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_spm(path, add_space_prefix=None):
    toks, scores, types = spm_vocab()

    def fill(w):
        w.add_name("strata-test-spm")
        _llama_hparams(w, len(toks))
        w.add_tokenizer_model("llama")
        w.add_token_list(toks)
        w.add_token_scores(scores)
        w.add_token_types(types)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_unk_token_id(0)
        if add_space_prefix is not None:
            w.add_add_space_prefix(add_space_prefix)
    _write(path, fill)


def _field(reader, key):
    f = reader.fields.get(key)
    return None if f is None else f.contents()


def _bpe_vocab(w, name, pre, toks, types, merges):
    """A vocabulary-only BPE file's name, hyper-parameters and vocabulary."""
    w.add_name(name)
    _llama_hparams(w, len(toks))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(toks)
    w.add_token_types(types)
    w.add_token_merges(merges)


def write_relabelled(src, path, pre):
    """The real model's vocabulary (tokens, types, merges, special ids) in a
    vocabulary-only file whose pre-tokenizer name is `pre`."""
    r = gguf.GGUFReader(src)
    toks = _field(r, "tokenizer.ggml.tokens")

    def fill(w):
        _bpe_vocab(w, "strata-test-relabel-" + pre, pre, toks, _field(r, "tokenizer.ggml.token_type"),
                   _field(r, "tokenizer.ggml.merges"))
        for key, add in (("tokenizer.ggml.bos_token_id", w.add_bos_token_id),
                         ("tokenizer.ggml.eos_token_id", w.add_eos_token_id),
                         ("tokenizer.ggml.unknown_token_id", w.add_unk_token_id),
                         ("tokenizer.ggml.padding_token_id", w.add_pad_token_id),
                         ("tokenizer.ggml.add_bos_token", w.add_add_bos_token)):
            v = _field(r, key)
            if v is not None:
                add(v)
    _write(path, fill)


def write_pairs(path, pre, seed=4):
    """A byte-level BPE vocabulary in which every pair of bytes merges (the
    256 bytes, all 65,536 pairs, merges in a seeded random order) and
    nothing longer: inside a pre-token the bytes pair up, across a
    pre-token boundary never, so the ids show where the pre-tokenizer
    split. (On the real vocabulary gpt-4o's and qwen2's splits give the
    same ids in all but 4 of 2,752 cases: its merges rarely span the
    places where the two differ.)"""
    from testdata_models import byte_to_unicode
    b2u = byte_to_unicode()
    pairs = [(b2u[a], b2u[b]) for a in range(256) for b in range(256)]
    random.Random(seed).shuffle(pairs)
    toks = [b2u[b] for b in range(256)] + [a + b for a, b in pairs] + ["<|endoftext|>", "<|start|>", "<|end|>"]
    types = [1] * (len(toks) - 3) + [3] * 3

    def fill(w):
        _bpe_vocab(w, "strata-test-pairs-" + pre, pre, toks, types, [f"{a} {b}" for a, b in pairs])
        w.add_bos_token_id(len(toks) - 3)
        w.add_eos_token_id(len(toks) - 3)
        w.add_add_bos_token(False)
    _write(path, fill)


def write_bad(d):
    """Malformed vocabularies: each must give an error from tok_load."""
    toks, scores, types = spm_vocab()

    def base(w, model="llama", tokens=True):
        _llama_hparams(w, len(toks))
        w.add_tokenizer_model(model)
        if tokens:
            w.add_token_list(toks)

    cases = {
        "no_model": lambda w: (_llama_hparams(w, 3), w.add_token_list(["a", "b", "c"])),
        "no_tokens": lambda w: base(w, tokens=False),
        "unknown_model": lambda w: base(w, model="wordpiece-x"),
        "tokens_not_strings": lambda w: (base(w, tokens=False),
                                         w.add_array("tokenizer.ggml.tokens", [1, 2, 3])),
        "short_scores": lambda w: (base(w), w.add_token_scores(scores[:10])),
        "types_wrong_kind": lambda w: (base(w), w.add_array("tokenizer.ggml.token_type",
                                                            [float(x) for x in types])),
        "duplicate_token": lambda w: (base(w, tokens=False),
                                      w.add_token_list(["a", "b", "a"])),
        "bpe_no_merges": lambda w: (base(w, model="gpt2"), w.add_tokenizer_pre("smollm")),
        "bpe_unknown_pre": lambda w: (base(w, model="gpt2"), w.add_tokenizer_pre("no-such-pre"),
                                      w.add_token_merges(["a b"])),
        "empty_vocab": lambda w: (base(w, tokens=False), w.add_token_list([])),
        "bos_wrong_type": lambda w: (base(w), w.add_string("tokenizer.ggml.bos_token_id", "1")),
    }
    with open(os.path.join(d, "BAD.txt"), "w") as f:
        for name, fill in sorted(cases.items()):
            _write(os.path.join(d, "bad_%s.gguf" % name), fill)
            f.write("bad_%s.gguf\n" % name)


def default_model():
    """$STRATA_MODEL, else the Makefile's default download location."""
    model = os.environ.get("STRATA_MODEL", "")
    if not model:
        model = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models",
                             "SmolLM2-135M-Instruct.Q4_1.gguf")
    return model if os.path.exists(model) else None


# name -> (file, pre-tokenizer) of the fixtures derived from the real model
RELABELS = {"llama_bpe": ("llama_bpe.gguf", "llama-bpe"), "qwen2": ("qwen2.gguf", "qwen2"),
            "qwen35": ("qwen35.gguf", "qwen35"), "gpt4o": ("gpt4o.gguf", "gpt-4o"),
            "default": ("default.gguf", "default"), "gpt2": ("gpt2.gguf", "gpt-2")}


def generate(outdir):
    d = os.path.join(outdir, "tok")
    os.makedirs(d, exist_ok=True)
    write_spm(os.path.join(d, "spm.gguf"))
    write_spm(os.path.join(d, "spm_noprefix.gguf"), add_space_prefix=False)
    write_bad(d)
    write_pairs(os.path.join(d, "gpt4o_pairs.gguf"), "gpt-4o")
    model = default_model()
    if model:
        for fname, pre in RELABELS.values():
            write_relabelled(model, os.path.join(d, fname), pre)


if __name__ == "__main__":
    import sys
    generate(sys.argv[1] if len(sys.argv) > 1 else "tests/data/gen")
