/* test_prompt.c - prompts from normalised conversations: exact replay of
 * native-format tool-call turns (the model's own tokens where the template
 * renders the turn), so turn N+1's prompt extends turn N's exactly. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "server/prompt.h"
#include "test.h"
#include "test_util.h"

/* A server with just what prompt.c uses: the tiny model's tokenizer, a
 * renderer of a real template with native tool syntax, and a replay store. */
static int fake_server_vocab(server *s, const char *model, const char *template_name, int native) {
    memset(s, 0, sizeof *s);
    s->tok = test_load_tokenizer(test_data(model));
    char path[256];
    snprintf(path, sizeof path, "tests/data/tmpl/%s.jinja", template_name);
    char *src = test_read_file(path, NULL);
    CHECK(src != NULL);
    if (!s->tok || !src) return free(src), -1;
    render_opts ro = {.template_src = src};
    CHECK(render_new(&s->render, NULL, s->tok, &ro, NULL) == 0);
    free(src);
    CHECK(render_native_tools(s->render) == native);
    s->replay = replay_new(16);
    return 0;
}

static int fake_server_native(server *s, const char *template_name, int native) {
    return fake_server_vocab(s, "models/llama-q4_1.gguf", template_name, native);
}

static int fake_server(server *s, const char *template_name) { return fake_server_native(s, template_name, 1); }

static void fake_server_free(server *s) {
    render_free(s->render);
    tok_free(s->tok);
    replay_free(s->replay);
}

static const char *CONV_HEAD =
    "[{\"role\":\"system\",\"content\":\"You are terse.\"},{\"role\":\"user\",\"content\":\"Weather in Paris?\"}]";
static const char *CALL_TURN =
    "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\","
    "\"function\":{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}}]}";
static const char *TOOLS =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"d\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}]";

/* Two tenants' exact-replay namespaces. */
static const cache_hash NS_A = {{1}}, NS_B = {{2}};

static int32_t *tokens_in(server *s, const cache_hash *ns, json_t *msgs, const render_tools *t, size_t *n) {
    int32_t *ids = NULL;
    char why[256] = "";
    CHECK(prompt_tokens(s, ns, msgs, t, &ids, n, NULL, why, sizeof why) == 0);
    return ids;
}

static int32_t *tokens_of(server *s, json_t *msgs, const render_tools *t, size_t *n) {
    return tokens_in(s, &NS_A, msgs, t, n);
}

static void check_turn_replays(const char *template_name) {
    server s;
    if (fake_server(&s, template_name)) return;
    json_t *tools = json_loads(TOOLS, 0, NULL), *head = json_loads(CONV_HEAD, 0, NULL);
    json_t *full = json_deep_copy(head);
    json_array_append_new(full, json_loads(CALL_TURN, 0, NULL));
    json_array_append_new(full, json_pack("{s:s,s:s,s:s}", "role", "tool", "tool_call_id", "call_1", "content", "sunny"));
    render_tools t = {.tools = tools};
    /* What the model wrote at turn N (any tokens: the point is they are its own). */
    int32_t gen[5] = {300, 301, 302, 303, 304};
    const char *names[] = {"get_weather"}, *args[] = {"{\"city\": \"Paris\"}"};
    char *key = replay_native_turn_key("", names, args, 1);
    size_t n_head, n_plain, n_full;
    int32_t *plain = tokens_of(&s, full, &t, &n_plain); /* nothing remembered yet */
    replay_put(s.replay, &NS_A, key, strlen(key), gen, 5);
    int32_t *ph = tokens_of(&s, head, &t, &n_head), *pf = tokens_of(&s, full, &t, &n_full);
    /* another tenant's prompt never carries A's reply (issue 16.3) */
    size_t n_other;
    int32_t *other = tokens_in(&s, &NS_B, full, &t, &n_other);
    CHECK(n_other == n_plain && memcmp(other, plain, n_plain * sizeof(int32_t)) == 0);
    free(other);
    /* turn N+1 = turn N's prompt, then exactly the generated tokens */
    CHECK(n_full > n_head + 5);
    CHECK(memcmp(pf, ph, n_head * sizeof(int32_t)) == 0);
    CHECK(memcmp(pf + n_head, gen, sizeof gen) == 0);
    /* without the memory it renders the template's own way */
    CHECK(n_plain < n_head + 5 || memcmp(plain + n_head, gen, sizeof gen) != 0);
    free(key), free(plain), free(ph), free(pf);
    json_decref(tools), json_decref(head), json_decref(full);
    fake_server_free(&s);
}

TEST(prompt_native_tool_turn_replays_exact_tokens_qwen) { check_turn_replays("qwen2.5"); }

TEST(prompt_native_tool_turn_replays_exact_tokens_llama3) { check_turn_replays("llama3.1"); }

