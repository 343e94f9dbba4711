/* args.c - flag parsing for the CLI (see args.h). */
#include "cli/args.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const arg_spec *find(const arg_spec *specs, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(specs[i].name, name) == 0 || (specs[i].alias && strcmp(specs[i].alias, name) == 0))
            return &specs[i];
    return NULL;
}

static int parse_number(const arg_spec *s, const char *v, strata_err *err) {
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (*v == 0 || *end != 0 || errno)
        return strata_errf(err, STRATA_EINVAL, "%s: '%s' is not a number", s->name, v);
    if (s->kind == ARG_INT && d != (double)(long long)d)
        return strata_errf(err, STRATA_EINVAL, "%s: '%s' is not an integer", s->name, v);
    if (s->min <= s->max && (d < s->min || d > s->max))
        return strata_errf(err, STRATA_EINVAL, "%s: %s is out of range [%g, %g]", s->name, v,
                           s->min, s->max);
    if (s->kind == ARG_INT) *(int *)s->out = (int)d;
    else *(float *)s->out = (float)d;
    return 0;
}

int args_parse(const arg_spec *specs, int n_specs, int argc, char **argv, int first,
               const char **pos_out, strata_err *err) {
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || a[1] == 0) {
            if (pos_out && !*pos_out) {
                *pos_out = a;
                continue;
            }
            return strata_errf(err, STRATA_EINVAL, "unexpected argument '%s'", a);
        }
        const arg_spec *s = find(specs, n_specs, a);
        if (!s) return strata_errf(err, STRATA_EINVAL, "unknown flag '%s' (see --help)", a);
        if (s->kind == ARG_FLAG) {
            *(int *)s->out = 1;
            continue;
        }
        if (i + 1 >= argc) return strata_errf(err, STRATA_EINVAL, "%s needs a value", s->name);
        const char *v = argv[++i];
        if (s->kind == ARG_STR) *(const char **)s->out = v;
        else if (parse_number(s, v, err)) return STRATA_EINVAL;
    }
    return 0;
}

static int ends_with(const char *s, const char *tail) {
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && !strcmp(s + a - b, tail);
}

/* What goes after an option in the usage: its kind of value. */
static const char *placeholder(const arg_spec *a) {
    if (a->kind == ARG_FLAG) return "";
    if (a->kind != ARG_STR) return a->kind == ARG_INT ? " N" : " X";
    if (ends_with(a->name, "-file") || !strcmp(a->name, "--model") || !strcmp(a->name, "--trace")) return " FILE";
    if (ends_with(a->name, "-dir")) return " DIR";
    if (!strcmp(a->name, "--host")) return " ADDR";
    return " VALUE";
}

void args_usage(const char *cmd, const char *synopsis, const arg_spec *specs, int n_specs) {
    printf("usage: strata %s %s\n\n", cmd, synopsis);
    for (int i = 0; i < n_specs; i++) {
        char left[64];
        snprintf(left, sizeof left, "%s%s%s%s", specs[i].alias ? specs[i].alias : "", specs[i].alias ? ", " : "",
                 specs[i].name, placeholder(&specs[i]));
        printf("  %-28s %s\n", left, specs[i].help);
    }
}

int args_cli(const char *cmd, const char *synopsis, const arg_spec *specs, int n_specs, int argc, char **argv,
             const int *help) {
    strata_err err = {0};
    if (args_parse(specs, n_specs, argc, argv, 2, NULL, &err)) {
        fprintf(stderr, "strata %s: %s\n", cmd, err.msg);
        return 2;
    }
    if (*help) {
        args_usage(cmd, synopsis, specs, n_specs);
        return 0;
    }
    return -1;
}
