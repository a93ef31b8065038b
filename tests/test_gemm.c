/* test_gemm.c: the portable fallback GEMM and the BLAS path (when built
 * with OpenBLAS) agree with each other and with a double-precision
 * reference, for every transpose combination, odd sizes, strides, alpha and
 * beta. Tolerance: each output sums K products of values in [-1,1]; fp32
 * accumulation error is ~K * 6e-8 relative to the sum of |terms| (<= K),
 * so 1e-5 * K absolute is a safe bound for K <= 300. */
#include "check.h"
#include "exec/exec.h"
#include "util/half.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t state = 88172645463325252ull;
static float rnd(void) {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    return (float)((double)(state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void reference(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                      int ldb, float beta, float *C, int ldc) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++)
                s += (double)(ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]) *
                     (double)(tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
            double c = beta == 0.0f ? 0.0 : (double)beta * C[(size_t)i * ldc + j];
            C[(size_t)i * ldc + j] = (float)(alpha * s + c);
        }
}

/* rm_gemm_w with a BF16 or F16 weight: the product of the widened weight,
 * against the double reference, over several panels (wide rows: few rows a
 * panel), W^T (a forward) and W (an input gradient), beta 0 and 1. */
static void test_gemm_half(void) {
    static const int shapes[][3] = {{7, 120, 20000}, {5, 3, 9}, {1, 70, 40000}};
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
        for (int tw = 0; tw < 2; tw++)
            for (int dt = 0; dt < 2; dt++) {
                /* tw: W (N,K) and C = A W^T; else W (K,N), C = A W; the wide side is the row */
                const int M = shapes[si][0], N = tw ? shapes[si][1] : shapes[si][2], K = tw ? shapes[si][2] : shapes[si][1];
                const int ldw = (tw ? K : N) + 1, ldc = N + 2, wrows = tw ? N : K;
                const rm_dtype wt = dt ? RM_DTYPE_F16 : RM_DTYPE_BF16;
                float *A = malloc((size_t)M * K * 4), *Wf = malloc((size_t)wrows * ldw * 4);
                uint16_t *W = malloc((size_t)wrows * ldw * 2);
                float *C0 = malloc((size_t)M * ldc * 4), *C1 = malloc((size_t)M * ldc * 4);
                float *scratch = malloc(rm_gemm_w_scratch(tw, N, K) * sizeof(float));
                for (int64_t i = 0; i < (int64_t)M * K; i++) A[i] = rnd();
                for (int64_t i = 0; i < (int64_t)wrows * ldw; i++) {
                    const float v = rnd() * 0.5f;
                    if (dt) { /* a half with 8 significant bits: exact in both */
                        Wf[i] = rm_bf16_to_f32(rm_f32_to_bf16(v));
                        W[i] = 0;
                        float a = fabsf(Wf[i]);
                        if (a >= 1.0f / 16384) {
                            int e = 0;
                            float m = a;
                            while (m >= 2.0f) m /= 2, e++;
                            while (m < 1.0f) m *= 2, e--;
                            W[i] = (uint16_t)(((e + 15) << 10) | (int)((m - 1.0f) * 1024.0f));
                            if (Wf[i] < 0) W[i] |= 0x8000;
                        } else Wf[i] = 0.0f;
                    } else {
                        W[i] = rm_f32_to_bf16(v);
                        Wf[i] = rm_bf16_to_f32(W[i]);
                    }
                }
                const float beta = si == 1 ? 1.0f : 0.0f;
                for (int64_t i = 0; i < (int64_t)M * ldc; i++) C0[i] = C1[i] = beta ? rnd() : NAN;
                reference(0, tw, M, N, K, 1.0f, A, K, Wf, ldw, beta, C0, ldc);
                rm_gemm_w(tw, M, N, K, 1.0f, A, K, W, wt, ldw, beta, C1, ldc, scratch);
                double e = 0;
                for (int i = 0; i < M; i++)
                    for (int j = 0; j < N; j++) {
                        const double d = fabs((double)C1[(size_t)i * ldc + j] - C0[(size_t)i * ldc + j]);
                        e = d > e || isnan(d) ? d : e;
                    }
                CHECK(e <= 1e-6 * K, "gemm_w %s %s %dx%dx%d: max err %g", dt ? "F16" : "BF16", tw ? "W^T" : "W", M,
                      N, K, e);
                free(A), free(Wf), free(W), free(C0), free(C1), free(scratch);
            }
}

int main(void) {
    test_gemm_half();
    static const int shapes[][3] = {{1, 1, 1}, {7, 5, 3}, {64, 64, 64}, {65, 130, 257}, {128, 33, 300}, {3, 200, 17},
                                     {4100, 9, 37}}; /* more rows than rm_sgemm gives OpenBLAS at once */
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int ab = 0; ab < 2; ab++) {
                    int M = shapes[si][0], N = shapes[si][1], K = shapes[si][2];
                    float alpha = ab ? 0.5f : 1.0f, beta = ab ? 1.0f : 0.0f;
                    int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2; /* strided */
                    size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb, nc = (size_t)M * ldc;
                    float *A = malloc(na * 4), *B = malloc(nb * 4), *C0 = malloc(nc * 4), *C1 = malloc(nc * 4),
                          *C2 = malloc(nc * 4);
                    for (size_t i = 0; i < na; i++) A[i] = rnd();
                    for (size_t i = 0; i < nb; i++) B[i] = rnd();
                    for (size_t i = 0; i < nc; i++) C0[i] = C1[i] = C2[i] = ab ? rnd() : NAN; /* beta 0 ignores C */
                    reference(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C0, ldc);
                    rm_gemm_fallback(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C1, ldc);
                    rm_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C2, ldc);
                    double tol = 1e-5 * K + 1e-6, e1 = 0, e2 = 0;
                    for (int i = 0; i < M; i++)
                        for (int j = 0; j < N; j++) {
                            size_t k = (size_t)i * ldc + j;
                            e1 = fmax(e1, fabs((double)C1[k] - C0[k]));
                            e2 = fmax(e2, fabs((double)C2[k] - C1[k]));
                            if (isnan(C1[k]) || isnan(C2[k])) e1 = e2 = INFINITY;
                        }
                    CHECK(e1 <= tol, "fallback vs reference %dx%dx%d ta=%d tb=%d: max err %g", M, N, K, ta, tb, e1);
                    CHECK(e2 <= tol, "%s vs fallback %dx%dx%d ta=%d tb=%d: max err %g",
                          rm_gemm_has_blas() ? "BLAS" : "rm_sgemm", M, N, K, ta, tb, e2);
                    free(A), free(B), free(C0), free(C1), free(C2);
                }
    printf("GEMM path compared: %s\n", rm_gemm_has_blas() ? "OpenBLAS cblas_sgemm" : "portable (no BLAS)");
    return check_done("test_gemm");
}
