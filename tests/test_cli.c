/* test_cli.c - the strata binary as a user meets it: bad input gives one
 * clear line on stderr and a non-zero exit, never a crash; good input
 * runs. Runs ./strata (STRATA_BIN overrides) in a child shell. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"

typedef struct cli_result {
    int status; /* exit code, or 128 + signal */
    char out[8192], err[8192];
} cli_result;

static void slurp(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
    buf[n] = 0;
    if (f) fclose(f);
}

/* Runs `strata ARGS` (ARGS is shell text) and captures its output. */
static void run_cli(cli_result *r, const char *args) {
    const char *bin = getenv("STRATA_BIN") ? getenv("STRATA_BIN") : "./strata";
    char out[] = "/tmp/strata-cli-outXXXXXX", err[] = "/tmp/strata-cli-errXXXXXX";
    int fo = mkstemp(out), fe = mkstemp(err);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s >%s 2>%s </dev/null", bin, args, out, err);
    int st = system(cmd);
    r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    slurp(out, r->out, sizeof r->out);
    slurp(err, r->err, sizeof r->err);
    close(fo), close(fe);
    unlink(out), unlink(err);
}

/* A clean failure: non-zero exit below 128 (no signal; the shell maps
 * signals to 128+), a message containing `want`, on one line. */
static void expect_error(const char *args, const char *want) {
    cli_result r;
    run_cli(&r, args);
    CHECK_MSG(r.status != 0 && r.status < 128, "strata %s: exit %d", args, r.status);
    CHECK_MSG(strstr(r.err, want) != NULL, "strata %s: stderr '%s' lacks '%s'", args, r.err, want);
    char *nl = strchr(r.err, '\n');
    CHECK_MSG(nl && nl[1] == 0, "strata %s: error is not one line: '%s'", args, r.err);
}

TEST(cli_missing_model_file) {
    expect_error("run -m /nonexistent.gguf -p hi", "cannot open model file");
}

TEST(cli_garbage_and_truncated_model) {
    char args[1024];
    snprintf(args, sizeof args, "run -m %s -p hi", test_data("bad/garbage.gguf"));
    expect_error(args, "bad magic");
    snprintf(args, sizeof args, "run -m %s -p hi", test_data("bad/trunc-data.gguf"));
    expect_error(args, "truncated");
    snprintf(args, sizeof args, "model info %s", test_data("bad/trunc-tensor-info.gguf"));
    expect_error(args, "truncated");
}

TEST(cli_unsupported_arch_and_type) {
    char args[1024];
    snprintf(args, sizeof args, "run -m %s -p hi", test_data("bad/unknown-arch.gguf"));
    expect_error(args, "unsupported architecture");
    snprintf(args, sizeof args, "bench -m %s -r 1", test_data("bad/unsupported-type-iq2_xxs.gguf"));
    expect_error(args, "unsupported tensor type IQ2_XXS");
}

TEST(cli_invalid_flags) {
    expect_error("run -m x.gguf -p hi --temp abc", "--temp: 'abc' is not a number");
    expect_error("run -m x.gguf -p hi -n -5", "out of range");
    expect_error("run -m x.gguf -p hi --frobnicate", "unknown flag '--frobnicate'");
    expect_error("run -p hi", "-m MODEL is required");
    expect_error("run -m x.gguf -p", "--prompt needs a value");
    expect_error("bench -m x.gguf -t 0", "out of range");
    expect_error("frob", "unknown command 'frob'");
}

TEST(cli_prompt_longer_than_context) {
    char args[1024];
    snprintf(args, sizeof args, "run -m %s -c 32 -n 4 -p \"%s\"", test_data("models/llama-q4_1.gguf"),
             "many words to exceed a tiny context window of thirty two tokens for sure, "
             "many words to exceed a tiny context window of thirty two tokens for sure");
    expect_error(args, "context is 32");
}

TEST(cli_run_and_info_on_synthetic_model) {
    char args[1024];
    cli_result r;
    snprintf(args, sizeof args, "run -m %s -p hello -n 8 --temp 0 --seed 1",
             test_data("models/qwen3-q5_1.gguf"));
    run_cli(&r, args);
    CHECK_MSG(r.status == 0, "exit %d: %s", r.status, r.err);
    CHECK(strstr(r.err, "decode:") != NULL);
    snprintf(args, sizeof args, "model info %s", test_data("models/qwen2-q5_0.gguf"));
    run_cli(&r, args);
    CHECK_MSG(r.status == 0, "exit %d: %s", r.status, r.err);
    CHECK(strstr(r.out, "architecture     qwen2") != NULL);
}

/* `strata run` on a generated model decodes, and `strata model info`
 * prints every line of want (NULL-terminated). */
static void run_and_info(const char *model, const char *const *want) {
    char args[1024];
    cli_result r;
    snprintf(args, sizeof args, "run -m %s -p hello -n 8 --temp 0", test_data(model));
    run_cli(&r, args);
    CHECK_MSG(r.status == 0, "exit %d: %s", r.status, r.err);
    CHECK(strstr(r.err, "decode:") != NULL);
    snprintf(args, sizeof args, "model info %s", test_data(model));
    run_cli(&r, args);
    CHECK_MSG(r.status == 0, "exit %d: %s", r.status, r.err);
    for (; *want; want++) CHECK_MSG(strstr(r.out, *want) != NULL, "%s: no '%s' in:\n%s", model, *want, r.out);
}

TEST(cli_run_and_info_on_qwen35) {
    static const char *const want[] = {
        "recurrent        2 gated delta-net layers (conv 4, 2 key / 4 value heads of 32), 2 attention", NULL};
    run_and_info("models/qwen35-f32.gguf", want);
}

/* qwen3moe-q4_k_m: 3 layers, 2 of 8 experts of 256 x 256 (x3 matrices)
 * per token. Active: per layer attention 196,608 + norms 640 + router
 * 2,048 + 2/8 of 1,572,864 expert weights; plus output 130,304, its norm
 * and one embedding row (256 each) = 1,908,352 of 5,577,344. */
TEST(cli_run_and_info_on_moe) {
    static const char *const q3[] = {"experts          2 of 8 per token, 256 wide (softmax, renormalised)\n",
                                     "active           1.91M of 5.58M parameters, ", NULL};
    static const char *const q35[] = {
        "experts          2 of 8 per token, 128 wide (softmax, renormalised), plus a shared expert", NULL};
    run_and_info("models/qwen3moe-q4_k_m.gguf", q3);
    run_and_info("models/qwen35moe-f32.gguf", q35);
}

TEST(cli_greedy_run_is_reproducible) {
    char args[1024];
    cli_result a, b;
    snprintf(args, sizeof args, "run -q -m %s -p 'once upon' -n 16 --temp 0.9 --seed 7",
             test_data("models/llama-q8_0.gguf"));
    run_cli(&a, args);
    run_cli(&b, args);
    CHECK(a.status == 0 && b.status == 0);
    CHECK_STR(a.out, b.out);
}
