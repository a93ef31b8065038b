/* test_graphplan.c: plans for graphs that are not chains of stages.
 * A network built from the C API with no stages declared, a skip around
 * every layer, a long U-shaped skip and one value (an "encoder output")
 * read by every layer: every strategy and memory budgets must train it
 * bit for bit like store-all (dropout on; revolve too, over the graph's
 * units), recompute something, keep the
 * measured bytes equal to the planned ones and within the budget, and
 * refuse an infeasible budget naming the least feasible one. Also: the
 * automatic blocks cut where few bytes cross. */
#include "check.h"
#include "exec/exec.h"
#include "plan/graphplan/graphplan.h"
#include <stdlib.h>
#include <string.h>

enum { B = 8, D = 24, C = 6, LAYERS = 5 };

typedef struct net {
    rm_val x, y;
} net;

/* x -> e = gelu(x W_e); h_0 = e; h_{l+1} = h_l + relu(dropout(h_l W_l)) + e
 * (every layer reads e); out = (h_L + h_1) W_o; cross-entropy. `stages`
 * declares a stage per layer (not a chain: e and h_1 skip over stages). */
static rm_graph *build(int stages, net *io) {
    rm_graph *g = rm_graph_new();
    int64_t xs[2] = {B, D}, ws[2] = {D, D}, wo[2] = {C, D}, ys[1] = {B};
    io->x = rm_input(g, "x", RM_DTYPE_F32, 2, xs);
    io->y = rm_input(g, "y", RM_DTYPE_I32, 1, ys);
    if (stages) rm_stage_begin(g, "enc");
    rm_val e = rm_gelu(g, rm_linear(g, io->x, rm_param(g, "we", 2, ws, RM_INIT_NORMAL, 0.3f, 1), -1));
    rm_val h = e, h1 = -1;
    for (int l = 0; l < LAYERS; l++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", l);
        if (stages) rm_stage_begin(g, name);
        rm_val a = rm_dropout(g, rm_linear(g, h, rm_param(g, name, 2, ws, RM_INIT_NORMAL, 0.3f, 1), -1), 0.2f);
        h = rm_add(g, rm_add(g, h, rm_relu(g, a)), e);
        if (l == 0) h1 = h;
    }
    if (stages) rm_stage_begin(g, "head");
    rm_val out = rm_linear(g, rm_add(g, h, h1), rm_param(g, "wo", 2, wo, RM_INIT_NORMAL, 0.3f, 1), -1);
    rm_set_loss(g, rm_softmax_ce(g, out, io->y));
    return g;
}

typedef struct result {
    float *params;
    size_t n;
    rm_memory_info mem;
    rm_plan_info plan;
} result;

/* Trains 3 SGD steps; returns 0 when compiling fails (message in err). */
static int train(int stages, const char *strategy, const char *budget, result *r, char *err, size_t errlen) {
    net io;
    rm_graph *g = build(stages, &io);
    rm_options o;
    rm_options_default(&o);
    o.checkpoint = strategy, o.memory_budget = budget, o.threads = 1, o.verify_recompute = 1;
    rm_session *s;
    memset(r, 0, sizeof *r);
    if (rm_compile(g, &o, &s) != RM_OK) {
        snprintf(err, errlen, "%s", rm_graph_errmsg(g));
        rm_graph_free(g);
        return 0;
    }
    rm_optim_config oc;
    rm_optim_config_default(&oc);
    oc.kind = RM_OPTIM_SGD;
    rm_optim *opt;
    rm_optim_new(s, &oc, &opt);
    int ok = 1;
    for (int step = 0; step < 3 && ok; step++) {
        float *x = rm_value_data(s, io.x);
        int32_t *y = rm_value_data(s, io.y);
        for (int i = 0; i < B * D; i++) x[i] = (float)((i * 7 + step * 3) % 11) / 10.0f - 0.5f;
        for (int b = 0; b < B; b++) y[b] = (b * 5 + step) % C;
        float loss;
        ok = rm_step(s, (uint64_t)step, &loss) == RM_OK && rm_optim_step(opt, 0.1f, NULL) == RM_OK;
        if (!ok) snprintf(err, errlen, "step %d: %s", step, rm_session_errmsg(s));
    }
    r->n = g->param_floats;
    r->params = malloc(r->n * sizeof(float));
    if (r->params) memcpy(r->params, s->params, r->n * sizeof(float));
    rm_memory(s, &r->mem);
    rm_plan(s, &r->plan);
    rm_optim_free(opt);
    rm_session_free(s);
    rm_graph_free(g);
    return ok && r->params;
}

