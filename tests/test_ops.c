/* test_ops.c - activations, softmax, cross-entropy, layer norm and column sums
 * against fp64 references written here, in every input/output format, with
 * bounds from the formats; backward passes against central differences of the
 * fp64 forward; and the failure this design avoids: the same softmax, layer
 * norm and long sum computed in fp16 arithmetic give inf, NaN or a large error
 * where mixprec (fp16 storage, fp32 arithmetic) stays within its bound. */
#include <math.h>

#include "check.h"
#include "internal.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double drand(void) { /* [-1, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) * 0x1p-52 - 1.0;
}

static const mp_dtype types[3] = {MP_F32, MP_F16, MP_BF16};
static const double u = 0x1p-24;
static int quick; /* --quick: sanitizer builds sample fewer inputs */
static int mode;  /* check.h's test_mode: --long checks e^x on every fp32 input */

/* e^x as the softmax computes it, for the references (every element):
 * src/cpu/softmax_kernels.h built for the best path of this CPU, which gives
 * the portable build's bits (check_exp, against libm too) with its fmaf an
 * instruction rather than a libm call */
static float ref_exp(float x) {
    float y;
    mp_kernels_of(mp_cpu_detected())->softmax->exp(&y, &x, 1);
    return y;
}

/* half the spacing of a format relative to a value, plus its smallest subnormal */
static double store_err(mp_dtype t, double v) {
    const mp_format_info *f = mp_format(t);
    return fabs(v) * ldexp(1.0, -f->mantissa_bits - 1) + f->min_subnormal;
}

/* Fills a buffer of type t with n values scale * drand(), and x (fp64) with what it holds. */
static void *make(mp_dtype t, size_t n, double scale, double *x) {
    void *p = malloc(n * 4 + 4);
    for (size_t i = 0; i < n; i++) {
        const float v = (float)(scale * drand());
        mp_convert((uint8_t *)p + i * mp_format(t)->size, t, &v, MP_F32, 1, NULL);
        x[i] = elem_f32(p, t, i);
    }
    return p;
}

static double gelu64(double x) { return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }

static void check_elementwise(void) {
    enum { N = 3001 };
    static double x[N], dy[N];
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
            const mp_dtype xt = types[a], yt = types[b];
            void *px = make(xt, N, 4.0, x), *pg = make(yt, N, 1.0, dy), *out = malloc(N * 4);
            long bad = 0;
            mp_relu_forward(out, yt, px, xt, N, NULL);
            for (int i = 0; i < N; i++) bad += fabs(elem_f32(out, yt, i) - (x[i] > 0 ? x[i] : 0)) > store_err(yt, x[i]);
            mp_relu_backward(out, yt, pg, yt, px, xt, N, NULL);
            for (int i = 0; i < N; i++) bad += elem_f32(out, yt, i) != (x[i] > 0 ? dy[i] : 0);
            mp_gelu_forward(out, yt, px, xt, N, NULL);
            for (int i = 0; i < N; i++) {
                const double want = gelu64(x[i]);
                bad += fabs(elem_f32(out, yt, i) - want) > 16 * u * (fabs(want) + fabs(x[i])) + store_err(yt, want);
            }
            mp_gelu_backward(out, yt, pg, yt, px, xt, N, NULL);
            for (int i = 0; i < N; i++) {
                const double h = 1e-5, d = (gelu64(x[i] + h) - gelu64(x[i] - h)) / (2 * h), want = dy[i] * d;
                bad += fabs(elem_f32(out, yt, i) - want) >
                       32 * u * (fabs(dy[i]) * (1 + fabs(x[i]))) + 1e-9 + store_err(yt, want);
            }
            /* bias add and column sums */
            const size_t B = 37, C = 81;
            float bias[81];
            for (size_t j = 0; j < C; j++) bias[j] = (float)drand();
            mp_bias_add(out, yt, px, xt, bias, B, C, NULL);
            for (size_t i = 0; i < B * C; i++) {
                const double want = x[i] + (double)bias[i % C];
                bad += fabs(elem_f32(out, yt, i) - want) >
                       2 * u * fabs(want) + store_err(yt, want) + u * (fabs(x[i]) + fabs(bias[i % C]));
            }
            float cs[81];
            mp_colsum(cs, px, xt, B, C, 0, MP_F32);
            mp_colsum(cs, px, xt, B, C, 1, MP_F32);
            for (size_t j = 0; j < C; j++) {
                double want = 0, mag = 0;
                for (size_t i = 0; i < B; i++) want += x[i * C + j], mag += fabs(x[i * C + j]);
                bad += fabs(cs[j] - 2 * want) > 2 * (B + 2) * u * mag;
            }
            CHECK(bad == 0, "element-wise ops %s -> %s: %ld values out of bound", mp_format(xt)->name,
                  mp_format(yt)->name, bad);
            free(px), free(pg), free(out);
        }
}

static void softmax64(const double *x, double *y, size_t C, int lg) {
    double mx = -INFINITY, s = 0;
    for (size_t j = 0; j < C; j++) mx = fmax(mx, x[j]);
    for (size_t j = 0; j < C; j++) s += exp(x[j] - mx);
    for (size_t j = 0; j < C; j++) y[j] = lg ? x[j] - mx - log(s) : exp(x[j] - mx) / s;
}

/* Softmax / log-softmax forward and backward; bound (C + 8) u relative for
 * fp32 sums of C terms, plus the store. */
static void check_softmax(void) {
    enum { B = 7, C = 300 };
    static double x[B * C], g[B * C], y[B * C];
    for (int a = 0; a < 3; a++)
        for (int lg = 0; lg < 2; lg++) {
            const mp_dtype t = types[a];
            void *px = make(t, B * C, 20.0, x), *pg = make(t, B * C, 1.0, g), *out = malloc(B * C * 4),
                 *dx = malloc(B * C * 4);
            mp_softmax_forward(out, t, px, t, B, C, lg, MP_F32, NULL);
            long bad = 0;
            for (size_t r = 0; r < B; r++) softmax64(x + r * C, y + r * C, C, lg);
            for (size_t i = 0; i < B * C; i++)
                bad += fabs(elem_f32(out, t, i) - y[i]) >
                       (C + 8) * u * (fabs(y[i]) + (lg ? 20.0 : 0)) + store_err(t, y[i]);
            /* backward from the fp64 forward, fed with the stored y */
            mp_softmax_backward(dx, t, out, t, pg, t, B, C, lg, MP_F32, NULL);
            for (size_t r = 0; r < B; r++) {
                double dot = 0, mag = 0;
                for (size_t j = 0; j < C; j++) {
                    const double yy = elem_f32(out, t, r * C + j);
                    dot += lg ? g[r * C + j] : g[r * C + j] * yy;
                    mag += fabs(g[r * C + j]) * (lg ? 1 : fabs(yy));
                }
                for (size_t j = 0; j < C; j++) {
                    const double yy = elem_f32(out, t, r * C + j);
                    const double want = lg ? g[r * C + j] - exp(yy) * dot : yy * (g[r * C + j] - dot);
                    const double scale = lg ? exp(yy) : fabs(yy);
                    bad += fabs(elem_f32(dx, t, r * C + j) - want) >
                           (C + 8) * u * (fabs(g[r * C + j]) * (lg ? 1 : fabs(yy)) + scale * mag) + store_err(t, want);
                }
            }
            CHECK(bad == 0, "%s %s: %ld values out of bound", lg ? "log_softmax" : "softmax", mp_format(t)->name, bad);
            free(px), free(pg), free(out), free(dx);
        }
}

static void check_cross_entropy(void) {
    enum { B = 64, C = 10 };
    static double x[B * C], p[C];
    int32_t labels[B];
    for (int i = 0; i < B; i++) labels[i] = (int32_t)(i * 7 % C);
    for (int a = 0; a < 3; a++) {
        const mp_dtype t = types[a];
        void *px = make(t, B * C, 8.0, x), *d = malloc(B * C * 4);
        float loss;
        const float scale = 1024.0f;
        CHECK(mp_cross_entropy(&loss, d, t, px, t, labels, B, C, scale, MP_F32, NULL) == MP_OK, "ce");
        double want = 0;
        long bad = 0;
        for (int r = 0; r < B; r++) {
            softmax64(x + r * C, p, C, 0);
            want -= log(p[labels[r]]);
            for (int j = 0; j < C; j++) {
                const double g = scale * (p[j] - (j == labels[r])) / B;
                bad += fabs(elem_f32(d, t, r * C + j) - g) > 24 * u * scale / B + store_err(t, g);
            }
        }
        want /= B;
        CHECK(fabs(loss - want) <= (B + C + 8) * u * (want + 8), "%s loss %.9g vs %.9g", mp_format(t)->name,
              (double)loss, want);
        CHECK(bad == 0, "%s dlogits: %ld out of bound", mp_format(t)->name, bad);
        free(px), free(d);
    }
    /* the loss scale keeps small gradients alive in fp16: confident logits give
     * gradients ~1e-9 that underflow unscaled and survive at scale 65536 */
    float logits[2 * C] = {0};
    logits[0] = 20.0f, logits[C + 1] = 20.0f;
    const int32_t lab[2] = {0, 1};
    uint16_t d16[2 * C];
    mp_convert_stats s1 = {0}, s2 = {0};
    float loss;
    mp_cross_entropy(&loss, d16, MP_F16, logits, MP_F32, lab, 2, C, 1.0f, MP_F32, &s1);
    mp_cross_entropy(&loss, d16, MP_F16, logits, MP_F32, lab, 2, C, 65536.0f, MP_F32, &s2);
    CHECK(s1.underflow >= 16 && s2.underflow == 0, "underflow unscaled %llu, scaled %llu",
          (unsigned long long)s1.underflow, (unsigned long long)s2.underflow);
    const int32_t bad_lab[2] = {0, 10};
    CHECK(mp_cross_entropy(&loss, NULL, MP_F32, logits, MP_F32, bad_lab, 2, C, 1.0f, MP_F32, NULL) == MP_EINVAL &&
              strstr(mp_last_error(), "label 10"),
          "label out of range");
}

