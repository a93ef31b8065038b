/* report.c: what a session's plan keeps, what it recomputes, and what that
 * costs (rm_plan, rm_print_plan, rm_plan_notes). */
#include "exec/exec.h"
#include <stdlib.h>
#include <string.h>

void rm_plan(const rm_session *s, rm_plan_info *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    if (!s) return;
    const rm_graph *g = s->g;
    const rm_program *pr = s->train.n_instrs ? &s->train : &s->infer;
    p->strategy = s->opt.checkpoint;
    p->n_stages = g->n_stages;
    for (int i = 0; i < pr->n_instrs; i++) {
        const rm_instr *ins = &pr->instrs[i];
        const rm_node *nd = &g->nodes[ins->node];
        const rm_op_def *op = rm_op_get(nd->op);
        double f = op->flops ? op->flops(nd, g->vals, ins->kind == RM_INSTR_BACKWARD) : 0;
        if (ins->kind == RM_INSTR_FORWARD) p->flops_forward += f;
        else if (ins->kind == RM_INSTR_RECOMPUTE) p->flops_recompute += f;
        else p->flops_backward += f;
    }
    double base = p->flops_forward + p->flops_backward;
    p->predicted_overhead = base > 0 ? p->flops_recompute / base : 0;
    if (s->prof.node_fwd) {
        /* with a measured profile: each recomputation costs what the profile
         * measured for that node */
        double rec = rm_recompute_cost(g, pr, &s->prof), tot = 0;
        for (int st = 0; st < g->n_stages; st++) tot += s->prof.stage_fwd[st] + s->prof.stage_bwd[st];
        if (tot > 0) p->predicted_overhead = rec / tot;
    }
    p->budget_bytes = (size_t)s->budget_bytes;
    p->store_all_bytes = (size_t)s->store_all_bytes;
    p->min_budget_bytes = s->autoplan.min_budget > 0 ? (size_t)s->autoplan.min_budget : 0;
    p->ms_forward = s->ms_forward;
    p->ms_recompute = s->ms_recompute;
    p->ms_backward = s->ms_backward;
    p->measured_overhead = rm_step_overhead(s);
}

double rm_step_overhead(const rm_session *s) {
    double base = s ? s->ms_forward + s->ms_backward : 0;
    return base > 0 ? s->ms_recompute / base : 0;
}

const char *rm_plan_notes(const rm_session *s) { return s ? s->notes : ""; }

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

void rm_print_plan(const rm_session *s, FILE *f) {
    if (!s || !f) return;
    const rm_graph *g = s->g;
    const rm_program *p = s->train.n_instrs ? &s->train : &s->infer;
    int first_bwd = p->n_instrs;
    for (int i = 0; i < p->n_instrs; i++)
        if (p->instrs[i].kind == RM_INSTR_BACKWARD) {
            first_bwd = i;
            break;
        }
    /* per value: kept (its first buffer outlives the forward pass) and recompute count */
    char *kept = calloc((size_t)g->n_vals, 1);
    int *recomputed = calloc((size_t)g->n_vals, sizeof *recomputed);
    if (!kept || !recomputed) {
        free(kept);
        free(recomputed);
        return;
    }
    for (int b = 0; b < p->n_bufs; b++) {
        const rm_buffer *bf = &p->bufs[b];
        if (bf->value < 0 || g->vals[bf->value].kind != RM_VALUE_ACT) continue;
        rm_instr_kind k = p->instrs[bf->first].kind;
        if (k == RM_INSTR_FORWARD && bf->last >= first_bwd) kept[bf->value] = 1;
        if (k == RM_INSTR_RECOMPUTE) recomputed[bf->value]++;
    }
    fprintf(f, "plan: strategy %s%s%s%s, %d stages, activations %.2f MiB planned (arena %.2f MiB)\n",
            s->opt.checkpoint, s->autoplan.chosen[0] ? " (" : "", s->autoplan.chosen, s->autoplan.chosen[0] ? ")" : "",
            g->n_stages, mib(p->peak_live_bytes), mib(p->arena_bytes));
    if (s->autoplan.blocks[0]) fprintf(f, "%s\n", s->autoplan.blocks);
    fprintf(f, "%-12s %8s %12s %8s %12s\n", "stage", "kept", "kept MiB", "recomp", "recomp MiB");
    for (int st = 0; st < g->n_stages; st++) {
        int nk = 0, nr = 0;
        size_t bk = 0, br = 0;
        for (int v = 0; v < g->n_vals; v++) {
            if (g->vals[v].kind != RM_VALUE_ACT || g->vals[v].stage != st) continue;
            size_t bytes = (size_t)g->vals[v].numel * rm_dtype_size(g->vals[v].dtype);
            if (kept[v]) nk++, bk += bytes;
            if (recomputed[v]) nr++, br += bytes * (size_t)recomputed[v];
        }
        fprintf(f, "%-12s %8d %12.2f %8d %12.2f\n", g->stages[st].name, nk, mib(bk), nr, mib(br));
        for (int v = 0; v < g->n_vals; v++) {
            const rm_value *val = &g->vals[v];
            if (val->kind != RM_VALUE_ACT || val->stage != st || (!kept[v] && !recomputed[v])) continue;
            char shape[64] = "(";
            for (int d = 0; d < val->ndim; d++) {
                size_t len = strlen(shape);
                snprintf(shape + len, sizeof shape - len, "%s%lld", d ? "," : "", (long long)val->shape[d]);
            }
            strncat(shape, ")", sizeof shape - strlen(shape) - 1);
            if (kept[v]) fprintf(f, "    keep       %-36s %-18s %8.2f MiB\n", val->name, shape, mib((size_t)val->numel * rm_dtype_size(val->dtype)));
            if (recomputed[v])
                fprintf(f, "    recompute  %-36s %-18s %8.2f MiB  x%d\n", val->name, shape,
                        mib((size_t)val->numel * rm_dtype_size(val->dtype)), recomputed[v]);
        }
    }
    free(kept);
    free(recomputed);
}

void rm_memory(const rm_session *s, rm_memory_info *m) {
    if (!m) return;
    memset(m, 0, sizeof *m);
    if (!s) return;
    const rm_program *p = s->train.n_instrs ? &s->train : &s->infer;
    m->activation_bytes_planned = p->peak_live_bytes;
    m->activation_bytes_measured = s->measured_peak;
    m->activation_arena_bytes = s->arena_bytes;
    m->param_bytes = s->g->param_floats * sizeof(float);
    /* accumulation's second buffer; fused: no flat buffer, the gradients are arena buffers */
    m->grad_bytes = s->opt.fuse_optimizer ? 0 : s->g->train_floats * sizeof(float) * (s->grads_micro ? 2 : 1);
    m->grad_arena_bytes = p->fused ? p->peak_grad_bytes : 0;
    m->trainable_bytes = s->g->train_floats * sizeof(float);
    m->n_instructions = p->n_instrs;
}
