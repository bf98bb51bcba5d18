/* mixprec/underflow.h - what a set of values (gradients) loses in a number
 * format at several loss scales: the computation behind `mixprec underflow`,
 * `mixprec explore` and `mixprec tour`, and the Python package's
 * mixprec.underflow() and mixprec.explore().
 *
 * The values are taken as magnitudes: |x| of every finite element (NaN and
 * infinities are dropped, as they carry no magnitude to lose). Every count
 * comes from mp_convert's statistics on the values multiplied by the scale in
 * fp32, so the figures are the ones a store into the format gives.
 */
#ifndef MIXPREC_UNDERFLOW_H
#define MIXPREC_UNDERFLOW_H

#include <stddef.h>
#include <stdint.h>

#include "format.h"
#include "mx.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MP_UNDERFLOW_MAX_SCALES 32

/* What storing n magnitudes times one scale in a format does to them. */
typedef struct mp_scale_counts {
    double scale;
    uint64_t zero;      /* stored as 0: zeros already, and nonzero values that underflowed */
    uint64_t subnormal; /* stored as a subnormal of the format */
    uint64_t overflow;  /* stored as inf or NaN (or already beyond fp32's range after the scale) */
    uint64_t survive;   /* n - zero - overflow: stored as a nonzero finite value */
} mp_scale_counts;

/* Counts for n magnitudes g (fp32, >= 0, finite) multiplied by scale (in fp32)
 * and stored in t (fp16, bf16, e4m3 or e5m2; another t gives all counts 0).
 * Not e8m0 (it holds block scales) nor e2m1 (fp4 values are scaled per block
 * of 16 or 32, MX/NVFP4, not by one loss scale for a whole tensor). */
mp_scale_counts mp_underflow_count(const float *g, size_t n, mp_dtype t, double scale);

/* The power of two from 2^0 to 2^126 with the most survivors and no overflow
 * (ties: fewer subnormals; 1 when 2^0 already overflows). */
double mp_underflow_best_scale(const float *g, size_t n, mp_dtype t);

/* A set of values against one format: the figures of `mixprec underflow --json`. */
typedef struct mp_underflow {
    mp_dtype format;
    size_t n;             /* finite values kept */
    double median, p5;    /* of the magnitudes (linear interpolation between order statistics) */
    uint64_t zero_count;  /* stored as 0 at scale 1 */
    double best_scale;    /* mp_underflow_best_scale */
    mp_scale_counts best; /* the counts at best_scale */
    int nscales;
    mp_scale_counts scales[MP_UNDERFLOW_MAX_SCALES]; /* at each requested scale, in order */
} mp_underflow;

/* Analyzes n elements of x (type xt: fp32, fp16 or bf16) against format t
 * (fp16, bf16, e4m3 or e5m2; MP_EINVAL with the reason for e8m0 and e2m1) at
 * nscales scales (0 .. MP_UNDERFLOW_MAX_SCALES, each finite and > 0).
 * MP_EINVAL for a bad argument or no finite value, MP_ENOMEM. */
mp_status mp_underflow_analyze(const void *x, mp_dtype xt, size_t n, mp_dtype t, const double *scales, int nscales,
                               mp_underflow *out);

/* ---- block formats: what block scaling saves over one scale per tensor ----
 *
 * n fp32 values taken in order as one tensor: consecutive values form the
 * blocks (src[32b .. 32b+31] for MX, src[16b .. 16b+15] for NVFP4's 1x16
 * blocks), the last one padded with zeros (which change no block's amax and
 * are in no count). Each format is compared with its element format under one
 * scale for the whole tensor, amax the largest |x|:
 *
 *  format       block scaling (mx.h)                   one scale per tensor
 *  mxfp8-e4m3   mp_mx_quantize, E4M3, E8M0 per 32      mp_fp8_quantize, E4M3,
 *                                                      scale mp_fp8_scale = 448 / amax
 *  mxfp8-e5m2   mp_mx_quantize, E5M2, E8M0 per 32      the same with E5M2, 57344 / amax
 *  nvfp4        mp_nvfp4_quantize, 1x16, E4M3 per 16   E2M1 with NVFP4's global scale
 *               and the global scale from amax         alone: code = e2m1(fp32(x * t)),
 *                                                      t = fp32(6 / amax) (1 for amax 0,
 *                                                      FLT_MAX for an infinite quotient,
 *                                                      as mp_fp8_scale), rounded to
 *                                                      nearest even and saturated to +-6;
 *                                                      value = code * fp32(1 / t)
 *
 * Every code and value comes from mx.h's quantizers and dequantizers (NVFP4
 * rounding to nearest even, no stochastic rounding), and the per-tensor E2M1
 * from format.h's mp_f32_to_e2m1 and mp_e2m1_to_f32 (its counts from
 * mp_convert_count). The sign of a value changes no count or error. */