static void test_strategies(int stages) {
    char err[512];
    result none;
    CHECK(train(stages, "none", NULL, &none, err, sizeof err), "none: %s", err);
    const char *strategies[] = {"blocks", "segments:2", "segments:3", "sqrt", "revolve:1", "revolve:2", "revolve:3"};
    const char *budgets[] = {"70%", "50%", NULL};
    for (int i = 0; i < 10; i++) {
        const char *st = i < 7 ? strategies[i] : "none", *bud = i < 7 ? NULL : budgets[i - 7];
        char mid[32];
        if (i == 9) { /* just above the least feasible budget */
            result probe;
            const char *at = NULL;
            if (!train(stages, "none", "1", &probe, err, sizeof err) && (at = strstr(err, "at least")) != NULL &&
                (at = strstr(at, "MiB (")) != NULL) {
                snprintf(mid, sizeof mid, "%lld", atoll(at + 5));
                bud = mid;
            }
            free(probe.params);
            CHECK(bud != NULL, "stages=%d: an infeasible budget names the least feasible one: %s", stages, err);
            if (!bud) continue;
        }
        result r;
        int ok = train(stages, st, bud, &r, err, sizeof err);
        CHECK(ok, "stages=%d %s %s: %s", stages, st, bud ? bud : "", err);
        if (!ok) continue;
        CHECK(r.n == none.n && memcmp(r.params, none.params, none.n * sizeof(float)) == 0,
              "stages=%d %s %s: weights differ from store-all", stages, st, bud ? bud : "");
        CHECK(r.mem.activation_bytes_measured == r.mem.activation_bytes_planned,
              "stages=%d %s %s: measured %zu != planned %zu", stages, st, bud ? bud : "",
              r.mem.activation_bytes_measured, r.mem.activation_bytes_planned);
        CHECK(r.mem.activation_bytes_measured < none.mem.activation_bytes_measured,
              "stages=%d %s %s: %zu bytes, store-all %zu", stages, st, bud ? bud : "", r.mem.activation_bytes_measured,
              none.mem.activation_bytes_measured);
        if (bud)
            CHECK(r.plan.budget_bytes > 0 && r.mem.activation_arena_bytes <= r.plan.budget_bytes &&
                      r.mem.activation_bytes_measured <= r.plan.budget_bytes,
                  "stages=%d budget %s: arena %zu, measured %zu, budget %zu", stages, bud,
                  r.mem.activation_arena_bytes, r.mem.activation_bytes_measured, r.plan.budget_bytes);
        printf("stages=%d %-10s %-9s measured %6zu B of store-all %6zu B, recompute %.3g FLOPs\n", stages, st,
               bud ? bud : "", r.mem.activation_bytes_measured, none.mem.activation_bytes_measured,
               r.plan.flops_recompute);
        free(r.params);
    }
    free(none.params);
}

/* --print-plan names the blocks the planner used, and says whether they
 * were found or the declared stages, kept or merged/split. */
static void test_print_blocks(void) {
    for (int stages = 0; stages < 2; stages++) {
        net io;
        rm_graph *g = build(stages, &io);
        rm_options o;
        rm_options_default(&o);
        o.memory_budget = "60%", o.threads = 1, o.dry_run = 1;
        rm_session *s;
        char text[4096] = "";
        if (rm_compile(g, &o, &s) == RM_OK) {
            FILE *f = tmpfile();
            if (f) {
                rm_print_plan(s, f);
                rewind(f);
                size_t got = fread(text, 1, sizeof text - 1, f);
                text[got] = 0;
                fclose(f);
            }
            rm_session_free(s);
        }
        CHECK(strstr(text, "blocks: ") && strstr(text, stages ? "declared stages" : "found automatically"),
              "stages=%d: --print-plan names the blocks: %s", stages, text);
        rm_graph_free(g);
    }
}

