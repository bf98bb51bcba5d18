/* test_underflow.c - counting without storing and the underflow analysis:
 * mp_convert_count against a reference that really converts (mp_convert into
 * a buffer, then counting the results), mp_count_values against a recount of
 * the bit patterns, mp_underflow_analyze against a brute-force computation on
 * a small set, mp_log2_histogram against frexp, mp_explore_write's escaping and failure paths, and
 * mp_block_compare_values on hand-built blocks and against a recount. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <dirent.h>
#include <float.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "internal.h"
#ifdef __SSE__
#include <xmmintrin.h>
#endif

static uint64_t rng_state = 0x243f6a8885a308d3ull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

static const mp_dtype fmts[5] = {MP_F16, MP_BF16, MP_E4M3, MP_E5M2, MP_F32};
static const float scales[4] = {1.0f, 0.5f, 1024.0f, 0x1p-30f};

/* ---- mp_convert_count ---- */

/* What a store of n elements of x (type t) times scale into fmt does, from
 * the stored results: mp_convert into a buffer, each result widened and
 * classified, with the header's two rules (a product of 0 from a nonzero
 * finite input is an underflow; an infinite input or product is an overflow). */
static mp_convert_stats ref_count(mp_dtype fmt, const void *x, mp_dtype t, size_t n, float scale) {
    mp_convert_stats r = {0, 0, 0, 0, 0.0f};
    float *w = malloc(n * sizeof *w), *p = malloc(n * sizeof *p);
    uint8_t *d = malloc(n * 4);
    if (!w || !p || !d) abort();
    CHECK(mp_convert(w, MP_F32, x, t, n, NULL) == MP_OK, "widen");
    for (size_t i = 0; i < n; i++) p[i] = scale == 1.0f ? w[i] : w[i] * scale;
    CHECK(mp_convert(d, fmt, p, MP_F32, n, NULL) == MP_OK, "store");
    const double min_normal = mp_format(fmt)->min_normal;
    for (size_t i = 0; i < n; i++) {
        const float y = elem_f32(d, fmt, i);
        if (isnan(w[i])) {
            r.nan++;
            continue;
        }
        if (isinf(w[i]) || isinf(p[i]) || !isfinite(y)) r.overflow++;
        else if (w[i] != 0 && y == 0) r.underflow++;
        if (y != 0 && isfinite(y) && fabs((double)y) < min_normal) r.subnormal++;
    }
    free(w), free(p), free(d);
    return r;
}

/* The four counts (the thresholds' model has no amax). */
static int stats_counts_eq(const mp_convert_stats *a, const mp_convert_stats *b) {
    return a->underflow == b->underflow && a->subnormal == b->subnormal && a->overflow == b->overflow &&
           a->nan == b->nan;
}

static void check_count_against_ref(const char *what, const void *x, mp_dtype t, size_t n) {
    for (int f = 0; f < 5; f++)
        for (int s = 0; s < 4; s++) {
            const mp_convert_stats want = ref_count(fmts[f], x, t, n, scales[s]);
            mp_convert_stats got = {1, 2, 3, 4, 0.0f}; /* added to, never reset */
            CHECK(mp_convert_count(fmts[f], x, t, n, scales[s], &got) == MP_OK, "%s", mp_last_error());
            got.underflow -= 1, got.subnormal -= 2, got.overflow -= 3, got.nan -= 4;
            CHECK(stats_counts_eq(&got, &want),
                  "%s %s -> %s x %g: got u%" PRIu64 " s%" PRIu64 " o%" PRIu64 " n%" PRIu64 ", want u%" PRIu64
                  " s%" PRIu64 " o%" PRIu64 " n%" PRIu64,
                  what, mp_format(t)->name, mp_format(fmts[f])->name, (double)scales[s], got.underflow, got.subnormal,
                  got.overflow, got.nan, want.underflow, want.subnormal, want.overflow, want.nan);
        }
}

/* fp32 values at every format's thresholds (at scale 1 and after each scale),
 * fp32's own extremes and specials, and random bit patterns. */
static size_t threshold_values(float *v, size_t cap) {
    size_t n = 0;
#define PUT(x)                     \
    do {                           \
        if (n < cap) v[n++] = (x); \
    } while (0)
    const float specials[] = {0.0f,
                              -0.0f,
                              INFINITY,
                              -INFINITY,
                              NAN,
                              -NAN,
                              u2f(0x7f800001u),
                              u2f(0xffc00001u),
                              0x1p-149f,
                              -0x1p-149f,
                              0x1p-148f,
                              0x1.8p-148f,
                              0x1.fffffcp-127f,
                              FLT_MIN,
                              FLT_MAX,
                              -FLT_MAX,
                              0x1.fffffcp127f,
                              1.0f,
                              -1.0f,
                              3.0f};
    for (size_t i = 0; i < sizeof specials / sizeof *specials; i++) PUT(specials[i]);
    for (int f = 0; f < 4; f++) {
        const mp_format_info *fi = mp_format(fmts[f]);
        const double ulp_max = ldexp(1.0, (int)floor(log2(fi->max)) - fi->mantissa_bits);
        const double t[] = {fi->min_subnormal / 2,
                            fi->min_subnormal,
                            fi->min_subnormal * 1.5,
                            fi->min_normal - fi->min_subnormal / 2,
                            fi->min_normal,
                            fi->max,
                            fi->max + ulp_max / 2,
                            fi->max + ulp_max,
                            fi->max * 4};
        for (size_t k = 0; k < sizeof t / sizeof *t; k++)
            for (int s = 0; s < 4; s++) {
                const float c = (float)(t[k] / scales[s]); /* lands on the threshold after the scale */
                if (!isfinite(c) || c == 0) continue;
                const float near[3] = {nextafterf(c, 0), c, nextafterf(c, INFINITY)};
                for (int j = 0; j < 3; j++) {
                    PUT(near[j]);
                    PUT(-near[j]);
                }
            }
    }
    while (n < cap) PUT(u2f(rnd()));
#undef PUT
    return n;
}

