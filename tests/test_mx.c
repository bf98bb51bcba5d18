/* test_mx.c - MX block quantization (mx.h): the AVX-512 path equals the
 * scalar reference bit for bit (codes, scales, counts, dequantized values) on
 * millions of random blocks, and the reference equals the same rules computed
 * with the FPU; the scale rules swept over whole binades of amax; hand-computed
 * blocks (zeros, the element max in every binade, ties, NaN, inf, fp32
 * subnormals); exact round trips; statistics; threads and FTZ/DAZ; errors. */
#include <math.h>
#include <xmmintrin.h>

#include "check.h"
#include "internal.h"

#define B MP_MX_BLOCK

typedef struct {
    const char *name;
    mp_isa isa;
    const mp_mx_kernels *k;
} path;
static int npaths;
static path paths[2];

static void find_paths(void) {
    paths[npaths++] = (path){"scalar", MP_ISA_SCALAR, &mp_mx_scalar};
#ifdef MP_X86
    if (mp_cpu_detected() >= MP_ISA_AVX512) paths[npaths++] = (path){"avx512", MP_ISA_AVX512, &mp_mx_avx512};
#endif
    printf("  paths under test: scalar%s\n", npaths > 1 ? ", avx512" : " only (no AVX-512 on this CPU)");
}

static const mp_dtype elems[2] = {MP_E4M3, MP_E5M2};
static const mp_mx_rule rules[2] = {MP_MX_FLOOR, MP_MX_RCEIL};
static const char *rule_name[2] = {"floor", "rceil"};

static float max_of(mp_dtype e) { return e == MP_E4M3 ? 448.0f : 57344.0f; }
static int emax_of(mp_dtype e) { return e == MP_E4M3 ? 8 : 15; }
static uint8_t nan_of(mp_dtype e) { return e == MP_E4M3 ? 0x7f : 0x7e; }
static float val(uint8_t c, mp_dtype e) { return e == MP_E4M3 ? mp_e4m3_to_f32(c) : mp_e5m2_to_f32(c); }

static uint64_t rnd(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int stats_eq(const mp_quant_stats *a, const mp_quant_stats *b) {
    return a->n == b->n && a->saturated == b->saturated && a->flushed == b->flushed && a->nonfinite == b->nonfinite &&
           f2u(a->amax) == f2u(b->amax);
}

/* bits of a finite fp32 with biased exponent field f (clamped to [0, 254]; 0:
 * a subnormal) and mantissa m */
static uint32_t mk(int f, uint32_t m, uint32_t sign) {
    if (f > 254) f = 254;
    if (f < 0) f = 0;
    return sign << 31 | (uint32_t)f << 23 | (m & 0x7fffffu);
}

/* One block of kind `kind` into x[0..32). */
enum { K_BITS, K_WIDE, K_EDGE, K_SUB, K_NONFINITE, K_TINY, NKINDS };
static void gen_block(float *x, int kind, uint64_t *r) {
    uint32_t *u = (uint32_t *)x;
    const uint64_t r0 = rnd(r);
    switch (kind) {
    case K_BITS: /* any bit pattern: NaN, inf, subnormal, zero included */
        for (int i = 0; i < B; i++) u[i] = (uint32_t)rnd(r);
        break;
    case K_WIDE:   /* a block magnitude 2^-150..2^127, elements up to 40 binades below, some zeros */
    case K_TINY: { /* where the scale is 0 or 1 and d is an fp32 subnormal */
        const int top = kind == K_WIDE ? (int)(r0 % 278) - 23 : (int)(r0 % 30) - 4;
        for (int i = 0; i < B; i++) {
            const uint64_t v = rnd(r);
            const int f = top - (int)(v % 41);
            u[i] = (v >> 8) % 9 == 0 ? (uint32_t)(v >> 20) << 31 : mk(f, (uint32_t)(v >> 32), (v >> 63) & 1);
            if (f <= 0) u[i] = (uint32_t)(v >> 40) & (0x7fffffu >> (uint32_t)(-f < 23 ? -f : 23)); /* a subnormal */
        }
        if (kind == K_TINY) /* the amax near 1.75 * 2^e, where the RCEIL thresholds are */
            u[r0 % B] = mk(top, 0x600000u + (uint32_t)((r0 >> 8) % 9) - 4, (r0 >> 16) & 1);
        break;
    }
    case K_EDGE: { /* element-grid values, their midpoints and neighbours, times 2^k, amax at the element max +- ulps */
        const mp_dtype e = elems[r0 & 1];
        const int k = (int)((r0 >> 1) % 238) - 127; /* max * 2^k finite */
        for (int i = 0; i < B; i++) {
            const uint64_t v = rnd(r);
            uint8_t c = (uint8_t)(v & 0x7f);
            if ((e == MP_E4M3 && c == 0x7f) || (e == MP_E5M2 && c >= 0x7b)) c = 0x10;
            const float a = val(c, e), b = c == (e == MP_E4M3 ? 0x7e : 0x7b) ? a * 1.25f : val((uint8_t)(c + 1), e);
            float y = (v >> 8) % 3 == 0 ? a : (a + b) * 0.5f; /* exact: a tie */
            y = ldexpf(y, k);
            uint32_t yb = f2u(y);
            if (yb && ((v >> 14) & 3) == 0) yb += (uint32_t)((int)((v >> 12) % 3) - 1); /* sometimes +-1 ulp */
            u[i] = yb | (uint32_t)(v >> 63) << 31;
        }
        const int j = (int)((r0 >> 10) % B), d = (int)((r0 >> 16) % 7) - 3;
        u[j] = f2u(ldexpf(max_of(elems[(r0 >> 20) & 1]), k)) + (uint32_t)d;
        break;
    }
    case K_SUB: /* fp32 subnormals and zeros */
        for (int i = 0; i < B; i++) {
            const uint64_t v = rnd(r);
            u[i] = ((uint32_t)v & (0x7fffffu >> (v >> 32) % 24)) | (uint32_t)(v >> 63) << 31;
        }
        break;
    case K_NONFINITE: { /* a wide block with one or two inf or NaN */
        gen_block(x, K_WIDE, r);
        const uint32_t special[4] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xff812345u};
        u[r0 % B] = special[(r0 >> 8) & 3];
        if ((r0 >> 10) & 1) u[(r0 >> 11) % B] = special[(r0 >> 16) & 3] | 1u;
        break;
    }
    }
}

