/* dist.c: data-parallel training on MPI (docs/SCALING.md).
 *
 * Each of P ranks holds the whole model and b rows of a global batch of
 * P*b rows: rank r holds global rows [r b, r b + b). A step on rank r is
 * the micro-batch step of those rows with the loss gradient scaled by 1/P
 * (rm_step_micro), so the sum over ranks of the gradients is the gradient
 * of the global batch's mean loss:
 *
 *   dL/dw = sum_r (1/P) dL_r/dw,   L_r the mean loss over rank r's rows.
 *
 * That sum is one MPI_Allreduce of the flat gradient buffer (or, with a
 * sharded optimizer, one MPI_Reduce_scatter: rank r only needs the sum on
 * its shard). Dropout masks are keyed by the global row, so a rank draws
 * the masks the single process would draw for the same rows. Before the
 * gradients move, the ranks agree on the step's status with one small
 * allreduce: a rank whose step failed or whose loss is not finite makes
 * every rank return the same error, naming it; nobody waits forever. */
#include "dist/dist.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <limits.h>

/* The batch rows b of the session: the first dimension of its first
 * non-constant input (tokens or features). */
static int64_t batch_rows(const rm_session *s) {
    const rm_graph *g = s->g;
    for (int v = 0; v < g->n_vals; v++)
        if (g->vals[v].kind == RM_VALUE_INPUT && !rm_value_constant(&g->vals[v]) && g->vals[v].ndim >= 1)
            return g->vals[v].shape[0];
    return 0;
}

/* rm_step_accumulate's arguments; RM_OK or the session's error. */
static rm_status accumulate_args(rm_session *s, int k, rm_fill_fn fill) {
    rm_status rc = rm_session_runnable(s, "rm_step_accumulate");
    if (rc != RM_OK) return rc;
    if (k < 1 || (!fill && k > 1))
        return rm_session_fail(s, RM_ERR_ARG, "rm_step_accumulate: k is %d and fill %s: k must be >= 1, and fill "
                               "may be NULL only for k = 1", k, fill ? "given" : "NULL");
    if (k > 1 && !s->opt.accumulate)
        return rm_session_fail(s, RM_ERR_STATE, "rm_step_accumulate: %d micro-batches need the session compiled "
                               "with rm_options.accumulate (a second gradient buffer)", k);
    return RM_OK;
}

/* Micro-batch j's inputs from the caller's fill (none: as they are). */
static rm_status fill_one(rm_session *s, rm_fill_fn fill, void *user, int j, int64_t row) {
    rm_status rc = fill ? fill(user, s, j, row) : RM_OK;
    if (rc == RM_OK) return RM_OK;
    return rm_session_fail(s, rc, "rm_step_accumulate: filling micro-batch %d (row %lld) failed: %s", j,
                           (long long)row, rm_status_name(rc));
}

/* This rank's k micro-batches from global row row0, each scaled by `scale`;
 * *mean: their mean loss (NaN on failure). */
static rm_status local_micro_batches(rm_session *s, uint64_t step, int k, int64_t row0, float scale, rm_fill_fn fill,
                                     void *user, float *mean) {
    const int64_t b = batch_rows(s);
    double sum = 0;
    *mean = NAN;
    for (int j = 0; j < k; j++) {
        const rm_micro m = {row0 + j * b, scale, j > 0};
        rm_status rc = fill_one(s, fill, user, j, m.row_offset);
        if (rc != RM_OK) return rc;
        float l;
        if ((rc = rm_step_micro(s, step, &m, &l)) != RM_OK) return rc;
        sum += l;
    }
    *mean = (float)(sum / k);
    return RM_OK;
}

/* rm_step_accumulate in a process of its own. */
static rm_status accumulate_alone(rm_session *s, uint64_t step, int k, rm_fill_fn fill, void *user, float *loss) {
    rm_status rc = accumulate_args(s, k, fill);
    float mean = NAN;
    if (rc == RM_OK) rc = local_micro_batches(s, step, k, 0, 1.0f / (float)k, fill, user, &mean);
    if (rc == RM_OK && loss) *loss = mean;
    return rc;
}

#ifndef REMAT_MPI