static void check_convert_count(void) {
    enum { N = 6000 };
    float *v = malloc(N * sizeof *v);
    uint16_t *h = malloc(65536 * sizeof *h);
    if (!v || !h) abort();
    const size_t n = threshold_values(v, N);
    check_count_against_ref("thresholds", v, MP_F32, n);
    /* every fp16 and bf16 code */
    for (uint32_t i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    check_count_against_ref("all codes", h, MP_F16, 65536);
    check_count_against_ref("all codes", h, MP_BF16, 65536);
    /* the fp32 thresholds stored in fp16 and bf16 */
    mp_convert(h, MP_F16, v, MP_F32, n, NULL);
    check_count_against_ref("thresholds", h, MP_F16, n);
    mp_convert(h, MP_BF16, v, MP_F32, n, NULL);
    check_count_against_ref("thresholds", h, MP_BF16, n);

    /* the rules, on hand-picked values */
    const float prod_under[2] = {0x1p-149f, -0x1p-140f}; /* x 2^-30: 0 in fp32 already */
    mp_convert_stats st = {0, 0, 0, 0, 0.0f};
    CHECK(mp_convert_count(MP_F32, prod_under, MP_F32, 2, 0x1p-30f, &st) == MP_OK && st.underflow == 2 &&
              st.subnormal == 0 && st.overflow == 0,
          "fp32 product underflow: u%" PRIu64, st.underflow);
    memset(&st, 0, sizeof st);
    CHECK(mp_convert_count(MP_F32, prod_under, MP_F32, 2, 1.0f, &st) == MP_OK && st.underflow == 0 && st.subnormal == 2,
          "fp32 identity: u%" PRIu64 " s%" PRIu64, st.underflow, st.subnormal);
    const float infs[4] = {INFINITY, -INFINITY, FLT_MAX, NAN};
    for (int f = 0; f < 5; f++) {
        memset(&st, 0, sizeof st);
        CHECK(mp_convert_count(fmts[f], infs, MP_F32, 4, 1.0f, &st) == MP_OK &&
                  st.overflow == (fmts[f] == MP_F32 ? 2u : 3u) && st.nan == 1 && st.underflow == 0,
              "%s: infinite inputs are overflows: o%" PRIu64 " n%" PRIu64, mp_format(fmts[f])->name, st.overflow,
              st.nan);
        memset(&st, 0, sizeof st);
        CHECK(mp_convert_count(fmts[f], infs, MP_F32, 4, 1024.0f, &st) == MP_OK && st.overflow == 3 && st.nan == 1,
              "%s: FLT_MAX x 1024 is an overflow: o%" PRIu64, mp_format(fmts[f])->name, st.overflow);
    }
#ifdef __SSE__
    /* FTZ and DAZ (as some programs run): subnormal inputs still count once, from their bits */
    const float subs[3] = {0x1p-140f, -0x1p-130f, 0x1p-149f};
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040); /* FTZ | DAZ */
    memset(&st, 0, sizeof st);
    const mp_status daz_rc = mp_convert_count(MP_F16, subs, MP_F32, 3, 0.5f, &st);
    mp_value_counts vc;
    const mp_status daz_vc = mp_count_values(subs, MP_F32, 3, &vc);
    _mm_setcsr(csr);
    CHECK(daz_rc == MP_OK && st.underflow == 3 && st.subnormal == 0, "FTZ/DAZ: underflow %" PRIu64, st.underflow);
    CHECK(daz_vc == MP_OK && vc.subnormal == 3 && vc.zero == 0, "FTZ/DAZ: %" PRIu64 " subnormal values", vc.subnormal);
#endif
    const uint16_t h_inf[2] = {0x7c00, 0xfc00};
    memset(&st, 0, sizeof st);
    CHECK(mp_convert_count(MP_F32, h_inf, MP_F16, 2, 0.5f, &st) == MP_OK && st.overflow == 2, "fp16 inf inputs");

    /* threads and chunk tails: the same counts for one thread and several */
    const size_t big = ((size_t)1 << 19) + 77;
    float *b = malloc(big * sizeof *b);
    if (!b) abort();
    for (size_t i = 0; i < big; i++) b[i] = i % 3 ? v[i % n] : u2f(rnd());
    for (int f = 0; f < 5; f += 2) {
        const mp_convert_stats want = ref_count(fmts[f], b, MP_F32, big, 0x1p-30f);
        for (int th = 1; th <= 4; th += 3) {
            mp_set_threads(th);
            mp_convert_stats got = {0, 0, 0, 0, 0.0f};
            CHECK(mp_convert_count(fmts[f], b, MP_F32, big, 0x1p-30f, &got) == MP_OK && stats_counts_eq(&got, &want),
                  "%d threads, %s: u%" PRIu64 " vs %" PRIu64, th, mp_format(fmts[f])->name, got.underflow,
                  want.underflow);
        }
    }
    mp_set_threads(0);
    free(b);

    /* bad arguments: nothing counted */
    const float bad_scales[5] = {0.0f, -1.0f, INFINITY, NAN, -0.0f};
    for (int k = 0; k < 5; k++) {
        memset(&st, 0, sizeof st);
        mp_error(MP_OK, "%s", "");
        CHECK(mp_convert_count(MP_F16, v, MP_F32, n, bad_scales[k], &st) == MP_EINVAL && mp_last_error()[0] &&
                  st.overflow == 0 && st.nan == 0,
              "scale %g", (double)bad_scales[k]);
    }
    CHECK(mp_convert_count((mp_dtype)9, v, MP_F32, n, 1.0f, &st) == MP_EINVAL, "bad fmt");
    CHECK(mp_convert_count(MP_F16, v, (mp_dtype)-1, n, 1.0f, &st) == MP_EINVAL, "bad type");
    CHECK(mp_convert_count(MP_F16, NULL, MP_F32, 3, 1.0f, &st) == MP_EINVAL, "NULL buffer");
    CHECK(mp_convert_count(MP_F16, v, MP_F32, n, 1.0f, NULL) == MP_EINVAL, "NULL stats");
    CHECK(mp_convert_count(MP_F16, NULL, MP_F32, 0, 1.0f, &st) == MP_OK, "n = 0");
    free(v), free(h);
}

/* ---- mp_count_values ---- */

