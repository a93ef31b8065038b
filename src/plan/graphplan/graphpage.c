/* graphpage.c: keep, recompute or page, on the graph planner's model
 * (issue 20; plan/graphplan/graphplan.h).
 *
 * The engine pages on its own program (plan/paging/paging.c, exec/pageplan.c);
 * this is the same choice on the abstract model of a step, for graphs
 * profiled elsewhere (`remat plan --graph` with "scratch_bandwidth") and
 * for the exact comparison of tests/test_oracle.c, whose integer program
 * has page-out and page-in variables.
 *
 * A paged node's output is written after its last reader before its
 * longest idle gap (the forward pass is done with it) and read back `lead`
 * items ahead of its first reader after the gap: the copy is freed in
 * between, and the reads cost time where the step waits for them (the
 * evaluator prices that: rm_gsim_run, or the oracle's). The search: the
 * recompute plans of rm_gplan_solve at the budget and at larger ones (less
 * recomputation, more held), each with held outputs paged, largest first,
 * until the plan fits, then a local search (a candidate unpaged, or paged
 * with another lead, while that lowers the cost and fits); the cheapest plan
 * that fits wins, recompute-only ones included. */
#include "plan/graphplan/graphplan.h"
#include <stdlib.h>
#include <string.h>

/* The gaps between the uses of node v's first computation in s (its
 * forward item, then the items that read it) of at least two items: their
 * ends in a[], b[] (at most cap; returns how many), the longest first. */
static int gaps(const rm_gmodel *m, const rm_schedule *s, int v, int *a, int *b, int cap) {
    int last = -1, n = 0;
    for (int t = 0; t < s->n; t++) {
        const rm_sched_item *it = &s->items[t];
        if (!rm_instr_runs_node(it->kind)) continue;
        if (it->node == v && it->kind != RM_INSTR_BACKWARD) {
            if (last >= 0) break; /* recomputed: a later copy serves later readers */
            last = t;
            continue;
        }
        int reads = it->kind == RM_INSTR_BACKWARD && it->node == v && m->reads_out[v];
        const int u = it->node;
        for (int e = m->off[u]; e < m->off[u + 1] && !reads; e++)
            reads = m->src[e] == v && (it->kind != RM_INSTR_BACKWARD || m->reads_in[e]);
        if (!reads || last < 0) continue;
        if (t - last >= 2 && n < cap) a[n] = last, b[n++] = t;
        last = t;
    }
    for (int i = 1; i < n; i++) { /* the longest first */
        int x = a[i], y = b[i], j = i;
        while (j > 0 && b[j - 1] - a[j - 1] < y - x) a[j] = a[j - 1], b[j] = b[j - 1], j--;
        a[j] = x, b[j] = y;
    }
    return n;
}

static int longest_gap(const rm_gmodel *m, const rm_schedule *s, int v, int *a, int *b) {
    return gaps(m, s, v, a, b, 1);
}

/* paged[v]: the lead of its reads (low byte), and RM_GPAGE_ALL_GAPS to page
 * it over every idle gap of its uses instead of the longest one only. */
#define RM_GPAGE_ALL_GAPS 0x100
enum { MAX_GAPS = 64 };

