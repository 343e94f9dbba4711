#!/usr/bin/env python3
"""Float64 reference forward pass for llama/qwen2/qwen3/gemma3/qwen35 GGUF models
and the mixture-of-experts qwen3moe/qwen35moe/gpt-oss.

Independent of Strata's C code and of llama.cpp: weights are dequantized
with the `gguf` package (MXFP4 by this file's own decoder, since the same
package wrote the fixtures' MXFP4 and a mistake shared by its quantizer and
dequantizer would cancel) and every step runs in numpy float64, so the only
differences to Strata are its activation quantization and F16 KV storage.
Used to check the engine on tiny synthetic models (no llama.cpp needed).

    ref_forward.py MODEL.gguf TOKEN [TOKEN ...]   -> prints last-row logits
    ref_forward.py --mtp MODEL.gguf TOKEN ...      -> the MTP block's last-row logits
"""
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


# ggml types whose dot kernels take Q8_K activations (blocks of 256), and
# those that take Q8_0/Q8_1 (blocks of 32, the same rounding); the float
# types take float activations (backend/quant.c).
_Q8K_TYPES = {10, 11, 12, 13, 14}
_Q8_TYPES = {2, 3, 6, 7, 8, 39}
GGML_MXFP4 = 39


def dequant_mxfp4(raw, n):
    """MXFP4 (OCP microscaling) from its bytes: 17-byte blocks of 32 values,
    one E8M0 exponent byte e and 16 bytes of E2M1 codes, value j of the
    block in the low nibble of byte j (j < 16) or the high nibble of byte
    j - 16. A code's bits are sign, 2 exponent bits, 1 mantissa bit:
    0, 0.5, 1, 1.5, 2, 3, 4, 6; the block's scale is 2^(e - 127), kept
    exact by doubling the E2M1 values and halving the scale, 2^(e - 128)."""
    b = np.frombuffer(bytes(raw), dtype=np.uint8).reshape(-1, 17)
    assert b.shape[0] * 32 == n, "MXFP4 size does not match the tensor's shape"
    scale = np.ldexp(1.0, b[:, 0].astype(np.int64) - 128)
    codes = np.concatenate([b[:, 1:] & 15, b[:, 1:] >> 4], axis=1)
    mag = np.array([0, 1, 2, 3, 4, 6, 8, 12], dtype=np.float64)[codes & 7]
    return (np.where(codes & 8, -mag, mag) * scale[:, None]).reshape(-1)


def act_q8(x, wtype):
    """x rounded as the engine rounds a matmul input for weight type wtype:
    per block, d = max|x| / 127 and q = round half away from zero (x / d)."""
    blk = 256 if wtype in _Q8K_TYPES else 32 if wtype in _Q8_TYPES else 0
    if not blk:
        return x
    shape = x.shape
    b = x.reshape(-1, blk).astype(np.float32).astype(np.float64)
    amax = np.abs(b).max(-1, keepdims=True)
    inv = np.where(amax > 0, 127.0 / np.where(amax > 0, amax, 1), 0)
    v = b * inv
    q = np.trunc(v + np.where(v >= 0, 0.5, -0.5))
    return (q * (amax / 127.0)).reshape(shape)


