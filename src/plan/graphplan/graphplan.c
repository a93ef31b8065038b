/* graphplan.c: the general-graph planner (plan/graphplan/graphplan.h).
 *
 * A chain has one value between stages, so Rotor's dynamic program over
 * (memory, first stage, last stage) is exact for it. A general graph has
 * values that cross many blocks (skips, an encoder output read by every
 * decoder layer); what to keep is then a set, and the exact answer is
 * Checkmate's integer program (tests/test_oracle.c solves it as the
 * oracle). Here we search the plans of graphplan.h instead (graphs of up
 * to 64 nodes, or another evaluator; larger ones: graphfast.c):
 *
 *   1. Greedy descent from store-all: while the schedule exceeds the budget,
 *      apply the mode change (KEEP -> ONCE -> EACH -> FEACH of one node) that removes
 *      the most bytes-above-budget (summed over the schedule's instructions)
 *      per unit of added recomputation time.
 *   2. Pruning: undo changes, most expensive first, that are no longer
 *      needed to fit.
 *   3. Exchange (graphs up to 32 nodes): undo one change and make another if that is
 *      cheaper and still fits.
 *   4. Random restarts around the best plan (small graphs).
 * Each is tried over several groupings into blocks (one node per block,
 * automatic blocks of several sizes, the declared stages) and the cheapest
 * feasible plan wins. Every candidate is priced by the evaluator, so a plan
 * is feasible for exactly the memory model the caller checks against. The
 * model, schedules and default evaluator are graphsched.c's. */
#include "plan/graphplan/graphplan.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- search ----------------------------------------------------------------- */

typedef struct search {
    const rm_gmodel *m;
    int64_t budget;
    rm_geval_fn eval; /* NULL: the default, on the kept workspace */
    void *ctx;
    const int *block;
    rm_schedule sch;
    rm_gwork work;
    rm_gsim sim;
} search;

static rm_status price(search *S, const char *mode, rm_geval_result *r) {
    rm_status rc = rm_gplan_schedule_with(S->m, mode, S->block, &S->work, &S->sch);
    if (rc == RM_OK) rc = S->eval ? S->eval(S->ctx, S->m, &S->sch, S->budget, r)
                                  : rm_gsim_run(S->m, &S->sch, S->budget, &S->sim, r);
    return rc;
}

/* The score of moving node v one mode step (dir +1: toward recomputing,
 * -1: toward keeping) from `cur`: for +1, bytes above the budget removed per
 * time added (-1: removes none); for -1, time saved while still fitting
 * (-1: does not fit or saves nothing). */
static rm_status score_move(search *S, char *mode, int v, int dir, const rm_geval_result *cur, double *score,
                            rm_geval_result *r) {
    mode[v] = (char)(mode[v] + dir);
    rm_status rc = price(S, mode, r);
    mode[v] = (char)(mode[v] - dir);
    *score = -1;
    if (dir > 0 && r->excess < cur->excess)
        *score = r->cost <= cur->cost ? INFINITY
                                      : (double)(cur->excess - r->excess) / (r->cost - cur->cost);
    if (dir < 0 && r->excess == 0 && r->cost < cur->cost) *score = cur->cost - r->cost;
    return rc;
}

/* Steps 1 and 2 for large graphs (more than 32 nodes), lazily: every move
 * is scored once, then the best stale score is re-scored and applied if it
 * still beats the next best; scores are refreshed all at once only when
 * none is left. O(n) evaluations per applied move at worst, far fewer in
 * practice. dir +1 descends until the plan fits, -1 prunes while it fits. */
