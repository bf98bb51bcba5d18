/* test_convert.c - bulk conversion: every CPU path equals the scalar path bit
 * for bit on make test's slice of the fp32 inputs (check.h; all 2^32 with
 * --long, the --quick sample under sanitizers), with
 * identical statistics; the statistics equal an independent count; mp_convert
 * handles every pair of formats, threads, tails, in-place and bad arguments;
 * E8M0 and E2M1 through mp_convert equal their scalar functions on every path,
 * with the statistics convert.h defines for them. */
#include <math.h>
#include <xmmintrin.h>

#include "check.h"
#include "internal.h"

typedef struct {
    const char *name;
    mp_isa isa;
    const mp_convert_kernels *k;
} path;

static int npaths;
static path paths[4];

static void find_paths(void) {
#ifdef MP_X86
    const mp_isa best = mp_cpu_detected();
    if (best >= MP_ISA_AVX2) paths[npaths++] = (path){"avx2", MP_ISA_AVX2, &mp_convert_avx2};
    if (best >= MP_ISA_AVX512) paths[npaths++] = (path){"avx512", MP_ISA_AVX512, &mp_convert_avx512};
    if (best >= MP_ISA_AVX512_BF16) paths[npaths++] = (path){"avx512bf16", MP_ISA_AVX512_BF16, &mp_convert_avx512bf16};
#endif
    printf("  cpu: %s; fast paths under test:", mp_isa_name(mp_cpu_detected()));
    for (int i = 0; i < npaths; i++) printf(" %s", paths[i].name);
    printf("%s\n", npaths ? "" : " none (scalar only)");
}

#define BLOCK (1u << 16)

/* fp32 -> fp16 and fp32 -> bf16 on every input: each fast path against scalar. */
static void check_narrow_paths(int mode) {
    const uint64_t count = mode_count(mode);
    long bad[4][2] = {{0}};
    mp_convert_stats total_ref[2] = {{0}};
#pragma omp parallel
    {
        float *x = malloc(BLOCK * sizeof *x);
        uint16_t *ref = malloc(BLOCK * sizeof *ref), *got = malloc((BLOCK + 1) * sizeof *got);
        long my_bad[4][2] = {{0}};
        mp_convert_stats my_total[2] = {{0}};
#pragma omp for schedule(dynamic, 1)
        for (uint64_t b = 0; b < (count + BLOCK - 1) / BLOCK; b++) {
            const size_t n = (size_t)(count - b * BLOCK < BLOCK ? count - b * BLOCK : BLOCK);
            const size_t cut = n < 61 ? n : (size_t)(b * 37 % 61) + 1; /* two calls: odd lengths, tails */
            for (size_t i = 0; i < n; i++) {
                const uint64_t j = b * BLOCK + i;
                x[i] = u2f(mode_input(mode, j));
            }
            for (int t = 0; t < 2; t++) {
                void (*scalar)(uint16_t *, const float *, size_t, mp_convert_stats *, int) =
                    t == 0 ? mp_convert_scalar.f32_to_f16 : mp_convert_scalar.f32_to_bf16;
                mp_convert_stats rs = {0};
                scalar(ref, x, n, &rs, 0);
                mp_convert_stats_add(&my_total[t], &rs);
                for (int p = 0; p < npaths; p++) {
                    void (*fast)(uint16_t *, const float *, size_t, mp_convert_stats *, int) =
                        t == 0 ? paths[p].k->f32_to_f16 : paths[p].k->f32_to_bf16;
                    mp_convert_stats fs = {0};
                    memset(got, 0xa5, (BLOCK + 1) * sizeof *got);
                    fast(got, x, cut, &fs, 0);
                    fast(got + cut, x + cut, n - cut, &fs, 1); /* non-temporal where aligned */
                    mp_store_fence();
                    my_bad[p][t] +=
                        memcmp(got, ref, n * sizeof *got) != 0 || !convert_stats_eq(&fs, &rs) || got[n] != 0xa5a5;
                    fast(got, x, n, NULL, 0); /* the no-stats variant gives the same bits */
                    my_bad[p][t] += memcmp(got, ref, n * sizeof *got) != 0;
                }
            }
        }
#pragma omp critical
        {
            for (int p = 0; p < 4; p++) {
                bad[p][0] += my_bad[p][0];
                bad[p][1] += my_bad[p][1];
            }
            mp_convert_stats_add(&total_ref[0], &my_total[0]);
            mp_convert_stats_add(&total_ref[1], &my_total[1]);
        }
        free(x);
        free(ref);
        free(got);
    }
    const long mark = check_failures;
    for (int p = 0; p < npaths; p++) {
        CHECK(bad[p][0] == 0, "%s f32->f16: %ld blocks differ from scalar", paths[p].name, bad[p][0]);
        CHECK(bad[p][1] == 0, "%s f32->bf16: %ld blocks differ from scalar", paths[p].name, bad[p][1]);
    }
    CHECK_SAY(mark, "  f32->f16, f32->bf16: %" PRIu64 " inputs, %d fast path(s) equal scalar\n", count, npaths);
    if (mode == ALL) {
        /* Totals over all 2^32 inputs, counted by hand:
         * NaN inputs: 2 * (2^23 - 1); finite inputs: 2^32 - 2^24.
         * fp16: |x| in (0, 2^-25] rounds to 0: patterns 1 .. 0x33000000 per sign.
         * fp16 subnormal results: |x| in (2^-25, 1023.5 * 2^-24): 0x33000001 .. 0x387fdfff
         * (1023.5 * 2^-24 itself ties to the even code 0x0400, the smallest normal).
         * fp16 overflow: |x| >= 65520 = 0x477ff000 up to 0x7f7fffff. */
        const uint64_t nan = 2 * ((1ull << 23) - 1);
        CHECK(total_ref[0].nan == nan && total_ref[1].nan == nan, "nan totals");
        CHECK(total_ref[0].underflow == 2ull * 0x33000000u, "fp16 underflow total %" PRIu64, total_ref[0].underflow);
        CHECK(total_ref[0].subnormal == 2ull * (0x387fdfffu - 0x33000001u + 1), "fp16 subnormal total %" PRIu64,
              total_ref[0].subnormal);
        CHECK(total_ref[0].overflow == 2ull * (0x7f7fffffu - 0x477ff000u + 1), "fp16 overflow total %" PRIu64,
              total_ref[0].overflow);
        /* bf16: |x| <= 0x8000 (2^-134, a tie) rounds to 0; results up to 0x7f8000
         * - 0x8001 stay subnormal; |x| >= 0x7f7f8000 rounds to inf. */
        CHECK(total_ref[1].underflow == 2ull * 0x8000u, "bf16 underflow total %" PRIu64, total_ref[1].underflow);
        CHECK(total_ref[1].subnormal == 2ull * (0x007f7fffu - 0x8001u + 1), "bf16 subnormal total %" PRIu64,
              total_ref[1].subnormal);
        CHECK(total_ref[1].overflow == 2ull * (0x7f7fffffu - 0x7f7f8000u + 1), "bf16 overflow total %" PRIu64,
              total_ref[1].overflow);
    }
}

