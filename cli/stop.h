/* stop.h: every signal that would end the process (SIGINT, SIGTERM,
 * SIGHUP, SIGUSR1, SIGUSR2, SIGQUIT, SIGALRM, SIGVTALRM, SIGXCPU, SIGXFSZ,
 * SIGPIPE, SIGPWR) as a request to stop (exit 128 + the signal), for the
 * commands that stop cleanly (train saves its state; bench writes the points
 * measured so far). The handler only records the signal; the command looks
 * at cli_stop_signal where it can stop. main installs it first thing, so a
 * signal during the start-up (MPI_Init) is a request too; the commands that
 * do not stop cleanly (plan, sample, inspect, export) call
 * cli_stop_default. A second SIGINT, SIGTERM, SIGHUP or SIGQUIT a second or
 * more after the first kills at once (a user who insists); one that follows
 * within the second is the same request (`timeout -s TERM` and a kill of a
 * process group deliver the signal twice); the others repeat on their own
 * (a timer, a CPU limit) and never kill. SIGHUP and SIGPIPE stay ignored
 * when they were (nohup). The signals of a crash (SIGSEGV, SIGABRT, ...)
 * print that nothing more was saved, then end the process as they would. */
#ifndef REMAT_CLI_STOP_H
#define REMAT_CLI_STOP_H
#include <signal.h>

extern volatile sig_atomic_t cli_stop_signal; /* the first stop signal received; 0 before */
extern volatile sig_atomic_t cli_stop_by_parent; /* sent by the parent process (mpirun) */
/* Installs the handlers (restart: SA_RESTART, so that reads and writes go
 * on; without it a blocking wait returns EINTR). Again: only the flag
 * changes; a request already received stays. */
void cli_stop_catch(int restart);
/* Restores what was there before the first cli_stop_catch. */
void cli_stop_release(void);
/* cli_stop_release, then a signal received before is delivered with its
 * default action (for the commands without a clean stop). */
void cli_stop_default(void);
/* "SIGINT", "SIGTERM", ... for messages. */
const char *cli_stop_name(int sig);
#endif
