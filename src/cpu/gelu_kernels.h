/* gelu_kernels.h - GELU, tanh and erf forms, and their derivatives on fp32
 * arrays, computed in fp64 with + - * / and selects only: no libm call, no
 * fused multiply-add (the library builds with -ffp-contract=off), no
 * reassociation. gcc vectorizes these loops at -O3 -fno-trapping-math (with
 * trapping math it keeps the selects as branches: a conversion or subtraction
 * could raise a flag; no value changes), and every build of them gives the
 * same bits: src/cpu/gelu_scalar.c (baseline x86-64 or any other CPU: 2
 * doubles per SSE2 register, the portable path), src/cpu/gelu_avx2.c (4 per
 * register) and src/cpu/gelu_avx512.c (8); src/gelu_table.c tabulates them
 * for every 16-bit input. Included by those four files only: it defines
 * static functions and MP_GELU_KERNELS, an initializer of mp_gelu_kernels
 * (internal.h).
 *
 * Accuracy: every result is the fp64 value rounded once to fp32, and that
 * fp64 value is within ~1e-15 (relative) of the exact function of the fp32
 * input, so the fp32 results are within 0.5 ulp of exact plus that error.
 * Measured against long double over every fp32 |x| <= 20 (2.2e9 values, all
 * four functions, derivatives with dy = 1): at most 0.500000 ulp, i.e. the
 * correctly rounded result wherever the exact value is not within ~1e-6 ulp
 * of a tie; tests/test_ops.c checks a sweep, the derivatives' zero and the
 * special values against 2 ulps, and the builds against each other. The
 * pieces:
 *   e^a, a <= 0: a = k ln2 + r (Cody-Waite, ln2 split as fdlibm's, exact
 *     for |k| < 2^11), e^r by its [6/6] Pade approximant on |r| <= ln2/2
 *     (3.3e-16 relative with its fp64 evaluation), 2^k put into the exponent
 *     bits, returned as numerator and denominator: the caller's one division
 *     serves both;
 *   tanh form: 0.5 (1 + tanh(u)) = sigmoid(2u) = 1 / (1 + e^-2u), with
 *     t = e^-|2u| so that neither sigmoid(2u) nor 1 - sigmoid(2u) cancels;
 *   erf form: Phi(-|x|) = 0.5 e^(-x^2/2) erfcx(|x| / sqrt 2) with
 *     erfcx(z) = e^(z^2) erfc(z) by a degree-19 polynomial in
 *     w = (z - 3) / (z + 3) (Chebyshev interpolant on z in [0, 14.15],
 *     5e-16 relative for z < 2, 3.4e-15 at the far end); x^2 / 2 is exact in
 *     fp64 for fp32 x.
 * Inputs are clamped to [-20, 20] where the value or derivative is already
 * final: x > 20 gives y = x and a derivative of exactly 1; x < -20 gives y = -0
 * and a derivative below 2e-86 in magnitude (-0 times dy in fp32 for any
 * finite dy). So +inf -> +inf (derivative 1), -inf -> -0 (derivative -0 times
 * dy), NaN x -> x (quieted; any dy), +-0 -> +-0 (derivative 0.5); a NaN dy
 * with a non-NaN x comes out as itself (quieted). The backward multiplies dy by
 * the derivative in fp64 and rounds once, so dy * (a tiny derivative) does not
 * underflow early. */
#ifndef MIXPREC_GELU_KERNELS_H
#define MIXPREC_GELU_KERNELS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__)
#define GK_INLINE static inline __attribute__((always_inline))
#define GK_KERNEL static __attribute__((unused)) /* gelu_table.c uses the pieces, not the kernels */
#else
#define GK_INLINE static inline
#define GK_KERNEL static
#endif

#define GK_LIM 20.0
#define GK_2K 1.5957691216057308    /* 2 sqrt(2/pi) */
#define GK_2KC 0.071354816272600249 /* 2 sqrt(2/pi) 0.044715 */
#define GK_6KC 0.21406444881780073  /* 6 sqrt(2/pi) 0.044715 */
#define GK_INV_SQRT_2PI 0.3989422804014327
#define GK_SQRT1_2 0.70710678118654757

