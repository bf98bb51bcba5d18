/* test_format.c - the scalar conversions of format.h.
 *
 * Narrowing is checked on fp32 bit patterns (make test's slice, check.h; all
 * 2^32 with --long; a fixed sample with --quick) against ref_narrow below, an independent integer reference: it
 * finds the binade of the exact input value, rounds it to a whole number of
 * the format's quanta with ties to even, and encodes the result, sharing no
 * code with src/format.c. Widening is checked on every code against values
 * built with ldexp in double, and every code is checked to round-trip.
 *
 * E2M1 and E8M0 (the MX formats) have references of their own, in double
 * arithmetic on their value tables: ref_e2m1 picks the nearest of the eight
 * magnitudes (ties to the even code), ref_e8m0 the nearest power of two (ties
 * up), with ml_dtypes 0.7's rules for what has no value (format.h). */
#include <fenv.h>
#include <float.h>
#include <math.h>
#include <xmmintrin.h>

#include "check.h"
#include "mixprec/mixprec.h"

typedef struct {
    const char *name;
    int E, M, bias, ieee; /* ieee: has inf and NaN with payload; else E4M3 */
    uint32_t max_code;
} fmt;

static const fmt F16 = {"fp16", 5, 10, 15, 1, 0x7bff}, BF16 = {"bf16", 8, 7, 127, 1, 0x7f7f},
                 E5M2 = {"e5m2", 5, 2, 15, 1, 0x7b}, E4M3 = {"e4m3", 4, 3, 7, 0, 0x7e};

enum { OVF_INF, OVF_NAN, OVF_SAT };

#define ALWAYS static inline __attribute__((always_inline)) /* constant formats fold into the sweeps */

/* Reference rounding of a finite, non-NaN fp32 to format f; ovf says what a
 * value beyond the largest finite becomes. Returns the code with sign. */
ALWAYS uint32_t ref_narrow(uint32_t x, const fmt *f, int ovf) {
    const uint32_t sign = (x >> 31) << (f->E + f->M);
    const uint32_t a = x & 0x7fffffffu;
    const uint32_t inf = ((1u << f->E) - 1) << f->M;
    const uint32_t over = ovf == OVF_INF ? inf : ovf == OVF_NAN ? (1u << (f->E + f->M)) - 1 : f->max_code;
    if (a == 0x7f800000u) return sign | over;
    if (a == 0) return sign;
    /* exact value = sig * 2^exp2 */
    uint64_t sig = a & 0x7fffffu;
    int exp2 = -149;
    if (a >> 23) {
        sig |= 0x800000u;
        exp2 = (int)(a >> 23) - 150;
    }
    const int lg = exp2 + 63 - __builtin_clzll(sig); /* floor(log2(value)) */
    const int emin = 1 - f->bias;                    /* exponent of the smallest normal */
    int q = (lg < emin ? emin : lg) - f->M;          /* quantum: one unit in the last place */
    const int d = exp2 - q;
    uint64_t n;
    if (d >= 0) {
        n = sig << d;
    } else if (-d > 40) {
        n = 0;
    } else {
        const int s = -d;
        const uint64_t rem = sig & ((1ull << s) - 1), half = 1ull << (s - 1);
        n = sig >> s;
        if (rem > half || (rem == half && (n & 1))) n++;
    }
    if (n == 0) return sign;
    if (n == (2ull << f->M)) {
        n >>= 1;
        q++;
    }                                                  /* rounded up into the next binade */
    if (n < (1ull << f->M)) return sign | (uint32_t)n; /* subnormal */
    const long e = (long)q + f->M + f->bias;
    if (e > (long)(f->max_code >> f->M)) return sign | over;
    const uint32_t code = ((uint32_t)e << f->M) | (uint32_t)(n - (1ull << f->M));
    return code > f->max_code ? sign | over : sign | code;
}

ALWAYS uint32_t lib_narrow(uint32_t x, const fmt *f, int sat) {
    const float v = u2f(x);
    if (f == &F16) return mp_f32_to_f16(v);
    if (f == &BF16) return mp_f32_to_bf16(v);
    if (f == &E5M2) return mp_f32_to_e5m2(v);
    return sat ? mp_f32_to_e4m3_sat(v) : mp_f32_to_e4m3(v);
}

