/* test_chart.c: rm_chart_svg through the public API: one <g class="point">
 * per drawable point (non-finite ones, and x <= 0 on a log axis, left out),
 * text escaped so the file stays well-formed, a polyline for line series,
 * and errors for bad series indexes and unwritable paths. */
#include "check.h"
#include "remat.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = calloc(1, 1 << 20);
    if (b && fread(b, 1, (1 << 20) - 1, f) == 0) b[0] = 0;
    fclose(f);
    return b;
}

static int count(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; p && (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

/* Finite values an axis cannot span (the adversarial pass of issue 36): the SVG had "nan" and "-inf"
 * coordinates (a range from -1e308 to 1e308 is infinite; the decade of 5e-324 ticks at 10^-324 = 0).
 * Refused, naming the point; the largest values taken draw finite coordinates. */
static void extremes(rm_chart *c, rm_chart_point *pts, const char *path) {
    char err[256];
    const rm_chart_point saved[2] = {pts[0], pts[1]};
    const double bad[][3] = {{1e308, 1, 0}, {-1e301, 1, 0}, {1, -1e308, 0}, {5e-324, 1, 1}, {1e-301, 1, 1}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        c->log_x = (int)bad[i][2];
        pts[0].x = bad[i][0], pts[0].y = bad[i][1], pts[1].x = -pts[0].x, pts[1].y = -pts[0].y;
        CHECK(rm_chart_svg(c, path, err, sizeof err) == RM_ERR_ARG && strstr(err, "point 0") && strstr(err, "1e300"),
              "x %g, y %g (log %d): %s", bad[i][0], bad[i][1], c->log_x, err);
    }
    const double good[][3] = {{1e300, 1e300, 0}, {-1e300, 1, 0}, {1e-300, 1, 1}, {1e300, 1, 1}};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        c->log_x = (int)good[i][2];
        pts[0].x = good[i][0], pts[0].y = good[i][1], pts[1].x = -good[i][0], pts[1].y = -good[i][1];
        CHECK(rm_chart_svg(c, path, err, sizeof err) == RM_OK, "x %g (log %d): %s", good[i][0], c->log_x, err);
        char *svg = slurp(path);
        CHECK(svg && !strstr(svg, "nan") && !strstr(svg, "inf") && count(svg, "class=\"point\"") >= 3,
              "x %g, y %g (log %d): finite coordinates", good[i][0], good[i][1], c->log_x);
        free(svg);
    }
    c->log_x = 0, pts[0] = saved[0], pts[1] = saved[1];
}

int main(void) {
    char path[] = "/tmp/remat_chart_XXXXXX", err[256];
    int fd = mkstemp(path);
    if (fd < 0) return 1;
    close(fd);
    rm_chart_series series[2] = {{"strategies", 0, RM_MARK_CIRCLE}, {"sweep <&\"front\">", 1, RM_MARK_DIAMOND}};
    rm_chart_point pts[6] = {{1.5, 10, "none", 0},  {0.5, 14, "blocks", 0}, {0.7, 12, "b <50%> & \"x\"", 1},
                             {1.2, 11, "b 90%", 1}, {NAN, 3, "lost", 0},    {0.0, 20, "zero", 1}};
    rm_chart c = {"title & <model>", "machine", "MiB", "ms", "note", series, 2, pts, 6, 0};
    CHECK(rm_chart_svg(&c, path, err, sizeof err) == RM_OK, "write: %s", err);
    char *svg = slurp(path);
    CHECK(svg && count(svg, "class=\"point\"") == 5, "5 drawable points (NaN left out): %d", count(svg, "class=\"point\""));
    CHECK(svg && count(svg, "<polyline") == 1, "one line series");
    CHECK(svg && strstr(svg, "b &lt;50%&gt; &amp; &quot;x&quot;") && strstr(svg, "title &amp; &lt;model&gt;"),
          "text escaped");
    CHECK(svg && !strstr(svg, "<model>") && !strstr(svg, "lost"), "no raw markup, no NaN point");
    CHECK(svg && strstr(svg, "<svg xmlns=\"http://www.w3.org/2000/svg\"") && strstr(svg, "</svg>"), "an SVG document");
    free(svg);

    c.log_x = 1; /* x = 0 cannot be drawn on a log axis */
    CHECK(rm_chart_svg(&c, path, err, sizeof err) == RM_OK, "log write: %s", err);
    svg = slurp(path);
    CHECK(svg && count(svg, "class=\"point\"") == 4 && !strstr(svg, ">zero<"), "log axis leaves x <= 0 out");
    free(svg);

    pts[1].series = 2;
    CHECK(rm_chart_svg(&c, path, err, sizeof err) == RM_ERR_ARG && strstr(err, "series"), "bad series: %s", err);
    pts[1].series = 0;
    extremes(&c, pts, path);
    CHECK(rm_chart_svg(&c, "/nonexistent-dir/c.svg", err, sizeof err) == RM_ERR_IO, "unwritable path");
    CHECK(rm_chart_svg(NULL, path, err, sizeof err) == RM_ERR_ARG, "no chart");
    c.n_points = 0;
    CHECK(rm_chart_svg(&c, path, err, sizeof err) == RM_OK, "an empty chart is still a chart");
    remove(path);
    return check_done("test_chart");
}
