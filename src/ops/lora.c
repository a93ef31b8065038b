/* lora.c: a linear layer with a LoRA adapter (Hu et al. 2021), as PEFT's
 * LoraLayer computes it:
 *
 *   y = x W^T + b + s * (dropout(x) A^T) B^T,      s = alpha / r
 *
 * W (OUT,IN) and b are the frozen base; A (r,IN) and B (OUT,r) are the
 * adapter, A Kaiming-uniform (bound 1/sqrt(IN), PEFT's kaiming_uniform_
 * with a = sqrt(5)) and B zero, so training starts from the base model.
 * One node: the base product, the rank-r path and the sum, so the planner
 * sees one cost and keeps what the backward reads: x (for dA; also for dW
 * when W trains) and h = dropout(x) A^T (N,r), a second output, for dB.
 * The dropout mask is regenerated from Philox (rm_dropout_apply), never
 * stored, so a recomputed forward and the backward see the first mask.
 *
 * Backward, with dy (N,OUT) and xd = dropout(x):
 *   dB = s dy^T h          (OUT,r)
 *   dh = s dy B            (N,r)
 *   dA = dh^T xd           (r,IN)
 *   dx = dy W + dropout'(dh A)      (dropout' applies the same mask)
 *   dW = dy^T x,  db = sum_n dy     (only when the base trains)
 * A frozen W may be kept in BF16/F16 (rm_param_store): its two fp32
 * products widen it panel by panel into the workspace's last part
 * (rm_gemm_w). Under --precision bf16 every product takes bf16 inputs (a
 * bf16 base as it is, not widened), and x and y may be kept in bf16. */
#include "ops/ops.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

enum { X = 0, W = 1, BIAS = 2, A = 3, B = 4 }; /* the node's inputs */

/* "<module>.lora_A.weight" from the base weight "<module>.weight" (or
 * "<name>.lora_A" when the name does not end in ".weight"). */
static void adapter_name(char *out, size_t cap, const char *w, char which) {
    size_t n = strlen(w);
    const size_t k = strlen(".weight");
    if (n > k && strcmp(w + n - k, ".weight") == 0) snprintf(out, cap, "%.*s.lora_%c.weight", (int)(n - k), w, which);
    else snprintf(out, cap, "%s.lora_%c", w, which);
}

static int check_args(rm_graph *g, rm_val x, rm_val w, rm_val b, int rank, float alpha, float dropout) {
    if (!rm_val_ok(g, x, "lora_linear") || !rm_val_ok(g, w, "lora_linear")) return 0;
    if (b >= 0 && !rm_val_ok(g, b, "lora_linear")) return 0;
    const rm_value *vx = &g->vals[x], *vw = &g->vals[w];
    if (vw->kind != RM_VALUE_PARAM || vw->ndim != 2 || vx->dtype != RM_DTYPE_F32 || rm_cols(vx) != vw->shape[1]) {
        rm_graph_fail(g, RM_ERR_ARG, "lora_linear: '%s' has %lld features but the base weight '%s' must be a (OUT, "
                      "%lld) parameter", vx->name, (long long)rm_cols(vx), vw->name, (long long)rm_cols(vx));
        return 0;
    }
    if (b >= 0 && (g->vals[b].kind != RM_VALUE_PARAM || g->vals[b].ndim != 1 || g->vals[b].shape[0] != vw->shape[0])) {
        rm_graph_fail(g, RM_ERR_ARG, "lora_linear: bias '%s' must be a parameter of shape [%lld]", g->vals[b].name,
                      (long long)vw->shape[0]);
        return 0;
    }
    if (rank < 1 || rank > (1 << 16) || !isfinite(alpha) || !(dropout >= 0.0f && dropout < 1.0f)) {
        rm_graph_fail(g, RM_ERR_ARG, "lora_linear: rank %d must be in [1, 65536], alpha %g finite and dropout %g in "
                      "[0, 1)", rank, (double)alpha, (double)dropout);
        return 0;
    }
    return 1;
}

