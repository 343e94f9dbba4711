/* test_disk.c - the disk tier: round trip, restart, damaged files of every
 * kind, no double writes, leaf-first eviction that spares fresh blocks,
 * unwritable directories, and SIGKILL in the middle of writes. Each test
 * works in its own mkdtemp directory under /tmp and removes it. */
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "cache/disk.h"
#include "cache/disk_file.h"
#include "test.h"
#include "test_util.h"
#include "text/tokenizer.h"

#define TB 16          /* tokens per block */
#define BYTES 4096     /* KV payload per block */

/* ---- fixtures ---- */

static char *tmpdir_new(void) {
    g_log_level = LOG_WARN; /* one info line per open is noise here */
    return test_tmpdir_new();
}

static void tmpdir_free(const char *dir) { test_tmpdir_free(dir); }

static disk_opts opts_for(const char *dir, uint8_t fp_byte) {
    disk_opts o = {.dir = dir, .block_tokens = TB, .block_bytes = BYTES, .kv_dtype = DISK_F16};
    memset(o.model_fp, fp_byte, 32);
    return o;
}

static uint64_t xorshift(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

/* Block i of chain `seed`: deterministic tokens and random-looking KV. */
typedef struct blk {
    cache_hash h, parent;
    int32_t tok[TB];
    uint8_t *kv;
} blk;

static void chain_make(blk *b, int n, int seed, size_t bytes, const uint8_t fp[32]) {
    cache_hash prev;
    char salt[32];
    snprintf(salt, sizeof salt, "chain-%d", seed);
    cache_hash_root(&prev, fp, salt, strlen(salt));
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < TB; j++) b[i].tok[j] = seed * 100000 + i * TB + j;
        b[i].parent = prev;
        cache_hash_block(&b[i].h, &prev, b[i].tok, TB);
        prev = b[i].h;
        b[i].kv = malloc(bytes);
        uint64_t s = 0x9E3779B97F4A7C15ull ^ ((uint64_t)seed << 20) ^ (uint64_t)(i + 1);
        for (size_t k = 0; k + 8 <= bytes; k += 8) {
            uint64_t v = xorshift(&s);
            memcpy(b[i].kv + k, &v, 8);
        }
    }
}

static void chain_free(blk *b, int n) {
    for (int i = 0; i < n; i++) free(b[i].kv);
}

static int get_ok(disk_store *d, const blk *b) {
    uint8_t buf[BYTES];
    int32_t tok[TB];
    strata_err e = {0};
    if (disk_get(d, &b->h, buf, tok, &e)) return 0;
    return memcmp(buf, b->kv, BYTES) == 0 && memcmp(tok, b->tok, sizeof tok) == 0;
}

static void path_of(const char *dir, const blk *b, char *out) {
    disk_file_path(dir, &b->h, out, 4200, NULL, 0);
}

static int exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

static int count_quarantined(const char *dir) {
    char q[4200];
    snprintf(q, sizeof q, "%s/quarantine", dir);
    DIR *dp = opendir(q);
    int n = 0;
    for (struct dirent *de; dp && (de = readdir(dp));) n += de->d_name[0] != '.';
    if (dp) closedir(dp);
    return n;
}

static void flip_byte(const char *path, long off) {
    int fd = open(path, O_RDWR);
    uint8_t c;
    CHECK(pread(fd, &c, 1, off) == 1);
    c ^= 0x10;
    CHECK(pwrite(fd, &c, 1, off) == 1);
    close(fd);
}

static void put_all(disk_store *d, blk *b, int n) {
    for (int i = 0; i < n; i++) disk_put(d, &b[i].h, &b[i].parent, b[i].tok, b[i].kv);
    disk_flush(d);
}

/* ---- tests ---- */

TEST(disk_put_get_round_trip) {
    char *dir = tmpdir_new();
    disk_opts o = opts_for(dir, 7);
    disk_store *d;
    strata_err e = {0};
    CHECK_EQ_INT(disk_open(&d, &o, &e), 0);
    blk b[5];
    chain_make(b, 5, 1, BYTES, o.model_fp);
    for (int i = 0; i < 5; i++) CHECK_EQ_INT(disk_put(d, &b[i].h, &b[i].parent, b[i].tok, b[i].kv), 0);
    for (int i = 0; i < 5; i++) CHECK(disk_has(d, &b[i].h));
    CHECK(get_ok(d, &b[2])); /* queued or written: identical either way */
    disk_flush(d);
    for (int i = 0; i < 5; i++) CHECK(get_ok(d, &b[i]));
    disk_stats st;
    disk_get_stats(d, &st);
    CHECK_EQ_INT(st.writes, 5);
    CHECK_EQ_INT(st.files, 5);
    CHECK_EQ_INT(st.bytes, 5 * disk_file_bytes(TB, BYTES));
    CHECK_EQ_INT(st.pending, 0);
    cache_hash other = {{1, 2, 3}};
    uint8_t buf[BYTES];
    CHECK(!disk_has(d, &other));
    CHECK(disk_get(d, &other, buf, NULL, &e) != 0);
    disk_close(d);
    chain_free(b, 5);
    tmpdir_free(dir);
}