/* Cuts land where one small value crosses, not inside a wide fan-out. */
static void test_auto_blocks(void) {
    /* 0 -> 1 -> 2 -> 3 -> 4 -> 5 -> 6 -> 7; node 1 is also read by 3, node 5 by 7 */
    rm_gmodel m;
    CHECK(rm_gmodel_alloc(&m, 8) == RM_OK, "alloc");
    for (int i = 0; i < 8; i++) {
        m.bytes[i] = 100, m.fwd[i] = 1, m.has_bwd[i] = 1;
        if (i > 0) rm_gmodel_edge(&m, i - 1, 1);
        if (i == 3) rm_gmodel_edge(&m, 1, 1);
        if (i == 7) rm_gmodel_edge(&m, 5, 1);
        rm_gmodel_close_node(&m, i);
    }
    int block[8];
    int nb = rm_auto_blocks(&m, 2, block);
    CHECK(nb == 2 && block[3] == 0 && block[4] == 1, "two blocks cut after node 3 (one value crosses): %d, %d %d", nb,
          block[3], block[4]);
    CHECK(rm_cut_bytes(&m, 3) == 100 && rm_cut_bytes(&m, 2) == 200, "cut bytes %lld %lld",
          (long long)rm_cut_bytes(&m, 3), (long long)rm_cut_bytes(&m, 2));
    rm_gmodel_free(&m);
}

/* A 300-node graph (a chain with skips of up to 20 nodes) takes the large-
 * graph path of the search (lazy greedy): it fits half of store-all, and its
 * schedule re-priced from scratch agrees with the plan. */
static void test_large_graph(void) {
    enum { N = 300 };
    rm_gmodel m;
    CHECK(rm_gmodel_alloc(&m, N) == RM_OK, "alloc");
    unsigned r = 7;
    for (int i = 0; i < N; i++) {
        r = r * 1103515245u + 12345u;
        m.fwd[i] = 1 + (r >> 16) % 10, m.bwd[i] = 2 * m.fwd[i], m.bytes[i] = 64 * (1 + (r >> 8) % 8);
        m.grad[i] = i == N - 1 ? 0 : m.bytes[i], m.has_bwd[i] = 1, m.reads_out[i] = (r >> 4) % 10 < 3;
        if (i > 0) rm_gmodel_edge(&m, i - 1, 1);
        if (i > 21 && (r >> 12) % 10 < 3) rm_gmodel_edge(&m, i - 2 - (int)((r >> 20) % 20), 1);
        rm_gmodel_close_node(&m, i);
    }
    rm_gplan all, half;
    CHECK(rm_gplan_solve(&m, INT64_MAX / 4, NULL, NULL, NULL, &all) == RM_OK && all.feasible && all.cost == 0,
          "store-all");
    CHECK(rm_gplan_solve(&m, all.peak / 2, NULL, NULL, NULL, &half) == RM_OK && half.feasible &&
              half.peak <= all.peak / 2 && half.cost > 0,
          "half of store-all (%lld): peak %lld", (long long)all.peak / 2, (long long)half.peak);
    rm_schedule s;
    rm_geval_result e = {0, 0, 0};
    if (half.feasible && rm_gplan_schedule(&m, half.mode, half.block, &s) == RM_OK) {
        rm_gmodel_simulate(NULL, &m, &s, all.peak / 2, &e);
        rm_schedule_free(&s);
    }
    CHECK(e.peak == half.peak && e.cost == half.cost && e.excess == 0, "re-priced: peak %lld cost %g",
          (long long)e.peak, e.cost);
    printf("300 nodes at half of store-all: recompute %g of %g forward time\n", half.cost,
           (double)N * 5.5);
    rm_gplan_free(&all), rm_gplan_free(&half);
    rm_gmodel_free(&m);
}

/* The default evaluator called through a pointer: rm_gplan_solve then
 * takes the search of graphplan.c (every move priced), not graphfast.c's. */
static rm_status priced_each(void *ctx, const rm_gmodel *m, const rm_schedule *s, int64_t budget,
                             rm_geval_result *r) {
    (void)ctx;
    return rm_gmodel_simulate(NULL, m, s, budget, r);
}

