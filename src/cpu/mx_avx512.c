/* mx_avx512.c - MX block quantization with AVX-512: the bits and counts of
 * the scalar reference in mx.c, computed on fp32 bit patterns with integer
 * instructions only (one exact int -> float conversion aside), so that FTZ,
 * DAZ and the rounding mode change nothing. A block is two vectors of 16. */
#include <immintrin.h>

#include "../internal.h"

typedef struct {
    int M, bias, emax; /* mantissa bits, exponent bias, floor(log2(max)) */
    int maxcode, nan;  /* the largest finite magnitude code; the positive NaN code */
} fmt;

static inline fmt format_of(mp_dtype elem) {
    if (elem == MP_E4M3) return (fmt){3, 7, 8, 0x7e, 0x7f};
    return (fmt){2, 15, 15, 0x7b, 0x7e};
}

/* The scale rules on the amax bits a (finite, sign clear).
 * FLOOR: the exponent field minus emax, at least 0.
 * RCEIL: d = fl32(amax * fl32(1/max)) with max = 1.75 * 2^emax for both
 * formats; fl32(1/max) = (1/max)(1 + 3 * 2^-26), too close to move d across a
 * power of two: for a normal d, d > 2^(field - 127 - emax) exactly when amax's
 * mantissa is above 1.75's (0x600000), so s = field - emax + (mantissa >
 * 0x600000). Where d is an fp32 subnormal it rounds on the coarser grid of
 * 2^-149, and amax = 1.75 * 2^(emax - 127) * (1 + 2^-23) still gives
 * d = 2^-127: s = 0 up to that amax. The test sweeps this against mx.c's
 * literal emulation of the product. */
static inline int scale_of(uint32_t a, int emax, int rceil) {
    int s = (int)(a >> 23) - emax;
    if (rceil) {
        if (a <= (((uint32_t)emax << 23) | 0x600001u)) return 0;
        s += (a & 0x7fffffu) > 0x600000u;
    }
    return s < 0 ? 0 : s;
}

static void scales_avx512(uint8_t *s,           // (n,) E8M0
                          const uint32_t *amax, // (n,) fp32 bits, finite, sign clear
                          size_t n, mp_dtype elem, mp_mx_rule rule) {
    const fmt F = format_of(elem);
    for (size_t i = 0; i < n; i++) s[i] = (uint8_t)scale_of(amax[i], F.emax, rule == MP_MX_RCEIL);
}

/* 16 fp32 values (bits x, magnitudes a) of a finite block -> element codes in
 * 32-bit lanes; c = bias - s moves fp32's exponent field to the element's
 * biased exponent of x * 2^(127-s). Rounds that exact product to nearest even
 * once (as good as fp32 then the element: see mx.c) and saturates; sets *sat
 * to the lanes that rounded past the max and *flush to the nonzero lanes that
 * became +-0. */
static inline __m512i elems16(__m512i x, __m512i a, __m512i c, const fmt F, __mmask16 *sat, __mmask16 *flush) {
    const __m512i one = _mm512_set1_epi32(1);
    /* fp32 subnormals: a * 2^-149 with a < 2^23, and a converts to fp32 exactly */
    const __mmask16 sub = _mm512_cmplt_epu32_mask(a, _mm512_set1_epi32(0x800000));
    const __m512i t = _mm512_mask_mov_epi32(a, sub, _mm512_castps_si512(_mm512_cvtepi32_ps(a)));
    __m512i field = _mm512_srli_epi32(t, 23);
    field = _mm512_mask_sub_epi32(field, sub, field, _mm512_set1_epi32(149));
    const __m512i e = _mm512_add_epi32(field, c); /* the element's biased exponent (may be <= 0) */
    const __m512i sig = _mm512_or_si512(_mm512_and_si512(t, _mm512_set1_epi32(0x7fffff)), _mm512_set1_epi32(0x800000));
    /* bits to drop from the 24-bit significand: 23 - M for a normal element,
     * more below its smallest normal; at 25 and more everything rounds to 0 */
    __m512i sh = _mm512_max_epi32(_mm512_sub_epi32(_mm512_set1_epi32(24 - F.M), e), _mm512_set1_epi32(23 - F.M));
    sh = _mm512_min_epi32(sh, _mm512_set1_epi32(25));
    /* nearest even: add half - 1, plus one more when the kept part is odd */
    const __m512i odd = _mm512_and_si512(_mm512_srlv_epi32(sig, sh), one);
    const __m512i half_m1 = _mm512_sub_epi32(_mm512_sllv_epi32(one, _mm512_sub_epi32(sh, one)), one);
    const __m512i q = _mm512_srlv_epi32(_mm512_add_epi32(_mm512_add_epi32(sig, half_m1), odd), sh);
    /* q holds the hidden bit of a normal element, which adds one to the
     * exponent; a carry out of q moves to the next binade */
    __m512i code = _mm512_add_epi32(_mm512_slli_epi32(_mm512_sub_epi32(_mm512_max_epi32(e, one), one), F.M), q);
    const __m512i maxc = _mm512_set1_epi32(F.maxcode);
    *sat = _mm512_cmpgt_epi32_mask(code, maxc);
    code = _mm512_min_epi32(code, maxc);
    *flush = _mm512_mask_cmpeq_epi32_mask(_mm512_test_epi32_mask(a, a), code, _mm512_setzero_si512());
    return _mm512_or_si512(code, _mm512_and_si512(_mm512_srli_epi32(x, 24), _mm512_set1_epi32(0x80)));
}

