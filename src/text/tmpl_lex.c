/* tmpl_lex.c - template source to tokens.
 *
 * Follows jinja2's lexer with trim_blocks and lstrip_blocks on (as Hugging
 * Face sets them), because whitespace is where byte-identical output is won
 * or lost:
 *   - `{%- ` / `{{-` / `{#-` strip all whitespace before the tag;
 *     `-%}` / `-}}` / `-#}` all whitespace after it.
 *   - trim_blocks: one newline right after `%}` or `#}` is dropped
 *     (not after `}}`); `+%}` keeps it.
 *   - lstrip_blocks: spaces and tabs between the start of a line and `{%`
 *     or `{#` are dropped (not before `{{`); `{%+` keeps them.
 *   - `{% raw %}...{% endraw %}` is text.
 * Line breaks were normalized to \n and one trailing newline removed by
 * tmpl_parse before we get here (jinja2's keep_trailing_newline=False).
 * Inside tags it produces names, numbers, strings (escapes decoded as
 * Python's unicode-escape does) and operators. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "text/tmpl_int.h"

typedef struct lexer {
    tarena *ar;
    const char *s;
    size_t n, pos;
    ttok *toks;
    size_t ntoks, cap;
    int line_starting;   /* the previous match ended with a newline */
    strata_err *err;
    size_t lc_off, lc_start; /* line_col cache: offset, its line's start */
    int lc_line;
} lexer;

/* Line and column (1-based) of a byte offset; columns count bytes.
 * Offsets mostly grow, so scanning resumes from the last answer. */
static void line_col(lexer *L, size_t off, int *line, int *col)
{
    if (off < L->lc_off) { L->lc_off = 0; L->lc_start = 0; L->lc_line = 1; }
    for (size_t i = L->lc_off; i < off && i < L->n; i++)
        if (L->s[i] == '\n') { L->lc_line++; L->lc_start = i + 1; }
    L->lc_off = off;
    *line = L->lc_line;
    *col = (int)(off - L->lc_start) + 1;
}

static int lex_fail(lexer *L, size_t off, const char *what)
{
    int line, col;
    line_col(L, off, &line, &col);
    return strata_errf(L->err, STRATA_EFORMAT, "template line %d:%d: %s",
                       line, col, what);
}

static ttok *push(lexer *L, int kind, size_t off, const char *p, size_t len)
{
    if (L->ntoks == L->cap) {
        size_t nc = mem_grown_cap(L->cap, L->cap + 1, 256);
        ttok *nt = ta_alloc(L->ar, nc * sizeof *nt);
        if (L->ntoks) memcpy(nt, L->toks, L->ntoks * sizeof *nt);
        L->toks = nt;
        L->cap = nc;
    }
    ttok *t = &L->toks[L->ntoks++];
    memset(t, 0, sizeof *t);
    t->kind = kind;
    t->p = p;
    t->len = len;
    line_col(L, off, &t->line, &t->col);
    return t;
}

/* Python whitespace (str.isspace / re \s) at s[i]; returns its byte length
 * or 0. */
static size_t space_at(const char *s, size_t n, size_t i)
{
    uint32_t cp;
    size_t nx = tu_next(s, n, i, &cp);
    return tu_isspace(cp) ? nx - i : 0;
}

static size_t skip_space(const char *s, size_t n, size_t i)
{
    size_t k;
    while (i < n && (k = space_at(s, n, i)) > 0) i += k;
    return i;
}

/* End of the text once trailing Python whitespace is removed. */
static size_t rstrip_end(const char *s, size_t start, size_t end)
{
    size_t e = end;
    while (e > start) {
        size_t b = e - 1;
        while (b > start && ((unsigned char)s[b] & 0xC0) == 0x80) b--;
        if (space_at(s, end, b) == e - b) e = b;
        else break;
    }
    return e;
}

/* Emit text s[a, b) applying the strip sign of the tag that follows
 * (kind: 'v' variable, 'b' block, 'c' comment). */