/* n nodes: a chain with skips of up to 20 (kind 0), a U shape (node i read
 * by node n-1-i, kind 1), or an encoder output read by every fourth node
 * of the second half (kind 2). */
static void shaped_graph(int n, int kind, unsigned seed, rm_gmodel *m) {
    rm_gmodel_alloc(m, n);
    unsigned r = seed;
    for (int i = 0; i < n; i++) {
        r = r * 1103515245u + 12345u;
        m->fwd[i] = 1 + (r >> 16) % 10, m->bwd[i] = 2 * m->fwd[i], m->bytes[i] = 64 * (1 + (r >> 8) % 8);
        m->grad[i] = i == n - 1 ? 0 : m->bytes[i], m->has_bwd[i] = 1, m->reads_out[i] = (r >> 4) % 10 < 3;
        if (i > 0) rm_gmodel_edge(m, i - 1, 1);
        if (kind == 0 && i > 21 && (r >> 12) % 10 < 3) rm_gmodel_edge(m, i - 2 - (int)((r >> 20) % 20), 1);
        if (kind == 1 && i > n / 2 && i % 3 == 0 && n - 1 - i < i - 1) rm_gmodel_edge(m, n - 1 - i, 1);
        if (kind == 2 && i > n / 2 + 1 && i % 4 == 0) rm_gmodel_edge(m, n / 2, 1);
        rm_gmodel_close_node(m, i);
    }
}

/* Large graphs (graphfast.c): plans fit and re-price to themselves, find a
 * plan wherever the every-move search does, and above the least budget
 * compute no more than 2% more than it (it is the better of the two on
 * these graphs); the least budget comes with a plan that fits it, from
 * which any larger budget plans. */
static void test_fast_search(void) {
    int worse = 0, missed = 0, cases = 0;
    double total_fast = 0, total_each = 0;
    for (int kind = 0; kind < 3; kind++) {
        rm_gmodel m;
        shaped_graph(kind == 0 ? 400 : 240, kind, 5 + kind, &m);
        double fwd = 0;
        for (int i = 0; i < m.n; i++) fwd += m.fwd[i] + m.bwd[i];
        rm_gplan at, all;
        int64_t least = rm_gplan_least(&m, NULL, NULL, NULL, &at);
        CHECK(rm_gplan_solve(&m, INT64_MAX / 4, NULL, NULL, NULL, &all) == RM_OK && all.feasible, "store-all");
        CHECK(least > 0 && at.feasible && least < all.peak, "kind %d: least %lld of store-all %lld", kind,
              (long long)least, (long long)all.peak);
        for (int b = 0; b < 4 && least > 0; b++) {
            int64_t budget = b == 0 ? least : least + (all.peak - least) * b / 4;
            rm_gplan f, e;
            CHECK(rm_gplan_solve_from(&m, budget, NULL, NULL, NULL, &at, &f) == RM_OK && f.feasible,
                  "kind %d budget %lld (least %lld): no plan", kind, (long long)budget, (long long)least);
            rm_gplan_solve(&m, budget, NULL, priced_each, NULL, &e);
            rm_schedule s;
            rm_geval_result r = {0, 0, 0};
            if (f.feasible && rm_gplan_schedule(&m, f.mode, f.block, &s) == RM_OK) {
                rm_gmodel_simulate(NULL, &m, &s, budget, &r);
                rm_schedule_free(&s);
            }
            CHECK(r.excess == 0 && r.peak == f.peak && r.cost == f.cost, "kind %d budget %lld: re-priced %lld/%g",
                  kind, (long long)budget, (long long)r.peak, r.cost);
            cases++;
            missed += e.feasible && !f.feasible;
            if (e.feasible && f.feasible && b > 0) { /* at the least budget itself: only a plan */
                worse += fwd + f.cost > 1.02 * (fwd + e.cost);
                total_fast += fwd + f.cost, total_each += fwd + e.cost;
            }
            printf("  kind %d, %d nodes, budget %.2fx least: recompute %g (every move priced: %g%s)\n", kind, m.n,
                   (double)budget / least, f.cost, e.cost, e.feasible ? "" : ", no plan");
            rm_gplan_free(&f), rm_gplan_free(&e);
        }
        rm_gplan_free(&at), rm_gplan_free(&all);
        rm_gmodel_free(&m);
    }
    CHECK(worse == 0 && missed == 0, "%d of %d budgets 2%% dearer than the every-move search, %d without a plan",
          worse, cases, missed);
    printf("large graphs: total compute %.4fx the every-move search's\n", total_fast / total_each);
}

