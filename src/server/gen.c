/* gen.c - pulling a request's output from the scheduler (see gen.h). */
#include "server/gen.h"

#include <stdlib.h>
#include <string.h>

#include "base/mem.h"

int gen_start(gen *g, sched *s, const tokenizer *tok, const int32_t *ids, int n,
              const gen_params *p, strata_err *err) {
    memset(g, 0, sizeof *g);
    g->tok = tok;
    textout_init(&g->text);
    for (int i = 0; i < p->n_stops; i++) textout_add_stop(&g->text, p->stops[i]);
    sched_job job = {.prompt = ids, .n_prompt = n, .sampling = p->sampling,
                     .max_tokens = p->max_tokens, .n_logprobs = p->n_logprobs,
                     .cache_salt = p->cache_salt};
    int rc = sched_submit(s, &job, &g->req, err);
    if (rc) textout_free(&g->text);
    return rc;
}

static void keep_token(gen *g, const sched_token *t) {
    if (g->n_tokens == g->cap_tokens) {
        g->cap_tokens = g->cap_tokens ? g->cap_tokens * 2 : 64;
        g->tokens = xrealloc(g->tokens, (size_t)g->cap_tokens * sizeof(sched_token));
    }
    g->tokens[g->n_tokens++] = *t;
}

size_t gen_pull(gen *g, int timeout_ms, const char **text) {
    sched_token toks[64];
    int n = g->done ? 0 : sched_wait(g->req, g->n_seen, toks, 64, timeout_ms, &g->st);
    g->n_seen += n;
    for (int i = 0; i < n && !g->text.stopped; i++) {
        char piece[256];
        int len = tok_piece(g->tok, toks[i].id, 0, piece, sizeof piece);
        if (len > (int)sizeof piece) len = (int)sizeof piece;
        keep_token(g, &toks[i]);
        if (len > 0 && textout_append(&g->text, piece, (size_t)len)) {
            g->stopped_by_string = 1;
            sched_cancel(g->req);
        }
    }
    int final = g->st.finish != FINISH_NONE || g->stopped_by_string;
    size_t len = textout_release(&g->text, final, text);
    if (final) g->done = 1;
    return len;
}

const char *gen_finish_word(const gen *g) {
    if (g->stopped_by_string) return "stop";
    return g->st.finish == FINISH_LENGTH ? "length" : "stop";
}

void gen_cancel(gen *g) {
    if (g->req) sched_cancel(g->req);
}

void gen_end(gen *g) {
    sched_release(g->req);
    textout_free(&g->text);
    free(g->tokens);
    memset(g, 0, sizeof *g);
}