rm_val rm_lora_linear(rm_graph *g, rm_val x, rm_val w, rm_val b, int rank, float alpha, float dropout) {
    if (!check_args(g, x, w, b, rank, alpha, dropout)) return -1;
    const int64_t IN = g->vals[w].shape[1], OUT = g->vals[w].shape[0];
    char name_a[RM_NAME_LEN + 16], name_b[RM_NAME_LEN + 16];
    adapter_name(name_a, sizeof name_a, g->vals[w].name, 'A');
    adapter_name(name_b, sizeof name_b, g->vals[w].name, 'B');
    if (strlen(name_a) >= RM_NAME_LEN) {
        rm_graph_fail(g, RM_ERR_ARG, "lora_linear: the adapter's name '%s' is too long", name_a);
        return -1;
    }
    const int64_t shape_a[2] = {rank, IN}, shape_b[2] = {OUT, rank};
    rm_val pa = rm_param(g, name_a, 2, shape_a, RM_INIT_UNIFORM, 1.0f / sqrtf((float)IN), 1);
    rm_val pb = rm_param(g, name_b, 2, shape_b, RM_INIT_ZEROS, 0.0f, 1);
    if (pa < 0 || pb < 0) return -1;
    g->vals[pa].adapter = g->vals[pb].adapter = 1;
    if (rm_param_freeze(g, w) != RM_OK || (b >= 0 && rm_param_freeze(g, b) != RM_OK)) return -1;
    const rm_value *vx = &g->vals[x];
    int64_t shape[RM_MAX_DIMS];
    const int ndim = vx->ndim;
    memcpy(shape, vx->shape, (size_t)ndim * sizeof *shape);
    const int in[5] = {x, w, b, pa, pb};
    int n = rm_op_node(g, &rm_op_lora, in, 5);
    if (n < 0) return -1;
    g->nodes[n].iarg[0] = rank;
    g->nodes[n].farg[0] = alpha; /* the scale is alpha / rank */
    g->nodes[n].farg[1] = dropout;
    shape[ndim - 1] = OUT;
    rm_val y = rm_node_output(g, n, RM_DTYPE_F32, ndim, shape); // (..,OUT)
    shape[ndim - 1] = rank;
    rm_node_output(g, n, RM_DTYPE_F32, ndim, shape); // h (..,r), kept for dB
    return g->status == RM_OK ? y : -1;
}

typedef struct dims { int N, IN, OUT, r; float s, p; } dims;

static dims dims_of(const rm_kernel_ctx *c) {
    return (dims){(int)rm_rows(c->vin[X]), (int)rm_cols(c->vin[X]), (int)c->vin[W]->shape[0], c->node->iarg[0],
                  rm_lora_scale(c->node), c->node->farg[1]};
}

/* Floats of the (N,IN) dropout(x) in the workspace: none without dropout. */
static size_t wide_floats(const rm_node *n, const rm_value *x) {
    return n->farg[1] > 0.0f ? ((size_t)x->numel + 15) / 16 * 16 : 0;
}

/* dropout(x) into the workspace, or x itself when nothing is dropped; *t
 * its dtype (x may be kept in bf16 under --precision bf16: widened first). */
static const void *dropped_input(const rm_kernel_ctx *c, float *work, rm_dtype *t) {
    const float p = c->node->farg[1];
    *t = c->vin[X]->dtype;
    if (!c->train || p == 0.0f) return c->in[X];
    const float *x = rm_act_read(c->in[X], *t, 0, c->vin[X]->numel, work);
    rm_dropout_apply(c, p, x, work, 0);
    *t = RM_DTYPE_F32;
    return work;
}

/* The panel a W kept in 2 bytes is widened into (fp32 products only) */
static float *panel_of(const rm_kernel_ctx *c, float *after) { return c->node->bf16 ? NULL : after; }

