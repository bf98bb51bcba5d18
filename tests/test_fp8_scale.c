/* test_fp8_scale.c - per-tensor fp8 scaling (mx.h) against Transformer Engine
 * 2.x's rules: mp_fp8_scale on hand values and against the fp32 division;
 * the amax history on a hand sequence and against a line-by-line model of
 * TE's fused update kernel (kernel_bulk); the quantizer against format.h's
 * scalar conversions of fp32(x * scale) on make test's slice of the fp32 inputs
 * (all 2^32 with --long, the quick sample under sanitizers) and on random inputs and scales, statistics
 * included; code round trips; the dequantizer; FTZ/DAZ; threads; bad
 * arguments. */
#include <float.h>
#include <math.h>
#if defined(__x86_64__) || defined(_M_X64)
#include <xmmintrin.h>
#define HAVE_MXCSR 1
#endif

#include "check.h"
#include "internal.h"

static uint64_t rng = 0x243f6a8885a308d3ull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}
static float rnd_unit(void) { return (float)(rnd() >> 8) * 0x1p-24f; } /* [0, 1) */

static float fmax_of(mp_dtype f) { return f == MP_E4M3 ? 448.0f : 57344.0f; }

/* ---- the reference quantizer: format.h's scalar conversions of the fp32 product ---- */

static uint8_t ref_code(mp_dtype fmt, float p) {
    if (fmt == MP_E4M3) return mp_f32_to_e4m3_sat(p);
    uint8_t c = mp_f32_to_e5m2(p);
    if ((c & 0x7f) == 0x7c) c = (uint8_t)((c & 0x80) | 0x7b); /* overflow and inf saturate to +-57344 */
    return c;
}

/* the non-saturating conversion overflows: the value rounds past the max */
static int ref_past_max(mp_dtype fmt, float p) {
    if (isnan(p)) return 0;
    return fmt == MP_E4M3 ? (mp_f32_to_e4m3(p) & 0x7f) == 0x7f : (mp_f32_to_e5m2(p) & 0x7f) == 0x7c;
}

static void ref_quantize(uint8_t *c, const float *x, size_t n, mp_dtype fmt, float scale, mp_quant_stats *st) {
    for (size_t i = 0; i < n; i++) {
        const float p = x[i] * scale;
        c[i] = ref_code(fmt, p);
        st->n++;
        if (!isfinite(x[i])) {
            st->nonfinite++;
            continue;
        }
        if ((c[i] & 0x7f) == (fmt == MP_E4M3 ? 0x7e : 0x7b)) st->saturated += ref_past_max(fmt, p);
        st->flushed += x[i] != 0.0f && (c[i] & 0x7f) == 0;
        if (fabsf(x[i]) > st->amax) st->amax = fabsf(x[i]);
    }
}

static int stats_eq(const mp_quant_stats *a, const mp_quant_stats *b) {
    return a->n == b->n && a->saturated == b->saturated && a->flushed == b->flushed && a->nonfinite == b->nonfinite &&
           f2u(a->amax) == f2u(b->amax);
}

#define SAY_STATS(s) (s).n, (s).saturated, (s).flushed, (s).nonfinite, (double)(s).amax
#define STATS_FMT "n %" PRIu64 " sat %" PRIu64 " flushed %" PRIu64 " nonfinite %" PRIu64 " amax %g"

/* ---- mp_fp8_scale ---- */

