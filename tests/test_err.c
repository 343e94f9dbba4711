/* test_err.c - strata_err records and UTF-8-safe message formatting. */
#include <string.h>

#include "base/err.h"
#include "base/utf8.h"
#include "test.h"

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
    CHECK_EQ_INT(utf8_cut(err.msg, n), n);
    CHECK(memcmp(err.msg, "model '", 7) == 0 && (n - 7) % 3 == 0);
}
