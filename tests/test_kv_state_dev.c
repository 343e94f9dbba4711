/* test_kv_state_dev.c - a sequence's recurrent state (qwen35) in a KV
 * pool on a device (the fake device of fake_dev.h: copies run late, the
 * two streams out of order unless events order them): set from host
 * memory, read back, copied by a fork and by kv_state_copy (the
 * scheduler's save before a drafted step) with the bytes it was given;
 * a refused allocation leaves no state and no leak. No GPU, no model. */
#include <string.h>

#include "fake_dev.h"
#include "model/kv.h"
#include "test.h"

enum { NF = 1000, BT = 4 };

static void fill(float *x, float base) {
    for (int i = 0; i < NF; i++) x[i] = base + (float)i * 0.5f;
}

TEST(kv_state_on_a_device_sets_reads_forks_and_copies) {
    fake_dev *f = fake_dev_new(11);
    kv_pool p;
    kv_pool_opts o = {.n_layer = 1, .kv_dim = 8, .block_tokens = BT, .n_blocks = 16, .dev = fake_dev_mem(f)};
    strata_err err = {0};
    CHECK_MSG(kv_pool_init_opts(&p, &o, &err) == 0, "%s", err.msg);
    kv_seq a, b;
    kv_seq_init(&a), kv_seq_init(&b);
    CHECK_EQ_INT(kv_seq_reserve(&p, &a, 10, &err), 0);
    a.n_pos = 10;
    float in[NF], out[NF], again[NF];
    fill(in, 3);
    CHECK_EQ_INT(kv_seq_set_state(&p, &a, in, NF, 10, &err), 0);
    fill(in, -7); /* the upload read the caller's buffer before it returned */
    CHECK(a.rs && a.rs_floats == NF && a.rs_pos == 10);
    CHECK_EQ_INT(kv_seq_state_read(&p, &a, out, &err), 0);
    fill(again, 3);
    CHECK(memcmp(out, again, sizeof out) == 0);
    kv_seq_fork(&p, &a, 10, &b); /* the state covers exactly 10: copied on the device */
    CHECK(b.rs && b.rs != a.rs && b.rs_pos == 10);
    CHECK_EQ_INT(kv_seq_set_state(&p, &a, in, NF, 10, &err), 0); /* a changes after the fork */
    memset(out, 0, sizeof out);
    CHECK_EQ_INT(kv_seq_state_read(&p, &b, out, &err), 0);
    CHECK(memcmp(out, again, sizeof out) == 0);
    float *save = kv_state_alloc(&p, NF, &err); /* the scheduler's save and restore */
    CHECK(save != NULL);
    CHECK_EQ_INT(kv_state_copy(&p, save, a.rs, NF, &err), 0);
    CHECK_EQ_INT(kv_state_copy(&p, b.rs, save, NF, &err), 0);
    CHECK_EQ_INT(kv_seq_state_read(&p, &b, out, &err), 0);
    CHECK(memcmp(out, in, sizeof out) == 0);
    kv_state_free(&p, save);
    kv_seq_release(&p, &b);
    /* refused device memory: no state, nothing left behind */
    fake_dev_fail_alloc(f, 1, 0);
    kv_seq_fork(&p, &a, 10, &b);
    CHECK(b.rs == NULL && b.rs_pos == 0 && b.n_pos == 10);
    kv_seq_release(&p, &b);
    kv_seq_init(&b);
    fake_dev_fail_alloc(f, 1, 0);
    CHECK_EQ_INT(kv_seq_set_state(&p, &b, in, NF, 0, &err), STRATA_ENOMEM);
    CHECK(b.rs == NULL && b.rs_pos == 0 && strstr(err.msg, "recurrent states") != NULL);
    kv_seq_release(&p, &a), kv_seq_release(&p, &b);
    CHECK_EQ_INT(p.n_free, p.n_blocks);
    kv_pool_destroy(&p);
    fake_dev_free_clean(f);
}

/* A host pool takes the same calls: the state is plain memory there. */
TEST(kv_state_on_the_host_is_plain_memory) {
    kv_pool p;
    strata_err err = {0};
    CHECK_EQ_INT(kv_pool_init(&p, 1, 8, BT, 16, &err), 0);
    kv_seq a;
    kv_seq_init(&a);
    float in[NF], out[NF];
    fill(in, 1);
    CHECK_EQ_INT(kv_seq_set_state(&p, &a, in, NF, 0, &err), 0);
    CHECK(memcmp(a.rs, in, sizeof in) == 0);
    CHECK_EQ_INT(kv_seq_state_read(&p, &a, out, &err), 0);
    CHECK(memcmp(out, in, sizeof in) == 0);
    kv_seq_release(&p, &a);
    kv_pool_destroy(&p);
}
