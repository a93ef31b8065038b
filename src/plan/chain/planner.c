/* planner.c: the fastest schedule whose activation arena fits a budget.
 *
 * 1. Chain model: per stage, forward/backward time (measured per stage when
 *    the caller has a profile, else FLOPs) and the bytes Rotor needs, taken
 *    from the graph the engine plans: a[i] the stage input, ab[i] what the
 *    stage's backward reads plus its output, ft[i]/bt[i] the rest of its
 *    values and of its gradients, plus its largest workspace.
 * 2. Rotor's DP (rotor.c) picks the operation sequence.
 * 3. Exact guarantee: the sequence is lowered to the engine's program and its
 *    arena laid out; if that exceeds the budget (the model is not the
 *    engine), the DP budget is tightened by the excess and we plan again. */
#include "plan/chain/chain.h"
#include "plan/rotor/rotor.h"
#include "plan/graphplan/graphplan.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t aligned(const rm_value *v) {
    size_t b = (size_t)v->numel * rm_dtype_size(v->dtype);
    return (int64_t)((b + RM_ALIGN - 1) / RM_ALIGN * RM_ALIGN);
}

/* Bytes from the store-all program itself: for each stage, what its forward
 * adds and keeps (ab), its forward's transient peak above that (ft), and its
 * backward's transient peak above what is live when it starts (bt). These
 * are the engine's own figures, workspaces and alignment included. */
static void measure(const rm_graph *g, const rm_chain *c, const rm_program *p, rm_chain_model *m) {
    int n = p->n_instrs;
    int64_t *live = calloc((size_t)n + 1, sizeof *live), *after = calloc((size_t)n + 1, sizeof *after);
    if (!live || !after) {
        free(live), free(after);
        return;
    }
    for (int b = 0; b < p->n_bufs; b++) {
        live[p->bufs[b].first] += (int64_t)p->bufs[b].bytes;
        after[p->bufs[b].last] -= (int64_t)p->bufs[b].bytes;
    }
    int64_t cur = 0;
    for (int i = 0; i < n; i++) { /* live[i]: during i; after[i]: once i's frees are done */
        cur += live[i];
        live[i] = cur;
        cur += after[i];
        after[i] = cur;
    }
    for (int s = 0; s < c->n; s++) {
        int gs = c->graph_stage[s], fs = -1, fe = -1, bs = -1, be = -1;
        for (int i = 0; i < n; i++) {
            if (!rm_instr_runs_node(p->instrs[i].kind) || g->nodes[p->instrs[i].node].stage != gs) continue;
            if (p->instrs[i].kind == RM_INSTR_FORWARD) fe = i, fs = fs < 0 ? i : fs;
            if (p->instrs[i].kind != RM_INSTR_FORWARD) be = i, bs = bs < 0 ? i : bs; /* recompute + backward */
        }
        if (fs < 0) continue;
        int64_t before = fs > 0 ? after[fs - 1] : 0, peak = 0;
        for (int i = fs; i <= fe; i++) peak = live[i] > peak ? live[i] : peak;
        int64_t ab = after[fe] - before;
        if (s < c->n - 1) { /* the loss stage's forward and backward are one step (L) */
            m->ab[s] = ab > m->a[s + 1] ? ab : m->a[s + 1];
            m->ft[s] = peak - after[fe] > 0 ? peak - after[fe] : 0;
        }
        if (bs < 0) continue;
        int64_t b0 = bs > 0 ? after[bs - 1] : 0, bpeak = 0;
        for (int i = bs; i <= be; i++) bpeak = live[i] > bpeak ? live[i] : bpeak;
        if (s == c->n - 1) { /* L: all of the loss stage's memory is transient */
            m->ab[s] = 0;
            m->ft[s] = peak - before > 0 ? peak - before : 0;
            m->bt[s] = bpeak - before > 0 ? bpeak - before : 0;
        } else {
            m->bt[s] = bpeak - b0 > 0 ? bpeak - b0 : 0;
        }
    }
    free(live), free(after);
}

