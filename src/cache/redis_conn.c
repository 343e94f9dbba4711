/* redis_conn.c - Redis URL parsing and connections with bounded timeouts
 * and reconnection backoff (see redis_conn.h). */
#include "cache/redis_conn.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "base/clock.h"
#include "base/log.h"

/* ---- URL ---- */

/* Copies [s, e) into out (cap bytes); -1 when it does not fit. */
static int copy_part(char *out, size_t cap, const char *s, const char *e) {
    if ((size_t)(e - s) >= cap) return -1;
    memcpy(out, s, (size_t)(e - s));
    out[e - s] = 0;
    return 0;
}

/* "user:pass" or ":pass" or "pass" before the '@'. */
static int parse_userinfo(redis_url *u, const char *s, const char *e) {
    const char *colon = memchr(s, ':', (size_t)(e - s));
    if (!colon) return copy_part(u->pass, sizeof u->pass, s, e);
    return copy_part(u->user, sizeof u->user, s, colon) || copy_part(u->pass, sizeof u->pass, colon + 1, e);
}

/* "host[:port][/db]" */
static int parse_hostpart(redis_url *u, const char *s) {
    const char *slash = strchr(s, '/'), *end = slash ? slash : s + strlen(s);
    const char *colon = memchr(s, ':', (size_t)(end - s));
    if (copy_part(u->host, sizeof u->host, s, colon ? colon : end) || !u->host[0]) return -1;
    char *stop;
    if (colon) {
        long p = strtol(colon + 1, &stop, 10);
        if (stop != end || p <= 0 || p > 65535) return -1;
        u->port = (int)p;
    }
    if (slash && slash[1]) {
        long db = strtol(slash + 1, &stop, 10);
        if (*stop || db < 0 || db > 100000) return -1;
        u->db = (int)db;
    }
    return 0;
}

/* url as it may be shown in an error: whatever stands before the last '@'
 * (user and password) becomes "***", so a log never holds a password. */
static const char *url_redacted(const char *url, char *buf, size_t cap) {
    const char *at = url ? strrchr(url, '@') : NULL;
    if (!url) return "(null)";
    if (!at) return url;
    const char *scheme = strstr(url, "://");
    int keep = scheme && scheme < at ? (int)(scheme + 3 - url) : 0;
    snprintf(buf, cap, "%.*s***%s", keep, url, at);
    return buf;
}

int redis_url_parse(const char *url, redis_url *u, strata_err *err) {
    char shown[512];
    memset(u, 0, sizeof *u);
    u->port = 6379;
    if (!url || strncmp(url, "redis://", 8) != 0)
        return strata_errf(err, STRATA_EINVAL, "--cache-redis %s: expected redis://[:password@]host[:port][/db]",
                           url_redacted(url, shown, sizeof shown));
    const char *s = url + 8, *at = strrchr(s, '@');
    if ((at && parse_userinfo(u, s, at)) || parse_hostpart(u, at ? at + 1 : s))
        return strata_errf(err, STRATA_EINVAL, "--cache-redis: cannot parse '%s' as "
                           "redis://[:password@]host[:port][/db]", url_redacted(url, shown, sizeof shown));
    return 0;
}

/* ---- connections ---- */

static struct timeval tv_of(int ms) { return (struct timeval){.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000}; }

/* One command that must answer +OK (AUTH, SELECT); 0 or -1 with why. */
static int expect_ok(redisContext *c, char *why, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    int ok = r && r->type == REDIS_REPLY_STATUS;
    snprintf(why, cap, "%s", !r ? (c->errstr[0] ? c->errstr : "no reply") : r->type == REDIS_REPLY_ERROR ? r->str : "");
    if (r) freeReplyObject(r);
    return ok ? 0 : -1;
}

