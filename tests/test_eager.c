/* test_eager.c: the general-graph planner for an eager framework (issue 34:
 * rematplan's op-level recomputation; graph JSON "eager", "keep", "block").
 *
 *   - An exhaustive search is the oracle: on small random graphs every
 *     assignment of keep / once / each to the nodes (the loss kept), one node
 *     per block, is priced by the same model; the planner's least budget and
 *     its recomputation at budgets above it are compared with the optimum.
 *   - Its plans never recompute in the forward pass ("forward") and never
 *     recompute a node marked "keep".
 *   - With the model's layers given ("block"), the planner's least budget is
 *     at most per-layer checkpointing's peak (what crosses the layers kept,
 *     the rest recomputed once), and at that peak it recomputes no more.
 *   - The JSON: bad "eager", "keep", "block" and "start" refused with a message;
 *     a start (the least plan of an earlier answer) gives the same answers;
 *     rm_price_graph's "live_bytes" has one entry per schedule item, whose
 *     largest is the peak. */
#include "check.h"
#include "plan/graphplan/graphplan.h"
#include "remat.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAXN = 9 };

static unsigned rng = 12345;
static int rnd(int n) {
    rng = rng * 1103515245u + 12345u;
    return (int)((rng >> 16) % (unsigned)n);
}

/* A chain with skips and branches, eager. */
static void random_graph(int n, rm_gmodel *m) {
    rm_gmodel_alloc(m, n);
    m->eager = 1;
    for (int i = 0; i < n; i++) {
        m->fwd[i] = 1 + rnd(10), m->bwd[i] = 1 + rnd(20);
        m->bytes[i] = i == n - 1 ? 1 : 1 + rnd(8);
        m->grad[i] = i == n - 1 ? 0 : m->bytes[i];
        m->has_bwd[i] = 1, m->reads_out[i] = rnd(10) < 3;
        if (i > 0) rm_gmodel_edge(m, i - 1, rnd(10) < 6);
        if (i > 1 && rnd(10) < 5) rm_gmodel_edge(m, rnd(i - 1), rnd(10) < 6);
        rm_gmodel_close_node(m, i);
    }
}

/* The price of modes (one node per block): 0 on success. */
static int price(const rm_gmodel *m, const char *mode, rm_geval_result *r) {
    int block[MAXN * 8];
    for (int i = 0; i < m->n; i++) block[i] = i;
    rm_schedule s;
    if (rm_gplan_schedule(m, mode, block, &s) != RM_OK) return 1;
    rm_status rc = rm_gmodel_simulate(NULL, m, &s, INT64_MAX / 4, r);
    rm_schedule_free(&s);
    return rc != RM_OK;
}

/* Exhaustive: the least peak, and the least recomputation within each budget of `budgets`. */
static void exhaustive(const rm_gmodel *m, int64_t *least, const int64_t *budgets, int nb, double *best) {
    int n = m->n, total = 1;
    for (int i = 0; i < n - 1; i++) total *= 3;
    char mode[MAXN];
    *least = INT64_MAX;
    for (int k = 0; k < nb; k++) best[k] = -1;
    for (int c = 0; c < total; c++) {
        for (int i = 0, x = c; i < n - 1; i++, x /= 3) mode[i] = (char)(x % 3);
        mode[n - 1] = RM_GKEEP;
        rm_geval_result r;
        if (price(m, mode, &r)) continue;
        if (r.peak < *least) *least = r.peak;
        for (int k = 0; k < nb; k++)
            if (r.peak <= budgets[k] && (best[k] < 0 || r.cost < best[k])) best[k] = r.cost;
    }
}

