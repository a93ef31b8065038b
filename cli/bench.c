/* bench.c: `remat bench`: the measured trade-off between step time and
 * activation memory for one model on this machine.
 *
 * Points: each recompute strategy that applies (--strategies, default none,
 * selective, blocks, sqrt, segments:2, revolve:2) and a sweep of
 * --memory-budget values (--budgets N, default 10, from the least feasible
 * budget to store-all). Each point runs as its own child process, `remat
 * train ... --steps N --report FILE` (fork and exec of this binary), so that
 * its peak RSS (the child's getrusage maxrss, from wait4) is its own: RSS
 * only ever rises within a process. Points run in alternating order
 * (strategy, budget, strategy, ...; every other round reversed), so a slow
 * drift of a shared machine spreads over all of them. Per point: planned
 * and measured activation bytes, peak RSS, the median step time over the
 * rounds' medians and the spread (fastest and slowest step of any round),
 * the overhead against `none` measured (median / none's median - 1) and
 * predicted (the planner's, from a profile or FLOPs).
 *
 * Output: a table on stdout, --csv FILE (columns in CSV_HEADER, documented in
 * docs/PERFORMANCE.md), --svg FILE (cli/chart.c), --compare FILE.csv (other
 * programs' points on the chart). */
#define _DEFAULT_SOURCE /* wait4: the rusage of one child */
#include "bench.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *const default_strategies[] = {"none", "selective", "blocks", "sqrt", "segments:2", "revolve:2"};

/* Flags of bench's own; the rest go to every child `remat train`. */
typedef struct bench_flags {
    const char *csv, *svg, *compare, *strategies;
    const char *scratch, *scratch_bandwidth; /* --scratch DIR: the budget sweep again, paging (issue 20) */
    int budgets, rounds, help;
} bench_flags;

static bench_flags bench_own; /* the flags of this run (run_child reads --scratch) */

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int parse_count(const char *flag, const char *v, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (errno || *end || end == v || n < lo || n > hi)
        return cli_fail(2, "%s expects a whole number from %d to %d, got '%s'", flag, lo, hi, v), 0;
    *out = (int)n;
    return 1;
}

/* Splits argv into bench's flags and the child's; refuses the flags bench sets itself. */
static int split_flags(int argc, char **argv, bench_flags *bf, char **rest, int *n_rest) {
    static const char *const own[] = {"--checkpoint", "--memory-budget", "--report", "--save", "--trace",
                                      "--resume", "--save-every", "--eval-every"};
    memset(bf, 0, sizeof *bf);
    bf->budgets = 10, bf->rounds = 2;
    *n_rest = 0;
    for (int i = 0; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) return bf->help = 1;
        for (size_t k = 0; k < sizeof own / sizeof *own; k++)
            if (!strncmp(f, own[k], strlen(own[k])) && (f[strlen(own[k])] == 0 || f[strlen(own[k])] == '='))
                return cli_fail(2, "remat bench sets %s itself for each point; leave it out", own[k]), 0;
        const char **str = !strcmp(f, "--csv")          ? &bf->csv
                           : !strcmp(f, "--svg")        ? &bf->svg
                           : !strcmp(f, "--compare")    ? &bf->compare
                           : !strcmp(f, "--strategies") ? &bf->strategies
                           : !strcmp(f, "--scratch")    ? &bf->scratch
                           : !strcmp(f, "--scratch-bandwidth") ? &bf->scratch_bandwidth
                                                        : NULL;
        int is_count = !strcmp(f, "--budgets") || !strcmp(f, "--rounds");
        if ((str || is_count) && i + 1 >= argc) return cli_fail(2, "%s needs a value (see remat --help)", f), 0;
        if (str) *str = argv[++i];
        else if (!strcmp(f, "--budgets")) {
            if (!parse_count(f, argv[++i], 0, 100, &bf->budgets)) return 0;
        } else if (!strcmp(f, "--rounds")) {
            if (!parse_count(f, argv[++i], 1, 100, &bf->rounds)) return 0;
        } else rest[(*n_rest)++] = argv[i];
    }
    return 1;
}

