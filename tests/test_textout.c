/* test_textout.c - stop strings and safe release of streamed text. */
#include <string.h>

#include "server/server.h"
#include "server/textout.h"
#include "test.h"

/* Feeds pieces, collecting everything released; returns the collected text. */
static const char *feed_all(textout *t, const char *const *pieces, int n, char *out, size_t cap) {
    out[0] = 0;
    const char *p;
    for (int i = 0; i < n; i++) {
        textout_append(t, pieces[i], strlen(pieces[i]));
        size_t k = textout_release(t, 0, &p);
        strncat(out, p, k < cap - strlen(out) - 1 ? k : cap - strlen(out) - 1);
    }
    size_t k = textout_release(t, 1, &p);
    strncat(out, p, k);
    return out;
}

TEST(textout_stop_string_across_pieces) {
    textout t;
    textout_init(&t);
    textout_add_stop(&t, "END");
    const char *pieces[] = {"hello E", "N", "D and more"};
    char out[128];
    CHECK_STR(feed_all(&t, pieces, 3, out, sizeof out), "hello ");
    CHECK(t.stopped && t.hit == 0);
    textout_free(&t);
}

TEST(textout_holds_back_possible_stop_prefix) {
    textout t;
    textout_init(&t);
    textout_add_stop(&t, "</s>");
    const char *p;
    textout_append(&t, "a </", 4);
    size_t k = textout_release(&t, 0, &p);
    CHECK_EQ_INT(k, 2); /* "a " released, "</" held */
    textout_append(&t, "b>", 2);  /* not a stop after all */
    k = textout_release(&t, 0, &p);
    CHECK(k == 4 && memcmp(p, "</b>", 4) == 0);
    textout_free(&t);
}

TEST(textout_never_splits_utf8) {
    textout t;
    textout_init(&t);
    const char *p;
    textout_append(&t, "caf\xc3", 4); /* first byte of é */
    size_t k = textout_release(&t, 0, &p);
    CHECK_EQ_INT(k, 3);
    textout_append(&t, "\xa9!", 2);
    k = textout_release(&t, 0, &p);
    CHECK(k == 3 && memcmp(p, "\xc3\xa9!", 3) == 0);
    textout_free(&t);
}

TEST(textout_final_releases_everything) {
    textout t;
    textout_init(&t);
    textout_add_stop(&t, "STOP");
    const char *p;
    textout_append(&t, "ends with ST", 12);
    size_t k1 = textout_release(&t, 0, &p);
    size_t k2 = textout_release(&t, 1, &p);
    CHECK_EQ_INT(k1 + k2, 12);
    CHECK(!t.stopped);
    textout_free(&t);
}

/* Every byte string a model may emit becomes a JSON string for the client:
 * bytes that are not UTF-8 (lone continuations, C0/C1, F5..FF leads,
 * surrogates, overlongs, truncated sequences, NUL) turn into U+FFFD and
 * never make jansson refuse the text (the reply would lose its "content"). */
TEST(json_text_takes_any_bytes) {
    static const char *const cases[] = {
        "\xe3\xfc\xba\x9b\x1f", "\xf5\x80\x80\x80", "\xff\xfe", "\xc0\xaf", "\xed\xa0\x80",
        "\xf4\x90\x80\x80", "\xe0\x80\xaf", "ok\xe2\x82", "a\0b", "\x80\xbf",
    };
    static const size_t lens[] = {5, 4, 2, 2, 3, 4, 3, 4, 3, 2};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        json_t *j = json_text(cases[i], lens[i]);
        CHECK(j != NULL);
        if (j) CHECK(strstr(json_string_value(j), "\xef\xbf\xbd") != NULL);
        json_decref(j);
    }
    json_t *j = json_text("caf\xc3\xa9 \xf0\x9f\x98\x80", 10); /* valid text passes unchanged */
    CHECK(j && !strcmp(json_string_value(j), "caf\xc3\xa9 \xf0\x9f\x98\x80"));
    json_decref(j);
}
