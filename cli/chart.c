/* chart.c: the charts of `remat bench --svg` and `remat plan --sweep --svg`,
 * drawn by the library's rm_chart_svg, and the reading of --compare CSV
 * files (remat bench's own columns, e.g. from bench/torch_tradeoff.py). */
#include "bench.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One CSV record from *s (RFC 4180, as Python's csv, pandas and spreadsheets
 * write it: a field in double quotes may hold commas and line breaks, and ""
 * is a quote in it); fields[k] gets field k (cut to CSV_FIELD bytes), for k
 * below max. *s moves to the next record. Returns the fields in the record,
 * or -1 for a quote never closed (the rest of the text). remat's own columns
 * hold no commas, but a peer's label may ("torch, bs=4"): split at every
 * comma, such a row was read by the wrong columns (a peak RSS as the step
 * time) without a word. */
#define CSV_FIELD 256
static int csv_record(const char **s, char (*fields)[CSV_FIELD], int max) {
    const char *p = *s;
    int k = 0, len = 0, quoted = 0, closed = 1;
    for (;; p++) {
        char c = *p;
        if (quoted) {
            if (!c) { closed = 0; break; }
            if (c == '"' && p[1] == '"') p++;
            else if (c == '"') { quoted = 0; continue; }
        } else if (c == '"' && len == 0) {
            quoted = 1;
            continue;
        } else if (!c || c == '\n' || c == ',') {
            if (k < max) fields[k][len < CSV_FIELD ? len : CSV_FIELD - 1] = 0;
            k++, len = 0;
            if (c != ',') break;
            continue;
        } else if (c == '\r' && (p[1] == '\n' || !p[1])) {
            continue;
        }
        if (k < max && len < CSV_FIELD - 1) fields[k][len] = c;
        len++;
    }
    *s = *p ? p + 1 : p;
    return closed ? k : -1;
}

/* A byte count of a --compare row: finite, >= 0, below 2^60; else -1. */
static double row_bytes(const char *v) {
    char *end;
    double x = *v ? strtod(v, &end) : 0;
    return *v && (*end || !(x >= 0 && x < 1152921504606846976.0)) ? -1 : x;
}

/* The fields of one data row of a --compare file into p (cols: the header's
 * columns of strategy, activation bytes, peak RSS, step time, source,
 * label); 1 if it holds a point. */
static int compare_row(char (*f)[CSV_FIELD], int nf, const int *cols, bench_point *p) {
    static const char none[1] = "";
    const char *v[6];
    for (int c = 0; c < 6; c++) v[c] = cols[c] >= 0 && cols[c] < nf ? f[cols[c]] : none;
    memset(p, 0, sizeof *p);
    snprintf(p->strategy, sizeof p->strategy, "%s", v[0]);
    snprintf(p->label, sizeof p->label, "%s", *v[5] ? v[5] : v[0]);
    snprintf(p->source, sizeof p->source, "%s", *v[4] ? v[4] : "compare");
    double act = row_bytes(v[1]), rss = row_bytes(v[2]);
    char *end;
    p->median = *v[3] ? strtod(v[3], &end) : NAN;
    if (!*v[3] || *end || !(p->median >= 0 && p->median < 1e12) || act < 0 || rss < 0) return 0;
    p->measured = (size_t)act, p->peak_rss = (size_t)rss;
    return p->ok = p->measured || p->peak_rss;
}

#define CSV_COLS 64 /* the columns read; the ones wanted must be among the first 64 */

/* The header's columns of the names compare_row reads (-1: absent). */
static void compare_columns(char (*f)[CSV_FIELD], int nf, int *cols) {
    static const char *const names[6] = {"strategy", "activation_bytes_measured", "peak_rss_bytes", "step_ms_median",
                                         "source", "label"};
    for (int c = 0; c < 6; c++) {
        cols[c] = -1;
        for (int k = 0; k < nf && k < CSV_COLS && cols[c] < 0; k++)
            if (!strcmp(f[k], names[c])) cols[c] = k;
    }
}

/* The rows of text after its header into *out (grown as needed). */
static int compare_rows(const char *line, const int *cols, char (*f)[CSV_FIELD], bench_point **out, int *n,
                        int *rows, int *bad) {
    int cap = 0;
    while (*line) {
        if (*line == '\n' || (*line == '\r' && line[1] == '\n')) { /* an empty line */
            line += *line == '\r' ? 2 : 1;
            continue;
        }
        int nf = csv_record(&line, f, CSV_COLS);
        ++*rows;
        if (*n == cap) {
            bench_point *np = realloc(*out, sizeof **out * (size_t)(cap = cap ? 2 * cap : 16));
            if (!np) return cli_fail(1, "out of memory");
            *out = np;
        }
        if (nf >= 0 && compare_row(f, nf, cols, &(*out)[*n])) ++*n;
        else ++*bad;
    }
    return 0;
}

int bench_load_compare(const char *path, bench_point **out, int *n) {
    char *text = NULL, err[600];
    *out = NULL, *n = 0;
    if (rm_read_file(path, 64u << 20, &text, NULL, err, sizeof err) != RM_OK) return cli_fail(1, "--compare: %s", err);
    char (*f)[CSV_FIELD] = malloc(sizeof *f * CSV_COLS);
    int cols[6], rows = 0, bad = 0, rc = f ? 0 : cli_fail(1, "out of memory");
    const char *line = text;
    int nf = rc ? 0 : csv_record(&line, f, CSV_COLS);
    if (!rc) compare_columns(f, nf, cols);
    if (!rc && (cols[0] < 0 || cols[3] < 0 || (cols[1] < 0 && cols[2] < 0)))
        rc = cli_fail(1, "--compare '%s' is not a remat bench CSV: its first line needs the columns strategy, "
                      "step_ms_median and activation_bytes_measured or peak_rss_bytes (bench/torch_tradeoff.py "
                      "writes them)", path);
    if (!rc) rc = compare_rows(line, cols, f, out, n, &rows, &bad);
    free(text);
    free(f);
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
