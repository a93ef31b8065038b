/* graphfile.c: the general-graph planner for graphs profiled elsewhere (a
 * PyTorch model, say): rm_plan_graph and `remat plan --graph FILE.json`.
 * The format (docs/RECOMPUTE.md, "Graphs from another framework"):
 *   {"nodes": [{"name": "fc1", "forward_time": 1.5, "backward_time": 3.0,
 *               "output_bytes": 4096, "gradient_bytes": 4096,
 *               "forward_workspace_bytes": 0, "backward_workspace_bytes": 0,
 *               "backward": true, "backward_reads_output": false}, ...],
 *    "edges": [{"producer": 0, "consumer": 1, "backward_reads": true}, ...]}
 * Nodes are in topological order (producer < consumer), the last one is
 * the loss; only the times and output_bytes are required. The answer is
 * JSON too: what to keep, what to recompute and how, time and peak. */
#include "plan/graphplan/graphplan.h"
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_NODES = 100000, MAX_EDGES = 1000000 };

/* A non-negative finite number (or `dflt` when absent and not required). */
static int num(const cJSON *o, const char *key, int required, double dflt, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    *out = dflt;
    if (!v) return !required;
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0) || !isfinite(v->valuedouble) || v->valuedouble > 9e18) return 0;
    *out = v->valuedouble;
    return 1;
}

static int flag(const cJSON *o, const char *key, int dflt, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    *out = dflt;
    if (!v) return 1;
    if (!cJSON_IsBool(v)) return 0;
    *out = cJSON_IsTrue(v);
    return 1;
}

static rm_status parse_block(const cJSON *nd, int i, rm_gmodel *m, char *err, size_t errlen);

/* The keys remat reads in a graph file, by object: a misspelling of one is refused (rm_json_check_keys) */
static const char *const NODE_KEYS[] = {"name", "forward_time", "backward_time", "output_bytes", "gradient_bytes",
                                        "forward_workspace_bytes", "backward_workspace_bytes", "backward",
                                        "backward_reads_output", "keep", "each", "block", NULL};
static const char *const EDGE_KEYS[] = {"producer", "consumer", "backward_reads", "gradient", NULL};
static const char *const GRAPH_KEYS[] = {"nodes", "edges", "scratch_bandwidth", "io_latency", "eager", "start", NULL};
static const char *const PLAN_KEYS[] = {"modes", "blocks", "least_bytes", NULL};

static rm_status misspelt(const cJSON *o, const char *const *known, const char *what, int i, char *err,
                          size_t errlen) {
    char where[64];
    if (i >= 0) snprintf(where, sizeof where, "%s %d", what, i);
    else snprintf(where, sizeof where, "%s", what);
    return rm_json_check_keys(o, known, where, err, errlen) ? RM_ERR_FORMAT : RM_OK;
}

static rm_status parse_node(const cJSON *nd, int i, int last, rm_gmodel *m, char *err, size_t errlen) {
    double out, grad, wf, wb;
    int bwd, rout, pin, each;
    if (misspelt(nd, NODE_KEYS, "node", i, err, errlen)) return RM_ERR_FORMAT;
    if (!cJSON_IsObject(nd) || !num(nd, "forward_time", 1, 0, &m->fwd[i]) ||
        !num(nd, "backward_time", 1, 0, &m->bwd[i]) || !num(nd, "output_bytes", 1, 0, &out) ||
        !num(nd, "gradient_bytes", 0, last ? 0 : out, &grad) || !num(nd, "forward_workspace_bytes", 0, 0, &wf) ||
        !num(nd, "backward_workspace_bytes", 0, 0, &wb) || !flag(nd, "backward", 1, &bwd) ||
        !flag(nd, "backward_reads_output", 0, &rout) || !flag(nd, "keep", 0, &pin) || !flag(nd, "each", 1, &each)) {
        snprintf(err, errlen, "node %d: needs numbers in [0, 9e18] forward_time, backward_time, output_bytes "
                 "(optional: gradient_bytes, forward_workspace_bytes, backward_workspace_bytes; booleans backward, "
                 "backward_reads_output, keep, each)", i);
        return RM_ERR_FORMAT;
    }
    if (pin || !each) { /* kept, or recomputed at most once (never for each reader) */
        if (!m->most) {
            if (!(m->most = malloc((size_t)m->n))) return RM_ERR_NOMEM;
            memset(m->most, RM_GFEACH, (size_t)m->n);
        }
        m->most[i] = (char)(pin ? RM_GKEEP : RM_GONCE);
    }
    m->bytes[i] = (int64_t)ceil(out), m->grad[i] = (int64_t)ceil(grad);
    m->ws_f[i] = (int64_t)ceil(wf), m->ws_b[i] = (int64_t)ceil(wb);
    m->has_bwd[i] = (char)bwd, m->reads_out[i] = (char)rout;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(nd, "name");
    if (cJSON_IsString(name) && name->valuestring) {
        size_t len = strnlen(name->valuestring, 200);
        m->names[i] = malloc(len + 1);
        if (!m->names[i]) return RM_ERR_NOMEM;
        memcpy(m->names[i], name->valuestring, len), m->names[i][len] = 0;
    }
    return parse_block(nd, i, m, err, errlen);
}