/* e^a = *num / *den for a in [-700, 0] (NaN -> NaN): a = k ln2 + r, e^r by
 * its [6/6] Pade approximant (E(r^2) + r O(r^2)) / (E(r^2) - r O(r^2)), whose
 * integer coefficients are exact in fp64 (3.3e-16 relative on |r| <= ln2/2
 * with its fp64 evaluation), 2^k put into the exponent bits of a factor of
 * num. The caller divides, once for the whole GELU. */
GK_INLINE void gk_exp_nd(double a, double *num, double *den) {
    const double shifter = 0x1.8p52; /* adding it rounds to an integer, kept in the low bits */
    const double kd = a * 0x1.71547652b82fep0 + shifter, kf = kd - shifter;
    const double r = (a - kf * 0x1.62e42feep-1) - kf * 1.9082149292705877e-10, r2 = r * r;
    const double ev = ((r2 + 840.0) * r2 + 75600.0) * r2 + 665280.0;
    const double od = ((42.0 * r2 + 10080.0) * r2 + 332640.0) * r;
    uint64_t kb;
    memcpy(&kb, &kd, sizeof kb);
    const uint64_t sb = (kb - 0x4338000000000000ull + 1023u) << 52; /* 2^k */
    double s;
    memcpy(&s, &sb, sizeof s);
    *num = (ev + od) * s, *den = ev - od;
}

/* Polynomials by Estrin's scheme (pairs, then pairs of pairs with w^2, w^4,
 * ...): Horner's one long chain of dependent multiply-adds would leave the
 * loop waiting on latency. */

/* erfcx(z) = e^(z^2) erfc(z) for z in [0, 14.15], from w = (z - 3) / (z + 3). */
GK_INLINE double gk_erfcx(double z) {
    const double w = (z - 3.0) / (z + 3.0);
    const double w2 = w * w, w4 = w2 * w2, w8 = w4 * w4, w16 = w8 * w8;
    const double p0 = 0.17900115118138996 - 0.32623356004303683 * w;
    const double p1 = 0.24560380171233478 - 0.15011593650080951 * w;
    const double p2 = 0.071665837197695662 - 0.024392499317986423 * w;
    const double p3 = 0.0042691363401910426 + 0.00070774643581761635 * w;
    const double p4 = -0.00059706203904523665 + 4.5255248152228102e-05 * w;
    const double p5 = 6.4057143956182546e-05 - 1.2859785015470529e-05 * w;
    const double p6 = -7.9801660227420136e-06 + 2.1161814024069818e-06 * w;
    const double p7 = 1.2556101405072688e-06 - 2.8348551856265349e-07 * w;
    const double p8 = -2.3376882151827844e-07 + 1.429320912486066e-08 * w;
    const double p9 = 3.7889082994665796e-08 + 8.0746870667055476e-09 * w;
    const double q0 = p0 + p1 * w2, q1 = p2 + p3 * w2, q2 = p4 + p5 * w2, q3 = p6 + p7 * w2, q4 = p8 + p9 * w2;
    const double s0 = q0 + q1 * w4, s1 = q2 + q3 * w4;
    return (s0 + s1 * w8) + q4 * w16;
}

/* x clamped to [-lim, lim], NaN to -lim: the arithmetic never sees a NaN, and
 * a NaN x is passed through at the end by a select (gk_nan), so its payload
 * cannot depend on which operand of an operation a compiler puts first (x86
 * returns the first of two NaNs; fabs and negation change signs). The bound is
 * read at run time (once per call): with a constant, gcc evaluates the whole
 * function at the bound at compile time and blends those constants in after
 * computing on the unclamped x, which costs more than the clamp. */
static volatile double gk_lim = GK_LIM;
GK_INLINE double gk_lo(double x, double lim) { return x >= -lim ? x : -lim; }
GK_INLINE double gk_hi(double x, double lim) { return x <= lim ? x : lim; }
/* v, or x itself when x is NaN */
GK_INLINE float gk_nan(double x, double v) { return (float)(x != x ? x : v); }

