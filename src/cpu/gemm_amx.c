/* gemm_amx.c - bf16 x bf16 GEMM on AMX tiles (internal.h's layout; the same
 * blocking and packed panels as gemm_amx_model.c, which models it).
 *
 * Tiles: 0-1 hold two 16-row halves of a 32-row A slice (16 x 32 bf16, one
 * 64-byte row each), 2-3 two 16-column halves of the B slice (16 k pairs x 16
 * columns, read at the packed panel's 128-byte row stride), 4-7 accumulate the
 * 32 x 32 block of C; per 32-deep slice of k: four tile loads, four TDPBF16PS.
 * The operand that streams from L2 is loaded by TILELOADDT1 (a hint not to
 * keep it in L1), so that its lines do not evict the one kept: A's tiles where
 * the driver holds one B panel over a block of A panels (bench/amx_probe.c:
 * 60% -> 70% of the TDPBF16PS peak at kc = 384, 50% -> 67% at 512, on the AMX
 * Xeon), B's (the _stream_b kernels) where it holds an A panel over every
 * column panel (row panels, gemm.c).
 *
 * GCC 12's intrinsics: _tile_loadd declares no memory operand (a store into a
 * panel could be moved past it) and _tile_loadconfig an 8-byte one (stores
 * into a local configuration can be deleted). The configuration here is a
 * constant object (amx_tiles.h), and a compiler barrier stands before every
 * tile load. */
#include <immintrin.h>

#include "../internal.h"
#include "amx_tiles.h"
#include "gemm_tile.h"
#include "pack_pairs_avx512.h"

enum { MR = MP_AMX_MR, NR = MP_AMX_NR, KB = MP_AMX_KB };

static void begin(void) { _tile_loadconfig(&mp_tile_config_16x64); }
static void end(void) { _tile_release(); }

/* A micro-panel: for each 32-deep slice, MR rows of 32 values (zero past rows
 * and kc). Rows of op(A) along k (not trans) are copied 64 bytes at a time;
 * a transposed A (element (i, p) at p lda + i) is read two k at a time into
 * pairs and turned into rows by a 16 x 16 transpose of the 32-bit pairs. */
static void pack_a(void *dst, const void *a, mp_dtype t, size_t lda, int trans, size_t i0, size_t rows, size_t p0,
                   size_t kc) {
    (void)t;
    const uint16_t *A = a;
    uint16_t *d = dst;
    const size_t kpad = (kc + KB - 1) / KB * KB;
    if (!trans) {
        for (size_t s = 0; s < kpad; s += KB) {
            const size_t left = kc > s ? kc - s : 0, len = left < KB ? left : KB;
            const __mmask32 km = (__mmask32)(len >= 32 ? ~0u : (1u << len) - 1);
            for (size_t r = 0; r < MR; r++, d += KB)
                _mm512_storeu_si512(d, r < rows ? _mm512_maskz_loadu_epi16(km, A + (i0 + r) * lda + p0 + s)
                                                : _mm512_setzero_si512());
        }
        return;
    }
    const __m512i lo_idx = _mm512_loadu_si512(mp_pair_interleave), hi_idx = _mm512_loadu_si512(mp_pair_interleave + 32);
    const __mmask32 rm = (__mmask32)(rows >= 32 ? ~0u : (1u << rows) - 1);
    for (size_t s = 0; s < kpad; s += KB, d += MR * KB) {
        __m512i lo[16], hi[16]; /* lo[q] lane i: the pair (2q, 2q+1) of row i; hi: rows 16-31 */
        for (size_t q = 0; q < 16; q++) {
            const size_t p = s + 2 * q;
            const __m512i r0 = p < kc ? _mm512_maskz_loadu_epi16(rm, A + (p0 + p) * lda + i0) : _mm512_setzero_si512();
            const __m512i r1 =
                p + 1 < kc ? _mm512_maskz_loadu_epi16(rm, A + (p0 + p + 1) * lda + i0) : _mm512_setzero_si512();
            lo[q] = _mm512_permutex2var_epi16(r0, lo_idx, r1);
            hi[q] = _mm512_permutex2var_epi16(r0, hi_idx, r1);
        }
        transpose16(lo);
        transpose16(hi);
        for (size_t i = 0; i < 16; i++) {
            _mm512_storeu_si512(d + i * KB, lo[i]);
            _mm512_storeu_si512(d + (16 + i) * KB, hi[i]);
        }
    }
}

/* B micro-panel: pairs as vdpbf16ps's panels, zero pairs up to the slice. */
static void pack_b(void *dst, const void *b, mp_dtype t, size_t ldb, int trans, size_t p0, size_t kc, size_t j0,
                   size_t cols) {
    (void)t;
    pack_pairs(dst, b, ldb, !trans, j0, cols, p0, kc, NR);
    const size_t kpad = (kc + KB - 1) / KB * KB, have = (kc + 1) / 2;
    memset((uint32_t *)dst + have * NR, 0, (kpad / 2 - have) * NR * 4);
}

