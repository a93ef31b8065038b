/* gemm_bf16_own.c: remat's own kernel for the bf16 product (gemm_bf16.c),
 * used where neither oneDNN's brgemm nor OpenBLAS is there, and the
 * packing every bf16 path shares.
 *
 * Blocking as rm_gemm_fallback's: C in tiles of MC x NC, each tile owned by
 * one thread; for each block of KC k's, the tile's rows of op(A) and
 * columns of op(B) are packed on the thread's stack as pairs of bf16 (k,
 * k+1) in one 32-bit word (an F32 or F16 operand rounded as it is packed:
 * no bf16 copy of anything is kept). That is the layout of AVX512-BF16's
 * VDPBF16PS, which multiplies 16 such pairs by a broadcast pair and adds
 * both products into 16 fp32 sums: twice an fp32 FMA's work per
 * instruction. Where the processor has it (detected at run time, and
 * checked once against the portable kernel), micro-tiles of MR x NR run on
 * it; elsewhere the same packed panels go through a portable micro-kernel
 * (GCC vector extensions). The sums are fp32 in a fixed order (k blocks in
 * order, pairs of k in order), the same at any thread count. */
#include "util/half.h"
#include "util/gemm_bf16_own.h"
#include <math.h>
#include <pthread.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define RM_HAVE_AVX512BF16_KERNEL 1
#endif

enum { MR = 8, NR = 32, MC = 128, NC = 128, KC = 256, KP = KC / 2 };

/* ---- packing ------------------------------------------------------------- */

typedef rm_bf16_operand operand;
enum { RUN = 512 }; /* the longest run rm_bf16_pack converts at once */

/* n elements from src + off, stride apart, as bf16 bits into dst (one
 * switch per run, not per element: the loops vectorise) */
static void to_bf16(const operand *x, size_t off, size_t stride, int n, uint16_t *dst) {
    if (x->t == RM_DTYPE_BF16) {
        const uint16_t *s = (const uint16_t *)x->p + off;
        for (int e = 0; e < n; e++) dst[e] = s[(size_t)e * stride];
    } else if (x->t == RM_DTYPE_F16) {
        const uint16_t *s = (const uint16_t *)x->p + off;
        for (int e = 0; e < n; e++) dst[e] = rm_f32_to_bf16(rm_f16_to_f32(s[(size_t)e * stride]));
    } else {
        const float *s = (const float *)x->p + off;
        for (int e = 0; e < n; e++) dst[e] = rm_f32_to_bf16(s[(size_t)e * stride]);
    }
}

/* The word of a pair (k, k+1): low half k */
static inline uint32_t pair(uint16_t lo, uint16_t hi) { return (uint32_t)lo | (uint32_t)hi << 16; }

/* Rows [0, nr) of op(X) from row i0, each contiguous over k (not trans),
 * into groups of R: rows go through t (ROWS at a time) so that each pair
 * p's R words are written together. */
static void pack_rows(const operand *x, int i0, int nr, int R, int k0, int nk, int pitch, uint32_t *out) {
    enum { ROWS = 16 };
    uint16_t t[ROWS][RUN + 1];
    const int rb = R < ROWS ? R : ROWS, np = (nk + 1) / 2;
    for (int ii = 0; ii < nr; ii += rb) {
        const int in = nr - ii < rb ? nr - ii : rb;
        for (int i = 0; i < in; i++) {
            to_bf16(x, (size_t)(i0 + ii + i) * (size_t)x->ld + (size_t)k0, 1, nk, t[i]);
            t[i][nk] = 0; /* an odd count's pad */
        }
        uint32_t *dst = out + (size_t)(ii / R) * pitch * R + (size_t)(ii % R);
        for (int p = 0; p < np; p++)
            for (int i = 0; i < in; i++) dst[(size_t)p * R + i] = pair(t[i][2 * p], t[i][2 * p + 1]);
    }
}

/* The same for op(X) whose columns are contiguous (trans): KS k's at a time
 * through t, pairs assembled from two of its rows. */