/* The optional "block" of node i (the model's own grouping, e.g. its layers): given for every node
 * or none, from 0, growing by 0 or 1 from node to node. */
static rm_status parse_block(const cJSON *nd, int i, rm_gmodel *m, char *err, size_t errlen) {
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(nd, "block");
    if (!b && !m->hint) return RM_OK;
    if (b && i == 0 && !(m->hint = calloc((size_t)m->n, sizeof *m->hint))) return RM_ERR_NOMEM;
    /* (no hint yet past node 0: node 0 had no block, so this node's is one too many) */
    int prev = i && m->hint ? m->hint[i - 1] : 0;
    double id = b && cJSON_IsNumber(b) ? b->valuedouble : -1;
    if (!b || !m->hint || id != floor(id) || id < prev || id > prev + 1 || (i == 0 && id != 0)) {
        snprintf(err, errlen, "node %d: \"block\" is given for every node or none, starting at 0 and growing by 0 "
                 "or 1 from node to node", i);
        return RM_ERR_FORMAT;
    }
    m->hint[i] = (int)id;
    return RM_OK;
}

typedef struct edge {
    int p, c, reads, grad;
} edge;

static int by_consumer(const void *a, const void *b) {
    const edge *x = a, *y = b;
    return x->c != y->c ? (x->c > y->c) - (x->c < y->c) : (x->p > y->p) - (x->p < y->p);
}

static rm_status parse_edges(const cJSON *edges, rm_gmodel *m, char *err, size_t errlen) {
    int ne = cJSON_GetArraySize(edges);
    edge *e = malloc(sizeof *e * (size_t)(ne > 0 ? ne : 1));
    if (!e) return RM_ERR_NOMEM;
    int k = 0;
    for (const cJSON *it = edges->child; it; it = it->next, k++) {
        double p, c;
        int reads, grad;
        if (misspelt(it, EDGE_KEYS, "edge", k, err, errlen)) {
            free(e);
            return RM_ERR_FORMAT;
        }
        if (!cJSON_IsObject(it) || !num(it, "producer", 1, 0, &p) || !num(it, "consumer", 1, 0, &c) ||
            !flag(it, "backward_reads", 1, &reads) || !flag(it, "gradient", 1, &grad) || p != floor(p) ||
            c != floor(c) || !(p < c) || c >= m->n) {
            snprintf(err, errlen, "edge %d: needs integer producer < consumer < %d (nodes in topological order; "
                     "optional booleans backward_reads, gradient)", k, m->n);
            free(e);
            return RM_ERR_FORMAT;
        }
        e[k].p = (int)p, e[k].c = (int)c, e[k].reads = reads, e[k].grad = grad;
    }
    qsort(e, (size_t)k, sizeof *e, by_consumer);
    rm_status rc = RM_OK;
    for (int i = 0, j = 0; i < m->n && rc == RM_OK; i++) {
        for (; j < k && e[j].c == i && rc == RM_OK; j++) rc = rm_gmodel_edge_grad(m, e[j].p, e[j].reads, e[j].grad);
        rm_gmodel_close_node(m, i);
    }
    free(e);
    return rc;
}

