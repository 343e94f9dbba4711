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

#endif
