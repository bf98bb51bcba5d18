/* gemm_avx2.c - the fp32 GEMM micro-kernel for AVX2 + FMA (Zen, Haswell and
 * later CPUs without AVX-512): a 6 x 16 tile of C in 12 ymm accumulators; per
 * k, two loads of packed B and six broadcasts of packed A feed 12 FMAs (two
 * FMA pipes of 4 cycles' latency need at least 8 independent sums). Inputs of
 * any format are converted exactly to fp32 while packing (F16C for fp16, a
 * shift for bf16), so each C element is the same sequence of fp32 FMAs as in
 * mp_gemm_ref within a block of KC values of k. Built with -mavx2 -mfma
 * -mf16c; only called when cpu.c found those features. */
#include <immintrin.h>
#include <string.h>

#include "../internal.h"

/* Cache blocking for Zen 3 (32 KiB L1d, 512 KiB L2 per core): a B micro-panel
 * (KC x NR, up to 32 KiB) streams from L1 and L2 while the A micro-panels
 * (KC x MR, 12 KiB each) stream past it from a block of A (MC x KC, 144 KiB)
 * held in L2; a block of B (KC x NC, 6 MiB) is shared by the threads in L3.
 * KC = 512 makes one block of k of the GPT's k = 384 GEMMs (a half C then
 * needs no fp32 workspace for earlier blocks): 1.2-1.4x faster at those
 * shapes than KC = 256 on a Zen 3 (docs/GEMM.md). */
enum { MR = 6, NR = 16, KC = 512, MC = 72, NC = 3072 };

/* fp32 lanes from raw bytes: 8 fp32 values, or 8 fp16 / bf16 values in the
 * low 128 bits. Exact (F16C for fp16, a shift for bf16). */
static inline __m256 widen(mp_dtype t, __m256i raw) {
    switch (t) {
    case MP_F16: return _mm256_cvtph_ps(_mm256_castsi256_si128(raw));
    case MP_BF16: return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(raw)), 16));
    default: return _mm256_castsi256_ps(raw);
    }
}

/* 8 consecutive values of any input format from element i of p, as fp32 lanes. */
static inline __m256 ld8(const void *p, mp_dtype t, size_t i) {
    const uint8_t *s = (const uint8_t *)p + i * (t == MP_F32 ? 4 : 2);
    if (t == MP_F32) return widen(t, _mm256_loadu_si256((const __m256i *)s));
    return widen(t, _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)s)));
}

/* The first n of them (n < 8: the other lanes zero, and nothing after the n
 * values is read): a masked load of whole 32-bit words, or through a buffer
 * for an odd count of 16-bit values. */
static inline __m256 ld8n(const void *p, mp_dtype t, size_t i, size_t n) {
    if (n >= 8) return ld8(p, t, i);
    const size_t es = t == MP_F32 ? 4 : 2, bytes = n * es;
    const uint8_t *s = (const uint8_t *)p + i * es;
    if (bytes % 4 == 0) {
        const __m256i word = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(bytes / 4)), word);
        return widen(t, _mm256_maskload_epi32((const int *)s, mask));
    }
    uint16_t buf[8] = {0};
    memcpy(buf, s, bytes);
    return widen(t, _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)buf)));
}

/* Asks for the line at byte offset off of p, which may be past the end of
 * the array (a prefetch does not fault; the address is not formed in C).
 * always_inline: gcc 12 finds a plain inline wrapper of a prefetch "const"
 * and drops its calls. */
static inline __attribute__((always_inline)) void prefetch(const void *p, size_t off) {
    _mm_prefetch((const char *)(uintptr_t)((uintptr_t)p + off), _MM_HINT_T0);
}

/* Stores the first n (6 or 8) lanes of v at d. */
static inline void store_n(float *d, __m256 v, size_t n) {
    if (n == 8) {
        _mm256_storeu_ps(d, v);
        return;
    }
    _mm_storeu_ps(d, _mm256_castps256_ps128(v));
    _mm_storel_epi64((__m128i *)(d + 4), _mm_castps_si128(_mm256_extractf128_ps(v, 1)));
}

