/* disk_file.c - one KV block file: CRC-32C, naming, atomic write, checked
 * read, directory scan. The layout is documented in disk_file.h.
 * Does not: keep an index, decide what to write or evict (disk.c). */
#include "cache/disk_file.h"

#include "cache/disk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

/* ---- CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) ----
 * x86-64 has it as an instruction (SSE4.2, ~8 bytes per 3 cycles);
 * elsewhere a slicing-by-8 table does 8 bytes per step. */

static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
static int crc_hw;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
        crc_table[0][i] = c;
    }
    for (int t = 1; t < 8; t++)
        for (int i = 0; i < 256; i++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
#if defined(__x86_64__)
    __builtin_cpu_init();
    crc_hw = __builtin_cpu_supports("sse4.2");
#endif
}

static uint32_t crc_sw(uint32_t c, const uint8_t *p, size_t n) {
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= c; /* little-endian hosts only; the hardware path covers x86 */
        c = crc_table[7][w & 0xff] ^ crc_table[6][(w >> 8) & 0xff] ^ crc_table[5][(w >> 16) & 0xff] ^
            crc_table[4][(w >> 24) & 0xff] ^ crc_table[3][(w >> 32) & 0xff] ^
            crc_table[2][(w >> 40) & 0xff] ^ crc_table[1][(w >> 48) & 0xff] ^ crc_table[0][w >> 56];
        p += 8, n -= 8;
    }
    while (n--) c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xff];
    return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_hw64(uint32_t c, const uint8_t *p, size_t n) {
    uint64_t c64 = c;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c64 = __builtin_ia32_crc32di(c64, w);
        p += 8, n -= 8;
    }
    c = (uint32_t)c64;
    while (n--) c = __builtin_ia32_crc32qi(c, *p++);
    return c;
}
#endif

uint32_t disk_crc32c(uint32_t crc, const void *p, size_t n) {
    pthread_once(&crc_once, crc_init);
    uint32_t c = ~crc;
#if defined(__x86_64__)
    if (crc_hw) return ~crc_hw64(c, p, n);
#endif
    return ~crc_sw(c, p, n);
}

/* ---- kv dtypes ---- */

uint32_t disk_kv_dtype(kvq_type t) {
    return t == KVQ_Q8_0 ? DISK_Q8_0 : t == KVQ_Q4_0 ? DISK_Q4_0 : DISK_F16;
}

const char *disk_kv_dtype_name(uint32_t dtype) {
    static _Thread_local char buf[24];
    if (dtype == DISK_F16) return kvq_name(KVQ_F16);
    if (dtype == DISK_Q8_0) return kvq_name(KVQ_Q8_0);
    if (dtype == DISK_Q4_0) return kvq_name(KVQ_Q4_0);
    if (dtype == DISK_STATE_F32) return "state";
    snprintf(buf, sizeof buf, "type %u", dtype);
    return buf;
}

/* ---- names ---- */

uint64_t disk_file_bytes(uint32_t n_tokens, uint64_t payload_bytes) {
    return DISK_HDR_BYTES + 4ull * n_tokens + payload_bytes + 4;
}

void disk_file_path_ext(const char *dir, const cache_hash *h, const char *ext, char *out, size_t cap, char *sub,
                        size_t sub_cap) {
    char hex[65];
    cache_hash_hex(h, hex);
    snprintf(out, cap, "%s/%.2s/%s%s", dir, hex, hex, ext);
    if (sub) snprintf(sub, sub_cap, "%s/%.2s", dir, hex);
}

void disk_file_path(const char *dir, const cache_hash *h, char *out, size_t cap, char *sub,
                    size_t sub_cap) {
    disk_file_path_ext(dir, h, ".kv", out, cap, sub, sub_cap);
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

int disk_file_name_hash(const char *name, cache_hash *h) { return disk_file_name_hash_ext(name, ".kv", h); }

int disk_file_name_hash_ext(const char *name, const char *ext, cache_hash *h) {
    if (strlen(name) != 64 + strlen(ext) || strcmp(name + 64, ext) != 0) return 0;
    for (int i = 0; i < 32; i++) {
        int hi = hexval(name[2 * i]), lo = hexval(name[2 * i + 1]);
        if (hi < 0 || lo < 0) return 0;
        h->b[i] = (uint8_t)(hi << 4 | lo);
    }
    return 1;
}

/* ---- header encoding ---- */

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const uint8_t *p) {
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

/* Token ids as little-endian bytes (identity on x86/arm64, kept explicit). */
static void tokens_to_le(uint8_t *out, const int32_t *t, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) put32(out + 4 * i, (uint32_t)t[i]);
}
static void tokens_from_le(int32_t *t, const uint8_t *in, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) t[i] = (int32_t)get32(in + 4 * i);
}

