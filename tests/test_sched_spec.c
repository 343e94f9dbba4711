/* test_sched_spec.c - speculative decoding in the scheduler with drafts
 * the test controls (sched_opts.draft): drafts that are right up to a
 * point chosen step by step (all right, all wrong, wrong at the k-th),
 * so every path of verification and rollback runs. Whatever is drafted,
 * the tokens are those of plain decoding, greedy and seeded (with
 * penalties), on llama and on qwen35, whose recurrent state is copied
 * before a drafted step and recomputed after refused drafts (with the
 * prefix cache on, the state snapshot kept at the request's end must be
 * right too: a second request resumes from it); on the mixture-of-experts
 * models (qwen3moe; qwen35moe, recurrent too), on gpt-oss (attention
 * sinks, a sliding window of 128 that the prompt passes, MXFP4 experts);
 * and on Gemma 3's sliding window, random weights (window 16) and real
 * ones (opt-in: STRATA_GEMMA3_MODEL). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "model/engine.h"
#include "server/sched.h"
#include "test.h"
#include "test_util.h"

#define MAX_OUT 96
#define MAX_PROMPT 640 /* past Gemma 3's window of 512 */

/* Drafts the expected tokens (want: prompt then plain decoding's output)
 * after the sequence so far, with one token made wrong at a place that
 * cycles from the first draft token to none. */
typedef struct oracle {
    const int32_t *want;
    int n_want, vocab;
    long calls;
} oracle;

static int oracle_draft(void *ctx, const int32_t *toks, int n, int max_draft, int32_t *out) {
    oracle *o = ctx;
    int bad = (int)(o->calls++ % (max_draft + 1)), k = 0; /* bad == max_draft: all right */
    for (int i = 0; i < n && i < o->n_want; i++)
        if (toks[i] != o->want[i]) return 0; /* off the expected path: the output already differs */
    for (; k < max_draft && n + k < o->n_want; k++) out[k] = k == bad ? (o->want[n + k] + 1) % o->vocab : o->want[n + k];
    return k;
}

typedef struct run {
    int32_t toks[MAX_OUT];
    int n;
    sched_finish finish;
    sched_stats stats;
} run;

/* Submits one job per prompt to s in turn and collects each output. */
static void generate(sched *s, const int32_t *prompt, int n_prompt, const sample_params *sp, int ignore_eos,
                     run *out) {
    strata_err err = {0};
    sched_job job = {.prompt = prompt, .n_prompt = n_prompt, .sampling = *sp, .max_tokens = MAX_OUT,
                     .ignore_eos = ignore_eos};
    sched_req *r;
    if (sched_submit(s, &job, &r, &err)) test_fail(__FILE__, __LINE__, "sched_submit: %s", err.msg);
    sched_token t[MAX_OUT];
    sched_status st = {0};
    out->n = 0;
    do out->n += sched_wait(r, out->n, t + out->n, MAX_OUT - out->n, 1000, &st);
    while (st.finish == FINISH_NONE);
    for (int i = 0; i < out->n; i++) out->toks[i] = t[i].id;
    out->finish = st.finish;
    sched_release(r);
    sched_get_stats(s, &out->stats);
}

static sched *open_sched_drafter(engine *e, const tokenizer *tok, int spec, int cache, oracle *o, int drafter) {
    sched_opts so = {.n_slots = 2, .ctx_per_slot = 1024, .queue_max = 8, .chunk = 64, .prefix_cache = cache,
                     .default_scope = {SCOPE_FULL, 0}, .snap_budget_bytes = 64 << 20, .snap_every_blocks = 4,
                     .spec_draft = spec, .draft = o ? oracle_draft : NULL, .draft_ctx = o, .spec_drafter = drafter};
    sched *s = NULL;
    strata_err err = {0};
    if (sched_new(&s, e, tok, &so, &err)) test_fail(__FILE__, __LINE__, "sched_new: %s", err.msg);
    return s;
}

static sched *open_sched(engine *e, const tokenizer *tok, int spec, int cache, oracle *o) {
    return open_sched_drafter(e, tok, spec, cache, o, SPEC_DRAFTER_AUTO);
}

/* The next turn on s, whose cache holds what a speculative request left
 * (blocks published between verifications, the tail, and for recurrent
 * models the state kept at its end): want[0, n_want) is that request's
 * prompt and output, so all but its last token come from the cache. The
 * output must be a cold run's (a scheduler without cache or drafts). */