/* The least feasible budget and store-all's arena, from a dry compile. */
static int budget_range(const cli_args *a, size_t *lo, size_t *hi) {
    rm_graph *g = rm_graph_new();
    rm_model_io io;
    rm_session *s = NULL;
    rm_status st = g ? cli_build_model(a, g, &io, 0) : RM_ERR_NOMEM;
    rm_options o;
    rm_options_default(&o);
    o.threads = a->threads;
    o.memory_budget = "100%";
    o.dry_run = 1;
    if (st == RM_OK) st = rm_compile(g, &o, &s);
    int rc = 0;
    if (st != RM_OK) rc = cli_fail(st == RM_ERR_ARG ? 2 : 1, "%s", g ? rm_graph_errmsg(g) : "out of memory");
    else {
        rm_plan_info p;
        rm_plan(s, &p);
        *lo = p.min_budget_bytes, *hi = p.store_all_bytes;
    }
    rm_session_free(s);
    rm_graph_free(g);
    return rc;
}

/* Builds the list of points: strategies, then budgets. */
static int make_points(const bench_flags *bf, const cli_args *a, bench_point **out, int *n) {
    char *list = bf->strategies ? strdup(bf->strategies) : NULL;
    int n_strat = 0;
    const char *names[64];
    if (bf->strategies) {
        for (char *tok = list ? strtok(list, ",") : NULL; tok && n_strat < 64; tok = strtok(NULL, ","))
            names[n_strat++] = tok;
    } else {
        for (size_t k = 0; k < sizeof default_strategies / sizeof *default_strategies; k++)
            names[n_strat++] = default_strategies[k];
    }
    size_t lo = 0, hi = 0;
    int rc = bf->budgets ? budget_range(a, &lo, &hi) : 0;
    const int sweeps = bf->scratch ? 2 : 1; /* with --scratch: the budgets again, paging */
    bench_point *p = rc ? NULL : calloc((size_t)(n_strat + sweeps * bf->budgets), sizeof *p);
    if (!rc && !p) rc = cli_fail(1, "out of memory");
    for (int k = 0; !rc && k < n_strat; k++) snprintf(p[k].strategy, sizeof p[k].strategy, "%s", names[k]);
    for (int k = 0; !rc && k < sweeps * bf->budgets; k++) {
        bench_point *b = &p[n_strat + k];
        const int j = k % bf->budgets;
        b->paged = k >= bf->budgets;
        b->budget = bf->budgets > 1 ? lo + (size_t)((double)(hi - lo) * j / (bf->budgets - 1)) : hi;
        snprintf(b->strategy, sizeof b->strategy, "%s", b->paged ? "auto+paging" : "auto");
        snprintf(b->label, sizeof b->label, "budget %.0f%%%s", 100.0 * (double)b->budget / (double)(hi ? hi : 1),
                 b->paged ? " +page" : "");
    }
    for (int k = 0; !rc && k < n_strat; k++) snprintf(p[k].label, sizeof p[k].label, "%s", names[k]);
    free(list);
    *out = p;
    *n = rc ? 0 : n_strat + sweeps * bf->budgets;
    return rc;
}

/* This program's path, for exec. */
static void self_path(const char *argv0, char *buf, size_t n) {
    ssize_t k = readlink("/proc/self/exe", buf, n - 1);
    if (k > 0) buf[k] = 0;
    else snprintf(buf, n, "%s", argv0);
}

/* Runs one child `remat train` for point p; fills its figures from the
 * report and the child's rusage. Returns 0, or 1 with p->error set. */
static int run_child(const char *self, char **rest, int n_rest, const bench_point *p, int steps, const char *report,
                     const char *errpath, bench_run *r) {
    char steps_s[32], budget_s[32];
    snprintf(steps_s, sizeof steps_s, "%d", steps);
    snprintf(budget_s, sizeof budget_s, "%zu", p->budget);
    const char *argv[256];
    int k = 0;
    argv[k++] = self, argv[k++] = "train";
    for (int i = 0; i < n_rest && k < 240; i++) argv[k++] = rest[i];
    argv[k++] = "--quiet", argv[k++] = "--steps", argv[k++] = steps_s, argv[k++] = "--report", argv[k++] = report;
    if (p->budget) argv[k++] = "--memory-budget", argv[k++] = budget_s;
    else argv[k++] = "--checkpoint", argv[k++] = p->strategy;
    if (p->paged) argv[k++] = "--scratch", argv[k++] = bench_own.scratch;
    if (p->paged && bench_own.scratch_bandwidth) argv[k++] = "--scratch-bandwidth", argv[k++] = bench_own.scratch_bandwidth;
    argv[k] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return snprintf(r->error, sizeof r->error, "fork failed"), 1;
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY), err = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (devnull >= 0) dup2(devnull, 1);
        if (err >= 0) dup2(err, 2);
        execv(self, (char *const *)argv);
        _exit(127);
    }
    int status = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    while (wait4(pid, &status, 0, &ru) < 0 && errno == EINTR) {}
    r->peak_rss = (size_t)ru.ru_maxrss * 1024; /* Linux: KiB */
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        FILE *f = fopen(errpath, "r");
        r->error[0] = 0;
        if (!f || !fgets(r->error, sizeof r->error, f)) snprintf(r->error, sizeof r->error, "exit status %d", status);
        if (f) fclose(f);
        r->error[strcspn(r->error, "\n")] = 0;
        return 1;
    }
    return bench_read_report(report, r);
}