/* fp16/bf16 -> fp32 on every code, at every tail length 1..33. */
static void check_widen_paths(void) {
    uint16_t *h = malloc(65536 * sizeof *h);
    float *ref = malloc(65536 * sizeof *ref), *got = malloc(65536 * sizeof *got);
    for (uint32_t i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    for (int t = 0; t < 2; t++) {
        void (*scalar)(float *, const uint16_t *, size_t, mp_convert_stats *) =
            t == 0 ? mp_convert_scalar.f16_to_f32 : mp_convert_scalar.bf16_to_f32;
        mp_convert_stats rs = {0};
        scalar(ref, h, 65536, &rs);
        /* independent count: NaN codes and (bf16 only) fp32 subnormal results */
        const uint64_t nan = t == 0 ? 2 * 1023 : 2 * 127;
        CHECK(rs.nan == nan && rs.subnormal == (t == 0 ? 0u : 2 * 127u) && rs.underflow == 0 && rs.overflow == 0,
              "widen stats t=%d", t);
        for (int p = 0; p < npaths; p++) {
            void (*fast)(float *, const uint16_t *, size_t, mp_convert_stats *) =
                t == 0 ? paths[p].k->f16_to_f32 : paths[p].k->bf16_to_f32;
            mp_convert_stats fs = {0};
            fast(got, h, 65536, &fs);
            CHECK(memcmp(got, ref, 65536 * sizeof *got) == 0 && convert_stats_eq(&fs, &rs), "%s widen t=%d",
                  paths[p].name, t);
            for (size_t n = 1; n <= 33; n++) {
                mp_convert_stats a = {0}, b = {0};
                float tail_ref[33], tail_got[34];
                const size_t off = 0x7bf0 - n; /* spans finite, inf and NaN codes */
                tail_got[n] = -1.0f;
                scalar(tail_ref, h + off, n, &a);
                fast(tail_got, h + off, n, &b);
                CHECK(memcmp(tail_got, tail_ref, n * sizeof(float)) == 0 && convert_stats_eq(&a, &b) &&
                          tail_got[n] == -1.0f,
                      "%s widen t=%d n=%zu", paths[p].name, t, n);
            }
        }
    }
    free(h);
    free(ref);
    free(got);
}

/* The scalar kernel's stats against counting with float classification. */
static void check_stats_independent(void) {
    enum { N = 1 << 20 };
    float *x = malloc(N * sizeof *x);
    uint16_t *y = malloc(N * sizeof *y);
    uint64_t s = 88172645463325252ull;
    for (size_t i = 0; i < N; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        x[i] = u2f((uint32_t)s);
    }
    for (int t = 0; t < 2; t++) {
        mp_convert_stats st = {0}, want = {0};
        mp_convert(y, t == 0 ? MP_F16 : MP_BF16, x, MP_F32, N, &st);
        const double min_normal = mp_format(t == 0 ? MP_F16 : MP_BF16)->min_normal;
        for (size_t i = 0; i < N; i++) {
            const float r = t == 0 ? mp_f16_to_f32(y[i]) : mp_bf16_to_f32(y[i]);
            want.nan += isnan(x[i]) != 0;
            want.underflow += isfinite(x[i]) && x[i] != 0 && r == 0;
            want.subnormal += r != 0 && fabs((double)r) < min_normal;
            want.overflow += isfinite(x[i]) && !isfinite(r);
            if (isfinite(r) && fabsf(r) > want.amax) want.amax = fabsf(r);
        }
        CHECK(convert_stats_eq(&st, &want),
              "t=%d stats %" PRIu64 "/%" PRIu64 "/%" PRIu64 "/%" PRIu64 " amax %g vs counted %" PRIu64 "/%" PRIu64
              "/%" PRIu64 "/%" PRIu64 " amax %g",
              t, st.underflow, st.subnormal, st.overflow, st.nan, (double)st.amax, want.underflow, want.subnormal,
              want.overflow, want.nan, (double)want.amax);
        CHECK(st.amax == mp_amax(y, t == 0 ? MP_F16 : MP_BF16, N), "t=%d: the counts' amax is mp_amax of the result",
              t);
        CHECK(want.underflow + want.subnormal + want.overflow + want.nan > 1000, "sample has special values");
    }
    free(x);
    free(y);
}

static uint32_t narrow_code(float v, mp_dtype t) {
    switch (t) {
    case MP_F32: return f2u(v);
    case MP_F16: return mp_f32_to_f16(v);
    case MP_BF16: return mp_f32_to_bf16(v);
    case MP_E4M3: return mp_f32_to_e4m3(v);
    case MP_E5M2: return mp_f32_to_e5m2(v);
    case MP_E8M0: return mp_f32_to_e8m0(v);
    case MP_E2M1: return mp_f32_to_e2m1(v);
    case MP_U8: break; /* no number */
    }
    return 0;
}

/* The statistics convert.h defines for one element: v the exact input, r the
 * result widened to fp32, counted with float classification. */
static void want_stats(mp_convert_stats *w, float v, float r, mp_dtype dt) {
    w->nan += isnan(v) != 0;
    w->underflow += isfinite(v) && v != 0 && r == 0;
    w->subnormal += r != 0 && fabs((double)r) < mp_format(dt)->min_normal;
    if (dt == MP_E2M1) { /* saturating: beyond 6.5 rounds past 6 ... and 7 is a tie to 8 */
        w->overflow += isfinite(v) && fabsf(v) >= 7.0f;
    } else if (dt == MP_E8M0) { /* zeros and negatives have no code: nan, not overflow */
        w->nan += isfinite(v) && !(v > 0);
        w->overflow += isfinite(v) && v > 0 && isnan(r);
    } else {
        w->overflow += isfinite(v) && !isfinite(r);
    }
    if (isfinite(r) && fabsf(r) > w->amax) w->amax = fabsf(r); /* the largest finite result */
}

static uint32_t code_at(const void *p, mp_dtype t, size_t i) {
    switch (mp_format(t)->size) {
    case 4: return ((const uint32_t *)p)[i];
    case 2: return ((const uint16_t *)p)[i];
    default: return ((const uint8_t *)p)[i];
    }
}

/* Every pair of formats through the public call, on every available path and
 * with one and two threads: results and stats equal the scalar composition. */
static void check_all_pairs(void) {
    const size_t n = (1u << 19) + 13; /* above the threading threshold, odd tail */
    float *x = malloc(n * 4);
    void *src = malloc(n * 4), *dst = malloc(n * 4), *codes = malloc(n * 4); /* codes: the scalar composition's */
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        /* magnitudes from 2^-30 to 2^20 with some specials: every format under- and overflows */
        x[i] =
            ldexpf(1.0f + (float)(s & 0xffff) / 65536.0f, (int)((s >> 16) % 51) - 30) * ((s >> 40) & 1 ? -1.0f : 1.0f);
        if (i % 997 == 0) x[i] = (s >> 20) & 1 ? NAN : -INFINITY;
        if (i % 1013 == 0) x[i] = (s >> 21) & 1 ? 0.0f : -0.0f;
    }
    const int nisa = npaths + 1;
    for (int si = 0; si < MP_NUM_DTYPES; si++) {
        const mp_dtype st = (mp_dtype)si;
        mp_convert(src, st, x, MP_F32, n, NULL);
        for (int di = 0; di < MP_NUM_DTYPES; di++) {
            const mp_dtype dt = (mp_dtype)di;
            const mp_format_info *df = mp_format(dt);
            const size_t es = df->size;
            mp_convert_stats want = {0};
            for (size_t i = 0; i < n; i++) {
                const float v = elem_f32(src, st, i);
                const uint32_t c = narrow_code(v, dt); /* little-endian: a code's bytes are its first es */
                memcpy((uint8_t *)codes + i * es, &c, es);
                want_stats(&want, v, elem_f32(&c, dt, 0), dt);
            }
            for (int p = 0; p < nisa; p++) {
                mp_cpu_set_isa(p == 0 ? MP_ISA_SCALAR : paths[p - 1].isa);
                for (int threads = 1; threads <= 2; threads++) {
                    mp_set_threads(threads);
                    mp_convert_stats got = {0};
                    memset(dst, 0, n * 4);
                    CHECK(mp_convert(dst, dt, src, st, n, &got) == MP_OK, "convert");
                    long bad = 0;
                    if (memcmp(dst, codes, n * es) != 0)
                        for (size_t i = 0; i < n; i++) bad += code_at(dst, dt, i) != code_at(codes, dt, i);
                    CHECK(bad == 0 && convert_stats_eq(&got, &want), "%s -> %s on %s, %d thread(s): %ld wrong",
                          mp_format(st)->name, df->name, mp_isa_name(mp_cpu_isa()), threads, bad);
                }
            }
            if ((dt == MP_F16 || dt == MP_E2M1) && st == MP_F32)
                CHECK(want.underflow > 0 && want.subnormal > 0 && want.overflow > 0 && want.nan > 0,
                      "sample is interesting");
        }
    }
    mp_set_threads(0);
    mp_cpu_set_isa(mp_cpu_detected());
    free(x);
    free(src);
    free(dst);
    free(codes);
}

