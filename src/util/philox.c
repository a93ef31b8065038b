/* philox.c: Philox4x32-10, the counter-based generator of Salmon, Moraes,
 * Dror and Shaw, "Parallel random numbers: as easy as 1, 2, 3" (SC 2011).
 *
 * A counter-based generator is a keyed bijection of a 128-bit counter: the
 * i-th random number is f_key(i), with no state carried from one number to
 * the next. That is what recomputation needs: a dropout mask rebuilt in the
 * backward pass (or by a recompute of the forward) is bit-identical to the
 * first one, whatever the thread count or the order the elements are visited.
 */
#include "util/util.h"
#include <math.h>

#define PHILOX_M0 0xD2511F53u /* round multipliers */
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u /* key schedule ("Weyl") increments: golden ratio, */
#define PHILOX_W1 0xBB67AE85u /* sqrt(3) - 1 */

/* One round: two 32x32->64 multiplies, their high halves mixed with the
 * other two counter words and the round key, then a word permutation. */
static inline void philox_round(uint32_t c[4], const uint32_t k[2]) {
    uint64_t p0 = (uint64_t)PHILOX_M0 * c[0];
    uint64_t p1 = (uint64_t)PHILOX_M1 * c[2];
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    uint32_t n0 = hi1 ^ c[1] ^ k[0];
    uint32_t n2 = hi0 ^ c[3] ^ k[1];
    c[0] = n0;
    c[1] = lo1;
    c[2] = n2;
    c[3] = lo0;
}

void rm_philox4x32(const uint32_t key[2], const uint32_t ctr[4], uint32_t out[4]) {
    uint32_t c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]};
    uint32_t k[2] = {key[0], key[1]};
    for (int r = 0; r < 10; r++) {
        if (r > 0) { /* the key is bumped between rounds, not before the first */
            k[0] += PHILOX_W0;
            k[1] += PHILOX_W1;
        }
        philox_round(c, k);
    }
    out[0] = c[0];
    out[1] = c[1];
    out[2] = c[2];
    out[3] = c[3];
}

/* The four words for element i of the stream (seed, a, b):
 * key = seed as two 32-bit words, counter = {i lo, i hi, a, b}. */
static inline void philox_words(uint64_t seed, uint32_t a, uint32_t b, uint64_t i, uint32_t w[4]) {
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    const uint32_t ctr[4] = {(uint32_t)i, (uint32_t)(i >> 32), a, b};
    rm_philox4x32(key, ctr, w);
}

/* 24 bits is all a float mantissa holds: (w >> 8) * 2^-24 is exact and lies
 * in [0, 1), with 1.0 unreachable (rounding 32 bits could give 1.0f). */
#define TWO_POW_M24 (1.0f / 16777216.0f)

float rm_philox_uniform(uint64_t seed, uint32_t a, uint32_t b, uint64_t i) {
    uint32_t w[4];
    philox_words(seed, a, b, i, w);
    return (float)(w[0] >> 8) * TWO_POW_M24;
}

/* Box-Muller: for u1 in (0,1] and u2 in [0,1), sqrt(-2 ln u1) cos(2 pi u2)
 * is standard normal. u1 is shifted by one step so log(0) cannot happen. */
float rm_philox_normal(uint64_t seed, uint32_t a, uint32_t b, uint64_t i) {
    uint32_t w[4];
    philox_words(seed, a, b, i, w);
    double u1 = ((double)(w[0] >> 8) + 1.0) * (1.0 / 16777216.0); /* (0, 1] */
    double u2 = (double)(w[1] >> 8) * (1.0 / 16777216.0);         /* [0, 1) */
    const double two_pi = 6.283185307179586476925;
    return (float)(sqrt(-2.0 * log(u1)) * cos(two_pi * u2));
}
