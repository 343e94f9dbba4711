/* test_util.c - helpers several test files share (test_util.h). */
#define _XOPEN_SOURCE 700
#include "test_util.h"

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/mem.h"
#include "model/gguf.h"
#include "test.h"

tokenizer *test_load_tokenizer(const char *path) {
    gguf_file *f = NULL;
    strata_err err = {0};
    if (gguf_open(&f, path, &err)) {
        test_fail(__FILE__, __LINE__, "gguf_open %s: %s", path, err.msg);
        return NULL;
    }
    tokenizer *t = NULL;
    int rc = tok_load(&t, f, &err);
    gguf_close(f);
    if (rc) test_fail(__FILE__, __LINE__, "tok_load %s: %s", path, err.msg);
    return t;
}

char *test_tmpdir_new(void) {
    static char path[64];
    strcpy(path, "/tmp/strata-test-XXXXXX");
    CHECK(mkdtemp(path) != NULL);
    return path;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f) {
    if (flag == FTW_D || flag == FTW_DP) chmod(p, 0755);
    return remove(p);
}

void test_tmpdir_free(const char *dir) {
    chmod(dir, 0755);
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

char *test_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) buf[n] = 0;
    if (len) *len = buf ? (size_t)n : 0;
    return buf;
}

const char *test_token_text(const tokenizer *t, int32_t id, int *len) {
    static char buf[1024];
    int n = tok_piece(t, id, 0, buf, sizeof buf);
    *len = n < 0 ? 0 : n > (int)sizeof buf ? (int)sizeof buf : n;
    return buf;
}

/* What a fresh byte-level guard says of prefix followed by p. */
static int feed_accepts(json_schema *schema, const char *prefix, const char *p, int len) {
    json_guard *b = json_guard_new_schema(NULL, schema);
    int ok = len > 0 && json_guard_feed(b, prefix, strlen(prefix)) == 0 && json_guard_feed(b, p, (size_t)len) == 0;
    json_guard_free(b);
    return ok;
}

void test_mask_matches_feed(const tokenizer *t, const json_vocab *v, json_schema *schema, const char *prefix) {
    int32_t n = tok_n_vocab(t);
    float *logits = calloc((size_t)n, sizeof(float));
    json_guard *g = json_guard_new_schema(v, schema);
    CHECK_EQ_INT(json_guard_feed(g, prefix, strlen(prefix)), 0);
    int allowed = json_guard_mask(g, logits), count = 0, wrong = 0;
    for (int32_t id = 0; id < n; id++) {
        int len;
        const char *p = test_token_text(t, id, &len);
        int want = tok_is_eog(t, id) ? json_guard_done(g) : feed_accepts(schema, prefix, p, len);
        int got = logits[id] == 0.0f;
        count += got;
        if (got != want && wrong++ < 3)
            test_fail(__FILE__, __LINE__, "prefix '%s' token %d '%.*s': mask %d, feed %d", prefix, id, len, p, got,
                      want);
    }
    CHECK_EQ_INT(allowed, count);
    CHECK_MSG(allowed > 0, "stuck after '%s'", prefix);
    json_guard_free(g);
    free(logits);
}

int test_run_strata(const char *args, char *out, size_t cap) {
    const char *bin = getenv("STRATA_BIN") ? getenv("STRATA_BIN") : "./strata";
    char path[] = "/tmp/strata-test-cliXXXXXX", cmd[8192];
    int fd = mkstemp(path);
    snprintf(cmd, sizeof cmd, "%s %s >%s 2>&1 </dev/null", bin, args, path);
    int st = system(cmd);
    ssize_t n = pread(fd, out, cap - 1, 0);
    out[n > 0 ? n : 0] = 0;
    close(fd);
    unlink(path);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

double test_unit_random(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (double)((z ^ (z >> 31)) >> 11) / 9007199254740992.0;
}

/* A token drawn from softmax(logits) (refused ones at -inf), or -1. */
static int32_t draw(float *logits, int32_t n, uint64_t *seed) {
    double total = 0, x;
    for (int32_t i = 0; i < n; i++) total += logits[i] = isinf(logits[i]) ? 0.0f : expf(logits[i]);
    x = test_unit_random(seed) * total;
    int32_t id = -1;
    for (int32_t i = 0; i < n && x > 0; i++)
        if (logits[i] > 0) id = i, x -= logits[i];
    return id;
}

int test_sample_guarded(const tokenizer *t, const json_vocab *v, json_schema *schema, uint64_t seed, int cap,
                        float push, char *text, size_t *used) {
    int32_t n = tok_n_vocab(t), closers[3] = {tok_find(t, "\""), tok_find(t, "}"), tok_find(t, "]")};
    float *logits = malloc(sizeof(float) * (size_t)n);
    json_guard *g = json_guard_new_schema(v, schema);
    int eog = 0;
    *used = 0;
    for (int step = 0; step < cap && !eog; step++) {
        for (int32_t i = 0; i < n; i++) logits[i] = (float)(test_unit_random(&seed) * 4.0);
        for (int k = 0; k < 3; k++)
            if (closers[k] >= 0) logits[closers[k]] += push * (float)step;
        if (json_guard_mask(g, logits) <= 0) {
            test_fail(__FILE__, __LINE__, "stuck after '%.*s'", (int)*used, text);
            break;
        }
        int32_t id = draw(logits, n, &seed);
        if (id < 0 || json_guard_accept(g, id) != 0) {
            test_fail(__FILE__, __LINE__, "sampled token %d not accepted after '%.*s'", id, (int)*used, text);
            break;
        }
        eog = tok_is_eog(t, id);
        int len;
        const char *p = test_token_text(t, id, &len);
        if (!eog) memcpy(text + *used, p, (size_t)len), *used += (size_t)len;
    }
    json_guard_free(g);
    free(logits);
    return eog;
}

int test_read_ref_logits(const char *path, ref_logits *r) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    uint32_t hdr[2];
    int ok = fread(hdr, 4, 2, f) == 2;
    if (ok) {
        r->n_tok = (int)hdr[0];
        r->n_vocab = (int)hdr[1];
        r->tokens = xmalloc((size_t)r->n_tok * 4);
        r->logits = xmalloc((size_t)r->n_tok * r->n_vocab * 4);
        ok = fread(r->tokens, 4, (size_t)r->n_tok, f) == (size_t)r->n_tok &&
             fread(r->logits, 4, (size_t)r->n_tok * r->n_vocab, f) == (size_t)r->n_tok * r->n_vocab;
    }
    fclose(f);
    return ok ? 0 : -1;
}

