/* test_outfile.c: rm_out, the writer every non-checkpoint file goes
 * through (issue 22, class 9): a FIFO, a device, a directory or a missing
 * folder is refused at once (no open, so no block); a committed write
 * replaces the target whole; an aborted or failed one leaves it as it was;
 * rm_out_check creates nothing; rm_chart_svg and rm_trace_write use it. */
#include "check.h"
#include "remat.h"

#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256];

static void path_in(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", dir, name); }

static int file_is(const char *path, const char *want) {
    char *text = NULL;
    int same = rm_read_file(path, 1 << 20, &text, NULL, NULL, 0) == RM_OK && strcmp(text, want) == 0;
    free(text);
    return same;
}

/* The folder holds exactly n entries (no temporary file left). */
static int entries(void) {
    char cmd[400], buf[32] = "";
    snprintf(cmd, sizeof cmd, "ls -A '%s' | wc -l", dir);
    FILE *p = popen(cmd, "r");
    if (p && !fgets(buf, sizeof buf, p)) buf[0] = 0;
    if (p) pclose(p);
    return atoi(buf);
}

static void test_refused(void) {
    char fifo[300], sub[300], missing[300], err[600];
    path_in(fifo, sizeof fifo, "fifo");
    path_in(sub, sizeof sub, "sub");
    path_in(missing, sizeof missing, "nodir/x.csv");
    CHECK(mkfifo(fifo, 0600) == 0 && mkdir(sub, 0700) == 0, "mkfifo/mkdir");
    alarm(20); /* a writer that blocks on the FIFO fails the test instead of hanging it */
    const char *bad[] = {fifo, "/dev/full", "/dev/null", sub, missing, ""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        rm_out *o = (rm_out *)1;
        err[0] = 0;
        CHECK(rm_out_open(bad[i], &o, err, sizeof err) == RM_ERR_IO && !o && err[0], "rm_out_open('%s'): %s", bad[i],
              err);
        CHECK(rm_out_check(bad[i], err, sizeof err) == RM_ERR_IO && err[0], "rm_out_check('%s'): %s", bad[i], err);
        rm_chart_point pt = {1, 1, "p", 0};
        rm_chart_series s = {"s", 0, RM_MARK_CIRCLE};
        rm_chart c = {"t", "", "x", "y", "", &s, 1, &pt, 1, 0};
        CHECK(rm_chart_svg(&c, bad[i], err, sizeof err) == RM_ERR_IO, "rm_chart_svg('%s') wrote: %s", bad[i], err);
    }
    alarm(0);
    struct stat st;
    CHECK(stat(fifo, &st) == 0 && S_ISFIFO(st.st_mode), "the FIFO was replaced");
    CHECK(entries() == 2, "the refusals left files behind: %d entries", entries());
    CHECK(rm_out_open(NULL, NULL, err, sizeof err) == RM_ERR_ARG, "NULL arguments");
    CHECK(rm_out_check(NULL, err, sizeof err) == RM_ERR_ARG, "rm_out_check(NULL)");
    err[0] = 0;
    CHECK(rm_out_close(NULL, 1, err, sizeof err) == RM_ERR_ARG && err[0] && rm_out_file(NULL) == NULL, "NULL rm_out");
    CHECK(rm_out_close(NULL, 1, NULL, 7) == RM_ERR_ARG && rm_out_check("/dev/full", NULL, 9) == RM_ERR_IO,
          "a NULL err with a length");
    char long_name[400];
    memset(long_name, 'a', 250);
    long_name[250] = 0;
    char path[700];
    path_in(path, sizeof path, long_name);
    CHECK(rm_out_check(path, err, sizeof err) == RM_ERR_IO && strstr(err, "too long"),
          "a 250-byte name (its temporary file's passes NAME_MAX): %s", err);
    /* a folder that makes no files: the file there, or not, is never "No such file or directory" */
    const char *proc[] = {"/proc/version", "/proc/remat-new.csv"};
    for (int i = 0; i < 2 && access("/proc/version", F_OK) == 0; i++) {
        rm_out *o = NULL;
        CHECK(rm_out_check(proc[i], err, sizeof err) == RM_ERR_IO && strstr(err, "takes no new files"),
              "rm_out_check('%s'): %s", proc[i], err);
        CHECK(rm_out_open(proc[i], &o, err, sizeof err) == RM_ERR_IO && !o && strstr(err, "takes no new files"),
              "rm_out_open('%s'): %s", proc[i], err);
    }
}

static void test_commit(void) {
    char path[300], err[600];
    path_in(path, sizeof path, "t.csv");
    rm_out *o;
    CHECK(rm_out_check(path, err, sizeof err) == RM_OK && access(path, F_OK) != 0, "rm_out_check created the file");
    CHECK(rm_out_open(path, &o, err, sizeof err) == RM_OK, "open: %s", err);
    fputs("first\n", rm_out_file(o));
    CHECK(access(path, F_OK) != 0, "the target appeared before the commit");
    CHECK(rm_out_close(o, 1, err, sizeof err) == RM_OK && file_is(path, "first\n"), "commit: %s", err);
    CHECK(rm_out_open(path, &o, err, sizeof err) == RM_OK, "open again: %s", err);
    fputs("second, abandoned\n", rm_out_file(o));
    CHECK(rm_out_close(o, 0, err, sizeof err) == RM_OK && file_is(path, "first\n"), "an aborted write changed it");
    CHECK(entries() == 3, "a temporary file was left: %d entries", entries());
}

int main(void) {
    if (check_tmpdir(dir, sizeof dir, "outfile")) return 1;
    test_refused();
    test_commit();
    check_rmdir(dir);
    return check_done("test_outfile");
}
