/* test_redis.c - the shared tier on Redis: values encoded and verified
 * like block files (every kind of damage and forgery rejected), URL
 * parsing, and the tier against a real redis-server this test starts on
 * a free loopback port (installed by scripts/install-deps.sh --test):
 * round trip, no double writes, key expiry from retention marks and its
 * refresh, partial last blocks (tails) found and restored through the
 * tail lists (forged ones rejected), Redis down at start and killed
 * mid-run, lookup cost of a miss, and restore bandwidth next to the disk
 * tier. */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "cache/disk.h"
#include "cache/disk_file.h"
#include "cache/redis_conn.h"
#include "cache/redis_tier.h"
#include "test.h"
#include "test_util.h"

#define TB 16
#define BYTES 4096

/* ---- values ---- */

static void fill(uint8_t *p, size_t n, uint64_t s) {
    for (size_t i = 0; i < n; i++) s = s * 6364136223846793005ull + 1442695040888963407ull, p[i] = (uint8_t)(s >> 56);
}

typedef struct value {
    disk_hdr h;
    int32_t tok[TB];
    uint8_t kv[BYTES];
    uint8_t *bytes;
    size_t len;
} value;

static void value_make(value *v, int seed) {
    memset(v, 0, sizeof *v);
    v->h = (disk_hdr){.version = DISK_FORMAT_VERSION, .kv_dtype = 1, .n_tokens = TB, .payload_bytes = BYTES};
    memset(v->h.model_fp, 7, 32);
    cache_hash_root(&v->h.parent, v->h.model_fp, "t", 1);
    for (int i = 0; i < TB; i++) v->tok[i] = seed * 1000 + i;
    cache_hash_block(&v->h.hash, &v->h.parent, v->tok, TB);
    fill(v->kv, BYTES, (uint64_t)seed);
    v->len = disk_file_bytes(TB, BYTES);
    v->bytes = malloc(v->len);
    disk_file_encode(&v->h, v->tok, v->kv, v->bytes);
}

static int decode(const value *v, const uint8_t *buf, size_t len) {
    disk_expect ex = {.hash = &v->h.hash, .model_fp = v->h.model_fp, .n_tokens = TB, .kv_dtype = 1,
                      .payload_bytes = BYTES};
    disk_hdr h;
    int32_t tok[TB];
    uint8_t kv[BYTES];
    int rc = disk_file_decode(buf, len, &ex, &h, tok, kv, sizeof kv, NULL);
    if (rc == 0 && (memcmp(tok, v->tok, sizeof tok) || memcmp(kv, v->kv, BYTES))) return 1;
    return rc;
}

TEST(redis_value_is_a_block_file_byte_for_byte) {
    g_log_level = LOG_WARN;
    value v;
    value_make(&v, 1);
    char *dir = test_tmpdir_new(), path[4200];
    int sys_errno = 0;
    CHECK_EQ_INT(disk_file_write(dir, &v.h, v.tok, v.kv, 1, &sys_errno, NULL), 0);
    disk_file_path(dir, &v.h.hash, path, sizeof path, NULL, 0);
    size_t n;
    char *file = test_read_file(path, &n);
    CHECK(file && n == v.len && memcmp(file, v.bytes, n) == 0);
    CHECK_EQ_INT(decode(&v, v.bytes, v.len), 0);
    free(file);
    free(v.bytes);
    test_tmpdir_free(dir);
}

TEST(redis_value_damaged_or_forged_is_rejected) {
    value v, other;
    value_make(&v, 2);
    value_make(&other, 3);
    uint8_t *b = malloc(v.len);
    /* One flipped bit anywhere: magic, version, header, token ids, payload, trailing CRC. */
    size_t offs[] = {0, 9, 20, 40, 70, 100, 130, DISK_HDR_BYTES + 5, DISK_HDR_BYTES + 4 * TB + 7, v.len - 1};
    for (size_t i = 0; i < sizeof offs / sizeof offs[0]; i++) {
        memcpy(b, v.bytes, v.len);
        b[offs[i]] ^= 0x10;
        CHECK_MSG(decode(&v, b, v.len) == STRATA_EFORMAT, "flip at %zu accepted", offs[i]);
    }
    CHECK_EQ_INT(decode(&v, v.bytes, v.len - 1), STRATA_EFORMAT); /* truncated */
    CHECK_EQ_INT(decode(&v, v.bytes, 50), STRATA_EFORMAT);
    CHECK_EQ_INT(decode(&v, other.bytes, other.len), STRATA_EFORMAT); /* a real value under another key */
    disk_hdr h2 = v.h;
    h2.version = DISK_FORMAT_VERSION + 1; /* well formed, another version */
    disk_file_encode(&h2, v.tok, v.kv, b);
    CHECK_EQ_INT(decode(&v, b, v.len), STRATA_EFORMAT);
    memset(h2.model_fp, 9, 32), h2.version = DISK_FORMAT_VERSION; /* another model */
    disk_file_encode(&h2, v.tok, v.kv, b);
    CHECK_EQ_INT(decode(&v, b, v.len), STRATA_EFORMAT);
    free(b), free(v.bytes), free(other.bytes);
}