/* The four products of one 32-deep slice: A tiles 0-1 (32 rows of 64 bytes, sa bytes apart) by B tiles 2-3
 * into 4-7; the operand that streams (B where stream_b, else A) loaded by TILELOADDT1. */
static inline __attribute__((always_inline)) void slice(const uint8_t *A, long sa, const uint8_t *B,
                                                        const int stream_b) {
    MP_TILE_BARRIER();
    if (stream_b) {
        _tile_loadd(0, A, sa);
        _tile_stream_loadd(2, B, NR * 4);
        _tile_stream_loadd(3, B + 64, NR * 4);
    } else {
        _tile_stream_loadd(0, A, sa);
        _tile_loadd(2, B, NR * 4);
        _tile_loadd(3, B + 64, NR * 4);
    }
    _tile_dpbf16ps(4, 0, 2);
    if (stream_b) _tile_loadd(1, A + 16 * sa, sa);
    else _tile_stream_loadd(1, A + 16 * sa, sa);
    _tile_dpbf16ps(5, 0, 3);
    _tile_dpbf16ps(6, 1, 2);
    _tile_dpbf16ps(7, 1, 3);
}

static inline void zero_sums(void) {
    _tile_zero(4);
    _tile_zero(5);
    _tile_zero(6);
    _tile_zero(7);
}

static inline void store_sums(float *c, size_t ldc) {
    const long st = (long)(ldc * 4);
    _tile_stored(4, c, st);
    _tile_stored(5, c + 16, st);
    _tile_stored(6, c + 16 * ldc, st);
    _tile_stored(7, c + 16 * ldc + 16, st);
}

/* The sums so far (alpha 1, beta 1: the driver's earlier blocks of k) are the accumulators' start. */
static inline void load_sums(const float *c, size_t ldc) {
    const long st = (long)(ldc * 4);
    MP_TILE_BARRIER();
    _tile_loadd(4, c, st);
    _tile_loadd(5, c + 16, st);
    _tile_loadd(6, c + 16 * ldc, st);
    _tile_loadd(7, c + 16 * ldc + 16, st);
}

/* The micro-kernel on A's slices: 32 rows sa bytes apart, the next slice `step` bytes on. */
static inline __attribute__((always_inline)) void run(size_t kc, const uint8_t *A, long sa, size_t step,
                                                      const uint8_t *B, float *c, // (MR, ldc) fp32
                                                      size_t ldc, float alpha, float beta, const int stream_b) {
    const int from_c = alpha == 1.0f && beta == 1.0f;
    if (from_c) load_sums(c, ldc);
    else zero_sums();
    for (size_t s = 0; s < kc; s += KB, A += step, B += KB / 2 * NR * 4) slice(A, sa, B, stream_b);
    if (from_c || (alpha == 1.0f && beta == 0.0f)) {
        store_sums(c, ldc);
        return;
    }
    float acc[MR * NR] __attribute__((aligned(64)));
    store_sums(acc, NR);
    const __m512 va = _mm512_set1_ps(alpha);
    for (size_t i = 0; i < MR; i++)
        for (size_t j = 0; j < NR; j += 16)
            _mm512_storeu_ps(c + i * ldc + j,
                             mp_tile_finish(_mm512_load_ps(acc + i * NR + j), va, beta, c + i * ldc + j));
}

static void micro(size_t kc, const void *ap, const void *bp, float *c, size_t ldc, float alpha, float beta) {
    run(kc, ap, KB * 2, MR * KB * 2, bp, c, ldc, alpha, beta, 0);
}

/* micro with A's tiles loaded where A is: MR rows lda bf16 apart from the block's first k (op(A) not
 * transposed, kc whole slices), each slice's two tiles at the row stride instead of a packed copy's. */
static void micro_rows(size_t kc, const void *a, size_t lda, const void *bp, float *c, size_t ldc, float alpha,
                       float beta) {
    run(kc, a, (long)(lda * 2), KB * 2, bp, c, ldc, alpha, beta, 0);
}

/* micro and micro_rows for row panels: A's slices kept in L1 over the column panels, B's streamed */
static void micro_stream_b(size_t kc, const void *ap, const void *bp, float *c, size_t ldc, float alpha, float beta) {
    run(kc, ap, KB * 2, MR * KB * 2, bp, c, ldc, alpha, beta, 1);
}

static void micro_rows_stream_b(size_t kc, const void *a, size_t lda, const void *bp, float *c, size_t ldc, float alpha,
                                float beta) {
    run(kc, a, (long)(lda * 2), KB * 2, bp, c, ldc, alpha, beta, 1);
}

const mp_gemm_kernel mp_gemm_amx = {
    .name = "amx-tdpbf16",
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
    .micro_stream_b = micro_stream_b,
    .micro_rows_stream_b = micro_rows_stream_b,
    .epilogue = mp_gemm_epilogue_avx512bf16,
    .zeros = mp_gemm_zeros_avx512,
    .row_sums = mp_gemm_row_sums_avx512,
    .begin = begin,
    .end = end,
};
