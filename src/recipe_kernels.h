/* recipe_kernels.h - mp_qoperand's kernels in plain C with GCC/clang vector
 * types, one pass from the fp32 or bf16 source to the exact bf16 values and
 * the counts. Compiled twice: by cpu/recipe_portable.c with 4-lane vectors
 * for any CPU (mp_recipe_portable; SSE2 on x86-64, or what the compiler
 * lowers them to) and by cpu/recipe_avx2.c with 8 lanes and AVX2 flags
 * (mp_recipe_avx2). The bits and counts of recipe.c's reference panels
 * (mp_recipe_ref), checked by tests/test_recipe.c on every recipe, role and
 * direction. Not installed; include from exactly those two files, after
 * defining RK_LANES.
 *
 * The arithmetic is cpu/recipe_avx512.c's, lane by lane:
 *  - rounding onto a format's grid is integer-only (rk_round_grid: the
 *    magnitude's significand shifted right by the grid's quantum, nearest
 *    even; exact int -> float conversions), so the FPU's rounding mode and
 *    FTZ/DAZ change nothing there; where a grid's quantum is at least
 *    2^-125 (per-tensor fp8, most MX blocks), rk_round_grid_fast gives the
 *    same on the bits and by an exact fp32 addition in the default rounding,
 *    FTZ/DAZ changing nothing either;
 *  - the floating-point operations are the reference's own, one for one and
 *    in its order: x * scale for per-tensor fp8 (recipe.c sends operands
 *    under DAZ to the reference, which forms products of subnormals
 *    exactly), and for nvfp4 block_amax * mult, 1 / (s * gd), fminf with
 *    FLT_MAX, x * inv, e2m1 * s and the Hadamard transform's sums,
 *    differences and halvings, so that the same MXCSR gives the same bits;
 *  - E2M1 gives nvfp4.c's e2m1_round codes: stochastic on the bits, with the
 *    stream's bytes (mp_sr_bytes), nearest even by an fp32 addition.
 * A row is worked on in chunks of columns (RK_CHUNK, 256 for nvfp4) held as
 * fp32 bit patterns, zero padded to whole vectors: the padding's zeros count
 * nothing and are not stored. Lanes of a mask are all ones (true) or zero. */
#ifndef MP_RECIPE_KERNELS_H
#define MP_RECIPE_KERNELS_H

#include <float.h>
#include <math.h>
#include <string.h>

#include "internal.h"

#ifndef RK_LANES
#error "define RK_LANES (4 or 8) before including recipe_kernels.h"
#endif

#define RK_CHUNK 512 /* columns of a chunk (a multiple of 32) */
#define RK_ABS 0x7fffffffu
#define RK_INF 0x7f800000u
#define RK_QNAN 0x7fc00000u
#define RK_SIGN 0x80000000u
#define RK_E4M3_MAX 0x43e00000u /* 448 */
#define RK_E5M2_MAX 0x47600000u /* 57344 */
#define RK_AI static inline __attribute__((always_inline))

typedef uint32_t rk_v __attribute__((vector_size(4 * RK_LANES))); /* fp32 bit patterns, counts */
typedef int32_t rk_m __attribute__((vector_size(4 * RK_LANES)));  /* masks, signed integers */
typedef float rk_fv __attribute__((vector_size(4 * RK_LANES)));   /* fp32 values */

RK_AI rk_v rk_sel(rk_m m, rk_v a, rk_v b) { return ((rk_v)m & a) | (~(rk_v)m & b); }
RK_AI rk_v rk_splat(uint32_t x) { return (rk_v){0} + x; }
RK_AI rk_m rk_isplat(int32_t x) { return (rk_m){0} + x; }
RK_AI rk_v rk_ld(const uint32_t *p) {
    rk_v v;
    memcpy(&v, p, sizeof v);
    return v;
}
RK_AI void rk_st(uint32_t *p, rk_v v) { memcpy(p, &v, sizeof v); }
RK_AI rk_v rk_max(rk_v a, rk_v b) { return rk_sel(a > b, a, b); }
RK_AI rk_v rk_tofloat_bits(rk_v q) { return (rk_v) __builtin_convertvector((rk_m)q, rk_fv); } /* exact: q < 2^24 */
static inline size_t rk_whole(size_t n) { return (n + RK_LANES - 1) / RK_LANES * RK_LANES; }

