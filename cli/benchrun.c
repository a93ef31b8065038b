/* benchrun.c: the child processes of `remat bench` (cli/bench.c). Each
 * point runs as `remat train ... --report FILE` in its own process, so its
 * peak RSS (wait4's maxrss) is its own. A child:
 *  - works in the bench's private temporary folder (its working directory,
 *    report and stderr), so nothing it writes lands among the user's files
 *    (an interrupted `remat train` without --save saves
 *    ./remat-interrupted.safetensors: here, into the folder);
 *  - runs in a process group of its own, so a terminal's Ctrl-C reaches the
 *    parent only, which then kills the child (SIGKILL) and cleans up;
 *  - dies with the parent (PR_SET_PDEATHSIG): it never runs on orphaned. */
#define _DEFAULT_SOURCE /* wait4, mkdtemp */
#include "bench.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

int bench_tmp_make(bench_tmp *t) {
    const char *base = getenv("TMPDIR");
    struct stat st;
    if (!base || !*base || stat(base, &st) != 0 || !S_ISDIR(st.st_mode)) base = "/tmp";
    if (snprintf(t->dir, sizeof t->dir, "%s/remat_bench_XXXXXX", base) >= (int)sizeof t->dir)
        snprintf(t->dir, sizeof t->dir, "/tmp/remat_bench_XXXXXX");
    if (!mkdtemp(t->dir)) return cli_fail(1, "cannot create a temporary folder in '%s' for the children: %s", base,
                                          strerror(errno));
    snprintf(t->report, sizeof t->report, "%s/report.json", t->dir);
    snprintf(t->err, sizeof t->err, "%s/stderr.txt", t->dir);
    return 0;
}

void bench_tmp_remove(const bench_tmp *t) {
    DIR *d = opendir(t->dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        char p[sizeof t->dir + 300];
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", t->dir, e->d_name);
        unlink(p); /* a child writes files only (its interrupt file, its temporaries) */
    }
    if (d) closedir(d);
    rmdir(t->dir);
}

/* In the child, before exec: its own group, death with the parent, its
 * folder, no terminal input, stdout discarded, stderr to a file. */
static void child_setup(const bench_tmp *t, pid_t parent) {
    setpgid(0, 0);
#ifdef __linux__
    prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
    if (getppid() != parent) _exit(127); /* the parent died before prctl */
    int in = open("/dev/null", O_RDONLY), out = open("/dev/null", O_WRONLY);
    int err = open(t->err, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (in >= 0) dup2(in, 0);
    if (out >= 0) dup2(out, 1);
    if (err >= 0) dup2(err, 2);
    if (chdir(t->dir) != 0) _exit(127);
}

/* The first line of the child's stderr, or its exit status, into r->error. */
static void child_error(const bench_tmp *t, int status, bench_run *r) {
    char *text = NULL;
    r->error[0] = 0;
    if (rm_read_file(t->err, 1 << 20, &text, NULL, NULL, 0) == RM_OK) {
        const char *line = text;
        while (*line == '\n') line++;
        if (!strncmp(line, "remat: error: ", 14)) line += 14; /* the table says whose error it is */
        snprintf(r->error, sizeof r->error, "%.*s", (int)strcspn(line, "\n"), line);
        free(text);
    }
    if (!r->error[0]) {
        if (WIFSIGNALED(status)) snprintf(r->error, sizeof r->error, "the child was killed by signal %d", WTERMSIG(status));
        else snprintf(r->error, sizeof r->error, "the child exited with status %d", WEXITSTATUS(status));
    }
}

int bench_run_child(char *const argv[], const bench_tmp *t, volatile sig_atomic_t *stop, bench_run *r) {
    unlink(t->report); /* a report is this child's or none */
    fflush(NULL);
    pid_t parent = getpid(), pid = fork();
    if (pid < 0) return snprintf(r->error, sizeof r->error, "fork failed: %s", strerror(errno)), 1;
    if (pid == 0) {
        child_setup(t, parent);
        execv(argv[0], argv);
        _exit(127);
    }
    setpgid(pid, pid); /* also here: no window in which a signal to the group misses it */
    int status = 0, killed = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    for (;;) {
        if (*stop && !killed) killed = 1, kill(-pid, SIGKILL), kill(pid, SIGKILL);
        if (wait4(pid, &status, 0, &ru) >= 0 || errno != EINTR) break;
    }
    if (killed || *stop) return -1;
    r->peak_rss = (size_t)ru.ru_maxrss * 1024; /* Linux: KiB */
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return child_error(t, status, r), 1;
    return bench_read_report(t->report, r);
}

static double json_num(const cJSON *r, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* A byte count from the report: finite, >= 0 and below 2^60, else 0. */
static size_t json_bytes(const cJSON *r, const char *key) {
    double v = json_num(r, key);
    return v >= 0 && v < 1152921504606846976.0 ? (size_t)v : 0;
}

int bench_read_report(const char *path, bench_run *r) {
    char *text = NULL, err[200];
    if (rm_read_file(path, 1 << 20, &text, NULL, err, sizeof err) != RM_OK)
        return snprintf(r->error, sizeof r->error, "no report from the child: %s", err), 1;
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!j) return snprintf(r->error, sizeof r->error, "the child's report is not JSON"), 1;
    r->planned = json_bytes(j, "activation_bytes_planned");
    r->measured = json_bytes(j, "activation_bytes_measured");
    r->median = json_num(j, "step_ms_median");
    r->min = json_num(j, "step_ms_min");
    r->max = json_num(j, "step_ms_max");
    r->predicted = json_num(j, "predicted_overhead");
    cJSON_Delete(j);
    return 0;
}
