/* stop.c - waiting for a stop signal (see stop.h): sigwait on signals
 * every thread blocks, not a handler and pause(), which misses a signal
 * that lands between its flag check and the call. */
#include "base/stop.h"

#include <signal.h>

static void stop_set(sigset_t *set) {
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
}

/* The default action, also where SIGINT came ignored (a shell's
 * background job): blocked, it waits for sigwait; unblocked, it ends the
 * process. */
static void stop_default(void) {
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
}

void stop_on_signals(void) {
    signal(SIGPIPE, SIG_IGN);
    sigset_t set;
    stop_set(&set);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    stop_default();
}

int stop_wait(void) {
    sigset_t set;
    stop_set(&set);
    int sig = 0;
    while (sigwait(&set, &sig) != 0) {}
    stop_default(); /* the next one ends the process: only this thread takes it */
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    return sig;
}
