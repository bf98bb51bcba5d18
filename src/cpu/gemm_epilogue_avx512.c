/* gemm_epilogue_avx512.c - the GEMM epilogue (gemm.c's gemm_epilogue) with
 * AVX-512, 16 lanes at a time in one pass over the tile, for the AVX-512 and
 * AMX kernels. The same fp32 operations in the same order and the same exact
 * conversions and counts (convert_avx512.h), so the same bits (tested). A
 * half C's post step (gemm.h) runs in the same pass (post_rows, GELU from the
 * table of every code); on an fp32 C, with round_to, or without a GELU table
 * it runs gemm_epilogue.h's plain C, built here for AVX-512. In the half
 * rows and the post rows, a half C and a post step's output of
 * MP_STREAM_MIN_BYTES or more (e->stream) are stored non-temporally, whole
 * aligned vectors of 16.
 * Built twice: as mp_gemm_epilogue_avx512, and with AVX512_BF16 as
 * mp_gemm_epilogue_avx512bf16 (gemm_epilogue_avx512bf16.c), where bf16 codes
 * come from vcvtneps2bf16 (mp_bf16_round16_cvt: the same codes). */
#include "convert_avx512.h"
#include "../gemm_epilogue.h"

#ifndef MP_EPILOGUE_AVX512_FN
#define MP_EPILOGUE_AVX512_FN mp_gemm_epilogue_avx512
#define MP_EPILOGUE_AVX512_ZEROS
#endif

/* 16 values of C's row at column j, exact in fp32 (NaN quieted, as mp_convert) */
static inline __m512 load_c(mp_dtype ct, const void *row, size_t j, __mmask16 k) {
    if (ct == MP_F32) return _mm512_maskz_loadu_ps(k, (const float *)row + j);
    return mp_half_load16(ct == MP_F16, (const uint16_t *)row + j, k);
}

/* v rounded to fp16 or bf16 (16-bit codes), counted */
static inline __m256i round_half(mp_dtype t, __m512 v, __mmask16 k, mp_counts512 *c, int stats) {
#ifdef MP_EPILOGUE_CVT_BF16
    if (t != MP_F16) {
        const __m256i r = mp_bf16_round16_cvt(_mm512_castps_si512(v));
        if (stats) mp_half_count16(c, 0, k, v, r);
        return r;
    }
#endif
    return mp_half_round16(t == MP_F16, v, k, c, stats);
}

/* the fp32 value of 16-bit codes from round_half */
static inline __m512 widen_half(mp_dtype t, __m256i r) { return mp_half_value16(t == MP_F16, r); }

/* The common case of the training step's GEMMs, a half C from the plain sums
 * (alpha 1, beta 0, no post step) with or without a
 * bias, counts and zeros: the general loop's operations for that case, with
 * the choices made once per call instead of per vector (a third of the
 * general loop's time on the AMX Xeon). */
static inline __attribute__((always_inline)) void half_rows(const mp_gemm_ep *e, const float *tile, size_t ts,
                                                            size_t i0, size_t j0, size_t rows, size_t cols,
                                                            mp_convert_stats *st, uint64_t *zeros, const int f16,
                                                            const int bias, const int stats, const int count_zeros) {
    const mp_dtype t = f16 ? MP_F16 : MP_BF16;
    const size_t ldc = e->ldc;
    const int stream = e->stream;
    uint16_t *c0 = (uint16_t *)e->c + i0 * ldc + j0;
    const float *b = bias ? e->bias + j0 : NULL;
    mp_counts512 c = MP_COUNTS512_0;
    uint64_t z = 0;
#define HALF_16(J, K)                                                                                    \
    do {                                                                                                 \
        __m512 v = _mm512_maskz_loadu_ps(K, tr + (J));                                                   \
        if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(K, b + (J)));                               \
        if (count_zeros)                                                                                 \
            z += (uint64_t)__builtin_popcount(                                                           \
                _mm512_mask_testn_epi32_mask(K, _mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff))); \
        mp_store16x16(cr + (J), K, round_half(t, v, K, &c, stats), stream);                              \
    } while (0)
    for (size_t r = 0; r < rows; r++) { /* whole vectors with a constant mask, then the tail */
        const float *tr = tile + r * ts;
        uint16_t *cr = c0 + r * ldc;
        size_t j = 0;
        for (; j + 16 <= cols; j += 16) HALF_16(j, (__mmask16)0xffff);
        if (j < cols) HALF_16(j, mp_tail16(cols - j));
    }
