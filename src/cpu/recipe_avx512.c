/* recipe_avx512.c - mp_qoperand's kernels with AVX-512: one pass from the
 * fp32 or bf16 source to the exact bf16 values and the counts, with no codes
 * in between; the bits and counts of recipe.c's panels (mp_recipe_ref),
 * checked by tests/test_recipe.c on every recipe, role and direction.
 *
 * Rounding onto a format's grid takes one of two exact routes. round_fast
 * (and E2M1's e2m1_rne, e2m1_sr): adding C, the power of two whose ulp is
 * the grid's quantum at |x|, rounds |x| onto the grid, and subtracting C is
 * exact; the rounding is the instruction's embedded one (nearest even, or
 * toward zero), not MXCSR's, and no operand or result is an fp32 subnormal
 * that FTZ/DAZ could change (the callers keep it so). round_grid: integer
 * arithmetic on the bit patterns (as mx_avx512.c), for the grids that reach
 * below 2^-126 (tiny MX blocks, whose values recipe.c flushes). The other
 * floating-point operations are the reference's own, one for one and in its
 * order: x * scale for per-tensor fp8 (recipe.c leaves DAZ to the reference
 * there: it forms products of subnormals exactly), and for nvfp4
 * block_amax * mult, 1 / (s * gd), fminf with FLT_MAX, x * inv, e2m1 * s
 * and the Hadamard transform's sums, differences and halvings, so that the
 * same MXCSR gives the reference's bits.
 *
 * Layout: with the reduction along the columns a row is read 32 columns at a
 * time as a pair of vectors (load32: bf16's even and odd columns, fp32's two
 * halves); a chunk of blocks gets its amaxes from a transposing max of 16
 * vectors (hmax16) and its lanes their block's parameters. With the
 * reduction along the rows a lane is a column: a block's amax is the
 * lane-wise max over its 32 or 16 row vectors, the Hadamard transform's
 * butterflies run between row vectors, and each lane has its own scale;
 * nothing is transposed. Counts run in 32-bit lanes (a call's share has far
 * fewer than 2^32 elements per lane); finite amaxes are taken per block
 * where the block amax is at hand.
 */
#include <float.h>
#include <immintrin.h>

#include "../internal.h"

/* embedded rounding: to nearest even whatever MXCSR says, no exceptions (a constant, as clang requires) */
#define RN (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

#define AI static inline __attribute__((always_inline))

#define ABS 0x7fffffff
#define INF 0x7f800000
#define QNAN 0x7fc00000
#define E4M3_MAX 0x43e00000 /* 448 */
#define E5M2_MAX 0x47600000 /* 57344 */

static inline __m512i set1(int v) { return _mm512_set1_epi32(v); }
static inline __m512i bits(__m512 x) { return _mm512_castps_si512(x); }
static inline __m512 flt(__m512i x) { return _mm512_castsi512_ps(x); }

/* ---- loads, stores, counts ---- */

/* The lanes of columns [c, c + 16) that are below cols. */
static inline __mmask16 cols_mask(size_t cols, size_t c) {
    return c + 16 <= cols ? (__mmask16)0xffff : c >= cols ? 0 : (__mmask16)((1u << (cols - c)) - 1);
}

/* fp32 bits of 16 source values from column c of a row (fp32 or bf16); 0
 * outside m (the padding). Masked loads only for a row's tail. */
AI __m512i load16(const void *row, size_t c, __mmask16 m, const int f32) {
    if (f32) {
        const float *p = (const float *)row + c;
        return m == 0xffff ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi32(m, p);
    }
    const uint16_t *p = (const uint16_t *)row + c;
    const __m256i h = m == 0xffff ? _mm256_loadu_si256((const __m256i *)p) : _mm256_maskz_loadu_epi16(m, p);
    return _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
}

/* The bf16 halves of 16 exact values (fp32 bits) into columns [c, c + 16) of
 * an output row, lanes in m. Masked stores (slow on Zen 4/5) only for a
 * row's tail. */
AI void store16(uint16_t *row, size_t c, __m512i v, __mmask16 m) {
    const __m256i h = _mm512_cvtepi32_epi16(_mm512_srli_epi32(v, 16));
    if (m == 0xffff) _mm256_storeu_si256((__m256i *)(row + c), h);
    else _mm256_mask_storeu_epi16(row + c, m, h);
}

static inline const void *src_row(const mp_qop *op, size_t i) {
    return (const char *)op->src + i * op->lds * (op->st == MP_F32 ? 4 : 2);
}

typedef struct {
    __m512i sat, flush, nonfinite, amax; /* per-lane counts; the largest finite |x| (bits) */
} counts;

static inline counts counts0(void) {
    const __m512i z = _mm512_setzero_si512();
    return (counts){z, z, z, z};
}

/* Counts 16 inputs (magnitude bits a): the inf and NaN ones, the largest
 * finite one, and among the finite ones those in sat and the nonzero ones in
 * flush. */
AI void count16(counts *k, __m512i a, __mmask16 sat, __mmask16 flush) {
    const __m512i one = set1(1);
    const __mmask16 fin = _mm512_cmplt_epu32_mask(a, set1(INF));
    k->nonfinite = _mm512_mask_add_epi32(k->nonfinite, (__mmask16)~fin, k->nonfinite, one);
    k->amax = _mm512_mask_max_epu32(k->amax, fin, k->amax, a);
    k->sat = _mm512_mask_add_epi32(k->sat, sat & fin, k->sat, one);
    k->flush = _mm512_mask_add_epi32(k->flush, flush & fin & _mm512_test_epi32_mask(a, a), k->flush, one);
}

static void counts_add(const counts *k, mp_quant_stats *st) {
    st->saturated += (uint32_t)_mm512_reduce_add_epi32(k->sat);
    st->flushed += (uint32_t)_mm512_reduce_add_epi32(k->flush);
    st->nonfinite += (uint32_t)_mm512_reduce_add_epi32(k->nonfinite);
    mp_quant_amax(st, (uint32_t)_mm512_reduce_max_epu32(k->amax));
}