/* rm_plan_graph: a graph profiled elsewhere (an encoder output read by two
 * decoder layers), its answer, and bad files refused with a message. */
static void test_plan_graph(void) {
    const char *json =
        "{\"nodes\": [{\"name\": \"embed\", \"forward_time\": 1, \"backward_time\": 2, \"output_bytes\": 400},"
        " {\"name\": \"enc\", \"forward_time\": 4, \"backward_time\": 8, \"output_bytes\": 400},"
        " {\"name\": \"dec1\", \"forward_time\": 4, \"backward_time\": 8, \"output_bytes\": 400},"
        " {\"name\": \"dec2\", \"forward_time\": 4, \"backward_time\": 8, \"output_bytes\": 400},"
        " {\"name\": \"loss\", \"forward_time\": 1, \"backward_time\": 1, \"output_bytes\": 4,"
        " \"backward_reads_output\": true}],"
        " \"edges\": [{\"producer\": 0, \"consumer\": 1}, {\"producer\": 1, \"consumer\": 2},"
        " {\"producer\": 2, \"consumer\": 3}, {\"producer\": 1, \"consumer\": 3}, {\"producer\": 3, \"consumer\": 4}]}";
    char *out = NULL, err[256];
    CHECK(rm_plan_graph(json, -1, &out, err, sizeof err) == RM_OK && out, "store-all: %s", err);
    long long store_all = out && strstr(out, "\"store_all_bytes\":") ? atoll(strstr(out, "\"store_all_bytes\":") + 18) : 0;
    long long least = out && strstr(out, "\"min_budget_bytes\":") ? atoll(strstr(out, "\"min_budget_bytes\":") + 19) : 0;
    CHECK(store_all > 0 && least > 0 && least < store_all, "least %lld < store-all %lld: %s", least, store_all, out);
    free(out);
    CHECK(rm_plan_graph(json, least, &out, err, sizeof err) == RM_OK && out && strstr(out, "\"feasible\":true") &&
              strstr(out, "\"recompute\":[{"),
          "at the least feasible budget something is recomputed: %s", out ? out : err);
    free(out);
    CHECK(rm_plan_graph(json, least - 1, &out, err, sizeof err) == RM_ERR_BUDGET && out && strstr(err, "least feasible"),
          "below it: refused naming it: %s", err);
    free(out);
    const char *bad[] = {"", "{}", "{\"nodes\": []}", "{\"nodes\": [{\"forward_time\": -1}]}",
                         "{\"nodes\": [{\"forward_time\": 1, \"backward_time\": 1, \"output_bytes\": 1}],"
                         " \"edges\": [{\"producer\": 0, \"consumer\": 0}]}"};
    for (int i = 0; i < 5; i++) {
        out = NULL;
        CHECK(rm_plan_graph(bad[i], 100, &out, err, sizeof err) == RM_ERR_FORMAT && !out && err[0], "bad %d: %s", i,
              err);
    }
}

/* rm_price_graph: store-all priced as rm_plan_graph's store-all; the plan
 * rm_plan_graph chose at its least budget priced at that plan's own peak and
 * recomputation; bad plans refused with a message. */
