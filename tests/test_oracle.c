/* test_oracle.c: the general-graph planner (src/plan/graphplan/graphplan.c) against
 * the exact optimum. On random small graphs with branches and skips, the
 * optimum comes from Checkmate's mixed-integer program (Jain et al., 2020),
 * solved with GLPK under a time limit per graph. At 5 budgets from 1.1x the
 * least feasible to store-all, remat's plan must fit every time, and its
 * total compute (forward + backward + recomputation) must be within 5% of
 * the optimum on average and within 15% on every graph.
 *
 * Checkmate's model: the training graph has T = 2n nodes, the forwards
 * F_0..F_{n-1} then the backwards B_{n-1}..B_0 (B_i writes the gradients of
 * F_i's inputs; it reads the gradients written by the backwards of F_i's
 * consumers and the forward values its op declares). Stage t computes node
 * t for the first time and may recompute earlier ones: R[t][k] = 1 when
 * node k runs in stage t, S[t][i] = 1 when value i is held entering stage
 * t. Within a stage, a value is freed right after its last reader unless it
 * is held into the next stage. A backward runs once (it accumulates into
 * gradients, a side effect), so only forwards are recomputed: R[t][k] = 0
 * for a backward k < t. Both remat's plans and the program's
 * solutions are priced by the same evaluator (cm_eval), which frees as
 * early as the program is allowed to. */
#include "check.h"
#include "plan/graphplan/graphplan.h"
#include <glpk.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { MAXN = 12, MAXT = 2 * MAXN };

typedef struct cm {
    int n, T;
    double cost[MAXT];
    int64_t size[MAXT], ws[MAXT];
    char dep[MAXT][MAXT]; /* dep[k][i]: node k reads value i */
    char R[MAXT][MAXT], S[MAXT + 1][MAXT];
    /* paging (POET's variables): Mout[t][i] writes value i to disk during
     * stage t, Min[t][i] reads it back during stage t (held, as staging, all
     * through stage t; resident from t + 1); transfers take size/bw + lat
     * each, and a stage whose transfers outlast its compute waits for them */
    char Mout[MAXT][MAXT], Min[MAXT][MAXT];
    double bw, lat;
} cm;

static int bidx(const cm *c, int i) { return c->n + (c->n - 1 - i); }

static void cm_build(const rm_gmodel *m, cm *c) {
    memset(c, 0, sizeof *c);
    c->n = m->n, c->T = 2 * m->n;
    for (int k = 0; k < m->n; k++) {
        int b = bidx(c, k);
        c->cost[k] = m->fwd[k], c->size[k] = m->bytes[k], c->ws[k] = m->ws_f[k];
        c->cost[b] = m->bwd[k], c->ws[b] = m->ws_b[k];
        if (m->reads_out[k]) c->dep[b][k] = 1;
        for (int e = m->off[k]; e < m->off[k + 1]; e++) {
            int p = m->src[e];
            c->dep[k][p] = 1;
            if (m->reads_in[e]) c->dep[b][p] = 1;
            if (m->no_grad[e]) continue; /* B_k makes none of p's gradient (an edge for what is held) */
            if (!c->dep[bidx(c, p)][b]) c->size[b] += m->grad[p];
            c->dep[bidx(c, p)][b] = 1; /* B_p reads the gradient B_k wrote */
        }
    }
}

/* Frees after node k of stage t: value i (k itself or an input of k) when it
 * is not held into t+1 and no later node of the stage reads it. */
static int frees(const cm *c, int t, int i, int k) {
    if (i != k && !c->dep[k][i]) return 0;
    if (t + 1 < c->T && c->S[t + 1][i]) return 0;
    for (int j = k + 1; j <= t; j++)
        if (c->R[t][j] && c->dep[j][i]) return 0;
    return 1;
}