/* Transposes 8 x 8 fp32 values: r[i] lane j becomes r[j] lane i. Written
 * out: gcc -O2 keeps looped versions' arrays on the stack. */
static inline __attribute__((always_inline)) void transpose8(__m256 r[8]) {
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    /* s[c]: column c (low lane) and c + 4 (high lane) of rows 0..3; s[c + 4]: of rows 4..7 */
    const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xee);
    const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xee);
    const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xee);
    const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xee);
    r[0] = _mm256_permute2f128_ps(s0, s4, 0x20), r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
    r[1] = _mm256_permute2f128_ps(s1, s5, 0x20), r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    r[2] = _mm256_permute2f128_ps(s2, s6, 0x20), r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
    r[3] = _mm256_permute2f128_ps(s3, s7, 0x20), r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/* One micro-panel in fp32, (kc, width) with width MR or NR, as gemm.c's
 * pack_f32: for each k, `width` lines (rows of op(A) or columns of op(B))
 * starting at w0, of which `valid` are real and the rest zero. along = 1: the
 * lines of one k are consecutive in memory (element (p0+p)*ld + w0 + w), read
 * one k at a time; along = 0: each line is a run over k (element
 * (w0+w)*ld + p0 + p), packed 8 lines x 8 k at a time through a transpose
 * (6 lines for MR). Inlined with a constant format and width (pack_a/b):
 * the copy is cheap enough that branches on t inside it cost as much. */
static inline __attribute__((always_inline)) void pack_t(float *d, // (kc, width) fp32
                                                         const void *src, mp_dtype t, size_t ld, int along, size_t w0,
                                                         size_t valid, size_t p0, size_t kc, size_t width) {
    const size_t es = t == MP_F32 ? 4 : 2;
    if (along) {
        for (size_t p = 0; p < kc; p++) {
            const size_t r = (p0 + p) * ld + w0;
            /* 8 rows ahead, both ends (the rows are often 4 KiB apart, which
             * defeats the hardware prefetchers) */
            prefetch(src, (r + 8 * ld) * es);
            prefetch(src, (r + 8 * ld + width - 1) * es);
#pragma GCC unroll 2
            for (size_t lb = 0; lb < width; lb += 8) {
                const size_t nl = width - lb < 8 ? width - lb : 8, nv = valid > lb ? valid - lb : 0;
                store_n(d + p * width + lb, nv >= 8 ? ld8(src, t, r + lb) : ld8n(src, t, r + lb, nv < nl ? nv : nl),
                        nl);
            }
        }
        return;
    }
    for (size_t lb = 0; lb < width; lb += 8) {
        const size_t nl = width - lb < 8 ? width - lb : 8, nv = valid > lb ? valid - lb : 0;
        for (size_t p = 0; p < kc; p += 8) {
            const size_t np = kc - p < 8 ? kc - p : 8;
            __m256 r[8];
            if (nv >= nl && np == 8) { /* the usual whole block: unrolled, r[] stays in registers */
#pragma GCC unroll 8
                for (size_t w = 0; w < 8; w++) {
                    if (w < nl) prefetch(src, ((w0 + lb + w) * ld + p0 + p + 64) * es);
                    r[w] = w < nl ? ld8(src, t, (w0 + lb + w) * ld + p0 + p) : _mm256_setzero_ps();
                }
                transpose8(r);
#pragma GCC unroll 8
                for (size_t q = 0; q < 8; q++) store_n(d + (p + q) * width + lb, r[q], nl);
                continue;
            }
            for (size_t w = 0; w < 8; w++)
                r[w] = w < nv && w < nl ? ld8n(src, t, (w0 + lb + w) * ld + p0 + p, np) : _mm256_setzero_ps();
            transpose8(r);
            for (size_t q = 0; q < np; q++) store_n(d + (p + q) * width + lb, r[q], nl);
        }
    }
}

