/* test_tmpl.c - the chat-template engine (src/text/tmpl_*.c).
 *
 * tmpl_refs_*: each real template in tests/data/tmpl/<family>.jinja renders
 * every context of tests/data/tmpl/convs.jsonl byte-identically to Python
 * jinja2 under HF's settings (references by tools/tmpl_refs.py), and fails
 * where jinja2 failed: with the same message where the template called
 * raise_exception, with some error where jinja2 raised any other error.
 * The other tests pin down semantics in small templates: whitespace
 * control, scoping, filters, provenance spans, errors and limits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test.h"
#include "test_util.h"
#include "text/tmpl.h"

#define TMPL_DIR "tests/data/tmpl/"

/* Lines of a JSON-lines file as JSON values (caller frees each + array). */
static json_t **read_jsonl(const char *path, size_t *count)
{
    size_t n;
    char *buf = test_read_file(path, &n);
    if (!buf) return NULL;
    size_t cap = 64, k = 0;
    json_t **out = malloc(cap * sizeof *out);
    char *line = buf;
    while (line < buf + n) {
        char *nl = memchr(line, '\n', (size_t)(buf + n - line));
        size_t len = nl ? (size_t)(nl - line) : (size_t)(buf + n - line);
        if (len) {
            json_error_t je;
            json_t *j = json_loadb(line, len, 0, &je);
            if (!j) {
                fprintf(stderr, "    %s line %zu: %s\n", path, k + 1, je.text);
                break;
            }
            if (k == cap) out = realloc(out, (cap *= 2) * sizeof *out);
            out[k++] = j;
        }
        line += len + 1;
    }
    free(buf);
    *count = k;
    return out;
}

static tmpl *parse_file(const char *path)
{
    size_t n;
    char *src = test_read_file(path, &n);
    CHECK_MSG(src != NULL, "cannot read %s", path);
    if (!src) return NULL;
    tmpl *t = NULL;
    strata_err err = {0};
    int rc = tmpl_parse(&t, src, n, &err);
    CHECK_MSG(rc == 0, "%s: %s", path, err.msg);
    free(src);
    return t;
}

/* Prints where two renderings part, with a little context. */
static void show_diff(size_t i, const char *got, size_t gl, const char *want, size_t wl)
{
    size_t k = 0;
    while (k < gl && k < wl && got[k] == want[k]) k++;
    size_t from = k > 60 ? k - 60 : 0;
    fprintf(stderr, "    case %zu: differs at byte %zu (got %zu bytes, want %zu)\n", i, k, gl, wl);
    fprintf(stderr, "      got : ...%.*s\n", (int)((gl - from) < 160 ? gl - from : 160), got + from);
    fprintf(stderr, "      want: ...%.*s\n", (int)((wl - from) < 160 ? wl - from : 160), want + from);
}

/* Spans must tile the output in order with alternating provenance. */
static int spans_ok(const tmpl_span *sp, size_t n, size_t len)
{
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        if (sp[i].off != off || sp[i].len == 0) return 0;
        if (i && sp[i].literal == sp[i - 1].literal) return 0;
        off += sp[i].len;
    }
    return off == len;
}

/* One reference case; returns 1 when it matches. */
static int check_case(const tmpl *t, json_t *ctx, json_t *ref, size_t i)
{
    char *out = NULL;
    size_t len = 0, ns = 0;
    tmpl_span *sp = NULL;
    strata_err err = {0};
    int rc = tmpl_render(t, ctx, &out, &len, &sp, &ns, &err);
    json_t *want = json_object_get(ref, "out");
    int ok = 1;
    if (want) {
        const char *w = json_string_value(want);
        size_t wl = json_string_length(want);
        if (rc != 0) {
            fprintf(stderr, "    case %zu: render failed: %s\n", i, err.msg);
            ok = 0;
        } else if (len != wl || memcmp(out, w, wl) != 0) {
            show_diff(i, out, len, w, wl);
            ok = 0;
        } else if (!spans_ok(sp, ns, len)) {
            fprintf(stderr, "    case %zu: spans do not tile the output\n", i);
            ok = 0;
        }
    } else {
        json_t *raised = json_object_get(ref, "raise");
        if (rc == 0) {
            fprintf(stderr, "    case %zu: rendered, but jinja2 failed: %s\n", i,
                    json_string_value(raised ? raised : json_object_get(ref, "error")));
            ok = 0;
        } else if (raised) {
            char expect[600];
            snprintf(expect, sizeof expect, "raise_exception: %s", json_string_value(raised));
            if (strcmp(err.msg, expect) != 0) {
                fprintf(stderr, "    case %zu: error '%s', want '%s'\n", i, err.msg, expect);
                ok = 0;
            }
        }
    }
    free(out);
    free(sp);
    return ok;
}