static double ln64(const double *x, size_t C, double eps, double *n) {
    double m = 0, v = 0;
    for (size_t j = 0; j < C; j++) m += x[j];
    m /= C;
    for (size_t j = 0; j < C; j++) v += (x[j] - m) * (x[j] - m);
    v /= C;
    const double rs = 1 / sqrt(v + eps);
    for (size_t j = 0; j < C; j++) n[j] = (x[j] - m) * rs;
    return rs;
}

static void check_layernorm(void) {
    enum { B = 5, C = 257 };
    static double x[B * C], g[B * C], n[C], xp[C], np_[C], nm[C];
    float w[C], bb[C];
    for (int j = 0; j < C; j++) w[j] = (float)(1 + 0.5 * drand()), bb[j] = (float)drand();
    for (int a = 0; a < 3; a++) {
        const mp_dtype t = types[a];
        void *px = make(t, B * C, 3.0, x), *pg = make(t, B * C, 1.0, g), *y = malloc(B * C * 4),
             *dx = malloc(B * C * 4);
        float mean[B], rstd[B], dw[C] = {0}, db[C] = {0};
        const float eps = 1e-5f;
        for (int i = 0; i < B * C; i++) x[i] += 10.0 * (i / C); /* offsets: the two-pass variance matters */
        for (int i = 0; i < B * C; i++) {
            const float v = (float)x[i];
            mp_convert((uint8_t *)px + i * mp_format(t)->size, t, &v, MP_F32, 1, NULL);
            x[i] = elem_f32(px, t, i);
        }
        mp_layernorm_forward(y, t, mean, rstd, px, t, w, bb, B, C, eps, MP_F32, NULL);
        mp_layernorm_backward(dx, t, dw, db, pg, t, px, t, mean, rstd, w, B, C, 1, MP_F32, NULL);
        long bad = 0;
        double dw64[C] = {0};
        for (int r = 0; r < B; r++) {
            const double rs = ln64(x + r * C, C, eps, n);
            bad += fabs(rstd[r] - rs) > 4 * C * u * rs;
            for (int j = 0; j < C; j++) {
                const double want = n[j] * w[j] + bb[j];
                bad += fabs(elem_f32(y, t, r * C + j) - want) >
                       (2 * C + 16) * u * (fabs(n[j]) + 1) * 2 + store_err(t, want);
                dw64[j] += g[r * C + j] * n[j];
            }
            /* dx by central differences of the fp64 loss sum(g * y) */
            for (int j = 0; j < C; j += 16) {
                const double h = 1e-6;
                memcpy(xp, x + r * C, sizeof xp);
                xp[j] += h;
                ln64(xp, C, eps, np_);
                xp[j] -= 2 * h;
                ln64(xp, C, eps, nm);
                double d = 0;
                for (int k = 0; k < C; k++) d += g[r * C + k] * w[k] * (np_[k] - nm[k]) / (2 * h);
                bad += fabs(elem_f32(dx, t, r * C + j) - d) > 1e-4 * (1 + fabs(d)) + store_err(t, d);
            }
        }
        for (int j = 0; j < C; j++) bad += fabs(dw[j] - dw64[j]) > 1e-4 * (1 + fabs(dw64[j]));
        CHECK(bad == 0, "layernorm %s: %ld values out of bound", mp_format(t)->name, bad);
        free(px), free(pg), free(y), free(dx);
    }
}

/* ---- what mixprec avoids: the same reductions in fp16 arithmetic ---- */

static float h(float x) { return mp_f16_to_f32(mp_f32_to_f16(x)); } /* round to fp16 */

static void check_fp16_failures(void) {
    enum { C = 64 };
    float logits[C];
    double lx[C], want[C];
    for (int j = 0; j < C; j++) logits[j] = h((float)(j % 16) + 0.25f * (float)(j / 16)); /* up to 15.75 */
    for (int j = 0; j < C; j++) lx[j] = logits[j];
    softmax64(lx, want, C, 0);
    /* naive fp16 softmax: exp(15.75) = 6.9e6 overflows fp16; inf / inf = NaN */
    float s16 = 0, naive[C];
    for (int j = 0; j < C; j++) s16 = h(s16 + h(expf(logits[j])));
    for (int j = 0; j < C; j++) naive[j] = h(h(expf(logits[j])) / s16);
    int naive_nan = 0;
    for (int j = 0; j < C; j++) naive_nan += isnan(naive[j]) || isinf(naive[j]);
    uint16_t x16[C], y16[C];
    mp_convert(x16, MP_F16, logits, MP_F32, C, NULL);
    mp_softmax_forward(y16, MP_F16, x16, MP_F16, 1, C, 0, MP_F32, NULL);
    long bad = 0;
    for (int j = 0; j < C; j++)
        bad += fabs(mp_f16_to_f32(y16[j]) - want[j]) > (C + 8) * u * want[j] + store_err(MP_F16, want[j]);
    CHECK(naive_nan > 0 && bad == 0, "softmax: fp16 arithmetic gives %d inf/NaN; mixprec %ld out of bound", naive_nan,
          bad);
    printf("  softmax of 64 logits up to 15.75: fp16 arithmetic -> %d of 64 inf/NaN; mixprec within (C+8)u of fp64\n",
           naive_nan);

    /* layer norm of activations around 300: x^2 overflows fp16 (65504) */
    float act[C];
    double ax[C], an[C];
    for (int j = 0; j < C; j++) act[j] = h(300.0f + (float)(j % 8)), ax[j] = act[j];
    ln64(ax, C, 1e-5, an);
    float sq = 0, sm = 0;
    for (int j = 0; j < C; j++) sm = h(sm + act[j]), sq = h(sq + h(act[j] * act[j])); /* E[x^2] - E[x]^2 in fp16 */
    const float var16 = h(h(sq / C) - h(h(sm / C) * h(sm / C)));
    uint16_t a16[C], o16[C];
    float mean, rstd;
    mp_convert(a16, MP_F16, act, MP_F32, C, NULL);
    mp_layernorm_forward(o16, MP_F16, &mean, &rstd, a16, MP_F16, NULL, NULL, 1, C, 1e-5f, MP_F32, NULL);
    bad = 0;
    for (int j = 0; j < C; j++)
        bad +=
            fabs(mp_f16_to_f32(o16[j]) - an[j]) > (2 * C + 16) * u * (fabs(an[j]) + 1) * 2 + store_err(MP_F16, an[j]);
    CHECK(!isfinite(var16) && bad == 0, "layernorm: fp16 variance %g; mixprec %ld out of bound", (double)var16, bad);
    printf("  layer norm of 64 values near 300: fp16 variance = %g; mixprec within bound of fp64\n", (double)var16);

    /* a long sum: 10000 gradients of 1.0 stored in fp16 */
    enum { L = 10000 };
    static uint16_t ones[L];
    const uint16_t one = mp_f32_to_f16(1.0f);
    for (int i = 0; i < L; i++) ones[i] = one;
    float acc16 = 0, cs;
    for (int i = 0; i < L; i++) acc16 = h(acc16 + 1.0f);
    mp_colsum(&cs, ones, MP_F16, L, 1, 0, MP_F32);
    CHECK(acc16 == 2048.0f && cs == 10000.0f, "long sum: fp16 %g, mixprec %g", (double)acc16, (double)cs);
    printf("  sum of 10000 ones: fp16 accumulator stops at %g; mixprec's fp32 accumulator gives %g\n", (double)acc16,
           (double)cs);
}

/* --reductions half: the ops with acc = fp16/bf16 equal a naive loop in that
 * format written out here (every partial result rounded), bit for bit, on
 * random rows; and the sums saturate where such a loop must. */
static float rt(mp_dtype t, float x) {
    return t == MP_F16 ? mp_f16_to_f32(mp_f32_to_f16(x)) : mp_bf16_to_f32(mp_f32_to_bf16(x));
}

static void naive_softmax_ref(const float *x, float *y, int C, mp_dtype t, float *lse) {
    float mx = -INFINITY, sum = 0;
    for (int j = 0; j < C; j++) mx = x[j] > mx ? x[j] : mx;
    for (int j = 0; j < C; j++) sum = rt(t, sum + rt(t, ref_exp(rt(t, x[j] - mx))));
    for (int j = 0; j < C; j++) y[j] = rt(t, rt(t, ref_exp(rt(t, x[j] - mx))) / sum);
    *lse = rt(t, rt(t, logf(sum)) + mx);
}

