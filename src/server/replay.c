/* replay.c - text hash -> generated token ids, bounded LRU (replay.h),
 * the keys replies are remembered by, and rendering a conversation with
 * remembered replies put back as their exact tokens.
 * A linear table is enough at the default size: lookups happen once per
 * assistant message per request, far from the per-token hot path. */
#include "server/replay.h"

#include <openssl/sha.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/fs.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/strbuf.h"
#include "server/server.h"
#include "text/jsonload.h"

typedef struct entry {
    uint8_t key[32];
    int32_t *ids;
    size_t n;
    uint64_t used; /* logical clock of the last put/get */
} entry;

struct replay_store {
    pthread_mutex_t mu;
    entry *e;
    size_t cap, len;
    uint64_t clock;
};

replay_store *replay_new(size_t max_entries) {
    replay_store *r = xcalloc(1, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
    r->cap = max_entries ? max_entries : 1;
    r->e = xcalloc(r->cap, sizeof(entry));
    return r;
}

void replay_free(replay_store *r) {
    if (!r) return;
    for (size_t i = 0; i < r->len; i++) free(r->e[i].ids);
    free(r->e);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

static entry *find(replay_store *r, const uint8_t key[32]) {
    for (size_t i = 0; i < r->len; i++)
        if (memcmp(r->e[i].key, key, 32) == 0) return &r->e[i];
    return NULL;
}

/* A free entry, evicting the least recently used when full. */
static entry *take_slot(replay_store *r) {
    if (r->len < r->cap) return &r->e[r->len++];
    entry *old = &r->e[0];
    for (size_t i = 1; i < r->len; i++)
        if (r->e[i].used < old->used) old = &r->e[i];
    free(old->ids);
    return old;
}

/* An entry's key: its namespace and text, hashed together. */
static void key_of(const cache_hash *ns, const char *text, size_t len, uint8_t key[32]) {
    uint8_t *buf = xmalloc(32 + len);
    memcpy(buf, ns->b, 32);
    memcpy(buf + 32, text, len);
    SHA256(buf, 32 + len, key);
    free(buf);
}

/* A debug line naming a reply's text by the first bytes of its SHA-256
 * (the same text, the same tag: a lookup that misses can be matched
 * against what was remembered) and its start. */
static void log_text(const char *what, const char *text, size_t len, size_t n_ids) {
    if (g_log_level > LOG_DEBUG) return;
    uint8_t d[32];
    char start[49];
    size_t k = 0;
    SHA256((const uint8_t *)text, len, d);
    for (; k < len && k < sizeof start - 1; k++) start[k] = (unsigned char)text[k] < 32 ? '.' : text[k];
    start[k] = 0;
    log_debug("replay: %s: %zu bytes (%zu tokens), text %02x%02x%02x%02x \"%s\"", what, len, n_ids, d[0], d[1], d[2],
              d[3], start);
}

void replay_put(replay_store *r, const cache_hash *ns, const char *text, size_t len, const int32_t *ids, size_t n) {
    if (!r || n == 0) return;
    log_text("remembered", text, len, n);
    uint8_t key[32];
    key_of(ns, text, len, key);
    pthread_mutex_lock(&r->mu);
    entry *e = find(r, key);
    if (!e) {
        e = take_slot(r);
        memcpy(e->key, key, 32);
    } else {
        free(e->ids);
    }
    e->ids = xmalloc(n * sizeof(int32_t));
    memcpy(e->ids, ids, n * sizeof(int32_t));
    e->n = n;
    e->used = ++r->clock;
    pthread_mutex_unlock(&r->mu);
}

int32_t *replay_get(replay_store *r, const cache_hash *ns, const char *text, size_t len, size_t *n) {
    if (!r || len == 0) return NULL;
    uint8_t key[32];
    key_of(ns, text, len, key);
    int32_t *out = NULL;
    pthread_mutex_lock(&r->mu);
    entry *e = find(r, key);
    if (e) {
        e->used = ++r->clock;
        out = xmalloc(e->n * sizeof(int32_t));
        memcpy(out, e->ids, e->n * sizeof(int32_t));
        *n = e->n;
    }
    pthread_mutex_unlock(&r->mu);
    return out;
}

/* ---- persistence -------------------------------------------------------- */

typedef struct wbuf {
    uint8_t *p;
    size_t len, cap;
} wbuf;

static void put(wbuf *b, const void *data, size_t n) {
    XGROW(b->p, b->cap, b->len + n, 256);
    memcpy(b->p + b->len, data, n);
    b->len += n;
}

int replay_save(replay_store *r, const char *path, const uint8_t model_fp[32]) {
    wbuf b = {0};
    pthread_mutex_lock(&r->mu);
    uint64_t count = r->len;
    put(&b, &count, 8);
    for (size_t i = 0; i < r->len; i++) {
        uint64_t n = r->e[i].n;
        put(&b, r->e[i].key, 32);
        put(&b, &n, 8);
        put(&b, r->e[i].ids, n * sizeof(int32_t));
    }
    pthread_mutex_unlock(&r->mu);
    int rc = fs_save_framed(path, "STRRPLY2", model_fp, b.p, b.len);
    free(b.p);
    return rc;
}

/* The body after magic and model: count, then the entries. */
static int load_entries(replay_store *r, const uint8_t *p, size_t len) {
    uint64_t count;
    if (len < 8) return -1;
    memcpy(&count, p, 8);
    size_t off = 8;
    for (uint64_t i = 0; i < count; i++) {
        uint64_t n;
        if (off + 40 > len) return -1;
        memcpy(&n, p + off + 32, 8);
        if (n > (len - off - 40) / sizeof(int32_t)) return -1;
        int32_t *ids = xmalloc((size_t)(n ? n : 1) * sizeof(int32_t));
        memcpy(ids, p + off + 40, n * sizeof(int32_t));
        pthread_mutex_lock(&r->mu);
        entry *e = find(r, p + off);
        if (!e) {
            e = take_slot(r);
            memcpy(e->key, p + off, 32);
        } else {
            free(e->ids);
        }
        e->ids = ids;
        e->n = (size_t)n;
        e->used = ++r->clock;
        pthread_mutex_unlock(&r->mu);
        off += 40 + n * sizeof(int32_t);
    }
    return off == len ? 0 : -1;
}

int replay_load(replay_store *r, const char *path, const uint8_t model_fp[32]) {
    size_t len;
    uint8_t *p = fs_load_framed(path, "STRRPLY2", model_fp, (size_t)1 << 30, &len);
    int rc = p ? load_entries(r, p, len) : -1;
    free(p);
    return rc;
}
/* ---- replay keys and rendering ------------------------------------------------ */

/* Whether s is empty or only whitespace. */
static int blank(const char *s) {
    while (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r') s++;
    return !*s;
}

char *replay_native_turn_key(const char *content, const char *const *names, const char *const *args, int n) {
    if (blank(content)) content = ""; /* a client may drop a whitespace-only text block (Claude Code does) */
    char *calls = render_generic_calls_text(names, args, n);
    size_t a = strlen(content), b = strlen(calls);
    char *key = xmalloc(a + b + 10);
    memcpy(key, "native\x01", 7);
    memcpy(key + 7, content, a);
    key[7 + a] = '\x01';
    memcpy(key + 8 + a, calls, b + 1);
    free(calls);
    return key;
}

/* x as a JavaScript client sends it back: a whole-valued real as an
 * integer (a new reference), else NULL. */
static json_t *js_integer(const json_t *x) {
    double d = json_is_real(x) ? json_real_value(x) : 0.5;
    if (d <= -9007199254740992.0 || d >= 9007199254740992.0 || d != (double)(json_int_t)d) return NULL;
    return json_integer((json_int_t)d);
}

/* Whole-valued reals inside v to integers, in place; 1 if any changed. */
static int js_numbers(json_t *v) {
    int changed = 0;
    json_t *x, *n;
    if (json_is_object(v)) {
        const char *k;
        json_object_foreach(v, k, x) {
            if ((n = js_integer(x))) json_object_set_new(v, k, n), changed = 1;
            else changed |= js_numbers(x);
        }
    } else if (json_is_array(v)) {
        size_t i;
        json_array_foreach(v, i, x) {
            if ((n = js_integer(x))) json_array_set_new(v, i, n), changed = 1;
            else changed |= js_numbers(x);
        }
    }
    return changed;
}

char *replay_js_numbers(const char *args) {
    json_t *a = json_load_lenient(args, strlen(args), JSON_DECODE_ANY, NULL, NULL);
    char *out = a && js_numbers(a) ? json_dumps(a, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    json_decref(a);
    return out;
}

/* The parameters schema of the tool called name, or NULL. */
static const json_t *tool_parameters(const json_t *tools, const char *name) {
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        const json_t *fn = json_object_get(t, "function");
        const char *n = json_string_value(json_object_get(fn, "name"));
        if (n && !strcmp(n, name)) return json_object_get(fn, "parameters");
    }
    return NULL;
}

char *replay_schema_defaults(const json_t *tools, const char *name, const char *args) {
    const json_t *props = json_object_get(tool_parameters(tools, name), "properties");
    if (!json_object_size(props)) return NULL;
    json_t *a = json_load_lenient(args, strlen(args), 0, NULL, NULL);
    int changed = 0;
    const char *k;
    const json_t *p;
    if (json_is_object(a)) {
        json_object_foreach((json_t *)props, k, p) {
            const json_t *d = json_object_get(p, "default");
            if (d && !json_object_get(a, k)) json_object_set(a, k, (json_t *)d), changed = 1;
        }
    }
    char *out = changed ? json_dumps(a, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    json_decref(a);
    return out;
}

/* One link of the conversation chain: h = SHA-256(h | SHA-256(m's
 * canonical JSON)), keys sorted so a client's key order does not count. */
static void context_add(cache_hash *h, const json_t *m) {
    char *js = json_dumps(m, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    uint8_t buf[64];
    memcpy(buf, h->b, 32);
    SHA256((const uint8_t *)(js ? js : ""), js ? strlen(js) : 0, buf + 32);
    free(js);
    SHA256(buf, sizeof buf, h->b);
}

/* The chain's start: ns, marked so a narrowed namespace is never ns. */
static void context_begin(const cache_hash *ns, cache_hash *h) {
    uint8_t buf[32 + 16];
    memcpy(buf, ns->b, 32);
    memcpy(buf + 32, "replay-context\0\0", 16);
    SHA256(buf, sizeof buf, h->b);
}

void replay_context_ns(const cache_hash *ns, const json_t *messages, size_t upto, cache_hash *out) {
    context_begin(ns, out);
    for (size_t i = 0; i < upto && i < json_array_size(messages); i++) context_add(out, json_array_get(messages, i));
}

/* The ids remembered for key at this point of the conversation (ctx),
 * else anywhere in ns. */
static int32_t *get_in_context(replay_store *rs, const cache_hash *ctx, const cache_hash *ns, const char *key,
                               size_t len, size_t *n) {
    int32_t *ids = ctx ? replay_get(rs, ctx, key, len, n) : NULL;
    return ids ? ids : replay_get(rs, ns, key, len, n);
}

/* The key of a normalised assistant message with tool calls, or NULL. */
static char *message_turn_key(const json_t *m) {
    const json_t *calls = json_object_get(m, "tool_calls"), *call;
    size_t n = json_array_size(calls), i;
    if (!n) return NULL;
    const char **names = xcalloc(n, sizeof *names);
    char **args = xcalloc(n, sizeof *args);
    json_array_foreach(calls, i, call) {
        const json_t *fn = json_object_get(call, "function");
        names[i] = json_string_value(json_object_get(fn, "name")) ?: "";
        args[i] = json_dumps(json_object_get(fn, "arguments"), JSON_COMPACT | JSON_ENCODE_ANY) ?: xstrdup("{}");
    }
    const char *content = json_string_value(json_object_get(m, "content"));
    char *key = replay_native_turn_key(content ? content : "", names, (const char *const *)args, (int)n);
    for (i = 0; i < n; i++) free(args[i]);
    free(args);
    free(names);
    return key;
}

/* Assistant turns taken out of the conversation for their exact tokens:
 * each is rendered as plain content "\x01<tag><k>\x01" (a sentinel no
 * client can guess: the tag carries 128 random bits per request), whose
 * segment is then replaced by the tokens the model generated, markup and
 * all, which is what it saw when it wrote them. */
#define MAX_SUBS 256
typedef struct turn_subs {
    char tag[64];
    int n;
    int32_t *ids[MAX_SUBS];
    size_t n_ids[MAX_SUBS];
} turn_subs;

static void subs_free(turn_subs *ts) {
    for (int i = 0; i < ts->n; i++) free(ts->ids[i]);
    ts->n = 0;
}

/* Harmony (gpt-oss) stand-in for a replayed turn: the template renders a
 * turn its own way around any content (final channel; a call's header
 * and arguments), so the stand-in keeps the turn's shape (its first
 * call's name, which the tool results after it need) and carries the
 * sentinel, without \x01 (tojson would escape it), as the content or the
 * call's arguments string; splice_harmony replaces the whole rendered
 * turn. */
static json_t *harmony_stand_in(const json_t *m, const char *sentinel) {
    const json_t *fn = json_object_get(json_array_get(json_object_get(m, "tool_calls"), 0), "function");
    if (!fn) return json_pack("{s:s,s:s}", "role", "assistant", "content", sentinel);
    return json_pack("{s:s,s:s,s:[{s:s,s:{s:O,s:s}}]}", "role", "assistant", "content", "", "tool_calls", "type",
                     "function", "function", "name", json_object_get(fn, "name"), "arguments", sentinel);
}

/* Harmony keys every assistant turn (text turns too: the template drops
 * their analysis, so their text segment alone is not what the model saw). */
static char *turn_key(const json_t *m, int harmony) {
    if (!harmony || json_object_get(m, "tool_calls")) return message_turn_key(m);
    const char *role = json_string_value(json_object_get(m, "role"));
    const char *content = json_string_value(json_object_get(m, "content"));
    return role && !strcmp(role, "assistant") ? replay_native_turn_key(content ? content : "", NULL, NULL, 0) : NULL;
}

static json_t *replace_replayed_turns(replay_store *rs, const cache_hash *ns, const json_t *messages, turn_subs *ts,
                                      int harmony) {
    make_id(ts->tag, sizeof ts->tag - 1, "strata-replay-");
    strcat(ts->tag, "-");
    json_t *out = json_array();
    size_t i;
    const json_t *m;
    cache_hash ctx;
    context_begin(ns, &ctx);
    json_array_foreach(messages, i, m) {
        char *key = ts->n < MAX_SUBS ? turn_key(m, harmony) : NULL;
        /* a harmony text turn only where it was written: its tokens carry that
           conversation's analysis, and short answers ("Done.") repeat across conversations */
        int text_only = harmony && !json_object_get(m, "tool_calls");
        int32_t *ids = !key ? NULL
                       : text_only ? replay_get(rs, &ctx, key, strlen(key), &ts->n_ids[ts->n])
                                   : get_in_context(rs, &ctx, ns, key, strlen(key), &ts->n_ids[ts->n]);
        if (key && !ids) log_text("an assistant turn not remembered", key, strlen(key), 0);
        free(key);
        context_add(&ctx, m);
        if (!ids) {
            json_array_append(out, (json_t *)m);
            continue;
        }
        char sentinel[96];
        snprintf(sentinel, sizeof sentinel, harmony ? "%s%d." : "\x01%s%d\x01", ts->tag, ts->n);
        ts->ids[ts->n++] = ids;
        json_array_append_new(out, harmony ? harmony_stand_in(m, sentinel)
                                           : json_pack("{s:s,s:s}", "role", "assistant", "content", sentinel));
    }
    return out;
}

/* Replaces each sentinel in p's content by its turn's tokens. -1 when a
 * sentinel is missing or sits anywhere but in content (the template did
 * something with the content we cannot undo): render plainly then. */
static int splice_replayed(chat_prompt *p, const turn_subs *ts) {
    chat_prompt q = {0};
    int found = 0;
    size_t tl = strlen(ts->tag);
    for (int i = 0; i < p->n; i++) {
        const chat_seg *g = &p->segs[i];
        const char *at = g->text, *end = g->text + g->len, *hit;
        while ((hit = memmem(at, (size_t)(end - at), ts->tag, tl))) {
            char *stop;
            long k = strtol(hit + tl, &stop, 10);
            if (g->special || g->ids || hit == g->text || hit[-1] != '\x01' || stop >= end || *stop != '\x01' ||
                k < 0 || k >= ts->n) {
                chat_prompt_free(&q);
                return -1;
            }
            if (hit - 1 > at) chat_prompt_add(&q, at, (size_t)(hit - 1 - at), 0);
            int32_t *ids = xmalloc((ts->n_ids[k] ? ts->n_ids[k] : 1) * sizeof(int32_t));
            memcpy(ids, ts->ids[k], ts->n_ids[k] * sizeof(int32_t));
            chat_prompt_add_tokens(&q, hit - 1, (size_t)(stop + 1 - (hit - 1)), ids, ts->n_ids[k]);
            found++;
            at = stop + 1;
        }
        if (at == g->text) { /* fresh from the template: no segment has ids yet */
            chat_prompt_add(&q, g->text, g->len, g->special);
        } else if (at < end) {
            chat_prompt_add(&q, at, (size_t)(end - at), 0);
        }
    }
    if (found != ts->n) {
        chat_prompt_free(&q);
        return -1;
    }
    chat_prompt_free(p);
    *p = q;
    return 0;
}

/* Text [a, b) of the rendering (all segments laid end to end, seg_off[i]
 * where segment i starts) into q, each piece keeping its segment's kind. */
static void copy_span(chat_prompt *q, const chat_prompt *p, const size_t *seg_off, size_t a, size_t b) {
    for (int i = 0; i < p->n && a < b; i++) {
        size_t s0 = seg_off[i], s1 = s0 + p->segs[i].len;
        size_t lo = a > s0 ? a : s0, hi = b < s1 ? b : s1;
        if (lo < hi) chat_prompt_add(q, p->segs[i].text + (lo - s0), hi - lo, p->segs[i].special);
    }
}

static const char *mem_last(const char *s, size_t n, const char *m) {
    size_t ml = strlen(m);
    for (size_t i = n >= ml ? n - ml + 1 : 0; i-- > 0;)
        if (!memcmp(s + i, m, ml)) return s + i;
    return NULL;
}

/* Harmony: each stand-in's whole turn, from after its "<|start|>assistant"
 * through its <|end|> or <|call|>, becomes the remembered tokens (which
 * end with that token), the rendered text kept as their text so message
 * ends stay where they were. -1 when a turn is not found whole. */
static int splice_harmony(chat_prompt *p, const turn_subs *ts) {
    static const char START[] = "<|start|>assistant";
    strbuf all = {0};
    size_t *seg_off = xmalloc(((size_t)p->n + 1) * sizeof *seg_off);
    for (int i = 0; i < p->n; i++) seg_off[i] = all.len, strbuf_add(&all, p->segs[i].text, p->segs[i].len);
    chat_prompt q = {0};
    size_t done = 0;
    int rc = 0;
    for (int k = 0; k < ts->n && !rc; k++) {
        char sent[96];
        snprintf(sent, sizeof sent, "%s%d.", ts->tag, k);
        const char *t = all.s ? all.s : "", *hit = memmem(t + done, all.len - done, sent, strlen(sent));
        const char *st = hit ? mem_last(t + done, (size_t)(hit - t) - done, START) : NULL;
        const char *e1 = hit ? memmem(hit, all.len - (size_t)(hit - t), "<|end|>", 7) : NULL;
        const char *e2 = hit ? memmem(hit, all.len - (size_t)(hit - t), "<|call|>", 8) : NULL;
        const char *end = e1 && (!e2 || e1 < e2) ? e1 + 7 : e2 ? e2 + 8 : NULL;
        if (!st || !end) {
            rc = -1;
            break;
        }
        size_t a = (size_t)(st - t) + strlen(START), b = (size_t)(end - t);
        copy_span(&q, p, seg_off, done, a);
        int32_t *ids = xmalloc((ts->n_ids[k] ? ts->n_ids[k] : 1) * sizeof(int32_t));
        memcpy(ids, ts->ids[k], ts->n_ids[k] * sizeof(int32_t));
        chat_prompt_add_tokens(&q, t + a, b - a, ids, ts->n_ids[k]);
        done = b;
    }
    if (!rc) {
        copy_span(&q, p, seg_off, done, all.len);
        chat_prompt_free(p);
        *p = q;
    } else {
        chat_prompt_free(&q);
    }
    strbuf_free(&all);
    free(seg_off);
    return rc;
}

/* The conversation before each message: ctx[k] narrows ns by messages[0..k). */
static cache_hash *contexts(const cache_hash *ns, const json_t *messages) {
    size_t n = json_array_size(messages);
    cache_hash *ctx = xmalloc((n + 1) * sizeof *ctx);
    context_begin(ns, &ctx[0]);
    for (size_t k = 0; k < n; k++) {
        ctx[k + 1] = ctx[k];
        context_add(&ctx[k + 1], json_array_get(messages, k));
    }
    return ctx;
}

/* The message a segment starting at byte off of the rendering belongs
 * to (by the rendering's message ends), or -1. */
static long message_at(const render_out *o, long off) {
    if (!o->msg_ends) return -1;
    for (size_t k = 0; k < o->n_msgs; k++)
        if (o->msg_ends[k] >= 0 && o->msg_ends[k + 1] >= 0 && o->msg_ends[k] <= off && off < o->msg_ends[k + 1])
            return (long)k;
    return -1;
}

/* Content the model generated earlier gets its exact tokens back: those
 * generated at that point of the conversation when remembered, else any. */
static void apply_replay(replay_store *rs, const cache_hash *ns, const json_t *messages, render_out *o) {
    chat_prompt *p = &o->p;
    cache_hash *ctx = contexts(ns, messages);
    long off = 0;
    for (int i = 0; i < p->n; off += (long)p->segs[i].len, i++) {
        chat_seg *g = &p->segs[i];
        if (g->special || g->ids) continue;
        long k = message_at(o, off);
        g->ids = get_in_context(rs, k >= 0 ? &ctx[k] : NULL, ns, g->text, g->len, &g->n_ids);
        const char *role = json_string_value(json_object_get(json_array_get(messages, (size_t)k), "role"));
        /* an assistant message's text, not the role name the template writes from it */
        if (!g->ids && role && !strcmp(role, "assistant") && !(g->len == strlen(role) && !memcmp(g->text, role, g->len)))
            log_text("assistant text not remembered", g->text, g->len, 0);
    }
    free(ctx);
}


int replay_render(replay_store *rs, const cache_hash *ns, const renderer *r, const json_t *messages,
                  const render_tools *t, int add_gen, render_out *out, char *why, size_t cap) {
    turn_subs ts = {0};
    int harmony = render_harmony(r);
    int native = render_tool_format(r, t) != TC_GENERIC && rs && render_native_tools(r);
    json_t *msgs = native || (harmony && rs) ? replace_replayed_turns(rs, ns, messages, &ts, harmony)
                                             : json_incref((json_t *)messages);
    int rc = render_messages(r, msgs, t, add_gen, out, why, cap);
    json_decref(msgs);
    if (!rc && ts.n && (harmony ? splice_harmony(&out->p, &ts) : splice_replayed(&out->p, &ts))) {
        /* the template did not keep the turn whole */
        render_out_free(out);
        rc = render_messages(r, messages, t, add_gen, out, why, cap);
    }
    subs_free(&ts);
    if (!rc && rs) apply_replay(rs, ns, messages, out);
    return rc;
}
