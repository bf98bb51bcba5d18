/* convert_avx512.h - AVX-512 conversion pieces shared by the AVX-512 and
 * AVX512_BF16 paths. Included only by files built with AVX-512 flags. */
#ifndef MIXPREC_CONVERT_AVX512_H
#define MIXPREC_CONVERT_AVX512_H

#include <immintrin.h>

#include "../convert_stats.h"

/* amax: per lane, the largest finite result magnitude code */
typedef struct {
    uint64_t under, sub, over, nan;
    __m512i amax;
} mp_counts512;
#define MP_COUNTS512_0 \
    { 0, 0, 0, 0, _mm512_setzero_si512() }

/* Adds c to st; E, M: the result format's fields, for the amax's value (E = 0:
 * the amax is not added) */
static inline void mp_counts512_add(mp_convert_stats *st, const mp_counts512 *c, int E, int M) {
    st->underflow += c->under;
    st->subnormal += c->sub;
    st->overflow += c->over;
    st->nan += c->nan;
    if (E) mp_stats_amax(st, mp_code_f32_bits(_mm512_reduce_max_epu32(c->amax), E, M));
}

/* Counts lanes of `valid`: x is the fp32 input bits, ay the result's magnitude
 * bits (sign cleared, widened to 32); min_normal_code / inf_code are the
 * destination's smallest normal and infinity magnitudes. */
static inline void mp_count16(mp_counts512 *c, __mmask16 valid, __m512i x, __m512i ay, uint32_t min_normal_code,
                              uint32_t inf_code) {
    /* the usual vector: every result normal and finite, or a zero from a zero, which count nothing but the amax */
    const __mmask16 y_normal = _mm512_cmplt_epu32_mask(_mm512_sub_epi32(ay, _mm512_set1_epi32((int)min_normal_code)),
                                                       _mm512_set1_epi32((int)(inf_code - min_normal_code)));
    const __mmask16 x_zero = _mm512_testn_epi32_mask(x, _mm512_set1_epi32(0x7fffffff));
    if (!(valid & (__mmask16) ~(y_normal | x_zero))) {
        c->amax = _mm512_mask_max_epu32(c->amax, valid & y_normal, c->amax, ay);
        return;
    }
    const __m512i ax = _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff));
    const __m512i inf32 = _mm512_set1_epi32(0x7f800000);
    const __mmask16 x_nan = _mm512_mask_cmpgt_epu32_mask(valid, ax, inf32);
    const __mmask16 x_finite_nz =
        _mm512_mask_cmplt_epu32_mask(valid, _mm512_sub_epi32(ax, _mm512_set1_epi32(1)), _mm512_set1_epi32(0x7f7fffff));
    const __mmask16 x_finite = _mm512_mask_cmplt_epu32_mask(valid, ax, inf32);
    const __mmask16 y_zero = _mm512_cmpeq_epu32_mask(ay, _mm512_setzero_si512());
    const __mmask16 y_sub = _mm512_mask_cmplt_epu32_mask(valid & ~y_zero, ay, _mm512_set1_epi32((int)min_normal_code));
    const __mmask16 y_nonfinite = _mm512_cmpge_epu32_mask(ay, _mm512_set1_epi32((int)inf_code));
    c->amax = _mm512_mask_max_epu32(c->amax, valid & (__mmask16)~y_nonfinite, c->amax, ay);
    c->nan += (uint64_t)__builtin_popcount(x_nan);
    c->under += (uint64_t)__builtin_popcount(x_finite_nz & y_zero);
    c->sub += (uint64_t)__builtin_popcount(y_sub);
    c->over += (uint64_t)__builtin_popcount(x_finite & y_nonfinite);
}

static inline __mmask16 mp_tail16(size_t left) {
    return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
}

/* The lanes of the iteration at element i (sets *m to their count): 16, or
 * what is left at the end. When streaming, the first iteration stops where
 * the destination (elements of esize bytes) reaches `align`, so that the
 * full iterations after it can use aligned non-temporal stores. */
static inline __mmask16 mp_lanes16(const void *dst, size_t esize, size_t align, size_t i, size_t n, int stream,
                                   size_t *m) {
    size_t k = n - i < 16 ? n - i : 16;
    if (stream && i == 0) {
        const size_t mis = (uintptr_t)dst & (align - 1);
        if (mis && mis % esize == 0 && (align - mis) / esize < k) k = (align - mis) / esize;
    }
    *m = k;
    return mp_tail16(k);
}

/* 16 lanes of 32 bits from p: a plain load for a full iteration, masked only
 * for a tail. (A masked load, even with every lane on, streams from memory
 * about 4x slower on Zen 4/5: 8.3 ms against 2.0 for fp32 -> bf16 of 64 MiB on
 * one thread; in cache both run alike.) */