static rm_status lazy_greedy(search *S, char *mode, rm_geval_result *cur, int dir) {
    int n = S->m->n;
    double *sc = malloc(sizeof *sc * (size_t)n);
    if (!sc) return RM_ERR_NOMEM;
    rm_status rc = RM_OK;
    int fresh = 0;
    for (;;) {
        if (dir > 0 && cur->excess == 0) break;
        if (!fresh) { /* (re)score every move */
            for (int v = 0; v < n && rc == RM_OK; v++) {
                rm_geval_result r;
                int ok = dir > 0 ? v < n - 1 && mode[v] < rm_gmodel_top(S->m, v) : mode[v] > RM_GKEEP;
                sc[v] = -1;
                if (ok) rc = score_move(S, mode, v, dir, cur, &sc[v], &r);
            }
            fresh = 1;
        }
        if (rc != RM_OK) break;
        int best = -1;
        double second = -1;
        for (int v = 0; v < n; v++)
            if (sc[v] > 0 && (best < 0 || sc[v] > sc[best])) best = v;
        for (int v = 0; v < n; v++)
            if (v != best && sc[v] > second) second = sc[v];
        if (best < 0) {
            if (fresh == 1) break; /* scored just now: no move helps */
            fresh = 0;
            continue;
        }
        rm_geval_result r;
        double now;
        rc = score_move(S, mode, best, dir, cur, &now, &r);
        if (rc != RM_OK) break;
        if (now > 0 && now >= second) {
            mode[best] = (char)(mode[best] + dir);
            *cur = r;
            fresh = 2; /* the other scores are stale now */
            int ok = dir > 0 ? mode[best] < rm_gmodel_top(S->m, best) : mode[best] > RM_GKEEP;
            sc[best] = -1;
            if (ok) rc = score_move(S, mode, best, dir, cur, &sc[best], &r);
            if (rc != RM_OK) break;
        } else {
            sc[best] = now;
        }
    }
    free(sc);
    return rc;
}

/* Step 1: greedy descent until the excess is gone (or no change helps). */
static rm_status descend(search *S, char *mode, rm_geval_result *cur) {
    int n = S->m->n;
    if (n > 32) return lazy_greedy(S, mode, cur, +1);
    while (cur->excess > 0) {
        int best = -1;
        double best_score = -1;
        rm_geval_result best_r = *cur;
        for (int v = 0; v < n - 1; v++) {
            if (mode[v] >= rm_gmodel_top(S->m, v)) continue;
            mode[v]++;
            rm_geval_result r;
            rm_status rc = price(S, mode, &r);
            mode[v]--;
            if (rc != RM_OK) return rc;
            if (r.excess >= cur->excess) continue;
            double score = (double)(cur->excess - r.excess) / (r.cost - cur->cost + 1e-9 * (1 + cur->cost));
            if (r.cost <= cur->cost) score = INFINITY;
            if (score > best_score || (score == best_score && r.excess < best_r.excess))
                best = v, best_score = score, best_r = r;
        }
        if (best < 0) return RM_OK; /* stuck: infeasible in this grouping */
        mode[best]++;
        *cur = best_r;
    }
    return RM_OK;
}

/* Step 2: undo changes that are not needed: each round undoes the one
 * (one mode step of one node) that saves the most time and still fits. */
static rm_status prune(search *S, char *mode, rm_geval_result *cur) {
    int n = S->m->n;
    if (n > 32) return lazy_greedy(S, mode, cur, -1);
    for (;;) {
        int best = -1;
        rm_geval_result best_r = *cur;
        for (int v = 0; v < n; v++) {
            if (mode[v] == RM_GKEEP) continue;
            mode[v]--;
            rm_geval_result r;
            rm_status rc = price(S, mode, &r);
            mode[v]++;
            if (rc != RM_OK) return rc;
            if (r.excess == 0 && r.cost < best_r.cost) best = v, best_r = r;
        }
        if (best < 0) return RM_OK;
        mode[best]--;
        *cur = best_r;
    }
}

/* Step 3 (graphs up to 32 nodes): undo one change, make another, keep the
 * exchange if it is cheaper and fits. */
static rm_status exchange(search *S, char *mode, rm_geval_result *cur) {
    int n = S->m->n;
    if (n > 32) return RM_OK;
    for (int round = 0, improved = 1; improved && round < 8; round++) {
        improved = 0;
        for (int u = 0; u < n; u++) {
            if (mode[u] == RM_GKEEP) continue;
            for (int v = 0; v < n - 1; v++) {
                if (v == u || mode[v] >= rm_gmodel_top(S->m, v)) continue;
                char mu = mode[u], mv = mode[v];
                mode[u] = (char)(mu - 1), mode[v] = (char)(mv + 1);
                rm_geval_result r;
                rm_status rc = price(S, mode, &r);
                if (rc != RM_OK) return rc;
                if (r.excess == 0 && r.cost < cur->cost * (1 - 1e-12)) {
                    *cur = r, improved = 1;
                    break;
                }
                mode[u] = mu, mode[v] = mv;
            }
        }
    }
    return RM_OK;
}

