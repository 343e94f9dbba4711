/* http.c - libmicrohttpd glue (see http.h).
 *
 * libmicrohttpd calls the access handler several times per request: first
 * with no body (we allocate the request state), then with body pieces,
 * then once more with none (we dispatch). Thread-per-connection mode lets
 * a handler block until its generation is done. */
#include "server/http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/mem.h"
#include "server/http_watch.h"

#define HTTP_MAX_CONNS_DEFAULT 256 /* when opts.max_conns is 0 */

struct http_server {
    struct MHD_Daemon *daemon;
    http_opts opts;
    http_handler handler;
    void *app;
    int port;
    atomic_int in_flight; /* requests begun and not yet completely answered */
    int quiesced;
    http_watch *watch;    /* the header deadline, or NULL */
};

typedef struct conn_state {
    char *body;
    size_t len, cap;
    int too_large;
    int answered; /* the gate replied from the headers; the body is ignored */
} conn_state;

void http_reply_text(http_reply *rep, int status, const char *content_type, const char *body,
                     size_t len) {
    rep->status = status;
    rep->content_type = content_type;
    rep->body = xmalloc(len + 1);
    memcpy(rep->body, body, len);
    rep->body[len] = 0;
    rep->body_len = len;
}

const char *http_header(const http_req *r, const char *name) {
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

const char *http_query(const http_req *r, const char *name) {
    return r->conn ? MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, name) : NULL;
}

int http_client_gone(const http_req *r) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return 0;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* ---- streamed bodies -------------------------------------------------- */

typedef struct stream_box {
    http_stream_fn fn;
    http_stream_end end;
    void *ctx;
    int finished; /* producer returned -1 */
} stream_box;

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    stream_box *b = cls;
    ssize_t n = b->fn(b->ctx, buf, max);
    if (n < 0) {
        b->finished = 1;
        return MHD_CONTENT_READER_END_OF_STREAM;
    }
    return n;
}

static void stream_free(void *cls) {
    stream_box *b = cls;
    if (b->end) b->end(b->ctx, !b->finished);
    free(b);
}

/* ---- responses -------------------------------------------------------- */

static void add_common_headers(const http_server *s, struct MHD_Response *resp, const http_reply *rep) {
    MHD_add_response_header(resp, "Content-Type", rep->content_type ? rep->content_type : "application/json");
    if (rep->retry_after > 0) {
        char v[16];
        snprintf(v, sizeof v, "%d", rep->retry_after);
        MHD_add_response_header(resp, "Retry-After", v);
    }
    if (rep->extra_name && rep->extra_value) MHD_add_response_header(resp, rep->extra_name, rep->extra_value);
    if (s->opts.cors) {
        MHD_add_response_header(resp, "Access-Control-Allow-Origin", "*");
        MHD_add_response_header(resp, "Access-Control-Allow-Headers", "*");
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        MHD_add_response_header(resp, "Access-Control-Expose-Headers", "x-strata-ignored, Retry-After");
    }
    if (rep->stream) {
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    }
}

static enum MHD_Result send_reply(const http_server *s, struct MHD_Connection *c, http_reply *rep) {
    struct MHD_Response *resp;
    if (rep->stream) {
        stream_box *b = xcalloc(1, sizeof *b);
        *b = (stream_box){rep->stream, rep->stream_end, rep->stream_ctx, 0};
        resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, b, stream_free);
    } else {
        resp = MHD_create_response_from_buffer(rep->body_len, rep->body ? rep->body : (char *)"",
                                               rep->body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
        rep->body = NULL;
    }
    if (!resp) {
        free(rep->extra_value);
        rep->extra_value = NULL;
        return MHD_NO;
    }
    add_common_headers(s, resp, rep);
    free(rep->extra_value);
    rep->extra_value = NULL;
    enum MHD_Result r = MHD_queue_response(c, (unsigned)(rep->status ? rep->status : 200), resp);
    MHD_destroy_response(resp);
    return r;
}

static enum MHD_Result send_simple(const http_server *s, struct MHD_Connection *c, int status,
                                   const char *json) {
    http_reply rep = {0};
    http_reply_text(&rep, status, "application/json", json, strlen(json));
    return send_reply(s, c, &rep);
}

/* ---- request collection ------------------------------------------------ */

static int append_body(const http_server *s, conn_state *st, const char *data, size_t n) {
    if (st->too_large || st->len + n > s->opts.max_body) {
        st->too_large = 1;
        return 0;
    }
    XGROW(st->body, st->cap, st->len + n + 1, 4096);
    memcpy(st->body + st->len, data, n);
    st->len += n;
    st->body[st->len] = 0;
    return 0;
}

