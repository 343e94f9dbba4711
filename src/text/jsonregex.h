/* jsonregex.h - JSON Schema `pattern` and `format` as byte automata for
 * the JSON guard.
 *
 * jre_compile turns an ECMA-262 regular expression (the dialect JSON
 * Schema names) into a DFA over the UTF-8 bytes of the decoded string,
 * with the schema's search semantics: a string matches if the regex
 * matches anywhere in it (`^` and `$` anchor at its ends). The guard keeps
 * one DFA state per string being written, so the cost per byte is one
 * table lookup, and refuses a byte as soon as no completion can match.
 *
 * Supported: literals, `.`, classes (ranges, negation, \d \w \s \D \W \S
 * and their use inside classes), groups ((..), (?:..), (?<name>..)),
 * alternation, the quantifiers ? * + {n} {n,} {n,m} (lazy or not: the
 * same language), ^ and $, escapes \t \n \r \f \v \0 \xHH \uHHHH \u{H..}
 * and escaped punctuation. Stricter than ECMA where that is simpler (every
 * output still matches ECMA-262 and Python's `re`): \d \w \s and their
 * negations are ASCII; `.` excludes line terminators.
 * Refused (the caller reports the pattern as unenforced): lookaround,
 * backreferences, \b \B, \p{..}, \cX, and automata over the size limit.
 *
 * The DFA runs over characters a JSON string can carry as the guard
 * writes them: printable ASCII, \b \t \n \f \r (as escapes) and any other
 * Unicode scalar as UTF-8; other control characters never match. Lengths
 * are counted in characters (code points), as JSON Schema counts them. */
#ifndef STRATA_JSONREGEX_H
#define STRATA_JSONREGEX_H

#include <stddef.h>
#include <stdint.h>

#define JRE_DEAD 0xFFFF     /* no state: the byte cannot continue a match */
#define JRE_MAX_STATES 1024 /* DFA states per automaton */
#define JRE_LEN_BITS 64     /* completion lengths known exactly below this */

enum { JRE_OK = 0, JRE_UNSUPPORTED = -1, JRE_TOO_BIG = -2, JRE_EMPTY = -3 };

/* A DFA whose every state can still reach a match (states that cannot are
 * cut: their transitions lead to JRE_DEAD). State 0 is the start. */
typedef struct jre_dfa {
    int n;
    uint16_t *next; /* n * 256: the state after a byte */
    uint8_t *acc;   /* the string so far matches */
    uint8_t *inf;   /* completions of any number of characters exist */
    uint64_t *len;  /* bit k: a completion of exactly k characters exists */
} jre_dfa;

/* Compiles pattern (UTF-8, NUL-terminated). JRE_OK, or an error with why
 * set: JRE_UNSUPPORTED (a construct above, or a syntax error),
 * JRE_TOO_BIG, JRE_EMPTY (no string matches). Thread-safe; results are
 * kept in a process-wide cache by pattern text (256 patterns, 64 MiB), so
 * a pattern sent with every request is compiled once. */
int jre_compile(const char *pattern, jre_dfa *out, char *why, size_t cap);

/* The strings both match (same errors as jre_compile). */
int jre_intersect(const jre_dfa *a, const jre_dfa *b, jre_dfa *out);

/* The whole decoded string s matches. */
int jre_matches(const jre_dfa *d, const char *s, size_t n);

void jre_free(jre_dfa *d); /* the tables; d itself is the caller's */

/* Can a string in state q, with n characters written, still end in a
 * match whose length is in [min, max] (max UINT32_MAX: no bound)? Exact
 * for completions under JRE_LEN_BITS characters and for unbounded ones;
 * a completion that must be 64+ characters long under a finite max is
 * refused (a narrowing, never a dead end: the answer holds along the
 * witness). */
static inline int jre_viable(const jre_dfa *d, uint16_t q, uint32_t n, uint32_t min, uint32_t max) {
    if (q == JRE_DEAD || n > max) return 0;
    uint32_t lo = min > n ? min - n : 0, hi = max - n;
    if (lo < JRE_LEN_BITS) {
        uint64_t m = d->len[q] >> lo;
        if (hi - lo < 63) m &= (2ull << (hi - lo)) - 1;
        if (m) return 1;
    }
    return d->inf[q] && max == UINT32_MAX;
}

#endif