rm_status rm_step_accumulate(rm_session *s, uint64_t step, int k, rm_fill_fn fill, void *user, float *loss) {
    return s ? accumulate_alone(s, step, k, fill, user, loss) : RM_ERR_ARG;
}

rm_status rm_session_set_comm_f(rm_session *s, int comm, int flags) {
    (void)comm, (void)flags;
    if (!s) return RM_ERR_ARG;
    return rm_session_fail(s, RM_ERR_STATE, "rm_session_set_comm: this libremat was built without MPI "
                           "(rebuild with `make MPI=1`, which needs mpicc from libopenmpi-dev)");
}
rm_status rm_step(rm_session *s, uint64_t step, float *loss) { return rm_step_micro(s, step, NULL, loss); }

#else


/* Shard r of n floats: near-equal contiguous ranges. */
static void split(rm_dist *d, size_t n) {
    for (int r = 0; r < d->size; r++) {
        size_t lo = n * (size_t)r / (size_t)d->size, hi = n * (size_t)(r + 1) / (size_t)d->size;
        d->displs[r] = (int)lo;
        d->counts[r] = (int)(hi - lo);
    }
    d->lo = (size_t)d->displs[d->rank];
    d->hi = d->lo + (size_t)d->counts[d->rank];
}

/* Collective: every rank must call it with the same model. */
/* The communicator of Fortran handle f and its rank and size, or
 * MPI_COMM_NULL when f names none. MPI's default error handler would abort
 * the process on an invalid handle (an error raised on MPI_COMM_WORLD), so
 * the check runs with errors returned. */
static MPI_Comm comm_of(int f, int *rank, int *size) {
    MPI_Errhandler old;
    MPI_Comm_get_errhandler(MPI_COMM_WORLD, &old);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm comm = MPI_Comm_f2c((MPI_Fint)f);
    int ok = comm != MPI_COMM_NULL && MPI_Comm_rank(comm, rank) == MPI_SUCCESS &&
             MPI_Comm_size(comm, size) == MPI_SUCCESS;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, old);
    MPI_Errhandler_free(&old);
    return ok ? comm : MPI_COMM_NULL;
}

