/* test_tokenizer.c - tokenizer tests: ids identical to llama.cpp's on the
 * committed references (tests/data/tok/, one .txt per vocabulary, made by tools/tok_refs.py),
 * special-token handling, round trips, pieces, EOG, malformed vocabularies
 * and speed.
 *
 * tok_*       run on generated fixtures (tests/data/gen/tok/, tools/
 *             testdata_tok.py): a synthetic SPM vocabulary and bad files.
 * real_tok_*  need the real SmolLM2 model (STRATA_MODEL) or the fixtures
 *             relabelled from its vocabulary (pre-tokenizers llama-bpe,
 *             qwen2, qwen35, default, gpt-2). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/gguf.h"
#include "test.h"
#include "test_util.h"
#include "text/tok_internal.h"
#include "text/tokenizer.h"


static int32_t *encode(const tokenizer *t, const char *s, size_t len, int special, size_t *n) {
    int32_t *ids = NULL;
    strata_err err = {0};
    int rc = tok_encode(t, s, len, special, &ids, n, &err);
    CHECK_MSG(rc == 0, "tok_encode: %s", err.msg);
    return ids;
}

/* Concatenated pieces (show_special on); malloc'd, *len bytes. */
static char *decode(const tokenizer *t, const int32_t *ids, size_t n, size_t *len) {
    size_t cap = 64, used = 0;
    char *out = malloc(cap);
    for (size_t i = 0; i < n; i++) {
        int k = tok_piece(t, ids[i], 1, NULL, 0);
        if (k < 0) continue;
        while (used + (size_t)k + 1 > cap) out = realloc(out, cap *= 2);
        tok_piece(t, ids[i], 1, out + used, (size_t)k);
        used += (size_t)k;
    }
    out[used] = 0;
    *len = used;
    return out;
}

/* ---- reference files -------------------------------------------------------- */

typedef struct ref_case {
    int special;
    char *text;
    size_t len;
    int32_t *ids;
    size_t n;
} ref_case;

static int hexval(int c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* "<special> <hex|-> <id> <id> ..." -> case; 0 on a malformed line. */
static int parse_ref(char *line, ref_case *c) {
    char *save = NULL, *sp = strtok_r(line, " \n", &save), *hex = strtok_r(NULL, " \n", &save);
    if (!sp || !hex) return 0;
    c->special = atoi(sp);
    size_t hl = strcmp(hex, "-") == 0 ? 0 : strlen(hex);
    c->text = malloc(hl / 2 + 1);
    c->len = hl / 2;
    for (size_t i = 0; i < c->len; i++)
        c->text[i] = (char)(hexval(hex[2 * i]) << 4 | hexval(hex[2 * i + 1]));
    c->text[c->len] = 0;
    size_t cap = 16;
    c->ids = malloc(cap * sizeof *c->ids);
    c->n = 0;
    for (char *tok; (tok = strtok_r(NULL, " \n", &save));) {
        if (c->n == cap) c->ids = realloc(c->ids, (cap *= 2) * sizeof *c->ids);
        c->ids[c->n++] = (int32_t)atol(tok);
    }
    return 1;
}

static void print_ids(const char *what, const int32_t *ids, size_t n) {
    fprintf(stderr, "      %s (%zu):", what, n);
    for (size_t i = 0; i < n && i < 64; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, n > 64 ? " ...\n" : "\n");
}

static void print_hex(const char *s, size_t n) {
    fprintf(stderr, "      input hex:");
    for (size_t i = 0; i < n && i < 200; i++) fprintf(stderr, "%02x", (unsigned char)s[i]);
    fprintf(stderr, n > 200 ? "...\n" : "\n");
}

/* Any control/user-defined/unknown token among the ids? (SPM round trips
 * only hold without them: a space prefix follows each special.) */
static int has_special(const tokenizer *t, const int32_t *ids, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (t->attr[ids[i]] & (TA_CONTROL | TA_USER | TA_UNKNOWN)) return 1;
    return 0;
}

/* Is s valid UTF-8 (strict)? Round trips are checked only on those. */
static int valid_utf8(const char *s, size_t n) {
    size_t clean_len;
    char *c = utf8_clean(s, n, &clean_len);
    free(c);
    return c == NULL;
}

/* Does the BPE vocabulary have a token for every byte of s? SmolLM2's
 * lacks 21 (e.g. 0xF1, 0xF2, 0xF5-0xFF); llama.cpp then drops the byte,
 * and so must we, so such text cannot round-trip. */
static int bytes_covered(const tokenizer *t, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_sym[(unsigned char)s[i]];
        if (id < 0 || id >= t->n_vocab) return 0;
    }
    return 1;
}

