/* stop.c: the signals that end a process, as a request to stop (stop.h). */
#include "stop.h"
#include <string.h>
#include <time.h>
#include <unistd.h>

volatile sig_atomic_t cli_stop_signal, cli_stop_by_parent;
static struct timespec first; /* when the request came */
/* The signals whose default is to end the process, and that a program may
 * catch: each asks to stop. Ctrl-C, kill's default, a closed terminal, the
 * two a batch system or mpirun forwards to every rank (Slurm's
 * --signal=USR1@T; mpirun forwards SIGUSR1/2 without ending the job
 * itself, so the ranks' exit status is the job's), Ctrl-\, a timer
 * (`timeout -s ALRM`), the CPU and file-size limits of ulimit -t/-f (SIGXCPU
 * comes before the SIGKILL of the hard limit), a power failure, and a
 * closed pipe on stdout or stderr (`remat train | head`: the run saves
 * instead of dying at its next progress line). */
static const int stop_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGQUIT, SIGALRM, SIGVTALRM,
                                   SIGXCPU, SIGXFSZ, SIGPIPE,
#ifdef SIGPWR
                                   SIGPWR,
#endif
};
enum { N_STOP = sizeof stop_signals / sizeof *stop_signals };
/* The signals of a crash (or of a kill that imitates one): remat cannot go
 * on, but says that nothing more is saved before it ends as the signal
 * says. Not under AddressSanitizer, whose own handler reports the crash. */
static const int fatal_signals[] = {
#if !defined(__SANITIZE_ADDRESS__)
    SIGSEGV, SIGBUS, SIGFPE, SIGILL,
#endif
    SIGABRT, SIGSYS, SIGTRAP};
enum { N_FATAL = sizeof fatal_signals / sizeof *fatal_signals };
static struct sigaction old[N_STOP], old_fatal[N_FATAL];
static int installed, honour_ignore[N_STOP];

const char *cli_stop_name(int sig) {
    static const struct { int sig; const char *name; } names[] = {
        {SIGINT, "SIGINT"},   {SIGTERM, "SIGTERM"}, {SIGHUP, "SIGHUP"},       {SIGUSR1, "SIGUSR1"},
        {SIGUSR2, "SIGUSR2"}, {SIGQUIT, "SIGQUIT"}, {SIGALRM, "SIGALRM"},     {SIGVTALRM, "SIGVTALRM"},
        {SIGXCPU, "SIGXCPU"}, {SIGXFSZ, "SIGXFSZ"}, {SIGPIPE, "SIGPIPE"},
#ifdef SIGPWR
        {SIGPWR, "SIGPWR"},
#endif
    };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (names[i].sig == sig) return names[i].name;
    return "a signal";
}

/* A person who sends Ctrl-C, kill, Ctrl-\ or closes the terminal again a
 * second later insists; a timer, a limit or a pipe repeats on its own. */
static int insists(int sig) { return sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT; }

static void on_stop(int sig, siginfo_t *si, void *ctx) {
    (void)ctx;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now); /* async-signal-safe, as signal and raise are */
    if (cli_stop_signal) {
        long ms = (long)(now.tv_sec - first.tv_sec) * 1000 + (now.tv_nsec - first.tv_nsec) / 1000000;
        if (ms >= 1000 && insists(sig)) { /* asked again: stop now (a file being written stays whole) */
            signal(sig, SIG_DFL);
            raise(sig); /* blocked in this handler: delivered, with the default action, as it returns */
        }
        return;
    }
    first = now;
    cli_stop_signal = sig;
    cli_stop_by_parent = si && si->si_pid == getppid(); /* under mpirun: mpirun forwarding its own signal */
}

/* One write, async-signal-safe: which signal, and that nothing more is saved. */
static void on_fatal(int sig) {
    static const struct { int sig; const char *msg; } said[] = {
        {SIGSEGV, "remat: SIGSEGV"}, {SIGBUS, "remat: SIGBUS"}, {SIGFPE, "remat: SIGFPE"}, {SIGILL, "remat: SIGILL"},
        {SIGABRT, "remat: SIGABRT"}, {SIGSYS, "remat: SIGSYS"}, {SIGTRAP, "remat: SIGTRAP"}};
    static const char tail[] = ": stopped at once; nothing more was saved (every file remat wrote before is whole: "
                               "writes go to a temporary file, renamed)\n";
    for (size_t i = 0; i < sizeof said / sizeof *said; i++)
        if (said[i].sig == sig) {
            ssize_t w = write(2, said[i].msg, strlen(said[i].msg));
            w = write(2, tail, sizeof tail - 1);
            (void)w;
        }
    signal(sig, SIG_DFL);
    raise(sig);
}

void cli_stop_catch(int restart) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_stop;
    sa.sa_flags = SA_SIGINFO | (restart ? SA_RESTART : 0);
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < N_STOP; i++) sigaddset(&sa.sa_mask, stop_signals[i]);
    for (int i = 0; i < N_STOP; i++) {
        struct sigaction was;
        sigaction(stop_signals[i], NULL, &was);
        if (!installed) {
            old[i] = was;
            /* nohup's SIGHUP and an ignored SIGPIPE stay ignored: that is what they were asked to be */
            honour_ignore[i] = was.sa_handler == SIG_IGN && (stop_signals[i] == SIGHUP || stop_signals[i] == SIGPIPE);
        }
        if (!honour_ignore[i]) sigaction(stop_signals[i], &sa, NULL);
    }
    if (!installed) {
        struct sigaction fa;
        memset(&fa, 0, sizeof fa);
        fa.sa_handler = on_fatal;
        fa.sa_flags = SA_RESETHAND | SA_NODEFER;
        sigemptyset(&fa.sa_mask);
        for (int i = 0; i < N_FATAL; i++) sigaction(fatal_signals[i], &fa, &old_fatal[i]);
    }
    installed = 1;
}

void cli_stop_release(void) {
    if (!installed) return;
    for (int i = 0; i < N_STOP; i++) sigaction(stop_signals[i], &old[i], NULL);
    for (int i = 0; i < N_FATAL; i++) sigaction(fatal_signals[i], &old_fatal[i], NULL);
    installed = 0;
}

void cli_stop_default(void) {
    cli_stop_release();
    const int sig = cli_stop_signal;
    if (sig) raise(sig); /* a signal that came before: its default action now, as if no handler had been there */
}