#undef HALF_16
    if (stats) mp_counts512_add(st, &c, f16 ? 5 : 8, f16 ? 10 : 7);
    if (count_zeros) *zeros += z;
}

#define HALF_ROWS(F16, B)                                                               \
    (st ? (zeros ? half_rows(e, tile, ts, i0, j0, rows, cols, st, zeros, F16, B, 1, 1)  \
                 : half_rows(e, tile, ts, i0, j0, rows, cols, st, zeros, F16, B, 1, 0)) \
        : (zeros ? half_rows(e, tile, ts, i0, j0, rows, cols, st, zeros, F16, B, 0, 1)  \
                 : half_rows(e, tile, ts, i0, j0, rows, cols, st, zeros, F16, B, 0, 0)))

/* half_rows where it applies (a half C from the plain sums, no post step): 1 when it did. */
static int half_case(const mp_gemm_ep *e, float *tile, size_t ts, size_t i0, size_t j0, size_t rows, size_t cols,
                     mp_convert_stats *st, uint64_t *zeros) {
    if (e->post != MP_POST_NONE || e->round_to != MP_F32 || e->ct == MP_F32 || e->alpha != 1.0f || e->beta != 0.0f)
        return 0;
    if (e->ct == MP_F16) e->bias ? HALF_ROWS(1, 1) : HALF_ROWS(1, 0);
    else e->bias ? HALF_ROWS(0, 1) : HALF_ROWS(0, 0);
    return 1;
}

/* GELU's backward from its table on 16 lanes of mask k (gelu_table_rows in gemm_epilogue.h): g times the fp64
 * derivative of x's code, rounded once; a NaN x passes through with its quiet bit set. */
static inline __m512 gelu_bwd16(const mp_gelu_table *tb, mp_dtype t, const uint16_t *xc, __m512 g, __mmask16 k) {
    const __m256i codes = _mm256_maskz_loadu_epi16(k, xc);
    const __m512i idx = _mm512_cvtepu16_epi32(codes);
    const __m512d dlo =
        _mm512_mask_i32gather_pd(_mm512_setzero_pd(), (__mmask8)k, _mm512_castsi512_si256(idx), tb->d, 8);
    const __m512d dhi =
        _mm512_mask_i32gather_pd(_mm512_setzero_pd(), (__mmask8)(k >> 8), _mm512_extracti64x4_epi64(idx, 1), tb->d, 8);
    const __m256 plo = _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(g)), dlo));
    const __m256 phi = _mm512_cvtpd_ps(
        _mm512_mul_pd(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(g), 1))), dhi));
    const __m512 x = t == MP_F16 ? _mm512_cvtph_ps(codes) : _mm512_castsi512_ps(mp_bf16_widen16(codes));
    const __m512 quiet = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x400000)));
    return _mm512_mask_mov_ps(_mm512_insertf32x8(_mm512_castps256_ps512(plo), phi, 1),
                              _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), quiet);
}

/* The post steps post_rows does (P): */
enum { P_ADD, P_GELU, P_GELU_GRAD };

