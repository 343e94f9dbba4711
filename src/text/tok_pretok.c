/* tok_pretok.c - BPE pre-tokenization: split text into words by the regex
 * set that tokenizer.ggml.pre names, using PCRE2 (UTF + UCP, JIT).
 *
 * The sets are the ones llama.cpp applies for each name: every regex of a
 * set splits each piece left by the previous one, and the text between two
 * matches becomes a piece of its own. To give llama.cpp's output exactly,
 * three things differ from the regexes as written in tokenizer.json:
 *   - \s is spelled out as llama.cpp's whitespace set (Unicode White_Space),
 *     which is not PCRE2's (PCRE2 adds U+180E);
 *   - \p{L}, \p{N}, \p{P} carry the code points Unicode 15.0/15.1 added,
 *     which llama.cpp's tables (15.1) know and PCRE2 10.42 (14.0) does not;
 *   - the GPT-2 pattern gets llama.cpp's trailing \s+ fallback (a lone
 *     whitespace before a non-space is one piece, as a gap would be anyway).
 * A PCRE2 built on Unicode 16 or later would call letters what llama.cpp's
 * 15.1 tables call unassigned; only those code points could then differ.
 *
 * Does not: byte-encode or merge (tok_bpe.c). */
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "base/mem.h"
#include "base/utf8.h"
#include "text/tok_internal.h"

/* Class bodies (no brackets) so they can be combined inside [...]. */
#define WS "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}" \
           "\\x{202F}\\x{205F}\\x{3000}"
#define LX "\\p{L}\\x{1123F}-\\x{11240}\\x{11F02}\\x{11F04}-\\x{11F10}\\x{11F12}-\\x{11F33}" \
           "\\x{1342F}\\x{13441}-\\x{13446}\\x{1B132}\\x{1B155}\\x{1DF25}-\\x{1DF2A}"        \
           "\\x{1E030}-\\x{1E06D}\\x{1E4D0}-\\x{1E4EB}\\x{2B739}\\x{2EBF0}-\\x{2EE5D}"       \
           "\\x{31350}-\\x{323AF}"
#define NX "\\p{N}\\x{11F50}-\\x{11F59}\\x{1D2C0}-\\x{1D2D3}\\x{1E4F0}-\\x{1E4F9}"
#define PX "\\p{P}\\x{11B00}-\\x{11B09}\\x{11F43}-\\x{11F4F}"
/* Combining marks (\p{M}) with those Unicode 15.0 added. */
#define MX "\\p{M}\\x{0CF3}\\x{0ECE}\\x{10EFD}-\\x{10EFF}\\x{11241}\\x{11F00}-\\x{11F01}\\x{11F03}"   \
           "\\x{11F34}-\\x{11F3A}\\x{11F3E}-\\x{11F42}\\x{13440}\\x{13447}-\\x{13455}\\x{1E08F}"       \
           "\\x{1E4EC}-\\x{1E4EF}"

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S) */
static const char RE_GPT2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?[" LX "]+| ?[" NX "]+| ?[^" WS LX NX "]+"
    "|[" WS "]+(?![^" WS "])|[" WS "]+";

/* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+   (qwen2: \p{N}) */
#define RE_LLAMA3_LIKE(DIGITS)                                                      \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"                     \
    "|[^\\r\\n" LX NX "]?[" LX "]+|[" NX "]" DIGITS "| ?[^" WS LX NX "]+[\\r\\n]*" \
    "|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+"

static const char RE_LLAMA3[] = RE_LLAMA3_LIKE("{1,3}");
static const char RE_QWEN2[] = RE_LLAMA3_LIKE("");
/* qwen35: qwen2's, but letter runs take combining marks too:
 * [^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+ and  ?[^\s\p{L}\p{M}\p{N}]+[\r\n]* */