static void check_api(void) {
    float x[40];
    uint16_t h[40];
    for (int i = 0; i < 40; i++) x[i] = (float)i * 0.1f;
    mp_convert_stats st = {1, 2, 3, 4, 8.0f};
    CHECK(mp_convert(h, MP_F16, x, MP_F32, 40, &st) == MP_OK, "ok");
    CHECK(st.underflow == 1 && st.subnormal == 2 && st.overflow == 3 && st.nan == 4 && st.amax == 8.0f,
          "stats are added to, amax kept when larger");
    st.amax = 1.0f;
    CHECK(mp_convert(h, MP_F16, x, MP_F32, 40, &st) == MP_OK && st.amax == mp_f16_to_f32(mp_f32_to_f16(3.9f)),
          "amax: the largest value stored (3.9 in fp16)");
    CHECK(mp_convert(h, (mp_dtype)7, x, MP_F32, 40, NULL) == MP_EINVAL && strstr(mp_last_error(), "dtype"),
          "bad dtype");
    CHECK(mp_convert(NULL, MP_F16, x, MP_F32, 40, NULL) == MP_EINVAL, "NULL dst");
    CHECK(mp_convert(NULL, MP_F16, NULL, MP_F32, 0, NULL) == MP_OK, "n = 0 is a no-op");
    CHECK(mp_convert(x, MP_F16, x, MP_F32, 40, NULL) == MP_EINVAL, "in place across sizes refused");
    /* in place with one size: fp16 -> bf16 over itself */
    uint16_t ip[40];
    memcpy(ip, h, sizeof h);
    CHECK(mp_convert(ip, MP_BF16, ip, MP_F16, 40, NULL) == MP_OK, "in place");
    long bad = 0;
    for (int i = 0; i < 40; i++) bad += ip[i] != mp_f32_to_bf16(mp_f16_to_f32(h[i]));
    CHECK(bad == 0, "in-place fp16 -> bf16");
    CHECK(mp_cpu_set_isa((mp_isa)9) == MP_EINVAL, "bad isa");
    mp_isa isa;
    CHECK(mp_isa_parse("avx512", &isa) == MP_OK && isa == MP_ISA_AVX512 && mp_isa_parse("sse", &isa) == MP_EINVAL,
          "isa names");
    CHECK(mp_isa_parse("amx", &isa) == MP_OK && isa == MP_ISA_AMX && strcmp(mp_isa_name(MP_ISA_AMX), "amx") == 0,
          "amx name");
    /* one context per path the CPU has, every table filled, the path in use reads its own */
    const mp_isa best = mp_cpu_detected();
    for (int i = MP_ISA_SCALAR; i <= (int)best; i++) {
        const mp_kernels *k = mp_kernels_of((mp_isa)i);
        CHECK(k && k->isa == (mp_isa)i && k->convert && k->amax && k->unscale && k->optim && k->gelu && k->relu16 &&
                  k->mx && k->recipe && k->gemm && k->gemm_bf16,
              "context of %s", mp_isa_name((mp_isa)i));
        mp_cpu_set_isa((mp_isa)i);
        CHECK(mp_kernels_current() == k && mp_kernels_current()->convert == k->convert, "%s in use",
              mp_isa_name((mp_isa)i));
    }
    mp_cpu_set_isa(best);
    CHECK(best >= MP_ISA_AMX || mp_cpu_set_isa(MP_ISA_AMX) == MP_EUNSUPPORTED, "amx refused without AMX");
    /* the path follows the features: AMX only with AMX-BF16 and the OS's permission */
    const mp_cpu_feature_set *f = mp_cpu_features();
    CHECK((best == MP_ISA_AMX) == (f->amx_bf16 && f->amx_allowed && f->avx512_bf16) &&
              (best >= MP_ISA_AVX512_BF16) == f->avx512_bf16 && (best >= MP_ISA_AVX2) == f->avx2,
          "detected %s from the features", mp_isa_name(best));
    char words[256];
    mp_cpu_describe(words, sizeof words);
    CHECK(strlen(words) > 0 && (!f->amx_bf16 || strstr(words, "amx_bf16")), "features: %s", words);
    printf("  cpu features: %s; path %s\n", words, mp_isa_name(best));
}

