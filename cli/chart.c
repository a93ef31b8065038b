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

/* A byte count of a --compare file: 0 (none) unless a number in [0, 2^60]
 * (a cast of 1e30 or -1 to size_t would be undefined). */
static size_t bytes_of(const char *v) {
    double d = strtod(v, NULL);
    return d >= 0 && d <= (double)((int64_t)1 << 60) ? (size_t)d : 0;
}

/* The rows of a --compare file: points with source, strategy, activation
 * bytes (0: none reported), peak RSS and median step time. */
static int load_compare(const char *path, bench_point **out, int *n) {
    FILE *f = fopen(path, "r");
    if (!f) return cli_fail(1, "cannot read --compare file '%s'", path);
    char header[1024], line[1024], v[256];
    *out = NULL, *n = 0;
    int cols[6] = {-1};
    if (fgets(header, sizeof header, f)) {
        const char *names[6] = {"strategy", "activation_bytes_measured", "peak_rss_bytes", "step_ms_median", "source",
                                "label"};
        for (int c = 0; c < 6; c++) cols[c] = column(header, names[c]);
    }
    if (cols[0] < 0 || cols[3] < 0 || (cols[1] < 0 && cols[2] < 0)) {
        fclose(f);
        return cli_fail(1, "'%s' is not a remat bench CSV: it needs the columns strategy, step_ms_median and "
                        "activation_bytes_measured or peak_rss_bytes", path);
    }
    int cap = 0;
    while (fgets(line, sizeof line, f)) {
        if (*n == cap) {
            bench_point *np = realloc(*out, sizeof **out * (size_t)(cap = cap ? 2 * cap : 16));
            if (!np) break;
            *out = np;
        }
        bench_point *p = &(*out)[*n];
        memset(p, 0, sizeof *p);
        field_at(line, cols[0], p->strategy, sizeof p->strategy);
        field_at(line, cols[5], p->label, sizeof p->label);
        if (!p->label[0]) snprintf(p->label, sizeof p->label, "%s", p->strategy);
        field_at(line, cols[4], p->source, sizeof p->source);
        if (!p->source[0]) snprintf(p->source, sizeof p->source, "compare");
        field_at(line, cols[1], v, sizeof v), p->measured = bytes_of(v);
        field_at(line, cols[2], v, sizeof v), p->peak_rss = bytes_of(v);
        field_at(line, cols[3], v, sizeof v), p->median = *v ? strtod(v, NULL) : NAN;
        p->ok = isfinite(p->median) && (p->measured || p->peak_rss);
        *n += p->ok;
    }
    fclose(f);
    return 0;
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

int bench_svg(const char *path, const bench_point *p, int n, const char *compare, const char *config,
              const char *machine, int steps, int rounds) {
    bench_point *cmp = NULL;
    int n_cmp = 0, rc = compare ? load_compare(compare, &cmp, &n_cmp) : 0;
    rm_chart_point *pts = rc ? NULL : malloc(sizeof *pts * (size_t)(n + n_cmp + 1));
    char (*labels)[96] = rc ? NULL : malloc(96 * (size_t)(n + n_cmp + 1));
    if (!rc && (!pts || !labels)) rc = cli_fail(1, "out of memory");
    rm_chart_series series[16] = {{"remat --checkpoint STRATEGY", 0, RM_MARK_CIRCLE},
                                  {"remat --memory-budget sweep (Pareto front)", 1, RM_MARK_DIAMOND}};
    char names[16][96];
    int n_series = 2, k = 0;
    for (int i = 0; !rc && i < n; i++) {
        if (!p[i].ok) continue;
        pts[k] = (rm_chart_point){p[i].measured / 1048576.0, p[i].median, p[i].label, p[i].budget ? 1 : 0};
        k++;
    }
    for (int i = 0; !rc && i < n_cmp; i++) {
        int by_rss = cmp[i].measured == 0, s = compare_series(series, names, &n_series, cmp[i].source, by_rss);
        if (s < 0) continue;
        snprintf(labels[k], 96, "%s%s", cmp[i].label, by_rss ? " [RSS]" : "");
        pts[k] = (rm_chart_point){(by_rss ? cmp[i].peak_rss : cmp[i].measured) / 1048576.0, cmp[i].median, labels[k], s};
        k++;
    }
    if (!rc) {
        char title[400], sub[400], err[512];
        snprintf(title, sizeof title, "Step time against activation memory: %s", config);
        snprintf(sub, sizeof sub, "%s; median of %d round(s) of %d steps per point (remat bench)", machine, rounds,
                 steps);
        double lo = INFINITY, hi = 0;
        for (int i = 0; i < k; i++)
            if (pts[i].x > 0) lo = pts[i].x < lo ? pts[i].x : lo, hi = pts[i].x > hi ? pts[i].x : hi;
        int log_x = hi > 50 * lo; /* peak RSS and activation MiB apart: decades */
        rm_chart c = {title, sub,
                      log_x ? "activation memory (MiB, log scale): remat's measured high-water mark; [RSS]: peak RSS"
                            : "activation memory (MiB): remat's measured high-water mark; [RSS] points: peak RSS",
                      "step time (ms, median)",
                      "x: activation bytes where a program reports them, else the process's peak RSS (marked [RSS], "
                      "includes parameters and libraries)",
                      series, n_series, pts, k, log_x};
        if (rm_chart_svg(&c, path, err, sizeof err) != RM_OK) rc = cli_fail(1, "%s", err);
    }
    free(labels);
    free(pts);
    free(cmp);
    return rc;
}

int cli_plan_svg(const char *path, const char *config, const double *mib, const double *overhead, int n) {
    rm_chart_point *pts = malloc(sizeof *pts * (size_t)(n ? n : 1));
    char (*labels)[32] = malloc(32 * (size_t)(n ? n : 1)), title[400], err[512];
    int rc = 0;
    if (!pts || !labels) rc = cli_fail(1, "out of memory");
    for (int i = 0; !rc && i < n; i++) {
        snprintf(labels[i], 32, "%.2f MiB", mib[i]);
        pts[i] = (rm_chart_point){mib[i], 100 * overhead[i], labels[i], 0};
    }
    rm_chart_series s = {"remat plan --sweep (predicted)", 1, RM_MARK_DIAMOND};
    snprintf(title, sizeof title, "Predicted recompute overhead against activation memory: %s", config);
    rm_chart c = {title, "planned, not measured: remat plan --sweep (measure with remat bench)",
                  "planned activation memory (MiB)", "predicted overhead (% of a step)", "", &s, 1, pts, n, 0};
    if (!rc && rm_chart_svg(&c, path, err, sizeof err) != RM_OK) rc = cli_fail(1, "%s", err);
    free(pts);
    free(labels);
    return rc;
}
