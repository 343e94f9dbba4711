/* stop.c - waiting for a stop signal (see stop.h). sigwait on signals
 * every thread blocks, not a handler and pause(): pause() in the main
 * thread misses a signal that lands between its flag check and the call,
 * or on another thread. */
#include "base/stop.h"

#include <signal.h>

static void stop_set(sigset_t *set) {
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
}

void stop_on_signals(void) {
    signal(SIGPIPE, SIG_IGN);
    sigset_t set;
    stop_set(&set);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
}

int stop_wait(void) {
    sigset_t set;
    stop_set(&set);
    int sig = 0;
    while (sigwait(&set, &sig) != 0) {}
    pthread_sigmask(SIG_UNBLOCK, &set, NULL); /* only this thread takes the next one */
    return sig;
}