/* mp_amax: the largest finite magnitude, infinities and NaNs skipped. */
static void check_amax(void) {
    const float f[] = {0.5f, -3.0f, NAN, INFINITY, 2.0f, -INFINITY, 1e-30f};
    uint16_t h[7], b[7];
    for (int i = 0; i < 7; i++) h[i] = mp_f32_to_f16(f[i]), b[i] = mp_f32_to_bf16(f[i]);
    h[4] = 0xfbff; /* -65504 */
    CHECK(mp_amax(f, MP_F32, 7) == 3.0f && mp_amax(h, MP_F16, 7) == 65504.0f && mp_amax(b, MP_BF16, 7) == 3.0f,
          "amax %g %g %g", (double)mp_amax(f, MP_F32, 7), (double)mp_amax(h, MP_F16, 7),
          (double)mp_amax(b, MP_BF16, 7));
    CHECK(mp_amax(f, MP_F32, 0) == 0.0f && mp_amax(f + 2, MP_F32, 2) == 0.0f && mp_amax(h + 2, MP_F16, 2) == 0.0f,
          "amax of nothing finite is 0");
    const uint16_t sub[] = {0x8001, 0x0000}; /* -2^-24 */
    CHECK(mp_amax(sub, MP_F16, 2) == 0x1p-24f && mp_amax(b + 6, MP_BF16, 1) == mp_bf16_to_f32(b[6]), "tiny values");
    /* long inputs (vector code, several threads), the largest late, infinities and NaNs around it, on every path */
    enum { N = 300001 };
    float *x = malloc(N * sizeof *x);
    uint16_t *x16 = malloc(N * sizeof *x16);
    CHECK(x && x16, "memory");
    if (!x || !x16) return;
    for (size_t i = 0; i < N; i++) x[i] = (float)((i * 2654435761u) % 1000) * ((i & 1) ? -1e-3f : 1e-3f);
    x[N - 2] = -7.25f, x[N - 3] = INFINITY, x[N - 1] = NAN, x[17] = -INFINITY;
    for (size_t i = 0; i < N; i++) x16[i] = mp_f32_to_f16(x[i]);
    const float top = 999.0f * 1e-3f; /* the largest of the first N - 3 */
    const mp_isa isa = mp_cpu_isa();
    for (int k = 0; k < 2; k++) {
        CHECK(mp_cpu_set_isa(k ? isa : MP_ISA_SCALAR) == MP_OK, "isa");
        CHECK(mp_amax(x, MP_F32, N) == 7.25f && mp_amax(x16, MP_F16, N) == 7.25f && mp_amax(x, MP_F32, N - 3) == top &&
                  mp_amax(x16, MP_F16, N - 3) == mp_f16_to_f32(mp_f32_to_f16(top)),
              "long amax on path %d", k);
    }
    free(x), free(x16);
}

