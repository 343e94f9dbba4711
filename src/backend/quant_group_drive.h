/* quant_group_drive.h - the gemm drivers of the kernels that put a group
 * of weight rows in a vector's lanes (one float chain per (row, token)
 * pair, backend/README.md): the legacy formats and the K-quants'
 * prefill, at avx2 and avx512. Written once over a level's tiles:
 * quant_avx2.c and quant_avx512.c include it after their tiles, as
 * vexp_loops.h is included; no include guard: one inclusion per level
 * file. Rows go in groups of LG_G (one vector's lanes); prefill (from
 * LG_PREP_MIN tokens; the K-quants' gemm calls group_gemm_prep from
 * KG_PREP_MIN) prepares each call's groups in chunks of about LG_CHUNK
 * bytes (at most LG_MAXG groups) into quant_work, token tiles outer over
 * a chunk's groups; decode (legacy formats) reads the GGUF rows, LG_G
 * rows x up to 4 tokens a tile. The including file defines:
 *   LG_G, LG_T (the widest prefill token tile; tails take 3, 2, 1),
 *     LG_CHUNK, LG_MAXG, LG_PREP_MIN;
 *   group_blk_bytes(ty): prepared bytes per block of a group;
 *   group_prep(ty, rw, nb, dst): the LG_G GGUF rows rw[] prepared into
 *     nb * group_blk_bytes(ty) bytes;
 *   group_x_bytes(ty, nb), group_x_prep(ty, x, nb, dst): what the prefill
 *     tiles take per token besides its row (0 bytes: nothing), made once
 *     a call;
 *   group_tokens(ty, pw, gb, ng, xp, xa, nb, yt, ldy, grow, gnr, T): one
 *     token tile of T over a chunk's ng prepared groups (group i at pw +
 *     i * gb, rows from grow[i], the first gnr[i] stored);
 *   lg_dec(ty, rw, xp, nb, yt, ldy, row, nr, T): LG_G GGUF rows x T
 *     (1 to 4) tokens of a legacy format, the first nr rows stored;
 *   KG_PREP_MIN and the K-quants' decode tile sets kq_q4_k_set, kq_q5_k_set,
 *     kq_q6_k_set (quant_tile.h's tile_drive, below KG_PREP_MIN tokens).
 * Rows past r1 repeat the last row; their results are never stored.
 * Does not: arithmetic (the tiles'). */

/* Elements per block: the K-quants' super-blocks, the legacy blocks. */
AI int64_t group_qk(int ty) { return ty >= K4 ? QK_K : QK; }

/* Rows r .. r + LG_G - 1 of [.., r1) (past r1: the last again); returns
 * how many are below r1. */
static int group_rows(const void *w, size_t wrb, int r, int r1, const uint8_t **rw) {
    for (int i = 0; i < LG_G; i++) rw[i] = (const uint8_t *)w + (size_t)(r + i < r1 ? r + i : r1 - 1) * wrb;
    return r1 - r >= LG_G ? LG_G : r1 - r;
}

AI void group_gemm_prep(int ty, const void *w, size_t wrb, int64_t k, const void *xq, size_t xrb, int n_tok,
                        float *y, int64_t ldy, int r0, int r1) {
    const int64_t nb = k / group_qk(ty);
    const size_t gb = (size_t)nb * group_blk_bytes(ty), xb = group_x_bytes(ty, nb);
    const int ng = (r1 - r0 + LG_G - 1) / LG_G;
    int cg = (int)(LG_CHUNK / gb) & ~1;
    cg = cg < 2 ? 2 : cg > LG_MAXG ? LG_MAXG : cg;
    cg = cg > ng ? ng : cg;
    uint8_t *pw = quant_work((size_t)cg * gb + (size_t)n_tok * xb), *xa0 = pw + (size_t)cg * gb;
    for (int t = 0; xb && t < n_tok; t++) group_x_prep(ty, (const uint8_t *)xq + (size_t)t * xrb, nb, xa0 + t * xb);
    int grow[LG_MAXG], gnr[LG_MAXG];
    for (int g0 = 0; g0 < ng; g0 += cg) {
        const int gn = ng - g0 < cg ? ng - g0 : cg;
        for (int i = 0; i < gn; i++) {
            const uint8_t *rw[LG_G];
            grow[i] = r0 + LG_G * (g0 + i);
            gnr[i] = group_rows(w, wrb, grow[i], r1, rw);
            group_prep(ty, rw, nb, pw + (size_t)i * gb);
        }
        for (int t0 = 0; t0 < n_tok;) {
            const int left = n_tok - t0, T = left >= LG_T ? LG_T : left >= 3 ? 3 : left;
            const uint8_t *xp[LG_T], *xa[LG_T];
            for (int t = 0; t < T; t++) {
                xp[t] = (const uint8_t *)xq + (size_t)(t0 + t) * xrb;
                xa[t] = xa0 + (size_t)(t0 + t) * xb;
            }
            float *yt = y + (size_t)t0 * ldy;
            if (T == LG_T) group_tokens(ty, pw, gb, gn, xp, xa, nb, yt, ldy, grow, gnr, LG_T);
            else if (T == 3) group_tokens(ty, pw, gb, gn, xp, xa, nb, yt, ldy, grow, gnr, 3);
            else if (T == 2) group_tokens(ty, pw, gb, gn, xp, xa, nb, yt, ldy, grow, gnr, 2);
            else group_tokens(ty, pw, gb, gn, xp, xa, nb, yt, ldy, grow, gnr, 1);
            t0 += T;
        }
    }
}