static void test_oracle(void) {
    int cases = 0, exact = 0, worse = 0;
    double sum_ratio = 0, max_ratio = 1, least_ratio = 1;
    for (int gi = 0; gi < 24; gi++) {
        rm_gmodel m;
        random_graph(5 + gi % 5, &m);
        rm_gplan all, at;
        CHECK(rm_gplan_solve(&m, INT64_MAX / 4, NULL, NULL, NULL, &all) == RM_OK && all.feasible, "store-all");
        int64_t least = rm_gplan_least(&m, NULL, NULL, NULL, &at), xleast;
        int64_t budgets[3] = {least, least + (all.peak - least) / 3, least + 2 * (all.peak - least) / 3};
        double best[3];
        exhaustive(&m, &xleast, budgets, 3, best);
        CHECK(least >= xleast, "graph %d: least %lld below the exhaustive %lld", gi, (long long)least,
              (long long)xleast);
        if ((double)least / (double)xleast > least_ratio) least_ratio = (double)least / (double)xleast;
        for (int k = 0; k < 3; k++) {
            rm_gplan p;
            CHECK(rm_gplan_solve_from(&m, budgets[k], NULL, NULL, NULL, &at, &p) == RM_OK && p.feasible,
                  "graph %d budget %lld: no plan (least %lld)", gi, (long long)budgets[k], (long long)least);
            for (int i = 0; i < m.n && p.feasible; i++)
                CHECK(p.mode[i] != RM_GFEACH && p.block[i] == i, "graph %d: node %d mode %d block %d", gi, i,
                      p.mode[i], p.block[i]);
            if (p.feasible && best[k] >= 0) {
                double fwd = 0;
                for (int i = 0; i < m.n; i++) fwd += m.fwd[i] + m.bwd[i];
                double ratio = (fwd + p.cost) / (fwd + best[k]);
                cases++, sum_ratio += ratio, exact += ratio < 1 + 1e-9, worse += ratio > 1.10;
                if (ratio > max_ratio) max_ratio = ratio;
                CHECK(p.cost >= best[k] - 1e-9, "graph %d: cheaper than the exhaustive optimum", gi);
            }
            rm_gplan_free(&p);
        }
        rm_gplan_free(&all), rm_gplan_free(&at);
        rm_gmodel_free(&m);
    }
    printf("eager, against the exhaustive optimum: %d budgets, %d exact, step time %.4fx on average, at most "
           "%.3fx; least budget at most %.3fx the exhaustive least\n", cases, exact, sum_ratio / cases, max_ratio,
           least_ratio);
    CHECK(worse == 0 && least_ratio <= 1.25, "%d budgets more than 10%% slower than the optimum; least %.3fx", worse,
          least_ratio);
}

/* Layers of `per` nodes (a chain, a skip inside each layer), the first node
 * of each layer its input; JSON with "block" per layer. */
static char *layered_json(int layers, int per, int blocks, int pin) {
    size_t cap = 200000, len = 0;
    char *j = malloc(cap);
    int n = layers * per + 1;
    len += (size_t)snprintf(j + len, cap - len, "{\"eager\": true, \"nodes\": [");
    for (int i = 0; i < n; i++) {
        int last = i == n - 1, inner = i % per;
        len += (size_t)snprintf(j + len, cap - len,
                                "%s{\"name\": \"n%d\", \"forward_time\": %d, \"backward_time\": %d, \"output_bytes\": "
                                "%d%s%s",
                                i ? ", " : "", i, inner == 1 ? 8 : 1, 2, last ? 4 : inner == 2 ? 4000 : 1000,
                                pin && i == per + 2 ? ", \"keep\": true" : "",
                                last ? ", \"backward_reads_output\": true" : "");
        if (blocks) len += (size_t)snprintf(j + len, cap - len, ", \"block\": %d", i / per);
        len += (size_t)snprintf(j + len, cap - len, "}");
    }
    len += (size_t)snprintf(j + len, cap - len, "], \"edges\": [");
    for (int i = 1; i < n; i++) {
        len += (size_t)snprintf(j + len, cap - len, "%s{\"producer\": %d, \"consumer\": %d}", i > 1 ? ", " : "",
                                i - 1, i);
        if (i % per == per - 1 && i >= per - 1)
            len += (size_t)snprintf(j + len, cap - len, ", {\"producer\": %d, \"consumer\": %d, \"backward_reads\": "
                                    "false}", i - (per - 1), i);
    }
    snprintf(j + len, cap - len, "]}");
    return j;
}

static long long field(const char *json, const char *key) {
    const char *p = json ? strstr(json, key) : NULL;
    return p ? atoll(p + strlen(key)) : -1;
}

static double dfield(const char *json, const char *key) {
    const char *p = json ? strstr(json, key) : NULL;
    return p ? atof(p + strlen(key)) : -1;
}