rm_status rm_session_set_comm_f(rm_session *s, int fcomm, int flags) {
    if (!s) return RM_ERR_ARG;
    rm_status rc = rm_session_runnable(s, "rm_session_set_comm");
    if (rc != RM_OK) return rc;
    if (s->dist) return rm_session_fail(s, RM_ERR_STATE, "rm_session_set_comm: the session already has a communicator");
    if (s->refs) /* its moments were laid out for one process: a shard would update the wrong floats */
        return rm_session_fail(s, RM_ERR_STATE, "rm_session_set_comm: the session has an optimizer already: give "
                               "the communicator first, after rm_compile and before rm_optim_new");
    if (flags & ~(RM_DIST_SHARD | RM_DIST_BLOCKING))
        return rm_session_fail(s, RM_ERR_ARG, "rm_session_set_comm: unknown flags 0x%x (RM_DIST_SHARD and "
                               "RM_DIST_BLOCKING are the flags)", (unsigned)flags);
    int init = 0;
    MPI_Initialized(&init);
    if (!init) return rm_session_fail(s, RM_ERR_STATE, "rm_session_set_comm: MPI is not initialised (MPI_Init first)");
    int rank, size;
    MPI_Comm comm = comm_of(fcomm, &rank, &size);
    if (comm == MPI_COMM_NULL)
        return rm_session_fail(s, RM_ERR_ARG, "rm_session_set_comm: %d is not the handle of a communicator (pass "
                               "MPI_Comm_c2f(comm), or use remat_mpi.h's rm_session_set_comm)", fcomm);
    if (s->opt.fuse_optimizer && size > 1 && (flags & RM_DIST_SHARD)) /* the same options on every rank: all refuse */
        return rm_session_fail(s, RM_ERR_ARG, "rm_session_set_comm: a fused optimizer (rm_options.fuse_optimizer) "
                               "updates every parameter on every rank, so it keeps no shard: drop RM_DIST_SHARD "
                               "(--shard-optimizer) or fuse_optimizer");
    /* the gradients, their shards and the optimizer cover the trainable parameters */
    size_t n = s->g->train_floats, all = s->g->param_floats;
    /* the ranks must hold the same model and batch rows: compare min and max */
    long long mine[3] = {(long long)all, (long long)batch_rows(s), (long long)n}, lo[3], hi[3];
    MPI_Allreduce(mine, lo, 3, MPI_LONG_LONG, MPI_MIN, comm);
    MPI_Allreduce(mine, hi, 3, MPI_LONG_LONG, MPI_MAX, comm);
    if (lo[0] != hi[0] || lo[1] != hi[1] || lo[2] != hi[2])
        return rm_session_fail(s, RM_ERR_ARG, "rm_session_set_comm: the ranks' models differ (parameters %lld..%lld "
                               "floats, trainable %lld..%lld, batch rows %lld..%lld): every rank must build (and "
                               "freeze) the same model", lo[0], hi[0], lo[2], hi[2], lo[1], hi[1]);
    if (n / (size_t)size > (size_t)INT32_MAX)
        return rm_session_fail(s, RM_ERR_ARG, "rm_session_set_comm: %zu parameter floats over %d ranks do not fit "
                               "MPI's int counts", n, size);
    /* one block: the struct, the overlap's requests (one per parameter, and
     * one more per bucket a parameter spans), then the int arrays */
    const int np = s->g->n_params;
    const size_t n_reqs = (size_t)np + n / RM_DIST_CHUNK_FLOATS + 1;
    rm_dist *d = calloc(1, sizeof *d + n_reqs * sizeof(MPI_Request) + (3 * (size_t)size + 2 * (size_t)np) * sizeof(int));
    if (!d) return rm_session_fail(s, RM_ERR_NOMEM, "out of memory for the communicator's state");
    d->rank = rank, d->size = size, d->comm = comm, d->shard = (flags & RM_DIST_SHARD) != 0;
    /* fused: each gradient is summed at its update, inside the backward */
    d->overlap = !d->shard && !(flags & RM_DIST_BLOCKING) && !s->opt.fuse_optimizer;
    d->rows = lo[1];
    d->reqs = (MPI_Request *)(d + 1);
    d->counts = (int *)(d->reqs + n_reqs);
    d->displs = d->counts + size;
    d->chunk_counts = d->displs + size;
    d->order = d->chunk_counts + size;
    d->last = d->order + np;
    split(d, n);
    s->dist = d;
    if (d->overlap && !rm_dist_overlap_plan(s)) d->overlap = 0; /* no train program: blocking still works */
    /* every rank starts from rank 0's parameters (the same seed gives the
     * same ones; a loaded file too); those in a scratch file (issue 20) stay
     * there: broadcasting their untouched part of the flat buffer would
     * only make it resident. Each rank plans its paging from its own disk
     * and timings, so a parameter is skipped on all ranks when any pages
     * it: the broadcasts must match one for one. */
    unsigned char *paged = calloc((size_t)(np ? np : 1), 1);
    if (!paged) {
        s->dist = NULL, free(d);
        return rm_session_fail(s, RM_ERR_NOMEM, "out of memory for the communicator's state");
    }
    for (int pi = 0; pi < np; pi++) paged[pi] = (unsigned char)(rm_session_state_paged(s, pi, 0) != 0);
    if (np) MPI_Allreduce(MPI_IN_PLACE, paged, np, MPI_UNSIGNED_CHAR, MPI_MAX, comm);
    for (int pi = 0; pi < np; pi++) {
        const rm_value *v = &s->g->vals[s->g->params[pi]];
        if (paged[pi]) continue;
        /* bytes: a frozen parameter may be kept in 2 bytes (rm_param_store) */
        unsigned char *w = (unsigned char *)(s->params + v->param_off);
        for (size_t off = 0, all_b = (size_t)v->numel * rm_dtype_size(v->store); off < all_b; off += 1u << 30) {
            size_t k = all_b - off < (1u << 30) ? all_b - off : (1u << 30);
            MPI_Bcast(w + off, (int)k, MPI_BYTE, 0, comm);
        }
    }
    free(paged);
    return RM_OK;
}

