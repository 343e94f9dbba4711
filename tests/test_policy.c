/* test_policy.c - the cache policy: eviction value and order, retention,
 * and the learned boundary cut at message starts. */
#include "cache/policy.h"
#include "test.h"

TEST(policy_value_prefers_deep_hit_recent_blocks) {
    double base = policy_value(0, 64, 1e-3, 0, 0);
    CHECK(policy_value(4096, 64, 1e-3, 0, 0) > base);    /* more attention to redo */
    CHECK(policy_value(0, 64, 1e-3, 3, 0) > base);       /* hit before */
    CHECK(policy_value(0, 64, 1e-3, 0, 600) < base);     /* not used for 10 min */
    CHECK(policy_value(0, 16, 1e-3, 0, 0) < base);       /* a short tail saves less */
    CHECK(policy_decay(8, POLICY_HIT_HALF_LIFE_S) > 3.99 && policy_decay(8, POLICY_HIT_HALF_LIFE_S) < 4.01);
}

TEST(policy_shared_ttl_is_the_default_lengthened_by_marks) {
    CHECK(policy_shared_ttl_ms(0, 3600) == 3600000);                      /* unmarked: the default */
    CHECK(policy_shared_ttl_ms(POLICY_ANCHOR_TTL_S, 600) == 3600000);     /* an anchor outlives a short default */
    CHECK(policy_shared_ttl_ms(POLICY_BREAK_TTL_S, 3600) == 3600000);     /* a 5m mark never shortens it */
    CHECK(policy_shared_ttl_ms(POLICY_MAX_TTL_S, 3600) == 86400000);
    CHECK(policy_shared_ttl_ms(POLICY_ANCHOR_TTL_S, 0) == 0);             /* no expiry configured: none */
}

TEST(policy_retained_blocks_go_last_earliest_expiry_first) {
    double now = 1000;
    CHECK(policy_evict_before(1e9, 0, 1, now + 5, now) < 0);        /* unretained first, whatever its value */
    CHECK(policy_evict_before(5, now + 10, 1, now + 60, now) < 0);  /* both retained: earliest end first */
    CHECK(policy_evict_before(1, now - 1, 2, 0, now) < 0);          /* an expired mark counts for nothing */
    CHECK(policy_evict_before(2, 0, 1, 0, now) > 0);
}

TEST(policy_auto_boundary_is_cut_at_a_message_start) {
    int32_t a[100], b[100];
    for (int i = 0; i < 100; i++) a[i] = i, b[i] = i < 50 ? i : -i;
    int bounds[] = {10, 30, 60};
    policy_recent *r = policy_recent_new(4);
    CHECK_EQ_INT(policy_auto_boundary(r, a, 100, 4, bounds, 3), 0);  /* nothing seen yet */
    CHECK_EQ_INT(policy_auto_boundary(r, b, 100, 4, bounds, 3), 30); /* shares 50; last start <= 50 is 30 */
    CHECK_EQ_INT(policy_auto_boundary(r, b, 100, 4, NULL, 0), 100);  /* the whole prompt again, no cut */
    CHECK_EQ_INT(policy_auto_boundary(r, a, 100, 1, NULL, 0), 50);   /* only the last prompt (b) looked at */
    policy_recent_free(r);
}

TEST(policy_prompt_marks_from_message_bounds) {
    int bounds[] = {-1, 40, 90, 130, 200}; /* where the first k of 4 messages end */
    unsigned char system[] = {1, 0, 0, 0};
    policy_break br[] = {{3, 300.0}, {9, 3600.0}}; /* past the end: the whole conversation */
    cache_mark m[POLICY_MAX_MARKS];
    CHECK_EQ_INT(policy_prompt_marks(bounds, 4, system, 0, br, 2, m), 3);
    CHECK(m[0].end == 40 && m[0].ttl_s == POLICY_ANCHOR_TTL_S); /* the anchor: the system message */
    CHECK(m[1].end == 130 && m[1].ttl_s == 300.0);
    CHECK(m[2].end == 200 && m[2].ttl_s == 3600.0);
    system[0] = 0; /* no system message: an anchor only with tools, where the first message starts */
    CHECK_EQ_INT(policy_prompt_marks(bounds, 4, system, 0, NULL, 0, m), 0);
    CHECK_EQ_INT(policy_prompt_marks(bounds, 4, system, 1, NULL, 0, m), 0); /* unknown (-1): no mark */
    bounds[0] = 25;
    CHECK_EQ_INT(policy_prompt_marks(bounds, 4, system, 1, NULL, 0, m), 1);
    CHECK_EQ_INT(m[0].end, 25);
}

/* Client ttls are finite and bounded (issue 16.9: "infh" and "1e308h"
 * were retained forever, wrote "inf" to the usage file and broke the
 * trace's JSON). */
TEST(policy_ttl_parse_accepts_durations_and_refuses_the_unbounded) {
    double t;
    CHECK(policy_ttl_parse(NULL, &t) == 0 && t == 300);
    CHECK(policy_ttl_parse("5m", &t) == 0 && t == 300);
    CHECK(policy_ttl_parse("1h", &t) == 0 && t == 3600);
    CHECK(policy_ttl_parse("90s", &t) == 0 && t == 90);
    CHECK(policy_ttl_parse("24h", &t) == 0 && t == POLICY_MAX_TTL_S);
    const char *bad[] = {"infh", "1e308h", "nanm", "25h", "0m", "-5m", "5", "5d", "5mm", "", "h"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) CHECK(policy_ttl_parse(bad[i], &t) == -1);
}

/* Scopes parse to a kind and a bound; values past the int range are
 * refused, never wrapped (issue 16.9). */
TEST(policy_scope_parse_kinds_and_bounds) {
    cache_scope sc;
    CHECK(policy_scope_parse("off", &sc) == 0 && sc.kind == SCOPE_OFF);
    CHECK(policy_scope_parse("full", &sc) == 0 && sc.kind == SCOPE_FULL);
    CHECK(policy_scope_parse("auto", &sc) == 0 && sc.kind == SCOPE_AUTO && sc.n == POLICY_AUTO_LOOK);
    CHECK(policy_scope_parse("auto:3", &sc) == 0 && sc.kind == SCOPE_AUTO && sc.n == 3);
    CHECK(policy_scope_parse("1000", &sc) == 0 && sc.kind == SCOPE_TOKENS && sc.n == 1000);
    CHECK(policy_scope_parse("0", &sc) == 0 && sc.kind == SCOPE_OFF);
    const char *bad[] = {"auto:0", "auto:17", "auto:", "2147483648", "9999999999999999999999", "-1", "1x", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) CHECK(policy_scope_parse(bad[i], &sc) == -1);
    CHECK(policy_scope_tokens(1LL << 31, &sc) == -1);
}