static void check_naive_reductions(void) {
    enum { B = 5, C = 300, NSAT = 4096 };
    /* the ops' inline rounding (internal.h) against the conversions, on a stride of all fp32 bit patterns */
    long wrong = 0;
    const uint32_t stride = quick ? 65521u : 251u;
    for (uint64_t i = 0; i < 0x100000000ull; i += stride) {
        float x;
        const uint32_t bits = (uint32_t)i;
        memcpy(&x, &bits, 4);
        for (int ti = 1; ti < 3; ti++) {
            const float want = rt(types[ti], x), got = mp_round_to(types[ti], x);
            wrong += isnan(want) ? !isnan(got) : memcmp(&want, &got, 4) != 0;
        }
    }
    const float edges[] = {65504.0f,     65519.99f, 65520.0f,      -65520.0f, 0x1p-14f,
                           0x1.ffcp-15f, 0x1p-25f,  0x1.0001p-25f, -0x1p-25f, 0x3p-25f,
                           0x1p-24f,     -0.0f,     3.3895e38f,    3.4e38f,   1.0f + 0x1p-11f};
    for (size_t e = 0; e < sizeof edges / sizeof edges[0]; e++)
        for (int ti = 1; ti < 3; ti++) {
            const float want = rt(types[ti], edges[e]), got = mp_round_to(types[ti], edges[e]);
            wrong += memcmp(&want, &got, 4) != 0;
        }
    CHECK(wrong == 0, "mp_round_to differs from the conversions on %ld values", wrong);
    for (int ti = 1; ti < 3; ti++) {
        const mp_dtype t = types[ti];
        const char *tn = mp_format(t)->name;
        /* random rows, stored in t */
        static float x[B * C], dy[B * C], y[B * C], want[B * C], dw[C], db[C], wdw[C], wdb[C];
        static uint16_t xs[B * C], ys[B * C], gs[B * C];
        for (int i = 0; i < B * C; i++) x[i] = rt(t, (float)(3 * drand())), dy[i] = rt(t, (float)drand());
        mp_convert(xs, t, x, MP_F32, B * C, NULL);
        mp_convert(gs, t, dy, MP_F32, B * C, NULL);
        /* softmax and the loss */
        int32_t lab[B];
        float lse[B], loss_want = 0, loss;
        for (int b = 0; b < B; b++) {
            lab[b] = (int32_t)((b * 37) % C);
            naive_softmax_ref(x + b * C, want + b * C, C, t, &lse[b]);
            loss_want += rt(t, lse[b] - x[b * C + lab[b]]);
        }
        mp_softmax_forward(ys, t, xs, t, B, C, 0, t, NULL);
        mp_convert(y, MP_F32, ys, t, B * C, NULL);
        CHECK(memcmp(y, want, sizeof y) == 0, "%s naive softmax differs from the reference loop", tn);
        CHECK(mp_cross_entropy(&loss, ys, t, xs, t, lab, B, C, 1.0f, t, NULL) == MP_OK && loss == loss_want / B,
              "%s naive cross-entropy %.9g, reference %.9g", tn, (double)loss, (double)(loss_want / B));
        for (int b = 0; b < B; b++) want[b * C + lab[b]] = rt(t, want[b * C + lab[b]] - 1.0f);
        for (int i = 0; i < B * C; i++) want[i] = rt(t, want[i] / B);
        mp_convert(y, MP_F32, ys, t, B * C, NULL);
        CHECK(memcmp(y, want, sizeof y) == 0, "%s naive dlogits differ from the reference loop", tn);
        /* layer norm forward and backward (w = 1, b = 0) */
        float mean[B], rstd[B], wm[B], wr[B];
        for (int b = 0; b < B; b++) {
            const float *r = x + b * C;
            float m = 0, v = 0;
            for (int j = 0; j < C; j++) m = rt(t, m + r[j]);
            m = rt(t, m / C);
            for (int j = 0; j < C; j++) v = rt(t, v + rt(t, rt(t, r[j] - m) * rt(t, r[j] - m)));
            v = rt(t, v / C);
            wm[b] = m, wr[b] = rt(t, 1.0f / rt(t, sqrtf(rt(t, v + rt(t, 1e-5f)))));
            for (int j = 0; j < C; j++) want[b * C + j] = rt(t, (r[j] - m) * wr[b]);
        }
        mp_layernorm_forward(ys, t, mean, rstd, xs, t, NULL, NULL, B, C, 1e-5f, t, NULL);
        mp_convert(y, MP_F32, ys, t, B * C, NULL);
        CHECK(memcmp(mean, wm, sizeof mean) == 0 && memcmp(rstd, wr, sizeof rstd) == 0 &&
                  memcmp(y, want, sizeof y) == 0,
              "%s naive layer norm differs from the reference loop", tn);
        for (int j = 0; j < C; j++) wdw[j] = wdb[j] = 0, dw[j] = db[j] = 0.5f; /* accumulate onto 0.5 */
        for (int b = 0; b < B; b++) {
            float a = 0, c = 0;
            for (int j = 0; j < C; j++) {
                const float n = (x[b * C + j] - mean[b]) * rstd[b];
                a = rt(t, a + dy[b * C + j]), c = rt(t, c + rt(t, dy[b * C + j] * n));
                wdw[j] = rt(t, wdw[j] + rt(t, dy[b * C + j] * n)), wdb[j] = rt(t, wdb[j] + dy[b * C + j]);
            }
            a = rt(t, a / C), c = rt(t, c / C);
            for (int j = 0; j < C; j++) {
                const float n = (x[b * C + j] - mean[b]) * rstd[b];
                want[b * C + j] = rt(t, rstd[b] * (dy[b * C + j] - a - n * c));
            }
        }
        for (int j = 0; j < C; j++) wdw[j] += 0.5f, wdb[j] += 0.5f;
        mp_layernorm_backward(ys, t, dw, db, gs, t, xs, t, mean, rstd, NULL, B, C, 1, t, NULL);
        mp_convert(y, MP_F32, ys, t, B * C, NULL);
        CHECK(memcmp(y, want, sizeof y) == 0 && memcmp(dw, wdw, sizeof dw) == 0 && memcmp(db, wdb, sizeof db) == 0,
              "%s naive layer-norm backward differs from the reference loop", tn);
        /* softmax backward from the naive softmax: dx = y (dy - sum(dy y)) */
        mp_softmax_forward(ys, t, xs, t, B, C, 0, t, NULL);
        mp_convert(y, MP_F32, ys, t, B * C, NULL);
        for (int b = 0; b < B; b++) {
            float dot = 0;
            for (int j = 0; j < C; j++) dot = rt(t, dot + rt(t, dy[b * C + j] * y[b * C + j]));
            for (int j = 0; j < C; j++) want[b * C + j] = rt(t, y[b * C + j] * rt(t, dy[b * C + j] - dot));
        }
        mp_softmax_backward(gs, t, ys, t, gs, t, B, C, 0, t, NULL);
        mp_convert(y, MP_F32, gs, t, B * C, NULL);
        CHECK(memcmp(y, want, sizeof y) == 0, "%s naive softmax backward differs from the reference loop", tn);

        /* saturation: NSAT ones sum to 2048 in fp16 and 256 in bf16 (x + 1 rounds back to x) */
        static uint16_t ones[NSAT], zeros[NSAT], p16[NSAT];
        const float stop = t == MP_F16 ? 2048.0f : 256.0f;
        for (int i = 0; i < NSAT; i++) ones[i] = t == MP_F16 ? mp_f32_to_f16(1.0f) : mp_f32_to_bf16(1.0f), zeros[i] = 0;
        float cs, cs32;
        mp_colsum(&cs, ones, t, NSAT, 1, 0, t);
        mp_colsum(&cs32, ones, t, NSAT, 1, 0, MP_F32);
        CHECK(cs == stop && cs32 == NSAT, "%s colsum of %d ones: naive %g, fp32 %g", tn, NSAT, (double)cs,
              (double)cs32);
        /* a softmax over NSAT equal logits: the sum stops there, every probability is 1/stop, not 1/NSAT */
        float p0;
        mp_softmax_forward(p16, t, zeros, t, 1, NSAT, 0, t, NULL);
        mp_convert(&p0, MP_F32, p16, t, 1, NULL);
        CHECK(p0 == 1.0f / stop, "%s naive softmax of %d zeros: %g", tn, NSAT, (double)p0);
        mp_softmax_forward(p16, t, zeros, t, 1, NSAT, 0, MP_F32, NULL);
        mp_convert(&p0, MP_F32, p16, t, 1, NULL);
        CHECK(p0 == 1.0f / NSAT, "%s fp32-reduced softmax of %d zeros: %g", tn, NSAT, (double)p0);
        /* the loss of NSAT equal logits: log(stop), not log(NSAT) */
        const int32_t l0 = 0;
        CHECK(mp_cross_entropy(&loss, NULL, MP_F32, zeros, t, &l0, 1, NSAT, 1.0f, t, NULL) == MP_OK &&
                  loss == rt(t, logf(stop)),
              "%s naive loss over %d equal logits: %g", tn, NSAT, (double)loss);
        if (t == MP_F16)
            printf("  --reductions half (fp16): %d ones sum to %g; softmax of %d equal logits gives %g each (not %g); "
                   "loss %g (not %g)\n",
                   NSAT, (double)cs, NSAT, 1.0 / stop, 1.0 / NSAT, (double)loss, log((double)NSAT));
    }
    CHECK(mp_colsum(&(float){0}, &(float){1}, MP_F32, 1, 1, 0, MP_E4M3) == MP_EINVAL, "colsum: acc e4m3 refused");
}

/* ReLU on half buffers works on the bits: same results and counts as the
 * float computation, on every code (NaNs, infinities, subnormals, -0), on
 * every CPU path, for whole vectors and a ragged tail. */
static void check_relu_bits(void) {
    const int lens[2] = {65536, 65536 - 45};
    for (int isa = MP_ISA_SCALAR; isa <= (int)mp_cpu_detected(); isa++)
        for (int t = 0; t < 2; t++)
            for (int li = 0; li < 2; li++) {
                mp_cpu_set_isa((mp_isa)isa);
                const mp_dtype dt = t ? MP_BF16 : MP_F16;
                const uint32_t N = (uint32_t)lens[li];
                static uint16_t x[65536], dy[65536], y[65536];
                for (uint32_t i = 0; i < N; i++) x[i] = (uint16_t)(i * 7u), dy[i] = (uint16_t)(i * 40503u);
                long bad = 0;
                mp_convert_stats sf = {0}, sb = {0}, wf = {0}, wb = {0};
                mp_relu_forward(y, dt, x, dt, N, &sf);
                for (uint32_t i = 0; i < N; i++) {
                    const float v = elem_f32(x, dt, i), r = v > 0.0f ? v : 0.0f;
                    uint16_t want;
                    mp_convert(&want, dt, &r, MP_F32, 1, &wf);
                    bad += y[i] != want;
                }
                mp_relu_backward(y, dt, dy, dt, x, dt, N, &sb);
                for (uint32_t i = 0; i < N; i++) {
                    const float g = elem_f32(dy, dt, i), r = elem_f32(x, dt, i) > 0.0f ? g : 0.0f;
                    uint16_t want;
                    mp_convert(&want, dt, &r, MP_F32, 1, &wb);
                    bad += y[i] != want;
                }
                CHECK(bad == 0 && sf.subnormal == wf.subnormal && sf.nan == wf.nan && sb.subnormal == wb.subnormal &&
                          sb.nan == wb.nan && sb.underflow == 0 && sb.overflow == 0 && wb.nan > 0 && wf.subnormal > 0 &&
                          sf.amax == wf.amax && sb.amax == wb.amax && sf.amax > 0 && sb.amax == mp_amax(y, dt, N),
                      "%s relu on bits (isa %d, %u values): %ld differ, amax %g/%g (want %g/%g)", mp_format(dt)->name,
                      isa, N, bad, (double)sf.amax, (double)sb.amax, (double)wf.amax, (double)wb.amax);
            }
    mp_cpu_set_isa(mp_cpu_detected());
}