rm_status rm_chain_model_from_graph(const rm_graph *g, const rm_chain *c, const rm_profile *prof, int threads,
                                    const rm_program *store_all, rm_chain_model *m) {
    if (rm_chain_model_alloc(m, c->n) != RM_OK) return RM_ERR_NOMEM;
    char *read_by_bwd = calloc((size_t)g->n_vals, 1);
    if (!read_by_bwd) {
        rm_chain_model_free(m);
        return RM_ERR_NOMEM;
    }
    for (int n = 0; n < g->n_nodes; n++) {
        const rm_node *nd = &g->nodes[n];
        if (!nd->needs_grad) continue;
        unsigned r = rm_node_bwd_reads(nd, g->vals);
        for (int i = 0; i < nd->n_in; i++)
            if ((r & RM_READS_IN(i)) && nd->in[i] >= 0) read_by_bwd[nd->in[i]] = 1;
        for (int j = 0; j < nd->n_out; j++)
            if (r & RM_READS_OUT(j)) read_by_bwd[nd->out[j]] = 1;
    }
    for (int s = 0; s < c->n; s++) {
        m->a[s] = c->input[s] >= 0 ? aligned(&g->vals[c->input[s]]) : 0;
        int out = s + 1 < c->n ? c->input[s + 1] : -1;
        int64_t ws_f = 0, ws_b = 0;
        for (int n = c->first[s]; n <= c->last[s]; n++) {
            const rm_node *nd = &g->nodes[n];
            const rm_op_def *op = rm_op_get(nd->op);
            m->uf[s] += op->flops ? op->flops(nd, g->vals, 0) : 0;
            if (nd->needs_grad) m->ub[s] += op->flops ? op->flops(nd, g->vals, 1) : 0;
            const int64_t wf = (int64_t)rm_node_workspace(nd, g->vals, 0, threads);
            const int64_t wb = (int64_t)rm_node_workspace(nd, g->vals, 1, threads);
            ws_f = wf > ws_f ? wf : ws_f;
            ws_b = wb > ws_b ? wb : ws_b;
            for (int j = 0; j < nd->n_out; j++) {
                const rm_value *v = &g->vals[nd->out[j]];
                if (read_by_bwd[nd->out[j]] || nd->out[j] == out) m->ab[s] += aligned(v);
                else m->ft[s] += aligned(v);
                if (v->grad >= 0 && nd->out[j] != out) m->bt[s] += aligned(&g->vals[v->grad]);
            }
        }
        m->ft[s] += ws_f;
        m->bt[s] += ws_b;
        if (prof && prof->stage_fwd[c->graph_stage[s]] > 0 && prof->stage_bwd[c->graph_stage[s]] > 0) {
            /* a measured profile replaces the FLOP estimate */
            m->uf[s] = prof->stage_fwd[c->graph_stage[s]];
            m->ub[s] = prof->stage_bwd[c->graph_stage[s]];
        }
    }
    m->a[c->n] = 0; /* the loss is a scalar; its gradient is the session's seed */
    if (store_all) measure(g, c, store_all, m);
    free(read_by_bwd);
    return RM_OK;
}

/* The second way to keep each stage: the selective policy, measured on the
 * engine's own selective program; its backward also pays for rebuilding the
 * cheap values: their measured forward times, or without a profile their
 * share of the stage's forward FLOPs times uf. */
