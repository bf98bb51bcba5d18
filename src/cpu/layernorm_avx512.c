/* layernorm_avx512.c - layer norm on rows of 16-bit values (fp16 or bf16)
 * with fp32 reductions, in registers (internal.h's mp_layernorm_kernels):
 * ops.c's operations for that case in the same order (16-lane sums with each
 * product rounded before its addition and the same fold; forward: the mean,
 * the deviations' squares, y = n w + b; backward: n = (x - mean) rstd,
 * dn = dy w, dx = rstd (dn - a - n c), and the column sums of dw and db), the
 * same exact conversions and the same counts, hence the same bits
 * (tests/test_ops.c, every path; where two NaNs of different payloads meet in
 * one operation, the one kept depends on the operand order the compiler
 * chose, in the portable rows too). Each row pass reads the row from L1: the
 * forward's sum, squares and outputs; the backward's sums, then dx
 * (recomputing n and dn) rounded, counted and added to the residual stream's
 * row. */
#include <math.h>

#include "convert_avx512.h"

/* ops.c's fold of 16 lane sums: lane k += lane k + h for h = 8, 4, 2, 1 */
static float fold16(__m512 v) {
    float l[16];
    _mm512_storeu_ps(l, v);
    for (int h = 8; h; h >>= 1)
        for (int k = 0; k < h; k++) l[k] += l[k + h];
    return l[0];
}

/* n = (x - mean) rstd and dn = dy w (w NULL: dy) of 16 values at j */
static inline void row16(int f16, const uint16_t *dy, const uint16_t *x, const float *w, size_t j, __mmask16 k,
                         __m512 vm, __m512 vr, __m512 *n, __m512 *dn) {
    *n = _mm512_mul_ps(_mm512_sub_ps(mp_half_load16(f16, x + j, k), vm), vr);
    *dn = mp_half_load16(f16, dy + j, k);
    if (w) *dn = _mm512_mul_ps(*dn, _mm512_maskz_loadu_ps(k, w + j));
}

static void fwd16(uint16_t *y, const uint16_t *x, const float *w, const float *b, float eps, size_t C, int f16,
                  float *mean, float *rstd, mp_convert_stats *st) {
    __m512 s = _mm512_setzero_ps();
    for (size_t j = 0; j < C; j += 16) {
        const __mmask16 k = mp_tail16(C - j);
        s = _mm512_mask_add_ps(s, k, s, mp_half_load16(f16, x + j, k));
    }
    const float m = fold16(s) / (float)C;
    const __m512 vm = _mm512_set1_ps(m);
    s = _mm512_setzero_ps();
    for (size_t j = 0; j < C; j += 16) {
        const __mmask16 k = mp_tail16(C - j);
        const __m512 d = _mm512_sub_ps(mp_half_load16(f16, x + j, k), vm);
        s = _mm512_mask_add_ps(s, k, s, _mm512_mul_ps(d, d));
    }
    const float rs = 1.0f / sqrtf(fold16(s) / (float)C + eps);
    const __m512 vr = _mm512_set1_ps(rs);
    mp_counts512 c = MP_COUNTS512_0;
    for (size_t j = 0; j < C; j += 16) { /* n w + b, with w 1 and b +0 where absent (-0 + +0 is +0) */
        const __mmask16 k = mp_tail16(C - j);
        __m512 v = _mm512_mul_ps(_mm512_sub_ps(mp_half_load16(f16, x + j, k), vm), vr);
        if (w) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(k, w + j));
        v = _mm512_add_ps(v, b ? _mm512_maskz_loadu_ps(k, b + j) : _mm512_setzero_ps());
        _mm256_mask_storeu_epi16(y + j, k, mp_half_round16(f16, v, k, &c, st != NULL));
    }
    *mean = m, *rstd = rs;
    if (st) mp_counts512_add(st, &c, f16 ? 5 : 8, f16 ? 10 : 7);
}

