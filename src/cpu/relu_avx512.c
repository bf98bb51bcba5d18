/* relu_avx512.c - ReLU forward/backward on fp16/bf16 bits with AVX-512BW, 32
 * values per step; the same bits and counts as relu16_scalar in ops.c. */
#include <immintrin.h>

#include "../internal.h"

void mp_relu16_avx512(uint16_t *out, const uint16_t *a, const uint16_t *x, size_t n, const mp_relu16_codes *k,
                      uint64_t *sub, uint64_t *nan) {
    const __m512i one = _mm512_set1_epi16(1), inf = _mm512_set1_epi16((short)k->inf);
    const __m512i inf_m1 = _mm512_set1_epi16((short)(k->inf - 1)), mant_m1 = _mm512_set1_epi16((short)(k->mant - 1));
    const __m512i quiet = _mm512_set1_epi16((short)k->quiet), mag = _mm512_set1_epi16(0x7fff);
    uint64_t ns = 0, nn = 0;
    for (size_t i = 0; i < n; i += 32) {
        const __mmask32 lanes = n - i >= 32 ? 0xffffffffu : (__mmask32)((1u << (n - i)) - 1);
        const __m512i va = _mm512_maskz_loadu_epi16(lanes, a + i);
        const __m512i vx = x ? _mm512_maskz_loadu_epi16(lanes, x + i) : va;
        /* 0 < x <= inf, as unsigned 16-bit: x - 1 <= inf - 1 */
        const __mmask32 pass = _mm512_cmple_epu16_mask(_mm512_sub_epi16(vx, one), inf_m1);
        __m512i v = _mm512_maskz_mov_epi16(pass, va);
        const __m512i av = _mm512_and_si512(v, mag);
        const __mmask32 is_nan = _mm512_cmpgt_epu16_mask(av, inf);
        v = _mm512_or_si512(v, _mm512_maskz_mov_epi16(is_nan, quiet));
        nn += (uint64_t)__builtin_popcount(is_nan & lanes);
        ns += (uint64_t)__builtin_popcount(_mm512_cmple_epu16_mask(_mm512_sub_epi16(av, one), mant_m1) & lanes);
        _mm512_mask_storeu_epi16(out + i, lanes, v);
    }
    *sub += ns, *nan += nn;
}
