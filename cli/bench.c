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
 * programs' points on the chart). Every file is checked before the first
 * point (paths.h), --compare read then too, and --scratch DIR and
 * --scratch-bandwidth as the paged points' children would check them.
 *
 * Children never write a user's file: each runs in a private temporary
 * folder (its working directory, its report and its stderr; removed at the
 * end) and in its own process group, so a terminal's Ctrl-C reaches the
 * parent alone. SIGINT or SIGTERM to the parent kills the running child,
 * removes the folder, writes the points measured so far and exits 130/143;
 * a child outlives no parent (PR_SET_PDEATHSIG). */
#define _DEFAULT_SOURCE /* wait4: the rusage of one child; mkdtemp */
#include "bench.h"
#include "guard.h"
#include "hf.h"
#include "paths.h"
#include "stop.h"
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

static const char DEFAULT_STRATEGIES[] = "none,selective,blocks,sqrt,segments:2,revolve:2";

/* Flags of bench's own; the rest go to every child `remat train`. */
typedef struct bench_flags {
    const char *csv, *svg, *compare, *x;
    const char *scratch, *scratch_bandwidth; /* --scratch DIR: the budget sweep again, paging (issue 20) */
    char scratch_abs[PATH_MAX];              /* DIR made absolute: the children run in a temporary folder */
    cli_list strategies; /* --strategies, parsed and checked once (cli_parse_list) */
    int budgets, rounds, help;
    int x_rss;           /* --x rss: the chart places every point by peak RSS (default with --compare) */
} bench_flags;

/* The stop request (cli/stop.c), read between and during the children. */
#define stop_signal cli_stop_signal

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* --strategies: each a strategy rm_parse_strategy reads, none twice. */
static int parse_strategies(const char *s, cli_list *l) {
    char err[256];
    if (!cli_parse_set("--strategies", s, 64, "none,blocks,sqrt", l)) return 0; /* (--rounds R repeats a point) */
    for (int i = 0; i < l->n; i++) {
        rm_strategy st;
        int param;
        if (rm_parse_strategy(l->item[i], &st, &param, err, sizeof err) != RM_OK)
            return cli_fail(2, "--strategies: %s", err), 0;
    }
    return 1;
}

/* Splits argv into bench's flags and the child's; refuses the flags bench
 * sets itself (the rest of train's that bench does not pass on are refused
 * by cli_args_parse, command "bench"). */
static int split_flags(int argc, char **argv, bench_flags *bf, char **rest, int *n_rest) {
    static const char *const sets[] = {"--checkpoint", "--memory-budget", "--report", NULL};
    static const char *const with_value[] = {"--csv", "--svg", "--compare", "--strategies", "--x", "--budgets",
                                             "--rounds", "--scratch", "--scratch-bandwidth", NULL};
    static const char *const alone[] = {"--help", "-h", NULL};
    memset(bf, 0, sizeof *bf);
    bf->budgets = 10, bf->rounds = 2;
    *n_rest = 0;
    const char *strategies = DEFAULT_STRATEGIES, *seen[sizeof with_value / sizeof *with_value] = {NULL};
    for (int i = 0; i < argc; i++) {
        const char *f = argv[i], *name, *v;
        for (int k = 0; sets[k]; k++)
            if (!strncmp(f, sets[k], strlen(sets[k])) && (f[strlen(sets[k])] == 0 || f[strlen(sets[k])] == '='))
                return cli_fail(2, "remat bench sets %s itself for each point (--strategies, --budgets); leave it out",
                                sets[k]), 0;
        int own = cli_own_flag(argc, argv, &i, with_value, alone, "bench", &name, &v);
        if (own < 0) return 0;
        for (int k = 0; own && v && with_value[k]; k++)
            if (!strcmp(name, with_value[k])) cli_once(name, &seen[k], v);
        if (!own) rest[(*n_rest)++] = argv[i];
        else if (!strcmp(name, "--help") || !strcmp(name, "-h")) bf->help = 1;
        else if (!strcmp(name, "--budgets")) {
            if (!cli_parse_int(name, v, 0, 100, &bf->budgets)) return 0;
        } else if (!strcmp(name, "--rounds")) {
            if (!cli_parse_int(name, v, 1, 100, &bf->rounds)) return 0;
        } else *(!strcmp(name, "--csv") ? &bf->csv : !strcmp(name, "--svg") ? &bf->svg
                 : !strcmp(name, "--compare") ? &bf->compare : !strcmp(name, "--x") ? &bf->x
                 : !strcmp(name, "--scratch") ? &bf->scratch : !strcmp(name, "--scratch-bandwidth") ? &bf->scratch_bandwidth
                 : &strategies) = v;
    }
    if (bf->help) return 1;
    if (bf->scratch_bandwidth && !bf->scratch)
        return cli_fail(2, "--scratch-bandwidth is the disk bandwidth of bench's --scratch DIR: add --scratch DIR"), 0;
    if (cli_check_scratch(bf->scratch)) return 0;
    double bps; /* every paged point's child would refuse these alike: "skipped", exit 0 */
    if (bf->scratch_bandwidth && cli_parse_bandwidth(bf->scratch_bandwidth, &bps)) return 0;
    if (bf->scratch && !cli_canonical(bf->scratch, bf->scratch_abs, sizeof bf->scratch_abs))
        return cli_fail(2, "--scratch: the folder's name '%s' is too long", bf->scratch), 0;
    if (bf->x && strcmp(bf->x, "rss") && strcmp(bf->x, "act"))
        return cli_fail(2, "--x is rss (every point by its process's peak RSS) or act (remat's points by their "
                        "activation bytes), got '%s'", bf->x), 0;
    if ((bf->x || bf->compare) && !bf->svg)
        return cli_fail(2, "%s places points on the chart of --svg: add --svg FILE", bf->x ? "--x" : "--compare"), 0;
    bf->x_rss = bf->x ? !strcmp(bf->x, "rss") : bf->compare != NULL;
    return parse_strategies(strategies, &bf->strategies);
}