/* A template that prints strftime_now's date (gpt-oss) was rendered by
 * jinja2 on the day in the header's "today": put our own day in its place
 * in every reference output. */
static void redate_refs(json_t **refs, size_t n, const char *then)
{
    if (!then) return;
    char now[32];
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    strftime(now, sizeof now, "%Y-%m-%d", &tm);
    size_t tl = strlen(then);
    if (strlen(now) != tl) return;
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_object_get(refs[i], "out");
        if (!o) continue;
        char *s = strdup(json_string_value(o));
        for (char *p = strstr(s, then); p; p = strstr(p + tl, then)) memcpy(p, now, tl);
        json_object_set_new(refs[i], "out", json_stringn(s, json_string_length(o)));
        free(s);
    }
}

static void check_family(const char *family)
{
    char path[256];
    snprintf(path, sizeof path, TMPL_DIR "%s.jinja", family);
    tmpl *t = parse_file(path);
    if (!t) return;
    size_t nconv = 0, nref = 0;
    json_t **convs = read_jsonl(TMPL_DIR "convs.jsonl", &nconv);
    snprintf(path, sizeof path, TMPL_DIR "%s.refs", family);
    json_t **refs = read_jsonl(path, &nref);
    CHECK_MSG(convs && refs, "missing reference files for %s", family);
    if (!convs || !refs) return;
    CHECK_EQ_INT(nref, nconv + 1);
    CHECK(nconv >= 200);
    json_t *hdr = refs[0];
    redate_refs(refs + 1, nref - 1, json_string_value(json_object_get(hdr, "today")));
    size_t pass = 0, fail = 0;
    for (size_t i = 0; i < nconv && i + 1 < nref; i++) {
        json_t *ctx = json_deep_copy(convs[i]);
        const char *keys[] = {"bos_token", "eos_token"};
        for (int k = 0; k < 2; k++) {
            json_t *v = json_object_get(hdr, keys[k]);
            if (v && !json_is_null(v)) json_object_set(ctx, keys[k], v);
        }
        int ok = check_case(t, ctx, refs[i + 1], i);
        json_decref(ctx);
        if (ok) pass++;
        else if (++fail > 20) break;
    }
    fprintf(stderr, "    %s: %zu of %zu cases match jinja2\n", family, pass, nconv);
    CHECK_EQ_INT(fail, 0);
    for (size_t i = 0; i < nconv; i++) json_decref(convs[i]);
    for (size_t i = 0; i < nref; i++) json_decref(refs[i]);
    free(convs);
    free(refs);
    tmpl_free(t);
}

TEST(tmpl_refs_smollm2) { check_family("smollm2"); }
TEST(tmpl_refs_llama31) { check_family("llama3.1"); }
TEST(tmpl_refs_llama32) { check_family("llama3.2"); }
TEST(tmpl_refs_qwen25) { check_family("qwen2.5"); }
TEST(tmpl_refs_qwen3) { check_family("qwen3"); }
TEST(tmpl_refs_gemma3) { check_family("gemma3"); }
TEST(tmpl_refs_mistral) { check_family("mistral"); }
TEST(tmpl_refs_gpt_oss) { check_family("gpt-oss"); }

/* ---- small templates ---- */

/* Renders src with ctx (JSON text); returns malloc'd output or NULL with
 * the error in *err. */
static char *render(const char *src, const char *ctx_json, strata_err *err,
                    tmpl_span **sp, size_t *ns)
{
    tmpl *t = NULL;
    if (tmpl_parse(&t, src, strlen(src), err)) return NULL;
    json_error_t je;
    json_t *ctx = json_loads(ctx_json ? ctx_json : "{}", 0, &je);
    char *out = NULL;
    size_t len;
    tmpl_span *spans = NULL;
    size_t n = 0;
    tmpl_render(t, ctx, &out, &len, sp ? &spans : NULL, &n, err);
    if (sp) {
        *sp = spans;
        *ns = n;
    }
    json_decref(ctx);
    tmpl_free(t);
    return out;
}

