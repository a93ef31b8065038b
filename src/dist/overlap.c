/* overlap.c: the gradients' allreduce overlapped with the backward pass.
 *
 * A parameter's gradient is final after the last backward instruction
 * that adds into it: for a stage's own weights, the end of that stage's
 * backward; for the GPT's tied embedding, the backward of the embedding
 * stage, the last one. The train program is fixed at compile time, so that
 * instruction is known in advance: the program's param_final (program/program.c,
 * where a fused optimizer finds it too). During a step,
 * after each instruction the executor calls rm_dist_overlap_post, which
 * starts one MPI_Iallreduce per bucket of gradients that just became final
 * (adjacent parameters merged up to BUCKET_FLOATS) and lets MPI progress
 * the ones in flight (MPI_Testall): the rest of the backward, recomputation
 * included, runs while they travel. rm_step then waits for what is left.
 * Each bucket is summed as the blocking allreduce sums it (for 2 ranks,
 * g_0 + g_1), so the result is bit-identical; only the timing changes. */
#include "dist/dist.h"
#ifdef REMAT_MPI
#include <limits.h>
#include <math.h>

/* buckets of RM_DIST_CHUNK_FLOATS (4 MiB), at most IN_FLIGHT of them
 * travelling (each holds MPI scratch of about its size: the process limit
 * leaves RM_DIST_SCRATCH_BYTES for it); padding between parameters is zero */
enum { BUCKET_FLOATS = RM_DIST_CHUNK_FLOATS, IN_FLIGHT = RM_DIST_IN_FLIGHT, PAD_FLOATS = 64 };

/* When parameter i's gradient is final: (instruction, offset), never-written ones last. */
static int before(const rm_session *s, int i, int j) {
    const rm_dist *d = s->dist;
    const rm_graph *g = s->g;
    int li = d->last[i] < 0 ? INT_MAX : d->last[i], lj = d->last[j] < 0 ? INT_MAX : d->last[j];
    if (li != lj) return li < lj;
    return g->vals[g->params[i]].param_off < g->vals[g->params[j]].param_off;
}

int rm_dist_overlap_plan(rm_session *s) {
    rm_dist *d = s->dist;
    const rm_graph *g = s->g;
    const rm_program *p = &s->train;
    if (p->n_params != g->n_params) return 0; /* no train program */
    int n = 0; /* the trainable parameters: state and frozen ones have no gradient */
    for (int i = 0; i < g->n_params; i++) {
        d->last[i] = p->param_final[i];
        if (g->vals[g->params[i]].trainable) d->order[n++] = i;
    }
    for (int i = 1; i < n; i++) /* insertion sort: a few hundred parameters, once */
        for (int j = i; j > 0 && before(s, d->order[j], d->order[j - 1]); j--) {
            int t = d->order[j];
            d->order[j] = d->order[j - 1], d->order[j - 1] = t;
        }
    d->n_order = n;
    return 1;
}

/* Starts the buckets final at instruction `upto` (INT_MAX: all the rest). */
void rm_dist_overlap_post(rm_session *s, int upto) {
    rm_dist *d = s->dist;
    const rm_graph *g = s->g;
    while (d->next < d->n_order) {
        int pi = d->order[d->next];
        if ((d->last[pi] < 0 ? INT_MAX : d->last[pi]) > upto) break;
        const rm_value *v = &g->vals[g->params[pi]];
        size_t lo = v->param_off, hi = lo + (size_t)v->numel;
        for (d->next++; d->next < d->n_order; d->next++) { /* merge the next ones if final and adjacent */
            int pj = d->order[d->next];
            const rm_value *w = &g->vals[g->params[pj]];
            if ((d->last[pj] < 0 ? INT_MAX : d->last[pj]) > upto || w->param_off < hi ||
                w->param_off - hi > PAD_FLOATS || w->param_off + (size_t)w->numel - lo > BUCKET_FLOATS)
                break;
            hi = w->param_off + (size_t)w->numel;
        }
        /* a NaN or inf anywhere makes the sum non-finite: this rank's gradients, before the sum */
        double sum = 0;
        const float *gr = s->grads + lo;
        const int64_t n = (int64_t)(hi - lo);
        #pragma omp parallel for reduction(+ : sum) schedule(static)
        for (int64_t i = 0; i < n; i++) sum += gr[i];
        if (!isfinite(sum)) d->bad_grads = 1;
        for (size_t off = lo; off < hi; off += BUCKET_FLOATS) { /* one parameter may exceed a bucket */
            size_t k = hi - off < BUCKET_FLOATS ? hi - off : BUCKET_FLOATS;
            while (d->n_req - d->waited >= IN_FLIGHT) MPI_Wait(&d->reqs[d->waited++], MPI_STATUS_IGNORE);
            MPI_Iallreduce(MPI_IN_PLACE, s->grads + off, (int)k, MPI_FLOAT, MPI_SUM, d->comm, &d->reqs[d->n_req++]);
        }
    }
    int done;
    if (d->n_req) MPI_Testall(d->n_req, d->reqs, &done, MPI_STATUSES_IGNORE); /* progress */
}
#endif
