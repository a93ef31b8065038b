/* bench_clock.h: the monotonic clock the C benchmarks time with. */
#ifndef BENCH_CLOCK_H
#define BENCH_CLOCK_H
#include <time.h>

static inline double bench_now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}
#endif