/* The rules again, with the FPU (the test runs without FTZ/DAZ): an
 * independent statement of what mx.c emulates with integers. */
static int scale_fpu(float amax, mp_dtype e, mp_mx_rule rule) {
    if (amax == 0.0f) return 0;
    if (rule == MP_MX_FLOOR) {
        const int s = ilogbf(amax) + 127 - emax_of(e);
        return s < 0 ? 0 : s;
    }
    const volatile float inv = 1.0f / max_of(e); /* fp32(1/max) */
    const float d = amax * inv;                  /* rounded to fp32, subnormal or not */
    if (d == 0.0f) return 0;
    const int s = ilogbf(d) + 127 + (d != ldexpf(1.0f, ilogbf(d)));
    return s < 0 ? 0 : s;
}

/* x times 2^(127-s) (exact in fp32; 2^-127 is a subnormal) rounded in e */
static uint8_t code_fpu(float x, float recip, mp_dtype e) {
    const float p = x * recip;
    if (e == MP_E4M3) return mp_f32_to_e4m3_sat(p);
    return mp_f32_to_e5m2(fminf(fmaxf(p, -57344.0f), 57344.0f));
}

#define CH 1024 /* blocks per chunk */

/* Random blocks of every kind: each fast path against the scalar reference
 * (codes, scales, counts, and with st == NULL), the reference against the
 * FPU, and dequantization of those codes and of random codes and scales. */
static void check_random(int quick) {
    const long chunks = quick ? 64 : 256; /* x 1024 blocks x 4 (elem, rule) */
    long bad_path = 0, bad_fpu = 0, bad_deq = 0, nonfinite_blocks = 0;
    uint64_t total_elems = 0;
#pragma omp parallel reduction(+ : bad_path, bad_fpu, bad_deq, nonfinite_blocks, total_elems)
    {
        float *x = malloc(CH * B * sizeof *x), *dr = malloc(CH * B * sizeof *dr), *df = malloc(CH * B * sizeof *df);
        uint8_t *cr = malloc(CH * B), *cf = malloc(CH * B), *sr = malloc(CH), *sf = malloc(CH);
#pragma omp for schedule(dynamic, 1)
        for (long ch = 0; ch < chunks; ch++) {
            uint64_t r = 0x1234567ull + (uint64_t)ch * 7919u;
            for (int b = 0; b < CH; b++) gen_block(x + b * B, (int)((b + ch) % NKINDS), &r);
            for (int ei = 0; ei < 2; ei++)
                for (int ri = 0; ri < 2; ri++) {
                    const mp_dtype e = elems[ei];
                    const mp_mx_rule rule = rules[ri];
                    mp_quant_stats st_r = {0};
                    mp_mx_scalar.quantize(cr, sr, x, CH, e, rule, &st_r);
                    mp_mx_scalar.dequantize(dr, cr, sr, CH, e);
                    total_elems += CH * B;
                    for (int p = 1; p < npaths; p++) {
                        mp_quant_stats st_f = {0};
                        paths[p].k->quantize(cf, sf, x, CH, e, rule, &st_f);
                        long d = memcmp(cr, cf, CH * B) != 0 || memcmp(sr, sf, CH) != 0 || !stats_eq(&st_r, &st_f);
                        memset(cf, 0xaa, CH * B);
                        paths[p].k->quantize(cf, sf, x, CH, e, rule, NULL);
                        d += memcmp(cr, cf, CH * B) != 0 || memcmp(sr, sf, CH) != 0;
                        paths[p].k->dequantize(df, cr, sr, CH, e);
                        d += memcmp(dr, df, CH * B * sizeof(float)) != 0;
                        bad_path += d;
                        if (d) {
                            for (int b = 0, shown = 0; b < CH && shown < 2; b++)
                                if (memcmp(cr + b * B, cf + b * B, B) || sr[b] != sf[b]) {
#pragma omp critical
                                    CHECK(0, "%s %s %s: block kind %d: scale %d vs %d, x[0] %08x codes[0] %02x vs %02x",
                                          paths[p].name, mp_format(e)->name, rule_name[ri], (int)((b + ch) % NKINDS),
                                          sr[b], sf[b], f2u(x[b * B]), cr[b * B], cf[b * B]);
                                    shown++;
                                }
                        }
                    }
                    /* the reference against the FPU */
                    for (int b = 0; b < CH; b++) {
                        const float *xb = x + b * B;
                        float amax = 0.0f;
                        int nonfinite = 0;
                        for (int i = 0; i < B; i++) {
                            nonfinite |= !isfinite(xb[i]);
                            amax = fmaxf(amax, fabsf(xb[i]));
                        }
                        if (nonfinite) {
                            nonfinite_blocks++;
                            bad_fpu += sr[b] != 0xff;
                            for (int i = 0; i < B; i++) {
                                bad_fpu += cr[b * B + i] != nan_of(e);
                                bad_deq += !isnan(dr[b * B + i]);
                            }
                            continue;
                        }
                        const int s = scale_fpu(amax, e, rule);
                        if (sr[b] != s) {
                            bad_fpu++;
                            continue;
                        }
                        const float recip = ldexpf(1.0f, 127 - s), scale = ldexpf(1.0f, s - 127);
                        for (int i = 0; i < B; i++) {
                            bad_fpu += cr[b * B + i] != code_fpu(xb[i], recip, e);
                            const float v = val(cr[b * B + i], e) * scale;
                            bad_deq += f2u(v) != f2u(dr[b * B + i]);
                        }
                    }
                }
            /* dequantization of any codes and scales (0xFF included) */
            for (int i = 0; i < CH * B; i++) cr[i] = (uint8_t)rnd(&r);
            for (int b = 0; b < CH; b++) sr[b] = (uint8_t)rnd(&r);
            for (int ei = 0; ei < 2; ei++) {
                mp_mx_scalar.dequantize(dr, cr, sr, CH, elems[ei]);
                for (int b = 0; b < CH; b++)
                    for (int i = 0; i < B; i++) {
                        const float c = val(cr[b * B + i], elems[ei]);
                        const float v = sr[b] == 0xff ? NAN : c * ldexpf(1.0f, sr[b] - 127); /* 2^-127: a subnormal */
                        const float g = dr[b * B + i];
                        bad_deq += isnan(v) ? !isnan(g) : f2u(v) != f2u(g);
                    }
                for (int p = 1; p < npaths; p++) {
                    paths[p].k->dequantize(df, cr, sr, CH, elems[ei]);
                    bad_path += memcmp(dr, df, CH * B * sizeof(float)) != 0;
                }
            }
        }
        free(x), free(dr), free(df), free(cr), free(cf), free(sr), free(sf);
    }
    CHECK(bad_path == 0, "%ld chunk comparisons differ between paths", bad_path);
    CHECK(bad_fpu == 0, "%ld scales or codes differ from the FPU computation", bad_fpu);
    CHECK(bad_deq == 0, "%ld dequantized values differ from the FPU computation", bad_deq);
    CHECK(nonfinite_blocks > 0, "no NaN blocks generated");
    printf("  random: %" PRIu64 " elements (%ld blocks with inf/NaN) x %d path(s): quantize, counts and dequantize "
           "equal; reference == FPU rules\n",
           total_elems, nonfinite_blocks, npaths);
}