static void check_next_turn(engine *e, const tokenizer *tok, sched *s, const int32_t *want, int n_want,
                            const sample_params *sp, int ignore_eos) {
    run cold, warm;
    sched_stats before;
    sched_get_stats(s, &before);
    generate(s, want, n_want, sp, ignore_eos, &warm);
    long hit = warm.stats.cache_hit_tokens - before.cache_hit_tokens;
    /* after, not before: its sequence would take the sliding-window
     * memory the cached blocks still hold (no lower tier here) */
    sched *c = open_sched(e, tok, 0, 0, NULL);
    generate(c, want, n_want, sp, ignore_eos, &cold);
    sched_free(c);
    CHECK_MSG(hit == n_want - 1, "next turn: %ld of %d tokens from the cache", hit, n_want);
    CHECK_EQ_INT(warm.n, cold.n);
    CHECK(memcmp(warm.toks, cold.toks, (size_t)cold.n * sizeof(int32_t)) == 0);
}

/* Plain decoding's output, then the same job with controlled drafts of
 * up to 4 and of up to 1 token: the same tokens and finish, drafts both
 * accepted and refused. With cache, the job again on the same scheduler
 * (a prefix hit; qwen35 resumes from the snapshot kept at the end), then
 * the next turn, which resumes where the speculative request ended. */
static void check_model_kv(const char *path, int n_prompt, const sample_params *sp, int ignore_eos, int cache,
                           kvq_type kv) {
    engine_params ep = {.model_path = path, .n_threads = 2, .n_ctx = 2048, .block_tokens = 16, .max_batch = 64,
                        .kv_type = kv};
    engine *e = NULL;
    strata_err err = {0};
    if (engine_open(&e, &ep, &err)) test_fail(__FILE__, __LINE__, "engine_open: %s", err.msg);
    tokenizer *tok = test_load_tokenizer(path);
    static int32_t prompt[MAX_PROMPT], want[MAX_PROMPT + MAX_OUT];
    for (int i = 0; i < n_prompt; i++) prompt[i] = 3 + (i * 37 + (i / 8) * 11) % 400;
    run plain, spec;
    sched *s = open_sched(e, tok, 0, cache, NULL);
    generate(s, prompt, n_prompt, sp, ignore_eos, &plain);
    sched_free(s);
    CHECK(plain.n > 0);
    memcpy(want, prompt, (size_t)n_prompt * sizeof(int32_t));
    memcpy(want + n_prompt, plain.toks, (size_t)plain.n * sizeof(int32_t));
    for (int k = 4; k >= 1; k -= 3) {
        oracle o = {.want = want, .n_want = n_prompt + plain.n, .vocab = e->m->hp.n_vocab};
        s = open_sched(e, tok, k, cache, &o);
        generate(s, prompt, n_prompt, sp, ignore_eos, &spec);
        CHECK_EQ_INT(spec.n, plain.n);
        CHECK(memcmp(spec.toks, plain.toks, (size_t)plain.n * sizeof(int32_t)) == 0);
        CHECK(spec.finish == plain.finish);
        CHECK_MSG(spec.stats.spec_accepted > 0 && spec.stats.spec_accepted < spec.stats.spec_drafted,
                  "%s k=%d: accepted %ld of %ld drafted", path, k, spec.stats.spec_accepted, spec.stats.spec_drafted);
        CHECK(spec.stats.spec_steps < plain.n); /* fewer steps than tokens */
        if (cache) {
            o.calls = 0;
            generate(s, prompt, n_prompt, sp, ignore_eos, &spec);
            CHECK_EQ_INT(spec.n, plain.n);
            CHECK(memcmp(spec.toks, plain.toks, (size_t)plain.n * sizeof(int32_t)) == 0);
            check_next_turn(e, tok, s, want, n_prompt + plain.n, sp, ignore_eos);
        }
        sched_free(s);
    }
    tok_free(tok);
    engine_close(e);
}

static void check_model(const char *path, int n_prompt, const sample_params *sp, int ignore_eos, int cache) {
    check_model_kv(path, n_prompt, sp, ignore_eos, cache, KVQ_F16);
}

static sample_params greedy(void) {
    sample_params p = sample_params_default();
    p.temperature = 0;
    return p;
}

static sample_params seeded(void) {
    sample_params p = sample_params_default();
    p.temperature = 0.9f;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.repeat_penalty = 1.1f;
    p.presence_penalty = 0.2f;
    p.seed = 4242;
    return p;
}