/* Lane l of the result: the largest (unsigned) lane of v[l]. */
AI __m512i hmax16(const __m512i v[16]) {
    __m512i t[8], u[4], x[2];
    for (int k = 0; k < 8; k++) /* in each 128-bit lane: a0|a2, b0|b2, a1|a3, b1|b3 of a = v[2k], b = v[2k+1] */
        t[k] = _mm512_max_epu32(_mm512_unpacklo_epi32(v[2 * k], v[2 * k + 1]),
                                _mm512_unpackhi_epi32(v[2 * k], v[2 * k + 1]));
    for (int k = 0; k < 4; k++) /* in each 128-bit lane: its max of v[4k], .., v[4k+3] */
        u[k] = _mm512_max_epu32(_mm512_unpacklo_epi64(t[2 * k], t[2 * k + 1]),
                                _mm512_unpackhi_epi64(t[2 * k], t[2 * k + 1]));
    for (int k = 0; k < 2; k++) /* pairs of 128-bit lanes */
        x[k] = _mm512_max_epu32(_mm512_shuffle_i32x4(u[2 * k], u[2 * k + 1], 0x88),
                                _mm512_shuffle_i32x4(u[2 * k], u[2 * k + 1], 0xDD));
    return _mm512_max_epu32(_mm512_shuffle_i32x4(x[0], x[1], 0x88), _mm512_shuffle_i32x4(x[0], x[1], 0xDD));
}

/* ---- rounding onto a format's grid ----
 *
 * Magnitudes a (fp32 bits, sign clear) rounded to nearest even onto the grid
 * of a format with M mantissa bits whose smallest quantum is 2^(lo - 150)
 * (its subnormals), unbounded above: a = sig * 2^(f - 150) with sig a 24-bit
 * significand (an fp32 subnormal is normalized first: converted to fp32, it
 * is a * 2^149 exactly, and f goes below 1); dropping sh = max(23 - M, lo -
 * f) bits (at most 25: all of them, and then the half below) leaves q, and
 * the result is q * 2^(f - 150 + sh), exact in fp32 (q < 2^(M+2) converts
 * exactly). Returns its bits, and in *zero the lanes that are 0 or below
 * 2^-126 (there the bits are not the value: a result that small is flushed
 * by the callers). Infinities come out above every format's max; NaNs are the
 * callers' to handle. */
AI __m512i round_grid(__m512i a, __m512i lo, const int M, __mmask16 *zero) {
    const __m512i one = set1(1);
    const __mmask16 sub = _mm512_cmplt_epu32_mask(a, set1(0x800000));
    const __m512i t = _mm512_mask_mov_epi32(a, sub, bits(_mm512_cvtepi32_ps(a)));
    __m512i f = _mm512_srli_epi32(t, 23);
    f = _mm512_mask_sub_epi32(f, sub, f, set1(149));
    const __m512i sig = _mm512_or_si512(_mm512_and_si512(t, set1(0x7fffff)), set1(0x800000));
    __m512i sh = _mm512_max_epi32(_mm512_sub_epi32(lo, f), set1(23 - M));
    sh = _mm512_min_epi32(sh, set1(25));
    const __m512i odd = _mm512_and_si512(_mm512_srlv_epi32(sig, sh), one);
    const __m512i half_m1 = _mm512_sub_epi32(_mm512_sllv_epi32(one, _mm512_sub_epi32(sh, one)), one);
    const __m512i q = _mm512_srlv_epi32(_mm512_add_epi32(_mm512_add_epi32(sig, half_m1), odd), sh);
    const __m512i e = _mm512_add_epi32(f, _mm512_sub_epi32(sh, set1(150)));
    const __m512i v = _mm512_add_epi32(bits(_mm512_cvtepi32_ps(q)), _mm512_slli_epi32(e, 23));
    *zero = _mm512_cmplt_epi32_mask(v, set1(0x800000)) | _mm512_testn_epi32_mask(q, q);
    return v;
}

/* round_grid with saturation at maxb (the format's largest value, bits):
 * *sat gets the lanes that rounded past it; flushed lanes become +0. */
AI __m512i round_sat(__m512i a, __m512i lo, const int M, __m512i maxb, __mmask16 *sat, __mmask16 *zero) {
    const __m512i v = round_grid(a, lo, M, zero);
    *sat = _mm512_mask_cmpgt_epi32_mask((__mmask16) ~*zero, v, maxb);
    return _mm512_mask_mov_epi32(_mm512_maskz_mov_epi32((__mmask16) ~*zero, v), *sat, maxb);
}

/* Nearest even onto a grid with M mantissa bits down to minnorm (bits) and
 * the fixed quantum of minnorm's binade below it, unbounded above, for
 * magnitudes a (fp32 bits, sign clear) below 2^(105+M) on grids whose
 * smallest nonzero value is at least 2^-125: with e the exponent of a's
 * binade or of minnorm's, whichever is higher, the grid's quantum at a is
 * 2^(e-M), the ulp of C = 2^(e+23-M) and of a + C (same binade), so a + C
 * rounds a to it (nearest even: the instruction's embedded rounding,
 * whatever MXCSR says) and subtracting C is exact. Nothing here is an fp32
 * subnormal: an input that DAZ reads as 0 rounds to 0 either way (it is
 * below half the smallest nonzero value), and no result is flushed. Lanes
 * with a larger a (inf and NaN included) come out as garbage: the callers
 * saturate them. */
AI __m512i round_fast(__m512i a, __m512i minnorm, const int M) {
    const __m512i e = _mm512_max_epi32(_mm512_and_si512(a, set1(INF)), minnorm);
    const __m512 C = flt(_mm512_add_epi32(e, set1((23 - M) << 23)));
    return bits(_mm512_sub_round_ps(_mm512_add_round_ps(flt(a), C, RN), C, RN));
}

/* The sign of x on the magnitude v (one ternary-logic op: x where the mask
 * has the sign bit, v elsewhere). */
AI __m512i with_sign(__m512i v, __m512i x) { return _mm512_ternarylogic_epi32(set1((int)0x80000000u), x, v, 0xCA); }

/* ---- pairs: 32 columns of a row in two vectors ----
 * bf16: the even columns in the first vector and the odd ones in the second
 * (a shift or a mask puts a bf16 word into an fp32 lane: no shuffle, and
 * one blend packs the results back); fp32: columns c .. c+15 and c+16 ..
 * c+31. Element-wise work does not care which; per-column work (the blocks
 * down the columns) sees the same layout in every pass. */

