/* convert_avx512.c - bulk conversions with AVX-512 F/BW/VL/DQ + F16C (16 lanes,
 * masked tails). Built with AVX-512 flags; only called when cpu.c found them.
 * Every result and count equals the scalar path's (tests check all 2^32 inputs). */
#include "convert_avx512.h"

static inline void f32_to_f16_body(uint16_t *dst,    // (n,) fp16
                                   const float *src, // (n,) fp32
                                   size_t n, mp_convert_stats *st, const int stats, int stream) {
    mp_counts512 c = MP_COUNTS512_0;
    for (size_t i = 0, m; i < n; i += m) {
        const __mmask16 k = mp_lanes16(dst, 2, 32, i, n, stream, &m);
        const __m512 x = _mm512_maskz_loadu_ps(k, src + i);
        const __m256i h = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        mp_store16x16(dst + i, k, h, stream);
        if (stats) {
            const __m512i ay = _mm512_and_si512(_mm512_cvtepu16_epi32(h), _mm512_set1_epi32(0x7fff));
            mp_count16(&c, k, _mm512_castps_si512(x), ay, 0x400, 0x7c00);
        }
    }
    if (stats) mp_counts512_add(st, &c, 5, 10);
}

void mp_f32_to_f16_avx512(uint16_t *dst, const float *src, size_t n, mp_convert_stats *st, int stream) {
    if (st) f32_to_f16_body(dst, src, n, st, 1, stream);
    else f32_to_f16_body(dst, src, n, NULL, 0, stream);
}

void mp_f16_to_f32_avx512(float *dst,          // (n,) fp32
                          const uint16_t *src, // (n,) fp16
                          size_t n, mp_convert_stats *st) {
    uint64_t nan = 0;
    __m512i am = _mm512_setzero_si512(); /* the largest finite result magnitude per lane */
    const int stream = n * 4 >= MP_STREAM_MIN_BYTES;
    for (size_t i = 0, m; i < n; i += m) {
        const __mmask16 k = mp_lanes16(dst, 4, 64, i, n, stream, &m);
        const __m256i h = _mm256_maskz_loadu_epi16(k, src + i);
        const __m512i y = _mm512_castps_si512(_mm512_cvtph_ps(h));
        mp_store16x32(dst + i, k, y, stream);
        if (st) {
            const __m256i ah = _mm256_and_si256(h, _mm256_set1_epi16(0x7fff));
            nan += (uint64_t)__builtin_popcount(_mm256_cmpgt_epu16_mask(ah, _mm256_set1_epi16(0x7c00)));
            const __m512i ay = _mm512_and_si512(y, _mm512_set1_epi32(0x7fffffff));
            am = _mm512_mask_max_epu32(am, k & _mm512_cmplt_epu32_mask(ay, _mm512_set1_epi32(0x7f800000)), am, ay);
        }
    }
    if (stream) _mm_sfence();
    if (st) { /* fp16 values are never fp32 subnormals */
        st->nan += nan;
        mp_stats_amax(st, _mm512_reduce_max_epu32(am));
    }
}

static inline void f32_to_bf16_body(uint16_t *dst, const float *src, size_t n, mp_convert_stats *st, const int stats,
                                    int stream) {
    mp_counts512 c = MP_COUNTS512_0;
    for (size_t i = 0, m; i < n; i += m) {
        const __mmask16 k = mp_lanes16(dst, 2, 32, i, n, stream, &m);
        const __m512i x = mp_load16x32(src + i, k);
        const __m512i r = mp_bf16_round16(x);
        mp_store16x16(dst + i, k, _mm512_cvtepi32_epi16(r), stream);
        if (stats) mp_count16(&c, k, x, _mm512_and_si512(r, _mm512_set1_epi32(0x7fff)), 0x80, 0x7f80);
    }
    if (stats) mp_counts512_add(st, &c, 8, 7);
}

static void f32_to_bf16(uint16_t *dst, const float *src, size_t n, mp_convert_stats *st, int stream) {
    if (st) f32_to_bf16_body(dst, src, n, st, 1, stream);
    else f32_to_bf16_body(dst, src, n, NULL, 0, stream);
}

void mp_bf16_to_f32_avx512(float *dst,          // (n,) fp32
                           const uint16_t *src, // (n,) bf16
                           size_t n, mp_convert_stats *st) {
    mp_counts512 c = MP_COUNTS512_0;
    const int stream = n * 4 >= MP_STREAM_MIN_BYTES;
    for (size_t i = 0, m; i < n; i += m) {
        const __mmask16 k = mp_lanes16(dst, 4, 64, i, n, stream, &m);
        const __m512i y = mp_bf16_widen16(_mm256_maskz_loadu_epi16(k, src + i));
        mp_store16x32(dst + i, k, y, stream);
        if (st) mp_count16(&c, k, y, _mm512_and_si512(y, _mm512_set1_epi32(0x7fffffff)), 0x800000, 0x7f800000);
    }
    if (stream) _mm_sfence();
    if (st) mp_counts512_add(st, &c, 8, 23);
}

const mp_convert_kernels mp_convert_avx512 = {
    mp_f32_to_f16_avx512,
    mp_f16_to_f32_avx512,
    f32_to_bf16,
    mp_bf16_to_f32_avx512,
};
