/* nvfp4.c - NVFP4: E2M1 elements, E4M3 block scales, one fp32 tensor scale;
 * the stochastic-rounding stream (mp_rng) and the 16-point random Hadamard
 * transform (mp_rht16).
 *
 * Reference: NVIDIA Transformer Engine v2.18 (tag v2.18, build_tools/VERSION.txt
 * 2.18.0; unchanged in these parts on main at 2.20.0.dev0, commit d0067d0):
 *   docs/features/low_precision_training/nvfp4/nvfp4.rst
 *   transformer_engine/pytorch/custom_recipes/quantization_ref_nvfp4.py
 *       (NVFP4QuantizerRef._quantize_blockwise_reference, cast_to_fp4x2,
 *        _build_hadamard_matrix, get_wgrad_sign_vector)
 *   transformer_engine/common/cast/nvfp4/core_nvfp4.cuh
 *       (compute_global_encode_scaling_factor_FP4, compute_decoding_scaling_factor)
 *   transformer_engine/common/cast/nvfp4/quantize_transpose_nvfp4.cuh
 *       (block_scale_inverse, the cvt.rn / cvt.rs conversions)
 *   transformer_engine/common/cast/nvfp4/dequantize_nvfp4.cuh
 *   transformer_engine/common/util/ptx.cuh (mul_cvt_fp32_to_fp4_4x; on main,
 *       ptx_arch_spec.cuh's stochastic_round_fp4_e2m1, TE's software model of
 *       cvt.rs.satfinite.e2m1x4.f32)
 *   transformer_engine/common/hadamard_transform/hadamard_transform{.cu,_utils.cuh}
 *   transformer_engine/pytorch/tensor/nvfp4_tensor.py (the sign mask)
 *   tests/pytorch/nvfp4/test_nvfp4_quantize_exact.py, test_nvfp4_sr_quantize.py
 *
 * The rules, each an IEEE fp32 operation rounded to nearest even (as TE's
 * kernels, which are built without --use_fast_math):
 *
 *  1. Global encode scale g = mp_nvfp4_global_scale(amax):
 *       g = 2688.0f / amax            (2688 = 448 * 6, exact)
 *       g = fminf(g, FLT_MAX)         (amax 0 or tiny: inf -> FLT_MAX; NaN -> FLT_MAX)
 *       if (amax == 0 || g == 0) g = 1 (amax 0 or +inf)
 *     This is the CUDA rule. (The Python reference leaves amax 0 at FLT_MAX;
 *     it matters only for a wrong amax, as an all-zero tensor codes to zeros
 *     either way.) The global decode scale is gd = 1.0f / g (TE writes
 *     1.0 / S_enc in double and rounds to fp32: the same value, since 53 >=
 *     2 * 24 + 2 makes that double rounding innocuous).
 *     mp_nvfp4_quantize/dequantize take amax from the caller and require it
 *     finite and >= 0 (MP_EINVAL otherwise): TE's amax-0/inf special cases
 *     are not consistent with its dequantize kernel (which uses amax itself),
 *     so an infinite or NaN amax is refused rather than coded. An amax below
 *     the tensor's true one is allowed: block scales then saturate at 448 and
 *     elements at 6 (counted as saturated).
 *  2. Block amax: the largest |x| of the block (1x16: 16 consecutive values
 *     of a row; 16x16: a 16-row by 16-column tile). A NaN anywhere in the
 *     block makes it NaN (torch.amax, the reference), an infinity makes it inf.
 *  3. Block decode scale (v2.14+; v2.13 and earlier computed
 *     (block_amax * fp32(1/6)) * g, which rounds differently):
 *       mult = g * fp32(1/6)          (fp32(1/6) = 0x3E2AAAAB)
 *       s    = e4m3_sat(block_amax * mult)   nearest even, beyond 448 (and inf)
 *                                             -> 448; the reference's clamp then
 *                                             .to(float8_e4m3fn), the kernel's
 *                                             __NV_SATFINITE cast.
 *     A NaN block gets s = 0x7F (E4M3 NaN), as the reference.
 *  4. Element encode multiplier (the kernel's block_scale_inverse and the
 *     reference's encode_scale):
 *       inv = fminf(1.0f / (e4m3_to_f32(s) * gd), FLT_MAX)
 *     s = 0 gives 1/0 = inf -> FLT_MAX (no 0 * inf: an all-zero block codes
 *     0 * FLT_MAX = +-0).
 *  5. Element: y = x * inv (fp32), then E2M1 with satfinite: |y| beyond 6
 *     clamps to 6 with the sign kept; inf -> +-6. Rounding (integer-only on
 *     the bits of y, so FTZ/DAZ and the FPU rounding mode do not change it):
 *       nearest even (cvt.rn.satfinite.e2m1x2.f32; the reference's
 *       cast_to_fp4x2 thresholds, as values: 0.25 -> 0, 0.75 -> 1, 1.25 -> 1,
 *       1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4, above 5 -> 6);
 *       stochastic (cvt.rs.satfinite.e2m1x4.f32, which takes 8 random bits per
 *       element): with step the E2M1 spacing at |y| (0.5 below 2, 1 in [2, 4),
 *       2 from 4), f the exact fraction of |y| / step and r a random byte,
 *       |y| rounds away from zero iff floor(256 f) + r >= 256, i.e. with
 *       probability floor(256 f) / 256: unbiased when 256 f is an integer,
 *       otherwise low in magnitude by less than step / 256. This is TE's
 *       software model of the instruction (stochastic_round_fp4_e2m1, which
 *       its comment says takes the same 8 bits per element as cvt.rs), bit
 *       for bit given the same random byte.
 *     The sign of y is kept, -0 included (code 8). The reference's
 *     cast_to_fp4x2 codes -0.0 as +0 (its comparisons cannot see the sign of
 *     a zero); we follow the hardware conversion, which keeps it.
 *     Elements of a NaN block are all coded 0 (the reference: NaN * anything
 *     fails every comparison of cast_to_fp4x2). TE's CUDA kernel differs on
 *     NaN (its fmaxf / max.abs block amax skips NaN, and satfinite turns the
 *     NaN element into +6, per TE's comment on stochastic_round_fp4_e2m1); we
 *     keep the reference's rule, which makes the block dequantize to NaN
 *     instead of hiding the NaN.
 *     A nonzero block whose scale rounds to E4M3 0 (block_amax below about
 *     2.2e-6 of amax) gets inv = FLT_MAX, so its nonzero elements code +-6
 *     (TE's bits); they dequantize to 0 and the statistics count them as
 *     flushed, not saturated.
 *  6. Dequantize (dequantize_nvfp4.cuh): f = (e4m3_to_f32(s) * amax) *
 *     fp32(1/2688); value = e2m1 * f. (TE's own test computes e2m1 * s *
 *     (amax / 2688): not always the same last bit; we follow the kernel.)
 *  7. Layout: row-major codes, element 2i in the low nibble of byte i (the
 *     reference's cast_to_fp4x2 and the tests' unpack_fp4); scales row-major,
 *     one per 1x16 block or one per 16x16 tile (the reference repeats a tile's
 *     scale on its 16 rows; we store it once).
 *
 * Statistics (mp_quant_stats): n += every element; nonfinite: inf and NaN
 * inputs (nothing else counted for them); amax: the largest finite |x|;
 * saturated: finite x whose y rounded (in the mode used) past 6 and was
 * clamped, in a block whose scale is not 0; flushed: nonzero finite x whose
 * stored value is +-0 (code +-0, a block scale of 0, or a NaN block).
 *
 * Stochastic rounding stream (TE draws from curanddx Philox4x32 with a seed,
 * a per-thread subsequence and an offset: its bits depend on the kernel's
 * launch shape and cannot be reproduced here). mp_rng uses Philox4x32-10
 * (Salmon et al., SC'11; Random123; curand's Philox4_32_10) as a counter-based
 * byte stream: byte j of the stream of seed is byte (j mod 16) of
 * Philox4x32-10(key = {lo32(seed), hi32(seed)}, counter = {lo32(j / 16),
 * hi32(j / 16), 0, 0}), bytes taken little-endian from the four output words
 * in order. Element i of a call (row-major index into the matrix) uses byte
 * counter + i; the call then adds rows * cols to counter. Thread count and
 * call splitting do not change the bits.
 *
 * RHT (mp_rht16): TE multiplies groups of 16 along the last dimension by
 * diag(s) H16 / 4 from the right (x.view(-1, 16) @ (sign_mat @ H) / 4), i.e.
 * each group vector v becomes H16 (s * v) / 4 (H16 symmetric): the sign of
 * element j of the group is bit j of the mask. TE's default mask (the
 * reference's get_wgrad_sign_vector, nvfp4_tensor.py's
 * get_random_sign_mask_for_rht) is 0xD7E8: signs + + + - + - - - - - - + - +
 * - -. TE applies the RHT only to the columnwise (transposed) copies of the
 * wgrad GEMM's operands (inputs and output gradients), i.e. along the token
 * dimension, the GEMM's reduction dimension; the transposed tensor's global
 * amax is taken after the RHT. TE computes it on tensor cores from bf16 inputs
 * and a bf16 matrix of +-1/4 with fp32 accumulation; here it is fp32: signs,
 * the four butterfly stages of the fast Walsh-Hadamard transform in a fixed
 * order (stride 1, 2, 4, 8; a + b, a - b), a multiplication by 0.5 after the
 * second and after the fourth stage (exact unless a result is subnormal; no
 * intermediate overflows while every |x| <= FLT_MAX / 8).
 *
 * Floating-point environment: the E2M1 rounding is integer-only; the scale
 * arithmetic and the products x * inv are ordinary fp32 operations, so FTZ/DAZ
 * can change results only where a subnormal appears (a block amax or input
 * below 2^-126, an amax near FLT_MAX), as on TE's GPUs without -ftz.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "internal.h"

/* ---- the stochastic-rounding stream: Philox4x32-10 ---- */

