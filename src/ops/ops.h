/* ops/ops.h: what the ops/ folder offers: the definition of each op
 * (forward, backward, cost) and the context its kernels see. */
#ifndef REMAT_OPS_H
#define REMAT_OPS_H

#include "graph/graph.h"
#include "util/half.h"

/* ---- ops: each op file defines one rm_op_def ------------------------------ */

/* Everything a kernel sees. Pointers are NULL where a tensor is absent:
 * e.g. din[i] is NULL when input i needs no gradient. */
typedef struct rm_kernel_ctx {
    const rm_node *node;
    const rm_value *vin[RM_MAX_IN];   /* shapes of the inputs */
    const rm_value *vout[RM_MAX_OUT]; /* shapes of the outputs */
    void *in[RM_MAX_IN];
    void *out[RM_MAX_OUT];
    float *dout[RM_MAX_OUT];          /* gradients of the outputs (backward) */
    float *din[RM_MAX_IN];            /* gradients of the inputs (backward) */
    int acc[RM_MAX_IN];               /* 1: add into din[i]; 0: overwrite it */
    void *work;                       /* workspace of workspace() bytes */
    rm_mm_scratch mm;                 /* bf16 products' scratch (node->bf16; rm_node_workspace) */
    int threads;
    uint64_t seed, step;              /* dropout keys */
    int64_t row0;                     /* the global batch row of this micro-batch's row 0 */
    int node_id;
    int train;                        /* 0 in rm_forward: dropout is identity */
    int recompute;                    /* 1 when rebuilding values: skip side effects */
} rm_kernel_ctx;

typedef struct rm_op_def {
    rm_op_kind kind;  /* its index in the registry */
    const char *name;
    /* Which forward tensors the backward reads: bit i = input i,
     * bit (RM_MAX_IN + j) = output j. Everything else may be freed. */
    unsigned bwd_reads;
    /* The reads of one node's backward, when they depend on which of its
     * inputs need a gradient (rm_din_needed): linear reads x only for the
     * weight's gradient. NULL: bwd_reads. Callers use rm_node_bwd_reads. */
    unsigned (*bwd_reads_of)(const rm_node *n, const rm_value *vals);
    void (*forward)(const rm_kernel_ctx *c);
    void (*backward)(const rm_kernel_ctx *c);
    /* Floating-point operations of forward and backward (for cost models). */
    double (*flops)(const rm_node *n, const rm_value *vals, int backward);
    /* Scratch bytes needed during forward (0) or backward (1); may be NULL. */
    size_t (*workspace)(const rm_node *n, const rm_value *vals, int backward, int threads);
    /* The forward has a side effect (e.g. running statistics) that it skips
     * when c->recompute is set, so recomputation never repeats it. */
    int side_effect;
    /* Cheap to recompute next to what keeping its outputs costs (a pass
     * over memory: normalisations, pointwise maps, dropout's mask, the
     * attention probabilities): the selective policy recomputes these. */
    int cheap;
    /* Checks the caller's inputs before each step (only in[] of input
     * values is set; others are NULL): RM_ERR_ARG with a message naming the
     * position and value of what is out of range (e.g. a token id). May be NULL. */
    rm_status (*check)(const rm_kernel_ctx *c, char *err, size_t errlen);
    /* Inputs (bit i = input i) that may be a frozen parameter kept in 2
     * bytes (rm_param_store): the kernels read c->vin[i]->store and widen
     * it (rm_gemm_w). rm_compile refuses any other input kept so. */
    unsigned half_ins;
    /* --precision bf16 (rm_graph_precision): the op is a matrix product
     * (its products take bf16 inputs: rm_op_gemm); the inputs (bit i) its
     * kernels read and the outputs (bit j) they write, forward and
     * backward, in the dtype of the value (F32, or BF16 where the pass
     * stores it so). */
    int matmul;
    unsigned bf16_ins, bf16_outs;
} rm_op_def;

#define RM_READS_IN(i) (1u << (i))
#define RM_READS_OUT(j) (1u << (RM_MAX_IN + (j)))

/* ---- activations kept in bf16 (ops/act.c; --precision bf16) ---------------- */

