/* test_sched_choices.c - several choices of one request in the scheduler
 * (OpenAI n > 1, server/api_call.c): the first choice keeps its prompt's
 * partial last block cached as soon as the prompt is in
 * (sched_job.share_prompt), so a later choice submitted while it still
 * runs attaches the whole prompt but its last token (without it, only the
 * whole blocks); under the same seed the later choice's tokens are the
 * first's (a cache hit is exact); and a later choice is queued even when
 * the queue is full (sched_job.later_choice), where any other job is
 * refused. On the tiny llama and qwen35 (a recurrent state, resumed
 * from a snapshot), blocks of 64 tokens. */
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "model/engine.h"
#include "server/sched.h"
#include "test.h"
#include "test_util.h"

#define N_PROMPT 70 /* one whole block of 64 and a tail of 6: 58 tokens to generate before that block is whole */
#define LONG_RUN 400 /* tokens the first choice runs for: it is still running when the later one attaches */
#define SHORT_RUN 24

typedef struct fixture {
    engine *e;
    tokenizer *tok;
    sched *s;
    int32_t prompt[N_PROMPT];
} fixture;

static void open_fixture(fixture *f, const char *model, int n_slots) {
    const char *path = test_data(model);
    engine_params ep = {.model_path = path, .n_threads = 2, .n_ctx = 2048, .block_tokens = 64, .max_batch = 64};
    strata_err err = {0};
    if (engine_open(&f->e, &ep, &err)) test_fail(__FILE__, __LINE__, "engine_open: %s", err.msg);
    f->tok = test_load_tokenizer(path);
    sched_opts so = {.n_slots = n_slots, .ctx_per_slot = 1024, .queue_max = 0, .chunk = 64, .prefix_cache = 1,
                     .default_scope = {SCOPE_FULL, 0}, .snap_budget_bytes = 64 << 20, .snap_every_blocks = 4};
    if (sched_new(&f->s, f->e, f->tok, &so, &err)) test_fail(__FILE__, __LINE__, "sched_new: %s", err.msg);
    for (int i = 0; i < N_PROMPT; i++) f->prompt[i] = 3 + (i * 53 + (i / 5) * 7) % 400;
}

static void close_fixture(fixture *f) {
    sched_free(f->s);
    tok_free(f->tok);
    engine_close(f->e);
}

static sched_job job_of(const fixture *f, int max_tokens) {
    sample_params sp = sample_params_default();
    sp.temperature = 0.9f;
    sp.seed = 99;
    return (sched_job){.prompt = f->prompt, .n_prompt = N_PROMPT, .sampling = sp, .max_tokens = max_tokens,
                       .ignore_eos = 1};
}

static sched_req *submit(fixture *f, const sched_job *job) {
    sched_req *r;
    strata_err err = {0};
    if (sched_submit(f->s, job, &r, &err)) test_fail(__FILE__, __LINE__, "sched_submit: %s", err.msg);
    return r;
}

/* Waits for r's first token (its prompt is in). */
static void wait_first(sched_req *r) {
    sched_status st = {0};
    while (!sched_wait(r, 0, NULL, 0, 1000, &st) && !st.n_generated && st.finish == FINISH_NONE) {
    }
}

/* r's first n tokens (it runs at least that long), into out. */
static void take(sched_req *r, int32_t *out, int n) {
    sched_token t[64];
    sched_status st = {0};
    for (int got = 0; got < n;) {
        int k = sched_wait(r, got, t, n - got < 64 ? n - got : 64, 1000, &st);
        for (int i = 0; i < k; i++) out[got + i] = t[i].id;
        got += k;
        if (!k && st.finish != FINISH_NONE) test_fail(__FILE__, __LINE__, "ended after %d of %d tokens", got, n);
    }
}

/* The prompt tokens a later choice got from the cache, submitted once the
 * first (shared or not) has its prompt in and while it still runs. */
static int later_cached(const char *model, int share, int32_t *first, int32_t *later) {
    fixture f;
    open_fixture(&f, model, 2);
    sched_job a = job_of(&f, LONG_RUN), b = job_of(&f, SHORT_RUN);
    a.share_prompt = share;
    b.later_choice = 1;
    sched_req *ra = submit(&f, &a);
    wait_first(ra);
    sched_req *rb = submit(&f, &b);
    sched_status st = {0};
    while (!sched_wait_attached(rb, 1000, &st)) {
    }
    sched_status sa = {0};
    sched_wait(ra, 0, NULL, 0, 0, &sa);
    CHECK_MSG(sa.n_generated < 64 - N_PROMPT % 64, "the first choice wrote %d tokens before the later one attached",
              sa.n_generated);
    take(rb, later, SHORT_RUN);
    take(ra, first, SHORT_RUN);
    sched_release(rb);
    sched_release(ra);
    close_fixture(&f);
    return st.n_cached;
}

TEST(sched_later_choice_attaches_the_whole_prompt) {
    int32_t first[SHORT_RUN], later[SHORT_RUN];
    int shared = later_cached("models/llama-q4_1.gguf", 1, first, later);
    CHECK_EQ_INT(shared, N_PROMPT - 1);
    CHECK(memcmp(first, later, sizeof first) == 0); /* the same seed from the cache: the same tokens */
    int plain = later_cached("models/llama-q4_1.gguf", 0, first, later);
    CHECK_EQ_INT(plain, 64); /* the whole block only: the tail is cached when the first ends */
    CHECK(memcmp(first, later, sizeof first) == 0);
}

/* Recurrent layers resume only where a state snapshot is: the shared
 * prompt's first choice keeps one at its last position but one. */
TEST(sched_later_choice_resumes_a_recurrent_state) {
    int32_t first[SHORT_RUN], later[SHORT_RUN];
    CHECK_EQ_INT(later_cached("models/qwen35-f32.gguf", 1, first, later), N_PROMPT - 1);
    CHECK(memcmp(first, later, sizeof first) == 0);
    CHECK_EQ_INT(later_cached("models/qwen35-f32.gguf", 0, first, later), 0); /* no snapshot before the end */
    CHECK(memcmp(first, later, sizeof first) == 0);
}

TEST(sched_later_choice_is_queued_beyond_queue_max) {
    fixture f;
    open_fixture(&f, "models/llama-q4_1.gguf", 1);
    sched_job a = job_of(&f, LONG_RUN), other = job_of(&f, SHORT_RUN), b = job_of(&f, SHORT_RUN);
    b.later_choice = 1;
    sched_req *ra = submit(&f, &a), *rb, *ro;
    wait_first(ra);
    strata_err err = {0};
    CHECK_EQ_INT(sched_submit(f.s, &other, &ro, &err), STRATA_EBUSY); /* one slot, taken; no queue */
    CHECK(ro == NULL);
    rb = submit(&f, &b);
    CHECK_EQ_INT(sched_wait_admitted(rb, 0), STRATA_EBUSY); /* queued behind the first */
    sched_release(ra);                                       /* the slot frees: the later choice runs */
    int32_t out[SHORT_RUN];
    take(rb, out, SHORT_RUN);
    sched_release(rb);
    sched_stats st;
    sched_get_stats(f.s, &st);
    CHECK_EQ_INT(st.queued, 0);
    close_fixture(&f);
}
