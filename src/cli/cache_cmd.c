/* cache_cmd.c - `strata cache ls|stat|verify|gc|purge --cache-dir DIR`:
 * look into and maintain a disk-tier directory without loading a model.
 * Every model's blocks are shown and counted (the tool store indexes all
 * fingerprints); with -m MODEL, ls also previews the text of each chain's
 * last block (where chains differ) through that model's tokenizer.
 * Does not: coordinate with a server running on the same directory (gc
 * and purge under a live server only turn its cached blocks into misses). */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/mem.h"
#include "cache/disk.h"
#include "cache/disk_file.h"
#include "cli/args.h"
#include "cli/cli.h"
#include "model/gguf.h"
#include "text/tokenizer.h"

#define MIB (1024.0 * 1024.0)

/* ---- collecting the index ---- */

typedef struct blist {
    disk_block_info *b;
    size_t n, cap;
} blist;

static void collect(void *ctx, const disk_block_info *b) {
    blist *l = ctx;
    XGROW(l->b, l->cap, l->n + 1, 256);
    l->b[l->n++] = *b;
}

static int by_hash(const void *a, const void *b) {
    return memcmp(((const disk_block_info *)a)->hash.b, ((const disk_block_info *)b)->hash.b, 32);
}

static const disk_block_info *find(const blist *l, const cache_hash *h) {
    disk_block_info key;
    key.hash = *h;
    return bsearch(&key, l->b, l->n, sizeof key, by_hash);
}

static int open_tool(disk_store **d, const char *dir, int read_only) {
    struct stat st;
    if (stat(dir, &st) || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "strata cache: %s: no such directory\n", dir);
        return 1;
    }
    disk_opts o = {.dir = dir, .all_models = 1, .read_only = read_only};
    strata_err err = {0};
    if (disk_open(d, &o, &err)) {
        fprintf(stderr, "strata cache: %s\n", err.msg);
        return 1;
    }
    return 0;
}

static void fmt_time(double t, char *out, size_t cap) {
    time_t s = (time_t)t;
    struct tm tm;
    localtime_r(&s, &tm);
    strftime(out, cap, "%Y-%m-%d %H:%M:%S", &tm);
}

/* ---- ls: one line per chain (a leaf and its stored ancestors) ---- */

typedef struct chain {
    const disk_block_info *first, *leaf;
    int blocks;
    uint64_t tokens, bytes;
    double last_use;
} chain;

static chain walk_up(const blist *l, const disk_block_info *leaf) {
    chain c = {.first = leaf, .leaf = leaf};
    const disk_block_info *b = leaf;
    while (b && c.blocks <= (int)l->n) { /* bounded: a cycle cannot come from SHA-256 */
        c.first = b;
        c.blocks++;
        c.tokens += b->n_tokens;
        c.bytes += b->bytes;
        if (b->last_use > c.last_use) c.last_use = b->last_use;
        b = b->parent_stored ? find(l, &b->parent) : NULL;
    }
    return c;
}

static int by_last_use_desc(const void *a, const void *b) {
    double x = ((const chain *)a)->last_use, y = ((const chain *)b)->last_use;
    return (x < y) - (x > y);
}

/* The first PREVIEW characters of a block's text (read from its header),
 * on one line; "" when it cannot be read. */
#define PREVIEW 40
static void block_preview(const char *dir, const tokenizer *tok, const cache_hash *h, char out[PREVIEW + 1]) {
    char path[4200];
    out[0] = 0;
    disk_file_path(dir, h, path, sizeof path, NULL, 0);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    int32_t *ids = xmalloc(DISK_MAX_TOKENS * sizeof(int32_t));
    disk_hdr hdr;
    if (fd >= 0 && !fstat(fd, &st) && !disk_file_read_header(fd, (uint64_t)st.st_size, &hdr, ids, NULL)) {
        size_t len = 0;
        for (uint32_t i = 0; i < hdr.n_tokens && len < PREVIEW; i++) {
            char piece[64];
            int n = tok_piece(tok, ids[i], 1, piece, sizeof piece);
            for (int k = 0; k < n && k < (int)sizeof piece && len < PREVIEW; k++)
                out[len++] = (unsigned char)piece[k] < 0x20 ? ' ' : piece[k];
        }
        out[len] = 0;
    }
    if (fd >= 0) close(fd);
    free(ids);
}

static void print_chain(const chain *c, const char *dir, const tokenizer *tok) {
    char first[65], leaf[65], when[32], text[PREVIEW + 1] = "";
    cache_hash_hex(&c->first->hash, first);
    cache_hash_hex(&c->leaf->hash, leaf);
    fmt_time(c->last_use, when, sizeof when);
    if (tok) block_preview(dir, tok, &c->leaf->hash, text); /* where chains differ */
    const uint8_t *fp = c->leaf->model_fp;
    printf("%02x%02x%02x%02x  %.12s  %.12s  %6d  %8llu  %9.1f  %6.1f  %-19s  %s\n", fp[0], fp[1], fp[2], fp[3],
           first, leaf, c->blocks, (unsigned long long)c->tokens, c->bytes / MIB, c->leaf->hits, when, text);
}

