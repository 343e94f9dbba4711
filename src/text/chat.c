/* chat.c - segmented prompts and the ChatML / Llama 3 formats (chat.h). */
#include "text/chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"

void chat_prompt_add(chat_prompt *p, const char *text, size_t len, int special) {
    if (len == 0) return;
    chat_seg *last = p->n ? &p->segs[p->n - 1] : NULL;
    if (last && last->special == special && special && !last->ids) { /* merge adjacent template text */
        last->text = xrealloc(last->text, last->len + len + 1);
        memcpy(last->text + last->len, text, len);
        last->len += len;
        last->text[last->len] = 0;
        return;
    }
    XGROW(p->segs, p->cap, p->n + 1, 16);
    chat_seg *s = &p->segs[p->n++];
    s->text = xmalloc(len + 1);
    memcpy(s->text, text, len);
    s->text[len] = 0;
    s->len = len;
    s->special = special;
    s->ids = NULL;
    s->n_ids = 0;
}

void chat_prompt_add_tokens(chat_prompt *p, const char *text, size_t len, int32_t *ids, size_t n) {
    chat_prompt_add(p, text, len ? len : 0, 0);
    if (len == 0) { /* nothing was added: keep ownership rules simple */
        free(ids);
        return;
    }
    p->segs[p->n - 1].ids = ids;
    p->segs[p->n - 1].n_ids = n;
}

void chat_prompt_free(chat_prompt *p) {
    for (int i = 0; i < p->n; i++) free(p->segs[i].text), free(p->segs[i].ids);
    free(p->segs);
    memset(p, 0, sizeof *p);
}

static void push_bound(int **bounds, int *n_bounds, int pos) {
    if (!bounds) return;
    *bounds = xrealloc(*bounds, (size_t)(*n_bounds + 1) * sizeof(int));
    (*bounds)[(*n_bounds)++] = pos;
}

int chat_tokenize(const tokenizer *t, const chat_prompt *p, int add_bos, int32_t **ids,
                  size_t *n, strata_err *err) {
    return chat_tokenize_at(t, p, add_bos, ids, n, NULL, NULL, NULL, NULL, 0, err);
}

int chat_tokenize_bounds(const tokenizer *t, const chat_prompt *p, int add_bos, int32_t **ids, size_t *n,
                         int **bounds, int *n_bounds, strata_err *err) {
    return chat_tokenize_at(t, p, add_bos, ids, n, bounds, n_bounds, NULL, NULL, 0, err);
}

/* Text offsets in ascending order, as indices into offs (a walk over the
 * segments then meets them in order). */
typedef struct offset_walk {
    const long *offs;
    int *pos;
    size_t *order, n, next;
} offset_walk;

static void walk_init(offset_walk *w, const long *offs, int *pos, size_t n) {
    *w = (offset_walk){offs, pos, xcalloc(n ? n : 1, sizeof(size_t)), n, 0};
    for (size_t i = 0; i < n; i++) { /* insertion sort: message ends come nearly sorted */
        size_t j = i;
        for (pos[i] = -1; j > 0 && offs[w->order[j - 1]] > offs[i]; j--) w->order[j] = w->order[j - 1];
        w->order[j] = i;
    }
    while (w->next < n && offs[w->order[w->next]] < 0) w->next++; /* unknown stays -1 */
}

/* Token positions of the offsets in [off, off + seg->len): at the segment's
 * start, where its tokens start; inside it, after the tokens its text up to
 * there shares with the whole segment's (what tokenizing only that much of
 * the prompt would have matched). base: the output length before the
 * segment; skip: leading tokens of seg dropped (a repeated BOS). */
static void walk_segment(offset_walk *w, const tokenizer *t, const chat_seg *seg, long off, const int32_t *toks,
                         size_t ns, size_t skip, size_t base) {
    while (w->next < w->n && w->offs[w->order[w->next]] < off + (long)seg->len) {
        size_t k = w->order[w->next++];
        long at = w->offs[k] - off;
        int32_t *head = NULL;
        size_t nh = 0, cp = 0;
        if (at == 0) {
            w->pos[k] = (int)base;
            continue;
        }
        if (seg->ids || tok_encode(t, seg->text, (size_t)at, seg->special, &head, &nh, NULL)) continue;
        while (cp < nh && cp < ns && head[cp] == toks[cp]) cp++;
        w->pos[k] = (int)(base + (cp > skip ? cp - skip : 0));
        free(head);
    }
}

static void walk_end(offset_walk *w, long end, size_t n) {
    for (; w->next < w->n; w->next++)
        if (w->offs[w->order[w->next]] == end) w->pos[w->order[w->next]] = (int)n;
    free(w->order);
}

