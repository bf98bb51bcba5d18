/* fp8_scale.c - per-tensor fp8 scaling (mx.h): the quantizer and dequantizer,
 * the scale from an amax, and the delayed-scaling amax history, with the
 * numerics of NVIDIA Transformer Engine 2.x.
 *
 * Read from NVIDIA/TransformerEngine 2.20.0.dev0 (build_tools/VERSION.txt,
 * main at d0067d0da6cb, 2026-08-22). The rules below are the same in the
 * v2.18 release (27486e03cfc1); delayed_scaling.cu's kernels have not changed
 * them since v2.0, and compute_scale_from_amax (current scaling, new in
 * v2.1) gives the same scales since then (v2.3 moved its NaN test). Files:
 *   transformer_engine/common/recipe/recipe_common.cuh  compute_scale_from_amax
 *   transformer_engine/common/recipe/current_scaling.cu nvte_compute_amax,
 *                                                        nvte_compute_scale_from_amax
 *   transformer_engine/common/recipe/delayed_scaling.cu kernel, kernel_bulk,
 *                                                        scaled_max
 *   transformer_engine/common/recipe/__init__.py        DelayedScaling, Float8CurrentScaling
 *   transformer_engine/pytorch/quantization.py          reduce_and_update_fp8_tensors,
 *                                                        _amax_and_scale_update (unfused)
 *   transformer_engine/common/util/vectorized_pointwise.h, cast/fp8/quantize_fp8.cuh,
 *   cast/fp8/dequantize_fp8.cuh, utils.cuh (reciprocal = __frcp_rn)
 *   tests/pytorch/references/quantize_scale_calc.py, ref_per_tensor_cs.py
 *   and CUDA's cuda_fp8.hpp (__nv_fp8_e4m3/e5m2(float) = __nv_cvt_float_to_fp8
 *   with __NV_SATFINITE = cvt.rn.satfinite).
 *
 * The rules, each in fp32 as TE evaluates it:
 *   quantize    code = satfinite_rn(x * scale): one fp32 multiply, then nearest
 *               even in the fp8 format; finite values past the max and +-inf
 *               give +-max, NaN gives NaN.
 *   dequantize  value = code * scale_inv, scale_inv = fp32(1 / scale)
 *               (__frcp_rn, correctly rounded): two roundings, not code / scale.
 *   scale       scaled_max = fmt_max * powf(2, -margin) (host fp32, std::pow),
 *               then scale = scaled_max / amax (one correctly rounded fp32
 *               division, as __fdiv_rn) when amax is finite and > 0; otherwise
 *               the previous scale (delayed) or 1 (current scaling); an
 *               infinite result becomes FLT_MAX.
 *   history     TE's fused update (kernel_bulk, PyTorch's default): a step
 *               whose amax is 0 changes nothing; otherwise the amax joins the
 *               window of the len most recent ones and the scale comes from
 *               their max (fmaxf: NaN skipped) or from the new amax itself.
 *
 * FTZ/DAZ change no bit: the roundings to fp8 are integer-only (format.h's
 * rounding, on the bits), the scale and the reciprocal are formed exactly
 * in double and rounded by integer steps where an fp32 subnormal is involved,
 * and under DAZ the products of a subnormal input or scale are formed the
 * same way (FTZ only flushes products below 2^-126, which round to +-0 in
 * fp8 anyway).
 *
 * Speed: the element loops are plain C on bit patterns (the training
 * recipes quantize through recipe.c's fused kernels instead); large tensors are split over threads (integer counts and
 * a max: the same result for any thread count). There is one path, so nothing to keep equal: tests/test_fp8_scale.c
 * checks it against format.h's scalar conversions of fp32(x * scale).
 */
#include <float.h>
#include <math.h>

#include "internal.h"

#ifdef MP_X86
#include <xmmintrin.h>
#endif

/* Below this many elements one thread is faster than waking a second. */
#define PARALLEL_MIN ((size_t)1 << 18)
enum { CHUNK = 1024 }; /* elements of the stack buffers: stay in L1 */

/* ---- exact fp32 arithmetic whatever FTZ/DAZ say ---- */