/* Large destinations take the non-temporal store path: same bits and stats. */
static void check_streaming(void) {
    const size_t n = ((size_t)4 << 20) + 17; /* 8 MiB of fp16 and more, odd tail */
    float *x = malloc(n * 4), *w0 = malloc(n * 4), *w1buf = malloc(n * 4 + 128);
    uint16_t *a = malloc(n * 2), *bbuf = malloc(n * 2 + 128);
    uint64_t s = 12345;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        x[i] = u2f((uint32_t)s);
    }
    for (int t = 0; t < 2; t++) {
        mp_convert_stats s0 = {0}, w0s = {0};
        (t ? mp_convert_scalar.f32_to_bf16 : mp_convert_scalar.f32_to_f16)(a, x, n, &s0, 0);
        (t ? mp_convert_scalar.bf16_to_f32 : mp_convert_scalar.f16_to_f32)(w0, a, n, &w0s);
        for (int p = 0; p < npaths * 3; p++) {
            /* destinations at three alignments: the head before the aligned part varies */
            uint16_t *b = (uint16_t *)(((uintptr_t)bbuf + 63) & ~(uintptr_t)63) + p % 3 * 3;
            float *w1 = (float *)(((uintptr_t)w1buf + 63) & ~(uintptr_t)63) + p % 3 * 5;
            mp_convert_stats s1 = {0}, w1s = {0};
            const path *q = &paths[p / 3];
            (t ? q->k->f32_to_bf16 : q->k->f32_to_f16)(b, x, n, &s1, 1);
            mp_store_fence();
            (t ? q->k->bf16_to_f32 : q->k->f16_to_f32)(w1, b, n, &w1s);
            CHECK(memcmp(a, b, n * 2) == 0 && convert_stats_eq(&s0, &s1), "%s t=%d streaming narrow", q->name, t);
            CHECK(memcmp(w0, w1, n * 4) == 0 && convert_stats_eq(&w0s, &w1s), "%s t=%d streaming widen", q->name, t);
        }
    }
    free(x);
    free(w0);
    free(w1buf);
    free(a);
    free(bbuf);
}