rm_status rm_gplan_page_schedule(const rm_gmodel *m, const rm_schedule *s, const int *paged, rm_schedule *out) {
    memset(out, 0, sizeof *out);
    /* per position, the nodes paged out after it and in before it (several per node: count first) */
    int *n_out = calloc((size_t)s->n + 1, sizeof *n_out), *n_in = calloc((size_t)s->n + 1, sizeof *n_in);
    int *at_out = NULL, *at_in = NULL, *node_out = NULL, *node_in = NULL, total = 0;
    int ga[MAX_GAPS], gb[MAX_GAPS];
    rm_status rc = n_out && n_in ? RM_OK : RM_ERR_NOMEM;
    for (int pass = 0; pass < 2 && rc == RM_OK; pass++) {
        if (pass == 1) { /* offsets, then the lists */
            at_out = malloc(((size_t)s->n + 2) * sizeof *at_out), at_in = malloc(((size_t)s->n + 2) * sizeof *at_in);
            node_out = malloc((size_t)(total ? total : 1) * sizeof *node_out);
            node_in = malloc((size_t)(total ? total : 1) * sizeof *node_in);
            if (!at_out || !at_in || !node_out || !node_in) {
                rc = RM_ERR_NOMEM;
                break;
            }
            at_out[0] = at_in[0] = 0;
            for (int t = 0; t <= s->n; t++) at_out[t + 1] = at_out[t] + n_out[t], at_in[t + 1] = at_in[t] + n_in[t];
            memset(n_out, 0, ((size_t)s->n + 1) * sizeof *n_out), memset(n_in, 0, ((size_t)s->n + 1) * sizeof *n_in);
        }
        for (int v = 0; v < m->n; v++) {
            if (!paged[v]) continue;
            const int lead = paged[v] & 0xff ? paged[v] & 0xff : 1;
            int k = gaps(m, s, v, ga, gb, MAX_GAPS);
            if (!(paged[v] & RM_GPAGE_ALL_GAPS) && k > 1) k = 1;
            for (int i = 0; i < k; i++) {
                int a = ga[i], in = gb[i] - lead > a + 1 ? gb[i] - lead : a + 1;
                if (pass == 1) node_out[at_out[a] + n_out[a]] = v, node_in[at_in[in] + n_in[in]] = v;
                n_out[a]++, n_in[in]++;
                total += pass == 0;
            }
        }
    }
    for (int t = 0; rc == RM_OK && t < s->n; t++) {
        for (int j = 0; j < n_in[t] && rc == RM_OK; j++) rc = rm_schedule_push(out, RM_INSTR_PAGE_IN, node_in[at_in[t] + j]);
        if (rc == RM_OK) rc = rm_schedule_push(out, s->items[t].kind, s->items[t].node);
        for (int j = 0; j < n_out[t] && rc == RM_OK; j++)
            rc = rm_schedule_push(out, RM_INSTR_PAGE_OUT, node_out[at_out[t] + j]);
    }
    free(n_out), free(n_in), free(at_out), free(at_in), free(node_out), free(node_in);
    if (rc != RM_OK) rm_schedule_free(out);
    return rc;
}

/* A plan being weighed. */
typedef struct weighed {
    rm_geval_result r;
    int fits;
} weighed;

static rm_status price(const rm_gmodel *m, const rm_schedule *base, const int *paged, int64_t budget,
                       rm_geval_fn eval, void *ctx, weighed *w) {
    rm_schedule s;
    rm_status rc = rm_gplan_page_schedule(m, base, paged, &s);
    if (rc != RM_OK) return rc;
    rc = eval(ctx, m, &s, budget, &w->r);
    rm_schedule_free(&s);
    w->fits = rc == RM_OK && w->r.excess == 0;
    return rc;
}

/* Paging on one recompute plan (its schedule `base`): held outputs paged,
 * largest first, until the plan fits; then each paged read's lead among
 * 1, 2, 4, 8 items, the cheapest that fits. *w: the result; paged: the
 * leads (all 0 and w->fits 0 when nothing fits). */
