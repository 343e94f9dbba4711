/* cli.h - subcommand entry points, dispatched from main.c. Each returns
 * the process exit status and prints its own one-line error. */
#ifndef STRATA_CLI_H
#define STRATA_CLI_H

int cli_run(int argc, char **argv);
int cli_bench(int argc, char **argv);
int cli_model(int argc, char **argv);
int cli_serve(int argc, char **argv);
int cli_cache(int argc, char **argv);
/* `strata perplexity -m MODEL -f TEXT`: perplexity (and argmax ids) over
 * windows of a text, to measure what --kv-type q8_0 costs. */
int cli_perplexity(int argc, char **argv);
/* `strata bench-kernels [TYPE [ROWS [K [N_TOK...]]]] [--level L]`:
 * single-thread GFLOP/s of quant_gemm at each kernel level. */
int cli_bench_kernels(int argc, char **argv);
/* `strata bench-mtp -m MODEL`: per decode step, the trunk's pass, the
 * MTP block kept up with it and a k-token draft (model/mtp.h), in ms. */
int cli_bench_mtp(int argc, char **argv);

#endif
