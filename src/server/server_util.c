/* server_util.c - JSON replies, errors and ids for the API handlers. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "base/log.h"
#include "base/mem.h"
#include "base/utf8.h"
#include "server/server.h"
#include "text/jsonload.h"

/* A body that could not be built (json_pack refuses a string that is not
 * valid UTF-8 and returns NULL) is a server bug: a 500 that says so, and
 * a log line, never an empty `{}` under the intended status. */
void reply_json(http_reply *rep, int status, json_t *body) {
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    rep->content_type = "application/json";
    if (!text) {
        log_error("reply: the JSON body for status %d could not be built; replying 500", status);
        status = 500;
        text = xstrdup("{\"error\":{\"message\":\"internal error: the reply could not be encoded\","
                       "\"type\":\"server_error\",\"code\":null,\"param\":null}}");
    }
    rep->status = status;
    rep->body = text;
    rep->body_len = strlen(rep->body);
}

void reply_openai_error(http_reply *rep, int status, const char *type, const char *code,
                        const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    strata_vfmt(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *e = json_pack("{s:{s:o,s:s,s:o,s:n}}", "error", "message", json_text(msg, strlen(msg)), "type", type, "code",
                          code ? json_string(code) : json_null(), "param");
    reply_json(rep, status, e);
}

void reply_anthropic_error(http_reply *rep, int status, const char *type, const char *msg) {
    reply_json(rep, status, json_pack("{s:s,s:{s:s,s:o}}", "type", "error", "error", "type", type, "message",
                                      json_text(msg, strlen(msg))));
}

/* Strings with a NUL byte get U+FFFD in its place (utf8_sanitize: a JSON
 * string is valid UTF-8, so NULs are all it changes); returns how many
 * strings changed. */
static size_t replace_nuls(json_t *j) {
    size_t n = 0, i;
    const char *k;
    json_t *v;
    if (json_is_object(j)) json_object_foreach(j, k, v) n += replace_nuls(v);
    else if (json_is_array(j)) json_array_foreach(j, i, v) n += replace_nuls(v);
    else if (json_is_string(j) && memchr(json_string_value(j), 0, json_string_length(j))) {
        size_t len;
        char *clean = utf8_sanitize(json_string_value(j), json_string_length(j), &len);
        json_string_setn(j, clean, len);
        free(clean);
        n++;
    }
    return n;
}

json_t *json_load_request(const char *body, size_t len, json_error_t *je) {
    int near;
    json_t *root = json_load_lenient(body, len, JSON_ALLOW_NUL, je, &near);
    if (near) log_info("request: %d value(s) JSON allows and jansson refuses read the nearest way "
                       "(integers beyond 64 bits as doubles, unpaired surrogates as U+FFFD)", near);
    size_t n = root ? replace_nuls(root) : 0;
    if (n) log_info("request: U+0000 in %zu string(s) read as U+FFFD (text is not carried with NUL inside)", n);
    return root;
}

json_t *parse_body_openai(const http_req *req, http_reply *rep) {
    json_error_t je;
    json_t *root = json_load_request(req->body, req->body_len, &je);
    if (!root) {
        reply_openai_error(rep, 400, "invalid_request_error", "invalid_json",
                           "request body is not valid JSON: %s (line %d, column %d)", je.text,
                           je.line, je.column);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        reply_openai_error(rep, 400, "invalid_request_error", "invalid_json",
                           "request body must be a JSON object");
        return NULL;
    }
    return root;
}

void make_id(char *out, size_t cap, const char *prefix) {
    unsigned char r[16];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
        fprintf(stderr, "strata: getrandom failed\n");
        abort(); /* ids must be unguessable; never fall back to a weak source */
    }
    size_t off = (size_t)snprintf(out, cap, "%s", prefix);
    for (int i = 0; i < 16 && off + 2 < cap; i++) off += (size_t)snprintf(out + off, cap - off, "%02x", r[i]);
}

int status_for(int code, const char **type) {
    switch (code) {
    case STRATA_EBUSY: *type = "server_busy"; return 503;
    case STRATA_ERANGE: *type = "invalid_request_error"; return 400;
    case STRATA_EINVAL: *type = "invalid_request_error"; return 400;
    default: *type = "server_error"; return 500;
    }
}

/* Length of the valid UTF-8 sequence at s, or 0 if invalid. NUL counts as
 * invalid: model output never carries a U+0000 to the client, which could
 * not send it back (json_load_request reads it as U+FFFD, the text exact
 * replay then finds). */
static size_t utf8_seq(const char *s, size_t n) { return s[0] ? utf8_valid_seq(s, n) : 0; }

char *utf8_sanitize(const char *s, size_t n, size_t *out_len) {
    char *out = xmalloc(n * 3 + 1);
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq(s + i, n - i);
        if (k) {
            memcpy(out + o, s + i, k);
            o += k;
            i += k;
        } else {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
        }
    }
    out[o] = 0;
    *out_len = o;
    return out;
}

json_t *json_text(const char *s, size_t n) {
    size_t len;
    char *clean = utf8_sanitize(s, n, &len);
    json_t *j = json_stringn(clean, len);
    free(clean);
    return j;
}
