/* jsonload.h - JSON read the nearest way where jansson refuses what JSON
 * allows. JSON numbers have no size limit and a string may hold an
 * unpaired surrogate escape; jansson refuses both. A client may send
 * them (a Python client writes big ints as digits) and a sampled model
 * may write them in a tool call's arguments (the JSON grammar the guard
 * enforces allows them), so every parse of request bodies and of call
 * arguments goes through here. */
#ifndef STRATA_TEXT_JSONLOAD_H
#define STRATA_TEXT_JSONLOAD_H

#include <jansson.h>
#include <stddef.h>

/* json_loadb(buf, len, flags, je), but on failure read again with every
 * integer beyond 64 bits as a double (as a JavaScript client reads it)
 * and every unpaired surrogate escape as U+FFFD. *n_near (may be NULL):
 * how many values were read so; je (may be NULL) is the first error when
 * nothing could be read. */
json_t *json_load_lenient(const char *buf, size_t len, size_t flags, json_error_t *je, int *n_near);
/* The JSON a JSON string value holds (a call's "arguments" as a client
 * sends them), read as above; NULL when s is no string or holds no JSON. */
json_t *json_load_lenient_string(const json_t *s);

#endif
