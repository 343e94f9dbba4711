/* normalize.c - the hold-out rules (see normalize.h). */
#include "server/normalize.h"

#include <string.h>

typedef struct hold_rule {
    const char *name;
    const char *prefix; /* a system block or line starting with this is held out */
} hold_rule;

static const hold_rule RULES[] = {
    {"claude-code-billing-header", "x-anthropic-billing-header:"},
};

/* The rule that holds out text starting this way, or NULL. */
static const hold_rule *rule_for(const char *text) {
    for (size_t i = 0; text && i < sizeof RULES / sizeof RULES[0]; i++)
        if (!strncmp(text, RULES[i].prefix, strlen(RULES[i].prefix))) return &RULES[i];
    return NULL;
}

/* A system string: a held-out first line goes. */
static json_t *normalize_string(const char *text, const char **fired) {
    const hold_rule *r = rule_for(text);
    if (!r) return json_string(text);
    *fired = r->name;
    const char *nl = strchr(text, '\n');
    return json_string(nl ? nl + 1 : "");
}

/* System blocks: held-out text blocks go, the rest stay as they are. */
static json_t *normalize_blocks(const json_t *blocks, const char **fired) {
    json_t *out = json_array();
    size_t i;
    const json_t *b;
    json_array_foreach(blocks, i, b) {
        const char *type = json_string_value(json_object_get(b, "type"));
        const hold_rule *r = type && !strcmp(type, "text") ? rule_for(json_string_value(json_object_get(b, "text")))
                                                          : NULL;
        if (r) *fired = r->name;
        else json_array_append(out, (json_t *)b);
    }
    return out;
}

json_t *normalize_system(const json_t *system, const char **fired) {
    *fired = NULL;
    if (json_is_string(system)) return normalize_string(json_string_value(system), fired);
    if (json_is_array(system)) return normalize_blocks(system, fired);
    return json_incref((json_t *)system);
}
