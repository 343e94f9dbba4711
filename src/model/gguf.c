/* gguf.c - GGUF parser over a read-only mmap.
 *
 * File layout (little-endian; GGUF v2 and v3 use 64-bit counts):
 *   magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
 *   n_kv x { string key | u32 type | value }
 *       string = u64 len | bytes;  array = u32 elem_type | u64 n | elems
 *   n_tensors x { string name | u32 n_dims | u64 ne[n_dims] | u32 type |
 *                 u64 offset }
 *   padding to `general.alignment` (default 32) | tensor data
 * Every read goes through a bounds-checked cursor, so a truncated or hostile
 * file ends in an error naming the field, never in a read past the map. */
#include "model/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/quant.h"
#include "base/mem.h"

#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_ARRAY_DEPTH 4

typedef struct cursor {
    const uint8_t *base;
    size_t size, pos;
    const char *path;
    strata_err *err;
} cursor;

static const size_t scalar_size[GGUF_NTYPES] = {
    [GGUF_UINT8] = 1, [GGUF_INT8] = 1, [GGUF_UINT16] = 2, [GGUF_INT16] = 2,
    [GGUF_UINT32] = 4, [GGUF_INT32] = 4, [GGUF_FLOAT32] = 4, [GGUF_BOOL] = 1,
    [GGUF_UINT64] = 8, [GGUF_INT64] = 8, [GGUF_FLOAT64] = 8,
};

const char *gguf_vtype_name(gguf_vtype t) {
    static const char *names[GGUF_NTYPES] = {
        "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
        "bool", "string", "array", "uint64", "int64", "float64",
    };
    return (unsigned)t < GGUF_NTYPES ? names[t] : "invalid";
}

static int truncated(cursor *c, const char *field) {
    return strata_errf(c->err, STRATA_EFORMAT,
                       "%s: truncated or corrupt GGUF: %s at byte %zu runs past end of file (%zu bytes)",
                       c->path, field, c->pos, c->size);
}

static int take(cursor *c, size_t n, const uint8_t **out, const char *field) {
    if (n > c->size - c->pos) return truncated(c, field);
    *out = c->base + c->pos;
    c->pos += n;
    return 0;
}

static int read_u32(cursor *c, uint32_t *v, const char *field) {
    const uint8_t *p = NULL;
    if (take(c, 4, &p, field)) return STRATA_EFORMAT;
    memcpy(v, p, 4);
    return 0;
}

static int read_u64(cursor *c, uint64_t *v, const char *field) {
    const uint8_t *p = NULL;
    if (take(c, 8, &p, field)) return STRATA_EFORMAT;
    memcpy(v, p, 8);
    return 0;
}

static int read_str(cursor *c, gguf_str *s, const char *field) {
    uint64_t len;
    const uint8_t *p = NULL;
    if (read_u64(c, &len, field)) return STRATA_EFORMAT;
    if (len > c->size - c->pos) return truncated(c, field);
    if (take(c, (size_t)len, &p, field)) return STRATA_EFORMAT;
    s->ptr = (const char *)p;
    s->len = len;
    return 0;
}

/* Skips (validating) one value of type t; arrays recurse to a fixed depth. */
static int skip_value(cursor *c, gguf_vtype t, int depth, const char *key) {
    char field[160];
    snprintf(field, sizeof field, "value of key '%s'", key);
    if (t == GGUF_STRING) {
        gguf_str s;
        return read_str(c, &s, field);
    }
    if (t == GGUF_ARRAY) {
        uint32_t et;
        uint64_t n;
        if (depth >= GGUF_MAX_ARRAY_DEPTH)
            return strata_errf(c->err, STRATA_EFORMAT, "%s: key '%s': arrays nested too deeply",
                               c->path, key);
        if (read_u32(c, &et, field) || read_u64(c, &n, field)) return STRATA_EFORMAT;
        if (et >= GGUF_NTYPES)
            return strata_errf(c->err, STRATA_EFORMAT, "%s: key '%s': invalid array element type %u",
                               c->path, key, et);
        if (et != GGUF_STRING && et != GGUF_ARRAY) {
            const uint8_t *p;
            if (n > (c->size - c->pos) / scalar_size[et]) return truncated(c, field);
            return take(c, (size_t)n * scalar_size[et], &p, field);
        }
        for (uint64_t i = 0; i < n; i++)
            if (skip_value(c, (gguf_vtype)et, depth + 1, key)) return STRATA_EFORMAT;
        return 0;
    }
    if ((unsigned)t >= GGUF_NTYPES)
        return strata_errf(c->err, STRATA_EFORMAT, "%s: key '%s': invalid value type %u",
                           c->path, key, (unsigned)t);
    const uint8_t *p = NULL;
    return take(c, scalar_size[t], &p, field);
}

