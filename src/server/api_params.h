/* api_params.h - typed request fields with errors naming the field.
 * Each returns 1 (present, stored), 0 (absent or null), or -1 (bad; why
 * holds the message for a 400). */
#ifndef STRATA_API_PARAMS_H
#define STRATA_API_PARAMS_H

#include <jansson.h>
#include <stddef.h>

#include "server/gen.h"

int param_number(const json_t *obj, const char *key, double lo, double hi, double *out,
                 char *why, size_t why_cap);
int param_int(const json_t *obj, const char *key, long lo, long hi, long *out, char *why,
              size_t why_cap);
int param_bool(const json_t *obj, const char *key, int *out, char *why, size_t why_cap);

/* OpenAI's metadata (Responses, Chat Completions): an object of at most
 * 16 string values, keys up to 64 characters, values up to 512. */
int param_metadata(const json_t *obj, const char *key, char *why, size_t why_cap);

/* The template variables a request sets (render_tools.vars), any
 * dialect: "reasoning_effort" (OpenAI chat), "reasoning": {"effort"}
 * (Responses) and "output_config": {"effort"} (Anthropic) as the
 * template's reasoning_effort (low, medium or high: what gpt-oss's
 * template knows; minimal and none read as low, xhigh and max as high);
 * Anthropic "thinking": {"type"} and an effort of "none" as
 * enable_thinking (Qwen3's switch); "chat_template_kwargs" (llama.cpp and
 * vLLM's field) as given, over the rest. *out: a new object, or NULL when
 * the request sets none. Returns 0, or -1 with why set (a value the
 * official API refuses too). */
int params_template_vars(const json_t *req, json_t **out, char *why, size_t cap);

/* A cache scope (policy_scope_parse), as a string or a token count.
 * 0, or -1 with why set. */
int param_scope_value(const json_t *v, cache_scope *out, char *why, size_t cap);

/* Sampling fields shared by the APIs (temperature, top_p, top_k, min_p,
 * penalties, seed) and the stop strings under stop_key. Stop strings point
 * into req: keep req alive while p is used. Returns 0 or -1. */
int params_sampling(const json_t *req, const char *stop_key, const sample_params *defaults, gen_params *p, char *why,
                    size_t cap);

#endif
