/* test_snapshot.c - recurrent-state snapshots in the block store, with no
 * model: a pool of 1 layer, a made-up state, the real disk tier. Proves
 * where the policy puts snapshots (the prompt's very end included), that
 * a request resumes at the longest prefix with both blocks and a
 * snapshot (not a later one on another branch), that snapshots survive a
 * restart on disk, and that a damaged one is quarantined, never loaded. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/disk.h"
#include "cache/disk_tier.h"
#include "cache/store.h"
#include "fake_dev.h"
#include "test.h"
#include "test_util.h"

#define B 4
#define NF 8 /* floats of the made-up state */

TEST(snapshot_policy_positions) {
    int bounds[] = {3, 9}, n = 22;
    cache_mark marks[] = {{.end = 6, .ttl_s = 60}};
    int want[] = {3, 6, 8, 9, 16, 22}, got = 0, pos = 0, k = 0;
    while ((pos = policy_snap_next(pos, n, 1 << 30, 2, B, bounds, 2, marks, 1, 0)) > 0) {
        CHECK_MSG(k < 6 && pos == want[k], "snapshot %d at %d", k, pos);
        k++, got++;
    }
    CHECK_EQ_INT(got, 6); /* the prompt's end (22) fires although no block ends there */
    CHECK_EQ_INT(policy_snap_next(0, n, 5, 0, B, NULL, 0, NULL, 0, 0), 5); /* the scope's end */
    CHECK_EQ_INT(policy_snap_next(5, n, 5, 0, B, NULL, 0, NULL, 0, 0), -1); /* nothing past it */
    CHECK_EQ_INT(policy_snap_next(22, n, 1 << 30, 2, B, bounds, 2, NULL, 0, 0), -1);
    /* a gap of 4: 3 is too close to 0, 8 and 9 to 6, 18 does not exist: 6, 16, the end */
    int gap_want[] = {6, 16, 22};
    for (pos = 0, k = 0; (pos = policy_snap_next(pos, n, 1 << 30, 2, B, bounds, 2, marks, 1, 4)) > 0; k++)
        CHECK_MSG(k < 3 && pos == gap_want[k], "gap: snapshot %d at %d", k, pos);
    CHECK_EQ_INT(k, 3);
    CHECK_EQ_INT(policy_snap_next(20, n, 1 << 30, 2, B, bounds, 2, marks, 1, 4), 22); /* the end, however close */
    CHECK_EQ_INT(policy_snap_next(0, 5000, 1 << 30, 1 << 20, 4096, NULL, 0, NULL, 0, 64), 5000); /* N x B > INT_MAX */
}

typedef struct fixture {
    kv_pool p;
    cache_store *st;
    store_request rq;
    disk_store *d;
    cache_tier t;
} fixture;

/* dev: the pool's memory (NULL: the host's). */
static void fixture_open_on(fixture *x, const char *dir, size_t snap_budget, const devmem *dev) {
    memset(x, 0, sizeof *x);
    kv_pool_opts po = {.n_layer = 1, .kv_dim = 2, .block_tokens = B, .n_blocks = 32, .dev = dev};
    CHECK(kv_pool_init_opts(&x->p, &po, NULL) == 0);
    store_opts o = {.default_scope = {SCOPE_FULL, 0}, .snap_floats = NF, .snap_budget_bytes = snap_budget};
    memset(o.model_fp, 5, 32);
    x->st = store_new(&x->p, &o);
    store_root(x->st, NULL, "", &x->rq.root);
    x->rq.scope = (cache_scope){SCOPE_FULL, 0};
    if (!dir) return;
    disk_opts d = {.dir = dir, .block_tokens = B, .block_bytes = x->p.block_bytes, .kv_dtype = DISK_F16,
                   .protect_ms = 1};
    memcpy(d.model_fp, o.model_fp, 32);
    strata_err err = {0};
    CHECK(disk_open(&x->d, &d, &err) == 0);
    x->t = disk_tier(x->d);
    store_add_tier(x->st, &x->t);
}

static void fixture_open_budget(fixture *x, const char *dir, size_t snap_budget) {
    fixture_open_on(x, dir, snap_budget, NULL);
}