static inline __m512i mp_load16x32(const void *p, __mmask16 k) {
    return k == 0xffff ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi32(k, p);
}

/* 16 bf16 codes widened to fp32 bit patterns, NaN quieted (as mp_bf16_to_f32). */
static inline __m512i mp_bf16_widen16(__m256i h) {
    const __m512i x = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
    const __mmask16 is_nan =
        _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    return _mm512_mask_or_epi32(x, is_nan, x, _mm512_set1_epi32(0x400000));
}

/* Round-to-nearest-even of 16 fp32 bit patterns to bf16 (low 16 bits of each lane),
 * NaN quieted: the integer form of mp_f32_to_bf16. */
static inline __m512i mp_bf16_round16(__m512i x) {
    const __m512i ax = _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff));
    const __mmask16 is_nan = _mm512_cmpgt_epu32_mask(ax, _mm512_set1_epi32(0x7f800000));
    const __m512i hi = _mm512_srli_epi32(x, 16);
    const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
    const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb), 16);
    return _mm512_mask_or_epi32(r, is_nan, hi, _mm512_set1_epi32(0x40));
}

/* mp_bf16_round16's codes, 16 bits each, by AVX512_BF16's vcvtneps2bf16 (for
 * the files built with it): it rounds to nearest even and quiets NaN alike,
 * but reads fp32 subnormal inputs as zero whatever MXCSR says; those lanes
 * (rare; one test finds them) are redone with the integer rounding, so every
 * input gives the same code. */
static inline __m256i mp_bf16_round16_cvt(__m512i x) {
    const __m256i h = (__m256i)_mm512_cvtneps_pbh(_mm512_castsi512_ps(x));
    const __mmask16 denormal = _mm512_testn_epi32_mask(x, _mm512_set1_epi32(0x7f800000)) &
                               _mm512_test_epi32_mask(x, _mm512_set1_epi32(0x007fffff));
    return denormal ? _mm256_mask_mov_epi16(h, denormal, _mm512_cvtepi32_epi16(mp_bf16_round16(x))) : h;
}

/* 16 fp16 or bf16 codes at p (lanes off k read 0) as exact fp32, NaN quieted as mp_convert */
static inline __m512 mp_half_load16(int f16, const uint16_t *p, __mmask16 k) {
    const __m256i h = _mm256_maskz_loadu_epi16(k, p);
    return f16 ? _mm512_cvtph_ps(h) : _mm512_castsi512_ps(mp_bf16_widen16(h));
}

/* the fp32 values of fp16 or bf16 codes from a rounding below (their NaNs are already quiet) */
static inline __m512 mp_half_value16(int f16, __m256i r) {
    return f16 ? _mm512_cvtph_ps(r) : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(r), 16));
}

/* The counts of rounding the lanes k of v to the fp16 or bf16 codes r */
static inline void mp_half_count16(mp_counts512 *c, int f16, __mmask16 k, __m512 v, __m256i r) {
    mp_count16(c, k, _mm512_castps_si512(v), _mm512_and_si512(_mm512_cvtepu16_epi32(r), _mm512_set1_epi32(0x7fff)),
               f16 ? 0x400 : 0x80, f16 ? 0x7c00 : 0x7f80);
}

/* v rounded to fp16 or bf16 codes (mp_convert's), counted into c where stats */
static inline __m256i mp_half_round16(int f16, __m512 v, __mmask16 k, mp_counts512 *c, int stats) {
    const __m256i r = f16 ? _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
                          : _mm512_cvtepi32_epi16(mp_bf16_round16(_mm512_castps_si512(v)));
    if (stats) mp_half_count16(c, f16, k, v, r);
    return r;
}

/* Stores 16 results of 16 bits: streaming when asked and possible, masked for tails. */
static inline void mp_store16x16(uint16_t *p, __mmask16 k, __m256i v, int stream) {
    if (stream && k == 0xffff && ((uintptr_t)p & 31) == 0) _mm256_stream_si256((__m256i *)p, v);
    else _mm256_mask_storeu_epi16(p, k, v);
}

/* Stores 16 results of 32 bits likewise. */
static inline void mp_store16x32(void *p, __mmask16 k, __m512i v, int stream) {
    if (stream && k == 0xffff && ((uintptr_t)p & 63) == 0) _mm512_stream_si512(p, v);
    else _mm512_mask_storeu_epi32(p, k, v);
}

void mp_f32_to_f16_avx512(uint16_t *dst, const float *src, size_t n, mp_convert_stats *st, int stream);
void mp_f16_to_f32_avx512(float *dst, const uint16_t *src, size_t n, mp_convert_stats *st);
void mp_bf16_to_f32_avx512(float *dst, const uint16_t *src, size_t n, mp_convert_stats *st);

#endif
