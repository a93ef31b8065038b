/* stop.h: SIGINT, SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 as a request to
 * stop (exit 128 + the signal), for the commands that
 * stop cleanly (train saves its state; bench writes the points measured so
 * far). The handler only records the signal; the command looks at
 * cli_stop_signal where it can stop. A second signal a second or more after
 * the first kills at once (a user who insists); one that follows within the
 * second is the same request: `timeout -s TERM` and a kill of a process
 * group deliver the signal twice. */
#ifndef REMAT_CLI_STOP_H
#define REMAT_CLI_STOP_H
#include <signal.h>

extern volatile sig_atomic_t cli_stop_signal; /* the first stop signal received; 0 before */
extern volatile sig_atomic_t cli_stop_by_parent; /* sent by the parent process (mpirun) */
/* Installs the handler for the stop signals (restart: SA_RESTART, so that
 * reads and writes go on; without it a blocking wait returns EINTR). */
void cli_stop_catch(int restart);
/* Restores what was there before cli_stop_catch. */
void cli_stop_release(void);
/* "SIGINT", "SIGTERM", ... for messages. */
const char *cli_stop_name(int sig);
#endif
