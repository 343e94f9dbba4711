/* test_jsonguard.c - the JSON guard: the validator on a corpus (whole, byte
 * by byte, in random chunks), its limits, a differential fuzz against
 * Jansson, the mask against token-by-token acceptance, and sampling from
 * random logits under the mask until an EOG.
 *
 * jsonguard_*       validator alone, or the tiny synthetic model's
 *                   tokenizer (tests/data/gen/models/llama-q4_1.gguf).
 * real_jsonguard_*  the real SmolLM2 vocabulary (STRATA_MODEL): sampling,
 *                   mask = accept, and the time per mask call. */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "model/gguf.h"
#include "test.h"
#include "test_util.h"
#include "text/jsonguard.h"
#include "text/tokenizer.h"

/* ---- helpers -------------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rng_unit(uint64_t *s) { return (double)(rng_next(s) >> 11) / 9007199254740992.0; }

/* Feeds text in one piece (chunk 0), byte by byte (chunk 1) or in random
 * chunks (chunk < 0, seeded by -chunk). 1 iff every feed is accepted and
 * the object is complete at the end. */
static int validate(const char *text, size_t len, int chunk) {
    json_guard *g = json_guard_new(NULL);
    uint64_t rng = (uint64_t)-chunk;
    int ok = 1;
    for (size_t i = 0; i < len && ok;) {
        size_t k = chunk == 0 ? len : chunk == 1 ? 1 : 1 + rng_next(&rng) % 7;
        if (k > len - i) k = len - i;
        ok = json_guard_feed(g, text + i, k) == 0;
        i += k;
    }
    ok = ok && json_guard_done(g);
    json_guard_free(g);
    return ok;
}

static int validate_all_ways(const char *text) {
    size_t len = strlen(text);
    int v = validate(text, len, 0);
    if (validate(text, len, 1) != v) return -1;
    for (int seed = 1; seed <= 8; seed++)
        if (validate(text, len, -seed) != v) return -1;
    return v;
}

/* Jansson's verdict: 1 if text (len bytes) parses as an object. */
static int jansson_object(const char *text, size_t len) {
    json_error_t e;
    json_t *j = json_loadb(text, len, 0, &e);
    int ok = j && json_is_object(j);
    json_decref(j);
    return ok;
}


/* ---- the validator -------------------------------------------------------- */

static const char *const VALID[] = {
    "{}",
    " \t\r\n{ }",
    "{\"a\":1}",
    "{\"a\" : [1, -2, 3.5, -0.25e+10, 6E-2, 0, -0, 1e5, 0.0]}",
    "{\"\":\"\"}",
    "{\"k\":true,\"l\":false,\"m\":null}",
    "{\"nested\":{\"a\":[{},[],[[]],{\"b\":{\"c\":[1,[2,[3]]]}}]}}",
    "{\"esc\":\"\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u0041 \\u00e9 \\uFFFF\"}",
    "{\"pair\":\"\\ud83d\\ude00\",\"\\uD834\\uDD1E\":1}",
    "{\"utf8\":\"h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80 \xef\xbf\xbf \xf4\x8f\xbf\xbf\"}",
    "{\"del\":\"\x7f\"}",
    "{\n  \"pretty\": [\n    1,\n    2\n  ],\n  \"x\": {}\n}",
    "{\"int18\":123456789012345678,\"neg\":-123456789012345678}",
    "{\"exp\":1e99,\"small\":1e-99,\"frac\":0.12345678901234567890123}",
    "{\"a\":[true,false,null,\"s\",{\"k\":[]}]}",
    "{\"dup\":1,\"dup\":2}",
};

/* Invalid JSON, or JSON outside the guard's language (marked policy). */
typedef struct bad_case {
    const char *text;
    int policy; /* valid for RFC 8259/Jansson, refused by the guard */
} bad_case;

