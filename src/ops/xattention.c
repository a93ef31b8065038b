/* xattention.c: general multi-head attention. Queries come from one value,
 * keys and values from another (cross-attention), with any number of key
 * positions, causal or not, an optional key padding mask, and fewer key/value
 * heads than query heads (grouped-query attention, GQA). The fused causal
 * rm_attention(qkv) of attention.c stays GPT's fast path.
 *
 * q is (B,Tq,H*hd); k and v are (B,Tk,K*hd): H query heads and K key/value
 * heads of hd dims, K dividing H. Query head h reads key/value head
 * h / (H/K): each group of G = H/K consecutive query heads shares one, as
 * Hugging Face's repeat_kv repeats each key/value head G times in place
 * (K = H is plain multi-head attention). For each batch row b and head h,
 * with Q (Tq,hd) the head's columns of q and K, V (Tk,hd) those of its
 * key/value head:
 *   S = Q K^T / sqrt(hd)                         (Tq,Tk) scores
 *   P = softmax over the visible keys of S       (Tq,Tk)
 *   O = P V                                      (Tq,hd) into out[:, :, h*hd:(h+1)*hd]
 * Key j is visible to query i unless causal and j > i, or mask[b, j] == 0
 * (a padding position). A query that sees no key at all (every key padded)
 * gets P = 0 and O = 0, not NaN. P is kept as an auxiliary output for the
 * backward pass; its invisible entries are exactly zero.
 *
 * Backward: dK and dV of a key/value head are sums over its G query heads.
 * One thread owns a (b, key/value head) pair and runs its G query heads in
 * order (the first writes, the others add), so no two threads write the
 * same element and the sum's order does not depend on the thread count.
 * Under --precision bf16 the products take bf16 inputs, and q, k, v, P and
 * out may be kept in bf16 (attn_head.c).
 */
#include "ops/ops.h"
#include <math.h>

static int shape_is(const rm_value *v, int64_t B, int64_t C) {
    return v->ndim == 3 && v->dtype == RM_DTYPE_F32 && v->shape[0] == B && v->shape[2] == C;
}

rm_val rm_attention_gqa(rm_graph *g, rm_val q, rm_val k, rm_val v, rm_val key_mask, int heads, int kv_heads,
                        int causal) {
    if (!rm_val_ok(g, q, "attention_general") || !rm_val_ok(g, k, "attention_general") ||
        !rm_val_ok(g, v, "attention_general") || (key_mask != -1 && !rm_val_ok(g, key_mask, "attention_general")))
        return -1;
    const rm_value *vq = &g->vals[q], *vk = &g->vals[k], *vv = &g->vals[v];
    const int64_t B = vq->shape[0], C = vq->shape[vq->ndim - 1];
    if (heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0 || C % heads != 0) {
        rm_graph_fail(g, RM_ERR_ARG,
                      "attention_general: q '%s' has %lld columns; heads=%d must divide them and kv_heads=%d must "
                      "divide heads", vq->name, (long long)C, heads, kv_heads);
        return -1;
    }
    const int64_t Ckv = C / heads * kv_heads; /* kv_heads heads of the same size */
    if (!shape_is(vq, B, C) || !shape_is(vk, B, Ckv) || !shape_is(vv, B, Ckv) || vk->shape[1] != vv->shape[1]) {
        rm_graph_fail(g, RM_ERR_ARG,
                      "attention_general: q '%s' must be f32 (B,Tq,%lld), k '%s' and v '%s' (B,Tk,%lld) (%d query "
                      "heads, %d key/value heads)", vq->name, (long long)C, vk->name, vv->name, (long long)Ckv, heads,
                      kv_heads);
        return -1;
    }
    if (q == k || q == v || k == v) {
        rm_graph_fail(g, RM_ERR_ARG, "attention_general: q, k and v must be three different values");
        return -1;
    }
    const int64_t Tq = vq->shape[1], Tk = vk->shape[1];
    if (key_mask != -1) {
        const rm_value *vm = &g->vals[key_mask];
        if (vm->dtype != RM_DTYPE_I32 || vm->ndim != 2 || vm->shape[0] != B || vm->shape[1] != Tk) {
            rm_graph_fail(g, RM_ERR_ARG, "attention_general: key mask '%s' must be i32 (%lld,%lld)", vm->name,
                          (long long)B, (long long)Tk);
            return -1;
        }
    }
    int ins[4] = {q, k, v, key_mask};
    int n = rm_op_node(g, &rm_op_xattention, ins, 4);
    if (n < 0) return -1;
    g->nodes[n].iarg[0] = heads;
    g->nodes[n].iarg[1] = causal ? 1 : 0;
    g->nodes[n].iarg[2] = kv_heads;
    int64_t out_shape[3] = {B, Tq, C}, att_shape[4] = {B, heads, Tq, Tk};
    rm_val out = rm_node_output(g, n, RM_DTYPE_F32, 3, out_shape);
    rm_node_output(g, n, RM_DTYPE_F32, 4, att_shape);
    return g->status == RM_OK ? out : -1;
}