/* The ranks agree on the step: the lowest failing rank (size if none)
 * sends its status and message to all. Returns RM_OK when all succeeded. */
static rm_status agree(rm_session *s, uint64_t step, rm_status rc, float loss, int grads_bad) {
    rm_dist *d = s->dist;
    int bad = rc != RM_OK || !isfinite(loss) || grads_bad ? d->rank : d->size, first;
    MPI_Allreduce(&bad, &first, 1, MPI_INT, MPI_MIN, d->comm);
    if (first == d->size) return RM_OK;
    struct { int status; char msg[320]; } why;
    memset(&why, 0, sizeof why);
    if (d->rank == first) {
        why.status = rc != RM_OK ? (int)rc : (int)RM_ERR_ARG;
        if (rc != RM_OK) snprintf(why.msg, sizeof why.msg, "%s", s->errmsg);
        else snprintf(why.msg, sizeof why.msg, "the %s at step %llu: training diverged (try a lower learning rate)",
                      isfinite(loss) ? "gradients are not finite" : "loss is not finite", (unsigned long long)step);
    }
    MPI_Bcast(&why, (int)sizeof why, MPI_BYTE, first, d->comm);
    return rm_session_fail(s, (rm_status)why.status, "rank %d of %d: %s", first, d->size, why.msg);
}

