/* gemm_epilogue_avx2.c - the GEMM epilogue for AVX2 + FMA + F16C. A half C
 * (alpha, beta, bias, zeros, its rounding and counts, and a post step: the
 * residual's addition or GELU from the table of every code) in one pass over
 * the strip, 8 lanes at a time, where the strip's columns are whole vectors;
 * everything else through gemm_epilogue.h's plain C, built here (-O3: its
 * loops vectorize, fmaf is one instruction). The same fp32 and fp64
 * operations in the same order and the same exact conversions and counts as
 * the plain C, hence the same bits (tests/test_gemm.c). */
#include "convert_avx2.h"
#include "../gemm_epilogue.h"

/* 8 values of a half row, exact in fp32 (NaN quieted, as mp_convert) */
static inline __m256 load_half8(int f16, const uint16_t *p) {
    const __m128i h = _mm_loadu_si128((const __m128i *)p);
    return f16 ? _mm256_cvtph_ps(h) : _mm256_castsi256_ps(mp_bf16_widen8(h));
}

/* v rounded to 8 codes of fp16 or bf16; *ay: their magnitudes in 32-bit lanes */
static inline __m128i round8(int f16, __m256 v, __m256i *ay) {
    const __m256i m = _mm256_set1_epi32(0x7fff);
    if (f16) {
        const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        *ay = _mm256_and_si256(_mm256_cvtepu16_epi32(h), m);
        return h;
    }
    const __m256i r = mp_bf16_round8(_mm256_castps_si256(v));
    *ay = _mm256_and_si256(r, m);
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

/* The counts of rounding rows x cols fp32 values (row stride ts) to fp16 or bf16 into c: their codes'
 * range rg when it is clean, else value by value */
static void count_rows(int f16, const mp_range256 *rg, mp_counts256 *c, const float *v, size_t ts, size_t rows,
                       size_t cols) {
    const uint32_t min_normal = f16 ? 0x400 : 0x80, inf = f16 ? 0x7c00 : 0x7f80;
    if (mp_range_clean(rg, c, min_normal, inf)) return;
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < cols; j += 8) {
            const __m256 x = _mm256_loadu_ps(v + r * ts + j);
            __m256i ay;
            round8(f16, x, &ay);
            mp_count8(c, _mm256_castps_si256(x), ay, min_normal, inf);
        }
}

