/* test_scratch.c: the scratch file and its I/O queue (issue 20): an
 * anonymous file (nothing in the directory, during the run or after a kill
 * -9), tmpfs refused, O_DIRECT transfers round-trip through the queue
 * (io_uring, and the I/O thread: REMAT_NO_URING) with its checksums, an injected full disk, I/O error and changed file reported,
 * a reservation too large for the disk refused naming the directory and
 * the bytes, and the bandwidth probe. */
#define _GNU_SOURCE
#include "check.h"
#include "scratch_dir.h"
#include "util/scratch.h"
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static unsigned char *aligned(size_t n) {
    void *p = NULL;
    return posix_memalign(&p, RM_PAGE_ALIGN, n) == 0 ? p : NULL;
}

static void test_refused(void) {
    char err[512];
    rm_scratch sc;
    if (!scratch_dir_on_disk("/dev/shm")) {
        rm_status rc = rm_scratch_open(&sc, "/dev/shm", err, sizeof err);
        CHECK(rc == RM_ERR_ARG && strstr(err, "tmpfs") && strstr(err, "/dev/shm"), "tmpfs refused: %d %s", rc, err);
    } else {
        printf("skipped: /dev/shm is not tmpfs here\n");
    }
    CHECK(rm_scratch_open(&sc, "/nonexistent/dir", err, sizeof err) == RM_ERR_ARG && strstr(err, "/nonexistent/dir"),
          "a missing dir: %s", err);
    CHECK(rm_scratch_open(&sc, "/etc/passwd", err, sizeof err) == RM_ERR_ARG && strstr(err, "not a directory"),
          "a file: %s", err);
}

/* Writes and reads through the queue: bytes back as written, in order. */
static void test_roundtrip(const char *dir) {
    char err[512];
    rm_scratch sc;
    rm_status rc = rm_scratch_open(&sc, dir, err, sizeof err);
    CHECK(rc == RM_OK, "open: %s", err);
    if (rc != RM_OK) return;
    CHECK(scratch_dir_entries(dir) == 0, "the scratch file has no name in %s", dir);
    printf("scratch file in %s: O_DIRECT %s, %s\n", dir, sc.direct ? "yes" : "no", sc.tmpfile ? "O_TMPFILE" : "unlinked");
    const size_t n = 3 * RM_PAGE_ALIGN;
    CHECK(rm_scratch_reserve(&sc, 8 * n, err, sizeof err) == RM_OK, "reserve: %s", err);
    unsigned char *a = aligned(n), *b = aligned(n), *c = aligned(n);
    for (size_t i = 0; i < n; i++) a[i] = (unsigned char)(i * 7 + 1), b[i] = (unsigned char)(i * 13 + 5);
    rm_ioq q;
    CHECK(rm_ioq_start(&q, &sc, 4, 2, 1) == RM_OK, "queue");
    q.req[0] = (rm_io_req){.buf = a, .bytes = n, .off = 0, .write = 1, .region = 0};
    q.req[1] = (rm_io_req){.buf = b, .bytes = n, .off = n, .write = 1, .region = 1};
    q.req[2] = (rm_io_req){.buf = c, .bytes = n, .off = n, .write = 0, .region = 1};
    rm_ioq_submit(&q, 0);
    rm_ioq_submit(&q, 1); /* two in flight (io_uring: at once) */
    CHECK(rm_ioq_wait(&q, 1) == 0 && rm_ioq_wait(&q, 0) == 0, "writes");
    rm_ioq_submit(&q, 2); /* a read of what a write left: after its wait, as the program orders them */
    CHECK(rm_ioq_wait(&q, 2) == 0 && memcmp(b, c, n) == 0, "read back what was written");
    CHECK(q.req[0].done && q.req[1].done && q.req[1].t1 <= q.req[2].t0 && q.req[2].t0 <= q.req[2].t1, "times");
    CHECK(q.bytes_out == 2 * n && q.bytes_in == n && q.busy_ms > 0, "stats %llu %llu", (unsigned long long)q.bytes_out,
          (unsigned long long)q.bytes_in);
    printf("queue: %s\n", q.uring ? "io_uring" : "I/O thread");
    q.req[3] = (rm_io_req){.buf = c, .bytes = n, .off = 0, .write = 0, .region = 0};
    rm_ioq_submit(&q, 3);
    CHECK(rm_ioq_wait(&q, 3) == 0 && memcmp(a, c, n) == 0, "region 0");
    rm_ioq_stop(&q);
    double w = 0, r = 0;
    unsigned char *big = aligned(4 << 20);
    CHECK(rm_scratch_probe(&sc, big, 4 << 20, 16 << 20, &w, &r, err, sizeof err) == RM_OK && w > 0 && r > 0,
          "probe: %s", err);
    printf("probe: write %.0f MB/s, read %.0f MB/s\n", w / 1e6, r / 1e6);
    free(big);
    rm_status big_rc = rm_scratch_reserve(&sc, (uint64_t)1 << 60, err, sizeof err);
    CHECK(big_rc == RM_ERR_IO && strstr(err, dir) && strstr(err, "1152921504606846976 bytes"), "too large: %s", err);
    rm_scratch_close(&sc);
    CHECK(scratch_dir_entries(dir) == 0, "nothing left in %s", dir);
    free(a), free(b), free(c);
}

