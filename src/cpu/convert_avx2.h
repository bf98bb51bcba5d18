/* convert_avx2.h - AVX2 conversion pieces shared by the conversions
 * (convert_avx2.c) and the GEMM epilogue (gemm_epilogue_avx2.c): bf16
 * rounding on the integer bits and exact counts, 8 lanes at a time. Included
 * only by files built with -mavx2 -mfma -mf16c. */
#ifndef MIXPREC_CONVERT_AVX2_H
#define MIXPREC_CONVERT_AVX2_H

#include <immintrin.h>

#include "../convert_stats.h"

/* amax: per lane, the largest finite result magnitude code */
typedef struct {
    uint64_t under, sub, over, nan;
    __m256i amax;
} mp_counts256;
#define MP_COUNTS256_0 \
    { 0, 0, 0, 0, _mm256_setzero_si256() }

/* Adds c to st; E, M: the result format's fields (for the amax's value) */
static inline void mp_counts256_add(mp_convert_stats *st, const mp_counts256 *c, int E, int M) {
    st->underflow += c->under;
    st->subnormal += c->sub;
    st->overflow += c->over;
    st->nan += c->nan;
    __m128i m = _mm_max_epu32(_mm256_castsi256_si128(c->amax), _mm256_extracti128_si256(c->amax, 1));
    m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0x4e));
    m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0xb1));
    mp_stats_amax(st, mp_code_f32_bits((uint32_t)_mm_cvtsi128_si32(m), E, M));
}

static inline int mp_pop8(__m256i m) {
    return __builtin_popcount((unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(m)));
}

/* Counts 8 lanes: x the fp32 input bits, ay the result's magnitude bits (sign
 * cleared, widened to 32); min_normal_code / inf_code the destination's
 * smallest normal and infinity magnitudes. */
static inline void mp_count8(mp_counts256 *c, __m256i x, __m256i ay, uint32_t min_normal_code, uint32_t inf_code) {
    const __m256i zero = _mm256_setzero_si256();
    const __m256i ax = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
    /* the usual vector: every result normal and finite (min_normal <= ay < inf, unsigned through the sign
     * bit), or a zero from a zero; those count nothing but the amax */
    const __m256i flip = _mm256_set1_epi32(INT32_MIN);
    const __m256i y_normal =
        _mm256_cmpgt_epi32(_mm256_set1_epi32((int)((inf_code - min_normal_code) ^ 0x80000000u)),
                           _mm256_xor_si256(_mm256_sub_epi32(ay, _mm256_set1_epi32((int)min_normal_code)), flip));
    const __m256i x_zero = _mm256_cmpeq_epi32(ax, zero);
    if (_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_or_si256(y_normal, x_zero))) == 0xff) {
        c->amax = _mm256_max_epu32(c->amax, ay); /* a zero's ay is 0 */
        return;
    }
    const __m256i inf32 = _mm256_set1_epi32(0x7f800000);
    const __m256i x_nan = _mm256_cmpgt_epi32(ax, inf32);
    const __m256i x_finite = _mm256_cmpgt_epi32(inf32, ax);
    const __m256i y_zero = _mm256_cmpeq_epi32(ay, zero);
    const __m256i y_sub = _mm256_andnot_si256(y_zero, _mm256_cmpgt_epi32(_mm256_set1_epi32((int)min_normal_code), ay));
    const __m256i y_nonfinite = _mm256_cmpgt_epi32(ay, _mm256_set1_epi32((int)inf_code - 1));
    c->amax = _mm256_max_epu32(c->amax, _mm256_andnot_si256(y_nonfinite, ay));
    c->nan += (uint64_t)mp_pop8(x_nan);
    c->under += (uint64_t)mp_pop8(_mm256_andnot_si256(x_zero, _mm256_and_si256(x_finite, y_zero)));
    c->sub += (uint64_t)mp_pop8(y_sub);
    c->over += (uint64_t)mp_pop8(_mm256_and_si256(x_finite, y_nonfinite));
}

/* Counting on the result codes alone: the per-lane smallest and largest
 * magnitude code of a chunk of values (2 instructions a vector). A chunk
 * whose codes are all normal and finite, the usual case, counts nothing but
 * its amax (mp_range_clean); any other chunk is counted again value by value
 * (mp_count8), since a zero code may be a zero or an underflow. */
typedef struct {
    __m256i lo, hi;
} mp_range256;

static inline mp_range256 mp_range0(void) {
    mp_range256 r = {_mm256_set1_epi32(-1), _mm256_setzero_si256()};
    return r;
}

static inline void mp_range_add(mp_range256 *r, __m256i ay) {
    r->lo = _mm256_min_epu32(r->lo, ay);
    r->hi = _mm256_max_epu32(r->hi, ay);
}

/* 1, and the chunk's amax added to c, when every code of r was normal and finite (codes below 2^31) */
static inline int mp_range_clean(const mp_range256 *r, mp_counts256 *c, uint32_t min_normal_code, uint32_t inf_code) {
    const __m256i rare = _mm256_or_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32((int)min_normal_code), r->lo),
                                         _mm256_cmpgt_epi32(r->hi, _mm256_set1_epi32((int)inf_code - 1)));
    if (!_mm256_testz_si256(rare, rare)) return 0;
    c->amax = _mm256_max_epu32(c->amax, r->hi);
    return 1;
}

/* Round-to-nearest-even of 8 fp32 bit patterns to bf16 (in the low 16 bits), NaN quieted. */
static inline __m256i mp_bf16_round8(__m256i x) {
    const __m256i ax = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
    const __m256i is_nan = _mm256_cmpgt_epi32(ax, _mm256_set1_epi32(0x7f800000));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb), 16);
    const __m256i q = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
    return _mm256_blendv_epi8(r, q, is_nan);
}

/* 8 bf16 codes widened to fp32 bits exactly, a NaN quieted (as mp_bf16_to_f32) */
static inline __m256i mp_bf16_widen8(__m128i h) {
    const __m256i x = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    const __m256i ax = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
    const __m256i isnan = _mm256_cmpgt_epi32(ax, _mm256_set1_epi32(0x7f800000));
    return _mm256_or_si256(x, _mm256_and_si256(isnan, _mm256_set1_epi32(0x400000)));
}

#endif