/* The scale rules swept over amax: in every binade the edges, around 1.75
 * (where RCEIL turns), around 1.5 and random mantissas; every mantissa of the
 * binades where the scale is 0, 1 or 2 and RCEIL's d is an fp32 subnormal or
 * the smallest normal, and of one more (not in quick mode). Each path's scales
 * against the reference, the reference against the FPU. */
static void check_scale_sweep(int quick) {
    enum { N = 1 << 16 };
    const uint32_t L = quick ? 256 : 4096; /* mantissas per run */
    uint32_t *a = malloc(N * sizeof *a);
    uint8_t *sr = malloc(N), *sf = malloc(N);
    long bad = 0, bad_fpu = 0;
    uint64_t count = 0, r = 99;
    for (int ei = 0; ei < 2; ei++)
        for (int ri = 0; ri < 2; ri++) {
            const mp_dtype e = elems[ei];
            for (int f = 0; f <= 254; f++) {
                const int whole =
                    !quick && rules[ri] == MP_MX_RCEIL && ((f >= emax_of(e) - 1 && f <= emax_of(e) + 2) || f == 100);
                for (uint32_t m0 = 0; m0 < (whole ? 0x800000u : 5 * L); m0 += N) {
                    const uint32_t n = whole ? N : 5 * L;
                    for (uint32_t i = 0; i < n; i++) {
                        const uint32_t j = i % L, run = i / L;
                        const uint32_t m = whole      ? m0 + i
                                           : run == 0 ? j
                                           : run == 1 ? 0x600000u - L / 2 + j
                                           : run == 2 ? 0x7fffffu - j
                                           : run == 3 ? 0x400000u - L / 2 + j
                                                      : (uint32_t)rnd(&r);
                        a[i] = mk(f, m, 0);
                    }
                    mp_mx_scalar.scales(sr, a, n, e, rules[ri]);
                    for (int p = 1; p < npaths; p++) {
                        paths[p].k->scales(sf, a, n, e, rules[ri]);
                        for (uint32_t i = 0; i < n; i++)
                            if (sr[i] != sf[i] && bad++ < 5)
                                CHECK(0, "%s %s %s: amax %08x: scale %d vs %d", paths[p].name, mp_format(e)->name,
                                      rule_name[ri], a[i], sr[i], sf[i]);
                    }
                    for (uint32_t i = 0; i < n; i++) {
                        const int want = scale_fpu(u2f(a[i]), e, rules[ri]);
                        if (sr[i] != want && bad_fpu++ < 5)
                            CHECK(0, "%s %s: amax %08x: scale %d, FPU %d", mp_format(e)->name, rule_name[ri], a[i],
                                  sr[i], want);
                    }
                    count += n;
                }
            }
        }
    CHECK(bad == 0 && bad_fpu == 0, "%ld scales differ between paths, %ld from the FPU", bad, bad_fpu);
    printf("  scale rules: %" PRIu64 " (amax, format, rule) cases: paths and FPU agree\n", count);
    free(a), free(sr), free(sf);
}