/* The uniform plan of a grouping: what is read across blocks kept, the
 * rest of every block but the last recomputed in each block. */
static void uniform_plan(const rm_gmodel *m, const int *block, char *mode) {
    int n = m->n;
    for (int v = 0; v < n; v++) mode[v] = block[v] == block[n - 1] ? RM_GKEEP : RM_GEACH;
    for (int j = 0; j < n; j++)
        for (int e = m->off[j]; e < m->off[j + 1]; e++)
            if (block[m->src[e]] != block[j]) mode[m->src[e]] = RM_GKEEP;
}

/* The search from the plan in work (large graphs: graphfast.c's; else
 * descend if `may_descend` and it does not fit, prune and exchange if it
 * does); the result is left in best (and r) when it fits and is cheaper. */
static rm_status search_from(search *S, char *work, int may_descend, char *best, rm_geval_result *r) {
    const rm_gmodel *m = S->m;
    rm_geval_result w;
    rm_status rc;
    if (m->n > 64 && !S->eval) {
        rc = rm_gplan_fast(m, S->budget, S->block, 1, work, &w);
    } else {
        rc = price(S, work, &w);
        if (rc == RM_OK && may_descend && w.excess > 0) rc = descend(S, work, &w);
        if (rc == RM_OK && w.excess == 0) rc = prune(S, work, &w);
        if (rc == RM_OK && w.excess == 0) rc = exchange(S, work, &w);
    }
    if (rc == RM_OK && w.excess == 0 && (r->excess > 0 || w.cost < r->cost)) {
        *r = w;
        memcpy(best, work, (size_t)m->n);
    }
    return rc;
}

/* A plan over a grouping as an eager framework runs it: what is read across
 * its blocks `across`, the rest `inside`, the loss (with keep_last, its whole
 * block: read as the backward starts) kept. Checkpointing (per-layer when the
 * blocks are the layers): across kept, inside once. The deepest plan: across
 * once (rebuilt at its first reader's backward, held to its last), inside
 * each, the loss's block kept: nothing held through the forward, so where
 * checkpointing's kept values are live at the loss's backward (a model whose
 * logits set the peak) it is the plan below it, the least's witness, tried
 * when no other start fits. */
static void over_blocks(const rm_gmodel *m, const int *coarse, char inside, char across, int keep_last, char *mode) {
    int n = m->n;
    for (int v = 0; v < n; v++)
        mode[v] = v == n - 1 || (keep_last && coarse[v] == coarse[n - 1]) ? RM_GKEEP : inside;
    for (int j = 0; j < n; j++)
        for (int e = m->off[j]; e < m->off[j + 1]; e++)
            if (coarse[m->src[e]] != coarse[j] && mode[m->src[e]] != RM_GKEEP) mode[m->src[e]] = across;
    rm_gmodel_clamp(m, mode);
}

/* The coarse groupings an eager search starts from: the hint, then automatic
 * blocks of about sqrt(n), n/4, 2 sqrt(n) and n/16 nodes. */
enum { EAGER_STARTS = 6 };
static int eager_grouping(const rm_gmodel *m, const int *hint, int k, int *coarse) {
    int n = m->n, root = (int)ceil(sqrt((double)n));
    if (!hint) hint = m->hint;
    int ks[] = {0, -1, root, n / 4 > 1 ? n / 4 : 2, 2 * root, n / 16 > 1 ? n / 16 : 2};
    if (ks[k] == 0) return 0; /* store-all */
    if (ks[k] < 0) {
        if (!hint) return -1;
        memcpy(coarse, hint, (size_t)n * sizeof *coarse);
        return 1;
    }
    rm_auto_blocks(m, ks[k], coarse);
    return 1;
}

/* An eager model (one node per block in S->block): from store-all and from
 * checkpointing over each coarse grouping, each descended if it does not fit
 * and pruned if it does; the cheapest that fits is left in mode. */
