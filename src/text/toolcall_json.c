/* toolcall_json.c - the incremental JSON scanner and byte helpers behind
 * the tool-call parser (see toolcall_int.h for why it exists).
 *
 * The scanner is a byte-at-a-time state machine over one JSON document.
 * It validates structure and token spelling and reports keys and value
 * spans through callbacks; it builds no tree and never looks ahead, so a
 * value's end is reported on the byte that ends it (for numbers and
 * literals: the delimiter after them). It does not check UTF-8. */
#include "text/toolcall_int.h"

#include <stdlib.h>
#include <string.h>

#include "base/mem.h"

/* ---- growable buffer ---- */

void tc_buf_add(tc_buf *b, const void *s, size_t n) {
    XGROW(b->p, b->cap, b->len + n + 1, 64);
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void tc_buf_addc(tc_buf *b, char c) { tc_buf_add(b, &c, 1); }

void tc_buf_clear(tc_buf *b) {
    b->len = 0;
    if (b->p) b->p[0] = '\0';
}

void tc_buf_free(tc_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* ---- scanner ---- */

enum {
    JS_VALUE,     /* a value must come */
    JS_ARR_FIRST, /* after '[': a value or ']' */
    JS_OBJ_FIRST, /* after '{': a key or '}' */
    JS_KEY,       /* after ',' in an object: a key */
    JS_COLON,     /* after a key */
    JS_AFTER,     /* after a value inside a container: ',' or the close */
    JS_STR,
    JS_ESC,
    JS_HEX,
    JS_NUM,
    JS_LIT,
    JS_DONE,
};

static int is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

void tc_jscan_reset(tc_jscan *js, const tc_jscan_cb *cb) {
    tc_buf doc = js->doc;
    memset(js, 0, sizeof *js);
    js->doc = doc;
    tc_buf_clear(&js->doc);
    js->cb = *cb;
    js->st = JS_VALUE;
}

void tc_jscan_free(tc_jscan *js) { tc_buf_free(&js->doc); }

static int fail(tc_jscan *js, const char *why) {
    js->why = why;
    return TC_JSCAN_ERR;
}

/* JSON number grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static int number_ok(const char *s, size_t n) {
    size_t i = 0;
    if (i < n && s[i] == '-') i++;
    if (i >= n || s[i] < '0' || s[i] > '9') return 0;
    if (s[i] == '0') i++;
    else while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    if (i < n && s[i] == '.') {
        size_t d = ++i;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
        if (i == d) return 0;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        size_t d = i;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
        if (i == d) return 0;
    }
    return i == n;
}

static int literal_ok(const char *s, size_t n) {
    return (n == 4 && !memcmp(s, "true", 4)) || (n == 5 && !memcmp(s, "false", 5)) ||
           (n == 4 && !memcmp(s, "null", 4));
}

/* A value (of any kind) ended at `end`: report it and move on. */
static int value_end(tc_jscan *js, size_t end) {
    int d = js->depth;
    int rc = js->cb.end ? js->cb.end(js->cb.ctx, d, js->vstart[d], end) : 0;
    if (rc) return rc;
    js->st = d == 0 ? JS_DONE : JS_AFTER;
    return d == 0 ? TC_JSCAN_DONE : 0;
}

static int value_begin(tc_jscan *js, unsigned char c, size_t at) {
    int d = js->depth;
    if (d == 0 && c != '{' && c != '[') return fail(js, "expected an object or an array");
    js->vstart[d] = at;
    int rc = js->cb.begin ? js->cb.begin(js->cb.ctx, d, (char)c, at) : 0;
    if (rc) return rc;
    js->tok = at;
    if (c == '{' || c == '[') {
        if (d >= TC_JSON_MAX_DEPTH) return fail(js, "nested too deeply");
        js->stack[++js->depth] = (char)c;
        js->st = c == '{' ? JS_OBJ_FIRST : JS_ARR_FIRST;
    } else if (c == '"') {
        js->st = JS_STR;
        js->in_key = 0;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        js->st = JS_NUM;
    } else if (c >= 'a' && c <= 'z') {
        js->st = JS_LIT;
    } else {
        return fail(js, "unexpected character where a value should be");
    }
    return 0;
}

static int close_container(tc_jscan *js, unsigned char c, size_t at) {
    char open = c == '}' ? '{' : '[';
    if (js->stack[js->depth] != open) return fail(js, "mismatched bracket");
    js->depth--;
    return value_end(js, at + 1);
}

static int string_end(tc_jscan *js, size_t at) {
    if (!js->in_key) return value_end(js, at + 1);
    int d = js->depth;
    js->key_s[d] = js->tok;
    js->key_e[d] = at + 1;
    js->st = JS_COLON;
    return js->cb.key ? js->cb.key(js->cb.ctx, d, js->tok, at + 1) : 0;
}

/* States between tokens: whitespace is skipped, punctuation moves on. */
static int structural(tc_jscan *js, unsigned char c, size_t at) {
    if (is_ws(c)) return 0;
    switch (js->st) {
    case JS_VALUE:
        return value_begin(js, c, at);
    case JS_ARR_FIRST:
        return c == ']' ? close_container(js, c, at) : value_begin(js, c, at);
    case JS_OBJ_FIRST:
    case JS_KEY:
        if (c == '}' && js->st == JS_OBJ_FIRST) return close_container(js, c, at);
        if (c != '"') return fail(js, "expected a key string");
        js->st = JS_STR;
        js->in_key = 1;
        js->tok = at;
        return 0;
    case JS_COLON:
        if (c != ':') return fail(js, "expected ':' after a key");
        js->st = JS_VALUE;
        return 0;
    case JS_AFTER:
        if (c == ',') {
            js->st = js->stack[js->depth] == '{' ? JS_KEY : JS_VALUE;
            return 0;
        }
        if (c == '}' || c == ']') return close_container(js, c, at);
        return fail(js, "expected ',' or a closing bracket");
    default:
        return fail(js, "text after the end of the JSON value");
    }
}

static int is_hex(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* A number or literal ends at the first byte that cannot belong to it;
 * that byte is then read again as structure. */
static int token_end(tc_jscan *js, unsigned char c, size_t at) {
    const char *s = js->doc.p + js->tok;
    size_t n = at - js->tok;
    if (js->st == JS_NUM ? !number_ok(s, n) : !literal_ok(s, n))
        return fail(js, js->st == JS_NUM ? "bad number" : "bad literal (true, false, null)");
    int rc = value_end(js, at);
    if (rc) return rc == TC_JSCAN_DONE ? fail(js, "root value is not a container") : rc;
    return structural(js, c, at);
}

int tc_jscan_byte(tc_jscan *js, unsigned char c) {
    size_t at = js->doc.len;
    tc_buf_addc(&js->doc, (char)c);
    switch (js->st) {
    case JS_STR:
        if (c == '"') return string_end(js, at);
        if (c == '\\') js->st = JS_ESC;
        return 0;
    case JS_ESC:
        if (c == 'u') {
            js->st = JS_HEX;
            js->hex_left = 4;
            return 0;
        }
        if (!strchr("\"\\/bfnrt", c) || c == 0) return fail(js, "bad escape in a string");
        js->st = JS_STR;
        return 0;
    case JS_HEX:
        if (!is_hex(c)) return fail(js, "bad \\u escape in a string");
        if (--js->hex_left == 0) js->st = JS_STR;
        return 0;
    case JS_NUM:
        if (strchr("0123456789+-.eE", c) && c) return 0;
        return token_end(js, c, at);
    case JS_LIT:
        if (c >= 'a' && c <= 'z') return 0;
        return token_end(js, c, at);
    default:
        return structural(js, c, at);
    }
}

int tc_jscan_insignificant(const tc_jscan *js, unsigned char c) {
    return is_ws(c) && !tc_jscan_in_string(js) && js->st != JS_ESC && js->st != JS_HEX;
}

int tc_jscan_in_string(const tc_jscan *js) { return js->st == JS_STR; }

int tc_jscan_key_is(const tc_jscan *js, int depth, const char *name) {
    size_t n = strlen(name);
    if (js->key_e[depth] - js->key_s[depth] != n + 2) return 0;
    return !memcmp(js->doc.p + js->key_s[depth] + 1, name, n);
}

/* ---- byte helpers ---- */

void tc_json_put(tc_buf *out, unsigned char c, int in_string) {
    static const char hex[] = "0123456789abcdef";
    if (!in_string || c >= 0x20) {
        tc_buf_addc(out, (char)c);
        return;
    }
    /* Models often write a raw newline or tab inside a string (code in
     * arguments); JSON forbids that, so store the escape instead. */
    const char *short_esc = c == '\n' ? "\\n" : c == '\t' ? "\\t" : c == '\r' ? "\\r"
                          : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
    if (short_esc) {
        tc_buf_add(out, short_esc, 2);
        return;
    }
    char u[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
    tc_buf_add(out, u, 6);
}

void tc_json_compact(const char *s, size_t n, tc_buf *out) {
    int in_str = 0, esc = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!in_str && is_ws(c)) continue;
        tc_json_put(out, c, in_str && !esc);
        if (esc) esc = 0;
        else if (in_str && c == '\\') esc = 1;
        else if (c == '"') in_str = !in_str;
    }
}

static void put_utf8(tc_buf *out, unsigned cp) {
    char b[4];
    size_t n;
    if (cp < 0x80) { b[0] = (char)cp; n = 1; }
    else if (cp < 0x800) { b[0] = (char)(0xC0 | cp >> 6); b[1] = (char)(0x80 | (cp & 63)); n = 2; }
    else if (cp < 0x10000) {
        b[0] = (char)(0xE0 | cp >> 12); b[1] = (char)(0x80 | ((cp >> 6) & 63));
        b[2] = (char)(0x80 | (cp & 63)); n = 3;
    } else {
        b[0] = (char)(0xF0 | cp >> 18); b[1] = (char)(0x80 | ((cp >> 12) & 63));
        b[2] = (char)(0x80 | ((cp >> 6) & 63)); b[3] = (char)(0x80 | (cp & 63)); n = 4;
    }
    tc_buf_add(out, b, n);
}

/* Four hex digits at s (caller checked there are four), or -1. */
static long hex4(const char *s) {
    long v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!is_hex(c)) return -1;
        v = v * 16 + (c <= '9' ? c - '0' : (c | 32) - 'a' + 10);
    }
    return v;
}

