/* gemm_avx512bf16.c - bf16 x bf16 GEMM with vdpbf16ps: a 12 x 32 tile of C in
 * 24 zmm accumulators; per pair of k values, two loads of packed B (32
 * columns x 2 k each... 16 columns per register) and twelve broadcasts of an A
 * pair feed 24 vdpbf16ps (each adds two products per lane). */
#include <immintrin.h>
#include <string.h>

#include "../internal.h"
#include "gemm_tile.h"

enum { MR = 12, NR = 32 };

/* Transposes 16 x 16 32-bit values: r[i] lane j becomes r[j] lane i. */
static inline void transpose16(__m512i r[16]) {
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    /* now r[4b + c] holds, in each 128-bit lane L, row-group b's column 4L + c... combine lanes */
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0xdd);
        t[i + 8] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0xdd);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
        r[i + 4] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0x88);
        r[i + 12] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0xdd);
    }
}

/* A micro-panel: for each k pair q, MR rows of (A[i][2q], A[i][2q+1]) as 32 bits. */
static void pack_a(void *dst, // (kc/2, MR) bf16 pairs
                   const void *a, mp_dtype t, size_t lda, int trans, size_t i0, size_t rows, size_t p0, size_t kc) {
    (void)t;
    const uint16_t *A = a;
    uint16_t *d = dst;
    const size_t kp = (kc + 1) / 2;
    if (!trans && rows == MR && kc % 2 == 0) { /* pairs are adjacent in a row: 16 x 16 pair transposes */
        uint32_t *d32 = dst;
        size_t q = 0;
        for (; q + 16 <= kp; q += 16) {
            __m512i r[16];
            for (size_t i = 0; i < 16; i++)
                r[i] = i < MR ? _mm512_loadu_si512(A + (i0 + i) * lda + p0 + 2 * q) : _mm512_setzero_si512();
            transpose16(r);
            for (size_t i = 0; i < 16; i++) _mm512_mask_storeu_epi32(d32 + (q + i) * MR, (1u << MR) - 1, r[i]);
        }
        for (size_t i = 0; i < MR; i++) {
            const uint16_t *row = A + (i0 + i) * lda + p0;
            for (size_t qq = q; qq < kp; qq++) memcpy(&d32[qq * MR + i], row + 2 * qq, 4);
        }
        return;
    }
    if (trans && rows == MR) { /* rows 2q and 2q+1 of A's storage, interleaved */
        const __m512i idx = _mm512_set_epi16(31, 31, 31, 31, 31, 31, 31, 31, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22,
                                             6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
        for (size_t q = 0; q < kp; q++) {
            const size_t p = p0 + 2 * q;
            const __m256i r0 = _mm256_maskz_loadu_epi16((1u << MR) - 1, A + p * lda + i0);
            const __m256i r1 = 2 * q + 1 < kc ? _mm256_maskz_loadu_epi16((1u << MR) - 1, A + (p + 1) * lda + i0)
                                              : _mm256_setzero_si256();
            const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(r0), r1, 1);
            _mm512_mask_storeu_epi16(d + q * MR * 2, (1u << (2 * MR)) - 1, _mm512_permutexvar_epi16(idx, both));
        }
        return;
    }
    for (size_t q = 0; q < kp; q++)
        for (size_t i = 0; i < MR; i++) {
            uint16_t lo = 0, hi = 0;
            if (i < rows) {
                const size_t p = p0 + 2 * q;
                lo = trans ? A[p * lda + i0 + i] : A[(i0 + i) * lda + p];
                if (2 * q + 1 < kc) hi = trans ? A[(p + 1) * lda + i0 + i] : A[(i0 + i) * lda + p + 1];
            }
            d[(q * MR + i) * 2] = lo;
            d[(q * MR + i) * 2 + 1] = hi;
        }
}

