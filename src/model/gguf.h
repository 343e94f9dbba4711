/* gguf.h - read-only view of a GGUF file (versions 2 and 3), memory-mapped.
 *
 * gguf_open validates everything before returning: header, every metadata
 * key/value (all value types, nested arrays), tensor infos (dims, type,
 * offsets, sizes, alignment) against the file size. A truncated or corrupt
 * file gives STRATA_EFORMAT with the field named; no later access can read
 * outside the map. Strings are views into the map (not NUL-terminated).
 * Does not: interpret architectures or dequantize (model/, backend/). */
#ifndef STRATA_GGUF_H
#define STRATA_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define GGUF_MAX_DIMS 4

typedef enum {
    GGUF_UINT8 = 0, GGUF_INT8 = 1, GGUF_UINT16 = 2, GGUF_INT16 = 3,
    GGUF_UINT32 = 4, GGUF_INT32 = 5, GGUF_FLOAT32 = 6, GGUF_BOOL = 7,
    GGUF_STRING = 8, GGUF_ARRAY = 9, GGUF_UINT64 = 10, GGUF_INT64 = 11,
    GGUF_FLOAT64 = 12, GGUF_NTYPES
} gguf_vtype;

typedef struct gguf_str {
    const char *ptr; /* into the map, not NUL-terminated */
    uint64_t len;
} gguf_str;

typedef struct gguf_kv {
    gguf_str key;
    gguf_vtype type;     /* GGUF_ARRAY for arrays */
    gguf_vtype arr_type; /* element type when type == GGUF_ARRAY */
    uint64_t arr_n;      /* element count when type == GGUF_ARRAY */
    const uint8_t *data; /* raw value (or first element) in the map */
    gguf_str *strs;      /* string arrays: arr_n views, decoded at open */
} gguf_kv;

typedef struct gguf_tensor {
    gguf_str name;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* ne[0] = row length (innermost); unused = 1 */
    uint32_t type;             /* ggml type id, see backend/quant.h */
    uint64_t offset;           /* relative to the data section */
    const void *data;          /* into the map */
    size_t nbytes;
} gguf_tensor;

typedef struct gguf_file {
    char *path;
    const uint8_t *map;
    size_t size;
    uint32_t version;
    uint32_t alignment;
    uint64_t n_kv, n_tensors;
    gguf_kv *kv;
    gguf_tensor *tensors;
    size_t data_offset; /* start of tensor data in the file */
} gguf_file;

int gguf_open(gguf_file **out, const char *path, strata_err *err);
void gguf_close(gguf_file *f); /* NULL is fine */

/* Lookups; NULL when absent. */
const gguf_kv *gguf_find(const gguf_file *f, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);

/* Typed getters: 0 on success; STRATA_EINVAL (absent) or STRATA_EFORMAT
 * (wrong type) with the key named. Integer getters accept any integer type
 * whose value fits; gguf_get_f32 accepts float32/float64. */
int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out, strata_err *err);
int gguf_get_i64(const gguf_file *f, const char *key, int64_t *out, strata_err *err);
int gguf_get_f32(const gguf_file *f, const char *key, float *out, strata_err *err);
int gguf_get_bool(const gguf_file *f, const char *key, int *out, strata_err *err);
int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out, strata_err *err);
/* Array getters: *n elements; element pointer into the map (may be
 * unaligned: read with memcpy) or the decoded string views. */
int gguf_get_arr(const gguf_file *f, const char *key, gguf_vtype want,
                 const void **elems, uint64_t *n, strata_err *err);
int gguf_get_str_arr(const gguf_file *f, const char *key, const gguf_str **strs,
                     uint64_t *n, strata_err *err);

/* Convenience: string value compared/copied as C string. */
int gguf_str_eq(gguf_str s, const char *c);
char *gguf_str_dup(gguf_str s); /* caller frees */

const char *gguf_vtype_name(gguf_vtype t);

#endif
