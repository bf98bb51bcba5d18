/* test_recipe.c - the quantized operands of the fp8/fp4 recipes (recipe.h)
 * against the quantizers of mx.h applied by hand: values bit for bit in both
 * directions, padding, the factors, scale state across steps, stochastic
 * rounding's counter, thread-count independence; a GEMM on the operands
 * against fp64 sums of the dequantized values; and the GPT training a few
 * steps under every recipe. */
#include <math.h>

#include "check.h"
#include "internal.h"

#ifdef MP_X86
#include <xmmintrin.h>
#endif

static int quick;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double urand(void) { /* [0, 1) */
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) * 0x1p-53;
}

/* Values of mixed magnitudes: a normal-ish spread times 2^[-e, e], some zeros. */
static void fill(float *x, size_t n, int e) {
    for (size_t i = 0; i < n; i++) {
        const double u = urand();
        x[i] = u < 0.03 ? 0.0f : (float)((urand() - 0.5) * ldexp(1.0, (int)(urand() * (2 * e + 1)) - e));
    }
}

/* E2M1 value times E4M3 block scale, without the global scale. */
static void nvfp4_values(float *v, const uint8_t *codes, const uint8_t *scales, size_t rows, size_t cols, int tile) {
    for (size_t i = 0; i < rows * cols; i++) {
        const size_t r = i / cols, c = i % cols;
        const uint8_t s = scales[tile ? (r / 16) * (cols / 16) + c / 16 : r * (cols / 16) + c / 16];
        v[i] = mp_e2m1_to_f32((uint8_t)((codes[i / 2] >> (4 * (i % 2))) & 15)) * mp_e4m3_to_f32(s);
    }
}

static const char *const recipes[] = {"fp8-delayed", "fp8-current", "mxfp8", "nvfp4"};

/* The expected values of an operand quantized along its columns (each row in
 * blocks), written by hand from mx.h: src rows x cols fp32, padded to cp. */
static void expect_rows(float *v, float *factor, const float *src, size_t rows, size_t cols, const mp_recipe *r,
                        mp_qrole role, float scale, float amax) {
    const size_t bk = r->kind == MP_RECIPE_MXFP8 ? 32 : r->kind == MP_RECIPE_NVFP4 ? 16 : 1;
    const size_t cp = (cols + bk - 1) / bk * bk;
    float *row = calloc(cp, sizeof *row), *out = calloc(cp, sizeof *out);
    uint8_t *codes = calloc(cp, 1), *scales = calloc(cp, 1);
    const mp_dtype fmt = mp_qrole_format(r, role);
    for (size_t i = 0; i < rows; i++) {
        memcpy(row, src + i * cols, cols * sizeof *row);
        if (r->kind == MP_RECIPE_MXFP8) {
            mp_mx_quantize(codes, scales, row, cp, MP_E4M3, r->mx_rule, NULL);
            mp_mx_dequantize(out, codes, scales, cp, MP_E4M3);
            for (size_t c = 0; c < cp; c++)
                if (fabsf(out[c]) < 0x1p-126f) out[c] = copysignf(0.0f, out[c]);
        } else if (r->kind == MP_RECIPE_NVFP4) {
            mp_nvfp4_quantize(codes, scales, row, 1, cp, MP_NVFP4_1X16, amax, NULL, NULL);
            nvfp4_values(out, codes, scales, 1, cp, 0);
        } else {
            mp_fp8_quantize(codes, row, cols, fmt, scale, NULL);
            for (size_t c = 0; c < cols; c++)
                out[c] = fmt == MP_E4M3 ? mp_e4m3_to_f32(codes[c]) : mp_e5m2_to_f32(codes[c]);
        }
        memcpy(v + i * cols, out, cols * sizeof *out);
    }
    *factor = r->kind == MP_RECIPE_MXFP8   ? 1.0f
              : r->kind == MP_RECIPE_NVFP4 ? 1.0f / mp_nvfp4_global_scale(amax)
                                           : 1.0f / scale;
    free(row), free(out), free(codes), free(scales);
}

static float amax_of(const float *x, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) m = fmaxf(m, fabsf(x[i]));
    return m;
}

static void transpose(float *t, const float *x, size_t rows, size_t cols) {
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < cols; j++) t[j * rows + i] = x[i * cols + j];
}

/* Compares a bf16 operand with expected fp32 values; returns mismatches. */
static size_t diff(const uint16_t *q, const float *v, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += f2u(mp_bf16_to_f32(q[i])) != f2u(v[i]);
    return bad;
}

