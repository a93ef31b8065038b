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

/* round to nearest even; NaN keeps a quiet NaN */
static inline uint16_t rm_f32_to_bf16(float f) {
    uint32_t u = rm_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
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

#endif