/* Validity, total compute, peak and the bytes above `budget` of (R, S). */
static int cm_eval(const cm *c, int64_t budget, double *cost, int64_t *peak, int64_t *excess) {
    *cost = 0, *peak = 0, *excess = 0;
    char disk[MAXT] = {0};
    for (int t = 0; t < c->T; t++) {
        if (!c->R[t][t]) return 0;
        int64_t mem = 0;
        double io = 0, compute = 0;
        for (int i = 0; i < t; i++) mem += c->S[t][i] ? c->size[i] : 0;
        for (int i = 0; i < c->T; i++) {
            if (c->Min[t][i] && !disk[i]) return 0; /* read before written */
            if (c->Mout[t][i] && !c->R[t][i] && !c->S[t][i]) return 0;
            if (c->Min[t][i]) mem += c->size[i]; /* staging all through the stage */
            if (c->Min[t][i] || c->Mout[t][i]) io += (double)c->size[i] / c->bw + c->lat;
        }
        for (int k = 0; k <= t; k++) compute += c->R[t][k] ? c->cost[k] : 0;
        if (io > compute) *cost += io - compute; /* the stage waits for its transfers */
        for (int i = 0; i < c->T; i++) disk[i] |= c->Mout[t][i];
        for (int k = 0; k <= t; k++) {
            if (!c->R[t][k]) continue;
            for (int i = 0; i < k; i++)
                if (c->dep[k][i] && !c->R[t][i] && !c->S[t][i]) return 0;
            *cost += c->cost[k];
            mem += c->size[k];
            int64_t at = mem + c->ws[k];
            if (at > *peak) *peak = at;
            if (at > budget) *excess += at - budget;
            for (int i = 0; i <= k; i++)
                if (frees(c, t, i, k)) mem -= c->size[i];
        }
        for (int i = 0; i <= t && t + 1 < c->T; i++)
            if (c->S[t + 1][i] && !c->S[t][i] && !c->R[t][i] && !c->Min[t][i]) return 0;
    }
    return 1;
}

/* A remat schedule as (R, S): recomputations join the stage of the next
 * backward; S holds each value from its latest computation to its readers. */
static void cm_from_schedule(cm *c, const rm_schedule *s) {
    memset(c->R, 0, sizeof c->R), memset(c->S, 0, sizeof c->S);
    memset(c->Mout, 0, sizeof c->Mout), memset(c->Min, 0, sizeof c->Min);
    int pend[4 * MAXT * MAXT], np = 0, stage[4 * MAXT * MAXT + 64];
    /* each item's stage: its own; a recomputation's, its next backward's */
    for (int q = s->n - 1, next = c->T - 1; q >= 0; q--) {
        const rm_sched_item *it = &s->items[q];
        if (it->kind == RM_INSTR_FORWARD) next = it->node;
        else if (it->kind == RM_INSTR_BACKWARD) next = bidx(c, it->node);
        stage[q] = next;
    }
    for (int q = 0, cur = 0; q < s->n; q++) {
        int v = s->items[q].node;
        if (s->items[q].kind == RM_INSTR_FORWARD) c->R[v][v] = 1, cur = v;
        else if (s->items[q].kind == RM_INSTR_RECOMPUTE) pend[np++] = v;
        else if (s->items[q].kind == RM_INSTR_PAGE_OUT) c->Mout[cur][v] = 1;
        else if (s->items[q].kind == RM_INSTR_PAGE_IN) c->Min[stage[q + 1] > 0 ? stage[q + 1] - 1 : 0][v] = 1;
        else {
            int t = bidx(c, v);
            c->R[t][t] = 1, cur = t;
            while (np > 0) c->R[t][pend[--np]] = 1;
        }
    }
    for (int i = 0; i < c->T; i++) {
        int last = -1, out = -1; /* the latest stage that computed (or read back) i; where it went to disk */
        for (int u = 0; u < c->T; u++) {
            int read = 0;
            for (int k = i + 1; k <= u; k++) read |= c->R[u][k] && c->dep[k][i];
            if (read && !c->R[u][i] && last >= 0)
                for (int w = last + 1; w <= u; w++) c->S[w][i] = 1;
            if (c->R[u][i]) last = u;
            if (c->Mout[u][i]) out = u;
            if (c->Min[u][i] && out >= 0) last = u, c->S[u + 1][i] = 1; /* resident from the next stage */
        }
    }
}

