/* gemm_avx512bf16.c - bf16 x bf16 GEMM with vdpbf16ps: a 12 x 32 tile of C in
 * 24 zmm accumulators; per pair of k values, two loads of packed B (32
 * columns x 2 k each... 16 columns per register) and twelve broadcasts of an A
 * pair feed 24 vdpbf16ps (each adds two products per lane). */
#include <immintrin.h>
#include <string.h>

#include "../internal.h"
#include "gemm_tile.h"
#include "pack_pairs_avx512.h"

enum { MR = 12, NR = 32 };

/* A micro-panel: for each k pair q, MR rows of (A[i][2q], A[i][2q+1]). */
static void pack_a(void *dst, const void *a, mp_dtype t, size_t lda, int trans, size_t i0, size_t rows, size_t p0,
                   size_t kc) {
    (void)t;
    pack_pairs(dst, a, lda, trans, i0, rows, p0, kc, MR);
}

/* B micro-panel: for each k pair q, NR columns of (B[2q][j], B[2q+1][j]). */
static void pack_b(void *dst, const void *b, mp_dtype t, size_t ldb, int trans, size_t p0, size_t kc, size_t j0,
                   size_t cols) {
    (void)t;
    pack_pairs(dst, b, ldb, !trans, j0, cols, p0, kc, NR);
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
#define ROW(r, x0, x1)                          \
    a = (__m512bh)_mm512_set1_epi32((int)A[r]); \
    x0 = _mm512_dpbf16_ps(x0, a, b0);           \
    x1 = _mm512_dpbf16_ps(x1, a, b1);
        MP_TILE_ROWS
#undef ROW
    }
    MP_TILE_STORE(c, ldc, alpha, beta);
}

/* micro with A read where it is: op(A) not transposed, so each row's k pairs
 * are adjacent 32-bit words (a, MR rows lda bf16 apart, from the block's
 * first k); the same products in the same order as micro on the packed
 * panel, without the copy. Rows i, i + 4, i + 8 from three bases, so the
 * twelve addresses need five registers. */
static void micro_rows(size_t kc, const void *a, size_t lda, const void *bp, float *c, // (MR, ldc) fp32
                       size_t ldc, float alpha, float beta) {
    const uint8_t *A0 = a, *A4 = A0 + 4 * lda * 2, *A8 = A0 + 8 * lda * 2;
    const size_t l1 = lda * 2, l3 = 3 * l1;
    const uint16_t *B = bp;
    MP_TILE_DECLARE;
    for (size_t q = 0; q < kc / 2; q++, A0 += 4, A4 += 4, A8 += 4, B += NR * 2) {
        const __m512bh b0 = (__m512bh)_mm512_load_si512(B), b1 = (__m512bh)_mm512_load_si512(B + 32);
        _mm_prefetch((const char *)(B + 8 * NR * 2), _MM_HINT_T0);
        _mm_prefetch((const char *)(B + 8 * NR * 2 + 32), _MM_HINT_T0);
        __m512bh x;
        uint32_t v;
#define ROW(r, x0, x1)                                                                                \
    memcpy(&v, ((r) < 4 ? A0 : (r) < 8 ? A4 : A8) + ((r) % 4 == 3 ? l3 : (size_t)((r) % 4) * l1), 4); \
    x = (__m512bh)_mm512_set1_epi32((int)v);                                                          \
    x0 = _mm512_dpbf16_ps(x0, x, b0);                                                                 \
    x1 = _mm512_dpbf16_ps(x1, x, b1);
        MP_TILE_ROWS
#undef ROW
    }
    MP_TILE_STORE(c, ldc, alpha, beta);
}

/* kc counts k values (pairs: 256 pairs = 32 KiB of B micro-panel) */
const mp_gemm_kernel mp_gemm_avx512bf16 = {
    .name = "avx512bf16-dpbf16",
    .mr = MR,
    .nr = NR,
    .kpack = 2,
    .kc = 4096,
    .mc = 192,
    .nc = 3072,
    .esize = 2,
    .pack_a = pack_a,
    .pack_b = pack_b,
    .micro = micro,
    .micro_rows = micro_rows,
    .epilogue = mp_gemm_epilogue_avx512bf16,
    .zeros = mp_gemm_zeros_avx512,
    .row_sums = mp_gemm_row_sums_avx512,
};