/* Per-layer checkpointing as a plan: the layers' inputs (node 0 of each) and the loss kept. */
static void per_layer_plan(int layers, int per, char *plan, size_t cap) {
    int n = layers * per + 1;
    size_t len = (size_t)snprintf(plan, cap, "{\"modes\": [");
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(plan + len, cap - len, "%s\"%s\"", i ? ", " : "",
                                i % per == 0 || i == n - 1 ? "keep" : "once");
    snprintf(plan + len, cap - len, "]}");
}

static void test_layers(void) {
    enum { L = 12, PER = 5 };
    char *json = layered_json(L, PER, 1, 0), *out = NULL, *priced = NULL, err[512], plan[4096];
    per_layer_plan(L, PER, plan, sizeof plan);
    CHECK(rm_price_graph(json, plan, &priced, err, sizeof err) == RM_OK && priced, "per-layer priced: %s", err);
    long long pl_peak = field(priced, "\"peak_bytes\":");
    double pl_time = dfield(priced, "\"recompute_time\":");
    CHECK(rm_plan_graph(json, -1, &out, err, sizeof err) == RM_OK && out, "store-all: %s", err);
    long long least = field(out, "\"min_budget_bytes\":"), all = field(out, "\"store_all_bytes\":");
    free(out), out = NULL;
    CHECK(least > 0 && least <= pl_peak && pl_peak < all, "least %lld <= per-layer checkpointing's peak %lld (store-all"
          " %lld)", least, pl_peak, all);
    CHECK(rm_plan_graph(json, pl_peak, &out, err, sizeof err) == RM_OK && out, "at per-layer's peak: %s", err);
    double t = dfield(out, "\"recompute_time\":");
    CHECK(t >= 0 && t <= pl_time && !strstr(out, "\"forward\""), "at per-layer's peak: recompute %g <= per-layer's "
          "%g, no recomputation in the forward", t, pl_time);
    printf("eager, %d layers: least %lld, per-layer checkpointing %lld (recompute %g), planned at its peak: "
           "recompute %g\n", L, least, pl_peak, pl_time, t);
    /* live_bytes: one per schedule item; the largest is the peak */
    const char *lb = priced ? strstr(priced, "\"live_bytes\":[") : NULL;
    long long mx = 0;
    int items = 0;
    for (const char *p = lb ? lb + 14 : NULL; p && *p && *p != ']'; items++) {
        long long v = atoll(p);
        if (v > mx) mx = v;
        p = strchr(p, ',');
        if (p) p++;
    }
    const char *sch = priced ? strstr(priced, "\"schedule\":[") : NULL;
    int sitems = 0;
    for (const char *p = sch ? sch + 12 : NULL; p && (p = strchr(p, '"')) && p < lb;) { /* one quoted string each */
        sitems += p[1] == 'F' || p[1] == 'R' || p[1] == 'B';
        p = strchr(p + 1, '"');
        if (p) p++;
    }
    CHECK(lb && mx == pl_peak && items == sitems && items > 2 * L * PER, "live_bytes: %d items (schedule %d), "
          "largest %lld (peak %lld)", items, sitems, mx, pl_peak);
    free(out), free(priced), free(json);
    /* a node marked keep is never recomputed */
    json = layered_json(L, PER, 1, 1);
    out = NULL;
    CHECK(rm_plan_graph(json, -1, &out, err, sizeof err) == RM_OK && out, "pinned: %s", err);
    least = field(out, "\"min_budget_bytes\":");
    free(out), out = NULL;
    CHECK(rm_plan_graph(json, least, &out, err, sizeof err) == RM_OK && out && strstr(out, "\"feasible\":true") &&
              !strstr(out, "{\"node\":\"n7\""), "the node marked keep is kept at the least budget: %s", out ? out : err);
    free(out), free(json);
}

/* A graph file of tests/data into buf (NUL-terminated). */
static void read_graph(const char *path, char *buf, size_t size) {
    FILE *f = fopen(path, "rb");
    size_t len = f ? fread(buf, 1, size - 1, f) : 0;
    if (f) fclose(f);
    buf[len] = 0;
    CHECK(len > 1000, "%s read (%zu bytes)", path, len);
}

