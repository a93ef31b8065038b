/* attention.c: causal multi-head self-attention over a fused qkv tensor.
 *
 * For each batch row b and head h, with Q, K, V the (T, hd) slices of qkv
 * (hd = C/H; head h uses columns h*hd..(h+1)*hd of the q, k and v thirds):
 *   S = Q K^T / sqrt(hd)         (T,T) attention scores
 *   P = softmax(S) over j <= i   (T,T) causal: row i sees positions 0..i
 *   O = P V                      (T,hd) written into out[:, :, h*hd:(h+1)*hd]
 * P is kept as an auxiliary output for the backward pass. Every (b,h) is
 * independent, so they run in parallel and each GEMM runs on one thread;
 * the kernel of one (b,h) is attn_head.c's, in causal row blocks. Under
 * --precision bf16 both products take bf16 inputs, and qkv, P and out may
 * be kept in bf16. */
#include "ops/ops.h"
#include <math.h>

rm_val rm_attention(rm_graph *g, rm_val qkv, int heads) {
    if (!rm_val_ok(g, qkv, "attention")) return -1;
    const rm_value *v = &g->vals[qkv];
    if (v->ndim != 3 || v->shape[2] % 3 != 0 || heads <= 0 || (v->shape[2] / 3) % heads != 0) {
        rm_graph_fail(g, RM_ERR_ARG, "attention: '%s' must be (B,T,3C) with C divisible by heads=%d",
                      v->name, heads);
        return -1;
    }
    int64_t B = v->shape[0], T = v->shape[1], C = v->shape[2] / 3;
    int n = rm_op_node(g, &rm_op_attention, &qkv, 1);
    if (n < 0) return -1;
    g->nodes[n].iarg[0] = heads;
    int64_t out_shape[3] = {B, T, C}, att_shape[4] = {B, heads, T, T};
    rm_val out = rm_node_output(g, n, RM_DTYPE_F32, 3, out_shape);
    rm_node_output(g, n, RM_DTYPE_F32, 4, att_shape);
    return out;
}

/* head h of batch row b: its columns of the q, k and v thirds of qkv
 * (stride 3C); s: its thread's scores scratch (bf16) */
static rm_attn_head head_of(const rm_kernel_ctx *c, void *out, void *att, int bh, float *s) {
    const int T = (int)c->vin[0]->shape[1], C3 = (int)c->vin[0]->shape[2];
    const int C = C3 / 3, H = c->node->iarg[0], hd = C / H, b = bh / H, h = bh % H;
    const rm_dtype xt = c->vin[0]->dtype, ot = c->vout[0]->dtype, pt = c->vout[1]->dtype;
    const int64_t q = (int64_t)b * T * C3 + h * hd;
    return (rm_attn_head){.q = rm_act_at(c->in[0], xt, q), .k = rm_act_at(c->in[0], xt, q + C),
                          .v = rm_act_at(c->in[0], xt, q + 2 * C), .ldq = C3, .ldk = C3, .ldv = C3,
                          .p = rm_act_at(att, pt, (int64_t)bh * T * T),
                          .o = out ? rm_act_at(out, ot, (int64_t)b * T * C + h * hd) : NULL, .ldo = C, .Tq = T,
                          .Tk = T, .hd = hd, .causal = 1, .scale = 1.0f / sqrtf((float)hd), .bf16 = c->node->bf16,
                          .qt = xt, .kt = xt, .vt = xt, .pt = pt, .ot = ot, .s = s, .mm = c->mm};
}

/* a thread's forward scratch (rm_attn_head_scratch) for qkv x */
static size_t head_scratch(const rm_node *n, const rm_value *x) {
    return rm_attn_head_scratch(n, x->shape[1], x->shape[2] / 3 / n->iarg[0]);
}

/* qkv is (B,T,3C), out is (B,T,C), att is (B,H,T,T); work: a (RM_ATT_BLOCK,T)
 * scores scratch per thread under bf16 */
static void attention_forward(const rm_kernel_ctx *c) {
    const int BH = (int)c->vin[0]->shape[0] * c->node->iarg[0];
    const size_t per = head_scratch(c->node, c->vin[0]) / sizeof(float);
    #pragma omp parallel for schedule(static)
    for (int bh = 0; bh < BH; bh++) {
        float *s = per ? (float *)c->work + (size_t)rm_thread_id() * per : NULL;
        const rm_attn_head a = head_of(c, c->out[0], c->out[1], bh, s);
        rm_attn_head_forward(&a);
    }
}

/* Backward: rm_attn_head_backward per (b,h), into the head's columns of dqkv. */
static void attention_backward(const rm_kernel_ctx *c) {
    float *dqkv = c->din[0];
    if (!dqkv) return;
    const int T = (int)c->vin[0]->shape[1], C3 = (int)c->vin[0]->shape[2], C = C3 / 3, H = c->node->iarg[0];
    const int BH = (int)c->vin[0]->shape[0] * H, hd = C / H;
    const float beta = c->acc[0] ? 1.0f : 0.0f;
    #pragma omp parallel for schedule(static)
    for (int bh = 0; bh < BH; bh++) {
        const rm_attn_head a = head_of(c, NULL, c->out[1], bh, NULL);
        const int b = bh / H, h = bh % H;
        float *dq = dqkv + (size_t)b * T * C3 + h * hd, *ds = (float *)c->work + (size_t)rm_thread_id() * T * T;
        rm_attn_head_backward(&a, c->dout[0] + (size_t)b * T * C + h * hd, C, ds, dq, dq + C, dq + 2 * C, C3, C3,
                              beta, beta, beta);
    }
}

static double attention_flops(const rm_node *n, const rm_value *vals, int backward) {
    const rm_value *x = &vals[n->in[0]];
    double B = (double)x->shape[0], T = (double)x->shape[1], C = (double)x->shape[2] / 3;
    /* one T x T x C product over all heads, causal blocks only: row block r
     * of nb meets r+1 column blocks, (nb+1)/(2 nb) of the square */
    double nb = ceil(T / RM_ATT_BLOCK), gemm = 2.0 * B * T * T * C * (nb + 1) / (2 * nb);
    return backward ? 4.0 * gemm + 4.0 * B * n->iarg[0] * T * T : 2.0 * gemm + 5.0 * B * n->iarg[0] * T * T;
}

/* one (T,T) scratch matrix per thread for dP / dS; under bf16 the
 * forward's scores of a row block per thread */
static size_t attention_workspace(const rm_node *n, const rm_value *vals, int backward, int threads) {
    if (!backward) return (size_t)threads * head_scratch(n, &vals[n->in[0]]);
    size_t T = (size_t)vals[n->in[0]].shape[1];
    return (size_t)threads * T * T * sizeof(float);
}

const rm_op_def rm_op_attention = {
    .kind = RM_OP_ATTENTION,
    .name = "attention",
    .bwd_reads = RM_READS_IN(0) | RM_READS_OUT(1),
    .forward = attention_forward,
    .backward = attention_backward,
    .flops = attention_flops,
    .workspace = attention_workspace,
    .cheap = 1,
    .matmul = 1,
    .bf16_ins = RM_READS_IN(0),
    .bf16_outs = 3u, /* out and P */
};