/* FTZ/DAZ must not change what the fast paths produce. */
static void check_ftz_daz(void) {
    const size_t n = 1 << 16;
    float *x = malloc(n * 4), *w0 = malloc(n * 4), *w1 = malloc(n * 4);
    uint16_t *a = malloc(n * 2), *b = malloc(n * 2);
    for (int p = 0; p < npaths; p++) {
        for (int t = 0; t < 2; t++) {
            for (size_t i = 0; i < n; i++)
                x[i] = u2f((uint32_t)(i * 0x10001u) ^ (uint32_t)(i << 7)); /* many fp32 subnormals */
            for (size_t i = 0; i < n; i++)
                if (i % 2) x[i] = u2f((uint32_t)i * 7u); /* tiny patterns: subnormals */
            void (*nar)(uint16_t *, const float *, size_t, mp_convert_stats *, int) =
                t ? paths[p].k->f32_to_bf16 : paths[p].k->f32_to_f16;
            void (*wid)(float *, const uint16_t *, size_t, mp_convert_stats *) =
                t ? paths[p].k->bf16_to_f32 : paths[p].k->f16_to_f32;
            mp_convert_stats s0 = {0}, s1 = {0};
            nar(a, x, n, &s0, 0);
            wid(w0, a, n, NULL);
            const unsigned csr = _mm_getcsr();
            _mm_setcsr(csr | 0x8040);
            nar(b, x, n, &s1, 0);
            wid(w1, b, n, NULL);
            _mm_setcsr(csr);
            CHECK(memcmp(a, b, n * 2) == 0 && convert_stats_eq(&s0, &s1) && memcmp(w0, w1, n * 4) == 0,
                  "%s t=%d under FTZ/DAZ", paths[p].name, t);
        }
    }
    free(x);
    free(w0);
    free(w1);
    free(a);
    free(b);
}

/* fp32 -> E8M0 and E2M1 through mp_convert, each code against the scalar
 * function, on 1 and 2 threads: on every path the --quick sample, each block's
 * statistics against those convert.h defines (want_stats); then, unless
 * --quick, on the detected path make test's slice (check.h) the same way;
 * with --long instead all 2^32 inputs, the statistics' totals against the
 * counts worked out by hand below. E8M0 and
 * E2M1 take the scalar functions on every path, which test_format checks on
 * every input; this is about mp_convert's loops, threads and counts. */
static void check_mx_narrow(int quick, int all_inputs) {
    enum { B = 1 << 22 };
    float *x = malloc(B * sizeof *x);
    uint8_t *got = malloc(B + 1);
    CHECK(x && got, "memory");
    if (!x || !got) return;
    for (int p = npaths; p >= -1; p--) {
        if (p == -1 && quick) break;
        const int last = p == -1, all = last && all_inputs; /* the last round: the detected path */
        const mp_isa isa = last ? mp_cpu_detected() : p == 0 ? MP_ISA_SCALAR : paths[p - 1].isa;
        mp_cpu_set_isa(isa);
        const uint64_t count = all ? (1ull << 32) : last ? slice_count() : quick_count();
        for (int f = 0; f < 2; f++) {
            const mp_dtype dt = f ? MP_E2M1 : MP_E8M0;
            mp_convert_stats total = {0}, want = {0};
            long bad = 0, bad_stats = 0;
            for (uint64_t b = 0; b < count; b += B) {
                const size_t n = (size_t)(count - b < B ? count - b : B);
#pragma omp parallel for
                for (size_t i = 0; i < n; i++) {
                    const uint64_t j = b + i;
                    x[i] = u2f(all ? (uint32_t)j : last ? slice_input(j) : quick_input(j));
                }
                mp_set_threads(1 + (int)(b / B % 2));
                mp_convert_stats st = {0}, w = {0};
                got[n] = 0xa5;
                CHECK(mp_convert(got, dt, x, MP_F32, n, &st) == MP_OK, "convert");
                long bad_block = 0;
#pragma omp parallel for reduction(+ : bad_block)
                for (size_t i = 0; i < n; i++) bad_block += got[i] != narrow_code(x[i], dt);
                bad += bad_block + (got[n] != 0xa5);
                mp_convert_stats_add(&total, &st);
                if (all) continue;
                for (size_t i = 0; i < n; i++) {
                    const uint32_t c = got[i];
                    want_stats(&w, x[i], elem_f32(&c, dt, 0), dt);
                }
                bad_stats += !convert_stats_eq(&st, &w);
                mp_convert_stats_add(&want, &w);
            }
            const long mark = check_failures;
            CHECK(bad == 0 && bad_stats == 0, "fp32 -> %s on %s: %ld codes, %ld blocks' stats differ",
                  mp_format(dt)->name, mp_isa_name(isa), bad, bad_stats);
            if (!all) {
                CHECK(convert_stats_eq(&total, &want), "%s totals", mp_format(dt)->name);
            } else if (dt == MP_E8M0) {
                /* nan: the NaNs (2 (2^23 - 1)), +0 and every negative finite pattern (0x80000000 .. 0xff7fffff);
                 * overflow: 1.5 * 2^127 (0x7f400000) .. FLT_MAX; never underflow or subnormal */
                CHECK(total.nan == 2 * ((1ull << 23) - 1) + 1 + 0x7f800000ull && total.overflow == 0x400000u &&
                          total.underflow == 0 && total.subnormal == 0,
                      "e8m0 totals %" PRIu64 "/%" PRIu64 "/%" PRIu64 "/%" PRIu64, total.underflow, total.subnormal,
                      total.overflow, total.nan);
            } else {
                /* underflow: 0 < |x| <= 0.25 (0x3e800000, a tie to 0); subnormal (+-0.5): 0.25 < |x| < 0.75
                 * (0.75 ties to 1); overflow: 7 (0x40e00000) <= |x| <= FLT_MAX; nan: the NaNs */
                CHECK(total.nan == 2 * ((1ull << 23) - 1) && total.underflow == 2ull * 0x3e800000u &&
                          total.subnormal == 2ull * (0x3f400000u - 0x3e800001u) &&
                          total.overflow == 2ull * (0x7f800000u - 0x40e00000u),
                      "e2m1 totals %" PRIu64 "/%" PRIu64 "/%" PRIu64 "/%" PRIu64, total.underflow, total.subnormal,
                      total.overflow, total.nan);
            }
            CHECK_SAY(mark, "  f32->%s on %s: %" PRIu64 " inputs%s equal the scalar function; stats %s\n",
                      mp_format(dt)->name, mp_isa_name(isa), count, last && !all ? " (a slice)" : "",
                      all ? "totals as counted by hand" : "as defined, per block");
        }
    }
    mp_set_threads(0);
    mp_cpu_set_isa(mp_cpu_detected());
    free(x), free(got);
}

