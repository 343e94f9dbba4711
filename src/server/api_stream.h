/* api_stream.h - what both APIs do the same way with a generation: stream
 * its events as SSE through a per-API produce step, or collect the whole
 * reply's text, cancelling when the client goes away. */
#ifndef STRATA_API_STREAM_H
#define STRATA_API_STREAM_H

#include "server/gen.h"
#include "server/http.h"
#include "server/sse.h"

typedef struct api_stream {
    sse_buf out;
    int finished; /* the last event is buffered */
    gen *g;
    void (*produce)(struct api_stream *st); /* buffers the next events; may wait */
    void (*release)(struct api_stream *st); /* frees the call embedding st */
} api_stream;

/* Waits, after gen_start, until the generation leaves the scheduler's
 * queue, so the reply's status is known before anything is sent: 0 once
 * it holds a slot; STRATA_EBUSY after queue_timeout_s seconds still
 * queued (0: no limit), STRATA_EIO if the client went away meanwhile.
 * On an error the request has left the queue and g is ended (gen_end). */
int api_admit(gen *g, const http_req *req, int queue_timeout_s, strata_err *err);

/* Answers a started generation: whole (whole() fills rep, then the call
 * is released) or as a stream driven by st (released when it ends). */
void api_answer(api_stream *st, int stream, const http_req *req, http_reply *rep,
                void (*whole)(api_stream *st, const http_req *req, http_reply *rep));

/* Pulls g until done, joining its content text (*len bytes, malloc'd).
 * NULL if the client closed the connection (the generation is cancelled). */
char *api_collect_text(gen *g, const http_req *req, size_t *len);

#endif
