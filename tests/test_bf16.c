/* test_bf16.c: the bf16 matrix product (util/gemm_bf16.c), on every path
 * this host has (oneDNN's brgemm, OpenBLAS's sgemm on widened operands,
 * remat's AVX512-BF16 and portable kernels), against a double-precision
 * product of the operands as the path reads them (bf16-rounded; the sgemm
 * path reads F32 operands unrounded): every transpose, operand dtypes
 * F32/BF16/F16, odd sizes (edges of every block and tile, odd K, K above
 * one block), every pair of dtypes on several tiles each way, strides,
 * alpha and beta, an F32 or BF16 result. Then the guarantees: the same
 * bits at 1, 2 and 3 threads and inside a parallel region (attention's
 * heads), for each path, also with the cut for a caller that runs its
 * products on its own thread (rm_mm_scratch.serial); the own kernel's
 * start-up check. Tolerance: each output sums K products in fp32, error
 * ~K * 6e-8 of the sum of |terms|. And rm_f32_to_bf16_run (half.h), the
 * rounding of a run, against rm_f32_to_bf16 element by element. */
#include "check.h"
#include "exec/exec.h"
#include "util/gemm_bf16_own.h"
#include "util/half.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static const char *const paths[] = {"onednn", "sgemm", "avx512_bf16", "portable"};
static rm_mm_scratch mm;

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

/* x as the path reads it: rounded to bf16, or as it is (sgemm) */
static double as_read(float x, int exact) { return exact ? (double)x : (double)rm_bf16_to_f32(rm_f32_to_bf16(x)); }

static int check_product(const char *path, int ta, int tb, int M, int N, int K, rm_dtype at, rm_dtype bt, rm_dtype ct,
                         float alpha, float beta) {
    const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 5, exact = !strcmp(path, "sgemm");
    const size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb, nc = (size_t)M * ldc;
    float *af = malloc(na * 4), *bff = malloc(nb * 4), *cf = malloc(nc * 4);
    void *A = filled(na, at, af), *B = filled(nb, bt, bff), *C = filled(nc, ct, cf);
    rm_gemm_bf16(ta, tb, M, N, K, alpha, A, at, lda, B, bt, ldb, beta, C, ct, ldc, &mm);
    int bad = 0;
    for (int i = 0; i < M && !bad; i++)
        for (int j = 0; j < N; j++) {
            double s = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                const double t = as_read(ta ? af[(size_t)k * lda + i] : af[(size_t)i * lda + k], exact) *
                                 as_read(tb ? bff[(size_t)j * ldb + k] : bff[(size_t)k * ldb + j], exact);
                s += t, mag += fabs(t);
            }
            const double want = alpha * s + (beta == 0.0f ? 0.0 : beta * (double)cf[(size_t)i * ldc + j]);
            const double got = ct == RM_DTYPE_BF16 ? rm_bf16_to_f32(((uint16_t *)C)[(size_t)i * ldc + j])
                                                   : ((float *)C)[(size_t)i * ldc + j];
            double tol = 1e-6 * (K + 2) * (fabs(alpha) * mag + fabs(beta) + 1);
            if (ct == RM_DTYPE_BF16) tol += fabs(want) * (1.0 / 256) + 1e-30; /* one bf16 rounding */
            if (!(fabs(got - want) <= tol)) {
                fprintf(stderr, "  %s: (%d,%d) of %dx%dx%d ta %d tb %d: %g, want %g\n", path, i, j, M, N, K, ta, tb,
                        got, want);
                bad = 1;
                break;
            }
        }
    free(af), free(bff), free(cf), free(A), free(B), free(C);
    return !bad;
}