/* A captured eager graph (tests/data/nanogpt_eager_graph.json: rematplan's
 * capture of a 4-layer nanoGPT, 119 nodes, so graphfast.c's search): more
 * budget does not cost more recomputation, at budgets a user asks (0.26 to
 * 0.9 of store-all). The search is a heuristic; before it also searched
 * tighter budgets, 0.5 cost 51 and 0.45 cost 42 (finer steps of 2.5% still
 * rise here and there: printed, not asserted). */
static void test_monotone(void) {
    static char json[1 << 17];
    read_graph("tests/data/nanogpt_eager_graph.json", json, sizeof json);
    char *out = NULL, err[512];
    CHECK(rm_plan_graph(json, -1, &out, err, sizeof err) == RM_OK && out, "store-all: %s", err);
    long long all = field(out, "\"store_all_bytes\":");
    free(out);
    static const double fractions[] = {0.26, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.7, 0.8, 0.9};
    double prev = INFINITY;
    int rises = 0, over = 0, planned = 0;
    for (int i = 0; i < (int)(sizeof fractions / sizeof *fractions) && all > 0; i++) {
        long long b = (long long)((double)all * fractions[i]);
        out = NULL;
        if (rm_plan_graph(json, b, &out, err, sizeof err) != RM_OK || !out) continue;
        double t = dfield(out, "\"recompute_time\":");
        long long peak = field(out, "\"peak_bytes\":");
        planned++, rises += t > prev * (1 + 1e-9), over += peak > b;
        printf("nanoGPT graph at %.2f of store-all: recompute %g, peak %lld\n", fractions[i], t, peak);
        prev = t;
        free(out);
    }
    CHECK(planned == 11 && rises == 0 && over == 0, "recompute time never rises with the budget: %d planned, %d "
          "rises, %d over budget", planned, rises, over);
}

/* The least of a captured graph is at most `most` of its store-all, and a plan at it is within it. */
static void check_least(const char *path, double most) {
    static char json[1 << 18];
    read_graph(path, json, sizeof json);
    char *out = NULL, err[512];
    CHECK(rm_plan_graph(json, -1, &out, err, sizeof err) == RM_OK && out, "%s store-all: %s", path, err);
    long long all = field(out, "\"store_all_bytes\":"), least = field(out, "\"min_budget_bytes\":");
    free(out), out = NULL;
    CHECK(all > 0 && least <= most * (double)all, "%s: least %lld is at most %.4g of store-all %lld (%.4f)", path,
          least, most, all, (double)least / (double)(all > 0 ? all : 1));
    CHECK(rm_plan_graph(json, least, &out, err, sizeof err) == RM_OK && out && strstr(out, "\"feasible\":true") &&
              field(out, "\"peak_bytes\":") <= least, "%s: a plan at the least, within it: %.200s", path,
          out ? out : err);
    free(out);
}

/* A captured eager graph whose least is set at the loss's backward
 * (tests/data/mistral_lora_eager_graph.json: rematplan's capture of the
 * Mistral + PEFT LoRA model of bench/torch_models.py, 344 nodes): there the
 * logits the training loop holds, log_softmax's output, its incoming
 * gradient and the gradient it makes are live with whatever a plan keeps.
 * Checkpointing over the layers keeps their inputs there (per-layer
 * checkpointing measured 0.391 of store-all); the least search stopped at
 * 0.383 (values of that size kept) before it started from the deepest plan
 * over the layers too (what crosses them rebuilt once, the rest each time,
 * the loss's block kept): 0.370. */
static void test_deep_least(void) {
    check_least("tests/data/mistral_lora_eager_graph.json", 0.375);
}

