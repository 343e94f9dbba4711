/* http_watch.h - the request-header deadline (internal to http.c).
 *
 * libmicrohttpd closes a connection only after --idle-timeout seconds of
 * silence, and a client that trickles its header a byte at a time is never
 * silent: either way a few clients could hold every connection place.
 * The watch gives each new connection an absolute deadline for its first
 * request's header; a connection still without one at the deadline gets a
 * 408 and its socket shut down (libmicrohttpd then closes it as a client
 * that left). Later requests of a kept-alive connection, and bodies, are
 * left to the idle timeout.
 * Does not: limit connections per address (libmicrohttpd's
 * MHD_OPTION_PER_IP_CONNECTION_LIMIT does, set in http.c). */
#ifndef STRATA_HTTP_WATCH_H
#define STRATA_HTTP_WATCH_H

typedef struct http_watch http_watch;
typedef struct http_watched http_watched; /* one connection */

/* A watch with its own thread; header_timeout_s > 0. */
http_watch *http_watch_new(int header_timeout_s);
/* Stops the thread; every connection must have been closed. NULL is fine. */
void http_watch_free(http_watch *w);
/* A connection was accepted on socket fd: its deadline starts now. */
http_watched *http_watch_add(http_watch *w, int fd);
/* Its first request's header is complete: no deadline any more. NULL is fine. */
void http_watch_header_in(http_watch *w, http_watched *c);
/* The connection is being closed (before its socket is): forget it. */
void http_watch_remove(http_watch *w, http_watched *c);

#endif