/* A value written by a replica with another --kv-type, under the name
 * this one asks for (the names differ by type, so only a forgery gets
 * here): rejected, the types named. */
TEST(redis_value_of_another_kv_type_is_rejected) {
    value v;
    value_make(&v, 4);
    disk_hdr h = v.h;
    h.kv_dtype = DISK_Q8_0;
    uint8_t *b = malloc(v.len), kv[BYTES];
    disk_file_encode(&h, v.tok, v.kv, b);
    disk_expect ex = {.hash = &v.h.hash, .model_fp = v.h.model_fp, .n_tokens = TB, .kv_dtype = DISK_F16,
                      .payload_bytes = BYTES};
    strata_err err = {0};
    CHECK_EQ_INT(disk_file_decode(b, v.len, &ex, &h, NULL, kv, sizeof kv, &err), STRATA_EFORMAT);
    CHECK_MSG(strstr(err.msg, "KV type q8_0, this store holds f16"), "message: %s", err.msg);
    free(b), free(v.bytes);
}

TEST(redis_url_forms) {
    redis_url u;
    CHECK_EQ_INT(redis_url_parse("redis://127.0.0.1:6390", &u, NULL), 0);
    CHECK(!strcmp(u.host, "127.0.0.1") && u.port == 6390 && u.db == 0 && !u.pass[0]);
    CHECK_EQ_INT(redis_url_parse("redis://:s3cret@cache.local:7000/2", &u, NULL), 0);
    CHECK(!strcmp(u.host, "cache.local") && u.port == 7000 && u.db == 2 && !strcmp(u.pass, "s3cret") && !u.user[0]);
    CHECK_EQ_INT(redis_url_parse("redis://bob:pw@h", &u, NULL), 0);
    CHECK(!strcmp(u.user, "bob") && !strcmp(u.pass, "pw") && u.port == 6379);
    const char *bad[] = {"http://h:1", "redis://", "redis://h:0", "redis://h:99999", "redis://h:12x", "redis://h/x", NULL};
    for (int i = 0; bad[i]; i++) CHECK_MSG(redis_url_parse(bad[i], &u, NULL) == STRATA_EINVAL, "%s accepted", bad[i]);
}

/* A URL that does not parse is named in the error without its password. */
TEST(redis_url_error_hides_the_password) {
    redis_url u;
    strata_err e = {0};
    const char *bad[] = {"redis://:hunter2@h:99999", "redis://bob:hunter2@", "rediss://:hunter2@h", NULL};
    for (int i = 0; bad[i]; i++) {
        CHECK_EQ_INT(redis_url_parse(bad[i], &u, &e), STRATA_EINVAL);
        CHECK_MSG(!strstr(e.msg, "hunter2") && strstr(e.msg, "***@"), "%s", e.msg);
    }
}

/* ---- a real redis-server ---- */

static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    bind(fd, (struct sockaddr *)&a, sizeof a);
    getsockname(fd, (struct sockaddr *)&a, &len);
    close(fd);
    return ntohs(a.sin_port);
}

/* Starts redis-server on port; its pid once it answers PING (bounded wait). */
static pid_t redis_start(int port) {
    char ports[16];
    snprintf(ports, sizeof ports, "%d", port);
    pid_t pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", 1);
        dup2(null, 1), dup2(null, 2);
        execlp("redis-server", "redis-server", "--port", ports, "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--dir", "/tmp", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 200; i++) {
        redisContext *c = redisConnectWithTimeout("127.0.0.1", port, (struct timeval){0, 100000});
        redisReply *r = c && !c->err ? redisCommand(c, "PING") : NULL;
        int up = r && r->type == REDIS_REPLY_STATUS;
        if (r) freeReplyObject(r);
        if (c) redisFree(c);
        if (up) return pid;
        usleep(20000);
    }
    CHECK_MSG(0, "redis-server did not start (installed? scripts/install-deps.sh --test)");
    return pid;
}

static void redis_stop(pid_t pid) {
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* timeout_ms: the tier's bound on one Redis answer (the server's default
 * is 100; a test that moves tens of MiB on a loaded machine needs more). */
