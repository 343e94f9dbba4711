/* jsonguard_int.h - what the JSON guard's files share: the syntax
 * automaton's state (jsonguard.c) and the schema automaton that runs
 * beside it (jsonguard_schema.c). Not a public API.
 *
 * A guard state (jg_full) is the syntax state, a few fields for the value
 * being written, and a stack of schema frames, one per open constrained
 * object or array. The mask walks the vocabulary trie copying states, so
 * copies move only the frames in use (jg_copy) and bare JSON mode (no
 * schema, depth 0) copies 40 bytes. */
#ifndef STRATA_JSONGUARD_INT_H
#define STRATA_JSONGUARD_INT_H

#include <stdint.h>
#include <string.h>

#include "text/jsonschema_int.h"

enum {
    JG_START,     /* before the top-level object: whitespace or '{' */
    JG_VALUE,     /* a value must come */
    JG_ARR_FIRST, /* after '[': a value or ']' */
    JG_OBJ_FIRST, /* after '{': a key or '}' */
    JG_KEY,       /* after ',' in an object: a key */
    JG_COLON,     /* after a key */
    JG_AFTER,     /* after a value: ',' or the closer of the container */
    JG_STR,       /* inside a string */
    JG_ESC,       /* after '\' */
    JG_HEX,       /* inside \uXXXX: n digits read, code so far */
    JG_LOW_BS,    /* after a high surrogate escape: '\' of the low one */
    JG_LOW_U,     /* then 'u' */
    JG_UTF8,      /* inside a multi-byte character: n bytes left in lo..hi */
    JG_MINUS,     /* number: after '-' */
    JG_ZERO,      /* number: integer part is "0" */
    JG_INT,       /* number: n integer digits */
    JG_DOT,       /* number: after '.' */
    JG_FRAC,      /* number: fraction digits */
    JG_E,         /* number: after 'e' */
    JG_ESIGN,     /* number: after the exponent sign */
    JG_EXP,       /* number: n exponent digits */
    JG_LIT,       /* true/false/null: literal aux, n bytes matched */
    JG_DONE       /* the top-level object is closed */
};

/* aux bits inside strings */
#define AUX_KEY 1 /* the string is an object key: ':' follows */
#define AUX_LOW 2 /* the \u being read must be a low surrogate */

#define MAX_INT_DIGITS 18 /* < 2^63: Jansson reads integers as int64 */
#define MAX_EXP_DIGITS 2  /* 1e18 * 1e99 cannot overflow a double */

typedef struct jg_state {
    uint64_t stack; /* bit d: the container at level d is an object */
    uint16_t code;  /* \u value so far */
    uint8_t depth;  /* open containers */
    uint8_t mode;
    uint8_t n;      /* counter, meaning per mode (digits, bytes, spaces) */
    uint8_t aux;    /* AUX_* in strings, literal index in JG_LIT */
    uint8_t lo, hi; /* range of the next UTF-8 continuation byte */
} jg_state;

/* One open constrained container. */
typedef struct js_frame {
    uint64_t seen;  /* objects: properties written */
    uint16_t node;  /* its schema node (a JS_DISC until the branch is known) */
    uint16_t pad;
    uint32_t count; /* objects: keys written; arrays: items begun */
} js_frame;

typedef struct jg_full {
    jg_state syn;
    uint16_t node;  /* schema node of the value or key being written; after
                       ':' or ',' the node of the next value */
    uint16_t lit;   /* 1 + trie position while matching a key or enum value; 0: none */
    uint8_t depth;  /* frames in use */
    uint8_t free;   /* 1 + syntax depth where an unconstrained value began; 0: none */
    uint8_t neg;    /* the number being written is negative */
    uint8_t pad;
    uint16_t sc;    /* 1 + js_str of the string (value or key) being written; 0: none */
    uint16_t q;     /* its automaton state (jsonregex.h) */
    uint32_t nch;   /* its characters so far */
    int64_t mag;    /* the integer part of the number so far (bounds) */
    js_frame fr[JSON_SCHEMA_MAX_DEPTH];
} jg_full;

/* Copies the used part of a state (frames past depth are not read). */
static inline void jg_copy(jg_full *dst, const jg_full *src) {
    memcpy(dst, src, offsetof(jg_full, fr) + src->depth * sizeof(js_frame));
}

/* One byte of JSON syntax; 0 if it cannot continue a valid prefix. */
int jg_step(jg_state *s, unsigned c);

/* One byte of JSON under schema s (NULL: syntax only). 0 if refused; st is
 * then garbage (callers step a copy). */
int jg_schema_step(const json_schema *s, jg_full *st, unsigned c);

/* Inside a constrained string only these fields change, byte by byte
 * (the mask walk carries them alone there: jsonguard.c). */
typedef struct jg_str_state {
    jg_state syn;
    uint16_t q;
    uint32_t nch;
} jg_str_state;

/* A byte inside a string held to js_str sc (1-based), schema then syntax,
 * as jg_schema_step takes it; not the closing quote. 0 if refused. */
int jg_string_step(const json_schema *s, int sc, jg_str_state *x, unsigned c);

/* Is the current string free text (no key or enum to match, no string
 * constraint), so that the plain-token shortcut applies? */
static inline int jg_plain_string(const jg_full *st) { return st->syn.mode == JG_STR && !st->lit && !st->sc; }

/* Inside a string held to lengths only: how many more characters may
 * come (plain tokens are then allowed by their character count); -1
 * otherwise. */
static inline int64_t jg_length_room(const json_schema *s, const jg_full *st) {
    if (!s || st->syn.mode != JG_STR || st->lit || !st->sc || s->str[st->sc - 1].dfa >= 0) return -1;
    return (int64_t)s->str[st->sc - 1].max - st->nch;
}

#endif