static void recount(const void *x, mp_dtype t, size_t n, mp_value_counts *c) {
    memset(c, 0, sizeof *c);
    const double min_normal = mp_format(t)->min_normal;
    for (size_t i = 0; i < n; i++) {
        const float y = elem_f32(x, t, i); /* exact */
        if (isnan(y)) c->nan++;
        else if (isinf(y)) c->inf++;
        else if (y == 0) c->zero++;
        else if (fabs((double)y) < min_normal) c->subnormal++;
        if (isfinite(y) && fabsf(y) > c->amax) c->amax = fabsf(y);
    }
}

static void check_values_one(const char *what, const void *x, mp_dtype t, size_t n) {
    mp_value_counts want, got;
    recount(x, t, n, &want);
    memset(&got, 0xff, sizeof got); /* overwritten */
    CHECK(mp_count_values(x, t, n, &got) == MP_OK, "%s", mp_last_error());
    CHECK(got.zero == want.zero && got.subnormal == want.subnormal && got.inf == want.inf && got.nan == want.nan,
          "%s %s: z%" PRIu64 " s%" PRIu64 " i%" PRIu64 " n%" PRIu64 ", want z%" PRIu64 " s%" PRIu64 " i%" PRIu64
          " n%" PRIu64,
          what, mp_format(t)->name, got.zero, got.subnormal, got.inf, got.nan, want.zero, want.subnormal, want.inf,
          want.nan);
    const float am = mp_amax(x, t, n);
    CHECK(f2u(got.amax) == f2u(am) && got.amax == want.amax, "%s %s: amax %g, mp_amax %g, recount %g", what,
          mp_format(t)->name, (double)got.amax, (double)am, (double)want.amax);
}

