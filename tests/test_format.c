/* test_format.c - the scalar conversions of format.h.
 *
 * Narrowing is checked on every fp32 bit pattern (all 2^32; a fixed sample with
 * --quick) against ref_narrow below, an independent integer reference: it
 * finds the binade of the exact input value, rounds it to a whole number of
 * the format's quanta with ties to even, and encodes the result, sharing no
 * code with src/format.c. Widening is checked on every code against values
 * built with ldexp in double, and every code is checked to round-trip. */
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

/* Reference rounding of a finite, non-NaN fp32 to format f; ovf says what a
 * value beyond the largest finite becomes. Returns the code with sign. */
static uint32_t ref_narrow(uint32_t x, const fmt *f, int ovf) {
    const uint32_t sign = (x >> 31) << (f->E + f->M);
    const uint32_t a = x & 0x7fffffffu;
    const uint32_t inf = ((1u << f->E) - 1) << f->M;
    const uint32_t over = ovf == OVF_INF ? inf : ovf == OVF_NAN ? (1u << (f->E + f->M)) - 1 : f->max_code;
    if (a == 0x7f800000u) return sign | over;
    if (a == 0) return sign;
    /* exact value = sig * 2^exp2 */
    uint64_t sig = a & 0x7fffffu;
    int exp2 = -149;
    if (a >> 23) { sig |= 0x800000u; exp2 = (int)(a >> 23) - 150; }
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
    if (n == (2ull << f->M)) { n >>= 1; q++; } /* rounded up into the next binade */
    if (n < (1ull << f->M)) return sign | (uint32_t)n; /* subnormal */
    const long e = (long)q + f->M + f->bias;
    if (e > (long)(f->max_code >> f->M)) return sign | over;
    const uint32_t code = ((uint32_t)e << f->M) | (uint32_t)(n - (1ull << f->M));
    return code > f->max_code ? sign | over : sign | code;
}