static void check_scale(void) {
    const long mark = check_failures;
    const float prev = 0.25f;
    struct {
        float amax;
        mp_dtype fmt;
        float margin;
        const float *prev;
        float want;
    } t[] = {
        {448.0f, MP_E4M3, 0, NULL, 1.0f},
        {1.0f, MP_E4M3, 0, NULL, 448.0f},
        {2.0f, MP_E4M3, 0, NULL, 224.0f},
        {3.5f, MP_E4M3, 0, NULL, 128.0f},
        {0.5f, MP_E4M3, 0, NULL, 896.0f},
        {7.0f, MP_E4M3, 0, &prev, 64.0f},
        {57344.0f, MP_E5M2, 0, NULL, 1.0f},
        {1.0f, MP_E5M2, 0, NULL, 57344.0f},
        {0x1p-10f, MP_E5M2, 0, NULL, 57344.0f * 1024.0f},
        {1.0f, MP_E4M3, 1, NULL, 224.0f}, /* margin: / 2^margin */
        {1.0f, MP_E4M3, 2, &prev, 112.0f},
        {1.0f, MP_E4M3, -1, NULL, 896.0f},
        {2.0f, MP_E5M2, 3, NULL, 3584.0f},
        /* nothing to scale by: 1 (current scaling) or the scale in use (delayed) */
        {0.0f, MP_E4M3, 0, NULL, 1.0f},
        {-0.0f, MP_E4M3, 0, NULL, 1.0f},
        {INFINITY, MP_E4M3, 0, NULL, 1.0f},
        {-INFINITY, MP_E4M3, 0, NULL, 1.0f},
        {NAN, MP_E4M3, 0, NULL, 1.0f},
        {-2.0f, MP_E4M3, 0, NULL, 1.0f},
        {0.0f, MP_E4M3, 0, &prev, 0.25f},
        {-0.0f, MP_E5M2, 3, &prev, 0.25f},
        {INFINITY, MP_E4M3, 0, &prev, 0.25f},
        {NAN, MP_E5M2, 0, &prev, 0.25f},
        {-2.0f, MP_E4M3, 1, &prev, 0.25f},
        /* a quotient past fp32's range: FLT_MAX */
        {1e-38f, MP_E4M3, 0, NULL, FLT_MAX},
        {0x1p-120f, MP_E4M3, 0, &prev, FLT_MAX},   /* 1.75 * 2^128 */
        {0x1p-119f, MP_E4M3, 0, NULL, 0x1.cp127f}, /* 1.75 * 2^127: still finite */
        {0x1p-149f, MP_E5M2, 0, NULL, FLT_MAX},
        {0x1p-140f, MP_E4M3, 20, NULL, FLT_MAX},
        {0x1p-140f, MP_E4M3, 21, NULL, 0x1.cp127f}, /* a subnormal amax, exactly */
        {0x1p-130f, MP_E5M2, 18, NULL, 0x1.cp127f},
        {1.0f, MP_E4M3, 140, NULL, 0x1.cp-132f}, /* 448 * 2^-140: a subnormal scaled max */
        {FLT_MAX, MP_E4M3, 0, NULL, 448.0f / FLT_MAX},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        const float s = mp_fp8_scale(t[i].amax, t[i].fmt, t[i].margin, t[i].prev);
        CHECK(f2u(s) == f2u(t[i].want), "scale #%zu: amax %g margin %g prev %s: %a, want %a", i, (double)t[i].amax,
              (double)t[i].margin, t[i].prev ? "0.25" : "none", (double)s, (double)t[i].want);
    }
    /* an infinite previous scale becomes FLT_MAX, a NaN one stays */
    const float pinf = INFINITY, pnan = NAN;
    CHECK(mp_fp8_scale(0.0f, MP_E4M3, 0, &pinf) == FLT_MAX, "prev inf");
    CHECK(isnan(mp_fp8_scale(NAN, MP_E4M3, 0, &pnan)), "prev NaN");
    /* a fractional margin: fp32 448 * powf(2, -margin), then the division */
    volatile float pw = powf(2.0f, -0.5f), am = 3.0f;
    const float smax = 448.0f * pw;
    CHECK(mp_fp8_scale(3.0f, MP_E4M3, 0.5f, NULL) == smax / am, "margin 0.5");
    /* another format: NaN and a message */
    CHECK(isnan(mp_fp8_scale(1.0f, MP_F16, 0, NULL)) && strstr(mp_last_error(), "mp_fp8_scale"), "bad fmt -> NaN");
    CHECK(isnan(mp_fp8_scale(1.0f, (mp_dtype)99, 0, &prev)), "bad fmt 99 -> NaN");
    /* correctly rounded: the fp32 division itself, on random amaxes of every
     * exponent (subnormals included) and a few margins */
    long bad = 0;
    const float margins[] = {0, 1, 2, -3, 7};
    for (int i = 0; i < 400000; i++) {
        const float amax = u2f(1u + rnd() % 0x7f7fffffu);
        const mp_dtype fmt = i & 1 ? MP_E5M2 : MP_E4M3;
        const float mg = margins[i % 5];
        volatile float num = fmax_of(fmt) * ldexpf(1.0f, -(int)mg), den = amax;
        float want = num / den;
        if (isinf(want)) want = FLT_MAX;
        bad += f2u(mp_fp8_scale(amax, fmt, mg, NULL)) != f2u(want);
        bad += f2u(mp_fp8_scale(amax, fmt, mg, &prev)) != f2u(want);
    }
    CHECK(bad == 0, "%ld scales differ from the fp32 division", bad);
    CHECK_SAY(mark, "  scale: hand values, special amaxes, FLT_MAX, margins, 800000 random divisions\n");
}

/* ---- the amax history ---- */

/* One tensor's state as TE's fused update keeps it (amax_history[len][1],
 * scale[1]), updated as delayed_scaling.cu's kernel_bulk does after a step
 * whose forward wrote amax into row 0. */
typedef struct {
    float hist[1024];
    float scale;
    size_t len;
    int most_recent;
    float margin;
} te_model;