static float lib_widen(uint32_t c, const fmt *f) {
    if (f == &F16) return mp_f16_to_f32((uint16_t)c);
    if (f == &BF16) return mp_bf16_to_f32((uint16_t)c);
    if (f == &E5M2) return mp_e5m2_to_f32((uint8_t)c);
    return mp_e4m3_to_f32((uint8_t)c);
}

/* What a NaN input must become: same sign, quiet, top payload bits kept (IEEE
 * formats) or the format's single NaN (E4M3). */
ALWAYS uint32_t ref_nan(uint32_t x, const fmt *f) {
    const uint32_t sign = (x >> 31) << (f->E + f->M);
    if (!f->ieee) return sign | ((1u << (f->E + f->M)) - 1);
    return sign | (((1u << f->E) - 1) << f->M) | (1u << (f->M - 1)) | ((x & 0x7fffffu) >> (23 - f->M));
}

ALWAYS uint32_t expected(uint32_t x, const fmt *f, int sat) {
    if ((x & 0x7fffffffu) > 0x7f800000u) return ref_nan(x, f);
    return ref_narrow(x, f, f->ieee ? OVF_INF : sat ? OVF_SAT : OVF_NAN);
}

/* Compares lib and reference on the inputs of `mode` (check.h's slice holds
 * every fp8, fp16 and bf16 rounding tie). */
static void check_narrow_all(const fmt *f, int sat, int mode) {
    const uint64_t count = mode_count(mode);
    long bad = 0;
    uint32_t first = 0;
    const int which = f == &F16 ? 0 : f == &BF16 ? 1 : f == &E5M2 ? 2 : sat ? 4 : 3;
#pragma omp parallel for schedule(static, 1 << 16) reduction(+ : bad)
    for (uint64_t i = 0; i < count; i++) {
        const uint32_t x = mode_input(mode, i);
        int differ; /* each format a case of its own, its constants folded */
        switch (which) {
        case 0: differ = lib_narrow(x, &F16, 0) != expected(x, &F16, 0); break;
        case 1: differ = lib_narrow(x, &BF16, 0) != expected(x, &BF16, 0); break;
        case 2: differ = lib_narrow(x, &E5M2, 0) != expected(x, &E5M2, 0); break;
        case 3: differ = lib_narrow(x, &E4M3, 0) != expected(x, &E4M3, 0); break;
        default: differ = lib_narrow(x, &E4M3, 1) != expected(x, &E4M3, 1); break;
        }
        if (differ) {
            if (bad++ == 0) {
#pragma omp critical
                first = x;
            }
        }
    }
    const long mark = check_failures;
    CHECK(bad == 0, "%s%s: %ld of %" PRIu64 " inputs differ from the reference; e.g. 0x%08x -> 0x%x, expected 0x%x",
          f->name, sat ? "_sat" : "", bad, count, first, lib_narrow(first, f, sat), expected(first, f, sat));
    CHECK_SAY(mark, "  %s%s: %" PRIu64 " inputs equal to the reference\n", f->name, sat ? "_sat" : "", count);
}

/* Every code widens to the ldexp value and narrows back to itself. */
static void check_codes(const fmt *f) {
    const uint32_t ncodes = 1u << (1 + f->E + f->M), mmask = (1u << f->M) - 1;
    for (uint32_t c = 0; c < ncodes; c++) {
        const uint32_t s = c >> (f->E + f->M), e = (c >> f->M) & ((1u << f->E) - 1), m = c & mmask;
        const int is_nan = f->ieee ? (e == (1u << f->E) - 1 && m != 0) : (e == (1u << f->E) - 1 && m == mmask);
        const int is_inf = f->ieee && e == (1u << f->E) - 1 && m == 0;
        const float w = lib_widen(c, f);
        if (is_nan) {
            CHECK(isnan(w) && (f2u(w) >> 31) == s && (f2u(w) & 0x400000u), "%s 0x%x: not a quiet NaN with its sign",
                  f->name, c);
            CHECK(lib_narrow(f2u(w), f, 0) == ref_nan(f2u(w), f), "%s 0x%x: NaN round trip", f->name, c);
            continue;
        }
        double v = is_inf   ? INFINITY
                   : e == 0 ? ldexp((double)m, 1 - f->bias - f->M)
                            : ldexp((double)(m | (1u << f->M)), (int)e - f->bias - f->M);
        if (s) v = -v;
        CHECK(f2u(w) == f2u((float)v), "%s 0x%x widens to %a, expected %a", f->name, c, (double)w, v);
        CHECK(lib_narrow(f2u(w), f, 0) == c, "%s 0x%x does not round-trip (got 0x%x)", f->name, c,
              lib_narrow(f2u(w), f, 0));
    }
}

