/* internal.h - helpers shared by mixprec's own sources; not installed. */
#ifndef MIXPREC_INTERNAL_H
#define MIXPREC_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "mixprec/mixprec.h"

#if defined(__GNUC__)
#define MP_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define MP_PRINTF(a, b)
#endif

/* Records a formatted message for mp_last_error() and returns `s`. */
mp_status mp_error(mp_status s, const char *fmt, ...) MP_PRINTF(2, 3);

static inline uint32_t mp_f32_bits(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static inline float mp_bits_f32(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }

/* Bulk conversion kernels of one CPU path. Each converts n elements and, when
 * st is not NULL, adds exact statistics. NULL entries fall back to scalar. */
typedef struct mp_convert_kernels {
    void (*f32_to_f16)(uint16_t *dst, const float *src, size_t n, mp_convert_stats *st);
    void (*f16_to_f32)(float *dst, const uint16_t *src, size_t n, mp_convert_stats *st);
    void (*f32_to_bf16)(uint16_t *dst, const float *src, size_t n, mp_convert_stats *st);
    void (*bf16_to_f32)(float *dst, const uint16_t *src, size_t n, mp_convert_stats *st);
} mp_convert_kernels;

extern const mp_convert_kernels mp_convert_scalar;
#if defined(__x86_64__) || defined(_M_X64)
#define MP_X86 1
extern const mp_convert_kernels mp_convert_avx2;
extern const mp_convert_kernels mp_convert_avx512;
extern const mp_convert_kernels mp_convert_avx512bf16;
#endif

#endif
