/* util/half.h: the two 2-byte float formats of pretrained checkpoints,
 * to and from fp32, bit by bit (no compiler extension, no table).
 *
 * bfloat16 is the top half of an IEEE binary32: sign, the same 8 exponent
 * bits, 7 of the 23 mantissa bits. So widening is a shift, and narrowing
 * rounds the dropped 16 bits to nearest, ties to even (NaN stays NaN).
 *
 * binary16 ("F16", IEEE half): sign, 5 exponent bits (bias 15), 10 mantissa
 * bits. Widening re-biases the exponent (127 - 15 = 112) and renormalises
 * a subnormal half (exponent field 0), which is an ordinary fp32 number. */
#ifndef REMAT_HALF_H
#define REMAT_HALF_H

#include <stdint.h>
#include <string.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif

static inline float rm_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint32_t rm_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float rm_bf16_to_f32(uint16_t h) { return rm_bits_f32((uint32_t)h << 16); }

/* round to nearest even; NaN keeps a quiet NaN. The NaN case is a select,
 * not a branch, so that loops of it vectorize (a product's rounding was a
 * quarter of its time on the sgemm path while it branched). */
static inline uint16_t rm_f32_to_bf16(float f) {
    const uint32_t u = rm_f32_bits(f), r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, q = (u >> 16) | 0x40u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? q : r);
}

/* dst[i] = rm_f32_to_bf16(alpha * src[i] + add[i]) for i < n (add may be
 * NULL: + 0 is not added), the same bits; with AVX2 16 at a time by hand
 * (GCC's vectorized select packs to 16 bits and widens back: half again the
 * instructions). alpha * src + add is a product then a sum, never fused. */
static inline void rm_f32_to_bf16_run(const float *src, float alpha, const float *add, uint16_t *dst, int64_t n) {
    int64_t i = 0;
#ifdef __AVX2__
    const __m256 va = _mm256_set1_ps(alpha);
    const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1), quiet = _mm256_set1_epi32(0x40);
    for (; i + 16 <= n; i += 16) {
        __m256i h[2];
        for (int k = 0; k < 2; k++) {
            __m256 x = _mm256_mul_ps(va, _mm256_loadu_ps(src + i + 8 * k));
            if (add) x = _mm256_add_ps(x, _mm256_loadu_ps(add + i + 8 * k));
            const __m256i u = _mm256_castps_si256(x), top = _mm256_srli_epi32(u, 16);
            const __m256i r = _mm256_srli_epi32(
                _mm256_add_epi32(_mm256_add_epi32(u, bias), _mm256_and_si256(top, one)), 16);
            const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
            h[k] = _mm256_blendv_epi8(r, _mm256_or_si256(top, quiet), nan);
        }
        const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(h[0], h[1]), 0xd8);
        _mm256_storeu_si256((__m256i *)(dst + i), packed);
    }
#endif
    for (; i < n; i++) dst[i] = rm_f32_to_bf16(add ? alpha * src[i] + add[i] : alpha * src[i]);
}

static inline float rm_f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) return rm_bits_f32(sign | 0x7f800000u | (man << 13)); /* inf, NaN */
    if (exp != 0) return rm_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
    if (man == 0) return rm_bits_f32(sign); /* +-0 */
    /* subnormal: man * 2^-24, exact in fp32 */
    const float v = (float)man * rm_bits_f32(0x33800000u); /* 2^-24 */
    return sign ? -v : v;
}

/* round to nearest even: |f| >= 65520 (the halfway point past the largest
 * half, 65504) becomes infinity, NaN stays NaN; below 2^-14 a subnormal
 * half (steps of 2^-24), by adding 0.5f, whose float spacing there is
 * exactly 2^-24, so the FPU's own rounding (to nearest even) places the
 * subnormal's bits at the bottom of 0.5f's mantissa; otherwise the exponent
 * re-biased and the 13 dropped mantissa bits rounded by hand. */
static inline uint16_t rm_f32_to_f16(float f) {
    uint32_t u = rm_f32_bits(f);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    u &= 0x7fffffffu;
    if (u >= 0x477ff000u) return sign | (u > 0x7f800000u ? 0x7e00u : 0x7c00u); /* NaN; inf or overflow */
    if (u < 0x38800000u) {                                                     /* 2^-14: a subnormal or zero */
        const float v = rm_bits_f32(u) + 0.5f;
        return sign | (uint16_t)(rm_f32_bits(v) - 0x3f000000u);
    }
    u += 0xc8000fffu + ((u >> 13) & 1u); /* exponent - 112 (mod 2^32), rounding to nearest even */
    return sign | (uint16_t)(u >> 13);
}

#endif
