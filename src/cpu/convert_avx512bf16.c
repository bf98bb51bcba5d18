/* convert_avx512bf16.c - fp32 -> bf16 with AVX512_BF16's vcvtneps2bf16
 * (mp_bf16_round16_cvt: equal to the scalar function for every input). */
#include "convert_avx512.h"

static inline void f32_to_bf16_body(uint16_t *dst,    // (n,) bf16
                                    const float *src, // (n,) fp32
                                    size_t n, mp_convert_stats *st, const int stats, int stream) {
    mp_counts512 c = MP_COUNTS512_0;
    for (size_t i = 0, m; i < n; i += m) {
        const __mmask16 k = mp_lanes16(dst, 2, 32, i, n, stream, &m);
        const __m512i x = mp_load16x32(src + i, k);
        const __m256i h = mp_bf16_round16_cvt(x);
        mp_store16x16(dst + i, k, h, stream);
        if (stats) {
            const __m512i ay = _mm512_and_si512(_mm512_cvtepu16_epi32(h), _mm512_set1_epi32(0x7fff));
            mp_count16(&c, k, x, ay, 0x80, 0x7f80);
        }
    }
    if (stats) mp_counts512_add(st, &c, 8, 7);
}

static void f32_to_bf16(uint16_t *dst, const float *src, size_t n, mp_convert_stats *st, int stream) {
    if (st) f32_to_bf16_body(dst, src, n, st, 1, stream);
    else f32_to_bf16_body(dst, src, n, NULL, 0, stream);
}

const mp_convert_kernels mp_convert_avx512bf16 = {
    mp_f32_to_f16_avx512,
    mp_f16_to_f32_avx512,
    f32_to_bf16,
    mp_bf16_to_f32_avx512,
};