/* The gradients summed over ranks: all of them, or this rank's shard. */
static void reduce_grads(rm_session *s) {
    rm_dist *d = s->dist;
    if (!d->shard) {
        rm_dist_sum_floats(s, s->grads, s->g->train_floats);
        return;
    }
    /* chunk [a, b) at a time; each rank receives its shard's part of it */
    const size_t n = s->g->train_floats;
    for (size_t a = 0; a < n; a += RM_DIST_CHUNK_FLOATS) {
        const size_t b = n - a < RM_DIST_CHUNK_FLOATS ? n : a + RM_DIST_CHUNK_FLOATS;
        for (int r = 0; r < d->size; r++) {
            size_t lo = (size_t)d->displs[r], hi = lo + (size_t)d->counts[r];
            lo = lo > a ? lo : a, hi = hi < b ? hi : b;
            d->chunk_counts[r] = hi > lo ? (int)(hi - lo) : 0;
        }
        /* in place, this rank's part lands at the chunk's start: move it
         * where it belongs (inside the chunk, which is summed already) */
        MPI_Reduce_scatter(MPI_IN_PLACE, s->grads + a, d->chunk_counts, MPI_FLOAT, MPI_SUM, d->comm);
        const size_t mine = (size_t)d->chunk_counts[d->rank];
        if (mine) memmove(s->grads + (d->lo > a ? d->lo : a), s->grads + a, mine * sizeof(float));
    }
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* The executor's hook: the buckets final after instruction i start now. */
static void after_instr(rm_session *s, int i) { rm_dist_overlap_post(s, i); }

/* Whether this rank's gradients hold a NaN or inf: one pass (finite floats
 * cannot overflow a double sum here). */
static int grads_bad(const rm_session *s) {
    double sum = 0;
    const float *g = s->grads;
    const int64_t n = (int64_t)s->g->train_floats;
    #pragma omp parallel for reduction(+ : sum) schedule(static)
    for (int64_t i = 0; i < n; i++) sum += g[i];
    return !isfinite(sum);
}

static rm_status reduce_after(rm_session *s, uint64_t step, rm_status rc, float l, float *loss);
static rm_status mean_loss(rm_session *s, float l, float *loss);

/* A fused step of all ranks: the backward sums each gradient before its
 * update, so no rank may stop before it alone: they agree first on `pre`
 * (this rank's fill) and its inputs; the run itself goes to its end. */
static rm_status fused_step(rm_session *s, uint64_t step, rm_status pre, const rm_micro *m, float *loss) {
    if (pre == RM_OK) pre = rm_session_check_inputs(s, "rm_step");
    if ((pre = agree(s, step, pre, 0.0f, 0)) != RM_OK) return pre;
    float l = NAN;
    rm_status rc = rm_step_micro(s, step, m, &l);
    /* summed and applied already; the norm was checked on the sums */
    if ((rc = agree(s, step, rc, l, 0)) != RM_OK) return rc;
    return mean_loss(s, l, loss);
}

rm_status rm_step(rm_session *s, uint64_t step, float *loss) {
    if (!rm_dist_on(s)) return rm_step_micro(s, step, NULL, loss);
    rm_dist *d = s->dist;
    const rm_micro m = {(int64_t)d->rank * d->rows, 1.0f / (float)d->size, 0};
    float l = NAN;
    d->next = d->n_req = d->waited = d->bad_grads = 0;
    d->ms_wait = 0;
    if (s->train.fused) return fused_step(s, step, RM_OK, &m, loss);
    s->after_instr = d->overlap ? after_instr : NULL;
    rm_status rc = rm_step_micro(s, step, &m, &l);
    s->after_instr = NULL;
    if (d->overlap) {
        /* every rank starts every bucket, in the same order, even after a
         * failure, so no collective is left unmatched; then agree */
        rm_dist_overlap_post(s, INT_MAX);
        double t0 = now_ms();
        MPI_Waitall(d->n_req, d->reqs, MPI_STATUSES_IGNORE);
        d->ms_wait = now_ms() - t0;
        if ((rc = agree(s, step, rc, l, d->bad_grads)) != RM_OK) return rc;
        return mean_loss(s, l, loss);
    }
    return reduce_after(s, step, rc, l, loss);
}

/* After this rank's backward(s): agree, sum the gradients, mean loss. */
static rm_status reduce_after(rm_session *s, uint64_t step, rm_status rc, float l, float *loss) {
    rm_dist *d = s->dist;
    if ((rc = agree(s, step, rc, l, rc == RM_OK && grads_bad(s))) != RM_OK) return rc;
    double t0 = now_ms();
    reduce_grads(s);
    d->ms_wait = now_ms() - t0;
    return mean_loss(s, l, loss);
}

/* *loss: the mean over the ranks of each rank's loss l. */
static rm_status mean_loss(rm_session *s, float l, float *loss) {
    double mean = l;
    MPI_Allreduce(MPI_IN_PLACE, &mean, 1, MPI_DOUBLE, MPI_SUM, s->dist->comm);
    if (loss) *loss = (float)(mean / s->dist->size);
    return RM_OK;
}

/* Every rank reaches the collectives, even after its own failure (or bad
 * arguments, which every rank has alike). */
rm_status rm_step_accumulate(rm_session *s, uint64_t step, int k, rm_fill_fn fill, void *user, float *loss) {
    if (!s) return RM_ERR_ARG;
    if (!rm_dist_on(s)) return accumulate_alone(s, step, k, fill, user, loss);
    rm_status rc = accumulate_args(s, k, fill);
    if (rc != RM_OK) return rc;
    rm_dist *d = s->dist;
    /* rank r's rows start at r k b: with another k on some rank, rows would
     * overlap or be left out of the global batch (P k b rows). Agreed first. */
    int ks[2] = {k, -k};
    MPI_Allreduce(MPI_IN_PLACE, ks, 2, MPI_INT, MPI_MAX, d->comm);
    if (ks[0] != -ks[1])
        return rm_session_fail(s, RM_ERR_ARG, "rm_step_accumulate: the ranks pass different k (%d to %d micro-batches; "
                               "this rank %d): rows would overlap or be left out of the global batch of P k b rows; "
                               "every rank must pass the same k", -ks[1], ks[0], k);
    const int64_t row0 = (int64_t)d->rank * k * batch_rows(s);
    const float scale = 1.0f / ((float)d->size * (float)k);
    float mean = NAN;
    d->next = d->n_req = d->waited = d->bad_grads = 0;
    d->ms_wait = 0;
    if (s->train.fused) { /* k = 1: a fused session cannot accumulate */
        const rm_micro m = {row0, scale, 0};
        return fused_step(s, step, fill_one(s, fill, user, 0, row0), &m, loss);
    }
    rc = local_micro_batches(s, step, k, row0, scale, fill, user, &mean);
    return reduce_after(s, step, rc, mean, loss);
}

#endif