/* ---- GELU: accuracy against a long double reference, special values, and
 * the same bits on every CPU path and thread count ---- */

typedef long double ld;
static const ld GK = 0.797884560802865355879892119868763737L, GC = 0.044715L;
static const ld GS1_2 = 0.707106781186547524400844362104849039L, GIS2PI = 0.398942280401432677939946059934381868L;
/* x sigmoid(2u) and its derivative, without the cancellation of 1 + tanh(u) for x < 0 */
static ld gelu_ref(ld x) { return x / (1 + expl(-2 * GK * (x + GC * x * x * x))); }
static ld gelu_grad_ref(ld x) {
    const ld e = 2 * GK * (x + GC * x * x * x), de = 2 * GK * (1 + 3 * GC * x * x);
    return (1 + x * de / (1 + expl(e))) / (1 + expl(-e));
}
static ld gelu_erf_ref(ld x) { return x * 0.5L * erfcl(-x * GS1_2); }
static ld gelu_erf_grad_ref(ld x) { return 0.5L * erfcl(-x * GS1_2) + x * GIS2PI * expl(-x * x / 2); }

/* |got - ref| in fp32 ulps of ref (subnormal spacing below 2^-126); an
 * overflowing ref wants the signed infinity */
static double ulp_err(float got, ld ref) {
    if (isnan(got)) return 1e30;
    if (fabsl(ref) > 0x1.fffffep127L) return isinf(got) && (got > 0) == (ref > 0) ? 0 : 1e30;
    int ex;
    frexpl(fabsl(ref), &ex); /* |ref| = m 2^ex, m in [0.5, 1) */
    if (ex < -125) ex = -125;
    return (double)(fabsl((ld)got - ref) / ldexpl(1, ex - 24));
}

typedef struct {
    const char *name;
    int bwd;
    mp_status (*fwd_fn)(void *, mp_dtype, const void *, mp_dtype, size_t, mp_convert_stats *);
    mp_status (*bwd_fn)(void *, mp_dtype, const void *, mp_dtype, const void *, mp_dtype, size_t, mp_convert_stats *);
    ld (*ref)(ld);
} gelu_case;

static const gelu_case gelu_cases[4] = {
    {"gelu tanh forward", 0, mp_gelu_forward, NULL, gelu_ref},
    {"gelu tanh backward", 1, NULL, mp_gelu_backward, gelu_grad_ref},
    {"gelu erf forward", 0, mp_gelu_erf_forward, NULL, gelu_erf_ref},
    {"gelu erf backward", 1, NULL, mp_gelu_erf_backward, gelu_erf_grad_ref},
};

/* out = f(x) in fp32 (backward: dy given, or 1) */
static void gelu_run(const gelu_case *c, float *out, const float *x, const float *dy, size_t n, mp_convert_stats *st) {
    if (!c->bwd) {
        CHECK(c->fwd_fn(out, MP_F32, x, MP_F32, n, st) == MP_OK, "%s", c->name);
        return;
    }
    float *g = malloc(n * sizeof *g);
    for (size_t i = 0; i < n; i++) g[i] = dy ? dy[i] : 1.0f;
    CHECK(c->bwd_fn(out, MP_F32, g, MP_F32, x, MP_F32, n, st) == MP_OK, "%s", c->name);
    free(g);
}

/* Every 389th fp32 value with |x| <= 20 (every 4099th in quick mode), every
 * value within 2^16 ulps of the derivative's zero near -0.7518 (where it is
 * hardest), on every CPU path: the same bits everywhere, within 2 ulps of the
 * reference on the first. */
static void check_gelu_accuracy(void) {
    const uint32_t stride = quick ? 4099u : 389u, lim = 0x41a00000u; /* 20.0f */
    size_t n = 0, cap = 2 * (lim / stride + 2) + (2u << 16) + 8;
    float *x = malloc(cap * sizeof *x), *y = malloc(cap * sizeof *y), *y0 = malloc(cap * sizeof *y0);
    for (uint32_t b = 0; b <= lim; b += stride) x[n++] = u2f(b), x[n++] = u2f(b | 0x80000000u);
    const uint32_t root = f2u(-0.7518f);
    for (uint32_t b = root - (1u << 16); b < root + (1u << 16); b++) x[n++] = u2f(b);
    for (int c = 0; c < 4; c++) {
        const gelu_case *gc = &gelu_cases[c];
        mp_cpu_set_isa(MP_ISA_SCALAR);
        gelu_run(gc, y0, x, NULL, n, NULL);
        double worst = 0;
        float wx = 0;
        long bad = 0;
        for (size_t i = 0; i < n; i++) {
            const double e = ulp_err(y0[i], gc->ref(x[i]));
            bad += e > 2.0;
            if (e > worst) worst = e, wx = x[i];
        }
        CHECK(bad == 0, "%s: %ld of %zu values beyond 2 ulps (worst %.3g at x = %a)", gc->name, bad, n, worst,
              (double)wx);
        printf("  %s: max error %.4f ulp (at x = %.9g) over %zu fp32 values in [-20, 20]\n", gc->name, worst,
               (double)wx, n);
        for (int isa = MP_ISA_SCALAR + 1; isa <= (int)mp_cpu_detected(); isa++) {
            mp_cpu_set_isa((mp_isa)isa);
            gelu_run(gc, y, x, NULL, n, NULL);
            CHECK(memcmp(y, y0, n * sizeof *y) == 0, "%s: %s path differs from the portable one", gc->name,
                  mp_isa_name((mp_isa)isa));
        }
    }
    mp_cpu_set_isa(mp_cpu_detected());
    free(x), free(y), free(y0);
}

/* limits and special values; dy large (a loss scale) times a tiny derivative */
static void check_gelu_special(void) {
    const float inf = INFINITY, nan = NAN;
    const float xs[] = {0.0f,  -0.0f,  0x1p-149f, -0x1p-149f, 1e-30f, -1e-30f, 1e-10f,          -1e-10f,
                        20.0f, -20.0f, 25.0f,     -25.0f,     1e30f,  -1e30f,  0x1.fffffep127f, -0x1.fffffep127f,
                        inf,   -inf,   nan,       -10.0f,     -13.0f, -14.2f};
    enum { N = sizeof xs / sizeof xs[0] };
    float y[N], dyb[N], dy1[N];
    for (int c = 0; c < 4; c++) {
        const gelu_case *gc = &gelu_cases[c];
        for (int isa = MP_ISA_SCALAR; isa <= (int)mp_cpu_detected(); isa++) {
            mp_cpu_set_isa((mp_isa)isa);
            gelu_run(gc, y, xs, NULL, N, NULL);
            for (int i = 0; i < N; i++) {
                const float x = xs[i];
                int ok;
                if (isnan(x)) ok = isnan(y[i]);
                else if (x == inf) ok = gc->bwd ? y[i] == 1.0f : y[i] == inf;
                else if (x == -inf) ok = f2u(y[i]) == 0x80000000u; /* -0 */
                else {
                    const ld want = gc->ref(x);
                    /* a forward that rounds to zero keeps the sign of x */
                    ok = ulp_err(y[i], want) <= 2.0 &&
                         ((float)want != 0 || gc->bwd || (y[i] == 0 && signbit(y[i]) == signbit((float)want)));
                }
                CHECK(ok, "%s (%s) at x = %a: %a, want %La", gc->name, mp_isa_name((mp_isa)isa), (double)x,
                      (double)y[i], isinf(x) || isnan(x) ? 0.0L : gc->ref(x));
            }
            /* gelu(+-0) = +-0 */
            if (!gc->bwd)
                CHECK(f2u(y[0]) == 0 && f2u(y[1]) == 0x80000000u, "%s: gelu(+-0) = %a, %a", gc->name, (double)y[0],
                      (double)y[1]);
            if (gc->bwd) {
                /* dy * derivative rounded once: a loss-scaled dy keeps tiny products alive */
                for (int i = 0; i < N; i++) dyb[i] = 0x1p100f, dy1[i] = nan;
                gelu_run(gc, y, xs, dyb, N, NULL);
                for (int i = 0; i < N; i++) {
                    if (isnan(xs[i]) || isinf(xs[i])) continue;
                    const ld want = 0x1p100L * gc->ref(xs[i]);
                    CHECK(ulp_err(y[i], want) <= 2.0, "%s: dy 2^100 at x = %a: %a, want %La", gc->name, (double)xs[i],
                          (double)y[i], want);
                }
                gelu_run(gc, y, xs, dy1, N, NULL);
                for (int i = 0; i < N; i++)
                    CHECK(isnan(y[i]), "%s: NaN dy at x = %a gives %a", gc->name, (double)xs[i], (double)y[i]);
            }
        }
    }
    mp_cpu_set_isa(mp_cpu_detected());
}