/* x as a double, exactly: a subnormal is built from its integer significand,
 * so DAZ cannot read it as 0 (normal values, infinities and NaNs convert as
 * usual). */
static double f64_of(float x) {
    const uint32_t u = mp_f32_bits(x), a = u & 0x7fffffffu;
    if (a - 1u < 0x7fffffu) {
        const double d = (double)(int32_t)a * 0x1p-149;
        return u >> 31 ? -d : d;
    }
    return (double)x;
}

/* d (a normal double, a zero, an infinity or a NaN) rounded to fp32, nearest
 * even. Results below 2^-126 are rounded to a multiple of 2^-149 with exact
 * integer steps, so FTZ cannot flush an fp32 subnormal. */
static float f32_of(double d) {
    const double m = fabs(d);
    if (!(m < 0x1p-126)) return (float)d; /* normal, overflow, inf, NaN: no subnormal in or out */
    const double y = m * 0x1p149;         /* exact: a power of two, and y < 2^23 */
    const uint32_t t = (uint32_t)y;       /* truncation: exact */
    const double f = y - (double)t;       /* exact */
    const uint32_t k = t + (uint32_t)(f > 0.5 || (f == 0.5 && (t & 1u))); /* 2^23 is 2^-126: normal */
    return mp_bits_f32((signbit(d) ? 0x80000000u : 0u) | k);
}

/* fp32(a * b), as the IEEE multiply: the product of two fp32 significands
 * (48 bits) is exact in double, then one rounding. */
static float mul_rn(float a, float b) { return f32_of(f64_of(a) * f64_of(b)); }

/* fp32(a / b), correctly rounded as __fdiv_rn: the double quotient rounded to
 * fp32 is the fp32 quotient (53 >= 2 * 24 + 2: the double rounding is
 * innocuous for division). */
static float div_rn(float a, float b) { return f32_of(f64_of(a) / f64_of(b)); }

static int is_subnormal(float x) { return (mp_f32_bits(x) & 0x7fffffffu) - 1u < 0x7fffffu; }

int mp_inputs_flushed(void) {
#ifdef MP_X86
    return (_mm_getcsr() & 0x0040u) != 0;
#else
    return 1;
#endif
}

/* ---- the scale ---- */

static float fmt_max(mp_dtype fmt) { return fmt == MP_E4M3 ? 448.0f : 57344.0f; }

static int fp8_fmt(mp_dtype fmt) { return fmt == MP_E4M3 || fmt == MP_E5M2; }

/* TE's std::pow(2.f, -margin) in fp32: an integer margin's power of two
 * exactly from its bits (so FTZ cannot flush a subnormal one), another
 * margin through powf as TE's host code does. */
static float pow2_neg(float margin) {
    const float e = -margin;
    if (e == floorf(e) && fabsf(e) <= 1024.0f) {
        const int k = (int)e;
        if (k > 127) return INFINITY;
        if (k >= -126) return mp_bits_f32((uint32_t)(k + 127) << 23);
        return k >= -149 ? mp_bits_f32(1u << (k + 149)) : 0.0f;
    }
    return powf(2.0f, e);
}

float mp_fp8_scale(float amax, mp_dtype fmt, float margin, const float *prev) {
    if (!fp8_fmt(fmt)) {
        mp_error(MP_EINVAL, "mp_fp8_scale: format %d is not e4m3 or e5m2", (int)fmt);
        return NAN;
    }
    float scale;
    /* "isfinite(amax) && amax > 0" on the bits: DAZ cannot take a subnormal
     * amax for 0 (TE's GPU does not flush it) */
    if (mp_f32_bits(amax) - 1u < 0x7f7fffffu) {
        /* delayed_scaling.cu: scaled_max = fp8_dtype_max * std::pow(2.f, -margin)
         * in fp32 on the host, then scaled_max / amax on the device.
         * Current scaling (compute_scale_from_amax) has no margin: margin 0
         * gives its __fdiv_rn(max_fp8, amax). */
        const float smax = mul_rn(fmt_max(fmt), pow2_neg(margin));
        scale = div_rn(smax, amax);
    } else {
        scale = prev ? *prev : 1.0f; /* 0, negative, inf, NaN: nothing to scale by */
    }
    if ((mp_f32_bits(scale) & 0x7fffffffu) == 0x7f800000u) scale = FLT_MAX; /* isinf(scale) */
    return scale;
}