/* One recipe: operands of odd shapes in both directions, bf16 and fp32 sources. */
static void test_operands(const char *name) {
    const long mark = check_failures;
    mp_recipe r;
    CHECK(mp_recipe_parse(name, &r) == MP_OK, "%s", name);
    r.nvfp4_sr = 0, r.nvfp4_rht = 0, r.nvfp4_2d_weights = 0; /* the plain rounding here; those parts below */
    const size_t shapes[][2] = {{64, 96}, {40, 72}, {3, 40}, {96, 32}, {33, 1100}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const size_t R = shapes[s][0], K = shapes[s][1];
        float *x = malloc(R * K * sizeof *x), *xt = malloc(R * K * sizeof *xt), *v = malloc(R * K * sizeof *v);
        float *vt = malloc(R * K * sizeof *vt);
        uint16_t *q = malloc(R * K * 2), *xb = malloc(R * K * 2);
        fill(x, R * K, 20);
        /* a bf16 source: the values rounded to bf16 first */
        for (size_t i = 0; i < R * K; i++) xb[i] = mp_f32_to_bf16(x[i]), x[i] = mp_bf16_to_f32(xb[i]);
        for (int dir = 0; dir < 2; dir++)
            for (int role = 0; role < 3; role++) {
                mp_qtensor qt;
                CHECK(mp_qtensor_init(&qt, &r, (mp_qrole)role, 7) == MP_OK, "init");
                mp_qtensor_begin(&qt, 1);
                float f = 0.0f, fe = 0.0f;
                const mp_status st = mp_qoperand(q, K, &f, role == 1 ? (const void *)x : xb,
                                                 role == 1 ? MP_F32 : MP_BF16, K, R, K, dir, &r, &qt);
                CHECK(st == MP_OK, "%s %zux%zu dir %d: %s", name, R, K, dir, mp_last_error());
                const float amax = amax_of(x, R * K);
                const float scale = r.kind == MP_RECIPE_FP8_CURRENT
                                        ? mp_fp8_scale(amax, mp_qrole_format(&r, role), 0, NULL)
                                        : 1.0f; /* delayed: the first step's scale */
                if (dir == 0 || r.kind == MP_RECIPE_FP8_DELAYED || r.kind == MP_RECIPE_FP8_CURRENT) {
                    expect_rows(v, &fe, x, R, K, &r, (mp_qrole)role, scale, amax);
                    CHECK(diff(q, v, R * K) == 0, "%s %zux%zu dir %d role %d: %zu values differ", name, R, K, dir, role,
                          diff(q, v, R * K));
                } else { /* along the rows: the transpose's rows */
                    transpose(xt, x, R, K);
                    expect_rows(vt, &fe, xt, K, R, &r, (mp_qrole)role, scale, amax);
                    transpose(v, vt, K, R);
                    CHECK(diff(q, v, R * K) == 0, "%s %zux%zu along rows role %d: %zu values differ", name, R, K, role,
                          diff(q, v, R * K));
                }
                CHECK(f2u(f) == f2u(fe), "%s factor %g, expected %g", name, (double)f, (double)fe);
                CHECK(qt.stats.n == R * K, "%s: %llu elements counted, %zu quantized", name,
                      (unsigned long long)qt.stats.n, R * K);
                CHECK(qt.stats.amax == amax, "%s: amax %g, expected %g", name, (double)qt.stats.amax, (double)amax);
                mp_qtensor_free(&qt);
            }
        free(x), free(xt), free(v), free(vt), free(q), free(xb);
    }
    CHECK_SAY(mark,
              "%s: operands in both directions, 5 shapes (padded ones too), bf16 and fp32 sources, as mx.h by hand\n",
              name);
}

/* A GEMM on the quantized operands against fp64 sums of their values. */
static void test_gemm(const char *name) {
    const long mark = check_failures;
    mp_recipe r;
    mp_recipe_parse(name, &r);
    const size_t M = 48, N = 64, K = 96;
    float *a = malloc(M * K * 4), *b = malloc(N * K * 4), *c = malloc(M * N * 4);
    uint16_t *qa = malloc(M * K * 2), *qb = malloc(N * K * 2);
    fill(a, M * K, 6), fill(b, N * K, 6);
    mp_qtensor ta, tb;
    mp_qtensor_init(&ta, &r, MP_QROLE_INPUT, 1), mp_qtensor_init(&tb, &r, MP_QROLE_WEIGHT, 2);
    mp_qtensor_begin(&ta, 1), mp_qtensor_begin(&tb, 1);
    float fa, fb;
    CHECK(mp_qoperand(qa, K, &fa, a, MP_F32, K, M, K, 0, &r, &ta) == MP_OK, "a");
    CHECK(mp_qoperand(qb, K, &fb, b, MP_F32, K, N, K, 0, &r, &tb) == MP_OK, "b");
    CHECK(mp_gemm(0, 1, M, N, K, fa * fb, qa, MP_BF16, K, qb, MP_BF16, K, 0.0f, c, MP_F32, N, NULL) == MP_OK, "gemm");
    double worst = 0.0, err_vs_exact = 0.0, mag = 0.0;
    for (size_t i = 0; i < M; i++)
        for (size_t j = 0; j < N; j++) {
            double s = 0.0, sa = 0.0, e = 0.0;
            for (size_t k = 0; k < K; k++) {
                const double p = (double)mp_bf16_to_f32(qa[i * K + k]) * mp_bf16_to_f32(qb[j * K + k]);
                s += p, sa += fabs(p), e += (double)a[i * K + k] * b[j * K + k];
            }
            const double want = s * fa * fb, bound = ((double)K + 4) * 0x1p-24 * sa * fabs((double)fa * fb) + 0x1p-100;
            worst = fmax(worst, fabs(c[i * N + j] - want) / bound);
            err_vs_exact += fabs(c[i * N + j] - e), mag += fabs(e);
        }
    CHECK(worst <= 1.0, "%s: the GEMM is off the quantized values' sum by %.3g of its bound", name, worst);
    /* and quantization error is what the format allows: relative error of the products' sums */
    const double rel = err_vs_exact / mag, limit = r.kind == MP_RECIPE_NVFP4 ? 0.2 : 0.08;
    CHECK(rel < limit, "%s: mean error against the unquantized product %.3g (limit %.3g)", name, rel, limit);
    mp_qtensor_free(&ta), mp_qtensor_free(&tb);
    free(a), free(b), free(c), free(qa), free(qb);
    CHECK_SAY(mark, "%s: GEMM within fp32 summation of the quantized values; %.3g relative error vs unquantized\n",
              name, rel);
}

/* Delayed scaling: step 1 codes with scale 1, then the history's max. */
static void test_delayed(void) {
    const long mark = check_failures;
    mp_recipe r;
    mp_recipe_parse("fp8-delayed", &r);
    r.amax_history_len = 3;
    mp_qtensor q;
    mp_qtensor_init(&q, &r, MP_QROLE_GRAD, 0);
    const float amax[] = {2.0f, 0.5f, 8.0f, 0.25f, 0.25f, 0.25f};
    float x[32] = {0}, f = 0;
    uint16_t out[32];
    float expect = 1.0f;
    for (int s = 0; s < 6; s++) {
        mp_qtensor_begin(&q, 1);
        x[5] = amax[s];
        CHECK(mp_qoperand(out, 32, &f, x, MP_F32, 32, 1, 32, 0, &r, &q) == MP_OK, "q");
        CHECK(f2u(f) == f2u(1.0f / expect), "step %d: factor %g, expected 1/%g", s, (double)f, (double)expect);
        mp_qtensor_end(&q, &r);
        float m = 0.0f; /* the last 3 amaxes */
        for (int k = s; k >= 0 && k > s - 3; k--) m = fmaxf(m, amax[k]);
        expect = 57344.0f / m;
    }
    mp_qtensor_free(&q);
    CHECK_SAY(mark, "fp8-delayed: scale 1 first, then E5M2 max / the max of the last 3 amaxes\n");
}