static void fixture_open(fixture *x, const char *dir) { fixture_open_budget(x, dir, 1 << 20); }

static void fixture_close(fixture *x) {
    store_free(x->st);
    if (x->d) disk_flush(x->d), disk_close(x->d);
    CHECK_EQ_INT(x->p.n_free, x->p.n_blocks);
    kv_pool_destroy(&x->p);
}

static void state_at(float *st, int pos) {
    for (int i = 0; i < NF; i++) st[i] = (float)pos * 100 + (float)i;
}

/* One request as the scheduler runs it: attach, resume at a snapshot,
 * "compute" the rest (the state of position p is state_at(p)), snapshot
 * at each position in snap[], then at the end. Returns where it resumed. */
static int run(fixture *x, const int32_t *toks, int n, const int *snap, int n_snap, float *resumed) {
    kv_seq s;
    kv_seq_init(&s);
    store_seq q;
    store_seq_init(x->st, &q, &x->rq);
    store_attach(x->st, &q, toks, n, n - 1, &s);
    int P = store_snap_restore(x->st, &q, toks, &s);
    if (resumed && P > 0) CHECK(kv_seq_state_read(&x->p, &s, resumed, NULL) == 0);
    float st[NF];
    for (int k = 0; k <= n_snap; k++) {
        int to = k < n_snap ? snap[k] : n;
        if (to <= s.n_pos) continue;
        kv_seq_reserve(&x->p, &s, to, NULL);
        s.n_pos = to;
        state_at(st, to);
        CHECK(kv_seq_set_state(&x->p, &s, st, NF, to, NULL) == 0);
        store_publish(x->st, &q, toks, &s);
        store_snap_save(x->st, &q, toks, &s);
    }
    store_finish(x->st, &q, toks, &s, 1);
    kv_seq_release(&x->p, &s);
    return P;
}

/* The names of the snapshots run() stores for a[] at 9 (mid-block 2)
 * and at 18 (mid-block 4), with the fixture's fingerprint. */
static void keys_9_18(const int32_t *a, cache_hash *k9, cache_hash *k18) {
    cache_hash root, h0, h1, h2;
    uint8_t fp[32];
    memset(fp, 5, 32);
    cache_hash_root_for(&root, fp, NULL, "");
    cache_hash_block(&h0, &root, a, B), cache_hash_block(&h1, &h0, a + 4, B);
    cache_hash_block(k9, &h1, a + 8, 1);
    cache_hash_block(&h2, &h1, a + 8, B), cache_hash_block(k18, &h2, a + 12, B);
    cache_hash_block(k18, k18, a + 16, 2);
}

/* a[i] = first + step * i, then one request storing snapshots at 9 and 18. */
static void run_9_18(fixture *x, int32_t *a, int first, int step) {
    for (int i = 0; i < 40; i++) a[i] = first + step * i;
    int snaps[] = {9};
    run(x, a, 18, snaps, 1, NULL);
}

/* Flips a byte near the end of the snapshot file of key (its state: only
 * the whole file's CRC can tell); its path and hex name into path, hex. */
static void damage_snap(const char *dir, const cache_hash *key, char *path, size_t cap, char hex[65]) {
    cache_hash_hex(key, hex);
    snprintf(path, cap, "%s/%.2s/%s.rs", dir, hex, hex);
    FILE *f = fopen(path, "r+b");
    CHECK_MSG(f != NULL, "no snapshot file %s", path);
    if (f) {
        fseek(f, -5, SEEK_END);
        fputc(0x5a, f);
        fclose(f);
    }
}