/* Header bytes with the header CRC filled in (reserved fields zero, so a
 * later version can use them and older readers still see a valid CRC). */
static void hdr_encode(uint8_t *b, const disk_hdr *h, const uint8_t *tok_le) {
    memset(b, 0, DISK_HDR_BYTES);
    memcpy(b, DISK_MAGIC, 8);
    put32(b + 8, h->version);
    put32(b + 12, h->kv_dtype);
    put32(b + 16, h->n_tokens);
    put64(b + 24, h->payload_bytes);
    memcpy(b + 32, h->model_fp, 32);
    memcpy(b + 64, h->hash.b, 32);
    memcpy(b + 96, h->parent.b, 32);
    uint32_t crc = disk_crc32c(disk_crc32c(0, b, 128), tok_le, 4ull * h->n_tokens);
    put32(b + 128, crc);
}

static void hdr_decode(const uint8_t *b, disk_hdr *h) {
    h->version = get32(b + 8);
    h->kv_dtype = get32(b + 12);
    h->n_tokens = get32(b + 16);
    h->payload_bytes = get64(b + 24);
    memcpy(h->model_fp, b + 32, 32);
    memcpy(h->hash.b, b + 64, 32);
    memcpy(h->parent.b, b + 96, 32);
}

/* ---- reading ---- */

/* pread until n bytes: 0, -1 (errno set) or -2 (the file ended first,
 * which for a block file means truncation, not an I/O error). */
static int pread_all(int fd, void *buf, size_t n, uint64_t off) {
    uint8_t *p = buf;
    while (n) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return r < 0 ? -1 : -2; /* -2: short file */
        p += r, n -= (size_t)r, off += (uint64_t)r;
    }
    return 0;
}

/* The magic and a sane token count, before the token ids are read. */
static int check_magic_count(const uint8_t *b, disk_hdr *h, strata_err *err) {
    if (memcmp(b, DISK_MAGIC, 8) != 0) return strata_errf(err, STRATA_EFORMAT, "bad magic");
    hdr_decode(b, h);
    if (h->n_tokens == 0 || h->n_tokens > DISK_MAX_TOKENS)
        return strata_errf(err, STRATA_EFORMAT, "bad token count %u", h->n_tokens);
    return 0;
}

/* With the token ids read: header CRC, version, total size. The CRC
 * before the version: every version keeps it where it is, so a bit flip
 * in the version field is damage, not another version's file. */
static int check_header(const uint8_t *b, const uint8_t *tok_le, const disk_hdr *h, uint64_t size, strata_err *err) {
    uint32_t crc = disk_crc32c(disk_crc32c(0, b, 128), tok_le, 4ull * h->n_tokens);
    if (crc != get32(b + 128)) return strata_errf(err, STRATA_EFORMAT, "header checksum mismatch");
    if (h->version != DISK_FORMAT_VERSION)
        return strata_errf(err, STRATA_EUNSUPPORTED, "format version %u (this build reads %u)", h->version, DISK_FORMAT_VERSION);
    if (size != disk_file_bytes(h->n_tokens, h->payload_bytes))
        return strata_errf(err, STRATA_EFORMAT, "size %llu, header says %llu (truncated or damaged)",
                           (unsigned long long)size, (unsigned long long)disk_file_bytes(h->n_tokens, h->payload_bytes));
    return 0;
}

/* Reads the raw header (and token bytes into tok_le, which holds
 * DISK_MAX_TOKENS*4) and checks magic, token count, header CRC, version
 * and size. */
