/* mixprec/ops.h - activations, softmax, cross-entropy, layer norm and column
 * sums, each a forward/backward pair. Inputs and outputs may be fp32, fp16 or
 * bf16; the arithmetic is fp32. Every store into a half buffer is the exact
 * round-to-nearest-even conversion and, when st is not NULL, is counted as
 * mp_convert counts (underflow, subnormal, overflow, NaN). Matrices are
 * row-major (B rows of C values). Output buffers may alias their input when the
 * two have the same format.
 *
 * Reductions (softmax max and sum, the log-sum-exp, layer-norm statistics
 * and backward sums, column sums) take acc, the format they round to:
 * MP_F32 runs them with fp32 accumulators, as above. MP_F16 or MP_BF16 runs
 * them as a naive loop in that format does (train.h's --reductions half):
 * left to right along the reduced dimension, each element-wise term computed
 * in fp32 from the values as stored and rounded once to acc, every partial
 * result (sum, difference from the max, exp, log, square root, quotient)
 * rounded to acc, so a partial sum can overflow to inf or absorb small terms.
 * The per-row statistics the ops keep (mean, rstd) are then acc values; a
 * column sum (bias and layer-norm parameter gradients) is the acc sum of its
 * rows, added to (or written into) the fp32 output once. Element-wise work
 * after a reduction stays fp32 and is rounded once when stored. */
#ifndef MIXPREC_OPS_H
#define MIXPREC_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "convert.h"
#include "format.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y = x + bias (bias broadcast over rows). MP_EINVAL + message for a format
 * other than fp32/fp16/bf16 or a NULL buffer (B, C > 0); MP_ENOMEM (y may then
 * be partly written). */
mp_status mp_bias_add(void *y, mp_dtype yt,       // (B, C)
                      const void *x, mp_dtype xt, // (B, C)
                      const float *bias,          // (C,)
                      size_t B, size_t C, mp_convert_stats *st);

/* out[j] (+)= sum over rows of x[b][j], summed in acc (above); accumulate
 * != 0 adds to out (bias gradients over several micro-batches). MP_EINVAL +
 * message for a format (xt, acc) other than fp32/fp16/bf16 or a NULL out or x
 * (C > 0, even with B = 0); MP_ENOMEM (out may then be partly summed). */
mp_status mp_colsum(float *out,                 // (C,)
                    const void *x, mp_dtype xt, // (B, C)
                    size_t B, size_t C, int accumulate, mp_dtype acc);

/* ReLU: y = max(x, 0); backward dx = dy where x > 0, else 0. MP_EINVAL +
 * message for a format other than fp32/fp16/bf16 or a NULL buffer with n > 0;
 * nothing else fails (the same for every element-wise op below). */
mp_status mp_relu_forward(void *y, mp_dtype yt, const void *x, mp_dtype xt, size_t n, mp_convert_stats *st);
mp_status mp_relu_backward(void *dx, mp_dtype dxt, const void *dy, mp_dtype dyt, const void *x, mp_dtype xt, size_t n,
                           mp_convert_stats *st);

/* GELU, tanh form (PyTorch approximate='tanh'):
 * y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); backward dx = dy times
 * its derivative.
 * Numerics: computed in fp64 from the fp32 x (and dy) and rounded once to
 * fp32, then stored into the output format (counts as above). 0.5 (1 + tanh(u))
 * is taken as 1 / (1 + e^-2u), with e^-|2u| by range reduction and a [6/6]
 * Pade approximant (3.3e-16 relative), so neither tail cancels: y and the
 * derivative are within 0.5 ulp plus ~1e-15 relative of the exact functions
 * (fp32 results; at most 0.500000 ulp over every fp32 |x| <= 20 against long
 * double), where the former fp32 tanhf arithmetic left large relative errors
 * for x < -4 and near the derivative's zero (x ~ -0.75).
 * Limits: y(+inf) = +inf, y(-inf) = -0, derivative 1 and -0; NaN gives NaN;
 * y(+-0) = +-0. The results are the same bits on every CPU path (scalar,
 * AVX2, AVX-512: one plain C source compiled for each, no fused multiply-add)
 * and every thread count. Statuses as ReLU's: MP_EINVAL + message for a
 * format other than fp32/fp16/bf16 or a NULL buffer with n > 0. */
mp_status mp_gelu_forward(void *y, mp_dtype yt, const void *x, mp_dtype xt, size_t n, mp_convert_stats *st);
mp_status mp_gelu_backward(void *dx, mp_dtype dxt, const void *dy, mp_dtype dyt, const void *x, mp_dtype xt, size_t n,
                           mp_convert_stats *st);

/* GELU, erf form (PyTorch approximate='none'): y = 0.5 x (1 + erf(x / sqrt 2));
 * backward its exact derivative 0.5 (1 + erf(x / sqrt 2)) + x exp(-x^2 / 2) / sqrt(2 pi).
 * Computed in fp64 as the tanh form is (same accuracy, limits, and bits on
 * every CPU path and thread count): Phi(-|x|) = 0.5 e^(-x^2/2) erfcx(|x| / sqrt 2),
 * erfcx by a degree-19 polynomial in (z - 3) / (z + 3) (~1e-15 relative),
 * which avoids the cancellation of 1 + erf for negative x; stores, counts
 * and statuses (MP_EINVAL for a bad format or a NULL buffer) as
 * mp_gelu_forward/backward. */
mp_status mp_gelu_erf_forward(void *y, mp_dtype yt, const void *x, mp_dtype xt, size_t n, mp_convert_stats *st);
mp_status mp_gelu_erf_backward(void *dx, mp_dtype dxt, const void *dy, mp_dtype dyt, const void *x, mp_dtype xt,
                               size_t n, mp_convert_stats *st);

