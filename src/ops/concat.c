/* concat.c: concatenation along the last dimension (U-ViT's long skips).
 * a (..,Ca) and b (..,Cb) with the same leading dims -> out (..,Ca+Cb):
 *   out[n, 0:Ca] = a[n],   out[n, Ca:Ca+Cb] = b[n]
 * The backward splits dout the same way and reads no forward tensor. */
#include "ops/ops.h"
#include <string.h>

rm_val rm_concat(rm_graph *g, rm_val a, rm_val b) {
    if (!rm_val_ok(g, a, "concat") || !rm_val_ok(g, b, "concat")) return -1;
    const rm_value *va = &g->vals[a], *vb = &g->vals[b];
    if (va->dtype != RM_DTYPE_F32 || vb->dtype != RM_DTYPE_F32) {
        rm_graph_fail(g, RM_ERR_ARG, "concat: '%s' and '%s' must both be f32", va->name, vb->name);
        return -1;
    }
    int same = va->ndim == vb->ndim;
    for (int d = 0; same && d < va->ndim - 1; d++) same = va->shape[d] == vb->shape[d];
    if (!same) {
        rm_graph_fail(g, RM_ERR_ARG, "concat: '%s' and '%s' differ in a dimension other than the last",
                      va->name, vb->name);
        return -1;
    }
    int64_t shape[RM_MAX_DIMS];
    const int nd = va->ndim;
    memcpy(shape, va->shape, (size_t)nd * sizeof *shape);
    shape[nd - 1] = va->shape[nd - 1] + vb->shape[nd - 1];
    int ins[2] = {a, b};
    int n = rm_op_node(g, &rm_op_concat, ins, 2);
    if (n < 0) return -1;
    return rm_node_output(g, n, RM_DTYPE_F32, nd, shape);
}

static void concat_forward(const rm_kernel_ctx *c) {
    // a is (N,Ca), b is (N,Cb); out is (N,Ca+Cb)
    const float *a = c->in[0], *b = c->in[1];
    float *out = c->out[0];
    const int64_t N = rm_rows(c->vin[0]), Ca = rm_cols(c->vin[0]), Cb = rm_cols(c->vin[1]);
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        memcpy(out + n * (Ca + Cb), a + n * Ca, (size_t)Ca * sizeof *out);
        memcpy(out + n * (Ca + Cb) + Ca, b + n * Cb, (size_t)Cb * sizeof *out);
    }
}

static void concat_backward(const rm_kernel_ctx *c) {
    // dout is (N,Ca+Cb); da is (N,Ca), db is (N,Cb)
    const float *dout = c->dout[0];
    const int64_t N = rm_rows(c->vin[0]), Ca = rm_cols(c->vin[0]), Cb = rm_cols(c->vin[1]);
    for (int k = 0; k < 2; k++) {
        float *d = c->din[k];
        if (!d) continue;
        const int64_t W = k ? Cb : Ca, off = k ? Ca : 0;
        const int acc = c->acc[k];
#pragma omp parallel for schedule(static)
        for (int64_t n = 0; n < N; n++) {
            const float *src = dout + n * (Ca + Cb) + off;
            float *dst = d + n * W;
            for (int64_t i = 0; i < W; i++) dst[i] = acc ? dst[i] + src[i] : src[i];
        }
    }
}

static double concat_flops(const rm_node *n, const rm_value *vals, int backward) {
    (void)backward;
    return (double)vals[n->out[0]].numel; /* a copy: count one per element */
}

const rm_op_def rm_op_concat = {
    .kind = RM_OP_CONCAT,
    .name = "concat",
    .bwd_reads = 0,
    .forward = concat_forward,
    .backward = concat_backward,
    .flops = concat_flops,
    .workspace = NULL,
};