/* Decode of the ids must give the input back: exactly for BPE (if every
 * byte has a token); for SPM after the space prefix that encoding adds,
 * and only for text without specials or a literal U+2581 (SPM decodes
 * that to a space: lossy). */
static int round_trip_ok(const tokenizer *t, const ref_case *c, const int32_t *ids, size_t n) {
    if (!valid_utf8(c->text, c->len)) return 1;
    if (t->kind == TOK_BPE && !bytes_covered(t, c->text, c->len)) return 1;
    if (t->kind == TOK_SPM && has_special(t, ids, n)) return 1;
    if (t->kind == TOK_SPM && memmem(c->text, c->len, "\xE2\x96\x81", 3)) return 1; /* U+2581 -> ' ' */
    size_t dl;
    char *d = decode(t, ids, n, &dl);
    size_t skip = t->kind == TOK_SPM && t->add_space_prefix && c->len ? 1 : 0;
    int ok = dl == c->len + skip && memcmp(d + skip, c->text, c->len) == 0 && (!skip || d[0] == ' ');
    free(d);
    return ok;
}

/* Compare every case of a reference file; report the first mismatch in
 * full and count the rest. */
static void check_refs(const tokenizer *t, const char *ref_path, int min_cases) {
    FILE *fp = fopen(ref_path, "r");
    CHECK_MSG(fp != NULL, "cannot open %s (run from the repository root)", ref_path);
    if (!fp) return;
    char *line = NULL;
    size_t cap = 0;
    int cases = 0, bad = 0, bad_rt = 0;
    while (getline(&line, &cap, fp) > 0) {
        if (line[0] == '#' || line[0] == '\n') continue;
        ref_case c;
        if (!parse_ref(line, &c)) continue;
        cases++;
        size_t n;
        int32_t *ids = encode(t, c.text, c.len, c.special, &n);
        int same = ids && n == c.n && memcmp(ids, c.ids, n * sizeof *ids) == 0;
        if (!same && bad++ == 0) {
            fprintf(stderr, "    %s: first mismatch (case %d, parse_special=%d)\n", ref_path, cases,
                    c.special);
            print_hex(c.text, c.len);
            print_ids("llama.cpp", c.ids, c.n);
            print_ids("strata   ", ids, n);
        }
        if (same && !round_trip_ok(t, &c, ids, n) && bad_rt++ == 0) {
            fprintf(stderr, "    %s: round trip differs (case %d)\n", ref_path, cases);
            print_hex(c.text, c.len);
        }
        free(ids);
        free(c.text);
        free(c.ids);
    }
    free(line);
    fclose(fp);
    printf("    %s: %d cases, %d mismatches, %d round-trip failures\n", ref_path, cases, bad, bad_rt);
    CHECK_MSG(cases >= min_cases, "%s: only %d cases", ref_path, cases);
    CHECK_MSG(bad == 0, "%s: %d of %d cases differ from llama.cpp", ref_path, bad, cases);
    CHECK_MSG(bad_rt == 0, "%s: %d round trips differ", ref_path, bad_rt);
}

static void check_fixture_refs(const char *fixture, const char *ref_path, int min_cases) {
    tokenizer *t = test_load_tokenizer(test_data(fixture));
    if (!t) return;
    check_refs(t, ref_path, min_cases);
    tok_free(t);
}

