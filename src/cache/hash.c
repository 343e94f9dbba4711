/* hash.c - chained block hashes and the model fingerprint (see hash.h). */
#include "cache/hash.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/mem.h"

void cache_hash_root(cache_hash *out, const uint8_t model_fp[32], const char *salt, size_t salt_len) {
    uint8_t buf[9 + 4 + 32 + 32];
    size_t n = 0;
    memcpy(buf, "strata-kv", 9);
    n = 9;
    uint32_t v = CACHE_FORMAT_VERSION;
    memcpy(buf + n, &v, 4);
    n += 4;
    memcpy(buf + n, model_fp, 32);
    n += 32;
    uint8_t salt_hash[32]; /* salts of any length enter as their own hash */
    SHA256((const uint8_t *)salt, salt_len, salt_hash);
    memcpy(buf + n, salt_hash, 32);
    n += 32;
    SHA256(buf, n, out->b);
}

void cache_hash_root_for(cache_hash *out, const uint8_t model_fp[32], const char *tenant, const char *salt) {
    if (!salt) salt = "";
    if (!tenant || !*tenant) {
        cache_hash_root(out, model_fp, salt, strlen(salt));
        return;
    }
    uint8_t both[64];
    SHA256((const uint8_t *)tenant, strlen(tenant), both);
    SHA256((const uint8_t *)salt, strlen(salt), both + 32);
    cache_hash_root(out, model_fp, (const char *)both, 64);
}

void cache_hash_block(cache_hash *out, const cache_hash *parent, const int32_t *tokens, int n) {
    uint8_t stack[32 + 4 * 256], *buf = (size_t)n <= 256 ? stack : xmalloc(32 + 4 * (size_t)n);
    memcpy(buf, parent->b, 32);
    for (int i = 0; i < n; i++) { /* little-endian on every host */
        uint32_t t = (uint32_t)tokens[i];
        uint8_t *d = buf + 32 + 4 * i;
        d[0] = (uint8_t)t, d[1] = (uint8_t)(t >> 8), d[2] = (uint8_t)(t >> 16), d[3] = (uint8_t)(t >> 24);
    }
    SHA256(buf, 32 + 4 * (size_t)n, out->b);
    if (buf != stack) free(buf);
}

static int hash_file(const char *path, uint8_t out[32], strata_err *err);

/* memo file: one line "size mtime_ns hex" under memo_dir, named by the
 * SHA-256 of the model's absolute path. */
static void memo_path(const char *memo_dir, const char *model, char *out, size_t cap) {
    char abs[4096];
    if (!realpath(model, abs)) snprintf(abs, sizeof abs, "%s", model);
    cache_hash h;
    SHA256((const uint8_t *)abs, strlen(abs), h.b);
    char hex[65];
    cache_hash_hex(&h, hex);
    snprintf(out, cap, "%s/fingerprint-%.16s.txt", memo_dir, hex);
}

static int memo_read(const char *file, const struct stat *st, uint8_t out[32]) {
    FILE *f = fopen(file, "r");
    if (!f) return -1;
    unsigned long long size = 0, mtime = 0;
    char hex[65] = "";
    int ok = fscanf(f, "%llu %llu %64s", &size, &mtime, hex) == 3 && strlen(hex) == 64 &&
             size == (unsigned long long)st->st_size &&
             mtime == (unsigned long long)st->st_mtim.tv_sec * 1000000000ull + (unsigned long long)st->st_mtim.tv_nsec;
    fclose(f);
    for (int i = 0; ok && i < 32; i++) {
        unsigned v;
        ok = sscanf(hex + 2 * i, "%2x", &v) == 1;
        out[i] = (uint8_t)v;
    }
    return ok ? 0 : -1;
}

static void memo_write(const char *file, const struct stat *st, const uint8_t fp[32]) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp%d", file, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return; /* a memo is an optimisation: no directory, no memo */
    cache_hash h;
    memcpy(h.b, fp, 32);
    char hex[65];
    cache_hash_hex(&h, hex);
    fprintf(f, "%llu %llu %s\n", (unsigned long long)st->st_size,
            (unsigned long long)st->st_mtim.tv_sec * 1000000000ull + (unsigned long long)st->st_mtim.tv_nsec, hex);
    if (fclose(f) == 0) rename(tmp, file);
    else unlink(tmp);
}

int cache_model_fingerprint(const char *path, const char *memo_dir, uint8_t out[32], strata_err *err) {
    struct stat st;
    char memo[4200] = "";
    if (memo_dir && stat(path, &st) == 0) {
        memo_path(memo_dir, path, memo, sizeof memo);
        if (memo_read(memo, &st, out) == 0) return 0;
    }
    int rc = hash_file(path, out, err);
    if (!rc && memo[0]) memo_write(memo, &st, out);
    return rc;
}

static int hash_file(const char *path, uint8_t out[32], strata_err *err) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return strata_errf(err, STRATA_EIO, "%s: cannot open for fingerprint: %s", path, strerror(errno));
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    size_t cap = 1 << 20;
    uint8_t *buf = xmalloc(cap);
    ssize_t n;
    while ((n = read(fd, buf, cap)) > 0) EVP_DigestUpdate(ctx, buf, (size_t)n);
    int rc = n < 0 ? strata_errf(err, STRATA_EIO, "%s: read failed: %s", path, strerror(errno)) : 0;
    unsigned len = 32;
    EVP_DigestFinal_ex(ctx, out, &len);
    EVP_MD_CTX_free(ctx);
    free(buf);
    close(fd);
    return rc;
}

void cache_hash_hex(const cache_hash *h, char out[65]) {
    for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", h->b[i]);
}