static const char RE_QWEN35[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
    "|[^\\r\\n" LX NX "]?[" LX MX "]+|[" NX "]| ?[^" WS LX MX NX "]+[\\r\\n]*"
    "|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+";
/* gpt-4o (o200k, gpt-oss, llama4), as llama.cpp spells it: an upper-case
 * run is a letter that is not a-z, a lower-case run a letter that is not
 * A-Z (its regex engine has no \p{Lu}/\p{Ll}), contractions optional,
 * numbers of 1-3 digits, punctuation taking trailing \r \n and '/':
 * [^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'s|..)?
 * |[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'s|..)?
 * |\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
#define RE_CONTRACTION "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?"
#define RE_UPPER "(?:(?=[" LX "])[^a-z])"
#define RE_LOWER "(?:(?=[" LX "])[^A-Z])"
static const char RE_GPT4O[] =
    "[^\r\n" LX NX "]?" RE_UPPER "*" RE_LOWER "+" RE_CONTRACTION
    "|[^\r\n" LX NX "]?" RE_UPPER "+" RE_LOWER "*" RE_CONTRACTION
    "|[" NX "]{1,3}| ?[^" WS LX NX "]+[\r\n/]*|[" WS "]*[\r\n]+|[" WS "]+(?![^" WS "])|[" WS "]+";
static const char RE_ONE_DIGIT[] = "[" NX "]";
static const char RE_DEFAULT_PUNCT[] = "[" PX "\\$\\+<=>\\^~\\|]+";
static const char RE_DIGITS[] = "[" NX "]+";
static const char RE_THREE[] = "[0-9][0-9][0-9]";

#define MAX_RE 4

typedef struct family {
    const char *name;
    const char *re[MAX_RE];
} family;

static const family F_DEFAULT = {"default", {RE_DEFAULT_PUNCT, RE_GPT2, RE_DIGITS, RE_THREE}};
static const family F_GPT2 = {"gpt2", {RE_GPT2}};
static const family F_SMOLLM = {"smollm", {RE_ONE_DIGIT, RE_GPT2}};
static const family F_LLAMA3 = {"llama3", {RE_LLAMA3}};
static const family F_QWEN2 = {"qwen2", {RE_QWEN2}};
static const family F_QWEN35 = {"qwen35", {RE_QWEN35}};
static const family F_GPT4O = {"gpt-4o", {RE_GPT4O}};

/* tokenizer.ggml.pre names -> family, as llama.cpp maps them. "gpt2" is
 * not a llama.cpp name (it says "gpt-2"); we accept it as the same. */
static const struct {
    const char *name;
    const family *fam;
    int ignore_merges;
} NAMES[] = {
    {"", &F_DEFAULT, 0},           {"default", &F_DEFAULT, 0},
    {"llama3", &F_LLAMA3, 1},      {"llama-v3", &F_LLAMA3, 1},     {"llama-bpe", &F_LLAMA3, 1},
    {"falcon3", &F_LLAMA3, 1},     {"falcon-h1", &F_LLAMA3, 1},    {"pixtral", &F_LLAMA3, 1},
    {"midm-2.0", &F_LLAMA3, 1},    {"lfm2", &F_LLAMA3, 1},         {"jina-v5-nano", &F_LLAMA3, 1},
    {"dbrx", &F_LLAMA3, 0},        {"smaug-bpe", &F_LLAMA3, 0},
    {"qwen2", &F_QWEN2, 0},        {"deepseek-r1-qwen", &F_QWEN2, 0}, {"kormo", &F_QWEN2, 0},
    {"f2llmv2", &F_QWEN2, 0},      {"megrez", &F_QWEN2, 0},        {"stablelm2", &F_QWEN2, 0},
    {"hunyuan", &F_QWEN2, 0},      {"solar-open", &F_QWEN2, 0},    {"qwen35", &F_QWEN35, 0},
    {"smollm", &F_SMOLLM, 0},      {"starcoder", &F_SMOLLM, 0},    {"refact", &F_SMOLLM, 0},
    {"command-r", &F_SMOLLM, 0},   {"codeshell", &F_SMOLLM, 0},    {"exaone", &F_SMOLLM, 0},
    {"minerva-7b", &F_SMOLLM, 0},  {"mellum2", &F_SMOLLM, 0},
    {"gpt2", &F_GPT2, 0},          {"gpt-2", &F_GPT2, 0},          {"phi-2", &F_GPT2, 0},
    {"mpt", &F_GPT2, 0},           {"olmo", &F_GPT2, 0},           {"jais", &F_GPT2, 0},
    {"trillion", &F_GPT2, 0},      {"granite-docling", &F_GPT2, 0}, {"exaone4", &F_GPT2, 0},
    {"jina-es", &F_GPT2, 0},       {"jina-de", &F_GPT2, 0},        {"gigachat", &F_GPT2, 0},
    {"jina-v2-es", &F_GPT2, 0},    {"jina-v2-de", &F_GPT2, 0},     {"a.x-4.0", &F_GPT2, 0},
    {"mellum", &F_GPT2, 0},        {"modern-bert", &F_GPT2, 0},    {"jina-v1-en", &F_GPT2, 0},
    {"jina-v2-code", &F_GPT2, 0},  {"roberta-bpe", &F_GPT2, 0},
    {"gpt-4o", &F_GPT4O, 0},       {"llama4", &F_GPT4O, 0},        {"kanana2", &F_GPT4O, 0},
    {"talkie", &F_GPT4O, 0},
};

struct tok_pretok {
    const family *fam;
    pcre2_code *code[MAX_RE];
    int n;
};

void pretok_free(tok_pretok *p) {
    if (!p) return;
    for (int i = 0; i < p->n; i++) pcre2_code_free(p->code[i]);
    free(p);
}

void pretok_match_data_free(void *md) {
    if (md) pcre2_match_data_free(md);
}

static int compile_one(tok_pretok *p, const char *re, strata_err *err) {
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *c = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                                  &ec, &eo, NULL);
    if (!c) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return strata_errf(err, STRATA_EINVAL, "pre-tokenizer %s: regex error at %zu: %s",
                           p->fam->name, (size_t)eo, (const char *)msg);
    }
    pcre2_jit_compile(c, PCRE2_JIT_COMPLETE); /* optional: falls back to the interpreter */
    p->code[p->n++] = c;
    return 0;
}