static rm_status add_selective_option(const rm_graph *g, const rm_chain *c, int threads, const rm_profile *prof,
                                      rm_chain_model *m) {
    rm_schedule sch;
    rm_program p;
    char err[256];
    if (rm_schedule_build(g, "selective", 1, NULL, &sch, err, sizeof err) != RM_OK) return RM_ERR_NOMEM;
    rm_status rc = rm_program_build(g, &sch, threads, &p, err, sizeof err);
    rm_schedule_free(&sch);
    if (rc != RM_OK) return rc;
    rm_memplan(&p);
    rm_chain_model sel;
    rc = rm_chain_model_alloc(&sel, c->n);
    if (rc == RM_OK) rc = rm_chain_model_alloc_selective(m);
    if (rc == RM_OK) {
        memcpy(sel.a, m->a, sizeof(int64_t) * (size_t)(c->n + 1));
        measure(g, c, &p, &sel);
        for (int s = 0; s < c->n; s++) {
            double fwd = 0, rec = 0, rec_ms = 0;
            int gs = c->graph_stage[s];
            for (int i = 0; i < p.n_instrs; i++) {
                const rm_node *nd = &g->nodes[p.instrs[i].node];
                if (nd->stage != gs) continue;
                double f = rm_op_get(nd->op)->flops(nd, g->vals, 0);
                if (p.instrs[i].kind == RM_INSTR_FORWARD) fwd += f;
                if (p.instrs[i].kind == RM_INSTR_RECOMPUTE) rec += f, rec_ms += prof ? rm_profile_recompute_ms(prof, p.instrs[i].node) : 0;
            }
            m->ab2[s] = sel.ab[s];
            m->bt2[s] = sel.bt[s];
            m->ub2[s] = m->ub[s] + (prof ? rec_ms : fwd > 0 ? m->uf[s] * rec / fwd : 0);
        }
    }
    rm_chain_model_free(&sel);
    rm_program_free(&p);
    return rc;
}

rm_status rm_chain_model_build(const rm_graph *g, const rm_chain *c, const rm_profile *prof, int threads,
                               const rm_program *store_all, rm_chain_model *m) {
    if (rm_chain_model_from_graph(g, c, prof, threads, store_all, m) != RM_OK) return RM_ERR_NOMEM;
    if (add_selective_option(g, c, threads, prof, m) != RM_OK) { /* planning still works without it */
        free(m->ub2), free(m->ab2), free(m->bt2);
        m->ub2 = NULL, m->ab2 = NULL, m->bt2 = NULL;
    }
    return RM_OK;
}

/* A schedule's recompute cost and, when its live bytes fit `budget` and it
 * is cheaper than `than`, its arena (else -1): the layout, the costly part,
 * is laid out only for a candidate that can win. All candidates of one plan
 * are priced the same way: profiled ms, or FLOPs without a profile. */
static rm_status price(const rm_graph *g, const rm_schedule *sch, int threads, const rm_profile *prof,
                       int64_t budget, double than, double *cost, int64_t *arena) {
    rm_program p;
    char err[256];
    rm_status rc = rm_program_build(g, sch, threads, &p, err, sizeof err);
    if (rc != RM_OK) return rc;
    *cost = rm_recompute_cost(g, &p, prof);
    *arena = -1;
    if ((int64_t)p.peak_live_bytes <= budget && *cost < than) { /* the arena is never below the live peak */
        rm_memplan(&p);
        *arena = (int64_t)p.arena_bytes;
    }
    rm_program_free(&p);
    return RM_OK;
}

/* The segment counts priced for a chain of n stages: every one on chains
 * the exact program plans; on longer ones 2..16, then 25% apart. */
static int next_segments(int k, int n, int every) {
    if (every || k < 16 || k >= n) return k + 1;
    return k + k / 4 < n ? k + k / 4 : n;
}

enum { REVOLVE_MAX_STAGES = 130 };

/* Prices one named schedule: it replaces *out when it fits the budget and
 * costs less than *best. */
static rm_status try_named(const rm_graph *g, const char *name, int64_t budget, int threads,
                           const rm_profile *prof, int *have, double *best, rm_schedule *out, rm_auto_info *info) {
    char err[256];
    rm_schedule sch;
    double cost, than = *best * (1 - 1e-9);
    int64_t arena;
    if (rm_schedule_build(g, name, 1, NULL, &sch, err, sizeof err) != RM_OK) return RM_OK; /* does not apply */
    rm_status rc = price(g, &sch, threads, prof, budget, than, &cost, &arena);
    if (rc == RM_OK && arena >= 0 && arena <= budget && cost < than) {
        if (*have) rm_schedule_free(out);
        *out = sch, *have = 1, *best = cost;
        snprintf(info->chosen, sizeof info->chosen, "%s", name);
        return RM_OK;
    }
    rm_schedule_free(&sch);
    return rc == RM_ERR_NOMEM ? rc : RM_OK;
}