/* Quantizes one or more blocks on every path: the paths must agree (codes,
 * scales, counts); the scalar result is returned. */
static void quant(uint8_t *codes, uint8_t *scales, const float *x, size_t nb, mp_dtype e, mp_mx_rule rule,
                  mp_quant_stats *st) {
    uint8_t c2[4 * B], s2[4];
    mp_quant_stats st0 = st ? *st : (mp_quant_stats){0}, st2 = st0;
    mp_mx_scalar.quantize(codes, scales, x, nb, e, rule, st);
    for (int p = 1; p < npaths; p++) {
        paths[p].k->quantize(c2, s2, x, nb, e, rule, st ? &st2 : NULL);
        CHECK(memcmp(codes, c2, nb * B) == 0 && memcmp(scales, s2, nb) == 0 && (!st || stats_eq(st, &st2)),
              "%s %s %s: the paths differ on a hand-made block (x[0] %08x)", paths[p].name, mp_format(e)->name,
              rule_name[rule], f2u(x[0]));
        st2 = st0;
    }
}

static void dequant(float *y, const uint8_t *codes, const uint8_t *scales, size_t nb, mp_dtype e) {
    float y2[4 * B];
    mp_mx_scalar.dequantize(y, codes, scales, nb, e);
    for (int p = 1; p < npaths; p++) {
        paths[p].k->dequantize(y2, codes, scales, nb, e);
        CHECK(memcmp(y, y2, nb * B * sizeof(float)) == 0, "%s: dequantize differs", paths[p].name);
    }
}

static void check_zero_nan_inf_subnormal(void) {
    const long mark = check_failures;
    float x[B];
    uint8_t c[B], s;
    float y[B];
    for (int ei = 0; ei < 2; ei++)
        for (int ri = 0; ri < 2; ri++) {
            const mp_dtype e = elems[ei];
            /* zeros: scale 0 (2^-127), codes +-0, values +-0 */
            for (int i = 0; i < B; i++) x[i] = i % 3 ? 0.0f : -0.0f;
            mp_quant_stats st = {0};
            quant(c, &s, x, 1, e, rules[ri], &st);
            CHECK(s == 0, "zero block: scale %d", s);
            for (int i = 0; i < B; i++) CHECK(c[i] == (i % 3 ? 0x00 : 0x80), "zero block: code %02x", c[i]);
            CHECK(st.flushed == 0 && st.saturated == 0 && st.n == B && f2u(st.amax) == 0, "zero block counts");
            dequant(y, c, &s, 1, e);
            for (int i = 0; i < B; i++) CHECK(f2u(y[i]) == f2u(x[i]), "zero block: value %08x", f2u(y[i]));

            /* a NaN anywhere, or an inf: scale 0xFF, NaN codes, NaN values */
            for (int t = 0; t < 3; t++) {
                for (int i = 0; i < B; i++) x[i] = (float)(i - 10);
                x[7] = 1000.0f;
                x[5] = t == 0 ? NAN : t == 1 ? INFINITY : -INFINITY;
                if (t == 0) x[9] = -NAN;
                st = (mp_quant_stats){0};
                quant(c, &s, x, 1, e, rules[ri], &st);
                CHECK(s == 0xff, "%s block: scale %02x", t ? "inf" : "NaN", s);
                for (int i = 0; i < B; i++) CHECK(c[i] == nan_of(e), "NaN block: code %02x", c[i]);
                CHECK(st.nonfinite == (t == 0 ? 2u : 1u) && st.saturated == 0 && st.flushed == 0 && st.amax == 1000.0f,
                      "NaN block counts: nonfinite %" PRIu64 " amax %g", st.nonfinite, st.amax);
                dequant(y, c, &s, 1, e);
                for (int i = 0; i < B; i++) CHECK(isnan(y[i]), "NaN block: value %g", y[i]);
            }

            /* fp32 subnormals: amax 2^-130 gives scale 0 under both rules, and
             * x * 2^127 is what is rounded */
            for (int i = 0; i < B; i++) x[i] = 0.0f;
            x[0] = ldexpf(1.0f, -130);  /* 2^-3 */
            x[1] = -ldexpf(3.0f, -136); /* -3 * 2^-9: e4m3 subnormal, e5m2 normal */
            x[2] = ldexpf(1.0f, -149);  /* 2^-22: flushed */
            x[3] = ldexpf(1.0f, -144);  /* 2^-17: half e5m2's smallest: a tie to 0 */
            x[4] = ldexpf(3.0f, -145);  /* 1.5 * 2^-17 -> e5m2 2^-16; 0 in e4m3 */
            st = (mp_quant_stats){0};
            quant(c, &s, x, 1, e, rules[ri], &st);
            CHECK(s == 0, "subnormal block: scale %d", s);
            if (e == MP_E4M3)
                CHECK(c[0] == 0x20 && c[1] == 0x83 && c[2] == 0 && c[3] == 0 && c[4] == 0 && st.flushed == 3,
                      "e4m3 subnormal block: %02x %02x %02x %02x %02x flushed %" PRIu64, c[0], c[1], c[2], c[3], c[4],
                      st.flushed);
            else
                CHECK(c[0] == 0x30 && c[1] == 0x9e && c[2] == 0 && c[3] == 0 && c[4] == 0x01 && st.flushed == 2,
                      "e5m2 subnormal block: %02x %02x %02x %02x %02x flushed %" PRIu64, c[0], c[1], c[2], c[3], c[4],
                      st.flushed);
            CHECK(f2u(st.amax) == f2u(x[0]), "subnormal block amax");
            dequant(y, c, &s, 1, e);
            CHECK(f2u(y[0]) == f2u(x[0]) && f2u(y[1]) == f2u(x[1]), "subnormal block: values %a %a", y[0], y[1]);
        }
    CHECK_SAY(mark, "  zero, NaN, inf and fp32-subnormal blocks: as specified\n");
}