/* bf16 and fp16 buffers: the same bits and counts on 1 and 2 threads and on
 * every CPU path, and the stores are mp_convert's (values and counts) */
static void check_gelu_paths(void) {
    enum { N = 300001 };
    float *xf = malloc(N * 4), *gf = malloc(N * 4), *yf = malloc(N * 4);
    uint16_t *x16 = malloc(N * 2), *g16 = malloc(N * 2), *y16 = malloc(N * 2), *r16 = malloc(N * 2),
             *c16 = malloc(N * 2);
    for (int t = 0; t < 2; t++) {
        const mp_dtype dt = t ? MP_BF16 : MP_F16;
        for (int i = 0; i < N; i++) xf[i] = (float)(12.0 * drand()), gf[i] = (float)(1e-3 * drand());
        xf[7] = INFINITY, xf[8] = -INFINITY, xf[9] = NAN;
        mp_convert(x16, dt, xf, MP_F32, N, NULL);
        mp_convert(g16, dt, gf, MP_F32, N, NULL);
        mp_convert(xf, MP_F32, x16, dt, N, NULL);
        mp_convert(gf, MP_F32, g16, dt, N, NULL);
        for (int c = 0; c < 4; c++) {
            const gelu_case *gc = &gelu_cases[c];
            mp_convert_stats s0 = {0}, sw = {0};
            /* reference: fp32 result, then converted */
            mp_cpu_set_isa(MP_ISA_SCALAR);
            gelu_run(gc, yf, xf, gf, N, NULL);
            mp_convert(c16, dt, yf, MP_F32, N, &sw);
            for (int isa = MP_ISA_SCALAR; isa <= (int)mp_cpu_detected(); isa++)
                for (int threads = 1; threads <= 2; threads++) {
                    mp_cpu_set_isa((mp_isa)isa);
                    mp_set_threads(threads);
                    mp_convert_stats st = {0};
                    if (gc->bwd) CHECK(gc->bwd_fn(y16, dt, g16, dt, x16, dt, N, &st) == MP_OK, "%s", gc->name);
                    else CHECK(gc->fwd_fn(y16, dt, x16, dt, N, &st) == MP_OK, "%s", gc->name);
                    if (isa == MP_ISA_SCALAR && threads == 1) memcpy(r16, y16, N * 2), s0 = st;
                    CHECK(memcmp(y16, r16, N * 2) == 0 && convert_stats_eq(&st, &s0),
                          "%s %s: %s, %d threads differ from scalar, 1 thread", gc->name, mp_format(dt)->name,
                          mp_isa_name((mp_isa)isa), threads);
                }
            CHECK(memcmp(r16, c16, N * 2) == 0 && convert_stats_eq(&s0, &sw),
                  "%s %s: stores or counts differ from converting the fp32 results", gc->name, mp_format(dt)->name);
        }
    }
    mp_set_threads(0);
    mp_cpu_set_isa(mp_cpu_detected());
    free(xf), free(gf), free(yf), free(x16), free(g16), free(y16), free(r16), free(c16);
}

/* The GEMM epilogue's tables of every 16-bit input (src/gelu_table.c) give
 * the kernels' bits: every bf16 and fp16 code through the forward, and the
 * backward of every code with gradients of each magnitude and sign, zero,
 * subnormal, infinite and NaN (NaN x: x with its quiet bit, whatever g). */
static void check_gelu_tables(void) {
    const long mark = check_failures;
    enum { N = 65536 };
    const float gs[] = {1.0f, -0.375f, 3e-3f, -7e5f, 0.0f, -0.0f, 1e-40f, 3e38f, INFINITY, -INFINITY, NAN};
    float *x = malloc(N * 4), *y = malloc(N * 4), *g = malloc(N * 4);
    long diff = 0;
    for (int erf = 0; erf < 2; erf++)
        for (int f16 = 0; f16 < 2; f16++) {
            const mp_dtype t = f16 ? MP_F16 : MP_BF16;
            const mp_gelu_table *tb = mp_gelu_table_of(erf, t);
            CHECK(tb != NULL, "no table for %s %s", erf ? "erf" : "tanh", mp_format(t)->name);
            if (!tb) continue;
            for (uint32_t c = 0; c < N; c++) x[c] = f16 ? mp_f16_to_f32((uint16_t)c) : mp_bf16_to_f32((uint16_t)c);
            memcpy(y, x, N * 4);
            (erf ? mp_gelu_scalar.erf_fwd : mp_gelu_scalar.tanh_fwd)(y, N);
            for (uint32_t c = 0; c < N; c++) diff += mp_f32_bits(y[c]) != mp_f32_bits(tb->y[c]);
            for (size_t k = 0; k < sizeof gs / sizeof gs[0]; k++) {
                for (uint32_t c = 0; c < N; c++) g[c] = gs[k] * (1.0f + (float)(c % 7) / 8.0f);
                memcpy(y, g, N * 4);
                (erf ? mp_gelu_scalar.erf_bwd : mp_gelu_scalar.tanh_bwd)(y, x, N);
                for (uint32_t c = 0; c < N; c++)
                    diff += mp_f32_bits(y[c]) != mp_f32_bits(mp_gelu_table_bwd1(tb, (uint16_t)c, x[c], g[c]));
            }
        }
    CHECK(diff == 0, "GELU tables: %ld results differ from the kernels'", diff);
    CHECK(mp_gelu_table_of(0, MP_F32) == NULL, "a table for fp32 inputs");
    free(x), free(y), free(g);
    CHECK_SAY(mark, "  GELU tables: every bf16 and fp16 code, both forms, forward and backward (11 gradients each): "
                    "the kernels' bits\n");
}

/* ---- e^x (src/cpu/softmax_kernels.h): against libm's fp64 exp rounded to
 * fp32, special values, and the same bits on every CPU path; the softmax rows
 * built on it, the same bits on every path ---- */

/* |got - exp(x)| in fp32 ulps of exp(x) (subnormal spacing below 2^-126) */
static double exp_ulp_err(float got, double ref) {
    if (isnan(got)) return 1e30;
    if (ref > 0x1.fffffep127) return got == INFINITY ? 0 : 1e30;
    int ex;
    frexp(ref, &ex);
    if (ex < -125) ex = -125;
    return fabs((double)got - ref) / ldexp(1, ex - 24);
}

typedef struct {
    double worst; /* largest error in ulps of the exact value */
    float worst_x;
    uint64_t n, off1; /* inputs; results 1 ulp from the correctly rounded one */
    long bad, differ; /* beyond the bound; paths differing from the portable one */
} exp_tally;

enum { EXP_BLOCK = 1 << 16 };

/* Inputs b, b + stride, ... (n of them) into t: each path's e^x against the
 * portable one, which is checked against libm; x, y0, y hold EXP_BLOCK. */
static void exp_block(exp_tally *t, uint64_t b, size_t n, uint32_t stride, float *x, float *y0, float *y) {
    for (size_t i = 0; i < n; i++) x[i] = u2f((uint32_t)(b + i * (uint64_t)stride));
    mp_softmax_scalar.exp(y0, x, n);
    for (int isa = MP_ISA_SCALAR + 1; isa <= (int)mp_cpu_detected(); isa++) {
        mp_kernels_of((mp_isa)isa)->softmax->exp(y, x, n);
        t->differ += memcmp(y, y0, n * sizeof *y) != 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (isnan(x[i])) { /* NaN in, NaN out */
            t->bad += !isnan(y0[i]);
            continue;
        }
        const double ref = exp((double)x[i]);
        const double e = exp_ulp_err(y0[i], ref);
        const float cr = (float)ref; /* correctly rounded unless exp(x) is within ~2^-29 ulp of a tie */
        const uint32_t d = f2u(y0[i]) > f2u(cr) ? f2u(y0[i]) - f2u(cr) : f2u(cr) - f2u(y0[i]);
        t->bad += e > 0.875 || d > 1;
        t->off1 += d == 1;
        if (e > t->worst) t->worst = e, t->worst_x = x[i];
    }
    t->n += n;
}

/* Every input b0, b0 + stride, ... <= b1 (bit patterns of one sign), in
 * blocks on the threads; the blocks' tallies summed in order, so the worst
 * input is the first of the largest error, as one thread would find it. */
static void exp_sweep(exp_tally *t, uint32_t b0, uint32_t b1, uint32_t stride) {
    const uint64_t count = ((uint64_t)b1 - b0) / stride + 1, blocks = (count + EXP_BLOCK - 1) / EXP_BLOCK;
    exp_tally *part = calloc(blocks, sizeof *part);
    int nomem = !part;
#pragma omp parallel reduction(| : nomem)
    {
        float *buf = malloc(3 * EXP_BLOCK * sizeof *buf);
        nomem |= !buf;
#pragma omp for schedule(dynamic)
        for (uint64_t k = 0; k < blocks; k++) {
            const uint64_t first = k * EXP_BLOCK, n = count - first < EXP_BLOCK ? count - first : EXP_BLOCK;
            if (part && buf)
                exp_block(part + k, b0 + first * stride, (size_t)n, stride, buf, buf + EXP_BLOCK, buf + 2 * EXP_BLOCK);
        }
        free(buf);
    }
    CHECK(!nomem, "e^x sweep: out of memory");
    for (uint64_t k = 0; part && k < blocks; k++) {
        const exp_tally *p = part + k;
        t->n += p->n, t->off1 += p->off1, t->bad += p->bad, t->differ += p->differ;
        if (p->worst > t->worst) t->worst = p->worst, t->worst_x = p->worst_x;
    }
    free(part);
}

/* The softmax's range, x in [-104, 0]: every input with --long (make
 * test-long), every 127th otherwise (every 4099th in quick mode), and 2^14
 * around the ends of the result's range; the rest of fp32 (x > 0, x < -104,
 * infinities and NaNs): every 127th with --long, every 1021st otherwise
 * (65521st). Within 0.875 ulp of exact (softmax_kernels.h says 0.874) and so
 * within 1 ulp of correctly rounded. */