static void check_count_values(void) {
    uint16_t *h = malloc(65536 * sizeof *h);
    if (!h) abort();
    for (uint32_t i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    check_values_one("all codes", h, MP_F16, 65536);
    check_values_one("all codes", h, MP_BF16, 65536);
    check_values_one("tail", h + 3, MP_F16, 1001);
    /* fp32: a stride through all 2^32 patterns, plus the edges of each class */
    const size_t n = ((size_t)1 << 32) / 4099 + 16;
    uint32_t *u = malloc(n * sizeof *u);
    if (!u) abort();
    size_t k = 0;
    for (uint64_t p = 0; p < (1ull << 32) && k < n - 16; p += 4099) u[k++] = (uint32_t)p;
    const uint32_t edge[16] = {0,           0x80000000u, 1,           0x807fffffu, 0x00800000u, 0x7f7fffffu,
                               0x7f800000u, 0xff800000u, 0x7f800001u, 0xffffffffu, 0x7fc00000u, 0x3f800000u,
                               0x80000001u, 0x007fffffu, 0xff7fffffu, 0x00000002u};
    for (int e = 0; e < 16; e++) u[k++] = edge[e];
    check_values_one("stride", u, MP_F32, k);
    mp_set_threads(4);
    check_values_one("stride, 4 threads", u, MP_F32, k);
    mp_set_threads(0);
    mp_value_counts c;
    memset(&c, 0xff, sizeof c);
    CHECK(mp_count_values(h, MP_F16, 0, &c) == MP_OK && c.zero == 0 && c.subnormal == 0 && c.inf == 0 && c.nan == 0 &&
              c.amax == 0.0f,
          "empty"); /* field by field: the struct's tail padding is not part of the result */
    const uint16_t only_nan[2] = {0x7e00, 0xfc00};
    CHECK(mp_count_values(only_nan, MP_F16, 2, &c) == MP_OK && c.amax == 0 && c.nan == 1 && c.inf == 1, "no finite");
    mp_error(MP_OK, "%s", "");
    CHECK(mp_count_values(h, MP_E4M3, 4, &c) == MP_EINVAL && mp_last_error()[0] && c.zero == 0, "e4m3 values");
    CHECK(mp_count_values(NULL, MP_F32, 4, &c) == MP_EINVAL, "NULL buffer");
    CHECK(mp_count_values(h, MP_F32, 4, NULL) == MP_EINVAL, "NULL counts");
    free(h), free(u);
}

/* ---- mp_underflow_analyze ---- */

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static double brute_quantile(const float *sorted, size_t n, double q) {
    const double pos = q * (double)(n - 1);
    const size_t i = (size_t)pos;
    return i + 1 < n ? sorted[i] + (pos - (double)i) * (sorted[i + 1] - sorted[i]) : sorted[i];
}

/* one magnitude at a time through the scalar format functions */
static mp_scale_counts brute_counts(const float *m, size_t n, mp_dtype t, double scale) {
    mp_scale_counts c = {scale, 0, 0, 0, 0};
    const double min_normal = mp_format(t)->min_normal;
    for (size_t i = 0; i < n; i++) {
        const float p = m[i] * (float)scale;
        float y;
        switch (t) {
        case MP_F16: y = mp_f16_to_f32(mp_f32_to_f16(p)); break;
        case MP_BF16: y = mp_bf16_to_f32(mp_f32_to_bf16(p)); break;
        case MP_E4M3: y = mp_e4m3_to_f32(mp_f32_to_e4m3(p)); break;
        default: y = mp_e5m2_to_f32(mp_f32_to_e5m2(p)); break;
        }
        if (!isfinite(y)) c.overflow++;
        else if (y == 0) c.zero++;
        else c.survive++, c.subnormal += fabsf(y) < min_normal;
    }
    return c;
}

static int counts_eq(const mp_scale_counts *a, const mp_scale_counts *b) {
    return a->scale == b->scale && a->zero == b->zero && a->subnormal == b->subnormal && a->overflow == b->overflow &&
           a->survive == b->survive;
}

static double brute_best(const float *m, size_t n, mp_dtype t) {
    double best = 1;
    mp_scale_counts bc = brute_counts(m, n, t, 1);
    for (int k = 1; k <= 126; k++) {
        const mp_scale_counts c = brute_counts(m, n, t, ldexp(1.0, k));
        if (c.overflow) break;
        if (c.survive > bc.survive || (c.survive == bc.survive && c.subnormal < bc.subnormal)) best = c.scale, bc = c;
    }
    return best;
}

static void check_analyze_set(const char *what, const void *x, mp_dtype xt, size_t n) {
    /* the magnitudes: |x| of the finite elements, as the header says */
    float *m = malloc(n * sizeof *m);
    if (!m) abort();
    size_t nf = 0;
    for (size_t i = 0; i < n; i++) {
        const float y = elem_f32(x, xt, i);
        if (isfinite(y)) m[nf++] = fabsf(y);
    }
    float *sorted = malloc(nf * sizeof *sorted);
    if (!sorted) abort();
    memcpy(sorted, m, nf * sizeof *m);
    qsort(sorted, nf, sizeof *sorted, cmp_float);
    const double sc[4] = {1, 0.5, 1024, 0x1p-30};
    for (int f = 0; f < 4; f++) {
        mp_underflow u;
        CHECK(mp_underflow_analyze(x, xt, n, fmts[f], sc, 4, &u) == MP_OK, "%s", mp_last_error());
        const char *fn = mp_format(fmts[f])->name;
        CHECK(u.format == fmts[f] && u.n == nf && u.nscales == 4, "%s %s: n %zu, want %zu", what, fn, u.n, nf);
        CHECK(u.median == brute_quantile(sorted, nf, 0.5), "%s %s: median %.9g, want %.9g", what, fn, u.median,
              brute_quantile(sorted, nf, 0.5));
        CHECK(u.p5 == brute_quantile(sorted, nf, 0.05), "%s %s: p5 %.9g, want %.9g", what, fn, u.p5,
              brute_quantile(sorted, nf, 0.05));
        const mp_scale_counts one = brute_counts(m, nf, fmts[f], 1);
        CHECK(u.zero_count == one.zero, "%s %s: zero_count %" PRIu64 ", want %" PRIu64, what, fn, u.zero_count,
              one.zero);
        const double best = brute_best(m, nf, fmts[f]);
        const mp_scale_counts bc = brute_counts(m, nf, fmts[f], best);
        CHECK(u.best_scale == best && counts_eq(&u.best, &bc), "%s %s: best scale %g, want %g", what, fn, u.best_scale,
              best);
        for (int s = 0; s < 4; s++) {
            const mp_scale_counts want = brute_counts(m, nf, fmts[f], sc[s]);
            CHECK(counts_eq(&u.scales[s], &want),
                  "%s %s x %g: z%" PRIu64 " s%" PRIu64 " o%" PRIu64 " v%" PRIu64 ", want z%" PRIu64 " s%" PRIu64
                  " o%" PRIu64 " v%" PRIu64,
                  what, fn, sc[s], u.scales[s].zero, u.scales[s].subnormal, u.scales[s].overflow, u.scales[s].survive,
                  want.zero, want.subnormal, want.overflow, want.survive);
            if (xt == MP_F32 && nf == n) { /* the magnitudes themselves */
                const mp_scale_counts c = mp_underflow_count(m, nf, fmts[f], sc[s]);
                CHECK(counts_eq(&c, &want), "%s %s: mp_underflow_count x %g", what, fn, sc[s]);
            }
        }
        CHECK(mp_underflow_best_scale(m, nf, fmts[f]) == best, "%s %s: mp_underflow_best_scale", what, fn);
    }
    free(m), free(sorted);
}

static void check_analyze(void) {
    enum { N = 1999 };
    float *x = malloc(N * sizeof *x);
    uint16_t *h = malloc(N * sizeof *h);
    if (!x || !h) abort();
    /* signed magnitudes around fp16's floor and a few beyond its ceiling, zeros, and non-finite elements */
    for (int i = 0; i < N; i++) {
        const double e = -34.0 + 40.0 * (double)(rnd() % 100000) / 100000.0;
        x[i] = (float)ldexp(1.0 + (double)(rnd() % 1000) / 1000.0, (int)e) * (rnd() & 1 ? 1.0f : -1.0f);
        if (i % 97 == 0) x[i] = 0.0f;
        if (i % 211 == 5) x[i] = i % 2 ? NAN : -INFINITY;
    }
    check_analyze_set("fp32 set", x, MP_F32, N);
    float *m = malloc(N * sizeof *m);
    for (int i = 0; i < N; i++) m[i] = isfinite(x[i]) ? fabsf(x[i]) : 1.0f;
    check_analyze_set("fp32 magnitudes", m, MP_F32, N);
    check_analyze_set("fp32 magnitudes, one", m, MP_F32, 1);
    check_analyze_set("fp32 magnitudes, two", m + 7, MP_F32, 2);
    mp_convert(h, MP_F16, x, MP_F32, N, NULL);
    check_analyze_set("fp16 set", h, MP_F16, N);
    mp_convert(h, MP_BF16, x, MP_F32, N, NULL);
    check_analyze_set("bf16 set", h, MP_BF16, N);
    free(m);

    /* error paths: MP_EINVAL and a one-line message */
    mp_underflow u;
    const double one = 1.0;
    double many[MP_UNDERFLOW_MAX_SCALES + 1];
    for (int k = 0; k <= MP_UNDERFLOW_MAX_SCALES; k++) many[k] = ldexp(1.0, k);
    const float nonfinite[3] = {NAN, INFINITY, -INFINITY};
    struct {
        const char *what;
        const void *x;
        mp_dtype xt, t;
        size_t n;
        const double *s;
        int ns;
    } bad[] = {
        {"no finite value", nonfinite, MP_F32, MP_F16, 3, &one, 1},
        {"no value", x, MP_F32, MP_F16, 0, &one, 1},
        {"33 scales", x, MP_F32, MP_F16, N, many, MP_UNDERFLOW_MAX_SCALES + 1},
        {"-1 scales", x, MP_F32, MP_F16, N, many, -1},
        {"NULL scales", x, MP_F32, MP_F16, N, NULL, 2},
        {"e4m3 values", x, MP_E4M3, MP_F16, N, &one, 1},
        {"fp32 format", x, MP_F32, MP_F32, N, &one, 1},
        {"unknown format", x, MP_F32, (mp_dtype)7, N, &one, 1},
        {"NULL values", NULL, MP_F32, MP_F16, N, &one, 1},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        mp_error(MP_OK, "%s", "");
        CHECK(mp_underflow_analyze(bad[i].x, bad[i].xt, bad[i].n, bad[i].t, bad[i].s, bad[i].ns, &u) == MP_EINVAL &&
                  mp_last_error()[0] && !strchr(mp_last_error(), '\n'),
              "%s: '%s'", bad[i].what, mp_last_error());
    }
    const double bad_scales[6] = {0, -1, NAN, INFINITY, 1e-50, 1e39}; /* the last two: 0 and inf in fp32 */
    for (int k = 0; k < 6; k++) {
        const double s2[2] = {1, bad_scales[k]};
        mp_error(MP_OK, "%s", "");
        CHECK(mp_underflow_analyze(x, MP_F32, N, MP_F16, s2, 2, &u) == MP_EINVAL && mp_last_error()[0], "scale %g",
              bad_scales[k]);
    }
    CHECK(mp_underflow_analyze(x, MP_F32, N, MP_F16, NULL, 0, &u) == MP_OK && u.nscales == 0, "no scales");
    CHECK(mp_underflow_analyze(x, MP_F32, N, MP_F16, &one, 1, NULL) == MP_EINVAL, "NULL result");
    free(x), free(h);
}

/* ---- mp_explore_write ---- */

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    const long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)size + 1);
    if (b && fread(b, 1, (size_t)size, f) != (size_t)size) free(b), b = NULL;
    if (b) b[size] = '\0';
    fclose(f);
    return b;
}

