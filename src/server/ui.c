/* ui.c - the /ui page and its state (see ui.h). */
#include "server/ui.h"

#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/mem.h"

/* The page runs only its own files: a prompt shown on it is text, never
 * markup or script, even if the page had a bug that let it through. */
#define UI_CSP "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'"

/* ---- tiers (the operator's view) ------------------------------------------ */

/* The live pool: cached blocks (in use or idle) against the pool. Its
 * hit count is its own (the store counts lower tiers' hits apart). */
static json_t *tier_live(const server *s, const sched_stats *st) {
    double bb = (double)s->e->kv.block_bytes;
    return json_pack("{s:i,s:i,s:i,s:f,s:f,s:I,s:I,s:I,s:i,s:I}", "blocks", st->cache_blocks, "idle_blocks",
                     st->cache_idle_blocks, "capacity_blocks", s->e->kv.n_blocks, "bytes", st->cache_blocks * bb,
                     "budget_bytes", s->e->kv.n_blocks * bb, "hit_tokens", (json_int_t)st->cache_hit_tokens,
                     "evicted_blocks", (json_int_t)st->cache_evicted_blocks, "evicted_retained",
                     (json_int_t)st->cache_evicted_retained, "tails", st->cache_tails, "tail_hit_tokens",
                     (json_int_t)st->cache_tail_hit_tokens);
}

static json_t *tier_disk(const server *s, const sched_stats *st) {
    disk_stats d;
    disk_get_stats(s->disk, &d);
    return json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "blocks", (json_int_t)d.files, "bytes", (json_int_t)d.bytes,
                     "budget_bytes", (json_int_t)s->o.cache_disk_mb << 20, "hit_tokens",
                     (json_int_t)st->cache_disk_hit_tokens, "evicted_blocks", (json_int_t)d.evicted, "written_bytes",
                     (json_int_t)d.write_bytes, "read_bytes", (json_int_t)d.read_bytes, "quarantined",
                     (json_int_t)d.quarantined, "write_errors", (json_int_t)d.write_errors);
}

static json_t *tier_redis(const server *s, const sched_stats *st) {
    redis_tier_stats r;
    redis_tier_get_stats(s->redis, &r);
    return json_pack("{s:b,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "up", r.up, "hit_tokens", (json_int_t)st->cache_redis_hit_tokens,
                     "hits", (json_int_t)r.hits, "misses", (json_int_t)r.misses, "errors", (json_int_t)r.errors,
                     "writes", (json_int_t)r.writes, "expires", (json_int_t)r.expires, "queued_bytes",
                     (json_int_t)r.queued_bytes);
}

/* Every tier's counters, the totals the page turns into rates (hit rate,
 * evictions per minute), and for recurrent or sliding-window models their
 * snapshots and window reloads. */
static json_t *tiers(const server *s) {
    sched_stats st;
    sched_get_stats(s->sch, &st);
    json_t *t = json_pack("{s:o}", "live", tier_live(s, &st));
    if (s->disk) json_object_set_new(t, "disk", tier_disk(s, &st));
    if (s->redis) json_object_set_new(t, "redis", tier_redis(s, &st));
    json_object_set_new(t, "totals",
                        json_pack("{s:I,s:I,s:I,s:I,s:I,s:i,s:i}", "requests", (json_int_t)st.requests,
                                  "prefilled_tokens", (json_int_t)st.tokens_prompt, "hit_tokens",
                                  (json_int_t)(st.cache_hit_tokens + st.cache_disk_hit_tokens + st.cache_redis_hit_tokens), "generated_tokens", (json_int_t)st.tokens_generated,
                                  "published_blocks", (json_int_t)st.cache_published_blocks, "active", st.active,
                                  "queued", st.queued));
    if (s->e->m->hp.n_rec_layer > 0)
        json_object_set_new(t, "snapshots",
                            json_pack("{s:I,s:I,s:I,s:I,s:I}", "entries", (json_int_t)st.snap_entries, "bytes",
                                      (json_int_t)st.snap_bytes, "stored", (json_int_t)st.snap_stored, "restored",
                                      (json_int_t)st.snap_restored, "evicted", (json_int_t)st.snap_evicted));
    if (s->e->kv.swa_layer)
        json_object_set_new(t, "window", json_pack("{s:I,s:I,s:I}", "reloaded_blocks", (json_int_t)st.window_reloaded_blocks,
                                                   "cut_tokens", (json_int_t)st.window_cut_tokens, "refilled_blocks",
                                                   (json_int_t)st.window_refilled_blocks));
    return t;
}

/* ---- state ------------------------------------------------------------------ */

/* GET /ui/state[?since=REV]: the records changed after revision REV (all
 * without it) that the caller may see, and the revision to ask from next. */
static void get_state(server *s, const http_req *req, http_reply *rep) {
    const char *since_arg = http_query(req, "since");
    char *end = NULL;
    long since = since_arg ? strtol(since_arg, &end, 10) : 0;
    if (since_arg && (end == since_arg || *end || since < 0)) {
        reply_openai_error(rep, 400, "invalid_request_error", NULL, "'since' must be a revision number (0 or more)");
        return;
    }
    int op = server_is_operator(s, req);
    const char *tenant = server_tenant(s, req);
    char tid[16] = "";
    if (tenant) server_tenant_id(s, tenant, tid, sizeof tid);
    long rev;
    /* The operator sees every tenant's; a tenant its own ("": no keys). */
    json_t *list = recent_list(s->recent, since, op ? NULL : tid, &rev);
    json_t *o = json_pack("{s:s,s:s?,s:s,s:s,s:I,s:f,s:i,s:I,s:o}", "view", op ? "operator" : "tenant", "tenant",
                          tid[0] ? tid : NULL, "model", s->model_id, "arch", s->e->m->hp.arch_name, "boot",
                          (json_int_t)s->boot_id, "now", clock_wall_s(), "block_tokens", s->e->kv.block_tokens,
                          "rev", (json_int_t)rev, "requests", list);
    json_object_set_new(o, "records", json_integer(s->o.ui_records));
    if (op) json_object_set_new(o, "tiers", tiers(s));
    reply_json(rep, 200, o);
}

/* ---- the page --------------------------------------------------------------- */

static void get_asset(const char *name, http_reply *rep) {
    const char *data, *type;
    size_t n = ui_asset(name, &data, &type);
    if (!data) {
        reply_openai_error(rep, 404, "invalid_request_error", NULL, "no file /ui/%s", name);
        return;
    }
    http_reply_text(rep, 200, type, data, n);
    rep->extra_name = "Content-Security-Policy";
    rep->extra_value = xstrdup(UI_CSP);
}

void ui_get(server *s, const http_req *req, http_reply *rep) {
    if (!s->recent) {
        reply_openai_error(rep, 404, "invalid_request_error", NULL, "the /ui page is off (--ui-records 0)");
        return;
    }
    const char *name = req->path[3] == '/' ? req->path + 4 : "";
    if (strcmp(name, "state") != 0) {
        get_asset(name[0] ? name : "index.html", rep);
        return;
    }
    if (!atomic_load(&s->ready)) {
        reply_openai_error(rep, 503, "server_busy", NULL, "the model is still loading");
        rep->retry_after = 2;
        return;
    }
    get_state(s, req, rep);
}