/* First call of a request (headers only): the gate may answer now. A
 * reply queued before the body is read makes libmicrohttpd skip the body
 * (no 100 Continue is sent) and close the connection after replying. */
static enum MHD_Result on_headers(http_server *s, struct MHD_Connection *c, const char *url,
                                  const char *method, conn_state *st) {
    if (!s->opts.gate || (s->opts.cors && strcmp(method, "OPTIONS") == 0)) return MHD_YES;
    http_req req = {.method = method, .path = url, .body = "", .conn = c};
    http_reply rep = {0};
    if (!s->opts.gate(s->app, &req, &rep)) return MHD_YES;
    st->answered = 1;
    return send_reply(s, c, &rep);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
    http_server *s = cls;
    conn_state *st = *con_cls;
    if (!st) {
        if (s->watch) {
            const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
            http_watch_header_in(s->watch, ci ? ci->socket_context : NULL);
        }
        *con_cls = st = xcalloc(1, sizeof(conn_state));
        atomic_fetch_add(&s->in_flight, 1);
        return on_headers(s, c, url, method, st);
    }
    if (st->answered) { /* in case the library still hands us body bytes */
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        append_body(s, st, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    if (st->too_large) {
        char msg[200]; /* readable by both OpenAI and Anthropic clients */
        snprintf(msg, sizeof msg,
                 "{\"type\":\"error\",\"error\":{\"message\":\"request body exceeds the limit of %zu bytes\","
                 "\"type\":\"request_too_large\",\"code\":\"body_too_large\"}}", s->opts.max_body);
        return send_simple(s, c, 413, msg);
    }
    if (s->opts.cors && strcmp(method, "OPTIONS") == 0) return send_simple(s, c, 204, "");
    http_req req = {.method = method, .path = url, .body = st->body ? st->body : "",
                    .body_len = st->len, .conn = c};
    http_reply rep = {0};
    s->handler(s->app, &req, &rep);
    return send_reply(s, c, &rep);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    http_server *s = cls;
    conn_state *st = *con_cls;
    if (!st) return;
    atomic_fetch_sub(&s->in_flight, 1);
    free(st->body);
    free(st);
    *con_cls = NULL;
}

/* Each connection's place in the header watch (its socket context). */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
    http_server *s = cls;
    if (!s->watch) return;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_context = ci ? http_watch_add(s->watch, ci->connect_fd) : NULL;
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) { /* before libmicrohttpd closes the socket */
        http_watch_remove(s->watch, *socket_context);
        *socket_context = NULL;
    }
}

static void log_mhd(void *cls, const char *fmt, va_list ap) {
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    line[strcspn(line, "\n")] = 0;
    log_warn("http: %s", line);
}

int http_start(http_server **out, const http_opts *o, http_handler h, void *app, strata_err *err) {
    *out = NULL;
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)o->port)};
    if (inet_pton(AF_INET, o->host, &addr.sin_addr) != 1)
        return strata_errf(err, STRATA_EINVAL, "--host %s: not an IPv4 address", o->host);
    http_server *s = xcalloc(1, sizeof *s);
    s->opts = *o;
    s->handler = h;
    s->app = app;
    if (o->header_timeout_s > 0) s->watch = http_watch_new(o->header_timeout_s);
    s->daemon = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG |
            MHD_USE_ITC,
        (uint16_t)o->port, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER, log_mhd, s,
        MHD_OPTION_SOCK_ADDR, &addr, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)o->timeout_s,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)(o->max_conns > 0 ? o->max_conns : HTTP_MAX_CONNS_DEFAULT),
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)(o->max_client_conns > 0 ? o->max_client_conns : 0),
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_END);
    if (!s->daemon) {
        http_watch_free(s->watch);
        free(s);
        return strata_errf(err, STRATA_EIO, "cannot listen on %s:%d (port in use or not permitted)",
                           o->host, o->port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : o->port;
    *out = s;
    return 0;
}

int http_port(const http_server *s) { return s->port; }

void http_quiesce(http_server *s) {
    if (!s || s->quiesced) return;
    s->quiesced = 1;
    MHD_socket fd = MHD_quiesce_daemon(s->daemon);
    if (fd != MHD_INVALID_SOCKET) close(fd);
}

void http_stop(http_server *s) {
    if (!s) return;
    /* Let replies under way finish (their generations were cancelled, so
     * they end quickly) before the daemon closes every socket. */
    http_quiesce(s);
    for (int i = 0; i < 3000 && atomic_load(&s->in_flight) > 0; i++) usleep(10000);
    int left = atomic_load(&s->in_flight);
    if (left > 0) log_warn("http: %d request(s) still unanswered after 30 s; closing their connections", left);
    MHD_stop_daemon(s->daemon);
    http_watch_free(s->watch); /* after the daemon: every connection is closed */
    free(s);
}