/* rm_geval_fn: prices remat's candidate schedules in Checkmate's model. */
static rm_status cm_price(void *ctx, const rm_gmodel *m, const rm_schedule *s, int64_t budget,
                          rm_geval_result *r) {
    (void)m;
    cm *c = ctx;
    cm_from_schedule(c, s);
    double base = 0;
    for (int k = 0; k < c->T; k++) base += c->cost[k];
    if (!cm_eval(c, budget, &r->cost, &r->peak, &r->excess)) r->excess = INT64_MAX / 4;
    r->cost -= base;
    return RM_OK;
}

/* ---- the mixed-integer program -------------------------------------------- */

typedef struct milp {
    glp_prob *P;
    int R[MAXT][MAXT], S[MAXT][MAXT], U[MAXT][MAXT], M;
    int Mo[MAXT][MAXT], Mi[MAXT][MAXT], D[MAXT + 1][MAXT], W[MAXT]; /* paging (c->bw > 0); 0: none */
    int F[MAXT][MAXT][MAXT]; /* F[t][k][i]: value i freed after node k in stage t */
    const cm *start;         /* a solution to start from (remat's plan), or NULL */
    int node_limit;          /* branch-and-bound nodes before giving up the proof */
    int T;
} milp;

/* need[t][i], i < t: value i can still matter in stage t or later: some
 * reader of it is computed first at t or later, or is itself needed. A
 * solution holding or recomputing a value that is not needed pays time or
 * memory for nothing, so fixing those variables to 0 loses no optimum. */
static void needed(const cm *c, char need[MAXT][MAXT]) {
    memset(need, 0, sizeof(char) * MAXT * MAXT);
    for (int t = 0; t < c->T; t++)
        for (int i = t - 1; i >= 0; i--)
            for (int k = i + 1; k < c->T && !need[t][i]; k++)
                if (c->dep[k][i] && (k >= t || need[t][k])) need[t][i] = 1;
}

static int col(glp_prob *P, int kind, double lo, double hi, double obj) {
    int j = glp_add_cols(P, 1);
    glp_set_col_kind(P, j, kind);
    if (kind == GLP_BV) glp_set_col_bnds(P, j, GLP_DB, 0, 1);
    else glp_set_col_bnds(P, j, lo == hi ? GLP_FX : hi > 1e30 ? GLP_LO : GLP_DB, lo, hi);
    glp_set_obj_coef(P, j, obj);
    return j;
}

static void row(glp_prob *P, int n, const int *ind, const double *val, int type, double lo, double hi) {
    int r = glp_add_rows(P, 1), i1[4 * MAXT + 8];
    double v1[4 * MAXT + 8];
    glp_set_row_bnds(P, r, type, lo, hi);
    for (int k = 0; k < n; k++) i1[k + 1] = ind[k], v1[k + 1] = val[k]; /* GLPK counts from 1 */
    glp_set_mat_row(P, r, n, i1, v1);
}

/* POET's paging variables and their constraints (c->bw > 0), for the
 * values of forward nodes: Mo[t][k] (write during stage t: k computed or
 * held in t), D[t][k] (on disk entering t: written before), Mi[t][k] (read
 * during t: on disk; held from t + 1), and per stage W[t] >= its
 * transfers' time less its compute, added to the objective. A read whose
 * value is no longer needed after t is fixed at 0, as is a write. */
