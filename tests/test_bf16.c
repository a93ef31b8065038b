/* test_bf16.c: the bf16 matrix product (util/gemm_bf16.c) against a
 * double-precision product of the same bf16-rounded operands: every
 * transpose, operand dtypes F32/BF16/F16, odd sizes (edges of every tile
 * and micro-tile, odd K), strides, alpha and beta, an F32 or BF16 result;
 * and the same bits at 1 and 2 threads. Tolerance: each output sums K
 * exact products in fp32, error ~K * 6e-8 of the sum of |terms|. */
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

/* n values in [-1, 1) stored as dtype t (F16 exact in bf16 too: 8 bits) */
static void *filled(size_t n, rm_dtype t, float *as_f32) {
    void *p = malloc(n * 4);
    for (size_t i = 0; i < n; i++) {
        float v = rm_bf16_to_f32(rm_f32_to_bf16(rnd()));
        if (t == RM_DTYPE_F32) v = rnd(); /* full precision: the kernel rounds it */
        as_f32[i] = v;
        if (t == RM_DTYPE_F32) ((float *)p)[i] = v;
        else if (t == RM_DTYPE_BF16) ((uint16_t *)p)[i] = rm_f32_to_bf16(v);
        else ((uint16_t *)p)[i] = rm_f32_to_f16(v);
    }
    return p;
}

static double bf(float x) { return (double)rm_bf16_to_f32(rm_f32_to_bf16(x)); }

static int check_product(int ta, int tb, int M, int N, int K, rm_dtype at, rm_dtype bt, rm_dtype ct, float alpha,
                         float beta) {
    const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 5;
    const size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb, nc = (size_t)M * ldc;
    float *af = malloc(na * 4), *bff = malloc(nb * 4), *cf = malloc(nc * 4);
    void *A = filled(na, at, af), *B = filled(nb, bt, bff), *C = filled(nc, ct, cf);
    rm_gemm_bf16(ta, tb, M, N, K, alpha, A, at, lda, B, bt, ldb, beta, C, ct, ldc);
    int bad = 0;
    for (int i = 0; i < M && !bad; i++)
        for (int j = 0; j < N; j++) {
            double s = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                const double t = bf(ta ? af[(size_t)k * lda + i] : af[(size_t)i * lda + k]) *
                                 bf(tb ? bff[(size_t)j * ldb + k] : bff[(size_t)k * ldb + j]);
                s += t, mag += fabs(t);
            }
            const double want = alpha * s + (beta == 0.0f ? 0.0 : beta * (double)cf[(size_t)i * ldc + j]);
            const double got = ct == RM_DTYPE_BF16 ? rm_bf16_to_f32(((uint16_t *)C)[(size_t)i * ldc + j])
                                                   : ((float *)C)[(size_t)i * ldc + j];
            double tol = 1e-6 * (K + 2) * (fabs(alpha) * mag + fabs(beta) + 1);
            if (ct == RM_DTYPE_BF16) tol += fabs(want) * (1.0 / 256) + 1e-30; /* one bf16 rounding */
            if (!(fabs(got - want) <= tol)) {
                fprintf(stderr, "  (%d,%d) of %dx%dx%d ta %d tb %d: %g, want %g\n", i, j, M, N, K, ta, tb, got, want);
                bad = 1;
                break;
            }
        }
    free(af), free(bff), free(cf), free(A), free(B), free(C);
    return !bad;
}

static void test_products(void) {
    static const int shapes[][3] = {{1, 1, 1}, {7, 5, 3}, {64, 128, 256}, {65, 129, 257}, {130, 33, 513}, {9, 300, 2}};
    static const rm_dtype types[] = {RM_DTYPE_F32, RM_DTYPE_BF16, RM_DTYPE_F16};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int t = 0; t < 4; t++) {
            const int ta = t & 1, tb = t >> 1, M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
            const rm_dtype at = types[(s + t) % 3], bt = types[(s + 2 * t + 1) % 3];
            const rm_dtype ct = (s + t) % 2 ? RM_DTYPE_BF16 : RM_DTYPE_F32;
            const float alpha = t == 3 ? 0.5f : 1.0f, beta = (s + t) % 3 == 0 ? 0.0f : 1.0f;
            CHECK(check_product(ta, tb, M, N, K, at, bt, ct, alpha, beta),
                  "rm_gemm_bf16 %dx%dx%d ta %d tb %d dtypes %d %d -> %d alpha %g beta %g", M, N, K, ta, tb, (int)at,
                  (int)bt, (int)ct, (double)alpha, (double)beta);
        }
    /* K = 0: C = beta C; beta 0 does not keep a NaN */
    float c[4] = {NAN, 2, 3, 4}, x = 1;
    rm_gemm_bf16(0, 0, 2, 2, 0, 1.0f, &x, RM_DTYPE_F32, 1, &x, RM_DTYPE_F32, 2, 0.0f, c, RM_DTYPE_F32, 2);
    CHECK(c[0] == 0 && c[3] == 0, "K = 0, beta 0: %g %g", (double)c[0], (double)c[3]);
}

/* The same call at 1 and 2 threads, and portable against the kernel in use:
 * bit for bit at any thread count; within rounding across kernels. */
static void test_threads(void) {
    const int M = 300, N = 200, K = 777;
    float *af = malloc((size_t)M * K * 4), *bff = malloc((size_t)K * N * 4);
    void *A = filled((size_t)M * K, RM_DTYPE_BF16, af), *B = filled((size_t)K * N, RM_DTYPE_F32, bff);
    float *c1 = malloc((size_t)M * N * 4), *c2 = malloc((size_t)M * N * 4), *cp = malloc((size_t)M * N * 4);
    rm_set_threads(1);
    rm_gemm_bf16(0, 1, M, N, K, 1.0f, A, RM_DTYPE_BF16, K, B, RM_DTYPE_F32, K, 0.0f, c1, RM_DTYPE_F32, N);
    rm_set_threads(2);
    rm_gemm_bf16(0, 1, M, N, K, 1.0f, A, RM_DTYPE_BF16, K, B, RM_DTYPE_F32, K, 0.0f, c2, RM_DTYPE_F32, N);
    CHECK(memcmp(c1, c2, (size_t)M * N * 4) == 0, "rm_gemm_bf16 differs between 1 and 2 threads");
    rm_gemm_bf16_force_portable(1);
    rm_gemm_bf16(0, 1, M, N, K, 1.0f, A, RM_DTYPE_BF16, K, B, RM_DTYPE_F32, K, 0.0f, cp, RM_DTYPE_F32, N);
    rm_gemm_bf16_force_portable(0);
    double worst = 0;
    for (int i = 0; i < M * N; i++) worst = fmax(worst, fabs((double)cp[i] - c2[i]));
    CHECK(worst <= 1e-3, "the portable kernel and the %s kernel differ by %g", rm_bf16_kernel(), worst);
    CHECK(rm_gemm_bf16_selfcheck(), "the %s kernel fails the start-up check", rm_bf16_kernel());
    printf("bf16 kernel: %s%s%s\n", rm_bf16_kernel(), *rm_bf16_note() ? "; " : "", rm_bf16_note());
    free(af), free(bff), free(A), free(B), free(c1), free(c2), free(cp);
}

int main(void) {
    test_products();
    test_threads();
    return check_done("test_bf16");
}