static void pack_cols(const operand *x, int i0, int nr, int R, int k0, int nk, int pitch, uint32_t *out) {
    enum { KS = 32 };
    uint16_t t[KS][RUN];
    for (int kk = 0; kk < nk; kk += KS) {
        const int kn = nk - kk < KS ? nk - kk : KS;
        for (int k = 0; k < kn; k++) to_bf16(x, (size_t)(k0 + kk + k) * (size_t)x->ld + (size_t)i0, 1, nr, t[k]);
        if (kn & 1) memset(t[kn], 0, (size_t)nr * sizeof **t);
        const int p0 = kk / 2, np = (kn + 1) / 2;
        if (R == 1) { /* a row's pairs are contiguous */
            for (int i = 0; i < nr; i++)
                for (int q = 0; q < np; q++) out[(size_t)i * pitch + p0 + q] = pair(t[2 * q][i], t[2 * q + 1][i]);
            continue;
        }
        for (int g = 0; g * R < nr; g++) { /* a pair's R rows are contiguous */
            const int rn = nr - g * R < R ? nr - g * R : R;
            for (int q = 0; q < np; q++) {
                uint32_t *d = out + ((size_t)g * pitch + (size_t)(p0 + q)) * R;
                const uint16_t *lo = t[2 * q] + g * R, *hi = t[2 * q + 1] + g * R;
                for (int r = 0; r < rn; r++) d[r] = pair(lo[r], hi[r]);
            }
        }
    }
}

void rm_bf16_pack(const operand *x, int i0, int blk, int R, int k0, int kp, int pitch, uint32_t *out) {
    const int nr = x->rows - i0 < blk ? x->rows - i0 : blk, nk = x->cols - k0 < 2 * kp ? x->cols - k0 : 2 * kp;
    if (nr < blk || nk < 2 * kp) memset(out, 0, (size_t)(blk / R) * (size_t)pitch * (size_t)R * sizeof *out);
    if (nr <= 0 || nk <= 0) return;
    if (x->trans) {
        pack_cols(x, i0, nr, R, k0, nk, pitch, out);
    } else if (R == 1) { /* rows of op(X) to rows of the block: converted in place */
        for (int i = 0; i < nr; i++)
            to_bf16(x, (size_t)(i0 + i) * (size_t)x->ld + (size_t)k0, 1, nk, (uint16_t *)(out + (size_t)i * pitch));
    } else {
        pack_rows(x, i0, nr, R, k0, nk, pitch, out);
    }
}

/* ---- micro-kernels: acc (MR x NR, row stride lda) += A pairs . B pairs --- */

typedef float v8f __attribute__((vector_size(32)));
typedef uint32_t v8u __attribute__((vector_size(32)));

static inline v8f lo_half(v8u w) {
    v8u s = w << 16;
    v8f f;
    memcpy(&f, &s, sizeof f);
    return f;
}

static inline v8f hi_half(v8u w) {
    v8u s = w & 0xffff0000u;
    v8f f;
    memcpy(&f, &s, sizeof f);
    return f;
}

/* One product of two bf16 is exact in fp32, so t + a*b rounds once with or
 * without a fused multiply-add: the same bits either way, and contracting
 * (FMA where the processor has it) is safe here. */