static void paging_vars(const cm *c, milp *q, char need[MAXT][MAXT]) {
    glp_prob *P = q->P;
    const int T = c->T;
    memset(q->Mo, 0, sizeof q->Mo), memset(q->Mi, 0, sizeof q->Mi), memset(q->D, 0, sizeof q->D);
    memset(q->W, 0, sizeof q->W);
    if (!(c->bw > 0)) return;
    for (int k = 0; k < c->n - 1; k++)
        for (int t = k; t < T; t++) {
            int later = t + 1 < T && need[t + 1][k];
            q->Mo[t][k] = col(P, GLP_BV, 0, 1, 0);
            if (!later) glp_set_col_bnds(P, q->Mo[t][k], GLP_FX, 0, 0);
            if (t > k) {
                q->D[t][k] = col(P, GLP_CV, 0, 1, 0);
                q->Mi[t][k] = col(P, GLP_BV, 0, 1, 0);
                if (!later) glp_set_col_bnds(P, q->Mi[t][k], GLP_FX, 0, 0);
            }
        }
    for (int t = 0; t < T; t++) q->W[t] = col(P, GLP_CV, 0, 1e300, 1);
    int ind[4 * MAXT + 8];
    double val[4 * MAXT + 8];
    for (int k = 0; k < c->n - 1; k++)
        for (int t = k; t < T; t++) {
            /* Mo[t][k] <= R[t][k] + S[t][k] */
            int n = 0;
            ind[n] = q->Mo[t][k], val[n++] = 1, ind[n] = q->R[t][k], val[n++] = -1;
            if (k < t) ind[n] = q->S[t][k], val[n++] = -1;
            row(P, n, ind, val, GLP_UP, 0, 0);
            if (t + 1 < T) { /* D[t+1][k] <= D[t][k] + Mo[t][k] */
                n = 0;
                ind[n] = q->D[t + 1][k], val[n++] = 1, ind[n] = q->Mo[t][k], val[n++] = -1;
                if (q->D[t][k]) ind[n] = q->D[t][k], val[n++] = -1;
                row(P, n, ind, val, GLP_UP, 0, 0);
            }
            if (q->Mi[t][k]) { /* Mi[t][k] <= D[t][k] */
                ind[0] = q->Mi[t][k], val[0] = 1, ind[1] = q->D[t][k], val[1] = -1;
                row(P, 2, ind, val, GLP_UP, 0, 0);
            }
        }
    for (int t = 0; t < T; t++) { /* W[t] >= transfers of t - compute of t */
        int n = 0;
        ind[n] = q->W[t], val[n++] = 1;
        for (int k = 0; k <= t; k++) ind[n] = q->R[t][k], val[n++] = c->cost[k];
        for (int k = 0; k < c->n - 1; k++) {
            double each = (double)c->size[k] / c->bw + c->lat;
            if (q->Mo[t][k]) ind[n] = q->Mo[t][k], val[n++] = -each;
            if (q->Mi[t][k]) ind[n] = q->Mi[t][k], val[n++] = -each;
        }
        row(P, n, ind, val, GLP_LO, 0, 0);
    }
}

