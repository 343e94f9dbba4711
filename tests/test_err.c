/* test_err.c - strata_err records and UTF-8-safe message formatting. */
#include <string.h>

#include "base/err.h"
#include "test.h"

/* "é" is C3 A9, "中" E4 B8 AD, "😀" F0 9F 98 80. */
TEST(err_utf8_cut)
{
    const char *s = "a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80";
    CHECK_EQ_INT(strata_utf8_cut(s, 0), 0);
    CHECK_EQ_INT(strata_utf8_cut(s, 1), 1);
    CHECK_EQ_INT(strata_utf8_cut(s, 2), 1);   /* half of é */
    CHECK_EQ_INT(strata_utf8_cut(s, 3), 3);
    CHECK_EQ_INT(strata_utf8_cut(s, 4), 3);   /* 1 of 3 bytes of 中 */
    CHECK_EQ_INT(strata_utf8_cut(s, 5), 3);   /* 2 of 3 */
    CHECK_EQ_INT(strata_utf8_cut(s, 6), 6);
    CHECK_EQ_INT(strata_utf8_cut(s, 7), 6);   /* 1 of 4 bytes of 😀 */
    CHECK_EQ_INT(strata_utf8_cut(s, 9), 6);   /* 3 of 4 */
    CHECK_EQ_INT(strata_utf8_cut(s, 10), 10);
    /* bytes that no cut can make are left alone */
    CHECK_EQ_INT(strata_utf8_cut("\x80\x80", 2), 2);
    CHECK_EQ_INT(strata_utf8_cut("a\x80\x80\x80\x80", 5), 5);
    CHECK_EQ_INT(strata_utf8_cut("a\xFF", 2), 2);
}

/* Every prefix length: formatting a CJK string into a small buffer never
 * ends inside a character, and keeps as many whole ones as fit. */
TEST(err_fmt_cuts_at_char_boundary)
{
    const char *cjk = "\xE4\xB8\xAD\xE6\x96\x87\xE5\x90\x8D"; /* 中文名, 9 bytes */
    for (size_t cap = 1; cap <= 14; cap++) {
        char buf[16];
        size_t n = strata_fmt(buf, cap, "m '%s'", cjk);
        size_t raw = cap - 1 < 13 ? cap - 1 : 13; /* what vsnprintf keeps */
        size_t want = raw <= 3 || raw == 13 ? raw : 3 + (raw - 3) / 3 * 3;
        CHECK_MSG(n == want && strlen(buf) == n, "cap %zu: got %zu, want %zu", cap, n, want);
    }
    /* what a %s copies from an already-cut message is trimmed too */
    char buf[32];
    CHECK_EQ_INT(strata_fmt(buf, sizeof buf, "why: %s", "\xE4\xB8"), 5);
    CHECK_STR(buf, "why: ");
}

TEST(err_errf_long_cjk_message)
{
    /* 400 CJK characters quoted: strata_err's 512 bytes cut the message */
    char name[1201];
    for (int i = 0; i < 400; i++) memcpy(name + 3 * i, "\xE4\xB8\xAD", 3);
    name[1200] = 0;
    strata_err err = {0};
    CHECK_EQ_INT(strata_errf(&err, STRATA_EINVAL, "model '%s' does not exist", name), STRATA_EINVAL);
    size_t n = strlen(err.msg);
    CHECK(n >= 500 && n < sizeof err.msg);
    CHECK_EQ_INT(strata_utf8_cut(err.msg, n), n);
    CHECK(memcmp(err.msg, "model '", 7) == 0 && (n - 7) % 3 == 0);
}