/* nvfp4's parts: 16x16 weights, stochastic rounding's counter and thread
 * independence, the Hadamard transform of the weight gradient's operands. */
static void test_nvfp4_parts(void) {
    const long mark = check_failures;
    mp_recipe r;
    mp_recipe_parse("nvfp4", &r);
    const size_t R = 48, K = 64;
    float *w = malloc(R * K * 4), *v = malloc(R * K * 4), *t = malloc(R * K * 4);
    uint16_t *q = malloc(R * K * 2), *q1 = malloc(R * K * 2);
    uint8_t *codes = malloc(R * K), *scales = malloc(R * K);
    fill(w, R * K, 8);
    mp_qtensor qt;
    float f;
    /* 16x16 weights: the same values whatever the direction */
    mp_qtensor_init(&qt, &r, MP_QROLE_WEIGHT, 0);
    mp_qtensor_begin(&qt, 1);
    CHECK(mp_qoperand(q, K, &f, w, MP_F32, K, R, K, 1, &r, &qt) == MP_OK, "w");
    const float amax = amax_of(w, R * K);
    mp_nvfp4_quantize(codes, scales, w, R, K, MP_NVFP4_16X16, amax, NULL, NULL);
    nvfp4_values(v, codes, scales, R, K, 1);
    CHECK(diff(q, v, R * K) == 0, "16x16 weights: %zu values differ", diff(q, v, R * K));
    CHECK(mp_qoperand(q1, K, &f, w, MP_F32, K, R, K, 0, &r, &qt) == MP_OK, "w0");
    CHECK(memcmp(q, q1, R * K * 2) == 0, "16x16 weights differ between the directions");
    mp_qtensor_free(&qt);
    /* gradients: stochastic rounding, the counter advances by the elements; one or two threads alike */
    mp_qtensor_init(&qt, &r, MP_QROLE_GRAD, 99);
    mp_qtensor_begin(&qt, 1);
    mp_set_threads(1);
    CHECK(mp_qoperand(q, K, &f, w, MP_F32, K, R, K, 0, &r, &qt) == MP_OK, "g");
    CHECK(qt.rng.counter == R * K, "counter %llu after %zu elements", (unsigned long long)qt.rng.counter, R * K);
    qt.rng.counter = 0;
    mp_set_threads(2);
    CHECK(mp_qoperand(q1, K, &f, w, MP_F32, K, R, K, 0, &r, &qt) == MP_OK, "g2");
    CHECK(memcmp(q, q1, R * K * 2) == 0, "stochastic rounding depends on the thread count");
    CHECK(mp_qoperand(q1, K, &f, w, MP_F32, K, R, K, 0, &r, &qt) == MP_OK, "g3");
    CHECK(memcmp(q, q1, R * K * 2) != 0, "a later call rounded the same way (the counter did not move)");
    /* the weight gradient's operand: the transform of each column's 16-blocks, then 1x16 along them */
    r.nvfp4_sr = 0;
    mp_qtensor_begin(&qt, 1);
    CHECK(mp_qoperand(q, K, &f, w, MP_F32, K, R, K, 1, &r, &qt) == MP_OK, "rht");
    transpose(t, w, R, K); /* K rows of R */
    CHECK(mp_rht16(t, K, R, r.rht_signs) == MP_OK, "rht16");
    const float ta = amax_of(t, R * K);
    mp_nvfp4_quantize(codes, scales, t, K, R, MP_NVFP4_1X16, ta, NULL, NULL);
    nvfp4_values(v, codes, scales, K, R, 0);
    transpose(t, v, K, R);
    CHECK(diff(q, t, R * K) == 0, "transformed operand: %zu values differ", diff(q, t, R * K));
    CHECK(f2u(f) == f2u(1.0f / mp_nvfp4_global_scale(ta)), "transformed operand's factor");
    mp_qtensor_free(&qt);
    free(w), free(v), free(t), free(q), free(q1), free(codes), free(scales);
    CHECK_SAY(mark, "nvfp4: 16x16 weights, stochastic rounding (counter, threads), the Hadamard-transformed operand\n");
}

/* recipe.h's stream indices of stochastic rounding, by hand with mp_nvfp4_quantize: along the columns, row i
 * from counter + i * cp; along the rows, block row i0 (its columns' transformed 16-blocks, one after
 * another) from counter + i0 * cols. An odd counter start and padding both ways. */
