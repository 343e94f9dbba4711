/* http.h - the HTTP layer: libmicrohttpd underneath, one handler above.
 *
 * Runs a thread per connection (handlers may block while a request is
 * generated) up to a connection limit and a limit per client address,
 * closes a new connection whose request header is not in by a deadline
 * (http_watch.h), lets a gate answer from the headers
 * alone (authentication), collects the request body up to a limit (413
 * past it), and hands complete requests to one handler. A reply is either a whole body
 * or a stream: a producer called from the connection's thread until it
 * says the stream ended (used for SSE).
 * Does not: parse JSON or know the APIs (server/api_*.c). */
#ifndef STRATA_HTTP_H
#define STRATA_HTTP_H

#include <stddef.h>
#include <sys/types.h>

#include "base/err.h"

typedef struct http_server http_server;

typedef struct http_req {
    const char *method, *path; /* path without the query string */
    const char *body;          /* NUL-terminated copy of the body */
    size_t body_len;
    void *conn;                /* libmicrohttpd connection, for the helpers below */
} http_req;

/* Producer of a streamed body: writes up to max bytes into buf and returns
 * how many (0 is allowed: called again), or -1 at the end of the stream. */
typedef ssize_t (*http_stream_fn)(void *ctx, char *buf, size_t max);
/* Called once when the stream is over; client_gone if it ended early. */
typedef void (*http_stream_end)(void *ctx, int client_gone);

typedef struct http_reply {
    int status;
    const char *content_type;
    char *body; /* malloc'd, owned by the HTTP layer after the handler returns */
    size_t body_len;
    int retry_after; /* seconds, > 0 adds a Retry-After header */
    const char *extra_name; /* one more header (e.g. x-strata-ignored), or NULL */
    char *extra_value;      /* its value, malloc'd, owned by the HTTP layer once the handler returns */
    http_stream_fn stream; /* set for a streamed body (body unused) */
    http_stream_end stream_end;
    void *stream_ctx;
} http_reply;

typedef void (*http_handler)(void *app, const http_req *req, http_reply *reply);
/* Called once per request as soon as its headers are in, before any of
 * its body is read (req->body is empty): returns 1 with reply filled to
 * answer at once, the body never read (e.g. 401 for a missing key, so an
 * unauthenticated client cannot make us buffer megabytes), or 0 to go on.
 * Not called for CORS preflights (OPTIONS), which carry no credentials. */
typedef int (*http_gate)(void *app, const http_req *req, http_reply *reply);

typedef struct http_opts {
    const char *host;
    int port;
    size_t max_body;   /* bytes; larger bodies get 413 */
    int timeout_s;     /* idle connection timeout */
    int header_timeout_s; /* a new connection's first request header must be in by then (0: no deadline) */
    int max_conns;     /* open connections (each a thread) at most; more wait or are refused */
    int max_client_conns; /* of them from one client address (0: no limit) */
    int cors;          /* add Access-Control-Allow-* headers, answer OPTIONS */
    http_gate gate;    /* or NULL */
} http_opts;

int http_start(http_server **out, const http_opts *o, http_handler h, void *app, strata_err *err);
/* Stops accepting new connections; open ones go on. NULL is fine. */
void http_quiesce(http_server *s);
/* Stops accepting, lets replies under way finish (up to 30 s), then
 * closes everything; NULL is fine. */
void http_stop(http_server *s);
/* The port actually bound (useful with port 0). */
int http_port(const http_server *s);

/* Request header value, or NULL. */
const char *http_header(const http_req *r, const char *name);
/* Query-string argument value (URL-decoded), or NULL. */
const char *http_query(const http_req *r, const char *name);
/* 1 if the client closed its side of the connection (polls the socket). */
int http_client_gone(const http_req *r);

/* Convenience: fills reply with a copy of a body. */
void http_reply_text(http_reply *rep, int status, const char *content_type, const char *body,
                     size_t len);

#endif
