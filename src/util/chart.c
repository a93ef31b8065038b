/* chart.c: rm_chart_svg, a small scatter/line chart as one self-contained
 * SVG file (no scripts, no external fonts or styles), for the trade-off
 * charts of `remat bench` and `remat plan --sweep`.
 *
 * Layout: a plot area with a margin for the axis labels; both axes start at
 * zero unless the data go below it and end at the next "nice" tick above
 * the largest value (ticks are 1, 2 or 5 times a power of ten); with log_x
 * the x axis spans whole decades, ticked at 1, 2 and 5. A label that would
 * overlap one already placed moves down a row. Every point
 * is one <g class="point"> holding its mark, a <title> (the tooltip) and its
 * label; a series with `line` set is also joined by a polyline in order of
 * x. Text is escaped, so labels may hold any characters. */
#include "remat.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { W = 1080, H = 640, LEFT = 80, RIGHT = 330, TOP = 70, BOTTOM = 90, MAX_TICKS = 64 };

static const char *const palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2",
                                      "#17becf"};

/* Text content or an attribute value, XML-escaped; control characters dropped. */
static void put_text(FILE *f, const char *s) {
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '<') fputs("&lt;", f);
        else if (c == '>') fputs("&gt;", f);
        else if (c == '&') fputs("&amp;", f);
        else if (c == '"') fputs("&quot;", f);
        else if (c >= 0x20 || c == '\t') fputc(c, f);
    }
}

/* The tick step for a range: 1, 2 or 5 times a power of ten, about 6 ticks. */
static double nice_step(double range) {
    if (!(range > 0)) return 1;
    double raw = range / 6, p = pow(10, floor(log10(raw))), r = raw / p;
    return (r <= 1 ? 1 : r <= 2 ? 2 : r <= 5 ? 5 : 10) * p;
}

typedef struct axis {
    double lo, hi, step;
    int log; /* lo, hi are then log10 of the ends */
} axis;

/* A coordinate rm_chart_svg takes: not finite (left out), or at most 1e300
 * in size (so that the axis' range is finite), and on a log axis 0 or below
 * (left out) or at least 1e-300 (so that its decade's ticks are above 0). */
static int chart_value_ok(double v, int log) {
    return !isfinite(v) || (fabs(v) <= 1e300 && (!log || v <= 0 || v >= 1e-300));
}

/* A point's coordinate is drawable on this axis. */
static int on_axis(const axis *a, double v) { return isfinite(v) && (!a->log || v > 0); }

static axis make_axis(const rm_chart *c, int use_y) {
    axis a = {0, 0, 1, !use_y && c->log_x};
    double lo = a.log ? INFINITY : 0, hi = a.log ? -INFINITY : 0;
    for (int i = 0; i < c->n_points; i++) {
        double v = use_y ? c->points[i].y : c->points[i].x;
        if (!on_axis(&a, v)) continue;
        if (a.log) v = log10(v);
        if (v < lo) lo = v;
        if (v > hi) hi = v;
    }
    if (a.log) { /* whole decades */
        if (!isfinite(lo)) lo = 0, hi = 1;
        a.lo = floor(lo), a.hi = ceil(hi) > floor(lo) ? ceil(hi) : floor(lo) + 1;
        return a;
    }
    if (hi <= lo) hi = lo + 1;
    a.step = nice_step(hi - lo);
    a.lo = floor(lo / a.step) * a.step;
    a.hi = ceil(hi / a.step) * a.step;
    if (a.hi - hi < 0.02 * (a.hi - a.lo)) a.hi += a.step; /* room for the top label */
    return a;
}

/* The tick values of an axis: every step, or 1, 2, 5 of each decade. */
static int ticks(const axis *a, double *t) {
    int n = 0;
    if (!a->log) {
        for (double v = a->lo; v <= a->hi + a->step / 2 && n < MAX_TICKS; v += a->step) t[n++] = v;
        return n;
    }
    for (double d = a->lo; d <= a->hi && n < MAX_TICKS - 3; d++)
        for (int m = 0; m < 3; m++)
            if (d + log10((double[]){1, 2, 5}[m]) <= a->hi + 1e-9) t[n++] = pow(10, d) * (double[]){1, 2, 5}[m];
    return n;
}

static double frac(const axis *a, double v) { return ((a->log ? log10(v) : v) - a->lo) / (a->hi - a->lo); }
static double px(const axis *a, double v) { return LEFT + frac(a, v) * (W - LEFT - RIGHT); }
static double py(const axis *a, double v) { return H - BOTTOM - frac(a, v) * (H - TOP - BOTTOM); }