static int read_raw_header(int fd, uint64_t size, uint8_t *b, disk_hdr *h, uint8_t *tok_le,
                           strata_err *err) {
    if (size < DISK_HDR_BYTES + 4) return strata_errf(err, STRATA_EFORMAT, "truncated (%llu bytes)", (unsigned long long)size);
    int r = pread_all(fd, b, DISK_HDR_BYTES, 0);
    if (r) return strata_errf(err, r == -2 ? STRATA_EFORMAT : STRATA_EIO, "header unreadable: %s", r == -2 ? "short file" : strerror(errno));
    if ((r = check_magic_count(b, h, err))) return r;
    r = pread_all(fd, tok_le, 4ull * h->n_tokens, DISK_HDR_BYTES);
    if (r) return strata_errf(err, r == -2 ? STRATA_EFORMAT : STRATA_EIO, "token ids unreadable");
    return check_header(b, tok_le, h, size, err);
}

int disk_file_read_header(int fd, uint64_t file_size, disk_hdr *h, int32_t *tokens,
                          strata_err *err) {
    uint8_t b[DISK_HDR_BYTES], *tok_le = malloc(4 * DISK_MAX_TOKENS);
    if (!tok_le) return strata_errf(err, STRATA_ENOMEM, "out of memory");
    int rc = read_raw_header(fd, file_size, b, h, tok_le, err);
    if (!rc && tokens) tokens_from_le(tokens, tok_le, h->n_tokens);
    free(tok_le);
    return rc;
}

/* A file can be whole and still wrong for the caller: renamed by hand,
 * another model's block under our name, another block geometry. */
static int check_expect(const disk_hdr *h, const disk_expect *ex, size_t cap, strata_err *err) {
    if (ex->hash && memcmp(ex->hash->b, h->hash.b, 32) != 0)
        return strata_errf(err, STRATA_EFORMAT, "header names another block");
    if (ex->model_fp && memcmp(ex->model_fp, h->model_fp, 32) != 0)
        return strata_errf(err, STRATA_EFORMAT, "written by another model (fingerprint differs)");
    if (ex->n_tokens && ex->n_tokens != h->n_tokens)
        return strata_errf(err, STRATA_EFORMAT, "%u tokens, expected %u", h->n_tokens, ex->n_tokens);
    if (ex->kv_dtype && ex->kv_dtype != h->kv_dtype) {
        char want[24];
        snprintf(want, sizeof want, "%s", disk_kv_dtype_name(ex->kv_dtype));
        return strata_errf(err, STRATA_EFORMAT, "KV type %s, this store holds %s (written with another --kv-type)",
                           disk_kv_dtype_name(h->kv_dtype), want);
    }
    if (ex->payload_bytes && ex->payload_bytes != h->payload_bytes)
        return strata_errf(err, STRATA_EFORMAT, "payload %llu bytes, expected %llu",
                           (unsigned long long)h->payload_bytes, (unsigned long long)ex->payload_bytes);
    if (h->payload_bytes > cap) return strata_errf(err, STRATA_EFORMAT, "payload larger than the buffer");
    return 0;
}

/* Header and tokens are checked; now the payload and the trailing CRC. */
static int load_payload(int fd, const uint8_t *b, const uint8_t *tok_le, const disk_hdr *h,
                        void *payload, strata_err *err) {
    uint64_t off = DISK_HDR_BYTES + 4ull * h->n_tokens;
    uint8_t tail[4];
    int r = pread_all(fd, payload, h->payload_bytes, off);
    if (!r) r = pread_all(fd, tail, 4, off + h->payload_bytes);
    if (r) return strata_errf(err, r == -2 ? STRATA_EFORMAT : STRATA_EIO, "payload unreadable");
    uint32_t crc = disk_crc32c(0, b, DISK_HDR_BYTES);
    crc = disk_crc32c(crc, tok_le, 4ull * h->n_tokens);
    crc = disk_crc32c(crc, payload, h->payload_bytes);
    if (crc != get32(tail)) return strata_errf(err, STRATA_EFORMAT, "payload checksum mismatch");
    return 0;
}

int disk_file_open(const char *path, uint64_t *size, strata_err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return strata_errf(err, STRATA_EIO, "%s", errno == ENOENT ? "missing" : strerror(errno));
    struct stat st;
    int rc = fstat(fd, &st) ? strata_errf(err, STRATA_EIO, "stat: %s", strerror(errno))
             : !S_ISREG(st.st_mode) ? strata_errf(err, STRATA_EFORMAT, "not a regular file")
                                    : 0;
    if (rc) {
        close(fd);
        return rc;
    }
    *size = (uint64_t)st.st_size;
    return fd;
}

