/* convert_avx2.c - bulk conversions with AVX2 + F16C (8 lanes). Built with
 * -mavx2 -mfma -mf16c; only called when cpu.c found those features.
 *
 * vcvtps2ph / vcvtph2ps round to nearest even, keep subnormals and quiet NaNs
 * exactly as the scalar functions do (checked on all 2^32 inputs by the tests).
 * bf16 rounding is done on the integer bits. Stats come from compares on the
 * input and output bits, counted with popcount. Tails use the scalar kernels.
 */
#include <immintrin.h>

#include "../convert_stats.h"

/* amax: per lane, the largest finite result magnitude code */
typedef struct {
    uint64_t under, sub, over, nan;
    __m256i amax;
} counts;
#define COUNTS0 \
    { 0, 0, 0, 0, _mm256_setzero_si256() }

/* E, M: the result format's fields (for the amax's value) */
static inline void add_counts(mp_convert_stats *st, const counts *c, int E, int M) {
    st->underflow += c->under;
    st->subnormal += c->sub;
    st->overflow += c->over;
    st->nan += c->nan;
    __m128i m = _mm_max_epu32(_mm256_castsi256_si128(c->amax), _mm256_extracti128_si256(c->amax, 1));
    m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0x4e));
    m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0xb1));
    mp_stats_amax(st, mp_code_f32_bits((uint32_t)_mm_cvtsi128_si32(m), E, M));
}

static inline int pop8(__m256i m) { return __builtin_popcount((unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(m))); }

/* x: fp32 input bits; ay: |result| widened to 32 bits; M/E: the destination's fields. */
static inline void count8(counts *c, __m256i x, __m256i ay, uint32_t min_normal_code, uint32_t inf_code) {
    const __m256i ax = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
    const __m256i inf32 = _mm256_set1_epi32(0x7f800000);
    const __m256i x_nan = _mm256_cmpgt_epi32(ax, inf32);
    const __m256i x_finite = _mm256_cmpgt_epi32(inf32, ax);
    const __m256i zero = _mm256_setzero_si256();
    const __m256i x_nz = _mm256_xor_si256(_mm256_cmpeq_epi32(ax, zero), _mm256_set1_epi32(-1));
    const __m256i y_zero = _mm256_cmpeq_epi32(ay, zero);
    const __m256i y_sub = _mm256_andnot_si256(y_zero, _mm256_cmpgt_epi32(_mm256_set1_epi32((int)min_normal_code), ay));
    const __m256i y_nonfinite = _mm256_cmpgt_epi32(ay, _mm256_set1_epi32((int)inf_code - 1));
    c->amax = _mm256_max_epu32(c->amax, _mm256_andnot_si256(y_nonfinite, ay));
    c->nan += (uint64_t)pop8(x_nan);
    c->under += (uint64_t)pop8(_mm256_and_si256(_mm256_and_si256(x_finite, x_nz), y_zero));
    c->sub += (uint64_t)pop8(y_sub);
    c->over += (uint64_t)pop8(_mm256_and_si256(x_finite, y_nonfinite));
}

static inline void f32_to_f16_body(uint16_t *dst,    // (n,) fp16
                                   const float *src, // (n,) fp32
                                   size_t n, mp_convert_stats *st, const int stats) {
    counts c = COUNTS0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(src + i);
        const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128((__m128i *)(dst + i), h);
        if (stats) {
            const __m256i ay = _mm256_and_si256(_mm256_cvtepu16_epi32(h), _mm256_set1_epi32(0x7fff));
            count8(&c, _mm256_castps_si256(x), ay, 0x400, 0x7c00);
        }
    }
    if (stats) add_counts(st, &c, 5, 10);
    mp_convert_scalar.f32_to_f16(dst + i, src + i, n - i, stats ? st : NULL);
}

static void f32_to_f16(uint16_t *dst, const float *src, size_t n, mp_convert_stats *st) {
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

/* Round-to-nearest-even of 8 fp32 bit patterns to bf16 (in the low 16 bits). */
static inline __m256i bf16_round8(__m256i x, __m256i *is_nan) {
    const __m256i ax = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
    *is_nan = _mm256_cmpgt_epi32(ax, _mm256_set1_epi32(0x7f800000));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb), 16);
    const __m256i q = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
    return _mm256_blendv_epi8(r, q, *is_nan);
}

static inline void f32_to_bf16_body(uint16_t *dst, const float *src, size_t n, mp_convert_stats *st, const int stats) {
    counts c = COUNTS0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i nan0, nan1;
        const __m256i x0 = _mm256_loadu_si256((const __m256i *)(src + i));
        const __m256i x1 = _mm256_loadu_si256((const __m256i *)(src + i + 8));
        const __m256i r0 = bf16_round8(x0, &nan0), r1 = bf16_round8(x1, &nan1);
        const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r0, r1), 0xd8);
        _mm256_storeu_si256((__m256i *)(dst + i), packed);
        if (stats) {
            const __m256i m = _mm256_set1_epi32(0x7fff);
            count8(&c, x0, _mm256_and_si256(r0, m), 0x80, 0x7f80);
            count8(&c, x1, _mm256_and_si256(r1, m), 0x80, 0x7f80);
        }
    }
    if (stats) add_counts(st, &c, 8, 7);
    mp_convert_scalar.f32_to_bf16(dst + i, src + i, n - i, stats ? st : NULL);
}

static void f32_to_bf16(uint16_t *dst, const float *src, size_t n, mp_convert_stats *st) {
    if (st) f32_to_bf16_body(dst, src, n, st, 1);
    else f32_to_bf16_body(dst, src, n, NULL, 0);
}

static void bf16_to_f32(float *dst, const uint16_t *src, size_t n, mp_convert_stats *st) {
    size_t i = 0;
    counts c = COUNTS0;
    const __m256i inf32 = _mm256_set1_epi32(0x7f800000);
    for (; i + 8 <= n; i += 8) {
        const __m256i x = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + i))), 16);
        const __m256i ax = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
        const __m256i isnan = _mm256_cmpgt_epi32(ax, inf32);
        const __m256i y = _mm256_or_si256(x, _mm256_and_si256(isnan, _mm256_set1_epi32(0x400000)));
        _mm256_storeu_si256((__m256i *)(dst + i), y);
        if (st) count8(&c, y, ax, 0x800000, 0x7f800000);
    }
    if (st) add_counts(st, &c, 8, 23);
    mp_convert_scalar.bf16_to_f32(dst + i, src + i, n - i, st);
}

const mp_convert_kernels mp_convert_avx2 = {f32_to_f16, f16_to_f32, f32_to_bf16, bf16_to_f32};