/* Where needle (n ids) first occurs in hay at or after from, or -1. */
static long find_ids(const int32_t *hay, size_t n_hay, size_t from, const int32_t *needle, size_t n) {
    for (size_t i = from; i + n <= n_hay; i++)
        if (!memcmp(hay + i, needle, n * sizeof(int32_t))) return (long)i;
    return -1;
}

/* An agent that makes the same call twice (same name and arguments, so
 * the same replay key) while the model wrote it with different tokens each
 * time: each occurrence replays the tokens generated at that point of the
 * conversation (what gen.c remembers under replay_context_ns), not the
 * latest for the key, so the earlier turn keeps matching the cache (issue
 * 23, Codex's repeated create_goal). Native (qwen2.5) and generic
 * (smollm2: no tool syntax, calls as JSON content) formats. */
static void check_repeated_turn(const char *template_name, int native) {
    server s;
    if (fake_server_native(&s, template_name, native)) return;
    json_t *tools = json_loads(TOOLS, 0, NULL), *msgs = json_loads(CONV_HEAD, 0, NULL);
    render_tools t = {.tools = tools};
    const char *names[] = {"get_weather"}, *args[] = {"{\"city\": \"Paris\"}"};
    char *key = native ? replay_native_turn_key("", names, args, 1) : render_generic_calls_text(names, args, 1);
    int32_t gen[2][4] = {{300, 301, 302, 303}, {310, 311, 312, 313}};
    for (int k = 0; k < 2; k++) { /* turn k: what gen.c remembers, then the client appends call and result */
        cache_hash ctx;
        replay_context_ns(&NS_A, msgs, json_array_size(msgs), &ctx);
        replay_put(s.replay, &NS_A, key, strlen(key), gen[k], 4);
        replay_put(s.replay, &ctx, key, strlen(key), gen[k], 4);
        json_array_append_new(msgs, json_loads(CALL_TURN, 0, NULL));
        json_array_append_new(msgs, json_pack("{s:s,s:s,s:s}", "role", "tool", "tool_call_id", "call_1", "content", "sunny"));
    }
    size_t n;
    int32_t *ids = tokens_of(&s, msgs, &t, &n);
    long first = ids ? find_ids(ids, n, 0, gen[0], 4) : -1;
    long second = first >= 0 ? find_ids(ids, n, (size_t)first + 4, gen[1], 4) : -1;
    CHECK(first >= 0 && second > first);
    CHECK(ids && find_ids(ids, n, 0, gen[1], 4) == second); /* the later tokens only where they were written */
    /* another tenant's namespace still sees neither */
    size_t n_b;
    int32_t *other = tokens_in(&s, &NS_B, msgs, &t, &n_b);
    CHECK(other && find_ids(other, n_b, 0, gen[0], 4) < 0 && find_ids(other, n_b, 0, gen[1], 4) < 0);
    free(other), free(ids), free(key);
    json_decref(tools), json_decref(msgs);
    fake_server_free(&s);
}

TEST(prompt_repeated_call_replays_each_turns_tokens_native) { check_repeated_turn("qwen2.5", 1); }

TEST(prompt_repeated_call_replays_each_turns_tokens_generic) { check_repeated_turn("smollm2", 0); }

/* A JavaScript client (Claude Code) sends a generated 1.0 back as 1: the
 * call is also remembered under that spelling (gen.c), which is what
 * replay_js_numbers gives; nothing else about the arguments changes. */
TEST(prompt_replay_js_numbers) {
    char *a = replay_js_numbers("{\"max_results\":1.0,\"q\":\"x\",\"l\":[2e1,0.5,{\"n\":-3.0}],\"t\":true}");
    CHECK(a && !strcmp(a, "{\"max_results\":1,\"q\":\"x\",\"l\":[20,0.5,{\"n\":-3}],\"t\":true}"));
    free(a);
    CHECK(replay_js_numbers("{\"a\":1,\"b\":0.25,\"c\":\"1.0\"}") == NULL); /* already the same */
    CHECK(replay_js_numbers("not json") == NULL);
    char *big = replay_js_numbers("{\"a\":1e300}"); /* past 2^53: JavaScript keeps the exponent */
    CHECK(big == NULL);
}

/* A client that parses a call with the tool's schema (Claude Code) sends
 * it back with the schema's defaults filled in: the call is also
 * remembered under that spelling (gen.c), which is what
 * replay_schema_defaults gives; what the model wrote stays as written. */