TEST(spec_llama_output_is_plain_decoding) {
    sample_params g = greedy(), r = seeded();
    check_model(test_data("models/llama-q4_1.gguf"), 40, &g, 1, 1);
    check_model(test_data("models/llama-q4_1.gguf"), 40, &r, 0, 0);
}

TEST(spec_qwen35_state_rolls_back) {
    sample_params g = greedy(), r = seeded();
    check_model(test_data("models/qwen35-f32.gguf"), 40, &g, 1, 0);
    check_model(test_data("models/qwen35-f32.gguf"), 70, &g, 1, 1); /* snapshots */
    check_model(test_data("models/qwen35-mix.gguf"), 40, &r, 1, 1);
}

TEST(spec_moe_output_is_plain_decoding) {
    sample_params g = greedy(), r = seeded();
    check_model(test_data("models/qwen3moe-q4_k_m.gguf"), 40, &g, 1, 1);
    check_model(test_data("models/qwen3moe-f32.gguf"), 40, &r, 1, 0);
}

/* Experts and recurrent layers: a refused draft restores the state and
 * recomputes, through the experts, the tokens that were kept. */
TEST(spec_qwen35moe_state_rolls_back) {
    sample_params g = greedy(), r = seeded();
    check_model(test_data("models/qwen35moe-q4_k_m.gguf"), 70, &g, 1, 1);
    check_model(test_data("models/qwen35moe-f32.gguf"), 40, &r, 1, 0);
}

/* The window (128) is passed by the prompt: cutting refused drafts back
 * must keep every verified query's window. */
TEST(spec_gptoss_sliding_window_output_is_plain_decoding) {
    sample_params g = greedy(), r = seeded();
    check_model(test_data("models/gpt-oss-mxfp4.gguf"), 300, &g, 1, 1);
    check_model(test_data("models/gpt-oss-mxfp4.gguf"), 300, &r, 1, 0);
}

TEST(real_spec_output_is_plain_decoding) {
    const char *path = test_real_model();
    if (!path) return;
    sample_params g = greedy(), r = seeded();
    check_model(path, 100, &g, 0, 1);
    check_model(path, 100, &r, 0, 0);
}

/* Past the window: the verified queries' windows are held from the
 * step's first token on, so cutting drafts back never loses one. The
 * tiny random-weight Gemma 3 (window 16) always runs; the real 270M
 * (window 512) when it is there. */
TEST(spec_gemma3_tiny_sliding_window_output_is_plain_decoding) {
    sample_params g = greedy(), r = seeded();
    check_model(test_data("models/gemma3-q8_0.gguf"), 100, &g, 1, 1);
    check_model(test_data("models/gemma3-q8_0.gguf"), 100, &r, 1, 0);
}

/* Quantized K/V (--kv-type): a refused draft's rows are cut back like
 * f16 ones, and blocks published between verifications serve the next
 * turn. One model of each kind: attention only, recurrent, sliding. */
TEST(spec_quant_kv_output_is_plain_decoding) {
    sample_params g = greedy(), r = seeded();
    check_model_kv(test_data("models/llama-q4_1.gguf"), 40, &g, 1, 1, KVQ_Q8_0);
    check_model_kv(test_data("models/qwen35-f32.gguf"), 70, &r, 1, 1, KVQ_Q4_0);
    check_model_kv(test_data("models/gemma3-q8_0.gguf"), 100, &g, 1, 1, KVQ_Q8_0);
    check_model_kv(test_data("models/gpt-oss-mxfp4.gguf"), 300, &r, 1, 1, KVQ_Q4_0);
}

TEST(gemma3_spec_sliding_window_output_is_plain_decoding) {
    sample_params g = greedy(), r = seeded();
    check_model(test_gemma3_model(), MAX_PROMPT, &g, 1, 1);
    check_model(test_gemma3_model(), MAX_PROMPT, &r, 1, 0);
}

/* Drafts from qwen35's MTP block (model/mtp.h) on the random-weight
 * fixture with one: the output is plain decoding's, greedy and seeded,
 * the block alone drafting (--spec-drafter mtp) and behind prompt lookup
 * (auto). Its drafts are nearly all refused (random weights), so nearly
 * every drafted step puts the recurrent state back and recomputes. With
 * the cache, the same job again resumes from the snapshot at the
 * prompt's end and the block drafts over the positions since the hit;
 * then the next turn. The block drafts, or this proves nothing. */
