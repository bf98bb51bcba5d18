/* mixprec/recipe.h - fp8 and fp4 training recipes: the quantized operands of
 * a Linear layer's three GEMMs.
 *
 * A Linear layer y = x W^T runs three GEMMs: the forward x W^T (reduction
 * over the input features), the input gradient dy W (over the output
 * features) and the weight gradient dy^T x (over the rows of the batch). A
 * recipe quantizes both operands of each (mx.h) and the GEMM then runs on the
 * bf16 kernels (gemm.h): every quantized value is an exact bf16 value
 *
 *   per-tensor fp8   the element code's value (E4M3 or E5M2)
 *   mxfp8            the code's value times its block's power of two
 *   nvfp4            the E2M1 value times its block's E4M3 scale
 *
 * and what is left over, 1 / scale for a per-tensor fp8 scale and 1 / g for
 * NVFP4's global scale, multiplies the fp32 result (the GEMM's alpha). Products
 * of two bf16 values are exact in fp32 and are summed in fp32, so the GEMM
 * computes what an fp8 tensor core with fp32 accumulation computes, up to the
 * order of the additions. One exception: an MX block whose scale is below
 * 2^-117 has values under bf16's smallest normal number, which the
 * dot-product instructions read as zero (gemm.h); quantization counts such
 * values as flushed.
 *
 * Operand roles and formats (Transformer Engine's HYBRID format): inputs and
 * weights E4M3, gradients E5M2 (per-tensor recipes); mxfp8 uses E4M3 for
 * all three; nvfp4 uses E2M1 for all three.
 */
#ifndef MIXPREC_RECIPE_H
#define MIXPREC_RECIPE_H

#include <stddef.h>
#include <stdint.h>

#include "format.h"
#include "gemm.h"
#include "mx.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mp_recipe_kind {
    MP_RECIPE_NONE = 0,
    MP_RECIPE_FP8_DELAYED, /* TE DelayedScaling: per-tensor scale from an amax history */
    MP_RECIPE_FP8_CURRENT, /* TE Float8CurrentScaling: per-tensor scale from the tensor's own amax */
    MP_RECIPE_MXFP8,       /* E4M3, 1x32 blocks along each GEMM's reduction, E8M0 scales */
    MP_RECIPE_NVFP4        /* E2M1, 1x16 blocks (16x16 for weights), E4M3 scales, fp32 tensor scale */
} mp_recipe_kind;

typedef struct mp_recipe {
    mp_recipe_kind kind;
    mp_mx_rule mx_rule;      /* mxfp8: MP_MX_RCEIL by default, as TE */
    size_t amax_history_len; /* fp8-delayed: 1024 */
    int amax_most_recent;    /* fp8-delayed: 0 ("max" over the history, TE's default) or 1 */
    float margin;            /* fp8-delayed: 0 */
    int nvfp4_2d_weights;    /* nvfp4: 16x16 blocks for weights (1) or 1x16 (0) */
    int nvfp4_sr;            /* nvfp4: stochastic rounding of gradients */
    int nvfp4_rht;           /* nvfp4: random Hadamard transform of the weight-gradient GEMM's operands */
    uint16_t rht_signs;      /* nvfp4: the transform's random signs (mp_rht16's sign_mask), one per recipe:
                                both operands of a GEMM must use the same; TE 2.18's 0xD7E8 by default */
} mp_recipe;

/* The recipe named "fp8-delayed", "fp8-current", "mxfp8" or "nvfp4" with TE's
 * defaults (all nvfp4 parts on) into *out; MP_EINVAL with a message for
 * another name. */
mp_status mp_recipe_parse(const char *name, mp_recipe *out);
const char *mp_recipe_name(mp_recipe_kind k); /* "" for MP_RECIPE_NONE */

