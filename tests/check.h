/* check.h: the tiny test harness of remat's C tests.
 * CHECK(cond, fmt, ...) counts a pass or prints the failure; each test
 * program ends with `return check_done("name");`, which prints
 * "name: N passed, N failed" and returns nonzero on any failure. */
#ifndef REMAT_CHECK_H
#define REMAT_CHECK_H
#include <stdio.h>
#include <stdlib.h>

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

/* A fresh folder /tmp/remat_<name>.XXXXXX for a test's files, its path in
 * dir (cap >= 64); 0 on success. check_rmdir removes it and what it holds. */
static inline int check_tmpdir(char *dir, size_t cap, const char *name) {
    snprintf(dir, cap, "/tmp/remat_%s.XXXXXX", name);
    if (mkdtemp(dir)) return 0;
    perror("mkdtemp");
    return 1;
}

static inline void check_rmdir(const char *dir) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

static inline int check_done(const char *name) {
    printf("%s: %d passed, %d failed\n", name, check_pass_count, check_fail_count);
    return check_fail_count ? 1 : 0;
}
#endif