static redis_tier *tier_open_opts(int port, uint64_t block_bytes, double ttl_s, int timeout_ms) {
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    redis_tier_opts o = {.url = url, .timeout_ms = timeout_ms, .block_tokens = TB, .kv_dtype = 1, .block_bytes = block_bytes,
                         .ttl_s = ttl_s};
    memset(o.model_fp, 7, 32);
    redis_tier *r = NULL;
    CHECK_EQ_INT(redis_tier_open(&r, &o, NULL), 0);
    return r;
}

static redis_tier *tier_open_ttl(int port, uint64_t block_bytes, double ttl_s) {
    return tier_open_opts(port, block_bytes, ttl_s, 100);
}

static redis_tier *tier_open(int port, uint64_t block_bytes) { return tier_open_ttl(port, block_bytes, 0); }

/* The writer thread has dealt with n writes (bounded wait). */
static void wait_written(redis_tier *r, long n) {
    redis_tier_stats s;
    for (int i = 0; i < 500; i++) {
        redis_tier_get_stats(r, &s);
        if (s.writes + s.write_skips + s.dropped_writes >= n) return;
        usleep(10000);
    }
    CHECK_MSG(0, "writes not done: %ld written %ld skipped %ld dropped", s.writes, s.write_skips, s.dropped_writes);
}

/* A chain of n blocks of `bytes` payload. */
typedef struct chain {
    cache_hash *h, root;
    int32_t *tok;
    uint8_t *kv;
} chain;

static void chain_make(chain *c, int n, size_t bytes, int seed) {
    uint8_t fp[32];
    memset(fp, 7, 32);
    c->h = malloc(n * sizeof *c->h), c->tok = malloc((size_t)n * TB * 4), c->kv = malloc(n * bytes);
    char salt[16];
    snprintf(salt, sizeof salt, "s%d", seed);
    cache_hash_root(&c->root, fp, salt, strlen(salt));
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < TB; j++) c->tok[i * TB + j] = seed * 100000 + i * TB + j;
        cache_hash_block(&c->h[i], i ? &c->h[i - 1] : &c->root, c->tok + i * TB, TB);
        fill(c->kv + (size_t)i * bytes, bytes, (uint64_t)(seed * 1000 + i));
    }
}

static void chain_free(chain *c) { free(c->h), free(c->tok), free(c->kv); }

static void write_chain(cache_tier *t, const chain *c, int n, size_t bytes) {
    for (int i = 0; i < n; i++)
        CHECK_EQ_INT(t->write(t->self, &c->h[i], i ? &c->h[i - 1] : &c->root, c->tok + i * TB, TB, c->kv + (size_t)i * bytes), 0);
}

/* Reads n blocks in one run; how many came back equal to what was written. */
static int read_chain(cache_tier *t, const chain *c, int n, size_t bytes, uint8_t *buf) {
    void **dst = malloc(n * sizeof *dst);
    int32_t **tok = malloc(n * sizeof *tok), *tb = malloc((size_t)n * TB * 4);
    int *rc = malloc(n * sizeof *rc);
    for (int i = 0; i < n; i++) dst[i] = buf + (size_t)i * bytes, tok[i] = tb + i * TB;
    int got = t->read_many(t->self, c->h, dst, tok, n, rc), same = 0;
    for (int i = 0; i < got; i++) same += !memcmp(dst[i], c->kv + (size_t)i * bytes, bytes) && !memcmp(tok[i], c->tok + i * TB, TB * 4);
    free(dst), free(tok), free(tb), free(rc);
    return same;
}

TEST(redis_tier_round_trip_and_no_double_writes) {
    g_log_level = LOG_ERROR;
    int port = free_port();
    pid_t pid = redis_start(port);
    redis_tier *r = tier_open(port, BYTES);
    cache_tier t = redis_tier_iface(r);
    chain c;
    chain_make(&c, 8, BYTES, 1);
    CHECK_EQ_INT(t.has_run(t.self, c.h, 8), 0);
    write_chain(&t, &c, 8, BYTES);
    write_chain(&t, &c, 8, BYTES); /* known present: not queued again */
    CHECK(t.write(t.self, &c.h[0], &c.root, c.tok, TB + 1, c.kv) < 0); /* more than a block: refused */
    wait_written(r, 8);
    uint8_t *buf = malloc(8 * BYTES);
    CHECK_EQ_INT(read_chain(&t, &c, 8, BYTES, buf), 8);
    redis_tier_stats s;
    redis_tier_get_stats(r, &s);
    CHECK_EQ_INT(s.writes, 8);
    CHECK_EQ_INT(s.hits, 8);
    redis_tier_close(r);
    /* Another replica: knows nothing locally, finds the run in one pipelined probe. */
    r = tier_open(port, BYTES);
    t = redis_tier_iface(r);
    CHECK_EQ_INT(t.has_run(t.self, c.h, 8), 8);
    write_chain(&t, &c, 8, BYTES);
    CHECK_EQ_INT(read_chain(&t, &c, 8, BYTES, buf), 8);
    redis_tier_get_stats(r, &s);
    CHECK_EQ_INT(s.writes, 0);
    redis_tier_close(r);
    free(buf);
    chain_free(&c);
    redis_stop(pid);
}

