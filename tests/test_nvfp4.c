/* test_nvfp4.c - NVFP4 quantization, stochastic rounding and the 16-point RHT.
 *
 * The reference below is an independent transcription of Transformer Engine
 * v2.18's NVFP4QuantizerRef._quantize_blockwise_reference and cast_to_fp4x2
 * (transformer_engine/pytorch/custom_recipes/quantization_ref_nvfp4.py), the
 * CUDA global scale (core_nvfp4.cuh) and the dequantize kernel
 * (dequantize_nvfp4.cuh), written as plain float code from those sources and
 * sharing nothing with src/nvfp4.c. Two documented departures from the
 * Python reference, both from TE's CUDA path: amax 0 gives the global scale 1
 * (the reference leaves FLT_MAX), and a -0.0 scaled value codes -0 (the
 * reference's comparisons code it +0).
 */
#include <float.h>
#include <math.h>

#include "check.h"
#include "mixprec/mixprec.h"

/* ---- small deterministic generator for the inputs (splitmix64) ---- */
static uint64_t sm_state = 0x243F6A8885A308D3ull;
static uint64_t sm_next(void) {
    uint64_t z = (sm_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double sm_unit(void) { return (double)(sm_next() >> 11) * 0x1p-53; } /* [0, 1) */
static double sm_gauss(void) {
    double u = sm_unit(), v = sm_unit();
    if (u < 1e-300) u = 1e-300;
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* ---- the reference quantizer ---- */

/* Philox4x32-10, written from Salmon et al. (2011), checked on Random123's
 * known answers below. */
static void philox(uint32_t c[4], uint32_t k0, uint32_t k1) {
    for (int i = 0; i < 10; i++) {
        const uint64_t a = (uint64_t)0xD2511F53u * c[0], b = (uint64_t)0xCD9E8D57u * c[2];
        const uint32_t n0 = (uint32_t)(b >> 32) ^ c[1] ^ k0, n2 = (uint32_t)(a >> 32) ^ c[3] ^ k1;
        c[0] = n0, c[1] = (uint32_t)b, c[2] = n2, c[3] = (uint32_t)a;
        k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
    }
}
static uint8_t stream_byte(uint64_t seed, uint64_t j) {
    uint32_t c[4] = {(uint32_t)(j >> 4), (uint32_t)(j >> 36), 0, 0};
    philox(c, (uint32_t)seed, (uint32_t)(seed >> 32));
    return (uint8_t)(c[(j & 15) >> 2] >> (8 * (j & 3)));
}

/* TE's model of cvt.rs.satfinite.e2m1x4.f32 for one element and its 8
 * random bits (stochastic_round_fp4_e2m1, transformer_engine/common/util/
 * ptx_arch_spec.cuh on TE main), in its own fp32 operations; *past: the
 * rounded magnitude before the clamp was above 6. */
static float te_sr(float x, uint8_t rbits8, int *past) {
    const float u = (float)rbits8 * (1.0f / 256.0f);
    const float a = fabsf(x);
    const float step = a >= 4.0f ? 2.0f : a >= 2.0f ? 1.0f : 0.5f;
    const float t = fmaf(u, step, a);
    const float step_t = t >= 4.0f ? 2.0f : t >= 2.0f ? 1.0f : 0.5f;
    const float inv_step_t = t >= 4.0f ? 0.5f : t >= 2.0f ? 1.0f : 2.0f;
    const float q0 = floorf(t * inv_step_t) * step_t;
    *past = q0 > 6.0f;
    return copysignf(fminf(q0, 6.0f), x != x ? 1.0f : x);
}

static const double E2M1[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
static float e2m1_of(uint8_t c) { return (float)((c & 8) ? -E2M1[c & 7] : E2M1[c & 7]); }

/* E4M3 value of code c (0..126), from the format's definition. */
static double e4m3_pos(int c) {
    const int e = c >> 3, m = c & 7;
    return e ? ldexp(1.0 + m / 8.0, e - 7) : ldexp(m / 8.0, -6);
}

/* torch.clamp(v, -448, 448).to(float8_e4m3fn) for v >= 0 or NaN: nearest,
 * ties to the even code. */
static uint8_t ref_e4m3(float v) {
    if (v != v) return 0x7f;
    if (v > 448.0f) v = 448.0f;
    int best = 0;
    for (int c = 1; c <= 126; c++) {
        const double d = fabs(e4m3_pos(c) - v), db = fabs(e4m3_pos(best) - v);
        if (d < db || (d == db && (c & 1) == 0)) best = c;
    }
    return (uint8_t)best;
}
static float ref_e4m3_f(uint8_t c) { return c == 0x7f ? NAN : (float)e4m3_pos(c & 0x7f); }

/* core_nvfp4.cuh: compute_global_encode_scaling_factor_FP4. */
static float ref_global(float amax) {
    float g = 448.0f * 6.0f / amax;
    if (g > FLT_MAX) g = FLT_MAX; /* fminf(g, FLT_MAX) */
    if (g != g) g = FLT_MAX;      /* fminf returns the number */
    if (amax == 0.0f || g == 0.0f) g = 1.0f;
    return g;
}

/* cast_to_fp4x2 for one value (already clamped to [-6, 6] or NaN). */
static uint8_t ref_fp4(float x) {
    if (x == 0.0f) return signbit(x) ? 8 : 0; /* departure: the sign of zero kept */
    if (x >= 0.0f && x <= 0.25f) return 0;
    if (x > 0.25f && x < 0.75f) return 1;
    if (x >= 0.75f && x <= 1.25f) return 2;
    if (x > 1.25f && x < 1.75f) return 3;
    if (x >= 1.75f && x <= 2.5f) return 4;
    if (x > 2.5f && x < 3.5f) return 5;
    if (x >= 3.5f && x <= 5.0f) return 6;
    if (x > 5.0f) return 7;
    if (x >= -0.25f && x < -0.0f) return 8;
    if (x < -0.25f && x > -0.75f) return 9;
    if (x <= -0.75f && x >= -1.25f) return 10;
    if (x < -1.25f && x > -1.75f) return 11;
    if (x <= -1.75f && x >= -2.5f) return 12;
    if (x < -2.5f && x > -3.5f) return 13;
    if (x <= -3.5f && x >= -5.0f) return 14;
    if (x < -5.0f) return 15;
    return 0; /* NaN: no comparison holds, torch.zeros_like stays */
}

/* _quantize_blockwise_reference, pow_2_scales=False, one code per byte. */
/* One code per byte; sr: stochastic rounding with the documented stream
 * (NULL: the reference's nearest even); past (or NULL): 1 where the rounded
 * magnitude went beyond 6 (finite inputs in blocks with a nonzero scale). */
static void ref_quantize(uint8_t *codes, uint8_t *scales, const float *x, size_t rows, size_t cols, int tile,
                         float amax, const mp_rng *sr, uint8_t *past) {
    const size_t nb = cols / 16;
    const float g = ref_global(amax);
    const float gd = 1.0f / g;
    const float mult = g * (1.0f / 6.0f); /* global_encode_scale * reciprocal(6) */
    for (size_t br = 0; br < rows / (size_t)tile; br++)
        for (size_t bc = 0; bc < nb; bc++) {
            float vmax = 0.0f;
            int nan = 0;
            for (size_t r = br * tile; r < (br + 1) * (size_t)tile; r++)
                for (size_t c = bc * 16; c < bc * 16 + 16; c++) {
                    const float a = fabsf(x[r * cols + c]);
                    if (a != a) nan = 1;
                    else if (a > vmax) vmax = a;
                }
            float dec = nan ? NAN : vmax * mult;
            if (dec > FLT_MAX) dec = FLT_MAX; /* torch.min(dec, finfo.max) */
            const uint8_t s = ref_e4m3(dec);
            scales[br * nb + bc] = s;
            float enc = 1.0f / (ref_e4m3_f(s) * gd);
            if (enc > FLT_MAX) enc = FLT_MAX; /* torch.min keeps NaN */
            for (size_t r = br * tile; r < (br + 1) * (size_t)tile; r++)
                for (size_t c = bc * 16; c < bc * 16 + 16; c++) {
                    const size_t i = r * cols + c;
                    float y = x[i] * enc;
                    int p = fabsf(y) >= 7.0f; /* nearest even rounds 7 and up past 6 */
                    if (sr && y == y) {
                        const float q = te_sr(y, stream_byte(sr->seed, sr->counter + (uint64_t)i), &p);
                        codes[i] = q == 0.0f ? (signbit(q) ? 8 : 0) : ref_fp4(q);
                    } else {
                        if (y > 6.0f) y = 6.0f;
                        if (y < -6.0f) y = -6.0f;
                        codes[i] = ref_fp4(y);
                    }
                    if (past) past[i] = (uint8_t)(p && isfinite(x[i]) && s != 0 && !nan);
                }
        }
}

/* dequantize_fp4_kernel: final_scale = s * amax * (1 / 2688); out = q * final_scale. */
static float ref_dequant(uint8_t code, uint8_t s, float amax) {
    const float f = ref_e4m3_f(s) * amax * (1.0f / (6.0f * 448.0f));
    return e2m1_of(code) * f;
}

static uint8_t nib(const uint8_t *packed, size_t i) { return (uint8_t)((packed[i / 2] >> (4 * (i & 1))) & 15); }

static int same_f32(float a, float b) { return f2u(a) == f2u(b) || (a != a && b != b); }

/* ---- the library on a matrix, checked against the reference ---- */

typedef struct {
    uint64_t n, sat, flushed, nonfinite;
    float amax;
} want_stats;

/* The statistics the header defines, from the reference's codes (RNE). */
static want_stats ref_stats(const float *x, const uint8_t *codes, const uint8_t *scales, const uint8_t *past,
                            size_t rows, size_t cols, int tile) {
    want_stats w = {rows * cols, 0, 0, 0, 0.0f};
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) {
            const float v = x[r * cols + c];
            if (!isfinite(v)) {
                w.nonfinite++;
                continue;
            }
            if (fabsf(v) > w.amax) w.amax = fabsf(v);
            const uint8_t s = scales[(r / (size_t)tile) * (cols / 16) + c / 16];
            const uint8_t q = codes[r * cols + c];
            if (v != 0.0f && (s == 0 || s == 0x7f || (q & 7) == 0)) {
                w.flushed++;
                continue;
            }
            w.sat += past[r * cols + c];
        }
    return w;
}

static long compare_with_ref(const float *x, size_t rows, size_t cols, mp_nvfp4_block block, float amax,
                             const mp_rng *sr, const char *what) {
    const long mark = check_failures;
    const int tile = block == MP_NVFP4_16X16 ? 16 : 1;
    const size_t n = rows * cols, ns = n / 16 / (size_t)tile;
    uint8_t *codes = malloc(n / 2), *scales = malloc(ns), *rc = malloc(n), *rs = malloc(ns), *past = malloc(n);
    float *dq = malloc(n * sizeof(float));
    mp_quant_stats st = {0};
    mp_rng rng = sr ? *sr : (mp_rng){0, 0};
    CHECK(mp_nvfp4_quantize(codes, scales, x, rows, cols, block, amax, sr ? &rng : NULL, &st) == MP_OK, "%s: %s", what,
          mp_last_error());
    CHECK(rng.counter == (sr ? sr->counter + n : 0), "%s: counter", what);
    ref_quantize(rc, rs, x, rows, cols, tile, amax, sr, past);
    for (size_t i = 0; i < ns; i++)
        CHECK(scales[i] == rs[i], "%s: scale %zu is 0x%02x, reference 0x%02x", what, i, scales[i], rs[i]);
    for (size_t i = 0; i < n; i++)
        CHECK(nib(codes, i) == rc[i], "%s: code %zu (x = %a) is %u, reference %u", what, i, (double)x[i], nib(codes, i),
              rc[i]);
    CHECK(mp_nvfp4_dequantize(dq, codes, scales, rows, cols, block, amax) == MP_OK, "%s", mp_last_error());
    for (size_t i = 0; i < n; i++) {
        const uint8_t s = rs[(i / cols / (size_t)tile) * (cols / 16) + (i % cols) / 16];
        const float want = ref_dequant(rc[i], s, amax);
        CHECK(same_f32(dq[i], want), "%s: dequantized %zu is %a, reference %a", what, i, (double)dq[i], (double)want);
    }
    const want_stats w = ref_stats(x, rc, rs, past, rows, cols, tile);
    CHECK(st.n == w.n && st.saturated == w.sat && st.flushed == w.flushed && st.nonfinite == w.nonfinite &&
              same_f32(st.amax, w.amax),
          "%s: stats n %" PRIu64 " sat %" PRIu64 " flushed %" PRIu64 " nonfinite %" PRIu64 " amax %g, want %" PRIu64
          " %" PRIu64 " %" PRIu64 " %" PRIu64 " %g",
          what, st.n, st.saturated, st.flushed, st.nonfinite, (double)st.amax, w.n, w.sat, w.flushed, w.nonfinite,
          (double)w.amax);
    free(codes), free(scales), free(rc), free(rs), free(dq), free(past);
    return check_failures - mark;
}

/* Random matrices over wide magnitude ranges, both block shapes. */
static void test_random_vs_reference(int quick) {
    const long mark = check_failures;
    const int trials = quick ? 60 : 600;
    uint64_t blocks = 0, elems = 0, zero_scale_blocks = 0, sat_scale_blocks = 0;
    for (int t = 0; t < trials; t++) {
        const mp_nvfp4_block block = t % 2 ? MP_NVFP4_16X16 : MP_NVFP4_1X16;
        const size_t rows = 16 * (1 + sm_next() % 4), cols = 16 * (1 + sm_next() % 8);
        const size_t n = rows * cols;
        float *x = malloc(n * sizeof(float));
        const double spread = (double)(1 + sm_next() % 40); /* log2 spread of magnitudes */
        const int shift = (int)(sm_next() % 200) - 100;
        for (size_t i = 0; i < n; i++) {
            double v = sm_gauss() * exp2((2 * sm_unit() - 1) * spread) * ldexp(1.0, shift);
            if (v > 3e38) v = 3e38;
            if (v < -3e38) v = -3e38;
            x[i] = (float)v;
        }
        if (t % 3 == 0) /* an all-zero block (and column of tiles), some -0 */
            for (size_t r = 0; r < rows; r++)
                for (size_t c = 0; c < 16; c++) x[r * cols + c] = (r + c) % 5 ? 0.0f : -0.0f;
        if (t % 5 == 0 && cols >= 32) /* tiny blocks: scale 0 or tiny */
            for (size_t r = 0; r < 16; r++)
                for (size_t c = 16; c < 32; c++) x[r * cols + c] *= (t % 10) ? 1e-7f : 1e-5f;
        if (t % 11 == 0) x[sm_next() % n] = (t % 22) ? INFINITY : -INFINITY;
        if (t % 13 == 0) x[sm_next() % n] = NAN;
        float amax = 0.0f;
        for (size_t i = 0; i < n; i++)
            if (isfinite(x[i]) && fabsf(x[i]) > amax) amax = fabsf(x[i]);
        if (t % 7 == 0) amax *= 0.125f;                          /* a stale, too small amax: saturation */
        else if (t % 7 == 1) amax = fminf(amax * 3.0f, FLT_MAX); /* too large: small codes */
        char what[80];
        const mp_rng sr = {sm_next(), sm_next()};
        const int use_sr = (t / 2) % 2; /* every block shape with both roundings */
        snprintf(what, sizeof what, "random trial %d (%zux%zu, %s, %s)", t, rows, cols,
                 block == MP_NVFP4_16X16 ? "16x16" : "1x16", use_sr ? "SR" : "RNE");
        compare_with_ref(x, rows, cols, block, amax, use_sr ? &sr : NULL, what);
        /* census of the interesting cases the trials reached */
        const int tile = block == MP_NVFP4_16X16 ? 16 : 1;
        uint8_t *rc = malloc(n), *rs = malloc(n / 16 / (size_t)tile);
        ref_quantize(rc, rs, x, rows, cols, tile, amax, NULL, NULL);
        for (size_t i = 0; i < n / 16 / (size_t)tile; i++) {
            zero_scale_blocks += rs[i] == 0;
            sat_scale_blocks += rs[i] == 0x7e;
        }
        blocks += n / 16 / (size_t)tile;
        elems += n;
        free(rc), free(rs), free(x);
    }
    CHECK(zero_scale_blocks > 0 && sat_scale_blocks > 0,
          "the trials reached no zero (%" PRIu64 ") or saturated (%" PRIu64 ") block scale", zero_scale_blocks,
          sat_scale_blocks);
    CHECK_SAY(mark,
              "random vs TE reference (RNE) and TE's cvt.rs model (SR): %d matrices, %" PRIu64 " elements, %" PRIu64
              " blocks (%" PRIu64 " with scale 0, %" PRIu64
              " at 448): codes, scales, dequantized values, stats bit-exact\n",
              trials, elems, blocks, zero_scale_blocks, sat_scale_blocks);
}

/* ---- the order of TE's fp32 operations ----
 * Inputs on which the other orders one could read from the documents give
 * other bits: the block scale block_amax * (g * fp32(1/6)) (v2.14+) against
 * (block_amax / 6) * g (nvfp4.rst), (block_amax * fp32(1/6)) * g (v2.13) and
 * block_amax * (g / 6); the element multiplier 1 / (s * (1 / g)) against g / s. */
static void test_op_order(void) {
    const long mark = check_failures;
    int scale_w[3] = {0, 0, 0}, inv_w = 0, tries = 0;
#define SCALE_DONE (scale_w[0] >= 3 && scale_w[1] >= 3 && scale_w[2] >= 3)
    for (int t = 0; t < 20000 && (!SCALE_DONE || inv_w < 8); t++) {
        tries++;
        const float amax = (float)(0.001 + 1000 * sm_unit());
        const float g = mp_nvfp4_global_scale(amax), mult = g * (1.0f / 6.0f), gd = 1.0f / g;
        /* a block amax whose product in TE's order is an E4M3 tie, or the
         * float just above one (fp32(1/6) > 1/6: the other orders land lower) */
        const int c = 2 * (4 + (int)(sm_next() % 48));
        const float tie = (float)((e4m3_pos(c) + e4m3_pos(c + 1)) / 2);
        const float target = sm_next() % 2 ? tie : nextafterf(tie, INFINITY);
        for (int k = 0; k < 9 && !SCALE_DONE; k++) {
            float a = target / mult; /* and up to 4 ulps either side */
            for (int u = 0; u < (k + 1) / 2; u++) a = nextafterf(a, k % 2 ? INFINITY : -INFINITY);
            if (a * mult != target) continue;
            const uint8_t te = ref_e4m3(a * mult);
            const int d0 = ref_e4m3((a / 6.0f) * g) != te, d1 = ref_e4m3((a * (1.0f / 6.0f)) * g) != te,
                      d2 = ref_e4m3(a * (g / 6.0f)) != te;
            if (!d0 && !d1 && !d2) continue;
            float x[16];
            for (int i = 0; i < 16; i++) x[i] = a * (float)i / 16.0f;
            x[5] = a;
            uint8_t codes[8], sc;
            CHECK(mp_nvfp4_quantize(codes, &sc, x, 1, 16, MP_NVFP4_1X16, amax, NULL, NULL) == MP_OK, "op order");
            CHECK(sc == te, "block amax %a, amax %a: scale 0x%02x, TE's order gives 0x%02x", (double)a, (double)amax,
                  sc, te);
            scale_w[0] += d0, scale_w[1] += d1, scale_w[2] += d2;
        }
        /* an element whose code depends on the multiplier's order */
        const float anchor = amax * (float)(0.1 + 0.9 * sm_unit());
        const uint8_t s = ref_e4m3(anchor * mult);
        const float sf = ref_e4m3_f(s);
        float inv1 = 1.0f / (sf * gd);
        if (inv1 > FLT_MAX) inv1 = FLT_MAX;
        const float inv2 = g / sf;
        if (s == 0 || inv1 == inv2 || inv_w >= 8) continue;
        static const float ties[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
        for (int k = 0; k < 7 * 9; k++) {
            float x = ties[k / 9] / inv1;
            for (int u = 0; u < k % 9; u++) x = nextafterf(x, (k % 9) % 2 ? -INFINITY : INFINITY);
            if (!(x < anchor)) continue;
            if (ref_fp4(x * inv1) == ref_fp4(x * inv2)) continue;
            const float blk[16] = {anchor, x};
            uint8_t codes[8], sc;
            mp_nvfp4_quantize(codes, &sc, blk, 1, 16, MP_NVFP4_1X16, amax, NULL, NULL);
            CHECK(sc == s && nib(codes, 1) == ref_fp4(x * inv1),
                  "x %a in block %a, amax %a: code %u, TE's order gives %u", (double)x, (double)anchor, (double)amax,
                  nib(codes, 1), ref_fp4(x * inv1));
            inv_w++;
            break;
        }
    }
    CHECK(SCALE_DONE && inv_w >= 8, "found %d/%d/%d block-scale and %d multiplier witnesses in %d tries", scale_w[0],
          scale_w[1], scale_w[2], inv_w, tries);
#undef SCALE_DONE
    CHECK_SAY(mark,
              "operation order: block scales where TE's order differs from (a/6)*g: %d, (a*fp32(1/6))*g: %d, "
              "a*(g/6): %d; element codes where 1/(s*(1/g)) differs from g/s: %d (%d tries)\n",
              scale_w[0], scale_w[1], scale_w[2], inv_w, tries);
}

/* ---- hand-checked cases ---- */

static void quant1(uint8_t *codes, uint8_t *scales, const float *x, size_t rows, size_t cols, mp_nvfp4_block b,
                   float amax, mp_quant_stats *st) {
    CHECK(mp_nvfp4_quantize(codes, scales, x, rows, cols, b, amax, NULL, st) == MP_OK, "%s", mp_last_error());
}

static void test_global_scale(void) {
    const long mark = check_failures;
    CHECK(mp_nvfp4_global_scale(2688.0f) == 1.0f, "2688 -> %g", (double)mp_nvfp4_global_scale(2688.0f));
    CHECK(mp_nvfp4_global_scale(1.0f) == 2688.0f, "1 -> %g", (double)mp_nvfp4_global_scale(1.0f));
    CHECK(mp_nvfp4_global_scale(3.0f) == 896.0f, "3");
    CHECK(mp_nvfp4_global_scale(7.0f) == 2688.0f / 7.0f, "7");
    CHECK(mp_nvfp4_global_scale(0.0f) == 1.0f, "0 -> %g", (double)mp_nvfp4_global_scale(0.0f));
    CHECK(mp_nvfp4_global_scale(-0.0f) == 1.0f, "-0");
    CHECK(mp_nvfp4_global_scale(INFINITY) == 1.0f, "inf -> %g", (double)mp_nvfp4_global_scale(INFINITY));
    CHECK(mp_nvfp4_global_scale(NAN) == FLT_MAX, "NaN -> %g (CUDA's fminf)", (double)mp_nvfp4_global_scale(NAN));
    CHECK(mp_nvfp4_global_scale(1e-40f) == FLT_MAX, "subnormal amax -> %g", (double)mp_nvfp4_global_scale(1e-40f));
    CHECK(mp_nvfp4_global_scale(FLT_MAX) == 2688.0f / FLT_MAX, "FLT_MAX");
    int differ = 0;
    for (int i = 0; i < 2000; i++) { /* one division, not 448 * (6 / amax) or (448 / amax) * 6 */
        const float a = (float)ldexp(1 + sm_unit(), (int)(sm_next() % 200) - 100);
        CHECK(mp_nvfp4_global_scale(a) == fminf(2688.0f / a, FLT_MAX), "amax %a", (double)a);
        differ += 448.0f * (6.0f / a) != 2688.0f / a || (448.0f / a) * 6.0f != 2688.0f / a;
    }
    CHECK(differ > 100, "the orders differ on %d amax only", differ);
    CHECK_SAY(mark, "global scale: 2688/amax, 0 and inf -> 1, NaN and overflow -> FLT_MAX\n");
}

/* Every E2M1 value at block scales 2^q round-trips exactly (codes and values). */
static void test_roundtrip(void) {
    const long mark = check_failures;
    int cases = 0;
    for (int q = -9; q <= 8; q++) {
        float x[16];
        for (int i = 0; i < 16; i++) x[i] = ldexpf(e2m1_of((uint8_t)i), q);
        uint8_t codes[8], s;
        float back[16];
        mp_quant_stats st = {0};
        quant1(codes, &s, x, 1, 16, MP_NVFP4_1X16, 2688.0f, &st); /* g = 1 */
        CHECK(mp_e4m3_to_f32(s) == ldexpf(1.0f, q), "q %d: scale %g", q, (double)mp_e4m3_to_f32(s));
        for (int i = 0; i < 16; i++)
            CHECK(nib(codes, (size_t)i) == i, "q %d: code %d is %u", q, i, nib(codes, (size_t)i));
        CHECK(mp_nvfp4_dequantize(back, codes, &s, 1, 16, MP_NVFP4_1X16, 2688.0f) == MP_OK, "%s", mp_last_error());
        for (int i = 0; i < 16; i++)
            CHECK(same_f32(back[i], x[i]), "q %d: %a back as %a", q, (double)x[i], (double)back[i]);
        CHECK(st.saturated == 0 && st.flushed == 0 && st.n == 16, "q %d: stats", q);
        cases++;
    }
    /* a non-power-of-two global scale: amax 6 (g = 448) codes e2m1 * 2^q
     * through the E4M3 scale 448 * 2^q / 6 ... exercise the formula path:
     * codes come back, values within one fp32 rounding of x */
    for (int q = -4; q <= 2; q++) {
        float x[16], back[16];
        for (int i = 0; i < 16; i++) x[i] = ldexpf(e2m1_of((uint8_t)i), q);
        uint8_t codes[8], s;
        quant1(codes, &s, x, 1, 16, MP_NVFP4_1X16, ldexpf(6.0f, q), NULL);
        CHECK(s == 0x7e, "q %d: block at the tensor amax gets 448, got 0x%02x", q, s);
        for (int i = 0; i < 16; i++)
            CHECK(nib(codes, (size_t)i) == i, "amax 6*2^%d: code %d is %u", q, i, nib(codes, (size_t)i));
        mp_nvfp4_dequantize(back, codes, &s, 1, 16, MP_NVFP4_1X16, ldexpf(6.0f, q));
        for (int i = 0; i < 16; i++)
            CHECK(fabsf(back[i] - x[i]) <= fabsf(x[i]) * 0x1p-22f, "q %d: %a -> %a", q, (double)x[i], (double)back[i]);
        cases++;
    }
    CHECK_SAY(mark, "round trip: all 16 E2M1 codes at %d block scales (2^-9 .. 2^8, and at the tensor amax)\n", cases);
}

/* Ties to even and saturation with g = 1 and block scale 1 (anchor 6). */
static void test_ties_and_saturation(void) {
    const long mark = check_failures;
    static const float tie[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
    static const uint8_t want[7] = {0, 2, 2, 4, 4, 6, 6}; /* 0, 1, 1, 2, 2, 4, 4 */
    float x[16];
    uint8_t codes[8], s;
    x[0] = 6.0f;
    for (int i = 0; i < 7; i++) {
        x[1 + i] = tie[i];
        x[8 + i] = -tie[i];
    }
    x[15] = -6.0f;
    quant1(codes, &s, x, 1, 16, MP_NVFP4_1X16, 2688.0f, NULL);
    CHECK(s == 0x38, "anchor scale 0x%02x (1.0)", s);
    for (int i = 0; i < 7; i++) {
        CHECK(nib(codes, 1 + (size_t)i) == want[i], "tie %g -> code %u, want %u", (double)tie[i],
              nib(codes, 1 + (size_t)i), want[i]);
        CHECK(nib(codes, 8 + (size_t)i) == (want[i] | 8), "tie %g -> code %u, want %u", -(double)tie[i],
              nib(codes, 8 + (size_t)i), want[i] | 8);
    }
    /* one ulp either side of each tie goes the nearer way */
    static const uint8_t below[7] = {0, 1, 2, 3, 4, 5, 6}, above[7] = {1, 2, 3, 4, 5, 6, 7};
    for (int i = 0; i < 7; i++) {
        x[1 + i] = nextafterf(tie[i], 0.0f);
        x[8 + i] = nextafterf(tie[i], 7.0f);
    }
    quant1(codes, &s, x, 1, 16, MP_NVFP4_1X16, 2688.0f, NULL);
    for (int i = 0; i < 7; i++) {
        CHECK(nib(codes, 1 + (size_t)i) == below[i], "just below %g -> %u", (double)tie[i], nib(codes, 1 + (size_t)i));
        CHECK(nib(codes, 8 + (size_t)i) == above[i], "just above %g -> %u", (double)tie[i], nib(codes, 8 + (size_t)i));
    }
    /* saturation: the block scale saturates at 448 when amax is too small;
     * 3000/448 = 6.70 rounds to 6 (not past), 3200/448 = 7.14 and 4000/448
     * are past 6 and clamp; inf clamps to 6 and counts as nonfinite */
    float y[16] = {3000.0f, 3200.0f, -4000.0f, INFINITY, -INFINITY, 1.0f};
    for (int i = 6; i < 16; i++) y[i] = 448.0f * E2M1[i % 8];
    mp_quant_stats st = {0};
    quant1(codes, &s, y, 1, 16, MP_NVFP4_1X16, 2688.0f, &st);
    CHECK(s == 0x7e, "saturated block scale 0x%02x", s);
    CHECK(nib(codes, 0) == 7 && nib(codes, 1) == 7 && nib(codes, 2) == 15 && nib(codes, 3) == 7 && nib(codes, 4) == 15,
          "saturating codes %u %u %u %u %u", nib(codes, 0), nib(codes, 1), nib(codes, 2), nib(codes, 3), nib(codes, 4));
    CHECK(nib(codes, 5) == 0, "1/448 -> 0, got %u", nib(codes, 5));
    for (int i = 6; i < 16; i++)
        CHECK(nib(codes, (size_t)i) == i % 8, "448 * %g -> %u", E2M1[i % 8], nib(codes, (size_t)i));
    CHECK(st.saturated == 2 && st.nonfinite == 2 && st.flushed == 1 && st.n == 16 && st.amax == 4000.0f,
          "saturation stats: sat %" PRIu64 " nonfinite %" PRIu64 " flushed %" PRIu64 " amax %g", st.saturated,
          st.nonfinite, st.flushed, (double)st.amax);
    CHECK_SAY(mark,
              "ties to even (0.25 0.75 1.25 1.75 2.5 3.5 5, both signs, +-1 ulp), saturation past 6, inf -> +-6\n");
}

/* Zero blocks, tiny blocks (scale 0), a NaN block, and -0. */
static void test_zero_tiny_nan_blocks(void) {
    const long mark = check_failures;
    float x[64], back[64];
    uint8_t codes[32], s[4];
    for (int i = 0; i < 16; i++) x[i] = (i & 1) ? -0.0f : 0.0f;    /* block 0: zeros */
    for (int i = 16; i < 32; i++) x[i] = (i & 1) ? -1e-6f : 1e-6f; /* block 1: tiny */
    for (int i = 32; i < 48; i++) x[i] = (float)(i - 40);          /* block 2: NaN */
    x[37] = NAN;
    for (int i = 48; i < 64; i++) x[i] = (float)(i - 56) * 100.0f; /* block 3: normal, amax 800 */
    mp_quant_stats st = {0};
    st.amax = 1000.0f; /* max with the value already there */
    quant1(codes, s, x, 1, 64, MP_NVFP4_1X16, 800.0f, &st);
    CHECK(s[0] == 0, "zero block scale 0x%02x", s[0]);
    for (int i = 0; i < 16; i++)
        CHECK(nib(codes, (size_t)i) == ((i & 1) ? 8u : 0u), "zero %d -> code %u (sign kept)", i, nib(codes, (size_t)i));
    /* 1e-6 * (2688/800) / 6 = 5.6e-7 -> E4M3 0; TE codes x * FLT_MAX -> +-6 */
    CHECK(s[1] == 0, "tiny block scale 0x%02x", s[1]);
    for (int i = 16; i < 32; i++)
        CHECK(nib(codes, (size_t)i) == ((i & 1) ? 15u : 7u), "tiny %d -> code %u (TE: +-6 under scale 0)", i,
              nib(codes, (size_t)i));
    CHECK(s[2] == 0x7f, "NaN block scale 0x%02x", s[2]);
    for (int i = 32; i < 48; i++)
        CHECK(nib(codes, (size_t)i) == 0, "NaN block %d -> code %u", i, nib(codes, (size_t)i));
    CHECK(s[3] == mp_f32_to_e4m3_sat(800.0f * (mp_nvfp4_global_scale(800.0f) * (1.0f / 6.0f))) && s[3] == 0x7e,
          "block at amax: 0x%02x", s[3]);
    CHECK(mp_nvfp4_dequantize(back, codes, s, 1, 64, MP_NVFP4_1X16, 800.0f) == MP_OK, "%s", mp_last_error());
    for (int i = 0; i < 16; i++) CHECK(same_f32(back[i], x[i]), "zero %d back as %a", i, (double)back[i]);
    for (int i = 16; i < 32; i++)
        CHECK(back[i] == 0.0f && signbit(back[i]) == signbit(x[i]), "tiny %d back as %a", i, (double)back[i]);
    for (int i = 32; i < 48; i++) CHECK(isnan(back[i]), "NaN block %d back as %a", i, (double)back[i]);
    /* within half the widest E2M1 spacing (2) times the unit s * amax / 2688 */
    const float unit = 448.0f * 800.0f / 2688.0f;
    for (int i = 48; i < 64; i++)
        CHECK(fabsf(back[i] - x[i]) <= unit * 1.0001f, "normal %d: %g back as %g", i, (double)x[i], (double)back[i]);
    /* stats: the NaN block's 14 finite nonzero values and the 16 tiny ones are
     * flushed; the normal block codes 0 only for x = 0 (not counted) */
    CHECK(st.n == 64 && st.nonfinite == 1 && st.flushed == 30 && st.saturated == 0 && st.amax == 1000.0f,
          "stats n %" PRIu64 " nonfinite %" PRIu64 " flushed %" PRIu64 " sat %" PRIu64 " amax %g", st.n, st.nonfinite,
          st.flushed, st.saturated, (double)st.amax);
    mp_quant_stats st2 = {0};
    quant1(codes, s, x, 1, 64, MP_NVFP4_1X16, 800.0f, &st2);
    CHECK(st2.amax == 800.0f, "amax stat %g, want 800 (NaN skipped)", (double)st2.amax);
    /* an all-zero tensor with amax 0: everything 0 */
    float z[32] = {0};
    uint8_t zc[16], zs[2];
    quant1(zc, zs, z, 1, 32, MP_NVFP4_1X16, 0.0f, NULL);
    float zb[32];
    mp_nvfp4_dequantize(zb, zc, zs, 1, 32, MP_NVFP4_1X16, 0.0f);
    int ok = zs[0] == 0 && zs[1] == 0;
    for (int i = 0; i < 16; i++) ok &= zc[i] == 0;
    for (int i = 0; i < 32; i++) ok &= f2u(zb[i]) == 0;
    CHECK(ok, "all-zero tensor with amax 0");
    CHECK_SAY(mark, "zero block (scale 0, codes +-0), tiny block (scale 0, TE's +-6 codes, value 0, flushed), NaN "
                    "block (scale NaN, codes 0, NaN back)\n");
}

/* 16x16: one scale per tile, from the tile's amax, used by all 16 rows. */
static void test_tile(void) {
    const long mark = check_failures;
    enum { R = 32, C = 32 };
    float x[R * C];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) x[r * C + c] = 0.5f;
    x[15 * C + 3] = 6.0f;    /* tile (0,0): max in its last row */
    x[16 * C + 31] = -12.0f; /* tile (1,1): max in its first row, last column */
    x[20 * C + 5] = 3.0f;    /* tile (1,0) */
    uint8_t codes[R * C / 2], s[4], s1[R * C / 16];
    mp_quant_stats st = {0};
    quant1(codes, s, x, R, C, MP_NVFP4_16X16, 12.0f, &st);
    const float g = mp_nvfp4_global_scale(12.0f), m = g * (1.0f / 6.0f); /* 224, 37.33 */
    const float tmax[4] = {6.0f, 0.5f, 3.0f, 12.0f};
    for (int t = 0; t < 4; t++)
        CHECK(s[t] == mp_f32_to_e4m3_sat(tmax[t] * m), "tile %d scale 0x%02x, want e4m3(%g)", t, s[t],
              (double)(tmax[t] * m));
    /* row 0 of tile (0,0) is scaled by the max in row 15: 0.5 / 1 -> 0.5 (code 1) */
    CHECK(nib(codes, 0) == 1 && nib(codes, 15 * C + 3) == 7, "tile (0,0) codes %u %u", nib(codes, 0),
          nib(codes, 15 * C + 3));
    /* tile (1,1): 0.5 at scale 12/6 = 2 -> 0.25 -> 0 (tie to even) on all 16 rows */
    int zeros = 0;
    for (int r = 16; r < 32; r++)
        for (int c = 16; c < 32; c++) zeros += nib(codes, (size_t)(r * C + c)) == 0;
    CHECK(zeros == 255 && nib(codes, 16 * C + 31) == 15, "tile (1,1): %d zero codes, max code %u", zeros,
          nib(codes, 16 * C + 31));
    CHECK(st.flushed == 255, "flushed %" PRIu64 " (tile (1,1)'s 0.5s)", st.flushed);
    /* 1x16 on the same data differs: row 16's blocks have their own scales */
    quant1(codes, s1, x, R, C, MP_NVFP4_1X16, 12.0f, NULL);
    CHECK(s1[0] == mp_f32_to_e4m3_sat(0.5f * m) && s1[15 * 2] == s[0], "1x16 scales 0x%02x 0x%02x", s1[0], s1[30]);
    CHECK_SAY(mark, "16x16 tiles: one scale from the tile's amax, shared by its 16 rows\n");
}

/* ---- stochastic rounding ---- */

/* The random byte of each element of a 1x16 row at (seed, counter), read
 * back through the rounding: with g = 1 and block scale 1 (an anchor of +-6),
 * the value k/512 (k/256 of the step 0.5) rounds up iff r >= 256 - k. */
static void recover_bytes(uint64_t seed, uint64_t counter, uint8_t r[16]) {
    int first_up[16];
    for (int i = 0; i < 16; i++) first_up[i] = 256;
    for (int anchor = 0; anchor < 2; anchor++) {
        const int a = anchor ? 15 : 0;
        for (int k = 1; k < 256; k++) {
            float x[16];
            uint8_t codes[8], s;
            for (int i = 0; i < 16; i++) x[i] = (float)k / 512.0f;
            x[a] = 6.0f;
            mp_rng rng = {seed, counter};
            CHECK(mp_nvfp4_quantize(codes, &s, x, 1, 16, MP_NVFP4_1X16, 2688.0f, &rng, NULL) == MP_OK, "sr");
            for (int i = 0; i < 16; i++)
                if (i != a && nib(codes, (size_t)i) == 1 && k < first_up[i]) first_up[i] = k;
        }
    }
    for (int i = 0; i < 16; i++) r[i] = (uint8_t)(256 - first_up[i]); /* never up: r = 0 */
}

static void test_sr_stream(void) {
    const long mark = check_failures;
    /* the in-test Philox against Random123's known answers */
    static const uint32_t kat[3][7] = {
        {0, 0, 0, 0, 0, 0, 0},
        {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0},
        {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u, 0}};
    static const uint32_t out[3][4] = {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u},
                                       {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu},
                                       {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}};
    for (int t = 0; t < 3; t++) {
        uint32_t c[4] = {kat[t][0], kat[t][1], kat[t][2], kat[t][3]};
        philox(c, kat[t][4], kat[t][5]);
        CHECK(!memcmp(c, out[t], sizeof c), "Philox4x32-10 known answer %d", t);
    }
    /* the library's bytes at seed 0, counter 0 are the first KAT's output */
    uint8_t r[16];
    recover_bytes(0, 0, r);
    for (int i = 0; i < 16; i++)
        CHECK(r[i] == (uint8_t)(out[0][i / 4] >> (8 * (i % 4))), "seed 0 byte %d: 0x%02x", i, r[i]);
    /* and elsewhere in the stream, straddling Philox blocks */
    static const uint64_t where[3][2] = {{0x0123456789abcdefull, 5}, {42, 0xfffffffffffffff8ull}, {7, 1000003}};
    for (int w = 0; w < 3; w++) {
        recover_bytes(where[w][0], where[w][1], r);
        for (int i = 0; i < 16; i++)
            CHECK(r[i] == stream_byte(where[w][0], where[w][1] + (uint64_t)i),
                  "seed %" PRIu64 " counter %" PRIu64 " byte %d: 0x%02x, want 0x%02x", where[w][0], where[w][1], i,
                  r[i], stream_byte(where[w][0], where[w][1] + (uint64_t)i));
    }
    CHECK_SAY(mark, "SR stream: Philox4x32-10 (Random123 known answers), byte j = byte j%%16 of block j/16, read back "
                    "through the rounding\n");
}

/* Mean of many stochastic roundings: the expectation is lo + step *
 * floor(256 f) / 256 (8 random bits, as cvt.rs); the test allows 5 standard
 * deviations of the binomial mean, step * sqrt(p (1 - p) / N). */
static void test_sr_mean(int quick) {
    const long mark = check_failures;
    static const float vals[] = {0.25f, 0.3f, 0.1f, 1.3f, 2.75f, 3.2f, 4.5f, 5.9f, -1.3f, -4.5f, 0.001f};
    const size_t rows = quick ? 512 : 8192, cols = 16;
    float *x = malloc(rows * cols * sizeof(float));
    uint8_t *codes = malloc(rows * cols / 2), *s = malloc(rows);
    mp_rng rng = {0x5eedull, 123};
    for (size_t v = 0; v < sizeof vals / sizeof vals[0]; v++) {
        const float val = vals[v];
        for (size_t r = 0; r < rows; r++) {
            x[r * cols] = (r & 1) ? -6.0f : 6.0f;
            for (size_t c = 1; c < cols; c++) x[r * cols + c] = val;
        }
        mp_quant_stats st = {0};
        CHECK(mp_nvfp4_quantize(codes, s, x, rows, cols, MP_NVFP4_1X16, 2688.0f, &rng, &st) == MP_OK, "%s",
              mp_last_error());
        double sum = 0;
        for (size_t r = 0; r < rows; r++)
            for (size_t c = 1; c < cols; c++) sum += e2m1_of(nib(codes, r * cols + c));
        const double N = (double)(rows * (cols - 1)), mean = sum / N;
        const double a = fabs(val), step = a >= 4 ? 2 : a >= 2 ? 1 : 0.5, lo = floor(a / step) * step;
        const double f = (a - lo) / step, p = floor(256 * f) / 256;
        const double expect = copysign(lo + step * p, val);
        const double sd = step * sqrt(p * (1 - p) / N);
        CHECK(fabs(mean - expect) <= 5 * sd + 1e-12, "SR mean of %g: %.6f, expected %.6f (sd %.2g)", (double)val, mean,
              expect, sd);
        CHECK(fabs(expect - val) < step / 256 + 1e-9, "SR bias of %g: %g", (double)val, expect - val);
        CHECK(st.saturated == 0, "SR stats");
    }
    /* representable values never move, at any seed */
    int moved = 0;
    for (uint64_t seed = 0; seed < 64; seed++) {
        float y[32];
        for (int i = 0; i < 32; i++) y[i] = e2m1_of((uint8_t)(i & 15));
        y[0] = 6.0f, y[16] = 6.0f;
        uint8_t c2[16], s2[2];
        mp_rng g = {seed * 0x9E3779B97F4A7C15ull, seed};
        mp_nvfp4_quantize(c2, s2, y, 1, 32, MP_NVFP4_1X16, 2688.0f, &g, NULL);
        for (int i = 1; i < 32; i++) moved += i != 16 && nib(c2, (size_t)i) != (i & 15);
    }
    CHECK(moved == 0, "%d representable values moved under SR", moved);
    /* past 6: amax 6 (g = 448) and a block of 6.5: its scale saturates at
     * 448, 448 * fp32(1/448) rounds to 1, so y = 6.5 exactly; RNE gives 6 (not
     * past), SR rounds up to 8 w.p. 64/256, clamps to 6 and counts saturated */
    float y[16];
    for (int i = 0; i < 16; i++) y[i] = 6.5f;
    uint8_t c3[8], s3;
    uint64_t sat = 0, tot = 0;
    mp_quant_stats rn = {0};
    quant1(c3, &s3, y, 1, 16, MP_NVFP4_1X16, 6.0f, &rn);
    CHECK(rn.saturated == 0 && s3 == 0x7e && nib(c3, 0) == 7, "RNE 6.5: sat %" PRIu64 " scale 0x%02x", rn.saturated,
          s3);
    for (uint64_t k = 0; k < 256; k++) {
        mp_quant_stats st = {0};
        mp_rng g = {99, k * 16};
        mp_nvfp4_quantize(c3, &s3, y, 1, 16, MP_NVFP4_1X16, 6.0f, &g, &st);
        int all6 = 1;
        for (int i = 0; i < 16; i++) all6 &= nib(c3, (size_t)i) == 7;
        CHECK(all6 && s3 == 0x7e, "6.5 under SR clamps to 6");
        sat += st.saturated, tot += 16;
    }
    const double ps = 64.0 / 256; /* 6.5 = 6 + 0.25 * 2: up w.p. 64/256 */
    CHECK(fabs((double)sat / (double)tot - ps) <= 5 * sqrt(ps * (1 - ps) / (double)tot), "SR saturation rate %g",
          (double)sat / (double)tot);
    free(x), free(codes), free(s);
    CHECK_SAY(mark, "SR: means within 5 sd of lo + step*floor(256f)/256 (bias < step/256), representable values fixed, "
                    "6.5 -> 6 (saturated w.p. 1/4)\n");
}

static void test_sr_determinism(void) {
    const long mark = check_failures;
    const size_t rows = 256, cols = 512, n = rows * cols; /* above the parallel threshold */
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (float)(sm_gauss() * exp2(8 * sm_unit() - 4));
    float amax = 0;
    for (size_t i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[i]));
    uint8_t *c1 = malloc(n / 2), *c2 = malloc(n / 2), *c3 = malloc(n / 2), *s1 = malloc(n / 16), *s2 = malloc(n / 16);
    for (int b = 0; b < 2; b++) {
        const mp_nvfp4_block blk = b ? MP_NVFP4_16X16 : MP_NVFP4_1X16;
        const size_t ns = b ? n / 256 : n / 16;
        const int threads = mp_get_threads();
        mp_set_threads(1);
        mp_rng r1 = {1234, 77};
        CHECK(mp_nvfp4_quantize(c1, s1, x, rows, cols, blk, amax, &r1, NULL) == MP_OK, "%s", mp_last_error());
        CHECK(r1.counter == 77 + n, "counter %" PRIu64 ", want %zu", r1.counter, 77 + n);
        mp_set_threads(threads > 1 ? threads : 2);
        mp_rng r2 = {1234, 77};
        mp_nvfp4_quantize(c2, s2, x, rows, cols, blk, amax, &r2, NULL);
        mp_set_threads(threads);
        CHECK(!memcmp(c1, c2, n / 2) && !memcmp(s1, s2, ns), "SR bits depend on the thread count");
        /* two calls (rows split at a multiple of 16) with the counter carried = one call */
        mp_rng r3 = {1234, 77};
        mp_nvfp4_quantize(c3, s2, x, 96, cols, blk, amax, &r3, NULL);
        mp_nvfp4_quantize(c3 + 96 * cols / 2, s2 + (b ? 96 * cols / 256 : 96 * cols / 16), x + 96 * cols, rows - 96,
                          cols, blk, amax, &r3, NULL);
        CHECK(!memcmp(c1, c3, n / 2) && r3.counter == r1.counter, "split calls differ");
        /* another seed rounds differently; RNE differs from SR */
        mp_rng r4 = {1235, 77};
        mp_nvfp4_quantize(c3, s2, x, rows, cols, blk, amax, &r4, NULL);
        CHECK(memcmp(c1, c3, n / 2) != 0, "seed ignored");
        mp_nvfp4_quantize(c3, s2, x, rows, cols, blk, amax, NULL, NULL);
        CHECK(memcmp(c1, c3, n / 2) != 0 && !memcmp(s1, s2, ns), "SR equals RNE, or changed the scales");
    }
    free(x), free(c1), free(c2), free(c3), free(s1), free(s2);
    CHECK_SAY(mark,
              "SR: same seed/counter -> same bits on 1 and 2 threads, split calls = one call, counter += rows*cols\n");
}

/* ---- RHT ---- */

static double had(int r, int c) { return __builtin_popcount((unsigned)(r & c)) & 1 ? -1.0 : 1.0; }

static void test_rht(int quick) {
    const long mark = check_failures;
    const double u = 0x1p-24, g4 = 4 * u / (1 - 4 * u); /* gamma_4: a depth-4 tree of fp32 sums */
    /* hand-computed: x = 1..16, no signs: H x / 4 = (34, -2, -4, 0, -8, 0, 0, 0, -16, 0, ...) */
    float v[16];
    for (int i = 0; i < 16; i++) v[i] = (float)(i + 1);
    CHECK(mp_rht16(v, 1, 16, 0) == MP_OK, "%s", mp_last_error());
    static const float want[16] = {34, -2, -4, 0, -8, 0, 0, 0, -16, 0, 0, 0, 0, 0, 0, 0};
    for (int i = 0; i < 16; i++)
        CHECK(v[i] == want[i], "H(1..16)/4 [%d] = %g, want %g", i, (double)v[i], (double)want[i]);
    /* TE's sign mask on ones: y_0 = (6 - 10) / 4 = -1; the rest from the matrix */
    const uint16_t te_mask = 0xD7E8;
    static const int te_signs[16] = {1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1};
    /* the mask from the signs as TE's get_sign_from_vector builds it (bit i:
     * sign i is -1). Note: gcc 12.2 -O2 folds the per-bit comparison
     * ((mask >> i) & 1) == (signs[i] < 0) over this static array wrongly. */
    unsigned built = 0;
    for (int i = 0; i < 16; i++) {
        if (te_signs[i] < 0) built |= 1u << i;
        v[i] = 1.0f;
    }
    CHECK(built == te_mask, "TE's signs give the mask 0x%04x", built);
    mp_rht16(v, 1, 16, te_mask);
    CHECK(v[0] == -1.0f, "y_0 = %g", (double)v[0]);
    for (int r = 0; r < 16; r++) {
        double y = 0;
        for (int c = 0; c < 16; c++) y += had(r, c) * te_signs[c] / 4.0;
        CHECK(v[r] == (float)y, "ones with TE's signs [%d] = %g, want %g", r, (double)v[r], y);
    }
    /* random rows: against the matrix product in double, round trips, dot products */
    const size_t rows = quick ? 64 : 1024, cols = 256;
    float *a = malloc(rows * cols * sizeof(float)), *b = malloc(rows * cols * sizeof(float));
    float *a0 = malloc(rows * cols * sizeof(float)), *b0 = malloc(rows * cols * sizeof(float));
    for (size_t i = 0; i < rows * cols; i++) {
        a0[i] = a[i] = (float)(sm_gauss() * exp2(12 * sm_unit() - 6));
        b0[i] = b[i] = (float)(sm_gauss() * exp2(12 * sm_unit() - 6));
    }
    mp_rht16(a, rows, cols, te_mask);
    mp_rht16(b, rows, cols, te_mask);
    double worst_mat = 0, worst_dot = 0, worst_rt = 0;
    for (size_t r = 0; r < rows; r++) {
        double dot0 = 0, dot1 = 0, bound = 0, absdot = 0;
        for (size_t g = 0; g < cols; g += 16) {
            const float *x = a0 + r * cols + g, *y = a + r * cols + g;
            double l1a = 0, l1b = 0;
            for (int i = 0; i < 16; i++) l1a += fabs(x[i]), l1b += fabs(b0[r * cols + g + (size_t)i]);
            for (int i = 0; i < 16; i++) {
                double e = 0;
                for (int c = 0; c < 16; c++) e += had(i, c) * te_signs[c] * x[c];
                e /= 4;
                const double err = fabs(y[i] - e), lim = g4 * l1a / 4;
                CHECK(err <= lim, "row %zu group %zu [%d]: %g vs %g (bound %g)", r, g, i, (double)y[i], e, lim);
                if (lim > 0 && err / lim > worst_mat) worst_mat = err / lim;
            }
            bound += 2.01 * g4 * l1a * l1b;
        }
        for (size_t i = 0; i < cols; i++) {
            dot0 += (double)a0[r * cols + i] * b0[r * cols + i];
            dot1 += (double)a[r * cols + i] * b[r * cols + i];
            absdot +=
                fabs((double)a0[r * cols + i] * b0[r * cols + i]) + fabs((double)a[r * cols + i] * b[r * cols + i]);
        }
        /* |a'.b' - a.b| <= sum over groups of 2 gamma_4 |a|_1 |b|_1 (first order),
         * plus the double sums' own error */
        const double lim = bound + 1e-12 * absdot;
        CHECK(fabs(dot1 - dot0) <= lim, "row %zu: dot %g after, %g before (bound %g)", r, dot1, dot0, lim);
        if (fabs(dot1 - dot0) / lim > worst_dot) worst_dot = fabs(dot1 - dot0) / lim;
    }
    /* inverse: (H D / 4)^-1 = D H / 4: rht with mask 0, then the signs */
    mp_rht16(a, rows, cols, 0);
    for (size_t r = 0; r < rows; r++)
        for (size_t g = 0; g < cols; g += 16) {
            double l1 = 0;
            for (int i = 0; i < 16; i++) l1 += fabs(a0[r * cols + g + (size_t)i]);
            for (int i = 0; i < 16; i++) {
                float *p = &a[r * cols + g + (size_t)i];
                if (te_signs[i] < 0) *p = -*p;
                const double err = fabs(*p - a0[r * cols + g + (size_t)i]), lim = 2.01 * g4 * l1;
                CHECK(err <= lim, "round trip row %zu [%zu]: %g vs %g", r, g + (size_t)i, (double)*p,
                      (double)a0[r * cols + g + (size_t)i]);
                if (lim > 0 && err / lim > worst_rt) worst_rt = err / lim;
            }
        }
    /* with no signs, H/4 twice is the identity (H16 H16 = 16 I) */
    memcpy(b, b0, rows * cols * sizeof(float));
    mp_rht16(b, rows, cols, 0);
    mp_rht16(b, rows, cols, 0);
    for (size_t r = 0; r < rows; r++)
        for (size_t g = 0; g < cols; g += 16) {
            double l1 = 0;
            for (int i = 0; i < 16; i++) l1 += fabs(b0[r * cols + g + (size_t)i]);
            for (int i = 0; i < 16; i++)
                CHECK(fabs(b[r * cols + g + (size_t)i] - b0[r * cols + g + (size_t)i]) <= 2.01 * g4 * l1, "H/4 twice");
        }
    /* large values: no intermediate overflow while |x| <= FLT_MAX / 8 */
    float big[16];
    for (int i = 0; i < 16; i++) big[i] = 2.5e37f;
    mp_rht16(big, 1, 16, 0);
    CHECK(big[0] == 4 * 2.5e37f, "H(2.5e37 ones)/4 [0] = %g", (double)big[0]);
    for (int i = 1; i < 16; i++) CHECK(big[i] == 0.0f, "H(2.5e37 ones)/4 [%d] = %g", i, (double)big[i]);
    /* exact in binary: a group of small integers twice through H/4 */
    float e[32];
    for (int i = 0; i < 32; i++) e[i] = (float)((i * 7) % 13) - 6.0f;
    float e0[32];
    memcpy(e0, e, sizeof e);
    mp_rht16(e, 2, 16, 0);
    mp_rht16(e, 2, 16, 0);
    CHECK(!memcmp(e, e0, sizeof e), "integers twice through H/4 are not exact");
    free(a), free(b), free(a0), free(b0);
    CHECK_SAY(mark,
              "RHT: hand-computed vectors, TE mask 0xD7E8, |err| <= gamma4*|x|_1/4 (worst %.2f of it), round trip "
              "(%.2f), dot products (%.3f of the bound)\n",
              worst_mat, worst_rt, worst_dot);
}

/* ---- errors ---- */

static void test_errors(void) {
    const long mark = check_failures;
    float x[512] = {0}, d[512];
    uint8_t c[256], s[32];
    mp_rng rng = {1, 5};
    CHECK(mp_nvfp4_quantize(c, s, x, 2, 24, MP_NVFP4_1X16, 1.0f, NULL, NULL) == MP_EINVAL, "cols 24");
    CHECK(strstr(mp_last_error(), "cols") != NULL, "message: %s", mp_last_error());
    CHECK(mp_nvfp4_quantize(c, s, x, 8, 32, MP_NVFP4_16X16, 1.0f, NULL, NULL) == MP_EINVAL, "rows 8 with 16x16");
    CHECK(mp_nvfp4_quantize(c, s, x, 16, 32, MP_NVFP4_16X16, 1.0f, NULL, NULL) == MP_OK, "rows 16 with 16x16");
    CHECK(mp_nvfp4_quantize(c, s, x, 8, 32, MP_NVFP4_1X16, 1.0f, NULL, NULL) == MP_OK, "rows 8 with 1x16");
    CHECK(mp_nvfp4_quantize(c, s, x, 1, 16, (mp_nvfp4_block)2, 1.0f, NULL, NULL) == MP_EINVAL, "block 2");
    CHECK(mp_nvfp4_quantize(c, s, x, 1, 16, (mp_nvfp4_block)0, 1.0f, NULL, NULL) == MP_EINVAL, "block 0");
    CHECK(mp_nvfp4_quantize(NULL, s, x, 1, 16, MP_NVFP4_1X16, 1.0f, NULL, NULL) == MP_EINVAL, "NULL codes");
    CHECK(mp_nvfp4_quantize(c, NULL, x, 1, 16, MP_NVFP4_1X16, 1.0f, NULL, NULL) == MP_EINVAL, "NULL scales");
    CHECK(mp_nvfp4_quantize(c, s, NULL, 1, 16, MP_NVFP4_1X16, 1.0f, NULL, NULL) == MP_EINVAL, "NULL src");
    CHECK(mp_nvfp4_quantize(NULL, NULL, NULL, 0, 16, MP_NVFP4_1X16, 1.0f, &rng, NULL) == MP_OK && rng.counter == 5,
          "empty matrix: OK, counter kept");
    CHECK(mp_nvfp4_quantize(c, s, x, 1, 16, MP_NVFP4_1X16, NAN, &rng, NULL) == MP_EINVAL, "amax NaN");
    CHECK(mp_nvfp4_quantize(c, s, x, 1, 16, MP_NVFP4_1X16, INFINITY, NULL, NULL) == MP_EINVAL, "amax inf");
    CHECK(mp_nvfp4_quantize(c, s, x, 1, 16, MP_NVFP4_1X16, -1.0f, NULL, NULL) == MP_EINVAL, "amax -1");
    CHECK(strstr(mp_last_error(), "amax") != NULL, "message: %s", mp_last_error());
    CHECK(rng.counter == 5, "a failed call moved the counter");
    CHECK(mp_nvfp4_quantize(c, s, x, 1, 16, MP_NVFP4_1X16, -0.0f, NULL, NULL) == MP_OK, "amax -0");
    CHECK(mp_nvfp4_quantize(c, s, x, SIZE_MAX / 8, 32, MP_NVFP4_1X16, 1.0f, NULL, NULL) == MP_EINVAL, "overflow");
    CHECK(mp_nvfp4_dequantize(d, c, s, 1, 24, MP_NVFP4_1X16, 1.0f) == MP_EINVAL, "dequantize cols 24");
    CHECK(mp_nvfp4_dequantize(d, c, s, 8, 16, MP_NVFP4_16X16, 1.0f) == MP_EINVAL, "dequantize rows 8");
    CHECK(mp_nvfp4_dequantize(d, c, NULL, 1, 16, MP_NVFP4_1X16, 1.0f) == MP_EINVAL, "dequantize NULL scales");
    CHECK(mp_nvfp4_dequantize(NULL, c, s, 1, 16, MP_NVFP4_1X16, 1.0f) == MP_EINVAL, "dequantize NULL dst");
    CHECK(mp_nvfp4_dequantize(d, c, s, 1, 16, (mp_nvfp4_block)3, 1.0f) == MP_EINVAL, "dequantize block 3");
    CHECK(mp_nvfp4_dequantize(d, c, s, 1, 16, MP_NVFP4_1X16, INFINITY) == MP_EINVAL, "dequantize amax inf");
    CHECK(mp_rht16(x, 2, 24, 0) == MP_EINVAL, "rht cols 24");
    CHECK(mp_rht16(NULL, 2, 16, 0) == MP_EINVAL, "rht NULL");
    CHECK(mp_rht16(NULL, 0, 16, 0) == MP_OK, "rht empty");
    CHECK_SAY(
        mark,
        "errors: cols %% 16, rows %% 16 (16x16), block enum, NULL buffers, amax NaN/inf/negative, size overflow\n");
}

int main(int argc, char **argv) {
    const int quick = test_quick(argc, argv);
    test_global_scale();
    test_roundtrip();
    test_ties_and_saturation();
    test_zero_tiny_nan_blocks();
    test_tile();
    test_op_order();
    test_random_vs_reference(quick);
    test_sr_stream();
    test_sr_mean(quick);
    test_sr_determinism();
    test_rht(quick);
    test_errors();
    return check_report("nvfp4");
}