static inline __mmask32 cols_mask32(size_t cols, size_t c) {
    return c + 32 <= cols ? 0xffffffffu : c >= cols ? 0 : (__mmask32)((1ull << (cols - c)) - 1);
}

/* fp32 bits of columns [c, c + 32) of a row; 0 from cols on. */
AI void load32(const void *row, size_t c, size_t cols, __m512i x[2], const int f32) {
    if (f32) {
        const float *p = (const float *)row + c;
        if (c + 32 <= cols) x[0] = _mm512_loadu_si512(p), x[1] = _mm512_loadu_si512(p + 16);
        else
            x[0] = _mm512_maskz_loadu_epi32(cols_mask(cols, c), p),
            x[1] = _mm512_maskz_loadu_epi32(cols_mask(cols, c + 16), p + 16);
        return;
    }
    const uint16_t *p = (const uint16_t *)row + c;
    const __m512i v = c + 32 <= cols ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi16(cols_mask32(cols, c), p);
    x[0] = _mm512_slli_epi32(v, 16), x[1] = _mm512_and_si512(v, set1((int)0xffff0000u));
}

/* The bf16 halves of 32 exact values (fp32 bits, as load32 lays them out)
 * into columns [c, c + 32) of an output row, those below cols. */
AI void store32(uint16_t *row, size_t c, size_t cols, const __m512i v[2], const int f32) {
    __m512i h;
    if (f32) {
        static const uint16_t odd_words[32] = {1,  3,  5,  7,  9,  11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31,
                                               33, 35, 37, 39, 41, 43, 45, 47, 49, 51, 53, 55, 57, 59, 61, 63};
        h = _mm512_permutex2var_epi16(v[0], _mm512_loadu_si512(odd_words), v[1]);
    } else {
        h = _mm512_mask_blend_epi16(0xAAAAAAAAu, _mm512_srli_epi32(v[0], 16), v[1]);
    }
    if (c + 32 <= cols) _mm512_storeu_si512(row + c, h);
    else _mm512_mask_storeu_epi16(row + c, cols_mask32(cols, c), h);
}

/* ---- per-tensor fp8 ----
 * p = fp32(x * scale), then E4M3 / E5M2 with satfinite (fp8_scale.c): the
 * code's value is p on the format's grid (normal from 2^-6 / 2^-14, quantum
 * 2^-9 / 2^-16 below); past the max's rounding threshold (E4M3: above 464,
 * which ties down to 448; E5M2: from 61440, which ties up; inf included) the
 * max; a NaN keeps the sign and, in E5M2, the payload's top bit (format.h's
 * codes' values). */
AI __m512i fp8_vec(__m512i x, __m512 s, const int e5, counts *k) {
    const __m512i p = bits(_mm512_mul_ps(flt(x), s)), pa = _mm512_and_si512(p, set1(ABS));
    __m512i v = round_fast(pa, set1(e5 ? 0x38800000 : 0x3c800000), e5 ? 2 : 3);
    const __mmask16 sat = _mm512_cmpgt_epi32_mask(pa, set1(e5 ? 0x476fffff : 0x43e80000));
    v = _mm512_mask_mov_epi32(v, sat, set1(e5 ? E5M2_MAX : E4M3_MAX));
    count16(k, _mm512_and_si512(x, set1(ABS)), sat, _mm512_testn_epi32_mask(v, v));
    const __m512i nan = e5 ? _mm512_or_si512(set1(QNAN), _mm512_and_si512(pa, set1(0x200000))) : set1(QNAN);
    return with_sign(_mm512_mask_mov_epi32(v, _mm512_cmpgt_epi32_mask(pa, set1(INF)), nan), p);
}

AI void fp8_rows(const mp_qop *op, size_t r0, size_t r1, mp_quant_stats *st, const int f32, const int e5) {
    const __m512 s = _mm512_set1_ps(op->scale);
    counts k = counts0();
    for (size_t i = r0; i < r1; i++) {
        const void *row = src_row(op, i);
        uint16_t *out = op->dst + i * op->ldd;
        for (size_t c = 0; c < op->cols; c += 32) {
            __m512i x[2];
            load32(row, c, op->cols, x, f32);
            x[0] = fp8_vec(x[0], s, e5, &k), x[1] = fp8_vec(x[1], s, e5, &k);
            store32(out, c, op->cols, x, f32);
        }
    }
    counts_add(&k, st);
}

/* ---- mxfp8 ----
 * A finite block's E8M0 scale s comes from mx.c's rule (mp_mx_avx512.scales);
 * an element is x on the E4M3 grid scaled by 2^(s-127) (normal from
 * 2^(s-133), quantum 2^(s-136) below), saturated at 448 * 2^(s-127) past
 * 464 * 2^(s-127), which is what coding x * 2^(127-s) and multiplying back
 * gives (mx.c); values below 2^-126 become +-0 (recipe.c). A block holding
 * an inf or a NaN is all NaN (+0x7fc0).
 * round_fast takes the blocks with 11 <= s and amax < 2^108; the "edge"
 * ones (s <= 10: flushes, and inputs that DAZ would change; amax from 2^108:
 * C would overflow) take round_grid, and blocks with a NaN or an inf go
 * the slow way too (mx_slow). An all-zero block is never an edge: its zeros
 * come out of either. The finite amaxes are counted once per block. */

typedef struct {
    __m512i maxb, past, minnorm, lo; /* 448 and 464 times 2^(s-127), 2^(s-133) (bits); round_grid's lo */
} mxgrid;

AI mxgrid mx_grid(__m512i s) {
    const __m512i e = _mm512_slli_epi32(s, 23);
    return (mxgrid){_mm512_add_epi32(e, set1(E4M3_MAX - (127 << 23))),
                    _mm512_add_epi32(e, set1(0x43e80000 - (127 << 23))), _mm512_sub_epi32(e, set1(6 << 23)),
                    _mm512_add_epi32(s, set1(14))};
}

