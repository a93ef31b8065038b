/* waitpolicy.c: how idle OpenMP threads wait, chosen before libgomp starts.
 *
 * libgomp's idle threads spin up to GOMP_SPINCOUNT pause loops (300000 by
 * default, ~3 ms here) before they sleep. A training step opens ~520
 * parallel regions (GPT shape A, 2 threads). On a machine shared with other
 * processes, a thread spinning at a barrier holds a core its preempted
 * partner needs: there the step took 0.68x as long with a spin of 10000
 * (~0.1 ms), 0.64x with 1000 (docs/PERFORMANCE.md, "Kernel work, issue
 * 15"); 10000 still covers the short gaps between the regions of a step
 * on an idle machine, where spinning costs nothing. libgomp reads the
 * variable once, as it loads, before main, and libc's start-up discards an
 * earlier setenv; so the command sets it and runs itself again, once. A
 * user's OMP_WAIT_POLICY or GOMP_SPINCOUNT wins, and then nothing re-runs. */
#include "args.h"
#include <stdlib.h>
#include <unistd.h>

void cli_wait_policy(char **argv) {
#if defined(__linux__) && defined(_OPENMP)
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
    if (setenv("GOMP_SPINCOUNT", "10000", 0) != 0) return;
    execv("/proc/self/exe", argv); /* returns only on failure: go on with libgomp's default */
#else
    (void)argv;
#endif
}
