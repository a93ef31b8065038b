/* dist/dist.h: data-parallel training over an MPI communicator (internal
 * part; the public calls are in include/remat.h, "data parallel", and
 * include/remat_mpi.h). Without REMAT_MPI the calls exist and refuse. */
#ifndef REMAT_DIST_H
#define REMAT_DIST_H

#include "exec/exec.h"
#ifdef REMAT_MPI
#include <mpi.h>
#endif

/* A session's place among the ranks. One allocation: the struct and its
 * per-rank shard arrays, so rm_session_free frees it with free(). */
typedef struct rm_dist {
    int rank, size;
    int shard;            /* ZeRO-1: each rank updates [lo, hi) of the flat parameters */
    int64_t rows;         /* the session's batch rows b: rank r holds global rows [r b, r b + b) */
    size_t lo, hi;        /* this rank's shard of the flat parameter buffer, in floats */
    int *counts, *displs; /* [size] each: every rank's shard, for reduce-scatter / all-gather */
    int *chunk_counts;    /* [size]: each rank's part of one chunk, for a chunked reduce-scatter */
    int overlap;          /* the gradients' allreduce starts during the backward */
    /* overlap: the parameters by the train instruction after which their
     * gradient is final (last[] of each, -1: never written, at the end),
     * and the requests of the buckets started in this step */
    int n_order, next, n_req, waited, bad_grads; /* waited: requests [0, waited) are done */
    int *order, *last;
    size_t *bucket_lo, *bucket_hi;
    double ms_wait;       /* the last step's wait for its gradients after the backward */
#ifdef REMAT_MPI
    MPI_Comm comm;
    MPI_Request *reqs;    /* overlap: the buckets in flight */
#endif
} rm_dist;

/* The most floats one collective moves: Open MPI's reductions take scratch
 * memory of about the message size, so every sum and bucket is cut to
 * 4 MiB, and the overlap keeps at most RM_DIST_IN_FLIGHT buckets
 * travelling: RM_DIST_SCRATCH_BYTES (remat.h) is one more than that. */
#define RM_DIST_CHUNK_FLOATS ((size_t)1 << 20)
#define RM_DIST_IN_FLIGHT 2
_Static_assert(RM_DIST_SCRATCH_BYTES == (RM_DIST_IN_FLIGHT + 1) * (int64_t)RM_DIST_CHUNK_FLOATS * 4,
               "RM_DIST_SCRATCH_BYTES is the overlap's chunks in flight, and one more");

/* 1 when s runs with more than one rank. */
static inline int rm_dist_on(const rm_session *s) { return s && s->dist && s->dist->size > 1; }
/* The sum over ranks of x (doubles, in place); nothing with one rank. */
void rm_dist_sum(const rm_session *s, double *x, int n);
/* The sum over ranks of n floats (in place), its time added to ms_wait:
 * a fused update's gradient; nothing with one rank. */
void rm_dist_sum_floats(rm_session *s, float *x, size_t n);
/* The parameters' shards of every rank copied to all (after a sharded update). */
void rm_dist_allgather_params(rm_session *s);
/* The moments' shards of every rank gathered into full-size buffers on all. */
void rm_dist_allgather(const rm_session *s, const float *shard, float *full);
/* overlap.c: when each parameter's gradient is final in the train program
 * (0: no train program), and the buckets final at instruction `upto` started
 * (INT_MAX: all the rest). */
int rm_dist_overlap_plan(rm_session *s);
void rm_dist_overlap_post(rm_session *s, int upto);

#endif