/* Every byte as an E8M0 or E2M1 source, into every format, on every path:
 * the scalar composition; and E8M0/E2M1 sources and destinations in place. */
static void check_mx_widen(void) {
    uint8_t src[256];
    uint32_t dst[256];
    for (int i = 0; i < 256; i++) src[i] = (uint8_t)i;
    for (int p = 0; p <= npaths; p++) {
        const mp_isa isa = p == 0 ? MP_ISA_SCALAR : paths[p - 1].isa;
        mp_cpu_set_isa(isa);
        for (int f = 0; f < 2; f++) {
            const mp_dtype st = f ? MP_E2M1 : MP_E8M0;
            for (int di = 0; di < MP_NUM_DTYPES; di++) {
                const mp_dtype dt = (mp_dtype)di;
                mp_convert_stats got = {0}, want = {0};
                memset(dst, 0x5a, sizeof dst);
                CHECK(mp_convert(dst, dt, src, st, 256, &got) == MP_OK, "convert");
                long bad = 0;
                for (int i = 0; i < 256; i++) {
                    const float v = st == MP_E2M1 ? mp_e2m1_to_f32(src[i]) : mp_e8m0_to_f32(src[i]);
                    const uint32_t c = narrow_code(v, dt);
                    bad += code_at(dst, dt, i) != c;
                    want_stats(&want, v, elem_f32(&c, dt, 0), dt);
                }
                CHECK(bad == 0 && convert_stats_eq(&got, &want), "%s -> %s on %s: %ld wrong", mp_format(st)->name,
                      mp_format(dt)->name, mp_isa_name(isa), bad);
            }
        }
    }
    mp_cpu_set_isa(mp_cpu_detected());
    /* widening counts what the destination does: E8M0's 2^-127 is an fp32 subnormal, its 0xFF a NaN;
     * E2M1 bytes are read from the low 4 bits */
    float w[256];
    mp_convert_stats s = {0};
    CHECK(mp_convert(w, MP_F32, src, MP_E8M0, 256, &s) == MP_OK && s.subnormal == 1 && s.nan == 1 && s.underflow == 0 &&
              s.overflow == 0 && w[0] == 0x1p-127f && w[254] == 0x1p127f && isnan(w[255]),
          "e8m0 -> fp32");
    memset(&s, 0, sizeof s);
    uint16_t h[256];
    CHECK(mp_convert(h, MP_F16, src, MP_E8M0, 256, &s) == MP_OK && s.nan == 1 && s.underflow == 127 - 25 + 1 &&
              s.overflow == 254 - 127 - 15,
          "e8m0 -> fp16: 2^-127 .. 2^-26 underflow, 2^16 .. 2^127 overflow (%" PRIu64 "/%" PRIu64 ")", s.underflow,
          s.overflow);
    memset(&s, 0, sizeof s);
    CHECK(mp_convert(w, MP_F32, src, MP_E2M1, 256, &s) == MP_OK && w[0x17] == 6.0f && w[0xf9] == -0.5f &&
              convert_stats_eq(&s, &(mp_convert_stats){0, 0, 0, 0, 6.0f}),
          "e2m1 -> fp32: nothing counted, amax 6");
    /* in place, one byte to one byte */
    uint8_t ip[256];
    memcpy(ip, src, 256);
    CHECK(mp_convert(ip, MP_E2M1, ip, MP_E2M1, 256, NULL) == MP_OK, "e2m1 in place");
    long bad = 0;
    for (int i = 0; i < 256; i++) bad += ip[i] != (src[i] & 0xf);
    CHECK(bad == 0, "e2m1 -> e2m1 keeps the code and clears the high bits");
    memcpy(ip, src, 256);
    CHECK(mp_convert(ip, MP_E8M0, ip, MP_E8M0, 256, NULL) == MP_OK && !memcmp(ip, src, 256), "e8m0 -> e8m0 in place");
    CHECK(mp_convert(ip, MP_E4M3, ip, MP_E2M1, 256, NULL) == MP_OK, "e2m1 -> e4m3 in place");
    bad = 0;
    for (int i = 0; i < 256; i++) bad += mp_e4m3_to_f32(ip[i]) != mp_e2m1_to_f32(src[i]);
    CHECK(bad == 0, "every e2m1 value is an e4m3 value");
    /* E8M0 into E2M1: 2^-2 and below become 0 (2^-2 is a tie), 2^-1 .. 2^2 exact, 2^3 and up saturate */
    memset(&s, 0, sizeof s);
    CHECK(mp_convert(ip, MP_E2M1, src, MP_E8M0, 256, &s) == MP_OK && ip[125] == 0x0 && ip[126] == 0x1 &&
              ip[127] == 0x2 && ip[128] == 0x4 && ip[129] == 0x6 && ip[130] == 0x7 && ip[255] == 0x8 && s.nan == 1 &&
              s.overflow == 254 - 130 + 1 && s.underflow == 126 && s.subnormal == 1,
          "e8m0 -> e2m1 (%" PRIu64 "/%" PRIu64 "/%" PRIu64 "/%" PRIu64 ")", s.underflow, s.subnormal, s.overflow,
          s.nan);
}