void mp_fp8_history_update(mp_fp8_history *h, mp_dtype fmt, float amax) {
    if (!h || !h->amax || h->len == 0) return;
    if (!fp8_fmt(fmt)) {
        mp_error(MP_EINVAL, "mp_fp8_history_update: format %d is not e4m3 or e5m2", (int)fmt);
        return;
    }
    /* kernel_bulk: "if (last_amax != 0.0f)" guards the roll, and the max of
     * nothing is 0, which keeps the scale: a zero amax is no step at all */
    if ((mp_f32_bits(amax) & 0x7fffffffu) == 0) return;
    if (h->pos >= h->len) h->pos %= h->len;
    h->amax[h->pos] = amax; /* the oldest of the window leaves */
    h->pos = h->pos + 1 == h->len ? 0 : h->pos + 1;
    float a = amax;
    if (!h->most_recent) {
        /* fmaxf from 0 over the window: NaN and negative entries never win;
         * on the bits, which order nonnegative floats (DAZ-proof) */
        uint32_t m = 0;
        for (size_t i = 0; i < h->len; i++) {
            const uint32_t u = mp_f32_bits(h->amax[i]);
            m = u <= 0x7f800000u && u > m ? u : m;
        }
        a = mp_bits_f32(m);
    }
    h->scale = mp_fp8_scale(a, fmt, h->margin, &h->scale);
}

/* ---- the quantizer ---- */

/* Thresholds of the subnormal codes: code k (value k * 2^-q) for |p| above
 * t[k-1]. Between k-1 and k the midpoint rounds to the even one: up when k
 * is even, so t[k-1] is just below the midpoint's bits; down when k is odd,
 * so the midpoint itself. E4M3: q = 9, codes 1..8 (8 is 2^-6, the smallest
 * normal); E5M2: q = 16, codes 1..4 (4 is 2^-14). Signed: SSE2 compares
 * int32 lanes, and magnitudes are below 2^31. */
static void sub_thresholds(int32_t *t, int kmax, int q) {
    for (int k = 1; k <= kmax; k++) t[k - 1] = (int32_t)mp_f32_bits(ldexpf((float)(2 * k - 1), -q - 1)) - 1 + (k & 1);
}

typedef struct {
    int32_t t[8]; /* subnormal thresholds (sub_thresholds) */
    float scale;
    int scale_sub; /* the scale is an fp32 subnormal: every product exactly */
} qparams;

/* What a share has counted so far. Per chunk (CHUNK elements) the counts
 * run in 32-bit lanes. */
typedef struct {
    uint64_t past, low, nonfinite, zero;
    int32_t amax; /* bits of the largest finite |x| */
} qcount;

/* p[i] = fp32(x[i] * scale), and the counts of the inputs: infinities and
 * NaNs, zeros, the largest finite magnitude (on the bits: DAZ cannot compare
 * subnormals as 0). The products are the hardware multiply, except where x
 * (or the scale) is subnormal and DAZ is on: there the multiply would read
 * it as 0, so those are formed exactly. (FTZ only flushes products below
 * 2^-126, which round to +-0 in fp8 anyway.) */
static void products(float *restrict p, const float *restrict x, size_t m, const qparams *q, const int daz, qcount *k) {
    const float s = q->scale;
    int32_t sub = 0, nf = 0, zero = 0, am = k->amax;
    for (size_t i = 0; i < m; i++) {
        const int32_t ax = (int32_t)mp_f32_bits(x[i]) & 0x7fffffff;
        p[i] = x[i] * s;
        sub |= (ax > 0) & (ax < 0x800000); /* a subnormal input */
        nf += ax >= 0x7f800000;
        zero += ax == 0;
        const int32_t af = ax < 0x7f800000 ? ax : 0;
        am = af > am ? af : am;
    }
    k->nonfinite += (uint32_t)nf, k->zero += (uint32_t)zero, k->amax = am;
    if (daz && (sub || q->scale_sub))
        for (size_t i = 0; i < m; i++)
            if (q->scale_sub || is_subnormal(x[i])) p[i] = mul_rn(x[i], q->scale);
}