/* budget < 0: minimise the peak instead of the compute. */
static void milp_build(const cm *c, double budget, milp *q) {
    glp_prob *P = q->P = glp_create_prob();
    q->T = c->T;
    int T = c->T, ind[4 * MAXT + 4];
    double val[4 * MAXT + 4];
    char need[MAXT][MAXT];
    needed(c, need);
    q->M = budget < 0 ? col(P, GLP_CV, 0, 1e300, 1) : 0;
    for (int t = 0; t < T; t++)
        for (int k = 0; k <= t; k++) {
            q->R[t][k] = col(P, GLP_BV, 0, 1, budget < 0 ? 0 : c->cost[k]);
            if (k == t) glp_set_col_bnds(P, q->R[t][k], GLP_FX, 1, 1);
            else if (!need[t][k] || k >= c->n) glp_set_col_bnds(P, q->R[t][k], GLP_FX, 0, 0);
            q->S[t][k] = k < t ? col(P, GLP_BV, 0, 1, 0) : 0;
            if (k < t && !need[t][k]) glp_set_col_bnds(P, q->S[t][k], GLP_FX, 0, 0);
            q->U[t][k] = col(P, GLP_CV, 0, 1e300, 0);
        }
    paging_vars(c, q, need);
    for (int t = 0; t < T; t++)
        for (int k = 0; k <= t; k++) {
            for (int i = 0; i < k; i++) /* dependencies: R[t][k] <= R[t][i] + S[t][i] */
                if (c->dep[k][i]) {
                    ind[0] = q->R[t][k], val[0] = 1, ind[1] = q->R[t][i], val[1] = -1, ind[2] = q->S[t][i], val[2] = -1;
                    row(P, 3, ind, val, GLP_UP, 0, 0);
                }
            if (t + 1 < T) { /* S[t+1][k] <= S[t][k] + R[t][k] (+ Min[t][k]: read back during t) */
                int n = 0;
                ind[n] = q->S[t + 1][k], val[n++] = 1, ind[n] = q->R[t][k], val[n++] = -1;
                if (k < t) ind[n] = q->S[t][k], val[n++] = -1;
                if (q->Mi[t][k]) ind[n] = q->Mi[t][k], val[n++] = -1;
                row(P, n, ind, val, GLP_UP, 0, 0);
            }
            /* memory after computing k: U[t][k] = U[t][k-1] - freed after k-1 + R[t][k] size_k */
            int n = 0;
            ind[n] = q->U[t][k], val[n++] = 1, ind[n] = q->R[t][k], val[n++] = -(double)c->size[k];
            if (k == 0) {
                for (int i = 0; i < t; i++) ind[n] = q->S[t][i], val[n++] = -(double)c->size[i];
                for (int i = 0; i < T; i++) /* reads of the stage: staged all through it */
                    if (q->Mi[t][i]) ind[n] = q->Mi[t][i], val[n++] = -(double)c->size[i];
            } else
                ind[n] = q->U[t][k - 1], val[n++] = -1;
            for (int i = 0; k > 0 && i <= k - 1; i++) {
                if (i != k - 1 && !c->dep[k - 1][i]) continue;
                /* FREE[t][i][k-1] <= R[t][k-1], 1 - S[t+1][i], 1 - R[t][j] for later readers j */
                int f = q->F[t][k - 1][i] = col(P, GLP_CV, 0, 1, 0), m2[2] = {f, q->R[t][k - 1]};
                double v2[2] = {1, -1}, one[2] = {1, 1};
                row(P, 2, m2, v2, GLP_UP, 0, 0);
                if (t + 1 < T) m2[1] = q->S[t + 1][i], row(P, 2, m2, one, GLP_UP, 0, 1);
                for (int j = k; j <= t; j++)
                    if (c->dep[j][i]) m2[1] = q->R[t][j], row(P, 2, m2, one, GLP_UP, 0, 1);
                ind[n] = f, val[n++] = (double)c->size[i];
            }
            row(P, n, ind, val, GLP_FX, 0, 0);
            /* the budget (or the peak variable) */
            int m3[3] = {q->U[t][k], q->R[t][k], q->M};
            double v3[3] = {1, (double)c->ws[k], -1};
            row(P, budget < 0 ? 3 : 2, m3, v3, GLP_UP, 0, budget < 0 ? 0 : budget);
        }
}

/* Offers q->start (remat's plan, as R, S, memory and frees) to the solver
 * as its first incumbent: a bound to prune with from the first node. */
static void offer_start(glp_tree *tree, void *info) {
    milp *q = info;
    int active, live, total;
    glp_ios_tree_size(tree, &active, &live, &total);
    if (total > q->node_limit) glp_ios_terminate(tree); /* a limit that does not depend on the machine's load */
    if (glp_ios_reason(tree) != GLP_IHEUR || !q->start) return;
    const cm *c = q->start;
    int ncol = glp_get_num_cols(q->P);
    double *x = calloc((size_t)ncol + 1, sizeof *x);
    if (!x) return;
    char disk[MAXT] = {0};
    for (int t = 0; t < c->T; t++) {
        double mem = 0, io = 0, compute = 0;
        for (int i = 0; i < t; i++) mem += c->S[t][i] ? (double)c->size[i] : 0;
        for (int i = 0; i < c->n - 1 && c->bw > 0; i++) { /* the paging variables of the start */
            if (q->D[t][i]) x[q->D[t][i]] = disk[i];
            if (q->Mo[t][i]) x[q->Mo[t][i]] = c->Mout[t][i];
            if (q->Mi[t][i]) x[q->Mi[t][i]] = c->Min[t][i];
            if (c->Min[t][i]) mem += (double)c->size[i];
            if (c->Min[t][i] || c->Mout[t][i]) io += (double)c->size[i] / c->bw + c->lat;
        }
        for (int k = 0; k <= t; k++) compute += c->R[t][k] ? c->cost[k] : 0;
        if (q->W[t]) x[q->W[t]] = io > compute ? io - compute : 0;
        for (int i = 0; i < c->n - 1; i++) disk[i] |= c->Mout[t][i];
        for (int k = 0; k <= t; k++) {
            x[q->R[t][k]] = c->R[t][k];
            if (k < t) x[q->S[t][k]] = c->S[t][k];
            mem += c->R[t][k] ? (double)c->size[k] : 0;
            x[q->U[t][k]] = mem;
            for (int i = 0; i <= k && k < t; i++)
                if ((i == k || c->dep[k][i]) && c->R[t][k] && frees(c, t, i, k))
                    x[q->F[t][k][i]] = 1, mem -= (double)c->size[i];
        }
    }
    glp_ios_heur_sol(tree, x);
    free(x);
    q->start = NULL;
}