/* Where the new formats make no sense: refused with MP_EINVAL. */
static void check_mx_refused(void) {
    uint8_t b[64] = {0};
    mp_value_counts vc;
    CHECK(isnan(mp_amax(b, MP_E2M1, 64)) && strstr(mp_last_error(), "e2m1"), "amax e2m1");
    CHECK(isnan(mp_amax(b, MP_E8M0, 64)) && strstr(mp_last_error(), "e8m0"), "amax e8m0");
    CHECK(isnan(mp_amax(b, MP_E4M3, 64)) && isnan(mp_amax(b, (mp_dtype)9, 64)), "amax of other types");
    CHECK(mp_count_values(b, MP_E2M1, 64, &vc) == MP_EINVAL && mp_count_values(b, MP_E8M0, 64, &vc) == MP_EINVAL,
          "count_values");
    mp_convert_stats s = {0};
    const float one[2] = {1.0f, 7.0f};
    CHECK(mp_convert_count(MP_E8M0, one, MP_F32, 2, 1.0f, &s) == MP_EINVAL && strstr(mp_last_error(), "e8m0"),
          "convert_count into e8m0");
    CHECK(mp_convert_count(MP_E2M1, one, MP_F32, 2, 1.0f, &s) == MP_OK && s.overflow == 1 &&
              mp_convert_count(MP_F16, b, MP_E2M1, 64, 2.0f, &s) == MP_OK,
          "convert_count into and from e2m1");
    int found = 0;
    CHECK(mp_unscale_check(b, MP_E2M1, 64, 0.5f, &found) == MP_EINVAL &&
              mp_unscale_check(b, MP_E8M0, 64, 1.0f, &found) == MP_EINVAL && !found,
          "unscale e2m1/e8m0");
    float c[4];
    CHECK(mp_gemm(0, 0, 2, 2, 2, 1.0f, b, MP_E2M1, 2, b, MP_E2M1, 2, 0.0f, c, MP_F32, 2, NULL) == MP_EINVAL &&
              mp_gemm(0, 0, 2, 2, 2, 1.0f, c, MP_F32, 2, c, MP_F32, 2, 0.0f, b, MP_E8M0, 2, NULL) == MP_EINVAL,
          "gemm e2m1/e8m0");
}

/* --quick: the sample (sanitizers); default: make test's slice (check.h);
 * --long: all 2^32 inputs, into E8M0 and E2M1 too (make test-long) */
int main(int argc, char **argv) {
    const int mode = test_mode(argc, argv), quick = mode == QUICK, long_run = mode == ALL;
    find_paths();
    check_api();
    check_amax();
    check_widen_paths();
    check_stats_independent();
    check_ftz_daz();
    check_streaming();
    check_all_pairs();
    check_narrow_paths(mode);
    check_mx_widen();
    check_mx_refused();
    check_mx_narrow(quick, long_run);
    return check_report("test_convert");
}