/* pack_t with the format as a constant. */
static inline __attribute__((always_inline)) void pack(float *d, // (kc, width) fp32
                                                       const void *src, mp_dtype t, size_t ld, int along, size_t w0,
                                                       size_t valid, size_t p0, size_t kc, size_t width) {
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

/* alpha * acc (beta == 0: C not read) or fma(alpha, acc, beta * C), as apply_ab in gemm.c */
static inline __m256 finish(__m256 acc, __m256 va, float beta, const float *c) {
    if (beta == 0.0f) return _mm256_mul_ps(va, acc);
    return _mm256_fmadd_ps(va, acc, _mm256_mul_ps(_mm256_set1_ps(beta), _mm256_loadu_ps(c)));
}

static void micro(size_t kc, const void *ap, // (kc, MR) fp32
                  const void *bp,            // (kc, NR) fp32, 32-byte aligned
                  float *c,                  // (MR, ldc) fp32
                  size_t ldc, float alpha, float beta) {
    const float *A = ap, *B = bp;
    for (int r = 0; r < MR; r++) { /* C's lines (often in L3 here) arrive while the loop runs */
        _mm_prefetch((const char *)(c + r * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + r * ldc + NR - 1), _MM_HINT_T0);
    }
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00,
           c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    /* unrolled: the loop's own instructions otherwise cost ~10% on Zen 3 */
#pragma GCC unroll 4
    for (size_t p = 0; p < kc; p++, A += MR, B += NR) {
        const __m256 b0 = _mm256_load_ps(B), b1 = _mm256_load_ps(B + 8);
        __m256 a;
#define ROW(r, x0, x1)                \
    a = _mm256_broadcast_ss(A + (r)); \
    x0 = _mm256_fmadd_ps(a, b0, x0);  \
    x1 = _mm256_fmadd_ps(a, b1, x1);
        ROW(0, c00, c01) ROW(1, c10, c11) ROW(2, c20, c21) ROW(3, c30, c31) ROW(4, c40, c41) ROW(5, c50, c51)
#undef ROW
    }
    const __m256 va = _mm256_set1_ps(alpha);
#define STORE(r, x0, x1)                                              \
    _mm256_storeu_ps(c + (r)*ldc, finish(x0, va, beta, c + (r)*ldc)); \
    _mm256_storeu_ps(c + (r)*ldc + 8, finish(x1, va, beta, c + (r)*ldc + 8));
    STORE(0, c00, c01) STORE(1, c10, c11) STORE(2, c20, c21) STORE(3, c30, c31) STORE(4, c40, c41) STORE(5, c50, c51)
#undef STORE
}

/* mp_gemm_kernel.row_sums (mp_gemm_row_sums_scalar's bits): a transposed A's values of one k for 8 rows are
 * consecutive, one vector of sums, each lane its own chain in k order. */
static void row_sums(float *sums, const void *a, mp_dtype t, size_t lda, int trans, size_t i0, size_t rows, size_t p0,
                     size_t kc) {
    if (!trans) { /* each row a run along k: one chain of additions per row */
        mp_gemm_row_sums_scalar(sums, a, t, lda, trans, i0, rows, p0, kc);
        return;
    }
    for (size_t r0 = 0; r0 < rows; r0 += 8) {
        const size_t n = rows - r0 < 8 ? rows - r0 : 8;
        float acc[8] = {0};
        memcpy(acc, sums + r0, n * sizeof *acc);
        __m256 s = _mm256_loadu_ps(acc);
        for (size_t p = 0; p < kc; p++) s = _mm256_add_ps(s, ld8n(a, t, (p0 + p) * lda + i0 + r0, n));
        _mm256_storeu_ps(acc, s);
        memcpy(sums + r0, acc, n * sizeof *acc);
    }
}

const mp_gemm_kernel mp_gemm_avx2 = {
    .name = "avx2-fp32",
    .mr = MR,
    .nr = NR,
    .kpack = 1,
    .kc = KC,
    .mc = MC,
    .nc = NC,
    .esize = 4,
    .pack_a = pack_a,
    .pack_b = pack_b,
    .micro = micro,
    .epilogue = mp_gemm_epilogue_avx2,
    .zeros = mp_gemm_zeros_avx2,
    .row_sums = row_sums,
};