static rm_status plan_eager(search *S, const int *hint, int *coarse, char *mode, char *work, rm_geval_result *r) {
    const rm_gmodel *m = S->m;
    int n = m->n;
    r->excess = 1, r->cost = 0, r->peak = 0;
    for (int k = 0; k < EAGER_STARTS; k++) {
        int g = eager_grouping(m, hint, k, coarse);
        if (g < 0) continue;
        if (g == 0) memset(work, RM_GKEEP, (size_t)n);
        else over_blocks(m, coarse, RM_GONCE, RM_GKEEP, 0, work);
        rm_status rc = search_from(S, work, 1, mode, r);
        if (rc != RM_OK) return rc;
    }
    if (r->excess > 0 && m->hint) { /* nothing fits: from the deepest plan over the model's layers */
        over_blocks(m, m->hint, RM_GEACH, RM_GONCE, 1, work);
        return search_from(S, work, 1, mode, r);
    }
    return RM_OK;
}

/* One grouping, from four starting points: store-all (descend, then
 * prune), everything recomputed but the loss (FEACH, then EACH; prune), and the uniform plan
 * of the grouping: what crosses blocks kept, the rest of every block but
 * the last recomputed (prune). Each then tries exchanges; the cheapest
 * that fits is left in mode, and r->excess > 0 when none fits. */
static rm_status plan_grouping(search *S, char *mode, char *work, rm_geval_result *r) {
    const rm_gmodel *m = S->m;
    int n = m->n;
    r->excess = 1, r->cost = 0, r->peak = 0;
    for (int start = 0; start < 4; start++) {
        if (n > 64 && (start == 1 || start == 2)) continue; /* large graphs: store-all and uniform starts */
        if (m->eager && start == 1) continue;             /* no FEACH: the EACH start is next */
        for (int v = 0; v < n; v++) work[v] = start == 0 || v == n - 1 ? RM_GKEEP : start == 1 ? RM_GFEACH : RM_GEACH;
        if (start == 3) uniform_plan(m, S->block, work);
        rm_gmodel_clamp(m, work);
        rm_status rc = search_from(S, work, start == 0, mode, r);
        if (rc != RM_OK) return rc;
    }
    return RM_OK;
}

/* Step 4 (graphs up to 64 nodes): random restarts around the best plan
 * (one node per block when none fits): set a few nodes to random modes,
 * descend if that no longer fits, prune; keep what is cheaper. The random
 * numbers are a fixed sequence, so plans are reproducible. */
static rm_status perturb(search *S, rm_gplan *plan, char *mode, int *block) {
    int n = S->m->n, top = rm_gmodel_top(S->m, -1);
    unsigned seed = 2463534242u;
    if (plan->feasible) memcpy(block, plan->block, (size_t)n * sizeof *block);
    else
        for (int v = 0; v < n; v++) block[v] = v;
    int iters = plan->feasible ? 24 : 64; /* harder when nothing fits yet */
    for (int it = 0; it < iters; it++) {
        if (plan->feasible) memcpy(mode, plan->mode, (size_t)n);
        else memset(mode, top, (size_t)n), mode[n - 1] = RM_GKEEP;
        for (int k = 0; k < 1 + it % 3; k++) {
            seed ^= seed << 13, seed ^= seed >> 17, seed ^= seed << 5;
            int v = (int)(seed % (unsigned)(n - 1 > 0 ? n - 1 : 1));
            mode[v] = (char)((seed >> 8) % (unsigned)(top + 1));
        }
        rm_gmodel_clamp(S->m, mode);
        rm_geval_result r;
        rm_status rc = price(S, mode, &r);
        if (rc == RM_OK) rc = descend(S, mode, &r);
        if (rc == RM_OK && r.excess == 0) rc = prune(S, mode, &r);
        if (rc != RM_OK) return rc;
        if (r.excess == 0 && (!plan->feasible || r.cost < plan->cost)) {
            plan->feasible = 1, plan->cost = r.cost, plan->peak = r.peak, plan->n_blocks = block[n - 1] + 1;
            memcpy(plan->mode, mode, (size_t)n);
            memcpy(plan->block, block, (size_t)n * sizeof *block);
        }
    }
    return RM_OK;
}

/* Keeps (mode, block) in `plan` when it fits and is cheaper. */
static void keep_best(rm_gplan *plan, int n, const char *mode, const int *block, const rm_geval_result *r) {
    if (r->excess > 0 || (plan->feasible && r->cost >= plan->cost)) return;
    plan->feasible = 1, plan->cost = r->cost, plan->peak = r->peak, plan->n_blocks = block[n - 1] + 1;
    memcpy(plan->mode, mode, (size_t)n);
    memcpy(plan->block, block, (size_t)n * sizeof *block);
}