typedef enum mp_qrole { MP_QROLE_INPUT = 0, MP_QROLE_WEIGHT, MP_QROLE_GRAD } mp_qrole;
const char *mp_qrole_name(mp_qrole role); /* "input", "weight", "grad" */

/* The element format of a role under a recipe (E4M3, E5M2 or E2M1). */
mp_dtype mp_qrole_format(const mp_recipe *r, mp_qrole role);

/* One tensor's quantization across steps: its scale state and this step's
 * diagnostics. */
typedef struct mp_qtensor {
    mp_qrole role;
    mp_fp8_history hist;  /* fp8-delayed (hist.amax allocated by mp_qtensor_init) */
    mp_rng rng;           /* nvfp4 stochastic rounding */
    float scale;          /* this step's per-tensor scale: fp8's (x * scale is coded), nvfp4's global g; 1 for mxfp8 */
    float amax;           /* the amax scale was taken from (current scaling and nvfp4) */
    int scaled;           /* scale is set for this step (current scaling and nvfp4 take the amax once per step) */
    mp_quant_stats stats; /* this step's counts, every quantization of the tensor summed */
} mp_qtensor;

/* seed starts the stochastic-rounding stream. MP_ENOMEM (fp8-delayed's amax
 * history; this one sets no message), MP_EINVAL + message for fp8-delayed
 * with amax_history_len 0. q owns the history: mp_qtensor_free. */
mp_status mp_qtensor_init(mp_qtensor *q, const mp_recipe *r, mp_qrole role, uint64_t seed);
void mp_qtensor_free(mp_qtensor *q);

/* A micro-batch (one forward and backward) begins: current scaling and
 * nvfp4 will take their amax afresh; first (the step's first micro-batch)
 * also clears the counts, which otherwise add up over the step's
 * micro-batches. */
void mp_qtensor_begin(mp_qtensor *q, int first);

/* A micro-batch ends: delayed scaling records the amax of the counts (the
 * step's micro-batches so far; NaN when the tensor held an inf or a NaN) in
 * the history and takes the next micro-batch's scale from it, as TE updates
 * its scales after every forward and backward. The counts stay until the
 * next mp_qtensor_begin with first set. */
void mp_qtensor_end(mp_qtensor *q, const mp_recipe *r);

/* Quantizes a rows x cols matrix src (fp32 or bf16, row stride lds) as an
 * operand whose GEMM reduces along its rows (k_along_rows = 1: blocks run
 * down a column, as x and dy in the weight gradient, and W in the input
 * gradient) or along its columns (0), into dst: the bf16 values described
 * above (rows x cols, row stride ldd). *factor gets what the GEMM's result
 * must be multiplied by for this operand (1 / scale, 1 / g, or 1). A
 * reduction that is not a whole number of blocks (32 for mxfp8, 16 for
 * nvfp4; 16x16 weight blocks in both directions) is padded with zeros, which
 * change neither a block's amax nor the GEMM's sums. nvfp4 weights take 16x16
 * blocks whatever k_along_rows says (one quantization serves both GEMMs);
 * the Hadamard transform applies to inputs and gradients quantized with
 * k_along_rows (the weight gradient's operands) when rows is a whole number
 * of 16-row blocks (it mixes a block's rows: TE requires whole blocks; the
 * two operands of a weight gradient have the same rows, so both are
 * transformed or neither); their amax (q->stats.amax, the global scale) is
 * then the transformed values'. Quantization counts go to q->stats;
 * fp8-current and nvfp4 take the tensor's amax at its first quantization in a
 * micro-batch. MP_EINVAL for a bad argument, or for a per-tensor
 * fp8 scale that is not finite and > 0.
 *
 * Stochastic rounding (nvfp4 gradients) gives element (i, c) byte counter + k
 * of q->rng's stream (mp_rng), k its index in the padded operand: along the
 * columns k = i * cp + c, row-major with cp = cols rounded up to 16; along
 * the rows k = i0 * cols + 16 c + (i - i0) with i0 = 16 floor(i / 16), the
 * block row's columns one after another and a column's 16 values (after the
 * Hadamard transform) consecutive. The call then advances counter by the
 * padded operand's size, rows * cp or 16 ceil(rows / 16) * cols. These
 * indices are part of the results: the same bits on every CPU path and
 * thread count. */