static void te_step(te_model *s, mp_dtype fmt, float step_amax) {
    s->hist[0] = step_amax; /* the forward's amax, written to row 0 */
    const float last_amax = s->hist[0];
    float amax = 0;
    if (last_amax != 0.0f) {
        float next[1024];
        for (size_t i = 0; i < s->len; i++) {
            const float a = i < s->len - 1 ? s->hist[i + 1] : last_amax;
            amax = fmaxf(amax, a);
            next[i] = i > 0 ? a : 0;
        }
        memcpy(s->hist, next, s->len * sizeof *next);
    }
    if (s->most_recent) amax = last_amax;
    const float scaled_max = fmax_of(fmt) * powf(2.0f, -s->margin);
    float scale = isfinite(amax) && amax > 0 ? scaled_max / amax : s->scale;
    if (isinf(scale)) scale = FLT_MAX;
    s->scale = scale;
}

static void check_history(void) {
    const long mark = check_failures;
    /* a hand sequence, len 4: the window is the 4 most recent nonzero amaxes,
     * this step's included; a zero amax is no step */
    float buf[4] = {0};
    mp_fp8_history h = {buf, 4, 0, 0, 0.0f, 1.0f};
    const float seq[] = {1, 2, 0.5f, 4, 0.25f, 0.125f, 0.125f, 0.125f, 0, NAN, INFINITY, 1, 1, 1, 1};
    const float want_max[] = {448, 224, 224, 112, 112, 112, 112, 1792, 1792, 3584, 3584, 3584, 3584, 3584, 448};
    const float want_recent[] = {448, 224, 896, 112, 1792, 3584, 3584, 3584, 3584, 3584, 3584, 448, 448, 448, 448};
    CHECK(h.scale == 1.0f, "initial scale 1");
    for (size_t i = 0; i < sizeof seq / sizeof seq[0]; i++) {
        mp_fp8_history_update(&h, MP_E4M3, seq[i]);
        CHECK(h.scale == want_max[i], "max: step %zu amax %g: scale %g, want %g", i + 1, (double)seq[i],
              (double)h.scale, (double)want_max[i]);
        if (i == 3)
            CHECK(h.pos == 0 && buf[0] == 1 && buf[1] == 2 && buf[2] == 0.5f && buf[3] == 4, "ring after 4 steps");
        if (i == 7) CHECK(h.pos == 0 && buf[0] == 0.25f && buf[3] == 0.125f, "ring after 8 steps");
        if (i == 8) CHECK(h.pos == 0 && buf[0] == 0.25f, "a zero amax neither writes nor advances");
    }
    float buf2[4] = {0};
    mp_fp8_history hr = {buf2, 4, 0, 1, 0.0f, 1.0f};
    for (size_t i = 0; i < sizeof seq / sizeof seq[0]; i++) {
        mp_fp8_history_update(&hr, MP_E4M3, seq[i]);
        CHECK(hr.scale == want_recent[i], "most_recent: step %zu amax %g: scale %g, want %g", i + 1, (double)seq[i],
              (double)hr.scale, (double)want_recent[i]);
    }
    /* margin 1 halves, E5M2 uses 57344 */
    float buf3[2] = {0};
    mp_fp8_history m = {buf3, 2, 0, 0, 1.0f, 1.0f};
    mp_fp8_history_update(&m, MP_E5M2, 2.0f);
    CHECK(m.scale == 14336.0f, "margin 1, e5m2: %g", (double)m.scale);
    /* nothing happens without a history or with another format */
    mp_fp8_history_update(NULL, MP_E4M3, 1.0f);
    mp_fp8_history z = {NULL, 4, 0, 0, 0.0f, 1.0f};
    mp_fp8_history_update(&z, MP_E4M3, 1.0f);
    z.amax = buf3, z.len = 0;
    mp_fp8_history_update(&z, MP_E4M3, 1.0f);
    CHECK(z.scale == 1.0f && z.pos == 0, "NULL history or len 0: unchanged");
    z.len = 2;
    mp_fp8_history_update(&z, MP_BF16, 1.0f);
    CHECK(z.scale == 1.0f && z.pos == 0 && strstr(mp_last_error(), "mp_fp8_history_update"), "bad fmt: unchanged");

    /* against the model of TE's kernel, on random sequences with zeros,
     * NaNs, infinities, subnormals and huge amaxes */
    const size_t lens[] = {1, 2, 3, 4, 16, 1024};
    static float ring[1024];
    long bad = 0, layout_bad = 0, steps = 0;
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
        for (int algo = 0; algo < 2; algo++)
            for (int mg = 0; mg < 3; mg++) {
                const mp_dtype fmt = mg == 2 ? MP_E5M2 : MP_E4M3;
                static te_model te;
                memset(&te, 0, sizeof te);
                te.len = lens[li], te.most_recent = algo, te.margin = (float)mg * 1.5f, te.scale = 1.0f;
                memset(ring, 0, sizeof ring);
                mp_fp8_history g = {ring, lens[li], 0, algo, te.margin, 1.0f};
                for (int step = 0; step < 3000; step++) {
                    const uint32_t r = rnd() % 100;
                    float a;
                    if (r < 8) a = 0.0f;
                    else if (r < 11) a = NAN;
                    else if (r < 13) a = INFINITY;
                    else if (r < 15) a = u2f(1u + rnd() % 0x7fffffu); /* subnormal */
                    else if (r < 17) a = u2f(0x7f000000u + rnd() % 0x7fffffu);
                    else a = ldexpf(0.5f + rnd_unit(), (int)(rnd() % 40) - 20 - (int)(step / 300));
                    te_step(&te, fmt, a);
                    mp_fp8_history_update(&g, fmt, a);
                    bad += f2u(te.scale) != f2u(g.scale);
                    /* the layout: TE's row k is the ring's (pos + k) % len, row 0 is 0 */
                    int lay = f2u(te.hist[0]) != 0;
                    for (size_t k = 1; k < te.len; k++) lay |= f2u(te.hist[k]) != f2u(ring[(g.pos + k) % te.len]);
                    layout_bad += lay;
                    steps++;
                }
            }
    CHECK(bad == 0, "%ld of %ld steps differ from TE's kernel", bad, steps);
    CHECK(layout_bad == 0, "%ld of %ld steps: the ring is not TE's rolled history", layout_bad, steps);
    CHECK_SAY(mark,
              "  history: hand sequence (max, most_recent, roll order, zero steps), %ld steps equal TE's kernel_bulk "
              "(scales and rows)\n",
              steps);
}