/* The codes of the products p, sign included, in 32-bit lanes. Nearest even
 * on the bits, as format.h's narrowing: normal results (|p| at least the
 * format's smallest normal) round the fp32 mantissa at bit 23 - M and
 * rebias; subnormal ones count thresholds (sub_thresholds). A product past
 * `past` would round beyond the max (E4M3: above 464, as 464 ties down to
 * 448; E5M2: from 61440, which ties up): +-max, infinities included; NaN
 * stays NaN (E5M2 keeps the next payload bit, as format.h). Counts the
 * products past that point and those that round to +-0. */
static inline void codes32(int32_t *restrict v, const float *restrict p, size_t m, const int32_t *t, const int e5,
                           qcount *k) {
    const int32_t t0 = t[0], t1 = t[1], t2 = t[2], t3 = t[3], t4 = t[4], t5 = t[5], t6 = t[6], t7 = t[7];
    const int sh = e5 ? 21 : 20;                          /* 23 - M */
    const uint32_t half = (1u << (sh - 1)) - 1u;          /* the tie goes by the kept bit */
    const int32_t rebias = e5 ? 112 << 2 : 120 << 3;      /* (127 - bias) << M */
    const int32_t minnorm = e5 ? 0x38800000 : 0x3c800000; /* 2^-14, 2^-6 */
    const int32_t past = e5 ? 0x476fffff : 0x43e80000;    /* 61440 - ulp, 464 */
    const int32_t maxc = e5 ? 0x7b : 0x7e;
    int32_t npast = 0, nlow = 0;
    for (size_t i = 0; i < m; i++) {
        const uint32_t b = mp_f32_bits(p[i]);
        const int32_t u = (int32_t)b, a = u & 0x7fffffff;
        /* no signed overflow */
        const int32_t rn = (int32_t)(((b & 0x7fffffffu) + half + ((b >> sh) & 1u)) >> sh) - rebias;
        int32_t ks = (a > t0) + (a > t1) + (a > t2) + (a > t3);
        if (!e5) ks += (a > t4) + (a > t5) + (a > t6) + (a > t7);
        int32_t c = a < minnorm ? ks : rn;
        c = a > past ? maxc : c;
        c = a > 0x7f800000 ? (e5 ? 0x7e | ((a >> 21) & 1) : 0x7f) : c;
        v[i] = c | ((u >> 24) & 0x80);
        npast += a > past;
        nlow += a <= t0;
    }
    k->past += (uint32_t)npast, k->low += (uint32_t)nlow;
}

static void pack(uint8_t *restrict c, const int32_t *restrict v, size_t m) {
    for (size_t i = 0; i < m; i++) c[i] = (uint8_t)v[i];
}

typedef struct {
    uint8_t *codes;
    const float *src;
    mp_dtype fmt;
    qparams q;
    mp_quant_stats part[MP_MAX_THREADS];
} quant_job;

/* The counts from what the loops counted: a nonfinite input's product is
 * +-inf or NaN, past every threshold; a zero input's product is +-0, at or
 * below the first. So the saturated finite inputs are the products past the
 * max less the nonfinite inputs, and the flushed nonzero inputs the products
 * that round to 0 less the zero inputs. */
static void quant_share(void *ctx, size_t i0, size_t i1, int t) {
    quant_job *j = ctx; /* each share adds into its own slot */
    float p[CHUNK];
    int32_t v[CHUNK];
    qcount k = {0, 0, 0, 0, 0};
    const int daz = mp_inputs_flushed();
    for (size_t i = i0; i < i1; i += CHUNK) {
        const size_t m = i1 - i < CHUNK ? i1 - i : CHUNK;
        products(p, j->src + i, m, &j->q, daz, &k);
        if (j->fmt == MP_E4M3) codes32(v, p, m, j->q.t, 0, &k);
        else codes32(v, p, m, j->q.t, 1, &k);
        pack(j->codes + i, v, m);
    }
    mp_quant_stats *st = &j->part[t];
    st->n = i1 - i0;
    st->saturated = k.past - k.nonfinite;
    st->flushed = k.low - k.zero;
    st->nonfinite = k.nonfinite;
    st->amax = mp_bits_f32((uint32_t)k.amax);
}