int pretok_new(tok_pretok **out, const char *name, int *ignore_merges, strata_err *err) {
    *out = NULL;
    const family *fam = NULL;
    for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++)
        if (strcmp(NAMES[i].name, name) == 0) {
            fam = NAMES[i].fam;
            *ignore_merges = NAMES[i].ignore_merges;
        }
    if (!fam)
        return strata_errf(err, STRATA_EUNSUPPORTED,
                           "tokenizer.ggml.pre '%s': unknown pre-tokenizer; not loaded", name);
    tok_pretok *p = xcalloc(1, sizeof *p);
    p->fam = fam;
    for (int i = 0; i < MAX_RE && fam->re[i]; i++) {
        int rc = compile_one(p, fam->re[i], err);
        if (rc) {
            pretok_free(p);
            return rc;
        }
    }
    *out = p;
    return 0;
}

static void span_push(uint32_t **v, size_t *n, size_t *cap, size_t off, size_t len) {
    XGROW(*v, *cap, *n + 2, 256);
    (*v)[(*n)++] = (uint32_t)off;
    (*v)[(*n)++] = (uint32_t)len;
}

/* One regex over every current span: matches and the gaps between them
 * become the new spans (into s->spans2, then swapped). */
static int split_by(pcre2_code *code, tok_scratch *s, const char *text, strata_err *err) {
    pcre2_match_data *md = s->match_data;
    size_t n2 = 0;
    for (size_t k = 0; k < s->n_spans; k += 2) {
        size_t o = s->spans[k], l = s->spans[k + 1], prev = 0, pos = 0;
        while (pos < l) {
            int rc = pcre2_match(code, (PCRE2_SPTR)(text + o), l, pos, PCRE2_NO_UTF_CHECK, md,
                                 NULL);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0)
                return strata_errf(err, STRATA_EINVAL, "pre-tokenizer: regex match failed (%d)",
                                   rc);
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            if (ov[0] > prev) span_push(&s->spans2, &n2, &s->cap_spans2, o + prev, ov[0] - prev);
            if (ov[1] > ov[0]) span_push(&s->spans2, &n2, &s->cap_spans2, o + ov[0], ov[1] - ov[0]);
            prev = ov[1];
            pos = ov[1] > ov[0] ? ov[1] : ov[1] + 1; /* no pattern here matches empty */
            while (pos < l && ((unsigned char)text[o + pos] & 0xC0) == 0x80) pos++;
        }
        if (prev < l) span_push(&s->spans2, &n2, &s->cap_spans2, o + prev, l - prev);
    }
    uint32_t *t = s->spans;
    size_t tc = s->cap_spans;
    s->spans = s->spans2;
    s->cap_spans = s->cap_spans2;
    s->spans2 = t;
    s->cap_spans2 = tc;
    s->n_spans = n2;
    return 0;
}

int pretok_split(const tok_pretok *p, tok_scratch *s, const char *text, size_t len,
                 strata_err *err) {
    if (!s->match_data) s->match_data = pcre2_match_data_create(4, NULL);
    s->n_spans = 0;
    if (len == 0) return 0;
    span_push(&s->spans, &s->n_spans, &s->cap_spans, 0, len);
    for (int i = 0; i < p->n; i++) {
        int rc = split_by(p->code[i], s, text, err);
        if (rc) return rc;
    }
    return 0;
}

