/* softmax_kernels.h - e^x on fp32 and the softmax rows' loops built on it,
 * written once in plain C with fmaf, + - *, integer bit operations and
 * selects only (sk_max's lanes in one vector of GCC's and clang's vector
 * extension, which every build lowers to its own registers): no libm call
 * but fmaf (correctly rounded everywhere), no contraction (the library
 * builds with -ffp-contract=off), no reassociation.
 * gcc vectorizes the loops at -O3 -fno-trapping-math, and every build gives
 * the same bits: src/cpu/softmax_scalar.c (baseline x86-64 or any other CPU;
 * there fmaf is a libm call, a hardware FMA through glibc's ifunc where the
 * CPU has one: the portable path is correct, not fast), softmax_avx2.c (8
 * floats a register) and softmax_avx512.c (16). Included by those three
 * files only: it defines static functions and MP_SOFTMAX_KERNELS, an
 * initializer of mp_softmax_kernels (internal.h).
 *
 * sk_exp(x), as SLEEF's expf_u10 and oneDNN's exp are built:
 *   x = k ln2 + r, k = round(x / ln2) (the 1.5 2^23 shifter), r by
 *     Cody-Waite with fmaf: ln2 split into float(ln2) and the next 24 bits,
 *     x - k float(ln2) exact (Sterbenz: |r| <= ln2/2, k <= 150), one rounding
 *     in r - k ln2_lo; |r| <= ln2/2 (+ an ulp);
 *   e^r = 1 + r (1 + r (1/2 + r (c3 + ... + r c7))), Horner in fmaf: a
 *     degree-7 minimax polynomial (SLEEF's coefficients for expf_u10), the
 *     last fmaf adds r p to 1 with one rounding;
 *   2^k put into the exponent bits in two halves, (p 2^(k/2)) 2^(k - k/2):
 *     the first product exact, the second rounds once, so subnormal results
 *     are rounded once and 2^128 p overflows to +inf where it should.
 * x is clamped to [-104, 89] first (e^-104 < 2^-150 rounds to 0, e^89 to
 * +inf): -inf -> +0, +inf -> +inf, x < -103.972 -> +0 (e^x below half the
 * smallest subnormal; e^x at and above it rounds to 2^-149 as it should),
 * x > 88.7228 -> +inf, NaN -> the same NaN quieted (x + x), +-0 -> 1.
 *
 * Accuracy, measured against libm's fp64 exp over EVERY fp32 input (2^32,
 * the subnormals included): at most 0.874 ulp from the exact value (worst
 * at x = -5.89 in [-104, 0], 0.873 at x = 59.3 above 0); so never more than
 * 1 ulp from the correctly rounded result (0.47% of the inputs in [-104, 0]
 * are 1 ulp off it, none more). tests/test_ops.c checks every input in
 * [-104, 0] with --long (make test-long), a sample of them and of the rest of
 * the range in the plain run, the special values and limits, and each path's
 * kernels against the portable one bit for bit.
 *
 * The rows' loops work in SK_LANES independent lanes (element j goes to lane
 * j % SK_LANES; a short tail is padded with values that change no lane), and
 * the lanes' maxima and sums are combined by a fixed tree: the same order in
 * every build, and per row, so the results depend on neither the CPU path
 * nor the thread count. */
#ifndef MIXPREC_SOFTMAX_KERNELS_H
#define MIXPREC_SOFTMAX_KERNELS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__)
#define SK_INLINE static inline __attribute__((always_inline))
#else
#define SK_INLINE static inline
#endif

#define SK_LANES 16

/* e^x on fp32, <= 0.874 ulp from exact over all inputs (above) */
SK_INLINE float sk_exp(float x) {
    const float shifter = 0x1.8p23f;      /* adding it rounds to an integer, kept in the low bits */
    float xc = x > -104.0f ? x : -104.0f; /* NaN -> -104: the arithmetic never sees it */
    xc = xc < 89.0f ? xc : 89.0f;
    const float kd = fmaf(xc, 0x1.715476p0f, shifter), kf = kd - shifter;
    const float r = fmaf(kf, 0x1.05c61p-29f, fmaf(kf, -0x1.62e43p-1f, xc)); /* x - k (ln2_hi + ln2_lo) */
    float p = 0x1.a057b4p-13f;                                              /* 0.000198527617612853646278381 */
    p = fmaf(p, r, 0x1.6d2d92p-10f);                                        /* 0.00139304355252534151077271 */
    p = fmaf(p, r, 0x1.11114cp-7f);                                         /* 0.00833336077630519866943359 */
    p = fmaf(p, r, 0x1.5554f4p-5f);                                         /* 0.0416664853692054748535156 */
    p = fmaf(p, r, 0x1.555556p-3f);                                         /* 0.166666671633720397949219 */
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    uint32_t kb;
    memcpy(&kb, &kd, sizeof kb);
    const int32_t k = (int32_t)(kb - 0x4b400000u), k1 = k / 2, k2 = k - k1; /* k in [-150, 128] */
    const uint32_t b1 = (uint32_t)(k1 + 127) << 23, b2 = (uint32_t)(k2 + 127) << 23;
    float s1, s2;
    memcpy(&s1, &b1, sizeof s1);
    memcpy(&s2, &b2, sizeof s2);
    const float y = (p * s1) * s2;
    return x != x ? x + x : y;
}