static void check_exp(void) {
    const uint32_t stride = mode == ALL ? 1u
                            : quick     ? 4099u
                                        : 127u,
                   other = mode == ALL ? 127u
                           : quick     ? 65521u
                                       : 1021u;
    exp_tally in = {0}, out = {0};
    exp_sweep(&in, 0x80000000u, 0xc2d00000u, stride); /* -0 .. -104 */
    const uint32_t ends[] = {f2u(-103.972076f), f2u(88.7228394f), f2u(-87.3365479f), 0x80000000u, 0};
    for (size_t e = 0; e < sizeof ends / sizeof ends[0]; e++) {
        const uint32_t c = ends[e] & 0x7fffffffu, sign = ends[e] & 0x80000000u;
        exp_sweep(ends[e] < 0xc2d00000u && (sign || c == 0) ? &in : &out, sign | (c < 8192 ? 0 : c - 8192),
                  sign | (c + 8192), 1);
    }
    exp_sweep(&out, 0, 0x7fffffffu, other);           /* x >= +0, +inf, NaNs */
    exp_sweep(&out, 0xc2d00001u, 0xffffffffu, other); /* x < -104, -inf, NaNs */
    CHECK(in.bad == 0 && out.bad == 0,
          "e^x: %ld of %" PRIu64 " in [-104, 0] and %ld of %" PRIu64
          " elsewhere beyond 0.875 ulp or 1 ulp from correctly rounded",
          in.bad, in.n, out.bad, out.n);
    CHECK(in.differ == 0 && out.differ == 0, "e^x: %ld blocks differ between the paths and the portable one",
          in.differ + out.differ);
    printf("  e^x: max error %.4f ulp (at x = %.9g) over %" PRIu64 " fp32 values in [-104, 0]%s, %.3f%% 1 ulp from "
           "correctly rounded; %.4f ulp (at x = %.9g) over %" PRIu64 " others\n",
           in.worst, (double)in.worst_x, in.n, mode == ALL ? " (all)" : "", 100.0 * (double)in.off1 / (double)in.n,
           out.worst, (double)out.worst_x, out.n);
    /* special values and limits, on every path */
    static const struct {
        float x, want; /* to the bit */
    } sv[] = {{0.0f, 1.0f},
              {-0.0f, 1.0f},
              {0x1p-149f, 1.0f},
              {-0x1p-149f, 1.0f},
              {-INFINITY, 0.0f},
              {INFINITY, INFINITY},
              {-0x1.fffffep127f, 0.0f},
              {0x1.fffffep127f, INFINITY},
              {-104.0f, 0.0f},
              {-200.0f, 0.0f},
              {89.0f, INFINITY},
              {100.0f, INFINITY},
              /* either side of e^x = 2^-150: 0, then the smallest subnormal */
              {-0x1.9fe36ap+6f, 0.0f},
              {-0x1.9fe368p+6f, 0x1p-149f},
              /* either side of the overflow */
              {0x1.62e42ep+6f, 0x1.ffff08p+127f},
              {0x1.62e43p+6f, INFINITY},
              {1.0f, 0x1.5bf0a8p+1f},
              {-1.0f, 0x1.78b564p-2f}};
    enum { NS = sizeof sv / sizeof sv[0] };
    for (int isa = MP_ISA_SCALAR; isa <= (int)mp_cpu_detected(); isa++) {
        const mp_softmax_kernels *k = mp_kernels_of((mp_isa)isa)->softmax;
        float x[NS + 2], y[NS + 2];
        for (int i = 0; i < NS; i++) x[i] = sv[i].x;
        x[NS] = NAN, x[NS + 1] = -NAN;
        k->exp(y, x, NS + 2);
        for (int i = 0; i < NS; i++)
            CHECK(f2u(y[i]) == f2u(sv[i].want), "e^%a (%s) = %a, want %a", (double)sv[i].x, mp_isa_name((mp_isa)isa),
                  (double)y[i], (double)sv[i].want);
        CHECK(isnan(y[NS]) && isnan(y[NS + 1]) && signbit(y[NS + 1]), "e^NaN (%s): %a, %a", mp_isa_name((mp_isa)isa),
              (double)y[NS], (double)y[NS + 1]);
    }
}

/* The rows on every path the same bits as the portable one: forward and
 * backward of softmax and log_softmax, fp32 and naive sums, rows of every
 * length to 40 and some longer (each tail of the lanes), with infinities, NaN
 * and a row of -inf among them; and the attention's recomputed rows
 * (mp_softmax_row_again) equal to the forward's. */
static void check_softmax_paths(void) {
    enum { MAXC = 1100 };
    static const size_t lens[] = {1, 2, 3, 7, 15, 16, 17, 31, 32, 33, 40, 127, 256, 257, 1100};
    static float x[MAXC], g[MAXC], y0[MAXC], d0[MAXC], y[MAXC], d[MAXC], z[MAXC];
    long bad = 0;
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
        for (int kind = 0; kind < 4; kind++) {
            const size_t C = lens[li];
            for (size_t j = 0; j < C; j++) x[j] = (float)(30 * drand()), g[j] = (float)drand();
            if (kind == 1) x[C / 2] = -INFINITY, x[C - 1] = C > 1 ? -INFINITY : x[C - 1];
            if (kind == 2) x[C / 3] = INFINITY;
            if (kind == 3)
                for (size_t j = 0; j < C; j++) x[j] = -INFINITY;
            for (int ai = 0; ai < 3; ai++)
                for (int lg = 0; lg < 2; lg++)
                    for (int isa = MP_ISA_SCALAR; isa <= (int)mp_cpu_detected(); isa++) {
                        const mp_dtype acc = types[ai];
                        mp_cpu_set_isa((mp_isa)isa);
                        float keep[2];
                        memcpy(y, x, C * 4), memcpy(d, g, C * 4);
                        const float lse = mp_softmax_row(mp_kernels_current(), y, C, lg, acc);
                        mp_softmax_backward_row(mp_kernels_current(), d, y, C, lg, acc);
                        if (isa == MP_ISA_SCALAR) memcpy(y0, y, C * 4), memcpy(d0, d, C * 4), z[0] = lse;
                        bad += memcmp(y, y0, C * 4) || memcmp(d, d0, C * 4) || f2u(lse) != f2u(z[0]);
                        if (lg) continue;
                        memcpy(y, x, C * 4);
                        mp_softmax_row_keep(mp_kernels_current(), y, C, acc, keep);
                        memcpy(d, x, C * 4);
                        mp_softmax_row_again(mp_kernels_current(), d, C, acc, keep);
                        bad += memcmp(y, y0, C * 4) || memcmp(d, y0, C * 4);
                    }
        }
    mp_cpu_set_isa(mp_cpu_detected());
    CHECK(bad == 0, "softmax rows: %ld differ between the paths, or recomputed from the kept statistics", bad);
}

/* ---- row-wise ops on several threads: the same bits as before they were
 * parallel. Below, the sequential implementations they replaced (ops.c as of
 * the GPT commit), loads and stores through mp_convert as there ---- */

static void old_load(float *out, const void *p, mp_dtype t, size_t i, size_t n) {
    mp_convert(out, MP_F32, (const uint8_t *)p + i * mp_format(t)->size, t, n, NULL);
}
static void old_store(void *p, mp_dtype t, size_t i, const float *v, size_t n, mp_convert_stats *st) {
    mp_convert((uint8_t *)p + i * mp_format(t)->size, t, v, MP_F32, n, st);
}
/* (since then: e^x by softmax_kernels.h, and the sum in 16 lanes, element j
 * into lane j % 16, the lanes added by halves: 8, 4, 2, 1) */
static float old_softmax_row(float *r, size_t C, int log) {
    float mx = -INFINITY;
    for (size_t j = 0; j < C; j++) mx = r[j] > mx ? r[j] : mx;
    if (mx == -INFINITY) mx = 0.0f;
    float lane[16] = {0};
    for (size_t j = 0; j < C; j++) lane[j % 16] += ref_exp(r[j] - mx);
    for (int w = 8; w > 0; w /= 2)
        for (int l = 0; l < w; l++) lane[l] += lane[l + w];
    const float sum = lane[0];
    const float lse = logf(sum) + mx;
    if (log)
        for (size_t j = 0; j < C; j++) r[j] -= lse;
    else {
        const float inv = 1.0f / sum;
        for (size_t j = 0; j < C; j++) r[j] = ref_exp(r[j] - mx) * inv;
    }
    return lse;
}
static void old_softmax_forward(void *y, mp_dtype yt, const void *x, mp_dtype xt, size_t B, size_t C, int log,
                                mp_convert_stats *st) {
    float *row = malloc((C + 16) * sizeof(float));
    for (size_t b = 0; b < B; b++) {
        old_load(row, x, xt, b * C, C);
        old_softmax_row(row, C, log);
        old_store(y, yt, b * C, row, C, st);
    }
    free(row);
}
/* 16 lanes, element j in lane j % 16, added by halves (ops.h): a, or a b */
static float lanes(const float *a, const float *b, size_t n) {
    float l[16] = {0};
    for (size_t j = 0; j < n; j++) l[j % 16] += b ? a[j] * b[j] : a[j];
    for (int h = 8; h; h >>= 1)
        for (int k = 0; k < h; k++) l[k] += l[k + h];
    return l[0];
}