/* String arrays are decoded once into views so lookups by index are O(1). */
static int decode_str_array(cursor *c, gguf_kv *kv) {
    cursor sub = *c;
    sub.pos = (size_t)(kv->data - c->base);
    kv->strs = xmalloc((size_t)(kv->arr_n ? kv->arr_n : 1) * sizeof(gguf_str));
    for (uint64_t i = 0; i < kv->arr_n; i++)
        if (read_str(&sub, &kv->strs[i], "string array element")) return STRATA_EFORMAT;
    return 0;
}

static int parse_kv(cursor *c, gguf_kv *kv, uint64_t index) {
    uint32_t type;
    char field[64];
    snprintf(field, sizeof field, "metadata key #%llu", (unsigned long long)index);
    if (read_str(c, &kv->key, field) || read_u32(c, &type, field)) return STRATA_EFORMAT;
    char key[128];
    snprintf(key, sizeof key, "%.*s", (int)(kv->key.len < 100 ? kv->key.len : 100), kv->key.ptr);
    if (type >= GGUF_NTYPES)
        return strata_errf(c->err, STRATA_EFORMAT, "%s: key '%s': invalid value type %u", c->path,
                           key, type);
    kv->type = (gguf_vtype)type;
    if (type == GGUF_ARRAY) {
        uint32_t et;
        size_t start = c->pos;
        if (read_u32(c, &et, field) || read_u64(c, &kv->arr_n, field)) return STRATA_EFORMAT;
        kv->arr_type = (gguf_vtype)et;
        kv->data = c->base + c->pos;
        c->pos = start;
        if (skip_value(c, GGUF_ARRAY, 0, key)) return STRATA_EFORMAT;
        if (et == GGUF_STRING) return decode_str_array(c, kv);
        return 0;
    }
    kv->data = c->base + c->pos;
    return skip_value(c, kv->type, 0, key);
}

static int parse_tensor_info(cursor *c, gguf_tensor *t, uint64_t index) {
    char field[80];
    snprintf(field, sizeof field, "tensor info #%llu", (unsigned long long)index);
    if (read_str(c, &t->name, field)) return STRATA_EFORMAT;
    snprintf(field, sizeof field, "tensor info of '%.*s'", (int)(t->name.len < 40 ? t->name.len : 40),
             t->name.ptr);
    if (read_u32(c, &t->n_dims, field)) return STRATA_EFORMAT;
    if (t->n_dims == 0 || t->n_dims > GGUF_MAX_DIMS)
        return strata_errf(c->err, STRATA_EFORMAT, "%s: tensor '%.*s': n_dims %u out of range 1..%d",
                           c->path, (int)t->name.len, t->name.ptr, t->n_dims, GGUF_MAX_DIMS);
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t ne;
        if (read_u64(c, &ne, field)) return STRATA_EFORMAT;
        if (ne == 0 || ne > ((uint64_t)1 << 40))
            return strata_errf(c->err, STRATA_EFORMAT, "%s: tensor '%.*s': dimension %u is %llu",
                               c->path, (int)t->name.len, t->name.ptr, d, (unsigned long long)ne);
        t->ne[d] = (int64_t)ne;
    }
    return read_u32(c, &t->type, field) || read_u64(c, &t->offset, field) ? STRATA_EFORMAT : 0;
}