/* The seed as one more start: pruned if it fits (descended if it does not). */
static rm_status from_seed(search *S, const rm_gplan *seed, rm_gplan *plan, char *mode, int *block) {
    int n = S->m->n;
    memcpy(mode, seed->mode, (size_t)n), memcpy(block, seed->block, (size_t)n * sizeof *block);
    rm_gmodel_clamp(S->m, mode);
    rm_geval_result r;
    rm_status rc;
    if (n > 64 && !S->eval) {
        rc = rm_gplan_fast(S->m, S->budget, block, 1, mode, &r);
    } else {
        rc = price(S, mode, &r);
        if (rc == RM_OK && r.excess > 0) rc = descend(S, mode, &r);
        if (rc == RM_OK && r.excess == 0) rc = prune(S, mode, &r);
    }
    if (rc == RM_OK) keep_best(plan, n, mode, block, &r);
    return rc;
}

/* An eager model (one node per block) searched at its budget and around it.
 * The search is a heuristic, and the cheapest plan it finds moves by up to
 * 30% from one budget to the next (captured transformers); so it also
 * searches a tighter budget (a plan that fits less fits this one: the plan
 * for 0.45 of store-all was cheaper than the one for 0.5) and looser ones,
 * each plan found there descended into the budget (pruned, not polished:
 * polish_best polishes the one kept); the cheapest kept. On the 32 graphs
 * of bench/torch_models.py (16 models at per-layer checkpointing's peak and
 * at half of store-all) the budgets {1, 0.95} and {1.02, 1.05, 1.1} found
 * plans recomputing 2754 ms in all, against 2824 ms for the five tighter
 * budgets {1 .. 0.8} before (both then polished), in 4.9 s of planning
 * against 4.4. */
static rm_status plan_eager_budgets(search *S, const int *hint, rm_gplan *plan, char *mode, char *work, int *block) {
    static const double around[] = {1.0, 0.95, 1.02, 1.05, 1.1};
    const rm_gmodel *m = S->m;
    int n = m->n, fast = n > 64 && !S->eval;
    int64_t budget = S->budget;
    int *coarse = malloc(((size_t)n + 1) * sizeof *coarse);
    if (!coarse) return RM_ERR_NOMEM;
    for (int v = 0; v < n; v++) block[v] = v;
    rm_status rc = RM_OK;
    for (int t = 0; t < (int)(sizeof around / sizeof *around) && rc == RM_OK; t++) {
        if (around[t] > 1 && !fast) break; /* a looser plan is descended by graphfast.c's search */
        rm_geval_result r;
        S->budget = (int64_t)((double)budget * around[t]);
        rc = plan_eager(S, hint, coarse, mode, work, &r);
        S->budget = budget;
        if (rc == RM_OK && around[t] > 1 && r.excess == 0) rc = rm_gplan_fast(m, budget, block, 1, mode, &r);
        if (rc == RM_OK) keep_best(plan, n, mode, block, &r);
    }
    free(coarse);
    return rc;
}

/* The best plan polished at the budget itself until no undo fits: the best
 * often came from a tighter budget, or from a polish that priced only a few
 * undos (captured GPT-2 at per-layer checkpointing's peak: 194.5 -> 148 ms
 * of recomputation, the same peak). */
static rm_status polish_best(search *S, rm_gplan *plan, char *mode, int *block) {
    int n = S->m->n;
    memcpy(mode, plan->mode, (size_t)n), memcpy(block, plan->block, (size_t)n * sizeof *block);
    rm_geval_result r;
    rm_status rc = rm_gplan_fast(S->m, S->budget, block, 2, mode, &r);
    if (rc == RM_OK) keep_best(plan, n, mode, block, &r);
    return rc;
}