static void old_softmax_backward(void *dx, mp_dtype dxt, const void *y, mp_dtype yt, const void *dy, mp_dtype dyt,
                                 size_t B, size_t C, int log, mp_convert_stats *st) {
    float *r = malloc((2 * C + 16) * sizeof(float)), *yr = r, *g = r + C;
    for (size_t b = 0; b < B; b++) {
        old_load(yr, y, yt, b * C, C);
        old_load(g, dy, dyt, b * C, C);
        if (log) {
            const float dot = lanes(g, NULL, C);
            for (size_t j = 0; j < C; j++) g[j] -= ref_exp(yr[j]) * dot;
        } else {
            const float dot = lanes(g, yr, C);
            for (size_t j = 0; j < C; j++) g[j] = yr[j] * (g[j] - dot);
        }
        old_store(dx, dxt, b * C, g, C, st);
    }
    free(r);
}
static void old_cross_entropy(float *loss, void *dlogits, mp_dtype dt, const void *logits, mp_dtype lt,
                              const int32_t *labels, size_t B, size_t C, float scale, mp_convert_stats *st) {
    float *row = malloc((C + 16) * sizeof(float));
    float total = 0.0f;
    const float g = scale / (float)B;
    for (size_t b = 0; b < B; b++) {
        old_load(row, logits, lt, b * C, C);
        const float target = row[labels[b]];
        const float lse = old_softmax_row(row, C, 0);
        total += lse - target;
        if (dlogits) {
            row[labels[b]] -= 1.0f;
            for (size_t j = 0; j < C; j++) row[j] *= g;
            old_store(dlogits, dt, b * C, row, C, st);
        }
    }
    *loss = total / (float)B;
    free(row);
}
static void old_layernorm_forward(void *y, mp_dtype yt, float *mean, float *rstd, const void *x, mp_dtype xt,
                                  const float *w, const float *b, size_t B, size_t C, float eps, mp_convert_stats *st) {
    float *row = malloc((C + 16) * sizeof(float));
    for (size_t r = 0; r < B; r++) {
        old_load(row, x, xt, r * C, C);
        const float m = lanes(row, NULL, C) / (float)C;
        float *d = malloc((C + 1) * sizeof *d);
        for (size_t j = 0; j < C; j++) d[j] = row[j] - m;
        const float v = lanes(d, d, C) / (float)C;
        free(d);
        const float rs = 1.0f / sqrtf(v + eps);
        for (size_t j = 0; j < C; j++) {
            const float n = (row[j] - m) * rs;
            row[j] = n * (w ? w[j] : 1.0f) + (b ? b[j] : 0.0f);
        }
        mean[r] = m, rstd[r] = rs;
        old_store(y, yt, r * C, row, C, st);
    }
    free(row);
}
static void old_layernorm_backward(void *dx, mp_dtype dxt, float *dw, float *db, const void *dy, mp_dtype dyt,
                                   const void *x, mp_dtype xt, const float *mean, const float *rstd, const float *w,
                                   size_t B, size_t C, int accumulate, mp_convert_stats *st) {
    float *r = malloc((4 * C + 16) * sizeof(float));
    if (!accumulate && dw) memset(dw, 0, C * sizeof *dw);
    if (!accumulate && db) memset(db, 0, C * sizeof *db);
    float *g = r, *n = r + C, *sw = r + 2 * C, *sb = r + 3 * C; /* the column sums, added to dw and db at the end */
    memset(sw, 0, 2 * C * sizeof *sw);
    for (size_t i = 0; i < B; i++) {
        old_load(g, dy, dyt, i * C, C);
        old_load(n, x, xt, i * C, C);
        float *dn = malloc((C + 1) * sizeof *dn);
        for (size_t j = 0; j < C; j++) {
            n[j] = (n[j] - mean[i]) * rstd[i];
            dn[j] = g[j] * (w ? w[j] : 1.0f);
            sw[j] += g[j] * n[j];
            sb[j] += g[j];
        }
        const float a = lanes(dn, NULL, C) / (float)C, c = lanes(dn, n, C) / (float)C;
        free(dn);
        for (size_t j = 0; j < C; j++) g[j] = rstd[i] * (g[j] * (w ? w[j] : 1.0f) - a - n[j] * c);
        old_store(dx, dxt, i * C, g, C, st);
    }
    for (size_t j = 0; j < C; j++) {
        if (dw) dw[j] += sw[j];
        if (db) db[j] += sb[j];
    }
    free(r);
}

static int same(const void *a, const void *b, size_t n) { return memcmp(a, b, n) == 0; }

/* shapes: small (one thread), large (split), ragged, wide rows (heap scratch) */
static void check_rows_parallel(void) {
    static const size_t shapes[][2] = {{5, 7}, {1031, 389}, {257, 256}, {40, 5000}, {3000, 10}, {5000, 20}, {1, 70000}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int a = 0; a < 3; a++) {
            const size_t B = shapes[si][0], C = shapes[si][1];
            const mp_dtype t = types[a];
            const size_t es = mp_format(t)->size, bytes = B * C * es;
            double *xd = malloc(B * C * sizeof *xd);
            void *x = make(t, B * C, 6.0, xd), *dy = make(t, B * C, 0.5, xd);
            for (size_t i = 0; i < B * C; i += 97) { /* some confident logits: underflowing gradients */
                const float v = 40.0f;
                mp_convert((uint8_t *)x + i * es, t, &v, MP_F32, 1, NULL);
            }
            void *y0 = malloc(bytes), *y1 = malloc(bytes), *d0 = malloc(bytes), *d1 = malloc(bytes);
            float *w = malloc(C * 4), *b = malloc(C * 4), *dw0 = malloc(C * 4), *db0 = malloc(C * 4),
                  *dw1 = malloc(C * 4), *db1 = malloc(C * 4), *m0 = malloc(B * 4), *r0 = malloc(B * 4),
                  *m1 = malloc(B * 4), *r1 = malloc(B * 4);
            int32_t *lab = malloc(B * 4);
            for (size_t j = 0; j < C; j++) w[j] = (float)(1 + 0.5 * drand()), b[j] = (float)drand();
            for (size_t i = 0; i < B; i++) lab[i] = (int32_t)((i * 7919) % C);
            long bad = 0;
            for (int threads = 1; threads <= 2; threads++) {
                mp_set_threads(threads);
                for (int lg = 0; lg < 2; lg++) {
                    mp_convert_stats s0 = {0}, s1 = {0};
                    old_softmax_forward(y0, t, x, t, B, C, lg, &s0);
                    mp_softmax_forward(y1, t, x, t, B, C, lg, MP_F32, &s1);
                    bad += !same(y0, y1, bytes) || !convert_stats_eq(&s0, &s1);
                    old_softmax_backward(d0, t, y0, t, dy, t, B, C, lg, &s0);
                    mp_softmax_backward(d1, t, y1, t, dy, t, B, C, lg, MP_F32, &s1);
                    bad += !same(d0, d1, bytes) || !convert_stats_eq(&s0, &s1);
                    memcpy(d1, dy, bytes); /* dx aliasing dy */
                    mp_softmax_backward(d1, t, y1, t, d1, t, B, C, lg, MP_F32, NULL);
                    bad += !same(d0, d1, bytes);
                }
                for (int with_d = 0; with_d < 2; with_d++) {
                    mp_convert_stats s0 = {0}, s1 = {0};
                    float l0, l1;
                    old_cross_entropy(&l0, with_d ? d0 : NULL, t, x, t, lab, B, C, 1024.0f, &s0);
                    CHECK(mp_cross_entropy(&l1, with_d ? d1 : NULL, t, x, t, lab, B, C, 1024.0f, MP_F32, &s1) == MP_OK,
                          "ce");
                    bad += f2u(l0) != f2u(l1) || !convert_stats_eq(&s0, &s1) || (with_d && !same(d0, d1, bytes));
                }
                {
                    float l0, l1; /* dlogits aliasing logits, as the GPT calls it */
                    memcpy(y1, x, bytes);
                    old_cross_entropy(&l0, d0, t, x, t, lab, B, C, 3.0f, NULL);
                    mp_cross_entropy(&l1, y1, t, y1, t, lab, B, C, 3.0f, MP_F32, NULL);
                    bad += f2u(l0) != f2u(l1) || !same(d0, y1, bytes);
                }
                for (int v = 0; v < 4; v++) { /* w, b present or not; dw, db present or not; accumulate */
                    const float *wv = v & 1 ? NULL : w, *bv = v & 2 ? NULL : b;
                    mp_convert_stats s0 = {0}, s1 = {0};
                    old_layernorm_forward(y0, t, m0, r0, x, t, wv, bv, B, C, 1e-5f, &s0);
                    mp_layernorm_forward(y1, t, m1, r1, x, t, wv, bv, B, C, 1e-5f, MP_F32, &s1);
                    bad += !same(y0, y1, bytes) || !same(m0, m1, B * 4) || !same(r0, r1, B * 4) ||
                           !convert_stats_eq(&s0, &s1);
                    for (size_t j = 0; j < C; j++) dw0[j] = dw1[j] = (float)drand(), db0[j] = db1[j] = (float)drand();
                    float *dwa = v == 2 ? NULL : dw0, *dba = v == 1 ? NULL : db0, *dwb = v == 2 ? NULL : dw1,
                          *dbb = v == 1 ? NULL : db1;
                    old_layernorm_backward(d0, t, dwa, dba, dy, t, x, t, m0, r0, wv, B, C, v & 1, &s0);
                    mp_layernorm_backward(d1, t, dwb, dbb, dy, t, x, t, m1, r1, wv, B, C, v & 1, MP_F32, &s1);
                    bad += !same(d0, d1, bytes) || !same(dw0, dw1, C * 4) || !same(db0, db1, C * 4) ||
                           !convert_stats_eq(&s0, &s1);
                    memcpy(d1, dy, bytes); /* dx aliasing dy */
                    mp_layernorm_backward(d1, t, NULL, NULL, d1, t, x, t, m1, r1, wv, B, C, 0, MP_F32, NULL);
                    bad += !same(d0, d1, bytes);
                    memcpy(y1, x, bytes); /* y aliasing x */
                    mp_layernorm_forward(y1, t, m1, r1, y1, t, wv, bv, B, C, 1e-5f, MP_F32, NULL);
                    bad += !same(y0, y1, bytes);
                    /* into a residual stream (x as the stream, updated in place): the two ops in one pass */
                    mp_convert_stats a0 = {0}, a1 = {0}, c0 = {0}, c1 = {0};
                    mp_layernorm_backward(d0, t, dwa, dba, dy, t, x, t, m1, r1, wv, B, C, 1, MP_F32, &a0);
                    memcpy(y0, x, bytes);
                    mp_add(y0, t, y0, t, d0, t, B * C, &c0);
                    memcpy(y1, x, bytes);
                    CHECK(mp_layernorm_backward_add(y1, t, dwb, dbb, dy, x, m1, r1, wv, B, C, 1, MP_F32, y1, &a1,
                                                    &c1) == MP_OK,
                          "layernorm backward into a residual");
                    bad += !same(y0, y1, bytes) || !convert_stats_eq(&a0, &a1) || !convert_stats_eq(&c0, &c1) ||
                           !same(dw0, dw1, C * 4) || !same(db0, db1, C * 4);
                }
            }
            mp_set_threads(0);
            CHECK(bad == 0, "row ops %s (%zu, %zu): %ld results differ from the sequential implementation",
                  mp_format(t)->name, B, C, bad);
            free(xd), free(x), free(dy), free(y0), free(y1), free(d0), free(d1), free(w), free(b), free(dw0), free(db0),
                free(dw1), free(db1), free(m0), free(r0), free(m1), free(r1), free(lab);
        }
}

