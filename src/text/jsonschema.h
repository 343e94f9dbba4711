/* jsonschema.h - JSON Schemas compiled for constrained sampling.
 *
 * json_schema_compile turns a schema (a Jansson value) into a small
 * grammar that the JSON guard (jsonguard.h) walks alongside the JSON
 * syntax, so the model can only write a value that validates, and never
 * reaches a prefix it cannot complete.
 *
 * Enforced: type (a name or a list), nullable (OpenAPI), properties,
 * required, additionalProperties, minProperties/maxProperties,
 * propertyNames, items, minItems, maxItems, minLength/maxLength (code
 * points), pattern (ECMA-262, search semantics: jsonregex.h), format
 * (date-time, date, time, email, uuid, ipv4, ipv6, uri), enum and const
 * (any values), minimum, maximum, exclusiveMinimum, exclusiveMaximum,
 * multipleOf (a whole number, on integers), anyOf and oneOf, allOf
 * (merged into one schema), $ref to "#" or any local JSON pointer
 * ("#/$defs/..", "#/definitions/..", ...), recursive refs included
 * (targets are shared nodes).
 *
 * Narrowings (every output still validates; some valid values cannot be
 * written): an object with properties takes only those keys (whatever
 * additionalProperties says), each once, in any order, and an empty
 * properties without an additionalProperties schema takes no key (a tool
 * without arguments); an object without properties takes any keys, its
 * values following additionalProperties.
 * "integer" is written without fraction or exponent. A bounded number has
 * no exponent, and a fraction only where every value between its integer
 * part and the next integer is in bounds. Enum values are written as
 * Jansson's compact dump of them. Where anyOf/oneOf branches overlap for
 * one kind of value, one branch is written (enum branches merge). Under a
 * pattern or format, escapes are the one-letter ones (no \u); \d \w \s
 * are ASCII; dates leave out February 29. Constrained containers nest at
 * most JSON_SCHEMA_MAX_DEPTH deep (recursion stops there, always closable).
 *
 * Not enforced, and not refused: any other validation keyword (not,
 * if/then/else, patternProperties, uniqueItems, contains, prefixItems,
 * tuple items, a fractional multipleOf, dependent*, unevaluated*),
 * unknown formats, patterns the automaton cannot express (lookaround,
 * backreferences, \b), a oneOf whose written branch is not shown to
 * exclude the others, and minProperties on an object of any keys. They compile as annotations and are listed by
 * json_schema_unenforced. Compile fails only for malformed schemas, the
 * size limits, and schemas no object satisfies. */
#ifndef STRATA_JSONSCHEMA_H
#define STRATA_JSONSCHEMA_H

#include <jansson.h>
#include <stddef.h>

#define JSON_SCHEMA_MAX_NODES 4096  /* compiled nodes ($ref targets once each) */
#define JSON_SCHEMA_MAX_TRIE 65536  /* bytes of property names and enum values */
#define JSON_SCHEMA_MAX_DEPTH 16    /* nested constrained objects/arrays */
#define JSON_SCHEMA_MAX_PROPS 64    /* properties per object */

/* Immutable once compiled and reference-counted (atomically): a request,
 * its scheduler slot and its guard each hold a reference. */
typedef struct json_schema json_schema;

/* A schema whose values must be objects (the guard's output is one JSON
 * object). NULL with why set ("'type' must be a name or a list of names at
 * #/properties/zip", "schema too large: ...", "no object satisfies the
 * schema ...") when it is malformed, too large or unsatisfiable. */
json_schema *json_schema_compile(const json_t *schema, char *why, size_t cap);

/* The reply of the generic tool format (toolcall.h TC_GENERIC) for tools
 * in the OpenAI shape [{"type":"function","function":{"name",
 * "parameters"}}]: {"tool_calls":[{"name": <a declared name>,
 * "arguments": <that tool's parameters>}, ...]}; with required or forced
 * at least one call (forced: only that tool), else also {"content": ".."}.
 * A tool without parameters takes any object. */
json_schema *json_schema_tools(const json_t *tools, const char *forced, int required, char *why, size_t cap);

/* One call in a native tool format (toolcall.h TC_HERMES, TC_LLAMA3,
 * TC_MISTRAL): {"name": <a declared name>, <args_key>: <its parameters>}
 * (args_key "arguments", or "parameters" for Llama 3); forced: only that
 * tool. text/callguard.h holds the model to it once it opens a call. */
json_schema *json_schema_tool_call(const json_t *tools, const char *forced, const char *args_key, char *why,
                                   size_t cap);

json_schema *json_schema_ref(json_schema *s); /* returns s */
void json_schema_free(json_schema *s);        /* drops a reference; NULL is fine */

/* Compiled nodes (for tests and the bench). */
int json_schema_n_nodes(const json_schema *s);

/* The keywords compile left unenforced (treated as annotations), with
 * their places: NULL when everything was enforced, else a short list
 * ("pattern at #/properties/zip (lookaround); uniqueItems at
 * #/properties/tags; and 2 more"), at most 4 named; inside a tool's
 * parameters (json_schema_tools, json_schema_tool_call) places read
 * "tool NAME #/properties/..". Owned by s. */
const char *json_schema_unenforced(const json_schema *s);

#endif