static void emit_text(lexer *L, size_t a, size_t b, char sign, char kind)
{
    if (sign == '-') {
        b = rstrip_end(L->s, a, b);
    } else if (sign != '+' && kind != 'v') {
        size_t lpos = b;
        while (lpos > a && L->s[lpos - 1] != '\n') lpos--;
        if ((lpos > a || L->line_starting) && lpos < b &&
            skip_space(L->s, b, lpos) == b)
            b = lpos;
    }
    if (b > a) push(L, TK_TEXT, a, L->s + a, b - a);
}

/* After a block or comment end: trim_blocks drops one newline. */
static size_t tag_end(lexer *L, size_t i, char sign)
{
    if (sign == '-') i = skip_space(L->s, L->n, i);
    else if (sign != '+' && i < L->n && L->s[i] == '\n') i++;
    L->line_starting = i > 0 && L->s[i - 1] == '\n';
    return i;
}

static int lex_comment(lexer *L, size_t start)
{
    /* jinja2 quirk: `{#` as the very last thing is accepted. */
    if (start >= L->n) {
        L->pos = L->n;
        return 0;
    }
    for (size_t j = start; j + 1 < L->n; j++) {
        char sign = 0;
        size_t k = j;
        if ((L->s[j] == '-' || L->s[j] == '+') && j + 2 < L->n &&
            L->s[j + 1] == '#' && L->s[j + 2] == '}') {
            sign = L->s[j];
            k = j + 1;
        }
        if (L->s[k] == '#' && k + 1 < L->n && L->s[k + 1] == '}') {
            L->pos = tag_end(L, k + 2, sign);
            return 0;
        }
    }
    return lex_fail(L, start, "missing end of comment tag '#}'");
}

/* {% raw %} ... {% endraw %}: find the end tag; body is text. */
static int lex_raw(lexer *L, size_t body)
{
    for (size_t j = body; j + 1 < L->n; j++) {
        if (L->s[j] != '{' || L->s[j + 1] != '%') continue;
        size_t k = j + 2;
        char sign = 0;
        if (k < L->n && (L->s[k] == '-' || L->s[k] == '+')) sign = L->s[k++];
        k = skip_space(L->s, L->n, k);
        if (L->n - k < 6 || memcmp(L->s + k, "endraw", 6) != 0) continue;
        k = skip_space(L->s, L->n, k + 6);
        char esign = 0;
        if (k < L->n && (L->s[k] == '-' || L->s[k] == '+')) esign = L->s[k++];
        if (k + 1 >= L->n || L->s[k] != '%' || L->s[k + 1] != '}') continue;
        emit_text(L, body, j, sign, 'b');
        L->pos = tag_end(L, k + 2, esign);
        return 0;
    }
    return lex_fail(L, body, "missing end of raw directive");
}

/* Is this `{% raw %}`? Returns the offset after it, or 0. */
static size_t raw_begin(lexer *L, size_t i)
{
    size_t k = i + 2;
    if (k < L->n && (L->s[k] == '-' || L->s[k] == '+')) k++;
    k = skip_space(L->s, L->n, k);
    if (L->n - k < 3 || memcmp(L->s + k, "raw", 3) != 0) return 0;
    k = skip_space(L->s, L->n, k + 3);
    int minus = 0;
    if (k < L->n && L->s[k] == '-') { minus = 1; k++; }
    if (k + 1 >= L->n || L->s[k] != '%' || L->s[k + 1] != '}') return 0;
    k += 2;
    return minus ? skip_space(L->s, L->n, k) : k;
}

/* ---- inside tags ---- */

static int hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decode \x, \u, \U, octal and the one-letter escapes like Python's
 * unicode-escape codec; unknown escapes keep their backslash. */