AI void group_gemm_dec(int ty, const void *w, size_t wrb, int64_t k, const void *xq, size_t xrb, int n_tok,
                       float *y, int64_t ldy, int r0, int r1) {
    const int64_t nb = k / QK;
    tile_prefetch(w, r0 * wrb, r0 * wrb + TILE_PF_BYTES);
    for (int r = r0; r < r1; r += LG_G) {
        const uint8_t *rw[LG_G];
        const int nr = group_rows(w, wrb, r, r1, rw);
        tile_prefetch(w, (size_t)r * wrb + TILE_PF_BYTES, (size_t)(r + LG_G) * wrb + TILE_PF_BYTES);
        for (int t0 = 0; t0 < n_tok;) {
            const int left = n_tok - t0, T = left >= 4 ? 4 : left;
            const uint8_t *xp[4];
            for (int t = 0; t < T; t++) xp[t] = (const uint8_t *)xq + (size_t)(t0 + t) * xrb;
            float *yt = y + (size_t)t0 * ldy;
            if (T == 4) lg_dec(ty, rw, xp, nb, yt, ldy, r, nr, 4);
            else if (T == 3) lg_dec(ty, rw, xp, nb, yt, ldy, r, nr, 3);
            else if (T == 2) lg_dec(ty, rw, xp, nb, yt, ldy, r, nr, 2);
            else lg_dec(ty, rw, xp, nb, yt, ldy, r, nr, 1);
            t0 += T;
        }
    }
}

#define LG_GEMM(name, ty)                                                                                   \
    static void gemm_##name(const void *w, size_t wrb, int64_t k, const void *xq, size_t xrb, int n_tok,   \
                            float *y, int64_t ldy, int r0, int r1) {                                       \
        if (n_tok >= LG_PREP_MIN) group_gemm_prep(ty, w, wrb, k, xq, xrb, n_tok, y, ldy, r0, r1);             \
        else group_gemm_dec(ty, w, wrb, k, xq, xrb, n_tok, y, ldy, r0, r1);                                   \
    }
LG_GEMM(lg_q4_0, L40)
LG_GEMM(lg_q4_1, L41)
LG_GEMM(lg_q5_0, L50)
LG_GEMM(lg_q5_1, L51)
LG_GEMM(lg_q8_0, L80)
#undef LG_GEMM

/* The K-quants: prepared groups from KG_PREP_MIN tokens on, else the
 * decode tiles of GGUF rows. */
#define KG_GEMM(name, ty)                                                                                   \
    static void gemm_##name(const void *w, size_t wrb, int64_t k, const void *xq, size_t xrb, int n_tok,   \
                            float *y, int64_t ldy, int r0, int r1) {                                       \
        if (n_tok >= KG_PREP_MIN) group_gemm_prep(ty, w, wrb, k, xq, xrb, n_tok, y, ldy, r0, r1);          \
        else tile_drive(&name##_set, w, wrb, k, xq, xrb, n_tok, y, ldy, r0, r1);                            \
    }
KG_GEMM(kq_q4_k, K4)
KG_GEMM(kq_q5_k, K5)
KG_GEMM(kq_q6_k, K6)
#undef KG_GEMM
