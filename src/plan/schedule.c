/* schedule.c: the primitives every strategy builds its schedule from. A
 * schedule is an ordered list of items: run node n forward, run it again
 * (recompute), run its backward. Which values are kept and which are freed
 * follows from the order alone (program.c): a value that is recomputed
 * before its backward has its first copy freed after its last forward
 * reader. A strategy never deals with memory directly.
 *
 * This file is the leaf of plan/: it uses the graph and the op definitions,
 * and nothing else of plan/. The strategies (strategy.c, lower.c,
 * revolve.c, planner.c) are made of these calls. */
#include "plan/plan.h"
#include <stdlib.h>
#include <string.h>

rm_status rm_schedule_push(rm_schedule *s, rm_instr_kind k, int node) {
    if (s->n == s->cap) {
        int nc = s->cap ? s->cap * 2 : 256;
        void *p = realloc(s->items, (size_t)nc * sizeof *s->items);
        if (!p) return RM_ERR_NOMEM;
        s->items = p;
        s->cap = nc;
    }
    s->items[s->n].kind = k;
    s->items[s->n].node = node;
    s->n++;
    return RM_OK;
}

void rm_schedule_free(rm_schedule *s) {
    free(s->items);
    memset(s, 0, sizeof *s);
}

rm_status rm_schedule_forward(int lo, int hi, rm_schedule *out) {
    for (int n = lo; n <= hi; n++)
        if (rm_schedule_push(out, RM_INSTR_FORWARD, n) != RM_OK) return RM_ERR_NOMEM;
    return RM_OK;
}

rm_status rm_schedule_backward(const rm_graph *g, int lo, int hi, rm_schedule *out) {
    for (int n = hi; n >= lo; n--)
        if (g->nodes[n].needs_grad && rm_schedule_push(out, RM_INSTR_BACKWARD, n) != RM_OK) return RM_ERR_NOMEM;
    return RM_OK;
}

void rm_cheap_mask(const rm_graph *g, char *want) {
    for (int n = 0; n < g->n_nodes; n++) want[n] = (char)rm_op_get(g->nodes[n].op)->cheap;
}

/* Marks the producer of v if it lies in [lo, hi] and is wanted. */
static void need_value(const rm_graph *g, int v, int lo, int hi, const char *want, char *need) {
    if (v < 0 || g->vals[v].kind != RM_VALUE_ACT) return;
    int p = g->vals[v].node;
    if (p >= lo && p <= hi && want[p]) need[p] = 1;
}

rm_status rm_schedule_recompute(const rm_graph *g, int lo, int hi, const char *want, rm_val also, int for_backward,
                                rm_schedule *out) {
    return rm_schedule_recompute_set(g, lo, hi, want, &also, also >= 0, for_backward, out);
}

rm_status rm_schedule_recompute_set(const rm_graph *g, int lo, int hi, const char *want, const rm_val *also,
                                    int n_also, int for_backward, rm_schedule *out) {
    char *need = calloc((size_t)g->n_nodes, 1);
    if (!need) return RM_ERR_NOMEM;
    /* what the backwards of [lo, hi] read ... */
    for (int n = lo; n <= hi && for_backward; n++) {
        const rm_node *nd = &g->nodes[n];
        if (!nd->needs_grad) continue;
        unsigned reads = rm_node_bwd_reads(nd, g->vals);
        for (int i = 0; i < nd->n_in; i++)
            if (reads & RM_READS_IN(i)) need_value(g, nd->in[i], lo, hi, want, need);
        for (int j = 0; j < nd->n_out; j++)
            if (reads & RM_READS_OUT(j)) need_value(g, nd->out[j], lo, hi, want, need);
    }
    for (int k = 0; k < n_also; k++) need_value(g, also[k], lo, hi, want, need);
    /* ... and, to rebuild those, what their recomputations read */
    for (int n = hi; n >= lo; n--) {
        if (!need[n]) continue;
        const rm_node *nd = &g->nodes[n];
        for (int i = 0; i < nd->n_in; i++) need_value(g, nd->in[i], lo, hi, want, need);
    }
    rm_status rc = RM_OK;
    for (int n = lo; n <= hi && rc == RM_OK; n++)
        if (need[n]) rc = rm_schedule_push(out, RM_INSTR_RECOMPUTE, n);
    free(need);
    return rc;
}

rm_status rm_schedule_grouped(const rm_graph *g, const int *group_first, const int *group_last, int n_groups,
                              const char *want, rm_schedule *out) {
    if (rm_schedule_forward(0, g->n_nodes - 1, out) != RM_OK) return RM_ERR_NOMEM;
    for (int k = n_groups - 1; k >= 0; k--) {
        if (rm_schedule_recompute(g, group_first[k], group_last[k], want, -1, 1, out) != RM_OK) return RM_ERR_NOMEM;
        if (rm_schedule_backward(g, group_first[k], group_last[k], out) != RM_OK) return RM_ERR_NOMEM;
    }
    return RM_OK;
}