static uint32_t lib_narrow(uint32_t x, const fmt *f, int sat) {
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
static uint32_t ref_nan(uint32_t x, const fmt *f) {
    const uint32_t sign = (x >> 31) << (f->E + f->M);
    if (!f->ieee) return sign | ((1u << (f->E + f->M)) - 1);
    return sign | (((1u << f->E) - 1) << f->M) | (1u << (f->M - 1)) | ((x & 0x7fffffu) >> (23 - f->M));
}

static uint32_t expected(uint32_t x, const fmt *f, int sat) {
    if ((x & 0x7fffffffu) > 0x7f800000u) return ref_nan(x, f);
    return ref_narrow(x, f, f->ieee ? OVF_INF : sat ? OVF_SAT : OVF_NAN);
}

enum { ALL, SLICE, QUICK }; /* all 2^32 inputs; a fixed 2^28 slice; the quick sample */

static uint32_t slice_input(uint64_t i) { return (uint32_t)(i * 16 + ((i >> 3) & 15)); }

/* Compares lib and reference on the inputs of `mode`. The slice takes every
 * 16th pattern with a varying low nibble and holds every fp8 rounding tie. */
static void check_narrow_all(const fmt *f, int sat, int mode) {
    const uint64_t count = mode == QUICK ? quick_count() : mode == SLICE ? (1ull << 28) : (1ull << 32);
    long bad = 0;
    uint32_t first = 0;
#pragma omp parallel for schedule(static, 1 << 16) reduction(+ : bad)
    for (uint64_t i = 0; i < count; i++) {
        const uint32_t x = mode == QUICK ? quick_input(i) : mode == SLICE ? slice_input(i) : (uint32_t)i;
        if (lib_narrow(x, f, sat) != expected(x, f, sat)) {
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
            CHECK(isnan(w) && (f2u(w) >> 31) == s && (f2u(w) & 0x400000u), "%s 0x%x: not a quiet NaN with its sign", f->name, c);
            CHECK(lib_narrow(f2u(w), f, 0) == ref_nan(f2u(w), f), "%s 0x%x: NaN round trip", f->name, c);
            continue;
        }
        double v = is_inf ? INFINITY : e == 0 ? ldexp((double)m, 1 - f->bias - f->M)
                                               : ldexp((double)(m | (1u << f->M)), (int)e - f->bias - f->M);
        if (s) v = -v;
        CHECK(f2u(w) == f2u((float)v), "%s 0x%x widens to %a, expected %a", f->name, c, (double)w, v);
        CHECK(lib_narrow(f2u(w), f, 0) == c, "%s 0x%x does not round-trip (got 0x%x)", f->name, c, lib_narrow(f2u(w), f, 0));
    }
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
    CHECK(e4->max == 448.0 && e4->min_normal == 0.015625 && e4->min_subnormal == 0.001953125 && e4->eps == 0.125 && !e4->has_inf,
          "e4m3 info");
    CHECK(e5->max == 57344.0 && e5->min_subnormal == 1.52587890625e-05 && e5->eps == 0.25 && e5->has_inf, "e5m2 info");
    /* the table agrees with the conversions */
    CHECK((double)mp_f16_to_f32(0x7bff) == h->max && (double)mp_f16_to_f32(1) == h->min_subnormal, "fp16 table/conv");
    CHECK((double)mp_bf16_to_f32(0x7f7f) == b->max && (double)mp_bf16_to_f32(1) == b->min_subnormal, "bf16 table/conv");
    CHECK((double)mp_e4m3_to_f32(0x7e) == e4->max && (double)mp_e4m3_to_f32(1) == e4->min_subnormal, "e4m3 table/conv");
    CHECK((double)mp_e5m2_to_f32(0x7b) == e5->max && (double)mp_e5m2_to_f32(1) == e5->min_subnormal, "e5m2 table/conv");
    mp_dtype t;
    CHECK(mp_dtype_parse("bfloat16", &t) == MP_OK && t == MP_BF16, "parse bfloat16");
    CHECK(mp_dtype_parse("fp12", &t) == MP_EINVAL && strstr(mp_last_error(), "fp12"), "parse error names the input");
}

/* The conversions use no floating-point arithmetic: a different rounding mode
 * and FTZ/DAZ must not change a single bit. */
static void check_fpu_independence(void) {
    const unsigned csr = _mm_getcsr();
    fesetround(FE_UPWARD);
    _mm_setcsr(_mm_getcsr() | 0x8040); /* FTZ | DAZ */
    long bad = 0;
    for (uint64_t i = 0; i < (1ull << 32); i += 4099) {
        const uint32_t x = (uint32_t)i;
        const float v = u2f(x);
        bad += mp_f32_to_f16(v) != expected(x, &F16, 0);
        bad += mp_f32_to_bf16(v) != expected(x, &BF16, 0);
        bad += mp_f32_to_e4m3(v) != expected(x, &E4M3, 0);
        bad += mp_f32_to_e5m2(v) != expected(x, &E5M2, 0);
    }
    for (uint32_t c = 1; c < 0x400; c++) bad += f2u(mp_f16_to_f32((uint16_t)c)) != f2u(ldexpf((float)c, -24));
    _mm_setcsr(csr);
    fesetround(FE_TONEAREST);
    CHECK(bad == 0, "%ld results changed under FE_UPWARD with FTZ/DAZ", bad);
}

/* Default: fp16 and bf16 on all 2^32 inputs, fp8 on the 2^28 slice;
 * --long: everything on all 2^32 (make test-long); --quick: the sample. */
int main(int argc, char **argv) {
    const int quick = test_quick(argc, argv), full = quick ? QUICK : ALL;
    int fp8 = quick ? QUICK : SLICE;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--long") == 0) fp8 = ALL;
    check_values();
    check_info();
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
    return check_report("test_format");
}
