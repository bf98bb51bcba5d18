/* convert_avx2.c - bulk conversions with AVX2 + F16C (8 lanes). Built with
 * -mavx2 -mfma -mf16c; only called when cpu.c found those features.
 *
 * vcvtps2ph / vcvtph2ps round to nearest even, keep subnormals and quiet NaNs
 * exactly as the scalar functions do (checked on all 2^32 inputs by the tests).
 * bf16 rounding is done on the integer bits (convert_avx2.h). Stats come from
 * the range of the result codes per chunk of values, and where it shows
 * anything but normal finite codes from compares on the input and output
 * bits (mp_count8). Tails use the scalar kernels.
 */
#include <immintrin.h>

#include "convert_avx2.h"

enum { CHUNK = 512 }; /* values counted by their codes' range at a time (mp_range256) */

static inline void f32_to_f16_body(uint16_t *dst,    // (n,) fp16
                                   const float *src, // (n,) fp32
                                   size_t n, mp_convert_stats *st, const int stats) {
    mp_counts256 c = MP_COUNTS256_0;
    const __m256i m = _mm256_set1_epi32(0x7fff);
    size_t i = 0;
    while (i + 8 <= n) {
        const size_t i0 = i, end = n - i > CHUNK ? i + CHUNK : n;
        mp_range256 rg = mp_range0();
        for (; i + 8 <= end; i += 8) {
            const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            _mm_storeu_si128((__m128i *)(dst + i), h);
            if (stats) mp_range_add(&rg, _mm256_and_si256(_mm256_cvtepu16_epi32(h), m));
        }
        if (stats && !mp_range_clean(&rg, &c, 0x400, 0x7c00))
            for (size_t q = i0; q < i; q += 8) {
                const __m256 x = _mm256_loadu_ps(src + q);
                const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                mp_count8(&c, _mm256_castps_si256(x), _mm256_and_si256(_mm256_cvtepu16_epi32(h), m), 0x400, 0x7c00);
            }
    }
    if (stats) mp_counts256_add(st, &c, 5, 10);
    mp_convert_scalar.f32_to_f16(dst + i, src + i, n - i, stats ? st : NULL, 0);
}

/* stream: AVX2's stores here are plain */
static void f32_to_f16(uint16_t *dst, const float *src, size_t n, mp_convert_stats *st, int stream) {
    (void)stream;
    if (st) f32_to_f16_body(dst, src, n, st, 1);
    else f32_to_f16_body(dst, src, n, NULL, 0);
}

static void f16_to_f32(float *dst, const uint16_t *src, size_t n, mp_convert_stats *st) {
    size_t i = 0;
    uint64_t nan = 0;
    __m128i am = _mm_setzero_si128(); /* the largest finite magnitude code per lane */
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm_loadu_si128((const __m128i *)(src + i));
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
        if (st) {
            const __m128i ah = _mm_and_si128(h, _mm_set1_epi16(0x7fff));
            const __m128i isnan = _mm_cmpgt_epi16(ah, _mm_set1_epi16(0x7c00));
            nan += (uint64_t)__builtin_popcount((unsigned)_mm_movemask_epi8(isnan)) / 2;
            const __m128i fin = _mm_cmpgt_epi16(_mm_set1_epi16(0x7c00), ah);
            am = _mm_max_epu16(am, _mm_and_si128(ah, fin));
        }
    }
    if (st) { /* fp16 values are never fp32 subnormals */
        st->nan += nan;
        am = _mm_max_epu16(am, _mm_shuffle_epi32(am, 0x4e));
        am = _mm_max_epu16(am, _mm_shuffle_epi32(am, 0xb1));
        am = _mm_max_epu16(am, _mm_srli_epi32(am, 16));
        mp_stats_amax(st, mp_code_f32_bits((uint32_t)_mm_extract_epi16(am, 0), 5, 10));
    }
    mp_convert_scalar.f16_to_f32(dst + i, src + i, n - i, st);
}

static inline void f32_to_bf16_body(uint16_t *dst, const float *src, size_t n, mp_convert_stats *st, const int stats) {
    mp_counts256 c = MP_COUNTS256_0;
    const __m256i m = _mm256_set1_epi32(0x7fff);
    size_t i = 0;
    while (i + 8 <= n) {
        const size_t i0 = i, end = n - i > CHUNK ? i + CHUNK : n;
        mp_range256 rg = mp_range0();
        for (; i + 16 <= end; i += 16) {
            const __m256i r0 = mp_bf16_round8(_mm256_loadu_si256((const __m256i *)(src + i)));
            const __m256i r1 = mp_bf16_round8(_mm256_loadu_si256((const __m256i *)(src + i + 8)));
            _mm256_storeu_si256((__m256i *)(dst + i), _mm256_permute4x64_epi64(_mm256_packus_epi32(r0, r1), 0xd8));
            if (stats) mp_range_add(&rg, _mm256_and_si256(r0, m)), mp_range_add(&rg, _mm256_and_si256(r1, m));
        }
        if (i + 8 <= end) { /* the rows of a causal softmax end anywhere */
            const __m256i r = mp_bf16_round8(_mm256_loadu_si256((const __m256i *)(src + i)));
            _mm_storeu_si128((__m128i *)(dst + i),
                             _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)));
            if (stats) mp_range_add(&rg, _mm256_and_si256(r, m));
            i += 8;
        }
        if (stats && !mp_range_clean(&rg, &c, 0x80, 0x7f80))
            for (size_t q = i0; q < i; q += 8) {
                const __m256i x = _mm256_loadu_si256((const __m256i *)(src + q));
                mp_count8(&c, x, _mm256_and_si256(mp_bf16_round8(x), m), 0x80, 0x7f80);
            }
    }
    if (stats) mp_counts256_add(st, &c, 8, 7);
    mp_convert_scalar.f32_to_bf16(dst + i, src + i, n - i, stats ? st : NULL, 0);
}

static void f32_to_bf16(uint16_t *dst, const float *src, size_t n, mp_convert_stats *st, int stream) {
    (void)stream;
    if (st) f32_to_bf16_body(dst, src, n, st, 1);
    else f32_to_bf16_body(dst, src, n, NULL, 0);
}

static void bf16_to_f32(float *dst, const uint16_t *src, size_t n, mp_convert_stats *st) {
    mp_counts256 c = MP_COUNTS256_0;
    const __m256i abs = _mm256_set1_epi32(0x7fffffff);
    size_t i = 0;
    while (i + 8 <= n) {
        const size_t i0 = i, end = n - i > CHUNK ? i + CHUNK : n;
        mp_range256 rg = mp_range0();
        for (; i + 8 <= end; i += 8) {
            const __m256i y = mp_bf16_widen8(_mm_loadu_si128((const __m128i *)(src + i)));
            _mm256_storeu_si256((__m256i *)(dst + i), y);
            if (st) mp_range_add(&rg, _mm256_and_si256(y, abs));
        }
        if (st && !mp_range_clean(&rg, &c, 0x800000, 0x7f800000))
            for (size_t q = i0; q < i; q += 8) {
                const __m256i y = _mm256_loadu_si256((const __m256i *)(dst + q));
                mp_count8(&c, y, _mm256_and_si256(y, abs), 0x800000, 0x7f800000);
            }
    }
    if (st) mp_counts256_add(st, &c, 8, 23);
    mp_convert_scalar.bf16_to_f32(dst + i, src + i, n - i, st);
}

const mp_convert_kernels mp_convert_avx2 = {f32_to_f16, f16_to_f32, f32_to_bf16, bf16_to_f32};