class RefModel:
    def __init__(self, path):
        r = GGUFReader(path)
        self.meta = {k: f.contents() for k, f in r.fields.items() if not k.startswith("tokenizer.ggml.")}
        self.arch = self.meta["general.architecture"]
        self.t, self.types = {}, {}
        for t in r.tensors:
            self.types[t.name] = int(t.tensor_type)
            if int(t.tensor_type) == GGML_MXFP4:
                w = dequant_mxfp4(t.data, int(t.n_elements))
            else:
                w = dequantize(t.data, t.tensor_type).astype(np.float64)
            shape = [int(x) for x in t.shape][::-1]
            self.t[t.name] = w.reshape(shape)
        a = self.arch
        g = lambda k, d=None: self.meta.get(f"{a}.{k}", d)
        # qwen35's MTP blocks (nextn_predict_layers) follow the trunk's in
        # block_count; forward() runs the trunk, mtp_forward() the first one.
        self.n_nextn = g("nextn_predict_layers", 0)
        self.n_layer = g("block_count") - self.n_nextn
        self.n_embd = g("embedding_length")
        self.n_head = g("attention.head_count")
        self.n_head_kv = g("attention.head_count_kv", self.n_head)
        self.head_dim = g("attention.key_length", self.n_embd // self.n_head)
        self.eps = g("attention.layer_norm_rms_epsilon", 1e-6)
        self.base = g("rope.freq_base", 10000.0)
        self.rope_dim = g("rope.dimension_count", self.head_dim)
        self.neox = a in ("qwen2", "qwen3", "gemma3", "qwen35", "qwen3moe", "qwen35moe", "gpt-oss")
        self.gemma3 = a == "gemma3"
        self.gptoss = a == "gpt-oss"
        # gemma3 (as llama.cpp reads it): every 6th layer global, the rest see
        # the last n_swa positions and rotate with base 10000. gpt-oss: the
        # even layers see the last n_swa (128) and rotate as the odd ones do.
        self.n_swa = g("attention.sliding_window", 0) if self.gemma3 or self.gptoss else 0
        period = g("attention.sliding_window_pattern", 2 if self.gptoss else 6)
        self.swa = [self.n_swa > 0 and i % period < period - 1 for i in range(self.n_layer)] + [False] * self.n_nextn
        self.swa_rope = self.gemma3  # sliding layers have a rope base of their own
        self.base_swa = g("rope.freq_base_swa", 10000.0)
        self.scaling = g("rope.scaling.type", "none")
        if self.scaling not in ("none", "linear", "yarn"):
            raise SystemExit(f"ref_forward: rope scaling {self.scaling} not implemented")
        self.rope_factor = g("rope.scaling.factor", 1.0)
        self.rope_orig_ctx = g("rope.scaling.original_context_length", g("context_length"))
        self.pos_scale = 1.0 / self.rope_factor if self.scaling == "linear" else 1.0
        self.qwen35 = a in ("qwen35", "qwen35moe")
        self.n_used = g("expert_used_count", 0)
        self.router_gap = np.inf  # smallest logit gap between the k-th and next expert seen
        # Mixture of experts: round every matmul input to 8 bits and K/V to
        # F16 as the engine does (backend/quant_act_impl.h, forward.c), so
        # that its routing decisions are the reference's (a float64 input
        # may pick another expert on a near-tie).
        self.act_round = self.n_used > 0
        self.rope_keep = np.ones(self.rope_dim // 2, dtype=bool)
        if self.qwen35:
            self._qwen35_init(g)

    def _qwen35_init(self, g):
        """Gated delta net + gated attention (see deltanet.c for the math).
        Interleaved M-RoPE for text: pair i rotates unless its sector
        (i % sum(sections)) is past 3 x its section (then position 0)."""
        interval = g("full_attention_interval", 4)
        self.recurrent = [(i + 1) % interval != 0 for i in range(self.n_layer)] + [False] * self.n_nextn
        sec = [int(x) for x in g("rope.dimension_sections")]
        for i in range(self.rope_dim // 2):
            k = i % sum(sec)
            self.rope_keep[i] = k < 3 * sec[k % 3]
        self.d_conv, self.d_state = g("ssm.conv_kernel"), g("ssm.state_size")
        self.n_k, self.n_v = g("ssm.group_count"), g("ssm.time_step_rank")

    def mm(self, x, name, e=None):
        """x @ W.T for weight `name` (expert e of a stack), x rounded first
        to the engine's activation format of W's type when act_round."""
        w = self.t[name] if e is None else self.t[name][e]
        if self.act_round:
            x = act_q8(x, self.types[name])
        return x @ w.T

    def norm(self, x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + self.eps) * w

    def yarn(self, ang):
        """YaRN (Peng et al. 2023) as published, with llama.cpp's defaults
        (beta_fast 32, beta_slow 1, attention factor 1): pair i turns by a
        mix of the interpolated angle (ang / factor) and the original one,
        ramping from all-original below dimension lo to all-interpolated
        above hi, where lo and hi are the dimensions that turn beta_fast and
        beta_slow times over the original context; cos and sin are scaled
        by 1 + 0.1 ln(factor). Returns (angles, magnitude)."""
        d, half = self.rope_dim, self.rope_dim // 2

        def corr_dim(n_rot):
            return d * np.log(self.rope_orig_ctx / (n_rot * 2 * np.pi)) / (2 * np.log(self.base))
        lo, hi = max(0.0, np.floor(corr_dim(32.0))), min(d - 1.0, np.ceil(corr_dim(1.0)))
        ramp = 1 - np.clip((np.arange(half) - lo) / max(0.001, hi - lo), 0, 1)
        ang = ang / self.rope_factor * (1 - ramp) + ang * ramp
        return ang, 1 + 0.1 * np.log(self.rope_factor)

    def rope(self, x, pos, swa=False):
        # x: [n_tok, n_heads, head_dim]; swa: rotate with the sliding base, unscaled
        half = self.rope_dim // 2
        inv = (self.base_swa if swa else self.base) ** (-2.0 * np.arange(half) / self.rope_dim)
        ang = (np.asarray(pos) * (1.0 if swa else self.pos_scale))[:, None] * inv[None, :]
        ang = ang * self.rope_keep[None, :]
        mag = 1.0
        if self.scaling == "yarn" and not swa:
            ang, mag = self.yarn(ang)
        c, s = mag * np.cos(ang)[:, None, :], mag * np.sin(ang)[:, None, :]
        x = x.copy()
        if self.neox:
            a, b = x[..., :half].copy(), x[..., half:2 * half].copy()
            x[..., :half], x[..., half:2 * half] = a * c - b * s, a * s + b * c
        else:
            a, b = x[..., 0:2 * half:2].copy(), x[..., 1:2 * half:2].copy()
            x[..., 0:2 * half:2], x[..., 1:2 * half:2] = a * c - b * s, a * s + b * c
        return x

    def ffn(self, h, p, sfx=""):
        T = self.t
        if p + "ffn_gate_inp.weight" in T and not sfx:
            return self.moe(h, p)
        g, u = self.mm(h, p + "ffn_gate" + sfx + ".weight"), self.mm(h, p + "ffn_up" + sfx + ".weight")
        return self.mm(g / (1 + np.exp(-g)) * u, p + "ffn_down" + sfx + ".weight")

    def expert_mm(self, x, p, n, e):
        """Expert e's matmul of stack ffn_<n>_exps, plus its bias if any."""
        y = self.mm(x, p + f"ffn_{n}_exps.weight", e)
        b = self.t.get(p + f"ffn_{n}_exps.bias")
        return y if b is None else y + b[e]

    @staticmethod
    def swiglu_oai(g, u, alpha=1.702, limit=7.0):
        """gpt-oss's clamped SwiGLU: min(g, 7) sigmoid(1.702 min(g, 7)) (clamp(u, -7, 7) + 1)."""
        g = np.minimum(g, limit)
        return g / (1 + np.exp(-alpha * g)) * (np.clip(u, -limit, limit) + 1)

    def moe(self, h, p):
        """Softmax router, top expert_used_count, weights renormalised to sum
        1 (qwen3moe, qwen35moe); plus the shared expert times
        sigmoid(ffn_gate_inp_shexp . h) when the layer has one. gpt-oss:
        router and experts with biases, the top expert_used_count raw
        logits then a softmax over those, the clamped SwiGLU."""
        T, k = self.t, self.n_used
        lg = self.mm(h, p + "ffn_gate_inp.weight")
        if p + "ffn_gate_inp.bias" in T:
            lg = lg + T[p + "ffn_gate_inp.bias"]
        if k < lg.shape[1]:
            srt = np.sort(lg, axis=-1)
            self.router_gap = min(self.router_gap, float((srt[:, -k] - srt[:, -k - 1]).min()))
        pr = np.exp(lg - lg.max(-1, keepdims=True))
        pr /= pr.sum(-1, keepdims=True)
        ids = np.argsort(-lg, axis=-1, kind="stable")[:, :k]
        w = np.take_along_axis(pr, ids, -1)
        w /= w.sum(-1, keepdims=True)  # the softmax over all renormalised = the softmax over the k
        out = np.zeros_like(h)
        for e in np.unique(ids):  # each expert over the tokens that chose it
            rows, slot = np.nonzero(ids == e)
            g, u = self.expert_mm(h[rows], p, "gate", e), self.expert_mm(h[rows], p, "up", e)
            act = self.swiglu_oai(g, u) if self.gptoss else g / (1 + np.exp(-g)) * u
            out[rows] += w[rows, slot][:, None] * self.expert_mm(act, p, "down", e)
        if p + "ffn_up_shexp.weight" in T:
            s = self.mm(h, p + "ffn_gate_inp_shexp.weight")
            out += self.ffn(h, p, "_shexp") / (1 + np.exp(-s))[:, None]
        return out

    @staticmethod
    def softmax_sink(att, sinks):
        """Softmax over the keys (att: [head][query][key]); with sinks, each
        head's learned logit is one more term of the sum with no value
        (gpt-oss), so a query may give its keys less than weight 1."""
        m = att.max(-1, keepdims=True)
        if sinks is not None:
            m = np.maximum(m, sinks[:, None, None])
        e = np.exp(att - m)
        den = e.sum(-1, keepdims=True)
        if sinks is not None:
            den = den + np.exp(sinks[:, None, None] - m)
        return e / den

    def deltanet(self, h, p):
        """One gated delta-net layer over all tokens, from a zero state."""
        T, t, S, K = self.t, h.shape[0], self.d_state, self.d_conv
        nk, nv = self.n_k, self.n_v
        qkv = self.mm(h, p + "attn_qkv.weight")
        z = self.mm(h, p + "attn_gate.weight").reshape(t, nv, S)
        beta = 1 / (1 + np.exp(-self.mm(h, p + "ssm_beta.weight")))
        a = self.mm(h, p + "ssm_alpha.weight") + T[p + "ssm_dt.bias"]
        gdecay = np.exp(np.where(a > 20, a, np.log1p(np.exp(a))) * T[p + "ssm_a"])
        w = T[p + "ssm_conv1d.weight"]  # [channels][K]
        padded = np.concatenate([np.zeros((K - 1, qkv.shape[1])), qkv])
        conv = sum(padded[k:k + t] * w[:, k] for k in range(K))
        conv = conv / (1 + np.exp(-conv))
        l2 = lambda x: x / np.sqrt((x * x).sum(-1, keepdims=True) + self.eps)
        q = l2(conv[:, :nk * S].reshape(t, nk, S))
        k = l2(conv[:, nk * S:2 * nk * S].reshape(t, nk, S))
        v = conv[:, 2 * nk * S:].reshape(t, nv, S)
        state = np.zeros((nv, S, S))  # [head][value dim][key dim]
        out = np.zeros((t, nv, S))
        for i in range(t):
            for hh in range(nv):
                kk, qq = k[i, hh % nk], q[i, hh % nk]
                st = state[hh] * gdecay[i, hh]
                d = beta[i, hh] * (v[i, hh] - st @ kk)
                st = st + np.outer(d, kk)
                state[hh] = st
                out[i, hh] = st @ qq / np.sqrt(S)
        out = self.norm(out, T[p + "ssm_norm.weight"]) * (z / (1 + np.exp(-z)))
        return self.mm(out.reshape(t, nv * S), p + "ssm_out.weight")

    def forward(self, tokens, keep_hidden=False):
        """Logits of every position; with keep_hidden also the output-normed
        final hidden states (llama.cpp's h_nextn, the MTP block's input)."""
        T, t = self.t, len(tokens)
        x = T["token_embd.weight"][tokens]
        if self.gemma3:
            x = x * np.sqrt(self.n_embd)
        for i in range(self.n_layer):
            x = self.layer(x, i)
        x = self.norm(x, T["output_norm.weight"])
        logits = self.mm(x, "output.weight" if "output.weight" in T else "token_embd.weight")
        return (logits, x) if keep_hidden else logits

    def mtp_forward(self, tokens):
        """qwen35's MTP block over tokens (llama.cpp's qwen35 graph_mtp):
        position q takes the embedding of token q and the trunk's hidden
        state at q - 1 (zeros at 0), each RMS-normed (nextn.enorm,
        nextn.hnorm), concatenated and projected (nextn.eh_proj), then one
        full-attention block over the block's positions, then
        nextn.shared_head_norm (else output_norm) and the output head: the
        logits of the token after token q + 1. Returns (logits, hidden)."""
        T, t, il = self.t, len(tokens), self.n_layer
        p = f"blk.{il}.nextn."
        _, h = self.forward(tokens, keep_hidden=True)
        hp = np.concatenate([np.zeros((1, self.n_embd)), h[:-1]])
        emb = T.get(p + "embed_tokens.weight", T["token_embd.weight"])[tokens]
        x = np.concatenate([self.norm(emb, T[p + "enorm.weight"]), self.norm(hp, T[p + "hnorm.weight"])], axis=1)
        x = self.layer(self.mm(x, p + "eh_proj.weight"), il)
        x = self.norm(x, T.get(p + "shared_head_norm.weight", T["output_norm.weight"]))
        head = next(n for n in (p + "shared_head_head.weight", "output.weight", "token_embd.weight") if n in T)
        return self.mm(x, head), x

    def layer(self, x, i):
        """Block i over all rows of x (positions 0..), its output."""
        T, t = self.t, x.shape[0]
        pos = np.arange(t)
        hd, nh, nkv = self.head_dim, self.n_head, self.n_head_kv
        mask = np.triu(np.full((t, t), -np.inf), 1)
        swa_mask = mask.copy()
        if self.n_swa:
            swa_mask[pos[:, None] - pos[None, :] >= self.n_swa] = -np.inf
        scale = 1 / np.sqrt(hd)
        if self.gemma3 and self.n_layer == 62:
            scale = 1 / np.sqrt(self.n_embd // nh)
        p = f"blk.{i}."
        h = self.norm(x, T[p + "attn_norm.weight"])
        if self.qwen35 and self.recurrent[i]:
            x = x + self.deltanet(h, p)
            return x + self.ffn(self.norm(x, T[p + "post_attention_norm.weight"]), p)
        q, k, v = (self.mm(h, p + n + ".weight") for n in ("attn_q", "attn_k", "attn_v"))
        gate = None
        if self.qwen35:  # per head [q | gate]
            qg = q.reshape(t, nh, 2, hd)
            q, gate = qg[:, :, 0, :].reshape(t, nh * hd), qg[:, :, 1, :].reshape(t, nh * hd)
        for n, m in (("attn_q", "q"), ("attn_k", "k"), ("attn_v", "v")):
            if p + n + ".bias" in T:
                bias = T[p + n + ".bias"]
                if m == "q": q = q + bias
                elif m == "k": k = k + bias
                else: v = v + bias
        q, k, v = q.reshape(t, nh, hd), k.reshape(t, nkv, hd), v.reshape(t, nkv, hd)
        if p + "attn_q_norm.weight" in T:
            q = self.norm(q, T[p + "attn_q_norm.weight"])
            k = self.norm(k, T[p + "attn_k_norm.weight"])
        swa_rope = self.swa[i] and self.swa_rope
        q, k = self.rope(q, pos, swa_rope), self.rope(k, pos, swa_rope)
        rep = nh // nkv
        if self.act_round:  # the engine keeps K/V as F16
            k, v = k.astype(np.float16).astype(np.float64), v.astype(np.float16).astype(np.float64)
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
        att = np.einsum("qhd,khd->hqk", q, k) * scale + (swa_mask if self.swa[i] else mask)
        att = self.softmax_sink(att, T.get(p + "attn_sinks.weight"))
        o = np.einsum("hqk,khd->qhd", att, v).reshape(t, nh * hd)
        if gate is not None:
            o = o / (1 + np.exp(-gate))
        o = self.mm(o, p + "attn_output.weight")
        if p + "attn_output.bias" in T:
            o = o + T[p + "attn_output.bias"]
        if self.qwen35 or self.gptoss:  # post_attention_norm is the feed-forward's input norm
            x = x + o
            return x + self.ffn(self.norm(x, T[p + "post_attention_norm.weight"]), p)
        if p + "post_attention_norm.weight" in T:
            o = self.norm(o, T[p + "post_attention_norm.weight"])
        x = x + o
        h = self.norm(x, T[p + "ffn_norm.weight"])
        if self.gemma3:  # GELU, tanh form
            g = h @ T[p + "ffn_gate.weight"].T
            u = h @ T[p + "ffn_up.weight"].T
            act = 0.5 * g * (1 + np.tanh(np.sqrt(2 / np.pi) * (g + 0.044715 * g ** 3)))
            f = (act * u) @ T[p + "ffn_down.weight"].T
        else:
            f = self.ffn(h, p)
        if p + "post_ffw_norm.weight" in T:
            f = self.norm(f, T[p + "post_ffw_norm.weight"])
        return x + f

def main():
    mtp = sys.argv[1] == "--mtp"
    args = sys.argv[2:] if mtp else sys.argv[1:]
    m = RefModel(args[0])
    toks = [int(a) for a in args[1:]]
    logits = m.mtp_forward(toks)[0] if mtp else m.forward(toks)
    sys.stdout.buffer.write(logits[-1].astype(np.float32).tobytes())


if __name__ == "__main__":
    main()
