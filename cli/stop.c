/* stop.c: SIGINT and SIGTERM as a request to stop (stop.h). */
#include "stop.h"
#include <string.h>
#include <time.h>
#include <unistd.h>

volatile sig_atomic_t cli_stop_signal, cli_stop_by_parent;
static struct timespec first; /* when the request came */
static struct sigaction old_int, old_term;

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
    sigaddset(&sa.sa_mask, SIGINT);
    sigaddset(&sa.sa_mask, SIGTERM);
    cli_stop_signal = 0, cli_stop_by_parent = 0;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
}

void cli_stop_release(void) {
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
}