static void test_products(const char *path) {
    static const int shapes[][3] = {{1, 1, 1},     {7, 5, 3},     {64, 128, 256}, {65, 129, 257}, {130, 33, 513},
                                    {9, 300, 2},   {17, 31, 33},  {300, 20, 600}, {129, 257, 70}};
    static const rm_dtype types[] = {RM_DTYPE_F32, RM_DTYPE_BF16, RM_DTYPE_F16};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int t = 0; t < 4; t++) {
            const int ta = t & 1, tb = t >> 1, M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
            const rm_dtype at = types[(s + t) % 3], bt = types[(s + 2 * t + 1) % 3];
            const rm_dtype ct = (s + t) % 2 ? RM_DTYPE_BF16 : RM_DTYPE_F32;
            const float alpha = t == 3 ? 0.5f : 1.0f, beta = (s + t) % 3 == 0 ? 0.0f : 1.0f;
            CHECK(check_product(path, ta, tb, M, N, K, at, bt, ct, alpha, beta),
                  "%s: rm_gemm_bf16 %dx%dx%d ta %d tb %d dtypes %d %d -> %d alpha %g beta %g", path, M, N, K, ta, tb,
                  (int)at, (int)bt, (int)ct, (double)alpha, (double)beta);
        }
    /* K = 0: C = beta C; beta 0 does not keep a NaN */
    float c[4] = {NAN, 2, 3, 4}, x = 1;
    rm_gemm_bf16(0, 0, 2, 2, 0, 1.0f, &x, RM_DTYPE_F32, 1, &x, RM_DTYPE_F32, 2, 0.0f, c, RM_DTYPE_F32, 2, &mm);
    CHECK(c[0] == 0 && c[3] == 0, "%s: K = 0, beta 0: %g %g", path, (double)c[0], (double)c[3]);
}

/* Every pair of operand dtypes on products of several tiles down and across:
 * a widened panel kept for a row (column) of tiles, and (K 1100) one too big
 * to keep, widened a block at a time. */
static void test_panels(const char *path) {
    static const int shapes[][3] = {{300, 520, 200}, {270, 40, 1100}};
    static const rm_dtype types[] = {RM_DTYPE_F32, RM_DTYPE_BF16, RM_DTYPE_F16};
    for (int s = 0; s < 2; s++)
        for (int d = 0; d < 9; d++) {
            const int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2], ta = d & 1, tb = (d + s) & 1;
            const rm_dtype at = types[d / 3], bt = types[d % 3], ct = d & 2 ? RM_DTYPE_BF16 : RM_DTYPE_F32;
            CHECK(check_product(path, ta, tb, M, N, K, at, bt, ct, 1.0f, (float)(d & 1)),
                  "%s: rm_gemm_bf16 %dx%dx%d ta %d tb %d dtypes %d %d -> %d", path, M, N, K, ta, tb, (int)at, (int)bt,
                  (int)ct);
        }
}

/* One product at 1, 2 and 3 threads, and on each thread of a parallel
 * region (each thread's slot), into c[0..4]: all must be the same bits.
 * wb: op(B) is the bf16 operand (a weight gradient's X, op(A) F32), else
 * op(A) (a linear layer's input, B a weight). */
static void products_at(int ta, int wb, int M, int N, int K, const void *A, const void *B, float *c[5]) {
    const rm_dtype at = wb ? RM_DTYPE_F32 : RM_DTYPE_BF16, bt = wb ? RM_DTYPE_BF16 : RM_DTYPE_F32;
    const int tb = !wb, lda = ta ? M : K, ldb = tb ? K : N;
    for (int th = 1; th <= 3; th++) {
        rm_set_threads(th);
        rm_gemm_bf16(ta, tb, M, N, K, 1.0f, A, at, lda, B, bt, ldb, 0.0f, c[th - 1], RM_DTYPE_F32, N, &mm);
    }
    rm_set_threads(2);
#pragma omp parallel num_threads(2)
    {
#ifdef _OPENMP
        const int tid = omp_get_thread_num();
#else
        const int tid = 0;
#endif
        rm_gemm_bf16(ta, tb, M, N, K, 1.0f, A, at, lda, B, bt, ldb, 0.0f, c[3 + tid], RM_DTYPE_F32, N, &mm);
    }
}

