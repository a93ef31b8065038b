/* comm.c: the collectives the optimizer and the data loop need (sums,
 * all-gathers over the session's ranks) and the rank queries: a leaf file,
 * using nothing else of src/, so optim.c and loop.c can call it without
 * depending on the step (dist.c). Without REMAT_MPI they do nothing. */
#include "dist/dist.h"
#include <time.h>

int rm_has_mpi(void) {
#ifdef REMAT_MPI
    return 1;
#else
    return 0;
#endif
}

int rm_session_rank(const rm_session *s, int *size) {
    int r = s && s->dist ? s->dist->rank : 0;
    if (size) *size = s && s->dist ? s->dist->size : 1;
    return r;
}

double rm_step_comm_ms(const rm_session *s) { return s && s->dist ? s->dist->ms_wait : 0.0; }

#ifndef REMAT_MPI

void rm_dist_sum(const rm_session *s, double *x, int n) { (void)s, (void)x, (void)n; }
void rm_dist_sum_floats(rm_session *s, float *x, size_t n) { (void)s, (void)x, (void)n; }
void rm_dist_allgather_params(rm_session *s) { (void)s; }
void rm_dist_allgather(const rm_session *s, const float *shard, float *full) { (void)s, (void)shard, (void)full; }

#else

void rm_dist_sum(const rm_session *s, double *x, int n) {
    if (rm_dist_on(s)) MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, s->dist->comm);
}

void rm_dist_sum_floats(rm_session *s, float *x, size_t n) {
    if (!rm_dist_on(s)) return;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (size_t off = 0; off < n; off += RM_DIST_CHUNK_FLOATS) {
        size_t k = n - off < RM_DIST_CHUNK_FLOATS ? n - off : RM_DIST_CHUNK_FLOATS;
        MPI_Allreduce(MPI_IN_PLACE, x + off, (int)k, MPI_FLOAT, MPI_SUM, s->dist->comm);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    s->dist->ms_wait += (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
}

void rm_dist_allgather_params(rm_session *s) {
    if (!rm_dist_on(s)) return;
    rm_dist *d = s->dist;
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, s->params, d->counts, d->displs, MPI_FLOAT, d->comm);
}

void rm_dist_allgather(const rm_session *s, const float *shard, float *full) {
    if (!rm_dist_on(s)) return;
    rm_dist *d = s->dist;
    MPI_Allgatherv(shard, d->counts[d->rank], MPI_FLOAT, full, d->counts, d->displs, MPI_FLOAT, d->comm);
}

#endif
