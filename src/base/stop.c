/* stop.c - the stop flag and its signal handlers (see stop.h). */
#include "base/stop.h"

#include <unistd.h>

volatile sig_atomic_t g_stop;

static void on_signal(int sig) { g_stop = sig; }

void stop_on_signals(void) {
    signal(SIGPIPE, SIG_IGN);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
}

int stop_wait(void) {
    while (!g_stop) pause();
    return (int)g_stop;
}
