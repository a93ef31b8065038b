/* chart.c: the charts of `remat bench --svg` and `remat plan --sweep --svg`,
 * drawn by the library's rm_chart_svg, and the reading of --compare CSV
 * files (remat bench's own columns, e.g. from bench/torch_tradeoff.py). */
#include "bench.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The column of `name` in a CSV header line, or -1. */
static int column(const char *header, const char *name) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", header);
    buf[strcspn(buf, "\r\n")] = 0;
    int i = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save), i++)
        if (!strcmp(tok, name)) return i;
    return -1;
}

/* Field k of a CSV line (no quoting: remat's columns never hold commas). */
static void field_at(const char *line, int k, char *out, size_t n) {
    out[0] = 0;
    if (k < 0) return;
    for (int i = 0; i < k && line; i++) line = strchr(line, ',') ? strchr(line, ',') + 1 : NULL;
    if (!line) return;
    size_t len = strcspn(line, ",\r\n");
    snprintf(out, n, "%.*s", (int)len, line);
}

/* A byte count of a --compare row: finite, >= 0, below 2^60; else -1. */
static double row_bytes(const char *v) {
    char *end;
    double x = *v ? strtod(v, &end) : 0;
    return *v && (*end || !(x >= 0 && x < 1152921504606846976.0)) ? -1 : x;
}

/* One data row of a --compare file into p; 1 if it holds a point. */
static int compare_row(const char *line, const int *cols, bench_point *p) {
    char v[256];
    memset(p, 0, sizeof *p);
    field_at(line, cols[0], p->strategy, sizeof p->strategy);
    field_at(line, cols[5], p->label, sizeof p->label);
    if (!p->label[0]) snprintf(p->label, sizeof p->label, "%s", p->strategy);
    field_at(line, cols[4], p->source, sizeof p->source);
    if (!p->source[0]) snprintf(p->source, sizeof p->source, "compare");
    field_at(line, cols[1], v, sizeof v);
    double act = row_bytes(v);
    field_at(line, cols[2], v, sizeof v);
    double rss = row_bytes(v);
    field_at(line, cols[3], v, sizeof v);
    char *end;
    p->median = *v ? strtod(v, &end) : NAN;
    if (!*v || *end || !(p->median >= 0 && p->median < 1e12) || act < 0 || rss < 0) return 0;
    p->measured = (size_t)act, p->peak_rss = (size_t)rss;
    return p->ok = p->measured || p->peak_rss;
}

int bench_load_compare(const char *path, bench_point **out, int *n) {
    char *text = NULL, err[600];
    *out = NULL, *n = 0;
    if (rm_read_file(path, 64u << 20, &text, NULL, err, sizeof err) != RM_OK) return cli_fail(1, "--compare: %s", err);
    int cols[6] = {-1, -1, -1, -1, -1, -1}, rows = 0, bad = 0, cap = 0;
    size_t hl = strcspn(text, "\n");
    char header[1024];
    snprintf(header, sizeof header, "%.*s", (int)(hl < sizeof header ? hl : sizeof header - 1), text);
    const char *names[6] = {"strategy", "activation_bytes_measured", "peak_rss_bytes", "step_ms_median", "source",
                            "label"};
    for (int c = 0; c < 6; c++) cols[c] = column(header, names[c]);
    int rc = 0;
    if (cols[0] < 0 || cols[3] < 0 || (cols[1] < 0 && cols[2] < 0))
        rc = cli_fail(1, "--compare '%s' is not a remat bench CSV: its first line needs the columns strategy, "
                      "step_ms_median and activation_bytes_measured or peak_rss_bytes (bench/torch_tradeoff.py "
                      "writes them)", path);
    for (const char *line = text + hl; !rc && *line; line += strcspn(line, "\n")) {
        line += *line == '\n';
        if (!*line || *line == '\n' || *line == '\r') continue;
        rows++;
        if (*n == cap) {
            bench_point *np = realloc(*out, sizeof **out * (size_t)(cap = cap ? 2 * cap : 16));
            if (!np) {
                rc = cli_fail(1, "out of memory");
                break;
            }
            *out = np;
        }
        if (compare_row(line, cols, &(*out)[*n])) ++*n;
        else bad++;
    }
    free(text);
    if (!rc && !*n)
        rc = cli_fail(1, "--compare '%s' has no row with a step time and a memory figure (%d rows, %d malformed)",
                      path, rows, bad);
    if (!rc && bad)
        cli_notice("warning", "--compare '%s': %d of %d rows malformed (left out)", path, bad, rows);
    if (rc) free(*out), *out = NULL, *n = 0;
    return rc;
}

/* The series of a compare source placed by activation bytes (by_rss 0) or
 * by peak RSS (1); added on first use. */
static int compare_series(rm_chart_series *s, char names[][96], int *n_series, const char *source, int by_rss) {
    char name[96];
    snprintf(name, sizeof name, "%s (x: %s)", source, by_rss ? "peak RSS" : "activation bytes");
    for (int i = 2; i < *n_series; i++)
        if (!strcmp(names[i], name)) return i;
    if (*n_series >= 16) return -1;
    int i = (*n_series)++;
    snprintf(names[i], 96, "%s", name);
    s[i] = (rm_chart_series){names[i], 0, by_rss ? RM_MARK_TRIANGLE : RM_MARK_SQUARE};
    return i;
}