/* The nodes' bytes (outputs, gradients, workspaces) add up to at most 2^60
 * and their times to at most RM_PLAN_MAX_TIME (plan.h), as a chain's do:
 * the planner's 64-bit sums of live bytes cannot overflow. */
static rm_status check_totals(const rm_gmodel *m, char *err, size_t errlen) {
    double bytes = 0, time = 0; /* in double: no overflow however large the numbers */
    for (int i = 0; i < m->n; i++) {
        bytes += (double)m->bytes[i] + (double)m->grad[i] + (double)m->ws_f[i] + (double)m->ws_b[i];
        time += m->fwd[i] + m->bwd[i];
    }
    if (bytes > (double)RM_MAX_BUDGET_BYTES)
        return snprintf(err, errlen, "the nodes' bytes (output, gradient and workspace bytes) add up to %.3g; the "
                        "planner takes at most %.3g (2^60) in all", bytes, (double)RM_MAX_BUDGET_BYTES), RM_ERR_FORMAT;
    if (!(time <= RM_PLAN_MAX_TIME))
        return snprintf(err, errlen, "the nodes' times (forward_time, backward_time) add up to %.3g; the planner "
                        "takes at most %.3g in all (use a coarser unit)", time, RM_PLAN_MAX_TIME), RM_ERR_FORMAT;
    return RM_OK;
}

static rm_status plan_of(const cJSON *root, int n, rm_gplan *p, const char *what, char *err, size_t errlen);

/* text into m; "start" (a plan, as rm_price_graph takes it) into *start
 * when start is not NULL and the graph has one (else start->mode NULL). */
static rm_status parse_graph(const char *text, rm_gmodel *m, rm_gplan *start, char *err, size_t errlen) {
    memset(m, 0, sizeof *m); /* (freed below only once allocated) */
    if (start) memset(start, 0, sizeof *start);
    cJSON *root = rm_json_parse(text, err, errlen); /* one object, no key twice */
    const cJSON *nodes = root ? cJSON_GetObjectItemCaseSensitive(root, "nodes") : NULL;
    const cJSON *edges = root ? cJSON_GetObjectItemCaseSensitive(root, "edges") : NULL;
    int n = cJSON_IsArray(nodes) ? cJSON_GetArraySize(nodes) : 0;
    if (!root || n < 1 || n > MAX_NODES || (edges && !cJSON_IsArray(edges)) ||
        (edges && cJSON_GetArraySize(edges) > MAX_EDGES)) {
        if (root) snprintf(err, errlen, "expected {\"nodes\": [{...}, ...], \"edges\": [{\"producer\": i, \"consumer\": j}, "
                      "...]} with 1 to 100000 nodes and at most 1000000 edges (this one: %d nodes%s)", n,
                      edges && cJSON_IsArray(edges) && cJSON_GetArraySize(edges) > MAX_EDGES ? ", too many edges" : "");
        cJSON_Delete(root);
        return RM_ERR_FORMAT;
    }
    rm_status rc = misspelt(root, GRAPH_KEYS, "the graph", -1, err, errlen);
    if (rc == RM_OK) rc = rm_gmodel_alloc(m, n);
    if (rc == RM_OK && !(m->names = calloc((size_t)n, sizeof *m->names))) rc = RM_ERR_NOMEM;
    int i = 0;
    for (const cJSON *nd = nodes->child; nd && rc == RM_OK; nd = nd->next, i++)
        rc = parse_node(nd, i, i == n - 1, m, err, errlen);
    if (rc == RM_OK) rc = check_totals(m, err, errlen);
    if (rc == RM_OK && edges) rc = parse_edges(edges, m, err, errlen);
    else
        for (int k = 0; k < n && rc == RM_OK; k++) rm_gmodel_close_node(m, k);
    /* optional: a scratch file's bandwidth (bytes per unit of time) and each
     * transfer's latency: the plan may then page (issue 20) */
    if (rc == RM_OK && (!num(root, "scratch_bandwidth", 0, 0, &m->bw) || !num(root, "io_latency", 0, 0, &m->io_latency))) {
        snprintf(err, errlen, "\"scratch_bandwidth\" and \"io_latency\" are numbers >= 0 when given");
        rc = RM_ERR_FORMAT;
    }
    /* optional: an eager framework runs the plan (one node per block, no "forward" mode) */
    if (rc == RM_OK && !flag(root, "eager", 0, &m->eager)) {
        snprintf(err, errlen, "\"eager\" is true or false when given");
        rc = RM_ERR_FORMAT;
    }
    if (rc == RM_OK && m->eager && m->bw > 0) {
        snprintf(err, errlen, "\"eager\" and \"scratch_bandwidth\" cannot be combined: an eager plan does not page");
        rc = RM_ERR_FORMAT;
    }
    /* optional: a plan at the least budget from an earlier answer ("least_plan"): the least is
     * then its peak, not searched again (issue 34: the search was 80% of each call) */
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(root, "start");
    if (start) memset(start, 0, sizeof *start);
    if (rc == RM_OK && st && start) rc = plan_of(st, n, start, "\"start\"", err, errlen);
    double given = -1; /* the least the earlier answer named (a budget: at or above the plan's peak) */
    if (rc == RM_OK && st && start && (!num(st, "least_bytes", 0, -1, &given) || given > 9.0e15)) {
        snprintf(err, errlen, "\"start\": \"least_bytes\" is a number of bytes >= 0 when given");
        rm_gplan_free(start), memset(start, 0, sizeof *start);
        rc = RM_ERR_FORMAT;
    }
    if (rc == RM_OK && start && start->mode) start->peak = given >= 0 ? (int64_t)given : -1;
    if (rc == RM_ERR_NOMEM) snprintf(err, errlen, "out of memory");
    if (rc != RM_OK && m->fwd) rm_gmodel_free(m);
    cJSON_Delete(root);
    return rc;
}