/* the fp32 values of codes from round8 (a NaN's code is quiet already) */
static inline __m256 widen8(int f16, __m128i h) {
    return f16 ? _mm256_cvtph_ps(h) : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* gelu_table_rows' backward on 8 lanes: g * d[code of x] in fp64, rounded once; a NaN x passes, quieted */
static inline __m256 gelu_bwd8(const mp_gelu_table *tb, int f16, const uint16_t *xc, __m256 g) {
    const __m128i codes = _mm_loadu_si128((const __m128i *)xc);
    const __m256i idx = _mm256_cvtepu16_epi32(codes);
    const __m256d dlo = _mm256_i32gather_pd(tb->d, _mm256_castsi256_si128(idx), 8);
    const __m256d dhi = _mm256_i32gather_pd(tb->d, _mm256_extracti128_si256(idx, 1), 8);
    const __m128 plo = _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(g)), dlo));
    const __m128 phi = _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(g, 1)), dhi));
    const __m256 x = f16 ? _mm256_cvtph_ps(codes) : _mm256_castsi256_ps(mp_bf16_widen8(codes));
    const __m256 quiet = _mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(x), _mm256_set1_epi32(0x400000)));
    return _mm256_blendv_ps(_mm256_set_m128(phi, plo), quiet, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

/* The post steps half_c does (P): */
enum { P_NONE, P_ADD, P_GELU, P_GELU_GRAD };

/* A half C, round_to fp32, columns in whole vectors; tb: the GELU table of a GELU post step. C's values
 * rounded and counted into st[0], stored unless the post step's results replace them; the post step on
 * them as stored, its results rounded, counted into st[1] and stored. Counted by the codes' range; the
 * values are kept (C's in the tile, the post step's in yb) for counting again should it not be clean.
 * Inlined with constants for the format, the post step and the usual case (plain: alpha 1, beta 0, no
 * zeros counted; bias: with a bias), so that the loop holds no other branch and its constants stay in
 * registers. */
static inline __attribute__((always_inline)) void half_c(const mp_gemm_ep *e, const mp_gelu_table *tb, float *tile,
                                                         size_t ts, size_t i0, size_t j0, size_t rows, size_t cols,
                                                         mp_convert_stats *st, uint64_t *zeros, const int f16,
                                                         const int P, const int plain, const int bias) {
    const int keep = P == P_NONE || e->post_out, stats = st != NULL;
    const int read_c = !plain && e->beta != 0.0f, scale = !plain && e->alpha != 1.0f;
    const __m256 va = _mm256_set1_ps(e->alpha), vb = _mm256_set1_ps(e->beta);
    uint16_t *c0 = (uint16_t *)e->c + i0 * e->ldc + j0;
    uint16_t *o0 = (uint16_t *)(e->post_out ? e->post_out : e->c) + i0 * e->ldc + j0;
    const int read_x = P == P_ADD || P == P_GELU_GRAD; /* GELU's forward reads only C */
    const uint16_t *x0 = read_x ? (const uint16_t *)e->post_x + i0 * e->ldc + j0 : NULL;
    const float *b = (plain ? bias : e->bias != NULL) ? e->bias + j0 : NULL;
    float yb[MP_GEMM_STRIP]; /* the post step's values, laid out as the tile */
    mp_range256 rg = mp_range0(), rg2 = mp_range0();
    uint64_t z = 0;
    for (size_t r = 0; r < rows; r++) {
        float *tr = tile + r * ts, *yr = yb + r * ts;
        uint16_t *cr = c0 + r * e->ldc, *orow = o0 + r * e->ldc;
        const uint16_t *xr = read_x ? x0 + r * e->ldc : NULL;
        for (size_t j = 0; j < cols; j += 8) {
            __m256 t = _mm256_loadu_ps(tr + j);
            if (read_c) t = _mm256_fmadd_ps(va, t, _mm256_mul_ps(vb, load_half8(f16, cr + j)));
            else if (scale) t = _mm256_mul_ps(va, t);
            if (plain ? bias : b != NULL) t = _mm256_add_ps(t, _mm256_loadu_ps(b + j));
            if (!plain && zeros)
                z += (uint64_t)mp_pop8(_mm256_cmpeq_epi32(
                    _mm256_and_si256(_mm256_castps_si256(t), _mm256_set1_epi32(0x7fffffff)), _mm256_setzero_si256()));
            __m256i ay;
            const __m128i h = round8(f16, t, &ay);
            if (stats) mp_range_add(&rg, ay), _mm256_storeu_ps(tr + j, t);
            if (keep) _mm_storeu_si128((__m128i *)(cr + j), h);
            if (P == P_NONE) continue;
            __m256 y;
            if (P == P_ADD) y = _mm256_add_ps(load_half8(f16, xr + j), widen8(f16, h)); /* x + c */
            else if (P == P_GELU) y = _mm256_i32gather_ps(tb->y, _mm256_cvtepu16_epi32(h), 4);
            else y = gelu_bwd8(tb, f16, xr + j, widen8(f16, h));
            _mm_storeu_si128((__m128i *)(orow + j), round8(f16, y, &ay));
            if (stats) mp_range_add(&rg2, ay), _mm256_storeu_ps(yr + j, y);
        }
    }
    if (stats) {
        mp_counts256 c = MP_COUNTS256_0;
        count_rows(f16, &rg, &c, tile, ts, rows, cols);
        mp_counts256_add(st, &c, f16 ? 5 : 8, f16 ? 10 : 7);
        if (P != P_NONE) {
            mp_counts256 c2 = MP_COUNTS256_0;
            count_rows(f16, &rg2, &c2, yb, ts, rows, cols);
            mp_counts256_add(st + 1, &c2, f16 ? 5 : 8, f16 ? 10 : 7);
        }
    }
    if (zeros) *zeros += z;
}

/* half_c for the format F16 and post step P: the usual case with or without a bias, or the general one */
#define HALF_C(F16, P)                                                                          \
    do {                                                                                        \
        if (!plain) half_c(e, tb, tile, ts, i0, j0, rows, cols, st, zeros, F16, P, 0, 0);       \
        else if (e->bias) half_c(e, tb, tile, ts, i0, j0, rows, cols, st, zeros, F16, P, 1, 1); \
        else half_c(e, tb, tile, ts, i0, j0, rows, cols, st, zeros, F16, P, 1, 0);              \
    } while (0)

void mp_gemm_epilogue_avx2(const mp_gemm_ep *e, float *tile, size_t ts, size_t i0, size_t j0, size_t rows, size_t cols,
                           mp_convert_stats *st, uint64_t *zeros) {
    const int gelu = e->post != MP_POST_NONE && e->post != MP_POST_ADD;
    const int erf = e->post == MP_POST_GELU_ERF || e->post == MP_POST_GELU_ERF_GRAD;
    const mp_gelu_table *tb = gelu && e->ct != MP_F32 ? mp_gelu_table_of(erf, e->ct) : NULL;
    if (e->ct == MP_F32 || e->round_to != MP_F32 || cols % 8 || (gelu && !tb)) {
        mp_gemm_epilogue_body(e, tile, ts, i0, j0, rows, cols, st, zeros);
        return;
    }
    const int plain = e->alpha == 1.0f && e->beta == 0.0f && !zeros;
    const int p = e->post == MP_POST_NONE                                  ? P_NONE
                  : e->post == MP_POST_ADD                                 ? P_ADD
                  : e->post == MP_POST_GELU || e->post == MP_POST_GELU_ERF ? P_GELU
                                                                           : P_GELU_GRAD;
    if (e->ct == MP_F16) switch (p) {
        case P_NONE: HALF_C(1, P_NONE); break;
        case P_ADD: HALF_C(1, P_ADD); break;
        case P_GELU: HALF_C(1, P_GELU); break;
        default: HALF_C(1, P_GELU_GRAD); break;
        }
    else switch (p) {
        case P_NONE: HALF_C(0, P_NONE); break;
        case P_ADD: HALF_C(0, P_ADD); break;
        case P_GELU: HALF_C(0, P_GELU); break;
        default: HALF_C(0, P_GELU_GRAD); break;
        }
}

uint64_t mp_gemm_zeros_avx2(const float *c, size_t ldc, size_t rows, size_t cols) {
    return tile_zeros(c, ldc, rows, cols);
}