/* Where point p goes on the x axis, in MiB; 0: left out. */
static double x_of(const bench_point *p, int x_rss, int *by_rss) {
    *by_rss = x_rss || !p->measured;
    return (double)(*by_rss ? p->peak_rss : p->measured) / 1048576.0;
}

int bench_svg(const char *path, const bench_point *p, int n, const bench_point *cmp, int n_cmp, int x_rss,
              const char *config, const char *machine, int steps, int rounds) {
    rm_chart_point *pts = malloc(sizeof *pts * (size_t)(n + n_cmp + 1));
    char (*labels)[96] = malloc(96 * (size_t)(n + n_cmp + 1));
    int rc = !pts || !labels ? cli_fail(1, "out of memory") : 0;
    rm_chart_series series[16] = {{"remat --checkpoint STRATEGY", 0, RM_MARK_CIRCLE},
                                  {"remat --memory-budget sweep (Pareto front)", 1, RM_MARK_DIAMOND},
                                  {"the same with --scratch: keep, recompute or page", 1, RM_MARK_SQUARE}};
    char names[16][96] = {{0}}; /* the compare sources' (index 2 stays empty: the paged series, if any) */
    int n_series = 2, k = 0, by_rss;
    for (int i = 0; i < n; i++)
        if (p[i].ok && p[i].paged) n_series = 3;
    for (int i = 0; !rc && i < n; i++) {
        if (!p[i].ok) continue;
        pts[k] = (rm_chart_point){x_rss ? p[i].peak_rss / 1048576.0 : p[i].measured / 1048576.0, p[i].median,
                                  p[i].label, p[i].paged ? 2 : p[i].budget ? 1 : 0};
        k++;
    }
    for (int i = 0; !rc && i < n_cmp; i++) {
        double x = x_of(&cmp[i], x_rss, &by_rss);
        int s = x > 0 ? compare_series(series, names, &n_series, cmp[i].source, by_rss) : -1;
        if (s < 0) continue;
        snprintf(labels[k], 96, "%s%s", cmp[i].label, by_rss && !x_rss ? " [RSS]" : "");
        pts[k] = (rm_chart_point){x, cmp[i].median, labels[k], s};
        k++;
    }
    if (!rc) {
        char title[400], sub[400], err[600];
        snprintf(title, sizeof title, "Step time against %s: %s", x_rss ? "peak RSS" : "activation memory", config);
        snprintf(sub, sizeof sub, "%s; median of %d round(s) of %d steps per point (remat bench)", machine, rounds,
                 steps);
        double lo = INFINITY, hi = 0;
        for (int i = 0; i < k; i++)
            if (pts[i].x > 0) lo = pts[i].x < lo ? pts[i].x : lo, hi = pts[i].x > hi ? pts[i].x : hi;
        int log_x = hi > 50 * lo; /* peak RSS and activation MiB apart: decades */
        const char *xlabel = x_rss ? (log_x ? "peak RSS of the process (MiB, log scale)" : "peak RSS of the process (MiB)")
                             : log_x ? "activation memory (MiB, log scale): remat's measured high-water mark; [RSS]: peak RSS"
                                     : "activation memory (MiB): remat's measured high-water mark; [RSS] points: peak RSS";
        const char *note = x_rss ? "x: each run's peak RSS as the OS measures it (wait4), parameters, optimizer "
                                   "state and libraries included: like is compared with like"
                                 : "x: activation bytes where a program reports them, else the process's peak RSS "
                                   "(marked [RSS], includes parameters and libraries)";
        rm_chart c = {title, sub, xlabel, "step time (ms, median)", note, series, n_series, pts, k, log_x};
        if (rm_chart_svg(&c, path, err, sizeof err) != RM_OK) rc = cli_fail(1, "--svg: %s", err);
    }
    free(labels);
    free(pts);
    return rc;
}

int cli_plan_svg(const char *path, const char *config, const double *mib, const double *overhead, const int *paged,
                 int n) {
    rm_chart_point *pts = malloc(sizeof *pts * (size_t)(n ? n : 1));
    char (*labels)[32] = malloc(32 * (size_t)(n ? n : 1)), title[400], err[600];
    int rc = 0, any_paged = 0;
    if (!pts || !labels) rc = cli_fail(1, "out of memory");
    for (int i = 0; !rc && i < n; i++) {
        snprintf(labels[i], 32, "%.2f MiB", mib[i]);
        pts[i] = (rm_chart_point){mib[i], 100 * overhead[i], labels[i], paged && paged[i] ? 1 : 0};
        any_paged |= paged && paged[i];
    }
    rm_chart_series s[2] = {{"remat plan --sweep (predicted)", 1, RM_MARK_DIAMOND},
                            {"with --scratch: keep, recompute or page (predicted)", 1, RM_MARK_SQUARE}};
    snprintf(title, sizeof title, "Predicted recompute overhead against activation memory: %s", config);
    rm_chart c = {title, "planned, not measured: remat plan --sweep (measure with remat bench)",
                  "planned activation memory (MiB)", "predicted overhead (% of a step)", "", s, 1 + any_paged, pts, n,
                  0};
    if (!rc && rm_chart_svg(&c, path, err, sizeof err) != RM_OK) rc = cli_fail(1, "--svg: %s", err);
    free(pts);
    free(labels);
    return rc;
}