/* 1 if the n bytes at s could still grow into "\uXXXX". */
static int could_be_u_escape(const char *s, size_t n) {
    for (size_t i = 0; i < n && i < 6; i++) {
        unsigned char c = (unsigned char)s[i];
        if (i == 0 ? c != '\\' : i == 1 ? c != 'u' : !is_hex(c)) return 0;
    }
    return 1;
}

/* Decodes the \u escape at s (n bytes left): returns bytes consumed, 0 if
 * more input is needed, -1 if bad. A high surrogate takes its low half;
 * a lone half becomes U+FFFD rather than failing the whole text. */
static long unescape_u(const char *s, size_t n, int final, tc_buf *out) {
    if (n < 6) return final ? -1 : 0;
    long cp = hex4(s + 2);
    if (cp < 0) return -1;
    if (cp >= 0xD800 && cp < 0xDC00) {
        if (n < 12 && !final && could_be_u_escape(s + 6, n - 6)) return 0;
        long lo = n >= 12 && s[6] == '\\' && s[7] == 'u' ? hex4(s + 8) : -1;
        if (lo >= 0xDC00 && lo < 0xE000) {
            put_utf8(out, 0x10000 + (((unsigned)cp - 0xD800) << 10) + ((unsigned)lo - 0xDC00));
            return 12;
        }
        cp = 0xFFFD;
    } else if (cp >= 0xDC00 && cp < 0xE000) {
        cp = 0xFFFD;
    }
    put_utf8(out, (unsigned)cp);
    return 6;
}