static inline uint32_t rk_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}
static inline float rk_flt(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* The counts of a share, per lane; rk_add sums the lanes. Counting a mask
 * subtracts it (true is all ones, -1). */
typedef struct {
    rk_v sat, flush, nonfinite, amax; /* amax: bits of the largest finite |x| */
} rk_counts;

static void rk_add(const rk_counts *k, mp_quant_stats *st) {
    uint64_t sat = 0, flush = 0, nf = 0;
    uint32_t am = 0;
    for (int l = 0; l < RK_LANES; l++) {
        sat += k->sat[l], flush += k->flush[l], nf += k->nonfinite[l];
        am = k->amax[l] > am ? k->amax[l] : am;
    }
    st->saturated += sat, st->flushed += flush, st->nonfinite += nf;
    mp_quant_amax(st, am);
}

/* ---- loads and stores ---- */

/* Columns [c0, c0 + n) of row i as fp32 bits, zeros past the operand's rows
 * and columns (the padding of whole blocks) up to a whole vector. */
static inline void rk_load(const mp_qop *op, size_t i, size_t c0, size_t n, uint32_t *restrict x) {
    const size_t valid = i >= op->rows || c0 >= op->cols ? 0 : op->cols - c0 < n ? op->cols - c0 : n;
    if (op->st == MP_F32) {
        const uint32_t *restrict s = (const uint32_t *)op->src + i * op->lds + c0;
        for (size_t j = 0; j < valid; j++) x[j] = s[j];
    } else {
        const uint16_t *restrict s = (const uint16_t *)op->src + i * op->lds + c0;
        for (size_t j = 0; j < valid; j++) x[j] = (uint32_t)s[j] << 16;
    }
    for (size_t j = valid; j < rk_whole(n); j++) x[j] = 0;
}

/* The bf16 halves of exact values v into columns [c0, c0 + n) of row i,
 * those inside the operand. */
static inline void rk_store(const mp_qop *op, size_t i, size_t c0, size_t n, const uint32_t *restrict v) {
    if (i >= op->rows || c0 >= op->cols) return;
    const size_t valid = op->cols - c0 < n ? op->cols - c0 : n;
    uint16_t *restrict d = op->dst + i * op->ldd + c0;
    for (size_t j = 0; j < valid; j++) d[j] = (uint16_t)(v[j] >> 16);
}

/* ---- rounding onto a grid ----
 * The magnitudes a (fp32 bits, sign clear) rounded to nearest even onto the
 * grid of a format with M mantissa bits whose smallest quantum is 2^(lo -
 * 150), unbounded above (recipe_avx512.c's round_grid): a = sig 2^(f - 150)
 * with sig a 24-bit significand (an fp32 subnormal normalized first through
 * an exact int -> float conversion); dropping sh = max(23 - M, lo - f) bits
 * (at most 25) leaves q, and the result is q 2^(f - 150 + sh). *zero: the
 * result is 0 or below 2^-126 (the callers flush it). Infinities come out
 * above every format's max; NaNs are the callers' to handle. */
RK_AI rk_v rk_round_grid(rk_v a, rk_m lo, int M, rk_m *zero) {
    const rk_m sub = (rk_m)(a < 0x800000u);
    const rk_v t = rk_sel(sub, rk_tofloat_bits(a), a);
    const rk_m f = (rk_m)(t >> 23) - (sub & 149);
    const rk_v sig = (t & 0x7fffffu) | 0x800000u;
    rk_m sh = lo - f;
    sh = (rk_m)rk_sel(sh > 23 - M, (rk_v)sh, rk_splat((uint32_t)(23 - M)));
    sh = (rk_m)rk_sel(sh < 25, (rk_v)sh, rk_splat(25));
    const rk_v ush = (rk_v)sh;
    const rk_v odd = (sig >> ush) & 1u, half_m1 = (rk_splat(1) << (ush - 1u)) - 1u;
    const rk_v q = (sig + half_m1 + odd) >> ush;
    const rk_v v = rk_tofloat_bits(q) + ((rk_v)(f + sh - 150) << 23);
    *zero = ((rk_m)v < 0x800000) | (rk_m)(q == 0u);
    return v;
}

/* rk_round_grid's result where the grid's quantum 2^(lo - 150) is at least
 * 2^-125 and 2^23 quantums are finite (lo in [25, 254]: rk_grid_fast): from
 * the grid's smallest normal 2^(lo - 150 + M), an fp32 normal, on the bits
 * (the 23 - M below the mantissa dropped, nearest even, a carry moving into
 * the exponent); below it by adding and subtracting 2^23 quantums (bits lo <<
 * 23), exact in the default rounding, which mixprec never changes. An fp32
 * subnormal is below half the quantum and gives 0 either way, and every
 * result is 0 or an fp32 normal, so DAZ and FTZ change nothing. */
RK_AI rk_v rk_round_grid_fast(rk_v a, rk_m lo, int M, rk_m *zero) {
    const uint32_t drop = 23u - (uint32_t)M;
    const rk_v up = (a + ((1u << (drop - 1)) - 1u) + ((a >> drop) & 1u)) & ~((1u << drop) - 1u);
    const rk_fv c = (rk_fv)((rk_v)lo << 23);
    const rk_v v = rk_sel((rk_m)a < ((lo - (int32_t)drop) << 23), (rk_v)(((rk_fv)a + c) - c), up);
    *zero = (rk_m)(v == 0u);
    return v;
}

static inline int rk_grid_fast(uint32_t lo) { return lo >= 25 && lo <= 254; }

/* rk_round_grid (fast: rk_round_grid_fast) saturated at maxb (the format's
 * largest value, bits): *sat for the lanes that rounded past it; flushed
 * lanes become +0. */
RK_AI rk_v rk_round_sat(rk_v a, rk_m lo, int M, rk_v maxb, rk_m *sat, rk_m *zero, const int fast) {
    const rk_v v = fast ? rk_round_grid_fast(a, lo, M, zero) : rk_round_grid(a, lo, M, zero);
    *sat = ~*zero & ((rk_m)v > (rk_m)maxb);
    return rk_sel(*zero, rk_splat(0), rk_sel(*sat, maxb, v));
}

/* ---- per-tensor fp8 ----
 * p = fp32(x * scale), then E4M3 / E5M2 with satfinite (fp8_scale.c): p on
 * the format's grid, past the max's rounding threshold (E4M3: above 464,
 * which ties down to 448; E5M2: from 61440, which ties up; inf included) the
 * max; a NaN keeps its sign and, in E5M2, the payload's top bit. The grid
 * (lo: the smallest normal's field + 23 - M) has a quantum of 2^-9 or 2^-16:
 * rk_round_grid_fast's. */
RK_AI rk_v rk_fp8_vec(rk_v x, rk_fv s, const int e5, rk_counts *k) {
    const rk_v xa = x & RK_ABS, p = (rk_v)((rk_fv)x * s), pa = p & RK_ABS;
    const rk_m fin = (rk_m)xa < (int32_t)RK_INF;
    const rk_m sat = (rk_m)pa > (int32_t)(e5 ? 0x476fffffu : 0x43e80000u);
    rk_m zero; /* r is 0 there */
    const rk_v r = rk_sel(sat, rk_splat(e5 ? RK_E5M2_MAX : RK_E4M3_MAX),
                          rk_round_grid_fast(pa, rk_isplat(e5 ? 134 : 141), e5 ? 2 : 3, &zero));
    k->sat -= (rk_v)(fin & sat);
    k->flush -= (rk_v)(fin & (rk_m)(xa != 0u) & (rk_m)(r == 0u));
    k->nonfinite -= (rk_v)~fin;
    k->amax = rk_max(xa & (rk_v)fin, k->amax);
    const rk_v nan = e5 ? RK_QNAN | (pa & 0x200000u) : rk_splat(RK_QNAN);
    return rk_sel((rk_m)pa > (int32_t)RK_INF, nan, r) | (p & RK_SIGN);
}

static void rk_fp8(const mp_qop *op, size_t r0, size_t r1, rk_counts *k) {
    const int e5 = op->fmt == MP_E5M2;
    const rk_fv s = (rk_fv){0} + op->scale;
    uint32_t x[RK_CHUNK];
    for (size_t i = r0; i < r1; i++)
        for (size_t c0 = 0; c0 < op->cols; c0 += RK_CHUNK) {
            const size_t n = op->cols - c0 < RK_CHUNK ? op->cols - c0 : RK_CHUNK;
            rk_load(op, i, c0, n, x);
            for (size_t j = 0; j < n; j += RK_LANES)
                rk_st(x + j, e5 ? rk_fp8_vec(rk_ld(x + j), s, 1, k) : rk_fp8_vec(rk_ld(x + j), s, 0, k));
            rk_store(op, i, c0, n, x);
        }
}

/* ---- mxfp8 ----
 * A finite block's E8M0 scale s comes from mx.c's rule (mp_mx_scalar.scales);
 * an element is x on the E4M3 grid scaled by 2^(s-127) (normal from
 * 2^(s-133), quantum 2^(s-136) below: lo = s + 14), saturated at 448 *
 * 2^(s-127), which is what coding x * 2^(127-s) and multiplying back gives
 * (mx.c); values below 2^-126 become +-0 (recipe.c). A block holding an inf
 * or a NaN is all NaN (+0x7fc0), its finite elements' amax and its
 * nonfinite ones counted (a finite block's amax is its caller's). Per lane:
 * its block's lo, saturation value maxb (bits) and NaN mask; fast: every
 * lane's lo passes rk_grid_fast (a scale s in [11, 240]). */
RK_AI rk_v rk_mx_vec(rk_v x, rk_m lo, rk_v maxb, rk_m nan, rk_counts *k, const int fast) {
    const rk_v xa = x & RK_ABS;
    const rk_m fin = (rk_m)xa < (int32_t)RK_INF;
    rk_m sat, zero;
    const rk_v r = rk_round_sat(xa, lo, 3, maxb, &sat, &zero, fast);
    k->sat -= (rk_v)(sat & ~nan);
    k->flush -= (rk_v)(zero & (rk_m)(xa != 0u) & ~nan);
    k->nonfinite -= (rk_v)~fin; /* only a NaN block holds one */
    k->amax = rk_max(xa & (rk_v)(fin & nan), k->amax);
    return rk_sel(nan, rk_splat(RK_QNAN), r | (x & RK_SIGN));
}

static inline uint32_t rk_mx_max(uint8_t s) { return RK_E4M3_MAX + ((uint32_t)((int32_t)s - 127) << 23); }

/* The largest |x| (bits; inf and NaN above every finite one) of n values (a
 * multiple of RK_LANES). */
static inline uint32_t rk_amax(const uint32_t *x, size_t n) {
    rk_v m = rk_splat(0);
    for (size_t j = 0; j < n; j += RK_LANES) m = rk_max(rk_ld(x + j) & RK_ABS, m);
    uint32_t r = 0;
    for (int l = 0; l < RK_LANES; l++) r = m[l] > r ? m[l] : r;
    return r;
}

/* Blocks along the rows: 32 consecutive columns of a row. */
static void rk_mx_rows(const mp_qop *op, size_t r0, size_t r1, rk_counts *k) {
    const size_t cp = (op->cols + 31) / 32 * 32;
    uint32_t x[RK_CHUNK], fa[RK_CHUNK / 32];
    uint8_t s8[RK_CHUNK / 32];
    int nan[RK_CHUNK / 32];
    for (size_t i = r0; i < r1; i++)
        for (size_t c0 = 0; c0 < cp; c0 += RK_CHUNK) {
            const size_t n = cp - c0 < RK_CHUNK ? cp - c0 : RK_CHUNK, nb = n / 32;
            rk_load(op, i, c0, n, x);
            for (size_t b = 0; b < nb; b++) {
                const uint32_t am = rk_amax(x + 32 * b, 32);
                nan[b] = am >= RK_INF;
                fa[b] = nan[b] ? 0 : am;
            }
            for (size_t b = 0; b < nb; b++) k->amax[0] = fa[b] > k->amax[0] ? fa[b] : k->amax[0];
            mp_mx_scalar.scales(s8, fa, nb, MP_E4M3, op->rule);
            for (size_t b = 0; b < nb; b++) {
                const rk_m lo = rk_isplat((int32_t)s8[b] + 14), nm = rk_isplat(-nan[b]);
                const rk_v maxb = rk_splat(rk_mx_max(s8[b]));
                if (rk_grid_fast((uint32_t)s8[b] + 14))
                    for (size_t j = 32 * b; j < 32 * b + 32; j += RK_LANES)
                        rk_st(x + j, rk_mx_vec(rk_ld(x + j), lo, maxb, nm, k, 1));
                else
                    for (size_t j = 32 * b; j < 32 * b + 32; j += RK_LANES)
                        rk_st(x + j, rk_mx_vec(rk_ld(x + j), lo, maxb, nm, k, 0));
            }
            rk_store(op, i, c0, n, x);
        }
}

/* Blocks down the columns: a block row (32 rows, zero rows past the operand)
 * in chunks of RK_CHUNK columns, a pass along its rows for the columns'
 * amaxes, then the values row by row (the block row's chunk, 64 KiB of fp32,
 * is in L2 by then); a lane's grid is its column's. */
static void rk_mx_cols(const mp_qop *op, size_t r0, size_t r1, rk_counts *k) {
    uint32_t x[RK_CHUNK], am[RK_CHUNK], fa[RK_CHUNK], maxb[RK_CHUNK], nan[RK_CHUNK], lo[RK_CHUNK];
    uint8_t s8[RK_CHUNK], fast[RK_CHUNK / RK_LANES];
    for (size_t i0 = r0; i0 < r1; i0 += 32) {
        const size_t nr = op->rows - i0 < 32 ? op->rows - i0 : 32; /* the zero rows change nothing */
        for (size_t c0 = 0; c0 < op->cols; c0 += RK_CHUNK) {
            const size_t n = op->cols - c0 < RK_CHUNK ? op->cols - c0 : RK_CHUNK, nw = rk_whole(n);
            for (size_t c = 0; c < nw; c += RK_LANES) rk_st(am + c, rk_splat(0));
            for (size_t r = 0; r < nr; r++) {
                rk_load(op, i0 + r, c0, n, x);
                for (size_t c = 0; c < nw; c += RK_LANES) rk_st(am + c, rk_max(rk_ld(x + c) & RK_ABS, rk_ld(am + c)));
            }
            for (size_t c = 0; c < nw; c++) {
                fa[c] = am[c] >= RK_INF ? 0 : am[c];
                k->amax[0] = fa[c] > k->amax[0] ? fa[c] : k->amax[0];
            }
            mp_mx_scalar.scales(s8, fa, nw, MP_E4M3, op->rule);
            for (size_t c = 0; c < nw; c++)
                lo[c] = (uint32_t)s8[c] + 14, maxb[c] = rk_mx_max(s8[c]), nan[c] = am[c] >= RK_INF ? ~0u : 0u;
            for (size_t c = 0; c < nw; c += RK_LANES) { /* a vector is fast when each of its lanes is */
                fast[c / RK_LANES] = 1;
                for (size_t l = c; l < c + RK_LANES; l++) fast[c / RK_LANES] &= rk_grid_fast(lo[l]);
            }
            for (size_t r = 0; r < nr; r++) {
                rk_load(op, i0 + r, c0, n, x);
                for (size_t c = 0; c < nw; c += RK_LANES) {
                    const rk_v v = rk_ld(x + c), mb = rk_ld(maxb + c);
                    const rk_m l = (rk_m)rk_ld(lo + c), nm = (rk_m)rk_ld(nan + c);
                    rk_st(x + c, fast[c / RK_LANES] ? rk_mx_vec(v, l, mb, nm, k, 1) : rk_mx_vec(v, l, mb, nm, k, 0));
                }
                rk_store(op, i0 + r, c0, n, x);
            }
        }
    }
}

/* ---- stochastic rounding's stream ----
 * mp_sr_bytes (nvfp4.c) with RK_LANES Philox4x32-10 blocks at a time, a block
 * per lane: the same bytes. */
typedef uint64_t rk_w __attribute__((vector_size(4 * RK_LANES))); /* the lanes in pairs */

/* hi and lo halves of a * k, lane by lane: the even lanes and the odd ones
 * as the low halves of 64-bit lanes (32 x 32 -> 64: pmuludq, vpmuludq). */
RK_AI rk_v rk_mulhilo(rk_v a, uint32_t k, rk_v *lo) {
    const rk_w w = (rk_w)a, lo32 = (rk_w){0} + 0xffffffffu;
    const rk_w even = (w & lo32) * (uint64_t)k, odd = (w >> 32) * (uint64_t)k;
    *lo = (rk_v)((even & lo32) | (odd << 32));
    return (rk_v)((even >> 32) | (odd & ~lo32));
}

/* The words of the stream's blocks blk .. blk + RK_LANES - 1, a block per
 * lane: block blk + l's byte 4 q + b is byte b of w[q] lane l. The counter
 * (low word, high word, 0, 0) wraps at 2^60 as mp_sr_bytes's does. */
RK_AI void rk_philox(uint64_t seed, uint64_t blk, rk_v w[4]) {
    rk_v c0 = rk_splat(0), c1 = rk_splat(0), c2 = rk_splat(0), c3 = rk_splat(0);
    for (int l = 0; l < RK_LANES; l++) {
        const uint64_t c = (blk + (uint64_t)l) & 0x0fffffffffffffffull;
        c0[l] = (uint32_t)c, c1[l] = (uint32_t)(c >> 32);
    }
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    MP_PHILOX4X32_10(rk_v, rk_mulhilo, c0, c1, c2, c3, k0, k1)
    w[0] = c0, w[1] = c1, w[2] = c2, w[3] = c3;
}

static void rk_sr_bytes(uint64_t seed, uint64_t j0, size_t n, uint8_t *restrict r) {
    const size_t head = (16 - (size_t)(j0 & 15u)) & 15u;
    if (n <= head + 16 * RK_LANES) {
        mp_sr_bytes(seed, j0, n, r);
        return;
    }
    mp_sr_bytes(seed, j0, head, r);
    size_t o = head;
    uint64_t blk = (j0 + head) >> 4;
    for (; n - o >= 16 * RK_LANES; o += 16 * RK_LANES, blk += RK_LANES) {
        rk_v w[4];
        rk_philox(seed, blk, w);
        for (int l = 0; l < RK_LANES; l++)
            for (int q = 0; q < 4; q++) {
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
                const uint32_t word = w[q][l]; /* its bytes in memory order are bytes 0 .. 3 */
                memcpy(r + o + 16 * (size_t)l + 4 * (size_t)q, &word, 4);
#else
                for (int b = 0; b < 4; b++)
                    r[o + 16 * (size_t)l + 4 * (size_t)q + (size_t)b] = (uint8_t)(w[q][l] >> (8 * b));
#endif
            }
    }
    mp_sr_bytes(seed, j0 + o, n - o, r + o);
}

/* ---- nvfp4 ----
 * nvfp4.c's rules: block scale s = e4m3_sat(block_amax * mult), inv =
 * fminf(1 / (s * gd), FLT_MAX), element = E2M1 of y = x * inv with
 * satfinite (nearest even, or stochastic with a random byte), value = e2m1 *
 * s, an exact product; a block holding a NaN is all NaN (+0x7fc0). Counts
 * as nvfp4.c's: a block whose scale is 0 or NaN ("gone") flushes its nonzero
 * elements, never saturates them; the elements of a block holding an inf or
 * a NaN ("special") count their own amax and nonfinite ones, the others
 * their block's amax (the callers'). */

/* The parameters of the blocks of the lanes, from their amaxes (bits). */
typedef struct {
    rk_fv inv, s; /* the element multiplier; the block scale's value */
    rk_m special, nan, gone;
} rk_nvpar;

RK_AI rk_nvpar rk_nv_params(rk_v am, float mult, float gd) {
    const rk_v prod = (rk_v)((rk_fv)am * mult) & RK_ABS;
    rk_m sat, zero;
    const rk_fv s = (rk_fv)rk_round_sat(prod, rk_isplat(141), 3, rk_splat(RK_E4M3_MAX), &sat, &zero, 0);
    const rk_fv q = 1.0f / (s * gd);
    const rk_fv inv = (rk_fv)rk_sel(q < FLT_MAX, (rk_v)q, rk_splat(rk_bits(FLT_MAX))); /* fminf(q, FLT_MAX): NaN too */
    const rk_m nan = (rk_m)(am > RK_INF);
    const rk_nvpar p = {inv, s, (rk_m)(am >= RK_INF), nan, nan | ~(rk_m)(s > 0.0f)};
    return p;
}

/* |y| (bits a, not NaN) in E2M1 as half units 0 .. 12 (0, 0.5, .., 6):
 * nearest even (no r) or stochastic with the random bytes r (as nvfp4.c's
 * e2m1_round: the top 8 bits of the fraction below the kept bits, plus r,
 * carry into them); *past for the lanes that rounded beyond 6 (|y| >= 8
 * included) and were clamped to 6. */
RK_AI rk_v rk_e2m1_half(rk_v a, const rk_v *r, rk_m *past) {
    if (!r) {
        /* nearest even: |y| + M - M with M = 2^22, 2^23, 2^24 for steps of
         * 0.5, 1, 2 (below 2, 4, 8) rounds onto the step's multiples, ties to
         * the even multiple, which is the even E2M1 code (fp32 addition, the
         * default rounding; |y| < 2^-126 is 0 either way, so DAZ changes
         * nothing); beyond 8, inf included, the clamp below decides */
        /* M's exponent: a's clamped to [1, 4) (biased 127 .. 129), plus 22; a < 2^31, so the integer
         * comparisons are signed ones */
        const rk_m e = (rk_m)(a >> 23);
        const rk_m ec = (rk_m)rk_sel(e < 127, rk_splat(127), (rk_v)e);
        const rk_v M = (rk_sel(ec > 129, rk_splat(129), (rk_v)ec) + 22u) << 23;
        const rk_fv q = ((rk_fv)a + (rk_fv)M) - (rk_fv)M;
        const rk_m h = __builtin_convertvector(q * 2.0f, rk_m);
        *past = ((rk_m)a >= 0x41000000) | (h > 12); /* h is negative only for an a >= 8 */
        return rk_sel(*past, rk_splat(12), (rk_v)h);
    }
    const rk_v e = a >> 23;
    const rk_m nz = (rk_m)(e != 0u);
    const rk_v m = rk_sel(nz, (a & 0x7fffffu) | 0x800000u, a);
    const rk_m shr = (rk_m)rk_sel((rk_m)(e >= 128u), rk_splat(22), rk_sel(nz, 149u - e, rk_splat(148)));
    const rk_v kk = rk_sel((rk_m)(e >= 129u), rk_splat(2), rk_sel((rk_m)(e == 128u), rk_splat(1), rk_splat(0)));
    const rk_v sh = rk_sel(shr < 31, (rk_v)shr, rk_splat(31)); /* beyond 31: 0 in both modes (masked below) */
    rk_v n = m >> sh;
    const rk_v rem = m & ((rk_splat(1) << sh) - 1u);
    n += ((rem >> (sh - 8u)) + *r) >> 8;
    n = rk_sel(shr > 31, rk_splat(0), n);
    const rk_v h = n << kk;
    *past = (rk_m)(a >= 0x41000000u) | (rk_m)(h > 12u);
    return rk_sel(*past, rk_splat(12), h);
}

/* The values of elements x with their blocks' parameters and random bytes r
 * (NULL: nearest even), counted. plain (a constant): no lane's block is
 * special or gone (so every x is finite and no block NaN), which leaves
 * only the saturated and flushed counts. */
RK_AI rk_v rk_nv_vec(rk_v x, const rk_nvpar *P, const rk_v *r, rk_counts *k, const int plain) {
    const rk_v xa = x & RK_ABS, y = (rk_v)((rk_fv)x * P->inv);
    rk_m past;
    const rk_v h = rk_e2m1_half(y & RK_ABS, r, &past);
    const rk_fv u = (rk_fv)((rk_v)(__builtin_convertvector((rk_m)h, rk_fv) * 0.5f) | (y & RK_SIGN));
    if (plain) {
        k->sat -= (rk_v)past;
        k->flush -= (rk_v)((rk_m)(xa != 0u) & (rk_m)(h == 0u));
        return (rk_v)(u * P->s);
    }
    const rk_m zero = P->gone | (rk_m)(h == 0u), fin = (rk_m)(xa < RK_INF), sp = P->special;
    k->nonfinite -= (rk_v)(sp & ~fin);
    k->amax = rk_max(xa & (rk_v)(sp & fin), k->amax);
    k->sat -= (rk_v)(fin & past & ~P->gone);
    k->flush -= (rk_v)(fin & (rk_m)(xa != 0u) & zero);
    return rk_sel(P->nan, rk_splat(RK_QNAN), (rk_v)(u * P->s));
}

/* Whether no lane of P is special or gone (rk_nv_vec's plain). */
RK_AI int rk_nv_plain(const rk_nvpar *P) {
    const rk_m any = P->special | P->gone;
    for (int l = 0; l < RK_LANES; l++)
        if (any[l]) return 0;
    return 1;
}

/* One row of a chunk, nb blocks of 16 values x with their parameters P and,
 * when sr, their random bytes rb; plain a constant (rk_nv_vec). */
RK_AI void rk_nv_row(uint32_t *x, const uint32_t *rb, const rk_nvpar *P, size_t nb, int sr, rk_counts *k,
                     const int plain) {
    for (size_t b = 0; b < nb; b++)
        for (size_t j = 16 * b; j < 16 * b + 16; j += RK_LANES) {
            rk_v rv;
            if (sr) rv = rk_ld(rb + j);
            rk_st(x + j, rk_nv_vec(rk_ld(x + j), &P[b], sr ? &rv : NULL, k, plain));
        }
}

/* Blocks along the rows: 1x16, or 16x16 tiles (a band of 16 rows; the rows
 * past the operand are zeros, which neither change an amax nor count).
 * Stochastic rounding: element (i, c) takes stream byte counter + i cp + c. */
static void rk_nv_rows(const mp_qop *op, size_t r0, size_t r1, rk_counts *k) {
    enum { W = 256 }; /* columns of a chunk: 16 blocks */
    const size_t cp = (op->cols + 15) / 16 * 16, band = op->tile16 ? 16 : 1;
    const float g = mp_nvfp4_global_scale(op->scale), mult = g * (1.0f / 6.0f), gd = 1.0f / g;
    uint32_t x[16][W], am[W / 16 + RK_LANES], rb[W];
    uint8_t rnd[W];
    for (size_t i = r0; i < r1; i += band) {
        const size_t nr = op->rows - i < band ? op->rows - i : band;
        for (size_t c0 = 0; c0 < cp; c0 += W) {
            const size_t n = cp - c0 < W ? cp - c0 : W, nb = n / 16;
            for (size_t b = 0; b < nb; b++) am[b] = 0;
            for (size_t r = 0; r < nr; r++) {
                rk_load(op, i + r, c0, n, x[r]);
                for (size_t b = 0; b < nb; b++) {
                    const uint32_t m = rk_amax(x[r] + 16 * b, 16);
                    am[b] = m > am[b] ? m : am[b];
                }
            }
            /* the blocks' parameters a vector of blocks at a time, then each block's in every lane */
            float inv[W / 16], sv[W / 16];
            int32_t special[W / 16], nan[W / 16], gone[W / 16];
            for (size_t b = nb; b < rk_whole(nb); b++) am[b] = 0;
            for (size_t b = 0; b < nb; b += RK_LANES) {
                const rk_v a = rk_ld(am + b);
                const rk_nvpar Q = rk_nv_params(a, mult, gd);
                k->amax = rk_max(a & (rk_v)~Q.special, k->amax);
                for (int l = 0; l < RK_LANES; l++)
                    inv[b + l] = Q.inv[l], sv[b + l] = Q.s[l], special[b + l] = Q.special[l], nan[b + l] = Q.nan[l],
                            gone[b + l] = Q.gone[l];
            }
            rk_nvpar P[W / 16];
            int plain = 1;
            for (size_t b = 0; b < nb; b++) {
                P[b] = (rk_nvpar){(rk_fv){0} + inv[b], (rk_fv){0} + sv[b], rk_isplat(special[b]), rk_isplat(nan[b]),
                                  rk_isplat(gone[b])};
                plain &= rk_nv_plain(&P[b]);
            }
            for (size_t r = 0; r < nr; r++) {
                if (op->rng) {
                    rk_sr_bytes(op->rng->seed, op->rng->counter + (uint64_t)((i + r) * cp + c0), n, rnd);
                    for (size_t c = 0; c < n; c++) rb[c] = rnd[c];
                }
                if (plain) rk_nv_row(x[r], rb, P, nb, op->rng != NULL, k, 1);
                else rk_nv_row(x[r], rb, P, nb, op->rng != NULL, k, 0);
                rk_store(op, i + r, c0, n, x[r]);
            }
        }
    }
}

/* mp_rht16 down each column of a block row x[16][n] (fp32 bits, n a whole
 * number of vectors): signs, then the butterflies of strides 1, 2, 4, 8
 * (a + b, a - b), halving after the second and the fourth (the same
 * operations in the same order). */
static inline void rk_rht16(uint32_t x[16][RK_CHUNK / 2], size_t n, uint16_t signs) {
    for (size_t c = 0; c < n; c += RK_LANES) { /* a vector of columns, its 16 rows in registers */
        rk_fv v[16];
#pragma GCC unroll 16
        for (int r = 0; r < 16; r++) v[r] = (rk_fv)(rk_ld(x[r] + c) ^ ((uint32_t)((signs >> r) & 1u) << 31));
#pragma GCC unroll 4
        for (int h = 1; h < 16; h <<= 1) {
#pragma GCC unroll 8
            for (int r = 0; r < 16; r += 2 * h)
#pragma GCC unroll 8
                for (int q = r; q < r + h; q++) {
                    const rk_fv a = v[q], b = v[q + h];
                    v[q] = a + b, v[q + h] = a - b;
                }
            if (h == 2 || h == 8)
#pragma GCC unroll 16
                for (int r = 0; r < 16; r++) v[r] = v[r] * 0.5f;
        }
#pragma GCC unroll 16
        for (int r = 0; r < 16; r++) rk_st(x[r] + c, (rk_v)v[r]);
    }
}

/* A block row (16 rows; zero rows past the operand) of columns [c0, c0 + n)
 * as fp32 bits, transformed when the operand asks for it. */
static inline void rk_nv_block_row(const mp_qop *op, size_t i0, size_t c0, size_t n, uint32_t x[16][RK_CHUNK / 2]) {
    for (int r = 0; r < 16; r++) rk_load(op, i0 + (size_t)r, c0, n, x[r]);
    if (op->rht) rk_rht16(x, rk_whole(n), op->signs);
}

/* Blocks down the columns (1x16 along the reduction), a block row in chunks
 * of columns, a lane per column: every one of the 16 rows is quantized and
 * counted, the padding too (after the transform it need not be zero), as the
 * reference does; only the operand's rows are stored. Stochastic rounding:
 * element (i0 + r, c) takes stream byte counter + i0 cols + 16 c + r. */
static void rk_nv_cols(const mp_qop *op, size_t r0, size_t r1, rk_counts *k) {
    enum { W = RK_CHUNK / 2 };
    const float g = mp_nvfp4_global_scale(op->scale), mult = g * (1.0f / 6.0f), gd = 1.0f / g;
    uint32_t x[16][W], rb[RK_LANES];
    uint8_t rnd[16 * W];
    for (size_t i0 = r0; i0 < r1; i0 += 16)
        for (size_t c0 = 0; c0 < op->cols; c0 += W) {
            const size_t n = op->cols - c0 < W ? op->cols - c0 : W, nw = rk_whole(n);
            rk_nv_block_row(op, i0, c0, n, x);
            /* column c's 16 bytes: one block of the stream when j0 is a block's first byte (the usual case:
             * mp_qoperand advances the counter by multiples of 16), taken from Philox's words in the lanes */
            const uint64_t j0 = op->rng ? op->rng->counter + (uint64_t)(i0 * op->cols + 16 * c0) : 0;
            const int words = op->rng && j0 % 16 == 0;
            if (op->rng && !words) rk_sr_bytes(op->rng->seed, j0, 16 * n, rnd);
            for (size_t c = 0; c < nw; c += RK_LANES) {
                rk_v am = rk_splat(0), w[4];
                for (int r = 0; r < 16; r++) am = rk_max(rk_ld(x[r] + c) & RK_ABS, am);
                const rk_nvpar P = rk_nv_params(am, mult, gd);
                k->amax = rk_max(am & (rk_v)~P.special, k->amax); /* the padding columns' am is 0 */
                if (words) rk_philox(op->rng->seed, j0 / 16 + c, w);
                const int plain = rk_nv_plain(&P);
                for (int r = 0; r < 16; r++) {
                    rk_v rv;
                    if (words) rv = (w[r / 4] >> (uint32_t)(8 * (r % 4))) & 0xffu; /* padding columns: x is 0 */
                    else if (op->rng) {
                        for (int l = 0; l < RK_LANES; l++)
                            rb[l] = c + (size_t)l < n ? rnd[16 * (c + (size_t)l) + (size_t)r] : 0;
                        rv = rk_ld(rb);
                    }
                    rk_st(x[r] + c, plain ? rk_nv_vec(rk_ld(x[r] + c), &P, op->rng ? &rv : NULL, k, 1)
                                          : rk_nv_vec(rk_ld(x[r] + c), &P, op->rng ? &rv : NULL, k, 0));
                }
            }
            for (int r = 0; r < 16; r++) rk_store(op, i0 + (size_t)r, c0, n, x[r]);
        }
}

/* ---- the table ---- */

static mp_status rk_quantize(const mp_qop *op, size_t r0, size_t r1, mp_quant_stats *st) {
    rk_counts k = {rk_splat(0), rk_splat(0), rk_splat(0), rk_splat(0)};
    switch (op->kind) {
    case MP_RECIPE_FP8_DELAYED:
    case MP_RECIPE_FP8_CURRENT: rk_fp8(op, r0, r1, &k); break;
    case MP_RECIPE_MXFP8: op->k_rows ? rk_mx_cols(op, r0, r1, &k) : rk_mx_rows(op, r0, r1, &k); break;
    case MP_RECIPE_NVFP4: op->k_rows ? rk_nv_cols(op, r0, r1, &k) : rk_nv_rows(op, r0, r1, &k); break;
    default: return mp_error(MP_EINVAL, "mp_qoperand: no recipe");
    }
    rk_add(&k, st);
    return MP_OK;
}

/* The largest finite |x| after the Hadamard transform, on the bits. */
static uint32_t rk_rht_amax(const mp_qop *op, size_t r0, size_t r1) {
    enum { W = RK_CHUNK / 2 };
    mp_qop t = *op;
    t.rht = 1;
    uint32_t x[16][W];
    rk_v m = rk_splat(0);
    for (size_t i0 = r0; i0 < r1; i0 += 16)
        for (size_t c0 = 0; c0 < op->cols; c0 += W) {
            const size_t n = op->cols - c0 < W ? op->cols - c0 : W;
            rk_nv_block_row(&t, i0, c0, n, x);
            for (int r = 0; r < 16; r++)
                for (size_t c = 0; c < rk_whole(n); c += RK_LANES) {
                    const rk_v a = rk_ld(x[r] + c) & RK_ABS;
                    m = rk_max(a & (rk_v)(a < RK_INF), m);
                }
        }
    uint32_t r = 0;
    for (int l = 0; l < RK_LANES; l++) r = m[l] > r ? m[l] : r;
    return r;
}

#define MP_RECIPE_KERNELS \
    { .quantize = rk_quantize, .rht_amax = rk_rht_amax }

#endif
