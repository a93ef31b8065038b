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