static const bad_case INVALID[] = {
    {"", 0},
    {"   ", 0},
    {"{", 0},
    {"{\"a\"", 0},
    {"{\"a\":", 0},
    {"{\"a\":1", 0},
    {"{\"a\":1,}", 0},
    {"{,}", 0},
    {"{\"a\" 1}", 0},
    {"{a:1}", 0},
    {"{'a':1}", 0},
    {"{\"a\":01}", 0},
    {"{\"a\":-}", 0},
    {"{\"a\":1.}", 0},
    {"{\"a\":.5}", 0},
    {"{\"a\":1e}", 0},
    {"{\"a\":1e+}", 0},
    {"{\"a\":+1}", 0},
    {"{\"a\":0x10}", 0},
    {"{\"a\":tru}", 0},
    {"{\"a\":True}", 0},
    {"{\"a\":nul}", 0},
    {"{\"a\":truex}", 0},
    {"{\"a\":[1,2}", 0},
    {"{\"a\":[1,2,]}", 0},
    {"{\"a\":{]}", 0},
    {"{\"a\":\"x}", 0},
    {"{\"a\":\"\\x\"}", 0},
    {"{\"a\":\"\\u12\"}", 0},
    {"{\"a\":\"\\u12G4\"}", 0},
    {"{\"a\":\"tab\there\"}", 0},
    {"{\"a\":\"nl\nhere\"}", 0},
    {"{\"a\":\"\xc3\"}", 0},         /* truncated UTF-8 */
    {"{\"a\":\"\xc0\xaf\"}", 0},     /* overlong */
    {"{\"a\":\"\xe0\x80\xaf\"}", 0}, /* overlong */
    {"{\"a\":\"\xed\xa0\x80\"}", 0}, /* encoded surrogate */
    {"{\"a\":\"\xf4\x90\x80\x80\"}", 0}, /* past U+10FFFF */
    {"{\"a\":\"\xff\"}", 0},
    {"{\"a\":\"\x80\"}", 0},
    {"{\"a\":\"\\ud800\"}", 0}, /* lone high surrogate */
    {"{\"a\":\"\\udc00\"}", 0}, /* lone low surrogate */
    {"{\"a\":\"\\ud800\\u0041\"}", 0},
    {"{\"a\":\"\\u0000\"}", 0}, /* Jansson refuses it too */
    {"{}}", 0},
    {"{}{}", 0},
    {"[]", 1},            /* json_object mode: the top level is an object */
    {"[{}]", 1},
    {"\"s\"", 1},
    {"{} ", 1},           /* nothing after the object, not even spaces */
    {"{\"a\":1234567890123456789}", 1}, /* 19 digits */
    {"{\"a\":1e100}", 1},
};

TEST(jsonguard_valid_corpus) {
    for (size_t i = 0; i < sizeof VALID / sizeof *VALID; i++) {
        CHECK_MSG(validate_all_ways(VALID[i]) == 1, "valid text refused: %s", VALID[i]);
        CHECK_MSG(jansson_object(VALID[i], strlen(VALID[i])), "corpus error: %s", VALID[i]);
    }
}

TEST(jsonguard_invalid_corpus) {
    for (size_t i = 0; i < sizeof INVALID / sizeof *INVALID; i++) {
        const bad_case *c = &INVALID[i];
        CHECK_MSG(validate_all_ways(c->text) == 0, "invalid text accepted: %s", c->text);
        if (!c->policy)
            CHECK_MSG(!jansson_object(c->text, strlen(c->text)), "corpus error: %s", c->text);
    }
}

/* A refused feed leaves the state as it was. */
TEST(jsonguard_refusal_keeps_state) {
    json_guard *g = json_guard_new(NULL);
    CHECK_EQ_INT(json_guard_feed(g, "{\"a\":", 5), 0);
    CHECK_EQ_INT(json_guard_feed(g, "1}x", 3), -1);
    CHECK_EQ_INT(json_guard_feed(g, "]", 1), -1);
    CHECK(!json_guard_done(g));
    CHECK_EQ_INT(json_guard_feed(g, "[1]}", 4), 0);
    CHECK(json_guard_done(g));
    CHECK_EQ_INT(json_guard_feed(g, "\n", 1), -1);
    json_guard_free(g);
    json_guard_free(NULL);
    json_vocab_free(NULL);
}

static int feed_str(json_guard *g, const char *s) { return json_guard_feed(g, s, strlen(s)); }

