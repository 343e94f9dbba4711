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

void cache_numerics_fingerprint(const uint8_t file_fp[32], const char *numerics, uint8_t out[32]) {
    if (!numerics || strcmp(numerics, "cpu") == 0) {
        memmove(out, file_fp, 32);
        return;
    }
    uint8_t buf[15 + 32 + 32]; /* the id enters as its own hash: no two ids alias */
    memcpy(buf, "strata-numerics", 15);
    memcpy(buf + 15, file_fp, 32);
    SHA256((const uint8_t *)numerics, strlen(numerics), buf + 47);
    SHA256(buf, sizeof buf, out);
}

static int hash_file(const char *path, uint8_t out[32], strata_err *err);

/* memo file: one line "v2 FILE-ID HEX CHECK" under memo_dir, named by
 * the SHA-256 of the model's absolute path. FILE-ID is size, mtime, ctime
 * (set by the kernel on every write, rename or chmod: a file swapped in
 * with the old size and mtime still differs), device and inode; CHECK is
 * a SHA-256 prefix of what precedes it, so a damaged or hand-edited line
 * is hashed anew, never trusted. */
static void memo_path(const char *memo_dir, const char *model, char *out, size_t cap) {
    char abs[4096];
    if (!realpath(model, abs)) snprintf(abs, sizeof abs, "%s", model);
    cache_hash h;
    SHA256((const uint8_t *)abs, strlen(abs), h.b);
    char hex[65];
    cache_hash_hex(&h, hex);
    snprintf(out, cap, "%s/fingerprint-%.16s.txt", memo_dir, hex);
}

static unsigned long long ns_of(const struct timespec *t) {
    return (unsigned long long)t->tv_sec * 1000000000ull + (unsigned long long)t->tv_nsec;
}

/* "v2 FILE-ID HEX" for the file st and fingerprint hex. */
static void memo_body(const struct stat *st, const char *hex, char *out, size_t cap) {
    snprintf(out, cap, "v2 %llu %llu %llu %llu %llu %s", (unsigned long long)st->st_size, ns_of(&st->st_mtim),
             ns_of(&st->st_ctim), (unsigned long long)st->st_dev, (unsigned long long)st->st_ino, hex);
}

static void memo_check(const char *body, char out[17]) {
    cache_hash h;
    SHA256((const uint8_t *)body, strlen(body), h.b);
    char hex[65];
    cache_hash_hex(&h, hex);
    snprintf(out, 17, "%.16s", hex);
}

static int hex_decode(const char *hex, uint8_t out[32]) {
    for (int i = 0; i < 32; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1) return -1;
        out[i] = (uint8_t)v;
    }
    return 0;
}

static int memo_read(const char *file, const struct stat *st, uint8_t out[32]) {
    FILE *f = fopen(file, "r");
    if (!f) return -1;
    char line[512] = "", body[400], want[17];
    int got = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    line[strcspn(line, "\n")] = 0;
    char *sp = got ? strrchr(line, ' ') : NULL;
    if (!sp || sp - line < 64) return -1;
    *sp = 0; /* line: the body; sp + 1: its check */
    const char *hex = sp - 64;
    memo_body(st, hex, body, sizeof body);
    memo_check(body, want);
    if (strcmp(line, body) != 0 || strcmp(sp + 1, want) != 0) return -1;
    return hex_decode(hex, out);
}

static void memo_write(const char *file, const struct stat *st, const uint8_t fp[32]) {
    char tmp[4200], hex[65], body[400], check[17];
    snprintf(tmp, sizeof tmp, "%s.tmp%d", file, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return; /* a memo is an optimisation: no directory, no memo */
    cache_hash h;
    memcpy(h.b, fp, 32);
    cache_hash_hex(&h, hex);
    memo_body(st, hex, body, sizeof body);
    memo_check(body, check);
    fprintf(f, "%s %s\n", body, check);
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