static void check_mtp(const char *fixture, int n_prompt, const sample_params *sp, int ignore_eos, int drafter) {
    const char *path = test_data(fixture);
    engine_params ep = {.model_path = path, .n_threads = 2, .n_ctx = 2048, .block_tokens = 16, .max_batch = 64};
    engine *e = NULL;
    strata_err err = {0};
    if (engine_open(&e, &ep, &err)) {
        test_fail(__FILE__, __LINE__, "engine_open: %s", err.msg);
        return;
    }
    tokenizer *tok = test_load_tokenizer(path);
    static int32_t prompt[MAX_PROMPT], want[MAX_PROMPT + MAX_OUT];
    for (int i = 0; i < n_prompt; i++) prompt[i] = 3 + (i * 37 + (i / 8) * 11) % 400;
    run plain, spec, again;
    sched *s = open_sched(e, tok, 0, 1, NULL);
    generate(s, prompt, n_prompt, sp, ignore_eos, &plain);
    sched_free(s);
    s = open_sched_drafter(e, tok, 4, 1, NULL, drafter);
    generate(s, prompt, n_prompt, sp, ignore_eos, &spec);
    CHECK_EQ_INT(spec.n, plain.n);
    CHECK(memcmp(spec.toks, plain.toks, (size_t)plain.n * sizeof(int32_t)) == 0);
    CHECK(spec.finish == plain.finish);
    CHECK_MSG(spec.stats.spec_mtp_drafted > 0, "the MTP block drafted %ld tokens", spec.stats.spec_mtp_drafted);
    if (drafter == SPEC_DRAFTER_MTP) CHECK(spec.stats.spec_mtp_drafted == spec.stats.spec_drafted);
    if (strstr(fixture, "echo")) /* drafts accepted, and refused: every path of verification */
        CHECK_MSG(spec.stats.spec_mtp_accepted > 0 && spec.stats.spec_mtp_accepted < spec.stats.spec_mtp_drafted,
                  "echo: %ld of %ld accepted", spec.stats.spec_mtp_accepted, spec.stats.spec_mtp_drafted);
    printf("    %s (%s, %s): %ld of %ld MTP drafts accepted, %ld lookup drafts; %.1f ms in the block\n", fixture,
           drafter == SPEC_DRAFTER_MTP ? "mtp" : "auto", sp->temperature > 0 ? "seeded" : "greedy",
           spec.stats.spec_mtp_accepted, spec.stats.spec_mtp_drafted,
           spec.stats.spec_drafted - spec.stats.spec_mtp_drafted, spec.stats.spec_mtp_ms);
    generate(s, prompt, n_prompt, sp, ignore_eos, &again); /* a prefix hit */
    CHECK(again.stats.cache_hit_tokens > spec.stats.cache_hit_tokens);
    CHECK_EQ_INT(again.n, plain.n);
    CHECK(memcmp(again.toks, plain.toks, (size_t)plain.n * sizeof(int32_t)) == 0);
    CHECK_MSG(again.stats.spec_mtp_drafted > spec.stats.spec_mtp_drafted, "no MTP draft after the hit");
    memcpy(want, prompt, (size_t)n_prompt * sizeof(int32_t));
    memcpy(want + n_prompt, plain.toks, (size_t)plain.n * sizeof(int32_t));
    check_next_turn(e, tok, s, want, n_prompt + plain.n, sp, ignore_eos);
    sched_free(s);
    tok_free(tok);
    engine_close(e);
}

TEST(spec_mtp_output_is_plain_decoding) {
    sample_params g = greedy(), r = seeded();
    check_mtp("bad/qwen35-f32-mtp.gguf", 70, &g, 1, SPEC_DRAFTER_MTP);
    check_mtp("bad/qwen35-f32-mtp.gguf", 70, &r, 1, SPEC_DRAFTER_MTP);
    check_mtp("bad/qwen35-f32-mtp.gguf", 70, &g, 1, SPEC_DRAFTER_AUTO);
}

/* The echoing block (tools/testdata_models.py, _echo) drafts the token
 * just sampled again: accepted where the output repeats a token, cut
 * where it stops, so the recurrent state is put back after partly
 * accepted drafts too, and the block's sequence is cut inside a step. */
TEST(spec_mtp_echo_accepts_and_rolls_back) {
    sample_params g = greedy(), r = seeded();
    check_mtp("bad/qwen35-f32-mtp-echo.gguf", 70, &g, 1, SPEC_DRAFTER_MTP);
    check_mtp("bad/qwen35-f32-mtp-echo.gguf", 70, &r, 1, SPEC_DRAFTER_MTP);
}