/* Element-wise sum y = a + b, added in fp32 and rounded once into y's format
 * (a residual connection, or the two gradients of a residual stream). y may
 * alias a or b (same format). MP_EINVAL + message for a format other than
 * fp32/fp16/bf16 or a NULL buffer with n > 0; nothing else fails. */
mp_status mp_add(void *y, mp_dtype yt,       // (n,)
                 const void *a, mp_dtype at, // (n,)
                 const void *b, mp_dtype bt, // (n,)
                 size_t n, mp_convert_stats *st);

/* Row-wise softmax (log_softmax when log != 0), max-subtracted, sums in acc.
 * e^x is mixprec's own, not libm's expf (src/cpu/softmax_kernels.h): within
 * 0.874 ulp of exact over every fp32 input, 1 ulp at most from correctly
 * rounded, e^-inf = 0, the same bits on every CPU path. With acc MP_F32 a
 * row's max and sum run in 16 lanes (element j in lane j % 16) added by
 * halves at the end; a naive acc sums left to right as above. Rows run in
 * parallel (mp_set_threads), each computed as on one thread: the results
 * depend on neither the thread count nor the CPU path. MP_EINVAL + message for a
 * format (acc too) other than fp32/fp16/bf16 or a NULL y or x (B, C > 0);
 * MP_ENOMEM for a row's scratch (rows over ~4000 values; y may then be partly
 * written). */
mp_status mp_softmax_forward(void *y, mp_dtype yt, const void *x, mp_dtype xt, size_t B, size_t C, int log,
                             mp_dtype acc, mp_convert_stats *st);
/* Backward from the forward's output y: softmax dx = y (dy - sum(dy y));
 * log_softmax dx = dy - exp(y) sum(dy) (e^x as the forward's); the sums in acc (fp32: in 16 lanes, as the
 * forward's). Statuses as
 * mp_softmax_forward's (a NULL dx, y or dy; rows over ~2000 values for
 * MP_ENOMEM). */
mp_status mp_softmax_backward(void *dx, mp_dtype dxt, const void *y, mp_dtype yt, const void *dy, mp_dtype dyt,
                              size_t B, size_t C, int log, mp_dtype acc, mp_convert_stats *st);

/* Cross-entropy with integer labels, fused with the softmax backward:
 * *loss = mean over rows of -log softmax(logits)[label], and, when
 * dlogits is not NULL, dlogits = scale * (softmax(logits) - onehot(label)) / B,
 * i.e. the gradient of scale * loss: pass the loss scale S as scale.
 * Each row's log-sum-exp, its term lse - logit[label], and its softmax are
 * computed in acc; the mean over rows is fp32 (the loss a log reports).
 * Rows run in parallel; the per-row terms are summed in row order, so *loss
 * does not depend on the thread count. MP_EINVAL if a label is outside [0, C).
 * Also MP_EINVAL + message for a bad format (acc too), a NULL loss, logits or
 * labels, or B or C = 0; MP_ENOMEM. *loss is written only on MP_OK. */
mp_status mp_cross_entropy(float *loss, void *dlogits, mp_dtype dt, // dlogits (B, C) or NULL
                           const void *logits, mp_dtype lt,         // (B, C)
                           const int32_t *labels,                   // (B,)
                           size_t B, size_t C, float scale, mp_dtype acc, mp_convert_stats *st);

/* Layer norm over each row: y = (x - mean) * rstd * w + b with
 * rstd = 1 / sqrt(var + eps) (biased variance, two passes); mean and rstd
 * (per row, computed in acc) are kept for the backward. With acc MP_F32 the
 * row's sums (of x, then of (x - mean)^2) run in 16 lanes as the softmax's
 * (element j in lane j % 16, added by halves at the end); a naive acc sums
 * left to right. w, b may be NULL
 * (1 and 0). Rows run in parallel, each computed as on one thread
 * (thread-count independent). MP_EINVAL + message for a format (acc too)
 * other than fp32/fp16/bf16, a NULL y, x, mean or rstd, or C = 0 with B > 0;
 * MP_ENOMEM (outputs may then be partly written). */
mp_status mp_layernorm_forward(void *y, mp_dtype yt, float *mean, float *rstd, // y (B, C); mean, rstd (B,)
                               const void *x, mp_dtype xt,                     // (B, C)
                               const float *w, const float *b,                 // (C,) or NULL
                               size_t B, size_t C, float eps, mp_dtype acc, mp_convert_stats *st);
/* dx = rstd (dn - mean(dn) - n mean(dn n)) with n the normalized x and
 * dn = dy w (the two means in acc, in 16 lanes with acc MP_F32, as the
 * forward's); dw and db get sum_rows dy n and
 * sum_rows dy (column sums in acc), added to them (accumulate = 1) or
 * replacing them (accumulate = 0), as mp_colsum; either may be NULL. dx runs
 * in parallel over rows; dw and db over columns, each column summed row
 * after row (the same bits on any thread count). MP_EINVAL + message for a
 * format (acc too) other than fp32/fp16/bf16 or a NULL dx, dy, x, mean or rstd
 * (B, C > 0); MP_ENOMEM (dx, dw and db may then be partly written). */
mp_status mp_layernorm_backward(void *dx, mp_dtype dxt, float *dw, float *db, // dx (B, C); dw, db (C,)
                                const void *dy, mp_dtype dyt, const void *x, mp_dtype xt, const float *mean,
                                const float *rstd, const float *w, size_t B, size_t C, int accumulate, mp_dtype acc,
                                mp_convert_stats *st);

#ifdef __cplusplus
}
#endif
#endif