static void test_json(void) {
    const char *base = "{\"nodes\": [{\"forward_time\": 1, \"backward_time\": 1, \"output_bytes\": 10%s},"
                       " {\"forward_time\": 1, \"backward_time\": 1, \"output_bytes\": 10%s}],"
                       " \"edges\": [{\"producer\": 0, \"consumer\": 1}]%s}";
    const char *cases[][3] = {{"", "", ", \"eager\": 1"},
                              {", \"keep\": 2", "", ""},
                              {", \"block\": 0", "", ""},
                              {", \"block\": 0", ", \"block\": 2", ""},
                              {", \"block\": 1", ", \"block\": 1", ""},
                              {", \"block\": 0.5", ", \"block\": 1", ""},
                              {"", ", \"block\": 0", ""}, /* a block after none: read a NULL hint (SIGSEGV) */
                              {"", ", \"block\": \"a\"", ""},
                              {"", "", ", \"eager\": true, \"scratch_bandwidth\": 5"},
                              {", \"each\": 0", "", ""}};
    char json[512], err[256];
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
        snprintf(json, sizeof json, base, cases[i][0], cases[i][1], cases[i][2]);
        char *out = NULL;
        CHECK(rm_plan_graph(json, -1, &out, err, sizeof err) == RM_ERR_FORMAT && !out && err[0], "bad %d: %s", i, err);
        free(out);
    }
    snprintf(json, sizeof json, base, ", \"block\": 0, \"keep\": true", ", \"block\": 1", ", \"eager\": true");
    char *out = NULL;
    CHECK(rm_plan_graph(json, -1, &out, err, sizeof err) == RM_OK && out, "good: %s", err);
    free(out);
}

/* How many of an answer's "recompute" entries say "each". */
static int count_each(const char *ans) {
    int n = 0;
    for (const char *p = ans; p && (p = strstr(p, "\"mode\":\"each\"")); p++) n++;
    return n;
}

/* "each": false on a node: it is kept or recomputed once, never for each reader (rematplan's dropout
 * masks: its runtime draws the noise again where no mask is held). The layers graph at its least
 * budget recomputes nodes for each reader; with every node "each": false, no plan at any budget does,
 * and the least is still found (no higher than per-layer checkpointing's peak, which needs no each). */
static void test_each_false(void) {
    enum { L = 12, PER = 5 };
    char *json = layered_json(L, PER, 1, 0), err[512], plan[4096];
    size_t len = strlen(json), cap = len + 16 * (L * PER + 1) + 1, k = 0;
    char *once = malloc(cap);
    for (const char *p = json; *p;) { /* each node's "{\"name\"" gets "\"each\": false, " first */
        if (!strncmp(p, "{\"name\"", 7)) k += (size_t)snprintf(once + k, cap - k, "{\"each\": false, "), p++;
        else once[k++] = *p++;
    }
    once[k] = 0;
    char *a = NULL, *b = NULL, *priced = NULL;
    CHECK(rm_plan_graph(json, -1, &a, err, sizeof err) == RM_OK && a, "store-all: %s", err);
    long long least = field(a, "\"min_budget_bytes\":");
    free(a), a = NULL;
    CHECK(rm_plan_graph(json, least, &a, err, sizeof err) == RM_OK && a, "at its least: %s", err);
    int before = count_each(a);
    CHECK(rm_plan_graph(once, -1, &b, err, sizeof err) == RM_OK && b, "store-all, each false: %s", err);
    long long least_once = field(b, "\"min_budget_bytes\":");
    free(b), b = NULL;
    per_layer_plan(L, PER, plan, sizeof plan);
    CHECK(rm_price_graph(once, plan, &priced, err, sizeof err) == RM_OK && priced, "per-layer priced: %s", err);
    long long pl_peak = field(priced, "\"peak_bytes\":");
    CHECK(least_once >= least && least_once <= pl_peak, "the least with each false %lld: at least %lld, at most "
          "per-layer checkpointing's peak %lld", least_once, least, pl_peak);
    int after = 0;
    const long long budgets[] = {least_once, (least_once + pl_peak) / 2, pl_peak};
    for (int i = 0; i < 3; i++) {
        CHECK(rm_plan_graph(once, budgets[i], &b, err, sizeof err) == RM_OK && b, "each false at %lld: %s",
              budgets[i], err);
        after += count_each(b);
        free(b), b = NULL;
    }
    CHECK(before > 0 && after == 0, "recomputed for each reader: %d nodes at the least; with each false: %d",
          before, after);
    printf("eager, \"each\": false: %d nodes each at the least %lld without it, none with it (least %lld)\n",
           before, least, least_once);
    free(a), free(priced), free(once), free(json);
}

/* The least of a captured T5 (tests/data/t5_bits_eager_graph.json: 559 nodes, its dropout masks at a
 * bit an element): the bisection's descents stop at 85.8 MB (0.173 of store-all), the full search finds
 * plans down to 81.2; the least is lowered by it (least_by_solve). */
static void test_solved_least(void) {
    check_least("tests/data/t5_bits_eager_graph.json", 0.166);
}