TEST(real_tok_smollm2_refs) {
    tokenizer *t = test_load_tokenizer(test_real_model());
    if (!t) return;
    CHECK_EQ_INT(tok_get_kind(t), TOK_BPE);
    check_refs(t, "tests/data/tok/smollm2.txt", 2000);
    tok_free(t);
}

/* Gemma 3 270M: SPM with byte fallback, no space prefix, a 262k vocabulary
 * with many user-defined pieces (tests/data/tok/gemma3.txt). */
TEST(gemma3_tok_refs) {
    tokenizer *t = test_load_tokenizer(test_gemma3_model());
    if (!t) return;
    CHECK_EQ_INT(tok_get_kind(t), TOK_SPM);
    check_refs(t, "tests/data/tok/gemma3.txt", 1900);
    tok_free(t);
}

TEST(real_tok_llama_bpe_refs) {
    check_fixture_refs("tok/llama_bpe.gguf", "tests/data/tok/llama_bpe.txt", 600);
}

TEST(real_tok_qwen2_refs) {
    check_fixture_refs("tok/qwen2.gguf", "tests/data/tok/qwen2.txt", 600);
}

/* Qwen3.5's pre-tokenizer: qwen2's with combining marks in letter runs
 * (the same vocabulary relabelled, plus mark-heavy cases). */
TEST(real_tok_qwen35_refs) {
    check_fixture_refs("tok/qwen35.gguf", "tests/data/tok/qwen35.txt", 600);
}

/* gpt-4o (o200k: gpt-oss, llama4) on the same vocabulary, plus case-run,
 * digit-group and punctuation-run cases (tools/tok_refs.py, gen_gpt4o). */
TEST(real_tok_gpt4o_refs) {
    check_fixture_refs("tok/gpt4o.gguf", "tests/data/tok/gpt4o.txt", 2500);
}

/* The same cases on a vocabulary where every byte pair merges and nothing
 * longer (tools/testdata_tok.py, write_pairs): the ids show every place
 * the pre-tokenizer split (with qwen2's pre-tokenizer 988 of these 2,751
 * cases tokenize differently; on the real vocabulary above, 4). */
TEST(tok_gpt4o_pairs_refs) {
    check_fixture_refs("tok/gpt4o_pairs.gguf", "tests/data/tok/gpt4o_pairs.txt", 2500);
}

/* The tiny gpt-oss fixture's own vocabulary: gpt-4o pre-tokenizer, the
 * harmony special tokens in and around text. */
TEST(tok_gptoss_refs) {
    check_fixture_refs("models/gpt-oss-f32.gguf", "tests/data/tok/gptoss.txt", 800);
}

TEST(real_tok_default_refs) {
    check_fixture_refs("tok/default.gguf", "tests/data/tok/default.txt", 250);
}

TEST(real_tok_gpt2_refs) {
    check_fixture_refs("tok/gpt2.gguf", "tests/data/tok/gpt2.txt", 250);
}

TEST(tok_spm_refs) {
    check_fixture_refs("tok/spm.gguf", "tests/data/tok/spm.txt", 1000);
}

TEST(tok_spm_noprefix_refs) {
    check_fixture_refs("tok/spm_noprefix.gguf", "tests/data/tok/spm_noprefix.txt", 250);
}

/* ---- special tokens ------------------------------------------------------------- */

static int count_id(const int32_t *ids, size_t n, int32_t id) {
    int k = 0;
    for (size_t i = 0; i < n; i++) k += ids[i] == id;
    return k;
}

TEST(real_tok_special_chatml) {
    tokenizer *t = test_load_tokenizer(test_real_model());
    if (!t) return;
    int32_t im_start = tok_find(t, "<|im_start|>"), im_end = tok_find(t, "<|im_end|>");
    CHECK(im_start >= 0 && im_end >= 0);
    const char *msg = "<|im_start|>system";
    size_t n;
    int32_t *ids = encode(t, msg, strlen(msg), 0, &n); /* user text: plain */
    CHECK_EQ_INT(count_id(ids, n, im_start), 0);
    CHECK(n > 2);
    free(ids);
    ids = encode(t, msg, strlen(msg), 1, &n); /* template text: one token */
    CHECK(n == 2 && ids[0] == im_start);
    free(ids);
    const char *turn = "<|im_start|>user\nhi<|im_end|>\n";
    ids = encode(t, turn, strlen(turn), 1, &n);
    CHECK_EQ_INT(count_id(ids, n, im_start), 1);
    CHECK_EQ_INT(count_id(ids, n, im_end), 1);
    free(ids);
    tok_free(t);
}

