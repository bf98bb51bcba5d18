/* convert_stats.h - classifying one converted element, shared by every path's
 * scalar tail and the scalar kernels. Not installed. */
#ifndef MIXPREC_CONVERT_STATS_H
#define MIXPREC_CONVERT_STATS_H

#include "internal.h"

/* The fp32 bits of the magnitude code a (sign cleared) of a format with E
 * exponent and M mantissa bits (bias 2^(E-1) - 1), for a finite code: exact,
 * on the integers (a subnormal of a narrow format is normal in fp32). */
static inline uint32_t mp_code_f32_bits(uint32_t a, int E, int M) {
    if (E == 8) return a << (23 - M); /* fp32, bf16: the same exponent field */
    const uint32_t e = a >> M;
    uint32_t m = a & ((1u << M) - 1);
    const int bias = (1 << (E - 1)) - 1;
    if (e) return (uint32_t)((int)e + 127 - bias) << 23 | m << (23 - M);
    if (!m) return 0;
    int s = 0; /* m * 2^(1 - bias - M): normalize the leading one to bit M */
    for (; !(m & (1u << M)); s++) m <<= 1;
    return (uint32_t)(127 + 1 - bias - s) << 23 | (m & ((1u << M) - 1)) << (23 - M);
}

/* Adds one element to st: x is the input as fp32 bits (exact for any source),
 * y the result in a destination format with E exponent and M mantissa bits;
 * has_inf = 0 for E4M3, whose only non-finite code is S.1111.111. */
static inline void mp_stats_one(mp_convert_stats *st, uint32_t x, uint32_t y, int E, int M, int has_inf) {
    const uint32_t ax = x & 0x7fffffffu;
    const uint32_t ay = y & ((1u << (E + M)) - 1), mmask = (1u << M) - 1;
    const int x_nan = ax > 0x7f800000u, x_finite = ax < 0x7f800000u;
    const int y_nonfinite = (ay >> M) == (1u << E) - 1 && (has_inf || (ay & mmask) == mmask);
    st->nan += (uint64_t)x_nan;
    st->underflow += (uint64_t)(x_finite && ax != 0 && ay == 0);
    st->subnormal += (uint64_t)(ay != 0 && ay <= mmask);
    st->overflow += (uint64_t)(x_finite && y_nonfinite);
    if (!y_nonfinite) mp_stats_amax(st, mp_code_f32_bits(ay, E, M));
}

#endif
