/* test_utf8.c - the UTF-8 helpers in base/utf8. */
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"
#include "test.h"

/* "é" is C3 A9, "中" E4 B8 AD, "😀" F0 9F 98 80. */
TEST(utf8_cut_keeps_whole_characters)
{
    const char *s = "a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80";
    CHECK_EQ_INT(utf8_cut(s, 0), 0);
    CHECK_EQ_INT(utf8_cut(s, 1), 1);
    CHECK_EQ_INT(utf8_cut(s, 2), 1);   /* half of é */
    CHECK_EQ_INT(utf8_cut(s, 3), 3);
    CHECK_EQ_INT(utf8_cut(s, 4), 3);   /* 1 of 3 bytes of 中 */
    CHECK_EQ_INT(utf8_cut(s, 5), 3);   /* 2 of 3 */
    CHECK_EQ_INT(utf8_cut(s, 6), 6);
    CHECK_EQ_INT(utf8_cut(s, 7), 6);   /* 1 of 4 bytes of 😀 */
    CHECK_EQ_INT(utf8_cut(s, 9), 6);   /* 3 of 4 */
    CHECK_EQ_INT(utf8_cut(s, 10), 10);
    /* bytes that no cut can make are left alone */
    CHECK_EQ_INT(utf8_cut("\x80\x80", 2), 2);
    CHECK_EQ_INT(utf8_cut("a\x80\x80\x80\x80", 5), 5);
    CHECK_EQ_INT(utf8_cut("a\xFF", 2), 2);
}

TEST(utf8_valid_seq_is_strict)
{
    CHECK_EQ_INT(utf8_valid_seq("a", 1), 1);
    CHECK_EQ_INT(utf8_valid_seq("\xC3\xA9", 2), 2);
    CHECK_EQ_INT(utf8_valid_seq("\xC3\xA9", 1), 0);          /* cut */
    CHECK_EQ_INT(utf8_valid_seq("\xF0\x9F\x98\x80", 4), 4);
    CHECK_EQ_INT(utf8_valid_seq("\xC0\x80", 2), 0);          /* overlong NUL */
    CHECK_EQ_INT(utf8_valid_seq("\xE0\x80\x80", 3), 0);      /* overlong */
    CHECK_EQ_INT(utf8_valid_seq("\xED\xA0\x80", 3), 0);      /* surrogate */
    CHECK_EQ_INT(utf8_valid_seq("\xF4\x90\x80\x80", 4), 0);  /* past U+10FFFF */
    for (int b = 0xF5; b <= 0xFF; b++) {                     /* never lead bytes */
        char s[4] = {(char)b, '\x80', '\x80', '\x80'};
        CHECK_EQ_INT(utf8_valid_seq(s, 4), 0);
    }
    CHECK_EQ_INT(utf8_valid_seq("\xC3" "a", 2), 0);          /* not a continuation */
}

TEST(utf8_put_and_decode_round_trip)
{
    const uint32_t cps[] = {0x24, 0x7F, 0x80, 0xE9, 0x7FF, 0x800, 0x4E2D, 0xFFFD, 0xFFFF, 0x10000, 0x1F600, 0x10FFFF};
    for (size_t i = 0; i < sizeof cps / sizeof *cps; i++) {
        char buf[4];
        size_t n = utf8_put(buf, cps[i]), used;
        CHECK_EQ_INT((int)n, utf8_len(cps[i]));
        CHECK_EQ_INT(utf8_valid_seq(buf, n), n);
        CHECK_EQ_INT(utf8_decode_lenient(buf, n, &used), cps[i]);
        CHECK_EQ_INT(used, n);
    }
    size_t used;
    CHECK_EQ_INT(utf8_decode_lenient("\xE4\xB8", 2, &used), 0xFFFD); /* cut: one byte */
    CHECK_EQ_INT(used, 1);
    CHECK_EQ_INT(utf8_chars("a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80", 10), 4);
}

TEST(utf8_clean_replaces_invalid_bytes)
{
    size_t n;
    CHECK(utf8_clean("plain \xC3\xA9", 8, &n) == NULL); /* valid: nothing to copy */
    char *c = utf8_clean("a\xFF" "b\xC0\xAF" "c\xED\xA0\x80", 9, &n);
    /* FF: one U+FFFD; C0 AF: the overlong '/' re-encoded as llama.cpp
     * decodes it; the surrogate: U+FFFD */
    const char *want = "a\xEF\xBF\xBD" "b/c\xEF\xBF\xBD";
    CHECK(c && n == strlen(want) && memcmp(c, want, n) == 0);
    free(c);
}
