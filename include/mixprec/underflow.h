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
 * and stored in t (fp16, bf16, e4m3 or e5m2). */
mp_scale_counts mp_underflow_count(const float *g, size_t n, mp_dtype t, double scale);

/* The power of two from 2^0 to 2^126 with the most survivors and no overflow
 * (ties: fewer subnormals; 1 when 2^0 already overflows). */
double mp_underflow_best_scale(const float *g, size_t n, mp_dtype t);

/* A set of values against one format: the figures of `mixprec underflow --json`. */
typedef struct mp_underflow {
    mp_dtype format;
    size_t n;                  /* finite values kept */
    double median, p5;         /* of the magnitudes (linear interpolation between order statistics) */
    uint64_t zero_count;       /* stored as 0 at scale 1 */
    double best_scale;         /* mp_underflow_best_scale */
    mp_scale_counts best;      /* the counts at best_scale */
    int nscales;
    mp_scale_counts scales[MP_UNDERFLOW_MAX_SCALES]; /* at each requested scale, in order */
} mp_underflow;

/* Analyzes n elements of x (type xt: fp32, fp16 or bf16) against format t
 * (fp16, bf16, e4m3 or e5m2) at nscales scales (0 .. MP_UNDERFLOW_MAX_SCALES,
 * each finite and > 0). MP_EINVAL for a bad argument or no finite value,
 * MP_ENOMEM. */
mp_status mp_underflow_analyze(const void *x, mp_dtype xt, size_t n, mp_dtype t, const double *scales, int nscales,
                               mp_underflow *out);

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
 * MP_EIO when the file cannot be written. */
mp_status mp_explore_write(const char *path, const void *x, mp_dtype xt, size_t n, const char *description);

#ifdef __cplusplus
}
#endif
#endif