int disk_file_load(const char *path, const disk_expect *ex, disk_hdr *h, int32_t *tokens,
                   void *payload, size_t cap, strata_err *err) {
    uint64_t size;
    int fd = disk_file_open(path, &size, err);
    if (fd < 0) return fd;
    uint8_t b[DISK_HDR_BYTES], *tok_le = malloc(4 * DISK_MAX_TOKENS);
    int rc = !tok_le ? strata_errf(err, STRATA_ENOMEM, "out of memory") : read_raw_header(fd, size, b, h, tok_le, err);
    if (rc == STRATA_EUNSUPPORTED) rc = STRATA_EFORMAT; /* asked for by name: it is wrong */
    if (!rc) rc = check_expect(h, ex, cap, err);
    if (!rc) rc = load_payload(fd, b, tok_le, h, payload, err);
    if (!rc && tokens) tokens_from_le(tokens, tok_le, h->n_tokens);
    /* The pool holds the block now: its cached pages would only take
     * fresh memory from the next reads (slow to fault in a VM). */
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    free(tok_le);
    close(fd);
    return rc;
}

/* ---- in memory: the same bytes as a file, for tiers that are not files ---- */

void disk_file_encode(const disk_hdr *h, const int32_t *tokens, const void *payload, uint8_t *out) {
    uint8_t *tok_le = out + DISK_HDR_BYTES, *pl = tok_le + 4ull * h->n_tokens;
    tokens_to_le(tok_le, tokens, h->n_tokens);
    hdr_encode(out, h, tok_le);
    memcpy(pl, payload, h->payload_bytes);
    uint32_t crc = disk_crc32c(0, out, (size_t)(pl - out) + h->payload_bytes);
    put32(pl + h->payload_bytes, crc);
}

int disk_file_decode(const uint8_t *buf, size_t len, const disk_expect *ex, disk_hdr *h, int32_t *tokens,
                     void *payload, size_t cap, strata_err *err) {
    if (len < DISK_HDR_BYTES + 4) return strata_errf(err, STRATA_EFORMAT, "truncated (%zu bytes)", len);
    int rc = check_magic_count(buf, h, err);
    if (rc) return rc;
    const uint8_t *tok_le = buf + DISK_HDR_BYTES;
    if (len < DISK_HDR_BYTES + 4ull * h->n_tokens + 4) return strata_errf(err, STRATA_EFORMAT, "token ids truncated");
    if ((rc = check_header(buf, tok_le, h, len, err)) == STRATA_EUNSUPPORTED) rc = STRATA_EFORMAT;
    if (!rc) rc = check_expect(h, ex, cap, err);
    if (rc) return rc;
    const uint8_t *pl = tok_le + 4ull * h->n_tokens;
    if (disk_crc32c(0, buf, len - 4) != get32(buf + len - 4))
        return strata_errf(err, STRATA_EFORMAT, "payload checksum mismatch");
    memcpy(payload, pl, h->payload_bytes);
    if (tokens) tokens_from_le(tokens, tok_le, h->n_tokens);
    return 0;
}

/* ---- writing ---- */

/* writev until everything is out; a short write is retried, not an error
 * (only a real failure like ENOSPC is). Consumes iov. */