typedef struct child_count {
    int blocks, leaves;
    double hits;
} child_count;

static void count_leaves(void *ctx, const disk_block_info *b) {
    child_count *c = ctx;
    c->blocks++;
    c->leaves += b->n_children == 0;
    c->hits += b->hits;
}

TEST(disk_restart_rebuilds_index_from_headers) {
    char *dir = tmpdir_new();
    disk_opts o = opts_for(dir, 7);
    disk_store *d;
    blk a[6], b[3];
    chain_make(a, 6, 1, BYTES, o.model_fp);
    chain_make(b, 3, 2, BYTES, o.model_fp);
    CHECK_EQ_INT(disk_open(&d, &o, NULL), 0);
    for (int i = 0; i < 6; i++) disk_put(d, &a[i].h, &a[i].parent, a[i].tok, a[i].kv);
    for (int i = 0; i < 3; i++) disk_put(d, &b[i].h, &b[i].parent, b[i].tok, b[i].kv);
    disk_flush(d);
    disk_touch(d, &a[0].h);
    disk_touch(d, &a[0].h);
    disk_touch(d, &b[2].h);
    disk_close(d); /* drains the queue, saves hit counts */
    CHECK_EQ_INT(disk_open(&d, &o, NULL), 0);
    disk_stats st;
    disk_get_stats(d, &st);
    CHECK_EQ_INT(st.files, 9);
    CHECK_EQ_INT(st.reads, 0); /* headers only */
    child_count cc = {0};
    disk_foreach(d, count_leaves, &cc);
    CHECK_EQ_INT(cc.blocks, 9);
    CHECK_EQ_INT(cc.leaves, 2); /* a[5] and b[2]: parents known from headers */
    CHECK_NEAR(cc.hits, 3.0, 0.01); /* from the usage file */
    for (int i = 0; i < 6; i++) CHECK(get_ok(d, &a[i]));
    for (int i = 0; i < 3; i++) CHECK(get_ok(d, &b[i]));
    disk_close(d);
    chain_free(a, 6);
    chain_free(b, 3);
    tmpdir_free(dir);
}

/* Rewrites block b's file with a header that differs (model or version)
 * but carries valid checksums: only the field check can catch it. */
static void rewrite_with(const char *dir, const blk *b, uint8_t fp_byte, uint32_t version) {
    disk_hdr h = {.version = version, .kv_dtype = DISK_F16, .n_tokens = TB, .payload_bytes = BYTES,
                  .hash = b->h, .parent = b->parent};
    memset(h.model_fp, fp_byte, 32);
    int sys_errno = 0;
    CHECK_EQ_INT(disk_file_write(dir, &h, b->tok, b->kv, 999, &sys_errno, NULL), 0);
}

/* Six kinds of damage, all found on read: truncated, payload bit, header
 * bit, token bit, other model, other version. */
static void damage(const char *dir, blk *b) {
    char p[4200];
    path_of(dir, &b[0], p);
    CHECK(truncate(p, (off_t)disk_file_bytes(TB, BYTES) - 100) == 0);
    path_of(dir, &b[1], p);
    flip_byte(p, DISK_HDR_BYTES + 4 * TB + 1000);
    path_of(dir, &b[2], p);
    flip_byte(p, 100);
    path_of(dir, &b[3], p);
    flip_byte(p, DISK_HDR_BYTES + 5);
    rewrite_with(dir, &b[4], 9, DISK_FORMAT_VERSION);
    rewrite_with(dir, &b[5], 7, DISK_FORMAT_VERSION + 1);
}