static size_t unescape_one(const char *s, size_t n, size_t i, char *o,
                           size_t *olen)
{
    char c = s[i];
    static const char from[] = "nrtabfv\\'\"\n";
    static const char to[] = "\n\r\t\a\b\f\v\\'\"";
    const char *f = strchr(from, c);
    if (c && f) {
        if (c == '\n') { *olen = 0; return i + 1; } /* line continuation */
        o[0] = to[f - from];
        *olen = 1;
        return i + 1;
    }
    int w = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
    if (w) {
        uint32_t cp = 0;
        int k;
        for (k = 0; k < w && i + 1 + k < n && hexval(s[i + 1 + k]) >= 0; k++)
            cp = cp * 16 + (uint32_t)hexval(s[i + 1 + k]);
        if (k == w && cp < 0x110000) {
            *olen = tu_put(o, cp);
            return i + 1 + w;
        }
    } else if (c >= '0' && c <= '7') {
        uint32_t cp = 0;
        size_t k = i;
        while (k < n && k < i + 3 && s[k] >= '0' && s[k] <= '7')
            cp = cp * 8 + (uint32_t)(s[k++] - '0');
        *olen = tu_put(o, cp);
        return k;
    }
    o[0] = '\\';
    *olen = 1;
    return i; /* re-read c as a plain char */
}

static int lex_string(lexer *L, size_t start, size_t *end)
{
    char q = L->s[start];
    size_t e = start + 1;
    while (e < L->n && L->s[e] != q) e += L->s[e] == '\\' ? 2 : 1;
    if (e >= L->n) return lex_fail(L, start, "unterminated string");
    /* Escapes never make the text longer (\x41 -> 1..2 bytes). */
    char *o = ta_alloc(L->ar, e - start + 1);
    size_t ol = 0, i = start + 1;
    while (i < e) {
        if (L->s[i] == '\\' && i + 1 < e + 1) {
            size_t k;
            i = unescape_one(L->s, e, i + 1, o + ol, &k);
            ol += k;
        } else {
            o[ol++] = L->s[i++];
        }
    }
    push(L, TK_STRING, start, o, ol);
    *end = e + 1;
    return 0;
}

/* Digits with optional single underscores between them. */
static size_t digits(const char *s, size_t n, size_t i)
{
    size_t j = i;
    while (j < n && isdigit((unsigned char)s[j])) {
        j++;
        if (j + 1 < n && s[j] == '_' && isdigit((unsigned char)s[j + 1])) j++;
    }
    return j;
}

static size_t lex_number(lexer *L, size_t i)
{
    const char *s = L->s;
    size_t j = digits(s, L->n, i), e;
    int isf = 0;
    if (j + 1 < L->n && s[j] == '.' && isdigit((unsigned char)s[j + 1])) {
        j = digits(s, L->n, j + 1);
        isf = 1;
    }
    if (j < L->n && (s[j] == 'e' || s[j] == 'E')) {
        e = j + 1;
        if (e < L->n && (s[e] == '+' || s[e] == '-')) e++;
        if (e < L->n && isdigit((unsigned char)s[e])) {
            j = digits(s, L->n, e);
            isf = 1;
        }
    }
    char buf[128];
    size_t bl = 0;
    for (size_t k = i; k < j && bl < sizeof buf - 1; k++)
        if (s[k] != '_') buf[bl++] = s[k];
    buf[bl] = 0;
    ttok *t = push(L, isf ? TK_FLOAT : TK_INT, i, s + i, j - i);
    if (isf) t->fval = strtod(buf, NULL);
    else t->ival = strtoll(buf, NULL, 10);
    return j;
}

static const char *const OPS[] = {
    "//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[",
    "]", "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";",
};