/* ---- E2M1 and E8M0 ---- */

static const double e2m1_mag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};

/* ml_dtypes.float4_e2m1fn: the nearest of the eight magnitudes, ties to the
 * even code; beyond 6 (inf too) saturates to 6; +NaN -> 0x8, -NaN -> 0x0. */
static uint8_t ref_e2m1(uint32_t x) {
    const uint32_t sign = x >> 31;
    const float f = u2f(x);
    if (isnan(f)) return sign ? 0x0 : 0x8;
    const double a = fabs((double)f);
    int k = 0; /* the table entries around a: mag[k] <= a < mag[k + 1] */
    while (k < 7 && e2m1_mag[k + 1] <= a) k++;
    if (k < 7) { /* the nearer of the two; a tie goes to the even code */
        const double below = a - e2m1_mag[k], above = e2m1_mag[k + 1] - a;
        if (above < below || (above == below && (k + 1) % 2 == 0)) k++;
    }
    return (uint8_t)(sign << 3 | (uint32_t)k);
}

/* ml_dtypes.float8_e8m0fnu: the nearest power of two 2^k (ties, 1.5 * 2^k, go
 * up to 2^(k+1)), k from -127 (below which nothing is smaller: 2^-127) to 127;
 * beyond, and for NaN, +-0, negatives and +-inf: 0xFF. */
static uint8_t ref_e8m0(uint32_t x) {
    const float f = u2f(x);
    if (!(f > 0) || isinf(f)) return 0xff; /* NaN, zeros, negatives, inf */
    int e;
    const double m = frexp((double)f, &e); /* f = m 2^e, m in [0.5, 1) */
    int k = e - 1;                         /* f = 2m 2^k, 2m in [1, 2) */
    if (2 * m >= 1.5) k++;                 /* f >= 1.5 * 2^k: nearer 2^(k+1), or a tie */
    if (k < -127) k = -127;
    return k > 127 ? 0xff : (uint8_t)(k + 127);
}

/* Every fp32 input (mode as check_narrow_all) through both. */
static void check_mx_narrow_all(int mode) {
    const uint64_t count = mode_count(mode);
    long bad2 = 0, bad8 = 0;
    uint32_t first2 = 0, first8 = 0;
#pragma omp parallel for schedule(static, 1 << 16) reduction(+ : bad2, bad8)
    for (uint64_t i = 0; i < count; i++) {
        const uint32_t x = mode_input(mode, i);
        if (mp_f32_to_e2m1(u2f(x)) != ref_e2m1(x)) {
            if (bad2++ == 0) {
#pragma omp critical
                first2 = x;
            }
        }
        if (mp_f32_to_e8m0(u2f(x)) != ref_e8m0(x)) {
            if (bad8++ == 0) {
#pragma omp critical
                first8 = x;
            }
        }
    }
    const long mark = check_failures;
    CHECK(bad2 == 0, "e2m1: %ld of %" PRIu64 " inputs differ from the reference; e.g. 0x%08x -> 0x%x, expected 0x%x",
          bad2, count, first2, mp_f32_to_e2m1(u2f(first2)), ref_e2m1(first2));
    CHECK(bad8 == 0, "e8m0: %ld of %" PRIu64 " inputs differ from the reference; e.g. 0x%08x -> 0x%x, expected 0x%x",
          bad8, count, first8, mp_f32_to_e8m0(u2f(first8)), ref_e8m0(first8));
    CHECK_SAY(mark, "  e2m1, e8m0: %" PRIu64 " inputs equal to the reference\n", count);
}