static void test_sr_stream(void) {
    const long mark = check_failures;
    mp_recipe r;
    mp_recipe_parse("nvfp4", &r);
    const size_t R = 37, K = 45, cp = 48, rp = 48;
    const uint64_t c0 = 5;
    float *x = malloc(R * K * 4), *t = calloc(rp * cp, 4), *v = malloc(rp * cp * 4);
    uint16_t *q = malloc(R * K * 2);
    uint8_t *codes = malloc(rp * cp), *scales = malloc(rp * cp);
    fill(x, R * K, 6);
    for (int dir = 0; dir < 2; dir++) {
        mp_qtensor qt;
        mp_qtensor_init(&qt, &r, MP_QROLE_GRAD, 77);
        mp_qtensor_begin(&qt, 1);
        qt.rng.counter = c0;
        float f;
        CHECK(mp_qoperand(q, K, &f, x, MP_F32, K, R, K, dir, &r, &qt) == MP_OK, "sr %d", dir);
        size_t bad = 0;
        if (dir == 0) {
            const float amax = amax_of(x, R * K);
            for (size_t i = 0; i < R; i++) {
                memset(t, 0, cp * 4);
                memcpy(t, x + i * K, K * 4);
                mp_rng rng = {77, c0 + i * cp};
                mp_nvfp4_quantize(codes, scales, t, 1, cp, MP_NVFP4_1X16, amax, &rng, NULL);
                nvfp4_values(v, codes, scales, 1, cp, 0);
                bad += diff(q + i * K, v, K);
            }
            CHECK(qt.rng.counter == c0 + R * cp, "counter %llu", (unsigned long long)qt.rng.counter);
        } else {
            memset(t, 0, rp * cp * 4); /* K rows of rp: each column's values, zero-padded (37 rows: a
                                          partial block, so no Hadamard transform) */
            for (size_t i = 0; i < R; i++)
                for (size_t c = 0; c < K; c++) t[c * rp + i] = x[i * K + c];
            if (R % 16 == 0) mp_rht16(t, K, rp, r.rht_signs);
            const float amax = amax_of(t, K * rp);
            for (size_t i0 = 0; i0 < R; i0 += 16) {
                float blk[45 * 16];
                for (size_t c = 0; c < K; c++) memcpy(blk + c * 16, t + c * rp + i0, 16 * 4);
                mp_rng rng = {77, c0 + i0 * K};
                mp_nvfp4_quantize(codes, scales, blk, K, 16, MP_NVFP4_1X16, amax, &rng, NULL);
                nvfp4_values(v, codes, scales, K, 16, 0);
                for (size_t c = 0; c < K; c++)
                    for (size_t k = 0; k < 16 && i0 + k < R; k++)
                        bad += f2u(mp_bf16_to_f32(q[(i0 + k) * K + c])) != f2u(v[c * 16 + k]);
            }
            CHECK(qt.rng.counter == c0 + rp * K, "counter %llu", (unsigned long long)qt.rng.counter);
        }
        CHECK(bad == 0, "stochastic rounding %s: %zu values differ from recipe.h's stream indices",
              dir ? "along the rows" : "along the columns", bad);
        mp_qtensor_free(&qt);
    }
    free(x), free(t), free(v), free(q), free(codes), free(scales);
    CHECK_SAY(mark, "nvfp4: stochastic rounding draws the stream bytes recipe.h documents, in both directions\n");
}

/* ---- the fast kernels against the reference panels ----
 * mp_qoperand on the detected CPU path (AVX-512: recipe_avx512.c) against
 * the portable panels (any path below AVX-512), bit for bit: values (and the
 * bytes between a row's end and ldd, untouched), factor, scale, amax, counts
 * and the stream counter; then either on 1 and 2 threads, with operands
 * large enough to be split. */

/* Source values of one of several kinds (fp32; the bf16 source is rounded
 * from them). */
static void fill_kind(float *x, size_t n, size_t lds, int kind) {
    for (size_t i = 0; i < n; i++) {
        const double u = urand();
        double v;
        switch (kind) {
        case 0: /* a wide spread: 2^-40 .. 2^40, some zeros */
            v = u < 0.03 ? 0.0 : (urand() - 0.5) * ldexp(1.0, (int)(urand() * 81) - 40);
            break;
        case 1: /* blocks (16 values) of their own magnitude, 2^-149 .. 2^127, spread over 2^30 below it:
                   every E8M0 scale, tiny MX blocks, zero-scale nvfp4 blocks */
            v = (urand() - 0.5) * ldexp(1.0, (int)((i / 16 * 2654435761u) % 277) - 149 - (int)(urand() * urand() * 30));
            break;
        case 2: /* small integers times powers of two: the formats' ties and exact grid points */
            v = (double)((int)(urand() * 512) - 256) * ldexp(1.0, (int)(urand() * 24) - 16);
            break;
        case 4: { /* 32 x 32 tiles of amax 2^E, E near either end of the E8M0 scales' range, with fp32
                     subnormals and values near 2^-126: the MX grids' edges */
            const size_t t = (i / lds / 32) * 977 + i % lds / 32;
            const int E = (int)(t * 2654435761u % 48), e = E < 26 ? E - 125 : E + 84;
            if (u < 0.05) v = ldexp(1.0, e);
            else if (u < 0.2) {
                x[i] = u2f((uint32_t)(urand() * 0x800000) | (urand() < 0.5 ? 0x80000000u : 0));
                continue;
            } else if (u < 0.3) v = (1.0 + (urand() - 0.5) * 0x1p-6) * 0x1p-126;
            else v = (urand() - 0.5) * ldexp(1.0, e - (int)(urand() * 24));
            break;
        }
        default: /* huge and tiny, specials: saturation, inf, NaN, fp32 subnormals */
            if (u < 0.02) v = INFINITY;
            else if (u < 0.04) v = -INFINITY;
            else if (u < 0.05) { /* NaNs with payloads */
                x[i] = u2f(0x7fc00000u | (uint32_t)(urand() * 0x3fffff) | (urand() < 0.5 ? 0x80000000u : 0));
                continue;
            } else if (u < 0.10) {
                x[i] = u2f((uint32_t)(urand() * 0x7fffff) | (urand() < 0.5 ? 0x80000000u : 0));
                continue;
            } else if (u < 0.15) v = urand() < 0.5 ? -0.0 : 0.0;
            else v = (urand() - 0.5) * ldexp(1.0, (int)(urand() * 40) + 88);
            break;
        }
        x[i] = (float)v;
    }
}

typedef struct {
    uint16_t *q;
    float factor, scale, amax;
    mp_quant_stats st;
    uint64_t counter;
    mp_status s;
} qresult;

