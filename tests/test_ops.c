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
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (double)(rng >> 11) * 0x1p-52 - 1.0;
}

static const mp_dtype types[3] = {MP_F32, MP_F16, MP_BF16};
static const double u = 0x1p-24;

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
                bad += fabs(elem_f32(out, yt, i) - want) > 32 * u * (fabs(dy[i]) * (1 + fabs(x[i]))) + 1e-9 + store_err(yt, want);
            }
            /* bias add and column sums */
            const size_t B = 37, C = 81;
            float bias[81];
            for (size_t j = 0; j < C; j++) bias[j] = (float)drand();
            mp_bias_add(out, yt, px, xt, bias, B, C, NULL);
            for (size_t i = 0; i < B * C; i++) {
                const double want = x[i] + (double)bias[i % C];
                bad += fabs(elem_f32(out, yt, i) - want) > 2 * u * fabs(want) + store_err(yt, want) + u * (fabs(x[i]) + fabs(bias[i % C]));
            }
            float cs[81];
            mp_colsum(cs, px, xt, B, C, 0);
            mp_colsum(cs, px, xt, B, C, 1);
            for (size_t j = 0; j < C; j++) {
                double want = 0, mag = 0;
                for (size_t i = 0; i < B; i++) want += x[i * C + j], mag += fabs(x[i * C + j]);
                bad += fabs(cs[j] - 2 * want) > 2 * (B + 2) * u * mag;
            }
            CHECK(bad == 0, "element-wise ops %s -> %s: %ld values out of bound", mp_format(xt)->name, mp_format(yt)->name, bad);
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
            mp_softmax_forward(out, t, px, t, B, C, lg, NULL);
            long bad = 0;
            for (size_t r = 0; r < B; r++) softmax64(x + r * C, y + r * C, C, lg);
            for (size_t i = 0; i < B * C; i++)
                bad += fabs(elem_f32(out, t, i) - y[i]) > (C + 8) * u * (fabs(y[i]) + (lg ? 20.0 : 0)) + store_err(t, y[i]);
            /* backward from the fp64 forward, fed with the stored y */
            mp_softmax_backward(dx, t, out, t, pg, t, B, C, lg, NULL);
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
        CHECK(mp_cross_entropy(&loss, d, t, px, t, labels, B, C, scale, NULL) == MP_OK, "ce");
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
        CHECK(fabs(loss - want) <= (B + C + 8) * u * (want + 8), "%s loss %.9g vs %.9g", mp_format(t)->name, (double)loss, want);
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
    mp_cross_entropy(&loss, d16, MP_F16, logits, MP_F32, lab, 2, C, 1.0f, &s1);
    mp_cross_entropy(&loss, d16, MP_F16, logits, MP_F32, lab, 2, C, 65536.0f, &s2);
    CHECK(s1.underflow >= 16 && s2.underflow == 0, "underflow unscaled %llu, scaled %llu", (unsigned long long)s1.underflow,
          (unsigned long long)s2.underflow);
    const int32_t bad_lab[2] = {0, 10};
    CHECK(mp_cross_entropy(&loss, NULL, MP_F32, logits, MP_F32, bad_lab, 2, C, 1.0f, NULL) == MP_EINVAL &&
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
        void *px = make(t, B * C, 3.0, x), *pg = make(t, B * C, 1.0, g), *y = malloc(B * C * 4), *dx = malloc(B * C * 4);
        float mean[B], rstd[B], dw[C] = {0}, db[C] = {0};
        const float eps = 1e-5f;
        for (int i = 0; i < B * C; i++) x[i] += 10.0 * (i / C); /* offsets: the two-pass variance matters */
        for (int i = 0; i < B * C; i++) {
            const float v = (float)x[i];
            mp_convert((uint8_t *)px + i * mp_format(t)->size, t, &v, MP_F32, 1, NULL);
            x[i] = elem_f32(px, t, i);
        }
        mp_layernorm_forward(y, t, mean, rstd, px, t, w, bb, B, C, eps, NULL);
        mp_layernorm_backward(dx, t, dw, db, pg, t, px, t, mean, rstd, w, B, C, 1, NULL);
        long bad = 0;
        double dw64[C] = {0};
        for (int r = 0; r < B; r++) {
            const double rs = ln64(x + r * C, C, eps, n);
            bad += fabs(rstd[r] - rs) > 4 * C * u * rs;
            for (int j = 0; j < C; j++) {
                const double want = n[j] * w[j] + bb[j];
                bad += fabs(elem_f32(y, t, r * C + j) - want) > (2 * C + 16) * u * (fabs(n[j]) + 1) * 2 + store_err(t, want);
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
    mp_softmax_forward(y16, MP_F16, x16, MP_F16, 1, C, 0, NULL);
    long bad = 0;
    for (int j = 0; j < C; j++) bad += fabs(mp_f16_to_f32(y16[j]) - want[j]) > (C + 8) * u * want[j] + store_err(MP_F16, want[j]);
    CHECK(naive_nan > 0 && bad == 0, "softmax: fp16 arithmetic gives %d inf/NaN; mixprec %ld out of bound", naive_nan, bad);
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
    mp_layernorm_forward(o16, MP_F16, &mean, &rstd, a16, MP_F16, NULL, NULL, 1, C, 1e-5f, NULL);
    bad = 0;
    for (int j = 0; j < C; j++) bad += fabs(mp_f16_to_f32(o16[j]) - an[j]) > (2 * C + 16) * u * (fabs(an[j]) + 1) * 2 + store_err(MP_F16, an[j]);
    CHECK(!isfinite(var16) && bad == 0, "layernorm: fp16 variance %g; mixprec %ld out of bound", (double)var16, bad);
    printf("  layer norm of 64 values near 300: fp16 variance = %g; mixprec within bound of fp64\n", (double)var16);

    /* a long sum: 10000 gradients of 1.0 stored in fp16 */
    enum { L = 10000 };
    static uint16_t ones[L];
    const uint16_t one = mp_f32_to_f16(1.0f);
    for (int i = 0; i < L; i++) ones[i] = one;
    float acc16 = 0, cs;
    for (int i = 0; i < L; i++) acc16 = h(acc16 + 1.0f);
    mp_colsum(&cs, ones, MP_F16, L, 1, 0);
    CHECK(acc16 == 2048.0f && cs == 10000.0f, "long sum: fp16 %g, mixprec %g", (double)acc16, (double)cs);
    printf("  sum of 10000 ones: fp16 accumulator stops at %g; mixprec's fp32 accumulator gives %g\n", (double)acc16,
           (double)cs);
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
                          sb.nan == wb.nan && sb.underflow == 0 && sb.overflow == 0 && wb.nan > 0 && wf.subnormal > 0,
                      "%s relu on bits (isa %d, %u values): %ld differ", mp_format(dt)->name, isa, N, bad);
            }
    mp_cpu_set_isa(mp_cpu_detected());
}

static void check_bad_args(void) {
    float x[4] = {1, 2, 3, 4}, y[4];
    CHECK(mp_relu_forward(y, MP_E4M3, x, MP_F32, 4, NULL) == MP_EINVAL, "e4m3 output");
    CHECK(mp_softmax_forward(NULL, MP_F32, x, MP_F32, 1, 4, 0, NULL) == MP_EINVAL, "NULL y");
    float loss;
    const int32_t lab = -1;
    CHECK(mp_cross_entropy(&loss, NULL, MP_F32, x, MP_F32, &lab, 1, 4, 1.0f, NULL) == MP_EINVAL, "negative label");
    float m, r;
    CHECK(mp_layernorm_forward(y, MP_F32, &m, &r, x, MP_F32, NULL, NULL, 1, 0, 1e-5f, NULL) == MP_EINVAL, "C = 0");
}

int main(void) {
    check_elementwise();
    check_softmax();
    check_cross_entropy();
    check_layernorm();
    check_fp16_failures();
    check_relu_bits();
    check_bad_args();
    return check_report("test_ops");
}