/* The element max times 2^k in every binade and just above it. The block:
 * x0 (below), -max * 2^k, 2^k, zeros. x0: max, max + 1 and 2 ulps, the tie
 * above the max (464, 61440), 1 ulp past it, and 2^(emax+1) - 1 ulp, all
 * times 2^k. FLOOR keeps s = k + 127 for all of them: x0 rounds to the max or
 * past it (saturated: past the tie; E5M2's tie 61440 rounds up to 2^16).
 * RCEIL takes s = k + 128 for any x0 above the max (d = 2^k (1 + ...)), and
 * halves the block: except at k = -127, where d is the fp32 subnormal
 * 2^-127 (1 + 2^-23.8) rounded to 2^-127 for x0 = max + 1 ulp (s stays 0). */
static void check_binades(void) {
    const long mark = check_failures;
    float x[B];
    uint8_t c[B], s;
    long cases = 0;
    for (int ei = 0; ei < 2; ei++) {
        const mp_dtype e = elems[ei];
        const int e4 = e == MP_E4M3, M = e4 ? 3 : 2;
        const float mx = max_of(e), tie = e4 ? 464.0f : 61440.0f;
        const uint8_t top = e4 ? 0x7e : 0x7b, half_top = e4 ? 0x76 : 0x77; /* max, max / 2 */
        const uint8_t one = e4 ? 0x38 : 0x3c;                              /* 1.0; 0.5 is one - (1 << M) */
        /* RCEIL's x0 code one binade up: (max + ulps) / 2 -> max / 2; tie / 2 (232: a tie -> 224 in E4M3; 30720: a
         * tie -> 32768 in E5M2); just above -> 240 | 32768; 2^emax - tiny -> 2^emax */
        const uint8_t up[6] = {0, half_top, half_top, e4 ? 0x76 : 0x78, e4 ? 0x77 : 0x78, 0x78};
        for (int k = -127; k <= (e4 ? 119 : 112); k++) {
            const uint32_t m = f2u(ldexpf(mx, k));
            const uint32_t x0[6] = {m,
                                    m + 1,
                                    m + 2,
                                    f2u(ldexpf(tie, k)),
                                    f2u(ldexpf(tie, k)) + 1,
                                    f2u(ldexpf(1.0f, k + emax_of(e) + 1)) - 1}; /* FLT_MAX at the top */
            for (int v = 0; v < 6; v++)
                for (int ri = 0; ri < 2; ri++) {
                    for (int i = 0; i < B; i++) x[i] = 0.0f;
                    x[0] = u2f(x0[v]);
                    x[1] = -ldexpf(mx, k);
                    x[2] = ldexpf(1.0f, k);
                    mp_quant_stats st = {0};
                    quant(c, &s, x, 1, e, rules[ri], &st);
                    const int same = rules[ri] == MP_MX_FLOOR || v == 0 || (k == -127 && v == 1);
                    const int want_s = same ? k + 127 : k + 128;
                    const int want_sat = rules[ri] == MP_MX_FLOOR && (v == 4 || v == 5 || (v == 3 && !e4));
                    const uint8_t w0 = same ? top : up[v], w1 = 0x80 | (same ? top : half_top);
                    const uint8_t w2 = (uint8_t)(same ? one : one - (1 << M));
                    cases++;
                    CHECK(s == want_s && c[0] == w0 && c[1] == w1 && c[2] == w2 && st.saturated == (uint64_t)want_sat,
                          "%s %s k %d x0 %08x: scale %d codes %02x %02x %02x saturated %" PRIu64
                          ", want %d %02x %02x %02x %d",
                          mp_format(e)->name, rule_name[ri], k, x0[v], s, c[0], c[1], c[2], st.saturated, want_s, w0,
                          w1, w2, want_sat);
                }
        }
    }
    CHECK_SAY(mark,
              "  the element max times 2^k and just above (k = -127..119 / 112): %ld blocks as computed by hand\n",
              cases);
}

/* Ties and their neighbours in many binades: the block's scale is set by an
 * element at the max, so the elements are the listed values exactly. */