/* A half C with a post step, round_to fp32, GELU's from its table tb, in one pass: C's values rounded,
 * counted into st[0] and stored unless the post step's results replace them; the post step on them as
 * stored, its results rounded, counted into st[1] and stored. The operations of gemm_epilogue.h's plain C
 * (gelu_table_rows for GELU), in registers. Inlined with constants for the format, the post step and
 * the usual case (plain: alpha 1, beta 0, no zeros counted; bias: with a bias; counted: st given), so
 * that the loop holds no other branch. */
static inline __attribute__((always_inline)) void post_rows(const mp_gemm_ep *e, const mp_gelu_table *tb,
                                                            const float *tile, size_t ts, size_t i0, size_t j0,
                                                            size_t rows, size_t cols, mp_convert_stats *st,
                                                            uint64_t *zeros, const int f16, const int P,
                                                            const int plain, const int bias, const int counted) {
    const mp_dtype t = f16 ? MP_F16 : MP_BF16;
    const int keep = e->post_out != NULL, stats = plain ? counted : st != NULL, stream = e->stream;
    const int read_c = !plain && e->beta != 0.0f, scale = !plain && e->alpha != 1.0f;
    const __m512 va = _mm512_set1_ps(e->alpha), vb = _mm512_set1_ps(e->beta);
    const size_t ldc = e->ldc;
    uint16_t *c0 = (uint16_t *)e->c + i0 * ldc + j0;
    uint16_t *o0 = (uint16_t *)(e->post_out ? e->post_out : e->c) + i0 * ldc + j0;
    const int read_x = P != P_GELU; /* GELU's forward reads only C */
    const uint16_t *x0 = read_x ? (const uint16_t *)e->post_x + i0 * ldc + j0 : NULL;
    const float *b = (plain ? bias : e->bias != NULL) ? e->bias + j0 : NULL;
    mp_counts512 c = MP_COUNTS512_0, c2 = MP_COUNTS512_0;
    uint64_t z = 0;
#define POST_16(J, K)                                                                                    \
    do {                                                                                                 \
        const size_t jv = (J);                                                                           \
        const __mmask16 k = (K);                                                                         \
        __m512 v = _mm512_maskz_loadu_ps(k, tr + jv);                                                    \
        if (read_c) v = _mm512_fmadd_ps(va, v, _mm512_mul_ps(vb, load_c(t, cr, jv, k)));                 \
        else if (scale) v = _mm512_mul_ps(va, v);                                                        \
        if (plain ? bias : b != NULL) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, b + jv));            \
        if (!plain && zeros)                                                                             \
            z += (uint64_t)__builtin_popcount(                                                           \
                _mm512_mask_testn_epi32_mask(k, _mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff))); \
        const __m256i h = round_half(t, v, k, &c, stats);                                                \
        if (keep) mp_store16x16(cr + jv, k, h, stream);                                                  \
        __m512 y;                                                                                        \
        if (P == P_ADD) y = _mm512_add_ps(load_c(t, xr, jv, k), widen_half(t, h)); /* x + c */           \
        else if (P == P_GELU)                                                                            \
            y = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), k, _mm512_cvtepu16_epi32(h), tb->y, 4);    \
        else y = gelu_bwd16(tb, t, xr + jv, widen_half(t, h), k);                                        \
        mp_store16x16(orow + jv, k, round_half(t, y, k, &c2, stats), stream);                            \
    } while (0)
    for (size_t r = 0; r < rows; r++) { /* whole vectors with a constant mask, then the tail */
        const float *tr = tile + r * ts;
        uint16_t *cr = c0 + r * ldc, *orow = o0 + r * ldc;
        const uint16_t *xr = read_x ? x0 + r * ldc : NULL;
        size_t j = 0;
        for (; j + 16 <= cols; j += 16) POST_16(j, (__mmask16)0xffff);
        if (j < cols) POST_16(j, mp_tail16(cols - j));
    }
#undef POST_16
    if (stats) {
        mp_counts512_add(st, &c, f16 ? 5 : 8, f16 ? 10 : 7);
        mp_counts512_add(st + 1, &c2, f16 ? 5 : 8, f16 ? 10 : 7);
    }
    if (zeros) *zeros += z;
}

