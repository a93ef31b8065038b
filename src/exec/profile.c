/* profile.c: the arrays of a measured step (rm_profile, plan/plan.h): the
 * executor fills them, the session keeps a copy for the planner. */
#include "exec/exec.h"
#include <stdlib.h>
#include <string.h>

int rm_profile_alloc(rm_profile *p, const rm_graph *g) {
    p->stage_fwd = calloc((size_t)g->n_stages + 1, sizeof(double));
    p->stage_bwd = calloc((size_t)g->n_stages + 1, sizeof(double));
    p->node_fwd = calloc((size_t)g->n_nodes + 1, sizeof(double));
    p->node_rec = calloc((size_t)g->n_nodes + 1, sizeof(double));
    if (p->stage_fwd && p->stage_bwd && p->node_fwd && p->node_rec) return 1;
    rm_profile_free(p);
    return 0;
}

int rm_profile_copy(rm_profile *dst, const rm_profile *src, const rm_graph *g) {
    rm_profile_free(dst);
    if (!rm_profile_alloc(dst, g)) return 0;
    memcpy(dst->stage_fwd, src->stage_fwd, sizeof(double) * (size_t)g->n_stages);
    memcpy(dst->stage_bwd, src->stage_bwd, sizeof(double) * (size_t)g->n_stages);
    memcpy(dst->node_fwd, src->node_fwd, sizeof(double) * (size_t)g->n_nodes);
    memcpy(dst->node_rec, src->node_rec, sizeof(double) * (size_t)g->n_nodes);
    double rec = 0, fwd = 0;
    for (int n = 0; n < g->n_nodes; n++)
        if (src->node_rec[n] > 0) rec += src->node_rec[n], fwd += src->node_fwd[n];
    dst->cold = fwd > 0 ? rec / fwd : 0;
    return 1;
}

void rm_profile_free(rm_profile *p) {
    free(p->stage_fwd), free(p->stage_bwd), free(p->node_fwd), free(p->node_rec);
    memset(p, 0, sizeof *p);
}