/* The graph JSON text with `extra` (", \"key\": value") before its closing brace, into out. */
static void with_key(const char *json, const char *extra, char *out, size_t cap) {
    size_t len = strlen(json);
    while (len > 0 && json[len - 1] != '}') len--;
    snprintf(out, cap, "%.*s%s}", (int)(len ? len - 1 : 0), json, extra);
}

/* "start": the store-all answer's "least_plan" given back as the graph's start makes every answer
 * the same, byte for byte, without searching the least again (rematplan passes it on each call
 * after the first: the search was 80% of each call on this graph); a bad start is refused with a
 * message; a "forward" start on an eager graph is clamped (a start is a hint, never trusted). */
static void test_start(void) {
    static char json[1 << 18], with[1 << 19], start[1 << 16];
    read_graph("tests/data/t5_bits_eager_graph.json", json, sizeof json);
    char *top = NULL, err[512];
    CHECK(rm_plan_graph(json, -1, &top, err, sizeof err) == RM_OK && top, "store-all: %s", err);
    const char *lp = top ? strstr(top, "\"least_plan\":") : NULL;
    CHECK(lp != NULL, "the store-all answer names its least plan");
    if (!lp) { free(top); return; }
    snprintf(start, sizeof start, ", \"start\": %.*s", (int)(strlen(lp) - strlen("\"least_plan\":") - 1),
             lp + strlen("\"least_plan\":"));
    with_key(json, start, with, sizeof with);
    long long least = field(top, "\"min_budget_bytes\":");
    const long long budgets[] = {-1, 120000000, 90000000, least, least - 1, least / 2};
    for (int i = 0; i < 6; i++) {
        char *a = NULL, *b = NULL, e1[512], e2[512];
        rm_status r1 = rm_plan_graph(json, budgets[i], &a, e1, sizeof e1);
        rm_status r2 = rm_plan_graph(with, budgets[i], &b, e2, sizeof e2);
        CHECK(r1 == r2 && ((!a && !b && strcmp(e1, e2) == 0) || (a && b && strcmp(a, b) == 0)),
              "budget %lld: the same answer with the start (%d, %d): %.120s / %.120s", budgets[i], r1, r2,
              a ? a : e1, b ? b : e2);
        free(a), free(b);
    }
    free(top);
    const char *g = "{\"nodes\": [{\"forward_time\": 1, \"backward_time\": 1, \"output_bytes\": 10},"
                    " {\"forward_time\": 1, \"backward_time\": 1, \"output_bytes\": 10}],"
                    " \"edges\": [{\"producer\": 0, \"consumer\": 1}], \"eager\": true}";
    const char *bad[] = {", \"start\": 3", ", \"start\": {\"modes\": [\"keep\"]}",
                         ", \"start\": {\"modes\": [\"keep\", \"often\"]}",
                         ", \"start\": {\"modes\": [\"keep\", \"keep\"], \"blocks\": [0, 2]}",
                         ", \"start\": {\"modes\": [\"keep\", \"keep\"], \"least_bytes\": -5}",
                         ", \"start\": {\"modes\": [\"keep\", \"keep\"], \"least_bytes\": \"many\"}"};
    for (int i = 0; i < 6; i++) {
        char *out = NULL;
        with_key(g, bad[i], with, sizeof with);
        CHECK(rm_plan_graph(with, -1, &out, err, sizeof err) == RM_ERR_FORMAT && !out && strstr(err, "start"),
              "bad start %d refused, naming it: %s", i, err);
        free(out);
    }
    char *out = NULL;
    with_key(g, ", \"start\": {\"modes\": [\"forward\", \"keep\"], \"least_bytes\": 1e15}", with, sizeof with);
    CHECK(rm_plan_graph(with, -1, &out, err, sizeof err) == RM_OK && out && strstr(out, "\"feasible\":true") &&
              field(out, "\"min_budget_bytes\":") <= field(out, "\"store_all_bytes\":"),
          "a forward start on an eager graph planned, its least at most store-all: %.200s", out ? out : err);
    free(out);
}

int main(void) {
    test_json();
    test_layers();
    test_each_false();
    test_oracle();
    test_monotone();
    test_deep_least();
    test_solved_least();
    test_start();
    return check_done("test_eager");
}
