"""Reference logits for the synthetic models (tools/testdata_models.py).

For each outdir/models/NAME.gguf writes NAME.ref: a float64 numpy forward
pass (tools/ref_forward.py) over a fixed token sequence. Layout, little-
endian: u32 n_tokens, u32 n_vocab, i32 tokens[n_tokens],
f32 logits[n_tokens][n_vocab] (every position); and the same for the
MTP block of bad/qwen35-f32-mtp.gguf (qwen35-f32-mtp.mtp.ref). Runs after
testdata_models (modules run in name order).
"""
import glob
import os
import struct

import numpy as np

from ref_forward import RefModel

N_TOKENS = 24
# Mixture-of-experts models: every routing decision on the reference
# tokens must have at least this logit gap between the last chosen expert
# and the next. The reference rounds activations and K/V as the engine does
# (ref_forward.py, act_round), so the two differ by float32 vs float64
# sums only, far below this; a near-tie could still go either way and move
# the logits far from the reference: a fixture problem, not an engine bug,
# fixed by the model's router_seed (testdata_models.py).
MIN_ROUTER_GAP = 0.01


def reference_tokens(n_vocab, n=N_TOKENS, seed=7):
    rng = np.random.default_rng(seed)
    return [int(t) for t in rng.integers(0, n_vocab, size=n)]


# No reference for the gpt-oss parrot (zero weights, for the server tests).
NO_REFERENCE = ("gpt-oss-parrot",)
# gpt-oss fixtures: the reference runs the harmony prompt of the committed
# llama.cpp refs (its 450 tokens pass the sliding window of 128), so
# tests/test_oracle.c bounds both engines against it position by position.
HERE = os.path.dirname(os.path.abspath(__file__))
GPTOSS_PROMPT = os.path.join(HERE, "..", "tests", "data", "oracle", "tiny", "gpt-oss-f32.txt")
# gpt-oss routes on raw router logits with no rounding between them and the
# (F32) router: float32 against float64 sums move a logit by ~1e-6, far
# below this; the fixtures have gaps of 1e-4 and up.
MIN_ROUTER_GAP_GPTOSS = 2e-5


def oracle_tokens(path):
    with open(path) as f:
        for line in f:
            if line.startswith("tokens "):
                return [int(t) for t in line.split()[1:]]
    raise SystemExit(f"{path}: no tokens line")


def generate(outdir):
    for path in sorted(glob.glob(os.path.join(outdir, "models", "*.gguf"))):
        if not os.path.basename(path).startswith(NO_REFERENCE):
            write_ref(path)
    mtp_reference(outdir)


def write_ref(path):
    """NAME.ref beside the model at path (the layout above)."""
    m = RefModel(path)
    n_vocab = m.t["token_embd.weight"].shape[0]
    toks = oracle_tokens(GPTOSS_PROMPT) if m.gptoss else reference_tokens(n_vocab)
    logits = m.forward(toks).astype(np.float32)
    min_gap = MIN_ROUTER_GAP_GPTOSS if m.gptoss else MIN_ROUTER_GAP
    if m.router_gap < min_gap:
        raise SystemExit(f"{path}: a routing decision has a logit gap of {m.router_gap:.6f} "
                         f"(< {min_gap}): pick another router_seed in testdata_models.py")
    write_logits(path[:-5] + ".ref", toks, n_vocab, logits)


def write_logits(path, toks, n_vocab, logits):
    with open(path, "wb") as f:
        f.write(struct.pack("<II", len(toks), n_vocab))
        f.write(np.asarray(toks, dtype="<i4").tobytes())
        f.write(logits.astype("<f4").tobytes())


def mtp_reference(outdir):
    """bad/qwen35-f32-mtp.mtp.ref: the MTP block's logits (ref_forward.py,
    mtp_forward) at every position of the reference tokens, position q from
    token q and the trunk's hidden state at q - 1; the .ref layout."""
    path = os.path.join(outdir, "bad", "qwen35-f32-mtp.gguf")
    if not os.path.exists(path):
        return
    m = RefModel(path)
    n_vocab = m.t["token_embd.weight"].shape[0]
    toks = reference_tokens(n_vocab)
    write_logits(path[:-5] + ".mtp.ref", toks, n_vocab, m.mtp_forward(toks)[0].astype(np.float32))