__attribute__((optimize("fp-contract=fast"))) static void micro_portable(int kp, const uint32_t *a, const uint32_t *b, float *acc, int lda) {
    for (int r0 = 0; r0 < MR; r0 += 4)
        for (int c0 = 0; c0 < NR; c0 += 16) {
            v8f t[4][2];
            memset(t, 0, sizeof t);
            for (int p = 0; p < kp; p++) {
                v8u w0, w1;
                memcpy(&w0, b + (size_t)p * NR + c0, sizeof w0);
                memcpy(&w1, b + (size_t)p * NR + c0 + 8, sizeof w1);
                const v8f b00 = lo_half(w0), b01 = hi_half(w0), b10 = lo_half(w1), b11 = hi_half(w1);
#pragma GCC unroll 4
                for (int r = 0; r < 4; r++) { /* unrolled: t stays in registers */
                    const uint32_t pr = a[(size_t)p * MR + r0 + r];
                    const v8u wv = {pr, pr, pr, pr, pr, pr, pr, pr}; /* one broadcast, then both halves */
                    const v8f a0 = lo_half(wv), a1 = hi_half(wv);
                    t[r][0] += a0 * b00;
                    t[r][0] += a1 * b01;
                    t[r][1] += a0 * b10;
                    t[r][1] += a1 * b11;
                }
            }
            for (int r = 0; r < 4; r++)
                for (int j = 0; j < 8; j++) {
                    acc[(size_t)(r0 + r) * lda + c0 + j] += t[r][0][j];
                    acc[(size_t)(r0 + r) * lda + c0 + 8 + j] += t[r][1][j];
                }
        }
}

#ifdef RM_HAVE_AVX512BF16_KERNEL
/* VDPBF16PS: lane j += a.lo * b[j].lo + a.hi * b[j].hi, for 16 columns. */
__attribute__((target("avx512f,avx512bf16"))) static void micro_avx512(int kp, const uint32_t *a, const uint32_t *b,
                                                                        float *acc, int lda) {
    __m512 c[MR][2];
    for (int r = 0; r < MR; r++) c[r][0] = c[r][1] = _mm512_setzero_ps();
    for (int p = 0; p < kp; p++) {
        const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + (size_t)p * NR);
        const __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + (size_t)p * NR + 16);
        for (int r = 0; r < MR; r++) {
            const __m512bh av = (__m512bh)_mm512_set1_epi32((int)a[(size_t)p * MR + r]);
            c[r][0] = _mm512_dpbf16_ps(c[r][0], av, b0);
            c[r][1] = _mm512_dpbf16_ps(c[r][1], av, b1);
        }
    }
    for (int r = 0; r < MR; r++) {
        float *row = acc + (size_t)r * lda;
        _mm512_storeu_ps(row, _mm512_add_ps(_mm512_loadu_ps(row), c[r][0]));
        _mm512_storeu_ps(row + 16, _mm512_add_ps(_mm512_loadu_ps(row + 16), c[r][1]));
    }
}
#endif

/* ---- choosing the micro-kernel --------------------------------------------- */

typedef void (*micro_fn)(int kp, const uint32_t *a, const uint32_t *b, float *acc, int lda);
static micro_fn micro = micro_portable;
static pthread_once_t kernel_once = PTHREAD_ONCE_INIT;

/* A fixed micro-tile through both kernels: each sum is of 2 * P exact
 * products, so the two may differ only by the rounding of the running sums
 * (each within an ulp of the sum of |terms|, mag: the same panels with
 * their signs cleared). */
static int kernels_agree(micro_fn fast) {
    enum { P = 37 };
    uint32_t a[P * MR], b[P * NR], aa[P * MR], ab[P * NR];
    float want[MR * NR], got[MR * NR], mag[MR * NR];
    uint32_t seed = 12345u;
    for (int i = 0; i < P * MR + P * NR; i++) {
        seed = seed * 1664525u + 1013904223u;
        const float x = (float)(seed >> 8) / 8388608.0f - 1.0f, y = (float)(seed & 0xffu) / 64.0f - 2.0f;
        const uint32_t w = rm_f32_to_bf16(x) | (uint32_t)rm_f32_to_bf16(y) << 16;
        if (i < P * MR) a[i] = w;
        else b[i - P * MR] = w;
    }
    for (int i = 0; i < P * MR; i++) aa[i] = a[i] & 0x7fff7fffu;
    for (int i = 0; i < P * NR; i++) ab[i] = b[i] & 0x7fff7fffu;
    memset(want, 0, sizeof want);
    memset(got, 0, sizeof got);
    memset(mag, 0, sizeof mag);
    micro_portable(P, a, b, want, NR);
    micro_portable(P, aa, ab, mag, NR);
    fast(P, a, b, got, NR);
    for (int i = 0; i < MR * NR; i++)
        if (!(fabsf(got[i] - want[i]) <= 2 * P * 1.2e-7f * mag[i] + 1e-30f)) return 0;
    return 1;
}