/* post_rows for the format F16 and post step P: the usual case with or without a bias, counted or not, or
 * the general one */
#define POST_ROWS(F16, P)                                                                       \
    do {                                                                                        \
        if (!plain) post_rows(e, tb, tile, ts, i0, j0, rows, cols, st, zeros, F16, P, 0, 0, 0); \
        else if (e->bias)                                                                       \
            st ? post_rows(e, tb, tile, ts, i0, j0, rows, cols, st, zeros, F16, P, 1, 1, 1)     \
               : post_rows(e, tb, tile, ts, i0, j0, rows, cols, st, zeros, F16, P, 1, 1, 0);    \
        else                                                                                    \
            st ? post_rows(e, tb, tile, ts, i0, j0, rows, cols, st, zeros, F16, P, 1, 0, 1)     \
               : post_rows(e, tb, tile, ts, i0, j0, rows, cols, st, zeros, F16, P, 1, 0, 0);    \
    } while (0)

/* post_rows where it applies (a half C with a post step, GELU's table at hand): 1 when it did. */
static int post_case(const mp_gemm_ep *e, float *tile, size_t ts, size_t i0, size_t j0, size_t rows, size_t cols,
                     mp_convert_stats *st, uint64_t *zeros) {
    if (e->post == MP_POST_NONE || e->ct == MP_F32 || e->round_to != MP_F32) return 0;
    const int p = e->post == MP_POST_ADD                                   ? P_ADD
                  : e->post == MP_POST_GELU || e->post == MP_POST_GELU_ERF ? P_GELU
                                                                           : P_GELU_GRAD;
    const int erf = e->post == MP_POST_GELU_ERF || e->post == MP_POST_GELU_ERF_GRAD;
    const mp_gelu_table *tb = p == P_ADD ? NULL : mp_gelu_table_of(erf, e->ct);
    if (p != P_ADD && !tb) return 0;
    const int plain = e->alpha == 1.0f && e->beta == 0.0f && !zeros;
    if (e->ct == MP_F16) switch (p) {
        case P_ADD: POST_ROWS(1, P_ADD); break;
        case P_GELU: POST_ROWS(1, P_GELU); break;
        default: POST_ROWS(1, P_GELU_GRAD); break;
        }
    else switch (p) {
        case P_ADD: POST_ROWS(0, P_ADD); break;
        case P_GELU: POST_ROWS(0, P_GELU); break;
        default: POST_ROWS(0, P_GELU_GRAD); break;
        }
    return 1;
}