static inline uint32_t mulhilo32(uint32_t a, uint32_t k, uint32_t *lo) {
    const uint64_t p = (uint64_t)a * k;
    *lo = (uint32_t)p;
    return (uint32_t)(p >> 32);
}

static void philox4x32_10(const uint32_t ctr_in[4], const uint32_t key_in[2], uint32_t out[4]) {
    uint32_t c0 = ctr_in[0], c1 = ctr_in[1], c2 = ctr_in[2], c3 = ctr_in[3];
    uint32_t k0 = key_in[0], k1 = key_in[1];
    MP_PHILOX4X32_10(uint32_t, mulhilo32, c0, c1, c2, c3, k0, k1)
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

void mp_sr_bytes(uint64_t seed, uint64_t j0, size_t n, uint8_t *r) {
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint64_t blk = j0 >> 4;
    unsigned off = (unsigned)(j0 & 15u);
    for (size_t o = 0; o < n; blk++, off = 0) {
        const uint64_t c = blk & 0x0fffffffffffffffull; /* j / 16, wrapping with j */
        const uint32_t ctr[4] = {(uint32_t)c, (uint32_t)(c >> 32), 0, 0};
        uint32_t w[4];
        philox4x32_10(ctr, key, w);
        for (unsigned i = off; i < 16 && o < n; i++) r[o++] = (uint8_t)(w[i >> 2] >> (8 * (i & 3)));
    }
}

/* The 16 bytes j0 .. j0+15 of the stream of seed. */
static void sr_bytes(uint64_t seed, uint64_t j0, uint8_t r[16]) { mp_sr_bytes(seed, j0, 16, r); }

/* ---- E2M1 rounding, integer-only on fp32 bits ---- */

/* E2M1 magnitude code of a magnitude in half units (0, 0.5, 1, 1.5, 2, 3, 4, 6). */
static const uint8_t half_units_code[13] = {0, 1, 2, 3, 4, 0, 5, 0, 6, 0, 0, 0, 7};
static const float e2m1_value[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                     -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

/* The E2M1 code (sign included) of y (fp32 bits, not NaN) with satfinite:
 * nearest even when rbits < 0, else stochastic with the random byte rbits.
 * *past = 1 when the rounded magnitude went beyond 6 and was clamped to it. */
static inline uint8_t e2m1_round(uint32_t y, int rbits, int *past) {
    const uint32_t sign = (y >> 28) & 8u, a = y & 0x7fffffffu;
    *past = 0;
    if (a >= 0x41000000u) { /* |y| >= 8, inf included: beyond 6 in either mode */
        *past = 1;
        return (uint8_t)(sign | 7u);
    }
    const uint32_t e = a >> 23;
    /* |y| / step = m / 2^sh, step = 2^k: k = 1 in [4, 8), 0 in [2, 4), -1 below 2 */
    const uint32_t m = e ? (a & 0x7fffffu) | 0x800000u : a;
    const int sh = e >= 128 ? 22 : e ? 149 - (int)e : 148;
    const int k = e >= 129 ? 1 : e == 128 ? 0 : -1;
    if (sh > 31) return (uint8_t)sign; /* below 2^-8 steps: 0 in both modes */
    uint32_t n = m >> sh;
    const uint32_t rem = m & ((1u << sh) - 1u);
    if (rbits < 0) {
        const uint32_t half = 1u << (sh - 1);
        n += (rem > half) | ((rem == half) & n);
    } else {
        n += ((rem >> (sh - 8)) + (uint32_t)rbits) >> 8; /* sh >= 22: the top 8 fraction bits */
    }
    const uint32_t h = n << (k + 1); /* half units */
    if (h > 12) {
        *past = 1;
        return (uint8_t)(sign | 7u);
    }
    return (uint8_t)(sign | half_units_code[h]);
}

/* ---- the global scale ---- */

float mp_nvfp4_global_scale(float amax) {
    float g = 2688.0f / amax;
    g = fminf(g, FLT_MAX);
    if (amax == 0.0f || g == 0.0f) return 1.0f;
    return g;
}

static mp_status check_args(const char *fn, const void *a, const void *b, const void *c, size_t rows, size_t cols,
                            mp_nvfp4_block block, float amax) {
    if (block != MP_NVFP4_1X16 && block != MP_NVFP4_16X16)
        return mp_error(MP_EINVAL, "%s: block must be MP_NVFP4_1X16 or MP_NVFP4_16X16, not %d", fn, (int)block);
    if (cols % 16) return mp_error(MP_EINVAL, "%s: cols (%zu) must be a multiple of 16", fn, cols);
    if (block == MP_NVFP4_16X16 && rows % 16)
        return mp_error(MP_EINVAL, "%s: rows (%zu) must be a multiple of 16 for 16x16 blocks", fn, rows);
    if (cols && rows > SIZE_MAX / cols)
        return mp_error(MP_EINVAL, "%s: %zu x %zu elements overflow size_t", fn, rows, cols);
    if (!(amax >= 0.0f && amax <= FLT_MAX))
        return mp_error(MP_EINVAL, "%s: amax must be finite and >= 0, not %g", fn, (double)amax);
    if (rows && cols && (!a || !b || !c))
        return mp_error(MP_EINVAL, "%s: NULL buffer for %zu x %zu elements", fn, rows, cols);
    return MP_OK;
}

/* ---- quantize ---- */

typedef struct {
    uint64_t saturated, flushed, nonfinite;
    uint32_t amax; /* bits of the largest finite |x| */
} stats_acc;

typedef struct {
    uint8_t *codes;
    uint8_t *scales;
    const float *src;
    size_t cols, tile; /* tile: rows per block, 1 or 16 */
    float mult, gd;
    const mp_rng *sr;
    stats_acc *part; /* (MP_MAX_THREADS,) or NULL */
} quant_job;

/* 16 values of one row of a block: codes into out[0..7]. */
static void encode16(uint8_t *out, const float *x, float inv, int nan_block, int zero_scale, const uint8_t *rnd,
                     stats_acc *st) {
    uint8_t c[16];
    for (int i = 0; i < 16; i++) {
        int past = 0;
        if (nan_block) c[i] = 0;
        else c[i] = e2m1_round(mp_f32_bits(x[i] * inv), rnd ? rnd[i] : -1, &past);
        if (st) {
            const uint32_t a = mp_f32_bits(x[i]) & 0x7fffffffu;
            if (a >= 0x7f800000u) {
                st->nonfinite++;
                continue;
            }
            if (a > st->amax) st->amax = a;
            if (a && (nan_block || zero_scale || (c[i] & 7u) == 0)) st->flushed++;
            else if (past) st->saturated++;
        }
    }
    for (int i = 0; i < 8; i++) out[i] = (uint8_t)(c[2 * i] | (c[2 * i + 1] << 4));
}

static void quantize_bands(void *ctx, size_t b0, size_t b1, int t) {
    const quant_job *j = ctx;
    const size_t cols = j->cols, nb = cols / 16;
    stats_acc *st = j->part ? &j->part[t] : NULL;
    for (size_t band = b0; band < b1; band++) {
        const size_t r0 = band * j->tile;
        for (size_t bc = 0; bc < nb; bc++) {
            /* block amax on the bits: |x| orders as its bits; NaN above inf */
            uint32_t am = 0;
            for (size_t r = r0; r < r0 + j->tile; r++) {
                const float *x = j->src + r * cols + 16 * bc;
                for (int i = 0; i < 16; i++) {
                    const uint32_t a = mp_f32_bits(x[i]) & 0x7fffffffu;
                    am = a > am ? a : am;
                }
            }
            const int nan_block = am > 0x7f800000u;
            const uint8_t s = nan_block ? 0x7f : mp_f32_to_e4m3_sat(mp_bits_f32(am) * j->mult);
            j->scales[band * nb + bc] = s;
            const float inv = fminf(1.0f / (mp_e4m3_to_f32(s) * j->gd), FLT_MAX);
            for (size_t r = r0; r < r0 + j->tile; r++) {
                const size_t i0 = r * cols + 16 * bc;
                uint8_t rnd[16];
                if (j->sr) sr_bytes(j->sr->seed, j->sr->counter + (uint64_t)i0, rnd);
                encode16(j->codes + i0 / 2, j->src + i0, inv, nan_block, s == 0, j->sr ? rnd : NULL, st);
            }
        }
    }
}

/* Below this many elements one thread is faster than waking a second. */
#define PARALLEL_MIN ((size_t)1 << 16)

mp_status mp_nvfp4_quantize(uint8_t *codes, uint8_t *scales, const float *src, size_t rows, size_t cols,
                            mp_nvfp4_block block, float amax, mp_rng *sr, mp_quant_stats *st) {
    mp_status rc = check_args("mp_nvfp4_quantize", codes, scales, src, rows, cols, block, amax);
    if (rc) return rc;
    const size_t n = rows * cols;
    if (n == 0) return MP_OK;
    const float g = mp_nvfp4_global_scale(amax);
    stats_acc part[MP_MAX_THREADS];
    memset(part, 0, sizeof part);
    quant_job j = {codes, scales, src, cols, (size_t)block, g * (1.0f / 6.0f), 1.0f / g, sr, st ? part : NULL};
    const size_t bands = rows / j.tile, per_band = j.tile * cols;
    const int shares = mp_parallel_for(bands, PARALLEL_MIN / per_band + 1, 1, quantize_bands, &j);
    if (st) {
        float am = st->amax;
        for (int t = 0; t < shares; t++) {
            st->saturated += part[t].saturated;
            st->flushed += part[t].flushed;
            st->nonfinite += part[t].nonfinite;
            const float a = mp_bits_f32(part[t].amax);
            if (a > am) am = a;
        }
        st->n += n;
        st->amax = am;
    }
    if (sr) sr->counter += (uint64_t)n;
    return MP_OK;
}

/* ---- dequantize ---- */

typedef struct {
    float *dst;
    const uint8_t *codes, *scales;
    size_t cols, tile;
    float amax;
} dequant_job;

static void dequantize_bands(void *ctx, size_t b0, size_t b1, int t) {
    (void)t;
    const dequant_job *j = ctx;
    const size_t cols = j->cols, nb = cols / 16;
    for (size_t band = b0; band < b1; band++) {
        for (size_t bc = 0; bc < nb; bc++) {
            const float f = (mp_e4m3_to_f32(j->scales[band * nb + bc]) * j->amax) * (1.0f / 2688.0f);
            for (size_t r = band * j->tile; r < (band + 1) * j->tile; r++) {
                const size_t i0 = r * cols + 16 * bc;
                for (int i = 0; i < 16; i += 2) {
                    const uint8_t b = j->codes[(i0 + (size_t)i) / 2];
                    j->dst[i0 + (size_t)i] = e2m1_value[b & 15u] * f;
                    j->dst[i0 + (size_t)i + 1] = e2m1_value[b >> 4] * f;
                }
            }
        }
    }
}

mp_status mp_nvfp4_dequantize(float *dst, const uint8_t *codes, const uint8_t *scales, size_t rows, size_t cols,
                              mp_nvfp4_block block, float amax) {
    mp_status rc = check_args("mp_nvfp4_dequantize", dst, codes, scales, rows, cols, block, amax);
    if (rc) return rc;
    if (rows * cols == 0) return MP_OK;
    dequant_job j = {dst, codes, scales, cols, (size_t)block, amax};
    const size_t bands = rows / j.tile, per_band = j.tile * cols;
    mp_parallel_for(bands, PARALLEL_MIN / per_band + 1, 1, dequantize_bands, &j);
    return MP_OK;
}

/* ---- the random Hadamard transform ---- */

mp_status mp_rht16(float *x, size_t rows, size_t cols, uint16_t sign_mask) {
    if (cols % 16) return mp_error(MP_EINVAL, "mp_rht16: cols (%zu) must be a multiple of 16", cols);
    if (cols && rows > SIZE_MAX / cols)
        return mp_error(MP_EINVAL, "mp_rht16: %zu x %zu elements overflow size_t", rows, cols);
    const size_t n = rows * cols;
    if (n && !x) return mp_error(MP_EINVAL, "mp_rht16: NULL buffer for %zu x %zu elements", rows, cols);
    for (size_t g = 0; g < n; g += 16) {
        float v[16];
        for (int i = 0; i < 16; i++) v[i] = (sign_mask >> i) & 1u ? -x[g + (size_t)i] : x[g + (size_t)i];
        for (int h = 1; h < 16; h <<= 1) {
            for (int i = 0; i < 16; i += 2 * h)
                for (int k = i; k < i + h; k++) {
                    const float a = v[k], b = v[k + h];
                    v[k] = a + b;
                    v[k + h] = a - b;
                }
            if (h == 2 || h == 8)
                for (int i = 0; i < 16; i++) v[i] *= 0.5f;
        }
        memcpy(x + g, v, sizeof v);
    }
    return MP_OK;
}