static void test_price_graph(void) {
    const char *json =
        "{\"nodes\": [{\"name\": \"embed\", \"forward_time\": 1, \"backward_time\": 2, \"output_bytes\": 400},"
        " {\"name\": \"enc\", \"forward_time\": 4, \"backward_time\": 8, \"output_bytes\": 400},"
        " {\"name\": \"dec1\", \"forward_time\": 4, \"backward_time\": 8, \"output_bytes\": 400},"
        " {\"name\": \"dec2\", \"forward_time\": 4, \"backward_time\": 8, \"output_bytes\": 400},"
        " {\"name\": \"loss\", \"forward_time\": 1, \"backward_time\": 1, \"output_bytes\": 4,"
        " \"backward_reads_output\": true}],"
        " \"edges\": [{\"producer\": 0, \"consumer\": 1}, {\"producer\": 1, \"consumer\": 2},"
        " {\"producer\": 2, \"consumer\": 3}, {\"producer\": 1, \"consumer\": 3}, {\"producer\": 3, \"consumer\": 4}]}";
    char *out = NULL, *priced = NULL, err[256];
    CHECK(rm_plan_graph(json, -1, &out, err, sizeof err) == RM_OK && out, "store-all: %s", err);
    long long store_all = out ? atoll(strstr(out, "\"store_all_bytes\":") + 18) : 0;
    long long least = out ? atoll(strstr(out, "\"min_budget_bytes\":") + 19) : 0;
    free(out);
    const char *keep = "{\"modes\": [\"keep\", \"keep\", \"keep\", \"keep\", \"keep\"]}";
    CHECK(rm_price_graph(json, keep, &priced, err, sizeof err) == RM_OK && priced, "price store-all: %s", err);
    long long peak = priced ? atoll(strstr(priced, "\"peak_bytes\":") + 13) : 0;
    CHECK(peak == store_all && strstr(priced, "\"recompute_time\":0"), "store-all priced %lld, planned %lld: %s",
          peak, store_all, priced ? priced : "");
    free(priced);
    /* the least plan: its modes and blocks as a plan, priced */
    CHECK(rm_plan_graph(json, least, &out, err, sizeof err) == RM_OK && out, "least: %s", err);
    char plan[512] = "{\"modes\": [";
    const char *names[] = {"embed", "enc", "dec1", "dec2", "loss"};
    for (int i = 0; i < 5 && out; i++) {
        char key[64];
        snprintf(key, sizeof key, "{\"node\":\"%s\",\"mode\":\"", names[i]);
        const char *r = strstr(out, key);
        char mode[16] = "keep";
        if (r) sscanf(r + strlen(key), "%15[a-z]", mode);
        snprintf(plan + strlen(plan), sizeof plan - strlen(plan), "%s\"%s\"", i ? ", " : "", mode);
    }
    snprintf(plan + strlen(plan), sizeof plan - strlen(plan), "], \"blocks\": [");
    const char *b = out ? strstr(out, "\"blocks\":[") : NULL;
    for (int k = 0, lo, hi, node = 0; b && sscanf(b + 10, "[%d,%d]", &lo, &hi) == 2; k++) {
        for (; node <= hi; node++)
            snprintf(plan + strlen(plan), sizeof plan - strlen(plan), "%s%d", node ? ", " : "", k);
        b = strstr(b + 11, "],[");
        if (b) b -= 8; /* so that b + 10 is the next "[" */
    }
    snprintf(plan + strlen(plan), sizeof plan - strlen(plan), "]}");
    long long planned = out ? atoll(strstr(out, "\"peak_bytes\":") + 13) : 0;
    double rtime = out ? atof(strstr(out, "\"recompute_time\":") + 17) : 0;
    CHECK(rm_price_graph(json, plan, &priced, err, sizeof err) == RM_OK && priced, "price %s: %s", plan, err);
    peak = priced ? atoll(strstr(priced, "\"peak_bytes\":") + 13) : 0;
    double ptime = priced ? atof(strstr(priced, "\"recompute_time\":") + 17) : 0;
    CHECK(peak == planned && ptime == rtime && peak < store_all,
          "the least plan priced: peak %lld (planned %lld), recompute %g (%g); plan %s", peak, planned, ptime, rtime,
          plan);
    free(priced);
    free(out);
    const char *bad[] = {"", "{}", "{\"modes\": [\"keep\"]}",
                         "{\"modes\": [\"keep\", \"keep\", \"keep\", \"keep\", \"maybe\"]}",
                         "{\"modes\": [\"keep\", \"once\", \"keep\", \"keep\", \"keep\"], \"blocks\": [0, 2, 2, 3, 4]}",
                         "{\"modes\": [\"keep\", \"once\", \"keep\", \"keep\", \"keep\"], \"blocks\": [1, 1, 2, 3, 4]}"};
    for (int i = 0; i < 6; i++) {
        priced = NULL;
        CHECK(rm_price_graph(json, bad[i], &priced, err, sizeof err) == RM_ERR_FORMAT && !priced && err[0],
              "bad plan %d: %s", i, err);
    }
    CHECK(rm_price_graph(NULL, keep, &priced, err, sizeof err) == RM_ERR_FORMAT && !priced, "NULL graph");
    CHECK(rm_price_graph(json, keep, NULL, err, sizeof err) == RM_ERR_ARG, "NULL result");
}

