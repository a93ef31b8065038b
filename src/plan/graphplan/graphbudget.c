/* graphbudget.c: the general-graph planner (graphplan.c) applied to the
 * engine's graph: its model, the uniform strategies on any graph, and the
 * memory budget with the engine's guarantee (the lowered program's arena,
 * laid out by memplan, is what must fit). */
#include "plan/graphplan/graphplan.h"
#include "program/program.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t aligned_bytes(const rm_value *v) {
    size_t b = (size_t)v->numel * rm_dtype_size(v->dtype);
    return (int64_t)((b + RM_ALIGN - 1) / RM_ALIGN * RM_ALIGN);
}

rm_status rm_gmodel_from_graph(const rm_graph *g, const rm_profile *prof, int threads, rm_gmodel *m) {
    if (rm_gmodel_alloc(m, g->n_nodes) != RM_OK) return RM_ERR_NOMEM;
    for (int n = 0; n < g->n_nodes; n++) {
        const rm_node *nd = &g->nodes[n];
        const rm_op_def *op = rm_op_get(nd->op);
        m->fwd[n] = prof ? rm_profile_recompute_ms(prof, n) : op->flops ? op->flops(nd, g->vals, 0) : 0;
        m->bwd[n] = op->flops ? op->flops(nd, g->vals, 1) : 0;
        m->has_bwd[n] = (char)nd->needs_grad;
        m->ws_f[n] = (int64_t)rm_node_workspace(nd, g->vals, 0, threads);
        m->ws_b[n] = nd->needs_grad ? (int64_t)rm_node_workspace(nd, g->vals, 1, threads) : 0;
        const unsigned reads = rm_node_bwd_reads(nd, g->vals);
        for (int j = 0; j < nd->n_out; j++) {
            const rm_value *v = &g->vals[nd->out[j]];
            m->bytes[n] += aligned_bytes(v);
            if (v->grad >= 0 && nd->out[j] != g->loss) m->grad[n] += aligned_bytes(&g->vals[v->grad]);
            if (reads & RM_READS_OUT(j)) m->reads_out[n] = 1;
        }
        for (int i = 0; i < nd->n_in; i++) {
            int v = nd->in[i];
            if (v < 0 || g->vals[v].kind != RM_VALUE_ACT) continue;
            if (rm_gmodel_edge(m, g->vals[v].node, (reads & RM_READS_IN(i)) != 0) != RM_OK) {
                rm_gmodel_free(m);
                return RM_ERR_NOMEM;
            }
        }
        rm_gmodel_close_node(m, n);
    }
    return RM_OK;
}

int rm_graph_units(const rm_graph *g, const rm_gmodel *m, int *unit) {
    int nu = 0;
    for (int n = 0; n < g->n_nodes; n++) {
        if (n > 0 && g->nodes[n].stage != g->nodes[n - 1].stage) nu++;
        unit[n] = nu;
    }
    if (g->n_nodes == 0) return 0;
    if (nu > 0) return nu + 1;
    return rm_auto_blocks(m, (int)lround(sqrt((double)g->n_nodes)), unit);
}

rm_status rm_schedule_uniform_graph(const rm_graph *g, int k, int sqrt_k, rm_schedule *out, char *err,
                                    size_t errlen) {
    rm_gmodel m;
    memset(out, 0, sizeof *out);
    if (rm_gmodel_from_graph(g, NULL, 1, &m) != RM_OK) return RM_ERR_NOMEM;
    int n = m.n;
    int *unit = malloc(((size_t)n + 1) * sizeof *unit), *group = malloc(((size_t)n + 1) * sizeof *group);
    char *mode = malloc((size_t)n + 1);
    rm_status rc = unit && group && mode ? RM_OK : RM_ERR_NOMEM;
    int nu = rc == RM_OK ? rm_graph_units(g, &m, unit) : 0;
    if (sqrt_k) k = (int)lround(sqrt((double)nu));
    if (k <= 0) k = nu;
    if (rc == RM_OK && k > nu) {
        snprintf(err, errlen, "segments:K needs 1 <= K <= %d (the number of stages or blocks), got %d", nu, k);
        rc = RM_ERR_ARG;
    }
    for (int v = 0; v < n && rc == RM_OK; v++) group[v] = (int)((long)unit[v] * k / nu);
    /* keep what is read across groups (over its whole range) and the last group; recompute the rest */
    for (int v = 0; v < n && rc == RM_OK; v++) mode[v] = group[v] == k - 1 ? RM_GKEEP : RM_GEACH;
    for (int j = 0; j < n && rc == RM_OK; j++)
        for (int e = m.off[j]; e < m.off[j + 1]; e++)
            if (group[m.src[e]] != group[j]) mode[m.src[e]] = RM_GKEEP;
    if (rc == RM_OK) rc = rm_gplan_schedule(&m, mode, group, out);
    free(unit), free(group), free(mode);
    rm_gmodel_free(&m);
    return rc;
}