/* The dynamic program is optimal for its model of the chain, but sizes are
 * rounded up to slots and its stage model is coarser than the engine's
 * liveness: at exactly the memory of a uniform schedule it can miss that
 * schedule, and near the least budget, where a slot's rounding is a large
 * share of the memory, it can plan far more recomputation than revolve's
 * binomial schedule in the same bytes (GPT shape A at its least budget,
 * 81 MiB: 181% predicted against revolve:2's 78%), or store-all's memory
 * (a 100% budget recomputed 9 ms a step). So store-all, the uniform
 * schedules (segments:2..n, blocks) and, up to 130 stages, revolve:1..n-2
 * that fit the budget are priced alongside, and the cheapest wins. `have`:
 * *out holds the dynamic program's schedule. RM_ERR_BUDGET when nothing
 * fits. */
static rm_status try_uniform(const rm_graph *g, int stages, int every, int64_t budget, int threads,
                             const rm_profile *prof, int have, rm_schedule *out, rm_auto_info *info) {
    double best = INFINITY;
    int64_t arena;
    char name[32];
    if (have && price(g, out, threads, prof, INT64_MAX, INFINITY, &best, &arena) != RM_OK) return RM_ERR_NOMEM;
    /* store-all, which recomputes nothing, where the budget holds it */
    if (try_named(g, "none", budget, threads, prof, &have, &best, out, info) != RM_OK) return RM_ERR_NOMEM;
    for (int k = 2; k <= stages + 1; k = next_segments(k, stages, every)) {
        if (k <= stages) snprintf(name, sizeof name, "segments:%d", k);
        else snprintf(name, sizeof name, "blocks");
        if (try_named(g, name, budget, threads, prof, &have, &best, out, info) != RM_OK) return RM_ERR_NOMEM;
    }
    /* revolve only on chains the exact program plans: on longer ones its
     * schedules with few slots are long to build (1,000 stages: 4x the time
     * of the whole plan) and the grouped program's slots are fine enough */
    for (int k = 1; stages <= REVOLVE_MAX_STAGES && k < stages - 1; k++) {
        snprintf(name, sizeof name, "revolve:%d", k);
        if (try_named(g, name, budget, threads, prof, &have, &best, out, info) != RM_OK) return RM_ERR_NOMEM;
    }
    return have ? RM_OK : RM_ERR_BUDGET;
}

/* The arena of revolve:1, the least memory of the revolve schedules priced
 * above (0 where they are not), so the least budget named is one that
 * plans. */
static int64_t revolve_least(const rm_graph *g, int stages, int threads) {
    if (stages > REVOLVE_MAX_STAGES || stages < 3) return 0;
    char err[256];
    rm_schedule sch;
    rm_program p;
    if (rm_schedule_build(g, "revolve:1", 1, NULL, &sch, err, sizeof err) != RM_OK) return 0;
    rm_status rc = rm_program_build(g, &sch, threads, &p, err, sizeof err);
    rm_schedule_free(&sch);
    if (rc != RM_OK) return 0;
    rm_memplan(&p);
    int64_t arena = (int64_t)p.arena_bytes;
    rm_program_free(&p);
    return arena;
}

/* The message of an infeasible budget, naming the least feasible one. */
static void budget_message(int64_t budget, const rm_auto_info *info, char *err, size_t errlen) {
    char b[RM_MIB_TEXT], m[RM_MIB_TEXT], all[RM_MIB_TEXT];
    rm_mib_pair(budget, info->min_budget, b, m, sizeof b);
    rm_mib_pair(info->store_all, info->min_budget, all, NULL, sizeof all);
    if (info->min_budget > 0)
        snprintf(err, errlen, "memory budget %s is below the minimum feasible %s for this model, whose store-all "
                 "needs %s; raise the budget to at least %.2fMiB (%lld bytes)", b, m, all,
                 info->min_budget / 1048576.0 + 0.01, (long long)info->min_budget);
    else
        snprintf(err, errlen, "memory budget %.2f MiB cannot be met by any schedule", budget / 1048576.0);
}