/* Every code (and every byte) widens to its table value and narrows back. */
static void check_mx_codes(void) {
    for (uint32_t b = 0; b < 256; b++) {
        /* E2M1: the low 4 bits are the code, the high 4 are ignored */
        const uint32_t c = b & 0xf;
        const double v = (c & 8 ? -1 : 1) * e2m1_mag[c & 7];
        const float w = mp_e2m1_to_f32((uint8_t)b);
        CHECK(f2u(w) == f2u((float)v), "e2m1 byte 0x%02x widens to %a, expected %a", b, (double)w, v);
        if (b < 16) CHECK(mp_f32_to_e2m1(w) == b, "e2m1 0x%x does not round-trip (got 0x%x)", b, mp_f32_to_e2m1(w));
        /* E8M0: 2^(b - 127), 0xFF NaN */
        const float w8 = mp_e8m0_to_f32((uint8_t)b);
        if (b == 0xff) {
            CHECK(isnan(w8) && f2u(w8) == 0x7fc00000u, "e8m0 0xff is the quiet NaN");
            CHECK(mp_f32_to_e8m0(w8) == 0xff, "e8m0 NaN round trip");
            continue;
        }
        CHECK(f2u(w8) == f2u((float)ldexp(1.0, (int)b - 127)), "e8m0 0x%02x widens to %a", b, (double)w8);
        CHECK(mp_f32_to_e8m0(w8) == b, "e8m0 0x%02x does not round-trip (got 0x%x)", b, mp_f32_to_e8m0(w8));
    }
}

static void check_mx_values(void) {
    /* E2M1 */
    CHECK(mp_f32_to_e2m1(6.0f) == 0x7 && mp_f32_to_e2m1(-6.0f) == 0xf, "e2m1 max");
    CHECK(mp_f32_to_e2m1(1e30f) == 0x7 && mp_f32_to_e2m1(-7.0f) == 0xf, "e2m1 saturates");
    CHECK(mp_f32_to_e2m1(INFINITY) == 0x7 && mp_f32_to_e2m1(-INFINITY) == 0xf, "e2m1 +-inf -> +-6");
    CHECK(mp_f32_to_e2m1(NAN) == 0x8 && mp_f32_to_e2m1(u2f(0x7f800001u)) == 0x8, "e2m1 +NaN -> 0x8 (-0), as ml_dtypes");
    CHECK(mp_f32_to_e2m1(-NAN) == 0x0 && mp_f32_to_e2m1(u2f(0xffffffffu)) == 0x0,
          "e2m1 -NaN -> 0x0 (+0), as ml_dtypes");
    CHECK(mp_f32_to_e2m1(5.0f) == 0x6 && mp_f32_to_e2m1(5.0001f) == 0x7, "5 ties to 4; above it, 6");
    CHECK(mp_f32_to_e2m1(0.25f) == 0x0 && mp_f32_to_e2m1(0.2500001f) == 0x1, "0.25 ties to 0; above it, 0.5");
    CHECK(mp_f32_to_e2m1(0.75f) == 0x2 && mp_f32_to_e2m1(1.25f) == 0x2 && mp_f32_to_e2m1(1.75f) == 0x4,
          "ties to even: 0.75 -> 1, 1.25 -> 1, 1.75 -> 2");
    CHECK(mp_f32_to_e2m1(2.5f) == 0x4 && mp_f32_to_e2m1(3.5f) == 0x6, "2.5 -> 2, 3.5 -> 4");
    CHECK(mp_f32_to_e2m1(-0.0f) == 0x8 && mp_f32_to_e2m1(-1e-30f) == 0x8 && mp_f32_to_e2m1(0x1p-149f) == 0x0,
          "e2m1 keeps the sign of zero");
    CHECK(mp_e2m1_to_f32(0x7) == 6.0f && mp_e2m1_to_f32(0x1) == 0.5f && mp_e2m1_to_f32(0xf) == -6.0f, "e2m1 widen");
    CHECK(f2u(mp_e2m1_to_f32(0x8)) == 0x80000000u && mp_e2m1_to_f32(0xa7) == 6.0f, "e2m1 -0; the high bits ignored");
    /* E8M0 */
    CHECK(mp_f32_to_e8m0(1.0f) == 127 && mp_f32_to_e8m0(2.0f) == 128 && mp_f32_to_e8m0(0.5f) == 126, "e8m0 powers");
    CHECK(mp_f32_to_e8m0(0.75f) == 127 && mp_f32_to_e8m0(3.0f) == 129 && mp_f32_to_e8m0(7.0f) == 130,
          "e8m0 ties (1.5 * 2^k) go up: 0.75 -> 1, 3 -> 4, 7 -> 8");
    CHECK(mp_f32_to_e8m0(1.4999999f) == 127 && mp_f32_to_e8m0(5.9999995f) == 129, "below the tie: down");
    CHECK(mp_f32_to_e8m0(0x1p-127f) == 0 && mp_f32_to_e8m0(0x1p-128f) == 0 && mp_f32_to_e8m0(0x1p-149f) == 0,
          "below 2^-127: 2^-127 (code 0)");
    CHECK(mp_f32_to_e8m0(u2f(0x005fffffu)) == 0 && mp_f32_to_e8m0(0x1.8p-127f) == 1, "1.5 * 2^-127 ties up to 2^-126");
    CHECK(mp_f32_to_e8m0(0x1p127f) == 254 && mp_f32_to_e8m0(0x1.7ffffep127f) == 254, "e8m0 max");
    CHECK(mp_f32_to_e8m0(0x1.8p127f) == 0xff && mp_f32_to_e8m0(FLT_MAX) == 0xff, "past 2^127 -> NaN");
    CHECK(mp_f32_to_e8m0(0.0f) == 0xff && mp_f32_to_e8m0(-0.0f) == 0xff && mp_f32_to_e8m0(-1.0f) == 0xff &&
              mp_f32_to_e8m0(INFINITY) == 0xff && mp_f32_to_e8m0(-INFINITY) == 0xff && mp_f32_to_e8m0(NAN) == 0xff,
          "e8m0: zeros, negatives, inf, NaN -> 0xFF");
    CHECK(mp_e8m0_to_f32(0) == 0x1p-127f && f2u(mp_e8m0_to_f32(0)) == 0x00400000u && mp_e8m0_to_f32(254) == 0x1p127f,
          "e8m0 widen");
}

