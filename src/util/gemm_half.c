/* gemm_half.c: matrix products with a weight kept in a 2-byte float format
 * (bfloat16 or IEEE half), for frozen pretrained weights: a bf16 base costs
 * 2 bytes a parameter instead of 4, and the products stay fp32.
 *
 *   C = alpha * A op(W) + beta * C,  A (M,K) fp32 row-major, C (M,N) fp32,
 *   op(W) = W^T with W (N,K) (a layer's forward, x W^T), or W with W (K,N)
 *   (its input gradient, dy W).
 *
 * W is widened (util/half.h, exactly) a panel of rows at a time into a
 * caller's fp32 scratch of rm_gemm_w_scratch floats, and each panel goes
 * to rm_sgemm: for W^T a panel of output columns C[:, n0:n1], for W a panel
 * of the sum's K rows, added in order (beta for the first, 1 after). A
 * panel holds about 1M floats (4 MiB), so the widening, done once per
 * product, is M times cheaper than the product. fp32 weights go straight
 * to rm_sgemm. The panel sizes depend on the shapes only: the same call
 * gives the same bits at any thread count (as far as rm_sgemm does). */
#include "util/half.h"
#include "util/util.h"
#ifdef _OPENMP
#include <omp.h>
#endif

#define PANEL_FLOATS ((int64_t)1 << 20)

/* Rows of W in one panel when a row has `width` elements. */
static int panel_rows(int64_t width, int64_t rows) {
    int64_t r = PANEL_FLOATS / (width > 0 ? width : 1);
    if (r < 16) r = 16;
    return (int)(r < rows ? r : rows);
}

size_t rm_gemm_w_scratch(int transW, int N, int K) {
    const int64_t width = transW ? K : N, rows = transW ? N : K;
    return (size_t)panel_rows(width, rows) * (size_t)width;
}

/* rows [r0, r0 + nr) of W (width elements each, stride ldw) into dst, fp32 */
static void widen(const uint16_t *w, rm_dtype wt, int64_t r0, int nr, int64_t width, int ldw, float *dst) {
    const int bf = wt == RM_DTYPE_BF16;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (!omp_in_parallel() && (int64_t)nr * width > 65536)
#endif
    for (int i = 0; i < nr; i++) {
        const uint16_t *src = w + (size_t)(r0 + i) * (size_t)ldw;
        float *out = dst + (size_t)i * (size_t)width;
        if (bf)
            for (int64_t j = 0; j < width; j++) out[j] = rm_bf16_to_f32(src[j]);
        else
            for (int64_t j = 0; j < width; j++) out[j] = rm_f16_to_f32(src[j]);
    }
}

void rm_gemm_w(int transW, int M, int N, int K, float alpha, const float *A, int lda, const void *W, rm_dtype wt,
               int ldw, float beta, float *C, int ldc, float *scratch) {
    if (wt == RM_DTYPE_F32) {
        rm_sgemm(0, transW, M, N, K, alpha, A, lda, W, ldw, beta, C, ldc);
        return;
    }
    const uint16_t *w = W;
    if (transW) { /* W (N,K): panels of output columns */
        const int np = panel_rows(K, N);
        for (int n0 = 0; n0 < N; n0 += np) {
            const int nr = N - n0 < np ? N - n0 : np;
            widen(w, wt, n0, nr, K, ldw, scratch);
            rm_sgemm(0, 1, M, nr, K, alpha, A, lda, scratch, K, beta, C + n0, ldc);
        }
        return;
    }
    /* W (K,N): panels of the sum's rows, added in order */
    const int kp = panel_rows(N, K);
    if (K == 0) rm_sgemm(0, 0, M, N, 0, alpha, A, lda, scratch, N, beta, C, ldc);
    for (int k0 = 0; k0 < K; k0 += kp) {
        const int kr = K - k0 < kp ? K - k0 : kp;
        widen(w, wt, k0, kr, N, ldw, scratch);
        rm_sgemm(0, 0, M, N, kr, alpha, A + k0, lda, scratch, N, k0 ? 1.0f : beta, C, ldc);
    }
}
