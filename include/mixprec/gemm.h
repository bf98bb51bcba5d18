/* mixprec/gemm.h - matrix multiply with half or fp32 inputs, fp32 accumulation.
 *
 *   C = alpha * op(A) * op(B) + beta * C       (row-major, like cblas with CblasRowMajor)
 *
 * op(A) is m x k: A itself (m x k, row stride lda) or, with trans_a, the
 * transpose of A stored k x m. op(B) is k x n likewise. a/b may be fp32, fp16 or
 * bf16, independently; c is fp32, fp16 or bf16. Products are summed in fp32;
 * a half C receives the exact round-to-nearest-even conversion of the fp32
 * result, and c_stats (if not NULL) counts underflow/subnormal/overflow/NaN of
 * that store as mp_convert does. beta == 0 means C is not read (NaN in it is
 * overwritten); alpha == 0 means A and B are not read.
 *
 * Numerics of the fast paths (docs/GEMM.md):
 *  - fp32 and fp16 inputs (and mixed pairs) are converted exactly to fp32 while
 *    packing; each C element is a sequence of fp32 fused multiply-adds in k
 *    order within a block of KC values of k (2048 on AVX-512, 512 with AVX2
 *    and in the portable kernel); blocks are added to C in order. For k <= KC
 *    the result equals mp_gemm_ref bit for bit; the AVX2 and portable paths
 *    give the same bits for any k.
 *  - bf16 x bf16 on CPUs with AVX512_BF16 uses vdpbf16ps: it adds two products
 *    at a time to the fp32 accumulator, treats bf16 subnormal inputs
 *    (|x| < 2^-126) as zero and flushes fp32 subnormal results to zero. The
 *    products of two bf16 values are exact in fp32, so the result differs from
 *    mp_gemm_ref only in rounding order and in those flushed subnormals: the
 *    error is within (k + 4) 2^-24 sum|a b| + sum of the flushed |a b| +
 *    (k + 2) 2^-126 (docs/GEMM.md; tested).
 *  - bf16 x bf16 on CPUs with AMX-BF16 runs on the tiles (TDPBF16PS): within
 *    each 32-deep slice of k, the even-k and the odd-k products are summed
 *    apart in fp32 and their sum is added to the accumulator (measured;
 *    docs/GEMM.md), with the same flushes and the same bound.
 *  - Results do not depend on the number of threads.
 *
 * mp_gemm and mp_gemm_ex return MP_OK, or MP_EINVAL for a format other than
 * fp32/fp16/bf16, a NULL pointer with m, n (and k) nonzero, a leading
 * dimension smaller than its row, a round_to other than fp16/bf16 or
 * without an fp32 C, or a post step with round_to, without the x it reads, or
 * of an unknown kind; MP_ENOMEM when a packing buffer cannot be allocated
 * (C may then be partly written). mp_last_error() says which. The library
 * keeps per-thread packing buffers between calls; the caller owns a, b, c.
 */
#ifndef MIXPREC_GEMM_H
#define MIXPREC_GEMM_H

#include <stddef.h>

#include "convert.h"
#include "format.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* C = alpha op(A) op(B) + beta C, as above. MP_EINVAL + message for a format other than fp32/fp16/bf16, a NULL
 * pointer with m, n (and k) nonzero or a leading dimension smaller than its row (nothing written); MP_ENOMEM for a
 * packing buffer (C may then be partly written). */
mp_status mp_gemm(int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha, const void *a, mp_dtype a_type,
                  size_t lda, const void *b, mp_dtype b_type, size_t ldb, float beta, void *c, mp_dtype c_type,
                  size_t ldc, mp_convert_stats *c_stats /* may be NULL */);

/* An element-wise step fused after C's store (oneDNN's post-op), on C's
 * values as stored (rounded to C's format) and, where it reads one, x: a
 * tensor of C's format and shape at C's leading dimension. */
