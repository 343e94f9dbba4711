/* tmpl_int.h - what the tmpl_*.c files share (not a public API).
 *
 * Pipeline: tmpl_lex.c turns source into tokens (whitespace control is
 * applied there, as in jinja2's lexer), tmpl_parse.c builds an AST,
 * tmpl_eval.c walks it, tmpl_val.c holds the value model (strings that know
 * which bytes came from template literals, lists, dicts, Python-style str()
 * and json.dumps), tmpl_filt.c the filters, tests, methods and globals.
 *
 * Memory: the AST lives in the template's arena and every value made while
 * rendering lives in a per-render arena, freed in one go at the end. That is
 * why errors may unwind with longjmp: nothing is left to free on the way. */
#ifndef STRATA_TMPL_INT_H
#define STRATA_TMPL_INT_H

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>

#include "text/tmpl.h"

/* ---- arena ---- */

typedef struct tarena {
    struct tachunk *head;
    size_t used_total, limit; /* limit 0 = none */
} tarena;

void *ta_alloc(tarena *a, size_t n);         /* zeroed; NULL over limit */
void ta_free_all(tarena *a);

/* ---- values ---- */

enum {
    TV_UNDEF, TV_NONE, TV_BOOL, TV_INT, TV_FLOAT, TV_STR, TV_LIST, TV_DICT,
    TV_NS,     /* namespace(): a mutable dict reached by attribute */
    TV_LOOP,   /* the `loop` object of a for */
    TV_MACRO,  /* a macro or a call block's caller() */
    TV_FUNC,   /* a global function (range, namespace, raise_exception, ...) */
    TV_METHOD, /* a bound method: self + method name, e.g. s.startswith */
};

/* Provenance of string bytes: data from the context, the template's own
 * literals, or data strftime_now wrote (kept apart from other data so a
 * render can say where the date went, tmpl_clock). */
enum { TL_DATA = 0, TL_LIT = 1, TL_NOW = 2 };

/* A run of string bytes with one provenance (TL_*). */
typedef struct trun {
    size_t len;
    int lit;
} trun;

typedef struct tlist tlist;
typedef struct tdict tdict;
typedef struct tloop tloop;
typedef struct tmacro tmacro;

typedef struct tval {
    uint8_t kind;
    uint8_t lit;      /* TV_STR with nruns == 0: the provenance of all bytes (TL_*) */
    uint8_t tuple;    /* TV_LIST: print as (a, b) */
    uint32_t nruns;   /* TV_STR: 0 = uniform provenance, else runs below */
    union {
        int64_t i;    /* TV_INT, TV_BOOL, TV_FUNC (id) */
        double f;
        struct {
            const char *p;
            size_t len;
            const trun *runs;
        } s;
        tlist *list;
        tdict *dict;  /* TV_DICT, TV_NS */
        tloop *loop;
        tmacro *macro;
        struct {
            struct tval *self;
            const char *name;
        } m;          /* TV_METHOD */
        const char *undef; /* TV_UNDEF: hint for the error message */
    } u;
} tval;

struct tlist {
    tval *v;
    size_t n, cap;
};

struct tdict {
    tval *k, *v;
    size_t n, cap;
};

/* The `loop` object: the (filtered) items and where we are. */
struct tloop {
    tlist *items;
    size_t i;
    int has_changed;     /* loop.changed() was called before */
    tval changed_last;
};

/* A render context (defined in tmpl_eval.c); values need it for the arena
 * and to raise errors. */
typedef struct trender trender;

/* Raise a render error: never returns (longjmp to tmpl_render). */
void tr_fail(trender *r, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));
void *tr_alloc(trender *r, size_t n);
/* The time strftime_now formats: the caller's (tmpl_clock), else the
 * system clock, read once per render. */
long long tr_now(trender *r);

tval tv_undef(const char *hint);
tval tv_none(void);
tval tv_bool(int b);
tval tv_int(int64_t i);
tval tv_float(double f);
/* String of data (lit=0), literal (lit=1) or strftime_now (TL_NOW) bytes;
 * p is borrowed. */
