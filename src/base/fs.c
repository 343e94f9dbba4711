/* fs.c - file-system helpers (see fs.h). */
#include "base/fs.h"

#include <errno.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/mem.h"

int fs_mkdir_p(const char *path) {
    char buf[4096];
    size_t n = strlen(path);
    if (n >= sizeof buf) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(buf, path, n + 1);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) && errno != EEXIST) return -1;
        *p = '/';
    }
    return mkdir(buf, 0755) && errno != EEXIST ? -1 : 0;
}

int fs_save_framed(const char *path, const char magic[8], const uint8_t model_fp[32], const void *body, size_t len) {
    uint8_t *buf = xmalloc(40 + len + 32);
    memcpy(buf, magic, 8);
    memcpy(buf + 8, model_fp, 32);
    if (len) memcpy(buf + 40, body, len);
    SHA256(buf, 40 + len, buf + 40 + len);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp%d", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    int ok = f && fwrite(buf, 1, 40 + len + 32, f) == 40 + len + 32;
    if (f) ok = (fflush(f) == 0 && fsync(fileno(f)) == 0 && fclose(f) == 0) && ok;
    ok = ok && rename(tmp, path) == 0;
    if (!ok) unlink(tmp);
    free(buf);
    return ok ? 0 : -1;
}

uint8_t *fs_load_framed(const char *path, const char magic[8], const uint8_t model_fp[32], size_t max_len,
                        size_t *body_len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (size < 40 + 32 || (size_t)size > max_len) {
        fclose(f);
        return NULL;
    }
    uint8_t *p = xmalloc((size_t)size), sum[32];
    int ok = fread(p, 1, (size_t)size, f) == (size_t)size;
    fclose(f);
    size_t body = (size_t)size - 32;
    if (ok) SHA256(p, body, sum);
    if (!ok || memcmp(p, magic, 8) || memcmp(p + 8, model_fp, 32) || memcmp(sum, p + body, 32)) {
        free(p);
        return NULL;
    }
    memmove(p, p + 40, body - 40); /* the caller sees the body only */
    *body_len = body - 40;
    return p;
}