/* A graph that is not a chain of stages: the general planner
 * (graphbudget.c), with the uniform schedules on its units as candidates. */
static rm_status graph_auto(const rm_graph *g, int64_t budget, int threads, const rm_profile *prof,
                            rm_schedule *out, rm_auto_info *info, char *err, size_t errlen) {
    rm_status rc = rm_schedule_graph_auto(g, budget, threads, prof, out, info, err, errlen);
    if (rc != RM_OK && rc != RM_ERR_BUDGET) return rc;
    rm_gmodel m;
    int *unit = malloc(((size_t)g->n_nodes + 1) * sizeof *unit);
    int units = 0;
    if (unit && rm_gmodel_from_graph(g, NULL, threads, &m) == RM_OK) {
        units = rm_graph_units(g, &m, unit);
        rm_gmodel_free(&m);
    }
    free(unit);
    rm_status u = try_uniform(g, units, 1, budget, threads, prof, rc == RM_OK, out, info);
    if (u == RM_OK) rc = RM_OK;
    else if (u != RM_ERR_BUDGET) return u;
    if (rc == RM_ERR_BUDGET) budget_message(budget, info, err, errlen);
    return rc;
}

rm_status rm_schedule_auto(const rm_graph *g, int64_t budget, int slots, int groups, int threads,
                           const rm_profile *prof, const rm_program *none, rm_schedule *out, rm_auto_info *info,
                           char *err, size_t errlen) {
    int64_t store_all = (int64_t)none->arena_bytes;
    info->min_budget = 0;
    info->chosen[0] = 0;
    info->store_all = store_all;
    rm_chain c;
    rm_status rc = rm_chain_build(g, &c, err, errlen);
    if (rc == RM_OK && c.n <= 1) rm_chain_free(&c), rc = RM_ERR_ARG; /* no stages declared */
    if (rc == RM_ERR_ARG) return graph_auto(g, budget, threads, prof, out, info, err, errlen);
    if (rc != RM_OK) return rc;
    rm_chain_model m;
    if (rm_chain_model_build(g, &c, prof, threads, none, &m) != RM_OK) {
        rm_chain_free(&c);
        snprintf(err, errlen, "out of memory planning");
        return RM_ERR_NOMEM;
    }
    if (groups <= 0) groups = rm_rotor_groups(c.n, slots);
    rm_fit_ctx fx = {g, &c, &m, slots, groups, threads, store_all, prof};
    rc = rm_chain_fit(&fx, budget, out, err, errlen);
    if (rc == RM_OK || rc == RM_ERR_BUDGET) {
        /* the least budget, the same whatever was asked: at or above it a
         * plan exists, so where the fit found none the least's serves */
        rm_schedule at;
        info->min_budget = rm_chain_min_budget(&fx, &at);
        if (rc == RM_ERR_BUDGET && info->min_budget > 0 && budget >= info->min_budget) *out = at, rc = RM_OK;
        else rm_schedule_free(&at);
        info->min_exact = info->min_budget > 0;
        int64_t rev = revolve_least(g, c.n, threads);
        if (rev > 0 && (info->min_budget <= 0 || rev < info->min_budget)) info->min_budget = rev;
        rm_status u = try_uniform(g, c.n, groups >= c.n, budget, threads, prof, rc == RM_OK, out, info);
        if (u == RM_OK) rc = RM_OK;
        else if (u != RM_ERR_BUDGET) rc = u, snprintf(err, errlen, "out of memory planning");
    }
    if (rc == RM_OK) {
        if (!info->chosen[0]) snprintf(info->chosen, sizeof info->chosen, "rotor");
    } else if (rc == RM_ERR_BUDGET) {
        budget_message(budget, info, err, errlen);
    }
    rm_chain_model_free(&m);
    rm_chain_free(&c);
    return rc;
}