/* run_q through the kernel table k (NULL: the CPU path's) */
static void run_qk(const mp_recipe_kernels *k, qresult *o, const void *src, mp_dtype t, size_t lds, size_t ldd,
                   size_t R, size_t K, int dir, const mp_recipe *r, mp_qrole role, float dscale, uint64_t counter) {
    mp_qtensor qt;
    mp_qtensor_init(&qt, r, role, 0x1234567887654321ull);
    mp_qtensor_begin(&qt, 1);
    qt.hist.scale = dscale; /* fp8-delayed's scale */
    qt.rng.counter = counter;
    for (size_t i = 0; i < R * ldd + 1; i++) o->q[i] = 0xabcd;
    o->factor = -1.0f;
    o->s = k ? mp_qoperand_with(k, o->q, ldd, &o->factor, src, t, lds, R, K, dir, r, &qt)
             : mp_qoperand(o->q, ldd, &o->factor, src, t, lds, R, K, dir, r, &qt);
    o->scale = qt.scale, o->amax = qt.amax, o->st = qt.stats, o->counter = qt.rng.counter;
    mp_qtensor_free(&qt);
}

static void run_q(qresult *o, const void *src, mp_dtype t, size_t lds, size_t ldd, size_t R, size_t K, int dir,
                  const mp_recipe *r, mp_qrole role, float dscale, uint64_t counter) {
    run_qk(NULL, o, src, t, lds, ldd, R, K, dir, r, role, dscale, counter);
}

static int same_result(const qresult *a, const qresult *b, size_t n) {
    return a->s == b->s && memcmp(a->q, b->q, n * 2) == 0 && f2u(a->factor) == f2u(b->factor) &&
           f2u(a->scale) == f2u(b->scale) && f2u(a->amax) == f2u(b->amax) && a->st.n == b->st.n &&
           a->st.saturated == b->st.saturated && a->st.flushed == b->st.flushed && a->st.nonfinite == b->st.nonfinite &&
           f2u(a->st.amax) == f2u(b->st.amax) && a->counter == b->counter;
}

static void say_diff(const char *what, const qresult *a, const qresult *b, size_t n) {
    size_t bad = 0, first = n;
    for (size_t i = 0; i < n; i++)
        if (a->q[i] != b->q[i]) bad++, first = first < n ? first : i;
    CHECK(0,
          "%s: %zu values differ (first at %zu: %04x, reference %04x); factor %08x/%08x; stats n %llu/%llu "
          "sat %llu/%llu flushed %llu/%llu nonfinite %llu/%llu amax %08x/%08x; counter %llu/%llu; status %d/%d",
          what, bad, first, first < n ? a->q[first] : 0, first < n ? b->q[first] : 0, f2u(a->factor), f2u(b->factor),
          (unsigned long long)a->st.n, (unsigned long long)b->st.n, (unsigned long long)a->st.saturated,
          (unsigned long long)b->st.saturated, (unsigned long long)a->st.flushed, (unsigned long long)b->st.flushed,
          (unsigned long long)a->st.nonfinite, (unsigned long long)b->st.nonfinite, f2u(a->st.amax), f2u(b->st.amax),
          (unsigned long long)a->counter, (unsigned long long)b->counter, (int)a->s, (int)b->s);
}

/* Every kernel table this CPU can run (the portable one, AVX2's, AVX-512's)
 * against the reference panels, bit for bit: values, factor, scale, counts
 * and the stream's use. */