TEST(tok_special_spm) {
    tokenizer *t = test_load_tokenizer(test_data("tok/spm.gguf"));
    if (!t) return;
    size_t n;
    int32_t *ids = encode(t, "<s>", 3, 0, &n);
    CHECK_EQ_INT(count_id(ids, n, 1), 0); /* control: plain text without parse_special */
    free(ids);
    ids = encode(t, "<s>", 3, 1, &n);
    CHECK(n == 1 && ids[0] == 1);
    free(ids);
    int32_t think = tok_find(t, "<think>"), end = tok_find(t, "<|end|>");
    CHECK(think >= 0 && end >= 0);
    ids = encode(t, "a<think>b", 9, 0, &n); /* user-defined: always one token */
    CHECK_EQ_INT(count_id(ids, n, think), 1);
    free(ids);
    /* <|end|> is user-defined in the file but an EOG name: llama.cpp makes
     * it control, so user text cannot produce it. */
    ids = encode(t, "x<|end|>", 8, 0, &n);
    CHECK_EQ_INT(count_id(ids, n, end), 0);
    free(ids);
    ids = encode(t, "x<|end|>", 8, 1, &n);
    CHECK_EQ_INT(count_id(ids, n, end), 1);
    free(ids);
    tok_free(t);
}

/* ---- EOG, pieces, lookups ----------------------------------------------------- */

TEST(tok_eog_spm) {
    tokenizer *t = test_load_tokenizer(test_data("tok/spm.gguf"));
    if (!t) return;
    CHECK_EQ_INT(tok_bos(t), 1);
    CHECK_EQ_INT(tok_eos(t), 2);
    CHECK(tok_add_bos(t));
    CHECK(tok_is_eog(t, 2));
    CHECK(tok_is_eog(t, tok_find(t, "<|im_end|>")));
    CHECK(tok_is_eog(t, tok_find(t, "<|eot_id|>")));
    CHECK(tok_is_eog(t, tok_find(t, "<|end|>")));
    CHECK(!tok_is_eog(t, 1));
    CHECK(!tok_is_eog(t, tok_find(t, "<|im_start|>")));
    CHECK(!tok_is_eog(t, tok_find(t, "<think>")));
    CHECK(!tok_is_eog(t, -1) && !tok_is_eog(t, tok_n_vocab(t)));
    tok_free(t);
}

TEST(real_tok_eog_smollm2) {
    tokenizer *t = test_load_tokenizer(test_real_model());
    if (!t) return;
    CHECK_EQ_INT(tok_eos(t), 2);
    CHECK(!tok_add_bos(t));
    CHECK(tok_is_eog(t, tok_find(t, "<|im_end|>")));
    CHECK(tok_is_eog(t, tok_find(t, "<|endoftext|>")));
    CHECK(tok_is_eog(t, tok_find(t, "<reponame>"))); /* llama.cpp: FIM repo token */
    CHECK(!tok_is_eog(t, tok_find(t, "<|im_start|>")));
    CHECK(!tok_is_eog(t, tok_find(t, "Hello")));
    tok_free(t);
}