static void choose_kernel(void) {
#ifdef RM_HAVE_AVX512BF16_KERNEL
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512bf16") && kernels_agree(micro_avx512)) micro = micro_avx512;
#endif
}

int rm_bf16_own_avx512(void) {
    pthread_once(&kernel_once, choose_kernel);
    return micro != micro_portable;
}

int rm_bf16_own_selfcheck(int portable) {
    pthread_once(&kernel_once, choose_kernel);
    return kernels_agree(portable ? micro_portable : micro);
}

/* ---- the product ------------------------------------------------------------ */

void rm_bf16_write_tile(const float *acc, int lda, int mc, int nc, float alpha, float beta, void *C, rm_dtype ct,
                        int ldc, int i0, int j0) {
    for (int i = 0; i < mc; i++) {
        const float *s = acc + (size_t)i * (size_t)lda;
        const size_t at = (size_t)(i0 + i) * (size_t)ldc + (size_t)j0;
        if (ct == RM_DTYPE_BF16) {
            uint16_t *c = (uint16_t *)C + at;
            if (beta == 0.0f)
                rm_f32_to_bf16_run(s, alpha, NULL, c, nc);
            else
                for (int j = 0; j < nc; j++) c[j] = rm_f32_to_bf16(alpha * s[j] + beta * rm_bf16_to_f32(c[j]));
        } else {
            float *c = (float *)C + at;
            if (beta == 0.0f && alpha == 1.0f)
                memcpy(c, s, (size_t)nc * sizeof *c);
            else if (beta == 0.0f) /* beta 0 must not propagate NaN from old C */
                for (int j = 0; j < nc; j++) c[j] = alpha * s[j];
            else
                for (int j = 0; j < nc; j++) c[j] = alpha * s[j] + beta * c[j];
        }
    }
}

static void tile(const operand *a, const operand *bt, micro_fn mk, int i0, int j0, float alpha, float beta, void *C,
                 rm_dtype ct, int ldc) {
    uint32_t pa[(MC / MR) * KP * MR], pb[(NC / NR) * KP * NR];
    float acc[MC * NC];
    const int K = a->cols, mc = a->rows - i0 < MC ? a->rows - i0 : MC, nc = bt->rows - j0 < NC ? bt->rows - j0 : NC;
    memset(acc, 0, sizeof acc);
    for (int k0 = 0; k0 < K; k0 += KC) {
        const int kp = ((K - k0 < KC ? K - k0 : KC) + 1) / 2;
        rm_bf16_pack(a, i0, MC, MR, k0, kp, KP, pa);
        rm_bf16_pack(bt, j0, NC, NR, k0, kp, KP, pb);
        for (int g = 0; g * MR < mc; g++)
            for (int h = 0; h * NR < nc; h++)
                mk(kp, pa + (size_t)g * KP * MR, pb + (size_t)h * KP * NR, acc + (size_t)g * MR * NC + h * NR, NC);
    }
    rm_bf16_write_tile(acc, NC, mc, nc, alpha, beta, C, ct, ldc, i0, j0);
}

void rm_bf16_own_gemm(int portable, const operand *a, const operand *bt, float alpha, float beta, void *C,
                      rm_dtype ct, int ldc) {
    pthread_once(&kernel_once, choose_kernel);
    const micro_fn mk = portable ? micro_portable : micro;
    const int mt = (a->rows + MC - 1) / MC, nt = (bt->rows + NC - 1) / NC;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (!omp_in_parallel() && mt * nt > 1)
#endif
    for (int t = 0; t < mt * nt; t++) tile(a, bt, mk, (t / nt) * MC, (t % nt) * NC, alpha, beta, C, ct, ldc);
}