TEST(redis_tier_down_at_start_and_killed_mid_run) {
    g_log_level = LOG_ERROR;
    int port = free_port();
    redis_tier *r = tier_open(port, BYTES); /* nothing listens yet */
    cache_tier t = redis_tier_iface(r);
    chain c;
    chain_make(&c, 4, BYTES, 2);
    uint8_t *buf = malloc(4 * BYTES);
    double t0 = clock_ms();
    CHECK_EQ_INT(t.has(t.self, &c.h[0]), 0);
    CHECK_EQ_INT(read_chain(&t, &c, 4, BYTES, buf), 0);
    CHECK(clock_ms() - t0 < 100); /* down: answered at once, within the backoff */
    redis_tier_stats s;
    redis_tier_get_stats(r, &s);
    CHECK(s.errors >= 1 && !s.up);
    pid_t pid = redis_start(port);
    usleep(4 * REDIS_BACKOFF_MIN_MS * 1000); /* past the backoff of one failure each */
    write_chain(&t, &c, 4, BYTES);
    wait_written(r, 4);
    redis_tier_get_stats(r, &s);
    CHECK_EQ_INT(s.writes, 4);
    redis_stop(pid); /* killed: reads fail fast, the store computes instead */
    t0 = clock_ms();
    CHECK_EQ_INT(read_chain(&t, &c, 4, BYTES, buf), 0);
    CHECK_EQ_INT(t.has(t.self, &c.h[2]), 0); /* the failed read forgot what it knew */
    CHECK(clock_ms() - t0 < 250);
    redis_tier_close(r);
    free(buf);
    chain_free(&c);
}

/* Measured, printed: the cost of a lookup Redis must answer "absent", and
 * the bandwidth of a 32-block restore from Redis next to the disk tier. */
TEST(redis_tier_miss_cost_and_restore_bandwidth) {
    enum { N = 32, SZ = 1536 * 1024, MISSES = 2000 };
    g_log_level = LOG_ERROR;
    int port = free_port();
    pid_t pid = redis_start(port);
    redis_tier *r = tier_open_opts(port, SZ, 0, 2000); /* 48 MiB under whatever load CI has */
    cache_tier t = redis_tier_iface(r);
    chain c, m;
    chain_make(&c, N, SZ, 3);
    chain_make(&m, 1, 16, 4);
    double t0 = clock_ms();
    for (int i = 0; i < MISSES; i++) {
        cache_hash h = m.h[0];
        memcpy(h.b, &i, sizeof i); /* a new absent key each time */
        CHECK_EQ_INT(t.has(t.self, &h), 0);
    }
    double miss_us = (clock_ms() - t0) * 1e3 / MISSES;
    write_chain(&t, &c, N, SZ);
    wait_written(r, N);
    uint8_t *buf = malloc((size_t)N * SZ);
    t0 = clock_ms();
    CHECK_EQ_INT(read_chain(&t, &c, N, SZ, buf), N);
    double redis_ms = clock_ms() - t0;
    /* The same blocks through the disk tier's run read. */
    char *dir = test_tmpdir_new();
    disk_opts o = {.dir = dir, .block_tokens = TB, .block_bytes = SZ, .kv_dtype = 1};
    memset(o.model_fp, 7, 32);
    disk_store *d;
    CHECK_EQ_INT(disk_open(&d, &o, NULL), 0);
    for (int i = 0; i < N; i++) disk_put(d, &c.h[i], i ? &c.h[i - 1] : &c.root, c.tok + i * TB, c.kv + (size_t)i * SZ);
    disk_flush(d);
    void **dst = malloc(N * sizeof *dst);
    int32_t **tok = malloc(N * sizeof *tok), *tb = malloc((size_t)N * TB * 4);
    int rc[N];
    for (int i = 0; i < N; i++) dst[i] = buf + (size_t)i * SZ, tok[i] = tb + i * TB;
    t0 = clock_ms();
    CHECK_EQ_INT(disk_get_many(d, c.h, dst, tok, N, rc), N);
    double disk_ms = clock_ms() - t0;
    double mb = N * (double)SZ / 1e6;
    fprintf(stderr, "    miss lookup %.1f us (one EXISTS); %d x 1.5 MiB restore: redis %.0f MB/s, disk %.0f MB/s (page cache)\n",
            miss_us, N, mb / (redis_ms / 1e3), mb / (disk_ms / 1e3));
    free(dst), free(tok), free(tb), free(buf);
    disk_close(d);
    test_tmpdir_free(dir);
    redis_tier_close(r);
    chain_free(&c), chain_free(&m);
    redis_stop(pid);
}