static const char *mode_name(int mode) {
    static const char *names[] = {"keep", "once", "each", "forward"};
    return mode >= 0 && mode < 4 ? names[mode] : "?";
}

/* The answer: feasibility, times, bytes, the modes and the schedule. */
/* {"least_bytes", "modes": [names], "blocks": [ids]} of the plan p at the least budget (what
 * "start" and rm_price_graph read) into out */
static void add_plan(cJSON *out, const char *key, const rm_gmodel *m, const rm_gplan *p, int64_t least) {
    cJSON *o = cJSON_AddObjectToObject(out, key);
    if (o) cJSON_AddNumberToObject(o, "least_bytes", (double)least);
    cJSON *modes = o ? cJSON_AddArrayToObject(o, "modes") : NULL, *blocks = o ? cJSON_AddArrayToObject(o, "blocks") : NULL;
    for (int i = 0; modes && blocks && i < m->n; i++) {
        cJSON_AddItemToArray(modes, cJSON_CreateString(mode_name(p->mode[i])));
        cJSON_AddItemToArray(blocks, cJSON_CreateNumber(p->block[i]));
    }
}

/* The answer: feasibility, times, bytes, the modes and the schedule; the
 * plan at the least budget when least_plan is given. */
static char *answer(const rm_gmodel *m, const rm_gplan *p, const int *paged, int64_t budget, int64_t store_all,
                    int64_t least, const rm_gplan *least_plan) {
    cJSON *out = cJSON_CreateObject();
    double total = 0;
    for (int i = 0; i < m->n; i++) total += m->fwd[i] + (m->has_bwd[i] ? m->bwd[i] : 0);
    cJSON_AddBoolToObject(out, "feasible", p->feasible);
    cJSON_AddNumberToObject(out, "budget_bytes", (double)budget);
    cJSON_AddNumberToObject(out, "store_all_bytes", (double)store_all);
    cJSON_AddNumberToObject(out, "min_budget_bytes", (double)least);
    cJSON_AddNumberToObject(out, "peak_bytes", p->feasible ? (double)p->peak : -1);
    cJSON_AddNumberToObject(out, "recompute_time", p->feasible ? p->cost : -1);
    cJSON_AddNumberToObject(out, "total_time", p->feasible ? total + p->cost : -1);
    cJSON *keep = cJSON_AddArrayToObject(out, "keep"), *rec = cJSON_AddArrayToObject(out, "recompute");
    cJSON *blocks = cJSON_AddArrayToObject(out, "blocks"), *seq = cJSON_AddArrayToObject(out, "schedule");
    cJSON *page = m->bw > 0 ? cJSON_AddArrayToObject(out, "page") : NULL;
    for (int i = 0; p->feasible && i < m->n; i++) {
        char id[32];
        snprintf(id, sizeof id, "%d", i);
        const char *name = m->names && m->names[i] ? m->names[i] : id;
        if (page && paged[i]) {
            cJSON *r = cJSON_CreateObject();
            cJSON_AddStringToObject(r, "node", name);
            cJSON_AddNumberToObject(r, "lead", paged[i] & 0xff);
            cJSON_AddBoolToObject(r, "every_gap", (paged[i] & 0x100) != 0);
            cJSON_AddItemToArray(page, r);
        }
        if (p->mode[i] == RM_GKEEP) {
            cJSON_AddItemToArray(keep, cJSON_CreateString(name));
        } else {
            cJSON *r = cJSON_CreateObject();
            cJSON_AddStringToObject(r, "node", name);
            cJSON_AddStringToObject(r, "mode", mode_name(p->mode[i]));
            cJSON_AddItemToArray(rec, r);
        }
        if (i == 0 || p->block[i] != p->block[i - 1]) {
            int hi = i;
            while (hi + 1 < m->n && p->block[hi + 1] == p->block[i]) hi++;
            int range[2] = {i, hi};
            cJSON_AddItemToArray(blocks, cJSON_CreateIntArray(range, 2));
        }
    }
    rm_schedule s, ps;
    if (p->feasible && rm_gplan_schedule(m, p->mode, p->block, &s) == RM_OK) {
        if (rm_gplan_page_schedule(m, &s, paged, &ps) == RM_OK) {
            for (int k = 0; k < ps.n; k++) { /* F forward, R recompute, B backward, PO page out, PI page in */
                static const char *const kind[] = {"F", "R", "B", "PO", "PI", "W", "U"};
                char item[48];
                snprintf(item, sizeof item, "%s %d", kind[ps.items[k].kind], ps.items[k].node);
                cJSON_AddItemToArray(seq, cJSON_CreateString(item));
            }
            rm_schedule_free(&ps);
        }
        rm_schedule_free(&s);
    }
    if (least_plan && least_plan->mode) add_plan(out, "least_plan", m, least_plan, least);
    char *text = cJSON_PrintUnformatted(out);
    cJSON_Delete(out);
    return text;
}

