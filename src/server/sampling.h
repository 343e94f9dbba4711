/* sampling.h - the sampling a request gets for the fields it leaves out.
 *
 * Agent clients (Claude Code, Codex) send no temperature, top_p or top_k,
 * while the models they are pointed at come with recommended settings
 * (Qwen3: temperature 0.6, top_p 0.95, top_k 20). Each field's default is,
 * in order: the operator's flag (--temp, --top-k, --top-p, --min-p,
 * --repeat-penalty), the model file's general.sampling.* key (as llama.cpp
 * reads them), the APIs' own (temperature 1, no truncation, no penalty).
 * A request's own field always wins (api_params.c). */
#ifndef STRATA_SERVER_SAMPLING_H
#define STRATA_SERVER_SAMPLING_H

#include <stddef.h>

#include "model/gguf.h"
#include "model/sample.h"

/* The operator's flags; a negative value is unset. */
typedef struct sampling_flags {
    float temp, top_p, min_p, repeat_penalty;
    int top_k;
} sampling_flags;

#define SAMPLING_FLAGS_UNSET {-1, -1, -1, -1, -1}

/* The defaults for f (may be NULL) under flags; describe gets a one-line
 * account for the log ("temperature 0.6 (model file), top_k 20 (model
 * file), ..."). */
sample_params sampling_defaults(const gguf_file *f, const sampling_flags *flags, char *describe, size_t cap);

#endif