/* A Redis that stops answering (SIGSTOP: slow, swapped out, stuck) costs
 * a call one timeout, and then nothing while the backoff lasts. */
TEST(redis_tier_stalled_redis_costs_at_most_the_timeout) {
    g_log_level = LOG_ERROR;
    int port = free_port();
    pid_t pid = redis_start(port);
    redis_tier *r = tier_open(port, BYTES); /* timeout 100 ms */
    cache_tier t = redis_tier_iface(r);
    chain c;
    chain_make(&c, 4, BYTES, 5);
    uint8_t *buf = malloc(4 * BYTES);
    kill(pid, SIGSTOP);
    double t0 = clock_ms();
    CHECK_EQ_INT(t.has(t.self, &c.h[0]), 0);
    double probe_ms = clock_ms() - t0;
    t0 = clock_ms();
    CHECK_EQ_INT(t.has(t.self, &c.h[1]), 0);
    double again_ms = clock_ms() - t0;
    t0 = clock_ms();
    CHECK_EQ_INT(read_chain(&t, &c, 4, BYTES, buf), 0);
    double read_ms = clock_ms() - t0;
    CHECK_MSG(probe_ms >= 90 && probe_ms < 300, "probe waited %.0f ms", probe_ms);
    CHECK_MSG(read_ms < 400, "read waited %.0f ms", read_ms); /* connect + one timeout */
    CHECK_MSG(again_ms < 20, "probe in backoff waited %.0f ms", again_ms);
    redis_tier_stats s;
    redis_tier_get_stats(r, &s);
    CHECK(s.errors >= 2 && !s.up);
    kill(pid, SIGCONT);
    redis_tier_close(r);
    free(buf);
    chain_free(&c);
    redis_stop(pid);
}

/* ---- expiry from retention marks, and tails ---- */

static redisContext *raw_conn(int port) {
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, (struct timeval){2, 0});
    CHECK(c && !c->err);
    return c;
}

/* A command with one integer reply (PTTL, EXISTS, HLEN); LLONG_MIN if not. */
static long long raw_int(redisContext *c, const char *fmt, const char *key) {
    redisReply *rep = redisCommand(c, fmt, key);
    long long v = rep && rep->type == REDIS_REPLY_INTEGER ? rep->integer : -999999;
    if (rep) freeReplyObject(rep);
    return v;
}

static long long key_pttl(redisContext *c, const cache_hash *h) {
    char key[REDIS_KEY_BYTES];
    redis_tier_key(h, key);
    return raw_int(c, "PTTL %s", key);
}

/* The writer has pushed n expiries (bounded wait). */
static void wait_expires(redis_tier *r, long n) {
    redis_tier_stats s;
    for (int i = 0; i < 500; i++) {
        redis_tier_get_stats(r, &s);
        if (s.expires >= n) return;
        usleep(10000);
    }
    CHECK_MSG(0, "expiries not pushed: %ld of %ld", s.expires, n);
}

/* Unmarked keys get the default expiry; a mark lengthens it (as SET PX
 * while the block is queued, PEXPIRE once it is stored), never shortens
 * it; a hit pushes it again without rewriting the value; 0 is no expiry. */
