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
    CHECK(rm_chart_svg(&c, "/nonexistent-dir/c.svg", err, sizeof err) == RM_ERR_IO, "unwritable path");
    CHECK(rm_chart_svg(NULL, path, err, sizeof err) == RM_ERR_ARG, "no chart");
    c.n_points = 0;
    CHECK(rm_chart_svg(&c, path, err, sizeof err) == RM_OK, "an empty chart is still a chart");
    remove(path);
    return check_done("test_chart");
}