/* the names in dir, joined by spaces */
static void list_dir(const char *dir, char *out, size_t cap) {
    out[0] = '\0';
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            snprintf(out + strlen(out), cap - strlen(out), "%s ", e->d_name);
    closedir(d);
}

static void check_explore(void) {
    char dir[] = "/tmp/mp_test_underflow_XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp");
        return;
    }
    enum { N = 3000 };
    float x[N];
    for (int i = 0; i < N; i++)
        x[i] = (float)ldexp(1.0 + (double)(rnd() % 1000) / 1000.0, -(int)(rnd() % 40)) * (i % 2 ? 1 : -1);
    x[5] = NAN, x[6] = INFINITY, x[7] = 0.0f;
    char path[512], names[1024];
    snprintf(path, sizeof path, "%s/page.html", dir);
    const char *desc = "<script>x</script> & \"q\" 'a'";
    CHECK(mp_explore_write(path, x, MP_F32, N, desc) == MP_OK, "%s", mp_last_error());
    char *html = slurp(path);
    CHECK(html != NULL, "page not written");
    if (html) {
        CHECK(strstr(html, "<p class=\"note\">&lt;script&gt;x&lt;/script&gt; &amp; &quot;q&quot; &#39;a&#39;. Move") !=
                  NULL,
              "description not escaped");
        CHECK(strstr(html, "<script>x") == NULL, "raw description in the page");
        CHECK(strstr(html, "const N = 2998,") != NULL, "N is the finite count");
        /* the fp16 counts at 2^0 and 2^24 are mp_underflow_count's on the magnitudes */
        float m[N];
        size_t nf = 0;
        for (int i = 0; i < N; i++)
            if (isfinite(x[i])) m[nf++] = fabsf(x[i]);
        const char *p = strstr(html, "\"fp16\": {");
        for (int k = 0; k <= 24; k += 24) {
            const mp_scale_counts c = mp_underflow_count(m, nf, MP_F16, ldexp(1.0, k));
            char want[128];
            snprintf(want, sizeof want, "%s[%" PRIu64 ", %" PRIu64 ", %" PRIu64 ", %" PRIu64 "]", k ? ", " : "[",
                     c.zero, c.subnormal, c.overflow, c.survive);
            CHECK(p && strstr(p, want) && strstr(p, want) < strstr(p, "\"bf16\""), "fp16 counts at 2^%d: %s", k, want);
        }
        free(html);
    }
    list_dir(dir, names, sizeof names);
    CHECK(!strcmp(names, "page.html "), "after a write the directory holds '%s'", names);
    /* fp16 values give the same page as their fp32 widening (but the description) */
    uint16_t h[N];
    float w[N];
    mp_convert(h, MP_F16, x, MP_F32, N, NULL);
    mp_convert(w, MP_F32, h, MP_F16, N, NULL);
    char path2[600];
    snprintf(path2, sizeof path2, "%s/w.html", dir);
    CHECK(mp_explore_write(path, h, MP_F16, N, "d") == MP_OK && mp_explore_write(path2, w, MP_F32, N, "d") == MP_OK,
          "fp16 page");
    char *a = slurp(path), *b = slurp(path2);
    CHECK(a && b && !strcmp(a, b), "fp16 page differs from its fp32 widening's");
    free(a), free(b);
    unlink(path2);

    /* no directory: MP_EIO, nothing created */
    snprintf(path, sizeof path, "%s/missing/page.html", dir);
    mp_error(MP_OK, "%s", "");
    CHECK(mp_explore_write(path, x, MP_F32, N, "d") == MP_EIO && mp_last_error()[0], "missing directory");
    /* a directory in the way: the temporary file is written, the rename fails, and it is removed */
    snprintf(path, sizeof path, "%s/sub", dir);
    CHECK(mkdir(path, 0700) == 0, "mkdir");
    snprintf(path2, sizeof path2, "%s/sub/inner", dir);
    FILE *f = fopen(path2, "w"); /* not empty: no rename over it on any file system */
    if (f) fclose(f);
    mp_error(MP_OK, "%s", "");
    CHECK(mp_explore_write(path, x, MP_F32, N, "d") == MP_EIO && mp_last_error()[0], "directory in the way");
    list_dir(dir, names, sizeof names);
    CHECK(!strcmp(names, "page.html sub ") || !strcmp(names, "sub page.html "), "temporary file left: '%s'", names);
    /* no finite value: MP_EINVAL, no file */
    const float nan3[3] = {NAN, NAN, INFINITY};
    snprintf(path, sizeof path, "%s/nan.html", dir);
    CHECK(mp_explore_write(path, nan3, MP_F32, 3, "d") == MP_EINVAL && access(path, F_OK) != 0, "no finite value");
    CHECK(mp_explore_write(path, x, MP_E5M2, N, "d") == MP_EINVAL, "e5m2 values");
    CHECK(mp_explore_write(NULL, x, MP_F32, N, "d") == MP_EINVAL, "NULL path");
    unlink(path2);
    snprintf(path, sizeof path, "%s/sub", dir);
    rmdir(path);
    snprintf(path, sizeof path, "%s/page.html", dir);
    unlink(path);
    rmdir(dir);
}