static void test_threads(const char *path) {
    static const int shapes[][3] = {{300, 200, 777}, {1536, 384, 2048}, {16, 576, 2048}, {2048, 16, 576},
                                    {384, 1536, 2048}, {64, 256, 64}, {64, 64, 256}}; /* the last: attention's */
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int wb = 0; wb < 2; wb++) {
            const int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2], ta = (int)((s + wb) & 1);
            const rm_dtype at = wb ? RM_DTYPE_F32 : RM_DTYPE_BF16, bt = wb ? RM_DTYPE_BF16 : RM_DTYPE_F32;
            float *af = malloc((size_t)M * K * 4), *bff = malloc((size_t)K * N * 4), *c[5];
            void *A = filled((size_t)M * K, at, af), *B = filled((size_t)K * N, bt, bff);
            for (int i = 0; i < 5; i++) c[i] = malloc((size_t)M * N * 4);
            products_at(ta, wb, M, N, K, A, B, c);
            for (int i = 1; i < 5; i++)
                CHECK(memcmp(c[0], c[i], (size_t)M * N * 4) == 0, "%s: %dx%dx%d (bf16 %s): %s differs from 1 thread",
                      path, M, N, K, wb ? "B" : "A",
                      i < 3 ? (i == 1 ? "2 threads" : "3 threads") : "a call inside a parallel region");
            for (int i = 0; i < 5; i++) free(c[i]);
            free(af), free(bff), free(A), free(B);
        }
}

/* rm_f32_to_bf16_run (AVX2 by hand where there is AVX2) against
 * rm_f32_to_bf16 of each alpha * x + add: the same bits, NaN (quiet and
 * signalling), infinities, -0, ties, subnormals, every length to 40 (the
 * 16-wide body and its tail), with and without add */
static void test_round_run(void) {
    static const uint32_t special[] = {0x7fc00000u, 0x7f800001u, 0xffa00000u, 0x7f800000u, 0xff800000u, 0x80000000u,
                                       0x3f808000u, 0x3f818000u, 0x00008000u, 0x00018000u, 0x7f7fffffu, 0x007fffffu};
    float x[40], add[40];
    for (int i = 0; i < 40; i++) {
        x[i] = i < 12 ? rm_bits_f32(special[i]) : rnd() * 1e3f;
        add[i] = i % 7 == 3 ? rm_bits_f32(special[i % 12]) : rnd();
    }
    for (int n = 0; n <= 40; n++)
        for (int with = 0; with < 2; with++) {
            const float alpha = with ? 0.37f : 1.0f;
            uint16_t got[40], want[40];
            rm_f32_to_bf16_run(x + 40 - n, alpha, with ? add : NULL, got, n);
            for (int i = 0; i < n; i++)
                want[i] = rm_f32_to_bf16(with ? alpha * x[40 - n + i] + add[i] : alpha * x[40 - n + i]);
            CHECK(memcmp(got, want, (size_t)n * 2) == 0, "rm_f32_to_bf16_run: n %d, add %d: other bits", n, with);
        }
}

int main(void) {
    test_round_run();
    mm = (rm_mm_scratch){malloc(rm_gemm_bf16_scratch(3, 2048)), 3, 2048, 0};
    printf("bf16 kernel: %s%s%s\n", rm_bf16_kernel(), *rm_bf16_note() ? "; " : "", rm_bf16_note());
    for (size_t p = 0; p < sizeof paths / sizeof *paths; p++) {
        if (!rm_gemm_bf16_force(paths[p])) {
            printf("path %s: not available here, skipped\n", paths[p]);
            continue;
        }
        printf("path %s: products and thread counts\n", paths[p]);
        test_products(paths[p]);
        test_panels(paths[p]);
        test_threads(paths[p]);
        /* products whose caller always runs them on its own thread (attention's
         * heads): cut for one thread, the same checks */
        mm.serial = 1;
        test_products(paths[p]);
        test_panels(paths[p]);
        test_threads(paths[p]);
        mm.serial = 0;
    }
    rm_gemm_bf16_force(NULL);
    CHECK(rm_bf16_own_selfcheck(0) && rm_bf16_own_selfcheck(1), "the own kernel fails its start-up check");
    free(mm.p);
    return check_done("test_bf16");
}
