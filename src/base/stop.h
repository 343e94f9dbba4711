/* stop.h - how the server waits for SIGINT/SIGTERM. */
#ifndef STRATA_BASE_STOP_H
#define STRATA_BASE_STOP_H

/* Call before any thread starts: SIGINT and SIGTERM are blocked in this
 * thread and so in every thread it starts (they stay pending for
 * stop_wait, whichever thread the kernel would have picked), and SIGPIPE
 * is ignored (a client that goes away is an error on its socket, not the
 * end of the process). */
void stop_on_signals(void);
/* Sleeps until SIGINT or SIGTERM arrives; returns it. A second one after
 * that ends the process at once (the default action): a shutdown that
 * hangs can still be interrupted. */
int stop_wait(void);

#endif
