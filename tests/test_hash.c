/* test_hash.c - block hash chains and the remembered model fingerprint. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/attn.h"
#include "backend/cuda/cuda.h"
#include "backend/kvq.h"
#include "base/cpu.h"
#include "cache/hash.h"
#include "test.h"

/* The memo file of model (the only file in memo_dir). */
static void memo_file_of(const char *memo_dir, char *out, size_t cap) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "ls %s/fingerprint-*.txt", memo_dir);
    FILE *p = popen(cmd, "r");
    CHECK(p && fgets(out, (int)cap, p));
    out[strcspn(out, "\n")] = 0;
    pclose(p);
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

/* A memo is trusted only for the very file it was made for, and only
 * while intact: a file swapped in with the same size and mtime, or a memo
 * line damaged or edited by hand, is hashed anew. */
TEST(hash_fingerprint_memo_is_never_trusted_wrongly) {
    char dir[] = "/tmp/strata-fp-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char model[256], other[256], memo_dir[256], memo[700];
    snprintf(model, sizeof model, "%s/model.bin", dir);
    snprintf(other, sizeof other, "%s/other.bin", dir);
    snprintf(memo_dir, sizeof memo_dir, "%s/memo", dir);
    mkdir(memo_dir, 0755);
    write_file(model, "weights A");
    uint8_t a[32], b[32], plain[32];
    CHECK(cache_model_fingerprint(model, memo_dir, a, NULL) == 0);
    memo_file_of(memo_dir, memo, sizeof memo);
    /* Same size and mtime, other content, renamed over the model. */
    struct stat st;
    CHECK(stat(model, &st) == 0);
    write_file(other, "weights B");
    struct timespec times[2] = {st.st_atim, st.st_mtim};
    CHECK(utimensat(AT_FDCWD, other, times, 0) == 0);
    CHECK(rename(other, model) == 0);
    CHECK(cache_model_fingerprint(model, memo_dir, b, NULL) == 0);
    CHECK(cache_model_fingerprint(model, NULL, plain, NULL) == 0);
    CHECK(memcmp(b, plain, 32) == 0);
    CHECK(memcmp(a, b, 32) != 0);
    /* A memo whose fingerprint was changed by hand. */
    FILE *f = fopen(memo, "r+");
    CHECK(f != NULL);
    char line[512];
    CHECK(fgets(line, sizeof line, f) != NULL);
    char *hex = strrchr(line, ' ') - 64;
    hex[0] = hex[0] == '0' ? '1' : '0';
    rewind(f);
    fputs(line, f);
    fclose(f);
    CHECK(cache_model_fingerprint(model, memo_dir, b, NULL) == 0);
    CHECK(memcmp(b, plain, 32) == 0);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

TEST(hash_chain_depends_on_every_earlier_token) {
    uint8_t fp[32] = {9};
    cache_hash root, a1, a2, b1, b2;
    cache_hash_root(&root, fp, "", 0);
    int32_t x[4] = {1, 2, 3, 4}, y[4] = {1, 2, 3, 5};
    cache_hash_block(&a1, &root, x, 4);
    cache_hash_block(&b1, &root, y, 4);
    cache_hash_block(&a2, &a1, x, 4);
    cache_hash_block(&b2, &b1, x, 4); /* same tokens, different parent */
    CHECK(memcmp(a1.b, b1.b, 32) != 0);
    CHECK(memcmp(a2.b, b2.b, 32) != 0);
    char hex[65];
    cache_hash_hex(&a1, hex);
    CHECK_EQ_INT(strlen(hex), 64);
}

TEST(hash_fingerprint_is_remembered_until_the_file_changes) {
    char dir[] = "/tmp/strata-fp-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char model[256], memo_dir[256];
    snprintf(model, sizeof model, "%s/model.bin", dir);
    snprintf(memo_dir, sizeof memo_dir, "%s/memo", dir);
    mkdir(memo_dir, 0755);
    FILE *f = fopen(model, "w");
    fputs("weights v1", f);
    fclose(f);
    uint8_t a[32], b[32], c[32], plain[32];
    CHECK(cache_model_fingerprint(model, memo_dir, a, NULL) == 0);
    CHECK(cache_model_fingerprint(model, NULL, plain, NULL) == 0);
    CHECK(memcmp(a, plain, 32) == 0);
    CHECK(cache_model_fingerprint(model, memo_dir, b, NULL) == 0); /* from the memo */
    CHECK(memcmp(a, b, 32) == 0);
    f = fopen(model, "w"); /* new content and size: the memo no longer applies */
    fputs("weights version 2", f);
    fclose(f);
    CHECK(cache_model_fingerprint(model, memo_dir, c, NULL) == 0);
    CHECK(memcmp(a, c, 32) != 0);
    char cmd[300];
    CHECK(cache_model_fingerprint(model, NULL, plain, NULL) == 0);
    CHECK(memcmp(c, plain, 32) == 0);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

/* Blocks are filed under the numerics of the backend that computed them:
 * the same tokens of the same file hash alike on one backend and apart on
 * two, and "cpu" keeps the file's fingerprint (caches written before the
 * GPU backend stay valid). */
TEST(hash_blocks_differ_between_backends) {
    uint8_t file_fp[32], cpu[32], cpu2[32], gpu[32], gpu2[32], other[32];
    for (int i = 0; i < 32; i++) file_fp[i] = (uint8_t)(7 * i + 1);
    cache_numerics_fingerprint(file_fp, "cpu", cpu);
    cache_numerics_fingerprint(file_fp, NULL, cpu2);
    cache_numerics_fingerprint(file_fp, CUDA_NUMERICS, gpu);
    CHECK(memcmp(cpu, file_fp, 32) == 0);
    CHECK(memcmp(cpu2, file_fp, 32) == 0);
    CHECK(memcmp(gpu, file_fp, 32) != 0);
    memcpy(gpu2, file_fp, 32); /* in place, as the server calls it */
    cache_numerics_fingerprint(gpu2, CUDA_NUMERICS, gpu2);
    CHECK(memcmp(gpu2, gpu, 32) == 0);
    cache_numerics_fingerprint(file_fp, "cuda-0", other); /* another numerics version */
    CHECK(memcmp(other, gpu, 32) != 0);

    int32_t toks[64];
    for (int i = 0; i < 64; i++) toks[i] = 1000 + 37 * i;
    cache_hash rc, rg, rg2, bc, bg, bg2, bc2;
    cache_hash_root_for(&rc, cpu, NULL, NULL);
    cache_hash_root_for(&rg, gpu, NULL, NULL);
    cache_hash_root_for(&rg2, gpu2, NULL, NULL);
    cache_hash_block(&bc, &rc, toks, 64);
    cache_hash_block(&bg, &rg, toks, 64);
    cache_hash_block(&bg2, &rg2, toks, 64);
    CHECK(memcmp(bc.b, bg.b, 32) != 0);  /* CPU block never found by a GPU run */
    CHECK(memcmp(bg.b, bg2.b, 32) == 0); /* same backend, same block */
    cache_hash_root_for(&rc, file_fp, NULL, NULL);
    cache_hash_block(&bc2, &rc, toks, 64);
    CHECK(memcmp(bc.b, bc2.b, 32) == 0); /* the CPU's hashes as before */
}

/* The KV type is part of the numerics (kvq_numerics): q8_0 blocks of the
 * same tokens of the same file hash apart from f16's, on the CPU and on
 * any other backend, and f16 keeps the hashes it had. */
TEST(hash_blocks_differ_by_kv_type) {
    uint8_t file_fp[32], f16[32], q8[32], gq8[32];
    char buf[96];
    for (int i = 0; i < 32; i++) file_fp[i] = (uint8_t)(5 * i + 3);
    cache_numerics_fingerprint(file_fp, kvq_numerics(KVQ_F16, "cpu", buf, sizeof buf), f16);
    cache_numerics_fingerprint(file_fp, kvq_numerics(KVQ_Q8_0, "cpu", buf, sizeof buf), q8);
    cache_numerics_fingerprint(file_fp, kvq_numerics(KVQ_Q8_0, CUDA_NUMERICS, buf, sizeof buf), gq8);
    CHECK(memcmp(f16, file_fp, 32) == 0);
    CHECK(memcmp(q8, f16, 32) != 0);
    CHECK(memcmp(gq8, q8, 32) != 0);
    int32_t toks[64];
    for (int i = 0; i < 64; i++) toks[i] = 7 * i + 1;
    cache_hash r16, r8, b16, b8;
    cache_hash_root_for(&r16, f16, NULL, NULL);
    cache_hash_root_for(&r8, q8, NULL, NULL);
    cache_hash_block(&b16, &r16, toks, 64);
    cache_hash_block(&b8, &r8, toks, 64);
    CHECK(memcmp(b16.b, b8.b, 32) != 0);
}

/* The id of the float32 attention kernels at this process's level:
 * "cpu" from AVX-512 up (caches were written under it), the level's own
 * below (their bits differ). */
static const char *float_id(void) {
    return attn_level() >= ATTN_LEVEL_AVX512 ? "cpu" : attn_level() == ATTN_LEVEL_AVX2 ? "cpu+attn-avx2" : "cpu+attn-scalar";
}

/* The attention level is part of the CPU's numerics (attn_numerics): the
 * AMX kernels give other bits than the float32 ones, so their blocks hash
 * apart from the float32 levels' (which keep "cpu" and the hashes caches
 * were written under), with every KV type; this process's id is that
 * of the kernels its heads run on. */
TEST(hash_blocks_differ_by_attention_numerics) {
    uint8_t file_fp[32], f32[32], amx[32], f32q8[32], amxq8[32];
    char buf[96];
    for (int i = 0; i < 32; i++) file_fp[i] = (uint8_t)(3 * i + 9);
    cache_numerics_fingerprint(file_fp, kvq_numerics(KVQ_F16, "cpu", buf, sizeof buf), f32);
    cache_numerics_fingerprint(file_fp, kvq_numerics(KVQ_F16, "cpu+attn-amx", buf, sizeof buf), amx);
    cache_numerics_fingerprint(file_fp, kvq_numerics(KVQ_Q8_0, "cpu", buf, sizeof buf), f32q8);
    cache_numerics_fingerprint(file_fp, kvq_numerics(KVQ_Q8_0, "cpu+attn-amx", buf, sizeof buf), amxq8);
    CHECK(memcmp(f32, file_fp, 32) == 0);
    CHECK(memcmp(amx, f32, 32) != 0);
    CHECK(memcmp(amxq8, f32q8, 32) != 0);
    CHECK(memcmp(amxq8, amx, 32) != 0);
    CHECK(strcmp(kvq_numerics(KVQ_Q4_0, "cpu+attn-amx", buf, sizeof buf), "cpu+attn-amx+kv-q4_0") == 0);
    char id[96];
    CHECK(strcmp(attn_numerics(256, KVQ_F16, id, sizeof id), attn_level() == ATTN_LEVEL_AMX ? "cpu+attn-amx" : float_id()) ==
          0);
    CHECK(strcmp(attn_numerics(64, KVQ_F16, id, sizeof id), float_id()) == 0); /* below ATTN_AMX_MIN_DIM: float32 */
}

/* q8_0 keys scored in int8 (attn_qk_int8: AVX-512 VNNI) give other bits
 * than q8_0 keys scored in float32: "+qk-i8" after the KV type, so
 * neither is served to the other, and f16 / q4_0 keep their ids. */
TEST(hash_blocks_differ_by_int8_scoring) {
    uint8_t file_fp[32], f32q8[32], i8q8[32], f16[32];
    char buf[96], id[96];
    for (int i = 0; i < 32; i++) file_fp[i] = (uint8_t)(11 * i + 2);
    cache_numerics_fingerprint(file_fp, "cpu", f16);
    cache_numerics_fingerprint(file_fp, kvq_numerics(KVQ_Q8_0, "cpu", buf, sizeof buf), f32q8);
    cache_numerics_fingerprint(file_fp, "cpu+kv-q8_0+qk-i8", i8q8);
    CHECK(memcmp(i8q8, f32q8, 32) != 0);
    CHECK(memcmp(i8q8, f16, 32) != 0);
    int i8 = attn_qk_int8(attn_level(), 64, KVQ_Q8_0);
    CHECK_EQ_INT(i8, attn_level() >= ATTN_LEVEL_AVX512 && cpu_get()->avx512vnni);
    CHECK(strcmp(attn_numerics(64, KVQ_Q8_0, id, sizeof id),
                 i8 ? "cpu+kv-q8_0+qk-i8" : kvq_numerics(KVQ_Q8_0, float_id(), buf, sizeof buf)) == 0);
    CHECK(strcmp(attn_numerics(64, KVQ_Q4_0, id, sizeof id), kvq_numerics(KVQ_Q4_0, float_id(), buf, sizeof buf)) == 0);
    CHECK(!attn_qk_int8(ATTN_LEVEL_AVX2, 64, KVQ_Q8_0));
    CHECK(!attn_qk_int8(attn_level(), 64, KVQ_F16) && !attn_qk_int8(attn_level(), 64, KVQ_Q4_0));
    /* heads the AMX kernels serve keep them (and their id) */
    if (attn_level() == ATTN_LEVEL_AMX) {
        CHECK(!attn_qk_int8(ATTN_LEVEL_AMX, 256, KVQ_Q8_0));
        CHECK(strcmp(attn_numerics(256, KVQ_Q8_0, id, sizeof id), "cpu+attn-amx+kv-q8_0") == 0);
    }
}