TEST(prompt_replay_schema_defaults) {
    json_t *tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"Edit\",\"parameters\":"
                               "{\"type\":\"object\",\"properties\":{\"file_path\":{\"type\":\"string\"},"
                               "\"replace_all\":{\"type\":\"boolean\",\"default\":false},"
                               "\"n\":{\"type\":\"integer\",\"default\":3}}}}}]", 0, NULL);
    CHECK(tools != NULL);
    char *a = replay_schema_defaults(tools, "Edit", "{\"n\":7,\"file_path\":\"a\"}");
    CHECK(a && !strcmp(a, "{\"n\":7,\"file_path\":\"a\",\"replace_all\":false}"));
    free(a);
    CHECK(replay_schema_defaults(tools, "Edit", "{\"replace_all\":true,\"n\":1}") == NULL); /* none missing */
    CHECK(replay_schema_defaults(tools, "Read", "{}") == NULL);      /* no such tool */
    CHECK(replay_schema_defaults(tools, "Edit", "[1]") == NULL);     /* not an object */
    CHECK(replay_schema_defaults(tools, "Edit", "not json") == NULL);
    CHECK(replay_schema_defaults(NULL, "Edit", "{}") == NULL);
    json_decref(tools);
}

/* Claude Code drops a whitespace-only text block (a native-format model's
 * "\n\n" before its call) when it sends the turn back: the turn's key
 * is the same without it; any other text still counts. */
TEST(prompt_native_turn_key_blank_content) {
    const char *names[] = {"Read"}, *args[] = {"{\"file_path\":\"a\"}"};
    char *none = replay_native_turn_key("", names, args, 1), *ws = replay_native_turn_key("\n\n \t", names, args, 1);
    char *text = replay_native_turn_key(" ok\n", names, args, 1);
    CHECK(!strcmp(none, ws));
    CHECK(strcmp(none, text) != 0);
    free(none), free(ws), free(text);
}

/* ---- harmony (gpt-oss) ------------------------------------------------------
 * The gpt-oss template renders an assistant turn its own way: a call's
 * recipient before its channel and no <|constrain|> (the model writes
 * "<|channel|>commentary to=functions.X <|constrain|>json"), the analysis
 * of a tool-call turn only until a final answer follows, and a final
 * answer without its analysis. The model's own tokens are what it saw, so
 * replay splices them over the template's rendering of each remembered
 * turn (replay.c, splice_harmony). */

/* Ids of the model's output text: harmony's markers are special tokens
 * where the vocabulary has them (the tiny gpt-oss model), text otherwise. */
static int32_t *text_ids(const server *s, const char *text, size_t *n) {
    int32_t *ids = NULL;
    *n = 0;
    CHECK(tok_encode(s->tok, text, strlen(text), 1, &ids, n, NULL) == 0);
    return ids;
}

/* What the model writes at turn k after "<|start|>assistant", and the end
 * token the template gives the turn (gen.c remembers both). */
static int32_t *harmony_turn(const server *s, int k, int final, size_t *n) {
    char text[512];
    if (final)
        snprintf(text, sizeof text, "<|channel|>analysis<|message|>All %d done.<|end|><|start|>assistant"
                 "<|channel|>final<|message|>It is sunny.<|end|>", k);
    else
        snprintf(text, sizeof text, "<|channel|>analysis<|message|>Need day %d.<|end|><|start|>assistant"
                 "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
                 "{\"city\":\"Paris\",\"day\":%d}<|call|>", k, k);
    return text_ids(s, text, n);
}

static size_t common_prefix(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    size_t i = 0;
    while (i < na && i < nb && a[i] == b[i]) i++;
    return i;
}

/* A tool loop of `turns` calls, a final answer, then the user's next
 * question: per turn, the tokens the next prompt re-prefills beyond what
 * is new (the previous prompt and the model's reply are cached). With
 * replay the answer is 0 every turn; *lost_plain gets the total without
 * it (the template's own rendering), *lost_final the last turn's. */