TEST(snapshot_resumes_at_longest_prefix_with_blocks_and_state) {
    fixture x;
    fixture_open(&x, NULL);
    int32_t a[30], b[30];
    for (int i = 0; i < 30; i++) a[i] = b[i] = 10 + i;
    for (int i = 13; i < 30; i++) b[i] = 500 + i; /* a branch at 13 */
    int snaps[] = {6, 11, 16};
    float got[NF], want[NF];
    CHECK_EQ_INT(run(&x, a, 22, snaps, 3, NULL), 0); /* cold: stores 6, 11, 16 and 22 */
    CHECK_EQ_INT(run(&x, a, 27, NULL, 0, got), 22);  /* turn N+1 resumes at turn N's end */
    state_at(want, 22);
    CHECK(memcmp(got, want, sizeof got) == 0);
    CHECK_EQ_INT(run(&x, b, 25, NULL, 0, got), 11); /* the branch: 11, not 16 or 22 */
    state_at(want, 11);
    CHECK(memcmp(got, want, sizeof got) == 0);
    store_stats ss;
    store_get_stats(x.st, &ss);
    CHECK(ss.snap.restored == 2 && ss.snap.bytes == (size_t)ss.snap.entries * NF * sizeof(float));
    fixture_close(&x);
}

/* A pool in device memory (the fake device: copies run late and out of
 * order): a snapshot is the state downloaded, a resume uploads it, from
 * memory and from the disk after a restart, with the bytes saved. */
TEST(snapshot_of_a_device_pool_goes_down_and_back) {
    char *dir = test_tmpdir_new();
    fake_dev *f = fake_dev_new(3);
    fixture x;
    fixture_open_on(&x, dir, 1 << 20, fake_dev_mem(f));
    int32_t a[40];
    float got[NF], want[NF];
    run_9_18(&x, a, 7, 3);
    CHECK_EQ_INT(run(&x, a, 30, NULL, 0, got), 18); /* from memory */
    state_at(want, 18);
    CHECK(memcmp(got, want, sizeof got) == 0);
    fixture_close(&x);
    fixture_open_on(&x, dir, 1 << 20, fake_dev_mem(f)); /* a restart: from the disk */
    memset(got, 0, sizeof got);
    CHECK_EQ_INT(run(&x, a, 30, NULL, 0, got), 18);
    CHECK(memcmp(got, want, sizeof got) == 0);
    fixture_close(&x);
    fake_dev_free_clean(f);
    test_tmpdir_free(dir);
}

TEST(snapshot_survives_restart_and_damage_is_quarantined) {
    char *dir = test_tmpdir_new();
    fixture x;
    fixture_open(&x, dir);
    int32_t a[40];
    float got[NF], want[NF];
    run_9_18(&x, a, 7, 3); /* snapshots at 9 (mid-block) and 18 */
    fixture_close(&x);
    fixture_open(&x, dir); /* a restart: memory is empty, the disk lists both */
    store_stats ss;
    store_get_stats(x.st, &ss);
    CHECK_EQ_INT(ss.snap.entries, 2);
    CHECK_EQ_INT(ss.snap.bytes, 0);
    CHECK_EQ_INT(run(&x, a, 30, NULL, 0, got), 18);
    state_at(want, 18);
    CHECK(memcmp(got, want, sizeof got) == 0);
    fixture_close(&x);
    /* damage the snapshot at 18: its payload's last byte */
    cache_hash k9, k18;
    keys_9_18(a, &k9, &k18);
    char hex[65], path[512];
    damage_snap(dir, &k18, path, sizeof path, hex);
    char junk[600]; /* and a file named like a snapshot that is not one */
    snprintf(junk, sizeof junk, "%s/%.2s/%.2s%062d.rs", dir, hex, hex, 0);
    FILE *jf = fopen(junk, "wb");
    CHECK(jf != NULL);
    if (jf) fputs("not a snapshot", jf), fclose(jf);
    fixture_open(&x, dir); /* the junk is quarantined at open; 18's damage shows on its read */
    store_get_stats(x.st, &ss);
    CHECK_EQ_INT(ss.snap.entries, 3);
    CHECK(access(junk, F_OK) != 0);
    CHECK_EQ_INT(run(&x, a, 30, NULL, 0, got), 9); /* 18 is skipped, 9 still serves */
    state_at(want, 9);
    CHECK(memcmp(got, want, sizeof got) == 0);
    disk_stats ds;
    disk_get_stats(x.d, &ds);
    CHECK_EQ_INT(ds.quarantined, 2);
    CHECK(access(path, F_OK) != 0);
    fixture_close(&x);
    test_tmpdir_free(dir);
}

/* A snapshot needs the block it ends: when the live pool evicts that
 * block, the snapshot's memory copy goes with it. */