static inline void store32(uint8_t *c, __m512i y0, __m512i y1) {
    const __m256i v =
        _mm256_inserti128_si256(_mm256_castsi128_si256(_mm512_cvtepi32_epi8(y0)), _mm512_cvtepi32_epi8(y1), 1);
    _mm256_storeu_si256((__m256i *)c, v);
}

static inline void quantize_blocks(uint8_t *codes, uint8_t *scales, const float *src, size_t nb, const fmt F,
                                   const int rceil, mp_quant_stats *st, const int stats) {
    const __m512i absmask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    uint64_t nsat = 0, nflush = 0, nonfinite = 0;
    uint32_t fin = 0; /* the largest finite magnitude */
    for (size_t b = 0; b < nb; b++) {
        const __m512i x0 = _mm512_loadu_si512(src + b * 32), x1 = _mm512_loadu_si512(src + b * 32 + 16);
        const __m512i a0 = _mm512_and_si512(x0, absmask), a1 = _mm512_and_si512(x1, absmask);
        const uint32_t amax = _mm512_reduce_max_epu32(_mm512_max_epu32(a0, a1));
        if (amax >= 0x7f800000u) { /* inf or NaN: a NaN block */
            scales[b] = 0xff;
            memset(codes + b * 32, F.nan, 32);
            if (stats) {
                const __mmask16 f0 = _mm512_cmplt_epu32_mask(a0, inf), f1 = _mm512_cmplt_epu32_mask(a1, inf);
                nonfinite += (uint64_t)(32 - __builtin_popcount(f0) - __builtin_popcount(f1));
                const uint32_t m = _mm512_reduce_max_epu32(
                    _mm512_max_epu32(_mm512_maskz_mov_epi32(f0, a0), _mm512_maskz_mov_epi32(f1, a1)));
                fin = m > fin ? m : fin;
            }
            continue;
        }
        fin = amax > fin ? amax : fin;
        const int s = scale_of(amax, F.emax, rceil);
        scales[b] = (uint8_t)s;
        const __m512i c = _mm512_set1_epi32(F.bias - s);
        __mmask16 s0, s1, z0, z1;
        const __m512i y0 = elems16(x0, a0, c, F, &s0, &z0), y1 = elems16(x1, a1, c, F, &s1, &z1);
        store32(codes + b * 32, y0, y1);
        if (stats) {
            nsat += (uint64_t)(__builtin_popcount(s0) + __builtin_popcount(s1));
            nflush += (uint64_t)(__builtin_popcount(z0) + __builtin_popcount(z1));
        }
    }
    if (stats) {
        st->n += (uint64_t)nb * 32;
        st->saturated += nsat;
        st->flushed += nflush;
        st->nonfinite += nonfinite;
        mp_quant_amax(st, fin);
    }
}

static void quantize_avx512(uint8_t *codes,   // (nb * 32,) elem
                            uint8_t *scales,  // (nb,) E8M0
                            const float *src, // (nb * 32,) fp32
                            size_t nb, mp_dtype elem, mp_mx_rule rule, mp_quant_stats *st) {
    /* one specialised loop per format, rule and counting */
    const int r = rule == MP_MX_RCEIL;
    if (elem == MP_E4M3) {
        if (st) quantize_blocks(codes, scales, src, nb, format_of(MP_E4M3), r, st, 1);
        else quantize_blocks(codes, scales, src, nb, format_of(MP_E4M3), r, NULL, 0);
    } else {
        if (st) quantize_blocks(codes, scales, src, nb, format_of(MP_E5M2), r, st, 1);
        else quantize_blocks(codes, scales, src, nb, format_of(MP_E5M2), r, NULL, 0);
    }
}