TEST(redis_tier_ttl_follows_retention_marks_and_refreshes) {
    g_log_level = LOG_ERROR;
    int port = free_port();
    pid_t pid = redis_start(port);
    redisContext *rc = raw_conn(port);
    redis_tier *r = tier_open_ttl(port, BYTES, 60);
    cache_tier t = redis_tier_iface(r);
    chain c;
    chain_make(&c, 4, BYTES, 11);
    write_chain(&t, &c, 4, BYTES);
    t.retain(t.self, &c.h[0], 7200); /* an anchor-long mark, likely still queued */
    t.retain(t.self, &c.h[2], 300);  /* cache_control 5m: longer than the default */
    t.retain(t.self, &c.h[3], 30);   /* shorter than the default: no effect */
    wait_written(r, 4);
    usleep(100000);
    long long p0 = key_pttl(rc, &c.h[0]), p1 = key_pttl(rc, &c.h[1]), p2 = key_pttl(rc, &c.h[2]),
              p3 = key_pttl(rc, &c.h[3]);
    CHECK_MSG(p0 > 7190000 && p0 <= 7200000, "anchor-marked pttl %lld", p0);
    CHECK_MSG(p1 > 55000 && p1 <= 60000, "unmarked pttl %lld", p1);
    CHECK_MSG(p2 > 295000 && p2 <= 300000, "5m-marked pttl %lld", p2);
    CHECK_MSG(p3 > 55000 && p3 <= 60000, "short mark shortened it: pttl %lld", p3);
    /* A later request marks a stored block: PEXPIRE, the value untouched. */
    redis_tier_stats s0, s;
    redis_tier_get_stats(r, &s0);
    t.retain(t.self, &c.h[1], 3600);
    wait_expires(r, s0.expires + 1);
    long long p1b = key_pttl(rc, &c.h[1]);
    CHECK_MSG(p1b > 3590000 && p1b <= 3600000, "re-marked pttl %lld", p1b);
    t.retain(t.self, &c.h[1], 3600); /* again at once: known, not sent again */
    usleep(50000);
    redis_tier_get_stats(r, &s);
    CHECK_EQ_INT(s.expires, s0.expires + 1);
    CHECK_EQ_INT(s.writes, 4); /* no value rewritten */
    uint8_t *buf = malloc(4 * BYTES);
    CHECK_EQ_INT(read_chain(&t, &c, 4, BYTES, buf), 4); /* the values are the ones written */
    redis_tier_close(r);
    /* Another replica reads the run: a hit pushes the default expiry, which
     * must not shorten the anchor's (PEXPIRE GT). */
    r = tier_open_ttl(port, BYTES, 60);
    t = redis_tier_iface(r);
    CHECK_EQ_INT(read_chain(&t, &c, 4, BYTES, buf), 4);
    wait_expires(r, 4);
    p0 = key_pttl(rc, &c.h[0]);
    CHECK_MSG(p0 > 7180000, "a hit shortened the anchor's expiry: pttl %lld", p0);
    redis_tier_close(r);
    /* A short default: a hit pushes the expiry back up. */
    chain d;
    chain_make(&d, 1, BYTES, 12);
    r = tier_open_ttl(port, BYTES, 2);
    t = redis_tier_iface(r);
    write_chain(&t, &d, 1, BYTES);
    wait_written(r, 1);
    usleep(600000);
    long long before = key_pttl(rc, &d.h[0]);
    t.touch(t.self, &d.h[0]); /* a hit served by a tier above */
    wait_expires(r, 1);
    long long after = key_pttl(rc, &d.h[0]);
    CHECK_MSG(before < 1500 && after > 1800, "touch: pttl %lld -> %lld", before, after);
    /* A tail touched: its list is pushed with it (the tier remembers its parent). */
    cache_hash th;
    cache_hash_block(&th, &d.h[0], d.tok, 5);
    CHECK_EQ_INT(t.write(t.self, &th, &d.h[0], d.tok, 5, d.kv), 0);
    wait_written(r, 2);
    usleep(600000);
    char lkey[REDIS_TAILS_KEY_BYTES];
    redis_tier_tails_key(&d.h[0], lkey);
    long long lb = raw_int(rc, "PTTL %s", lkey);
    t.touch(t.self, &th);
    wait_expires(r, 2);
    long long la = raw_int(rc, "PTTL %s", lkey), ta = key_pttl(rc, &th);
    CHECK_MSG(lb < 1500 && la > 1800 && ta > 1800, "tail touch: list %lld -> %lld, tail %lld", lb, la, ta);
    redis_tier_close(r);
    /* No default expiry: keys never expire, and marks cannot shorten "never". */
    chain e;
    chain_make(&e, 1, BYTES, 13);
    r = tier_open_ttl(port, BYTES, 0);
    t = redis_tier_iface(r);
    write_chain(&t, &e, 1, BYTES);
    t.retain(t.self, &e.h[0], 300);
    wait_written(r, 1);
    usleep(50000);
    CHECK_EQ_INT(key_pttl(rc, &e.h[0]), -1);
    redis_tier_close(r);
    free(buf);
    chain_free(&c), chain_free(&d), chain_free(&e);
    redisFree(rc);
    redis_stop(pid);
}

/* Reads the partial match h (n_tok tokens) alone; 0 and its bytes, or the rc. */
static int read_part(cache_tier *t, const cache_hash *h, uint8_t *kv, int32_t *tok) {
    void *dst[1] = {kv};
    int32_t *to[1] = {tok};
    int rc[1];
    t->read_many(t->self, h, dst, to, 1, rc);
    return rc[0];
}