static void dx16(uint16_t *out, const uint16_t *dy, const uint16_t *x, const uint16_t *res, const float *w, float mean,
                 float rstd, size_t C, int f16, mp_convert_stats *st_dx, mp_convert_stats *st_sum) {
    const __m512 vm = _mm512_set1_ps(mean), vr = _mm512_set1_ps(rstd);
    __m512 s = _mm512_setzero_ps(), d = _mm512_setzero_ps(), n, dn;
    for (size_t j = 0; j < C; j += 16) { /* the tail's lanes past C keep their sums */
        const __mmask16 k = mp_tail16(C - j);
        row16(f16, dy, x, w, j, k, vm, vr, &n, &dn);
        s = _mm512_mask_add_ps(s, k, s, dn);
        d = _mm512_mask_add_ps(d, k, d, _mm512_mul_ps(dn, n));
    }
    const __m512 va = _mm512_set1_ps(fold16(s) / (float)C), vc = _mm512_set1_ps(fold16(d) / (float)C);
    mp_counts512 c1 = MP_COUNTS512_0, c2 = MP_COUNTS512_0;
    for (size_t j = 0; j < C; j += 16) {
        const __mmask16 k = mp_tail16(C - j);
        row16(f16, dy, x, w, j, k, vm, vr, &n, &dn);
        const __m512 dx = _mm512_mul_ps(vr, _mm512_sub_ps(_mm512_sub_ps(dn, va), _mm512_mul_ps(n, vc)));
        const __m256i h = mp_half_round16(f16, dx, k, &c1, st_dx != NULL);
        if (!res) {
            _mm256_mask_storeu_epi16(out + j, k, h);
            continue;
        }
        const __m256i o = mp_half_round16(f16, _mm512_add_ps(mp_half_load16(f16, res + j, k), mp_half_value16(f16, h)),
                                          k, &c2, st_sum != NULL);
        _mm256_mask_storeu_epi16(out + j, k, o);
    }
    if (st_dx) mp_counts512_add(st_dx, &c1, f16 ? 5 : 8, f16 ? 10 : 7);
    if (st_sum && res) mp_counts512_add(st_sum, &c2, f16 ? 5 : 8, f16 ? 10 : 7);
}

/* dwdb16's columns [0, NV 16) (the last vector's lanes up to `last`), every row in order */
static inline __attribute__((always_inline)) void dwdb_chunk(float *dw, float *db, const uint16_t *dy,
                                                             const uint16_t *x, const float *mean, const float *rstd,
                                                             size_t B, size_t C, size_t last, int f16, const int NV) {
    __m512 aw[8], ab[8];
    for (int v = 0; v < NV; v++) aw[v] = ab[v] = _mm512_setzero_ps();
    for (size_t i = 0; i < B; i++) {
        const __m512 vm = _mm512_set1_ps(mean[i]), vr = _mm512_set1_ps(rstd[i]);
        for (int v = 0; v < NV; v++) {
            const __mmask16 k = v + 1 == NV ? mp_tail16(last) : (__mmask16)0xffff;
            const __m512 g = mp_half_load16(f16, dy + i * C + (size_t)v * 16, k);
            if (dw) {
                const __m512 n =
                    _mm512_mul_ps(_mm512_sub_ps(mp_half_load16(f16, x + i * C + (size_t)v * 16, k), vm), vr);
                aw[v] = _mm512_add_ps(aw[v], _mm512_mul_ps(g, n));
            }
            if (db) ab[v] = _mm512_add_ps(ab[v], g);
        }
    }
    for (int v = 0; v < NV; v++) {
        const __mmask16 k = v + 1 == NV ? mp_tail16(last) : (__mmask16)0xffff;
        if (dw) _mm512_mask_storeu_ps(dw + v * 16, k, aw[v]);
        if (db) _mm512_mask_storeu_ps(db + v * 16, k, ab[v]);
    }
}

static void dwdb16(float *dw, float *db, const uint16_t *dy, const uint16_t *x, const float *mean, const float *rstd,
                   size_t B, size_t C, size_t m, int f16) {
    for (size_t c0 = 0; c0 < m; c0 += 128) {
        const size_t cn = m - c0 < 128 ? m - c0 : 128, last = cn - (cn - 1) / 16 * 16;
        float *w0 = dw ? dw + c0 : NULL, *b0 = db ? db + c0 : NULL;
        switch ((cn + 15) / 16) { /* the accumulators in registers: a constant count */
        case 1: dwdb_chunk(w0, b0, dy + c0, x + c0, mean, rstd, B, C, last, f16, 1); break;
        case 2: dwdb_chunk(w0, b0, dy + c0, x + c0, mean, rstd, B, C, last, f16, 2); break;
        case 3: dwdb_chunk(w0, b0, dy + c0, x + c0, mean, rstd, B, C, last, f16, 3); break;
        case 4: dwdb_chunk(w0, b0, dy + c0, x + c0, mean, rstd, B, C, last, f16, 4); break;
        case 5: dwdb_chunk(w0, b0, dy + c0, x + c0, mean, rstd, B, C, last, f16, 5); break;
        case 6: dwdb_chunk(w0, b0, dy + c0, x + c0, mean, rstd, B, C, last, f16, 6); break;
        case 7: dwdb_chunk(w0, b0, dy + c0, x + c0, mean, rstd, B, C, last, f16, 7); break;
        default: dwdb_chunk(w0, b0, dy + c0, x + c0, mean, rstd, B, C, last, f16, 8); break;
        }
    }
}

const mp_layernorm_kernels mp_layernorm_avx512 = {.fwd16 = fwd16, .dx16 = dx16, .dwdb16 = dwdb16};
