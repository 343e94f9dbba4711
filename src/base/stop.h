/* stop.h - the process's stop flag, set by SIGINT/SIGTERM (one of the
 * three globals STYLE.md allows, kept in base/). */
#ifndef STRATA_BASE_STOP_H
#define STRATA_BASE_STOP_H

#include <signal.h>

/* The signal that asked the process to stop, 0 until then. Written by the
 * signal handler only. */
extern volatile sig_atomic_t g_stop;

/* SIGINT and SIGTERM set g_stop; SIGPIPE is ignored (a client that goes
 * away is an error on its socket, not the end of the process). */
void stop_on_signals(void);
/* Sleeps until a stop signal arrives; returns it. */
int stop_wait(void);

#endif