static double json_num(const cJSON *r, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

int bench_read_report(const char *path, bench_run *r) {
    FILE *f = fopen(path, "rb");
    char buf[8192];
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = 0;
    cJSON *j = cJSON_Parse(buf);
    if (!j) return snprintf(r->error, sizeof r->error, "no report from the child (%s)", path), 1;
    r->planned = (size_t)json_num(j, "activation_bytes_planned");
    r->measured = (size_t)json_num(j, "activation_bytes_measured");
    r->median = json_num(j, "step_ms_median");
    r->min = json_num(j, "step_ms_min");
    r->max = json_num(j, "step_ms_max");
    r->predicted = json_num(j, "predicted_overhead");
    cJSON_Delete(j);
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Adds one run's figures to its point. */
static void merge_run(bench_point *p, const bench_run *r) {
    if (r->error[0]) {
        snprintf(p->error, sizeof p->error, "%s", r->error);
        return;
    }
    if (p->n_runs < (int)(sizeof p->medians / sizeof *p->medians)) p->medians[p->n_runs++] = r->median;
    p->planned = r->planned, p->measured = r->measured, p->predicted = r->predicted;
    if (r->peak_rss > p->peak_rss) p->peak_rss = r->peak_rss;
    if (p->n_runs == 1 || r->min < p->min) p->min = r->min;
    if (p->n_runs == 1 || r->max > p->max) p->max = r->max;
}

/* The median of the rounds' medians, and the overheads against none. */
static void finish_points(bench_point *p, int n) {
    double none = NAN;
    for (int i = 0; i < n; i++) {
        p[i].ok = p[i].n_runs > 0 && !p[i].error[0];
        if (!p[i].ok) continue;
        qsort(p[i].medians, (size_t)p[i].n_runs, sizeof(double), cmp_double);
        int m = p[i].n_runs;
        p[i].median = m % 2 ? p[i].medians[m / 2] : 0.5 * (p[i].medians[m / 2 - 1] + p[i].medians[m / 2]);
        if (!p[i].budget && !strcmp(p[i].strategy, "none")) none = p[i].median;
    }
    for (int i = 0; i < n; i++) p[i].overhead = p[i].ok && none > 0 ? p[i].median / none - 1.0 : NAN;
}

static void progress(int tty, int done, int total, double t0, const char *label) {
    double el = now_s() - t0, eta = done ? el / done * (total - done) : 0;
    if (!tty) {
        fprintf(stderr, "bench: %d/%d done (%s), %.0fs elapsed, ETA %.0fs\n", done, total, label, el, eta);
        return;
    }
    char bar[31];
    int fill = total ? 30 * done / total : 30;
    for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
    bar[30] = 0;
    fprintf(stderr, "\r[%s] %d/%d %-16s %.0fs elapsed, ETA %.0fs   ", bar, done, total, label, el, eta);
    if (done == total) fputc('\n', stderr);
}

/* Runs every point `rounds` times in alternating order. */
static void run_points(const char *self, char **rest, int n_rest, bench_point *p, int n, int n_strat, int rounds,
                       int steps) {
    char report[] = "/tmp/remat_bench_XXXXXX", errpath[] = "/tmp/remat_bench_err_XXXXXX";
    int fd1 = mkstemp(report), fd2 = mkstemp(errpath);
    if (fd1 >= 0) close(fd1);
    if (fd2 >= 0) close(fd2);
    int *order = malloc(sizeof *order * (size_t)(n ? n : 1)), k = 0;
    if (!order) return;
    /* strategy, budget, strategy, budget, ... then the rest of the longer list */
    for (int i = 0; i < n_strat || i < n - n_strat; i++) {
        if (i < n_strat) order[k++] = i;
        if (i < n - n_strat) order[k++] = n_strat + i;
    }
    int tty = isatty(2), done = 0, total = n * rounds;
    double t0 = now_s();
    progress(tty, 0, total, t0, "starting");
    for (int r = 0; r < rounds; r++)
        for (int j = 0; j < n; j++) {
            bench_point *pt = &p[order[r % 2 ? n - 1 - j : j]];
            bench_run run;
            memset(&run, 0, sizeof run);
            if (!pt->error[0]) {
                run_child(self, rest, n_rest, pt, steps, report, errpath, &run);
                merge_run(pt, &run);
            }
            progress(tty, ++done, total, t0, pt->label);
        }
    remove(report);
    remove(errpath);
    free(order);
}

static void print_table(const bench_point *p, int n, const char *config) {
    printf("remat bench: %s\n%-17s %10s %10s %10s %10s %9s %9s %9s %9s %9s\n", config, "point", "budgetMiB",
           "act.plan", "act.meas", "peakRSS", "ms.med", "ms.min", "ms.max", "ovh.meas", "ovh.pred");
    for (int i = 0; i < n; i++) {
        if (!p[i].ok) {
            printf("%-17s skipped: %s\n", p[i].label, p[i].error);
            continue;
        }
        printf("%-17s %10.2f %10.2f %10.2f %10.1f %9.2f %9.2f %9.2f %8.1f%% %8.1f%%\n", p[i].label,
               p[i].budget / 1048576.0, p[i].planned / 1048576.0, p[i].measured / 1048576.0, p[i].peak_rss / 1048576.0,
               p[i].median, p[i].min, p[i].max, 100 * p[i].overhead, 100 * p[i].predicted);
    }
}

static int write_csv(const char *path, const bench_point *p, int n, const char *config) {
    FILE *f = fopen(path, "w");
    if (!f) return cli_fail(1, "cannot write '%s'", path);
    fprintf(f, "%s\n", BENCH_CSV_HEADER);
    for (int i = 0; i < n; i++) {
        if (!p[i].ok) continue;
        fprintf(f, "%s,%s,%zu,%zu,%zu,%zu,%.3f,%.3f,%.3f,%.4f,%.4f,remat,%s\n", config, p[i].strategy, p[i].budget,
                p[i].planned, p[i].measured, p[i].peak_rss, p[i].median, p[i].min, p[i].max, p[i].overhead,
                p[i].predicted, p[i].label);
    }
    int bad = ferror(f);
    if ((fclose(f) != 0) | bad) return cli_fail(1, "cannot write '%s'", path);
    return 0;
}

int cli_bench(int argc, char **argv, const char *argv0) {
    bench_flags bf;
    char **rest = malloc(sizeof *rest * (size_t)(argc + 1));
    int n_rest = 0, n = 0, rc;
    if (!rest) return cli_fail(1, "out of memory");
    cli_args a;
    cli_args_default(&a);
    a.command = "bench";
    if (!split_flags(argc, argv, &bf, rest, &n_rest) || (!bf.help && !cli_args_parse(&a, n_rest, rest, 0))) {
        free(rest);
        return 2;
    }
    if (bf.help) {
        free(rest);
        return cli_help("bench");
    }
    bench_own = bf;
    int steps = cli_given(&a, "--steps") ? a.steps : 5;
    if (steps < 1) {
        free(rest);
        return cli_fail(2, "remat bench needs --steps of at least 1 (timed steps per point)");
    }
    bench_point *p = NULL;
    int n_strat = bf.strategies ? 1 : (int)(sizeof default_strategies / sizeof *default_strategies);
    for (const char *c = bf.strategies; c && *c; c++) n_strat += *c == ',';
    if ((rc = make_points(&bf, &a, &p, &n)) != 0) {
        free(rest);
        return rc;
    }
    char self[4096], config[256], machine[256];
    self_path(argv0, self, sizeof self);
    cli_model_desc(&a, config, sizeof config);
    cli_machine_desc(a.threads, machine, sizeof machine);
    run_points(self, rest, n_rest, p, n, n_strat, bf.rounds, steps);
    finish_points(p, n);
    print_table(p, n, config);
    rc = bf.csv ? write_csv(bf.csv, p, n, config) : 0;
    if (!rc && bf.svg) rc = bench_svg(bf.svg, p, n, bf.compare, config, machine, steps, bf.rounds);
    free(p);
    free(rest);
    return rc;
}