static void test_fast_vs_ref(int daz) {
    const long mark = check_failures;
    const mp_isa best = mp_cpu_detected();
    struct {
        const char *name;
        const mp_recipe_kernels *k;
        mp_isa needs;
    } tables[] = {
        {"portable", &mp_recipe_portable, MP_ISA_SCALAR},
#ifdef MP_X86
        {"avx2", &mp_recipe_avx2, MP_ISA_AVX2},
        {"avx512", &mp_recipe_avx512, MP_ISA_AVX512},
#endif
    };
    /* the last: wider than mxfp8's column chunks (2048), for mxfp8 and kinds 0 and 4 only */
    const size_t shapes[][2] = {{1, 1},    {3, 40}, {16, 16}, {33, 70},   {64, 96},
                                {17, 527}, {0, 9},  {9, 0},   {48, 1100}, {35, 2085}};
    const size_t nshapes = quick || daz ? 6 : sizeof shapes / sizeof shapes[0];
    const float dscales[] = {1.0f, 0x1p-20f, 3.7e5f, 1e-40f, 0x1.8p100f, 0.0f}; /* fp8-delayed's; 0: MP_EINVAL */
    /* stream positions: block-aligned ones (the kernels' word path) and not, near the 2^64 wrap too */
    const uint64_t counters[] = {0, 7, ((uint64_t)0xffffffffu << 4) - 37, UINT64_MAX - 1000, UINT64_MAX - 1023};
    size_t calls = 0, variant = 0, ntables = 0;
    char names[64] = "";
    for (size_t tb = 0; tb < sizeof tables / sizeof tables[0]; tb++)
        if (tables[tb].needs <= best) {
            ntables++;
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", ntables > 1 ? ", " : "",
                     tables[tb].name);
        }
    for (size_t sh = 0; sh < nshapes; sh++) {
        const size_t R = shapes[sh][0], K = shapes[sh][1], lds = K + 5, ldd = K + 3, n = R * lds + 1;
        float *x = malloc(n * 4);
        uint16_t *xb = malloc(n * 2);
        qresult ref = {.q = malloc((R * ldd + 1) * 2)}, fast = {.q = malloc((R * ldd + 1) * 2)};
        for (int kind = 0; kind < 5; kind++) {
            fill_kind(x, n, lds, kind);
            for (size_t i = 0; i < n; i++) xb[i] = mp_f32_to_bf16(x[i]);
            const int wide = K > 2048;
            if (wide && kind != 0 && kind != 4) continue;
            for (size_t k = wide ? 2 : 0; k < (wide ? 3 : sizeof recipes / sizeof recipes[0]); k++)
                for (int part = 0; part < (k == 3 ? 4 : k == 2 ? 2 : 1); part++)
                    for (int role = 0; role < 3; role++)
                        for (int dir = 0; dir < 2; dir++)
                            for (int src = 0; src < 2; src++) {
                                mp_recipe r;
                                mp_recipe_parse(recipes[k], &r);
                                variant++;
                                if (k == 2) r.mx_rule = part ? MP_MX_FLOOR : MP_MX_RCEIL;
                                if (k == 3) { /* nvfp4's parts on and off */
                                    r.nvfp4_sr = part & 1, r.nvfp4_rht = !(part & 2), r.nvfp4_2d_weights = !(part & 1);
                                    if (variant % 3 == 0) r.rht_signs = (uint16_t)(urand() * 65536);
                                }
                                const float ds = dscales[variant % 6];
                                const uint64_t ctr = counters[variant % 5];
                                const void *sp = src ? (const void *)x : xb;
                                const mp_dtype t = src ? MP_F32 : MP_BF16;
                                mp_set_threads(1);
#ifdef MP_X86
                                const unsigned csr = _mm_getcsr();
                                if (daz) _mm_setcsr(csr | 0x8040u); /* FTZ and DAZ, this thread only (1 thread) */
#endif
                                run_qk(&mp_recipe_ref, &ref, sp, t, lds, ldd, R, K, dir, &r, (mp_qrole)role, ds, ctr);
                                for (size_t tb = 0; tb < sizeof tables / sizeof tables[0]; tb++) {
                                    if (tables[tb].needs > best) continue;
                                    run_qk(tables[tb].k, &fast, sp, t, lds, ldd, R, K, dir, &r, (mp_qrole)role, ds,
                                           ctr);
                                    calls++;
                                    if (!same_result(&fast, &ref, R * ldd + 1)) {
                                        char what[200];
                                        snprintf(
                                            what, sizeof what, "%s: %s%s %zux%zu kind %d part %d role %d dir %d %s%s",
                                            tables[tb].name, recipes[k], k == 2 && part ? " floor" : "", R, K, kind,
                                            part, role, dir, src ? "fp32" : "bf16", daz ? ", FTZ and DAZ" : "");
                                        say_diff(what, &fast, &ref, R * ldd + 1);
                                    }
                                }
#ifdef MP_X86
                                if (daz) _mm_setcsr(csr);
#endif
                            }
        }
        free(x), free(xb), free(ref.q), free(fast.q);
    }
    mp_set_threads(0);
    if (daz)
        CHECK_SAY(mark, "kernel tables (%s) = the reference panels with FTZ and DAZ on too: %zu calls\n", names, calls);
    else
        CHECK_SAY(mark,
                  "kernel tables (%s) = the reference panels bit for bit: %zu calls, every recipe, role, "
                  "direction, mx rule and nvfp4 part, 5 kinds of data, bf16 and fp32\n",
                  names, calls);
}

/* Both paths on 1 and 2 threads: operands above mp_qoperand's threshold for a second thread (2^16 elements). */
static void test_threads(void) {
    const long mark = check_failures;
    const mp_isa prev = mp_cpu_isa();
    const size_t R = 150, K = 1100, lds = K + 1, n = R * lds;
    float *x = malloc(n * 4);
    uint16_t *xb = malloc(n * 2);
    qresult a = {.q = malloc((R * K + 1) * 2)}, b = {.q = malloc((R * K + 1) * 2)};
    size_t calls = 0, variant = 0;
    for (int kind = 0; kind < 4; kind += 3) {
        fill_kind(x, n, lds, kind);
        for (size_t i = 0; i < n; i++) xb[i] = mp_f32_to_bf16(x[i]);
        for (size_t k = 0; k < sizeof recipes / sizeof recipes[0]; k++)
            for (int part = 0; part < (k == 3 ? 4 : k == 2 ? 2 : 1); part++)
                for (int role = 0; role < 3; role++)
                    for (int dir = 0; dir < 2; dir++)
                        for (int src = 0; src < 2; src++) {
                            mp_recipe r;
                            mp_recipe_parse(recipes[k], &r);
                            if (k == 2) r.mx_rule = part ? MP_MX_FLOOR : MP_MX_RCEIL;
                            if (k == 3)
                                r.nvfp4_sr = part & 1, r.nvfp4_rht = !(part & 2), r.nvfp4_2d_weights = !(part & 1);
                            const void *sp = src ? (const void *)x : xb;
                            const mp_dtype t = src ? MP_F32 : MP_BF16;
                            /* the fast path (if any) on 1 and 2 threads; the reference on 2 now and then */
                            const int ref2 = variant++ % 8 == 0 && !quick;
                            mp_set_threads(1);
                            run_q(&a, sp, t, lds, K, R, K, dir, &r, (mp_qrole)role, 0x1p-3f, 7);
                            mp_set_threads(2);
                            if (ref2) mp_cpu_set_isa(MP_ISA_SCALAR);
                            run_q(&b, sp, t, lds, K, R, K, dir, &r, (mp_qrole)role, 0x1p-3f, 7);
                            mp_cpu_set_isa(prev);
                            calls++;
                            CHECK(same_result(&a, &b, R * K + 1),
                                  "%s part %d role %d dir %d %s kind %d: 2 threads%s differ", recipes[k], part, role,
                                  dir, src ? "fp32" : "bf16", kind, ref2 ? " (reference)" : "");
                        }
    }
    mp_set_threads(0);
    free(x), free(xb), free(a.q), free(b.q);
    CHECK_SAY(mark, "1 and 2 threads alike (%s, and the reference now and then): %zu operands of %zu x %zu\n",
              mp_isa_name(prev), calls, R, K);
}