TEST(jsonguard_depth_limit) {
    json_guard *g = json_guard_new(NULL);
    CHECK_EQ_INT(feed_str(g, "{\"a\":"), 0);
    for (int d = 1; d < JSON_GUARD_MAX_DEPTH; d++) CHECK_EQ_INT(feed_str(g, "["), 0);
    CHECK_EQ_INT(feed_str(g, "["), -1); /* level 65 */
    CHECK_EQ_INT(feed_str(g, "{"), -1);
    CHECK_EQ_INT(feed_str(g, "\"deep\""), 0); /* scalars still fit */
    for (int d = 1; d < JSON_GUARD_MAX_DEPTH; d++) CHECK_EQ_INT(feed_str(g, "]"), 0);
    CHECK_EQ_INT(feed_str(g, "}"), 0);
    CHECK(json_guard_done(g));
    json_guard_free(g);
}

/* Limits refuse as early as possible, so no accepted prefix is a dead end. */
TEST(jsonguard_limits_refuse_early) {
    json_guard *g = json_guard_new(NULL);
    CHECK_EQ_INT(feed_str(g, "{\"a\":\"\\uD"), 0);
    CHECK_EQ_INT(feed_str(g, "C"), -1); /* \uDCxx is a lone low surrogate */
    CHECK_EQ_INT(feed_str(g, "8"), 0);  /* \uD8xx is a high one */
    CHECK_EQ_INT(feed_str(g, "00\\u"), 0);
    CHECK_EQ_INT(feed_str(g, "0"), -1); /* the low half must start with D */
    CHECK_EQ_INT(feed_str(g, "DFFF\\u000"), 0);
    CHECK_EQ_INT(feed_str(g, "0"), -1); /* \u0000 */
    CHECK_EQ_INT(feed_str(g, "1\", \"n\": 123456789012345678"), 0);
    CHECK_EQ_INT(feed_str(g, "9"), -1); /* 19th digit */
    CHECK_EQ_INT(feed_str(g, ".5e-99"), 0);
    CHECK_EQ_INT(feed_str(g, "9"), -1); /* 3rd exponent digit */
    char ws[JSON_GUARD_MAX_WS + 1];
    memset(ws, ' ', sizeof ws);
    CHECK_EQ_INT(json_guard_feed(g, ws, JSON_GUARD_MAX_WS), 0);
    CHECK_EQ_INT(json_guard_feed(g, ws, 1), -1);
    CHECK_EQ_INT(feed_str(g, "}"), 0);
    CHECK(json_guard_done(g));
    json_guard_free(g);
}

/* Text Jansson may accept but the guard refuses by design: trailing
 * whitespace, 19+ integer digits, 3+ exponent digits (digit runs in
 * strings count too: this only narrows the comparison). */
static int past_limits(const char *s, size_t len) {
    if (len && s[len - 1] && strchr(" \t\r\n", s[len - 1])) return 1;
    for (size_t i = 0; i < len;) {
        size_t j = i;
        while (j < len && s[j] >= '0' && s[j] <= '9') j++;
        if (j == i) {
            i++;
            continue;
        }
        char before = i ? s[i - 1] : 0, before2 = i > 1 ? s[i - 2] : 0;
        int exp = (before | 0x20) == 'e' ||
                  ((before == '+' || before == '-') && (before2 | 0x20) == 'e');
        if (exp ? j - i > 2 : before != '.' && j - i > 18) return 1;
        i = j;
    }
    return 0;
}

/* Mutates corpus texts at random and compares with Jansson: whatever the
 * guard accepts must parse as an object, and what Jansson accepts the
 * guard accepts too, except past its documented limits. */
TEST(jsonguard_fuzz_vs_jansson) {
    static const char ALPHABET[] = "{}[]\":,\\ 0123456789-+.eEtrufalsn\x01\x80\xc3\xa9";
    uint64_t rng = 7;
    int accepted = 0, mismatches = 0;
    for (int it = 0; it < 20000; it++) {
        char buf[256];
        const char *src = VALID[rng_next(&rng) % (sizeof VALID / sizeof *VALID)];
        size_t len = strlen(src);
        if (len + 4 > sizeof buf) continue;
        memcpy(buf, src, len);
        for (int m = 0, nm = 1 + (int)(rng_next(&rng) % 3); m < nm; m++) {
            size_t pos = len ? rng_next(&rng) % len : 0;
            char c = ALPHABET[rng_next(&rng) % (sizeof ALPHABET - 1)];
            int op = (int)(rng_next(&rng) % 3);
            if (op == 0 && len) buf[pos] = c;
            else if (op == 1 && len) memmove(buf + pos, buf + pos + 1, --len - pos);
            else memmove(buf + pos + 1, buf + pos, len++ - pos), buf[pos] = c;
        }
        int ours = validate(buf, len, -(it + 1)), theirs = jansson_object(buf, len);
        accepted += ours;
        if (ours != theirs && !(theirs && past_limits(buf, len))) {
            if (mismatches++ < 5)
                test_fail(__FILE__, __LINE__, "guard %d, jansson %d: %.*s", ours, theirs, (int)len, buf);
        }
    }
    printf("    %d of 20000 mutants valid, %d mismatches\n", accepted, mismatches);
    CHECK(accepted > 500);
}

