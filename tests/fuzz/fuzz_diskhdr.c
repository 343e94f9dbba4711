/* fuzz_diskhdr.c - libFuzzer target: a KV cache block file (and a usage
 * file) of arbitrary bytes. disk_file_read_header (what the disk tier's
 * index rebuild reads), disk_file_load (a whole block, checked against
 * expectations taken from the file itself, so the payload CRC path runs
 * too) and the usage-file reader must reject damage with an error, never
 * read past the file or allocate by a forged size.
 * Seeds: tests/fuzz/corpus/diskhdr (real block files from a tiny model). */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cache/disk_file.h"
#include "fuzz_util.h"

#define PAYLOAD_CAP (1u << 20)

static char g_dir[64], g_usage[128];

static void count_rec(void *ctx, const disk_usage_rec *r) { ++*(size_t *)ctx; }

static void remove_usage_dir(void) {
    unlink(g_usage);
    rmdir(g_dir);
}

/* A private directory for the usage file, removed at exit. */
static const char *usage_path(void) {
    if (!g_dir[0]) {
        snprintf(g_dir, sizeof g_dir, "/tmp/strata-fuzz-usage-%d", (int)getpid());
        mkdir(g_dir, 0700);
        snprintf(g_usage, sizeof g_usage, "%s/usage-0000000000000000.bin", g_dir);
        atexit(remove_usage_dir);
    }
    return g_usage;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int32_t tokens[DISK_MAX_TOKENS];
    static uint8_t payload[PAYLOAD_CAP];
    char path[64];
    int fd = fuzz_memfd(data, size, path, sizeof path);
    if (fd < 0) return 0;
    disk_hdr h;
    strata_err err;
    int rc = disk_file_read_header(fd, size, &h, tokens, &err);
    disk_expect ex = {0};
    if (rc == 0) {
        ex.hash = &h.hash;
        ex.model_fp = h.model_fp;
        ex.n_tokens = h.n_tokens;
    }
    disk_file_load(path, &ex, &h, tokens, payload, sizeof payload, &err);
    close(fd);
    /* The same bytes as a usage file: read through the directory scan. */
    FILE *fp = fopen(usage_path(), "wb");
    if (fp) {
        fwrite(data, 1, size, fp);
        fclose(fp);
        size_t n = 0;
        disk_usage_read(g_dir, NULL, count_rec, &n);
    }
    return 0;
}