/* ---- the quantizer ---- */

/* every finite code value divided by a power-of-two scale comes back as the
 * same code, and dequantizes to the same fp32 value */
static void check_roundtrip(void) {
    const long mark = check_failures;
    for (int f = 0; f < 2; f++) {
        const mp_dtype fmt = f ? MP_E5M2 : MP_E4M3;
        for (int e = -20; e <= 20; e++) {
            const float scale = ldexpf(1.0f, e);
            float x[256], back[256];
            uint8_t want[256], got[256];
            size_t n = 0;
            for (int c = 0; c < 256; c++) {
                const float v = fmt == MP_E4M3 ? mp_e4m3_to_f32((uint8_t)c) : mp_e5m2_to_f32((uint8_t)c);
                if (!isfinite(v)) continue;
                want[n] = (uint8_t)c, x[n++] = ldexpf(v, -e);
            }
            mp_quant_stats st = {0};
            CHECK(mp_fp8_quantize(got, x, n, fmt, scale, &st) == MP_OK, "quantize");
            CHECK(memcmp(got, want, n) == 0, "%s scale 2^%d: codes do not round-trip", fmt == MP_E4M3 ? "e4m3" : "e5m2",
                  e);
            CHECK(mp_fp8_dequantize(back, got, n, fmt, scale) == MP_OK, "dequantize");
            CHECK(memcmp(back, x, n * 4) == 0, "%s scale 2^%d: values do not round-trip",
                  fmt == MP_E4M3 ? "e4m3" : "e5m2", e);
            CHECK(st.n == n && st.saturated == 0 && st.flushed == 0 && st.nonfinite == 0 &&
                      st.amax == ldexpf(fmax_of(fmt), -e),
                  "round-trip stats: " STATS_FMT, SAY_STATS(st));
        }
    }
    CHECK_SAY(mark, "  round trip: all finite e4m3 (254) and e5m2 (248) codes at scales 2^-20..2^20\n");
}