/* The public entries' arguments: err may be NULL (then *errlen is 0, and
 * snprintf(NULL, 0, ..) writes nothing); result_json may not. */
static rm_status entry(const char *fn, char **result_json, char *err, size_t *errlen) {
    if (!err) *errlen = 0;
    if (!result_json) return snprintf(err, *errlen, "%s: result_json is NULL", fn), RM_ERR_ARG;
    *result_json = NULL;
    return RM_OK;
}

/* A "start" plan made one this graph can run (modes no higher than a node's top: an eager graph
 * has no "forward", a "keep" node is kept, an "each": false one at most once; one node per block
 * when eager), priced: the least
 * budget reported is its "least_bytes" (what the earlier answer named) or its peak, the larger
 * (an upper bound of the least, as rm_gplan_least's is). */
static rm_status price_start(const rm_gmodel *m, rm_gplan *at, int64_t *least) {
    rm_gmodel_clamp(m, at->mode);
    for (int v = 0; m->eager && v < m->n; v++) at->block[v] = v;
    if (m->eager) at->n_blocks = m->n;
    rm_schedule s = {0};
    rm_gsim w = {0};
    rm_geval_result r;
    rm_status rc = rm_gplan_schedule(m, at->mode, at->block, &s);
    if (rc == RM_OK) rc = rm_gsim_run(m, &s, INT64_MAX / 4, &w, &r);
    if (rc == RM_OK) *least = at->peak > r.peak ? at->peak : r.peak; /* the least named, or the peak */
    if (rc == RM_OK) at->feasible = 1, at->cost = r.cost, at->peak = r.peak;
    rm_gsim_free(&w);
    rm_schedule_free(&s);
    return rc;
}