typedef enum mp_gemm_post {
    MP_POST_NONE = 0,
    MP_POST_GELU,          /* gelu(c), tanh form (ops.h's mp_gelu_forward) */
    MP_POST_GELU_ERF,      /* gelu(c), erf form */
    MP_POST_GELU_GRAD,     /* c gelu'(x): c is the gradient of a GELU's output, x its input
                              (mp_gelu_backward) */
    MP_POST_GELU_ERF_GRAD, /* the same for the erf form */
    MP_POST_ADD,           /* x + c: a residual connection (mp_add) */
} mp_gemm_post;

/* What happens to each fp32 result on its way into C (the "epilogue" of
 * cuBLASLt and oneDNN), done on the tile while it is in registers or L1, in
 * this order. Zero fields are off: {0} is plain mp_gemm. */
typedef struct mp_gemm_epilogue {
    const float *bias;       /* (n,) fp32 added to every row: alpha op(A) op(B) + beta C + bias */
    mp_dtype round_to;       /* MP_F16 or MP_BF16 with an fp32 C: C = beta C + r, where r is
                                alpha op(A) op(B) (+ bias) rounded to this format, as when a
                                half-precision weight gradient is accumulated into fp32 */
    mp_convert_stats *stats; /* counts of the rounding into C's format (or round_to) */
    uint64_t *zeros;         /* adds the number of results that are +-0 in fp32 before that rounding:
                                alpha op(A) op(B) + bias with round_to, else the value stored into C
                                (beta C included when C is read); counted whatever C's format, fp32
                                too, without changing any result (a weight gradient's dead values) */
    /* Then, without round_to: u = post(c as stored, x) in fp32, the same operations as the
     * separate op (the same bits), rounded to C's format and counted into post_stats (may be
     * NULL) like a store; stored into post_out, or into C in place of c when post_out is NULL
     * (c is still counted into stats: a value rounded and never stored). post_x and post_out
     * are (m, n) at ldc in C's format; post_out must not overlap C, post_x may be post_out. */
    mp_gemm_post post;
    const void *post_x;
    void *post_out;
    mp_convert_stats *post_stats;
    /* (m,) fp32 or NULL: each row i of op(A) summed over k from the values the GEMM reads
     * anyway (one fp32 addition per value in k order, from +0), the sum then added to
     * a_row_sums[i]: mp_colsum's bits (ops.h, with an fp32 accumulator) for the columns of a
     * transposed A. For a weight gradient dW = dY^T X, the bias's gradient, as oneDNN's inner
     * product computes diff_bias with diff_weights. */
    float *a_row_sums;
} mp_gemm_epilogue;

/* mp_gemm with an epilogue (ep may be NULL: mp_gemm without counts). mp_gemm's statuses, and MP_EINVAL + message
 * for a bad epilogue (nothing written): a round_to other than fp16/bf16 or without an fp32 C, or a post step with
 * round_to, of an unknown kind, or without the post_x it reads, or a_row_sums with a NULL A (m and k nonzero). */
mp_status mp_gemm_ex(int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha, const void *a,
                     mp_dtype a_type, size_t lda, const void *b, mp_dtype b_type, size_t ldb, float beta, void *c,
                     mp_dtype c_type, size_t ldc, const mp_gemm_epilogue *ep);

/* The same with plain loops: for each C element, acc = 0; acc = fmaf(a, b, acc)
 * in k order; then alpha/beta; then the store. For tests and as the definition.
 * MP_EINVAL + message as mp_gemm; MP_ENOMEM for its one row of fp32 results
 * (C not yet written). */
mp_status mp_gemm_ref(int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha, const void *a,
                      mp_dtype a_type, size_t lda, const void *b, mp_dtype b_type, size_t ldb, float beta, void *c,
                      mp_dtype c_type, size_t ldc, mp_convert_stats *c_stats);

#ifdef __cplusplus
}
#endif
#endif