/* Kernels of pointwise and row ops work on chunks of this many floats. */
#define RM_ACT_CHUNK 256
/* n elements of activation p (dtype t: F32 or BF16) from element off on,
 * as floats: p itself when F32, else widened into buf. */
const float *rm_act_read(const void *p, rm_dtype t, int64_t off, int64_t n, float *buf);
/* Where a kernel writes n floats of activation p from off on: p itself
 * when F32, else buf, which rm_act_write then rounds into p. */
static inline float *rm_act_dst(void *p, rm_dtype t, int64_t off, float *buf) {
    return t == RM_DTYPE_BF16 ? buf : (float *)p + off;
}
void rm_act_write(void *p, rm_dtype t, int64_t off, int64_t n, const float *buf);
/* One element of such an activation, read or written (for kernels whose
 * elements are not runs: callers pass constant dtypes to specialise). */
static inline float rm_act_get(const void *p, rm_dtype t, size_t i) {
    return t == RM_DTYPE_BF16 ? rm_bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}
static inline void rm_act_set(void *p, rm_dtype t, size_t i, float x) {
    if (t == RM_DTYPE_BF16) ((uint16_t *)p)[i] = rm_f32_to_bf16(x);
    else ((float *)p)[i] = x;
}
/* The byte address of element off of activation p. */
static inline void *rm_act_at(const void *p, rm_dtype t, int64_t off) {
    return (char *)p + (size_t)off * (t == RM_DTYPE_BF16 ? 2u : 4u);
}
/* An op's matrix product: C = alpha * op(A) op(B) + beta * C. Under
 * --precision bf16 (c->node->bf16) rm_gemm_bf16 on the operands' dtypes,
 * with c->mm; else rm_sgemm (every operand F32). */
void rm_op_gemm(const rm_kernel_ctx *c, int transA, int transB, int M, int N, int K, float alpha, const void *A,
                rm_dtype at, int lda, const void *B, rm_dtype bt, int ldb, float beta, void *C, rm_dtype ct, int ldc);
/* The same with a weight W kept as wt (F32, or a frozen BF16/F16):
 * C = alpha * A op(W) + beta * C. bf16: rm_gemm_bf16 reads W as it is
 * (a bf16 base directly); fp32: rm_gemm_w, which widens a 2-byte W into
 * scratch. */
void rm_op_gemm_w(const rm_kernel_ctx *c, int transW, int M, int N, int K, float alpha, const void *A, rm_dtype at,
                  int lda, const void *W, rm_dtype wt, int ldw, float beta, void *C, rm_dtype ct, int ldc,
                  float *scratch);

/* ops/registry.c: the definition of an op kind (NULL out of range). */
const rm_op_def *rm_op_get(rm_op_kind k);
/* The workspace of node n's forward (0) or backward (1): the op's, after
 * the scratch of its bf16 products when n->bf16 (rm_gemm_bf16_scratch;
 * the executor hands the kernels both). Planners and programs count this. */
size_t rm_node_workspace(const rm_node *n, const rm_value *vals, int backward, int threads);
/* The longest side (M, N or K) any product of node n may have: its
 * values' dimensions and row counts, the largest (sizes its scratch). */
int64_t rm_node_mm_dim(const rm_node *n, const rm_value *vals);
/* What the backward of node n reads (after autodiff): bwd_reads, or the
 * op's bwd_reads_of for this node. */
unsigned rm_node_bwd_reads(const rm_node *n, const rm_value *vals);

/* Whether the backward of node n computes the gradient of its input i:
 * a trainable parameter, or an activation that has a gradient (autodiff).
 * The kernels see the answer as din[i] != NULL; costs and reads use this. */
static inline int rm_din_needed(const rm_node *n, const rm_value *vals, int i) {
    const int v = n->in[i];
    if (v < 0) return 0;
    return vals[v].kind == RM_VALUE_PARAM ? vals[v].trainable : vals[v].grad >= 0;
}
/* embedding.c: RM_ERR_ARG naming the first of n ids outside [0, V) ("token
 * id 2000 at position 5 of input 'tokens' is outside [0, 256)"). */