/* ---- with a vocabulary ---------------------------------------------------- */

static const char *const PREFIXES[] = {
    "", "  ", "{", "{\"", "{\"k", "{\"k\"", "{\"k\":", "{\"k\": [", "{\"k\":[1", "{\"k\":-",
    "{\"k\":0", "{\"k\":1.", "{\"k\":1.5e", "{\"k\":t", "{\"k\":\"a\\", "{\"k\":\"\\u00",
    "{\"k\":\"\\ud83d", "{\"k\":\"\xe2\x82", "{\"k\":{}", "{\"k\":[]}",
};

static void check_prefixes(const char *model) {
    tokenizer *t = test_load_tokenizer(model);
    if (!t) return;
    json_vocab *v = json_vocab_new(t);
    for (size_t i = 0; i < sizeof PREFIXES / sizeof *PREFIXES; i++)
        test_mask_matches_feed(t, v, NULL, PREFIXES[i]);
    json_vocab_free(v);
    tok_free(t);
}

/* Index of a sample from softmax(logits); -1 if all are -inf. Turns
 * logits into weights in place. */
static int32_t sample(float *logits, int32_t n, uint64_t *rng) {
    double total = 0;
    for (int32_t i = 0; i < n; i++) total += logits[i] = isinf(logits[i]) ? 0.0f : expf(logits[i]);
    if (total == 0) return -1;
    double r = rng_unit(rng) * total;
    int32_t last = -1;
    for (int32_t i = 0; i < n; i++) {
        if (logits[i] == 0) continue;
        last = i;
        if ((r -= logits[i]) <= 0) return i;
    }
    return last;
}

/* Random logits; with push, the tokens '"', '}' and ']' get a bonus that
 * grows with the step, so most runs close their object. */
static void random_logits(const tokenizer *t, float *logits, int32_t n, int step, int push,
                          uint64_t *rng) {
    for (int32_t i = 0; i < n; i++) logits[i] = (float)(rng_unit(rng) * 4.0);
    if (!push) return;
    static const char *const CLOSERS[] = {"\"", "}", "]"};
    for (int k = 0; k < 3; k++) {
        int32_t id = tok_find(t, CLOSERS[k]);
        if (id >= 0) logits[id] += (float)(step * 0.15);
    }
}

typedef struct run_stats {
    int finished, capped, tokens;
} run_stats;

/* One generation of at most cap tokens; checks each step and the text. */
static void sample_run(const tokenizer *t, const json_vocab *v, uint64_t seed, int push, int cap,
                       run_stats *st) {
    int32_t n = tok_n_vocab(t);
    float *logits = malloc(sizeof(float) * (size_t)n);
    char *text = malloc((size_t)cap * 1024 + 1);
    size_t used = 0;
    json_guard *g = json_guard_new(v);
    uint64_t rng = seed;
    int step, eog = 0;
    for (step = 0; step < cap && !eog; step++) {
        random_logits(t, logits, n, step, push, &rng);
        int allowed = json_guard_mask(g, logits);
        int32_t id = sample(logits, n, &rng);
        CHECK_MSG(allowed > 0 && id >= 0, "seed %llu stuck after '%.*s'", (unsigned long long)seed,
                  (int)used, text);
        if (id < 0) break;
        CHECK_EQ_INT(json_guard_accept(g, id), 0);
        eog = tok_is_eog(t, id);
        CHECK_MSG(!eog || json_guard_done(g), "EOG before the object closed");
        if (json_guard_done(g) && !eog) { /* only EOG may follow now */
            int k = 0;
            for (int32_t i = 0; i < n; i++) k += tok_is_eog(t, i);
            CHECK_EQ_INT(json_guard_mask(g, logits), k);
        }
        int len;
        const char *p = test_token_text(t, id, &len);
        if (!eog) memcpy(text + used, p, (size_t)len), used += (size_t)len;
    }
    if (eog) {
        CHECK_MSG(jansson_object(text, used), "seed %llu: not a JSON object: %.*s",
                  (unsigned long long)seed, (int)used, text);
        st->finished++;
    } else {
        json_guard *b = json_guard_new(NULL);
        CHECK_MSG(json_guard_feed(b, text, used) == 0, "seed %llu: capped output is not a prefix",
                  (unsigned long long)seed);
        if (json_guard_done(b)) CHECK(jansson_object(text, used));
        json_guard_free(b);
        st->capped++;
    }
    st->tokens += step;
    json_guard_free(g);
    free(text);
    free(logits);
}