/* The GPT trains under every recipe: finite, falling losses, within reach of bf16's. */
static void test_gpt(void) {
    const long mark = check_failures;
    mp_gpt_config c = {2, 2, 64, 32, 256, MP_GELU_TANH};
    const size_t B = 4, T = 32;
    int32_t tok[4 * 33];
    for (size_t i = 0; i < sizeof tok / sizeof tok[0]; i++)
        tok[i] = (int32_t)("the quick brown fox jumps over "[i % 31]);
    int32_t in[4 * 32], tg[4 * 32];
    for (size_t b = 0; b < B; b++)
        for (size_t t = 0; t < T; t++) in[b * T + t] = tok[b + t], tg[b * T + t] = tok[b + t + 1];
    float first_bf16 = 0, last_bf16 = 0;
    for (int k = -1; k < 4; k++) {
        mp_optim *opt;
        mp_adamw_config ac = mp_adamw_defaults();
        ac.lr = 3e-3;
        mp_optim_adamw(&opt, &ac);
        mp_gpt *g;
        CHECK(mp_gpt_create(&g, &c, MP_BF16, MP_MASTER_FP32, B, opt, 5) == MP_OK, "create");
        mp_recipe r;
        if (k >= 0) {
            mp_recipe_parse(recipes[k], &r);
            CHECK(mp_gpt_set_recipe(g, &r, 1) == MP_OK, "%s: %s", recipes[k], mp_last_error());
        }
        float l0 = 0, l = 0;
        const int steps = quick ? 4 : 12;
        for (int s = 0; s < steps; s++) {
            CHECK(mp_gpt_train_batch(g, in, tg, B, T, 1.0f, 0, &l) == MP_OK, "train: %s", mp_last_error());
            mp_optim_step(opt);
            if (s == 0) l0 = l;
        }
        const char *nm = k < 0 ? "bf16" : recipes[k];
        CHECK(isfinite(l) && l < l0, "%s: loss %g -> %g", nm, (double)l0, (double)l);
        if (k < 0) first_bf16 = l0, last_bf16 = l;
        else {
            CHECK(fabsf(l0 - first_bf16) < 0.05f * first_bf16, "%s: first loss %g, bf16's %g", nm, (double)l0,
                  (double)first_bf16);
            const mp_qtensor *q = mp_gpt_qtensor(g, 1, 2, MP_QROLE_GRAD);
            CHECK(q && q->stats.n == B * T * 4 * (size_t)c.n_embd * 2, "%s: c_fc's gradient quantized %llu values", nm,
                  q ? (unsigned long long)q->stats.n : 0ull);
            printf("  %-12s loss %.4f -> %.4f (bf16 %.4f -> %.4f)\n", nm, (double)l0, (double)l, (double)first_bf16,
                   (double)last_bf16);
        }
        if (k < 0) CHECK(mp_gpt_qtensor(g, 0, 0, MP_QROLE_INPUT) == NULL, "a qtensor without a recipe");
        mp_gpt_free(g);
        mp_optim_free(opt);
    }
    /* the recipes need bf16 compute and fp32 masters */
    mp_optim *opt;
    mp_optim_sgd(&opt, NULL);
    mp_gpt *g;
    mp_gpt_create(&g, &c, MP_F16, MP_MASTER_FP32, 1, opt, 5);
    mp_recipe r;
    mp_recipe_parse("mxfp8", &r);
    CHECK(mp_gpt_set_recipe(g, &r, 1) == MP_EINVAL, "fp16 compute took a recipe");
    mp_gpt_free(g);
    mp_optim_free(opt);
    CHECK(mp_recipe_parse("fp8", &r) == MP_EINVAL, "'fp8' parsed");
    CHECK_SAY(mark, "gpt: every recipe trains, first losses within 5%% of bf16's; bad configurations refused\n");
}

/* The MLP under every recipe: 50 inputs and 10 classes are no whole number
 * of blocks (padded), batches of 24 neither; the loss falls, every operand is
 * counted without its padding, and evaluation changes no state. */
static void test_mlp(void) {
    const long mark = check_failures;
    mp_mlp_config c = {3, {50, 64, 40, 10}, MP_ACT_RELU, 0};
    const size_t B = 24;
    float x[24 * 50];
    int32_t y[24];
    for (size_t i = 0; i < B; i++) {
        y[i] = (int32_t)(i % 10);
        for (size_t k = 0; k < 50; k++) x[i * 50 + k] = (float)((k % 10 == (size_t)y[i]) + 0.1 * urand());
    }
    for (size_t k = 0; k < sizeof recipes / sizeof recipes[0]; k++) {
        mp_optim *opt;
        mp_adamw_config ac = mp_adamw_defaults();
        ac.lr = 1e-2;
        mp_optim_adamw(&opt, &ac);
        mp_mlp *m;
        CHECK(mp_mlp_create(&m, &c, MP_BF16, MP_MASTER_FP32, B, opt, 3) == MP_OK, "mlp");
        mp_recipe r;
        mp_recipe_parse(recipes[k], &r);
        CHECK(mp_mlp_set_recipe(m, &r, 1) == MP_OK, "%s: %s", recipes[k], mp_last_error());
        mp_model model = mp_mlp_model(m);
        float l0 = 0, l = 0;
        for (int s = 0; s < 30; s++) {
            CHECK(mp_mlp_train_batch(m, x, y, B, 1.0f, 0, &l) == MP_OK, "train: %s", mp_last_error());
            mp_optim_step(opt);
            if (s == 0) l0 = l;
        }
        CHECK(isfinite(l) && l < 0.5f * l0, "%s: mlp loss %g -> %g", recipes[k], (double)l0, (double)l);
        mp_named_qtensor q[9];
        CHECK(mp_model_qtensors(&model, q, 9) == 9 && strcmp(q[8].name, "fc2.grad") == 0, "mlp qtensors");
        /* fc0's input: forward and weight gradient, 24 x 50 each; fc2's gradient: 24 x 10 twice */
        CHECK(q[0].q->stats.n == 2 * B * 50 && q[8].q->stats.n == 2 * B * 10, "%s: counts %llu %llu", recipes[k],
              (unsigned long long)q[0].q->stats.n, (unsigned long long)q[8].q->stats.n);
        mp_qtensor before[9];
        for (int i = 0; i < 9; i++) before[i] = *q[i].q;
        double ls = 0;
        size_t right = 0;
        CHECK(mp_mlp_eval_batch(m, x, y, B, &ls, &right) == MP_OK && right >= B / 2, "%s: eval %zu right", recipes[k],
              right);
        for (int i = 0; i < 9; i++)
            CHECK(memcmp(&before[i], q[i].q, sizeof before[i]) == 0, "%s: evaluation changed %s", recipes[k],
                  q[i].name);
        mp_mlp_free(m);
        mp_optim_free(opt);
    }
    CHECK_SAY(mark, "mlp: every recipe learns (padded blocks), counts without padding, evaluation changes no state\n");
}