/* The byte a one-letter escape stands for, or -1. */
static int simple_escape(char c) {
    switch (c) {
    case '"': return '"';
    case '\\': return '\\';
    case '/': return '/';
    case 'b': return '\b';
    case 'f': return '\f';
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    default: return -1;
    }
}

int tc_json_unescape(const char *s, size_t n, int final, tc_buf *out, size_t *used) {
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && s[j] != '\\') j++;
        tc_buf_add(out, s + i, j - i);
        i = j;
        if (i >= n) break;
        if (i + 1 >= n) {
            if (final) return -1;
            break;
        }
        if (s[i + 1] == 'u') {
            long k = unescape_u(s + i, n - i, final, out);
            if (k < 0) return -1;
            if (k == 0) break;
            i += (size_t)k;
            continue;
        }
        int e = simple_escape(s[i + 1]);
        if (e < 0) return -1;
        tc_buf_addc(out, (char)e);
        i += 2;
    }
    *used = i;
    return 0;
}

/* ---- following one string member ------------------------------------------------ */

enum { MS_SEEK, MS_BODY, MS_ENDED, MS_DONE, MS_LOST };

static int ms_begin(void *ctx, int depth, char first, size_t at) {
    tc_member_stream *ms = ctx;
    if (depth != 1 || !tc_jscan_key_is(&ms->js, 1, ms->key)) return 0;
    if (first != '"' || ms->state != MS_SEEK) ms->state = MS_LOST;
    else ms->state = MS_BODY, ms->body = ms->used = at + 1;
    return 0;
}

