/* api_stream.c - SSE streaming and whole-reply collection (api_stream.h). */
#include "server/api_stream.h"

#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/mem.h"

static ssize_t stream_read(void *ctx, char *buf, size_t max) {
    api_stream *st = ctx;
    while (sse_empty(&st->out)) {
        if (st->finished) return -1;
        st->produce(st);
    }
    return (ssize_t)sse_take(&st->out, buf, max);
}

static void stream_end(void *ctx, int client_gone) {
    api_stream *st = ctx;
    if (client_gone) gen_cancel(st->g); /* the scheduler frees the slot at its next step */
    st->release(st);
}

#define ADMIT_POLL_MS 200 /* how often a queued request checks for its client */

int api_admit(gen *g, const http_req *req, int queue_timeout_s, strata_err *err) {
    double deadline = clock_ms() + queue_timeout_s * 1000.0;
    while (sched_wait_admitted(g->req, ADMIT_POLL_MS)) {
        if (http_client_gone(req)) { /* its queue place goes to the next request now */
            gen_end(g);
            return strata_errf(err, STRATA_EIO, "the client went away while queued");
        }
        /* Past the deadline it leaves the queue, unless admitted meanwhile. */
        if (queue_timeout_s > 0 && clock_ms() >= deadline && sched_dequeue(g->req)) {
            gen_end(g);
            log_warn("queue: request waited %d s without a free slot; answered busy (--queue-timeout)",
                     queue_timeout_s);
            return strata_errf(err, STRATA_EBUSY, "server busy: waited %d s in the queue for a free slot",
                               queue_timeout_s);
        }
    }
    return 0;
}

void api_answer(api_stream *st, int stream, const http_req *req, http_reply *rep,
                void (*whole)(api_stream *st, const http_req *req, http_reply *rep)) {
    if (!stream) {
        whole(st, req, rep);
        st->release(st);
        return;
    }
    rep->status = 200;
    rep->content_type = "text/event-stream";
    rep->stream = stream_read;
    rep->stream_end = stream_end;
    rep->stream_ctx = st;
}

char *api_collect_text(gen *g, const http_req *req, size_t *len) {
    char *text = xstrdup("");
    *len = 0;
    while (!g->done) {
        const tc_event *ev;
        int n = gen_pull(g, 200, &ev);
        for (int i = 0; i < n; i++) {
            if (ev[i].kind != TC_EV_TEXT) continue;
            text = xrealloc(text, *len + ev[i].len + 1);
            memcpy(text + *len, ev[i].text, ev[i].len);
            *len += ev[i].len;
            text[*len] = 0;
        }
        if (http_client_gone(req)) {
            gen_cancel(g);
            free(text);
            return NULL;
        }
    }
    return text;
}