/* a constructed array: codes and every count by hand */
static void check_constructed(void) {
    const long mark = check_failures;
    const float x4[] = {0.0f,     -0.0f,     1.0f, 448.0f, 460.0f,   464.0f,       465.0f, -1e30f,     FLT_MAX,
                        INFINITY, -INFINITY, NAN,  -NAN,   0x1p-10f, 0x1.002p-10f, 1e-40f, -0x1.8p-9f, 0x1.ep-7f};
    const uint8_t c4[] = {0x00, 0x80, 0x38, 0x7e, 0x7e, 0x7e, 0x7e, 0xfe, 0x7e,
                          0x7e, 0xfe, 0x7f, 0xff, 0x00, 0x01, 0x00, 0x82, 0x08};
    const size_t n4 = sizeof x4 / sizeof x4[0];
    uint8_t got[32];
    mp_quant_stats st = {0};
    CHECK(mp_fp8_quantize(got, x4, n4, MP_E4M3, 1.0f, &st) == MP_OK, "e4m3 constructed");
    for (size_t i = 0; i < n4; i++)
        CHECK(got[i] == c4[i], "e4m3 x=%a: code 0x%02x, want 0x%02x", (double)x4[i], got[i], c4[i]);
    /* saturated: 465, -1e30, FLT_MAX (460, 464 round to 448: not past it);
     * flushed: 2^-10 (a tie to 0) and 1e-40; nonfinite: inf, -inf, NaN, -NaN */
    CHECK(st.n == n4 && st.saturated == 3 && st.flushed == 2 && st.nonfinite == 4 && st.amax == FLT_MAX,
          "e4m3 counts: " STATS_FMT, SAY_STATS(st));
    /* the product overflows fp32 from a finite input: saturated, not nonfinite */
    const float big[] = {FLT_MAX, -3e38f, 1.0f};
    mp_quant_stats sb = {0};
    CHECK(mp_fp8_quantize(got, big, 3, MP_E4M3, 4.0f, &sb) == MP_OK && got[0] == 0x7e && got[1] == 0xfe &&
              got[2] == 0x48,
          "fp32 overflow of the product");
    CHECK(sb.saturated == 2 && sb.nonfinite == 0, "product overflow counts as saturated");

    const float x5[] = {57344.0f, 61439.0f,   61440.0f, -1e9f,  INFINITY, -INFINITY, NAN,
                        0x1p-17f, 0x1.8p-17f, 0x1p-16f, 1e-30f, -0.0f,    1.5f};
    const uint8_t c5[] = {0x7b, 0x7b, 0x7b, 0xfb, 0x7b, 0xfb, 0x7e, 0x00, 0x01, 0x01, 0x00, 0x80, 0x3e};
    const size_t n5 = sizeof x5 / sizeof x5[0];
    mp_quant_stats s5 = {0};
    s5.amax = 1e10f; /* added to: the max with what is there */
    CHECK(mp_fp8_quantize(got, x5, n5, MP_E5M2, 1.0f, &s5) == MP_OK, "e5m2 constructed");
    for (size_t i = 0; i < n5; i++)
        CHECK(got[i] == c5[i], "e5m2 x=%a: code 0x%02x, want 0x%02x", (double)x5[i], got[i], c5[i]);
    /* 61439 rounds to 57344; 61440 (the tie) and -1e9 round past it */
    CHECK(s5.n == n5 && s5.saturated == 2 && s5.flushed == 2 && s5.nonfinite == 3 && s5.amax == 1e10f,
          "e5m2 counts: " STATS_FMT, SAY_STATS(s5));
    /* counts add up over calls; NULL stats is fine */
    CHECK(mp_fp8_quantize(got, x5, n5, MP_E5M2, 1.0f, &s5) == MP_OK && s5.n == 2 * n5 && s5.saturated == 4,
          "stats add up");
    CHECK(mp_fp8_quantize(got, x5, n5, MP_E5M2, 1.0f, NULL) == MP_OK && got[2] == 0x7b, "NULL stats");
    CHECK_SAY(mark, "  constructed: saturation at 464 / 61440, ties, flushes, inf -> max, NaN -> NaN, counts\n");
}

/* format.h's conversion of x * 1 on fp32 inputs: all 2^32 (--long, make
 * test-long), make test's slice (check.h, the default), or the quick sample:
 * the quantizer's narrowing, stats included */
#define BLOCK (1u << 16)
static void check_all_inputs(int mode) {
    const long mark = check_failures;
    const int quick = mode == QUICK;
    const uint64_t count = mode_count(mode);
    long bad[2] = {0, 0};
#pragma omp parallel
    {
        float *x = malloc(BLOCK * sizeof *x);
        uint8_t *ref = malloc(BLOCK), *got = malloc(BLOCK);
        long my_bad[2] = {0, 0};
#pragma omp for schedule(dynamic, 1)
        for (uint64_t b = 0; b < (count + BLOCK - 1) / BLOCK; b++) {
            const size_t n = (size_t)(count - b * BLOCK < BLOCK ? count - b * BLOCK : BLOCK);
            for (size_t i = 0; i < n; i++) x[i] = u2f(mode_input(mode, b * BLOCK + i));
            for (int f = 0; f < 2; f++) {
                const mp_dtype fmt = f ? MP_E5M2 : MP_E4M3;
                mp_quant_stats rs = {0}, gs = {0};
                ref_quantize(ref, x, n, fmt, 1.0f, &rs);
                if (mp_fp8_quantize(got, x, n, fmt, 1.0f, &gs) != MP_OK || memcmp(ref, got, n) != 0 ||
                    !stats_eq(&rs, &gs))
                    my_bad[f]++;
            }
        }
#pragma omp critical
        bad[0] += my_bad[0], bad[1] += my_bad[1];
        free(x);
        free(ref);
        free(got);
    }
    CHECK(bad[0] == 0 && bad[1] == 0, "%ld e4m3 and %ld e5m2 blocks differ from format.h", bad[0], bad[1]);
    CHECK_SAY(mark, "  all inputs: %s fp32 patterns x 1 equal format.h's e4m3_sat / e5m2 saturated, with stats\n",
              quick           ? "the quick sample of"
              : mode == SLICE ? "make test's slice of the"
                              : "all 2^32");
}

