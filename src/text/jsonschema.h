/* jsonschema.h - JSON Schemas compiled for constrained sampling.
 *
 * json_schema_compile turns a schema (a Jansson value) into a small
 * grammar that the JSON guard (jsonguard.h) walks alongside the JSON
 * syntax, so the model can only write a value that validates. It refuses,
 * with a reason naming the keyword and where it is, anything the guard
 * cannot enforce: a schema is never silently ignored.
 *
 * Supported: type (a name or a list), properties, required,
 * additionalProperties, minProperties/maxProperties, items, minItems,
 * maxItems, enum and const (scalars), minimum, maximum, exclusiveMinimum,
 * exclusiveMaximum (numbers: see below), anyOf and oneOf (branches that
 * differ in JSON type, or objects told apart by a const/enum string
 * property), allOf of one schema, $ref to "#", "#/$defs/.." or
 * "#/definitions/.." (not recursive), nullable (OpenAPI), and annotations
 * (title, description, default, examples, format, $schema, $id, $comment,
 * deprecated, readOnly, writeOnly, strict, discriminator).
 *
 * Narrowings (every output still validates; some valid values cannot be
 * written): an object with properties takes only those keys (whatever
 * additionalProperties says), each once, in any order; an object without
 * properties takes any keys, its values following additionalProperties.
 * "integer" is written without fraction or exponent. A bounded number has
 * no exponent, and a fraction only where every value between its integer
 * part and the next integer is in bounds. Enum values are written as
 * Jansson's compact dump of them. format is an annotation (not checked,
 * as the jsonschema package does by default).
 *
 * Not supported (400 naming the keyword): pattern, patternProperties,
 * minLength, maxLength, multipleOf, not, if/then/else, prefixItems, tuple
 * items, uniqueItems, contains, dependentRequired/Schemas,
 * propertyNames, unevaluated*, recursive $ref, remote $ref, enum/const of
 * objects or arrays, overlapping anyOf branches. */
#ifndef STRATA_JSONSCHEMA_H
#define STRATA_JSONSCHEMA_H

#include <jansson.h>
#include <stddef.h>

#define JSON_SCHEMA_MAX_NODES 4096  /* compiled nodes, after expanding $ref */
#define JSON_SCHEMA_MAX_TRIE 65536  /* bytes of property names and enum values */
#define JSON_SCHEMA_MAX_DEPTH 16    /* nested constrained objects/arrays */
#define JSON_SCHEMA_MAX_PROPS 64    /* properties per object */

/* Immutable once compiled and reference-counted (atomically): a request,
 * its scheduler slot and its guard each hold a reference. */
typedef struct json_schema json_schema;

/* A schema whose values must be objects (the guard's output is one JSON
 * object). NULL with why set ("unsupported JSON Schema keyword 'pattern'
 * at #/properties/zip") when it cannot be enforced. */
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
 * #/properties/tags; and 2 more"), at most 4 named. Owned by s. */
const char *json_schema_unenforced(const json_schema *s);

#endif