rm_status rm_check_ids(const int32_t *ids, int64_t n, int64_t V, const char *what, const char *name, char *err,
                       size_t errlen);

/* The definitions, one per file of ops/. */
extern const rm_op_def rm_op_embedding, rm_op_linear, rm_op_add, rm_op_layernorm, rm_op_gelu,
    rm_op_relu, rm_op_dropout, rm_op_attention, rm_op_softmax_ce, rm_op_batchnorm, rm_op_custom;
extern const rm_op_def rm_op_rmsnorm, rm_op_mul, rm_op_silu, rm_op_rope, rm_op_xattention, rm_op_concat;
extern const rm_op_def rm_op_swiglu, rm_op_lora;
extern const rm_op_def rm_op_linear_ce;

/* ops/dropout.c: y = v * mask / (1 - p) (acc: y +=), v and y shaped as
 * input 0 of c's node, the mask keyed by (seed, node, step, the element's
 * place in the global batch): forward and backward of any op that drops
 * its input with probability p. With !c->train or p == 0: y = v. */
void rm_dropout_apply(const rm_kernel_ctx *c, float p, const float *v, float *y, int acc);

/* ops/lora.c: a LoRA node's rank r (iarg[0]), alpha (farg[0]) and dropout
 * (farg[1]); its adapter's output is scaled by alpha / r. */
static inline float rm_lora_scale(const rm_node *n) { return n->farg[0] / (float)n->iarg[0]; }

/* Records a node of op `d` (see rm_node_new). */
static inline int rm_op_node(rm_graph *g, const rm_op_def *d, const int *in, int n_in) {
    return rm_node_new(g, d->kind, d->name, in, n_in);
}

/* ops/elementwise.c: the builder of an elementwise op: n_in f32 inputs of
 * one shape (checked, errors name the op), one node of op `d`, one f32
 * output of that shape. Returns the output or -1 (error set on g). */
rm_val rm_elementwise(rm_graph *g, const rm_op_def *d, const rm_val *in, int n_in);

/* ops/attn_head.c: attention of one (batch row, head) on the calling
 * thread, for attention.c and xattention.c. Q is (Tq,hd), K and V (Tk,hd),
 * O (Tq,hd), each with a row stride; P is (Tq,Tk), dense; mask (Tk) i32 or
 * NULL. Causal products run in row blocks of RM_ATT_BLOCK queries. */
#define RM_ATT_BLOCK 64
typedef struct rm_attn_head {
    const void *q, *k, *v;
    int ldq, ldk, ldv;
    void *p, *o;
    int ldo;
    int Tq, Tk, hd, causal;
    float scale;
    const int32_t *mask;
    /* --precision bf16: the products take bf16 inputs (rm_gemm_bf16), q, k,
     * v, P and O are kept as their dtypes say (F32 or BF16), and the forward
     * computes a row block's scores in s, (RM_ATT_BLOCK,Tk) floats, then
     * K and V as fp32, (Tk,hd) floats each (rm_attn_head_scratch) */
    int bf16;
    rm_dtype qt, kt, vt, pt, ot;
    float *s;
    rm_mm_scratch mm; /* the products' scratch (the kernel context's) */
} rm_attn_head;
/* The forward's scratch of one thread under bf16 (0 in fp32): a row
 * block's scores, then K and V widened to fp32 once for all row blocks
 * (where bf16 products widen their operands: rm_gemm_bf16_widens). */
static inline size_t rm_attn_head_scratch(const rm_node *n, int64_t Tk, int64_t hd) {
    return n->bf16 ? ((size_t)RM_ATT_BLOCK + 2 * (size_t)hd) * (size_t)Tk * sizeof(float) : 0;
}
void rm_attn_head_forward(const rm_attn_head *a);
/* dO (Tq,hd) with stride lddo, ds a (Tq,Tk) scratch; dq (stride lddq), dk
 * and dv (stride lddkv) may be NULL; beta 1 adds into them. */
void rm_attn_head_backward(const rm_attn_head *a, const float *dO, int lddo, float *ds, float *dq, float *dk,
                           float *dv, int lddq, int lddkv, float bq, float bk, float bv);

#endif
