/* pack_pairs_avx512.h - bf16 values packed in pairs along k (the layout of
 * vdpbf16ps and of AMX's B tiles), with AVX-512 F + BW. Included by the
 * kernels that use it (gemm_avx512bf16.c, gemm_amx.c), each built with its
 * own flags. */
#ifndef MP_PACK_PAIRS_AVX512_H
#define MP_PACK_PAIRS_AVX512_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "transpose_avx512.h"

/* permutex2var indices that interleave two rows of 32 bf16 into 32 pairs:
 * the first 32 entries give pairs 0-15, the last 32 pairs 16-31 */
static const uint16_t mp_pair_interleave[64] = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                                8,  40, 9,  41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47,
                                                16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
                                                24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};

/* One micro-panel of k pairs, (kc/2, width) pairs of bf16 as 32 bits: for
 * each k pair q, `width` lines (rows of op(A) or columns of op(B)) starting at
 * w0, of which `valid` are real and the rest zero. `along`, as in gemm.c's
 * pack_f32: 1 when the width values of one k are consecutive in memory
 * (element (p0+p)*ld + w0 + w), 0 when each line is a run over k (element
 * (w0+w)*ld + p0 + p), whose pairs are then adjacent. */
static inline void pack_pairs(void *dst, const uint16_t *S, size_t ld, int along, size_t w0, size_t valid, size_t p0,
                              size_t kc, size_t width) {
    uint16_t *d = dst;
    uint32_t *d32 = dst;
    const size_t kp = (kc + 1) / 2;
    if (!along && valid == width && kc % 2 == 0) { /* 16 x 16 blocks of pairs, transposed in registers */
        size_t q = 0;
        for (; q + 16 <= kp; q += 16)
            for (size_t wb = 0; wb < width; wb += 16) {
                const size_t lanes = width - wb < 16 ? width - wb : 16;
                __m512i r[16];
                for (size_t i = 0; i < 16; i++)
                    r[i] = i < lanes ? _mm512_loadu_si512(S + (w0 + wb + i) * ld + p0 + 2 * q) : _mm512_setzero_si512();
                transpose16(r);
                for (size_t i = 0; i < 16; i++)
                    _mm512_mask_storeu_epi32(d32 + (q + i) * width + wb, (__mmask16)((1u << lanes) - 1), r[i]);
            }
        for (size_t w = 0; w < width; w++) {
            const uint16_t *line = S + (w0 + w) * ld + p0;
            for (size_t qq = q; qq < kp; qq++) memcpy(&d32[qq * width + w], line + 2 * qq, 4);
        }
        return;
    }
    if (along && valid == width) { /* rows 2q and 2q+1 of the storage, interleaved 32 values at a time */
        const __m512i lo_idx = _mm512_loadu_si512(mp_pair_interleave),
                      hi_idx = _mm512_loadu_si512(mp_pair_interleave + 32);
        for (size_t q = 0; q < kp; q++) {
            const size_t p = p0 + 2 * q;
            _mm_prefetch((const char *)(S + (p + 16) * ld + w0), _MM_HINT_T0); /* rows are ld apart: */
            _mm_prefetch((const char *)(S + (p + 17) * ld + w0), _MM_HINT_T0); /* too far for the hardware */
            for (size_t wb = 0; wb < width; wb += 32) {
                const size_t lanes = width - wb < 32 ? width - wb : 32, lo = lanes < 16 ? lanes : 16;
                const __mmask32 k = (__mmask32)((1ull << lanes) - 1);
                const __m512i r0 = _mm512_maskz_loadu_epi16(k, S + p * ld + w0 + wb);
                const __m512i r1 =
                    2 * q + 1 < kc ? _mm512_maskz_loadu_epi16(k, S + (p + 1) * ld + w0 + wb) : _mm512_setzero_si512();
                uint16_t *o = d + (q * width + wb) * 2;
                _mm512_mask_storeu_epi16(o, (__mmask32)((1ull << (2 * lo)) - 1),
                                         _mm512_permutex2var_epi16(r0, lo_idx, r1));
                if (lanes > 16)
                    _mm512_mask_storeu_epi16(o + 32, (__mmask32)((1ull << (2 * (lanes - 16))) - 1),
                                             _mm512_permutex2var_epi16(r0, hi_idx, r1));
            }
        }
        return;
    }
    for (size_t q = 0; q < kp; q++)
        for (size_t w = 0; w < width; w++) {
            uint16_t lo = 0, hi = 0;
            if (w < valid) {
                const size_t p = p0 + 2 * q;
                lo = along ? S[p * ld + w0 + w] : S[(w0 + w) * ld + p];
                if (2 * q + 1 < kc) hi = along ? S[(p + 1) * ld + w0 + w] : S[(w0 + w) * ld + p + 1];
            }
            d[(q * width + w) * 2] = lo;
            d[(q * width + w) * 2 + 1] = hi;
        }
}

#endif