rm_status rm_gplan_solve_from(const rm_gmodel *m, int64_t budget, const int *hint, rm_geval_fn eval, void *ctx,
                              const rm_gplan *seed, rm_gplan *plan) {
    int n = m->n;
    memset(plan, 0, sizeof *plan);
    plan->mode = calloc((size_t)n + 1, 1);
    plan->block = calloc((size_t)n + 1, sizeof *plan->block);
    char *mode = malloc((size_t)n + 1), *work = malloc((size_t)n + 1);
    int *block = malloc(((size_t)n + 1) * sizeof *block);
    if (!plan->mode || !plan->block || !mode || !work || !block) {
        free(mode), free(work), free(block), rm_gplan_free(plan);
        return RM_ERR_NOMEM;
    }
    search S = {m, budget, eval == rm_gmodel_simulate ? NULL : eval, ctx, block, {0}, {0}, {0}};
    rm_status rc = rm_gwork_alloc(&S.work, n);
    int root = (int)ceil(sqrt((double)n));
    /* groupings: one node per block, the hint, automatic blocks of ~sqrt(n), ~n/4 and ~2 sqrt(n);
     * an eager framework recomputes at each backward: one node per block only */
    int ks[] = {n, -1, root, n / 4 > 1 ? n / 4 : 2, 2 * root};
    int groupings = m->eager ? 0 : n > 64 ? 3 : 5;
    if (m->eager && rc == RM_OK && n > 0) rc = plan_eager_budgets(&S, hint, plan, mode, work, block);
    for (int gi = 0; gi < groupings && rc == RM_OK && n > 0; gi++) {
        if (gi == 1) {
            if (!hint) continue;
            memcpy(block, hint, (size_t)n * sizeof *block);
        } else {
            rm_auto_blocks(m, ks[gi], block);
        }
        rm_geval_result r;
        rc = plan_grouping(&S, mode, work, &r);
        if (rc == RM_OK) keep_best(plan, n, mode, block, &r);
    }
    if (rc == RM_OK && seed && seed->feasible && n > 0) rc = from_seed(&S, seed, plan, mode, block);
    if (rc == RM_OK && plan->feasible && n > 64 && !S.eval) rc = polish_best(&S, plan, mode, block);
    if (rc == RM_OK && n > 0 && n <= 64) rc = perturb(&S, plan, mode, block);
    rm_schedule_free(&S.sch);
    rm_gwork_free(&S.work), rm_gsim_free(&S.sim);
    free(mode), free(work), free(block);
    if (rc != RM_OK) rm_gplan_free(plan);
    return rc;
}

rm_status rm_gplan_solve(const rm_gmodel *m, int64_t budget, const int *hint, rm_geval_fn eval, void *ctx,
                         rm_gplan *plan) {
    return rm_gplan_solve_from(m, budget, hint, eval, ctx, NULL, plan);
}

/* One probe of the eager bisection at `budget`: descents (one node per
 * block) from checkpointing over each coarse grouping, then from store-all,
 * until one fits; work gets the plan, r its price. */
static rm_status least_eager_probe(const rm_gmodel *m, int64_t budget, const int *block, int *coarse, char *work,
                                   rm_geval_result *r) {
    for (int k = EAGER_STARTS - 1; k >= 0; k--) {
        int g = eager_grouping(m, NULL, k, coarse);
        if (g < 0) continue;
        if (g == 0) memset(work, RM_GKEEP, (size_t)m->n);
        else over_blocks(m, coarse, RM_GONCE, RM_GKEEP, 0, work);
        rm_status rc = rm_gplan_fast(m, budget, block, 0, work, r);
        if (rc != RM_OK || r->excess == 0) return rc;
    }
    if (!m->hint) return RM_OK;
    over_blocks(m, m->hint, RM_GEACH, RM_GONCE, 1, work);
    return rm_gplan_fast(m, budget, block, 0, work, r);
}

/* Large graphs: a bisection, to half a percent, whose probe is the descent
 * of graphfast.c (no pruning, which frees nothing) from the uniform plan
 * over blocks of about sqrt(n), else from store-all with one node per
 * block. *at gets the plan at the least budget found. */