static void harmony_loop(const char *model, int replay, int turns, size_t *lost_total, size_t *lost_final) {
    server s;
    *lost_total = *lost_final = 0;
    if (fake_server_vocab(&s, model, "gpt-oss", 1)) return;
    CHECK(render_harmony(s.render));
    json_t *tools = json_loads(TOOLS, 0, NULL), *msgs = json_loads(CONV_HEAD, 0, NULL);
    render_tools t = {.tools = tools};
    size_t n_prev = 0, n_gen = 0;
    int32_t *prev = NULL, *gen = NULL;
    for (int k = 0; k <= turns + 1; k++) {
        size_t n;
        int32_t *p = tokens_of(&s, msgs, &t, &n);
        if (prev) { /* the cached part: the last prompt, then the reply */
            int32_t *seen = xmalloc((n_prev + n_gen) * sizeof(int32_t));
            memcpy(seen, prev, n_prev * sizeof(int32_t));
            memcpy(seen + n_prev, gen, n_gen * sizeof(int32_t));
            size_t keep = common_prefix(p, n, seen, n_prev + n_gen), lost = n_prev + n_gen - keep;
            *lost_total += lost;
            if (k == turns + 1) *lost_final = lost;
            if (replay) CHECK_MSG(lost == 0, "turn %d re-prefills %zu tokens", k, lost);
            free(seen);
        }
        free(prev), free(gen);
        if (k == turns + 1) {
            prev = gen = NULL;
            free(p);
            break;
        }
        prev = p, n_prev = n;
        int final = k == turns;
        gen = harmony_turn(&s, k, final, &n_gen);
        char args[64], thinking[64];
        snprintf(args, sizeof args, "{\"city\":\"Paris\",\"day\":%d}", k);
        snprintf(thinking, sizeof thinking, final ? "All %d done." : "Need day %d.", k);
        const char *names[] = {"get_weather"}, *argv[] = {args};
        char *key = replay_native_turn_key(final ? "It is sunny." : "", names, argv, final ? 0 : 1);
        cache_hash ctx;
        replay_context_ns(&NS_A, msgs, json_array_size(msgs), &ctx);
        if (replay) { /* what gen.c remembers: the tokens, then <|call|> or <|end|> (here text) */
            replay_put(s.replay, &NS_A, key, strlen(key), gen, n_gen);
            replay_put(s.replay, &ctx, key, strlen(key), gen, n_gen);
        }
        free(key);
        /* the client sends the turn back with its reasoning (reasoning_content -> thinking) */
        json_t *turn = final ? json_pack("{s:s,s:s,s:s}", "role", "assistant", "content", "It is sunny.", "thinking", thinking)
                             : json_pack("{s:s,s:s,s:s,s:[{s:s,s:s,s:{s:s,s:o}}]}", "role", "assistant", "content", "",
                                         "thinking", thinking, "tool_calls", "id", "call_1", "type", "function",
                                         "function", "name", "get_weather", "arguments", json_loads(args, 0, NULL));
        json_array_append_new(msgs, turn);
        json_array_append_new(msgs, final ? json_pack("{s:s,s:s}", "role", "user", "content", "And tomorrow?")
                                          : json_pack("{s:s,s:s,s:s}", "role", "tool", "tool_call_id", "call_1",
                                                      "content", "sunny"));
    }
    json_decref(tools), json_decref(msgs);
    fake_server_free(&s);
}

/* Both vocabularies: the tiny gpt-oss model's (markers are special
 * tokens, as in the real o200k_harmony) and the tiny llama's (markers
 * are text: the splice works on the rendered text either way). */
static void check_harmony_loop(const char *model) {
    size_t with_total, with_final, plain_total, plain_final;
    harmony_loop(model, 1, 12, &with_total, &with_final);
    harmony_loop(model, 0, 12, &plain_total, &plain_final);
    CHECK_EQ_INT(with_total, 0);
    CHECK(plain_total > 0 && plain_final > 0);
    fprintf(stderr, "    %s: harmony 12-call loop + answer + question: re-prefilled tokens beyond the new ones: "
            "template alone %zu in all (%zu at the question after the answer), with replay 0\n",
            model, plain_total, plain_final);
}

TEST(prompt_harmony_tool_loop_prefix_stable) {
    check_harmony_loop("models/gpt-oss-mxfp4.gguf");
    check_harmony_loop("models/llama-q4_1.gguf");
}

/* The tiny gpt-oss model's vocabulary and template, as the server sees
 * them: harmony detected, its markers one special token each, <|end|>
 * printed and not an end of generation (llama.cpp's rule), <|call|> and
 * <|return|> ending generation. */
TEST(prompt_harmony_vocab) {
    server s;
    if (fake_server_vocab(&s, "models/gpt-oss-mxfp4.gguf", "gpt-oss", 1)) return;
    CHECK(render_harmony(s.render));
    render_tools none = {0};
    CHECK_EQ_INT(render_tool_format(s.render, &none), TC_NONE);
    const char *names[] = {"<|channel|>", "<|message|>", "<|start|>", "<|end|>", "<|call|>", "<|return|>"};
    for (int i = 0; i < 6; i++) {
        int32_t id = tok_find(s.tok, names[i]);
        CHECK_MSG(id >= 0, "%s missing", names[i]);
        char piece[64];
        int n = tok_piece(s.tok, id, 0, piece, sizeof piece);
        int ends = i >= 4;
        CHECK_MSG(tok_is_eog(s.tok, id) == ends, "%s: end of generation %d", names[i], !ends);
        CHECK_MSG(ends ? n == 0 : n == (int)strlen(names[i]) && !memcmp(piece, names[i], n),
                  "%s prints %d bytes", names[i], n);
    }
    size_t n;
    int32_t *ids = text_ids(&s, "<|channel|>final<|message|>hi", &n);
    CHECK(ids && ids[0] == tok_find(s.tok, "<|channel|>"));
    free(ids);
    fake_server_free(&s);
}