/* REMAT_SCRATCH_FAULT: a full disk, an I/O error, a changed file. */
static void test_faults(const char *dir) {
    const char *kinds[3] = {"enospc:2", "eio:1", "corrupt:1"};
    const int want[3] = {ENOSPC, EIO, RM_IO_CHANGED};
    for (int k = 0; k < 3; k++) {
        char err[512];
        rm_scratch sc;
        setenv("REMAT_SCRATCH_FAULT", kinds[k], 1);
        rm_status rc = rm_scratch_open(&sc, dir, err, sizeof err);
        unsetenv("REMAT_SCRATCH_FAULT");
        if (rc != RM_OK) {
            CHECK(0, "open: %s", err);
            continue;
        }
        const size_t n = 2 * RM_PAGE_ALIGN;
        unsigned char *a = aligned(n), *b = aligned(n);
        memset(a, 3, n);
        rm_ioq q;
        rm_ioq_start(&q, &sc, 3, 1, 1);
        q.req[0] = (rm_io_req){.buf = a, .bytes = n, .off = 0, .write = 1, .region = 0};
        q.req[1] = (rm_io_req){.buf = a, .bytes = n, .off = n, .write = 1, .region = -1};
        q.req[2] = (rm_io_req){.buf = b, .bytes = n, .off = 0, .write = 0, .region = 0};
        int e[3];
        for (int i = 0; i < 3; i++) rm_ioq_submit(&q, i), e[i] = rm_ioq_wait(&q, i); /* each after the one before */
        int got = e[0] ? e[0] : e[1] ? e[1] : e[2];
        CHECK(got == want[k], "%s: got %d, want %d", kinds[k], got, want[k]);
        rm_ioq_stop(&q);
        rm_scratch_close(&sc);
        free(a), free(b);
    }
}

/* A process killed with SIGKILL while its scratch file is open and written
 * leaves nothing in the directory. */
static void test_kill9(const char *dir) {
    int fds[2];
    if (pipe(fds) != 0) return;
    pid_t pid = fork();
    if (pid == 0) {
        char err[512];
        rm_scratch sc;
        close(fds[0]);
        if (rm_scratch_open(&sc, dir, err, sizeof err) != RM_OK || rm_scratch_reserve(&sc, 1 << 20, err, sizeof err) != RM_OK)
            _exit(3);
        unsigned char *a = aligned(RM_PAGE_ALIGN);
        memset(a, 1, RM_PAGE_ALIGN);
        rm_scratch_write(&sc, a, RM_PAGE_ALIGN, 0);
        if (write(fds[1], "k", 1) != 1) _exit(4);
        for (;;) pause();
    }
    close(fds[1]);
    char c = 0;
    CHECK(read(fds[0], &c, 1) == 1, "child ready");
    close(fds[0]);
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "child killed");
    CHECK(scratch_dir_entries(dir) == 0, "nothing left in %s after kill -9", dir);
}

int main(void) {
    char dir[200];
    if (scratch_tmpdir(dir, sizeof dir, "scratch") != 0) return 1;
    test_refused();
    for (int thread = 0; thread < 2; thread++) { /* io_uring where it works, then the I/O thread */
        if (thread) setenv("REMAT_NO_URING", "1", 1);
        test_roundtrip(dir);
        test_faults(dir);
    }
    unsetenv("REMAT_NO_URING");
    test_kill9(dir);
    check_rmdir(dir);
    return check_done("test_scratch");
}
