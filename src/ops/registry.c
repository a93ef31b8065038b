/* registry.c: the table from op kind to op definition. Each op lives in its
 * own file of ops/ and exports one rm_op_def. */
#include "ops/ops.h"

static const rm_op_def *const op_table[RM_OP_COUNT] = {
    [RM_OP_EMBEDDING] = &rm_op_embedding,
    [RM_OP_LINEAR] = &rm_op_linear,
    [RM_OP_ADD] = &rm_op_add,
    [RM_OP_LAYERNORM] = &rm_op_layernorm,
    [RM_OP_GELU] = &rm_op_gelu,
    [RM_OP_RELU] = &rm_op_relu,
    [RM_OP_DROPOUT] = &rm_op_dropout,
    [RM_OP_ATTENTION] = &rm_op_attention,
    [RM_OP_SOFTMAX_CE] = &rm_op_softmax_ce,
    [RM_OP_BATCHNORM] = &rm_op_batchnorm,
    [RM_OP_CUSTOM] = &rm_op_custom,
    [RM_OP_RMSNORM] = &rm_op_rmsnorm,
    [RM_OP_MUL] = &rm_op_mul,
    [RM_OP_SILU] = &rm_op_silu,
    [RM_OP_ROPE] = &rm_op_rope,
    [RM_OP_XATTENTION] = &rm_op_xattention,
    [RM_OP_CONCAT] = &rm_op_concat,
    [RM_OP_SWIGLU] = &rm_op_swiglu,
    [RM_OP_LINEAR_CE] = &rm_op_linear_ce,
    [RM_OP_LORA] = &rm_op_lora,
};

/* NULL for a kind out of range: callers index with kinds they created. */
const rm_op_def *rm_op_get(rm_op_kind k) {
    if ((int)k < 0 || k >= RM_OP_COUNT) return NULL;
    return op_table[k];
}

unsigned rm_node_bwd_reads(const rm_node *n, const rm_value *vals) {
    const rm_op_def *d = rm_op_get(n->op);
    return d->bwd_reads_of ? d->bwd_reads_of(n, vals) : d->bwd_reads;
}

int64_t rm_node_mm_dim(const rm_node *n, const rm_value *vals) {
    int64_t d = 1;
    for (int i = 0; i < n->n_in + n->n_out; i++) {
        const int v = i < n->n_in ? n->in[i] : n->out[i - n->n_in];
        if (v < 0 || vals[v].ndim < 1) continue;
        if (rm_rows(&vals[v]) > d) d = rm_rows(&vals[v]);
        for (int k = 0; k < vals[v].ndim; k++)
            if (vals[v].shape[k] > d) d = vals[v].shape[k];
    }
    return d;
}

size_t rm_node_workspace(const rm_node *n, const rm_value *vals, int backward, int threads) {
    const rm_op_def *d = rm_op_get(n->op);
    const size_t ws = d->workspace ? d->workspace(n, vals, backward, threads) : 0;
    return ws + (n->bf16 ? rm_gemm_bf16_scratch(threads, rm_node_mm_dim(n, vals)) : 0);
}
