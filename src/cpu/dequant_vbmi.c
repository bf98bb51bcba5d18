/* dequant_vbmi.c - a 256-entry map's codes into fp32 (quant_kernels.h's
 * k_dequant, 8-bit maps) with AVX512_VBMI byte permutes instead of gathers:
 * 64 codes a turn, each of a value's four bytes from its 256-byte plane
 * (mp_state_map.plane) by two vpermt2b over the plane's halves, the code's
 * high bit choosing; the four planes interleaved into 64 fp32 values and
 * multiplied by the block's scale. The same bits as the portable loop. */
#include <immintrin.h>

#include "../quant_kernels.h"

void mp_dequant8_vbmi(float *out, const uint8_t *codes, const float *scale, const mp_state_map *map, size_t n,
                      size_t block) {
    /* plane k's entries 64 h .. 64 h + 63, in registers (the loops below written out: gcc keeps arrays indexed
     * in loops on the stack) */
#define PLANE(k, h) _mm512_loadu_si512((const void *)(map->plane[k] + 64 * (h)))
    const __m512i t00 = PLANE(0, 0), t01 = PLANE(0, 1), t02 = PLANE(0, 2), t03 = PLANE(0, 3);
    const __m512i t10 = PLANE(1, 0), t11 = PLANE(1, 1), t12 = PLANE(1, 2), t13 = PLANE(1, 3);
    const __m512i t20 = PLANE(2, 0), t21 = PLANE(2, 1), t22 = PLANE(2, 2), t23 = PLANE(2, 3);
    const __m512i t30 = PLANE(3, 0), t31 = PLANE(3, 1), t32 = PLANE(3, 2), t33 = PLANE(3, 3);
#undef PLANE
    for (size_t b = 0; b < n / block; b++) {
        const __m512 sv = _mm512_set1_ps(scale[b]);
        for (size_t i = 0; i < block; i += 64) {
            const __m512i c = _mm512_loadu_si512((const void *)(codes + b * block + i));
            const __mmask64 high = _mm512_movepi8_mask(c);
#define BYTES(k)                                                                \
    _mm512_mask_blend_epi8(high, _mm512_permutex2var_epi8(t##k##0, c, t##k##1), \
                           _mm512_permutex2var_epi8(t##k##2, c, t##k##3))
            const __m512i p0 = BYTES(0), p1 = BYTES(1), p2 = BYTES(2), p3 = BYTES(3);
#undef BYTES
            /* bytes to dwords: within each 128-bit lane L, d[j] holds values 16 L + 4 j .. 16 L + 4 j + 3 */
            const __m512i lo01 = _mm512_unpacklo_epi8(p0, p1), hi01 = _mm512_unpackhi_epi8(p0, p1);
            const __m512i lo23 = _mm512_unpacklo_epi8(p2, p3), hi23 = _mm512_unpackhi_epi8(p2, p3);
            const __m512i d0 = _mm512_unpacklo_epi16(lo01, lo23), d1 = _mm512_unpackhi_epi16(lo01, lo23);
            const __m512i d2 = _mm512_unpacklo_epi16(hi01, hi23), d3 = _mm512_unpackhi_epi16(hi01, hi23);
            /* the 4 x 4 transpose of 128-bit lanes: output v holds lane v of d0, d1, d2, d3 */
            const __m512i e0 = _mm512_shuffle_i32x4(d0, d1, 0x44), e1 = _mm512_shuffle_i32x4(d2, d3, 0x44);
            const __m512i e2 = _mm512_shuffle_i32x4(d0, d1, 0xee), e3 = _mm512_shuffle_i32x4(d2, d3, 0xee);
            float *o = out + b * block + i;
            _mm512_storeu_ps(o, _mm512_mul_ps(_mm512_castsi512_ps(_mm512_shuffle_i32x4(e0, e1, 0x88)), sv));
            _mm512_storeu_ps(o + 16, _mm512_mul_ps(_mm512_castsi512_ps(_mm512_shuffle_i32x4(e0, e1, 0xdd)), sv));
            _mm512_storeu_ps(o + 32, _mm512_mul_ps(_mm512_castsi512_ps(_mm512_shuffle_i32x4(e2, e3, 0x88)), sv));
            _mm512_storeu_ps(o + 48, _mm512_mul_ps(_mm512_castsi512_ps(_mm512_shuffle_i32x4(e2, e3, 0xdd)), sv));
        }
    }
}