rm_val rm_attention_general(rm_graph *g, rm_val q, rm_val k, rm_val v, rm_val key_mask, int heads, int causal) {
    return rm_attention_gqa(g, q, k, v, key_mask, heads, heads, causal);
}

/* Query head h of batch row b: its columns of q (B,Tq,C), and those of its
 * key/value head h / (H/K) in k and v (B,Tk,Ckv); s: the thread's scores
 * scratch (bf16) */
static rm_attn_head head_of(const rm_kernel_ctx *c, int bh, float *s) {
    const int Tq = (int)c->vin[0]->shape[1], C = (int)c->vin[0]->shape[2], Tk = (int)c->vin[1]->shape[1];
    const int H = c->node->iarg[0], K = c->node->iarg[2], hd = C / H, Ckv = K * hd, b = bh / H, h = bh % H;
    const int64_t qo = (int64_t)b * Tq * C + h * hd, ko = (int64_t)b * Tk * Ckv + (int64_t)(h / (H / K)) * hd;
    const int32_t *mask = c->in[3];
    const rm_dtype qt = c->vin[0]->dtype, kt = c->vin[1]->dtype, vt = c->vin[2]->dtype;
    const rm_dtype ot = c->vout[0]->dtype, pt = c->vout[1]->dtype;
    return (rm_attn_head){.q = rm_act_at(c->in[0], qt, qo), .k = rm_act_at(c->in[1], kt, ko),
                          .v = rm_act_at(c->in[2], vt, ko), .ldq = C, .ldk = Ckv, .ldv = Ckv,
                          .p = rm_act_at(c->out[1], pt, (int64_t)bh * Tq * Tk), .o = rm_act_at(c->out[0], ot, qo),
                          .ldo = C, .Tq = Tq, .Tk = Tk, .hd = hd, .causal = c->node->iarg[1],
                          .scale = 1.0f / sqrtf((float)hd), .mask = mask ? mask + (size_t)b * Tk : NULL,
                          .bf16 = c->node->bf16, .mm = c->mm, .qt = qt, .kt = kt, .vt = vt, .pt = pt, .ot = ot, .s = s};
}

/* a thread's forward scratch (rm_attn_head_scratch) for q and k */
static size_t head_scratch(const rm_node *n, const rm_value *q, const rm_value *k) {
    return rm_attn_head_scratch(n, k->shape[1], q->shape[2] / n->iarg[0]);
}

/* q is (B,Tq,C), k and v are (B,Tk,Ckv), mask is (B,Tk) i32 or absent;
 * out is (B,Tq,C), att is (B,H,Tq,Tk). Causal: attn_head.c's row blocks. */
static void xattention_forward(const rm_kernel_ctx *c) {
    const int BH = (int)c->vin[0]->shape[0] * c->node->iarg[0];
    const size_t per = head_scratch(c->node, c->vin[0], c->vin[1]) / sizeof(float);
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < BH; bh++) {
        float *s = per ? (float *)c->work + (size_t)rm_thread_id() * per : NULL;
        const rm_attn_head a = head_of(c, bh, s);
        rm_attn_head_forward(&a);
    }
}