static void check_values(void) {
    /* fp16 */
    CHECK(mp_f32_to_f16(65504.0f) == 0x7bff, "65504");
    CHECK(mp_f32_to_f16(65519.99f) == 0x7bff, "65519.99 rounds down to 65504");
    CHECK(mp_f32_to_f16(65520.0f) == 0x7c00, "65520 is a tie that rounds to even: inf");
    CHECK(mp_f32_to_f16(-1e6f) == 0xfc00, "-1e6 -> -inf");
    CHECK(mp_f32_to_f16(0x1p-24f) == 0x0001, "smallest subnormal");
    CHECK(mp_f32_to_f16(0x1p-25f) == 0x0000, "half the smallest subnormal ties to 0");
    CHECK(mp_f32_to_f16(0x1.000002p-25f) == 0x0001, "just above half rounds up");
    CHECK(mp_f32_to_f16(0x1.8p-24f) == 0x0002, "1.5 quanta ties to 2");
    CHECK(mp_f32_to_f16(-0.0f) == 0x8000, "-0 keeps its sign");
    CHECK(mp_f32_to_f16(1e-8f) == 0x0000, "1e-8 underflows");
    CHECK(mp_f32_to_f16(-1e-8f) == 0x8000, "-1e-8 underflows to -0");
    CHECK(mp_f32_to_f16(0x1p-14f) == 0x0400, "smallest normal");
    CHECK(mp_f32_to_f16(1.0f + 0x1p-11f) == 0x3c00, "1 + eps/2 ties to 1");
    CHECK(mp_f32_to_f16(1.0f + 0x1.8p-10f) == 0x3c02, "1 + 1.5 eps ties to 1 + 2 eps");
    CHECK(mp_f16_to_f32(0x0001) == 0x1p-24f, "fp16 0x0001");
    CHECK(mp_f16_to_f32(0x7bff) == 65504.0f, "fp16 max");
    CHECK(mp_f32_to_f16(u2f(0xffc00001u)) == 0xfe00, "negative NaN keeps sign and quiet bit");
    CHECK(mp_f32_to_f16(u2f(0x7f800001u)) == 0x7e00, "sNaN becomes a quiet NaN");
    /* bf16 */
    CHECK(mp_f32_to_bf16(1.0f) == 0x3f80, "bf16 1");
    CHECK(mp_f32_to_bf16(u2f(0x3f808000u)) == 0x3f80, "bf16 tie to even (down)");
    CHECK(mp_f32_to_bf16(u2f(0x3f818000u)) == 0x3f82, "bf16 tie to even (up)");
    CHECK(mp_f32_to_bf16(FLT_MAX) == 0x7f80, "FLT_MAX rounds to inf in bf16");
    CHECK(mp_f32_to_bf16(u2f(0x00008000u)) == 0x0000, "fp32 subnormal tie to 0");
    CHECK(mp_f32_to_bf16(u2f(0x00018000u)) == 0x0002, "fp32 subnormal tie to even");
    CHECK(mp_f32_to_bf16(1e-8f) != 0, "bf16 keeps 1e-8");
    CHECK(mp_f32_to_bf16(u2f(0x7f800001u)) == 0x7fc0, "bf16 quiets sNaN");
    CHECK(mp_bf16_to_f32(0x0001) == 0x1p-133f, "bf16 smallest subnormal");
    /* E4M3 (OCP, no inf) */
    CHECK(mp_f32_to_e4m3(448.0f) == 0x7e, "e4m3 max");
    CHECK(mp_f32_to_e4m3(464.0f) == 0x7e, "464 is a tie that rounds to 448");
    CHECK(mp_f32_to_e4m3(464.1f) == 0x7f, "past 464 overflows to NaN");
    CHECK(mp_f32_to_e4m3(-INFINITY) == 0xff, "-inf -> NaN");
    CHECK(mp_f32_to_e4m3_sat(1e9f) == 0x7e, "sat clamps to 448");
    CHECK(mp_f32_to_e4m3_sat(-INFINITY) == 0xfe, "sat clamps -inf to -448");
    CHECK(mp_f32_to_e4m3_sat(NAN) == 0x7f, "sat keeps NaN");
    CHECK(mp_f32_to_e4m3(0x1p-9f) == 0x01, "e4m3 smallest subnormal");
    CHECK(mp_f32_to_e4m3(0x1p-10f) == 0x00, "e4m3 half subnormal ties to 0");
    CHECK(mp_e4m3_to_f32(0x7e) == 448.0f && mp_e4m3_to_f32(0x78) == 256.0f, "e4m3 1111 exponent is finite");
    CHECK(isnan(mp_e4m3_to_f32(0x7f)) && isnan(mp_e4m3_to_f32(0xff)), "e4m3 NaN");
    /* E5M2 */
    CHECK(mp_f32_to_e5m2(57344.0f) == 0x7b, "e5m2 max");
    CHECK(mp_f32_to_e5m2(61440.0f) == 0x7c, "61440 ties to even: inf");
    CHECK(mp_f32_to_e5m2(61439.0f) == 0x7b, "below the tie: max");
    CHECK(mp_e5m2_to_f32(0x01) == 0x1p-16f, "e5m2 smallest subnormal");
}