static rm_status page_plan(const rm_gmodel *m, const rm_schedule *base, int64_t budget, rm_geval_fn eval, void *ctx,
                           int *paged, weighed *w) {
    const int n = m->n;
    int *order = malloc((size_t)(n ? n : 1) * sizeof *order), k = 0;
    if (!order) return RM_ERR_NOMEM;
    for (int v = 0; v < n; v++) {
        int a, b;
        paged[v] = 0;
        if (v < n - 1 && longest_gap(m, base, v, &a, &b)) order[k++] = v;
    }
    for (int i = 1; i < k; i++) { /* largest first */
        int x = order[i], j = i;
        while (j > 0 && m->bytes[order[j - 1]] < m->bytes[x]) order[j] = order[j - 1], j--;
        order[j] = x;
    }
    /* greedy: while it does not fit, the candidate (of the first 32, largest
     * first) and way (its longest gap, or every gap) that removes the most
     * excess */
    rm_status rc = price(m, base, paged, budget, eval, ctx, w);
    const int top = k < 32 ? k : 32;
    for (int step = 0; step < top && rc == RM_OK && !w->fits; step++) {
        int bv = -1, bmode = 0;
        weighed bw = *w;
        for (int i = 0; i < top && rc == RM_OK; i++) {
            const int v = order[i];
            if (paged[v]) continue;
            for (int mode = 1; mode <= (1 | RM_GPAGE_ALL_GAPS) && rc == RM_OK; mode += RM_GPAGE_ALL_GAPS) {
                weighed t;
                paged[v] = mode;
                rc = price(m, base, paged, budget, eval, ctx, &t);
                paged[v] = 0;
                if (rc == RM_OK && (t.r.excess < bw.r.excess || (t.r.excess == bw.r.excess && t.r.cost < bw.r.cost)))
                    bv = v, bmode = mode, bw = t;
            }
        }
        if (bv < 0) break;
        paged[bv] = bmode, *w = bw;
    }
    /* then moves that lower the cost and keep the plan fitting: each of the
     * (first 32) candidates unpaged, or paged with another lead; while one
     * helps, up to 4 passes */
    static const int leads[7] = {0, 1, 2, 4, 8, 1 | RM_GPAGE_ALL_GAPS, 2 | RM_GPAGE_ALL_GAPS};
    const int cands = k < 32 ? k : 32;
    for (int pass = 0, better = 1; pass < 4 && better && rc == RM_OK && w->fits; pass++) {
        better = 0;
        for (int i = 0; i < cands && rc == RM_OK; i++) {
            int v = order[i], best = paged[v];
            for (int j = 0; j < 7 && rc == RM_OK; j++) {
                if (leads[j] == best) continue;
                weighed t;
                paged[v] = leads[j];
                rc = price(m, base, paged, budget, eval, ctx, &t);
                if (rc == RM_OK && t.fits && t.r.cost < w->r.cost - 1e-12) best = leads[j], *w = t, better = 1;
            }
            paged[v] = best;
        }
    }
    if (rc == RM_OK && !w->fits)
        for (int v = 0; v < n; v++) paged[v] = 0;
    free(order);
    return rc;
}

rm_status rm_gplan_solve_paged(const rm_gmodel *m, int64_t budget, const int *hint, rm_geval_fn eval, void *ctx,
                               rm_gplan *plan, int *paged) {
    if (!eval) eval = rm_gmodel_simulate;
    memset(plan, 0, sizeof *plan);
    const int n = m->n;
    int *trial = malloc((size_t)(n ? n : 1) * sizeof *trial);
    if (!trial) return RM_ERR_NOMEM;
    for (int v = 0; v < n; v++) paged[v] = 0;
    static const double more[7] = {1.0, 1.1, 1.2, 1.3, 1.7, 2.5, 0};
    rm_status rc = RM_OK;
    for (int k = 0; k < (m->bw > 0 ? 7 : 1) && rc == RM_OK; k++) {
        int64_t b = more[k] > 0 ? (int64_t)((double)budget * more[k]) : INT64_MAX / 4;
        rm_gplan p;
        rc = rm_gplan_solve(m, b, hint, eval, ctx, &p);
        if (rc != RM_OK) break;
        if (!p.feasible) {
            rm_gplan_free(&p);
            continue;
        }
        rm_schedule base;
        weighed w = {{0, 0, 0}, 0};
        rc = rm_gplan_schedule(m, p.mode, p.block, &base);
        if (rc == RM_OK) {
            rc = m->bw > 0 ? page_plan(m, &base, budget, eval, ctx, trial, &w) : RM_OK;
            if (rc == RM_OK && !(m->bw > 0)) rc = price(m, &base, paged, budget, eval, ctx, &w);
            rm_schedule_free(&base);
        }
        if (rc == RM_OK && w.fits && (!plan->feasible || w.r.cost < plan->cost - 1e-12)) {
            rm_gplan_free(plan);
            *plan = p;
            plan->cost = w.r.cost, plan->peak = w.r.peak, plan->feasible = 1;
            for (int v = 0; m->bw > 0 && v < n; v++) paged[v] = trial[v];
        } else {
            rm_gplan_free(&p);
        }
    }
    free(trial);
    return rc;
}