static void check_ties(void) {
    const long mark = check_failures;
    static const struct {
        float v;
        uint8_t c4, c5;
    } t[] = {
        {1.0625f, 0x38, 0x3c},  /* e4m3 tie 1 | 1.125 -> 1; e5m2 1 */
        {1.1875f, 0x3a, 0x3d},  /* e4m3 tie 1.125 | 1.25 -> 1.25; e5m2 above the tie 1.125 -> 1.25 */
        {1.125f, 0x39, 0x3c},   /* e5m2 tie 1 | 1.25 -> 1 */
        {1.375f, 0x3b, 0x3e},   /* e5m2 tie 1.25 | 1.5 -> 1.5; e4m3 exact */
        {1.875f, 0x3f, 0x40},   /* e5m2 tie 1.75 | 2 -> 2 (a carry into the exponent) */
        {232.0f, 0x76, 0x5b},   /* e4m3 tie 224 | 240 -> 224; e5m2 below the tie 240 -> 224 */
        {248.0f, 0x78, 0x5c},   /* e4m3 tie 240 | 256 -> 256 (a carry); e5m2 256 */
        {0x1p-10f, 0x00, 0x14}, /* e4m3: half the smallest subnormal -> 0 */
        {0x3p-10f, 0x02, 0x1a}, /* e4m3 tie 2^-9 | 2^-8 -> 2^-8 */
        {0x5p-10f, 0x02, 0x1d}, /* e4m3 tie 2 | 3 * 2^-9 -> 2 * 2^-9 */
        {0x1p-17f, 0x00, 0x00}, /* e5m2: half the smallest subnormal -> 0 */
        {0x3p-17f, 0x00, 0x02}, /* e5m2 tie 2^-16 | 2^-15 -> 2^-15 */
        {-1.0625f, 0xb8, 0xbc},
    };
    const int nt = (int)(sizeof t / sizeof t[0]);
    float x[B];
    uint8_t c[B], s;
    for (int ei = 0; ei < 2; ei++)
        for (int k = -127; k <= 100; k += 3)
            for (int ri = 0; ri < 2; ri++) {
                const mp_dtype e = elems[ei];
                for (int i = 0; i < B; i++) x[i] = i < nt ? ldexpf(t[i].v, k) : 0.0f;
                x[B - 1] = ldexpf(max_of(e), k);
                quant(c, &s, x, 1, e, rules[ri], NULL);
                CHECK(s == k + 127, "ties %s k %d: scale %d", mp_format(e)->name, k, s);
                for (int i = 0; i < nt; i++) {
                    const uint8_t want = e == MP_E4M3 ? t[i].c4 : t[i].c5;
                    CHECK(c[i] == want, "ties %s %s k %d: %a -> %02x, want %02x", mp_format(e)->name, rule_name[ri], k,
                          t[i].v, c[i], want);
                }
            }
    CHECK_SAY(mark, "  ties to even (normal, subnormal, carries) in 76 binades: as computed by hand\n");
}

/* Blocks of element values times 2^k with a top-binade element (FLOOR) or the
 * max itself (RCEIL) come back bit for bit. */
static void check_round_trip(int quick) {
    const long mark = check_failures;
    float x[B], y[B];
    uint8_t c[B], s;
    uint64_t r = 5;
    long blocks = 0;
    for (int ei = 0; ei < 2; ei++) {
        const mp_dtype e = elems[ei];
        const int kmax = e == MP_E4M3 ? 119 : 112;
        for (int k = -127; k <= kmax; k++)
            for (int rep = 0; rep < (quick ? 2 : 20); rep++)
                for (int ri = 0; ri < 2; ri++) {
                    for (int i = 0; i < B; i++) {
                        uint8_t code = (uint8_t)rnd(&r);
                        if ((code & 0x7f) > (e == MP_E4M3 ? 0x7e : 0x7b)) code &= 0x8f;
                        x[i] = ldexpf(val(code, e), k);
                    }
                    const uint8_t topc =
                        (uint8_t)(rules[ri] == MP_MX_RCEIL ? (e == MP_E4M3 ? 0x7e : 0x7b)
                                                           : (e == MP_E4M3 ? 0x78 + rnd(&r) % 7 : 0x78 + rnd(&r) % 4));
                    x[rnd(&r) % B] = ldexpf(val(topc, e), k) * (rnd(&r) & 1 ? -1.0f : 1.0f);
                    mp_quant_stats st = {0};
                    quant(c, &s, x, 1, e, rules[ri], &st);
                    dequant(y, c, &s, 1, e);
                    blocks++;
                    CHECK(s == k + 127 && memcmp(x, y, sizeof x) == 0 && st.saturated == 0 && st.flushed == 0,
                          "round trip %s %s k %d: scale %d", mp_format(e)->name, rule_name[ri], k, s);
                }
    }
    CHECK_SAY(mark, "  round trip of %ld exactly representable blocks (k = -127..119): bit for bit\n", blocks);
}