static void check_info(void) {
    const mp_format_info *h = mp_format(MP_F16), *f = mp_format(MP_F32), *b = mp_format(MP_BF16);
    const mp_format_info *e4 = mp_format(MP_E4M3), *e5 = mp_format(MP_E5M2);
    CHECK(mp_format((mp_dtype)99) == NULL, "bad dtype");
    /* numpy.finfo(np.float16): max 65504, tiny 6.1035e-05, smallest_subnormal 6e-08, eps 0.000977 */
    CHECK(h->max == 65504.0 && h->min_normal == 6.103515625e-05 && h->min_subnormal == 5.960464477539063e-08 &&
              h->eps == 0.0009765625 && h->size == 2 && h->exponent_bits == 5 && h->mantissa_bits == 10,
          "fp16 info");
    /* numpy.finfo(np.float32) */
    CHECK(f->max == (double)FLT_MAX && f->min_normal == (double)FLT_MIN && f->eps == (double)FLT_EPSILON &&
              f->min_subnormal == 1.401298464324817e-45,
          "fp32 info");
    CHECK(b->max == 3.3895313892515355e+38 && b->eps == 0.0078125 && b->min_normal == (double)FLT_MIN, "bf16 info");
    CHECK(e4->max == 448.0 && e4->min_normal == 0.015625 && e4->min_subnormal == 0.001953125 && e4->eps == 0.125 &&
              !e4->has_inf,
          "e4m3 info");
    CHECK(e5->max == 57344.0 && e5->min_subnormal == 1.52587890625e-05 && e5->eps == 0.25 && e5->has_inf, "e5m2 info");
    /* the table agrees with the conversions */
    CHECK((double)mp_f16_to_f32(0x7bff) == h->max && (double)mp_f16_to_f32(1) == h->min_subnormal, "fp16 table/conv");
    CHECK((double)mp_bf16_to_f32(0x7f7f) == b->max && (double)mp_bf16_to_f32(1) == b->min_subnormal, "bf16 table/conv");
    CHECK((double)mp_e4m3_to_f32(0x7e) == e4->max && (double)mp_e4m3_to_f32(1) == e4->min_subnormal, "e4m3 table/conv");
    CHECK((double)mp_e5m2_to_f32(0x7b) == e5->max && (double)mp_e5m2_to_f32(1) == e5->min_subnormal, "e5m2 table/conv");
    /* ml_dtypes.finfo(float8_e8m0fnu): max 1.70141e+38, tiny = smallest_subnormal 5.87747e-39 (2^-127: no
     * subnormals), eps 1, nmant 0, nexp 8; finfo(float4_e2m1fn): max 6, tiny 1, smallest_subnormal 0.5, eps 0.5 */
    const mp_format_info *e8 = mp_format(MP_E8M0), *e2 = mp_format(MP_E2M1);
    CHECK(e8 && e8->dtype == MP_E8M0 && !strcmp(e8->name, "e8m0") && e8->size == 1 && e8->exponent_bits == 8 &&
              e8->mantissa_bits == 0 && e8->bias == 127 && !e8->has_inf && e8->max == 1.7014118346046923e+38 &&
              e8->min_normal == 5.877471754111438e-39 && e8->min_subnormal == e8->min_normal && e8->eps == 1.0,
          "e8m0 info");
    CHECK(e2 && e2->dtype == MP_E2M1 && !strcmp(e2->name, "e2m1") && e2->size == 1 && e2->exponent_bits == 2 &&
              e2->mantissa_bits == 1 && e2->bias == 1 && !e2->has_inf && e2->max == 6.0 && e2->min_normal == 1.0 &&
              e2->min_subnormal == 0.5 && e2->eps == 0.5,
          "e2m1 info");
    CHECK((double)mp_e8m0_to_f32(0xfe) == e8->max && (double)mp_e8m0_to_f32(0) == e8->min_normal, "e8m0 table/conv");
    CHECK((double)mp_e2m1_to_f32(7) == e2->max && (double)mp_e2m1_to_f32(1) == e2->min_subnormal &&
              (double)mp_e2m1_to_f32(2) == e2->min_normal && (double)mp_e2m1_to_f32(3) - 1.0 == e2->eps,
          "e2m1 table/conv");
    CHECK(MP_NUM_DTYPES == 7 && MP_E8M0 == 5 && MP_E2M1 == 6 && mp_format(MP_NUM_DTYPES) == NULL, "dtype codes");
    for (int k = 0; k < MP_NUM_DTYPES; k++) CHECK(mp_format((mp_dtype)k)->dtype == (mp_dtype)k, "table row %d", k);
    mp_dtype t;
    CHECK(mp_dtype_parse("bfloat16", &t) == MP_OK && t == MP_BF16, "parse bfloat16");
    static const struct {
        const char *name;
        mp_dtype t;
    } names[] = {
        {"e8m0", MP_E8M0},          {"float8_e8m0fnu", MP_E8M0}, {"e2m1", MP_E2M1},        {"fp4", MP_E2M1},
        {"float4_e2m1fn", MP_E2M1}, {"e4m3", MP_E4M3},           {"float8_e5m2", MP_E5M2},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        CHECK(mp_dtype_parse(names[i].name, &t) == MP_OK && t == names[i].t, "parse %s", names[i].name);
    for (int k = 0; k < MP_NUM_DTYPES; k++)
        CHECK(mp_dtype_parse(mp_format((mp_dtype)k)->name, &t) == MP_OK && t == (mp_dtype)k, "parse own name %d", k);
    CHECK(mp_dtype_parse("fp12", &t) == MP_EINVAL && strstr(mp_last_error(), "fp12"), "parse error names the input");
    CHECK(strstr(mp_last_error(), "e8m0") && strstr(mp_last_error(), "e2m1"), "parse error lists the new names: %s",
          mp_last_error());
    CHECK(mp_dtype_parse("E2M1", &t) == MP_EINVAL && mp_dtype_parse("fp4e2m1", &t) == MP_EINVAL, "names are exact");
}

/* The conversions use no floating-point arithmetic: a different rounding mode
 * and FTZ/DAZ must not change a single bit. */
static void check_fpu_independence(void) {
    /* the MX references use double arithmetic: computed before the mode changes */
    enum { STEP = 4099 };
    const size_t nmx = (size_t)(((1ull << 32) + STEP - 1) / STEP);
    uint8_t *want2 = malloc(nmx), *want8 = malloc(nmx);
    uint32_t wide2[256], wide8[256];
    CHECK(want2 && want8, "memory");
    if (!want2 || !want8) return;
    for (size_t j = 0; j < nmx; j++)
        want2[j] = ref_e2m1((uint32_t)(j * STEP)), want8[j] = ref_e8m0((uint32_t)(j * STEP));
    for (uint32_t c = 0; c < 256; c++) {
        wide8[c] = c == 0xff ? 0x7fc00000u : f2u((float)ldexp(1.0, (int)c - 127));
        wide2[c] = f2u((float)((c & 8 ? -1 : 1) * e2m1_mag[c & 7]));
    }
    const unsigned csr = _mm_getcsr();
    fesetround(FE_UPWARD);
    _mm_setcsr(_mm_getcsr() | 0x8040); /* FTZ | DAZ */
    long bad = 0;
    for (uint64_t i = 0; i < (1ull << 32); i += STEP) {
        const uint32_t x = (uint32_t)i;
        const float v = u2f(x);
        bad += mp_f32_to_f16(v) != expected(x, &F16, 0);
        bad += mp_f32_to_bf16(v) != expected(x, &BF16, 0);
        bad += mp_f32_to_e4m3(v) != expected(x, &E4M3, 0);
        bad += mp_f32_to_e5m2(v) != expected(x, &E5M2, 0);
        bad += mp_f32_to_e2m1(v) != want2[i / STEP];
        bad += mp_f32_to_e8m0(v) != want8[i / STEP];
    }
    for (uint32_t c = 0; c < 256; c++) {
        bad += f2u(mp_e8m0_to_f32((uint8_t)c)) != wide8[c];
        bad += f2u(mp_e2m1_to_f32((uint8_t)c)) != wide2[c];
    }
    for (uint32_t c = 1; c < 0x400; c++) bad += f2u(mp_f16_to_f32((uint16_t)c)) != f2u(ldexpf((float)c, -24));
    _mm_setcsr(csr);
    fesetround(FE_TONEAREST);
    CHECK(bad == 0, "%ld results changed under FE_UPWARD with FTZ/DAZ", bad);
    free(want2), free(want8);
}

/* Default: every format on make test's slice (check.h); --long: on all 2^32
 * inputs (make test-long); --quick: the sample. */
int main(int argc, char **argv) {
    const int full = test_mode(argc, argv), fp8 = full;
    check_values();
    check_mx_values();
    check_info();
    check_mx_codes();
    check_codes(&F16);
    check_codes(&BF16);
    check_codes(&E5M2);
    check_codes(&E4M3);
    check_fpu_independence();
    check_narrow_all(&F16, 0, full);
    check_narrow_all(&BF16, 0, full);
    check_narrow_all(&E5M2, 0, fp8);
    check_narrow_all(&E4M3, 0, fp8);
    check_narrow_all(&E4M3, 1, fp8);
    check_mx_narrow_all(fp8);
    return check_report("test_format");
}
