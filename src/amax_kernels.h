/* amax_kernels.h - the largest finite magnitude of a chunk, on the bits: a
 * magnitude's bit pattern (sign cleared) is ordered as its value, and
 * infinities and NaNs are the patterns from the exponent's all-ones code up,
 * so the kernels are an integer mask, compare and max that compilers
 * vectorize. Built once per CPU path (convert.c; src/cpu/amax_avx2.c). */
#ifndef MP_AMAX_KERNELS_H
#define MP_AMAX_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* the largest magnitude code below inf (0x7c00 for fp16, 0x7f80 for bf16) */
static uint16_t k_amax16(const uint16_t *h, size_t n, uint16_t inf) {
    uint16_t m = 0;
    for (size_t i = 0; i < n; i++) {
        const uint16_t a = h[i] & 0x7fff, keep = (uint16_t) - (uint16_t)(a < inf); /* all ones for a finite value */
        m = (uint16_t)(a & keep) > m ? (uint16_t)(a & keep) : m;
    }
    return m;
}

/* the same for fp32 bit patterns (x read as uint32) */
static uint32_t k_amax32(const uint32_t *x, size_t n) {
    uint32_t m = 0;
    for (size_t i = 0; i < n; i++) {
        const uint32_t a = x[i] & 0x7fffffffu, keep = 0u - (uint32_t)(a < 0x7f800000u);
        m = (a & keep) > m ? (a & keep) : m;
    }
    return m;
}

/* The counts of an fp32 -> fp32 store of n < 2^32 fp32 bit patterns (count.c's
 * mp_stats_f32): the subnormals and NaNs added to *subnormal and *nan, the
 * largest finite magnitude returned. On signed integers (a magnitude's bits
 * are below 2^31): gcc 12 vectorizes that at -O3 (src/cpu/amax_avx2.c), not
 * the unsigned forms of the same tests. */
static uint32_t k_stats32(const uint32_t *x, size_t n, uint32_t *subnormal, uint32_t *nan) {
    int32_t m = 0;
    uint32_t sub = 0, q = 0;
    for (size_t i = 0; i < n; i++) {
        const int32_t a = (int32_t)(x[i] & 0x7fffffffu), fin = a < 0x7f800000 ? a : 0;
        sub += (uint32_t)((a > 0) & (a < 0x800000));
        q += (uint32_t)(a > 0x7f800000);
        m = fin > m ? fin : m;
    }
    *subnormal += sub, *nan += q;
    return (uint32_t)m;
}

#define MP_AMAX_KERNELS \
    { k_amax16, k_amax32, k_stats32 }

#endif
