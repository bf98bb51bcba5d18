/* mixprec/mx.h - scaled fp8 and fp4: block (MX, NVFP4) and per-tensor scaling.
 *
 * fp8 (E4M3, E5M2) and fp4 (E2M1) have so few exponent bits that a tensor
 * only fits when it is divided by a scale first: one per block of 32 values
 * (MX, OCP Microscaling v1.0), one per block of 16 plus one per tensor
 * (NVFP4), or one per tensor (Transformer Engine's fp8 recipes). Every
 * function here is exact and deterministic: the same bits on every CPU path
 * (scalar reference, AVX-512) and with any number of threads. MX is integer
 * arithmetic only (any FPU rounding mode, FTZ/DAZ or not); per-tensor fp8 and
 * NVFP4 take Transformer Engine's fp32 multiplies and divisions, whose bits
 * are those of the default rounding mode (to nearest even); NVFP4 reads
 * subnormal inputs as 0 under DAZ. A thread's FPU mode is its own: set the
 * same one on every thread (OpenMP's workers too) or none.
 *
 * Statistics. Each quantizer adds to an optional mp_quant_stats (NULL: not
 * counted): counts are added to, never reset, as mp_convert_stats.
 */
#ifndef MIXPREC_MX_H
#define MIXPREC_MX_H

#include <stddef.h>
#include <stdint.h>

#include "format.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a quantization did to its finite inputs. */
typedef struct mp_quant_stats {
    uint64_t n;         /* elements quantized */
    uint64_t saturated; /* finite inputs whose scaled value rounded past the element's max and was clamped to it */
    uint64_t flushed;   /* nonzero finite inputs stored as +-0 */
    uint64_t nonfinite; /* inf and NaN inputs */
    float amax;         /* the largest finite |x| seen (max with the value already there) */
} mp_quant_stats;

/* ---- MX: blocks of 32 with an E8M0 scale (OCP Microscaling v1.0) ----
 *
 * An E8M0 byte s is the scale 2^(s - 127); 0xFF is NaN. Block b holds
 * src[32b .. 32b+31]; its elements are x / scale rounded to nearest even in
 * elem (MP_E4M3 or MP_E5M2) and saturated to the element's largest finite
 * value (448, 57344). amax is the block's largest |x|.
 *
 *  MP_MX_FLOOR  OCP v1.0 and torchao's default: s = floor(log2(amax)) - emax + 127
 *               (emax 8 for E4M3, 15 for E5M2; an fp32 subnormal or zero amax
 *               counts as 2^-127), clamped to [0, 254]. The largest elements
 *               can round past the max and saturate.
 *  MP_MX_RCEIL  Transformer Engine, cuBLAS and Blackwell's
 *               cvt.rp.satfinite.ue8m0x2.f32: d = amax * fp32(1 / max) rounded
 *               to fp32, then s = the E8M0 code of d rounded up (the smallest
 *               2^(s-127) >= d; d <= 2^-127 gives 0).
 *
 * An all-zero block gets s = 0 (2^-127) under both rules, as torchao gives.
 * A block holding a NaN or an infinity gets s = 0xFF and NaN codes (E4M3
 * 0x7F, E5M2 0x7E); it dequantizes to NaN. n % 32 == 0; codes has n bytes,
 * scales n / 32. MP_EINVAL for another elem, n % 32 != 0 or a NULL buffer. */
typedef enum mp_mx_rule { MP_MX_FLOOR = 0, MP_MX_RCEIL } mp_mx_rule;

#define MP_MX_BLOCK 32

/* Quantize and dequantize: MP_EINVAL + message for the cases above (and, quantizing, a rule other than
 * MP_MX_FLOOR or MP_MX_RCEIL), nothing written or counted then; nothing else fails. */
mp_status mp_mx_quantize(uint8_t *codes, uint8_t *scales, const float *src, size_t n, mp_dtype elem, mp_mx_rule rule,
                         mp_quant_stats *st);
mp_status mp_mx_dequantize(float *dst, const uint8_t *codes, const uint8_t *scales, size_t n, mp_dtype elem);

/* "floor" or "rceil" into *out; MP_EINVAL with a message otherwise. */
mp_status mp_mx_rule_parse(const char *name, mp_mx_rule *out);

