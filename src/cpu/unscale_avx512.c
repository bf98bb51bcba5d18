/* unscale_avx512.c - fused unscale + inf/NaN check with AVX-512 (in place).
 * Same bits as the scalar kernels in scaler.c: fp32 multiply, and for half
 * buffers the exact conversions (vcvtph2ps/vcvtps2ph, integer bf16 rounding). */
#include "convert_avx512.h"

static int unscale_f32(float *x, // (n,) fp32, in place
                       size_t n, float inv) {
    const __m512 vinv = _mm512_set1_ps(inv);
    const __m512i expmask = _mm512_set1_epi32(0x7f800000);
    __mmask16 bad = 0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512 a = _mm512_loadu_ps(x + i), b = _mm512_loadu_ps(x + i + 16);
        bad |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(a), expmask), expmask);
        bad |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(b), expmask), expmask);
        _mm512_storeu_ps(x + i, _mm512_mul_ps(a, vinv));
        _mm512_storeu_ps(x + i + 16, _mm512_mul_ps(b, vinv));
    }
    for (; i < n; i += 16) {
        const __mmask16 k = mp_tail16(n - i);
        const __m512 a = _mm512_maskz_loadu_ps(k, x + i);
        bad |= _mm512_mask_cmpeq_epi32_mask(k, _mm512_and_si512(_mm512_castps_si512(a), expmask), expmask);
        _mm512_mask_storeu_ps(x + i, k, _mm512_mul_ps(a, vinv));
    }
    return bad != 0;
}

/* 16 fp16 or bf16 codes widened exactly, multiplied in fp32, rounded back */
static inline __m256i scale16(__m256i h, __m512 vinv, const int f16) {
    if (f16)
        return _mm512_cvtps_ph(_mm512_mul_ps(_mm512_cvtph_ps(h), vinv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 v = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtepi32_epi16(mp_bf16_round16(_mm512_castps_si512(_mm512_mul_ps(v, vinv))));
}

/* fp16 or bf16 in place. Masked loads and stores only for the tail: a masked
 * store is several times slower than a plain one on AMD's Zen 4 and 5. */
static inline int unscale16(uint16_t *x, size_t n, float inv, const int f16) {
    const __m512 vinv = _mm512_set1_ps(inv);
    const __m256i expmask = _mm256_set1_epi16(f16 ? 0x7c00 : 0x7f80);
    __mmask16 bad = 0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256i h = _mm256_loadu_si256((const __m256i *)(x + i));
        bad |= _mm256_cmpeq_epi16_mask(_mm256_and_si256(h, expmask), expmask);
        _mm256_storeu_si256((__m256i *)(x + i), scale16(h, vinv, f16));
    }
    if (i < n) {
        const __mmask16 k = mp_tail16(n - i);
        const __m256i h = _mm256_maskz_loadu_epi16(k, x + i);
        bad |= _mm256_mask_cmpeq_epi16_mask(k, _mm256_and_si256(h, expmask), expmask);
        _mm256_mask_storeu_epi16(x + i, k, scale16(h, vinv, f16));
    }
    return bad != 0;
}

static int unscale_f16(uint16_t *x, // (n,) fp16, in place
                       size_t n, float inv) {
    return unscale16(x, n, inv, 1);
}

static int unscale_bf16(uint16_t *x, // (n,) bf16, in place
                        size_t n, float inv) {
    return unscale16(x, n, inv, 0);
}

/* The check alone: 128 bytes per iteration, the masks or-ed, tested once per 4 KiB. */
static int check32(const uint32_t *x, size_t n) {
    const __m512i e = _mm512_set1_epi32(0x7f800000);
    size_t i = 0;
    while (i + 32 <= n) {
        __mmask16 bad = 0;
        for (const size_t end = n - i < 1024 ? i + (n - i) / 32 * 32 : i + 1024; i < end; i += 32) {
            bad |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_loadu_si512(x + i), e), e);
            bad |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_loadu_si512(x + i + 16), e), e);
        }
        if (bad) return 1;
    }
    for (; i < n; i += 16) {
        const __mmask16 k = mp_tail16(n - i);
        if (_mm512_mask_cmpeq_epi32_mask(k, _mm512_and_si512(_mm512_maskz_loadu_epi32(k, x + i), e), e)) return 1;
    }
    return 0;
}

static int check16(const uint16_t *x, size_t n, uint16_t expmask) {
    const __m512i e = _mm512_set1_epi16((short)expmask);
    size_t i = 0;
    while (i + 64 <= n) {
        __mmask32 bad = 0;
        for (const size_t end = n - i < 2048 ? i + (n - i) / 64 * 64 : i + 2048; i < end; i += 64) {
            bad |= _mm512_cmpeq_epi16_mask(_mm512_and_si512(_mm512_loadu_si512(x + i), e), e);
            bad |= _mm512_cmpeq_epi16_mask(_mm512_and_si512(_mm512_loadu_si512(x + i + 32), e), e);
        }
        if (bad) return 1;
    }
    for (; i < n; i += 32) {
        const __mmask32 k = n - i >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << (n - i)) - 1);
        if (_mm512_mask_cmpeq_epi16_mask(k, _mm512_and_si512(_mm512_maskz_loadu_epi16(k, x + i), e), e)) return 1;
    }
    return 0;
}

const mp_unscale_kernels mp_unscale_avx512 = {unscale_f32, unscale_f16, unscale_bf16, check32, check16};
