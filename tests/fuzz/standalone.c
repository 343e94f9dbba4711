/* standalone.c - a main() for the fuzz targets when built without
 * libFuzzer (gcc, `make asan`): runs LLVMFuzzerTestOneInput once on each
 * file named on the command line, or once on stdin. The template mutator
 * (template_mutator.py) drives the ASan build of fuzz_tmpl this way, and
 * `make fuzz-slice` replays the committed seed corpora through it. */
#include <stdio.h>
#include <stdlib.h>

#include "fuzz_util.h"

/* Reads a whole stream; NULL on error. */
static uint8_t *read_all(FILE *fp, size_t *n) {
    size_t cap = 1 << 16, len = 0;
    uint8_t *buf = malloc(cap);
    for (size_t r; buf && (r = fread(buf + len, 1, cap - len, fp)) > 0;) {
        len += r;
        if (len == cap) {
            uint8_t *grown = realloc(buf, cap *= 2);
            if (!grown) free(buf);
            buf = grown;
        }
    }
    *n = len;
    return buf;
}

static int run_stream(FILE *fp, const char *name) {
    size_t n = 0;
    uint8_t *data = read_all(fp, &n);
    if (!data) {
        fprintf(stderr, "%s: cannot read\n", name);
        return 1;
    }
    LLVMFuzzerTestOneInput(data, n);
    free(data);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return run_stream(stdin, "stdin");
    int bad = 0;
    for (int i = 1; i < argc; i++) {
        FILE *fp = fopen(argv[i], "rb");
        if (!fp) {
            fprintf(stderr, "%s: cannot open\n", argv[i]);
            bad = 1;
            continue;
        }
        bad |= run_stream(fp, argv[i]);
        fclose(fp);
    }
    return bad;
}