/* Layer norm on every path (the AVX-512 ones run the row kernels, mp_layernorm_kernels) against the
 * sequential implementation, bit for bit with the counts: 16-bit and fp32 rows, ragged and short rows, with
 * and without w and b, into a residual stream; a row of equal values with w = -1 and no b (n w is -0 before
 * the absent bias's +0 makes it +0), a row with a NaN, a row of nearly equal values (a large rstd: dx
 * overflows fp16) and a row of tiny gradients (dx underflows or is subnormal). */
static void check_layernorm_paths(void) {
    const long mark = check_failures;
    static const size_t shapes[][2] = {{9, 389}, {33, 16}, {17, 7}, {3, 1000}};
    const mp_isa best = mp_cpu_detected();
    long cases = 0;
    uint64_t seen[3] = {0, 0, 0}; /* NaN, overflow, underflow counted in the 16-bit rows' dx */
    for (int isa = MP_ISA_SCALAR; isa <= (int)best; isa++) {
        mp_cpu_set_isa((mp_isa)isa);
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
            for (int a = 0; a < 3; a++) {
                const size_t B = shapes[si][0], C = shapes[si][1];
                const mp_dtype t = types[a];
                const size_t bytes = B * C * mp_format(t)->size;
                double *xd = malloc(B * C * sizeof *xd);
                void *x = make(t, B * C, 4.0, xd), *dy = make(t, B * C, 0.5, xd), *res = make(t, B * C, 1.0, xd);
                const size_t es = mp_format(t)->size;
                for (size_t j = 0; j < C; j++) { /* row 0: equal values; 1: nearly equal; 2: tiny gradients */
                    const float three = 3.0f, near = 3.0f + (j % 2 ? 1 : -1) * 0x1p-9f,
                                tiny = (t == MP_F16 ? 2e-8f : 1e-39f) * (float)(j % 5),
                                big = 500.0f * (float)(j % 3) - 400.0f;
                    mp_convert((uint8_t *)x + j * es, t, &three, MP_F32, 1, NULL);
                    mp_convert((uint8_t *)x + (C + j) * es, t, &near, MP_F32, 1, NULL);
                    mp_convert((uint8_t *)dy + (C + j) * es, t, &big, MP_F32, 1, NULL);
                    mp_convert((uint8_t *)dy + (2 * C + j) * es, t, &tiny, MP_F32, 1, NULL);
                }
                const float nan = NAN; /* row 3: one NaN (every NaN of the row then has its payload) */
                if (B > 3) mp_convert((uint8_t *)x + (3 * C + C / 2) * es, t, &nan, MP_F32, 1, NULL);
                void *y0 = malloc(bytes), *y1 = malloc(bytes), *d0 = malloc(bytes), *d1 = malloc(bytes);
                float *w = malloc(C * 4), *b = malloc(C * 4), *m0 = malloc(B * 4), *r0 = malloc(B * 4),
                      *m1 = malloc(B * 4), *r1 = malloc(B * 4), *dw0 = calloc(C, 4), *db0 = calloc(C, 4),
                      *dw1 = calloc(C, 4), *db1 = calloc(C, 4);
                for (size_t j = 0; j < C; j++) w[j] = (float)(-1 + 2.5 * drand()), b[j] = (float)drand();
                w[0] = -1.0f;
                for (int v = 0; v < 3; v++, cases++) { /* w and b; w alone; neither */
                    const float *wv = v == 2 ? NULL : w, *bv = v ? NULL : b;
                    mp_convert_stats s0 = {0}, s1 = {0}, a0 = {0}, a1 = {0}, c0 = {0}, c1 = {0};
                    old_layernorm_forward(y0, t, m0, r0, x, t, wv, bv, B, C, 1e-5f, &s0);
                    mp_layernorm_forward(y1, t, m1, r1, x, t, wv, bv, B, C, 1e-5f, MP_F32, &s1);
                    CHECK(same(y0, y1, bytes) && same(m0, m1, B * 4) && same(r0, r1, B * 4) &&
                              convert_stats_eq(&s0, &s1),
                          "layernorm forward on %s, %s, %zu x %zu, variant %d", mp_isa_name((mp_isa)isa),
                          mp_format(t)->name, B, C, v);
                    if (v == 1)
                        CHECK(elem_f32(y1, t, 0) == 0.0f && !signbit(elem_f32(y1, t, 0)),
                              "layernorm on %s, %s: -0 w + no bias gives %g, want +0", mp_isa_name((mp_isa)isa),
                              mp_format(t)->name, (double)elem_f32(y1, t, 0));
                    old_layernorm_backward(d0, t, dw0, db0, dy, t, x, t, m0, r0, wv, B, C, 1, &a0);
                    memcpy(y0, res, bytes);
                    mp_add(y0, t, y0, t, d0, t, B * C, &c0);
                    memcpy(y1, res, bytes);
                    CHECK(mp_layernorm_backward_add(y1, t, dw1, db1, dy, x, m1, r1, wv, B, C, 1, MP_F32, y1, &a1,
                                                    &c1) == MP_OK &&
                              same(y0, y1, bytes) && convert_stats_eq(&a0, &a1) && convert_stats_eq(&c0, &c1) &&
                              same(dw0, dw1, C * 4) && same(db0, db1, C * 4),
                          "layernorm backward into a residual on %s, %s, %zu x %zu, variant %d",
                          mp_isa_name((mp_isa)isa), mp_format(t)->name, B, C, v);
                    if (t == MP_F16) seen[0] += a1.nan, seen[1] += a1.overflow, seen[2] += a1.underflow;
                    memcpy(d1, dy, bytes); /* dx aliasing dy */
                    mp_layernorm_backward(d1, t, NULL, NULL, d1, t, x, t, m1, r1, wv, B, C, 0, MP_F32, NULL);
                    CHECK(same(d0, d1, bytes), "layernorm backward in place on %s, %s, %zu x %zu, variant %d",
                          mp_isa_name((mp_isa)isa), mp_format(t)->name, B, C, v);
                }
                free(xd), free(x), free(dy), free(res), free(y0), free(y1), free(d0), free(d1), free(w), free(b),
                    free(m0), free(r0), free(m1), free(r1), free(dw0), free(db0), free(dw1), free(db1);
            }
    }
    mp_cpu_set_isa(best);
    CHECK(seen[0] && seen[1] && seen[2], "layernorm rows: fp16 dx NaN %llu, overflow %llu, underflow %llu: want each",
          (unsigned long long)seen[0], (unsigned long long)seen[1], (unsigned long long)seen[2]);
    CHECK_SAY(mark,
              "  layer norm on every path: forward, backward and backward into a residual equal to the sequential "
              "loops, counts too (%ld cases, with NaN, overflow and underflow; n w = -0 plus the absent bias is "
              "+0)\n",
              cases);
}

static void check_bad_args(void) {
    float x[4] = {1, 2, 3, 4}, y[4];
    CHECK(mp_relu_forward(y, MP_E4M3, x, MP_F32, 4, NULL) == MP_EINVAL, "e4m3 output");
    CHECK(mp_softmax_forward(NULL, MP_F32, x, MP_F32, 1, 4, 0, MP_F32, NULL) == MP_EINVAL, "NULL y");
    float loss;
    const int32_t lab = -1;
    CHECK(mp_cross_entropy(&loss, NULL, MP_F32, x, MP_F32, &lab, 1, 4, 1.0f, MP_F32, NULL) == MP_EINVAL,
          "negative label");
    float m, r;
    CHECK(mp_layernorm_forward(y, MP_F32, &m, &r, x, MP_F32, NULL, NULL, 1, 0, 1e-5f, MP_F32, NULL) == MP_EINVAL,
          "C = 0");
}

int main(int argc, char **argv) {
    mode = test_mode(argc, argv), quick = mode == QUICK;
    check_elementwise();
    check_gelu_accuracy();
    check_gelu_special();
    check_gelu_paths();
    check_gelu_tables();
    check_exp();
    check_softmax_paths();
    check_rows_parallel();
    check_layernorm_paths();
    check_softmax();
    check_cross_entropy();
    check_layernorm();
    check_fp16_failures();
    check_naive_reductions();
    check_relu_bits();
    check_bad_args();
    return check_report("test_ops");
}