/* The tokenizer of MODEL for previews, or NULL (with a warning). */
static tokenizer *preview_tokenizer(const char *model) {
    gguf_file *f = NULL;
    tokenizer *t = NULL;
    strata_err err = {0};
    if (!model) return NULL;
    if (gguf_open(&f, model, &err) || tok_load(&t, f, &err))
        fprintf(stderr, "strata cache: no text preview: %s\n", err.msg);
    gguf_close(f);
    return t;
}

static int cmd_ls(const char *dir, const char *model) {
    disk_store *d;
    if (open_tool(&d, dir, 1)) return 1;
    blist l = {0};
    disk_foreach(d, collect, &l);
    disk_close(d);
    qsort(l.b, l.n, sizeof *l.b, by_hash);
    chain *cs = xmalloc((l.n + 1) * sizeof *cs);
    size_t n = 0;
    for (size_t i = 0; i < l.n; i++)
        if (l.b[i].n_children == 0) cs[n++] = walk_up(&l, &l.b[i]);
    qsort(cs, n, sizeof *cs, by_last_use_desc);
    tokenizer *tok = preview_tokenizer(model);
    printf("%-8s  %-12s  %-12s  %6s  %8s  %9s  %6s  %-19s  %s\n", "model", "first", "leaf", "blocks", "tokens",
           "MiB", "hits", "last use", tok ? "leaf text" : "");
    for (size_t i = 0; i < n; i++) print_chain(&cs[i], dir, tok);
    tok_free(tok);
    printf("%zu chains, %zu blocks (shared prefixes are listed in each chain, stored once)\n", n, l.n);
    uint64_t sn, sb;
    disk_snap_count(dir, &sn, &sb, 0);
    if (sn) printf("%llu recurrent-state snapshots (.rs, %.1f MiB) beside them\n", (unsigned long long)sn, sb / MIB);
    free(cs);
    free(l.b);
    return 0;
}

/* ---- stat: totals, per model ---- */

typedef struct model_total {
    uint8_t fp[32];
    uint64_t files, bytes, tokens, leaves;
} model_total;

static int count_dir(const char *dir, const char *sub) {
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, sub);
    int n = 0;
    DIR *dp = opendir(p);
    for (struct dirent *de; dp && (de = readdir(dp));) n += de->d_name[0] != '.';
    if (dp) closedir(dp);
    return n;
}

static void add_model(model_total *m, int *n, const disk_block_info *b) {
    int i = 0;
    while (i < *n && memcmp(m[i].fp, b->model_fp, 32) != 0) i++;
    if (i == *n) memset(&m[i], 0, sizeof m[i]), memcpy(m[i].fp, b->model_fp, 32), (*n)++;
    m[i].files++, m[i].bytes += b->bytes, m[i].tokens += b->n_tokens, m[i].leaves += b->n_children == 0;
}

static int cmd_stat(const char *dir) {
    disk_store *d;
    if (open_tool(&d, dir, 1)) return 1;
    blist l = {0};
    disk_foreach(d, collect, &l);
    disk_stats st;
    disk_get_stats(d, &st);
    disk_close(d);
    model_total *m = xcalloc(l.n + 1, sizeof *m);
    int nm = 0;
    for (size_t i = 0; i < l.n; i++) add_model(m, &nm, &l.b[i]);
    printf("dir          %s\n", dir);
    printf("blocks       %llu (%.1f MiB)\n", (unsigned long long)st.files, st.bytes / MIB);
    for (int i = 0; i < nm; i++)
        printf("  model %02x%02x%02x%02x: %llu blocks, %llu tokens, %.1f MiB, %llu chains\n", m[i].fp[0],
               m[i].fp[1], m[i].fp[2], m[i].fp[3], (unsigned long long)m[i].files,
               (unsigned long long)m[i].tokens, m[i].bytes / MIB, (unsigned long long)m[i].leaves);
    uint64_t sn, sb;
    disk_snap_count(dir, &sn, &sb, 0);
    printf("snapshots    %llu recurrent-state files (.rs, %.1f MiB)\n", (unsigned long long)sn, sb / MIB);
    printf("damaged      %llu (found from headers; run verify to check payloads)\n", (unsigned long long)st.quarantined);
    printf("other format %llu (left alone)\n", (unsigned long long)st.foreign);
    printf("quarantine   %d files in %s/%s\n", count_dir(dir, DISK_QUARANTINE), dir, DISK_QUARANTINE);
    free(m);
    free(l.b);
    return 0;
}

/* ---- verify: read every block and snapshot in full ---- */