/* y[i] = e^x[i] (y may be x) */
static void sk_exp_n(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = sk_exp(x[i]);
}

/* The lanes' results combined by halves: lane l takes lane l + w, w = 8, 4, 2, 1. */
SK_INLINE float sk_tree_max(float *m) {
    for (int w = SK_LANES / 2; w > 0; w /= 2)
        for (int l = 0; l < w; l++) m[l] = m[l + w] > m[l] ? m[l + w] : m[l];
    return m[0];
}
SK_INLINE float sk_tree_sum(float *s) {
    for (int w = SK_LANES / 2; w > 0; w /= 2)
        for (int l = 0; l < w; l++) s[l] = s[l] + s[l + w];
    return s[0];
}

/* max over r[0, n), NaNs skipped (as r > m ? r : m does); -inf for n = 0 or a
 * row of NaNs and -infs. A row's max is the same value in any order (a row
 * with both zeros may give either sign: e^(x - max) does not change). */
static float sk_max(const float *r, size_t n) {
    /* the lanes as one vector (GCC's and clang's vector extension): gcc does not vectorize this select
     * over an array of lanes, and the scalar loop took 5% of the attention's time on the AMX Xeon */
    typedef float sk_vf __attribute__((vector_size(SK_LANES * 4)));
    typedef int32_t sk_vi __attribute__((vector_size(SK_LANES * 4)));
    sk_vf m, t;
    for (int l = 0; l < SK_LANES; l++) m[l] = -INFINITY;
    size_t j = 0;
    for (; j + SK_LANES <= n; j += SK_LANES) {
        memcpy(&t, r + j, sizeof t);
        const sk_vi gt = t > m; /* lanes of -1 where r > m: false for a NaN r */
        m = (sk_vf)((gt & (sk_vi)t) | (~gt & (sk_vi)m));
    }
    for (int l = 0; l < SK_LANES; l++) t[l] = j + l < n ? r[j + l] : -INFINITY;
    const sk_vi gt = t > m;
    m = (sk_vf)((gt & (sk_vi)t) | (~gt & (sk_vi)m));
    float a[SK_LANES];
    memcpy(a, &m, sizeof a);
    return sk_tree_max(a);
}

/* sum of e^(r[j] - mx) over r[0, n) in lanes; with store, r[j] = e^(r[j] - mx)
 * too. The tail block is padded with -inf: e^-inf = +0 leaves a lane's sum
 * as it is. */
SK_INLINE float sk_exp_sum_body(float *r, size_t n, float mx, int store) {
    float s[SK_LANES], t[SK_LANES];
    for (int l = 0; l < SK_LANES; l++) s[l] = 0.0f;
    size_t j = 0;
    for (; j + SK_LANES <= n; j += SK_LANES)
        for (int l = 0; l < SK_LANES; l++) {
            const float e = sk_exp(r[j + l] - mx);
            if (store) r[j + l] = e;
            s[l] += e;
        }
    if (j < n) {
        for (int l = 0; l < SK_LANES; l++) t[l] = j + l < n ? r[j + l] : -INFINITY;
        for (int l = 0; l < SK_LANES; l++) {
            t[l] = sk_exp(t[l] - mx);
            s[l] += t[l];
        }
        if (store) memcpy(r + j, t, (n - j) * sizeof *r);
    }
    return sk_tree_sum(s);
}
static float sk_exp_sum(float *r, size_t n, float mx) { return sk_exp_sum_body(r, n, mx, 0); }
static float sk_exp_sum_store(float *r, size_t n, float mx) { return sk_exp_sum_body(r, n, mx, 1); }

/* r[j] = e^(r[j] - mx) k: sk_exp_sum_store's values times k */
static void sk_exp_scale(float *r, size_t n, float mx, float k) {
    for (size_t j = 0; j < n; j++) r[j] = sk_exp(r[j] - mx) * k;
}

/* g[j] -= e^y[j] d (log_softmax's backward) */
static void sk_exp_sub_mul(float *restrict g, const float *restrict y, size_t n, float d) {
    for (size_t j = 0; j < n; j++) g[j] -= sk_exp(y[j]) * d;
}

#define MP_SOFTMAX_KERNELS                                                                        \
    {                                                                                             \
        .exp = sk_exp_n, .max = sk_max, .exp_sum = sk_exp_sum, .exp_sum_store = sk_exp_sum_store, \
        .exp_scale = sk_exp_scale, .exp_sub_mul = sk_exp_sub_mul                                  \
    }

#endif
