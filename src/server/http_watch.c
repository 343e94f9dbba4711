/* http_watch.c - the request-header deadline (see http_watch.h).
 *
 * One thread wakes every WATCH_TICK_MS and shuts down the sockets of
 * connections past their deadline. The list and every shutdown are under
 * one mutex that http_watch_remove takes too: libmicrohttpd reports a
 * connection closed before it closes the socket, so a socket shut down
 * here is never one already closed (and perhaps reused by a new
 * connection). */
#include "server/http_watch.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/mem.h"

#define WATCH_TICK_MS 200

struct http_watched {
    http_watched *prev, *next;
    int fd;
    double deadline_ms; /* 0: the header is in (or the connection was cut) */
};

struct http_watch {
    pthread_mutex_t mu;
    pthread_cond_t wake;
    pthread_t th;
    int stop;
    double timeout_ms;
    http_watched *head;
};

#define TIMEOUT_BODY "{\"error\":{\"message\":\"request header not complete in time\",\"type\":\"request_timeout\"}}"
_Static_assert(sizeof TIMEOUT_BODY - 1 == 84, "Content-Length below");
static const char TIMEOUT_REPLY[] = "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Type: "
                                    "application/json\r\nContent-Length: 84\r\n\r\n" TIMEOUT_BODY;

/* Past its deadline: a 408 if the socket takes it at once (never blocks),
 * then both directions shut, which the connection's thread sees as EOF. */
static void cut(http_watch *w, http_watched *c) {
    (void)!send(c->fd, TIMEOUT_REPLY, sizeof TIMEOUT_REPLY - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    shutdown(c->fd, SHUT_RDWR);
    c->deadline_ms = 0;
}

static void *watch_main(void *p) {
    http_watch *w = p;
    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += WATCH_TICK_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&w->wake, &w->mu, &ts);
        double now = clock_ms();
        int n = 0;
        for (http_watched *c = w->head; c; c = c->next)
            if (c->deadline_ms > 0 && now >= c->deadline_ms) cut(w, c), n++;
        if (n) log_info("http: closed %d connection(s) whose request header was not complete within %.0f s", n,
                        w->timeout_ms / 1000);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

http_watch *http_watch_new(int header_timeout_s) {
    http_watch *w = xcalloc(1, sizeof *w);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->wake, NULL);
    w->timeout_ms = header_timeout_s * 1000.0;
    if (pthread_create(&w->th, NULL, watch_main, w) != 0) {
        log_error("http: cannot start the header-timeout thread (out of threads?)");
        abort(); /* no thread: the server would run without its deadline */
    }
    return w;
}

void http_watch_free(http_watch *w) {
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->th, NULL);
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

http_watched *http_watch_add(http_watch *w, int fd) {
    http_watched *c = xcalloc(1, sizeof *c);
    c->fd = fd;
    c->deadline_ms = clock_ms() + w->timeout_ms;
    pthread_mutex_lock(&w->mu);
    c->next = w->head;
    if (w->head) w->head->prev = c;
    w->head = c;
    pthread_mutex_unlock(&w->mu);
    return c;
}

void http_watch_header_in(http_watch *w, http_watched *c) {
    if (!c) return;
    pthread_mutex_lock(&w->mu);
    c->deadline_ms = 0;
    pthread_mutex_unlock(&w->mu);
}

void http_watch_remove(http_watch *w, http_watched *c) {
    if (!c) return;
    pthread_mutex_lock(&w->mu);
    if (c->prev) c->prev->next = c->next;
    else w->head = c->next;
    if (c->next) c->next->prev = c->prev;
    pthread_mutex_unlock(&w->mu);
    free(c);
}