/* A tail (fewer than B tokens) written by one replica is found by another
 * through its parent's list (fetched in the probe round of the run) and
 * restored byte for byte; a longer one replaces it; a forged value or a
 * malformed list is rejected, counted, deleted and never loaded. */
TEST(redis_tier_tails_restore_and_forgeries_are_rejected) {
    g_log_level = LOG_ERROR;
    int port = free_port();
    pid_t pid = redis_start(port);
    redisContext *rc = raw_conn(port);
    redis_tier *a = tier_open_ttl(port, BYTES, 60);
    cache_tier ta = redis_tier_iface(a);
    chain c;
    chain_make(&c, 3, BYTES, 21); /* blocks 0, 1; block 2's tokens and KV give the tails */
    write_chain(&ta, &c, 2, BYTES);
    const int32_t *tt = c.tok + 2 * TB;
    const uint8_t *tkv = c.kv + 2 * BYTES;
    cache_hash t5, t9;
    cache_hash_block(&t5, &c.h[1], tt, 5);
    cache_hash_block(&t9, &c.h[1], tt, 9);
    CHECK_EQ_INT(ta.write(ta.self, &t5, &c.h[1], tt, 5, tkv), 0);
    wait_written(a, 3);
    char lkey[REDIS_TAILS_KEY_BYTES];
    redis_tier_tails_key(&c.h[1], lkey);
    CHECK_EQ_INT(raw_int(rc, "HLEN %s", lkey), 1);
    long long lp = raw_int(rc, "PTTL %s", lkey);
    CHECK_MSG(lp > 55000 && lp <= 60000, "tail list pttl %lld", lp);

    /* Another replica: the run's probe brings the list; the tail matches
     * 5 tokens of a prompt that goes on, 3 of one that diverges. */
    redis_tier *b = tier_open_ttl(port, BYTES, 60);
    cache_tier tb = redis_tier_iface(b);
    CHECK_EQ_INT(tb.has_run(tb.self, c.h, 2), 2);
    int32_t want[TB];
    memcpy(want, tt, sizeof want);
    cache_hash h;
    int n_tok = 0;
    CHECK_EQ_INT(tb.best_child(tb.self, &c.h[1], want, TB, &h, &n_tok), 5);
    CHECK(!memcmp(h.b, t5.b, 32) && n_tok == 5);
    want[3] = -7;
    CHECK_EQ_INT(tb.best_child(tb.self, &c.h[1], want, TB, &h, &n_tok), 3);
    CHECK_EQ_INT(tb.best_child(tb.self, &c.h[0], want, TB, &h, &n_tok), 0); /* nothing under block 0 */
    uint8_t kv[BYTES];
    int32_t tok[TB];
    CHECK_EQ_INT(read_part(&tb, &t5, kv, tok), 0);
    CHECK(!memcmp(kv, tkv, BYTES) && !memcmp(tok, tt, 5 * 4)); /* bit-identical */
    redis_tier_stats s;
    redis_tier_get_stats(b, &s);
    CHECK_EQ_INT(s.tail_hits, 1);

    /* A longer tail holds the first whole: it replaces it. */
    CHECK_EQ_INT(ta.write(ta.self, &t9, &c.h[1], tt, 9, tkv), 0);
    wait_written(a, 4);
    usleep(50000);
    char key[REDIS_KEY_BYTES];
    redis_tier_key(&t5, key);
    CHECK_EQ_INT(raw_int(rc, "EXISTS %s", key), 0);
    CHECK_EQ_INT(raw_int(rc, "HLEN %s", lkey), 1);
    redis_tier_close(b);

    /* Forged: a well-formed value under the tail's key whose token ids do
     * not hash to it (another prompt's KV passed off as this one's). */
    disk_hdr fh = {.version = DISK_FORMAT_VERSION, .kv_dtype = 1, .n_tokens = 9, .payload_bytes = BYTES,
                   .hash = t9, .parent = c.h[1]};
    memset(fh.model_fp, 7, 32);
    int32_t ftok[9];
    memcpy(ftok, tt, sizeof ftok);
    ftok[8] += 1;
    uint8_t *fv = malloc(disk_file_bytes(9, BYTES));
    disk_file_encode(&fh, ftok, c.kv, fv);
    redis_tier_key(&t9, key);
    redisReply *rep = redisCommand(rc, "SET %s %b", key, fv, (size_t)disk_file_bytes(9, BYTES));
    freeReplyObject(rep);
    b = tier_open_ttl(port, BYTES, 60);
    tb = redis_tier_iface(b);
    memcpy(want, tt, sizeof want);
    CHECK_EQ_INT(tb.has_run(tb.self, c.h, 2), 2);
    CHECK_EQ_INT(tb.best_child(tb.self, &c.h[1], want, TB, &h, &n_tok), 9);
    memset(kv, 0x55, sizeof kv);
    CHECK_EQ_INT(read_part(&tb, &t9, kv, tok), STRATA_EFORMAT);
    uint8_t zero[BYTES] = {0};
    CHECK(!memcmp(kv, zero, BYTES)); /* nothing of it is left in the block */
    redis_tier_get_stats(b, &s);
    CHECK_EQ_INT(s.rejected, 1);
    CHECK_EQ_INT(s.hits, 0);
    CHECK_EQ_INT(raw_int(rc, "EXISTS %s", key), 0); /* deleted, and off the list */
    CHECK_EQ_INT(raw_int(rc, "HLEN %s", lkey), 0);
    CHECK_EQ_INT(tb.best_child(tb.self, &c.h[1], want, TB, &h, &n_tok), 0);

    /* A malformed list entry (not 1..B-1 token ids): the list is rejected and deleted. */
    rep = redisCommand(rc, "HSET %s %b %b", lkey, t9.b, (size_t)32, "abc", (size_t)3);
    freeReplyObject(rep);
    redis_tier_close(b);
    b = tier_open_ttl(port, BYTES, 60);
    tb = redis_tier_iface(b);
    CHECK_EQ_INT(tb.best_child(tb.self, &c.h[1], want, TB, &h, &n_tok), 0);
    redis_tier_get_stats(b, &s);
    CHECK_EQ_INT(s.rejected, 1);
    CHECK_EQ_INT(raw_int(rc, "EXISTS %s", lkey), 0);
    redis_tier_close(b);
    redis_tier_close(a);
    free(fv);
    chain_free(&c);
    redisFree(rc);
    redis_stop(pid);
}

