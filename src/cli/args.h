/* args.h - small flag parser for the subcommands: typed values, range
 * checks and one-line errors ("--temp: 'abc' is not a number"). */
#ifndef STRATA_ARGS_H
#define STRATA_ARGS_H

#include "base/err.h"

typedef enum { ARG_STR, ARG_INT, ARG_FLOAT, ARG_FLAG } arg_kind;

typedef struct arg_spec {
    const char *name;  /* "--temp" */
    const char *alias; /* "-t" or NULL */
    arg_kind kind;
    void *out;         /* const char **, int *, float *, int * */
    double min, max;   /* numeric range (ignored when min > max) */
    const char *help;
} arg_spec;

/* Parses argv[first..argc); positional args are refused unless pos_out is
 * given (then the first one is stored there). */
int args_parse(const arg_spec *specs, int n_specs, int argc, char **argv, int first,
               const char **pos_out, strata_err *err);
void args_usage(const char *cmd, const char *synopsis, const arg_spec *specs, int n_specs);

/* A subcommand's parse of argv[2..]: a bad flag prints "strata CMD: why"
 * and returns 2; --help (*help set by a spec) prints the usage and returns
 * 0; else -1: go on. */
int args_cli(const char *cmd, const char *synopsis, const arg_spec *specs, int n_specs, int argc, char **argv,
             const int *help);

/* Spec lines the model commands share. */
#define ARG_SPEC_MODEL(p) {"--model", "-m", ARG_STR, (p), 0, -1, "GGUF model file (required)"}
#define ARG_SPEC_THREADS(p) {"--threads", "-t", ARG_INT, (p), 1, 1024, "threads (one per core)"}
#define ARG_SPEC_HELP(p) {"--help", "-h", ARG_FLAG, (p), 0, -1, "this help"}

#endif
