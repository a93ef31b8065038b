/* rope.c: rotary position embedding (Su et al. 2021), in the convention of
 * Hugging Face transformers' LLaMA (`rotate_half`).
 *
 * x is (B,T,C) seen as H heads of hd = C/H dims; the token at position t
 * (its index along T) has each head's dims i and i + hd/2 (i < hd/2) rotated
 * by the angle t * f_i, with f_i = theta^(-2i/hd):
 *   out[i]        = x[i] cos - x[i+hd/2] sin
 *   out[i+hd/2]   = x[i+hd/2] cos + x[i] sin
 * i.e. out = x * cos + rotate_half(x) * sin with rotate_half(x) = (-x2, x1).
 * (The original paper pairs adjacent dims 2i, 2i+1 instead; HF permutes the
 * q/k weights so that the halves are paired, and so do we.)
 *
 * A rotation is orthogonal: its Jacobian's transpose is the rotation by the
 * opposite angle, so the backward rotates dout by -t f_i and reads no
 * forward tensor. Angles are computed in float32 as HF does, per (t, i),
 * into a workspace table shared by every head and batch row; nothing is
 * kept between calls.
 */
#include "ops/ops.h"
#include <math.h>
#include <string.h>

rm_val rm_rope(rm_graph *g, rm_val x, int heads, float theta) {
    if (!rm_val_ok(g, x, "rope")) return -1;
    const rm_value *vx = &g->vals[x];
    if (vx->dtype != RM_DTYPE_F32 || vx->ndim != 3 || heads <= 0 || vx->shape[2] % heads != 0 ||
        (vx->shape[2] / heads) % 2 != 0) {
        rm_graph_fail(g, RM_ERR_ARG, "rope: '%s' must be f32 (B,T,C) with C = heads (%d) x an even head dim",
                      vx->name, heads);
        return -1;
    }
    if (!rm_rope_theta_ok(theta)) {
        rm_graph_fail(g, RM_ERR_ARG, "rope: theta = %g must be above 1 and at most 1e30", (double)theta);
        return -1;
    }
    int64_t shape[3] = {vx->shape[0], vx->shape[1], vx->shape[2]};
    int n = rm_op_node(g, &rm_op_rope, &x, 1);
    if (n < 0) return -1;
    g->nodes[n].iarg[0] = heads;
    g->nodes[n].farg[0] = theta;
    return rm_node_output(g, n, RM_DTYPE_F32, 3, shape);
}

/* Rows [0, B*T) of v rotated into y through the tables (the dtypes are
 * constants at each call, so each call is its own loop). */
static inline __attribute__((always_inline)) void rotate_rows(const rm_kernel_ctx *c, const void *v, rm_dtype vt,
                                                             void *y, rm_dtype yt, const float *cs, const float *sn,
                                                             int acc) {
    const int64_t B = c->vin[0]->shape[0], T = c->vin[0]->shape[1], C = c->vin[0]->shape[2];
    const int H = c->node->iarg[0];
    const int64_t hd = C / H, half = hd / 2;
#pragma omp for schedule(static)
    for (int64_t bt = 0; bt < B * T; bt++) {
        const float *ct = cs + (bt % T) * half, *st = sn + (bt % T) * half;
        for (int h = 0; h < H; h++)
            for (int64_t i = 0; i < half; i++) {
                const size_t e1 = (size_t)(bt * C + h * hd + i), e2 = e1 + (size_t)half;
                const float x1 = rm_act_get(v, vt, e1), x2 = rm_act_get(v, vt, e2);
                const float o1 = x1 * ct[i] - x2 * st[i], o2 = x2 * ct[i] + x1 * st[i];
                rm_act_set(y, yt, e1, acc ? rm_act_get(y, yt, e1) + o1 : o1);
                rm_act_set(y, yt, e2, acc ? rm_act_get(y, yt, e2) + o2 : o2);
            }
    }
}

/* y = rotate(v, sign * angle), added into y when acc; forward sign = +1,
 * backward sign = -1 (the transpose). The (T, hd/2) cosines and sines go to
 * the workspace first: every batch row and head shares them, so B times
 * fewer cosf/sinf/powf calls than rotating row by row. Under --precision
 * bf16 the forward's x and out may be kept in bf16 (vt, yt). */
static void rope_apply(const rm_kernel_ctx *c, const void *v, rm_dtype vt, void *y, rm_dtype yt, float sign, int acc) {
    // v is (B,T,C), y is (B,T,C); work holds cs (T,half) then sn (T,half)
    const int64_t T = c->vin[0]->shape[1], C = c->vin[0]->shape[2];
    const int H = c->node->iarg[0];
    const int64_t hd = C / H, half = hd / 2;
    const float theta = c->node->farg[0];
    float *cs = c->work, *sn = cs + T * half;
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (int64_t t = 0; t < T; t++)
            for (int64_t i = 0; i < half; i++) {
                const float f = 1.0f / powf(theta, (float)(2 * i) / (float)hd), ang = (float)t * f;
                cs[t * half + i] = cosf(ang);
                sn[t * half + i] = sign * sinf(ang);
            }
        if (vt == RM_DTYPE_F32 && yt == RM_DTYPE_F32) rotate_rows(c, v, RM_DTYPE_F32, y, RM_DTYPE_F32, cs, sn, acc);
        else rotate_rows(c, v, vt, y, yt, cs, sn, acc);
    }
}

static void rope_forward(const rm_kernel_ctx *c) {
    rope_apply(c, c->in[0], c->vin[0]->dtype, c->out[0], c->vout[0]->dtype, 1.0f, 0);
}

static void rope_backward(const rm_kernel_ctx *c) {
    if (c->din[0]) rope_apply(c, c->dout[0], RM_DTYPE_F32, c->din[0], RM_DTYPE_F32, -1.0f, c->acc[0]);
}

/* the cosine and sine tables, forward and backward */
static size_t rope_workspace(const rm_node *n, const rm_value *vals, int backward, int threads) {
    (void)backward, (void)threads;
    const rm_value *x = &vals[n->in[0]];
    return (size_t)x->shape[1] * (size_t)(x->shape[2] / n->iarg[0]) * sizeof(float); /* 2 x T x hd/2 */
}

static double rope_flops(const rm_node *n, const rm_value *vals, int backward) {
    (void)backward;
    return 3.0 * (double)vals[n->in[0]].numel; /* 2 multiplies + 1 add per element */
}

const rm_op_def rm_op_rope = {
    .kind = RM_OP_ROPE,
    .name = "rope",
    .bwd_reads = 0,
    .forward = rope_forward,
    .backward = rope_backward,
    .flops = rope_flops,
    .workspace = rope_workspace,
    .cheap = 1,
    .bf16_ins = RM_READS_IN(0),
    .bf16_outs = 1u,
};