/* Tokens of one {{ }} or {% %} tag starting at i (after the opener). */
static int lex_tag(lexer *L, size_t i, char kind, size_t open_off)
{
    int depth = 0;
    const char *endc = kind == 'v' ? "}}" : "%}";
    while (i < L->n) {
        char c = L->s[i];
        if (depth == 0) {
            char sign = 0;
            size_t k = i;
            if ((c == '-' || (c == '+' && kind == 'b')) && i + 2 < L->n &&
                L->s[i + 1] == endc[0] && L->s[i + 2] == endc[1]) {
                sign = c;
                k = i + 1;
            }
            if (L->s[k] == endc[0] && k + 1 < L->n && L->s[k + 1] == endc[1]) {
                push(L, kind == 'v' ? TK_VAR_END : TK_BLOCK_END, i, L->s + i, 0);
                if (kind == 'v') {
                    L->pos = sign == '-' ? skip_space(L->s, L->n, k + 2) : k + 2;
                    L->line_starting = L->pos > 0 && L->s[L->pos - 1] == '\n';
                } else {
                    L->pos = tag_end(L, k + 2, sign);
                }
                return 0;
            }
        }
        size_t sp = space_at(L->s, L->n, i);
        if (sp) { i += sp; continue; }
        if (isdigit((unsigned char)c)) { i = lex_number(L, i); continue; }
        if (isalpha((unsigned char)c) || c == '_') {
            size_t j = i + 1;
            while (j < L->n && (isalnum((unsigned char)L->s[j]) || L->s[j] == '_')) j++;
            push(L, TK_NAME, i, L->s + i, j - i);
            i = j;
            continue;
        }
        if (c == '\'' || c == '"') {
            int rc = lex_string(L, i, &i);
            if (rc) return rc;
            continue;
        }
        size_t k;
        for (k = 0; k < sizeof OPS / sizeof *OPS; k++) {
            size_t ol = strlen(OPS[k]);
            if (L->n - i >= ol && memcmp(L->s + i, OPS[k], ol) == 0) break;
        }
        if (k == sizeof OPS / sizeof *OPS) {
            char msg[64];
            snprintf(msg, sizeof msg, "unexpected char '%c'", c);
            return lex_fail(L, i, msg);
        }
        size_t ol = strlen(OPS[k]);
        if (strchr("([{", c)) depth++;
        if (strchr(")]}", c)) {
            if (depth == 0) return lex_fail(L, i, "unbalanced bracket");
            depth--;
        }
        push(L, TK_OP, i, L->s + i, ol);
        i += ol;
    }
    return lex_fail(L, open_off, kind == 'v' ? "missing '}}' to close '{{'"
                                             : "missing '%}' to close '{%'");
}

/* Next `{{`, `{%` or `{#` at or after i, or n. */
static size_t next_open(const lexer *L, size_t i)
{
    for (; i + 1 < L->n; i++)
        if (L->s[i] == '{' && (L->s[i + 1] == '{' || L->s[i + 1] == '%' ||
                               L->s[i + 1] == '#'))
            return i;
    return L->n;
}

int tmpl_lex(tarena *ar, const char *src, size_t len, ttok **toks, size_t *n,
             strata_err *err)
{
    lexer L = {.ar = ar, .s = src, .n = len, .line_starting = 1, .err = err,
               .lc_line = 1};
    while (L.pos < L.n) {
        size_t o = next_open(&L, L.pos);
        if (o >= L.n) {
            push(&L, TK_TEXT, L.pos, L.s + L.pos, L.n - L.pos);
            break;
        }
        char kind = L.s[o + 1] == '{' ? 'v' : L.s[o + 1] == '%' ? 'b' : 'c';
        char sign = 0;
        if (o + 2 < L.n && (L.s[o + 2] == '-' || L.s[o + 2] == '+'))
            sign = L.s[o + 2];
        size_t rb = kind == 'b' ? raw_begin(&L, o) : 0;
        emit_text(&L, L.pos, o, sign, kind);
        int rc;
        if (rb) {
            rc = lex_raw(&L, rb);
        } else if (kind == 'c') {
            rc = lex_comment(&L, o + 2 + (sign ? 1 : 0));
        } else {
            push(&L, kind == 'v' ? TK_VAR_BEGIN : TK_BLOCK_BEGIN, o, L.s + o, 2);
            rc = lex_tag(&L, o + 2 + (sign ? 1 : 0), kind, o);
        }
        if (rc) return rc;
    }
    push(&L, TK_EOF, L.n, L.s + L.n, 0);
    *toks = L.toks;
    *n = L.ntoks;
    return 0;
}