/* a random scale: any positive finite fp32 (subnormals included), a power of
 * two, or TE's max / amax */
static float rnd_scale(void) {
    switch (rnd() % 4) {
    case 0: return u2f(1u + rnd() % 0x7f7fffffu);
    case 1: return ldexpf(1.0f, (int)(rnd() % 200) - 100);
    default: return mp_fp8_scale(ldexpf(0.5f + rnd_unit(), (int)(rnd() % 60) - 30), MP_E4M3, 0, NULL);
    }
}

/* an input near the interesting range of the scale: mostly |x * scale| in
 * [2^-20, 2^18], plus random bit patterns (every class) */
static float rnd_input(float scale) {
    const uint32_t r = rnd() % 16;
    if (r < 3) return u2f(rnd());
    const float mag = ldexpf(0.5f + rnd_unit(), (int)(rnd() % 38) - 20);
    const float x = mag / scale;
    return rnd() & 1 ? -x : x;
}

static void check_random(int quick) {
    const long mark = check_failures;
    const size_t n = 4099;
    const int trials = quick ? 500 : 4000;
    float *x = malloc(n * sizeof *x);
    uint8_t *ref = malloc(n), *got = malloc(n);
    long bad = 0, sbad = 0;
    for (int t = 0; t < trials; t++) {
        const float scale = rnd_scale();
        for (size_t i = 0; i < n; i++) x[i] = rnd_input(scale);
        for (int f = 0; f < 2; f++) {
            const mp_dtype fmt = f ? MP_E5M2 : MP_E4M3;
            mp_quant_stats rs = {0}, gs = {0};
            const size_t m = n - (size_t)(t % 64); /* tails */
            ref_quantize(ref, x, m, fmt, scale, &rs);
            CHECK(mp_fp8_quantize(got, x, m, fmt, scale, &gs) == MP_OK, "random quantize");
            for (size_t i = 0; i < m; i++) {
                if (got[i] != ref[i] && bad++ < 5)
                    fprintf(stderr, "  %s x=%a scale=%a: 0x%02x, want 0x%02x\n", f ? "e5m2" : "e4m3", (double)x[i],
                            (double)scale, got[i], ref[i]);
            }
            sbad += !stats_eq(&rs, &gs);
        }
    }
    CHECK(bad == 0 && sbad == 0, "%ld codes and %ld stats differ from format.h(x * scale)", bad, sbad);
    CHECK_SAY(mark, "  random: %d scales x %zu inputs x 2 formats equal format.h's conversion of fp32(x * scale)\n",
              trials, n);

    /* threads: a large call gives the same bits and counts with 1 and 2 threads */
    const long mark2 = check_failures;
    const size_t big = ((size_t)1 << 20) + 77;
    float *xb = malloc(big * sizeof *xb);
    uint8_t *r1 = malloc(big), *r2 = malloc(big), *rr = malloc(big);
    const float scale = 448.0f / 3.0f;
    for (size_t i = 0; i < big; i++) xb[i] = rnd_input(scale);
    for (int f = 0; f < 2; f++) {
        const mp_dtype fmt = f ? MP_E5M2 : MP_E4M3;
        mp_quant_stats s1 = {0}, s2 = {0}, sr = {0};
        mp_set_threads(1);
        CHECK(mp_fp8_quantize(r1, xb, big, fmt, scale, &s1) == MP_OK, "1 thread");
        mp_set_threads(2);
        CHECK(mp_fp8_quantize(r2, xb, big, fmt, scale, &s2) == MP_OK, "2 threads");
        ref_quantize(rr, xb, big, fmt, scale, &sr);
        CHECK(memcmp(r1, r2, big) == 0 && stats_eq(&s1, &s2), "threads change the result");
        CHECK(memcmp(r1, rr, big) == 0 && stats_eq(&s1, &sr), "large call differs from the reference");
    }
    mp_set_threads(0);
    CHECK_SAY(mark2, "  threads: %zu elements, 1 and 2 threads, equal bits and counts\n", big);
    free(xb);
    free(r1);
    free(r2);
    free(rr);
    free(x);
    free(ref);
    free(got);
}