TEST(tok_piece_spm) {
    tokenizer *t = test_load_tokenizer(test_data("tok/spm.gguf"));
    if (!t) return;
    char buf[64];
    int32_t a = tok_find(t, "<0x41>"), hello = tok_find(t, "\xE2\x96\x81hello");
    CHECK(a >= 0 && hello >= 0);
    CHECK_EQ_INT(tok_piece(t, a, 0, buf, sizeof buf), 1);
    CHECK(buf[0] == 'A');
    int k = tok_piece(t, hello, 0, buf, sizeof buf);
    CHECK(k == 6 && memcmp(buf, " hello", 6) == 0);
    CHECK_EQ_INT(tok_piece(t, hello, 0, buf, 2), 6); /* full length even if cut */
    CHECK_EQ_INT(tok_piece(t, 1, 0, buf, sizeof buf), 0); /* control hidden */
    CHECK_EQ_INT(tok_piece(t, 1, 1, buf, sizeof buf), 3);
    CHECK(memcmp(buf, "<s>", 3) == 0);
    CHECK_EQ_INT(tok_piece(t, tok_find(t, "<think>"), 0, buf, sizeof buf), 7); /* user-defined */
    CHECK_EQ_INT(tok_piece(t, -1, 1, buf, sizeof buf), -1);
    CHECK_EQ_INT(tok_piece(t, tok_n_vocab(t), 1, buf, sizeof buf), -1);
    CHECK_EQ_INT(tok_find(t, "no such token"), -1);
    CHECK_EQ_INT(tok_find(t, "<unk>"), 0);
    tok_free(t);
}

TEST(real_tok_piece_bpe) {
    tokenizer *t = test_load_tokenizer(test_real_model());
    if (!t) return;
    char buf[64];
    int32_t nl = tok_find(t, "\xC4\x8A"); /* GPT-2 mapping of '\n' */
    CHECK(nl >= 0);
    CHECK_EQ_INT(tok_piece(t, nl, 0, buf, sizeof buf), 1);
    CHECK(buf[0] == '\n');
    int32_t sp_hello = tok_find(t, "\xC4\xA0Hello");
    CHECK(sp_hello >= 0);
    CHECK_EQ_INT(tok_piece(t, sp_hello, 0, buf, sizeof buf), 6);
    CHECK(memcmp(buf, " Hello", 6) == 0);
    tok_free(t);
}

TEST(tok_empty_and_bytes) {
    tokenizer *t = test_load_tokenizer(test_data("tok/spm.gguf"));
    if (!t) return;
    size_t n = 99;
    int32_t *ids = encode(t, "", 0, 1, &n);
    CHECK(ids != NULL && n == 0);
    free(ids);
    /* invalid UTF-8 and NULs: byte tokens, and decoding gives the bytes back */
    const char raw[] = "a\xff\x80\x00z";
    ids = encode(t, raw, sizeof raw - 1, 0, &n);
    size_t dl;
    char *d = decode(t, ids, n, &dl);
    CHECK(dl == sizeof raw && memcmp(d + 1, raw, sizeof raw - 1) == 0);
    free(d);
    free(ids);
    strata_err err = {0};
    CHECK(tok_encode(t, NULL, 5, 0, &ids, &n, &err) == STRATA_EINVAL);
    tok_free(t);
}

/* ---- malformed vocabularies ------------------------------------------------------ */

TEST(tok_malformed_vocab) {
    FILE *fp = fopen(test_data("tok/BAD.txt"), "r");
    CHECK_MSG(fp != NULL, "missing %s (make testdata)", test_data("tok/BAD.txt"));
    if (!fp) return;
    char name[256], path[4096];
    int files = 0;
    while (fscanf(fp, "%255s", name) == 1) {
        snprintf(path, sizeof path, "tok/%s", name);
        snprintf(path, sizeof path, "%s", test_data(path));
        gguf_file *f = NULL;
        strata_err err = {0};
        if (gguf_open(&f, path, &err) != 0) continue; /* rejected earlier: fine too */
        tokenizer *t = (tokenizer *)1;
        int rc = tok_load(&t, f, &err);
        CHECK_MSG(rc < 0 && t == NULL, "%s: tok_load gave %d, want an error", name, rc);
        CHECK_MSG(err.msg[0] != 0, "%s: error without a reason", name);
        if (rc == 0) tok_free(t);
        gguf_close(f);
        files++;
    }
    fclose(fp);
    CHECK(files >= 8);
    strata_err err = {0};
    tokenizer *t;
    CHECK(tok_load(&t, NULL, &err) == STRATA_EINVAL);
    tok_free(NULL);
}