TEST(disk_damaged_files_are_quarantined_never_loaded) {
    char *dir = tmpdir_new();
    disk_opts o = opts_for(dir, 7);
    disk_store *d;
    blk b[7];
    chain_make(b, 7, 3, BYTES, o.model_fp);
    CHECK_EQ_INT(disk_open(&d, &o, NULL), 0);
    for (int i = 0; i < 7; i++) disk_put(d, &b[i].h, &b[i].parent, b[i].tok, b[i].kv);
    disk_flush(d);
    damage(dir, b);
    for (int i = 0; i < 6; i++) {
        uint8_t buf[BYTES];
        strata_err e = {0};
        char p[4200];
        int rc = disk_get(d, &b[i].h, buf, NULL, &e);
        CHECK_MSG(rc == STRATA_EFORMAT, "fault %d: rc %d (%s)", i, rc, e.msg);
        CHECK_MSG(strstr(e.msg, "quarantined") != NULL, "fault %d: message '%s'", i, e.msg);
        path_of(dir, &b[i], p);
        CHECK_MSG(!exists(p), "fault %d: file still in place", i);
        CHECK(!disk_has(d, &b[i].h));
        uint8_t zero[BYTES] = {0};
        CHECK(memcmp(buf, zero, BYTES) == 0); /* nothing of it handed out */
    }
    CHECK(get_ok(d, &b[6])); /* the healthy one still loads */
    disk_stats st;
    disk_get_stats(d, &st);
    CHECK_EQ_INT(st.quarantined, 6);
    CHECK_EQ_INT(count_quarantined(dir), 6);
    CHECK_EQ_INT(st.files, 1);
    disk_close(d);
    chain_free(b, 7);
    tmpdir_free(dir);
}

TEST(disk_damaged_files_found_at_open) {
    char *dir = tmpdir_new();
    disk_opts o = opts_for(dir, 7);
    disk_store *d;
    blk b[7];
    chain_make(b, 7, 4, BYTES, o.model_fp);
    CHECK_EQ_INT(disk_open(&d, &o, NULL), 0);
    for (int i = 0; i < 7; i++) disk_put(d, &b[i].h, &b[i].parent, b[i].tok, b[i].kv);
    disk_close(d);
    damage(dir, b);
    CHECK_EQ_INT(disk_open(&d, &o, NULL), 0);
    disk_stats st;
    disk_get_stats(d, &st);
    /* Headers reveal the truncation, header and token flips: quarantined.
     * Other model / newer version: left alone for their owner. The payload
     * flip needs a payload read: it is indexed and caught on get. */
    CHECK_EQ_INT(st.quarantined, 3);
    CHECK_EQ_INT(st.foreign, 2);
    CHECK_EQ_INT(st.files, 2);
    char p[4200];
    path_of(dir, &b[4], p);
    CHECK(exists(p));
    CHECK(!disk_has(d, &b[4].h));
    CHECK(!disk_has(d, &b[5].h));
    uint8_t buf[BYTES];
    CHECK_EQ_INT(disk_get(d, &b[1].h, buf, NULL, NULL), STRATA_EFORMAT);
    CHECK(get_ok(d, &b[6]));
    disk_get_stats(d, &st);
    CHECK_EQ_INT(st.quarantined, 4);
    disk_close(d);
    chain_free(b, 7);
    tmpdir_free(dir);
}

/* A bit flip in the version field is damage (the header CRC says so),
 * not a file of another version left alone outside the budget; a FIFO
 * named like a block never blocks the open (a hang here fails the test
 * through the alarm) and goes to quarantine. */
TEST(disk_version_flip_and_fifo_are_quarantined) {
    char *dir = tmpdir_new();
    disk_opts o = opts_for(dir, 7);
    disk_store *d;
    blk b[3];
    chain_make(b, 3, 12, BYTES, o.model_fp);
    CHECK_EQ_INT(disk_open(&d, &o, NULL), 0);
    put_all(d, b, 3);
    disk_close(d);
    char p[4200];
    path_of(dir, &b[0], p);
    flip_byte(p, 8); /* the format version */
    path_of(dir, &b[2], p);
    CHECK_EQ_INT(unlink(p), 0);
    CHECK_EQ_INT(mkfifo(p, 0644), 0);
    alarm(20);
    CHECK_EQ_INT(disk_open(&d, &o, NULL), 0);
    disk_stats st;
    disk_get_stats(d, &st);
    CHECK_EQ_INT(st.quarantined, 2);
    CHECK_EQ_INT(st.foreign, 0);
    CHECK_EQ_INT(st.files, 1);
    uint8_t buf[BYTES];
    CHECK(disk_get(d, &b[2].h, buf, NULL, NULL) != 0); /* a miss, at once */
    alarm(0);
    disk_close(d);
    chain_free(b, 3);
    tmpdir_free(dir);
}

