/* redis_conn.h - one connection to Redis for the shared tier (redis_tier.h):
 * the URL, connecting with a bounded timeout, and reconnecting with
 * backoff after any failure, so a dead or slow Redis costs a caller at
 * most one timeout per backoff period and then nothing at all.
 *
 * A connection is used by one thread at a time (its owner serializes).
 * Does not: know blocks, keys or the tier's queue. */
#ifndef STRATA_CACHE_REDIS_CONN_H
#define STRATA_CACHE_REDIS_CONN_H

#include <hiredis/hiredis.h>
#include <stdatomic.h>

#include "base/err.h"

/* redis://[[user]:password@]host[:port][/db] */
typedef struct redis_url {
    char host[256], user[128], pass[256];
    int port, db;
} redis_url;

int redis_url_parse(const char *url, redis_url *out, strata_err *err);

/* What every connection of one tier shares: the warned-once flag and the
 * error count for /metrics. */
typedef struct redis_health {
    atomic_int warned, up;
    atomic_long errors, connects;
} redis_health;

#define REDIS_BACKOFF_MIN_MS 100
#define REDIS_BACKOFF_MAX_MS 5000
#define REDIS_BACKOFF_RESET_MS 30000

typedef struct redis_conn {
    const redis_url *url;
    int timeout_ms;       /* connect and each socket read/write */
    const char *role;     /* for logs: "probe", "reader", "writer" */
    redis_health *health;
    redisContext *c;      /* NULL while down */
    double next_try_ms;   /* no connect attempt before this (clock_ms) */
    double last_fail_ms;  /* failures closer together than REDIS_BACKOFF_RESET_MS double the backoff */
    int backoff_ms;
} redis_conn;

/* The live context, connecting first if down and the backoff has passed;
 * NULL while down. *fresh is set to 1 on a new connection (Redis may have
 * restarted empty since the last one). */
redisContext *redis_conn_get(redis_conn *rc, int *fresh);
/* The connection failed (I/O, timeout, protocol): it is dropped, counted,
 * warned about once per tier, and retried after the backoff. */
void redis_conn_fail(redis_conn *rc, const char *why);
/* A command answered with an error reply (e.g. OOM): counted and warned
 * about once; the connection stays. */
void redis_conn_error_reply(redis_conn *rc, const char *what, const char *msg);
void redis_conn_close(redis_conn *rc);

#endif
