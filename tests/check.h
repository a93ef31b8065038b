/* check.h: the tiny test harness of remat's C tests.
 * CHECK(cond, fmt, ...) counts a pass or prints the failure; each test
 * program ends with `return check_done("name");`, which prints
 * "name: N passed, N failed" and returns nonzero on any failure. */
#ifndef REMAT_CHECK_H
#define REMAT_CHECK_H
#include <stdio.h>

static int check_pass_count, check_fail_count;

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (cond) {                                                        \
            check_pass_count++;                                            \
        } else {                                                           \
            check_fail_count++;                                            \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);           \
            fprintf(stderr, __VA_ARGS__);                                  \
            fputc('\n', stderr);                                           \
        }                                                                  \
    } while (0)

static inline int check_done(const char *name) {
    printf("%s: %d passed, %d failed\n", name, check_pass_count, check_fail_count);
    return check_fail_count ? 1 : 0;
}
#endif