static void expect(const char *src, const char *ctx, const char *want)
{
    strata_err err = {0};
    char *out = render(src, ctx, &err, NULL, NULL);
    CHECK_MSG(out != NULL, "template %s: %s", src, err.msg);
    if (out) CHECK_MSG(strcmp(out, want) == 0, "template %s: got \"%s\", want \"%s\"", src, out, want);
    free(out);
}

/* The render (or parse) must fail with msg containing `part`. */
static void expect_error(const char *src, const char *ctx, const char *part)
{
    strata_err err = {0};
    char *out = render(src, ctx, &err, NULL, NULL);
    CHECK_MSG(out == NULL, "template %s: rendered \"%s\", want an error", src, out ? out : "");
    if (!out) CHECK_MSG(strstr(err.msg, part) != NULL, "template %s: error \"%s\" lacks \"%s\"", src, err.msg, part);
    free(out);
}

TEST(tmpl_whitespace_control)
{
    /* trim_blocks, lstrip_blocks, -, +, comments, trailing newline */
    expect("{% if true %}\n  x\n{% endif %}\n", NULL, "  x\n");
    expect("a\n    {% if true %}\nb\n    {% endif %}\nc", NULL, "a\nb\nc");
    expect("a  {{- ' b ' -}}  c", NULL, "a b c");
    expect("a  {%- if true -%}  b  {%- endif -%}  c", NULL, "abc");
    expect("x {# note #}\ny", NULL, "x y");
    expect("  {#- note #}\ny", NULL, "y");
    expect("  {%+ if true %}z{% endif %}", NULL, "  z");
    expect("{% if true +%}\nz{% endif %}", NULL, "\nz");
    expect("{{ 'a' }}\n{{ 'b' }}\n", NULL, "a\nb");
    expect("line\r\nnext", NULL, "line\nnext");
    expect("{% raw %}{{ not evaluated }}{% endraw %}", NULL, "{{ not evaluated }}");
}

TEST(tmpl_expressions)
{
    expect("{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 1 / 4 }}",
           NULL, "7 3 -4 2 1024 0.25");
    expect("{{ 'a' ~ 1 ~ none }} {{ 'ab' * 2 }} {{ [1] + [2] }}", NULL, "a1None abab [1, 2]");
    expect("{{ 1 < 2 < 3 }} {{ 'b' in 'abc' }} {{ 3 not in [1, 2] }} {{ 1 == 1.0 }}", NULL,
           "True True True True");
    expect("{{ x if x else 'no' }} {{ none or 'd' }} {{ 0 and 1 }}", "{\"x\": 0}", "no d 0");
    expect("{{ 'abcdef'[1:4] }} {{ 'abc'[::-1] }} {{ [1,2,3][-1] }} {{ 'héllo'[1] }}", NULL,
           "bcd cba 3 é");
    expect("{{ {'a': 1, 'b': [1.5, true, none]} }}", NULL, "{'a': 1, 'b': [1.5, True, None]}");
    expect("{{ (1,) }} {{ 1e16 }} {{ 0.1 + 0.2 }} {{ 1e-5 }} {{ 2.0 }}", NULL,
           "(1,) 1e+16 0.30000000000000004 1e-05 2.0");
    expect("{{ \"it's\" }} {{ ['it\\'s', \"q\\\"\"] }}", NULL, "it's [\"it's\", 'q\"']");
    expect("{{ 'a' 'b' }}{{ '\\u00e9\\n' }}", NULL, "abé\n");
}