static int ms_end(void *ctx, int depth, size_t start, size_t end) {
    tc_member_stream *ms = ctx;
    if (depth == 1 && ms->state == MS_BODY && start + 1 == ms->body) ms->state = MS_ENDED, ms->end = end - 1;
    return 0;
}

void tc_member_stream_init(tc_member_stream *ms, const char *key) {
    memset(ms, 0, sizeof *ms);
    ms->key = key;
    tc_jscan_cb cb = {.ctx = ms, .begin = ms_begin, .end = ms_end};
    tc_jscan_reset(&ms->js, &cb);
}

void tc_member_stream_free(tc_member_stream *ms) { tc_jscan_free(&ms->js); }

int tc_member_stream_next(tc_member_stream *ms, const char *s, size_t n, tc_buf *out) {
    for (size_t i = ms->js.doc.len; i < n && ms->state != MS_LOST; i++)
        if (tc_jscan_byte(&ms->js, (unsigned char)s[i]) == TC_JSCAN_ERR) ms->state = MS_LOST;
    if (ms->state == MS_LOST) return -1;
    if (ms->state != MS_BODY && ms->state != MS_ENDED) return 0;
    int final = ms->state == MS_ENDED;
    size_t to = final ? ms->end : ms->js.doc.len, used, had = out->len;
    if (tc_json_unescape(ms->js.doc.p + ms->used, to - ms->used, final, out, &used) < 0) {
        out->len = had; /* what a bad escape left half written */
        if (out->p) out->p[had] = '\0';
        ms->state = MS_LOST;
        return -1;
    }
    ms->used += used;
    if (final) ms->state = MS_DONE;
    return 0;
}

/* ---- completing a cut object ------------------------------------------------------ */

/* Where closing is valid: right after a container opened, or after a
 * member or element that ended (the scanner reports both). */
static int note_begin(void *ctx, int depth, char first, size_t at) {
    if (first == '{' || first == '[') *(size_t *)ctx = at + 1;
    return 0;
}

static int note_end(void *ctx, int depth, size_t start, size_t end) {
    if (depth >= 1) *(size_t *)ctx = end;
    return 0;
}

/* Scans s[0..n) into js: -1 unless it is the start of one JSON document;
 * *cut is the last place where closing is valid. */
static int scan_partial(const char *s, size_t n, tc_jscan *js, size_t *cut) {
    tc_jscan_cb cb = {.ctx = cut, .begin = note_begin, .end = note_end};
    tc_jscan_reset(js, &cb);
    *cut = 0;
    for (size_t i = 0; i < n; i++) {
        int rc = tc_jscan_byte(js, (unsigned char)s[i]);
        if (rc == TC_JSCAN_ERR || (rc == TC_JSCAN_DONE && i + 1 < n)) return -1;
    }
    return 0;
}

/* s[0..n) closed: an open string value gets its quote, then every open
 * container its bracket. 1 when that is a whole JSON document. */
static int close_here(const char *s, size_t n, tc_buf *out) {
    tc_jscan js = {0};
    size_t cut;
    tc_buf_clear(out);
    int ok = scan_partial(s, n, &js, &cut) == 0 && js.st != JS_ESC && js.st != JS_HEX && !(js.st == JS_STR && js.in_key);
    tc_buf_add(out, s, n);
    if (ok && js.st == JS_STR) tc_buf_addc(out, '"');
    for (int d = js.depth; ok && d >= 1; d--) tc_buf_addc(out, js.stack[d] == '{' ? '}' : ']');
    tc_jscan_free(&js);
    if (!ok) return 0;
    /* The result must scan whole: a cut number or literal ("tr") fails here. */
    tc_jscan check = {0};
    size_t unused;
    ok = scan_partial(out->p, out->len, &check, &unused) == 0 && check.st == JS_DONE;
    tc_jscan_free(&check);
    return ok;
}

char *tc_json_close_partial(const char *s, size_t n) {
    tc_jscan js = {0};
    size_t cut;
    int rc = scan_partial(s, n, &js, &cut);
    int object = rc == 0 && js.depth >= 1 ? js.stack[1] == '{' : rc == 0 && js.st == JS_DONE && n && *s == '{';
    tc_jscan_free(&js);
    if (!object) return NULL;
    tc_buf out = {0};
    if (close_here(s, n, &out) || close_here(s, cut, &out)) return out.p; /* as written, else at the last whole member */
    tc_buf_free(&out);
    return NULL;
}