typedef enum mp_block_format {
    MP_BLOCK_MXFP8_E4M3 = 0, /* "mxfp8-e4m3" */
    MP_BLOCK_MXFP8_E5M2,     /* "mxfp8-e5m2" */
    MP_BLOCK_NVFP4           /* "nvfp4" */
} mp_block_format;

/* "mxfp8-e4m3", "mxfp8-e5m2" or "nvfp4" into *out; MP_EINVAL with a message
 * for any other name. */
mp_status mp_block_format_parse(const char *name, mp_block_format *out);

/* The name of f as mp_block_format_parse reads it; NULL for another value. */
const char *mp_block_format_name(mp_block_format f);

/* What one way of scaling did to the values. */
typedef struct mp_block_counts {
    uint64_t flushed;      /* nonzero inputs stored as +-0 (mp_quant_stats.flushed; per-tensor E2M1:
                              mp_convert_count's underflow) */
    uint64_t saturated;    /* inputs whose scaled value rounded past the element's max and was clamped
                              to it (mp_quant_stats.saturated; per-tensor E2M1: mp_convert_count's
                              overflow, |x * t| >= 7) */
    uint64_t nonzero;      /* nonzero inputs stored nonzero: nonzero_inputs - flushed */
    double mean_rel_error; /* the mean over the nonzero inputs of |q - x| / |x|, q the dequantized
                              value, in double (a flushed value counts 1); 0 with no nonzero input */
} mp_block_counts;

/* A tensor in a block format against one scale per tensor. */
typedef struct mp_block_compare {
    mp_block_format format;
    mp_mx_rule rule;         /* MX's scale rule; MP_MX_FLOOR for nvfp4, which has none */
    mp_dtype elem;           /* the element format: MP_E4M3, MP_E5M2 or MP_E2M1 */
    size_t block;            /* values per block scale: 32 (MX) or 16 (NVFP4) */
    size_t n;                /* values compared */
    uint64_t nonzero_inputs; /* of them nonzero */
    float amax;              /* the largest |x| */
    float tensor_scale;      /* the per-tensor scale: 448 / amax, 57344 / amax or 6 / amax in fp32 */
    mp_block_counts block_scaling, per_tensor;
} mp_block_compare;

/* Quantizes the n values of x (fp32, every one finite) in format f (MX with
 * rule) and with one scale per tensor, dequantizes both and counts into *out
 * (overwritten). The values are read in chunks of whole blocks: memory use
 * does not grow with n. MP_EINVAL (message in mp_last_error()) for out NULL,
 * x NULL, n == 0, an infinity or NaN in x, another f, or (MX) another rule;
 * MP_ENOMEM. */
mp_status mp_block_compare_values(const float *x, size_t n, mp_block_format f, mp_mx_rule rule, mp_block_compare *out);

/* Adds the n elements of x (fp32, fp16 or bf16) to a histogram of
 * floor(log2 |x|), read from the exponent bits (subnormals included): bins[b]
 * counts the nonzero finite values whose exponent is lo + b, the ends clamped
 * (bin 0 takes every smaller one, bin nbins - 1 every larger one); *zeros
 * counts the zeros. Infinities and NaNs are not counted. Adds to bins and
 * *zeros: zero them first for one tensor's histogram. MP_EINVAL for a bad
 * argument. */
mp_status mp_log2_histogram(const void *x, mp_dtype xt, size_t n, int lo, int nbins, uint64_t *bins, uint64_t *zeros);

/* Writes the explorer page to path (atomically: a temporary file, then a
 * rename): a self-contained HTML page with the histogram of log2 of the
 * magnitudes of x (n elements of type xt: fp32, fp16 or bf16), a loss-scale
 * slider from 2^0 to 2^24 and a format selector (fp16, bf16, e5m2, e4m3), with
 * every count for every slider position and format computed now
 * (mp_underflow_count). description (HTML-escaped) heads the page, e.g.
 * "200000 gradient magnitudes from g.npy". MP_EINVAL for no finite value,
 * MP_EIO when the file cannot be written or another process holds its lock
 * (mp_write_file_atomic). Also MP_EINVAL + message for no
 * path, a NULL x with n > 0 or another xt; MP_ENOMEM. */
mp_status mp_explore_write(const char *path, const void *x, mp_dtype xt, size_t n, const char *description);

#ifdef __cplusplus
}
#endif
#endif