/* Phi(x) from q = Phi(-|x|) */
GK_INLINE double gk_phi_from_tail(double xc, double q) { return xc > 0.0 ? 1.0 - q : q; }

/* y[i] = x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) / 2, in place:
 * x sigmoid(2u) with t = e^-|2u| = n / d, sigmoid(2u) = d / (d + n) for
 * u >= 0, n / (d + n) for u < 0 (x > lim: y = x) */
GK_KERNEL void gk_tanh_fwd(float *y, size_t n) {
    const double lim = gk_lim;
    for (size_t i = 0; i < n; i++) {
        const double x = y[i], xl = gk_lo(x, lim), xc = gk_hi(xl, lim);
        const double e = (GK_2K + GK_2KC * (xc * xc)) * xc; /* 2u */
        double tn, td;
        gk_exp_nd(-fabs(e), &tn, &td);
        y[i] = gk_nan(x, xl * ((e < 0.0 ? tn : td) / (td + tn)));
    }
}

/* d/dx of the above at the clamped xc, in fp64: s + x s (1 - s) 2u', s = sigmoid(2u) */
GK_INLINE double gk_tanh_d(double xc) {
    const double x2 = xc * xc;
    const double e = (GK_2K + GK_2KC * x2) * xc, de = GK_2K + GK_6KC * x2;
    double tn, td;
    gk_exp_nd(-fabs(e), &tn, &td);
    const double r = 1.0 / (td + tn);
    const double s = (e < 0.0 ? tn : td) * r, sc = (e < 0.0 ? td : tn) * r; /* s, 1 - s */
    return s * (1.0 + xc * sc * de);
}

/* g[i] *= gk_tanh_d(x[i]), the product in fp64 rounded once */
GK_KERNEL void gk_tanh_bwd(float *restrict g, const float *restrict x, size_t n) {
    const double lim = gk_lim;
    for (size_t i = 0; i < n; i++) {
        const double xi = x[i];
        g[i] = gk_nan(xi, (double)g[i] * gk_tanh_d(gk_hi(gk_lo(xi, lim), lim)));
    }
}

/* Phi(-|x|) = erfc(|x| / sqrt 2) / 2 and e^(-x^2/2), for |x| <= 20 */
GK_INLINE double gk_phi_tail(double xc, double *e) {
    const double a = fabs(xc);
    double en, ed;
    gk_exp_nd(-0.5 * (a * a), &en, &ed);
    *e = en / ed;
    return 0.5 * *e * gk_erfcx(a * GK_SQRT1_2);
}

/* y[i] = x Phi(x), in place */
GK_KERNEL void gk_erf_fwd(float *y, size_t n) {
    const double lim = gk_lim;
    for (size_t i = 0; i < n; i++) {
        const double x = y[i], xl = gk_lo(x, lim), xc = gk_hi(xl, lim);
        double e;
        const double q = gk_phi_tail(xc, &e);
        y[i] = gk_nan(x, xl * gk_phi_from_tail(xc, q));
    }
}

/* Phi(x) + x phi(x) at the clamped xc, in fp64 */
GK_INLINE double gk_erf_d(double xc) {
    double e;
    const double q = gk_phi_tail(xc, &e);
    return gk_phi_from_tail(xc, q) + xc * (GK_INV_SQRT_2PI * e);
}

/* g[i] *= gk_erf_d(x[i]), the product in fp64 rounded once */
GK_KERNEL void gk_erf_bwd(float *restrict g, const float *restrict x, size_t n) {
    const double lim = gk_lim;
    for (size_t i = 0; i < n; i++) {
        const double xi = x[i];
        g[i] = gk_nan(xi, (double)g[i] * gk_erf_d(gk_hi(gk_lo(xi, lim), lim)));
    }
}

#define MP_GELU_KERNELS \
    { .tanh_fwd = gk_tanh_fwd, .tanh_bwd = gk_tanh_bwd, .erf_fwd = gk_erf_fwd, .erf_bwd = gk_erf_bwd }

#endif
