/* gemm_avx512.c - the fp32 GEMM micro-kernel for AVX-512: a 12 x 32 tile of C
 * in 24 zmm accumulators; per k, two loads of packed B and twelve broadcasts
 * of packed A feed 24 FMAs. Inputs of any format arrive here as fp32 panels. */
#include <immintrin.h>

#include "../internal.h"
#include "gemm_tile.h"
#include "transpose_avx512.h"

enum { MR = 12, NR = 32 };

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

/* The first n (at most 16) lanes of v stored at d. */
static inline void store_n(float *d, __m512 v, size_t n) {
    if (n == 16) _mm512_storeu_ps(d, v);
    else _mm512_mask_storeu_ps(d, lanes(n), v);
}

/* One micro-panel in fp32, (kc, width) with width MR or NR, as gemm.c's
 * pack_f32: for each k, `width` lines (rows of op(A) or columns of op(B))
 * starting at w0, of which `valid` are real and the rest zero. along = 1: the
 * lines of one k are consecutive in memory (element (p0+p)*ld + w0 + w), read
 * one k at a time; along = 0: each line is a run over k (element
 * (w0+w)*ld + p0 + p), packed 16 lines x 16 k at a time through a transpose.
 * Inlined with a constant format and width (pack_a/b). */
static inline __attribute__((always_inline)) void pack_t(float *d, // (kc, width) fp32
                                                         const void *src, mp_dtype t, size_t ld, int along, size_t w0,
                                                         size_t valid, size_t p0, size_t kc, size_t width) {
    const size_t es = t == MP_F32 ? 4 : 2;
    if (along) {
        for (size_t p = 0; p < kc; p++) {
            const size_t r = (p0 + p) * ld + w0;
            /* 8 rows ahead (rows often 4 KiB apart defeat the hardware prefetchers) */
            _mm_prefetch((const char *)src + (r + 8 * ld) * es, _MM_HINT_T0);
            for (size_t lb = 0; lb < width; lb += 16) {
                const size_t nl = width - lb < 16 ? width - lb : 16, nv = valid > lb ? valid - lb : 0;
                store_n(d + p * width + lb, ld16(src, t, r + lb, lanes(nv < nl ? nv : nl)), nl);
            }
        }
        return;
    }
    for (size_t lb = 0; lb < width; lb += 16) {
        const size_t nl = width - lb < 16 ? width - lb : 16, nv = valid > lb ? valid - lb : 0;
        for (size_t p = 0; p < kc; p += 16) {
            const size_t np = kc - p < 16 ? kc - p : 16;
            const __mmask16 km = lanes(np);
            __m512i r[16];
#pragma GCC unroll 16
            for (size_t w = 0; w < 16; w++) {
                const size_t at = (w0 + lb + w) * ld + p0 + p;
                if (w < nv && w < nl) _mm_prefetch((const char *)src + (at + 64) * es, _MM_HINT_T0);
                r[w] = w < nv && w < nl ? _mm512_castps_si512(ld16(src, t, at, km)) : _mm512_setzero_si512();
            }
            transpose16(r);
#pragma GCC unroll 16
            for (size_t q = 0; q < np; q++) store_n(d + (p + q) * width + lb, _mm512_castsi512_ps(r[q]), nl);
        }
    }
}

/* pack_t with the format as a constant. */
static inline __attribute__((always_inline)) void pack(float *d, const void *src, mp_dtype t, size_t ld, int along,
                                                       size_t w0, size_t valid, size_t p0, size_t kc, size_t width) {
    switch (t) {
    case MP_F16: pack_t(d, src, MP_F16, ld, along, w0, valid, p0, kc, width); break;
    case MP_BF16: pack_t(d, src, MP_BF16, ld, along, w0, valid, p0, kc, width); break;
    default: pack_t(d, src, MP_F32, ld, along, w0, valid, p0, kc, width); break;
    }
}

static void pack_a(void *dst, // (kc, MR) fp32
                   const void *a, mp_dtype t, size_t lda, int trans, size_t i0, size_t rows, size_t p0, size_t kc) {
    pack(dst, a, t, lda, trans, i0, rows, p0, kc, MR);
}

static void pack_b(void *dst, // (kc, NR) fp32
                   const void *b, mp_dtype t, size_t ldb, int trans, size_t p0, size_t kc, size_t j0, size_t cols) {
    pack(dst, b, t, ldb, !trans, j0, cols, p0, kc, NR);
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

void mp_gemm_row_sums_avx512(float *sums, const void *a, mp_dtype t, size_t lda, int trans, size_t i0, size_t rows,
                             size_t p0, size_t kc) {
    if (!trans) { /* each row a run along k: one chain of additions per row */
        mp_gemm_row_sums_scalar(sums, a, t, lda, trans, i0, rows, p0, kc);
        return;
    }
    /* one k's values of 32 rows are consecutive: two vectors of sums, each lane its own chain in k order */
    for (size_t r0 = 0; r0 < rows; r0 += 32) {
        const size_t left = rows - r0;
        const __mmask16 k0 = lanes(left), k1 = left > 16 ? lanes(left - 16) : 0;
        __m512 s0 = _mm512_maskz_loadu_ps(k0, sums + r0), s1 = _mm512_maskz_loadu_ps(k1, sums + r0 + 16);
        for (size_t p = 0; p < kc; p++) {
            const size_t i = (p0 + p) * lda + i0 + r0;
            s0 = _mm512_add_ps(s0, ld16(a, t, i, k0));
            s1 = _mm512_add_ps(s1, ld16(a, t, i + 16, k1));
        }
        _mm512_mask_storeu_ps(sums + r0, k0, s0);
        _mm512_mask_storeu_ps(sums + r0 + 16, k1, s1);
    }
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
    .row_sums = mp_gemm_row_sums_avx512,
};
