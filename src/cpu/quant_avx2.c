/* quant_avx2.c - the optimizer state's block formats (optim_kernels.h's
 * k_dequant, k_quant) with AVX2 intrinsics: 8 codes at a time through the
 * map's bucket table (one gather: the bucket's code and its next threshold).
 * The same bits as the portable loops; used by the avx2 path. */
#include <immintrin.h>

#include "../quant_kernels.h"

/* The codes of 8 quotients y, as map_code. */
static inline __m256i codes8(__m256 y, const mp_state_map *m) {
    const __m256i u = _mm256_castps_si256(y), mag = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    const __m256i neg = m->sign_magnitude ? _mm256_setzero_si256() : _mm256_srai_epi32(u, 31);
    const __m128i shift = _mm_cvtsi32_si128((int)m->shift);
    const __m256i mask = _mm256_set1_epi32((int)((1u << m->shift) - 1));
    __m256i b = _mm256_sub_epi32(_mm256_srl_epi32(mag, shift), _mm256_set1_epi32((int)m->lo));
    b = _mm256_min_epi32(_mm256_max_epi32(b, _mm256_setzero_si256()), _mm256_set1_epi32(m->top));
    b = _mm256_add_epi32(b, _mm256_and_si256(neg, _mm256_set1_epi32(MP_MAP_BUCKETS)));
    const __m256i e = _mm256_i32gather_epi32((const int *)(const void *)m->lut, b, 4);
    const __m256i l = _mm256_xor_si256(_mm256_and_si256(mag, mask), _mm256_and_si256(neg, mask));
    __m256i c = _mm256_srli_epi32(_mm256_add_epi32(e, l), 24);
    c = _mm256_blendv_epi8(c, _mm256_set1_epi32(m->nan_code), _mm256_castps_si256(_mm256_cmp_ps(y, y, _CMP_UNORD_Q)));
    const __m256i pos = _mm256_castps_si256(_mm256_cmp_ps(y, _mm256_setzero_ps(), _CMP_GT_OQ)); /* y > 0 */
    c = _mm256_blendv_epi8(c, _mm256_max_epi32(c, _mm256_set1_epi32(m->least_positive)), pos);
    if (m->sign_magnitude) c = _mm256_or_si256(c, _mm256_and_si256(_mm256_srai_epi32(u, 31), _mm256_set1_epi32(0x80)));
    return c;
}

/* The largest magnitude of a block (a multiple of 8 values), as block_amax. */
static float amax_of(const float *x, size_t n) {
    __m256 mx = _mm256_setzero_ps(), nan = _mm256_setzero_ps();
    const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (size_t i = 0; i < n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        mx = _mm256_max_ps(mx, _mm256_and_ps(v, abs));
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    }
    if (_mm256_movemask_ps(nan)) return block_amax(x, n); /* the first NaN's bits */
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
    return _mm_cvtss_f32(h);
}

void mp_quant_avx2(uint8_t *codes, float *scale, const float *x, const mp_state_map *map, int bits, size_t n,
                   size_t block) {
    if (block % 32) {
        k_quant(codes, scale, x, map, bits, n, block);
        return;
    }
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7), pair = _mm256_set1_epi16(0x0110);
    for (size_t b = 0; b < n / block; b++) {
        const float *xb = x + b * block;
        const float s = block_scale(amax_of(xb, block), bits);
        scale[b] = s;
        const __m256 sv = _mm256_set1_ps(s);
        for (size_t i = 0; i < block; i += 32) {
            __m256i c[4];
            for (int k = 0; k < 4; k++) c[k] = codes8(_mm256_div_ps(_mm256_loadu_ps(xb + i + 8 * k), sv), map);
            const __m256i w = _mm256_packus_epi16(_mm256_packus_epi32(c[0], c[1]), _mm256_packus_epi32(c[2], c[3]));
            const __m256i bytes = _mm256_permutevar8x32_epi32(w, order); /* the 32 codes in order */
            if (bits == 4) { /* two a byte, the first in the high nibble: 16 c[2i] + c[2i + 1] */
                const __m256i two = _mm256_maddubs_epi16(bytes, pair);
                const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi16(two, two), 0x08);
                _mm_storeu_si128((__m128i *)(void *)(codes + (b * block + i) / 2), _mm256_castsi256_si128(packed));
            } else {
                _mm256_storeu_si256((__m256i *)(void *)(codes + b * block + i), bytes);
            }
        }
    }
}

void mp_dequant_avx2(float *out, const uint8_t *codes, const float *scale, const mp_state_map *map, int bits, size_t n,
                     size_t block) {
    if (block % 16) {
        k_dequant(out, codes, scale, map, bits, n, block);
        return;
    }
    const float *q = map->value;
    const __m256 q0 = _mm256_loadu_ps(q), q1 = _mm256_loadu_ps(q + 8);
    for (size_t b = 0; b < n / block; b++) {
        const __m256 sv = _mm256_set1_ps(scale[b]);
        float *o = out + b * block;
        if (bits == 4) { /* 16 entries: two permutes */
            const uint8_t *c = codes + b * block / 2;
            for (size_t i = 0; i < block; i += 16) {
                const __m128i v = _mm_loadl_epi64((const __m128i *)(const void *)(c + i / 2)), low = _mm_set1_epi8(15);
                const __m128i nib = _mm_unpacklo_epi8(_mm_and_si128(_mm_srli_epi16(v, 4), low), _mm_and_si128(v, low));
                for (int h = 0; h < 2; h++) {
                    const __m256i idx = _mm256_cvtepu8_epi32(h ? _mm_srli_si128(nib, 8) : nib);
                    const __m256 hi = _mm256_castsi256_ps(_mm256_cmpgt_epi32(idx, _mm256_set1_epi32(7)));
                    const __m256 val =
                        _mm256_blendv_ps(_mm256_permutevar8x32_ps(q0, idx), _mm256_permutevar8x32_ps(q1, idx), hi);
                    _mm256_storeu_ps(o + i + 8 * h, _mm256_mul_ps(val, sv));
                }
            }
        } else {
            const uint8_t *c = codes + b * block;
            for (size_t i = 0; i < block; i += 8) {
                const __m256i idx = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(c + i)));
                _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_i32gather_ps(q, idx, 4), sv));
            }
        }
    }
}