int chat_tokenize_at(const tokenizer *t, const chat_prompt *p, int add_bos, int32_t **ids, size_t *n,
                     int **bounds, int *n_bounds, const long *offs, int *pos, size_t n_offs, strata_err *err) {
    size_t cap = 256, len = 0;
    long off = 0;
    int32_t *out = xmalloc(cap * sizeof(int32_t));
    offset_walk w;
    walk_init(&w, offs, pos, offs ? n_offs : 0);
    if (bounds) *bounds = NULL, *n_bounds = 0;
    if (add_bos && tok_bos(t) >= 0) out[len++] = tok_bos(t);
    for (int i = 0; i < p->n; i++) {
        if (i > 0 && p->segs[i].special && !p->segs[i - 1].special) push_bound(bounds, n_bounds, (int)len);
        int32_t *seg;
        size_t ns;
        if (p->segs[i].ids) { /* replayed: the model's own tokens */
            ns = p->segs[i].n_ids;
            seg = xmalloc((ns ? ns : 1) * sizeof(int32_t));
            memcpy(seg, p->segs[i].ids, ns * sizeof(int32_t));
        } else {
            int rc = tok_encode(t, p->segs[i].text, p->segs[i].len, p->segs[i].special, &seg, &ns, err);
            if (rc) {
                free(out), free(w.order);
                if (bounds) free(*bounds), *bounds = NULL, *n_bounds = 0;
                return rc;
            }
        }
        size_t skip = (len == 1 && add_bos && ns && seg[0] == out[0]) ? 1 : 0; /* template wrote BOS */
        walk_segment(&w, t, &p->segs[i], off, seg, ns, skip, len);
        off += (long)p->segs[i].len;
        XGROW(out, cap, len + ns, 256);
        memcpy(out + len, seg + skip, (ns - skip) * sizeof(int32_t));
        len += ns - skip;
        free(seg);
    }
    walk_end(&w, off, len);
    *ids = out;
    *n = len;
    return 0;
}

const char *chat_format_name(chat_format c) {
    return c == CHAT_LLAMA3 ? "llama3" : c == CHAT_GEMMA ? "gemma" : "chatml";
}

static void add_str(chat_prompt *p, const char *s, int special) { chat_prompt_add(p, s, strlen(s), special); }

/* Gemma: <start_of_turn>user|model\n ... <end_of_turn>\n; the system text
 * opens the next user turn (sys_pending), as Gemma 3's template does. */
static void render_gemma_msg(const chat_msg *m, const char **sys_pending, chat_prompt *out) {
    if (strcmp(m->role, "system") == 0) {
        *sys_pending = m->content;
        return;
    }
    add_str(out, "<start_of_turn>", 1);
    add_str(out, strcmp(m->role, "assistant") == 0 ? "model" : m->role, 0);
    add_str(out, "\n", 1);
    if (*sys_pending && strcmp(m->role, "user") == 0) {
        add_str(out, *sys_pending, 0);
        add_str(out, "\n\n", 1);
        *sys_pending = NULL;
    }
    add_str(out, m->content, 0);
    add_str(out, "<end_of_turn>\n", 1);
}

static void render_msg(chat_format c, const chat_msg *m, chat_prompt *out) {
    if (c == CHAT_LLAMA3) {
        add_str(out, "<|start_header_id|>", 1);
        add_str(out, m->role, 0);
        add_str(out, "<|end_header_id|>\n\n", 1);
        add_str(out, m->content, 0);
        add_str(out, "<|eot_id|>", 1);
    } else {
        add_str(out, "<|im_start|>", 1);
        add_str(out, m->role, 0);
        add_str(out, "\n", 1);
        add_str(out, m->content, 0);
        add_str(out, "<|im_end|>\n", 1);
    }
}

void chat_render_builtin(chat_format c, const chat_msg *msgs, int n, int add_generation,
                         chat_prompt *out) {
    if (c == CHAT_GEMMA) {
        const char *sys = NULL;
        add_str(out, "<bos>", 1);
        for (int i = 0; i < n; i++) render_gemma_msg(&msgs[i], &sys, out);
        if (add_generation) add_str(out, "<start_of_turn>model\n", 1);
        return;
    }
    if (c == CHAT_LLAMA3) add_str(out, "<|begin_of_text|>", 1);
    for (int i = 0; i < n; i++) render_msg(c, &msgs[i], out);
    if (!add_generation) return;
    add_str(out, c == CHAT_LLAMA3 ? "<|start_header_id|>assistant<|end_header_id|>\n\n"
                                  : "<|im_start|>assistant\n", 1);
}
