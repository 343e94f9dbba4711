/* test_main.c - runs registered tests, each in a forked child process.
 * Prints one line per test and the closing "N passed, N failed" line. */
#include "base/log.h"
#include "test.h"

#include <fnmatch.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/lsan_interface.h>
#endif

#define MAX_TESTS 1024

typedef struct {
    const char *name, *file;
    test_fn fn;
} test_entry;

static test_entry tests[MAX_TESTS];
static int n_tests;
static int failures; /* in the child: failed checks of the running test */

void test_register(const char *name, test_fn fn, const char *file) {
    if (n_tests == MAX_TESTS) {
        fprintf(stderr, "test registry full (%d)\n", MAX_TESTS);
        exit(2);
    }
    tests[n_tests++] = (test_entry){name, file, fn};
}

void test_fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "    %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    failures++;
}

int test_failures(void) { return failures; }

const char *test_data(const char *rel) {
    static char path[4096];
    const char *dir = getenv("TEST_DATA_DIR");
    snprintf(path, sizeof path, "%s/%s", dir ? dir : "tests/data/gen", rel);
    return path;
}

const char *test_real_model(void) {
    const char *m = getenv("STRATA_MODEL");
    return (m && *m && access(m, R_OK) == 0) ? m : NULL;
}

static int selected(const char *name, int argc, char **argv) {
    if (argc < 2) return 1;
    for (int i = 1; i < argc; i++)
        if (fnmatch(argv[i], name, 0) == 0) return 1;
    return 0;
}

const char *test_gemma3_model(void) {
    const char *m = getenv("STRATA_GEMMA3_MODEL");
    return (m && *m && access(m, R_OK) == 0) ? m : NULL;
}

/* Waits for the test's process; with STRATA_TEST_TIMEOUT_S=N (the GPU
 * machine's script: a hung kernel must not eat its lease) one running
 * past N seconds is killed and fails. 1 when it was. (A timer in the
 * parent: tests use alarm() themselves.) */
static int wait_child(pid_t pid, int *status) {
    const char *t = getenv("STRATA_TEST_TIMEOUT_S");
    double limit = t ? atof(t) : 0, waited = 0;
    if (limit <= 0) return waitpid(pid, status, 0) < 0;
    while (waitpid(pid, status, WNOHANG) == 0) {
        if (waited >= limit) {
            kill(pid, SIGKILL);
            waitpid(pid, status, 0);
            fprintf(stderr, "    timed out after %.0f s (STRATA_TEST_TIMEOUT_S)\n", limit);
            return 1;
        }
        usleep(20000);
        waited += 0.02;
    }
    return 0;
}

/* 0 pass, 1 fail, 2 skipped (real-model test without a model). */
static int run_one(const test_entry *t) {
    if (strncmp(t->name, "real_", 5) == 0 && !test_real_model()) return 2;
    if (strncmp(t->name, "gpu_", 4) == 0 && !getenv("STRATA_TEST_GPU")) {
        printf("     (needs a CUDA GPU: `make test-gpu` on a GPU machine sets STRATA_TEST_GPU=1)\n");
        return 2;
    }
    if (strncmp(t->name, "gemma3_", 7) == 0 && !test_gemma3_model()) {
        printf("     (no Gemma 3 model: set STRATA_GEMMA3_MODEL, `make model-gemma3` fetches it)\n");
        return 2;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        failures = 0;
        t->fn();
        fflush(NULL);
#ifdef __SANITIZE_ADDRESS__
        /* _exit skips LeakSanitizer's check at exit: run it here, so a test
         * that leaks fails on the sanitizer build (make test-asan). */
        if (__lsan_do_recoverable_leak_check()) {
            fprintf(stderr, "    leaked memory (LeakSanitizer report above)\n");
            failures++;
        }
#endif
        _exit(failures ? 1 : 0);
    }
    int status = 0;
    if (wait_child(pid, &status)) return 1;
    if (WIFSIGNALED(status)) {
        fprintf(stderr, "    killed by signal %d\n", WTERMSIG(status));
        return 1;
    }
    return WEXITSTATUS(status) ? 1 : 0;
}

int main(int argc, char **argv) {
    int passed = 0, failed = 0, skipped = 0;
    g_log_tag = "expected"; /* the server's warnings here are provoked on purpose (damaged files, full disks) */
    for (int i = 0; i < n_tests; i++) {
        if (!selected(tests[i].name, argc, argv)) continue;
        int r = run_one(&tests[i]);
        const char *word = r == 0 ? "ok" : r == 1 ? "FAIL" : "skip";
        printf("%-4s %s\n", word, tests[i].name);
        fflush(stdout);
        if (r == 0) passed++;
        else if (r == 1) failed++;
        else skipped++;
    }
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}