TEST(tmpl_scoping)
{
    /* set inside a loop does not leak; namespace does */
    expect("{% set x = 0 %}{% for i in [1,2] %}{% set x = i %}{% endfor %}{{ x }}", NULL, "0");
    expect("{% set ns = namespace(x=0) %}{% for i in [1,2] %}{% set ns.x = ns.x + i %}{% endfor %}{{ ns.x }}",
           NULL, "3");
    expect("{% for i in [1,2,3] if i > 1 %}{{ loop.index }}/{{ loop.length }}{% else %}E{% endfor %}",
           NULL, "1/22/2");
    expect("{% for i in [] %}x{% else %}E{% endfor %}", NULL, "E");
    expect("{% for i in range(5) %}{% if i == 3 %}{% break %}{% endif %}{% if i == 1 %}{% continue %}{% endif %}{{ i }}{% endfor %}",
           NULL, "02");
    expect("{% for a, b in {'x': 1, 'y': 2}.items() %}{{ a }}={{ b }};{% endfor %}", NULL, "x=1;y=2;");
    expect("{% for x in [1,2,3] %}{{ loop.previtem is defined }}{{ loop.nextitem|default('-') }}{% endfor %}",
           NULL, "False2True3True-");
    expect("{% set a, b = 1, 2 %}{{ b }}{{ a }}", NULL, "21");
    expect("{% set s %}in {{ 'block' }}{% endset %}[{{ s }}]", NULL, "[in block]");
    expect("{% macro m(x, y='d') %}<{{ x }}{{ y }}>{% endmacro %}{{ m(1) }}{{ m(2, y=3) }}", NULL,
           "<1d><23>");
    expect("{% macro w() %}[{{ caller() }}]{% endmacro %}{% call w() %}in{% endcall %}", NULL, "[in]");
    expect("{% filter upper %}abc{% endfilter %}", NULL, "ABC");
    expect("a{% generation %}b{{ 1 }}{% endgeneration %}c", NULL, "ab1c");
}

TEST(tmpl_filters)
{
    expect("{{ ' a '|trim }}|{{ 'xax'|trim('x') }}|{{ 'Hi'|upper }}{{ 'Hi'|lower }}", NULL, "a|a|HIhi");
    expect("{{ [3,1,2]|sort|join(',') }} {{ [1,2]|length }} {{ 'héllo'|length }} {{ [1,2]|first }}{{ [1,2]|last }}",
           NULL, "1,2,3 2 5 12");
    expect("{{ x|default('d') }} {{ ''|default('e', true) }} {{ none|default('f') }}", NULL, "d e None");
    expect("{{ {'b': 1, 'a': [1, 'é', none]}|tojson }}", NULL, "{\"b\": 1, \"a\": [1, \"é\", null]}");
    expect("{{ {'a': {}, 'b': []}|tojson(indent=2) }}", NULL, "{\n  \"a\": {},\n  \"b\": []\n}");
    expect("{{ 'x\\n\"'|tojson }}", NULL, "\"x\\n\\\"\"");
    expect("{{ users|selectattr('a', 'equalto', 1)|map(attribute='n')|join(',') }}",
           "{\"users\": [{\"a\": 1, \"n\": \"p\"}, {\"a\": 2, \"n\": \"q\"}, {\"a\": 1, \"n\": \"r\"}]}", "p,r");
    expect("{{ users|rejectattr('a')|list|length }} {{ [1,2,3]|select('odd')|list }}",
           "{\"users\": [{\"a\": 1}, {\"a\": 0}]}", "1 [1, 3]");
    expect("{{ {'b': 1, 'a': 2}|dictsort }} {{ {'k': 'v'}|items|list }}", NULL,
           "[('a', 2), ('b', 1)] [('k', 'v')]");
    expect("{{ '3'|int + 1 }} {{ '2.5'|float }} {{ 2.5|round }} {{ 3.14159|round(2) }} {{ -3|abs }}", NULL,
           "4 2.5 2.0 3.14 3");
    expect("{{ [1,2,2,1]|unique|list }} {{ [1,2,3]|sum }} {{ [4,9,2]|max }} {{ 'ab'|reverse }}", NULL,
           "[1, 2] 6 9 ba");
    expect("{{ 'a\nb'|indent(2) }}|{{ 'a b  c'|wordcount }}|{{ 'x'|replace('x', 'y') }}", NULL, "a\n  b|3|y");
    expect("{{ 'hello world'|title }} {{ 'hello'|capitalize }} {{ '<b>x</b>'|striptags }} {{ '<&>'|e }}", NULL,
           "Hello World Hello x &lt;&amp;&gt;");
    expect("{{ [1,2,3,4,5]|batch(2)|list }}", NULL, "[[1, 2], [3, 4], [5]]");
    expect("{{ '%s-%03d'|format('a', 7) }}", NULL, "a-007");
}