/* ---- speed --------------------------------------------------------------------------- */

/* Build ~size bytes of mixed text (prose, code, numbers, Unicode). */
static char *long_text(size_t size) {
    static const char *parts[] = {
        "The quick brown fox jumps over the lazy dog; it's 42 o'clock. ",
        "int main(void) {\n    return printf(\"%d\\n\", 1234567);\n}\n",
        "Caf\xC3\xA9 na\xC3\xAFve \xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C \xF0\x9F\x98\x80 ",
        "    {\"role\": \"user\", \"content\": \"Summarise the file, please.\"},\n",
        "\t\tfor (i = 0; i < n; i++) sum += a[i] * b[i];   \n\n",
    };
    char *s = malloc(size + 128);
    size_t n = 0;
    for (unsigned i = 0; n < size; i = i * 1103515245u + 12345u) {
        const char *p = parts[(i >> 16) % 5];
        size_t k = strlen(p);
        memcpy(s + n, p, k);
        n += k;
    }
    s[n] = 0;
    return s;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void speed(const tokenizer *t, const char *what) {
    char *s = long_text(200000);
    size_t len = strlen(s), n = 0;
    double t0 = now_s();
    int32_t *ids = encode(t, s, len, 0, &n);
    double dt = now_s() - t0;
    printf("    %s: %zu bytes -> %zu tokens in %.1f ms (%.2f M tokens/s)\n", what, len, n,
           dt * 1e3, n / dt / 1e6);
    CHECK_MSG(dt < 2.0, "encoding %zu tokens took %.2f s", n, dt);
    /* 10k tokens must take milliseconds: the whole text here is ~50k */
    CHECK_MSG(n < 10000 || dt * 10000.0 / n < 0.1, "10k tokens would take %.3f s",
              dt * 10000.0 / n);
    free(ids);
    free(s);
}

TEST(real_tok_speed) {
    tokenizer *t = test_load_tokenizer(test_real_model());
    if (!t) return;
    speed(t, "smollm2 (bpe)");
    tok_free(t);
}

TEST(tok_speed_spm) {
    tokenizer *t = test_load_tokenizer(test_data("tok/spm.gguf"));
    if (!t) return;
    speed(t, "spm fixture");
    tok_free(t);
}

/* gpt-4o (gpt-oss's o200k): case runs split CamelCase, contractions stay
 * on their word, numbers go 3 digits at a time, punctuation takes its
 * trailing newlines and slashes. Pieces joined with '|'. */
static void check_split(tok_pretok *p, const char *text, const char *want) {
    tok_scratch s = {0};
    strata_err err = {0};
    CHECK_EQ_INT(pretok_split(p, &s, text, strlen(text), &err), 0);
    char got[512] = "";
    for (size_t i = 0; i < s.n_spans; i += 2) { /* (offset, length) pairs */
        if (i) strcat(got, "|");
        strncat(got, text + s.spans[i], s.spans[i + 1]);
    }
    CHECK_MSG(!strcmp(got, want), "\"%s\": got \"%s\", want \"%s\"", text, got, want);
    scratch_free(&s);
}

TEST(tok_pretok_gpt4o) {
    tok_pretok *p = NULL;
    int ignore = -1;
    strata_err err = {0};
    CHECK_EQ_INT(pretok_new(&p, "gpt-4o", &ignore, &err), 0);
    if (!p) return;
    CHECK_EQ_INT(ignore, 0);
    check_split(p, "Hello World", "Hello| World");
    check_split(p, "HelloWorld XMLHttp", "Hello|World| XMLHttp");
    check_split(p, "don't THEY'LL", "don't| THEY'LL");
    check_split(p, "1234567", "123|456|7");
    check_split(p, "a/b.\n\nc", "a|/b|.\n\n|c");
    check_split(p, "x  \n y", "x|  \n| y");
    check_split(p, "héllo Ünïcode", "héllo| Ünïcode");
    pretok_free(p);
}