static int write_all(int fd, struct iovec *iov, int n) {
    while (n > 0) {
        ssize_t w = writev(fd, iov, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return -1;
        while (n > 0 && (size_t)w >= iov->iov_len) w -= (ssize_t)iov->iov_len, iov++, n--;
        if (n > 0) iov->iov_base = (uint8_t *)iov->iov_base + w, iov->iov_len -= (size_t)w;
    }
    return 0;
}

/* A rename is durable only once its directory is synced. */
static int fsync_dir(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int r = fsync(fd);
    close(fd);
    return r;
}

/* DIR/ab, created on first use; the new entry in DIR is made durable too. */
static int ensure_subdir(const char *dir, const char *sub) {
    if (mkdir(sub, 0755) == 0) return fsync_dir(dir);
    return errno == EEXIST ? 0 : -1;
}

/* Header, tokens, payload and trailer go to fd in one writev. */
static int write_body(int fd, const disk_hdr *h, const int32_t *tokens, const void *payload) {
    uint8_t hdr[DISK_HDR_BYTES], tail[4], *tok_le = malloc(4ull * h->n_tokens);
    if (!tok_le) return errno = ENOMEM, -1;
    tokens_to_le(tok_le, tokens, h->n_tokens);
    hdr_encode(hdr, h, tok_le);
    uint32_t crc = disk_crc32c(0, hdr, DISK_HDR_BYTES);
    crc = disk_crc32c(crc, tok_le, 4ull * h->n_tokens);
    crc = disk_crc32c(crc, payload, h->payload_bytes);
    put32(tail, crc);
    struct iovec iov[4] = {{hdr, DISK_HDR_BYTES}, {tok_le, 4ull * h->n_tokens},
                           {(void *)payload, h->payload_bytes}, {tail, 4}};
    int r = write_all(fd, iov, 4);
    free(tok_le);
    return r;
}

int disk_file_write(const char *dir, const disk_hdr *h, const int32_t *tokens,
                    const void *payload, unsigned seq, int *sys_errno, strata_err *err) {
    char path[4096], sub[4096], tmp[4200];
    disk_file_path_ext(dir, &h->hash, h->kv_dtype == DISK_STATE_F32 ? ".rs" : ".kv", path, sizeof path, sub, sizeof sub);
    snprintf(tmp, sizeof tmp, "%s/.tmp-%ld-%u", sub, (long)getpid(), seq);
    const char *step = "mkdir";
    int fd = -1;
    if (ensure_subdir(dir, sub)) goto fail;
    step = "create";
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) goto fail;
    step = "write";
    if (write_body(fd, h, tokens, payload)) goto fail;
    step = "fsync";
    if (fsync(fd)) goto fail;
    step = "close";
    int r = close(fd);
    fd = -1;
    if (r) goto fail;
    step = "rename";
    if (rename(tmp, path)) goto fail;
    step = "fsync dir";
    if (fsync_dir(sub)) goto fail_renamed;
    return 0;
fail:
    *sys_errno = errno;
    if (fd >= 0) close(fd);
    unlink(tmp); /* a temp file never loads, but do not leave it */
    return strata_errf(err, STRATA_EIO, "%s %s: %s", step, tmp, strerror(*sys_errno));
fail_renamed:
    /* The file is complete and checksummed but may not survive a crash;
     * drop it so the index never counts a block that might vanish. */
    *sys_errno = errno;
    unlink(path);
    return strata_errf(err, STRATA_EIO, "%s %s: %s", step, sub, strerror(*sys_errno));
}

/* ---- scanning ---- */

static int is_fan_dir(const char *name) {
    return strlen(name) == 2 && hexval(name[0]) >= 0 && hexval(name[1]) >= 0;
}

static int scan_sub(const char *subpath, const char *fan, int (*cb)(void *, const disk_dirent *),
                    void *ctx) {
    DIR *dp = opendir(subpath);
    if (!dp) return 0; /* vanished or unreadable: nothing to report from here */
    struct dirent *de;
    int stop = 0;
    char path[4608];
    while (!stop && (de = readdir(dp))) {
        disk_dirent e = {.path = path, .name = de->d_name};
        snprintf(path, sizeof path, "%s/%s", subpath, de->d_name);
        if (strncmp(de->d_name, ".tmp-", 5) == 0) {
            e.is_tmp = 1;
            e.tmp_pid = strtol(de->d_name + 5, NULL, 10);
        } else if (!disk_file_name_hash(de->d_name, &e.hash) || strncmp(de->d_name, fan, 2) != 0) {
            continue; /* not a block file, or one in the wrong place: not ours */
        }
        stop = cb(ctx, &e);
    }
    closedir(dp);
    return stop;
}

/* Only DIR/xx/ fan-out folders are walked: quarantine/, usage files and
 * anything a user put there are never taken for blocks. */
int disk_file_scan(const char *dir, int (*cb)(void *ctx, const disk_dirent *e), void *ctx,
                   strata_err *err) {
    DIR *dp = opendir(dir);
    if (!dp) return strata_errf(err, STRATA_EIO, "disk cache %s: %s", dir, strerror(errno));
    struct dirent *de;
    char sub[4200];
    int stop = 0;
    while (!stop && (de = readdir(dp))) {
        if (!is_fan_dir(de->d_name)) continue;
        snprintf(sub, sizeof sub, "%s/%s", dir, de->d_name);
        stop = scan_sub(sub, de->d_name, cb, ctx);
    }
    closedir(dp);
    return 0;
}