/* B micro-panel: for each k pair q, NR columns of (B[2q][j], B[2q+1][j]). */
static void pack_b(void *dst, // (kc/2, NR) bf16 pairs
                   const void *b, mp_dtype t, size_t ldb, int trans, size_t p0, size_t kc, size_t j0, size_t cols) {
    (void)t;
    const uint16_t *B = b;
    uint16_t *d = dst;
    const size_t kp = (kc + 1) / 2;
    if (!trans && cols == NR) {
        /* two rows of 32 interleaved with vpermt2w */
        const __m512i lo_idx = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7,
                                                38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
        const __m512i hi_idx = _mm512_add_epi16(lo_idx, _mm512_set1_epi16(16));
        for (size_t q = 0; q < kp; q++) {
            const size_t p = p0 + 2 * q;
            _mm_prefetch((const char *)(B + (p + 16) * ldb + j0), _MM_HINT_T0); /* rows are ldb apart: */
            _mm_prefetch((const char *)(B + (p + 17) * ldb + j0), _MM_HINT_T0); /* too far for the hardware */
            const __m512i r0 = _mm512_loadu_si512(B + p * ldb + j0);
            const __m512i r1 = 2 * q + 1 < kc ? _mm512_loadu_si512(B + (p + 1) * ldb + j0) : _mm512_setzero_si512();
            _mm512_store_si512(d + q * NR * 2, _mm512_permutex2var_epi16(r0, lo_idx, r1));
            _mm512_store_si512(d + q * NR * 2 + 32, _mm512_permutex2var_epi16(r0, hi_idx, r1));
        }
        return;
    }
    if (trans && cols == NR && kc % 2 == 0) { /* pairs are adjacent in a row of B's storage */
        uint32_t *d32 = dst;
        size_t q = 0;
        for (; q + 16 <= kp; q += 16) /* 16 x 16 blocks of pairs, transposed in registers */
            for (size_t jb = 0; jb < NR; jb += 16) {
                __m512i r[16];
                for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_si512(B + (j0 + jb + (size_t)i) * ldb + p0 + 2 * q);
                transpose16(r);
                for (int i = 0; i < 16; i++) _mm512_store_si512(d32 + (q + (size_t)i) * NR + jb, r[i]);
            }
        for (size_t j = 0; j < NR; j++) {
            const uint16_t *row = B + (j0 + j) * ldb + p0;
            for (size_t qq = q; qq < kp; qq++) memcpy(&d32[qq * NR + j], row + 2 * qq, 4);
        }
        return;
    }
    for (size_t q = 0; q < kp; q++)
        for (size_t j = 0; j < NR; j++) {
            uint16_t lo = 0, hi = 0;
            if (j < cols) {
                const size_t p = p0 + 2 * q;
                lo = trans ? B[(j0 + j) * ldb + p] : B[p * ldb + j0 + j];
                if (2 * q + 1 < kc) hi = trans ? B[(j0 + j) * ldb + p + 1] : B[(p + 1) * ldb + j0 + j];
            }
            d[(q * NR + j) * 2] = lo;
            d[(q * NR + j) * 2 + 1] = hi;
        }
}

static void micro(size_t kc, const void *ap, const void *bp, float *c, // (MR, ldc) fp32
                  size_t ldc, float alpha, float beta) {
    const uint32_t *A = ap;
    const uint16_t *B = bp;
    MP_TILE_DECLARE;
    for (size_t q = 0; q < kc / 2; q++, A += MR, B += NR * 2) {
        const __m512bh b0 = (__m512bh)_mm512_load_si512(B), b1 = (__m512bh)_mm512_load_si512(B + 32);
        _mm_prefetch((const char *)(B + 8 * NR * 2), _MM_HINT_T0);
        _mm_prefetch((const char *)(B + 8 * NR * 2 + 32), _MM_HINT_T0);
        __m512bh a;
#define ROW(r, x0, x1)                                  \
    a = (__m512bh)_mm512_set1_epi32((int)A[r]);         \
    x0 = _mm512_dpbf16_ps(x0, a, b0);                   \
    x1 = _mm512_dpbf16_ps(x1, a, b1);
        MP_TILE_ROWS
#undef ROW
    }
    MP_TILE_STORE(c, ldc, alpha, beta);
}

/* kc counts k values (pairs: 256 pairs = 32 KiB of B micro-panel) */
const mp_gemm_kernel mp_gemm_avx512bf16 = {"avx512bf16-dpbf16", MR, NR, 2, 4096, 192, 3072, 2, pack_a, pack_b, micro, mp_gemm_epilogue_avx512};