tval tv_str(const char *p, size_t len, int lit);
tval tv_cstr(const char *s, int lit);
tval tv_list(trender *r, size_t cap);
tval tv_dict(trender *r, size_t cap);

void tl_push(trender *r, tlist *l, tval v);
tval *td_get(const tdict *d, const char *key, size_t klen);
tval *td_getv(trender *r, const tdict *d, tval key);
void td_set(trender *r, tdict *d, tval key, tval val);

int tv_truthy(tval v);
int tv_is_num(tval v);            /* int, float or bool */
int tv_hashable(trender *r, tval v);          /* may be a dict key (not list/dict) */
uint64_t tv_range_len(int64_t start, int64_t stop, int64_t step);
double tv_num(tval v);
/* tv_hashable, tv_equal and tv_compare recurse into lists (and equality
 * into dicts); values nested deeper than TMPL_MAX_VALUE_DEPTH (a loop can
 * wrap a list a million times) fail instead of overflowing the stack. */
int tv_equal(trender *r, tval a, tval b);
/* <0, 0, >0; fails with a TypeError-like message on unorderable types. */
int tv_compare(trender *r, tval a, tval b);
const char *tv_type_name(tval v);

/* ---- strings with provenance ---- */

/* A growable string builder that tracks runs. */
typedef struct tsb {
    char *p;
    size_t len, cap;
    trun *runs;
    size_t nruns, rcap;
} tsb;

void tsb_add(trender *r, tsb *b, const char *p, size_t len, int lit);
void tsb_addv(trender *r, tsb *b, tval s);        /* s is TV_STR */
void tsb_addc(trender *r, tsb *b, const char *s, int lit);
tval tsb_val(tsb *b);                              /* the builder's string */

/* Substring [off, off+len) of s, keeping provenance. */
tval ts_sub(trender *r, tval s, size_t off, size_t len);
/* 1 when every byte of s is literal. */
int ts_all_lit(tval s);
/* New string from bytes, literal only if `from` was all literal. */
tval ts_derived(trender *r, const char *p, size_t len, tval from);

/* Python str(v); strings keep provenance, other values are data. */
tval tv_to_str(trender *r, tval v);
/* Python repr(v) appended to b (data). */
void tv_repr(trender *r, tsb *b, tval v);
/* json.dumps(v, ensure_ascii, indent (NULL = none), separators, sort_keys). */
void tv_tojson(trender *r, tsb *b, tval v, int ensure_ascii,
               const char *indent, const char *item_sep, const char *key_sep,
               int sort_keys);
/* Python float repr, e.g. 1.0, 1e-05, 1e+16 (buf >= 32 bytes). */
void tv_fmt_float(char *buf, double f);

/* JSON (borrowed) to values; strings point into the JSON. */
tval tv_from_json(trender *r, const json_t *j);

/* UTF-8 helpers. */
size_t tu_len(const char *p, size_t n);          /* code points */
size_t tu_next(const char *p, size_t n, size_t i, uint32_t *cp);
size_t tu_put(char *o, uint32_t cp);             /* bytes written (1-4) */
int tu_isspace(uint32_t cp);

/* ---- tokens and AST ---- */

enum {
    TK_TEXT, TK_VAR_BEGIN, TK_VAR_END, TK_BLOCK_BEGIN, TK_BLOCK_END,
    TK_NAME, TK_STRING, TK_INT, TK_FLOAT, TK_OP, TK_EOF,
};

typedef struct ttok {
    int kind;
    int line, col;
    const char *p;   /* text / name / operator / string value (decoded) */
    size_t len;
    int64_t ival;
    double fval;
} ttok;

typedef struct tnode tnode;

enum {
    /* statements */
    N_TEXT, N_OUTPUT, N_IF, N_FOR, N_SET, N_SETBLOCK, N_MACRO, N_CALLBLOCK,
    N_FILTERBLOCK, N_BREAK, N_CONTINUE, N_BODY,
    /* expressions */
    E_CONST, E_NAME, E_ATTR, E_ITEM, E_SLICE, E_CALL, E_FILTER, E_TEST,
    E_BIN, E_NEG, E_POS, E_NOT, E_AND, E_OR, E_COND, E_LIST, E_TUPLE,
    E_DICT, E_CONCAT, E_CMP,
};

