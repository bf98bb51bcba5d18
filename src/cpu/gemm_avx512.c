/* gemm_avx512.c - the fp32 GEMM micro-kernel for AVX-512: a 12 x 32 tile of C
 * in 24 zmm accumulators; per k, two loads of packed B and twelve broadcasts
 * of packed A feed 24 FMAs. Inputs of any format arrive here as fp32 panels. */
#include <immintrin.h>

#include "../internal.h"
#include "gemm_tile.h"

enum { MR = 12, NR = 32 };

/* One value of any input format as fp32 (F16C for fp16). */
static inline float ld1(const void *p, mp_dtype t, size_t i) {
    switch (t) {
    case MP_F16: return _cvtsh_ss(((const uint16_t *)p)[i]);
    case MP_BF16: return mp_bits_f32((uint32_t)((const uint16_t *)p)[i] << 16);
    default: return ((const float *)p)[i];
    }
}

/* Up to 16 consecutive values (mask k) of any input format as fp32 lanes. */
static inline __m512 ld16(const void *p, mp_dtype t, size_t i, __mmask16 k) {
    switch (t) {
    case MP_F16: return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, (const uint16_t *)p + i));
    case MP_BF16:
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, (const uint16_t *)p + i)), 16));
    default: return _mm512_maskz_loadu_ps(k, (const float *)p + i);
    }
}

static inline __mmask16 lanes(size_t n) { return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1); }

static void pack_a(void *dst, // (kc, MR) fp32
                   const void *a, mp_dtype t, size_t lda, int trans, size_t i0, size_t rows, size_t p0, size_t kc) {
    float *d = dst;
    if (trans) { /* op(A)[i][p] = A[p][i]: MR consecutive values per p */
        const __mmask16 k = lanes(rows);
        for (size_t p = 0; p < kc; p++) _mm512_mask_storeu_ps(d + p * MR, 0x0fff, ld16(a, t, (p0 + p) * lda + i0, k));
        return;
    }
    for (size_t p = 0; p < kc; p++)
        for (size_t i = 0; i < MR; i++) d[p * MR + i] = i < rows ? ld1(a, t, (i0 + i) * lda + p0 + p) : 0.0f;
}

static void pack_b(void *dst, // (kc, NR) fp32
                   const void *b, mp_dtype t, size_t ldb, int trans, size_t p0, size_t kc, size_t j0, size_t cols) {
    float *d = dst;
    if (!trans) { /* rows of B: NR consecutive values per p */
        const __mmask16 k0 = lanes(cols), k1 = lanes(cols > 16 ? cols - 16 : 0);
        for (size_t p = 0; p < kc; p++) {
            const size_t r = (p0 + p) * ldb + j0;
            _mm512_store_ps(d + p * NR, ld16(b, t, r, k0));
            _mm512_store_ps(d + p * NR + 16, ld16(b, t, r + 16, k1));
        }
        return;
    }
    /* op(B)[p][j] = B[j][p]: 16 x 16 blocks, read along rows of B, written
     * with a scatter down the panel */
    const __m512i stride = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                              _mm512_set1_epi32(NR));
    for (size_t j = 0; j < NR; j++)
        for (size_t p = 0; p < kc; p += 16) {
            const __mmask16 k = lanes(kc - p);
            const __m512 v = j < cols ? ld16(b, t, (j0 + j) * ldb + p0 + p, k) : _mm512_setzero_ps();
            _mm512_mask_i32scatter_ps(d + p * NR + j, k, stride, v, 4);
        }
}

static void micro(size_t kc, const void *ap, const void *bp, float *c, // (MR, ldc) fp32
                  size_t ldc, float alpha, float beta) {
    const float *A = ap, *B = bp;
    MP_TILE_DECLARE;
    for (size_t p = 0; p < kc; p++, A += MR, B += NR) {
        const __m512 b0 = _mm512_load_ps(B), b1 = _mm512_load_ps(B + 16);
        _mm_prefetch((const char *)(B + 8 * NR), _MM_HINT_T0);
        _mm_prefetch((const char *)(B + 8 * NR + 16), _MM_HINT_T0);
        __m512 a;
#define ROW(r, x0, x1)               \
    a = _mm512_set1_ps(A[r]);        \
    x0 = _mm512_fmadd_ps(a, b0, x0); \
    x1 = _mm512_fmadd_ps(a, b1, x1);
        MP_TILE_ROWS
#undef ROW
    }
    MP_TILE_STORE(c, ldc, alpha, beta);
}

const mp_gemm_kernel mp_gemm_avx512 = {
    .name = "avx512-fp32",
    .mr = MR,
    .nr = NR,
    .kpack = 1,
    .kc = 2048,
    .mc = 144,
    .nc = 3072,
    .esize = 4,
    .pack_a = pack_a,
    .pack_b = pack_b,
    .micro = micro,
    .epilogue = mp_gemm_epilogue_avx512,
    .zeros = mp_gemm_zeros_avx512,
};