/* TE dequantizes with scale_inv = fp32(1 / scale), then code * scale_inv */
static void check_dequantize(void) {
    const long mark = check_failures;
    uint8_t codes[256];
    for (int c = 0; c < 256; c++) codes[c] = (uint8_t)c;
    long bad = 0, differ_div = 0;
    float got[256];
    for (int t = 0; t < 3000; t++) {
        const float scale = t == 0 ? FLT_MAX : t == 1 ? 1.0f : t == 2 ? 0x1p-149f : rnd_scale();
        for (int f = 0; f < 2; f++) {
            const mp_dtype fmt = f ? MP_E5M2 : MP_E4M3;
            CHECK(mp_fp8_dequantize(got, codes, 256, fmt, scale) == MP_OK, "dequantize");
            volatile float one = 1.0f;
            const float inv = one / scale;
            for (int c = 0; c < 256; c++) {
                const float v = f ? mp_e5m2_to_f32((uint8_t)c) : mp_e4m3_to_f32((uint8_t)c);
                const float want = v * inv;
                bad += f2u(got[c]) != f2u(want);
                differ_div += isfinite(v) && got[c] != v / scale;
            }
        }
    }
    CHECK(bad == 0, "%ld values differ from code * fp32(1 / scale)", bad);
    CHECK(differ_div > 0, "code / scale never differs: the test cannot tell the rules apart");
    CHECK_SAY(mark,
              "  dequantize: code * fp32(1/scale) on 3000 scales x 256 codes x 2 formats (%ld values differ "
              "from code / scale, as TE's differ from torchao's)\n",
              differ_div);
}

#ifdef HAVE_MXCSR
/* FTZ and DAZ change no bit: subnormal inputs, scales, products, amaxes and
 * reciprocals are all exact (single thread: MXCSR is per thread) */
static void check_ftz_daz(void) {
    const long mark = check_failures;
    enum { N = 8192 };
    static float x[N], d0[N], d1[N];
    static uint8_t c0[N], c1[N], cr[N];
    const float scales[] = {0x1p100f, 0x1.cp126f, 1.0f, 0x1p-140f, 3e-45f, FLT_MAX};
    for (size_t si = 0; si < sizeof scales / sizeof scales[0]; si++) {
        const float scale = scales[si];
        for (size_t i = 0; i < N; i++)
            x[i] = i % 3 == 0 ? u2f((rnd() % 0x800000u) | (rnd() & 0x80000000u)) /* fp32 subnormals */
                              : rnd_input(scale);
        for (int f = 0; f < 2; f++) {
            const mp_dtype fmt = f ? MP_E5M2 : MP_E4M3;
            mp_quant_stats s0 = {0}, s1 = {0}, sr = {0};
            ref_quantize(cr, x, N, fmt, scale, &sr);
            CHECK(mp_fp8_quantize(c0, x, N, fmt, scale, &s0) == MP_OK, "quantize");
            CHECK(mp_fp8_dequantize(d0, c0, N, fmt, scale) == MP_OK, "dequantize");
            const unsigned csr = _mm_getcsr();
            _mm_setcsr(csr | 0x8040); /* FTZ | DAZ */
            const mp_status q1 = mp_fp8_quantize(c1, x, N, fmt, scale, &s1);
            const mp_status q2 = mp_fp8_dequantize(d1, c0, N, fmt, scale);
            _mm_setcsr(csr);
            CHECK(memcmp(c0, cr, N) == 0 && stats_eq(&s0, &sr), "scale %a: differs from the reference", (double)scale);
            CHECK(q1 == MP_OK && q2 == MP_OK && memcmp(c0, c1, N) == 0 && stats_eq(&s0, &s1) &&
                      memcmp(d0, d1, sizeof d0) == 0,
                  "%s scale %a: FTZ/DAZ change the result", f ? "e5m2" : "e4m3", (double)scale);
        }
    }
    /* the scale of a subnormal amax, and a history fed one */
    const float a[] = {0x1p-140f, 1e-45f, 3e-39f, 1.0f};
    const float margins[] = {0, 21, 30, 140};
    float buf0[3] = {0}, buf1[3] = {0};
    mp_fp8_history h0 = {buf0, 3, 0, 0, 21.0f, 1.0f}, h1 = {buf1, 3, 0, 0, 21.0f, 1.0f};
    for (size_t i = 0; i < 4; i++)
        for (size_t j = 0; j < 4; j++) {
            const float s0 = mp_fp8_scale(a[i], MP_E4M3, margins[j], NULL);
            mp_fp8_history_update(&h0, MP_E4M3, a[i]);
            const unsigned csr = _mm_getcsr();
            _mm_setcsr(csr | 0x8040);
            const float s1 = mp_fp8_scale(a[i], MP_E4M3, margins[j], NULL);
            mp_fp8_history_update(&h1, MP_E4M3, a[i]);
            _mm_setcsr(csr);
            CHECK(f2u(s0) == f2u(s1) && f2u(h0.scale) == f2u(h1.scale), "amax %a margin %g: FTZ/DAZ change the scale",
                  (double)a[i], (double)margins[j]);
        }
    const float s = mp_fp8_scale(0x1p-140f, MP_E4M3, 21, NULL);
    CHECK(s == 0x1.cp127f, "subnormal amax: %a", (double)s);
    /* a subnormal scale is a valid scale even under DAZ */
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040);
    const mp_status st = mp_fp8_quantize(c1, x, 4, MP_E4M3, 1e-45f, NULL);
    _mm_setcsr(csr);
    CHECK(st == MP_OK, "subnormal scale rejected under DAZ");
    CHECK_SAY(mark, "  FTZ/DAZ: quantize, dequantize, scale and history give the same bits\n");
}
#endif

