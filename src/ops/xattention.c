/* xattention.c: general multi-head attention. Queries come from one value,
 * keys and values from another (cross-attention), with any number of key
 * positions, causal or not, and an optional key padding mask. The fused
 * causal rm_attention(qkv) of attention.c stays GPT's fast path.
 *
 * q is (B,Tq,C); k and v are (B,Tk,C); H heads of hd = C/H dims. For each
 * batch row b and head h, with Q (Tq,hd), K, V (Tk,hd) the head's columns:
 *   S = Q K^T / sqrt(hd)                         (Tq,Tk) scores
 *   P = softmax over the visible keys of S       (Tq,Tk)
 *   O = P V                                      (Tq,hd) into out[:, :, h*hd:(h+1)*hd]
 * Key j is visible to query i unless causal and j > i, or mask[b, j] == 0
 * (a padding position). A query that sees no key at all (every key padded)
 * gets P = 0 and O = 0, not NaN. P is kept as an auxiliary output for the
 * backward pass; its invisible entries are exactly zero.
 */
#include "ops/ops.h"
#include <math.h>

static int shape_is(const rm_value *v, int64_t B, int64_t C) {
    return v->ndim == 3 && v->dtype == RM_DTYPE_F32 && v->shape[0] == B && v->shape[2] == C;
}

rm_val rm_attention_general(rm_graph *g, rm_val q, rm_val k, rm_val v, rm_val key_mask, int heads, int causal) {
    if (!rm_val_ok(g, q, "attention_general") || !rm_val_ok(g, k, "attention_general") ||
        !rm_val_ok(g, v, "attention_general") || (key_mask != -1 && !rm_val_ok(g, key_mask, "attention_general")))
        return -1;
    const rm_value *vq = &g->vals[q], *vk = &g->vals[k], *vv = &g->vals[v];
    const int64_t B = vq->shape[0], C = vq->shape[vq->ndim - 1];
    if (!shape_is(vq, B, C) || !shape_is(vk, B, C) || !shape_is(vv, B, C) || vk->shape[1] != vv->shape[1] ||
        heads <= 0 || C % heads != 0) {
        rm_graph_fail(g, RM_ERR_ARG,
                      "attention_general: q '%s' must be f32 (B,Tq,C), k '%s' and v '%s' (B,Tk,C), with C divisible "
                      "by heads=%d", vq->name, vk->name, vv->name, heads);
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
    int64_t out_shape[3] = {B, Tq, C}, att_shape[4] = {B, heads, Tq, Tk};
    rm_val out = rm_node_output(g, n, RM_DTYPE_F32, 3, out_shape);
    rm_node_output(g, n, RM_DTYPE_F32, 4, att_shape);
    return g->status == RM_OK ? out : -1;
}

/* head h of batch row b: its columns of q (B,Tq,C), k and v (B,Tk,C) */
static rm_attn_head head_of(const rm_kernel_ctx *c, int bh) {
    const int Tq = (int)c->vin[0]->shape[1], C = (int)c->vin[0]->shape[2], Tk = (int)c->vin[1]->shape[1];
    const int H = c->node->iarg[0], hd = C / H, b = bh / H, h = bh % H;
    const size_t qo = (size_t)b * Tq * C + h * hd, ko = (size_t)b * Tk * C + h * hd;
    const int32_t *mask = c->in[3];
    return (rm_attn_head){.q = (const float *)c->in[0] + qo, .k = (const float *)c->in[1] + ko,
                          .v = (const float *)c->in[2] + ko, .ldq = C, .ldk = C, .ldv = C,
                          .p = (float *)c->out[1] + (size_t)bh * Tq * Tk, .o = (float *)c->out[0] + qo, .ldo = C,
                          .Tq = Tq, .Tk = Tk, .hd = hd, .causal = c->node->iarg[1],
                          .scale = 1.0f / sqrtf((float)hd), .mask = mask ? mask + (size_t)b * Tk : NULL};
}

/* q is (B,Tq,C), k and v are (B,Tk,C), mask is (B,Tk) i32 or absent;
 * out is (B,Tq,C), att is (B,H,Tq,Tk). Causal: attn_head.c's row blocks. */
static void xattention_forward(const rm_kernel_ctx *c) {
    const int BH = (int)c->vin[0]->shape[0] * c->node->iarg[0];
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < BH; bh++) {
        const rm_attn_head a = head_of(c, bh);
        rm_attn_head_forward(&a);
    }
}

/* Backward (attn_head.c): each (b,h) writes its own columns of dq, dk, dv.
 * Invisible entries of P are zero, so those of dS are too: the mask needs
 * no second look. */
static void xattention_backward(const rm_kernel_ctx *c) {
    float *dQ = c->din[0], *dK = c->din[1], *dV = c->din[2];
    const int Tq = (int)c->vin[0]->shape[1], C = (int)c->vin[0]->shape[2], Tk = (int)c->vin[1]->shape[1];
    const int H = c->node->iarg[0], BH = (int)c->vin[0]->shape[0] * H, hd = C / H;
    const float bq = c->acc[0] ? 1.0f : 0.0f, bk = c->acc[1] ? 1.0f : 0.0f, bv = c->acc[2] ? 1.0f : 0.0f;
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < BH; bh++) {
        const rm_attn_head a = head_of(c, bh);
        const int b = bh / H, h = bh % H;
        const size_t qo = (size_t)b * Tq * C + h * hd, ko = (size_t)b * Tk * C + h * hd;
        float *ds = (float *)c->work + (size_t)rm_thread_id() * Tq * Tk;
        rm_attn_head_backward(&a, c->dout[0] + qo, C, ds, dQ ? dQ + qo : NULL, dK ? dK + ko : NULL,
                              dV ? dV + ko : NULL, C, bq, bk, bv);
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

/* one (Tq,Tk) scratch matrix per thread for dP / dS */
static size_t xattention_workspace(const rm_node *n, const rm_value *vals, int backward, int threads) {
    if (!backward) return 0;
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
};
