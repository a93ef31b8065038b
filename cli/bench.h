/* bench.h: what `remat bench`, `remat train --trace` and `remat plan --svg`
 * share (cli/bench.c, cli/trace.c, cli/chart.c). */
#ifndef REMAT_CLI_BENCH_H
#define REMAT_CLI_BENCH_H
#include "args.h"
#include <limits.h>
#include <signal.h>
#include <stddef.h>

/* "gpt L4 C128 H4 T64 V256 B8", "llama L30 C576 H9 K3 T512 V49152 B4" or
 * "mlp 256-1024-256 T32 V256 B8". */
void cli_model_desc(const cli_args *a, char *buf, size_t n);
/* "<CPU model name>, N threads, OpenBLAS|portable GEMM" (from /proc/cpuinfo). */
void cli_machine_desc(int threads, char *buf, size_t n);

/* --trace: arms the session for the step of --trace-step (1-based, default
 * the second one counted from `start`, the first step this run makes).
 * Returns 0 or an exit status (2: the step is outside the run). */
int cli_trace_arm(const cli_args *a, rm_session *s, int start);
/* Writes the trace of --trace with the model and strategy as metadata. */
int cli_trace_write(const cli_args *a, const rm_session *s);

/* ---- remat bench (cli/bench.c, cli/chart.c) ---- */

/* The CSV columns of remat bench --csv and of bench/torch_tradeoff.py
 * (docs/PERFORMANCE.md says what each means). */
#define BENCH_CSV_HEADER                                                                                    \
    "config,strategy,budget_bytes,activation_bytes_planned,activation_bytes_measured,peak_rss_bytes,"      \
    "step_ms_median,step_ms_min,step_ms_max,overhead_measured,overhead_predicted,source,label"

/* One child run's figures (from its --report and its rusage). */
typedef struct bench_run {
    size_t planned, measured, peak_rss;
    double median, min, max, predicted;
    char error[256];
} bench_run;

/* One point of the chart: a strategy, a budget, or a row of --compare. */
typedef struct bench_point {
    char strategy[48], label[64], source[32];
    size_t budget, planned, measured, peak_rss; /* budget 0: a strategy point */
    double median, min, max, overhead, predicted;
    double medians[100]; /* one per round */
    int n_runs, ok;
    char error[256];
    int paged;           /* a budget point run with bench's --scratch (keep, recompute or page) */
} bench_point;

/* Reads a child's --report JSON into r; 0, or 1 with r->error set. */
int bench_read_report(const char *path, bench_run *r);

/* The children's private temporary folder (cli/benchrun.c): their working
 * directory, their report and their stderr. */
typedef struct bench_tmp {
    char dir[PATH_MAX], report[PATH_MAX + 32], err[PATH_MAX + 32];
} bench_tmp;
/* Creates it under $TMPDIR or /tmp: 0, or an exit status with a message. */
int bench_tmp_make(bench_tmp *t);
/* Removes everything in it, then it. */
void bench_tmp_remove(const bench_tmp *t);
/* Runs argv (argv[0]: this program; a `remat train`) in t's folder and its
 * own process group, killed at once (SIGKILL) when *stop is set. 0 with r
 * filled from the report and the rusage, 1 with r->error set, -1 stopped. */
int bench_run_child(char *const argv[], const bench_tmp *t, volatile sig_atomic_t *stop, bench_run *r);

/* The rows of a --compare file (rm_read_file; remat bench's columns):
 * 0, or an exit status with a message when the file cannot be read, lacks
 * the columns or has no row with a step time and a memory figure. */
int bench_load_compare(const char *path, bench_point **out, int *n);
/* The chart of --svg: step time against memory, the budget sweep as a
 * line, the --compare rows cmp. x_rss: every point at its peak RSS; else
 * remat's at their activation bytes, a compare row at its activation
 * bytes when it has them, else its peak RSS (marked [RSS]). */
int bench_svg(const char *path, const bench_point *p, int n, const bench_point *cmp, int n_cmp, int x_rss,
              const char *config, const char *machine, int steps, int rounds);
/* remat plan --sweep --svg: predicted overhead against planned activation MiB. */
/* paged (NULL-able): per point, 1 for a plan with --scratch (its own series) */
int cli_plan_svg(const char *path, const char *config, const double *mib, const double *overhead, const int *paged,
                 int n);

int cli_bench(int argc, char **argv, const char *argv0);
#endif