/* Solves; returns the objective (NAN: no solution), *proven = optimal. */
static double milp_solve(milp *q, int nodes, int *proven) {
    glp_iocp p;
    glp_init_iocp(&p);
    p.msg_lev = GLP_MSG_OFF, p.tm_lim = 30000, p.fp_heur = GLP_ON;
    q->node_limit = nodes;
    p.cb_func = offer_start, p.cb_info = q; /* the callback sees the problem as built: no MIP presolve */
    glp_smcp lp;
    glp_init_smcp(&lp);
    lp.msg_lev = GLP_MSG_OFF;
    int rc = glp_simplex(q->P, &lp);
    if (rc == 0) rc = glp_intopt(q->P, &p);
    int st = glp_mip_status(q->P);
    if (getenv("ORACLE_VERBOSE") && (st == GLP_OPT || st == GLP_FEAS)) /* the solution's R, one stage a line */
        for (int t = 0; t < q->T; t++) {
            for (int k = 0; k <= t; k++) putchar(glp_mip_col_val(q->P, q->R[t][k]) > 0.5 ? 'R' : '.');
            for (int k = 0; k < q->T; k++) {
                if (q->Mo[t][k] && glp_mip_col_val(q->P, q->Mo[t][k]) > 0.5) printf(" out %d", k);
                if (q->Mi[t][k] && glp_mip_col_val(q->P, q->Mi[t][k]) > 0.5) printf(" in %d", k);
            }
            if (q->W[t] && glp_mip_col_val(q->P, q->W[t]) > 1e-9) printf(" wait %.2f", glp_mip_col_val(q->P, q->W[t]));
            putchar('\n');
        }
    *proven = rc == 0 && st == GLP_OPT;
    double obj = (st == GLP_OPT || st == GLP_FEAS) ? glp_mip_obj_val(q->P) : NAN;
    glp_delete_prob(q->P);
    return obj;
}

/* ---- random graphs -------------------------------------------------------- */

static unsigned rng = 12345;
static int rnd(int n) {
    rng = rng * 1103515245u + 12345u;
    return (int)((rng >> 16) % (unsigned)n);
}

/* A chain backbone with skips (a node read by a later one) and branches
 * (several readers of one node). */
static void random_graph(int n, rm_gmodel *m) {
    rm_gmodel_alloc(m, n);
    for (int i = 0; i < n; i++) {
        m->fwd[i] = 1 + rnd(10), m->bwd[i] = 1 + rnd(20);
        m->bytes[i] = i == n - 1 ? 1 : 1 + rnd(8);
        m->grad[i] = i == n - 1 ? 0 : m->bytes[i];
        m->has_bwd[i] = 1, m->reads_out[i] = rnd(10) < 3;
        if (i > 0) rm_gmodel_edge(m, i - 1, rnd(10) < 6);
        if (i > 1 && rnd(10) < 5) {
            int src = rnd(i - 1), reads = rnd(10) < 6, grad = rnd(10) < 7;
            rm_gmodel_edge_grad(m, src, reads, grad); /* some skips make no gradient (rematplan's held edges) */
        }
        rm_gmodel_close_node(m, i);
    }
}