json_schema *test_compile_schema(const char *text, char *why, size_t cap) {
    json_error_t e;
    json_t *j = json_loads(text, 0, &e);
    if (!j) {
        snprintf(why, cap, "bad test JSON: %s", e.text);
        return NULL;
    }
    json_schema *s = json_schema_compile(j, why, cap);
    json_decref(j);
    return s;
}

/* One guarded run (test_sample_guarded); 1 if it ended with EOG, its
 * output then checked by valid. */
static int schema_run(const tokenizer *t, const json_vocab *v, json_schema *s, uint64_t seed, int cap,
                      int (*valid)(const json_t *, char *, size_t)) {
    char *text = malloc((size_t)cap * 512 + 1);
    size_t used;
    int eog = test_sample_guarded(t, v, s, seed, cap, 0.15f, text, &used);
    if (eog) {
        char why[128] = "";
        json_t *o = json_loadb(text, used, 0, NULL);
        CHECK_MSG(o && valid(o, why, sizeof why), "seed %llu: %s: %.*s", (unsigned long long)seed,
                  o ? why : "not JSON", (int)used, text);
        json_decref(o);
    }
    free(text);
    return eog;
}

void test_schema_sampling(const char *model, const char *schema, int seeds, int cap,
                          int (*valid)(const json_t *o, char *why, size_t cap)) {
    tokenizer *t = test_load_tokenizer(model);
    if (!t) return;
    char why[512];
    json_schema *s = test_compile_schema(schema, why, sizeof why);
    json_vocab *v = json_vocab_new(t);
    int done = 0;
    for (int i = 1; s && i <= seeds; i++) done += schema_run(t, v, s, (uint64_t)i, cap, valid);
    printf("    %d of %d runs closed their object\n", done, seeds);
    CHECK_MSG(done >= seeds / 2, "only %d of %d runs closed", done, seeds);
    json_vocab_free(v);
    json_schema_free(s);
    tok_free(t);
}

float *test_trunk_hidden(engine *e, const int32_t *toks, int n) {
    int E = e->m->hp.n_embd;
    float *h = xmalloc((size_t)n * E * sizeof(float)), *logits = xmalloc((size_t)e->m->hp.n_vocab * sizeof(float));
    kv_seq s;
    kv_seq_init(&s);
    fwd_keep_hidden(e->fwd, 1);
    strata_err err = {0};
    if (n > e->max_batch || fwd_prefill(e->fwd, &s, toks, n, logits, &err))
        test_fail(__FILE__, __LINE__, "trunk pass over %d tokens: %s", n, err.msg);
    else memcpy(h, fwd_hidden(e->fwd), (size_t)n * E * sizeof(float));
    fwd_keep_hidden(e->fwd, 0);
    kv_seq_release(&e->kv, &s);
    free(logits);
    return h;
}

int test_levels_differ_by_id(const char *what, int n, void *const *out, size_t bytes, const char *const *id,
                             const char *const *names) {
    int differ = 0;
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++) {
            if (!memcmp(out[a], out[b], bytes)) continue;
            differ++;
            CHECK_MSG(strcmp(id[a], id[b]) != 0, "%s: levels %s and %s give other bits under one id '%s'", what,
                      names[a], names[b], id[a]);
        }
    return differ;
}