/* The edge blocks among 16 with scales s and finite amaxes am (0 for NaN blocks). */
AI __mmask16 mx_edge(__m512i s, __m512i am) {
    return _mm512_mask_cmple_epi32_mask(_mm512_test_epi32_mask(am, am), s, set1(10)) |
           _mm512_cmpge_epu32_mask(am, set1(0x75800000));
}

/* 16 elements of edge blocks or NaN blocks (lanes in nan), counted in full. */
static __m512i mx_slow(__m512i x, const mxgrid *g, __mmask16 nan, counts *k) {
    const __m512i a = _mm512_and_si512(x, set1(ABS));
    __mmask16 sat, zero;
    const __m512i v = round_sat(a, g->lo, 3, g->maxb, &sat, &zero);
    count16(k, a, sat & (__mmask16)~nan, zero & (__mmask16)~nan);
    return _mm512_mask_mov_epi32(with_sign(v, x), nan, set1(QNAN));
}

/* 16 elements on the grid g; slow: some lane is an edge or NaN block's. */
AI __m512i mx_vec(__m512i x, const mxgrid *g, __mmask16 nan, int slow, counts *k) {
    if (slow) return mx_slow(x, g, nan, k);
    const __m512i a = _mm512_and_si512(x, set1(ABS));
    const __mmask16 sat = _mm512_cmpgt_epi32_mask(a, g->past);
    const __m512i v = _mm512_mask_mov_epi32(round_fast(a, g->minnorm, 3), sat, g->maxb);
    k->sat = _mm512_mask_add_epi32(k->sat, sat, k->sat, set1(1));
    k->flush = _mm512_mask_add_epi32(k->flush, _mm512_mask_testn_epi32_mask(_mm512_test_epi32_mask(a, a), v, v),
                                     k->flush, set1(1));
    return with_sign(v, x);
}

/* |x| of 32 columns from c: the lane-wise max of the pair's two vectors. */
AI __m512i amax32(const void *row, size_t c, size_t cols, const int f32) {
    __m512i x[2];
    load32(row, c, cols, x, f32);
    return _mm512_max_epu32(_mm512_and_si512(x[0], set1(ABS)), _mm512_and_si512(x[1], set1(ABS)));
}

/* Blocks along the rows: a block is a pair; a row in chunks of 16 blocks
 * (512 columns): their amaxes (hmax16), scales, then the values. */
AI void mx_rows(const mp_qop *op, size_t r0, size_t r1, mp_quant_stats *st, const int f32) {
    const size_t cols = op->cols, cp = (cols + 31) / 32 * 32;
    counts k = counts0();
    for (size_t i = r0; i < r1; i++) {
        const void *row = src_row(op, i);
        uint16_t *out = op->dst + i * op->ldd;
        for (size_t c0 = 0; c0 < cp; c0 += 512) {
            const size_t nb = (cp - c0) / 32 < 16 ? (cp - c0) / 32 : 16;
            __m512i bm[16];
            for (size_t b = 0; b < 16; b++)
                bm[b] = b < nb ? amax32(row, c0 + 32 * b, cols, f32) : _mm512_setzero_si512();
            const __m512i am = hmax16(bm);
            const __mmask16 nanb = _mm512_cmpge_epu32_mask(am, set1(INF));
            const __m512i fin = _mm512_maskz_mov_epi32((__mmask16)~nanb, am);
            uint32_t fa[16];
            uint8_t s8[16];
            _mm512_storeu_si512(fa, fin);
            mp_mx_avx512.scales(s8, fa, nb, MP_E4M3, op->rule);
            k.amax = _mm512_max_epu32(k.amax, fin);
            const __mmask16 slow = nanb | mx_edge(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)s8)), fin);
            for (size_t b = 0; b < nb; b++) {
                const size_t c = c0 + 32 * b;
                const mxgrid g = mx_grid(set1(s8[b]));
                const __mmask16 nan = (nanb >> b) & 1 ? (__mmask16)0xffff : 0;
                const int sl = (slow >> b) & 1;
                __m512i x[2];
                load32(row, c, cols, x, f32);
                x[0] = mx_vec(x[0], &g, nan, sl, &k), x[1] = mx_vec(x[1], &g, nan, sl, &k);
                store32(out, c, cols, x, f32);
            }
        }
    }
    counts_add(&k, st);
}

#define MXW 2048 /* columns of a chunk when the blocks run down the columns: whole rows up to that */

/* Blocks down the columns: a block row (32 rows) in chunks of MXW columns,
 * one pass along its rows for the columns' amaxes (row by row: the
 * prefetchers follow), then the values a pair of vectors (32 columns) at a
 * time down the rows, which are in L1 or L2 by then (32 rows of 2048 fp32
 * values are 256 KiB). */
AI void mx_cols(const mp_qop *op, size_t r0, size_t r1, mp_quant_stats *st, const int f32) {
    const size_t cols = op->cols;
    counts k = counts0();
    for (size_t i0 = r0; i0 < r1; i0 += 32) {
        const size_t nr = op->rows - i0 < 32 ? op->rows - i0 : 32; /* the zero rows that pad the block change nothing */
        for (size_t c0 = 0; c0 < cols; c0 += MXW) {
            const size_t np = ((cols - c0 < MXW ? cols - c0 : MXW) + 31) / 32; /* pairs */
            __m512i cm[MXW / 16];
            __mmask16 nan[MXW / 16];
            uint32_t fa[MXW] __attribute__((aligned(64)));
            uint8_t s8[MXW];
            for (size_t v = 0; v < 2 * np; v++) cm[v] = _mm512_setzero_si512();
            for (size_t r = 0; r < nr; r++) {
                const void *row = src_row(op, i0 + r);
                for (size_t p = 0; p < np; p++) {
                    __m512i x[2];
                    load32(row, c0 + 32 * p, cols, x, f32);
                    cm[2 * p] = _mm512_max_epu32(cm[2 * p], _mm512_and_si512(x[0], set1(ABS)));
                    cm[2 * p + 1] = _mm512_max_epu32(cm[2 * p + 1], _mm512_and_si512(x[1], set1(ABS)));
                }
            }
            for (size_t v = 0; v < 2 * np; v++) {
                nan[v] = _mm512_cmpge_epu32_mask(cm[v], set1(INF));
                const __m512i fin = _mm512_maskz_mov_epi32((__mmask16)~nan[v], cm[v]);
                _mm512_store_si512(fa + 16 * v, fin);
                k.amax = _mm512_max_epu32(k.amax, fin);
            }
            mp_mx_avx512.scales(s8, fa, 32 * np, MP_E4M3, op->rule);
            for (size_t p = 0; p < np; p++) { /* down the block's rows (in cache), a pair's grids in registers */
                const __m512i s0 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(s8 + 32 * p)));
                const __m512i s1 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(s8 + 32 * p + 16)));
                const mxgrid g0 = mx_grid(s0), g1 = mx_grid(s1);
                const __mmask16 n0 = nan[2 * p], n1 = nan[2 * p + 1];
                const int sl = (n0 | n1 | mx_edge(s0, _mm512_load_si512(fa + 32 * p)) |
                                mx_edge(s1, _mm512_load_si512(fa + 32 * p + 16))) != 0;
                for (size_t r = 0; r < nr; r++) {
                    __m512i x[2];
                    load32(src_row(op, i0 + r), c0 + 32 * p, cols, x, f32);
                    x[0] = mx_vec(x[0], &g0, n0, sl, &k), x[1] = mx_vec(x[1], &g1, n1, sl, &k);
                    store32(op->dst + (i0 + r) * op->ldd, c0 + 32 * p, cols, x, f32);
                }
            }
        }
    }
    counts_add(&k, st);
}