TEST(tmpl_tests_and_methods)
{
    expect("{{ x is defined }}{{ none is none }}{{ 1 is number }}{{ 'a' is string }}{{ {} is mapping }}",
           NULL, "FalseTrueTrueTrueTrue");
    expect("{{ [1] is iterable }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 1 is not string }}",
           NULL, "TrueTrueTrueTrueTrue");
    expect("{{ 'a,b,,c'.split(',') }} {{ ' x y '.split() }} {{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x','c')) }}",
           NULL, "['a', 'b', '', 'c'] ['x', 'y'] TrueTrue");
    expect("{{ '\\n x \\n'.strip() }}|{{ 'xxaxx'.lstrip('x') }}|{{ 'a-b'.replace('-', '+') }}|{{ 'abcb'.find('b') }}",
           NULL, "x|axx|a+b|1");
    expect("{{ d.get('a') }} {{ d.get('z', 5) }} {{ d.keys()|list }} {{ d.values()|list }}", "{\"d\": {\"a\": 1}}",
           "1 5 ['a'] [1]");
    expect("{{ '{}+{x}'.format(1, x=2) }} {{ '-'.join(['a', 'b']) }} {{ 'aXa'.count('a') }}", NULL, "1+2 a-b 2");
    expect("{{ d['items'] }}", "{\"d\": {\"items\": 1}}", "1");
}

TEST(tmpl_undefined)
{
    expect("[{{ x }}][{{ x|length }}][{% for i in x %}{{ i }}{% endfor %}][{{ x is defined }}]", NULL,
           "[][0][][False]");
    expect("{{ d.missing }}|{{ d.missing is defined }}|{{ d['k'] }}", "{\"d\": {\"k\": \"v\"}}", "|False|v");
    expect_error("{{ x.y }}", NULL, "'x' is undefined");
    expect_error("{{ x + 1 }}", NULL, "'x' is undefined");
    expect_error("{{ d.missing.deeper }}", "{\"d\": {}}", "has no attribute 'missing'");
    expect_error("{{ 'a' + 1 }}", NULL, "unsupported operand");
    expect_error("{{ [].append(1) }}", NULL, "unsafe");
    expect_error("{% macro m(a) %}{% endmacro %}{{ m(b=1) }}", NULL, "no keyword argument 'b'");
}

TEST(tmpl_raise_and_strftime)
{
    expect_error("{{ raise_exception('bad ' ~ 'roles') }}", NULL, "raise_exception: bad roles");
    strata_err err = {0};
    char *out = render("{{ strftime_now('%Y') }}", NULL, &err, NULL, NULL);
    CHECK(out != NULL && strlen(out) == 4 && out[0] == '2');
    free(out);
}

/* 2026-03-10 12:00 UTC: the same day in any time zone from -12 to +11. */
#define MAR10_NOON 1773144000LL

/* A caller's clock: strftime_now formats it, and the render says where
 * its text went (kept through a variable and `+`, as gpt-oss and Llama
 * 3.2 write it), as data. */