/* [a, a + an) and [b, b + bn) share a byte */
static int overlap(const void *a, size_t an, const void *b, size_t bn) {
    const uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return x < y + bn && y < x + an;
}

/* fmt, then the scale (finite and > 0, on the bits: DAZ would compare a
 * subnormal scale as 0), then the buffers */
static mp_status check_args(const char *fn, mp_dtype fmt, float scale, const void *a, const void *b, size_t n,
                            size_t bsize) {
    if (!fp8_fmt(fmt)) return mp_error(MP_EINVAL, "%s: format %d is not e4m3 or e5m2", fn, (int)fmt);
    if (mp_f32_bits(scale) - 1u >= 0x7f7fffffu)
        return mp_error(MP_EINVAL, "%s: scale %g (finite and > 0)", fn, (double)scale);
    if (n == 0) return MP_OK;
    if (!a || !b) return mp_error(MP_EINVAL, "%s: NULL buffer for %zu elements", fn, n);
    if (n > SIZE_MAX / bsize) return mp_error(MP_EINVAL, "%s: %zu elements do not fit in memory", fn, n);
    if (overlap(a, n, b, n * bsize)) return mp_error(MP_EINVAL, "%s: the codes and the fp32 buffer overlap", fn);
    return MP_OK;
}

mp_status mp_fp8_quantize(uint8_t *codes, const float *src, size_t n, mp_dtype fmt, float scale, mp_quant_stats *st) {
    const mp_status s = check_args("mp_fp8_quantize", fmt, scale, codes, src, n, 4);
    if (s != MP_OK || n == 0) return s;
    quant_job j;
    memset(&j, 0, sizeof j);
    j.codes = codes, j.src = src, j.fmt = fmt;
    j.q.scale = scale, j.q.scale_sub = is_subnormal(scale);
    if (fmt == MP_E4M3) sub_thresholds(j.q.t, 8, 9);
    else sub_thresholds(j.q.t, 4, 16);
    const int shares = mp_parallel_for(n, PARALLEL_MIN, 64, quant_share, &j);
    if (st) {
        for (int t = 0; t < shares; t++) {
            st->n += j.part[t].n, st->saturated += j.part[t].saturated;
            st->flushed += j.part[t].flushed, st->nonfinite += j.part[t].nonfinite;
            mp_quant_amax(st, mp_f32_bits(j.part[t].amax));
        }
    }
    return MP_OK;
}

/* ---- the dequantizer: a table of the 256 values ---- */

typedef struct {
    float *dst;
    const uint8_t *codes;
    float table[256];
} dequant_job;

static void dequant_share(void *ctx, size_t i0, size_t i1, int t) {
    (void)t;
    const dequant_job *j = ctx;
    float *restrict d = j->dst;
    const uint8_t *restrict c = j->codes;
    for (size_t i = i0; i < i1; i++) d[i] = j->table[c[i]];
}

mp_status mp_fp8_dequantize(float *dst, const uint8_t *codes, size_t n, mp_dtype fmt, float scale) {
    const mp_status s = check_args("mp_fp8_dequantize", fmt, scale, codes, dst, n, 4);
    if (s != MP_OK || n == 0) return s;
    dequant_job j;
    j.dst = dst, j.codes = codes;
    /* TE: scale_inv = __frcp_rn(scale) once, then code * scale_inv per element */
    const float inv = div_rn(1.0f, scale);
    for (int c = 0; c < 256; c++) {
        const float v = fmt == MP_E4M3 ? mp_e4m3_to_f32((uint8_t)c) : mp_e5m2_to_f32((uint8_t)c);
        /* inf * inv is inf and NaN * inv that NaN (inv > 0) */
        j.table[c] = (mp_f32_bits(v) & 0x7fffffffu) >= 0x7f800000u ? v : mul_rn(v, inv);
    }
    mp_parallel_for(n, PARALLEL_MIN, 64, dequant_share, &j);
    return MP_OK;
}