/* ---- nvfp4 ----
 * nvfp4.c's rules: block scale s = e4m3_sat(block_amax * mult), inv =
 * fminf(1 / (s * gd), FLT_MAX), element = E2M1 of y = x * inv with
 * satfinite (nearest even, or stochastic with a random byte), value = e2m1 *
 * s, an exact product; a block holding a NaN is all NaN (0 * NaN: +0x7fc0).
 * Here s is NaN for such a block, which makes every value that NaN (x86
 * returns the NaN operand) and marks the block "gone" with the zero-scale
 * ones (not s > 0): their nonzero elements count as flushed. */

typedef struct {
    __m512 inv, s; /* the element multiplier; the block scale's value (NaN: a NaN block) */
} nvpar;

/* The parameters of 16 blocks from their amaxes (bits). */
AI nvpar nv_params(__m512i am, __m512 mult, __m512 gd) {
    const __m512i prod = bits(_mm512_mul_ps(flt(am), mult)); /* >= 0 (or NaN) */
    __mmask16 sat, zero;
    const __m512 s = flt(round_sat(_mm512_and_si512(prod, set1(ABS)), set1(141), 3, set1(E4M3_MAX), &sat, &zero));
    const __m512 inv =
        _mm512_min_ps(_mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_mul_ps(s, gd)), _mm512_set1_ps(FLT_MAX));
    return (nvpar){inv, _mm512_mask_mov_ps(s, _mm512_cmpgt_epu32_mask(am, set1(INF)), flt(set1(QNAN)))};
}

/* |y| (bits a) to nearest even in E2M1, as a value 0 .. 6: round_fast's
 * trick with E2M1's grid (quantum 0.5 below 2, 1 in [2, 4), 2 in [4, 8):
 * C = 2^(max(e, 0) + 22)); from 7 on (7 ties up to 8; inf, NaN and the
 * products too large for C included) it rounds past 6: *past, and 6. A y
 * that DAZ reads as 0 is below 2^-126 and rounds to 0 either way. */
AI __m512 e2m1_rne(__m512i a, __mmask16 *past) {
    const __m512i p2 = _mm512_max_epi32(_mm512_and_si512(a, set1(INF)), set1(0x3f800000)); /* 2^max(e, 0) */
    const __m512 C = flt(_mm512_add_epi32(p2, set1(22 << 23)));
    const __m512 v = _mm512_sub_round_ps(_mm512_add_round_ps(flt(a), C, RN), C, RN);
    *past = _mm512_cmpge_epi32_mask(a, set1(0x40e00000));
    return _mm512_mask_mov_ps(v, *past, _mm512_set1_ps(6.0f));
}

/* |y| (bits a) rounded stochastically in E2M1 with the random bytes r, as
 * nvfp4.c's e2m1_round: with step the E2M1 spacing at |y| (the ulp of
 * e2m1_rne's C), t = |y| truncated to a multiple of step (a + C rounded
 * toward zero, minus C: exact) and F = floor(256 (|y| - t) / step) (exact:
 * |y| - t is, and 256 / step is a power of two, 2^(285 - C's field - 127)),
 * |y| rounds up to t + step iff F + r >= 256; past 6 (or |y| >= 8) it
 * saturates: *past, and 6. A y that DAZ reads as 0 is below 2^-126, where
 * F = 0 either way. */