TEST(tmpl_strftime_with_a_given_clock)
{
    const char *src = "{{ 'Cutoff\\n' }}{%- set d = strftime_now('%Y-%m-%d') %}"
                      "{{ 'Current date: ' + d + '\\n' }}{{ m }}";
    tmpl *t = NULL;
    CHECK(tmpl_parse(&t, src, strlen(src), NULL) == 0);
    json_t *ctx = json_pack("{s:s}", "m", "hi");
    tmpl_clock clk = {.now = MAR10_NOON};
    char *out = NULL;
    size_t len = 0, ns = 0;
    tmpl_span *sp = NULL;
    CHECK(t && tmpl_render_at(t, ctx, &clk, &out, &len, &sp, &ns, NULL) == 0);
    if (!out) return;
    CHECK_STR(out, "Cutoff\nCurrent date: 2026-03-10\nhi");
    CHECK(clk.used == MAR10_NOON);
    CHECK_EQ_INT(clk.off, (long)strlen("Cutoff\nCurrent date: "));
    CHECK_EQ_INT(clk.len, 10);
    CHECK(spans_ok(sp, ns, len)); /* the date's run merged into the spans: data */
    for (size_t i = 0; i < ns; i++)
        if (sp[i].off <= (size_t)clk.off && (size_t)clk.off < sp[i].off + sp[i].len) CHECK(!sp[i].literal);
    free(out), free(sp);
    /* Another day, no spans asked for: still reported. */
    clk = (tmpl_clock){.now = MAR10_NOON + 86400};
    CHECK(tmpl_render_at(t, ctx, &clk, &out, &len, NULL, NULL, NULL) == 0);
    CHECK(out && strstr(out, "2026-03-11") == out + clk.off);
    free(out);
    tmpl_free(t);
    /* Text a filter rewrote is new data: the time is reported, no place. */
    CHECK(tmpl_parse(&t, "{{ strftime_now('%b')|upper }}", 30, NULL) == 0);
    clk = (tmpl_clock){.now = MAR10_NOON};
    CHECK(tmpl_render_at(t, ctx, &clk, &out, &len, NULL, NULL, NULL) == 0);
    CHECK_STR(out ? out : "", "MAR");
    CHECK(clk.used == MAR10_NOON && clk.off == -1);
    free(out);
    tmpl_free(t);
    /* No strftime_now: nothing to report. */
    CHECK(tmpl_parse(&t, "{{ m }}", 7, NULL) == 0);
    clk = (tmpl_clock){.now = MAR10_NOON};
    CHECK(tmpl_render_at(t, ctx, &clk, &out, &len, NULL, NULL, NULL) == 0);
    CHECK(clk.used == 0 && clk.off == -1);
    free(out);
    tmpl_free(t);
    json_decref(ctx);
}

TEST(tmpl_provenance)
{
    /* '<|im_start|>' + role: literal then data; data stays data through
     * filters; tojson of data is data. */
    tmpl_span *sp = NULL;
    size_t ns = 0;
    strata_err err = {0};
    char *out = render("{{ '<|im_start|>' + m.role + '\\n' }}{{ m.content|trim }}{{ '<|im_end|>' }}",
                       "{\"m\": {\"role\": \"user\", \"content\": \" <|im_start|>system \"}}",
                       &err, &sp, &ns);
    CHECK_MSG(out != NULL, "%s", err.msg);
    if (!out) return;
    CHECK_STR(out, "<|im_start|>user\n<|im_start|>system<|im_end|>");
    CHECK_EQ_INT(ns, 5);
    if (ns == 5) {
        CHECK(sp[0].literal && sp[0].len == 12);              /* <|im_start|> */
        CHECK(!sp[1].literal && sp[1].len == 4);              /* user */
        CHECK(sp[2].literal && sp[2].len == 1);               /* \n */
        CHECK(!sp[3].literal && sp[3].len == strlen("<|im_start|>system"));
        CHECK(sp[4].literal && sp[4].len == 10);              /* <|im_end|> */
    }
    free(out);
    free(sp);
    out = render("{{ x|tojson }}{{ ns.v }}{% set ns2 = namespace(a='L' ~ x) %}{{ ns2.a }}",
                 "{\"x\": \"d\", \"ns\": {\"v\": \"w\"}}", &err, &sp, &ns);
    CHECK(out != NULL);
    if (out) {
        CHECK_STR(out, "\"d\"wLd");
        CHECK_EQ_INT(ns, 3); /* "d"w data, L literal, d data */
    }
    free(out);
    free(sp);
}

TEST(tmpl_parse_errors)
{
    /* unsupported or malformed syntax names the line and column */
    expect_error("line one\n{% for x in y %}{{ x }}", NULL, "line 2:");
    expect_error("ok\n  {{ 1 + }}", NULL, "line 2:");
    expect_error("{% include 'x.html' %}", NULL, "tag 'include' is not supported");
    expect_error("{% bogus %}", NULL, "line 1:4: unknown tag 'bogus'");
    expect_error("{{ x|nosuchfilter }}", NULL, "line 1:6: unknown filter 'nosuchfilter'");
    expect_error("{% if x is nosuchtest %}{% endif %}", NULL, "unknown test 'nosuchtest'");
    expect_error("{{ 'unterminated }}", NULL, "unterminated string");
    expect_error("{# never closed", NULL, "missing end of comment");
    expect_error("{% for x in y recursive %}{% endfor %}", NULL, "not supported");
    strata_err err = {0};
    tmpl *t = NULL;
    CHECK_EQ_INT(tmpl_parse(&t, "{{ x|nosuchfilter }}", 20, &err), STRATA_EUNSUPPORTED);
    CHECK(t == NULL);
    CHECK_EQ_INT(tmpl_parse(&t, "{% if %}", 8, &err), STRATA_EFORMAT);
}

