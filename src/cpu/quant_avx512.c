/* quant_avx512.c - the optimizer state's block formats (quant_kernels.h's
 * k_dequant, k_quant) with AVX-512F/BW/DQ intrinsics, 16 values a vector:
 * 4-bit codes by a binary search of the map's 15 thresholds held in one
 * register (optim.c's heap), their values by one permute; e4m3 (fp8) codes
 * and values by integer arithmetic on the bits. The 8-bit maps' 256 entries
 * take the AVX2 kernels' table lookups (cpu/quant_avx2.c): on Zen 4 an
 * eight-level search in registers and permutes of a 16-register table
 * measured no faster than its gathers. The same bits as the portable loops;
 * used by the avx512 paths. */
#include <immintrin.h>

#include "../quant_kernels.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* The codes of V x 16 quotients y of a 16-entry map, as map_code: the number
 * of thresholds at or below y, by a binary search down the heap in t (nodes
 * 1-15): h = 2 h + (y >= t[h]) four times, the code h - 16. The V searches go
 * level by level together, each level waiting on the last (a permute, a
 * compare). */
#define V 2
ALWAYS_INLINE void codes16(__m512i c[V], const __m512 y[V], __m512 t, int nan_code, int least_positive) {
    const __m512i one = _mm512_set1_epi32(1);
    __m512i h[V];
    for (int v = 0; v < V; v++) h[v] = one;
    for (int d = 0; d < 4; d++)
        for (int v = 0; v < V; v++) {
            const __m512i h2 = _mm512_add_epi32(h[v], h[v]);
            h[v] = _mm512_mask_add_epi32(h2, _mm512_cmp_ps_mask(y[v], _mm512_permutexvar_ps(h[v], t), _CMP_GE_OQ), h2,
                                         one);
        }
    for (int v = 0; v < V; v++) {
        c[v] = _mm512_sub_epi32(h[v], _mm512_set1_epi32(16));
        c[v] = _mm512_mask_mov_epi32(c[v], _mm512_cmp_ps_mask(y[v], y[v], _CMP_UNORD_Q), _mm512_set1_epi32(nan_code));
        c[v] = _mm512_mask_max_epi32(c[v], _mm512_cmp_ps_mask(y[v], _mm512_setzero_ps(), _CMP_GT_OQ), c[v],
                                     _mm512_set1_epi32(least_positive)); /* the map's floor for y > 0 */
    }
}

/* The e4m3 codes of 16 quotients y, as map_code of the fp8 map
 * (mp_f32_to_e4m3_sat(|y|) & 0x7f, y's sign in bit 7), by integer
 * arithmetic on y's bits (the MXCSR's rounding and DAZ never matter):
 * |y| >= 2^-6 rounds its mantissa to 3 bits, nearest even (the carry may
 * raise the exponent), and rebiases; below, the code is |y| 2^9 rounded to
 * nearest even; every code past 0x7e (448) saturates to it, +inf too; NaN
 * codes nan_code. */
ALWAYS_INLINE __m512i e4m3_codes16(__m512 y, int nan_code, int least_positive) {
    const __m512i one = _mm512_set1_epi32(1);
    const __m512i u = _mm512_and_si512(_mm512_castps_si512(y), _mm512_set1_epi32(0x7fffffff));
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 20), one);
    const __m512i normal = _mm512_sub_epi32(_mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb,
                                                                   _mm512_set1_epi32(0x7ffff))), 20),
                                            _mm512_set1_epi32(120 << 3));
    /* below 2^-6: m 2^(e - 23) 2^9 = m >> (14 - e), rounded to nearest even (shifts past 25 leave 0) */
    const __m512i m = _mm512_or_si512(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffff)), _mm512_set1_epi32(0x800000));
    __m512i sh = _mm512_sub_epi32(_mm512_set1_epi32(14 + 127), _mm512_srli_epi32(u, 23));
    sh = _mm512_min_epi32(sh, _mm512_set1_epi32(25));
    const __m512i q = _mm512_srlv_epi32(m, sh);
    const __m512i rem = _mm512_and_si512(m, _mm512_sub_epi32(_mm512_sllv_epi32(one, sh), one));
    const __m512i half = _mm512_sllv_epi32(one, _mm512_sub_epi32(sh, one));
    const __mmask16 up = _mm512_cmpgt_epu32_mask(rem, half) |
                         (_mm512_cmpeq_epi32_mask(rem, half) & _mm512_test_epi32_mask(q, one));
    const __m512i sub = _mm512_mask_add_epi32(q, up, q, one);
    const __mmask16 small = _mm512_cmplt_epu32_mask(u, _mm512_set1_epi32(0x3c800000)); /* 2^-6 */
    __m512i c = _mm512_min_epi32(_mm512_mask_mov_epi32(normal, small, sub), _mm512_set1_epi32(0x7e));
    c = _mm512_mask_mov_epi32(c, _mm512_cmp_ps_mask(y, y, _CMP_UNORD_Q), _mm512_set1_epi32(nan_code));
    const __mmask16 pos = _mm512_cmp_ps_mask(y, _mm512_setzero_ps(), _CMP_GT_OQ); /* the map's floor for y > 0 */
    c = _mm512_mask_max_epi32(c, pos, c, _mm512_set1_epi32(least_positive));
    return _mm512_or_si512(c, _mm512_and_si512(_mm512_srai_epi32(_mm512_castps_si512(y), 31), _mm512_set1_epi32(0x80)));
}

/* The values of 16 e4m3 codes, as mp_e4m3_to_f32: exponent and mantissa
 * moved into fp32's fields and rebiased; a subnormal code's mantissa times
 * 2^-9 (exact); 0x7f (either sign) a quiet NaN. */