static void put_mark(FILE *f, rm_mark m, double x, double y, const char *color) {
    switch (m) {
    case RM_MARK_SQUARE:
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"9\" height=\"9\" fill=\"%s\"/>", x - 4.5, y - 4.5, color);
        break;
    case RM_MARK_TRIANGLE:
        fprintf(f, "<path d=\"M%.1f %.1fL%.1f %.1fL%.1f %.1fZ\" fill=\"%s\"/>", x, y - 6, x + 5.5, y + 4, x - 5.5, y + 4,
                color);
        break;
    case RM_MARK_DIAMOND:
        fprintf(f, "<path d=\"M%.1f %.1fL%.1f %.1fL%.1f %.1fL%.1f %.1fZ\" fill=\"%s\"/>", x, y - 6, x + 6, y, x, y + 6,
                x - 6, y, color);
        break;
    default: fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"%s\"/>", x, y, color);
    }
}

static void put_axes(FILE *f, const rm_chart *c, const axis *ax, const axis *ay) {
    double tx[MAX_TICKS], ty[MAX_TICKS];
    int nx = ticks(ax, tx), ny = ticks(ay, ty);
    fprintf(f, "<g stroke=\"#ddd\" stroke-width=\"1\">\n");
    for (int i = 0; i < nx; i++)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"/>\n", px(ax, tx[i]), TOP, px(ax, tx[i]),
                H - BOTTOM);
    for (int i = 0; i < ny; i++)
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\"/>\n", LEFT, py(ay, ty[i]), W - RIGHT,
                py(ay, ty[i]));
    fprintf(f, "</g>\n<g font-size=\"12\" fill=\"#333\">\n");
    for (int i = 0; i < nx; i++)
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g</text>\n", px(ax, tx[i]), H - BOTTOM + 18,
                tx[i]);
    for (int i = 0; i < ny; i++)
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", LEFT - 8, py(ay, ty[i]) + 4, ty[i]);
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-size=\"14\">", (LEFT + W - RIGHT) / 2,
            H - BOTTOM + 42);
    put_text(f, c->x_label);
    fprintf(f, "</text>\n<text transform=\"translate(22 %d) rotate(-90)\" text-anchor=\"middle\" font-size=\"14\">",
            (TOP + H - BOTTOM) / 2);
    put_text(f, c->y_label);
    fprintf(f, "</text>\n</g>\n<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#333\"/>\n",
            LEFT, TOP, W - LEFT - RIGHT, H - TOP - BOTTOM);
}

static int cmp_x(const void *a, const void *b) {
    double x = (*(const rm_chart_point *const *)a)->x, y = (*(const rm_chart_point *const *)b)->x;
    return x < y ? -1 : x > y;
}

/* The polyline of series s through its points in order of x. */
static int put_line(FILE *f, const rm_chart *c, int s, const axis *ax, const axis *ay, const char *color) {
    const rm_chart_point **p = malloc(sizeof *p * (size_t)(c->n_points ? c->n_points : 1));
    if (!p) return 0;
    int n = 0;
    for (int i = 0; i < c->n_points; i++)
        if (c->points[i].series == s && on_axis(ax, c->points[i].x) && on_axis(ay, c->points[i].y))
            p[n++] = &c->points[i];
    qsort(p, (size_t)n, sizeof *p, cmp_x);
    fprintf(f, "<polyline class=\"line\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", color);
    for (int i = 0; i < n; i++) fprintf(f, "%s%.1f,%.1f", i ? " " : "", px(ax, p[i]->x), py(ay, p[i]->y));
    fputs("\"/>\n", f);
    free(p);
    return 1;
}

/* Where a label goes: beside its mark, moved a row (13 px) at a time, down,
 * or up when down leaves the plot, past the labels already placed that it
 * would overlap (labels are ~6.5 px a character). placed[j]: left, baseline, width. */
static double label_y(double x, double y, double w, double (*placed)[3], int n_placed) {
    for (int dir = 13; dir >= -13; dir -= 26) {
        double ly = y;
        for (int moved = 1; moved;) {
            moved = 0;
            for (int j = 0; j < n_placed; j++)
                if (fabs(placed[j][1] - ly) < 12 && x < placed[j][0] + placed[j][2] && placed[j][0] < x + w)
                    ly += dir, moved = 1;
        }
        if (ly <= H - BOTTOM - 2 && ly >= TOP + 12) return ly;
    }
    return y;
}

