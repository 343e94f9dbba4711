/* test_recent.c - the ring of recent request records (server/recent.h):
 * opened by the HTTP side, closed by the scheduler, one record for the
 * trace line and the /ui page, per-tenant reads, revisions, the oldest
 * leaving a full ring, and the copy saved beside the disk tier. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fs.h"
#include "server/recent.h"
#include "test.h"
#include "test_util.h"

static const uint8_t FP[32] = {7};

static json_t *opened(const char *conv) {
    return json_pack("{s:s,s:i,s:s,s:[{s:i,s:s}],s:{s:s}}", "conversation", conv, "prompt_tokens", 100, "finish",
                     "running", "messages", "end", 90, "role", "system", "excerpt", "was", "secret text");
}

/* The lines written to f so far, from the start. */
static char *contents(FILE *f) {
    fflush(f);
    long n = ftell(f);
    char *s = calloc(1, (size_t)n + 1);
    rewind(f);
    if (fread(s, 1, (size_t)n, f) != (size_t)n) s[0] = 0;
    return s;
}

TEST(recent_one_record_is_the_trace_line_and_the_page_state) {
    recent_ring *r = recent_new(8);
    FILE *trace = tmpfile();
    long id = recent_open(r, "t1", opened("c1"));
    CHECK(id > 0);
    long rev;
    json_t *l = recent_list(r, 0, NULL, &rev);
    CHECK_STR(json_string_value(json_object_get(json_array_get(l, 0), "finish")), "running"); /* seen while it runs */
    json_decref(l);
    long before = rev;
    recent_close(r, id, json_pack("{s:s,s:{s:i}}", "finish", "stop", "cached_tokens", "live", 64), trace);
    char *line = contents(trace);
    json_error_t je;
    json_t *t = json_loads(line, 0, &je);
    CHECK(t != NULL);
    CHECK_STR(json_string_value(json_object_get(t, "finish")), "stop"); /* both halves in one line */
    CHECK_STR(json_string_value(json_object_get(t, "conversation")), "c1");
    CHECK_EQ_INT(json_integer_value(json_object_get(t, "id")), id);
    CHECK(!json_object_get(t, "messages") && !json_object_get(t, "excerpt")); /* the page's only */
    CHECK(strchr(line, '\n') == line + strlen(line) - 1);
    l = recent_list(r, before, NULL, &rev);
    CHECK_EQ_INT(json_array_size(l), 1); /* changed by closing */
    CHECK(rev > before);
    CHECK(json_object_get(json_array_get(l, 0), "excerpt") != NULL); /* the page gets everything */
    json_decref(l);
    l = recent_list(r, rev, NULL, &rev);
    CHECK_EQ_INT(json_array_size(l), 0);
    json_decref(l);
    json_decref(t);
    free(line);
    fclose(trace);
    recent_free(r);
}

TEST(recent_tenants_see_their_own) {
    recent_ring *r = recent_new(8);
    long rev;
    recent_open(r, "t1", opened("a"));
    recent_open(r, "t2", opened("b"));
    recent_open(r, NULL, opened("none"));
    json_t *l = recent_list(r, 0, "t1", &rev);
    CHECK_EQ_INT(json_array_size(l), 1);
    CHECK_STR(json_string_value(json_object_get(json_array_get(l, 0), "conversation")), "a");
    json_decref(l);
    l = recent_list(r, 0, "", &rev); /* without keys: the requests without a tenant */
    CHECK_EQ_INT(json_array_size(l), 1);
    CHECK_STR(json_string_value(json_object_get(json_array_get(l, 0), "conversation")), "none");
    json_decref(l);
    l = recent_list(r, 0, NULL, &rev); /* the operator: all */
    CHECK_EQ_INT(json_array_size(l), 3);
    json_decref(l);
    recent_free(r);
}

TEST(recent_full_ring_drops_the_oldest_and_still_traces) {
    recent_ring *r = recent_new(2);
    FILE *trace = tmpfile();
    long a = recent_open(r, NULL, opened("1"));
    recent_open(r, NULL, opened("2"));
    recent_open(r, NULL, opened("3")); /* "1" leaves */
    long rev;
    json_t *l = recent_list(r, 0, NULL, &rev);
    CHECK_EQ_INT(json_array_size(l), 2);
    CHECK_STR(json_string_value(json_object_get(json_array_get(l, 0), "conversation")), "2");
    json_decref(l);
    recent_close(r, a, json_pack("{s:s}", "finish", "length"), trace); /* gone: traced from its facts */
    char *line = contents(trace);
    CHECK(strstr(line, "\"finish\":\"length\"") != NULL);
    free(line);
    fclose(trace);
    recent_close(NULL, 0, json_pack("{s:s}", "finish", "stop"), NULL); /* no ring, no trace: nothing, no leak */
    CHECK(recent_new(0) == NULL);
    CHECK_EQ_INT(recent_open(NULL, "t", opened("x")), 0);
    recent_free(r);
}

TEST(recent_saved_and_loaded_beside_the_disk_tier) {
    char *dir = test_tmpdir_new();
    char path[512];
    snprintf(path, sizeof path, "%s/recent.bin", dir);
    recent_ring *r = recent_new(4);
    long id = recent_open(r, "t1", opened("a"));
    recent_close(r, id, json_pack("{s:s}", "finish", "stop"), NULL);
    recent_open(r, "t2", opened("b"));
    CHECK_EQ_INT(recent_save(r, path, FP), 0);
    recent_free(r);

    recent_ring *back = recent_new(4);
    int bad = -1;
    CHECK_EQ_INT(recent_load(back, path, FP, &bad), 0);
    CHECK_EQ_INT(bad, 0);
    long rev;
    json_t *l = recent_list(back, 0, "t1", &rev);
    CHECK_EQ_INT(json_array_size(l), 1);
    CHECK_STR(json_string_value(json_object_get(json_array_get(l, 0), "finish")), "stop");
    json_decref(l);
    CHECK(recent_open(back, NULL, opened("c")) > 2); /* ids go on after the loaded ones */
    const uint8_t other[32] = {8};
    CHECK_EQ_INT(recent_load(back, path, other, &bad), -1); /* another model's: not loaded */
    recent_free(back);

    /* a line that is not a record (another version's) is skipped, not fatal */
    const char body[] = "{\"id\":3,\"finish\":\"stop\"}\nnot json\n[1]\n{\"id\":4}\n";
    CHECK_EQ_INT(fs_save_framed(path, "STRRCNT1", FP, body, sizeof body - 1), 0);
    back = recent_new(4);
    CHECK_EQ_INT(recent_load(back, path, FP, &bad), 0);
    CHECK_EQ_INT(bad, 2);
    l = recent_list(back, 0, NULL, &rev);
    CHECK_EQ_INT(json_array_size(l), 2);
    json_decref(l);
    recent_free(back);
    test_tmpdir_free(dir);
}