/* Plans under `budget` and checks the engine's arena; *arena gets it. */
static rm_status fit(const rm_graph *g, const rm_gmodel *m, const int *hint, int64_t budget, int threads,
                     rm_schedule *out, int64_t *arena, int *blocks, char *err, size_t errlen) {
    int64_t target = budget;
    for (int attempt = 0; attempt < 16 && target > 0; attempt++) {
        rm_gplan p;
        if (rm_gplan_solve(m, target, hint, NULL, NULL, &p) != RM_OK) return RM_ERR_NOMEM;
        if (!p.feasible) {
            rm_gplan_free(&p);
            return RM_ERR_BUDGET;
        }
        rm_schedule sch;
        rm_status rc = rm_gplan_schedule(m, p.mode, p.block, &sch);
        if (blocks) memcpy(blocks, p.block, sizeof *blocks * (size_t)m->n);
        rm_gplan_free(&p);
        if (rc != RM_OK) return rc;
        rm_program prog;
        rc = rm_program_build(g, &sch, threads, &prog, err, errlen);
        if (rc != RM_OK) {
            rm_schedule_free(&sch);
            return rc;
        }
        rm_memplan(&prog);
        *arena = (int64_t)prog.arena_bytes;
        rm_program_free(&prog);
        if (*arena <= budget) {
            *out = sch;
            return RM_OK;
        }
        rm_schedule_free(&sch);
        int64_t excess = *arena - budget;
        target -= excess > target / 100 ? excess : target / 100 + 1;
    }
    return RM_ERR_BUDGET;
}

/* "blocks: 3 found automatically (no stages declared): nodes 0-4, ..." */
static void describe_blocks(const rm_graph *g, const int *block, const int *hint, char *out, size_t len) {
    int n = g->n_nodes, nb = n ? block[n - 1] + 1 : 0, same = hint != NULL;
    for (int i = 0; i < n && same; i++) same = block[i] == hint[i];
    size_t at = (size_t)snprintf(out, len, "blocks: %d %s: nodes", nb,
                                 !hint ? "found automatically (no stages declared)"
                                 : same ? "(the declared stages)"
                                        : "(the declared stages were hints: merged or split)");
    for (int i = 0; i < n && at + 24 < len; i++) {
        if (i > 0 && block[i] == block[i - 1]) continue;
        int hi = i;
        while (hi + 1 < n && block[hi + 1] == block[i]) hi++;
        at += (size_t)snprintf(out + at, len - at, "%s %d-%d", i ? "," : "", i, hi);
    }
    if (at + 24 >= len && at < len) snprintf(out + at, len - at, " ...");
}

rm_status rm_schedule_graph_auto(const rm_graph *g, int64_t budget, int threads, const rm_profile *prof,
                                 rm_schedule *out, rm_auto_info *info, char *err, size_t errlen) {
    rm_gmodel m;
    if (rm_gmodel_from_graph(g, prof, threads, &m) != RM_OK) return RM_ERR_NOMEM;
    int *hint = malloc(((size_t)m.n + 1) * sizeof *hint);
    if (!hint) {
        rm_gmodel_free(&m);
        return RM_ERR_NOMEM;
    }
    int have_hint = g->n_stages > 1 && rm_graph_units(g, &m, hint) > 1;
    const int *h = have_hint ? hint : NULL;
    /* the least feasible budget, to half a percent, from the engine's arena */
    int64_t arena, lo = 0, hi = info->store_all;
    rm_schedule sch;
    rm_status rc = fit(g, &m, h, hi, threads, &sch, &arena, NULL, err, errlen);
    if (rc == RM_OK) {
        rm_schedule_free(&sch);
        while (hi - lo > hi / 200 + RM_ALIGN && rc == RM_OK) {
            int64_t mid = lo + (hi - lo) / 2;
            rc = fit(g, &m, h, mid, threads, &sch, &arena, NULL, err, errlen);
            if (rc == RM_OK) rm_schedule_free(&sch), hi = mid;
            else if (rc == RM_ERR_BUDGET) lo = mid, rc = RM_OK;
        }
        info->min_budget = hi;
    }
    int *blocks = malloc(((size_t)m.n + 1) * sizeof *blocks);
    if (!blocks) rc = RM_ERR_NOMEM;
    if (rc == RM_OK || rc == RM_ERR_BUDGET) rc = fit(g, &m, h, budget, threads, out, &arena, blocks, err, errlen);
    if (rc == RM_OK) {
        snprintf(info->chosen, sizeof info->chosen, "graph");
        describe_blocks(g, blocks, h, info->blocks, sizeof info->blocks);
    }
    free(blocks);
    free(hint);
    rm_gmodel_free(&m);
    return rc;
}
