/* test_wire.c - the all-reduce's 16-bit wire format (tools/wire.c): each
 * combine is widen, add in fp32, round once, against the scalar conversions
 * of format.h on every code of one operand; overflow to inf, NaN; the pack's
 * finiteness flag and counts; ranks combined in a row, as MPI's reduction
 * does them. */
#include <math.h>

#include "check.h"
#include "../tools/wire.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next_u32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}

static float widen(uint16_t c, mp_dtype t) { return t == MP_BF16 ? mp_bf16_to_f32(c) : mp_f16_to_f32(c); }
static uint16_t narrow(float x, mp_dtype t) { return t == MP_BF16 ? mp_f32_to_bf16(x) : mp_f32_to_f16(x); }

/* The exact sum s of two values of t (exact in double) rounded once to t,
 * to nearest even, past the largest finite value to inf: an independent
 * reference (no fp32 in between). */
static uint16_t round_once(double s, mp_dtype t) {
    const int p = t == MP_BF16 ? 8 : 11, emin = t == MP_BF16 ? -126 : -14; /* precision, smallest normal exponent */
    if (s == 0) return narrow((float)s, t);
    int e;
    frexp(s, &e);                                                       /* |s| in [2^(e-1), 2^e) */
    const double q = ldexp(1.0, (e - 1 < emin ? emin : e - 1) - p + 1); /* the spacing of t at s */
    const double r = nearbyint(s / q) * q;                              /* ties to even: the default rounding mode */
    if (fabs(r) > mp_format(t)->max) return narrow(s > 0 ? INFINITY : -INFINITY, t);
    return narrow((float)r, t); /* r is a value of t: exact */
}

/* Every code a against `partners` random codes b (and b against a): the
 * combine's bits are narrow(widen(a) + widen(b)), NaN for NaN, and for
 * finite operands the exact sum rounded once. */
static void combine_all(mp_dtype t, int partners) {
    const long mark = check_failures;
    enum { N = 65536 };
    static uint16_t in[N], io[N];
    for (int p = 0; p < partners; p++) {
        for (int i = 0; i < N; i++) in[i] = (uint16_t)i, io[i] = (uint16_t)next_u32();
        if (p & 1) /* the other operand's side */
            for (int i = 0; i < N; i++) {
                const uint16_t s = in[i];
                in[i] = io[i], io[i] = s;
            }
        uint16_t want[N];
        for (int i = 0; i < N; i++) want[i] = narrow(widen(in[i], t) + widen(io[i], t), t);
        uint16_t once[N];
        for (int i = 0; i < N; i++) {
            const float a = widen(in[i], t), b = widen(io[i], t);
            once[i] = isfinite(a) && isfinite(b) ? round_once((double)a + (double)b, t) : want[i];
        }
        wire_combine(in, io, N, t);
        for (int i = 0; i < N; i++) {
            const int nan = isnan(widen(want[i], t));
            CHECK(nan ? isnan(widen(io[i], t)) : io[i] == want[i] && io[i] == once[i],
                  "%s: got 0x%04x, want 0x%04x, rounded once 0x%04x (pair %d, %d)", mp_format(t)->name, io[i], want[i],
                  once[i], p, i);
        }
    }
    CHECK_SAY(mark,
              "combine %s: every code against %d partners: widen, add in fp32, round once (= the exact sum "
              "rounded once)\n",
              mp_format(t)->name, partners);
}

static void overflow(void) {
    const long mark = check_failures;
    const uint16_t a = mp_f32_to_f16(65504.0f);
    uint16_t x = a;
    wire_combine(&a, &x, 1, MP_F16);
    CHECK(x == 0x7c00, "fp16 65504 + 65504: 0x%04x, want inf", x);
    uint16_t p = mp_f32_to_f16(40000.0f), q = mp_f32_to_f16(25504.0f); /* 65504: the largest, exact */
    wire_combine(&p, &q, 1, MP_F16);
    CHECK(q == 0x7bff, "fp16 40000 + 25504: 0x%04x, want 65504", q);
    p = mp_f32_to_f16(40000.0f), q = mp_f32_to_f16(25536.0f); /* 65536 rounds up past 65520: inf */
    wire_combine(&p, &q, 1, MP_F16);
    CHECK(q == 0x7c00, "fp16 40000 + 25536: 0x%04x, want inf", q);
    const uint16_t m = 0x7f7f; /* bf16's largest */
    uint16_t y = m;
    wire_combine(&m, &y, 1, MP_BF16);
    CHECK(y == 0x7f80, "bf16 max + max: 0x%04x, want inf", y);
    const uint16_t pinf = 0x7c00;
    uint16_t ninf = 0xfc00;
    wire_combine(&pinf, &ninf, 1, MP_F16);
    CHECK(isnan(mp_f16_to_f32(ninf)), "fp16 inf + -inf: 0x%04x, want NaN", ninf);
    CHECK_SAY(mark, "combine: sums past the range are inf, inf - inf NaN\n");
}