/* Keep, recompute or page (issue 20): remat's planner with paging
 * (rm_gplan_solve_paged, priced by the same evaluator) against the program
 * with POET's page-out and page-in variables, at 1, 1.1, 1.25 and 1.5 times
 * the least recompute-only budget, on a disk that moves an average value in
 * about one forward node's time. */
static void test_paging(void) {
    int fits = 0, cases = 0, unproven = 0;
    double sum_ratio = 0, max_ratio = 0;
    rng = 777;
    for (int gi = 0; gi < 6; gi++) {
        rm_gmodel m;
        int n = 7 + gi % 5;
        random_graph(n, &m);
        cm c;
        cm_build(&m, &c);
        double bytes = 0, fwd = 0;
        for (int k = 0; k < n - 1; k++) bytes += (double)m.bytes[k], fwd += m.fwd[k];
        m.bw = c.bw = bytes / fwd, m.io_latency = c.lat = 0.2;
        rm_gmodel pm = m; /* the recompute-only least: without paging */
        pm.bw = 0;
        int64_t least = rm_gplan_min_budget(&pm, NULL, cm_price, &c);
        rm_gplan p;
        int paged[MAXN];
        CHECK(rm_gplan_solve(&pm, INT64_MAX / 4, NULL, cm_price, &c, &p) == RM_OK, "store-all");
        int64_t store_all = p.peak;
        rm_gplan_free(&p);
        printf("paging graph %d: %d nodes, bandwidth %.2f bytes/unit, least recompute-only %lld, store-all %lld\n", gi,
               n, c.bw, (long long)least, (long long)store_all);
        double base = 0;
        for (int k = 0; k < c.T; k++) base += c.cost[k];
        static const double at[4] = {1.0, 1.1, 1.25, 1.5}; /* x the least: where paging competes */
        for (int b = 0; b < 4; b++) {
            int64_t budget = (int64_t)floor(at[b] * (double)least);
            if (budget > store_all) budget = store_all;
            CHECK(rm_gplan_solve_paged(&m, budget, NULL, cm_price, &c, &p, paged) == RM_OK, "solve paged");
            cases++;
            milp q;
            int proven;
            cm start = c;
            if (p.feasible) {
                rm_schedule sch, ps;
                if (rm_gplan_schedule(&m, p.mode, p.block, &sch) == RM_OK) {
                    if (rm_gplan_page_schedule(&m, &sch, paged, &ps) == RM_OK) cm_from_schedule(&start, &ps), rm_schedule_free(&ps);
                    rm_schedule_free(&sch);
                }
            }
            milp_build(&c, (double)budget, &q);
            q.start = p.feasible ? &start : NULL;
            double opt = milp_solve(&q, 300, &proven);
            unproven += !proven;
            int n_paged = 0;
            for (int v = 0; v < n; v++) n_paged += paged[v] > 0;
            if (!p.feasible) {
                printf("  budget %4lld: remat found no plan, optimum %s\n", (long long)budget,
                       isnan(opt) ? "none either" : "exists");
                CHECK(isnan(opt), "graph %d budget %lld: remat found no paged plan, the program did (%.1f)", gi,
                      (long long)budget, opt);
                rm_gplan_free(&p);
                continue;
            }
            fits++;
            double ratio = isnan(opt) ? 1 : (base + p.cost) / opt;
            sum_ratio += ratio;
            if (ratio > max_ratio) max_ratio = ratio;
            printf("  budget %4lld: remat %6.1f (peak %lld, %d paged), optimum %6.1f%s, ratio %.3f\n", (long long)budget,
                   base + p.cost, (long long)p.peak, n_paged, opt, proven ? "" : " (node limit: best found)", ratio);
            CHECK(p.peak <= budget, "graph %d: paged plan's peak %lld over budget %lld", gi, (long long)p.peak,
                  (long long)budget);
            CHECK(ratio <= 1.15, "graph %d budget %lld: remat %.1f is %.1f%% above the optimum %.1f", gi,
                  (long long)budget, base + p.cost, 100 * (ratio - 1), opt);
            rm_gplan_free(&p);
        }
        rm_gmodel_free(&m);
    }
    double mean = fits ? sum_ratio / fits : 0;
    printf("oracle with paging: %d/%d budgets planned, time/optimum mean %.4f, worst %.4f (%d optima not proven)\n",
           fits, cases, mean, max_ratio, unproven);
    CHECK(mean <= 1.05, "paging: mean ratio %.4f > 1.05", mean);
}

