/* stop.c: SIGINT and SIGTERM as a request to stop (stop.h). */
#include "stop.h"
#include <string.h>
#include <time.h>
#include <unistd.h>

volatile sig_atomic_t cli_stop_signal, cli_stop_by_parent;
static struct timespec first; /* when the request came */
/* The signals that ask to stop: Ctrl-C, kill's default, a closed terminal,
 * and the two a batch system or mpirun can forward to every rank (Slurm's
 * --signal=USR1@T before a time limit; mpirun forwards SIGUSR1/2 without
 * ending the job itself, so the ranks' exit status is the job's). */
static const int stop_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2};
enum { N_STOP = sizeof stop_signals / sizeof *stop_signals };
static struct sigaction old[N_STOP];

const char *cli_stop_name(int sig) {
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP" : sig == SIGUSR1 ? "SIGUSR1"
           : sig == SIGUSR2 ? "SIGUSR2" : "a signal";
}

static void on_stop(int sig, siginfo_t *si, void *ctx) {
    (void)ctx;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now); /* async-signal-safe, as signal and raise are */
    if (cli_stop_signal) {
        long ms = (long)(now.tv_sec - first.tv_sec) * 1000 + (now.tv_nsec - first.tv_nsec) / 1000000;
        if (ms >= 1000) { /* asked again: stop now, whatever is running (a file being written stays whole) */
            signal(sig, SIG_DFL);
            raise(sig); /* blocked in this handler: delivered, with the default action, as it returns */
        }
        return;
    }
    first = now;
    cli_stop_signal = sig;
    cli_stop_by_parent = si && si->si_pid == getppid(); /* under mpirun: mpirun forwarding its own signal */
}

void cli_stop_catch(int restart) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_stop;
    sa.sa_flags = SA_SIGINFO | (restart ? SA_RESTART : 0);
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < N_STOP; i++) sigaddset(&sa.sa_mask, stop_signals[i]);
    cli_stop_signal = 0, cli_stop_by_parent = 0;
    for (int i = 0; i < N_STOP; i++) sigaction(stop_signals[i], &sa, &old[i]);
}

void cli_stop_release(void) {
    for (int i = 0; i < N_STOP; i++) sigaction(stop_signals[i], &old[i], NULL);
}