/* 16 codes -> fp32 bits of code * 2^sa (sa = s - 127, s < 255). The code is
 * sig * 2^E with a small integer sig; sig converts to fp32 exactly, then the
 * exponent moves by E + sa. Below 2^-126 the result is the subnormal
 * sig << (E + sa + 149) (never below 2^-143: exact); past 2^128, inf. */
static inline __m512 deq16(__m128i c8, __m512i sa, const fmt F) {
    const __m512i c = _mm512_cvtepu8_epi32(c8);
    const __m512i mag = _mm512_and_si512(c, _mm512_set1_epi32(0x7f));
    const __m512i e = _mm512_srli_epi32(mag, F.M), m = _mm512_and_si512(mag, _mm512_set1_epi32((1 << F.M) - 1));
    const __mmask16 normal = _mm512_test_epi32_mask(e, e);
    const __m512i sig = _mm512_mask_or_epi32(m, normal, m, _mm512_set1_epi32(1 << F.M));
    const __m512i E = _mm512_add_epi32(_mm512_max_epi32(e, _mm512_set1_epi32(1)),
                                       _mm512_add_epi32(sa, _mm512_set1_epi32(-F.bias - F.M)));
    const __m512i f = _mm512_castps_si512(_mm512_cvtepi32_ps(sig));
    const __m512i field = _mm512_add_epi32(_mm512_srli_epi32(f, 23), E);
    const __mmask16 tiny = _mm512_cmple_epi32_mask(field, _mm512_setzero_si512()) | ~_mm512_test_epi32_mask(sig, sig);
    __m512i r = _mm512_mask_blend_epi32(tiny, _mm512_add_epi32(f, _mm512_slli_epi32(E, 23)),
                                        _mm512_sllv_epi32(sig, _mm512_add_epi32(E, _mm512_set1_epi32(149))));
    r = _mm512_mask_mov_epi32(r, _mm512_cmpge_epi32_mask(field, _mm512_set1_epi32(255)), _mm512_set1_epi32(0x7f800000));
    /* the format's own inf and NaN codes, as mp_e4m3_to_f32 / mp_e5m2_to_f32 give them */
    if (F.M == 3) {
        r = _mm512_mask_mov_epi32(r, _mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7f)),
                                  _mm512_set1_epi32(0x7fc00000));
    } else {
        const __mmask16 special = _mm512_cmpge_epi32_mask(mag, _mm512_set1_epi32(0x7c));
        const __m512i nan = _mm512_or_si512(_mm512_set1_epi32(0x7fc00000), _mm512_slli_epi32(m, 21));
        r = _mm512_mask_mov_epi32(r, special,
                                  _mm512_mask_mov_epi32(nan, _mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7c)),
                                                        _mm512_set1_epi32(0x7f800000)));
    }
    r = _mm512_or_si512(r, _mm512_slli_epi32(_mm512_and_si512(c, _mm512_set1_epi32(0x80)), 24));
    return _mm512_castsi512_ps(r);
}

static inline void dequantize_blocks(float *dst, const uint8_t *codes, const uint8_t *scales, size_t nb, const fmt F) {
    for (size_t b = 0; b < nb; b++) {
        float *d = dst + b * 32;
        if (scales[b] == 0xff) {
            const __m512 nan = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fc00000));
            _mm512_storeu_ps(d, nan);
            _mm512_storeu_ps(d + 16, nan);
            continue;
        }
        const __m512i sa = _mm512_set1_epi32((int)scales[b] - 127);
        const __m256i c = _mm256_loadu_si256((const __m256i *)(codes + b * 32));
        _mm512_storeu_ps(d, deq16(_mm256_castsi256_si128(c), sa, F));
        _mm512_storeu_ps(d + 16, deq16(_mm256_extracti128_si256(c, 1), sa, F));
    }
}

static void dequantize_avx512(float *dst,            // (nb * 32,) fp32
                              const uint8_t *codes,  // (nb * 32,) elem
                              const uint8_t *scales, // (nb,) E8M0
                              size_t nb, mp_dtype elem) {
    if (elem == MP_E4M3) dequantize_blocks(dst, codes, scales, nb, format_of(MP_E4M3));
    else dequantize_blocks(dst, codes, scales, nb, format_of(MP_E5M2));
}

const mp_mx_kernels mp_mx_avx512 = {
    .quantize = quantize_avx512,
    .dequantize = dequantize_avx512,
    .scales = scales_avx512,
};