TEST(snapshot_memory_copy_goes_with_its_block) {
    fixture x;
    fixture_open(&x, NULL);
    int32_t a[24], o[24];
    for (int i = 0; i < 24; i++) a[i] = 1000 + i;
    int snaps[] = {8};
    run(&x, a, 22, snaps, 1, NULL); /* snapshots at 8 (a block end) and 22 (a tail end) */
    store_stats before, after;
    store_get_stats(x.st, &before);
    CHECK_EQ_INT(before.snap.entries, 2);
    for (int k = 0; k < 12; k++) { /* other prompts push a's blocks out of the 32-block pool */
        for (int i = 0; i < 24; i++) o[i] = 2000 + 100 * k + i;
        run(&x, o, 24, NULL, 0, NULL);
    }
    store_get_stats(x.st, &after);
    CHECK(after.live.evicted_blocks > 0);
    kv_seq s;
    kv_seq_init(&s);
    store_seq q;
    store_seq_init(x.st, &q, &x.rq);
    CHECK_EQ_INT(store_attach(x.st, &q, a, 22, 21, &s), 0); /* a's blocks are gone */
    store_finish(x.st, &q, a, &s, 0);
    kv_seq_release(&x.p, &s);
    store_get_stats(x.st, &after); /* 2 + 12 stored (one per prompt end); those whose block went, gone */
    CHECK_MSG(after.snap.entries < 14, "%ld snapshots kept, their blocks evicted", after.snap.entries);
    CHECK(after.snap.bytes == (size_t)after.snap.entries * NF * sizeof(float));
    fixture_close(&x);
}

/* Bytes of the .kv and .rs files under dir (both kinds count). */
static uint64_t files_bytes(const char *dir, int *n_rs) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "find %s -path '*/quarantine' -prune -o -type f -name '*.rs' -printf 'r %%s\\n' -o "
             "-type f -name '*.kv' -printf 'k %%s\\n'", dir);
    FILE *p = popen(cmd, "r");
    uint64_t sum = 0;
    char kind;
    unsigned long long sz;
    *n_rs = 0;
    while (p && fscanf(p, " %c %llu", &kind, &sz) == 2) sum += sz, *n_rs += kind == 'r';
    if (p) pclose(p);
    return sum;
}

/* On disk, snapshot files count in the tier's bytes (so its budget),
 * survive a reopen, and go with the blocks they hang on. */
TEST(snapshot_files_count_in_the_disk_budget_and_go_with_blocks) {
    char *dir = test_tmpdir_new();
    fixture x;
    fixture_open(&x, dir);
    int32_t a[40];
    for (int i = 0; i < 40; i++) a[i] = 50 + 5 * i;
    int snaps[] = {9}, n_rs;
    run(&x, a, 18, snaps, 1, NULL); /* snapshots at 9 and 18 */
    disk_flush(x.d);
    disk_stats ds;
    disk_get_stats(x.d, &ds);
    CHECK_EQ_INT(ds.snap_files, 2);
    CHECK_EQ_INT(ds.bytes, files_bytes(dir, &n_rs));
    CHECK_EQ_INT(n_rs, 2);
    fixture_close(&x);
    fixture_open(&x, dir); /* the list is rebuilt at open */
    disk_get_stats(x.d, &ds);
    CHECK_EQ_INT(ds.snap_files, 2);
    CHECK_EQ_INT(ds.bytes, files_bytes(dir, &n_rs));
    usleep(20 * 1000); /* past protect_ms */
    CHECK(disk_evict_to(x.d, 0) > 0);
    disk_get_stats(x.d, &ds);
    CHECK_EQ_INT(ds.snap_files, 0);
    CHECK_EQ_INT(ds.bytes, 0);
    CHECK_EQ_INT(files_bytes(dir, &n_rs), 0);
    CHECK_EQ_INT(n_rs, 0);
    fixture_close(&x);
    test_tmpdir_free(dir);
}

/* A state larger than the whole memory budget is not kept in memory, but
 * still written to disk and resumed from there; with no disk it is not
 * a snapshot at all (nothing indexed). */