/* ---- NVFP4: E2M1 elements, E4M3 block scales, one fp32 tensor scale ----
 *
 * As Transformer Engine 2.x's NVFP4 recipe and reference quantizer
 * (docs/FORMATS.md names the version and the rules). A rows x cols fp32
 * matrix (row-major, cols % 16 == 0, and rows % 16 == 0 for 16x16 blocks) is
 * stored as E2M1 codes packed two per byte (element 2i in the low nibble),
 * rows * cols / 2 bytes, and one E4M3 scale per block: 1x16 blocks run along
 * a row (rows * cols / 16 scales, row-major), 16x16 blocks cover 16 rows and
 * 16 columns ((rows / 16) * (cols / 16) scales).
 *
 * Each step one fp32 operation, in TE 2.18's order (src/nvfp4.c has the
 * details and the NaN, zero and tiny-block rules):
 *
 *   global encode scale  g = 2688 / amax (448 * 6; amax of the whole tensor,
 *                        finite and >= 0; the special cases of
 *                        mp_nvfp4_global_scale)
 *   block scale          s = e4m3_sat(block_amax * (g * fp32(1/6)))
 *   element              e2m1_sat(x * min(1 / (s * (1 / g)), FLT_MAX)), rounded
 *                        to nearest even, or stochastically with sr != NULL
 *                        (8 random bits per element, as cvt.rs: up with
 *                        probability floor(256 f) / 256, f the fraction of
 *                        the way to the next E2M1 value)
 *   value                e2m1 * ((s * amax) * fp32(1/2688)), TE's dequantize
 *
 * MP_EINVAL for cols % 16, rows % 16 with 16x16, another block, a NULL buffer
 * (rows * cols > 0), or an amax that is NaN, infinite or negative.
 */
typedef enum mp_nvfp4_block { MP_NVFP4_1X16 = 1, MP_NVFP4_16X16 = 16 } mp_nvfp4_block;

/* The global encode scale for a tensor amax, as TE computes it. */
float mp_nvfp4_global_scale(float amax);

/* A counter-based random stream for stochastic rounding: element i of a call
 * (row-major index) draws from (seed, counter + i), Philox4x32-10; a call
 * advances counter by the elements it rounded (rows * cols). The whole state
 * is these two words: saving them in a checkpoint makes a resumed run round
 * the same way. */
typedef struct mp_rng {
    uint64_t seed;
    uint64_t counter;
} mp_rng;

/* Quantize (sr NULL: round to nearest even) and dequantize as above: MP_EINVAL + message for the cases above or
 * rows * cols overflowing size_t, nothing written, counted or advanced then; nothing else fails. */
mp_status mp_nvfp4_quantize(uint8_t *codes, uint8_t *scales, const float *src, size_t rows, size_t cols,
                            mp_nvfp4_block block, float amax, mp_rng *sr, mp_quant_stats *st);
mp_status mp_nvfp4_dequantize(float *dst, const uint8_t *codes, const uint8_t *scales, size_t rows, size_t cols,
                              mp_nvfp4_block block, float amax);

/* The random Hadamard transform of TE's NVFP4 weight-gradient GEMM: each
 * consecutive group of 16 values along a row (cols % 16 == 0) is multiplied
 * by H16 diag(signs) / 4, H16 the 16x16 Sylvester Hadamard matrix and bit j
 * of sign_mask the sign of column j (1: negative; TE's mask is 0xD7E8).
 * Orthogonal, so applying it to both operands along the reduction dimension
 * leaves the product unchanged (up to rounding); in place, fp32. MP_EINVAL
 * + message for cols % 16 != 0 or a NULL x with rows * cols > 0 (x not
 * touched); nothing else fails. */
mp_status mp_rht16(float *x, size_t rows, size_t cols, uint16_t sign_mask);

/* ---- per-tensor fp8 scaling (Transformer Engine's DelayedScaling and
 *      Float8CurrentScaling, torchao's tensorwise) ----
 *
 * The numerics of TE 2.x's cast kernels (src/fp8_scale.c names the version
 * and the files), in fp32:
 *
 *   code  = fmt_satfinite(x * scale): the product rounded to fp32, then to
 *           nearest even in fmt (MP_E4M3 or MP_E5M2); values that round past
 *           the max, infinities included, become +-max (448, 57344), as
 *           cvt.rn.satfinite; NaN stays NaN (sign and, for E5M2, the top
 *           payload bit kept, as format.h; TE's GPU writes the canonical
 *           0x7F). torchao's clamp-then-cast gives the same codes (its E5M2
 *           NaN is 0x7F/0xFF).
 *   value = code * scale_inv, scale_inv = fp32(1 / scale), TE's dequantize
 *           (its scale_inv is __frcp_rn(scale)); not code / scale (torchao),
 *           which can differ in the last bit. A scale below about 2^-128
 *           has an infinite scale_inv: values inf, and NaN for the zero
 *           codes.
 *
 * The same bits whatever the FTZ/DAZ flags and thread count. Statistics
 * (mp_quant_stats, NULL: none): saturated counts finite inputs whose fp32
 * product rounds past the max (E4M3: above 464; E5M2: from 61440; a product
 * that overflows fp32 included), flushed nonzero finite inputs whose code is
 * +-0, nonfinite the inf and NaN inputs; amax is the largest finite |x|.
 * (TE's own amax takes +-inf too and skips NaN: a delayed-scaling step that
 * saw an infinity keeps its scale. To follow it, pass INFINITY to
 * mp_fp8_history_update when the tensor held one.)
 *
 * MP_EINVAL (nothing written, nothing counted) for fmt not MP_E4M3 or
 * MP_E5M2, a scale that is not finite and > 0 (0, negative, inf, NaN; an
 * fp32 subnormal scale is valid), a NULL buffer with n > 0, or codes that
 * overlap the fp32 buffer. n == 0 does nothing. Both functions below
 * return MP_OK or that MP_EINVAL + message; nothing else fails. */