mp_status mp_qoperand(uint16_t *dst, size_t ldd, float *factor, const void *src, mp_dtype src_type, size_t lds,
                      size_t rows, size_t cols, int k_along_rows, const mp_recipe *r, mp_qtensor *q);

/* mp_gemm_ex (gemm.h) on quantized operands: A, quantized as qa's tensor
 * into wa, and B, quantized as qb's into wb (bf16, as many elements as A and
 * B, stored densely), each along the GEMM's reduction (A's rows when
 * trans_a, B's rows unless trans_b), A first; the GEMM reads them with alpha
 * the product of their factors. MP_EINVAL as mp_qoperand and mp_gemm_ex,
 * and for an ep with a_row_sums (they would be the quantized A's); MP_ENOMEM
 * as mp_gemm_ex. */
mp_status mp_qgemm(const mp_recipe *r, int trans_a, int trans_b, size_t m, size_t n, size_t k, const void *a,
                   mp_dtype a_type, size_t lda, mp_qtensor *qa, uint16_t *wa, const void *b, mp_dtype b_type,
                   size_t ldb, mp_qtensor *qb, uint16_t *wb, float beta, void *c, mp_dtype c_type, size_t ldc,
                   const mp_gemm_epilogue *ep);

/* What quantizing one GEMM's operands by a recipe does to them and to the
 * product, summed over the calls of mp_qgemm_probe: the product against the
 * GEMM on the operands as given (in their own format, fp32 accumulation),
 * each operand (0: A, 1: B) dequantized against the values it was quantized
 * from. An operand that NVFP4's Hadamard transform mixed has no element-wise
 * counterpart: its errors are not summed, and transformed counts the calls. */
typedef struct mp_qprobe {
    double out_d2, out_r2;                      /* sums of (quantized product - product)^2 and of product^2 */
    double op_d2[2], op_r2[2];                  /* per operand: sums of (dequantized - value)^2 and of value^2 */
    uint64_t op_n[2], flushed[2], saturated[2]; /* per operand: elements, and mp_quant_stats's counts */
    uint64_t transformed[2];                    /* per operand: calls whose operand was transformed */
    uint64_t calls;
} mp_qprobe;

/* The relative errors of a probe: sqrt(d2 / r2) for the product (operand -1)
 * or operand 0 / 1; NAN where nothing was summed. */
double mp_qprobe_error(const mp_qprobe *p, int operand);

/* One GEMM C = op(A) op(B) (m x n x k, as mp_qgemm) measured, not used:
 * the product of a and b as given (a_type, b_type: bf16 or fp32), against
 * the product of the operands quantized as mp_qgemm would, a from a_src and
 * b from b_src (the same values, or the fp32 master of b's bf16 copy), into
 * qa's and qb's tensors (their scales, histories and stats move as in
 * mp_qgemm) through wa and wb. scratch: 2 m n floats. The sums are added
 * to p. MP_EINVAL as mp_qgemm; MP_ENOMEM. */
mp_status mp_qgemm_probe(const mp_recipe *r, int trans_a, int trans_b, size_t m, size_t n, size_t k, const void *a,
                         mp_dtype a_type, size_t lda, const void *a_src, mp_dtype a_src_type, size_t lda_src,
                         mp_qtensor *qa, uint16_t *wa, const void *b, mp_dtype b_type, size_t ldb, const void *b_src,
                         mp_dtype b_src_type, size_t ldb_src, mp_qtensor *qb, uint16_t *wb, float *scratch,
                         mp_qprobe *p);

#ifdef __cplusplus
}
#endif
#endif