TEST(disk_never_stores_a_block_twice) {
    char *dir = tmpdir_new();
    disk_opts o = opts_for(dir, 7);
    disk_store *d;
    blk b[1];
    chain_make(b, 1, 5, BYTES, o.model_fp);
    CHECK_EQ_INT(disk_open(&d, &o, NULL), 0);
    CHECK_EQ_INT(disk_put(d, &b[0].h, &b[0].parent, b[0].tok, b[0].kv), 0);
    CHECK_EQ_INT(disk_put(d, &b[0].h, &b[0].parent, b[0].tok, b[0].kv), 0); /* queued: no-op */
    disk_flush(d);
    CHECK_EQ_INT(disk_put(d, &b[0].h, &b[0].parent, b[0].tok, b[0].kv), 0); /* stored: no-op */
    disk_flush(d);
    disk_stats st;
    disk_get_stats(d, &st);
    CHECK_EQ_INT(st.writes, 1);
    disk_close(d);
    CHECK_EQ_INT(disk_open(&d, &o, NULL), 0);
    CHECK_EQ_INT(disk_put(d, &b[0].h, &b[0].parent, b[0].tok, b[0].kv), 0); /* after restart too */
    disk_flush(d);
    disk_get_stats(d, &st);
    CHECK_EQ_INT(st.writes, 0);
    disk_close(d);
    chain_free(b, 1);
    tmpdir_free(dir);
}

TEST(disk_eviction_spares_fresh_blocks) {
    char *dir = tmpdir_new();
    disk_opts o = opts_for(dir, 7);
    uint64_t fb = disk_file_bytes(TB, BYTES);
    o.budget_bytes = fb; /* room for one */
    o.protect_ms = 300;
    disk_store *d;
    blk a[3];
    chain_make(a, 3, 6, BYTES, o.model_fp);
    CHECK_EQ_INT(disk_open(&d, &o, NULL), 0);
    put_all(d, a, 3);
    disk_stats st;
    disk_get_stats(d, &st);
    CHECK_EQ_INT(st.evicted, 0); /* over budget, but all just written */
    CHECK_EQ_INT(st.files, 3);
    usleep(400 * 1000);
    blk b[1];
    chain_make(b, 1, 7, BYTES, o.model_fp);
    put_all(d, b, 1);
    disk_get_stats(d, &st);
    CHECK_EQ_INT(st.evicted, 3); /* the old chain goes, leaf to root */
    CHECK(disk_has(d, &b[0].h)); /* the new block, never */
    CHECK(get_ok(d, &b[0]));
    disk_close(d);
    chain_free(a, 3);
    chain_free(b, 1);
    tmpdir_free(dir);
}

/* Evicting many blocks shifts index entries back over the holes; a
 * vacated slot must not keep the moved entry's token pointer, or closing
 * frees it a second time (found by ASan; glibc aborts at close). */
TEST(disk_close_after_many_evictions_frees_each_entry_once) {
    char *dir = tmpdir_new();
    disk_opts o = opts_for(dir, 7);
    o.protect_ms = 1;
    enum { N = 48, LEN = 4 };
    blk *b = calloc(N * LEN, sizeof(blk));
    disk_store *d;
    CHECK_EQ_INT(disk_open(&d, &o, NULL), 0);
    for (int c = 0; c < N; c++) {
        chain_make(b + c * LEN, LEN, 100 + c, BYTES, o.model_fp);
        put_all(d, b + c * LEN, LEN);
    }
    usleep(20 * 1000);
    CHECK_EQ_INT(disk_evict_to(d, disk_file_bytes(TB, BYTES) * 3), N * LEN - 3);
    disk_close(d); /* the old code aborted here */
    CHECK_EQ_INT(disk_open(&d, &o, NULL), 0);
    disk_stats st;
    disk_get_stats(d, &st);
    CHECK_EQ_INT(st.files, 3);
    disk_close(d);
    chain_free(b, N * LEN);
    free(b);
    tmpdir_free(dir);
}

TEST(disk_eviction_is_leaf_first_by_score) {
    char *dir = tmpdir_new();
    disk_opts o = opts_for(dir, 7);
    uint64_t fb = disk_file_bytes(TB, BYTES);
    o.budget_bytes = 5 * fb;
    o.protect_ms = 100;
    disk_store *d;
    blk a[3], b[2], c[2];
    chain_make(a, 3, 8, BYTES, o.model_fp);
    chain_make(b, 2, 9, BYTES, o.model_fp);
    chain_make(c, 2, 10, BYTES, o.model_fp);
    CHECK_EQ_INT(disk_open(&d, &o, NULL), 0);
    put_all(d, a, 3);
    put_all(d, b, 2);
    usleep(150 * 1000);
    disk_touch(d, &b[1].h); /* b is in use: hit now, and protected */
    disk_touch(d, &a[0].h); /* a hit on a root block does not save its leaf */
    put_all(d, c, 1);       /* 6 files: one must go */
    CHECK(!disk_has(d, &a[2].h)); /* a's leaf, not a[0] (has children) nor b */
    CHECK(disk_has(d, &a[0].h) && disk_has(d, &a[1].h));
    CHECK(disk_has(d, &b[0].h) && disk_has(d, &b[1].h) && disk_has(d, &c[0].h));
    put_all(d, c + 1, 1); /* again: a[1] is now a leaf */
    CHECK(!disk_has(d, &a[1].h));
    CHECK(disk_has(d, &a[0].h));
    disk_stats st;
    disk_get_stats(d, &st);
    CHECK_EQ_INT(st.evicted, 2);
    CHECK_EQ_INT(st.bytes, 5 * fb);
    char p[4200];
    path_of(dir, &a[2], p);
    CHECK(!exists(p));
    disk_close(d);
    chain_free(a, 3);
    chain_free(b, 2);
    chain_free(c, 2);
    tmpdir_free(dir);
}