/* rm_plan_chain with a second way to keep stages ("ab_sel", "ub_sel",
 * "bt_sel": remat's Fsel): at a budget where keeping the stages whole does
 * not fit, keeping them selectively is cheaper than re-running them; the
 * three fields go together. */
static void test_chain_selective(void) {
    const char *plain = "{\"stages\":[{\"uf\":1,\"ub\":2,\"a\":100,\"ab\":400},{\"uf\":1,\"ub\":2,\"a\":100,"
                        "\"ab\":400},{\"uf\":1,\"ub\":2,\"a\":100,\"ab\":400},{\"uf\":0.1,\"ub\":0.1,\"a\":100,\"ab\":100}]}";
    const char *sel = "{\"stages\":[{\"uf\":1,\"ub\":2,\"a\":100,\"ab\":400,\"ab_sel\":150,\"ub_sel\":2.3,\"bt_sel\":100},"
                      "{\"uf\":1,\"ub\":2,\"a\":100,\"ab\":400},{\"uf\":1,\"ub\":2,\"a\":100,\"ab\":400,\"ab_sel\":150,"
                      "\"ub_sel\":2.3,\"bt_sel\":100},{\"uf\":0.1,\"ub\":0.1,\"a\":100,\"ab\":100}]}";
    char *a = NULL, *b = NULL, err[256];
    CHECK(rm_plan_chain(plain, 800, &a, err, sizeof err) == RM_OK && a, "plain chain at 800: %s", err);
    CHECK(rm_plan_chain(sel, 800, &b, err, sizeof err) == RM_OK && b, "selective chain at 800: %s", err);
    double ta = a ? atof(strstr(a, "\"time\":") + 7) : 0, tb = b ? atof(strstr(b, "\"time\":") + 7) : 0;
    CHECK(b && strstr(b, "\"Fsel ") && tb < ta, "Fsel used and cheaper: %g < %g: %s", tb, ta, b ? b : "");
    free(a), free(b);
    const char *bad = "{\"stages\":[{\"uf\":1,\"ub\":2,\"a\":100,\"ab\":400,\"ab_sel\":150},"
                      "{\"uf\":0.1,\"ub\":0.1,\"a\":100,\"ab\":100}]}";
    a = NULL;
    CHECK(rm_plan_chain(bad, 800, &a, err, sizeof err) == RM_ERR_FORMAT && !a && strstr(err, "ab_sel"),
          "ab_sel alone refused: %s", err);
}

/* A chain of n stages as JSON; ck (NULL: absent) each stage's "ck_last". */
static char *chain_json(int n, const int *ck, unsigned seed) {
    size_t cap = 200 + (size_t)n * 160, len = 0;
    char *out = malloc(cap);
    len += (size_t)snprintf(out + len, cap - len, "{\"stages\":[");
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        int ab = 200 + (int)(seed >> 16) % 400, a = 50 + (int)(seed >> 8) % 100;
        len += (size_t)snprintf(out + len, cap - len, "%s{\"uf\":%d,\"ub\":%d,\"a\":%d,\"ab\":%d,\"bt\":%d", i ? "," : "",
                                1 + i % 3, 2 + i % 2, a, ab, 40);
        if (ck && i < n - 1) len += (size_t)snprintf(out + len, cap - len, ",\"ck_last\":%d", ck[i]);
        len += (size_t)snprintf(out + len, cap - len, "}");
    }
    snprintf(out + len, cap - len, "]}");
    return out;
}

