/* replay.h - exact replay of generated assistant turns.
 *
 * For every assistant reply the server returns, it remembers the exact
 * token ids the model generated, keyed by a hash of what it returned: the
 * text, or for tool-call turns a canonical form of content and calls
 * (replay_native_turn_key; generic-format calls by their JSON,
 * render_generic_calls_text). When a later request carries that reply back (as an
 * assistant message, in either API), the prompt uses those ids instead of
 * re-rendering and re-tokenizing it, so turn N+1's prompt extends turn
 * N's tokens exactly and the prefix cache matches through the reply.
 * Bounded (least recently used out); thread-safe.
 * Persisted beside the disk tier's blocks (replay_save at shutdown,
 * replay_load at start), tied to the model fingerprint. */
#ifndef STRATA_REPLAY_H
#define STRATA_REPLAY_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/hash.h"
#include "text/render.h"

typedef struct replay_store replay_store;

replay_store *replay_new(size_t max_entries);
void replay_free(replay_store *r); /* NULL is fine */
/* Entries live in a namespace (ns: the request's tenant and cache salt,
 * server_replay_ns): a reply remembered for one tenant is never found by
 * another, so the prompt tokens it would splice reveal nothing across
 * tenants. */
void replay_put(replay_store *r, const cache_hash *ns, const char *text, size_t len, const int32_t *ids, size_t n);
/* A malloc'd copy of the ids remembered for text in ns, or NULL. */
int32_t *replay_get(replay_store *r, const cache_hash *ns, const char *text, size_t len, size_t *n);

/* A reply is remembered twice: by its text in ns (any conversation that
 * sends it back finds it), and in ns narrowed to the conversation before
 * it (replay_context_ns of the request's messages, all of them). An agent
 * that repeats a reply (the same call with the same arguments, turns
 * apart) gets the same key each time, while the model's tokens for it may
 * differ (spacing the key's canonical form does not keep): the narrowed
 * entry gives each occurrence the tokens generated at that point, so an
 * earlier occurrence is not re-rendered with a later one's tokens (which
 * would cut the cached prefix there). Lookups try the narrowed entry first.
 * out: ns, then the canonical JSON of messages[0..upto) in order, hashed. */
void replay_context_ns(const cache_hash *ns, const json_t *messages, size_t upto, cache_hash *out);

/* Arguments JSON as a JavaScript client sends it back: a number written
 * with a fraction or exponent whose value is a whole number (1.0, 2e1) is
 * an integer there (1, 20), so a call replays under both spellings. NULL
 * when nothing changes (or args is not JSON); caller frees. */
char *replay_js_numbers(const char *args);

/* Arguments JSON as a client that parses a call with the tool's schema
 * sends it back: each top-level property the schema gives a "default"
 * and the call left out, filled in (Claude Code sends an Edit back with
 * "replace_all": false added). tools: the request's normalised tools
 * ({"type":"function","function":{"name","parameters"}}). NULL when
 * nothing changes (no such tool, no default missing, args not an
 * object); caller frees. */
char *replay_schema_defaults(const json_t *tools, const char *name, const char *args);

/* What exact replay remembers a native-format tool-call turn by (its
 * content and its calls, as the client sends them back; content of only
 * whitespace counts as none: Claude Code drops such a text block before
 * a call when it sends the turn back). Caller frees. */
char *replay_native_turn_key(const char *content, const char *const *names, const char *const *args, int n);

/* render_messages with remembered replies put back as the model's exact
 * tokens (rs may be NULL: none): plain text by its segment, generic-format
 * tool calls by their JSON, native-format tool-call turns (Hermes, Llama 3,
 * Mistral) by rendering the turn as a one-off sentinel the template passes
 * through as content, then splicing the model's tokens, markup and all, in
 * its place. A template that does not keep the sentinel whole gets the
 * turn rendered plainly. Message ends are those of the rendering. */
int replay_render(replay_store *rs, const cache_hash *ns, const renderer *r, const json_t *messages,
                  const render_tools *t, int add_gen, render_out *out, char *why, size_t cap);

/* File: "STRRPLY2" | model fp[32] | u64 count | count x {key[32] | u64 n |
 * i32 ids[n]} | SHA-256 of everything before it (version 2: keys cover
 * the namespace; a version 1 file is ignored). Written to a temp file
 * and renamed. Loading checks magic, model and checksum: a file that
 * fails any check is ignored (-1), never half-loaded. */
int replay_save(replay_store *r, const char *path, const uint8_t model_fp[32]);
int replay_load(replay_store *r, const char *path, const uint8_t model_fp[32]);

#endif