TEST(snapshot_over_the_memory_budget_lives_on_disk_only) {
    char *dir = test_tmpdir_new();
    int32_t a[20];
    for (int i = 0; i < 20; i++) a[i] = 70 + i;
    float got[NF], want[NF];
    store_stats ss;
    fixture x;
    fixture_open_budget(&x, NULL, NF * sizeof(float) / 2);
    run(&x, a, 10, NULL, 0, NULL);
    store_get_stats(x.st, &ss);
    CHECK_EQ_INT(ss.snap.entries, 0);
    fixture_close(&x);
    fixture_open_budget(&x, dir, NF * sizeof(float) / 2);
    run(&x, a, 10, NULL, 0, NULL); /* its end, 10, goes to disk only */
    store_get_stats(x.st, &ss);
    CHECK_EQ_INT(ss.snap.entries, 1);
    CHECK_EQ_INT(ss.snap.bytes, 0);
    disk_flush(x.d);
    CHECK_EQ_INT(run(&x, a, 16, NULL, 0, got), 10);
    state_at(want, 10);
    CHECK(memcmp(got, want, sizeof got) == 0);
    fixture_close(&x);
    test_tmpdir_free(dir);
}

/* Retention marks reach snapshot files as they reach blocks: the snapshot
 * under a mark keeps its mark on disk, across a restart too (the usage
 * file); one past the mark's end has none. */
TEST(snapshot_retention_mark_on_disk_survives_restart) {
    char *dir = test_tmpdir_new();
    fixture x;
    fixture_open(&x, dir);
    cache_mark mark = {.end = 9, .ttl_s = 3600};
    x.rq.marks = &mark, x.rq.n_marks = 1;
    int32_t a[40];
    run_9_18(&x, a, 11, 5); /* 9: the mark's end */
    cache_hash k9, k18;
    keys_9_18(a, &k9, &k18);
    CHECK_MSG(disk_snap_retained_s(x.d, &k9) > 3590, "marked snapshot: %.0f s left", disk_snap_retained_s(x.d, &k9));
    CHECK_EQ_INT((int)disk_snap_retained_s(x.d, &k18), 0);
    fixture_close(&x);
    fixture_open(&x, dir); /* a restart: the mark comes back from the usage file */
    double left = disk_snap_retained_s(x.d, &k9);
    CHECK_MSG(left > 3580 && left <= 3600, "after a restart: %.0f s left", left);
    CHECK_EQ_INT((int)disk_snap_retained_s(x.d, &k18), 0);
    store_stats ss;
    store_get_stats(x.st, &ss);
    CHECK_EQ_INT(ss.snap.entries, 2);
    fixture_close(&x);
    test_tmpdir_free(dir);
}

/* `strata cache verify` reads snapshot files too: good ones pass, a
 * damaged one is reported by path, quarantined, and the next verify is
 * clean. */
TEST(snapshot_cache_verify_reports_damaged_files) {
    char *dir = test_tmpdir_new();
    fixture x;
    fixture_open(&x, dir);
    int32_t a[40];
    run_9_18(&x, a, 3, 7);
    fixture_close(&x);
    char cmd[4400], out[8192];
    snprintf(cmd, sizeof cmd, "cache verify --cache-dir %s", dir);
    int rc = test_run_strata(cmd, out, sizeof out);
    CHECK_MSG(rc == 0 && strstr(out, "verified 2 recurrent-state snapshots: 2 ok, 0 bad"), "exit %d:\n%s", rc, out);
    cache_hash k9, k18;
    keys_9_18(a, &k9, &k18);
    char hex[65], path[512];
    damage_snap(dir, &k18, path, sizeof path, hex);
    rc = test_run_strata(cmd, out, sizeof out);
    CHECK_MSG(rc == 1 && strstr(out, "1 ok, 1 bad") && strstr(out, hex), "exit %d:\n%s", rc, out);
    CHECK(access(path, F_OK) != 0); /* quarantined */
    rc = test_run_strata(cmd, out, sizeof out);
    CHECK_MSG(rc == 0 && strstr(out, "verified 1 recurrent-state snapshots: 1 ok, 0 bad"), "exit %d:\n%s", rc, out);
    test_tmpdir_free(dir);
}
