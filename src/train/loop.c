/* loop.c: the pieces of a training loop around rm_step: batches written
 * into a session's inputs, evaluation (the forward-only mean loss over the
 * validation part) and learning-rate schedules. */
#include "dist/dist.h"
#include "train/data.h"

#include <math.h>
#include <string.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* The (B, T) of a model's input, and V from its logits' last dimension. */
static rm_status io_dims(rm_session *s, const rm_model_io *io, int *B, int *T, int *V) {
    const rm_graph *g = s->g;
    rm_val in = io->tokens >= 0 ? io->tokens : io->features;
    int64_t sh[RM_MAX_DIMS], lsh[RM_MAX_DIMS];
    if (in < 0 || in >= g->n_vals || io->targets < 0 || io->targets >= g->n_vals)
        return rm_session_fail(s, RM_ERR_ARG, "rm_data_fill: io needs tokens (or features) and targets");
    if (rm_shape(g, in, sh) != 2 || sh[0] > INT32_MAX || sh[1] > INT32_MAX)
        return rm_session_fail(s, RM_ERR_ARG, "rm_data_fill: the input '%s' is not (B, T)", rm_name(g, in));
    *B = (int)sh[0];
    *T = (int)sh[1];
    *V = 0;
    if (io->features >= 0 && io->tokens < 0) {
        int nd = io->logits >= 0 && io->logits < g->n_vals ? rm_shape(g, io->logits, lsh) : 0;
        if (nd < 1 || lsh[nd - 1] > INT32_MAX)
            return rm_session_fail(s, RM_ERR_ARG, "rm_data_fill: a features model needs io->logits (its vocab)");
        *V = (int)lsh[nd - 1];
    }
    return RM_OK;
}

rm_status rm_data_fill_rows(rm_session *s, const rm_model_io *io, const rm_dataset *d, rm_data_part part,
                            rm_sampler mode, uint64_t seed, uint64_t k, int global_batch, int64_t row_offset) {
    if (!s) return RM_ERR_ARG;
    if (rm_session_runnable(s, "rm_data_fill") != RM_OK) return RM_ERR_STATE;
    if (!io || !d) return rm_session_fail(s, RM_ERR_ARG, "rm_data_fill: io and d must not be NULL");
    int B, T, V;
    rm_status st = io_dims(s, io, &B, &T, &V);
    if (st != RM_OK) return st;
    if (global_batch <= 0) global_batch = B;
    if (row_offset < 0 || row_offset > (int64_t)global_batch - B)
        return rm_session_fail(s, RM_ERR_ARG, "rm_data_fill_rows: rows [%lld, %lld) of the session's batch are not "
                               "within a global batch of %d rows", (long long)row_offset,
                               (long long)(row_offset > INT64_MAX - B ? INT64_MAX : row_offset + B), global_batch);
    char err[256];
    const int features = io->tokens < 0;
    /* (B,T) tokens or features; targets (B,T) for a language model, (B) for a window model */
    void *x = rm_session_input(s, features ? io->features : io->tokens, features ? RM_DTYPE_F32 : RM_DTYPE_I32,
                               (int64_t)B * T, "rm_data_fill", features ? "features" : "tokens");
    int32_t *y = x ? rm_session_input(s, io->targets, RM_DTYPE_I32, features ? B : (int64_t)B * T, "rm_data_fill",
                                      "targets") : NULL;
    if (!x || !y) return s->opt.dry_run ? RM_ERR_STATE : RM_ERR_ARG;
    st = rm_data_rows(d, part, mode, seed, k, global_batch, T, (int)row_offset, B, V, features ? NULL : x,
                      features ? x : NULL, y, err, sizeof err);
    return st == RM_OK ? RM_OK : rm_session_fail(s, st, "%s", err);
}

rm_status rm_data_fill(rm_session *s, const rm_model_io *io, const rm_dataset *d, rm_data_part part,
                       rm_sampler mode, uint64_t seed, uint64_t k) {
    /* data parallel: this rank's rows of the global batch of P*B rows */
    int P = 1, r = rm_session_rank(s, &P), B, T, V;
    if (P == 1 || !s) return rm_data_fill_rows(s, io, d, part, mode, seed, k, 0, 0);
    rm_status st = io_dims(s, io, &B, &T, &V);
    if (st != RM_OK) return st;
    if ((int64_t)B * P > INT32_MAX) return rm_session_fail(s, RM_ERR_ARG, "rm_data_fill: %d ranks x %d rows overflow", P, B);
    return rm_data_fill_rows(s, io, d, part, mode, seed, k, B * P, (int64_t)r * B);
}