/* 1 when this process can create files in a 0555 directory (root). */
static int chmod_is_ineffective(const char *dir) {
    char p[4200];
    snprintf(p, sizeof p, "%s/probe", dir);
    int fd = open(p, O_WRONLY | O_CREAT, 0644);
    if (fd < 0) return 0;
    close(fd);
    unlink(p);
    return 1;
}

TEST(disk_unwritable_dir_degrades_with_an_error) {
    char *dir = tmpdir_new();
    disk_opts o = opts_for(dir, 7);
    disk_store *d = NULL;
    strata_err e = {0};
    chmod(dir, 0555);
    if (!chmod_is_ineffective(dir)) {
        CHECK_EQ_INT(disk_open(&d, &o, &e), STRATA_EIO);
        CHECK(d == NULL);
        CHECK_MSG(strstr(e.msg, "not writable") != NULL, "message '%s'", e.msg);
    } else {
        fprintf(stderr, "    (running as root: chmod check skipped)\n");
    }
    chmod(dir, 0755);
    /* A path through a regular file: cannot be created, whoever we are. */
    char bad[4200];
    snprintf(bad, sizeof bad, "%s/file", dir);
    close(open(bad, O_WRONLY | O_CREAT, 0644));
    strcat(bad, "/cache");
    o.dir = bad;
    CHECK_EQ_INT(disk_open(&d, &o, &e), STRATA_EIO);
    CHECK(d == NULL);
    tmpdir_free(dir);
}

TEST(disk_failed_writes_are_dropped_and_serving_goes_on) {
    char *dir = tmpdir_new();
    disk_opts o = opts_for(dir, 7);
    disk_store *d;
    blk b[2];
    chain_make(b, 2, 11, BYTES, o.model_fp);
    CHECK_EQ_INT(disk_open(&d, &o, NULL), 0);
    /* Block 0's fan-out directory is a regular file: its write fails the
     * way a full or read-only disk would, and even root cannot bypass it. */
    char p[4200], sub[4200];
    disk_file_path(dir, &b[0].h, p, sizeof p, sub, sizeof sub);
    close(open(sub, O_WRONLY | O_CREAT, 0644));
    int other_fan = memcmp(b[0].h.b, b[1].h.b, 1) != 0;
    put_all(d, b, 2);
    disk_stats st;
    disk_get_stats(d, &st);
    CHECK_EQ_INT(st.write_errors, 1);
    CHECK(!disk_has(d, &b[0].h));
    uint8_t buf[BYTES];
    CHECK(disk_get(d, &b[0].h, buf, NULL, NULL) != 0);
    if (other_fan) CHECK(get_ok(d, &b[1]));
    disk_close(d);
    chain_free(b, 2);
    tmpdir_free(dir);
}

/* ---- SIGKILL during writes ---- */

#define KILL_TRIALS 30
#define KILL_BLOCKS 48
#define KILL_BYTES (64 * 1024)

static void kill_child(const char *dir, int trial, blk *b) {
    disk_opts o = opts_for(dir, 7);
    o.block_bytes = KILL_BYTES;
    disk_store *d;
    if (disk_open(&d, &o, NULL)) _exit(3);
    for (int i = 0; i < KILL_BLOCKS; i++) disk_put(d, &b[i].h, &b[i].parent, b[i].tok, b[i].kv);
    disk_close(d);
    _exit(0);
}

typedef struct kill_check {
    blk *all;
    int n_all, found, bad;
    disk_store *d;
} kill_check;

static void kill_check_one(void *ctx, const disk_block_info *bi) {
    kill_check *k = ctx;
    for (int i = 0; i < k->n_all; i++)
        if (memcmp(k->all[i].h.b, bi->hash.b, 32) == 0) {
            k->found++;
            return;
        }
    k->bad++; /* a block nobody wrote */
}

static int tmp_files_left(void *ctx, const disk_dirent *e) {
    *(int *)ctx += e->is_tmp;
    return 0;
}