ALWAYS_INLINE __m512 e4m3_values16(__m512i c) {
    const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(c, _mm512_set1_epi32(0x80)), 24);
    const __m512i e = _mm512_and_si512(_mm512_srli_epi32(c, 3), _mm512_set1_epi32(15));
    const __m512i m = _mm512_and_si512(c, _mm512_set1_epi32(7));
    __m512i v = _mm512_or_si512(_mm512_slli_epi32(_mm512_add_epi32(e, _mm512_set1_epi32(120)), 23), _mm512_slli_epi32(m, 20));
    const __m512 sub = _mm512_mul_ps(_mm512_cvtepi32_ps(m), _mm512_set1_ps(0x1p-9f));
    v = _mm512_mask_mov_epi32(v, _mm512_testn_epi32_mask(e, e), _mm512_castps_si512(sub));
    const __mmask16 nan = _mm512_cmpeq_epi32_mask(_mm512_and_si512(c, _mm512_set1_epi32(0x7f)), _mm512_set1_epi32(0x7f));
    v = _mm512_mask_mov_epi32(v, nan, _mm512_set1_epi32(0x7fc00000));
    return _mm512_castsi512_ps(_mm512_or_si512(v, sign));
}

/* The largest magnitude of a block (a multiple of 16 values), as block_amax. */
static float amax_of(const float *x, size_t n) {
    __m512 mx = _mm512_setzero_ps();
    __mmask16 nan = 0;
    for (size_t i = 0; i < n; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        mx = _mm512_max_ps(mx, _mm512_abs_ps(v));
        nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    }
    if (nan) return block_amax(x, n); /* the first NaN's bits */
    return _mm512_reduce_max_ps(mx);
}

/* Blocks of a 16-entry map (bits 4) or of e4m3 (bits 0), bits a constant. */
ALWAYS_INLINE void quant_blocks(uint8_t *codes, float *scale, const float *x, const mp_state_map *map, size_t n,
                                size_t block, const int bits) {
    const __m512 t = _mm512_loadu_ps(map->heap);
    for (size_t b = 0; b < n / block; b++) {
        const float *xb = x + b * block;
        const float s = block_scale(amax_of(xb, block), bits);
        scale[b] = s;
        const __m512 sv = _mm512_set1_ps(s);
        for (size_t i = 0; i < block; i += 16 * V) {
            __m512 y[V];
            __m512i c[V];
            for (int v = 0; v < V; v++) y[v] = _mm512_div_ps(_mm512_loadu_ps(xb + i + 16 * v), sv);
            if (bits == 4) codes16(c, y, t, map->nan_code, map->least_positive);
            else
                for (int v = 0; v < V; v++) c[v] = e4m3_codes16(y[v], map->nan_code, map->least_positive);
            for (int v = 0; v < V; v++) {
                const size_t at = b * block + i + 16 * (size_t)v;
                if (bits == 4) { /* two a byte, the first in the high nibble: each 64-bit lane's low byte */
                    const __m512i two = _mm512_or_si512(_mm512_slli_epi64(c[v], 4), _mm512_srli_epi64(c[v], 32));
                    _mm_storel_epi64((__m128i *)(void *)(codes + at / 2), _mm512_cvtepi64_epi8(two));
                } else {
                    _mm_storeu_si128((__m128i *)(void *)(codes + at), _mm512_cvtepi32_epi8(c[v]));
                }
            }
        }
    }
}

void mp_quant_avx512(uint8_t *codes, float *scale, const float *x, const mp_state_map *map, int bits, size_t n,
                     size_t block) {
    if (block % 32) k_quant(codes, scale, x, map, bits, n, block);
    else if (bits == 4 && map->levels == 4 && !map->sign_magnitude) quant_blocks(codes, scale, x, map, n, block, 4);
    else if (bits == 0 && map->sign_magnitude) quant_blocks(codes, scale, x, map, n, block, 0);
    else mp_quant_avx2(codes, scale, x, map, bits, n, block);
}

void mp_dequant_avx512(float *out, const uint8_t *codes, const float *scale, const mp_state_map *map, int bits, size_t n,
                       size_t block) {
    if (block % 16) {
        k_dequant(out, codes, scale, map, bits, n, block);
        return;
    }
    const float *q = map->value;
    if (bits == 4) { /* 16 entries: one permute */
        const __m512 t = _mm512_loadu_ps(q);
        const __m128i low = _mm_set1_epi8(15);
        for (size_t b = 0; b < n / block; b++) {
            const __m512 sv = _mm512_set1_ps(scale[b]);
            const uint8_t *c = codes + b * block / 2;
            float *o = out + b * block;
            for (size_t i = 0; i < block; i += 16) {
                const __m128i v = _mm_loadl_epi64((const __m128i *)(const void *)(c + i / 2));
                const __m128i nib = _mm_unpacklo_epi8(_mm_and_si128(_mm_srli_epi16(v, 4), low), _mm_and_si128(v, low));
                const __m512 val = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(nib), t);
                _mm512_storeu_ps(o + i, _mm512_mul_ps(val, sv));
            }
        }
        return;
    }
    if (map->sign_magnitude) { /* e4m3: each code's value from its bits */
        for (size_t b = 0; b < n / block; b++) {
            const __m512 sv = _mm512_set1_ps(scale[b]);
            for (size_t i = 0; i < block; i += 16) {
                const __m512i c = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(codes + b * block + i)));
                _mm512_storeu_ps(out + b * block + i, _mm512_mul_ps(e4m3_values16(c), sv));
            }
        }
        return;
    }
    mp_dequant_avx2(out, codes, scale, map, bits, n, block);
}