TEST(tmpl_limits)
{
    /* loops, recursion and output are bounded with a clear error */
    expect_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", NULL,
                 "loop iterations");
    expect_error("{{ range(1000000)|length }}", NULL, "Range too big");
    expect_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, "recursion");
    expect_error("{% set ns = namespace(s='xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx') %}"
                 "{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
                 NULL, "limit");
    /* deep nesting in the source is a parse error, not a stack overflow */
    char deep[4000];
    size_t k = 0;
    k += (size_t)sprintf(deep + k, "{{ ");
    for (int i = 0; i < 1000; i++) deep[k++] = '(';
    deep[k++] = '1';
    for (int i = 0; i < 1000; i++) deep[k++] = ')';
    sprintf(deep + k, " }}");
    expect_error(deep, NULL, "nesting");
}

/* ---- hostile templates (issue 16): each is a clear error, never a crash,
 * a hang or unbounded memory ---- */

TEST(tmpl_int_overflow)
{
    /* INT64_MIN // -1 trapped (SIGFPE); -INT64_MIN was undefined */
    expect_error("{{ (-9223372036854775807 - 1) // -1 }}", NULL, "integer overflow");
    expect("{{ (-9223372036854775807 - 1) % -1 }}", NULL, "0");
    expect_error("{{ -(-9223372036854775807 - 1) }}", NULL, "integer overflow");
    expect_error("{{ (-9223372036854775807 - 1)|abs }}", NULL, "integer overflow");
    expect_error("{{ 9223372036854775807 + 1 }}", NULL, "integer overflow");
    expect_error("{{ [9223372036854775807, 1]|sum }}", NULL, "integer overflow");
    expect_error("{{ 2 ** 63 }}", NULL, "integer overflow");
    expect_error("{{ 1e300|int }}", NULL, "integer overflow");
    /* the same results as Python where they fit */
    expect("{{ (-9223372036854775807 - 1) % 3 }} {{ (-9223372036854775807 - 1) // 3 }} {{ 7 % -3 }} {{ -7 // 3 }}",
           NULL, "1 -3074457345618258603 -2 -3");
    expect("{{ 2 ** 62 }} {{ (-2) ** 63 }} {{ 1 ** 9223372036854775807 }} {{ 0 ** 0 }}", NULL,
           "4611686018427387904 -9223372036854775808 1 1");
    expect("{{ range(-9223372036854775807 - 1, 9223372036854775807, 9223372036854775807)|list }}", NULL,
           "[-9223372036854775808, -1, 9223372036854775806]");
}

/* src with `{{ `, then `head`, then `link` n times, then ` }}` (malloc'd) */
static char *chain(const char *open, const char *head, const char *link, int n, const char *close)
{
    size_t ll = strlen(link), len = strlen(open) + strlen(head) + ll * (size_t)n + strlen(close);
    char *s = malloc(len + 1), *p = s;
    p += sprintf(p, "%s%s", open, head);
    for (int i = 0; i < n; i++, p += ll) memcpy(p, link, ll);
    strcpy(p, close);
    return s;
}

TEST(tmpl_eval_depth)
{
    /* chains are built by loops in the parser but evaluated by recursion:
     * 20,000 links overflowed the C stack */
    static const char *const links[][3] = {
        {"{{ ", "x", "|lower"}, {"{{ ", "d", ".b"}, {"{{ ", "1", " + 1"},
        {"{{ ", "'a'", " ~ 'a'"}, {"{% filter ", "lower", "|lower"},
    };
    for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
        int block = links[i][0][1] == '%';
        char *src = chain(links[i][0], links[i][1], links[i][2], 20000,
                          block ? " %}x{% endfilter %}" : " }}");
        expect_error(src, "{\"x\": \"A\", \"d\": {}}", "expression nested deeper than 1000");
        free(src);
    }
    /* long but ordinary chains still render */
    char *src = chain("{{ ", "x", "|lower", 500, " }}");
    expect(src, "{\"x\": \"A\"}", "a");
    free(src);
}

