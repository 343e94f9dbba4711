/* model_int.h - model.c's helpers shared with the per-architecture
 * loaders (model_qwen35.c, model_moe.c); not for other modules. */
#ifndef STRATA_MODEL_INT_H
#define STRATA_MODEL_INT_H

#include "model/model.h"

/* "{arch}.suffix" getters; optional ones keep *out when the key is absent. */
int model__arch_u32(const model *m, const char *suffix, int *out, int optional, strata_err *err);
/* Binds tensor `name` and checks it is cols x rows (rows 0: an F32 vector).
 * Missing (unless optional), mis-shaped or unsupported: an error naming it. */
int model__bind(model *m, model_tensor *t, const char *name, int64_t cols, int64_t rows, int optional,
                strata_err *err);

/* qwen35: ssm.* keys, rope sections (after the common hyperparameters). */
int model__qwen35_hparams(model *m, strata_err *err);
/* qwen35: marks recurrent layers and binds every layer's tensors. */
int model__qwen35_bind_layers(model *m, strata_err *err);

/* Mixture of experts (model_moe.c): expert_* keys (after the common
 * hyperparameters; expert count 0 or top-k above it is an error naming
 * the key), and layer il's router, expert stacks and shared expert. */
int model__moe_hparams(model *m, strata_err *err);
int model__moe_bind(model *m, int il, strata_err *err);

#endif
