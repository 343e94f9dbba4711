/* main.c - the strata binary: dispatches subcommands. The only place that
 * turns errors into exit statuses. */
#include <stdio.h>
#include <string.h>

#include "backend/quant.h"
#include "cli/cli.h"

#ifndef STRATA_VERSION
#define STRATA_VERSION "unknown"
#endif

static void usage(void) {
    printf("usage: strata <command> [options]\n\n"
           "commands:\n"
           "  serve   OpenAI-compatible HTTP server (strata serve -m MODEL [--port 8080])\n"
           "  run     generate text from a prompt (strata run -m MODEL -p TEXT [--chat])\n"
           "  bench   prompt and generation speed (strata bench -m MODEL [-p 512] [-n 128])\n"
           "  bench-kernels  single-thread gemm GFLOP/s (strata bench-kernels [TYPE ROWS K N_TOK...])\n"
           "  bench-mtp      what qwen35's MTP drafter costs per decode step (strata bench-mtp -m MODEL)\n"
           "  perplexity  score a text (strata perplexity -m MODEL -f TEXT [--kv-type q8_0])\n"
           "  model   inspect a GGUF file (strata model info FILE)\n"
           "  cache   inspect the disk KV cache (strata cache ls|stat|verify|gc|purge --cache-dir DIR)\n\n"
           "'strata <command> --help' lists a command's options; 'strata --version' the build.\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage();
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
        printf("strata %s\n", STRATA_VERSION);
        return 0;
    }
    if (strcmp(cmd, "run") == 0) return cli_run(argc, argv);
    if (strcmp(cmd, "bench") == 0) return cli_bench(argc, argv);
    if (strcmp(cmd, "model") == 0) return cli_model(argc, argv);
    if (strcmp(cmd, "serve") == 0) return cli_serve(argc, argv);
    if (strcmp(cmd, "bench-kernels") == 0) return cli_bench_kernels(argc - 1, argv + 1);
    if (strcmp(cmd, "bench-mtp") == 0) return cli_bench_mtp(argc, argv);
    if (strcmp(cmd, "cache") == 0) return cli_cache(argc, argv);
    if (strcmp(cmd, "perplexity") == 0) return cli_perplexity(argc, argv);
    fprintf(stderr, "strata: unknown command '%s' (try 'strata --help')\n", cmd);
    return 2;
}