rm_status rm_schedule_budget(const rm_graph *g, const char *budget, int threads, const rm_profile *prof,
                             rm_schedule *out, rm_auto_info *info, char *err, size_t errlen) {
    memset(info, 0, sizeof *info);
    double v;
    int percent;
    if (rm_parse_bytes(budget, &v, &percent) != RM_OK) {
        snprintf(err, errlen, "memory budget '%s' is not a size: use e.g. 64MiB, 1.5GiB, 500MB, "
                 "123456 (bytes) or 50%% (of store-all)", budget ? budget : "");
        return RM_ERR_ARG;
    }
    /* store-all's program: the reference for "50%" budgets, for reports, and
     * the source of the planner's per-stage byte figures */
    rm_schedule sch;
    rm_program none;
    rm_status rc = rm_schedule_build(g, "none", 1, NULL, &sch, err, errlen);
    if (rc != RM_OK) return rc;
    rc = rm_program_build(g, &sch, threads, &none, err, errlen);
    rm_schedule_free(&sch);
    if (rc != RM_OK) return rc;
    rm_memplan(&none);
    info->store_all = (int64_t)none.arena_bytes;
    double bytes = percent ? (double)info->store_all * v / 100.0 : v;
    if (!(bytes <= (double)RM_MAX_BUDGET_BYTES)) { /* (int64_t) of 1e19 would be undefined */
        rm_program_free(&none);
        snprintf(err, errlen, "memory budget '%s' is %.3g bytes, above the largest remat plans for "
                 "(2^60 bytes, 1 EiB): give a smaller size", budget, bytes);
        return RM_ERR_ARG;
    }
    info->budget = (int64_t)bytes;
    rc = rm_schedule_auto(g, info->budget, 500, 0, threads, prof, &none, out, info, err, errlen);
    rm_program_free(&none);
    return rc;
}

rm_status rm_schedule_chain_paged(const rm_graph *g, int64_t budget, int threads, const rm_profile *prof,
                                  double ms_per_byte, double latency_ms, double units_per_ms, rm_schedule *out,
                                  char *values, char *err, size_t errlen) {
    rm_chain c;
    rm_schedule sch;
    rm_program none;
    memset(out, 0, sizeof *out);
    rm_status rc = rm_chain_build(g, &c, err, errlen);
    if (rc != RM_OK) return RM_ERR_ARG;
    if (c.n <= 1 || c.n > rm_rotor_groups(c.n, 500) || rm_rotor_groups(c.n, 500) < c.n) { /* exact chains only */
        rm_chain_free(&c);
        return RM_ERR_ARG;
    }
    rc = rm_schedule_build(g, "none", 1, NULL, &sch, err, errlen);
    if (rc == RM_OK) rc = rm_program_build(g, &sch, threads, &none, err, errlen);
    rm_schedule_free(&sch);
    if (rc != RM_OK) {
        rm_chain_free(&c);
        return rc;
    }
    rm_memplan(&none);
    rm_chain_model m;
    rc = rm_chain_model_build(g, &c, prof, threads, &none, &m);
    rm_program_free(&none);
    if (rc == RM_OK) rc = rm_chain_model_add_paging(&m, 1.0 / (ms_per_byte * units_per_ms), latency_ms * units_per_ms);
    rm_rotor_plan plan = {0};
    if (rc == RM_OK) rc = rm_rotor_solve_groups(&m, budget, 500, c.n, &plan);
    if (rc == RM_OK && !plan.feasible) rc = RM_ERR_BUDGET;
    if (rc == RM_OK) rc = rm_schedule_lower(g, &c, plan.ops, plan.n_ops, 1, out, err, errlen);
    if (rc == RM_OK) rm_rotor_paged_values(g, &c, plan.ops, plan.n_ops, values);
    rm_rotor_plan_free(&plan);
    rm_chain_model_free(&m);
    rm_chain_free(&c);
    return rc;
}