/* Binary and comparison operators (tnode.op). */
enum { OP_ADD = 1, OP_SUB, OP_MUL, OP_DIV, OP_FDIV, OP_MOD, OP_POW,
       OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN };

struct tnode {
    int kind, op;
    int line, col;
    const char *name;   /* E_NAME, E_ATTR, filter/test/macro/set name */
    size_t name_len;
    tval cval;          /* E_CONST */
    tnode *a, *b, *c;   /* operands; N_IF: a=test b=body c=else;
                         * N_FOR: a=target b=iter c=filter */
    tnode **kids;       /* N_BODY statements; E_LIST items; E_CALL args;
                         * E_DICT keys/values interleaved; E_CMP operands */
    size_t nkids;
    const char **kwnames; /* E_CALL/E_FILTER/E_TEST keyword args */
    size_t *kwlens;
    tnode **kwvals;
    size_t nkw;
    int *ops;           /* E_CMP: operator per operand after the first */
    tnode *body, *orelse;
    int negate;         /* E_TEST: `is not` */
    int fid;            /* E_FILTER/E_TEST: resolved id */
};

struct tmpl {
    tarena ar;
    char *src;          /* normalized source; tokens point into it */
    size_t len;
    tnode *root;
};

/* Lexer: fills *toks (arena) or returns an error code with err set. */
int tmpl_lex(tarena *ar, const char *src, size_t len, ttok **toks, size_t *n,
             strata_err *err);

/* Filters and tests: name to id (negative if unknown). */
int tf_filter_id(const char *name, size_t len);
int tf_test_id(const char *name, size_t len);

/* Call arguments as evaluated values. */
typedef struct targs {
    tval *pos;
    size_t npos;
    const char **kwn;
    size_t *kwl;
    tval *kwv;
    size_t nkw;
} targs;

/* Named argument: positional index `i` or keyword `name`; NULL if absent. */
tval *ta_arg(targs *a, size_t i, const char *name);

tval tf_filter(trender *r, int fid, tval v, targs *a, const tnode *at);
/* Python's fmt % args (printf-style) for str % x. */
tval tf_str_mod(trender *r, tval fmt, tval args);
int tf_test(trender *r, int tid, tval v, targs *a);
/* obj.name(args) for str/dict/list methods and loop.cycle. */
tval tf_method(trender *r, tval self, const char *name, targs *a);
/* Is `name` a method of v's type (so `v.name` is a bound method)? */
int tf_has_method(tval v, const char *name, size_t len);
/* Global function by name: id >= 0 or -1. */
int tf_global_id(const char *name, size_t len);
tval tf_call_global(trender *r, int id, targs *a);

/* String helpers (tmpl_meth.c), shared with the filters. */
tval ts_strip(trender *r, tval s, const tval *chars, int left, int right);
tval ts_case(trender *r, tval s, int mode); /* 'U' 'L' 'C' 'T' */
tval ts_replace(trender *r, tval s, tval old, tval nw, int64_t count);
tlist *ts_split(trender *r, tval s, const tval *sep, int64_t maxsplit);

/* Evaluator services the filters need (map/select call filters/tests). */
tval tr_getattr(trender *r, tval obj, const char *name, size_t len);
tval tr_getitem(trender *r, tval obj, tval key);
/* Iterate v into a list (strings by code point, dicts by key). */
tlist *tr_iter(trender *r, tval v);
void tr_step(trender *r);   /* counts toward TMPL_MAX_STEPS */
void tr_steps(trender *r, uint64_t n);  /* n steps at once (bulk work) */
/* An int result beyond 64 bits: a render error (Python would give a big
 * int; we neither wrap nor switch to float). Never returns. */
void tr_int_overflow(trender *r) __attribute__((noreturn));

#endif