rm_status rm_evaluate_part(rm_session *s, const rm_model_io *io, const rm_dataset *d, rm_data_part part,
                           uint64_t max_batches, rm_eval_result *out) {
    if (!s) return RM_ERR_ARG;
    if (rm_session_runnable(s, "rm_evaluate") != RM_OK) return RM_ERR_STATE;
    if (!io || !d || !out)
        return rm_session_fail(s, RM_ERR_ARG, "rm_evaluate: io, d and the result must not be NULL");
    if (part != RM_DATA_TRAIN && part != RM_DATA_VAL)
        return rm_session_fail(s, RM_ERR_ARG, "rm_evaluate: part %d is not RM_DATA_TRAIN or RM_DATA_VAL", (int)part);
    int B, T, V;
    rm_status st = io_dims(s, io, &B, &T, &V);
    if (st != RM_OK) return st;
    int P = 1;
    rm_session_rank(s, &P);
    uint64_t nb = rm_data_num_batches(d, part, B * P, T); /* global batches */
    if (nb == 0)
        return rm_session_fail(s, RM_ERR_ARG, "rm_evaluate: the %s part of '%s' holds no batch of %d x %d tokens "
                               "(%s)", part == RM_DATA_VAL ? "validation" : "training", d->name, B * P, T,
                               part == RM_DATA_VAL ? "rm_data_split with a val_fraction > 0" : "too few tokens");
    if (max_batches > 0 && nb > max_batches) nb = max_batches;
    double sum = 0; /* in order: the mean is reproducible */
    for (uint64_t k = 0; k < nb; k++) {
        float l;
        if ((st = rm_data_fill(s, io, d, part, RM_SAMPLE_SEQUENTIAL, 0, k)) != RM_OK) return st;
        if ((st = rm_forward(s, &l)) != RM_OK) return st;
        /* a loss that is not finite has no mean: the first such batch, agreed by the ranks */
        double bad = isfinite(l) ? 0.0 : 1.0;
        rm_dist_sum(s, &bad, 1);
        if (bad > 0)
            return rm_session_fail(s, RM_ERR_STATE, "batch %llu of %llu (sequential, %d x %d tokens) of "
                                   "'%s' gives a loss that is %s: the model's outputs are not finite there, so "
                                   "there is no mean loss (weights too large for their dtype?)",
                                   (unsigned long long)k, (unsigned long long)nb, B * P, T, d->name,
                                   isfinite(l) ? "not finite on another rank" : isnan(l) ? "NaN" : "infinite");
        sum += l;
    }
    rm_dist_sum(s, &sum, 1); /* every rank's mean over its rows, in rank order of the sum */
    sum /= P;
    out->mean_loss = sum / (double)nb;
    out->perplexity = exp(out->mean_loss);
    out->batches = nb;
    out->tokens = nb * (uint64_t)B * (uint64_t)P * (uint64_t)T;
    return RM_OK;
}

rm_status rm_evaluate(rm_session *s, const rm_model_io *io, const rm_dataset *d, uint64_t max_batches,
                      float *mean_loss) {
    if (!s) return RM_ERR_ARG;
    if (!mean_loss) return rm_session_fail(s, RM_ERR_ARG, "rm_evaluate: io, d and mean_loss must not be NULL");
    rm_eval_result r;
    rm_status st = rm_evaluate_part(s, io, d, RM_DATA_VAL, max_batches, &r);
    if (st == RM_OK) *mean_loss = (float)r.mean_loss;
    return st;
}

/* lr(i) = lr (i+1)/warmup during warmup; then constant, or
 * lr (0.1 + 0.9 * (1 + cos(pi r)) / 2) with r the fraction of the decay done. */
float rm_lr_at(const rm_lr_schedule *s, uint64_t step) {
    if (!s) return 0.0f;
    if (s->warmup > 0 && step < (uint64_t)s->warmup) return s->lr * (float)(step + 1) / (float)s->warmup;
    if (s->kind == RM_LR_COSINE && s->steps > s->warmup && s->warmup >= 0) {
        double r = (double)(step - (uint64_t)s->warmup) / (double)(s->steps - s->warmup);
        if (r > 1.0) r = 1.0;
        double coeff = 0.5 * (1.0 + cos(M_PI * r));
        return (float)(s->lr * (0.1 + 0.9 * coeff));
    }
    return s->lr;
}
