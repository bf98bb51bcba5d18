/* gemm_amx_model.c - the AMX bf16 kernel's packing and a C model of its tile
 * operations, in portable C (internal.h, docs/GEMM.md).
 *
 * The driver (gemm.c), the blocking, the packed layouts and the edge handling
 * are those of the real kernel (cpu/gemm_amx.c); only the tile registers are
 * arrays here and TDPBF16PS is mp_tdpbf16ps_model. So everything but the
 * instruction itself is tested on every CPU, and where the CPU has AMX the
 * real kernel is tested against this one bit for bit. */
#include <math.h>

#include "internal.h"

enum { MR = MP_AMX_MR, NR = MP_AMX_NR, KB = MP_AMX_KB };

/* x with subnormals flushed to +-0 (by its bits: the same under any MXCSR) */
static inline float ftz(float x) {
    const uint32_t u = mp_f32_bits(x);
    return (u & 0x7f800000u) == 0 ? mp_bits_f32(u & 0x80000000u) : x;
}

static inline float bf16_daz(uint16_t h) {
    return (h & 0x7f80u) == 0 ? mp_bits_f32((uint32_t)(h & 0x8000u) << 16) : mp_bits_f32((uint32_t)h << 16);
}

void mp_tdpbf16ps_model(float *c, size_t ldc, const uint16_t *a, size_t lda, const uint16_t *b, size_t ldb) {
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            float even = 0.0f, odd = 0.0f;
            for (int q = 0; q < 16; q++) {
                const uint16_t *ap = a + (size_t)i * lda + 2 * q, *bp = b + (size_t)q * ldb + 2 * j;
                even = ftz(even + ftz(bf16_daz(ap[0]) * bf16_daz(bp[0])));
                odd = ftz(odd + ftz(bf16_daz(ap[1]) * bf16_daz(bp[1])));
            }
            c[(size_t)i * ldc + j] = ftz(c[(size_t)i * ldc + j] + ftz(even + odd));
        }
}

/* A micro-panel: for each 32-deep slice of k, MR rows of 32 values, zero
 * past rows and past kc (to the whole slice). trans: element (i, p) of op(A)
 * at p lda + i, else at i lda + p. */
static void pack_a(void *dst, const void *a, mp_dtype t, size_t lda, int trans, size_t i0, size_t rows, size_t p0,
                   size_t kc) {
    (void)t;
    const uint16_t *A = a;
    uint16_t *d = dst;
    const size_t kpad = (kc + KB - 1) / KB * KB;
    for (size_t s = 0; s < kpad; s += KB)
        for (size_t r = 0; r < MR; r++, d += KB)
            for (size_t x = 0; x < KB; x++) {
                const size_t p = s + x, i = i0 + r;
                d[x] = r < rows && p < kc ? (trans ? A[(p0 + p) * lda + i] : A[i * lda + p0 + p]) : 0;
            }
}

/* B micro-panel: for each k pair q, NR columns of (B[2q][j], B[2q+1][j]),
 * zero past cols and past kc (to the whole slice). trans: element (p, j) of
 * op(B) at j ldb + p, else at p ldb + j. */
static void pack_b(void *dst, const void *b, mp_dtype t, size_t ldb, int trans, size_t p0, size_t kc, size_t j0,
                   size_t cols) {
    (void)t;
    const uint16_t *B = b;
    uint16_t *d = dst;
    const size_t kpad = (kc + KB - 1) / KB * KB;
    for (size_t q = 0; q < kpad / 2; q++)
        for (size_t j = 0; j < NR; j++)
            for (size_t h = 0; h < 2; h++) {
                const size_t p = 2 * q + h;
                *d++ = j < cols && p < kc ? (trans ? B[(j0 + j) * ldb + p0 + p] : B[(p0 + p) * ldb + j0 + j]) : 0;
            }
}

/* The four products of one 32-deep slice, in cpu/gemm_amx.c's order, into
 * acc (rows 0-15: tiles 4 and 5; rows 16-31: 6 and 7): A's 32 rows sa
 * values apart. */
static void slice(float *acc, const uint16_t *A, size_t sa, const uint16_t *B) {
    for (int ti = 0; ti < 2; ti++)
        for (int tj = 0; tj < 2; tj++)
            mp_tdpbf16ps_model(acc + ti * 16 * NR + tj * 16, NR, A + ti * 16 * sa, sa, B + tj * 32, NR * 2);
}

/* The micro-kernel as cpu/gemm_amx.c's, on arrays: the accumulators zeroed
 * (alpha 1 and beta 1: loaded from C), the slices (A's rows sa values apart,
 * the next slice step values on), then C = alpha acc + beta C (C = acc when
 * loaded). */
static void run(size_t kc, const uint16_t *A, size_t sa, size_t step, const uint16_t *B, float *c, size_t ldc,
                float alpha, float beta) {
    const int from_c = alpha == 1.0f && beta == 1.0f;
    float acc[MR * NR] = {0};
    if (from_c)
        for (int i = 0; i < MR; i++) memcpy(acc + i * NR, c + (size_t)i * ldc, NR * sizeof *acc);
    for (size_t s = 0; s < kc; s += KB, A += step, B += KB / 2 * NR * 2) slice(acc, A, sa, B);
    if (from_c) {
        for (int i = 0; i < MR; i++) memcpy(c + (size_t)i * ldc, acc + i * NR, NR * sizeof *acc);
        return;
    }
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) {
            float *o = c + (size_t)i * ldc + j;
            *o = beta == 0.0f ? alpha * acc[i * NR + j] : fmaf(alpha, acc[i * NR + j], beta * *o);
        }
}

static void micro(size_t kc, const void *ap, const void *bp, float *c, size_t ldc, float alpha, float beta) {
    run(kc, ap, KB, MR * KB, bp, c, ldc, alpha, beta);
}

/* cpu/gemm_amx.c's micro_rows: A's tiles read where A is (MR rows lda apart, kc whole slices). */
static void micro_rows(size_t kc, const void *a, size_t lda, const void *bp, float *c, size_t ldc, float alpha,
                       float beta) {
    run(kc, a, lda, KB, bp, c, ldc, alpha, beta);
}

const mp_gemm_kernel mp_gemm_amx_model = {
    .name = "amx-model",
    .mr = MR,
    .nr = NR,
    .kpack = KB,
    .kc = MP_AMX_KC,
    .mc = MP_AMX_MC,
    .nc = MP_AMX_NC,
    .esize = 2,
    .pack_a = pack_a,
    .pack_b = pack_b,
    .micro = micro,
    .micro_rows = micro_rows,
    .rows_max_n = MP_AMX_ROWS_MAX_N,
    .panels_b_max = MP_AMX_PANELS_B_MAX,
    .micro_stream_b = micro, /* cache hints do not change the sums */
    .micro_rows_stream_b = micro_rows,
    .epilogue = mp_gemm_epilogue_scalar,
    .zeros = mp_gemm_zeros_scalar,
    .row_sums = mp_gemm_row_sums_scalar,
};
