/* gemm_tile.h - the 12 x 32 fp32 accumulator tile shared by the AVX-512
 * micro-kernels (FMA and vdpbf16ps): its declaration, the rows of the update
 * (each kernel defines ROW), and the final alpha/beta store into C. */
#ifndef MIXPREC_GEMM_TILE_H
#define MIXPREC_GEMM_TILE_H

#include <immintrin.h>

/* alpha * acc (beta == 0: C not read) or fma(alpha, acc, beta * C), as apply_ab in gemm.c */
static inline __m512 mp_tile_finish(__m512 acc, __m512 va, float beta, const float *c) {
    if (beta == 0.0f) return _mm512_mul_ps(va, acc);
    return _mm512_fmadd_ps(va, acc, _mm512_mul_ps(_mm512_set1_ps(beta), _mm512_loadu_ps(c)));
}

/* laid out by hand: clang-format breaks a list of macro calls unevenly */
// clang-format off
#define MP_TILE_DECLARE                                                                                       \
    __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00,       \
           c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00, c60 = c00, c61 = c00, c70 = c00, c71 = c00, \
           c80 = c00, c81 = c00, c90 = c00, c91 = c00, ca0 = c00, ca1 = c00, cb0 = c00, cb1 = c00

/* Applies ROW(r, x0, x1) to the twelve rows of the tile. */
#define MP_TILE_ROWS                                                                                        \
    ROW(0, c00, c01) ROW(1, c10, c11) ROW(2, c20, c21) ROW(3, c30, c31) ROW(4, c40, c41) ROW(5, c50, c51) \
    ROW(6, c60, c61) ROW(7, c70, c71) ROW(8, c80, c81) ROW(9, c90, c91) ROW(10, ca0, ca1) ROW(11, cb0, cb1)

/* C[0..12)[0..32) = alpha * tile + beta * C */
#define MP_TILE_STORE(c, ldc, alpha, beta)                                                                    \
    do {                                                                                                      \
        const __m512 va_ = _mm512_set1_ps(alpha);                                                             \
        MP_TILE_STORE_ROWS(c, ldc, beta)                                                                      \
    } while (0)

#define MP_TILE_STORE_ROW(c, ldc, beta, r, x0, x1)                                          \
    _mm512_storeu_ps((c) + (r) * (ldc), mp_tile_finish(x0, va_, beta, (c) + (r) * (ldc))); \
    _mm512_storeu_ps((c) + (r) * (ldc) + 16, mp_tile_finish(x1, va_, beta, (c) + (r) * (ldc) + 16));

#define MP_TILE_STORE_ROWS(c, ldc, beta)                                                                          \
    MP_TILE_STORE_ROW(c, ldc, beta, 0, c00, c01) MP_TILE_STORE_ROW(c, ldc, beta, 1, c10, c11)                    \
    MP_TILE_STORE_ROW(c, ldc, beta, 2, c20, c21) MP_TILE_STORE_ROW(c, ldc, beta, 3, c30, c31)                    \
    MP_TILE_STORE_ROW(c, ldc, beta, 4, c40, c41) MP_TILE_STORE_ROW(c, ldc, beta, 5, c50, c51)                    \
    MP_TILE_STORE_ROW(c, ldc, beta, 6, c60, c61) MP_TILE_STORE_ROW(c, ldc, beta, 7, c70, c71)                    \
    MP_TILE_STORE_ROW(c, ldc, beta, 8, c80, c81) MP_TILE_STORE_ROW(c, ldc, beta, 9, c90, c91)                    \
    MP_TILE_STORE_ROW(c, ldc, beta, 10, ca0, ca1) MP_TILE_STORE_ROW(c, ldc, beta, 11, cb0, cb1)

// clang-format on
#endif
