/* cli.h - subcommand entry points, dispatched from main.c. Each returns
 * the process exit status and prints its own one-line error. */
#ifndef STRATA_CLI_H
#define STRATA_CLI_H

int cli_run(int argc, char **argv);
int cli_bench(int argc, char **argv);
int cli_model(int argc, char **argv);
int cli_serve(int argc, char **argv);
int cli_cache(int argc, char **argv);
/* `strata bench-kernels [TYPE [ROWS [K [N_TOK...]]]] [--level L]`:
 * single-thread GFLOP/s of quant_gemm at each kernel level. */
int cli_bench_kernels(int argc, char **argv);

#endif