int main(void) {
    int graphs = 10, fits = 0, cases = 0, unproven = 0;
    double sum_ratio = 0, max_ratio = 0;
    for (int gi = 0; gi < graphs; gi++) {
        rm_gmodel m;
        int n = 7 + gi % 6; /* 7 .. 12 forward nodes */
        random_graph(n, &m);
        if (getenv("ORACLE_GRAPH") && atoi(getenv("ORACLE_GRAPH")) != gi) {
            rm_gmodel_free(&m);
            continue;
        }
        cm c;
        cm_build(&m, &c);
        milp q;
        int proven;
        milp_build(&c, -1, &q);
        q.start = NULL;
        double least = milp_solve(&q, 400, &proven);
        rm_gplan p;
        CHECK(rm_gplan_solve(&m, INT64_MAX / 4, NULL, cm_price, &c, &p) == RM_OK && p.feasible, "store-all plan");
        int64_t store_all = p.peak;
        rm_gplan_free(&p);
        /* the least feasible budget: the program's, or remat's when the program ran out of time above it */
        int64_t remat_least = rm_gplan_min_budget(&m, NULL, cm_price, &c);
        if (!proven && (isnan(least) || remat_least < least)) least = (double)remat_least;
        printf("graph %d: %d nodes, %d edges, least feasible %.0f%s (remat's %lld), store-all %lld\n", gi, n,
               m.n_edges, least, proven ? "" : " (not proven)", (long long)remat_least, (long long)store_all);
        for (int b = 0; b < 5; b++) {
            double lo = 1.1 * least < store_all ? 1.1 * least : store_all;
            int64_t budget = (int64_t)floor(lo + (store_all - lo) * b / 4.0);
            CHECK(rm_gplan_solve(&m, budget, NULL, cm_price, &c, &p) == RM_OK, "solve");
            cases++;
            CHECK(p.feasible, "graph %d budget %lld: remat found no plan", gi, (long long)budget);
            if (!p.feasible) {
                rm_gplan_free(&p);
                continue;
            }
            fits++;
            double base = 0;
            for (int k = 0; k < c.T; k++) base += c.cost[k];
            rm_schedule sch;
            cm start = c;
            if (rm_gplan_schedule(&m, p.mode, p.block, &sch) == RM_OK) cm_from_schedule(&start, &sch);
            rm_schedule_free(&sch);
            milp_build(&c, (double)budget, &q);
            q.start = &start;
            double opt = milp_solve(&q, 400, &proven);
            unproven += !proven;
            double ratio = isnan(opt) ? 1 : (base + p.cost) / opt;
            sum_ratio += ratio;
            if (ratio > max_ratio) max_ratio = ratio;
            printf("  budget %4lld: remat %6.1f (peak %lld), optimum %6.1f%s, ratio %.3f\n", (long long)budget,
                   base + p.cost, (long long)p.peak, opt, proven ? "" : " (time limit: best found)", ratio);
            CHECK(p.peak <= budget, "graph %d: peak %lld over budget %lld", gi, (long long)p.peak, (long long)budget);
            CHECK(ratio <= 1.15, "graph %d budget %lld: remat %.1f is %.1f%% above the optimum %.1f", gi,
                  (long long)budget, base + p.cost, 100 * (ratio - 1), opt);
            rm_gplan_free(&p);
        }
        rm_gmodel_free(&m);
    }
    double mean = fits ? sum_ratio / fits : 0;
    printf("oracle: %d/%d budgets planned, compute/optimum mean %.4f, worst %.4f (%d optima not proven in time)\n",
           fits, cases, mean, max_ratio, unproven);
    CHECK(mean <= 1.05, "mean ratio %.4f > 1.05", mean);
    test_paging();
    return check_done("test_oracle");
}