static void check_sampling(const char *model, int seeds) {
    tokenizer *t = test_load_tokenizer(model);
    if (!t) return;
    json_vocab *v = json_vocab_new(t);
    run_stats pushed = {0}, plain = {0};
    for (int s = 1; s <= seeds; s++) sample_run(t, v, (uint64_t)s, 1, 300, &pushed);
    for (int s = 1; s <= seeds / 4; s++) sample_run(t, v, 1000 + (uint64_t)s, 0, 300, &plain);
    printf("    pushed: %d closed, %d capped; random: %d closed, %d capped; %d tokens\n",
           pushed.finished, pushed.capped, plain.finished, plain.capped,
           pushed.tokens + plain.tokens);
    CHECK_MSG(pushed.finished >= seeds / 2, "only %d of %d runs closed", pushed.finished, seeds);
    json_vocab_free(v);
    tok_free(t);
}

TEST(jsonguard_tiny_mask_matches_feed) { check_prefixes(test_data("models/llama-q4_1.gguf")); }

TEST(jsonguard_tiny_sampling) { check_sampling(test_data("models/llama-q4_1.gguf"), 200); }

TEST(real_jsonguard_mask_matches_feed) { check_prefixes(test_real_model()); }

TEST(real_jsonguard_sampling) { check_sampling(test_real_model(), 40); }

/* Time per mask call after each prefix: a fresh guard per call (no cache
 * hit: the trie walk) and the same state again (a cache hit). */
TEST(real_jsonguard_speed) {
    tokenizer *t = test_load_tokenizer(test_real_model());
    if (!t) return;
    double t0 = clock_ms();
    json_vocab *v = json_vocab_new(t);
    printf("    vocab: %d tokens, built in %.1f ms\n", tok_n_vocab(t), clock_ms() - t0);
    float *logits = calloc((size_t)tok_n_vocab(t), sizeof(float));
    const int reps = 20;
    double worst = 0, total = 0;
    for (size_t i = 0; i < sizeof PREFIXES / sizeof *PREFIXES; i++) {
        double walk = 0, hit = 0;
        for (int r = 0; r < reps; r++) {
            json_guard *g = json_guard_new(v);
            feed_str(g, PREFIXES[i]);
            double a = clock_ms();
            json_guard_mask(g, logits);
            double b = clock_ms();
            json_guard_mask(g, logits);
            hit += clock_ms() - b, walk += b - a;
            json_guard_free(g);
        }
        walk /= reps, hit /= reps, total += walk;
        if (walk > worst) worst = walk;
        printf("    after %-14.14s walk %.3f ms, cached %.3f ms\n", PREFIXES[i], walk, hit);
    }
    printf("    mask: mean %.3f ms, worst %.3f ms per call (uncached)\n",
           total / (double)(sizeof PREFIXES / sizeof *PREFIXES), worst);
    free(logits);
    json_vocab_free(v);
    tok_free(t);
}

/* A SentencePiece vocabulary: '▁' pieces become spaces, <0xXX> tokens
 * single bytes. */
TEST(jsonguard_spm_mask_matches_feed) { check_prefixes(test_data("tok/spm.gguf")); }

TEST(jsonguard_spm_sampling) { check_sampling(test_data("tok/spm.gguf"), 100); }