/* What review found: evaluation takes its own amax (not the last training
 * batch's), --hist-every's extra GEMM leaves the run as it was, counts add up
 * over micro-batches, setting a model's own recipe keeps it, a bad MX rule
 * is refused. */
static void test_state(void) {
    const long mark = check_failures;
    mp_mlp_config c = {2, {48, 32, 10}, MP_ACT_RELU, 0};
    const size_t B = 16;
    float x[16 * 48], x3[16 * 48];
    int32_t y[16];
    for (size_t i = 0; i < B * 48; i++) x[i] = (float)(urand() - 0.5), x3[i] = 3.0f * x[i];
    for (size_t i = 0; i < B; i++) y[i] = (int32_t)(i % 10);
    const char *names[] = {"fp8-current", "nvfp4"};
    for (int k = 0; k < 2; k++) {
        mp_optim *opt[2];
        mp_mlp *m[2];
        for (int h = 0; h < 2; h++) { /* h = 1: with the gradient histogram */
            mp_optim_sgd(&opt[h], NULL);
            mp_mlp_create(&m[h], &c, MP_BF16, MP_MASTER_FP32, B, opt[h], 3);
            mp_recipe r;
            mp_recipe_parse(names[k], &r);
            mp_mlp_set_recipe(m[h], &r, 1);
        }
        uint64_t bins[40], zeros = 0;
        mp_mlp_histogram(m[1], bins, -30, 40, &zeros);
        float l[2] = {0, 0};
        for (int s = 0; s < 3; s++)
            for (int h = 0; h < 2; h++) mp_mlp_train_batch(m[h], x, y, B, 1.0f, 0, &l[h]), mp_optim_step(opt[h]);
        mp_model model = mp_mlp_model(m[0]), model1 = mp_mlp_model(m[1]);
        mp_named_qtensor q[6], q1[6];
        mp_model_qtensors(&model, q, 6), mp_model_qtensors(&model1, q1, 6);
        CHECK(l[0] == l[1] && q[5].q->stats.n == q1[5].q->stats.n && q[5].q->rng.counter == q1[5].q->rng.counter,
              "%s: the histogram changed the run (loss %g vs %g)", names[k], (double)l[0], (double)l[1]);
        /* evaluation after training on x or on 3x (no step between): the same */
        double e[2] = {0, 0};
        size_t right;
        for (int t = 0; t < 2; t++) {
            float lt;
            mp_mlp_train_batch(m[0], t ? x3 : x, y, B, 1.0f, 0, &lt);
            mp_mlp_eval_batch(m[0], x3, y, B, &e[t], &right);
        }
        CHECK(e[0] == e[1], "%s: evaluation depends on the last training batch: %.9g vs %.9g", names[k], e[0], e[1]);
        /* two micro-batches: their counts add up */
        float lt;
        mp_mlp_train_batch(m[0], x, y, B, 1.0f, 0, &lt);
        const uint64_t one = q[0].q->stats.n;
        mp_mlp_train_batch(m[0], x, y, B, 1.0f, 1, &lt);
        CHECK(q[0].q->stats.n == 2 * one, "%s: %llu counted after two micro-batches of %llu", names[k],
              (unsigned long long)q[0].q->stats.n, (unsigned long long)one);
        /* the model's own recipe, set again, stays */
        CHECK(mp_mlp_set_recipe(m[0], mp_model_recipe(&model), 1) == MP_OK && mp_model_recipe(&model) &&
                  mp_model_recipe(&model)->kind == (k ? MP_RECIPE_NVFP4 : MP_RECIPE_FP8_CURRENT),
              "%s: setting the model's own recipe", names[k]);
        for (int h = 0; h < 2; h++) mp_mlp_free(m[h]), mp_optim_free(opt[h]);
    }
    mp_recipe r;
    mp_recipe_parse("mxfp8", &r);
    r.mx_rule = (mp_mx_rule)7;
    mp_qtensor qt;
    mp_qtensor_init(&qt, &r, MP_QROLE_INPUT, 0);
    float f, v[32] = {1};
    uint16_t o[32];
    CHECK(mp_qoperand(o, 32, &f, v, MP_F32, 32, 1, 32, 0, &r, &qt) == MP_EINVAL, "MX rule 7 accepted");
    mp_qtensor_free(&qt);
    CHECK_SAY(mark, "state: evaluation's own amax, the histogram leaves the run alone, micro-batches add up, "
                    "the own recipe stays, a bad rule refused\n");
}

int main(int argc, char **argv) {
    quick = test_quick(argc, argv);
    for (size_t i = 0; i < sizeof recipes / sizeof recipes[0]; i++) test_operands(recipes[i]);
    for (size_t i = 0; i < sizeof recipes / sizeof recipes[0]; i++) test_gemm(recipes[i]);
    test_delayed();
    test_nvfp4_parts();
    test_sr_stream();
    test_fast_vs_ref(0);
    test_fast_vs_ref(1);
    test_threads();
    test_gpt();
    test_mlp();
    test_state();
    return check_report("test_recipe");
}