AI __m512 e2m1_sr(__m512i a, __m512i r, __mmask16 *past) {
    const __m512i cb =
        _mm512_add_epi32(_mm512_max_epi32(_mm512_and_si512(a, set1(INF)), set1(0x3f800000)), set1(22 << 23));
    const __m512 C = flt(cb), step = flt(_mm512_sub_epi32(cb, set1(23 << 23)));
    const __m512 t = _mm512_sub_round_ps(_mm512_add_round_ps(flt(a), C, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC), C,
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f256 = _mm512_mul_ps(_mm512_sub_ps(flt(a), t), flt(_mm512_sub_epi32(set1((int)(285u << 23)), cb)));
    const __m512i F = _mm512_cvtt_roundps_epi32(f256, _MM_FROUND_NO_EXC);
    const __m512 v = _mm512_mask_add_ps(t, _mm512_cmpge_epi32_mask(_mm512_add_epi32(F, r), set1(256)), t, step);
    *past = _mm512_cmpge_epi32_mask(a, set1(0x41000000)) | _mm512_cmp_ps_mask(v, _mm512_set1_ps(6.0f), _CMP_GT_OQ);
    return _mm512_mask_mov_ps(v, *past, _mm512_set1_ps(6.0f));
}

/* 16 elements with their blocks' inv and s (per lane): the values, counted
 * as nvfp4.c counts them; special: a lane's block holds an inf or a NaN
 * (then the elements' own amax and nonfinite counts; otherwise the caller
 * counts the blocks' amaxes). */
AI __m512i nv_vec(__m512i x, __m512 inv, __m512 s, __m512i rnd, const int sr, int special, counts *k) {
    const __m512i y = bits(_mm512_mul_ps(flt(x), inv)), a = _mm512_and_si512(y, set1(ABS));
    __mmask16 past;
    const __m512 u = sr ? e2m1_sr(a, rnd, &past) : e2m1_rne(a, &past);
    const __m512i su = _mm512_ternarylogic_epi32(bits(u), y, set1((int)0x80000000u), 0x78); /* u ^ (y's sign) */
    const __m512 v = _mm512_mul_ps(flt(su), s);
    const __mmask16 gone = _mm512_cmp_ps_mask(s, _mm512_setzero_ps(), _CMP_NGT_UQ); /* s = 0 or NaN */
    const __mmask16 zero = gone | _mm512_testn_epi32_mask(bits(u), bits(u));
    if (special) {
        count16(k, _mm512_and_si512(x, set1(ABS)), past & (__mmask16)~gone, zero);
    } else {
        k->sat = _mm512_mask_add_epi32(k->sat, past & (__mmask16)~gone, k->sat, set1(1));
        k->flush = _mm512_mask_add_epi32(k->flush, _mm512_mask_test_epi32_mask(zero, x, set1(ABS)), k->flush, set1(1));
    }
    return bits(v);
}

/* ---- the stochastic-rounding stream: Philox4x32-10 on 16 counters ---- */

/* The 64-bit products a * M of 16 lanes: low and high halves. */
AI void mulhilo(__m512i a, __m512i M, __m512i *hi, __m512i *lo) {
    const __m512i pe = _mm512_mul_epu32(a, M), po = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), M);
    *lo = _mm512_mask_blend_epi32(0xAAAA, pe, _mm512_slli_epi64(po, 32));
    *hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(pe, 32), po);
}

/* nvfp4.c's philox4x32_10 of the counters {lo32(c), hi32(c), 0, 0}, c = (blk
 * + lane) mod 2^60 (the block of stream bytes 16 c .. 16 c + 15), key = seed:
 * output word j of lane l in w[j]. */
AI void philox16(uint64_t seed, uint64_t blk, __m512i w[4]) {
    const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    __m512i c0 = _mm512_add_epi32(set1((int)(uint32_t)blk), iota);
    __m512i c1 = _mm512_mask_add_epi32(set1((int)(uint32_t)(blk >> 32)), _mm512_cmplt_epu32_mask(c0, iota),
                                       set1((int)(uint32_t)(blk >> 32)), set1(1)); /* the carry */
    c1 = _mm512_and_si512(c1, set1(0x0fffffff));
    __m512i c2 = _mm512_setzero_si512(), c3 = _mm512_setzero_si512();
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    const __m512i M0 = set1((int)0xD2511F53u), M1 = set1((int)0xCD9E8D57u);
    for (int round = 0; round < 10; round++) {
        __m512i hi0, lo0, hi1, lo1;
        mulhilo(c0, M0, &hi0, &lo0);
        mulhilo(c2, M1, &hi1, &lo1);
        c0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), set1((int)k0));
        c1 = lo1;
        c2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), set1((int)k1));
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    w[0] = c0, w[1] = c1, w[2] = c2, w[3] = c3;
}

/* Stream bytes 16 blk .. 16 blk + 255 in order, 64 in each of o[4]: the 16
 * bytes of a block are its four words, little-endian. */
AI void sr_bytes256(__m512i o[4], uint64_t seed, uint64_t blk) {
    __m512i w[4];
    philox16(seed, blk, w);
    /* in each 128-bit lane j: t[q] = the words of block 4j + q */
    const __m512i a = _mm512_unpacklo_epi32(w[0], w[1]), b = _mm512_unpackhi_epi32(w[0], w[1]);
    const __m512i c = _mm512_unpacklo_epi32(w[2], w[3]), d = _mm512_unpackhi_epi32(w[2], w[3]);
    const __m512i t0 = _mm512_unpacklo_epi64(a, c), t1 = _mm512_unpackhi_epi64(a, c);
    const __m512i t2 = _mm512_unpacklo_epi64(b, d), t3 = _mm512_unpackhi_epi64(b, d);
    /* output vector j: lane j of t0, t1, t2, t3 */
    const __m512i l01 = _mm512_shuffle_i32x4(t0, t1, 0x44), l23 = _mm512_shuffle_i32x4(t2, t3, 0x44);
    const __m512i h01 = _mm512_shuffle_i32x4(t0, t1, 0xEE), h23 = _mm512_shuffle_i32x4(t2, t3, 0xEE);
    o[0] = _mm512_shuffle_i32x4(l01, l23, 0x88), o[1] = _mm512_shuffle_i32x4(l01, l23, 0xDD);
    o[2] = _mm512_shuffle_i32x4(h01, h23, 0x88), o[3] = _mm512_shuffle_i32x4(h01, h23, 0xDD);
}

/* The random bytes of 32 columns (pair p of a chunk) in the pair layout,
 * from the chunk's stream bytes o (o[8]: 512 bytes from the chunk's first
 * byte's block; off: that byte's place in it). */
AI void sr_pair(__m512i r[2], const __m512i o[8], unsigned off, size_t p, const int f32) {
    __m256i b;
    if (off == 0) b = p & 1 ? _mm512_extracti64x4_epi64(o[p / 2], 1) : _mm512_castsi512_si256(o[p / 2]);
    else { /* not on a block boundary: through memory */ uint8_t buf[512];
        for (int i = 0; i < 8; i++) _mm512_storeu_si512(buf + 64 * i, o[i]);
        b = _mm256_loadu_si256((const __m256i *)(buf + off + 32 * p));
    }
    if (f32) {
        r[0] = _mm512_cvtepu8_epi32(_mm256_castsi256_si128(b)),
        r[1] = _mm512_cvtepu8_epi32(_mm256_extracti128_si256(b, 1));
    } else { /* the even and the odd columns' bytes */
        const __m512i w = _mm512_cvtepu8_epi16(b);
        r[0] = _mm512_and_si512(w, set1(0xffff)), r[1] = _mm512_srli_epi32(w, 16);
    }
}