/* Size in bytes from the type's block layout; checks shape and overflow. */
static int tensor_size(const gguf_file *f, gguf_tensor *t, strata_err *err) {
    const quant_traits *q = quant_get(t->type);
    if (!q)
        return strata_errf(err, STRATA_EUNSUPPORTED, "%s: tensor '%.*s': unsupported tensor type %s",
                           f->path, (int)t->name.len, t->name.ptr, quant_name(t->type));
    if (t->ne[0] % q->blck)
        return strata_errf(err, STRATA_EFORMAT,
                           "%s: tensor '%.*s': row length %lld is not a multiple of %s block size %d",
                           f->path, (int)t->name.len, t->name.ptr, (long long)t->ne[0], q->name,
                           q->blck);
    uint64_t rows = 1;
    for (int d = 1; d < GGUF_MAX_DIMS; d++) {
        if (rows > ((uint64_t)1 << 40) / (uint64_t)t->ne[d])
            return strata_errf(err, STRATA_EFORMAT, "%s: tensor '%.*s': element count overflows",
                               f->path, (int)t->name.len, t->name.ptr);
        rows *= (uint64_t)t->ne[d];
    }
    t->nbytes = (size_t)(rows * quant_row_bytes((qtype)t->type, t->ne[0]));
    return 0;
}

static int place_tensors(gguf_file *f, strata_err *err) {
    size_t data_size = f->size - f->data_offset;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        int rc = tensor_size(f, t, err);
        if (rc) return rc;
        if (t->offset % f->alignment)
            return strata_errf(err, STRATA_EFORMAT,
                               "%s: tensor '%.*s': offset %llu is not aligned to %u", f->path,
                               (int)t->name.len, t->name.ptr, (unsigned long long)t->offset,
                               f->alignment);
        if (t->offset > data_size || t->nbytes > data_size - t->offset)
            return strata_errf(err, STRATA_EFORMAT,
                               "%s: tensor '%.*s': data (offset %llu, %zu bytes) runs past end of file; truncated?",
                               f->path, (int)t->name.len, t->name.ptr,
                               (unsigned long long)t->offset, t->nbytes);
        t->data = f->map + f->data_offset + t->offset;
    }
    return 0;
}

static int parse_header(gguf_file *f, cursor *c) {
    const uint8_t *magic = NULL;
    if (take(c, 4, &magic, "magic")) return STRATA_EFORMAT;
    if (memcmp(magic, "GGUF", 4) != 0)
        return strata_errf(c->err, STRATA_EFORMAT, "%s: not a GGUF file (bad magic)", c->path);
    if (read_u32(c, &f->version, "version")) return STRATA_EFORMAT;
    if (f->version != 2 && f->version != 3)
        return strata_errf(c->err, STRATA_EUNSUPPORTED,
                           "%s: unsupported GGUF version %u (supported: 2, 3)", c->path, f->version);
    if (read_u64(c, &f->n_tensors, "header n_tensors") || read_u64(c, &f->n_kv, "header n_kv"))
        return STRATA_EFORMAT;
    /* Each entry takes at least 8 bytes: bound counts by the file size. */
    if (f->n_tensors > c->size / 8)
        return strata_errf(c->err, STRATA_EFORMAT, "%s: n_tensors (tensor count) %llu exceeds file size",
                           c->path, (unsigned long long)f->n_tensors);
    if (f->n_kv > c->size / 8)
        return strata_errf(c->err, STRATA_EFORMAT, "%s: n_kv (metadata count) %llu exceeds file size",
                           c->path, (unsigned long long)f->n_kv);
    return 0;
}

static int read_alignment(gguf_file *f, strata_err *err) {
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    if (!gguf_find(f, "general.alignment")) return 0;
    uint32_t a = 0;
    if (gguf_get_u32(f, "general.alignment", &a, err)) return STRATA_EFORMAT;
    if (a == 0 || (a & (a - 1)))
        return strata_errf(err, STRATA_EFORMAT, "%s: general.alignment %u is not a power of two",
                           f->path, a);
    f->alignment = a;
    return 0;
}