static int64_t least_by_descent(const rm_gmodel *m, rm_gplan *at) {
    int n = m->n;
    char *mode = calloc((size_t)n + 1, 1), *work = malloc((size_t)n + 1);
    int *block = malloc(((size_t)n + 1) * sizeof *block), *coarse = malloc(((size_t)n + 1) * sizeof *coarse);
    int64_t hi = -1, lo = 0;
    rm_geval_result r;
    if (mode && work && block && coarse) {
        for (int v = 0; v < n; v++) block[v] = v;
        rm_auto_blocks(m, (int)ceil(sqrt((double)n)), coarse);
        if (rm_gplan_fast(m, INT64_MAX / 4, block, 0, mode, &r) == RM_OK) hi = r.peak; /* store-all */
    }
    int *at_block = block;
    while (hi > 0 && hi - lo > hi / 200 + 1) {
        int64_t mid = lo + (hi - lo) / 2;
        int *used = coarse;
        rm_status rc = RM_OK;
        if (m->eager) {
            rc = least_eager_probe(m, mid, block, coarse, work, &r);
            used = block;
        } else {
            uniform_plan(m, coarse, work);
            rc = rm_gplan_fast(m, mid, coarse, 0, work, &r);
            if (rc == RM_OK && r.excess > 0) {
                memset(work, RM_GKEEP, (size_t)n), used = block;
                rc = rm_gplan_fast(m, mid, block, 0, work, &r);
            }
        }
        if (rc != RM_OK) break;
        if (r.excess == 0) memcpy(mode, work, (size_t)n), hi = mid, at_block = used;
        else lo = mid;
    }
    if (hi > 0 && at) {
        memcpy(at->mode, mode, (size_t)n), memcpy(at->block, at_block, (size_t)n * sizeof *at->block);
        at->feasible = 1, at->peak = hi, at->n_blocks = at_block[n - 1] + 1;
    }
    free(mode), free(work), free(block), free(coarse);
    return hi;
}

/* Large eager graphs: the descents' least lowered by the full search (rm_gplan_solve: more starts, a
 * few tighter budgets within each, pruning between): a search 5% below the least so far, the step
 * halved where it finds no plan; four searches at most (~0.1 s each on a captured T5). The descents
 * stop where their greedy order leads, and the nodes' sizes move that: with a dropout's mask at a bit
 * an element, T5's descents stop at 85.8 MB where the full search finds 81.2. */
static int64_t least_by_solve(const rm_gmodel *m, const int *hint, int64_t hi, rm_gplan *at) {
    int64_t step = hi / 20;
    for (int k = 0; k < 4 && hi > 0 && step > hi / 400; k++) {
        rm_gplan p;
        if (rm_gplan_solve(m, hi - step, hint, NULL, NULL, &p) != RM_OK) break;
        if (p.feasible) {
            hi -= step;
            if (at) rm_gplan_free(at), *at = p, at->peak = hi;
            else rm_gplan_free(&p);
        } else {
            rm_gplan_free(&p);
            step /= 2;
        }
    }
    return hi;
}

int64_t rm_gplan_least(const rm_gmodel *m, const int *hint, rm_geval_fn eval, void *ctx, rm_gplan *at) {
    int n = m->n;
    if (at) {
        memset(at, 0, sizeof *at);
        at->mode = calloc((size_t)n + 1, 1), at->block = calloc((size_t)n + 1, sizeof *at->block);
        if (!at->mode || !at->block) return rm_gplan_free(at), -1;
    }
    if (n > 64 && (!eval || eval == rm_gmodel_simulate)) {
        int64_t hi = least_by_descent(m, at);
        return hi > 0 && m->eager ? least_by_solve(m, hint, hi, at) : hi;
    }
    /* upper end: store-all's peak */
    rm_gplan p;
    if (rm_gplan_solve(m, INT64_MAX / 4, hint, eval, ctx, &p) != RM_OK) return -1;
    int64_t hi = p.peak, lo = 0;
    if (at) rm_gplan_free(at), *at = p;
    else rm_gplan_free(&p);
    while (hi - lo > hi / 1000 + 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (rm_gplan_solve(m, mid, hint, eval, ctx, &p) != RM_OK) return -1;
        if (p.feasible) { /* not p.peak: a plan is found at mid, maybe not at its own peak */
            hi = mid;
            if (at) rm_gplan_free(at), *at = p, p.mode = NULL, p.block = NULL;
        } else {
            lo = mid;
        }
        rm_gplan_free(&p);
    }
    return hi;
}

int64_t rm_gplan_min_budget(const rm_gmodel *m, const int *hint, rm_geval_fn eval, void *ctx) {
    return rm_gplan_least(m, hint, eval, ctx, NULL);
}