/* Every checkpointed range of the answer's sequence (Fck s, Fn s+1 .. Fn k)
 * within ck_last: k <= ck[s]. */
static int ranges_ok(const char *ans, const int *ck) {
    const char *p = strstr(ans, "\"sequence\"");
    int open = -1, last = -1;
    for (p = p ? strchr(p, '[') : NULL; p && *p && *p != ']'; p++) {
        char op[8];
        int st;
        if (*p != '"' || sscanf(p + 1, "%7s %d", op, &st) != 2) continue;
        if (open >= 0 && strcmp(op, "Fn") != 0) {
            if (last > ck[open]) return 0;
            open = -1;
        }
        if (!strcmp(op, "Fck")) open = last = st;
        else if (!strcmp(op, "Fn")) last = st;
        p = strchr(p + 1, '"');
    }
    return open < 0 || last <= ck[open];
}

/* rm_plan_chain with "ck_last" (how far a checkpointed range may reach): the
 * plans keep to it at every budget, on an exact chain and on one long
 * enough to be planned over groups; no limit plans as without the field; a
 * limit can only raise the least budget; bad values are refused. */
static void test_chain_ranges(void) {
    for (int n = 8; n <= 300; n += 292) {
        int *ck = malloc(sizeof *ck * (size_t)n), *none = malloc(sizeof *none * (size_t)n);
        for (int i = 0; i < n; i++) ck[i] = i % 5 == 0 ? -1 : i % 5 == 1 ? i : i + 1 < n ? i + 1 : i, none[i] = n - 1;
        char *plain = chain_json(n, NULL, 7), *lim = chain_json(n, ck, 7), *all = chain_json(n, none, 7);
        char *a = NULL, *b = NULL, *c = NULL, err[256];
        rm_plan_chain(plain, 1 << 30, &a, err, sizeof err);
        rm_plan_chain(all, 1 << 30, &c, err, sizeof err);
        CHECK(a && c && !strcmp(a, c), "n=%d: ck_last = n-1 everywhere plans as without it", n);
        free(c), c = NULL;
        rm_plan_chain(lim, 1 << 30, &b, err, sizeof err);
        double least0 = a ? atof(strstr(a, "\"min_budget_bytes\":") + 19) : 0;
        double least1 = b ? atof(strstr(b, "\"min_budget_bytes\":") + 19) : 0;
        CHECK(least1 >= least0 && least0 > 0, "n=%d: a limit raises the least: %g >= %g", n, least1, least0);
        free(a), free(b), a = b = NULL;
        int bad = 0, plans = 0;
        for (int k = 0; k <= 6; k++) {
            int64_t budget = (int64_t)(least1 + (least1 * 3) * k / 6);
            if (rm_plan_chain(lim, budget, &b, err, sizeof err) == RM_OK && b) plans++, bad += !ranges_ok(b, ck);
            free(b), b = NULL;
        }
        CHECK(plans == 7 && bad == 0, "n=%d: %d of 7 budgets planned, %d with a range beyond ck_last", n, plans, bad);
        free(plain), free(lim), free(all), free(ck), free(none);
    }
    const char *bad[] = {"2.5", "-2", "3"};
    for (int k = 0; k < 3; k++) {
        char json[256], *a = NULL, err[256];
        snprintf(json, sizeof json, "{\"stages\":[{\"uf\":1,\"ub\":2,\"a\":100,\"ab\":400,\"ck_last\":%s},"
                 "{\"uf\":1,\"ub\":2,\"a\":100,\"ab\":400},{\"uf\":0.1,\"ub\":0.1,\"a\":100,\"ab\":100}]}", bad[k]);
        CHECK(rm_plan_chain(json, 800, &a, err, sizeof err) == RM_ERR_FORMAT && !a && strstr(err, "ck_last"),
              "ck_last %s refused: %s", bad[k], err);
    }
}

int main(void) {
    test_plan_graph();
    test_chain_selective();
    test_chain_ranges();
    test_price_graph();
    test_large_graph();
    test_fast_search();
    test_auto_blocks();
    test_print_blocks();
    test_strategies(0);
    test_strategies(1);
    return check_done("test_graphplan");
}
