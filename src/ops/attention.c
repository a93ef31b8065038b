/* attention.c: causal multi-head self-attention over a fused qkv tensor.
 *
 * For each batch row b and head h, with Q, K, V the (T, hd) slices of qkv
 * (hd = C/H; head h uses columns h*hd..(h+1)*hd of the q, k and v thirds):
 *   S = Q K^T / sqrt(hd)         (T,T) attention scores
 *   P = softmax(S) over j <= i   (T,T) causal: row i sees positions 0..i
 *   O = P V                      (T,hd) written into out[:, :, h*hd:(h+1)*hd]
 * P is kept as an auxiliary output for the backward pass. Every (b,h) is
 * independent, so they run in parallel and each GEMM runs on one thread.
 * The products are split into blocks of ATT_BLOCK rows: row block [r0,r1)
 * only meets columns [0,r1), so the masked upper triangle is skipped (about
 * 40% of the work at T=256) rather than computed and thrown away. */
#include "ops/ops.h"
#include "util/fastmath.h"
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

#define ATT_BLOCK 64

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
        float *p = att + (size_t)bh * T * T, *o = out + (size_t)b * T * C + h * hd;
        for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
            int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T;
            /* S[r0:r1, 0:r1] = Q[r0:r1] K[0:r1]^T * scale */
            rm_sgemm(0, 1, r1 - r0, r1, hd, scale, q + (size_t)r0 * C3, C3, k, C3, 0.0f, p + (size_t)r0 * T, T);
            for (int i = r0; i < r1; i++) {
                float *row = p + (size_t)i * T, mx = rm_maxf(row, i + 1);
                for (int j = 0; j <= i; j++) row[j] = rm_fast_expf(row[j] - mx);
                float inv = 1.0f / rm_sumf(row, i + 1);
                for (int j = 0; j <= i; j++) row[j] *= inv;
                /* masked (the future): zero, so P is fully defined (recompute checks hash it) */
                for (int j = i + 1; j < T; j++) row[j] = 0.0f;
            }
            /* O[r0:r1] = P[r0:r1, 0:r1] V[0:r1] */
            rm_sgemm(0, 0, r1 - r0, hd, r1, 1.0f, p + (size_t)r0 * T, T, v, C3, 0.0f, o + (size_t)r0 * C, C);
        }
    }
}

/* Backward, per (b,h), with dO the (T,hd) slice of dout:
 *   dV = P^T dO
 *   dP = dO V^T
 *   dS = P * (dP - rowsum(dP * P))      softmax Jacobian, row by row
 *   dQ = dS K / sqrt(hd),  dK = dS^T Q / sqrt(hd)
 * P and dS are zero above the diagonal, so row blocks [r0,r1) of dP, dS and
 * dQ stop at column r1, and rows [c0,c1) of dV and dK (products with P^T,
 * dS^T) start their sums at row c0. */
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
        float *ds = (float *)c->work + (size_t)rm_thread_id() * T * T;
        for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
            int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T;
            /* dP[r0:r1, 0:r1] = dO[r0:r1] V[0:r1]^T, then dS row by row */
            rm_sgemm(0, 1, r1 - r0, r1, hd, 1.0f, dO + (size_t)r0 * C, C, v, C3, 0.0f, ds + (size_t)r0 * T, T);
            for (int i = r0; i < r1; i++) {
                const float *pr = p + (size_t)i * T;
                float *dr = ds + (size_t)i * T, dot = rm_dotf(pr, dr, i + 1);
                for (int j = 0; j <= i; j++) dr[j] = pr[j] * (dr[j] - dot);
                for (int j = i + 1; j < r1; j++) dr[j] = 0.0f;
            }
            /* dQ[r0:r1] = dS[r0:r1, 0:r1] K[0:r1] * scale */
            rm_sgemm(0, 0, r1 - r0, hd, r1, scale, ds + (size_t)r0 * T, T, k, C3, beta, dq + (size_t)r0 * C3, C3);
        }
        for (int c0 = 0; c0 < T; c0 += ATT_BLOCK) {
            int c1 = c0 + ATT_BLOCK < T ? c0 + ATT_BLOCK : T;
            size_t at = (size_t)c0 * T + (size_t)c0; /* P[c0:T, c0:c1], dS[c0:T, c0:c1] */
            /* dV[c0:c1] = P[c0:T, c0:c1]^T dO[c0:T];  dK[c0:c1] = dS[c0:T, c0:c1]^T Q[c0:T] * scale */
            rm_sgemm(1, 0, c1 - c0, hd, T - c0, 1.0f, p + at, T, dO + (size_t)c0 * C, C, beta, dv + (size_t)c0 * C3, C3);
            rm_sgemm(1, 0, c1 - c0, hd, T - c0, scale, ds + at, T, q + (size_t)c0 * C3, C3, beta, dk + (size_t)c0 * C3,
                     C3);
        }
    }
}

static double attention_flops(const rm_node *n, const rm_value *vals, int backward) {
    const rm_value *x = &vals[n->in[0]];
    double B = (double)x->shape[0], T = (double)x->shape[1], C = (double)x->shape[2] / 3;
    /* one T x T x C product over all heads, causal blocks only: row block r
     * of nb meets r+1 column blocks, (nb+1)/(2 nb) of the square */
    double nb = ceil(T / ATT_BLOCK), gemm = 2.0 * B * T * T * C * (nb + 1) / (2 * nb);
    return backward ? 4.0 * gemm + 4.0 * B * n->iarg[0] * T * T : 2.0 * gemm + 5.0 * B * n->iarg[0] * T * T;
}

/* one (T,T) scratch matrix per thread for dP / dS */
static size_t attention_workspace(const rm_node *n, const rm_value *vals, int backward, int threads) {
    if (!backward) return 0;
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
};
