/* hash.c - chained block hashes and the model fingerprint (see hash.h). */
#include "cache/hash.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int cache_model_fingerprint(const char *path, uint8_t out[32], strata_err *err) {
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