static void check_errors(void) {
    const long mark = check_failures;
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8];
    uint8_t c[8];
    mp_quant_stats st = {0};
    mp_dtype bad_fmt[MP_NUM_DTYPES + 2];
    size_t nbad = 0;
    for (int d = 0; d < MP_NUM_DTYPES; d++)
        if (d != MP_E4M3 && d != MP_E5M2) bad_fmt[nbad++] = (mp_dtype)d;
    bad_fmt[nbad++] = (mp_dtype)99, bad_fmt[nbad++] = (mp_dtype)-1;
    for (size_t i = 0; i < nbad; i++) {
        CHECK(mp_fp8_quantize(c, x, 8, bad_fmt[i], 1.0f, &st) == MP_EINVAL && strstr(mp_last_error(), "format"),
              "quantize fmt %d", (int)bad_fmt[i]);
        CHECK(mp_fp8_dequantize(y, c, 8, bad_fmt[i], 1.0f) == MP_EINVAL, "dequantize fmt %d", (int)bad_fmt[i]);
    }
    const float bad_scale[] = {0.0f, -0.0f, -1.0f, -1e-45f, INFINITY, -INFINITY, NAN};
    for (size_t i = 0; i < sizeof bad_scale / sizeof bad_scale[0]; i++) {
        CHECK(mp_fp8_quantize(c, x, 8, MP_E4M3, bad_scale[i], &st) == MP_EINVAL && strstr(mp_last_error(), "scale"),
              "quantize scale %g", (double)bad_scale[i]);
        CHECK(mp_fp8_dequantize(y, c, 8, MP_E5M2, bad_scale[i]) == MP_EINVAL, "dequantize scale %g",
              (double)bad_scale[i]);
    }
    CHECK(mp_fp8_quantize(c, x, 8, MP_E4M3, 1e-45f, NULL) == MP_OK &&
              mp_fp8_quantize(c, x, 8, MP_E4M3, FLT_MAX, NULL) == MP_OK,
          "the smallest and largest scales are valid");
    CHECK(mp_fp8_quantize(NULL, x, 8, MP_E4M3, 1.0f, &st) == MP_EINVAL &&
              mp_fp8_quantize(c, NULL, 8, MP_E4M3, 1.0f, &st) == MP_EINVAL,
          "NULL buffers");
    CHECK(mp_fp8_dequantize(NULL, c, 8, MP_E4M3, 1.0f) == MP_EINVAL &&
              mp_fp8_dequantize(y, NULL, 8, MP_E4M3, 1.0f) == MP_EINVAL,
          "NULL buffers (dequantize)");
    CHECK(st.n == 0, "failed calls count nothing");
    CHECK(mp_fp8_quantize(NULL, NULL, 0, MP_E4M3, 1.0f, &st) == MP_OK && st.n == 0, "n = 0");
    CHECK(mp_fp8_dequantize(NULL, NULL, 0, MP_E5M2, 2.0f) == MP_OK, "n = 0 (dequantize)");
    CHECK(mp_fp8_quantize(NULL, NULL, 0, MP_E4M3, 0.0f, &st) == MP_EINVAL, "n = 0 still checks the scale");
    /* the codes inside the fp32 buffer */
    CHECK(mp_fp8_quantize((uint8_t *)x + 5, x, 8, MP_E4M3, 1.0f, NULL) == MP_EINVAL &&
              strstr(mp_last_error(), "overlap"),
          "overlap");
    CHECK(mp_fp8_dequantize(x, (const uint8_t *)x + 28, 8, MP_E4M3, 1.0f) == MP_EINVAL, "overlap (dequantize)");
    CHECK(mp_fp8_quantize(c, x, 8, MP_E4M3, 1.0f, NULL) == MP_OK, "separate buffers are fine");
    CHECK_SAY(mark, "  errors: formats, scales (0, negative, inf, NaN), NULL, n = 0, overlap\n");
}

int main(int argc, char **argv) {
    const int quick = test_quick(argc, argv);
    check_scale();
    check_history();
    check_roundtrip();
    check_constructed();
    check_dequantize();
#ifdef HAVE_MXCSR
    check_ftz_daz();
#endif
    check_errors();
    check_random(quick);
    int all = 0;
    for (int i = 1; i < argc; i++) all |= strcmp(argv[i], "--long") == 0;
    check_all_inputs(quick ? QUICK : all ? ALL : SLICE);
    return check_report("test_fp8_scale");
}