TEST(disk_sigkill_during_writes_leaves_only_whole_files) {
    char *dir = tmpdir_new();
    uint8_t fp[32];
    memset(fp, 7, 32);
    blk *all = calloc(KILL_TRIALS * KILL_BLOCKS, sizeof(blk));
    srand((unsigned)time(NULL));
    int tmp_seen = 0;
    for (int t = 0; t < KILL_TRIALS; t++) {
        blk *b = all + t * KILL_BLOCKS;
        chain_make(b, KILL_BLOCKS, 100 + t, KILL_BYTES, fp);
        pid_t pid = fork();
        if (pid == 0) kill_child(dir, t, b);
        usleep((useconds_t)(rand() % 60000)); /* before, during or after its writes */
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        disk_file_scan(dir, tmp_files_left, &tmp_seen, NULL); /* killed mid-file */
    }
    disk_opts o = opts_for(dir, 7);
    o.block_bytes = KILL_BYTES;
    disk_store *d;
    CHECK_EQ_INT(disk_open(&d, &o, NULL), 0);
    int tmp_left = 0;
    disk_file_scan(dir, tmp_files_left, &tmp_left, NULL);
    CHECK_EQ_INT(tmp_left, 0); /* leftovers of dead writers are removed */
    kill_check k = {all, KILL_TRIALS * KILL_BLOCKS, 0, 0, d};
    disk_foreach(d, kill_check_one, &k);
    CHECK_EQ_INT(k.bad, 0);
    uint8_t *buf = malloc(KILL_BYTES);
    int32_t tok[TB];
    int loaded = 0;
    for (int i = 0; i < KILL_TRIALS * KILL_BLOCKS; i++) {
        if (!disk_has(d, &all[i].h)) continue;
        CHECK_EQ_INT(disk_get(d, &all[i].h, buf, tok, NULL), 0);
        CHECK(memcmp(buf, all[i].kv, KILL_BYTES) == 0 && memcmp(tok, all[i].tok, sizeof tok) == 0);
        loaded++;
    }
    disk_stats st;
    disk_get_stats(d, &st);
    CHECK_EQ_INT(st.quarantined, 0); /* rename is atomic: no half file has a name */
    CHECK_EQ_INT(loaded, k.found);
    fprintf(stderr, "    %d trials: %d whole blocks survived; %d kills left a temp file\n", KILL_TRIALS,
            loaded, tmp_seen);
    disk_close(d);
    free(buf);
    for (int t = 0; t < KILL_TRIALS; t++) chain_free(all + t * KILL_BLOCKS, KILL_BLOCKS);
    free(all);
    tmpdir_free(dir);
}

/* ---- tool views ---- */

TEST(disk_tool_store_sees_all_models_verifies_and_purges) {
    char *dir = tmpdir_new();
    disk_opts o7 = opts_for(dir, 7), o9 = opts_for(dir, 9);
    disk_store *d;
    blk a[3], b[2];
    chain_make(a, 3, 12, BYTES, o7.model_fp);
    chain_make(b, 2, 13, BYTES, o9.model_fp);
    CHECK_EQ_INT(disk_open(&d, &o7, NULL), 0);
    put_all(d, a, 3);
    disk_close(d);
    CHECK_EQ_INT(disk_open(&d, &o9, NULL), 0);
    put_all(d, b, 2);
    disk_stats st;
    disk_get_stats(d, &st);
    CHECK_EQ_INT(st.foreign, 3); /* model 7's files, left alone */
    disk_close(d);
    char p[4200];
    path_of(dir, &a[1], p);
    flip_byte(p, DISK_HDR_BYTES + 4 * TB + 7);
    disk_opts t = {.dir = dir, .all_models = 1};
    CHECK_EQ_INT(disk_open(&d, &t, NULL), 0);
    disk_get_stats(d, &st);
    CHECK_EQ_INT(st.files, 5);
    int bad = 0;
    for (int i = 0; i < 3; i++) bad += disk_verify(d, &a[i].h, NULL) != 0;
    for (int i = 0; i < 2; i++) bad += disk_verify(d, &b[i].h, NULL) != 0;
    CHECK_EQ_INT(bad, 1);
    CHECK(!exists(p));
    /* a[1] is gone, so a[2] is an orphan leaf; evicting to one file keeps
     * the highest-scored block. */
    CHECK_EQ_INT(disk_evict_to(d, disk_file_bytes(TB, BYTES)), 3);
    disk_close(d);
    uint64_t n = 0;
    CHECK_EQ_INT(disk_purge(dir, &n, NULL), 0);
    CHECK_EQ_INT(n, 2); /* the last block and the quarantined file */
    CHECK_EQ_INT(disk_open(&d, &t, NULL), 0);
    disk_get_stats(d, &st);
    CHECK_EQ_INT(st.files, 0);
    disk_close(d);
    chain_free(a, 3);
    chain_free(b, 2);
    tmpdir_free(dir);
}

