/* fastmath.h: a branch-free expf (and sigmoid) that the compiler can
 * vectorise. glibc's expf/tanhf are scalar calls without -ffast-math, and
 * GELU, SiLU and the softmaxes call them once per element: they were 20% of
 * a GPT step. GCC vectorises the clamps' ?: (float comparisons) only under
 * -fno-trapping-math, which the Makefile passes: without it the loops that
 * call rm_fast_expf stay scalar.
 *
 * exp(x) = 2^n * exp(r), n = round(x / ln 2), |r| <= ln(2)/2, with ln 2 split
 * in a high and a low part (Cody & Waite) so r is exact, and exp(r) by its
 * degree-6 Taylor polynomial (error r^7/7! < 1.3e-7 relative, ~1 ulp). */
#ifndef REMAT_FASTMATH_H
#define REMAT_FASTMATH_H
#include <stdint.h>
#include <string.h>

/* On a function whose loops compute exp: 512-bit vectors where the CPU has
 * them (GCC's default on x86 is 256 bits). Element by element the result is
 * the same at any width; GELU's forward took 2.4x less time. */
#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)
#define RM_WIDE_VECTORS __attribute__((target("prefer-vector-width=512")))
#else
#define RM_WIDE_VECTORS
#endif

static inline float rm_fast_expf(float x0) {
    /* clamp with comparisons that are false for NaN, so a NaN becomes -87
     * here (a NaN converted to int32_t below would be undefined behaviour)
     * and is given back unchanged at the end */
    float x = x0 > -87.0f ? x0 : -87.0f;
    x = x < 88.0f ? x : 88.0f;
    /* round to nearest by adding and removing 1.5 * 2^23 (no libm call, so
     * the loop vectorises); |x / ln 2| < 2^22 holds after the clamp */
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693145751953125f;   /* ln 2, high bits: n*hi is exact */
    r = r - n * 1.42860682030941723212e-6f; /* ln 2, the rest */
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23; /* 2^n as a float */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return x0 == x0 ? p * scale : x0;
}

/* Reductions in 16 fixed lanes (element i goes to lane i % 16, lanes are
 * combined in one fixed order): the compiler vectorises them, and the result
 * depends only on the data, never on threads, so recomputation reproduces it. */
#define RM_LANES 16
static inline float rm_lanes_combine(float *acc) {
    for (int w = RM_LANES / 2; w > 0; w /= 2)
        for (int l = 0; l < w; l++) acc[l] += acc[l + w];
    return acc[0];
}

static inline float rm_sumf(const float *x, int64_t n) {
    float acc[RM_LANES] = {0};
    int64_t i = 0;
    for (; i + RM_LANES <= n; i += RM_LANES)
        for (int l = 0; l < RM_LANES; l++) acc[l] += x[i + l];
    for (int l = 0; i + l < n; l++) acc[l] += x[i + l];
    return rm_lanes_combine(acc);
}

static inline float rm_dotf(const float *x, const float *y, int64_t n) {
    float acc[RM_LANES] = {0};
    int64_t i = 0;
    for (; i + RM_LANES <= n; i += RM_LANES)
        for (int l = 0; l < RM_LANES; l++) acc[l] += x[i + l] * y[i + l];
    for (int l = 0; i + l < n; l++) acc[l] += x[i + l] * y[i + l];
    return rm_lanes_combine(acc);
}

/* sum (x - m)^2: a variance's numerator */
static inline float rm_sqdevf(const float *x, float m, int64_t n) {
    float acc[RM_LANES] = {0};
    int64_t i = 0;
    for (; i + RM_LANES <= n; i += RM_LANES)
        for (int l = 0; l < RM_LANES; l++) acc[l] += (x[i + l] - m) * (x[i + l] - m);
    for (int l = 0; i + l < n; l++) acc[l] += (x[i + l] - m) * (x[i + l] - m);
    return rm_lanes_combine(acc);
}

/* sum a b (x - m): the normalisations' backward row sums */
static inline float rm_dot_devf(const float *a, const float *b, const float *x, float m, int64_t n) {
    float acc[RM_LANES] = {0};
    int64_t i = 0;
    for (; i + RM_LANES <= n; i += RM_LANES)
        for (int l = 0; l < RM_LANES; l++) acc[l] += a[i + l] * b[i + l] * (x[i + l] - m);
    for (int l = 0; i + l < n; l++) acc[l] += a[i + l] * b[i + l] * (x[i + l] - m);
    return rm_lanes_combine(acc);
}

/* max is exact in any order */
static inline float rm_maxf(const float *x, int64_t n) {
    float acc[RM_LANES];
    for (int l = 0; l < RM_LANES; l++) acc[l] = -3.402823466e38f;
    int64_t i = 0;
    for (; i + RM_LANES <= n; i += RM_LANES)
        for (int l = 0; l < RM_LANES; l++) acc[l] = x[i + l] > acc[l] ? x[i + l] : acc[l];
    for (int l = 0; i + l < n; l++) acc[l] = x[i + l] > acc[l] ? x[i + l] : acc[l];
    for (int l = 1; l < RM_LANES; l++) acc[0] = acc[l] > acc[0] ? acc[l] : acc[0];
    return acc[0];
}

/* 1 / (1 + exp(-x)); exp(-x) clamps at exp(88) for x < -88, where the
 * result (6e-39) stands for the exact one (< 6e-39) */
static inline float rm_sigmoidf(float x) { return 1.0f / (1.0f + rm_fast_expf(-x)); }
#endif
