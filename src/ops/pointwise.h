/* ops/pointwise.h: the two kernels of an activation applied element by
 * element whose backward reads only its input x (GELU, SiLU):
 *   forward    out[i] = Y(x[i])
 *   backward   dx[i]  = DX(x[i], dout[i]), added to dx when it accumulates
 * where Y and DX are static inline functions of the op's own file (DX is
 * the derivative times dout), over x and out as activations of either
 * dtype (a bf16 x widened in the loop that reads it, forward and
 * backward: the same bits, the forward 20% faster than a widening pass
 * first; a bf16 out rounded a chunk at a time). The loops are
 * written once, here, as a macro: each op's kernels are then compiled
 * with its own Y and DX inlined into the span loops (through a function
 * pointer the loop would make a call per element). */
#ifndef REMAT_POINTWISE_H
#define REMAT_POINTWISE_H
#include "ops/ops.h"
#include "util/fastmath.h"

#define RM_POINTWISE_KERNELS(op, Y, DX)                                                                      \
    RM_WIDE_VECTORS static void op##_span(const float *x, float *out, int64_t n) {                           \
        for (int64_t i = 0; i < n; i++) out[i] = Y(x[i]);                                                    \
    }                                                                                                        \
    RM_WIDE_VECTORS static void op##_grad_span(const float *x, const float *dout, float *dx, int64_t n,      \
                                               int acc) {                                                    \
        for (int64_t i = 0; i < n; i++) {                                                                    \
            const float d = DX(x[i], dout[i]);                                                               \
            dx[i] = acc ? dx[i] + d : d;                                                                     \
        }                                                                                                    \
    }                                                                                                        \
    /* the forward with x in bf16, widened as it is read */                                                  \
    RM_WIDE_VECTORS static void op##_span_h(const uint16_t *x, float *out, int64_t n) {                      \
        for (int64_t i = 0; i < n; i++) out[i] = Y(rm_bf16_to_f32(x[i]));                                    \
    }                                                                                                        \
    /* the same with x in bf16, widened as it is read */                                                     \
    RM_WIDE_VECTORS static void op##_grad_span_h(const uint16_t *x, const float *dout, float *dx, int64_t n, \
                                                 int acc) {                                                  \
        for (int64_t i = 0; i < n; i++) {                                                                    \
            const float d = DX(rm_bf16_to_f32(x[i]), dout[i]);                                               \
            dx[i] = acc ? dx[i] + d : d;                                                                     \
        }                                                                                                    \
    }                                                                                                        \
    /* in chunks of floats: under --precision bf16, x and out may be kept in                                 \
     * bf16 (rm_act_*); in fp32 the chunks are views of x and out themselves */                              \
    static void op##_forward(const rm_kernel_ctx *c) {                                                       \
        /* x is (N), out is (N), flattened */                                                                \
        const rm_dtype xt = c->vin[0]->dtype, yt = c->vout[0]->dtype;                                        \
        const int64_t N = c->vin[0]->numel;                                                                  \
        _Pragma("omp parallel for schedule(static)")                                                        \
        for (int64_t i0 = 0; i0 < N; i0 += RM_ACT_CHUNK) {                                                   \
            const int64_t k = N - i0 < RM_ACT_CHUNK ? N - i0 : RM_ACT_CHUNK;                                 \
            float xb[RM_ACT_CHUNK], yb[RM_ACT_CHUNK], *y = rm_act_dst(c->out[0], yt, i0, yb);                \
            if (xt == RM_DTYPE_BF16) op##_span_h((const uint16_t *)c->in[0] + i0, y, k);                     \
            else op##_span(rm_act_read(c->in[0], xt, i0, k, xb), y, k);                                      \
            rm_act_write(c->out[0], yt, i0, k, y);                                                           \
        }                                                                                                    \
    }                                                                                                        \
    static void op##_backward(const rm_kernel_ctx *c) {                                                      \
        /* x is (N), dout is (N), dx is (N) */                                                               \
        if (!c->din[0]) return;                                                                              \
        const int64_t N = c->vin[0]->numel;                                                                  \
        _Pragma("omp parallel for schedule(static)")                                                        \
        for (int64_t i0 = 0; i0 < N; i0 += RM_ACT_CHUNK) {                                                   \
            const int64_t k = N - i0 < RM_ACT_CHUNK ? N - i0 : RM_ACT_CHUNK;                                 \
            if (c->vin[0]->dtype == RM_DTYPE_BF16) {                                                         \
                op##_grad_span_h((const uint16_t *)c->in[0] + i0, c->dout[0] + i0, c->din[0] + i0, k,        \
                                 c->acc[0]);                                                                 \
                continue;                                                                                    \
            }                                                                                                \
            float xb[RM_ACT_CHUNK];                                                                          \
            op##_grad_span(rm_act_read(c->in[0], c->vin[0]->dtype, i0, k, xb), c->dout[0] + i0,              \
                           c->din[0] + i0, k, c->acc[0]);                                                    \
        }                                                                                                    \
    }

#endif