static void lora_forward(const rm_kernel_ctx *c) {
    // x (N,IN), W (OUT,IN), b (OUT), A (r,IN), B (OUT,r); y (N,OUT), h (N,r); work: xd (N,IN) with dropout.
    // bf16: x and y may be kept in bf16 (y rounded after the base, then after the adapter is added)
    const dims d = dims_of(c);
    const float *bias = c->in[BIAS], *a = c->in[A], *bm = c->in[B];
    const rm_dtype xt = c->vin[X]->dtype, yt = c->vout[0]->dtype;
    float *h = c->out[1];
    if (bias) {
        #pragma omp parallel for schedule(static)
        for (int i = 0; i < d.N; i++) {
            if (yt == RM_DTYPE_F32) memcpy((float *)c->out[0] + (size_t)i * d.OUT, bias, (size_t)d.OUT * sizeof *bias);
            else rm_act_write(c->out[0], yt, (int64_t)i * d.OUT, d.OUT, bias);
        }
    }
    rm_op_gemm_w(c, 1, d.N, d.OUT, d.IN, 1.0f, c->in[X], xt, d.IN, c->in[W], c->vin[W]->store, d.IN,
                 bias ? 1.0f : 0.0f, c->out[0], yt, d.OUT, panel_of(c, (float *)c->work + wide_floats(c->node, c->vin[X])));
    rm_dtype dt;
    const void *xd = dropped_input(c, c->work, &dt);
    rm_op_gemm(c, 0, 1, d.N, d.r, d.IN, 1.0f, xd, dt, d.IN, a, RM_DTYPE_F32, d.IN, 0.0f, h, RM_DTYPE_F32,
               d.r);                                                                         // h = xd A^T
    rm_op_gemm(c, 0, 1, d.N, d.OUT, d.r, d.s, h, RM_DTYPE_F32, d.r, bm, RM_DTYPE_F32, d.r, 1.0f, c->out[0], yt,
               d.OUT);                                                                       // y += s h B^T
}

static void lora_backward(const rm_kernel_ctx *c) {
    // dy (N,OUT); dh (N,r) and, with dropout, xd then dropout'(dh A) (N,IN) in the workspace
    const dims d = dims_of(c);
    const float *dy = c->dout[0], *a = c->in[A], *bm = c->in[B];
    const rm_dtype F = RM_DTYPE_F32, xt = c->vin[X]->dtype;
    float *dh = (float *)c->work, *wide = dh + (((size_t)d.N * d.r + 15) / 16 * 16);
    float *panel = panel_of(c, wide + wide_floats(c->node, c->vin[X])); /* W kept in 2 bytes is widened here */
    if (c->din[B]) rm_op_gemm(c, 1, 0, d.OUT, d.r, d.N, d.s, dy, F, d.OUT, c->out[1], F, d.r,
                              c->acc[B] ? 1.0f : 0.0f, c->din[B], F, d.r);                   // dB = s dy^T h
    if (c->din[A] || c->din[X])
        rm_op_gemm(c, 0, 0, d.N, d.r, d.OUT, d.s, dy, F, d.OUT, bm, F, d.r, 0.0f, dh, F, d.r); // dh = s dy B
    if (c->din[A]) {
        rm_dtype dt;
        const void *xd = dropped_input(c, wide, &dt);
        rm_op_gemm(c, 1, 0, d.r, d.IN, d.N, 1.0f, dh, F, d.r, xd, dt, d.IN, c->acc[A] ? 1.0f : 0.0f, c->din[A],
                   F, d.IN);                                                                 // dA = dh^T xd
    }
    if (c->din[X]) {
        rm_op_gemm_w(c, 0, d.N, d.IN, d.OUT, 1.0f, dy, F, d.OUT, c->in[W], c->vin[W]->store, d.IN,
                     c->acc[X] ? 1.0f : 0.0f, c->din[X], F, d.IN, panel);                    // dy W
        if (!c->train || d.p == 0.0f) {
            rm_op_gemm(c, 0, 0, d.N, d.IN, d.r, 1.0f, dh, F, d.r, a, F, d.IN, 1.0f, c->din[X], F, d.IN); // += dh A
        } else {
            rm_op_gemm(c, 0, 0, d.N, d.IN, d.r, 1.0f, dh, F, d.r, a, F, d.IN, 0.0f, wide, F, d.IN);
            rm_dropout_apply(c, d.p, wide, c->din[X], 1); // += dropout'(dh A)
        }
    }
    if (c->din[W]) rm_op_gemm(c, 1, 0, d.OUT, d.IN, d.N, 1.0f, dy, F, d.OUT, c->in[X], xt, d.IN,
                              c->acc[W] ? 1.0f : 0.0f, c->din[W], F, d.IN);                  // dW = dy^T x
    if (c->din[BIAS]) {
        float *db = c->din[BIAS];
        #pragma omp parallel for schedule(static)
        for (int o = 0; o < d.OUT; o++) { /* rows in order: the same sum for any thread count */
            float s = c->acc[BIAS] ? db[o] : 0.0f;
            for (int i = 0; i < d.N; i++) s += dy[(size_t)i * d.OUT + o];
            db[o] = s;
        }
    }
}

