/* gemm_avx512.c - the fp32 GEMM micro-kernel for AVX-512: a 12 x 32 tile of C
 * in 24 zmm accumulators; per k, two loads of packed B and twelve broadcasts
 * of packed A feed 24 FMAs. Inputs of any format arrive here as fp32 panels. */
#include <immintrin.h>

#include "../internal.h"

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
        for (size_t p = 0; p < kc; p++)
            _mm512_mask_storeu_ps(d + p * MR, 0x0fff, ld16(a, t, (p0 + p) * lda + i0, k));
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

static inline __m512 finish(__m512 acc, __m512 va, float beta, const float *c) {
    if (beta == 0.0f) return _mm512_mul_ps(va, acc);
    return _mm512_fmadd_ps(va, acc, _mm512_mul_ps(_mm512_set1_ps(beta), _mm512_loadu_ps(c)));
}

static void micro(size_t kc, const void *ap, const void *bp, float *c, // (MR, ldc) fp32
                  size_t ldc, float alpha, float beta) {
    const float *A = ap, *B = bp;
    __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00,
           c40 = c00, c41 = c00, c50 = c00, c51 = c00, c60 = c00, c61 = c00, c70 = c00, c71 = c00, c80 = c00,
           c81 = c00, c90 = c00, c91 = c00, ca0 = c00, ca1 = c00, cb0 = c00, cb1 = c00;
    for (size_t p = 0; p < kc; p++, A += MR, B += NR) {
        const __m512 b0 = _mm512_load_ps(B), b1 = _mm512_load_ps(B + 16);
        _mm_prefetch((const char *)(B + 8 * NR), _MM_HINT_T0);
        _mm_prefetch((const char *)(B + 8 * NR + 16), _MM_HINT_T0);
        __m512 a;
#define ROW(r, x0, x1)                        \
    a = _mm512_set1_ps(A[r]);                 \
    x0 = _mm512_fmadd_ps(a, b0, x0);          \
    x1 = _mm512_fmadd_ps(a, b1, x1);
        ROW(0, c00, c01) ROW(1, c10, c11) ROW(2, c20, c21) ROW(3, c30, c31) ROW(4, c40, c41) ROW(5, c50, c51)
        ROW(6, c60, c61) ROW(7, c70, c71) ROW(8, c80, c81) ROW(9, c90, c91) ROW(10, ca0, ca1) ROW(11, cb0, cb1)
#undef ROW
    }
    const __m512 va = _mm512_set1_ps(alpha);
#define STORE(r, x0, x1)                                                   \
    _mm512_storeu_ps(c + (r) * ldc, finish(x0, va, beta, c + (r) * ldc));  \
    _mm512_storeu_ps(c + (r) * ldc + 16, finish(x1, va, beta, c + (r) * ldc + 16));
    STORE(0, c00, c01) STORE(1, c10, c11) STORE(2, c20, c21) STORE(3, c30, c31) STORE(4, c40, c41)
    STORE(5, c50, c51) STORE(6, c60, c61) STORE(7, c70, c71) STORE(8, c80, c81) STORE(9, c90, c91)
    STORE(10, ca0, ca1) STORE(11, cb0, cb1)
#undef STORE
}

const mp_gemm_kernel mp_gemm_avx512 = {"avx512-fp32", MR, NR, 1, 2048, 144, 3072, 4, pack_a, pack_b, micro};