static int parse(gguf_file *f, strata_err *err) {
    cursor c = {.base = f->map, .size = f->size, .path = f->path, .err = err};
    if (parse_header(f, &c)) return err ? err->code : STRATA_EFORMAT;
    f->kv = xcalloc((size_t)f->n_kv + 1, sizeof(gguf_kv));
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (parse_kv(&c, &f->kv[i], i)) return err ? err->code : STRATA_EFORMAT;
    if (read_alignment(f, err)) return STRATA_EFORMAT;
    f->tensors = xcalloc((size_t)f->n_tensors + 1, sizeof(gguf_tensor));
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (parse_tensor_info(&c, &f->tensors[i], i)) return err ? err->code : STRATA_EFORMAT;
    f->data_offset = (c.pos + f->alignment - 1) / f->alignment * f->alignment;
    if (f->data_offset > f->size) {
        if (f->n_tensors == 0) {
            f->data_offset = f->size;
            return 0;
        }
        return strata_errf(err, STRATA_EFORMAT, "%s: truncated before tensor data", f->path);
    }
    return place_tensors(f, err);
}

static int map_file(gguf_file *f, strata_err *err) {
    int fd = open(f->path, O_RDONLY);
    if (fd < 0)
        return strata_errf(err, STRATA_EIO, "%s: cannot open model file: %s", f->path,
                           strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return strata_errf(err, STRATA_EIO, "%s: not a regular file", f->path);
    }
    f->size = (size_t)st.st_size;
    if (f->size < 24) {
        close(fd);
        return strata_errf(err, STRATA_EFORMAT, "%s: file too small for a GGUF header (%zu bytes)",
                           f->path, f->size);
    }
    void *m = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return strata_errf(err, STRATA_EIO, "%s: mmap failed: %s", f->path, strerror(errno));
    f->map = m;
    return 0;
}

int gguf_open(gguf_file **out, const char *path, strata_err *err) {
    *out = NULL;
    gguf_file *f = xcalloc(1, sizeof *f);
    f->path = xstrdup(path);
    int rc = map_file(f, err);
    if (rc == 0) rc = parse(f, err);
    if (rc) {
        gguf_close(f);
        return rc;
    }
    *out = f;
    return 0;
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    if (f->kv)
        for (uint64_t i = 0; i < f->n_kv; i++) free(f->kv[i].strs);
    free(f->kv);
    free(f->tensors);
    if (f->map) munmap((void *)f->map, f->size);
    free(f->path);
    free(f);
}

int gguf_str_eq(gguf_str s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && memcmp(s.ptr, c, n) == 0;
}

char *gguf_str_dup(gguf_str s) {
    char *p = xmalloc((size_t)s.len + 1);
    memcpy(p, s.ptr, (size_t)s.len);
    p[s.len] = 0;
    return p;
}

const gguf_kv *gguf_find(const gguf_file *f, const char *key) {
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (gguf_str_eq(f->kv[i].key, key)) return &f->kv[i];
    return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (gguf_str_eq(f->tensors[i].name, name)) return &f->tensors[i];
    return NULL;
}

static const gguf_kv *need(const gguf_file *f, const char *key, strata_err *err) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) strata_errf(err, STRATA_EINVAL, "%s: missing metadata key '%s'", f->path, key);
    return kv;
}

static int wrong_type(const gguf_file *f, const gguf_kv *kv, const char *want, strata_err *err) {
    return strata_errf(err, STRATA_EFORMAT, "%s: metadata key '%.*s' is %s, expected %s", f->path,
                       (int)kv->key.len, kv->key.ptr, gguf_vtype_name(kv->type), want);
}