/* ---- usage file (layout in disk_file.h) ---- */

#define USAGE_MAGIC "STRKU\0\0\2"
#define USAGE_MAGIC_V1 "STRKU\0\0\1"
#define USAGE_REC 56
#define USAGE_REC_V1 48

static void usage_path(const char *dir, const uint8_t fp[32], char *out, size_t cap) {
    snprintf(out, cap, "%s/usage-%02x%02x%02x%02x%02x%02x%02x%02x.bin", dir, fp[0], fp[1], fp[2],
             fp[3], fp[4], fp[5], fp[6], fp[7]);
}

static void put_f64(uint8_t *p, double v) {
    uint64_t u;
    memcpy(&u, &v, 8);
    put64(p, u);
}

static double get_f64(const uint8_t *p) {
    uint64_t u = get64(p);
    double v;
    memcpy(&v, &u, 8);
    return v;
}

int disk_usage_write(const char *dir, const uint8_t model_fp[32], const disk_usage_rec *r, size_t n,
                     strata_err *err) {
    size_t len = 16 + USAGE_REC * n + 4;
    uint8_t *b = calloc(1, len);
    if (!b) return strata_errf(err, STRATA_ENOMEM, "usage file: out of memory");
    memcpy(b, USAGE_MAGIC, 8);
    put32(b + 8, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        uint8_t *p = b + 16 + USAGE_REC * i;
        memcpy(p, r[i].hash.b, 32);
        put_f64(p + 32, r[i].hits);
        put_f64(p + 40, r[i].last_use);
        put_f64(p + 48, r[i].keep_until);
    }
    put32(b + len - 4, disk_crc32c(0, b, len - 4));
    char path[4200], tmp[4300];
    usage_path(dir, model_fp, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    struct iovec iov = {b, len};
    int ok = fd >= 0 && write_all(fd, &iov, 1) == 0 && fsync(fd) == 0;
    if (fd >= 0) ok &= close(fd) == 0;
    ok = ok && rename(tmp, path) == 0;
    int e = errno;
    free(b);
    if (ok) return 0;
    unlink(tmp);
    return strata_errf(err, STRATA_EIO, "usage file %s: %s", path, strerror(e));
}

/* All or nothing: a usage file with a bad size or CRC is ignored whole. */
static void usage_read_file(const char *path, void (*fn)(void *, const disk_usage_rec *), void *ctx) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0) return;
    uint8_t *b = NULL;
    size_t len = fstat(fd, &st) == 0 ? (size_t)st.st_size : 0, rec = 0;
    if (len >= 20 && (b = malloc(len)) && pread_all(fd, b, len, 0) == 0)
        rec = memcmp(b, USAGE_MAGIC, 8) == 0 ? USAGE_REC : memcmp(b, USAGE_MAGIC_V1, 8) == 0 ? USAGE_REC_V1 : 0;
    if (rec && len == 16 + rec * get32(b + 8) + 4 && disk_crc32c(0, b, len - 4) == get32(b + len - 4)) {
        for (uint32_t i = 0; i < get32(b + 8); i++) {
            const uint8_t *p = b + 16 + rec * i;
            disk_usage_rec r;
            memcpy(r.hash.b, p, 32);
            r.hits = get_f64(p + 32);
            r.last_use = get_f64(p + 40);
            r.keep_until = rec == USAGE_REC ? get_f64(p + 48) : 0;
            fn(ctx, &r);
        }
    }
    free(b);
    close(fd);
}

void disk_usage_read(const char *dir, const uint8_t *model_fp,
                     void (*fn)(void *ctx, const disk_usage_rec *r), void *ctx) {
    char path[4400];
    if (model_fp) {
        usage_path(dir, model_fp, path, sizeof path);
        usage_read_file(path, fn, ctx);
        return;
    }
    DIR *dp = opendir(dir);
    for (struct dirent *de; dp && (de = readdir(dp));) {
        size_t n = strlen(de->d_name);
        if (strncmp(de->d_name, "usage-", 6) != 0 || n < 4 || strcmp(de->d_name + n - 4, ".bin") != 0) continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        usage_read_file(path, fn, ctx);
    }
    if (dp) closedir(dp);
}