mp_status mp_fp8_quantize(uint8_t *codes, const float *src, size_t n, mp_dtype fmt, float scale, mp_quant_stats *st);
mp_status mp_fp8_dequantize(float *dst, const uint8_t *codes, size_t n, mp_dtype fmt, float scale);

/* TE's scale from an amax, in fp32:
 *   amax finite and > 0   scaled_max / amax, one correctly rounded division
 *                         (__fdiv_rn), scaled_max = fmt max * 2^-margin
 *                         rounded to fp32 first (TE's fused delayed update;
 *                         2^-margin is powf(2, -margin), exact for an
 *                         integer margin). For an integer margin this is
 *                         (max / amax) / 2^margin except where a quotient
 *                         overflows or is subnormal.
 *   otherwise             (+-0, negative, +-inf, NaN) *prev, the scale in use
 *                         (delayed scaling), or 1 with prev == NULL (current
 *                         scaling: compute_scale_from_amax, amax_epsilon 0).
 *   an infinite result    FLT_MAX (a tiny amax, or an infinite *prev).
 * Float8CurrentScaling has no margin: pass 0. A NaN margin gives NaN. Another
 * fmt gives NaN (and a message for mp_last_error()). */
float mp_fp8_scale(float amax, mp_dtype fmt, float margin, const float *prev);

/* Delayed scaling: the amax history of one tensor (TE's amax_history_len and
 * amax_compute_algo "max" or "most_recent"; TE's defaults: len 1024, "max",
 * margin 0, HYBRID = E4M3 forward, E5M2 gradients).
 *
 * The window is the len most recent nonzero amaxes, this step's included:
 * TE's forward writes a step's amax into amax_history[0], and the update that
 * follows (at autocast exit for forward tensors, after the backward for
 * gradients) takes the scale the next step quantizes with from all len rows,
 * then rolls the history up by one row: the new amax to row len - 1, row 1
 * (the oldest) dropped, row 0 zeroed for the next step. Here the same window
 * is a ring: TE's row k (1 <= k < len) is amax[(pos + k) % len], so its newest
 * row len - 1 is amax[(pos + len - 1) % len]; amax[pos], which the next
 * amax overwrites, is the entry TE has already dropped. */
typedef struct mp_fp8_history {
    float *amax;     /* len entries, caller-owned, zero at the start */
    size_t len;      /* TE's default 1024 */
    size_t pos;      /* the slot the next amax goes into (the oldest entry) */
    int most_recent; /* 0: scale from the history's max; 1: from the newest amax */
    float margin;
    float scale; /* the scale to quantize with now; 1 at the start */
} mp_fp8_history;

/* Records this step's amax and computes the next step's scale as TE's fused
 * update (amax_and_scale_update_after_reduction, PyTorch's default):
 *  - amax +-0: nothing at all (TE neither rolls the history nor changes the
 *    scale);
 *  - otherwise amax replaces the oldest entry (pos advances) and scale =
 *    mp_fp8_scale(a, fmt, margin, &scale), a = amax ("most_recent") or the
 *    max of the len entries ("max", as fmaxf from 0: NaN and negative entries
 *    never win, though they take a slot; an infinite one keeps the scale
 *    until it leaves the window). With "most_recent" a NaN or infinite amax
 *    keeps the scale.
 * (TE's unfused Python path, NVTE_UNFUSED_FP8_UPDATE=1, also rolls zero
 * amaxes in and computes fp8_max / amax as reciprocal-then-multiply.)
 * Nothing happens for h == NULL, h->amax == NULL, len == 0, or another fmt
 * (a message for mp_last_error()). */
void mp_fp8_history_update(mp_fp8_history *h, mp_dtype fmt, float amax);

#ifdef __cplusplus
}
#endif
#endif