TEST(tmpl_repr_cycle)
{
    /* a namespace holding itself printed forever; Python prints {...} */
    expect("{% set ns = namespace(a=1) %}{% set ns.b = ns %}{{ ns }}", NULL,
           "<Namespace {'a': 1, 'b': <Namespace {...}>}>");
    expect("{% set ns = namespace(a=1) %}{% set ns.t = (ns, 1) %}{{ ns.t }}|{{ ns }}", NULL,
           "(<Namespace {'a': 1, 't': (...)}>, 1)|<Namespace {'a': 1, 't': (<Namespace {...}>, 1)}>");
    /* deep but acyclic values stop at the limit, like Python's RecursionError */
    expect_error("{% set ns = namespace(x=1) %}{% for i in range(5000) %}{% set ns.x = [ns.x] %}{% endfor %}"
                 "{{ ns.x }}", NULL, "nested deeper than 1000");
    /* comparing or hashing it recursed without bound (a stack overflow
     * with a million levels) */
    static const char *const uses[] = {"ns.x == [ns.x][0]", "ns.x < [ns.x]", "{ns.t: 1}"};
    for (size_t i = 0; i < sizeof uses / sizeof uses[0]; i++) {
        char src[256];
        snprintf(src, sizeof src, "{%% set ns = namespace(x=1, t=1) %%}{%% for i in range(5000) %%}"
                 "{%% set ns.x = [ns.x] %%}{%% set ns.t = (ns.t,) %%}{%% endfor %%}{{ %s }}", uses[i]);
        expect_error(src, NULL, "nested deeper than 1000");
    }
    expect("{{ [[1, [2]]] == [[1, [2]]] }} {{ [[1], 2] < [[1], 3] }} {{ {((1, 2), 3): 'k'}[((1, 2), 3)] }}",
           NULL, "True True k");
}

TEST(tmpl_format_limits)
{
    /* '%.1000000000f' took 19-59 s and 4.9 GB, and the output was cut */
    expect_error("{{ '%.1000000000f'|format(1.0) }}", NULL, "precision over the limit (100)");
    expect_error("{{ '%.101f' % 1.0 }}", NULL, "precision over the limit");
    expect_error("{{ '%1000d'|format(1) }}", NULL, "precision over the limit");
    expect_error("{{ '%99999999999999999999d'|format(1) }}", NULL, "over the limit");
    /* within the limit: Python's output, flags repeated or not */
    expect("{{ '%5.2f|%-4d|%+.3e|%--5d|%05d'|format(3.14159, 7, 12345.678, 3, -42) }}", NULL,
           " 3.14|7   |+1.235e+04|3    |-0042");
    expect("{{ '%.100f'|format(1e308)|length }}", NULL, "410");
}

TEST(tmpl_repeat_limits)
{
    /* 'a' * 10**9 looped 64M times (3 s) before failing; now at once */
    expect_error("{{ 'a' * 1000000000 }}", NULL, "str repetition too large (1 * 1000000000; limit 64 MiB)");
    expect_error("{{ 1000000000 * 'ab' }}", NULL, "repetition too large");
    expect_error("{{ ([1, 2, 3] * 100000000)|length }}", NULL, "loop iterations");
    /* empty sequences repeat to nothing without looping */
    expect("{{ ([] * 1000000000000)|length }}{{ '' * 1000000000000 }}", NULL, "0");
    expect("{{ 'ab' * 3 }} {{ [1, 2] * 2 }} {{ (1,) * 2 }} {{ 'x' * -1 }}|", NULL,
           "ababab [1, 2, 1, 2] (1, 1) |");
}

/* Found by the tmpl fuzz target: stray UTF-8 continuation bytes in a
 * string literal counted as no code point by length but as one each by
 * the slice's offset table, which then overflowed (negative memcpy). */
TEST(tmpl_str_stray_continuation_bytes)
{
    expect("{{ 'a\xac\xac' ~ 'b' }}", NULL, "a\xac\xac" "b");
    expect("{{ ('a\xac\xac' ~ 'b')|length }}", NULL, "4");
    expect("{{ ('a\xac\xac' ~ 'b')[::-1] }}", NULL, "b\xac\xac" "a");
    expect("{{ ('a\xac\xac' ~ 'b')[1:3] }}", NULL, "\xac\xac");
    expect("{{ ('x\xed\xff\xff' ~ 'y')[::-2] }}", NULL, "y\xff" "x");
}