/* The counts on constructed blocks, added to what st holds. */
static void check_stats(void) {
    const long mark = check_failures;
    float x[2 * B];
    uint8_t c[2 * B], s[2];
    for (int ei = 0; ei < 2; ei++) {
        const mp_dtype e = elems[ei];
        const int e4 = e == MP_E4M3;
        for (int i = 0; i < 2 * B; i++) x[i] = 1.0f;
        /* block 0 at scale 1 (s = 127) under FLOOR: amax in [2^emax, 2^(emax+1)) */
        const float v[] = {e4 ? 500.0f : 65000.0f,     /* past the max: saturated */
                           e4 ? -470.0f : -61440.0f,   /* past (e5m2: a tie rounding up to 2^16) */
                           e4 ? 464.0f : 60000.0f,     /* rounds to the max: not counted */
                           e4 ? 449.0f : 57345.0f,     /* not counted */
                           e4 ? 0x1p-11f : 0x1p-18f,   /* flushed */
                           e4 ? 0x1p-10f : 0x1p-17f,   /* a tie to 0: flushed */
                           e4 ? 0x3p-11f : 0x3p-18f,   /* rounds up to the smallest subnormal */
                           e4 ? -0x1p-12f : -0x1p-19f, /* flushed to -0 */
                           0.0f,
                           -0.0f};
        for (int i = 0; i < 10; i++) x[i] = v[i];
        /* block 1: NaN and infinities next to finite values */
        x[B + 3] = NAN;
        x[B + 4] = INFINITY;
        x[B + 5] = -INFINITY;
        x[B + 6] = -1.0e6f;
        mp_quant_stats st = {5, 1, 1, 1, 1.0e7f};
        quant(c, s, x, 2, e, MP_MX_FLOOR, &st);
        CHECK(s[0] == 127 && s[1] == 0xff, "stats %s: scales %d %d", mp_format(e)->name, s[0], s[1]);
        const uint8_t top = e4 ? 0x7e : 0x7b;
        CHECK(c[0] == top && c[1] == (0x80 | top) && c[2] == top && c[3] == top && c[4] == 0 && c[5] == 0 &&
                  c[6] == 1 && c[7] == 0x80 && c[8] == 0 && c[9] == 0x80,
              "stats %s: codes %02x %02x %02x %02x %02x %02x %02x %02x", mp_format(e)->name, c[0], c[1], c[2], c[3],
              c[4], c[5], c[6], c[7]);
        CHECK(st.n == 5 + 64 && st.saturated == 1 + 2 && st.flushed == 1 + 3 && st.nonfinite == 1 + 3 &&
                  st.amax == 1.0e7f,
              "stats %s: n %" PRIu64 " saturated %" PRIu64 " flushed %" PRIu64 " nonfinite %" PRIu64 " amax %g",
              mp_format(e)->name, st.n, st.saturated, st.flushed, st.nonfinite, st.amax);
        st = (mp_quant_stats){0};
        quant(c, s, x, 2, e, MP_MX_FLOOR, &st);
        CHECK(st.amax == 1.0e6f, "stats %s: amax %g, want 1e6 (finite values of a NaN block count)", mp_format(e)->name,
              st.amax);
        st = (mp_quant_stats){0};
        quant(c, s, x, 1, e, MP_MX_FLOOR, &st);
        CHECK(st.amax == v[0] && st.n == B, "stats %s: amax %g", mp_format(e)->name, st.amax);
        /* through the public call too, with a NaN amax already there (replaced) */
        st = (mp_quant_stats){0, 0, 0, 0, NAN};
        CHECK(mp_mx_quantize(c, s, x, 2 * B, e, MP_MX_FLOOR, &st) == MP_OK && st.amax == 1.0e6f && st.saturated == 2 &&
                  st.flushed == 3 && st.nonfinite == 3 && st.n == 64,
              "stats %s through mp_mx_quantize", mp_format(e)->name);
    }
    CHECK_SAY(mark, "  statistics on constructed blocks: saturated, flushed, nonfinite, amax, n as counted by hand\n");
}

/* Large inputs: any number of threads and either path through the public
 * calls give the same bits and counts; FTZ/DAZ change nothing. */
static void check_threads_isa_daz(int quick) {
    const long mark = check_failures;
    const size_t nb = quick ? 9000 : 40000, n = nb * B; /* above the threading threshold */
    float *x = malloc(n * sizeof *x), *y0 = malloc(n * sizeof *y0), *y1 = malloc(n * sizeof *y1);
    uint8_t *c0 = malloc(n), *c1 = malloc(n), *s0 = malloc(nb), *s1 = malloc(nb);
    uint64_t r = 77;
    for (size_t b = 0; b < nb; b++) gen_block(x + b * B, (int)(b % NKINDS), &r);
    const mp_isa saved = mp_cpu_isa();
    for (int ei = 0; ei < 2; ei++)
        for (int ri = 0; ri < 2; ri++) {
            const mp_dtype e = elems[ei];
            mp_set_threads(1);
            mp_cpu_set_isa(MP_ISA_SCALAR);
            mp_quant_stats st0 = {0};
            CHECK(mp_mx_quantize(c0, s0, x, n, e, rules[ri], &st0) == MP_OK, "quantize");
            CHECK(mp_mx_dequantize(y0, c0, s0, n, e) == MP_OK, "dequantize");
            for (int p = 0; p < npaths; p++)
                for (int th = 2; th <= 3; th++) {
                    mp_cpu_set_isa(paths[p].isa);
                    mp_set_threads(th);
                    mp_quant_stats st1 = {0};
                    memset(c1, 0, n);
                    CHECK(mp_mx_quantize(c1, s1, x, n, e, rules[ri], &st1) == MP_OK &&
                              mp_mx_dequantize(y1, c1, s1, n, e) == MP_OK,
                          "quantize");
                    CHECK(memcmp(c0, c1, n) == 0 && memcmp(s0, s1, nb) == 0 && stats_eq(&st0, &st1) &&
                              memcmp(y0, y1, n * sizeof(float)) == 0,
                          "%s %s %s with %d threads differs from scalar, 1 thread", paths[p].name, mp_format(e)->name,
                          rule_name[ri], th);
                }
            /* FTZ + DAZ on this thread: the kernels run here (direct calls) */
            const unsigned csr = _mm_getcsr();
            _mm_setcsr(csr | 0x8040);
            for (int p = 0; p < npaths; p++) {
                mp_quant_stats st1 = {0};
                paths[p].k->quantize(c1, s1, x, nb, e, rules[ri], &st1);
                paths[p].k->dequantize(y1, c1, s1, nb, e);
                CHECK(memcmp(c0, c1, n) == 0 && memcmp(s0, s1, nb) == 0 && stats_eq(&st0, &st1) &&
                          memcmp(y0, y1, n * sizeof(float)) == 0,
                      "%s %s %s under FTZ/DAZ differs", paths[p].name, mp_format(e)->name, rule_name[ri]);
            }
            _mm_setcsr(csr);
        }
    mp_set_threads(0);
    mp_cpu_set_isa(saved);
    free(x), free(y0), free(y1), free(c0), free(c1), free(s0), free(s1);
    CHECK_SAY(mark, "  %zu blocks: 1, 2, 3 threads, every path, FTZ/DAZ on: same bits and counts\n", nb);
}