/* Backward (attn_head.c), one (b, key/value head) per iteration: its G
 * query heads in order, each writing its own columns of dq; the first
 * writes (or adds, c->acc) the key/value head's columns of dk and dv, the
 * others add. Invisible entries of P are zero, so those of dS are too: the
 * mask needs no second look. */
static void xattention_backward(const rm_kernel_ctx *c) {
    float *dQ = c->din[0], *dK = c->din[1], *dV = c->din[2];
    const int Tq = (int)c->vin[0]->shape[1], C = (int)c->vin[0]->shape[2], Tk = (int)c->vin[1]->shape[1];
    const int H = c->node->iarg[0], K = c->node->iarg[2], G = H / K, hd = C / H, Ckv = K * hd;
    const int BK = (int)c->vin[0]->shape[0] * K;
    const float bq = c->acc[0] ? 1.0f : 0.0f, bk = c->acc[1] ? 1.0f : 0.0f, bv = c->acc[2] ? 1.0f : 0.0f;
#pragma omp parallel for schedule(static)
    for (int bkv = 0; bkv < BK; bkv++) {
        const int b = bkv / K, kvh = bkv % K;
        const size_t ko = (size_t)b * Tk * Ckv + (size_t)kvh * hd;
        float *ds = (float *)c->work + (size_t)rm_thread_id() * Tq * Tk;
        for (int j = 0; j < G; j++) {
            const int h = kvh * G + j;
            const rm_attn_head a = head_of(c, b * H + h, NULL);
            const size_t qo = (size_t)b * Tq * C + (size_t)h * hd;
            rm_attn_head_backward(&a, c->dout[0] + qo, C, ds, dQ ? dQ + qo : NULL, dK ? dK + ko : NULL,
                                  dV ? dV + ko : NULL, C, Ckv, bq, j ? 1.0f : bk, j ? 1.0f : bv);
        }
    }
}

static double xattention_flops(const rm_node *n, const rm_value *vals, int backward) {
    const rm_value *q = &vals[n->in[0]], *k = &vals[n->in[1]];
    const double B = (double)q->shape[0], Tq = (double)q->shape[1], C = (double)q->shape[2];
    const double Tk = (double)k->shape[1], H = n->iarg[0];
    /* causal: row block r of nb meets about r+1 key blocks, (nb+1)/(2 nb) of the rectangle */
    const double nb = ceil(Tq / RM_ATT_BLOCK), share = n->iarg[1] ? (nb + 1) / (2 * nb) : 1.0;
    const double gemm = 2.0 * B * Tq * Tk * C * share;
    return backward ? 4.0 * gemm + 4.0 * B * H * Tq * Tk : 2.0 * gemm + 5.0 * B * H * Tq * Tk;
}

/* one (Tq,Tk) scratch matrix per thread for dP / dS; under bf16 the
 * forward's scores of a row block per thread */
static size_t xattention_workspace(const rm_node *n, const rm_value *vals, int backward, int threads) {
    if (!backward) return (size_t)threads * head_scratch(n, &vals[n->in[0]], &vals[n->in[1]]);
    const size_t Tq = (size_t)vals[n->in[0]].shape[1], Tk = (size_t)vals[n->in[1]].shape[1];
    return (size_t)threads * Tq * Tk * sizeof(float);
}

const rm_op_def rm_op_xattention = {
    .kind = RM_OP_XATTENTION,
    .name = "attention_general",
    .bwd_reads = RM_READS_IN(0) | RM_READS_IN(1) | RM_READS_IN(2) | RM_READS_OUT(1), /* q, k, v, P */
    .forward = xattention_forward,
    .backward = xattention_backward,
    .flops = xattention_flops,
    .workspace = xattention_workspace,
    .cheap = 1,
    .matmul = 1,
    .bf16_ins = RM_READS_IN(0) | RM_READS_IN(1) | RM_READS_IN(2),
    .bf16_outs = 3u, /* out and P */
};