/* Reads any integer-typed value as a signed 128-bit-safe pair. */
static int int_value(const gguf_kv *kv, int64_t *v, uint64_t *uv, int *is_unsigned) {
    const uint8_t *p = kv->data;
    *is_unsigned = 0;
    switch (kv->type) {
    case GGUF_UINT8: *v = p[0]; return 0;
    case GGUF_INT8: *v = (int8_t)p[0]; return 0;
    case GGUF_BOOL: *v = p[0] != 0; return 0;
    case GGUF_UINT16: { uint16_t x; memcpy(&x, p, 2); *v = x; return 0; }
    case GGUF_INT16: { int16_t x; memcpy(&x, p, 2); *v = x; return 0; }
    case GGUF_UINT32: { uint32_t x; memcpy(&x, p, 4); *v = x; return 0; }
    case GGUF_INT32: { int32_t x; memcpy(&x, p, 4); *v = x; return 0; }
    case GGUF_INT64: { memcpy(v, p, 8); return 0; }
    case GGUF_UINT64: { memcpy(uv, p, 8); *is_unsigned = 1; return 0; }
    default: return -1;
    }
}

int gguf_get_i64(const gguf_file *f, const char *key, int64_t *out, strata_err *err) {
    const gguf_kv *kv = need(f, key, err);
    if (!kv) return STRATA_EINVAL;
    int64_t v = 0;
    uint64_t uv = 0;
    int is_u;
    if (kv->type == GGUF_BOOL || int_value(kv, &v, &uv, &is_u)) return wrong_type(f, kv, "an integer", err);
    if (is_u) {
        if (uv > INT64_MAX)
            return strata_errf(err, STRATA_EFORMAT, "%s: metadata key '%s' value out of range",
                               f->path, key);
        v = (int64_t)uv;
    }
    *out = v;
    return 0;
}

int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out, strata_err *err) {
    int64_t v;
    int rc = gguf_get_i64(f, key, &v, err);
    if (rc) return rc;
    if (v < 0 || v > UINT32_MAX)
        return strata_errf(err, STRATA_EFORMAT, "%s: metadata key '%s' = %lld out of range",
                           f->path, key, (long long)v);
    *out = (uint32_t)v;
    return 0;
}

int gguf_get_f32(const gguf_file *f, const char *key, float *out, strata_err *err) {
    const gguf_kv *kv = need(f, key, err);
    if (!kv) return STRATA_EINVAL;
    if (kv->type == GGUF_FLOAT32) {
        memcpy(out, kv->data, 4);
    } else if (kv->type == GGUF_FLOAT64) {
        double d;
        memcpy(&d, kv->data, 8);
        *out = (float)d;
    } else {
        return wrong_type(f, kv, "a float", err);
    }
    return 0;
}

int gguf_get_bool(const gguf_file *f, const char *key, int *out, strata_err *err) {
    const gguf_kv *kv = need(f, key, err);
    if (!kv) return STRATA_EINVAL;
    if (kv->type != GGUF_BOOL) return wrong_type(f, kv, "a bool", err);
    *out = kv->data[0] != 0;
    return 0;
}

int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out, strata_err *err) {
    const gguf_kv *kv = need(f, key, err);
    if (!kv) return STRATA_EINVAL;
    if (kv->type != GGUF_STRING) return wrong_type(f, kv, "a string", err);
    uint64_t len;
    memcpy(&len, kv->data, 8);
    out->ptr = (const char *)kv->data + 8;
    out->len = len;
    return 0;
}

int gguf_get_arr(const gguf_file *f, const char *key, gguf_vtype want, const void **elems,
                 uint64_t *n, strata_err *err) {
    const gguf_kv *kv = need(f, key, err);
    if (!kv) return STRATA_EINVAL;
    if (kv->type != GGUF_ARRAY || kv->arr_type != want) {
        char what[48];
        snprintf(what, sizeof what, "an array of %s", gguf_vtype_name(want));
        return wrong_type(f, kv, what, err);
    }
    *elems = kv->data;
    *n = kv->arr_n;
    return 0;
}

int gguf_get_str_arr(const gguf_file *f, const char *key, const gguf_str **strs, uint64_t *n,
                     strata_err *err) {
    const gguf_kv *kv = need(f, key, err);
    if (!kv) return STRATA_EINVAL;
    if (kv->type != GGUF_ARRAY || kv->arr_type != GGUF_STRING)
        return wrong_type(f, kv, "an array of string", err);
    *strs = kv->strs;
    *n = kv->arr_n;
    return 0;
}