/* Three ranks packed, combined in a row (as a reduction does) and unpacked:
 * the flags count the ranks whose fp32 gradients were not finite; a sum
 * that overflows only on the wire comes back as inf with the flags 0. */
static void ranks(mp_dtype t) {
    const long mark = check_failures;
    enum { R = 3, A = 5, B = 3 };
    float g[R][A + B];
    for (int r = 0; r < R; r++)
        for (int i = 0; i < A + B; i++) g[r][i] = (float)(r + 1) * 0.25f * (float)(i + 1);
    g[0][A] = 3e4f, g[1][A] = 3e4f, g[2][A] = 3e4f; /* 90000: past fp16's range, not bf16's */
    g[1][A + 1] = 1e-9f;                            /* below fp16's smallest subnormal: 0 on the wire */
    uint16_t buf[R][A + B + 1];
    mp_convert_stats st = {0};
    for (int r = 0; r < R; r++) {
        float *x[2] = {g[r], g[r] + A};
        const size_t n[2] = {A, B};
        wire_pack(buf[r], t, x, n, 2, &st);
    }
    for (int r = 1; r < R; r++) wire_combine(buf[r], buf[0], A + B + 1, t);
    float out[A + B];
    float *x[2] = {out, out + A};
    const size_t n[2] = {A, B};
    int nonfinite = -1;
    const int flags = wire_unpack(x, n, 2, buf[0], t, &nonfinite);
    CHECK(flags == 0, "%s: flags %d, want 0", mp_format(t)->name, flags);
    for (int i = 0; i < A; i++) {
        const float want = widen(narrow(widen(narrow(g[0][i], t), t) + widen(narrow(g[1][i], t), t), t), t) +
                           widen(narrow(g[2][i], t), t);
        CHECK(out[i] == widen(narrow(want, t), t), "%s: value %d is %g, want %g", mp_format(t)->name, i, out[i], want);
    }
    if (t == MP_F16) {
        CHECK(isinf(out[A]) && nonfinite == 1, "fp16: 90000 is %g (nonfinite %d), want inf", out[A], nonfinite);
        CHECK(st.underflow == 1 && st.overflow == 0, "fp16 pack: underflow %llu, overflow %llu",
              (unsigned long long)st.underflow, (unsigned long long)st.overflow);
    } else {
        CHECK(out[A] == 90112.0f && nonfinite == 0, "bf16: 90000 is %g (nonfinite %d), want 90112", out[A], nonfinite);
        CHECK(st.underflow == 0 && st.overflow == 0, "bf16 pack: underflow %llu", (unsigned long long)st.underflow);
    }
    /* a rank with an inf and one with a NaN in fp32: flags 2 */
    g[0][2] = INFINITY, g[2][A + 2] = NAN;
    for (int r = 0; r < R; r++) {
        float *y[2] = {g[r], g[r] + A};
        wire_pack(buf[r], t, y, n, 2, NULL);
    }
    for (int r = 1; r < R; r++) wire_combine(buf[r], buf[0], A + B + 1, t);
    CHECK(wire_unpack(x, n, 2, buf[0], t, &nonfinite) == 2 && nonfinite == 1, "%s: flags of an inf and a NaN rank",
          mp_format(t)->name);
    CHECK(isinf(out[2]) && isnan(out[A + 2]), "%s: inf and NaN travel: %g %g", mp_format(t)->name, out[2], out[A + 2]);
    CHECK_SAY(mark, "%s: 3 ranks packed, combined and unpacked; flags count the non-finite ranks\n",
              mp_format(t)->name);
}

int main(int argc, char **argv) {
    const int partners = test_quick(argc, argv) ? 16 : 512;
    mp_dtype t;
    CHECK(wire_parse("fp32", &t) == MP_OK && t == MP_F32, "fp32");
    CHECK(wire_parse("bf16", &t) == MP_OK && t == MP_BF16, "bf16");
    CHECK(wire_parse("fp16", &t) == MP_OK && t == MP_F16, "fp16");
    CHECK(wire_parse("fp8", &t) == MP_EINVAL && wire_parse("", &t) == MP_EINVAL, "bad names");
    combine_all(MP_BF16, partners);
    combine_all(MP_F16, partners);
    overflow();
    ranks(MP_BF16);
    ranks(MP_F16);
    return check_report("test_wire");
}