/* Frozen weights kept in g as the child will keep them (--frozen-dtype;
 * auto: as in the --init folder or file), since the products that widen
 * them need workspace, which is activation memory. */
static int frozen_as_child(const cli_args *a, rm_graph *g) {
    rm_hf *hf = NULL;
    rm_file *f = NULL;
    char err[512];
    if (cli_is_dir(a->init) && rm_hf_open(a->init, &hf, err, sizeof err) != RM_OK) hf = NULL;
    else if (a->init && !hf && !cli_is_dir(a->init) && rm_file_open(a->init, &f, err, sizeof err) != RM_OK) f = NULL;
    int rc = cli_frozen_store(a, g, hf, f); /* a file it cannot open: the child says what is wrong */
    rm_hf_close(hf);
    rm_file_close(f);
    return rc;
}

/* The least feasible budget and store-all's arena, from a dry compile; with
 * --init, its file checked against the model (as each child would). */
static int budget_range(const cli_args *a, size_t *lo, size_t *hi) {
    rm_graph *g = rm_graph_new();
    rm_model_io io;
    rm_session *s = NULL;
    rm_status st = g ? cli_build_model(a, g, &io, 0) : RM_ERR_NOMEM;
    if (st == RM_OK && frozen_as_child(a, g) != 0) {
        rm_graph_free(g);
        return 1;
    }
    rm_options o;
    rm_options_default(&o);
    o.threads = a->threads;
    o.memory_budget = "100%";
    o.dry_run = 1;
    o.precision_name = a->precision; /* bf16 activations: a smaller range */
    if (st == RM_OK) st = rm_compile(g, &o, &s);
    int rc = 0;
    if (st != RM_OK) rc = cli_fail(st == RM_ERR_ARG ? 2 : 1, "%s", g ? rm_graph_errmsg(g) : "out of memory");
    else {
        rm_plan_info p;
        rm_plan(s, &p);
        *lo = p.min_budget_bytes, *hi = p.store_all_bytes;
    }
    rm_file *f = NULL;
    char err[512];
    if (!rc && a->init && !cli_is_dir(a->init) /* a folder: cli_hf_open checked it */
        && (rm_file_open(a->init, &f, err, sizeof err) != RM_OK || rm_file_check(f, g, err, sizeof err)))
        rc = cli_fail(1, "%s", err);
    rm_file_close(f);
    rm_session_free(s);
    rm_graph_free(g);
    return rc;
}

/* What every child would refuse at its start-up, refused once before the
 * first point (the points differ only in their strategy or budget): the
 * flags together, the memory the model needs, and the data as the run
 * loads it. */