/* Forward: the base and the rank-r path. Backward: what is computed of
 * dB, dh, dA, dx (two products), dW. */
static double lora_flops(const rm_node *n, const rm_value *vals, int backward) {
    const rm_value *x = &vals[n->in[X]], *w = &vals[n->in[W]];
    const double N = (double)rm_rows(x), IN = (double)rm_cols(x), OUT = (double)w->shape[0], r = n->iarg[0];
    if (!backward) return 2.0 * N * IN * OUT + 2.0 * N * IN * r + 2.0 * N * r * OUT;
    const int dx = rm_din_needed(n, vals, X), dA = rm_din_needed(n, vals, A);
    return 2.0 * N * r * OUT * (rm_din_needed(n, vals, B) + (dx || dA)) + 2.0 * N * r * IN * dA +
           (2.0 * N * IN * OUT + 2.0 * N * r * IN) * dx + 2.0 * N * IN * OUT * rm_din_needed(n, vals, W);
}

/* x for dA (and dW); h for dB; the parameters always (they cost nothing). */
static unsigned lora_bwd_reads(const rm_node *n, const rm_value *vals) {
    unsigned r = RM_READS_IN(W) | RM_READS_IN(A) | RM_READS_IN(B);
    if (rm_din_needed(n, vals, A) || rm_din_needed(n, vals, W)) r |= RM_READS_IN(X);
    if (rm_din_needed(n, vals, B)) r |= RM_READS_OUT(1);
    return r;
}

/* Forward: xd (N,IN) with dropout. Backward: dh (N,r), and with dropout
 * xd, then dropout'(dh A), in one (N,IN) more. Then, for a W kept in 2
 * bytes, the panel it is widened into. */
static size_t lora_workspace(const rm_node *n, const rm_value *vals, int backward, int threads) {
    (void)threads;
    const rm_value *x = &vals[n->in[X]], *w = &vals[n->in[W]];
    const size_t wide = wide_floats(n, x) * sizeof(float);
    const int OUT = (int)w->shape[0], IN = (int)w->shape[1];
    const size_t panel = w->store == RM_DTYPE_F32 || n->bf16 ? 0 /* bf16 products read W as it is */
                         : (backward ? rm_gemm_w_scratch(0, IN, OUT) : rm_gemm_w_scratch(1, OUT, IN)) * sizeof(float);
    if (!backward) return wide + panel;
    return ((size_t)rm_rows(x) * (size_t)n->iarg[0] + 15) / 16 * 16 * sizeof(float) + wide + panel;
}

const rm_op_def rm_op_lora = {
    .kind = RM_OP_LORA,
    .name = "lora_linear",
    .bwd_reads = RM_READS_IN(X) | RM_READS_IN(W) | RM_READS_IN(A) | RM_READS_IN(B) | RM_READS_OUT(1),
    .bwd_reads_of = lora_bwd_reads,
    .forward = lora_forward,
    .backward = lora_backward,
    .flops = lora_flops,
    .workspace = lora_workspace,
    .half_ins = RM_READS_IN(W),
    .matmul = 1,
    .bf16_ins = RM_READS_IN(X),
    .bf16_outs = 1u, /* y; h stays fp32 */
};