/* ---- nvfp4, blocks along the rows: 1x16, or 16x16 tiles ----
 * A band (1 row, or the 16 rows of a tile row; the tiles' missing rows are
 * zeros, which neither change an amax nor count) in chunks of 16 blocks (256
 * columns, 8 pairs): the blocks' amaxes (hmax16), their parameters, then the
 * values; a lane takes its block's parameters by a permute (bf16 pairs:
 * lanes 0-7 hold one block, 8-15 the next; fp32: a vector is a block).
 * Stochastic rounding: element (i, c) takes stream byte counter + i * cp + c. */
AI void nv_rows(const mp_qop *op, size_t r0, size_t r1, mp_quant_stats *st, const int f32, const int sr) {
    const size_t cols = op->cols, cp = (cols + 15) / 16 * 16, band = op->tile16 ? 16 : 1;
    const float g = mp_nvfp4_global_scale(op->scale);
    const __m512 mult = _mm512_set1_ps(g * (1.0f / 6.0f)), gd = _mm512_set1_ps(1.0f / g);
    /* the block (of 16 in a chunk) of each lane of a pair's two vectors, pair 0 */
    const __m512i lane_block[2] = {f32 ? set1(0) : _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
                                   f32 ? set1(1) : _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0)};
    counts k = counts0();
    for (size_t i = r0; i < r1; i += band) {
        const size_t nr = op->rows - i < band ? op->rows - i : band;
        for (size_t c0 = 0; c0 < cp; c0 += 256) {
            const size_t nb = (cp - c0) / 16 < 16 ? (cp - c0) / 16 : 16, np = (nb + 1) / 2;
            __m512i bm[16];
            for (size_t b = 0; b < 16; b++) bm[b] = _mm512_setzero_si512();
            for (size_t r = 0; r < nr; r++) {
                const void *row = src_row(op, i + r);
                for (size_t p = 0; p < np; p++) {
                    __m512i x[2];
                    load32(row, c0 + 32 * p, cols, x, f32);
                    const __m512i a0 = _mm512_and_si512(x[0], set1(ABS)), a1 = _mm512_and_si512(x[1], set1(ABS));
                    if (f32) {
                        bm[2 * p] = _mm512_max_epu32(bm[2 * p], a0),
                               bm[2 * p + 1] = _mm512_max_epu32(bm[2 * p + 1], a1);
                    } else {
                        const __m512i m = _mm512_max_epu32(a0, a1);
                        bm[2 * p] = _mm512_mask_max_epu32(bm[2 * p], 0x00ff, bm[2 * p], m);
                        bm[2 * p + 1] = _mm512_mask_max_epu32(bm[2 * p + 1], 0xff00, bm[2 * p + 1], m);
                    }
                }
            }
            const __m512i am = hmax16(bm);
            const nvpar P = nv_params(am, mult, gd);
            const __mmask16 special = _mm512_cmpge_epu32_mask(am, set1(INF));
            k.amax = _mm512_mask_max_epu32(k.amax, (__mmask16)~special, k.amax, am);
            for (size_t r = 0; r < nr; r++) {
                const void *row = src_row(op, i + r);
                uint16_t *out = op->dst + (i + r) * op->ldd;
                __m512i o[8];
                unsigned off = 0;
                if (sr) { /* bytes j0 .. j0 + 16 nb - 1, from the block of j0 on */
                    const uint64_t j0 = op->rng->counter + (uint64_t)((i + r) * cp + c0);
                    off = (unsigned)(j0 & 15);
                    sr_bytes256(o, op->rng->seed, j0 >> 4);
                    if (off) sr_bytes256(o + 4, op->rng->seed, (j0 >> 4) + 16);
                    else o[4] = o[5] = o[6] = o[7] = _mm512_setzero_si512(); /* (not read) */
                }
                for (size_t p = 0; p < np; p++) {
                    __m512i x[2], rnd[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
                    load32(row, c0 + 32 * p, cols, x, f32);
                    if (sr) sr_pair(rnd, o, off, p, f32);
                    const int sp = (special >> (2 * p)) & 3;
                    for (int h = 0; h < 2; h++) {
                        const __m512i lb = _mm512_add_epi32(lane_block[h], set1((int)(2 * p)));
                        x[h] = nv_vec(x[h], _mm512_permutexvar_ps(lb, P.inv), _mm512_permutexvar_ps(lb, P.s), rnd[h],
                                      sr, sp != 0, &k);
                    }
                    store32(out, c0 + 32 * p, cols, x, f32);
                }
            }
        }
    }
    counts_add(&k, st);
}

/* ---- nvfp4, blocks down the columns (1x16 along the reduction) ---- */

/* 16 row vectors of a block row's 16 columns from column c0 (zero rows past
 * the operand). */
AI void load_block(const mp_qop *op, size_t i0, size_t c0, __m512 x[16], const int f32) {
    const __mmask16 m = cols_mask(op->cols, c0);
    const size_t nr = op->rows - i0 < 16 ? op->rows - i0 : 16;
#pragma GCC unroll 16
    for (size_t r = 0; r < 16; r++) {
        if (r >= nr) {
            x[r] = _mm512_setzero_ps();
            continue;
        }
        x[r] = flt(load16(src_row(op, i0 + r), c0, m, f32));
    }
}

/* One butterfly stage of stride h: x[k], x[k + h] -> their sum, difference. */
AI void butterflies(__m512 x[16], const int h) {
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        const int k = j / h * 2 * h + j % h;
        const __m512 a = x[k], b = x[k + h];
        x[k] = _mm512_add_ps(a, b);
        x[k + h] = _mm512_sub_ps(a, b);
    }
}

AI void halve(__m512 x[16]) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) x[i] = _mm512_mul_ps(x[i], _mm512_set1_ps(0.5f));
}

/* mp_rht16 down each lane: signs, then the butterflies of strides 1, 2, 4, 8
 * (a + b, a - b), halving after the second and the fourth. */
AI void rht16(__m512 x[16], uint16_t signs) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
        x[i] = flt(_mm512_xor_si512(bits(x[i]), set1((int)((uint32_t)((signs >> i) & 1u) << 31))));
    butterflies(x, 1), butterflies(x, 2), halve(x);
    butterflies(x, 4), butterflies(x, 8), halve(x);
}

