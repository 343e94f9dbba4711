/* ui_ring.c - what the ring of request records (server/recent.h) costs,
 * measured alone: a request's record opened (the HTTP thread's half: an
 * agent turn of 24 messages, an edited turn's excerpt one time in ten),
 * closed (the scheduler thread's half, with and without a --trace line),
 * and a page's poll of /ui/state (a full ring of 256, and the steady
 * poll: what changed in the last second). The end-to-end rates are
 * bench/ui_cost.py's; on a shared machine their noise is far larger than
 * these costs (bench/README.md).
 *
 *     make bench-ui */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "server/recent.h"

#define RING 256
#define N 200000

/* The HTTP thread's half of a record: the shape api_call.c opens. */
static json_t *request_half(int i) {
    json_t *msgs = json_array();
    for (int k = 0; k < 24; k++) json_array_append_new(msgs, json_pack("{s:i,s:s}", "end", 500 + 40 * k, "role", k % 2 ? "assistant" : "user"));
    json_t *rec = json_pack("{s:f,s:I,s:s,s:i,s:s,s:i,s:{s:s,s:s},s:o}", "time", 1.7e9 + i, "boot", (json_int_t)1, "api",
                            "/v1/chat/completions", "prompt_tokens", 1500, "finish", "running", "stream", 0,
                            "conversation", "key", "agent-1", "from", "prompt_cache_key", "messages", msgs);
    if (i % 10 == 9)
        json_object_update_new(rec, json_pack("{s:{s:i,s:i,s:s,s:i},s:{s:s,s:s,s:s}}", "first_difference", "token", 20,
                                              "message", 0, "role", "system", "tokens_lost", 1400, "excerpt", "before",
                                              "<|im_start|>system\nYou are a careful coding agent working in a small C "
                                              "repository. Read files before editing them",
                                              "was", " careful coding agent working in a small C repository. Read",
                                              "now", " reckless coding agent working in a small C repository. Read"));
    return rec;
}

/* The scheduler's half: the shape sched.c closes it with. */
static json_t *cache_half(void) {
    return json_pack("{s:f,s:i,s:{s:i,s:i,s:i},s:i,s:i,s:{s:i,s:i,s:i},s:f,s:f,s:f,s:f,s:f,s:f,s:s,s:[{s:i,s:f}],"
                     "s:{s:i,s:[i,i,i,i,i,i,i,i]}}",
                     "ts", 123.4, "prompt_tokens", 1500, "cached_tokens", "live", 1400, "disk", 0, "redis", 0,
                     "prefilled_tokens", 100, "generated_tokens", 50, "blocks", "attached", 21, "tail_tokens", 56,
                     "published", 2, "load_ms", 0.1, "prefill_ms", 80.0, "decode_ms", 900.0, "queue_ms", 0.1, "ttft_ms",
                     80.2, "decode_tok_s", 54.4, "finish", "stop", "retain", "end", 477, "ttl_s", 3600.0, "first_miss",
                     "pos", 1400, "tokens", 1, 2, 3, 4, 5, 6, 7, 8);
}

static double per_request_us(recent_ring *r, FILE *trace) {
    double t0 = clock_ms();
    for (int i = 0; i < N; i++) recent_close(r, recent_open(r, "tenant", request_half(i)), cache_half(), trace);
    return (clock_ms() - t0) * 1000.0 / N;
}

/* A poll: the records changed after since, as the reply's JSON text. */
static double poll_us(recent_ring *r, long since, int reps, size_t *bytes) {
    double t0 = clock_ms();
    for (int i = 0; i < reps; i++) {
        long rev;
        json_t *l = recent_list(r, since, NULL, &rev);
        char *s = json_dumps(l, JSON_COMPACT);
        *bytes = s ? strlen(s) : 0;
        free(s);
        json_decref(l);
    }
    return (clock_ms() - t0) * 1000.0 / reps;
}

int main(void) {
    recent_ring *r = recent_new(RING);
    FILE *devnull = fopen("/dev/null", "w");
    printf("record opened and closed, no trace: %.2f us per request\n", per_request_us(r, NULL));
    printf("record opened and closed, with its --trace line: %.2f us per request\n", per_request_us(r, devnull));
    long rev;
    json_decref(recent_list(r, 0, NULL, &rev));
    size_t full, steady;
    double a = poll_us(r, 0, 200, &full), b = poll_us(r, rev - 8, 20000, &steady); /* ~4 requests a second */
    printf("poll of a full ring (%d records, %zu bytes of JSON): %.0f us\n", RING, full, a);
    printf("steady poll (4 requests changed, %zu bytes): %.1f us\n", steady, b);
    fclose(devnull);
    recent_free(r);
    return 0;
}
