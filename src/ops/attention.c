/* attention.c: causal multi-head self-attention over a fused qkv tensor.
 *
 * For each batch row b and head h, with Q, K, V the (T, hd) slices of qkv
 * (hd = C/H; head h uses columns h*hd..(h+1)*hd of the q, k and v thirds):
 *   S = Q K^T / sqrt(hd)         (T,T) attention scores
 *   P = softmax(S) over j <= i   (T,T) causal: row i sees positions 0..i
 *   O = P V                      (T,hd) written into out[:, :, h*hd:(h+1)*hd]
 * P is kept as an auxiliary output for the backward pass. Every (b,h) is
 * independent, so they run in parallel and each GEMM runs on one thread. */
#include "internal.h"
#include "util/fastmath.h"
#include <math.h>
#ifdef _OPENMP
#include <omp.h>
#endif

rm_val rm_attention(rm_graph *g, rm_val qkv, int heads) {
    if (!rm_val_ok(g, qkv, "attention")) return -1;
    const rm_value *v = &g->vals[qkv];
    if (v->ndim != 3 || v->shape[2] % 3 != 0 || heads <= 0 || (v->shape[2] / 3) % heads != 0) {
        rm_graph_fail(g, RM_ERR_ARG, "attention: '%s' must be (B,T,3C) with C divisible by heads=%d",
                      v->name, heads);
        return -1;
    }
    int64_t B = v->shape[0], T = v->shape[1], C = v->shape[2] / 3;
    int n = rm_node_new(g, RM_OP_ATTENTION, &qkv, 1);
    if (n < 0) return -1;
    g->nodes[n].iarg[0] = heads;
    int64_t out_shape[3] = {B, T, C}, att_shape[4] = {B, heads, T, T};
    rm_val out = rm_node_output(g, n, RM_DTYPE_F32, 3, out_shape);
    rm_node_output(g, n, RM_DTYPE_F32, 4, att_shape);
    return out;
}

static int thread_id(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* qkv is (B,T,3C), out is (B,T,C), att is (B,H,T,T) */
static void attention_forward(const rm_kernel_ctx *c) {
    const float *qkv = c->in[0];
    float *out = c->out[0], *att = c->out[1];
    int B = (int)c->vin[0]->shape[0], T = (int)c->vin[0]->shape[1], C3 = (int)c->vin[0]->shape[2];
    int C = C3 / 3, H = c->node->iarg[0], hd = C / H;
    float scale = 1.0f / sqrtf((float)hd);
    #pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * H; bh++) {
        int b = bh / H, h = bh % H;
        const float *q = qkv + (size_t)b * T * C3 + h * hd, *k = q + C, *v = q + 2 * C;
        float *p = att + (size_t)bh * T * T;
        rm_sgemm(0, 1, T, T, hd, scale, q, C3, k, C3, 0.0f, p, T);
        for (int i = 0; i < T; i++) {
            float *row = p + (size_t)i * T, mx = -INFINITY, sum = 0.0f;
            for (int j = 0; j <= i; j++) mx = row[j] > mx ? row[j] : mx;
            for (int j = 0; j <= i; j++) row[j] = rm_fast_expf(row[j] - mx); /* vectorises */
            for (int j = 0; j <= i; j++) sum += row[j];                      /* in order */
            float inv = 1.0f / sum;
            for (int j = 0; j <= i; j++) row[j] *= inv;
            for (int j = i + 1; j < T; j++) row[j] = 0.0f; /* masked: the future */
        }
        rm_sgemm(0, 0, T, hd, T, 1.0f, p, T, v, C3, 0.0f, out + (size_t)b * T * C + h * hd, C);
    }
}

/* Backward, per (b,h), with dO the (T,hd) slice of dout:
 *   dV = P^T dO
 *   dP = dO V^T
 *   dS = P * (dP - rowsum(dP * P))      softmax Jacobian, row by row
 *   dQ = dS K / sqrt(hd),  dK = dS^T Q / sqrt(hd) */
static void attention_backward(const rm_kernel_ctx *c) {
    const float *qkv = c->in[0], *att = c->out[1], *dout = c->dout[0];
    float *dqkv = c->din[0];
    if (!dqkv) return;
    int B = (int)c->vin[0]->shape[0], T = (int)c->vin[0]->shape[1], C3 = (int)c->vin[0]->shape[2];
    int C = C3 / 3, H = c->node->iarg[0], hd = C / H;
    float scale = 1.0f / sqrtf((float)hd), beta = c->acc[0] ? 1.0f : 0.0f;
    #pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * H; bh++) {
        int b = bh / H, h = bh % H;
        const float *q = qkv + (size_t)b * T * C3 + h * hd, *k = q + C, *v = q + 2 * C;
        const float *p = att + (size_t)bh * T * T, *dO = dout + (size_t)b * T * C + h * hd;
        float *dq = dqkv + (size_t)b * T * C3 + h * hd, *dk = dq + C, *dv = dq + 2 * C;
        float *ds = (float *)c->work + (size_t)thread_id() * T * T;
        rm_sgemm(1, 0, T, hd, T, 1.0f, p, T, dO, C, beta, dv, C3);
        rm_sgemm(0, 1, T, T, hd, 1.0f, dO, C, v, C3, 0.0f, ds, T);
        for (int i = 0; i < T; i++) {
            const float *pr = p + (size_t)i * T;
            float *dr = ds + (size_t)i * T, dot = 0.0f;
            for (int j = 0; j <= i; j++) dot += pr[j] * dr[j];
            for (int j = 0; j <= i; j++) dr[j] = pr[j] * (dr[j] - dot);
            for (int j = i + 1; j < T; j++) dr[j] = 0.0f;
        }
        rm_sgemm(0, 0, T, hd, T, scale, ds, T, k, C3, beta, dq, C3);
        rm_sgemm(1, 0, T, hd, T, scale, ds, T, q, C3, beta, dk, C3);
    }
}

static double attention_flops(const rm_node *n, const rm_value *vals, int backward) {
    const rm_value *x = &vals[n->in[0]];
    double B = (double)x->shape[0], T = (double)x->shape[1], C = (double)x->shape[2] / 3;
    double gemm = 2.0 * B * T * T * C; /* one T x T x C product over all heads */
    return backward ? 4.0 * gemm + 4.0 * B * n->iarg[0] * T * T : 2.0 * gemm + 5.0 * B * n->iarg[0] * T * T;
}

/* one (T,T) scratch matrix per thread for dP / dS */
static size_t attention_workspace(const rm_node *n, const rm_value *vals, int backward, int threads) {
    if (!backward) return 0;
    size_t T = (size_t)vals[n->in[0]].shape[1];
    return (size_t)threads * T * T * sizeof(float);
}

const rm_op_def rm_op_attention = {
    .name = "attention",
    .bwd_reads = RM_READS_IN(0) | RM_READS_OUT(1),
    .forward = attention_forward,
    .backward = attention_backward,
    .flops = attention_flops,
    .workspace = attention_workspace,
};
