/* api_params.c - request fields shared by the APIs: typed lookups with
 * errors that name the field, and sampling parameters. */
#include "server/api_params.h"

#include "base/utf8.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>

#include "server/sched.h"
#include <stdio.h>
#include <string.h>

#define META_MAX_KEYS 16
#define META_MAX_KEY_CHARS 64
#define META_MAX_VALUE_CHARS 512

int param_metadata(const json_t *obj, const char *key, char *why, size_t why_cap) {
    const json_t *m = json_object_get(obj, key), *v;
    if (!m || json_is_null(m)) return 0;
    if (!json_is_object(m)) {
        snprintf(why, why_cap, "'%s' must be an object of string values", key);
        return -1;
    }
    if (json_object_size(m) > META_MAX_KEYS) {
        snprintf(why, why_cap, "'%s' may have at most %d keys (got %zu)", key, META_MAX_KEYS, json_object_size(m));
        return -1;
    }
    const char *k;
    json_object_foreach((json_t *)m, k, v) {
        if (utf8_chars(k, strlen(k)) > META_MAX_KEY_CHARS) {
            snprintf(why, why_cap, "'%s': key '%.20s...' is longer than %d characters", key, k, META_MAX_KEY_CHARS);
            return -1;
        }
        if (!json_is_string(v) || utf8_chars(json_string_value(v), json_string_length(v)) > META_MAX_VALUE_CHARS) {
            snprintf(why, why_cap, "'%s.%s' must be a string of at most %d characters", key, k, META_MAX_VALUE_CHARS);
            return -1;
        }
    }
    return 1;
}

int param_number(const json_t *obj, const char *key, double lo, double hi, double *out,
                 char *why, size_t why_cap) {
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) {
        snprintf(why, why_cap, "'%s' must be a number", key);
        return -1;
    }
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi)) {
        snprintf(why, why_cap, "'%s' must be between %g and %g (got %g)", key, lo, hi, d);
        return -1;
    }
    *out = d;
    return 1;
}

int param_int(const json_t *obj, const char *key, long lo, long hi, long *out, char *why,
              size_t why_cap) {
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    if (json_is_real(v) && isfinite(json_real_value(v)) && json_real_value(v) == floor(json_real_value(v))) {
        /* an integer beyond 64 bits (text/jsonload reads it as a double) */
        snprintf(why, why_cap, "'%s' must be between %ld and %ld (got %.17g)", key, lo, hi, json_real_value(v));
        return -1;
    }
    if (!json_is_integer(v)) {
        snprintf(why, why_cap, "'%s' must be an integer", key);
        return -1;
    }
    long long x = json_integer_value(v);
    if (x < lo || x > hi) {
        snprintf(why, why_cap, "'%s' must be between %ld and %ld (got %lld)", key, lo, hi, x);
        return -1;
    }
    *out = (long)x;
    return 1;
}

int param_bool(const json_t *obj, const char *key, int *out, char *why, size_t why_cap) {
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) {
        snprintf(why, why_cap, "'%s' must be a boolean", key);
        return -1;
    }
    *out = json_is_true(v);
    return 1;
}

/* "stop": a string or an array of strings. */
static int parse_stops(const json_t *obj, const char *key, gen_params *p, char *why, size_t cap) {
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    if (json_is_string(v)) {
        p->stops[p->n_stops++] = json_string_value(v);
        return 0;
    }
    if (!json_is_array(v) || json_array_size(v) > TEXTOUT_MAX_STOPS) {
        snprintf(why, cap, "'%s' must be a string or an array of at most %d strings", key, TEXTOUT_MAX_STOPS);
        return -1;
    }
    size_t i;
    const json_t *s;
    json_array_foreach(v, i, s) {
        if (!json_is_string(s)) {
            snprintf(why, cap, "'%s[%zu]' must be a string", key, i);
            return -1;
        }
        if (*json_string_value(s)) p->stops[p->n_stops++] = json_string_value(s);
    }
    return 0;
}

/* OpenAI's "logit_bias": {"TOKEN_ID": bias in [-100, 100], ...}. */
static int parse_logit_bias(const json_t *req, sample_params *sp, char *why, size_t cap) {
    const json_t *lb = json_object_get(req, "logit_bias"), *v;
    const char *key;
    if (!lb || json_is_null(lb)) return 0;
    if (!json_is_object(lb) || json_object_size(lb) > SAMPLE_MAX_BIAS) {
        snprintf(why, cap, "'logit_bias' must be an object of at most %d token ids", SAMPLE_MAX_BIAS);
        return -1;
    }
    json_object_foreach((json_t *)lb, key, v) {
        char *end;
        long id = strtol(key, &end, 10);
        double b = json_number_value(v);
        if (!*key || *end || id < 0 || id > INT32_MAX || !json_is_number(v) || b < -100 || b > 100) {
            snprintf(why, cap, "'logit_bias' maps token ids (integers as strings) to numbers from -100 to 100; "
                               "'%.40s' does not", key);
            return -1;
        }
        sp->bias[sp->n_bias++] = (sample_bias){(int32_t)id, (float)b};
    }
    return 0;
}