/* Not a check: prints write and read throughput for 1.5 MB blocks
 * (a 135M model's 64-token block is ~1.5 MB of f16 KV). */
TEST(disk_throughput_1p5mb_blocks) {
    enum { N = 32, SZ = 1536 * 1024 };
    char *dir = tmpdir_new();
    uint8_t fp[32] = {0};
    blk *b = calloc(N, sizeof(blk));
    chain_make(b, N, 14, SZ, fp);
    disk_opts o = opts_for(dir, 0);
    o.block_bytes = SZ;
    disk_store *d;
    CHECK_EQ_INT(disk_open(&d, &o, NULL), 0);
    double t0 = clock_ms();
    put_all(d, b, N);
    double t1 = clock_ms();
    uint8_t *buf = malloc(SZ);
    int ok = 0;
    for (int i = 0; i < N; i++) ok += disk_get(d, &b[i].h, buf, NULL, NULL) == 0 && memcmp(buf, b[i].kv, SZ) == 0;
    double t2 = clock_ms();
    CHECK_EQ_INT(ok, N);
    double mb = N * (double)SZ / 1e6;
    fprintf(stderr, "    %d x 1.5 MiB: write %.0f MB/s (fsync each), read+verify %.0f MB/s (page cache)\n", N,
            mb / ((t1 - t0) / 1e3), mb / ((t2 - t1) / 1e3));
    disk_close(d);
    free(buf);
    chain_free(b, N);
    free(b);
    tmpdir_free(dir);
}

/* ---- strata cache (runs ./strata, or STRATA_BIN) ---- */

#define CHECK_CLI(args, want_rc, want_text)                                              \
    do {                                                                                 \
        char out_[8192], a_[4400];                                                       \
        snprintf(a_, sizeof a_, "cache %s --cache-dir %s", args, dir);                  \
        int rc_ = test_run_strata(a_, out_, sizeof out_);                                     \
        CHECK_MSG(rc_ == (want_rc) && strstr(out_, want_text), "strata %s: exit %d, output:\n%s", \
                  a_, rc_, out_);                                                        \
    } while (0)

TEST(disk_cli_ls_stat_verify_gc_purge) {
    char *dir = tmpdir_new();
    disk_opts o = opts_for(dir, 7);
    disk_store *d;
    blk a[4], b[3];
    chain_make(a, 4, 20, BYTES, o.model_fp);
    chain_make(b, 3, 21, BYTES, o.model_fp);
    CHECK_EQ_INT(disk_open(&d, &o, NULL), 0);
    put_all(d, a, 4);
    put_all(d, b, 3);
    disk_touch(d, &a[3].h);
    disk_close(d);
    CHECK_CLI("ls", 0, "2 chains, 7 blocks");
    CHECK_CLI("ls", 0, "     4        64");
    CHECK_CLI("stat", 0, "7 blocks, 112 tokens");
    char p[4200];
    path_of(dir, &b[1], p);
    flip_byte(p, DISK_HDR_BYTES + 4 * TB + 33);
    CHECK_CLI("verify", 1, "6 ok, 1 bad");
    CHECK_CLI("verify", 0, "6 ok, 0 bad");
    CHECK_CLI("gc --budget-mb 0", 0, "evicted 6 blocks");
    CHECK_CLI("purge", 0, "purged 1 files"); /* the quarantined one */
    CHECK_CLI("gc", 2, "--budget-mb N is required");
    CHECK_CLI("bogus", 2, "unknown command");
    char out[8192];
    CHECK_EQ_INT(test_run_strata("cache ls --cache-dir /nonexistent/strata-cache", out, sizeof out), 1);
    CHECK_MSG(strstr(out, "no such directory") != NULL, "output: %s", out);
    chain_free(a, 4);
    chain_free(b, 3);
    tmpdir_free(dir);
}

/* ls -m MODEL previews each chain's last block as text, through the
 * model's tokenizer. */
TEST(disk_cli_ls_previews_text) {
    char *dir = tmpdir_new();
    disk_opts o = opts_for(dir, 7);
    disk_store *d;
    blk a[2];
    chain_make(a, 2, 0, BYTES, o.model_fp); /* token ids 0..31: in any vocabulary */
    CHECK_EQ_INT(disk_open(&d, &o, NULL), 0);
    put_all(d, a, 2);
    disk_close(d);
    tokenizer *t = test_load_tokenizer(test_data("models/llama-q4_1.gguf"));
    if (!t) return;
    char want[64] = "", piece[64];
    size_t len = 0;
    for (int j = 0; j < TB && len < 40; j++) { /* the leaf's text, control bytes as spaces */
        int n = tok_piece(t, a[1].tok[j], 1, piece, sizeof piece);
        for (int k = 0; k < n && len < 40; k++) want[len++] = (unsigned char)piece[k] < 0x20 ? ' ' : piece[k];
    }
    want[len] = 0;
    tok_free(t);
    char args[512];
    snprintf(args, sizeof args, "ls -m %s", test_data("models/llama-q4_1.gguf"));
    CHECK_CLI(args, 0, "leaf text");
    CHECK_CLI(args, 0, want);
    CHECK_CLI("ls -m /nonexistent.gguf", 0, "no text preview");
    chain_free(a, 2);
    tmpdir_free(dir);
}

