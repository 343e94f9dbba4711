/* normalize.h - client text held out of the prompt: one documented rule
 * per client quirk, so text a client changes on every request never
 * breaks a cached prefix (DESIGN.md, "Data flow of one request": a
 * client's per-request nonce is held out). A rule sees the request's
 * system text; the next quirk is one more row in the table. Held-out
 * text is named in the request's --trace line ("held_out").
 *
 * Rules:
 *   claude-code-billing-header  Claude Code (2.1.36 and later) sends
 *     "x-anthropic-billing-header: cc_version=...; cc_entrypoint=...;
 *     cch=<5 hex>;" as its first system block, and cch changes on every
 *     request: a prefix cache would miss at token ~20 of every turn. The
 *     block (or, in a system string, the line) is dropped. */
#ifndef STRATA_NORMALIZE_H
#define STRATA_NORMALIZE_H

#include <jansson.h>

/* A copy of an Anthropic `system` value (a string or an array of blocks)
 * without what a rule holds out. *fired: the name of the rule that held
 * something out (a static string), or NULL. */
json_t *normalize_system(const json_t *system, const char **fired);

#endif