/* ---- mp_log2_histogram ---- */

/* The histogram by frexp on every value widened to double. */
static void ref_log2_histogram(const float *v, size_t n, int lo, int nbins, uint64_t *bins, uint64_t *zeros) {
    for (size_t i = 0; i < n; i++) {
        if (v[i] == 0) {
            (*zeros)++;
            continue;
        }
        if (!isfinite(v[i])) continue;
        int e;
        (void)frexp((double)v[i], &e); /* |v| = m 2^e, m in [0.5, 1): floor(log2 |v|) = e - 1 */
        const int b = e - 1 - lo;
        bins[b < 0 ? 0 : b >= nbins ? nbins - 1 : b]++;
    }
}

static void check_log2_histogram(void) {
    enum { N = 50000 };
    static float v[N], w[N];
    static uint16_t h[N];
    for (size_t i = 0; i < N; i++) {
        const uint32_t u = rnd() << 16 | rnd();
        memcpy(&v[i], &u, 4);
        h[i] = (uint16_t)rnd();
    }
    v[0] = 0, v[1] = -0.0f, v[2] = INFINITY, v[3] = NAN, v[4] = 0x1p-149f, v[5] = FLT_MAX, v[6] = 0x1p-127f;
    const struct {
        const void *x;
        mp_dtype t;
    } in[3] = {{v, MP_F32}, {h, MP_F16}, {h, MP_BF16}};
    const int ranges[3][2] = {{-150, 300}, {-20, 10}, {5, 1}}; /* every exponent; both ends clamped; one bin */
    for (int k = 0; k < 3; k++) {
        CHECK(mp_convert(w, MP_F32, in[k].x, in[k].t, N, NULL) == MP_OK, "widen");
        for (int r = 0; r < 3; r++) {
            uint64_t got[300] = {0}, want[300] = {0}, gz = 7, wz = 7; /* it adds to what is there */
            const int lo = ranges[r][0], nb = ranges[r][1];
            CHECK(mp_log2_histogram(in[k].x, in[k].t, N, lo, nb, got, &gz) == MP_OK, "%s", mp_last_error());
            ref_log2_histogram(w, N, lo, nb, want, &wz);
            CHECK(gz == wz && !memcmp(got, want, sizeof got),
                  "log2 histogram of %s from 2^%d, %d bins: %" PRIu64 " zeros against %" PRIu64,
                  mp_format(in[k].t)->name, lo, nb, gz, wz);
        }
    }
    uint64_t b[4] = {0}, z = 0;
    CHECK(mp_log2_histogram(NULL, MP_F32, 3, 0, 4, b, &z) == MP_EINVAL, "NULL buffer");
    CHECK(mp_log2_histogram(v, MP_E4M3, 3, 0, 4, b, &z) == MP_EINVAL && strstr(mp_last_error(), "e4m3"), "e4m3 values");
    CHECK(mp_log2_histogram(v, MP_F32, 3, 0, 0, b, &z) == MP_EINVAL, "no bins");
    CHECK(mp_log2_histogram(v, MP_F32, 3, 0, 4, b, NULL) == MP_EINVAL, "no zero count");
    CHECK(mp_log2_histogram(NULL, MP_F32, 0, 0, 4, b, &z) == MP_OK && z == 0, "n = 0");
}

/* ---- mp_block_compare_values ---- */

/* The same figures recounted from scratch: the whole (padded) tensor through
 * mx.h at once, the per-tensor side through format.h's scalar conversions,
 * flushed and nonzero read off the dequantized values, saturated from the
 * scaled values against the halfway point past each element's max (E4M3:
 * above 464; E5M2: from 61440, a tie that goes to the even 65536; E2M1: from
 * 7). */
static void recount_block(const float *x, size_t n, mp_block_format f, mp_mx_rule rule, mp_block_compare *r) {
    const int mx = f != MP_BLOCK_NVFP4;
    const mp_dtype elem = f == MP_BLOCK_MXFP8_E4M3 ? MP_E4M3 : f == MP_BLOCK_MXFP8_E5M2 ? MP_E5M2 : MP_E2M1;
    const size_t bs = mx ? 32 : 16, np = (n + bs - 1) / bs * bs;
    const double past = elem == MP_E4M3 ? 464 : elem == MP_E5M2 ? 61440 : 7;
    float *p = calloc(np, sizeof *p), *q = malloc(np * sizeof *q), amax = 0;
    uint8_t *codes = malloc(np), *bscale = malloc(np / 16);
    if (!p || !q || !codes || !bscale) abort();
    memcpy(p, x, n * sizeof *p);
    for (size_t i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[i]));
    memset(r, 0, sizeof *r);
    r->n = n, r->amax = amax;
    for (size_t i = 0; i < n; i++) r->nonzero_inputs += x[i] != 0;
    if (mx) {
        CHECK(mp_mx_quantize(codes, bscale, p, np, elem, rule, NULL) == MP_OK, "%s", mp_last_error());
        CHECK(mp_mx_dequantize(q, codes, bscale, np, elem) == MP_OK, "%s", mp_last_error());
    } else {
        CHECK(mp_nvfp4_quantize(codes, bscale, p, 1, np, MP_NVFP4_1X16, amax, NULL, NULL) == MP_OK, "%s",
              mp_last_error());
        CHECK(mp_nvfp4_dequantize(q, codes, bscale, 1, np, MP_NVFP4_1X16, amax) == MP_OK, "%s", mp_last_error());
    }
    const float g = mp_nvfp4_global_scale(amax);
    const float t = mx ? (elem == MP_E4M3 ? 448.0f : 57344.0f) / amax : 6.0f / amax, tinv = 1.0f / t;
    double err[2] = {0, 0};
    for (size_t i = 0; i < n; i++) {
        if (x[i] == 0) continue;
        /* block scaling: x times the inverse of its block's scale */
        const uint8_t s = bscale[i / bs];
        const double y =
            mx ? fabs(ldexp(x[i], 127 - s)) : fabs(x[i] * fminf(1.0f / (mp_e4m3_to_f32(s) * (1.0f / g)), FLT_MAX));
        r->block_scaling.flushed += q[i] == 0;
        r->block_scaling.saturated += q[i] != 0 && y >= past && (y > past || elem != MP_E4M3);
        err[0] += fabs(((double)q[i] - x[i]) / x[i]);
        /* one scale per tensor */
        const float yt = x[i] * t;
        const float v = elem == MP_E4M3   ? mp_e4m3_to_f32(mp_f32_to_e4m3_sat(yt)) * tinv
                        : elem == MP_E5M2 ? mp_e5m2_to_f32(mp_f32_to_e5m2(yt)) * tinv
                                          : mp_e2m1_to_f32(mp_f32_to_e2m1(yt)) * tinv;
        r->per_tensor.flushed += v == 0;
        r->per_tensor.saturated += fabsf(yt) >= past && (fabsf(yt) > past || elem != MP_E4M3);
        err[1] += fabs(((double)v - x[i]) / x[i]);
    }
    mp_block_counts *c[2] = {&r->block_scaling, &r->per_tensor};
    for (int k = 0; k < 2; k++) {
        c[k]->nonzero = r->nonzero_inputs - c[k]->flushed;
        c[k]->mean_rel_error = r->nonzero_inputs ? err[k] / (double)r->nonzero_inputs : 0;
    }
    r->tensor_scale = t;
    free(p), free(q), free(codes), free(bscale);
}