void MP_EPILOGUE_AVX512_FN(const mp_gemm_ep *e, float *tile, size_t ts, size_t i0, size_t j0, size_t rows, size_t cols,
                           mp_convert_stats *st, uint64_t *zeros) {
    if (e->post != MP_POST_NONE) { /* post_rows, or plain C (an fp32 C, round_to, no GELU table) */
        if (!post_case(e, tile, ts, i0, j0, rows, cols, st, zeros))
            mp_gemm_epilogue_body(e, tile, ts, i0, j0, rows, cols, st, zeros);
        return;
    }
    if (half_case(e, tile, ts, i0, j0, rows, cols, st, zeros)) return;
    /* no post step: gemm_epilogue.h's operations in registers */
    const __m512 va = _mm512_set1_ps(e->alpha), vb = _mm512_set1_ps(e->beta);
    const int read_c = e->beta != 0.0f && e->round_to == MP_F32;
    const int stats = st != NULL;
    const size_t es = mp_format(e->ct)->size;
    mp_counts512 c = MP_COUNTS512_0;
    uint64_t sub32 = 0, nan32 = 0, z = 0;
    __m512i am32 = _mm512_setzero_si512(); /* an fp32 C's largest finite magnitude per lane */
    const __m512i inf32 = _mm512_set1_epi32(0x7f800000), abs32 = _mm512_set1_epi32(0x7fffffff);
    for (size_t r = 0; r < rows; r++) {
        uint8_t *crow = (uint8_t *)e->c + ((i0 + r) * e->ldc + j0) * es;
        for (size_t j = 0; j < cols; j += 16) {
            const __mmask16 k = mp_tail16(cols - j);
            __m512 t = _mm512_maskz_loadu_ps(k, tile + r * ts + j);
            if (read_c) t = _mm512_fmadd_ps(va, t, _mm512_mul_ps(vb, load_c(e->ct, crow, j, k)));
            else if (e->alpha != 1.0f) t = _mm512_mul_ps(va, t);
            if (e->bias) t = _mm512_add_ps(t, _mm512_maskz_loadu_ps(k, e->bias + j0 + j));
            if (zeros) /* +-0: the magnitude bits are 0 */
                z += (uint64_t)__builtin_popcount(
                    _mm512_mask_testn_epi32_mask(k, _mm512_castps_si512(t), _mm512_set1_epi32(0x7fffffff)));
            if (e->round_to != MP_F32) { /* C = beta C + (t rounded to round_to) */
                __m512 y = widen_half(e->round_to, round_half(e->round_to, t, k, &c, stats));
                if (e->beta != 0.0f) y = _mm512_add_ps(_mm512_mul_ps(vb, load_c(MP_F32, crow, j, k)), y);
                _mm512_mask_storeu_ps((float *)crow + j, k, y);
                if (stats) { /* the amax of C as it now stands */
                    const __m512i a = _mm512_and_si512(_mm512_castps_si512(y), abs32);
                    am32 = _mm512_mask_max_epu32(am32, _mm512_mask_cmplt_epu32_mask(k, a, inf32), am32, a);
                }
            } else if (e->ct == MP_F32) {
                _mm512_mask_storeu_ps((float *)crow + j, k, t);
                if (stats) {
                    const __m512i a = _mm512_and_si512(_mm512_castps_si512(t), _mm512_set1_epi32(0x7fffffff));
                    sub32 += (uint64_t)__builtin_popcount(_mm512_mask_cmplt_epu32_mask(
                        k, _mm512_sub_epi32(a, _mm512_set1_epi32(1)), _mm512_set1_epi32(0x7fffff)));
                    nan32 += (uint64_t)__builtin_popcount(_mm512_mask_cmpgt_epu32_mask(k, a, inf32));
                    am32 = _mm512_mask_max_epu32(am32, _mm512_mask_cmplt_epu32_mask(k, a, inf32), am32, a);
                }
            } else {
                _mm256_mask_storeu_epi16((uint16_t *)crow + j, k, round_half(e->ct, t, k, &c, stats));
            }
        }
    }
    if (stats) { /* amax: of the half codes stored, or of an fp32 C's values */
        const int half = e->round_to == MP_F32 && e->ct != MP_F32, f16 = e->ct == MP_F16;
        mp_counts512_add(st, &c, !half ? 0 : f16 ? 5 : 8, f16 ? 10 : 7);
        st->subnormal += sub32, st->nan += nan32;
        mp_stats_amax(st, _mm512_reduce_max_epu32(am32));
    }
    if (zeros) *zeros += z;
}

#ifdef MP_EPILOGUE_AVX512_ZEROS
uint64_t mp_gemm_zeros_avx512(const float *c, size_t ldc, size_t rows, size_t cols) {
    uint64_t z = 0;
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < cols; j += 16) {
            const __mmask16 k = mp_tail16(cols - j);
            const __m512i x = _mm512_maskz_loadu_epi32(k, c + r * ldc + j);
            z += (uint64_t)__builtin_popcount(_mm512_mask_testn_epi32_mask(k, x, _mm512_set1_epi32(0x7fffffff)));
        }
    return z;
}
#endif