int params_sampling(const json_t *req, const char *stop_key, const sample_params *defaults, gen_params *p,
                    char *why, size_t cap) {
    sample_params *sp = &p->sampling;
    *sp = *defaults;
    double d;
    long l;
    int r;
    if ((r = param_number(req, "temperature", 0, 2, &d, why, cap)) < 0) return -1;
    if (r) sp->temperature = (float)d;
    if ((r = param_number(req, "top_p", 0, 1, &d, why, cap)) < 0) return -1;
    if (r) sp->top_p = (float)d;
    if ((r = param_int(req, "top_k", 0, 1L << 30, &l, why, cap)) < 0) return -1;
    if (r) sp->top_k = (int)l;
    if ((r = param_number(req, "min_p", 0, 1, &d, why, cap)) < 0) return -1;
    if (r) sp->min_p = (float)d;
    if ((r = param_number(req, "presence_penalty", -2, 2, &d, why, cap)) < 0) return -1;
    if (r) sp->presence_penalty = (float)d;
    if ((r = param_number(req, "frequency_penalty", -2, 2, &d, why, cap)) < 0) return -1;
    if (r) sp->frequency_penalty = (float)d;
    if ((r = param_number(req, "repetition_penalty", 0.01, 10, &d, why, cap)) < 0) return -1;
    if (r) sp->repeat_penalty = (float)d;
    if ((r = param_int(req, "seed", LONG_MIN, LONG_MAX, &l, why, cap)) < 0) return -1; /* any int64 */
    if (r) sp->seed = (uint64_t)l;
    if (parse_logit_bias(req, sp, why, cap)) return -1;
    const json_t *salt = json_object_get(req, "cache_salt");
    if (salt && !json_is_null(salt) && !json_is_string(salt)) {
        snprintf(why, cap, "'cache_salt' must be a string");
        return -1;
    }
    p->cache_salt = json_string_value(salt);
    if (param_bool(req, "ignore_eos", &p->ignore_eos, why, cap) < 0) return -1;
    int spec = 1;
    if (param_bool(req, "speculative", &spec, why, cap) < 0) return -1;
    p->no_speculative = !spec;
    const json_t *pc = json_object_get(req, "prefix_cache"), *scope = json_object_get(pc, "scope");
    if (scope && param_scope_value(scope, &p->scope, why, cap)) return -1;
    return parse_stops(req, stop_key, p, why, cap);
}

int param_scope_value(const json_t *v, cache_scope *out, char *why, size_t cap) {
    int bad = json_is_integer(v) ? policy_scope_tokens(json_integer_value(v), out)
              : json_is_string(v) ? policy_scope_parse(json_string_value(v), out)
                                  : -1;
    if (bad) snprintf(why, cap, "cache scope must be off, full, auto, auto:N (1-16) or a token count");
    return bad;
}

/* An effort as the template's reasoning_effort (what gpt-oss knows), or
 * NULL when it is none of the APIs' values. */
static const char *effort_word(const char *e) {
    static const char *const map[][2] = {{"none", "low"},    {"minimal", "low"}, {"low", "low"}, {"medium", "medium"},
                                         {"high", "high"},   {"xhigh", "high"},  {"max", "high"}};
    for (size_t i = 0; e && i < sizeof map / sizeof *map; i++)
        if (!strcmp(e, map[i][0])) return map[i][1];
    return NULL;
}

/* The effort at req[key] (or req[key][sub]); 0 when absent, -1 when bad. */
static int effort_param(const json_t *req, const char *key, const char *sub, json_t *vars, char *why, size_t cap) {
    const json_t *v = json_object_get(req, key);
    if (sub) v = json_is_object(v) ? json_object_get(v, sub) : NULL;
    if (!v || json_is_null(v)) return 0;
    const char *word = effort_word(json_string_value(v));
    if (!word) {
        snprintf(why, cap, "'%s%s%s' must be one of none, minimal, low, medium, high, xhigh, max", key, sub ? "." : "",
                 sub ? sub : "");
        return -1;
    }
    json_object_set_new(vars, "reasoning_effort", json_string(word));
    if (!strcmp(json_string_value(v), "none")) json_object_set_new(vars, "enable_thinking", json_false());
    return 0;
}

/* Anthropic's "thinking": {"type": "enabled" | "adaptive" | "disabled"}. */
static int thinking_param(const json_t *req, json_t *vars, char *why, size_t cap) {
    const json_t *th = json_object_get(req, "thinking");
    if (!th || json_is_null(th)) return 0;
    const char *type = json_string_value(json_object_get(th, "type"));
    if (!json_is_object(th) || !type ||
        (strcmp(type, "enabled") && strcmp(type, "adaptive") && strcmp(type, "disabled"))) {
        snprintf(why, cap, "'thinking.type' must be enabled, adaptive or disabled");
        return -1;
    }
    json_object_set_new(vars, "enable_thinking", json_boolean(strcmp(type, "disabled") != 0));
    return 0;
}

int params_template_vars(const json_t *req, json_t **out, char *why, size_t cap) {
    json_t *vars = json_object();
    const json_t *kw = json_object_get(req, "chat_template_kwargs");
    *out = NULL;
    if (kw && !json_is_null(kw) && !json_is_object(kw)) {
        snprintf(why, cap, "'chat_template_kwargs' must be an object");
        json_decref(vars);
        return -1;
    }
    if (thinking_param(req, vars, why, cap) || effort_param(req, "reasoning_effort", NULL, vars, why, cap) ||
        effort_param(req, "reasoning", "effort", vars, why, cap) ||
        effort_param(req, "output_config", "effort", vars, why, cap)) {
        json_decref(vars);
        return -1;
    }
    if (json_is_object(kw)) json_object_update(vars, (json_t *)kw);
    if (json_object_size(vars)) *out = vars;
    else json_decref(vars);
    return 0;
}