rm_status rm_plan_graph(const char *graph_json, int64_t budget, char **result_json, char *err, size_t errlen) {
    if (entry("rm_plan_graph", result_json, err, &errlen) != RM_OK) return RM_ERR_ARG;
    rm_gmodel m;
    rm_gplan at; /* a plan at the least budget: a start, so any budget above it plans */
    rm_status rc = parse_graph(graph_json ? graph_json : "", &m, &at, err, errlen);
    if (rc != RM_OK) return rc;
    rm_gplan all, p;
    rc = rm_gplan_solve(&m, INT64_MAX / 4, NULL, NULL, NULL, &all);
    int64_t store_all = rc == RM_OK ? all.peak : 0;
    if (rc == RM_OK) rm_gplan_free(&all);
    if (budget < 0) budget = store_all;
    const double bw = m.bw;
    m.bw = 0; /* the least budget and the recompute plan: without paging */
    int64_t least = -1;
    if (rc == RM_OK && at.mode) {
        rc = price_start(&m, &at, &least);
        if (least > store_all) least = store_all; /* a named least above store-all names store-all */
    }
    else if (rc == RM_OK) least = rm_gplan_least(&m, m.hint, NULL, NULL, &at);
    if (rc == RM_OK) rc = rm_gplan_solve_from(&m, budget, m.hint, NULL, NULL, &at, &p);
    m.bw = bw;
    int *paged = calloc((size_t)m.n, sizeof *paged);
    if (rc == RM_OK && !paged) rc = RM_ERR_NOMEM;
    if (rc == RM_OK && bw > 0) { /* with a scratch file: keep, recompute or page, the cheaper */
        rm_gplan q;
        rc = rm_gplan_solve_paged(&m, budget, NULL, NULL, NULL, &q, paged);
        if (rc == RM_OK && q.feasible && (!p.feasible || q.cost < p.cost)) rm_gplan_free(&p), p = q;
        else if (rc == RM_OK) rm_gplan_free(&q), memset(paged, 0, (size_t)m.n * sizeof *paged);
        else rm_gplan_free(&p);
    }
    if (rc == RM_OK) {
        *result_json = answer(&m, &p, paged, budget, store_all, least, at.feasible ? &at : NULL);
        if (!*result_json) rc = RM_ERR_NOMEM;
        else if (!p.feasible) {
            rc = RM_ERR_BUDGET;
            snprintf(err, errlen, "memory budget %lld bytes is below the least feasible %lld bytes for this graph "
                     "(store-all needs %lld); raise --memory-budget to at least %lld", (long long)budget,
                     (long long)least, (long long)store_all, (long long)least);
        }
        rm_gplan_free(&p);
    }
    free(paged);
    if (at.mode) rm_gplan_free(&at);
    if (rc == RM_ERR_NOMEM) snprintf(err, errlen, "out of memory planning");
    rm_gmodel_free(&m);
    return rc;
}

/* ---- pricing a given plan (rm_price_graph) -------------------------------- */

/* {"modes": [...], "blocks": [...]} into p (n nodes): modes by name, blocks
 * nondecreasing from 0 by at most 1 (absent: one per node); what names the
 * object in a message. */