/* Block rows of 16 in chunks of 16 columns, a lane per column: the block's
 * 16 values (transformed first with rht), its amax down the lane, the
 * values. Every one of the 16 rows is quantized and counted, the padding
 * too (after the transform it need not be zero), as the reference does; only
 * the operand's rows are stored. Stochastic rounding: element (i0 + r, c) of
 * the block row from i0 takes stream byte j = counter + i0 * cols + 16 c + r,
 * from Philox block j / 16: with o = (counter + i0 * cols) mod 16, lane c
 * reads block (counter + i0 * cols) / 16 + c and, when o + r >= 16, the next. */
AI void nv_cols(const mp_qop *op, size_t r0, size_t r1, mp_quant_stats *st, const int f32, const int rht,
                const int sr) {
    const size_t cols = op->cols;
    const float g = mp_nvfp4_global_scale(op->scale);
    const __m512 mult = _mm512_set1_ps(g * (1.0f / 6.0f)), gd = _mm512_set1_ps(1.0f / g);
    counts k = counts0();
    for (size_t i0 = r0; i0 < r1; i0 += 16) {
        const uint64_t j0 = sr ? op->rng->counter + (uint64_t)(i0 * cols) : 0;
        const unsigned o = (unsigned)(j0 & 15);
        for (size_t c0 = 0; c0 < cols; c0 += 16) {
            const __mmask16 m = cols_mask(cols, c0);
            __m512 x[16];
            load_block(op, i0, c0, x, f32);
            if (rht) rht16(x, op->signs);
            __m512i am = _mm512_setzero_si512();
            for (int r = 0; r < 16; r++) am = _mm512_max_epu32(am, _mm512_and_si512(bits(x[r]), set1(ABS)));
            const nvpar P = nv_params(am, mult, gd);
            const int special = _mm512_cmpge_epu32_mask(am, set1(INF)) != 0;
            if (!special) k.amax = _mm512_max_epu32(k.amax, am);
            __m512i w[8]; /* the words of lane c's Philox block and of the next */
            if (sr) {
                philox16(op->rng->seed, (j0 >> 4) + c0, w);
                if (o) philox16(op->rng->seed, (j0 >> 4) + c0 + 1, w + 4);
            }
            for (unsigned r = 0; r < 16; r++) {
                __m512i rnd = _mm512_setzero_si512();
                if (sr) {
                    const unsigned t = o + r;
                    rnd = _mm512_and_si512(_mm512_srli_epi32(w[t >> 2], 8 * (t & 3)), set1(0xff));
                }
                const __m512i v = nv_vec(bits(x[r]), P.inv, P.s, rnd, sr, special, &k);
                if (i0 + r < op->rows) store16(op->dst + (i0 + r) * op->ldd, c0, v, m);
            }
        }
    }
    counts_add(&k, st);
}

/* ---- the table ---- */

static mp_status quantize_avx512(const mp_qop *op, size_t r0, size_t r1, mp_quant_stats *st) {
    const int f32 = op->st == MP_F32;
    switch (op->kind) {
    case MP_RECIPE_FP8_DELAYED:
    case MP_RECIPE_FP8_CURRENT:
        if (op->fmt == MP_E5M2) f32 ? fp8_rows(op, r0, r1, st, 1, 1) : fp8_rows(op, r0, r1, st, 0, 1);
        else f32 ? fp8_rows(op, r0, r1, st, 1, 0) : fp8_rows(op, r0, r1, st, 0, 0);
        return MP_OK;
    case MP_RECIPE_MXFP8:
        if (op->k_rows) f32 ? mx_cols(op, r0, r1, st, 1) : mx_cols(op, r0, r1, st, 0);
        else f32 ? mx_rows(op, r0, r1, st, 1) : mx_rows(op, r0, r1, st, 0);
        return MP_OK;
    case MP_RECIPE_NVFP4: {
        const int sr = op->rng != NULL;
        if (!op->k_rows) {
            if (sr) f32 ? nv_rows(op, r0, r1, st, 1, 1) : nv_rows(op, r0, r1, st, 0, 1);
            else f32 ? nv_rows(op, r0, r1, st, 1, 0) : nv_rows(op, r0, r1, st, 0, 0);
        } else if (op->rht) {
            if (sr) f32 ? nv_cols(op, r0, r1, st, 1, 1, 1) : nv_cols(op, r0, r1, st, 0, 1, 1);
            else f32 ? nv_cols(op, r0, r1, st, 1, 1, 0) : nv_cols(op, r0, r1, st, 0, 1, 0);
        } else {
            if (sr) f32 ? nv_cols(op, r0, r1, st, 1, 0, 1) : nv_cols(op, r0, r1, st, 0, 0, 1);
            else f32 ? nv_cols(op, r0, r1, st, 1, 0, 0) : nv_cols(op, r0, r1, st, 0, 0, 0);
        }
        return MP_OK;
    }
    default: return mp_error(MP_EINVAL, "mp_qoperand: no recipe");
    }
}

AI uint32_t rht_amax_k(const mp_qop *op, size_t r0, size_t r1, const int f32) {
    __m512i m = _mm512_setzero_si512();
    for (size_t i0 = r0; i0 < r1; i0 += 16)
        for (size_t c0 = 0; c0 < op->cols; c0 += 16) {
            __m512 x[16];
            load_block(op, i0, c0, x, f32);
            rht16(x, op->signs);
            for (int r = 0; r < 16; r++) {
                const __m512i a = _mm512_and_si512(bits(x[r]), set1(ABS));
                m = _mm512_mask_max_epu32(m, _mm512_cmplt_epu32_mask(a, set1(INF)), m, a);
            }
        }
    return (uint32_t)_mm512_reduce_max_epu32(m);
}

static uint32_t rht_amax_avx512(const mp_qop *op, size_t r0, size_t r1) {
    return op->st == MP_F32 ? rht_amax_k(op, r0, r1, 1) : rht_amax_k(op, r0, r1, 0);
}

const mp_recipe_kernels mp_recipe_avx512 = {.quantize = quantize_avx512, .rht_amax = rht_amax_avx512};