static int check_run(const cli_args *a) {
    int rc = cli_check_flag_use(a);
    rm_run_info r;
    cli_run_info(a, "", 0, 0, 0, &r);
    if (!rc) rc = cli_check_fits(&r, 1, cli_train_state_copies(a, 1), NULL);
    rm_dataset d;
    rm_pairs pairs;
    memset(&d, 0, sizeof d), memset(&pairs, 0, sizeof pairs);
    if (!rc) rc = cli_load_data(a, &d, &pairs);
    rm_data_free(&d);
    rm_pairs_free(&pairs);
    return rc;
}

/* Builds the list of points: strategies, then budgets. */
static int make_points(const bench_flags *bf, const cli_args *a, bench_point **out, int *n) {
    const int n_strat = bf->strategies.n;
    size_t lo = 0, hi = 0;
    int rc = budget_range(a, &lo, &hi); /* also with --budgets 0: the model builds, --init fits it */
    const int sweeps = bf->scratch ? 2 : 1; /* with --scratch: the budgets again, paging */
    bench_point *p = rc ? NULL : calloc((size_t)(n_strat + sweeps * bf->budgets), sizeof *p);
    if (!rc && !p) rc = cli_fail(1, "out of memory");
    for (int k = 0; !rc && k < n_strat; k++) {
        snprintf(p[k].strategy, sizeof p[k].strategy, "%s", bf->strategies.item[k]);
        snprintf(p[k].label, sizeof p[k].label, "%s", bf->strategies.item[k]);
    }
    for (int k = 0; !rc && k < sweeps * bf->budgets; k++) {
        bench_point *b = &p[n_strat + k];
        const int j = k % bf->budgets;
        b->paged = k >= bf->budgets;
        b->budget = bf->budgets > 1 ? lo + (size_t)((double)(hi - lo) * j / (bf->budgets - 1)) : hi;
        snprintf(b->strategy, sizeof b->strategy, "%s", b->paged ? "auto+paging" : "auto");
        snprintf(b->label, sizeof b->label, "budget %.0f%%%s", 100.0 * (double)b->budget / (double)(hi ? hi : 1),
                 b->paged ? " +page" : "");
    }
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

/* The order of the runs: strategy, budget, strategy, budget, ... then the
 * rest of the longer list (every other round reversed, in run_points). */
static void run_order(int n, int n_strat, int *order) {
    int k = 0;
    for (int i = 0; i < n_strat || i < n - n_strat; i++) {
        if (i < n_strat) order[k++] = i;
        if (i < n - n_strat) order[k++] = n_strat + i;
    }
}

/* One child's argument vector for point p: this program, train, the
 * user's flags, then the point's (a paged point: bench's --scratch). */
static void child_argv(const char *self, char **rest, int n_rest, const bench_point *p, const bench_flags *bf,
                       const char *steps, const char *budget, const char *report, const char **argv) {
    int k = 0;
    argv[k++] = self, argv[k++] = "train";
    for (int i = 0; i < n_rest; i++) {
        if (!strcmp(rest[i], "--quiet") || !strncmp(rest[i], "--steps=", 8)) continue; /* given below */
        if (!strcmp(rest[i], "--steps")) {
            i++;
            continue;
        }
        argv[k++] = rest[i];
    }
    argv[k++] = "--quiet", argv[k++] = "--steps", argv[k++] = steps, argv[k++] = "--report", argv[k++] = report;
    if (p->budget) argv[k++] = "--memory-budget", argv[k++] = budget;
    else argv[k++] = "--checkpoint", argv[k++] = p->strategy;
    if (p->paged) argv[k++] = "--scratch", argv[k++] = bf->scratch_abs;
    if (p->paged && bf->scratch_bandwidth) argv[k++] = "--scratch-bandwidth", argv[k++] = bf->scratch_bandwidth;
    argv[k] = NULL;
}

/* Runs every point `rounds` times in alternating order, until done or a
 * signal; returns the runs done. */
static int run_points(const char *self, char **rest, int n_rest, bench_point *p, int n, const bench_flags *bf,
                      int steps, const bench_tmp *tmp) {
    const int n_strat = bf->strategies.n, rounds = bf->rounds;
    int *order = malloc(sizeof *order * (size_t)(n ? n : 1)), done = 0;
    const char **argv = malloc(sizeof *argv * (size_t)(n_rest + 20));
    if (!order || !argv) {
        free(order), free(argv);
        return cli_fail(1, "out of memory"), 0;
    }
    run_order(n, n_strat, order);
    int tty = isatty(2), total = n * rounds;
    double t0 = now_s();
    progress(tty, 0, total, t0, "starting");
    for (int r = 0; r < rounds && !stop_signal; r++)
        for (int j = 0; j < n && !stop_signal; j++) {
            bench_point *pt = &p[order[r % 2 ? n - 1 - j : j]];
            bench_run run;
            memset(&run, 0, sizeof run);
            if (!pt->error[0]) {
                char steps_s[32], budget_s[32];
                snprintf(steps_s, sizeof steps_s, "%d", steps);
                snprintf(budget_s, sizeof budget_s, "%zu", pt->budget);
                child_argv(self, rest, n_rest, pt, bf, steps_s, budget_s, tmp->report, argv);
                if (bench_run_child((char *const *)argv, tmp, &stop_signal, &run) < 0) break;
                merge_run(pt, &run);
            }
            progress(tty, ++done, total, t0, pt->label);
        }
    if (tty && stop_signal) fputc('\n', stderr);
    free(order);
    free(argv);
    return done;
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
    char err[600];
    rm_out *o;
    if (rm_out_open(path, &o, err, sizeof err) != RM_OK) return cli_fail(1, "--csv: %s", err);
    FILE *f = rm_out_file(o);
    fprintf(f, "%s\n", BENCH_CSV_HEADER);
    for (int i = 0; i < n; i++) {
        if (!p[i].ok) continue;
        fprintf(f, "%s,%s,%zu,%zu,%zu,%zu,%.3f,%.3f,%.3f,%.4f,%.4f,remat,%s\n", config, p[i].strategy, p[i].budget,
                p[i].planned, p[i].measured, p[i].peak_rss, p[i].median, p[i].min, p[i].max, p[i].overhead,
                p[i].predicted, p[i].label);
    }
    if (rm_out_close(o, 1, err, sizeof err) != RM_OK) return cli_fail(1, "--csv: %s", err);
    return 0;
}

/* The child works in the temporary folder: --data and --init become
 * absolute paths (kept in held, freed by the caller). */
static int absolute_inputs(char **rest, int n_rest, char **held) {
    static const char *const flags[] = {"--data", "--init"};
    for (int i = 0; i < n_rest; i++)
        for (int f = 0; f < 2; f++) {
            size_t l = strlen(flags[f]);
            int sep = !strcmp(rest[i], flags[f]) && i + 1 < n_rest;
            int eq = !strncmp(rest[i], flags[f], l) && rest[i][l] == '=';
            if (!sep && !eq) continue;
            int k = sep ? i + 1 : i;
            const char *path = sep ? rest[k] : rest[k] + l + 1;
            char canon[PATH_MAX];
            if (*path && cli_canonical(path, canon, sizeof canon)) { /* else the child says what is wrong */
                size_t cap = strlen(canon) + l + 2;
                if (!(held[k] = malloc(cap))) return cli_fail(1, "out of memory");
                snprintf(held[k], cap, "%s%s%s", eq ? flags[f] : "", eq ? "=" : "", canon);
                rest[k] = held[k];
            }
            i = k;
            break;
        }
    return 0;
}

/* Checks bench's files and reads --compare, before the first point. */
static int check_files(const bench_flags *bf, const cli_args *a, bench_point **cmp, int *n_cmp) {
    const cli_file files[] = {{"--data", a->data, CLI_IN, NULL, 0}, {"--init", a->init, CLI_IN_ANY, NULL, 0},
                              {"--compare", bf->compare, CLI_IN, NULL, 0}, {"--csv", bf->csv, CLI_OUT, NULL, 0},
                              {"--svg", bf->svg, CLI_OUT, NULL, 0}};
    int rc = cli_check_files(files, (int)(sizeof files / sizeof *files), a->new_in_model_folder);
    if (!rc && bf->compare) rc = bench_load_compare(bf->compare, cmp, n_cmp);
    char err[700]; /* --scratch DIR as each paged point's rm_compile checks it (they all refused it alike) */
    rm_status st = rc || !bf->scratch ? RM_OK : rm_scratch_check(bf->scratch, err, sizeof err);
    if (st != RM_OK) rc = cli_fail(st == RM_ERR_ARG ? 2 : 1, "--scratch: %s", err);
    return rc;
}

/* The table, the files and the exit status once the runs are over. */
static int report(const bench_flags *bf, bench_point *p, int n, const bench_point *cmp, int n_cmp, const char *config,
                  const char *machine, int steps, int done) {
    finish_points(p, n);
    print_table(p, n, config);
    fflush(stdout);
    int measured = 0, rc = 0;
    const char *first_error = NULL;
    for (int i = 0; i < n; i++) {
        measured += p[i].ok;
        if (!first_error && p[i].error[0]) first_error = p[i].error;
    }
    if (measured && bf->csv) rc = write_csv(bf->csv, p, n, config);
    if (measured && bf->svg) {
        int rc2 = bench_svg(bf->svg, p, n, cmp, n_cmp, bf->x_rss, config, machine, steps, bf->rounds);
        rc = rc ? rc : rc2;
    }
    if (rc) fprintf(stderr, "remat: bench: the points measured are in the table above (stdout)\n");
    if (stop_signal) {
        fprintf(stderr, "remat: bench: %s: stopped after %d of %d runs; %s\n", cli_stop_name(stop_signal),
                done, n * bf->rounds, measured ? "the points measured so far are in the table above and the files"
                                               : "no point was measured, no file written");
        return 128 + stop_signal;
    }
    if (!measured)
        return cli_fail(1, "no point was measured: %s; nothing written", first_error ? first_error : "every point failed");
    return rc;
}

/* Runs the points and reports; the temporary folder is removed before the
 * exit, also after a signal. */
static int run_bench(const bench_flags *bf, const cli_args *a, char **rest, int n_rest, const char *argv0,
                     const bench_point *cmp, int n_cmp, int steps) {
    bench_point *p = NULL;
    int n = 0, rc = make_points(bf, a, &p, &n);
    if (!rc && stop_signal) {
        fprintf(stderr, "remat: bench: %s: stopped before the first point; nothing measured, nothing written\n",
                cli_stop_name(stop_signal));
        rc = 128 + stop_signal;
    }
    if (rc) {
        free(p);
        return rc;
    }
    char self[PATH_MAX], config[256], machine[256];
    bench_tmp tmp;
    self_path(argv0, self, sizeof self);
    cli_model_desc(a, config, sizeof config);
    cli_machine_desc(a->threads, machine, sizeof machine);
    if ((rc = bench_tmp_make(&tmp)) == 0) {
        int done = run_points(self, rest, n_rest, p, n, bf, steps, &tmp);
        bench_tmp_remove(&tmp);
        rc = report(bf, p, n, cmp, n_cmp, config, machine, steps, done);
    }
    free(p);
    return rc;
}

int cli_bench(int argc, char **argv, const char *argv0) {
    bench_flags bf;
    char **rest = malloc(sizeof *rest * (size_t)(argc + 1)), **held = calloc((size_t)argc + 1, sizeof *held);
    int n_rest = 0, rc = 0, n_cmp = 0;
    bench_point *cmp = NULL;
    if (!rest || !held) {
        free(rest), free(held);
        return cli_fail(1, "out of memory");
    }
    cli_args a;
    cli_args_default(&a);
    a.command = "bench";
    if (!split_flags(argc, argv, &bf, rest, &n_rest) || (!bf.help && !cli_args_parse(&a, n_rest, rest, 0))) rc = 2;
    else if (bf.help) rc = cli_help("bench");
    else if (cli_given(&a, "--steps") && a.steps < 1)
        rc = cli_fail(2, "remat bench needs --steps of at least 1 (timed steps per point)");
    if (!rc && !bf.help) rc = check_files(&bf, &a, &cmp, &n_cmp);
    if (!rc && !bf.help && cli_is_dir(a.init)) { /* the model is config.json's: for the budgets and the title */
        rm_hf *m = NULL;
        rc = cli_hf_open(&a, &m);
        rm_hf_close(m);
    }
    if (!rc && !bf.help) rc = check_run(&a);
    if (!rc && !bf.help) rc = absolute_inputs(rest, n_rest, held);
    if (!rc && !bf.help) {
        /* from here a signal stops the children and reports what was measured
         * (no SA_RESTART: wait4 returns EINTR at once) */
        cli_stop_catch(0);
        rc = run_bench(&bf, &a, rest, n_rest, argv0, cmp, n_cmp, cli_given(&a, "--steps") ? a.steps : 5);
        cli_stop_release();
    }
    for (int i = 0; i < argc; i++) free(held[i]);
    free(held);
    free(cmp);
    free(rest);
    return rc;
}