static int put_points(FILE *f, const rm_chart *c, const axis *ax, const axis *ay) {
    double (*placed)[3] = malloc(sizeof *placed * (size_t)(c->n_points ? c->n_points : 1));
    if (!placed) return 0;
    int n_placed = 0;
    for (int i = 0; i < c->n_points; i++) {
        const rm_chart_point *p = &c->points[i];
        if (!on_axis(ax, p->x) || !on_axis(ay, p->y)) continue;
        const rm_chart_series *s = &c->series[p->series];
        const char *color = palette[p->series % (int)(sizeof palette / sizeof *palette)];
        double x = px(ax, p->x), y = py(ay, p->y);
        double w = 6.5 * (double)(p->label ? strlen(p->label) : 0);
        int left = x + 8 + w > W - RIGHT; /* at the right edge: the label goes left of the mark */
        double lx = left ? x - 8 - w : x + 8, ly = label_y(lx, y - 6, w, placed, n_placed);
        placed[n_placed][0] = lx, placed[n_placed][1] = ly, placed[n_placed++][2] = w;
        fputs("<g class=\"point\"><title>", f);
        put_text(f, s->name);
        fputs(": ", f);
        put_text(f, p->label);
        fprintf(f, " (%g, %g)</title>", p->x, p->y);
        put_mark(f, s->mark, x, y, color);
        if (fabs(ly - (y - 6)) > 1) /* moved away: a leader line to its mark */
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"0.5\"/>", x, y,
                    left ? x - 8 : x + 8, ly - 4, color);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" fill=\"%s\"%s>", left ? x - 8 : x + 8, ly, color,
                left ? " text-anchor=\"end\"" : "");
        put_text(f, p->label);
        fputs("</text></g>\n", f);
    }
    free(placed);
    return 1;
}

static void put_legend(FILE *f, const rm_chart *c) {
    fprintf(f, "<g font-size=\"12\" fill=\"#333\">\n");
    for (int s = 0; s < c->n_series; s++) {
        const char *color = palette[s % (int)(sizeof palette / sizeof *palette)];
        double y = TOP + 10 + 22 * s;
        if (c->series[s].line)
            fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"/>",
                    W - RIGHT + 14, y, W - RIGHT + 34, y, color);
        put_mark(f, c->series[s].mark, W - RIGHT + 24, y, color);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\">", W - RIGHT + 42, y + 4);
        put_text(f, c->series[s].name);
        fputs("</text>\n", f);
    }
    fputs("</g>\n", f);
}

rm_status rm_chart_svg(const rm_chart *c, const char *path, char *err, size_t errlen) {
    if (!err) errlen = 0; /* err may be NULL: snprintf(NULL, 0, ..) writes nothing */
    if (!c || !path || c->n_points < 0 || c->n_series < 1 || (c->n_points && !c->points) || !c->series) {
        snprintf(err, errlen, "rm_chart_svg: no chart, path or series");
        return RM_ERR_ARG;
    }
    for (int i = 0; i < c->n_points; i++) {
        const rm_chart_point *p = &c->points[i];
        if (p->series < 0 || p->series >= c->n_series) {
            snprintf(err, errlen, "rm_chart_svg: point %d names series %d of %d", i, p->series, c->n_series);
            return RM_ERR_ARG;
        }
        /* an axis from -1e308 to 1e308 spans an infinite range, and 10^-324 (a tick of a denormal's decade)
         * is 0: the SVG's coordinates were "nan" and "-inf" */
        const char *why = !chart_value_ok(p->x, c->log_x) ? "x" : !chart_value_ok(p->y, 0) ? "y" : NULL;
        if (why) {
            snprintf(err, errlen, "rm_chart_svg: point %d: %s = %g is beyond what an axis spans (a finite value is "
                     "at most 1e300 in size%s; a value that is not finite is left out)", i, why,
                     *why == 'x' ? p->x : p->y, c->log_x && *why == 'x' ? ", and on a log axis 0 or at least 1e-300" : "");
            return RM_ERR_ARG;
        }
    }
    rm_out *out;
    rm_status st = rm_out_open(path, &out, err, errlen);
    if (st != RM_OK) return st;
    FILE *f = rm_out_file(out);
    axis ax = make_axis(c, 0), ay = make_axis(c, 1);
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"sans-serif\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
               "<text x=\"%d\" y=\"28\" font-size=\"17\" font-weight=\"bold\">", W, H, W, H, LEFT);
    put_text(f, c->title);
    fprintf(f, "</text>\n<text x=\"%d\" y=\"50\" font-size=\"12\" fill=\"#555\">", LEFT);
    put_text(f, c->subtitle);
    fputs("</text>\n", f);
    put_axes(f, c, &ax, &ay);
    int ok = 1;
    for (int s = 0; s < c->n_series; s++)
        if (c->series[s].line) ok &= put_line(f, c, s, &ax, &ay, palette[s % (int)(sizeof palette / sizeof *palette)]);
    ok &= put_points(f, c, &ax, &ay);
    put_legend(f, c);
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#555\">", LEFT, H - 22);
    put_text(f, c->note);
    fputs("</text>\n</svg>\n", f);
    if (!ok) {
        rm_out_close(out, 0, NULL, 0);
        return snprintf(err, errlen, "cannot write chart '%s': out of memory", path), RM_ERR_NOMEM;
    }
    return rm_out_close(out, 1, err, errlen);
}
