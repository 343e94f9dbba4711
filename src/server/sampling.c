/* sampling.c - the server's sampling defaults (see sampling.h). */
#include "server/sampling.h"

#include <stdio.h>

/* One field: the flag when set, else the model file's key when present
 * and in range, else the API default already in *v. Appends how it was
 * decided to describe. */
static void pick(float flag, const gguf_file *f, const char *key, float lo, float hi, float *v, const char *name,
                 char *describe, size_t cap, size_t *len) {
    const char *from = "API default";
    float got;
    int64_t i;
    strata_err err = {0};
    if (flag >= 0) {
        *v = flag;
        from = "flag";
    } else if (f && gguf_find(f, key) && !gguf_get_f32(f, key, &got, &err) && got >= lo && got <= hi) {
        *v = got;
        from = "model file";
    } else if (f && gguf_find(f, key) && !gguf_get_i64(f, key, &i, &err) && i >= lo && i <= hi) {
        *v = (float)i; /* top_k is an integer key */
        from = "model file";
    }
    if (*len < cap)
        *len += (size_t)snprintf(describe + *len, cap - *len, "%s%s %g (%s)", *len ? ", " : "", name, *v, from);
}

sample_params sampling_defaults(const gguf_file *f, const sampling_flags *fl, char *describe, size_t cap) {
    sample_params p = sample_params_default();
    p.penalty_last_n = 64;
    p.seed = 0x5eed; /* a request without a seed: reproducible */
    float top_k = (float)p.top_k;
    size_t len = 0;
    if (cap) describe[0] = 0;
    pick(fl->temp, f, "general.sampling.temp", 0, 2, &p.temperature, "temperature", describe, cap, &len);
    pick((float)fl->top_k, f, "general.sampling.top_k", 0, 1 << 30, &top_k, "top_k", describe, cap, &len);
    pick(fl->top_p, f, "general.sampling.top_p", 0, 1, &p.top_p, "top_p", describe, cap, &len);
    pick(fl->min_p, f, "general.sampling.min_p", 0, 1, &p.min_p, "min_p", describe, cap, &len);
    pick(fl->repeat_penalty, f, "general.sampling.penalty_repeat", 0.01f, 10, &p.repeat_penalty, "repeat_penalty",
         describe, cap, &len);
    p.top_k = (int)top_k;
    return p;
}