static void check_counts(const char *what, const mp_block_counts *got, uint64_t flushed, uint64_t saturated,
                         uint64_t nonzero, double err, double tol) {
    CHECK(got->flushed == flushed && got->saturated == saturated && got->nonzero == nonzero &&
              fabs(got->mean_rel_error - err) <= tol,
          "%s: flushed %" PRIu64 " saturated %" PRIu64 " nonzero %" PRIu64 " error %.9g; expected %" PRIu64 " %" PRIu64
          " %" PRIu64 " %.9g",
          what, got->flushed, got->saturated, got->nonzero, got->mean_rel_error, flushed, saturated, nonzero, err);
}

static void check_block_compare(void) {
    const long mark = check_failures;
    mp_block_compare c;
    /* two blocks of 32 at very different magnitudes: 256 and 2^-30. Each block
     * scale fits its block exactly (256 * 2^0 and 256 * 2^-38 in E4M3; 2^15
     * times 2^-7 and 2^-45 in E5M2), under both rules. One scale per tensor
     * (448/256 = 1.75, 57344/256 = 224) puts 2^-30 below half the smallest
     * subnormal (2^-30 * 1.75 < 2^-10, 2^-30 * 224 < 2^-17): the 32 small
     * values are flushed and count an error of 1 each, the large ones about 0. */
    float two[64];
    for (int i = 0; i < 64; i++) two[i] = i < 32 ? 256.0f : 0x1p-30f;
    for (int f = 0; f < 2; f++)
        for (int rule = 0; rule < 2; rule++) {
            CHECK(mp_block_compare_values(two, 64, (mp_block_format)f, (mp_mx_rule)rule, &c) == MP_OK, "%s",
                  mp_last_error());
            check_counts("two blocks, block scaling", &c.block_scaling, 0, 0, 64, 0, 0);
            check_counts("two blocks, per tensor", &c.per_tensor, 32, 0, 32, 0.5, 1e-7);
            CHECK(c.n == 64 && c.nonzero_inputs == 64 && c.amax == 256 && c.block == 32 &&
                      c.tensor_scale == (f ? 224.0f : 1.75f) && c.elem == (f ? MP_E5M2 : MP_E4M3) &&
                      c.rule == (mp_mx_rule)rule,
                  "two blocks: header figures");
        }
    /* 480 and 31 ones in E4M3: FLOOR gives the block 2^(8-8) = 1, and 480 rounds
     * past 448 (above 464): saturated, error 32/480 on one value of 32. RCEIL
     * gives 2 (480 / 448 > 1): 240 and 0.5 are exact. Per tensor (448/480),
     * 480 becomes 448: not past the max. */
    float sat[32];
    for (int i = 0; i < 32; i++) sat[i] = i ? 1.0f : 480.0f;
    CHECK(mp_block_compare_values(sat, 32, MP_BLOCK_MXFP8_E4M3, MP_MX_FLOOR, &c) == MP_OK, "%s", mp_last_error());
    check_counts("480, floor", &c.block_scaling, 0, 1, 32, 32.0 / 480 / 32, 1e-12);
    CHECK(c.per_tensor.saturated == 0 && c.per_tensor.flushed == 0, "480 per tensor");
    CHECK(mp_block_compare_values(sat, 32, MP_BLOCK_MXFP8_E4M3, MP_MX_RCEIL, &c) == MP_OK, "%s", mp_last_error());
    check_counts("480, rceil", &c.block_scaling, 0, 0, 32, 0, 0);
    /* NVFP4: 16 sixes and 16 values of 0.006. Per tensor, t = 6/6 = 1 and 0.006
     * is below 0.25: flushed. In blocks: g = 2688/6 = 448, the small block's
     * scale e4m3(0.006 * 448 / 6 = 0.448) = 0.4375, the element 0.006 * 1024 =
     * 6.144 -> 6 (not past 7), the value 6 * 0.4375 * 6 / 2688 = 0.005859375:
     * error 0.0234375 on half the values. */
    float nv[32];
    for (int i = 0; i < 32; i++) nv[i] = i < 16 ? 6.0f : 0.006f;
    CHECK(mp_block_compare_values(nv, 32, MP_BLOCK_NVFP4, MP_MX_RCEIL, &c) == MP_OK, "%s", mp_last_error());
    check_counts("nvfp4 two blocks, block scaling", &c.block_scaling, 0, 0, 32, 0.0234375 / 2, 1e-6);
    check_counts("nvfp4 two blocks, per tensor", &c.per_tensor, 16, 0, 16, 0.5, 1e-6);
    CHECK(c.block == 16 && c.elem == MP_E2M1 && c.tensor_scale == 1.0f && c.rule == MP_MX_FLOOR,
          "nvfp4 header figures");
    /* a partial last block, and zeros: padding is in no count */
    const float part[3] = {1.0f, 0.0f, -0x1p-12f};
    CHECK(mp_block_compare_values(part, 3, MP_BLOCK_NVFP4, 0, &c) == MP_OK, "%s", mp_last_error());
    CHECK(c.n == 3 && c.nonzero_inputs == 2 && c.block_scaling.nonzero + c.block_scaling.flushed == 2, "partial block");
    CHECK(mp_block_compare_values(part + 1, 1, MP_BLOCK_MXFP8_E4M3, MP_MX_RCEIL, &c) == MP_OK &&
              c.nonzero_inputs == 0 && c.block_scaling.mean_rel_error == 0 && c.tensor_scale == 1.0f,
          "all zero");

    /* against the recount: signed values over 2^-40 .. 2^12 with zeros, sizes
     * that end mid-block and one past the library's chunk (16384) */
    const size_t sizes[3] = {1, 1057, 40000};
    float *x = malloc(40000 * sizeof *x);
    if (!x) abort();
    for (int k = 0; k < 3; k++) {
        const size_t n = sizes[k];
        for (size_t i = 0; i < n; i++) {
            const uint32_t r = rnd();
            x[i] = r % 17 == 0
                       ? 0.0f
                       : ldexpf(1.0f + (float)(r >> 8 & 0xffff) / 65536.0f, (int)(r % 53) - 40) * (r & 1 ? -1 : 1);
        }
        for (int f = 0; f < 3; f++)
            for (int rule = 0; rule < (f < 2 ? 2 : 1); rule++) {
                mp_block_compare want;
                recount_block(x, n, (mp_block_format)f, (mp_mx_rule)rule, &want);
                CHECK(mp_block_compare_values(x, n, (mp_block_format)f, (mp_mx_rule)rule, &c) == MP_OK, "%s",
                      mp_last_error());
                char what[96];
                snprintf(what, sizeof what, "%s %s, n %zu", mp_block_format_name((mp_block_format)f),
                         rule ? "rceil" : "floor", n);
                CHECK(c.n == n && c.nonzero_inputs == want.nonzero_inputs && c.amax == want.amax &&
                          c.tensor_scale == want.tensor_scale,
                      "%s: header figures", what);
                check_counts(what, &c.block_scaling, want.block_scaling.flushed, want.block_scaling.saturated,
                             want.block_scaling.nonzero, want.block_scaling.mean_rel_error, 1e-12);
                check_counts(what, &c.per_tensor, want.per_tensor.flushed, want.per_tensor.saturated,
                             want.per_tensor.nonzero, want.per_tensor.mean_rel_error, 1e-12);
                if (n == 40000) /* the wide spread: one scale per tensor loses more; MX saturates
                                 * under FLOOR only (NVFP4: in blocks with a subnormal scale) */
                    CHECK(c.block_scaling.flushed < c.per_tensor.flushed &&
                              (f == 2 || (c.block_scaling.saturated > 0) == (rule == MP_MX_FLOOR)) &&
                              c.block_scaling.mean_rel_error < c.per_tensor.mean_rel_error,
                          "%s: block scaling saves nothing", what);
            }
    }
    free(x);

    /* names and bad arguments */
    mp_block_format f;
    CHECK(mp_block_format_parse("mxfp8-e5m2", &f) == MP_OK && f == MP_BLOCK_MXFP8_E5M2, "parse");
    CHECK(mp_block_format_parse("mxfp8", &f) == MP_EINVAL && strstr(mp_last_error(), "'mxfp8'"), "parse mxfp8");
    CHECK(mp_block_format_parse(NULL, &f) == MP_EINVAL, "parse NULL");
    CHECK(!strcmp(mp_block_format_name(MP_BLOCK_NVFP4), "nvfp4") && mp_block_format_name((mp_block_format)3) == NULL,
          "names");
    const float bad[2] = {1.0f, NAN}, inf[2] = {INFINITY, 1.0f};
    CHECK(mp_block_compare_values(bad, 2, MP_BLOCK_NVFP4, 0, &c) == MP_EINVAL && strstr(mp_last_error(), "value 1"),
          "NaN");
    CHECK(mp_block_compare_values(inf, 2, MP_BLOCK_MXFP8_E4M3, 0, &c) == MP_EINVAL, "inf");
    CHECK(mp_block_compare_values(NULL, 2, MP_BLOCK_NVFP4, 0, &c) == MP_EINVAL, "NULL x");
    CHECK(mp_block_compare_values(bad, 0, MP_BLOCK_NVFP4, 0, &c) == MP_EINVAL, "n = 0");
    CHECK(mp_block_compare_values(bad, 1, MP_BLOCK_NVFP4, 0, NULL) == MP_EINVAL, "NULL out");
    CHECK(mp_block_compare_values(bad, 1, (mp_block_format)3, 0, &c) == MP_EINVAL, "format 3");
    CHECK(mp_block_compare_values(bad, 1, MP_BLOCK_MXFP8_E4M3, (mp_mx_rule)2, &c) == MP_EINVAL, "MX rule 2");
    CHECK(mp_block_compare_values(bad, 1, MP_BLOCK_NVFP4, (mp_mx_rule)2, &c) == MP_OK, "nvfp4 takes no rule");
    CHECK_SAY(mark, "block formats: hand-built blocks and a recount of 5 format/rule pairs on 3 sizes agree\n");
}

int main(int argc, char **argv) {
    (void)test_quick(argc, argv); /* every check is small enough for the sanitizers */
    check_convert_count();
    check_count_values();
    check_analyze();
    check_log2_histogram();
    check_explore();
    check_block_compare();
    return check_report("test_underflow");
}