static rm_status plan_of(const cJSON *root, int n, rm_gplan *p, const char *what, char *err, size_t errlen) {
    const cJSON *modes = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "modes") : NULL;
    const cJSON *blocks = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "blocks") : NULL;
    memset(p, 0, sizeof *p);
    rm_status rc = misspelt(root, PLAN_KEYS, what, -1, err, errlen);
    if (rc != RM_OK) return rc;
    if (!cJSON_IsArray(modes) || cJSON_GetArraySize(modes) != n ||
        (blocks && (!cJSON_IsArray(blocks) || cJSON_GetArraySize(blocks) != n))) {
        snprintf(err, errlen, "%s: expected {\"modes\": [%d names: keep, once, each or forward], \"blocks\": "
                 "[%d block ids, nondecreasing from 0]} (blocks optional)", what, n, n);
        return RM_ERR_FORMAT;
    }
    p->mode = calloc((size_t)n, 1), p->block = calloc((size_t)n, sizeof *p->block);
    if (!p->mode || !p->block) rc = RM_ERR_NOMEM;
    const cJSON *m = modes->child, *b = blocks ? blocks->child : NULL;
    for (int i = 0; i < n && rc == RM_OK; i++, m = m->next, b = b ? b->next : NULL) {
        int mode = -1;
        for (int k = 0; k < 4 && cJSON_IsString(m); k++)
            if (strcmp(m->valuestring, mode_name(k)) == 0) mode = k;
        int prev = i ? p->block[i - 1] : 0;
        double id = b ? (cJSON_IsNumber(b) ? b->valuedouble : -1) : i;
        if (mode < 0 || id != floor(id) || id < prev || id > prev + 1 || (i == 0 && id != 0)) {
            snprintf(err, errlen, "%s: node %d: %s", what, i, mode < 0 ? "mode must be keep, once, each or forward"
                     : "block ids must start at 0 and grow by 0 or 1 from node to node");
            rc = RM_ERR_FORMAT;
            break;
        }
        p->mode[i] = (char)mode, p->block[i] = (int)id;
    }
    if (rc == RM_OK) p->n_blocks = p->block[n - 1] + 1;
    else rm_gplan_free(p);
    return rc;
}

/* plan_json, one object (no key twice), into p by plan_of */
static rm_status parse_plan(const char *text, int n, rm_gplan *p, char *err, size_t errlen) {
    cJSON *root = rm_json_parse(text, err, errlen);
    memset(p, 0, sizeof *p);
    if (!root) return RM_ERR_FORMAT;
    rm_status rc = plan_of(root, n, p, "plan", err, errlen);
    cJSON_Delete(root);
    return rc;
}

/* The answer (freed) with "live_bytes": the bytes live during each schedule item, as the model
 * counts them (what a framework's measured timeline is compared with). NULL when out of memory. */
static char *with_live(char *text, const rm_gsim *w, int items) {
    cJSON *root = cJSON_Parse(text);
    free(text);
    cJSON *live = root ? cJSON_AddArrayToObject(root, "live_bytes") : NULL;
    for (int t = 0; live && t < items; t++) cJSON_AddItemToArray(live, cJSON_CreateNumber((double)w->live[t]));
    char *out = live ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return out;
}

rm_status rm_price_graph(const char *graph_json, const char *plan_json, char **result_json, char *err,
                         size_t errlen) {
    if (entry("rm_price_graph", result_json, err, &errlen) != RM_OK) return RM_ERR_ARG;
    rm_gmodel m;
    rm_status rc = parse_graph(graph_json ? graph_json : "", &m, NULL, err, errlen);
    if (rc != RM_OK) return rc;
    rm_gplan p;
    rc = parse_plan(plan_json ? plan_json : "", m.n, &p, err, errlen);
    rm_schedule s = {0};
    rm_geval_result r;
    rm_gsim w = {0};
    if (rc == RM_OK) rc = rm_gplan_schedule(&m, p.mode, p.block, &s);
    if (rc == RM_OK) rc = rm_gsim_run(&m, &s, INT64_MAX / 4, &w, &r);
    if (rc == RM_OK) {
        p.feasible = 1, p.cost = r.cost, p.peak = r.peak;
        int *none = calloc((size_t)(m.n ? m.n : 1), sizeof *none); /* a given plan pages nothing */
        *result_json = none ? answer(&m, &p, none, r.peak, -1, -1, NULL) : NULL;
        free(none);
        if (*result_json) *result_json = with_live(*result_json, &w, s.n); /* the bytes live at each item */
        if (!*result_json) rc = RM_ERR_NOMEM;
    }
    rm_gsim_free(&w);
    if (rc == RM_ERR_NOMEM) snprintf(err, errlen, "out of memory pricing");
    rm_schedule_free(&s);
    if (p.mode) rm_gplan_free(&p);
    rm_gmodel_free(&m);
    return rc;
}