/* A snapshot's key and its boundary's list, by their names in Redis. */
static long long snap_pttl(redisContext *c, const char *prefix, const cache_hash *h) {
    char hex[65], key[96];
    cache_hash_hex(h, hex);
    snprintf(key, sizeof key, "%s%s", prefix, hex);
    return raw_int(c, "PTTL %s", key);
}

/* Retention marks reach snapshots as they reach blocks: a marked
 * snapshot's value and its boundary's list live as long as the mark
 * (PEXPIRE GT), an unmarked one keeps the default, and a later snapshot
 * written on the same list never shortens the list's expiry. */
TEST(redis_tier_snapshot_ttl_follows_retention_marks) {
    g_log_level = LOG_ERROR;
    int port = free_port();
    pid_t pid = redis_start(port);
    redisContext *rc = raw_conn(port);
    redis_tier *r = tier_open_ttl(port, BYTES, 60);
    cache_tier t = redis_tier_iface(r);
    CHECK(t.snap_retain != NULL);
    cache_hash bound, marked, plain, other_bound;
    memset(bound.b, 0x11, 32), memset(marked.b, 0x22, 32), memset(plain.b, 0x33, 32), memset(other_bound.b, 0x44, 32);
    int32_t toks[3] = {5, 6, 7};
    float state[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    CHECK_EQ_INT(t.snap_write(t.self, &marked, &bound, toks, 2, state, 8), 0);
    t.snap_retain(t.self, &marked, &bound, 3600); /* the anchor's end: queued behind its write */
    CHECK_EQ_INT(t.snap_write(t.self, &plain, &other_bound, toks, 3, state, 8), 0);
    wait_expires(r, 1);
    long long pv = snap_pttl(rc, "strata:rs:", &marked), pl = snap_pttl(rc, "strata:rsl:", &bound),
              pu = snap_pttl(rc, "strata:rs:", &plain);
    CHECK_MSG(pv > 3590000 && pv <= 3600000, "marked snapshot pttl %lld", pv);
    CHECK_MSG(pl > 3590000 && pl <= 3600000, "marked snapshot's list pttl %lld", pl);
    CHECK_MSG(pu > 55000 && pu <= 60000, "unmarked snapshot pttl %lld", pu);
    cache_hash later;
    memset(later.b, 0x55, 32);
    CHECK_EQ_INT(t.snap_write(t.self, &later, &bound, toks, 1, state, 8), 0); /* same list, default expiry */
    wait_written(r, 3);
    pl = snap_pttl(rc, "strata:rsl:", &bound);
    CHECK_MSG(pl > 3590000, "a later snapshot shortened the list's expiry: pttl %lld", pl);
    float got[8];
    CHECK_EQ_INT(t.snap_read(t.self, &marked, got, 8), 0); /* the value is the one written */
    CHECK(memcmp(got, state, sizeof got) == 0);
    redis_tier_close(r);
    redisFree(rc);
    redis_stop(pid);
}