static void check_errors(void) {
    const long mark = check_failures;
    float x[2 * B] = {0}, y[2 * B];
    uint8_t c[2 * B], s[2];
    mp_mx_rule rule = MP_MX_RCEIL;
    mp_quant_stats st = {0};
    CHECK(mp_mx_quantize(c, s, x, 2 * B, MP_F16, MP_MX_FLOOR, &st) == MP_EINVAL && strstr(mp_last_error(), "fp16"),
          "fp16 elements: %s", mp_last_error());
    CHECK(mp_mx_quantize(c, s, x, 2 * B, MP_F32, MP_MX_FLOOR, NULL) == MP_EINVAL, "fp32 elements");
    CHECK(mp_mx_quantize(c, s, x, 2 * B, (mp_dtype)99, MP_MX_FLOOR, NULL) == MP_EINVAL, "dtype 99");
    CHECK(mp_mx_quantize(c, s, x, B + 1, MP_E4M3, MP_MX_FLOOR, NULL) == MP_EINVAL && strstr(mp_last_error(), "33"),
          "n = 33: %s", mp_last_error());
    CHECK(mp_mx_quantize(c, s, x, 16, MP_E4M3, MP_MX_FLOOR, NULL) == MP_EINVAL, "n = 16");
    CHECK(mp_mx_quantize(NULL, s, x, B, MP_E4M3, MP_MX_FLOOR, NULL) == MP_EINVAL, "NULL codes");
    CHECK(mp_mx_quantize(c, NULL, x, B, MP_E4M3, MP_MX_FLOOR, NULL) == MP_EINVAL, "NULL scales");
    CHECK(mp_mx_quantize(c, s, NULL, B, MP_E4M3, MP_MX_FLOOR, NULL) == MP_EINVAL, "NULL src");
    CHECK(mp_mx_quantize(c, s, x, B, MP_E4M3, (mp_mx_rule)2, NULL) == MP_EINVAL && strstr(mp_last_error(), "rule"),
          "rule 2: %s", mp_last_error());
    CHECK(st.n == 0, "a failed call counted");
    CHECK(mp_mx_quantize(NULL, NULL, NULL, 0, MP_E5M2, MP_MX_RCEIL, &st) == MP_OK && st.n == 0, "n = 0");
    CHECK(mp_mx_dequantize(y, c, s, 2 * B, MP_BF16) == MP_EINVAL, "bf16 dequantize");
    CHECK(mp_mx_dequantize(y, c, s, 2 * B - 1, MP_E4M3) == MP_EINVAL, "dequantize n = 63");
    CHECK(mp_mx_dequantize(NULL, c, s, B, MP_E4M3) == MP_EINVAL, "dequantize NULL dst");
    CHECK(mp_mx_dequantize(y, NULL, s, B, MP_E4M3) == MP_EINVAL, "dequantize NULL codes");
    CHECK(mp_mx_dequantize(y, c, NULL, B, MP_E4M3) == MP_EINVAL, "dequantize NULL scales");
    CHECK(mp_mx_dequantize(NULL, NULL, NULL, 0, MP_E4M3) == MP_OK, "dequantize n = 0");
    CHECK(mp_mx_rule_parse("floor", &rule) == MP_OK && rule == MP_MX_FLOOR, "parse floor");
    CHECK(mp_mx_rule_parse("rceil", &rule) == MP_OK && rule == MP_MX_RCEIL, "parse rceil");
    CHECK(mp_mx_rule_parse("ceil", &rule) == MP_EINVAL && rule == MP_MX_RCEIL && strstr(mp_last_error(), "ceil"),
          "parse ceil: %s", mp_last_error());
    CHECK(mp_mx_rule_parse("", &rule) == MP_EINVAL, "parse empty");
    CHECK(mp_mx_rule_parse(NULL, &rule) == MP_EINVAL, "parse NULL");
    CHECK(mp_mx_rule_parse("floor", NULL) == MP_EINVAL, "parse into NULL");
    CHECK_SAY(mark, "  bad element types, lengths, NULL buffers and rule names: MP_EINVAL with a message\n");
}

int main(int argc, char **argv) {
    const int quick = test_quick(argc, argv);
    find_paths();
    check_errors();
    check_zero_nan_inf_subnormal();
    check_binades();
    check_ties();
    check_stats();
    check_round_trip(quick);
    check_scale_sweep(quick);
    check_random(quick);
    check_threads_isa_daz(quick);
    return check_report("test_mx");
}