/* Connects, sets the socket timeouts, authenticates and selects the db. */
static redisContext *dial(const redis_conn *rc, char *why, size_t cap) {
    const redis_url *u = rc->url;
    redisContext *c = redisConnectWithTimeout(u->host, u->port, tv_of(rc->timeout_ms));
    if (!c || c->err) {
        snprintf(why, cap, "%s", c ? c->errstr : "cannot allocate a context");
        if (c) redisFree(c);
        return NULL;
    }
    int bad = redisSetTimeout(c, tv_of(rc->timeout_ms)) != REDIS_OK;
    if (bad) snprintf(why, cap, "cannot set the socket timeout");
    if (!bad && u->pass[0])
        bad = u->user[0] ? expect_ok(c, why, cap, "AUTH %s %s", u->user, u->pass) : expect_ok(c, why, cap, "AUTH %s", u->pass);
    if (!bad && u->db) bad = expect_ok(c, why, cap, "SELECT %d", u->db);
    if (bad) {
        redisFree(c);
        return NULL;
    }
    return c;
}

/* The next attempt after a failure: the backoff doubles while failures
 * keep coming (a stalled Redis accepts connections and then times out
 * every command, so a successful connect proves nothing) and starts
 * again from the minimum after a quiet spell. */
static void back_off(redis_conn *rc) {
    double now = clock_ms();
    int repeat = rc->last_fail_ms > 0 && now - rc->last_fail_ms < REDIS_BACKOFF_RESET_MS;
    rc->backoff_ms = repeat && rc->backoff_ms ? rc->backoff_ms * 2 : REDIS_BACKOFF_MIN_MS;
    if (rc->backoff_ms > REDIS_BACKOFF_MAX_MS) rc->backoff_ms = REDIS_BACKOFF_MAX_MS;
    rc->last_fail_ms = now;
    rc->next_try_ms = now + rc->backoff_ms;
}

/* Warned once per tier; after that the same news is debug-level. */
static void warn_down(redis_conn *rc, const char *why) {
    atomic_fetch_add(&rc->health->errors, 1);
    int was_up = atomic_exchange(&rc->health->up, 0);
    if (atomic_exchange(&rc->health->warned, 1) == 0)
        log_warn("redis cache: %s:%d %s: %s; serving from the local tiers, reconnecting with backoff (warned once)",
                 rc->url->host, rc->url->port, rc->role, why);
    else if (was_up) log_info("redis cache: %s:%d %s lost: %s; reconnecting with backoff", rc->url->host, rc->url->port, rc->role, why);
    else log_debug("redis cache: %s: %s", rc->role, why);
}

redisContext *redis_conn_get(redis_conn *rc, int *fresh) {
    *fresh = 0;
    if (rc->c) return rc->c;
    double now = clock_ms();
    if (now < rc->next_try_ms) return NULL;
    char why[256] = "";
    if (!(rc->c = dial(rc, why, sizeof why))) {
        back_off(rc);
        warn_down(rc, why);
        return NULL;
    }
    if (atomic_fetch_add(&rc->health->connects, 1) > 0 && !atomic_load(&rc->health->up))
        log_info("redis cache: %s:%d %s connected again", rc->url->host, rc->url->port, rc->role);
    atomic_store(&rc->health->up, 1);
    *fresh = 1;
    return rc->c;
}

void redis_conn_fail(redis_conn *rc, const char *why) {
    char msg[256];
    snprintf(msg, sizeof msg, "%s", why ? why : rc->c && rc->c->errstr[0] ? rc->c->errstr : "connection failed");
    if (rc->c) redisFree(rc->c);
    rc->c = NULL;
    back_off(rc);
    warn_down(rc, msg);
}

void redis_conn_error_reply(redis_conn *rc, const char *what, const char *msg) {
    atomic_fetch_add(&rc->health->errors, 1);
    if (atomic_exchange(&rc->health->warned, 1) == 0)
        log_warn("redis cache: %s refused: %s; dropping what Redis refuses, serving goes on (warned once)", what, msg);
    else log_debug("redis cache: %s refused: %s", what, msg);
}

void redis_conn_close(redis_conn *rc) {
    if (rc->c) redisFree(rc->c);
    rc->c = NULL;
}