static void report_bad_snap(void *ctx, const char *path, const char *why) { printf("bad  %s: %s\n", path, why); }

static int cmd_verify(const char *dir) {
    disk_store *d;
    if (open_tool(&d, dir, 0)) return 1;
    disk_stats st;
    disk_get_stats(d, &st);
    uint64_t bad = st.quarantined; /* damaged headers, found while opening */
    blist l = {0};
    disk_foreach(d, collect, &l);
    for (size_t i = 0; i < l.n; i++) {
        strata_err err = {0};
        if (disk_verify(d, &l.b[i].hash, &err) == 0) continue;
        bad++;
        printf("bad  %s\n", err.msg);
    }
    uint64_t snap_bad, snap_ok = disk_snap_verify(d, report_bad_snap, NULL, &snap_bad);
    disk_close(d);
    printf("verified %zu blocks: %llu ok, %llu bad (moved to %s/%s)\n", l.n,
           (unsigned long long)(l.n - (bad - st.quarantined)), (unsigned long long)bad, dir, DISK_QUARANTINE);
    printf("verified %llu recurrent-state snapshots: %llu ok, %llu bad (moved there too)\n",
           (unsigned long long)(snap_ok + snap_bad), (unsigned long long)snap_ok, (unsigned long long)snap_bad);
    free(l.b);
    return bad || snap_bad ? 1 : 0;
}

/* ---- gc and purge ---- */

static int cmd_gc(const char *dir, int budget_mb) {
    if (budget_mb < 0) {
        fprintf(stderr, "strata cache gc: --budget-mb N is required\n");
        return 2;
    }
    disk_store *d;
    if (open_tool(&d, dir, 0)) return 1;
    disk_stats before, after;
    disk_get_stats(d, &before);
    uint64_t n = disk_evict_to(d, (uint64_t)budget_mb << 20);
    disk_get_stats(d, &after);
    disk_close(d);
    printf("evicted %llu blocks (%.1f MiB); %llu blocks, %.1f MiB left (budget %d MiB)\n",
           (unsigned long long)n, (before.bytes - after.bytes) / MIB, (unsigned long long)after.files,
           after.bytes / MIB, budget_mb);
    return 0;
}

static int cmd_purge(const char *dir) {
    struct stat st;
    if (stat(dir, &st) || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "strata cache: %s: no such directory\n", dir);
        return 1;
    }
    uint64_t n = 0;
    strata_err err = {0};
    if (disk_purge(dir, &n, &err)) {
        fprintf(stderr, "strata cache purge: %s\n", err.msg);
        return 1;
    }
    printf("purged %llu files from %s\n", (unsigned long long)n, dir);
    return 0;
}

int cli_cache(int argc, char **argv) {
    const char *sub = NULL, *dir = NULL, *model = NULL;
    int budget_mb = -1, help = 0;
    arg_spec specs[] = {
        {"--cache-dir", NULL, ARG_STR, &dir, 0, -1, "the disk cache directory (required)"},
        {"--budget-mb", NULL, ARG_INT, &budget_mb, 0, 1 << 30, "gc: evict down to N MiB (leaf first, least used first)"},
        {"--model", "-m", ARG_STR, &model, 0, -1, "ls: preview each chain's last block as text with this model's tokenizer"},
        {"--help", "-h", ARG_FLAG, &help, 0, -1, "show this help"},
    };
    int n_specs = (int)(sizeof specs / sizeof specs[0]);
    strata_err err = {0};
    if (args_parse(specs, n_specs, argc, argv, 2, &sub, &err)) {
        fprintf(stderr, "strata cache: %s\n", err.msg);
        return 2;
    }
    if (help || !sub) {
        args_usage("cache", "ls|stat|verify|gc|purge --cache-dir DIR [--budget-mb N] [-m MODEL]", specs, n_specs);
        printf("\n  ls      chains of blocks (first block to leaf), newest first\n"
               "  stat    totals per model\n"
               "  verify  read every block in full; damaged ones go to DIR/quarantine (exit 1)\n"
               "  gc      evict down to --budget-mb\n"
               "  purge   delete every block file, quarantined file and usage file\n");
        return help ? 0 : 2;
    }
    if (!dir) {
        fprintf(stderr, "strata cache %s: --cache-dir DIR is required\n", sub);
        return 2;
    }
    g_log_level = LOG_WARN; /* damaged files are named as they are found */
    if (strcmp(sub, "ls") == 0) return cmd_ls(dir, model);
    if (strcmp(sub, "stat") == 0) return cmd_stat(dir);
    if (strcmp(sub, "verify") == 0) return cmd_verify(dir);
    if (strcmp(sub, "gc") == 0) return cmd_gc(dir, budget_mb);
    if (strcmp(sub, "purge") == 0) return cmd_purge(dir);
    fprintf(stderr, "strata cache: unknown command '%s' (ls, stat, verify, gc, purge)\n", sub);
    return 2;
}
