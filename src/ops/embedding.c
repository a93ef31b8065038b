/* embedding.c: a table lookup. out[n,:] = table[ids[n],:]
 *
 * Every id must lie in [0, V). embedding_check runs on the caller's ids
 * before each step (rm_step, rm_forward fail with RM_ERR_ARG naming the
 * position and the value), so the kernels below never index out of the
 * table. A clamp would silently train on the wrong row. A frozen table may
 * be kept in BF16/F16 (rm_param_store): its rows are widened as they are
 * read.
 */
#include "ops/ops.h"
#include "util/half.h"
#include <stdio.h>
#include <string.h>

rm_val rm_embedding(rm_graph *g, rm_val ids, rm_val table) {
    if (!rm_val_ok(g, ids, "embedding") || !rm_val_ok(g, table, "embedding")) return -1;
    const rm_value *vi = &g->vals[ids], *vt = &g->vals[table];
    if (vi->dtype != RM_DTYPE_I32) {
        rm_graph_fail(g, RM_ERR_ARG, "embedding: ids '%s' must be i32", vi->name);
        return -1;
    }
    if (vt->dtype != RM_DTYPE_F32 || vt->ndim != 2) {
        rm_graph_fail(g, RM_ERR_ARG, "embedding: table '%s' must be a 2-d f32 (V,C) tensor", vt->name);
        return -1;
    }
    if (vi->ndim + 1 > RM_MAX_DIMS) {
        rm_graph_fail(g, RM_ERR_ARG, "embedding: ids '%s' have %d dims, at most %d allowed",
                      vi->name, vi->ndim, RM_MAX_DIMS - 1);
        return -1;
    }
    int64_t shape[RM_MAX_DIMS];
    int nd = vi->ndim;
    memcpy(shape, vi->shape, (size_t)nd * sizeof *shape);
    shape[nd] = vt->shape[1];
    int ins[2] = {ids, table};
    int n = rm_op_node(g, &rm_op_embedding, ins, 2);
    if (n < 0) return -1;
    return rm_node_output(g, n, RM_DTYPE_F32, nd + 1, shape);
}

static void embedding_forward(const rm_kernel_ctx *c) {
    // ids is (N) i32, table is (V,C) (fp32, or 2-byte: rm_param_store), out is (N,C)
    const int32_t *ids = c->in[0];
    const rm_dtype store = c->vin[1]->store;
    float *out = c->out[0];
    const int64_t N = c->vin[0]->numel, C = c->vin[1]->shape[1];
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        if (store == RM_DTYPE_F32) {
            memcpy(out + n * C, (const float *)c->in[1] + (int64_t)ids[n] * C, (size_t)C * sizeof *out);
            continue;
        }
        const uint16_t *row = (const uint16_t *)c->in[1] + (int64_t)ids[n] * C;
        for (int64_t j = 0; j < C; j++)
            out[n * C + j] = store == RM_DTYPE_BF16 ? rm_bf16_to_f32(row[j]) : rm_f16_to_f32(row[j]);
    }
}

/* dtable[v,:] = sum over the rows n with ids[n] == v of dout[n,:].
 * Two rows may share an id, so parallelising over rows would race (or need
 * atomics, whose order varies). Instead each thread owns a block of columns
 * and walks all rows in order: every sum has a fixed order, so the result is
 * bitwise the same for any thread count. */
#define EMB_COL_BLOCK 32

static void embedding_backward(const rm_kernel_ctx *c) {
    // ids is (N) i32, dout is (N,C), dtable is (V,C)
    float *dtable = c->din[1];
    if (!dtable) return;
    const int32_t *ids = c->in[0];
    const float *dout = c->dout[0];
    const int64_t N = c->vin[0]->numel, V = c->vin[1]->shape[0], C = c->vin[1]->shape[1];
    const int acc = c->acc[1];
    const int64_t nblocks = (C + EMB_COL_BLOCK - 1) / EMB_COL_BLOCK;
#pragma omp parallel for schedule(static)
    for (int64_t blk = 0; blk < nblocks; blk++) {
        const int64_t c0 = blk * EMB_COL_BLOCK;
        const int64_t c1 = c0 + EMB_COL_BLOCK < C ? c0 + EMB_COL_BLOCK : C;
        if (!acc) /* overwrite: rows no id points at get zero */
            for (int64_t v = 0; v < V; v++)
                for (int64_t j = c0; j < c1; j++) dtable[v * C + j] = 0.0f;
        for (int64_t n = 0; n < N; n++) {
            float *drow = dtable + (int64_t)ids[n] * C;
            const float *g = dout + n * C;
            for (int64_t j = c0; j < c1; j++) drow[j] += g[j];
        }
    }
}

/* Shared with softmax_ce.c's targets: each of the n ids in [0, V). */
rm_status rm_check_ids(const int32_t *ids, int64_t n, int64_t V, const char *what, const char *name, char *err,
                       size_t errlen) {
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V) {
            snprintf(err, errlen, "%s %d at position %lld of input '%s' is outside [0, %lld)", what, (int)ids[i],
                     (long long)i, name, (long long)V);
            return RM_ERR_ARG;
        }
    return RM_OK;
}

static rm_status embedding_check(const rm_kernel_ctx *c, char *err, size_t errlen) {
    // ids is (N) i32 (NULL unless an input), table is (V,C)
    if (!c->in[0]) return RM_OK;
    return rm_check_ids(c->in[0], c->vin[0]->numel, c->vin[1]->shape[0], "token id", c->vin[0]->name, err, errlen);
}

static double embedding_flops(const rm_node *n, const rm_value *vals, int backward) {
    const rm_value *out = &vals[n->out[0]];
    /* forward is a copy; backward one add per output element */
    return backward ? (double)out->numel : 0.0;
}

const rm_op_def rm_op_embedding = {
    .kind = RM_OP_EMBEDDING,
    .name = "embedding",
    .bwd_reads = RM_READS_IN(0), /* ids say where each gradient row goes */
    .forward = embedding_forward,
    .backward = embedding_backward,
    .flops = embedding_flops,
    .workspace = NULL,
    .check = embedding_check,
    .half_ins = RM_READS_IN(1), /* dtable exists only for a trainable (fp32) table */
};