/* A retained block outlives older and newer unretained ones, after a
 * restart too (the mark is kept in the usage file). */
TEST(disk_retention_survives_a_restart) {
    char *dir = tmpdir_new();
    disk_opts o = opts_for(dir, 7);
    o.protect_ms = 1;
    disk_store *d;
    blk b[4][1];
    for (int i = 0; i < 4; i++) chain_make(b[i], 1, 20 + i, BYTES, o.model_fp);
    CHECK_EQ_INT(disk_open(&d, &o, NULL), 0);
    for (int i = 0; i < 3; i++) { /* b[0] oldest: the first to go unless retained */
        disk_put(d, &b[i][0].h, &b[i][0].parent, b[i][0].tok, b[i][0].kv);
        disk_flush(d);
        usleep(5000);
    }
    disk_retain(d, &b[0][0].h, 3600);
    disk_close(d);
    o.budget_bytes = 3 * disk_file_bytes(TB, BYTES);
    CHECK_EQ_INT(disk_open(&d, &o, NULL), 0);
    CHECK(disk_retained_s(d, &b[0][0].h) > 3500);
    CHECK(disk_retained_s(d, &b[1][0].h) == 0);
    usleep(5000);
    disk_put(d, &b[3][0].h, &b[3][0].parent, b[3][0].tok, b[3][0].kv); /* one over: the oldest unretained goes */
    disk_flush(d);
    CHECK(disk_has(d, &b[0][0].h));
    CHECK(!disk_has(d, &b[1][0].h));
    CHECK(disk_has(d, &b[2][0].h));
    disk_close(d);
    for (int i = 0; i < 4; i++) chain_free(b[i], 1);
    tmpdir_free(dir);
}

/* A directory written with f16 K/V, opened by a store of q8_0 blocks
 * (--kv-type q8_0; same geometry here, so only the type tells): the
 * files are counted as another KV type and never indexed or served, a
 * file of the other type under a name the store asks for is rejected
 * with the type named, and the f16 store still finds them all. */
TEST(disk_blocks_of_another_kv_type_are_skipped_and_reported) {
    char *dir = tmpdir_new();
    disk_opts o = opts_for(dir, 7);
    disk_store *d;
    blk b[4];
    chain_make(b, 4, 3, BYTES, o.model_fp);
    CHECK_EQ_INT(disk_open(&d, &o, NULL), 0);
    put_all(d, b, 4);
    disk_close(d);
    disk_opts q = o;
    q.kv_dtype = DISK_Q8_0;
    CHECK_EQ_INT(disk_open(&d, &q, NULL), 0);
    disk_stats st;
    disk_get_stats(d, &st);
    CHECK_EQ_INT(st.files, 0);
    CHECK_EQ_INT(st.other_kv_type, 4);
    CHECK_EQ_INT(st.other_kv_dtype, DISK_F16);
    CHECK(strcmp(disk_kv_dtype_name(st.other_kv_dtype), "f16") == 0);
    uint8_t buf[BYTES];
    strata_err e = {0};
    for (int i = 0; i < 4; i++) CHECK(!disk_has(d, &b[i].h));
    CHECK(disk_get(d, &b[0].h, buf, NULL, &e) != 0);
    CHECK_EQ_INT(count_quarantined(dir), 0); /* another type is not damage */
    disk_close(d);
    /* The check a load makes names both types. */
    char p[4200];
    path_of(dir, &b[1], p);
    disk_hdr h;
    int32_t tok[TB];
    disk_expect ex = {.hash = &b[1].h, .model_fp = o.model_fp, .n_tokens = TB, .kv_dtype = DISK_Q8_0,
                      .payload_bytes = BYTES};
    CHECK_EQ_INT(disk_file_load(p, &ex, &h, tok, buf, BYTES, &e), STRATA_EFORMAT);
    CHECK_MSG(strstr(e.msg, "KV type f16, this store holds q8_0"), "message: %s", e.msg);
    CHECK_EQ_INT(disk_open(&d, &o, NULL), 0);
    for (int i = 0; i < 4; i++) CHECK(get_ok(d, &b[i]));
    disk_close(d);
    chain_free(b, 4);
    tmpdir_free(dir);
}
