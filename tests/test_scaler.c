/* test_scaler.c - the loss scaler: trajectories against a transcription of
 * PyTorch's _amp_update_scale_ and of Megatron-LM's hysteresis rule, bounds,
 * bad configs, the blob, and the fused unscale + check on every format. */
#include <float.h>
#include <math.h>

#include "check.h"
#include "internal.h"

/* PyTorch, aten/src/ATen/native/cpu/AmpGradScalerKernels.cpp, transcribed:
 * float scale, int32 tracker, double factors. */
static void torch_update(float *scale, int32_t *tracker, int found_inf, double growth, double backoff, int interval) {
    if (found_inf) {
        *scale = (float)(*scale * backoff);
        *tracker = 0;
    } else {
        const int32_t successful = *tracker + 1;
        if (successful == interval) {
            const float new_scale = (float)(*scale * growth);
            if (isfinite(new_scale)) *scale = new_scale;
            *tracker = 0;
        } else {
            *tracker = successful;
        }
    }
}

static uint64_t rng = 0x853c49e6748fea9bull;
static uint32_t next_u32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}

static void check_torch_trajectories(void) {
    const long mark = check_failures;
    const int intervals[] = {1, 2, 2000};
    const float starts[] = {65536.0f, 0x1p127f, FLT_MAX, 1e-38f, 0x1p-149f, 3.0f};
    const double pinf[] = {0.0005, 0.3, 0.9};
    long steps = 0;
    for (size_t a = 0; a < 3; a++)
        for (size_t b = 0; b < sizeof starts / sizeof starts[0]; b++)
            for (size_t c = 0; c < 3; c++) {
                mp_scaler_config cfg = mp_scaler_defaults();
                cfg.growth_interval = intervals[a];
                cfg.init_scale = starts[b];
                mp_scaler s;
                CHECK(mp_scaler_init(&s, &cfg) == MP_OK, "init");
                float scale = starts[b];
                int32_t tracker = 0;
                long bad = 0;
                for (int i = 0; i < 200000; i++, steps++) {
                    const int f = next_u32() < pinf[c] * 4294967296.0;
                    torch_update(&scale, &tracker, f, 2.0, 0.5, intervals[a]);
                    mp_scaler_update(&s, f);
                    bad += f2u(mp_scaler_get_scale(&s)) != f2u(scale) || mp_scaler_growth_tracker(&s) != tracker;
                }
                CHECK(bad == 0, "interval %d start %g p %g: %ld steps differ from PyTorch", intervals[a],
                      (double)starts[b], pinf[c], bad);
            }
    /* a non-power-of-two factor: the product is taken in double, rounded once */
    mp_scaler_config cfg = mp_scaler_defaults();
    cfg.growth_factor = 1.7f, cfg.backoff_factor = 0.3f, cfg.growth_interval = 3, cfg.init_scale = 1000.0f;
    mp_scaler s;
    mp_scaler_init(&s, &cfg);
    float scale = 1000.0f;
    int32_t tracker = 0;
    long bad = 0;
    for (int i = 0; i < 100000; i++, steps++) {
        const int f = next_u32() % 4 == 0;
        torch_update(&scale, &tracker, f, (double)1.7f, (double)0.3f, 3);
        mp_scaler_update(&s, f);
        bad += f2u(s.scale) != f2u(scale) || s.growth_tracker != tracker;
    }
    CHECK(bad == 0, "factors 1.7/0.3: %ld steps differ", bad);
    CHECK_SAY(mark, "  %ld scaler steps equal PyTorch's kernel\n", steps);
}

/* Megatron-LM DynamicGradScaler.update, transcribed (min_scale 0 here means none). */
static void megatron_update(float *scale, int *growth_tracker, int *hyst_tracker, int found_inf, int hysteresis,
                            int interval, float min_scale) {
    if (found_inf) {
        *growth_tracker = 0;
        *hyst_tracker -= 1;
        if (*hyst_tracker <= 0) {
            float v = (float)(*scale * 0.5);
            *scale = v > min_scale ? v : min_scale;
        }
    } else {
        *growth_tracker += 1;
        if (*growth_tracker == interval) {
            *growth_tracker = 0;
            *hyst_tracker = hysteresis;
            *scale = (float)(*scale * 2.0);
        }
    }
}

static void check_hysteresis_and_bounds(void) {
    mp_scaler_config cfg = mp_scaler_defaults();
    cfg.hysteresis = 3, cfg.growth_interval = 5, cfg.init_scale = 1024.0f;
    mp_scaler s;
    CHECK(mp_scaler_init(&s, &cfg) == MP_OK, "init");
    /* two overflows are absorbed, the third backs off, the fourth too */
    mp_scaler_update(&s, 1);
    mp_scaler_update(&s, 1);
    CHECK(s.scale == 1024.0f && s.backoffs == 0 && s.skipped == 2, "absorbed by hysteresis");
    mp_scaler_update(&s, 1);
    CHECK(s.scale == 512.0f && s.backoffs == 1, "third overflow backs off");
    mp_scaler_update(&s, 1);
    CHECK(s.scale == 256.0f && s.backoffs == 2, "and the fourth");
    for (int i = 0; i < 5; i++) mp_scaler_update(&s, 0);
    CHECK(s.scale == 512.0f && s.growths == 1 && s.hysteresis_left == 3, "growth restores hysteresis");
    CHECK(s.steps == 9 && s.last_overflow_step == 3, "counters %llu %lld", (unsigned long long)s.steps,
          (long long)s.last_overflow_step);
    /* long random run against Megatron */
    float scale = 512.0f;
    int gt = 0, ht = 3;
    long bad = 0;
    for (int i = 0; i < 100000; i++) {
        const int f = next_u32() % 3 == 0;
        megatron_update(&scale, &gt, &ht, f, 3, 5, 0.0f);
        mp_scaler_update(&s, f);
        bad += f2u(s.scale) != f2u(scale) || s.growth_tracker != gt;
    }
    CHECK(bad == 0, "hysteresis: %ld steps differ from Megatron", bad);

    /* floor: backoff clamps, then an overflow at the floor is an error */
    cfg = mp_scaler_defaults();
    cfg.init_scale = 8.0f, cfg.min_scale = 3.0f;
    mp_scaler_init(&s, &cfg);
    CHECK(mp_scaler_update(&s, 1) == MP_OK && s.scale == 4.0f, "8 -> 4");
    CHECK(mp_scaler_update(&s, 1) == MP_OK && s.scale == 3.0f, "4 -> clamped to 3");
    CHECK(mp_scaler_update(&s, 1) == MP_EOVERFLOW && s.scale == 3.0f, "at the floor: error, scale kept");
    CHECK(strstr(mp_last_error(), "already at minimum") != NULL, "message: %s", mp_last_error());
    CHECK(s.skipped == 3 && s.backoffs == 2, "skips still counted");
    /* no floor: the scale can underflow to 0, then overflow is an error too */
    cfg = mp_scaler_defaults();
    cfg.init_scale = 0x1p-148f;
    mp_scaler_init(&s, &cfg);
    CHECK(mp_scaler_update(&s, 1) == MP_OK && s.scale == 0x1p-149f, "subnormal scale");
    CHECK(mp_scaler_update(&s, 1) == MP_OK && s.scale == 0.0f, "underflows to 0 as in PyTorch");
    CHECK(mp_scaler_update(&s, 1) == MP_EOVERFLOW, "overflow at 0 is an error");

    /* ceiling */
    cfg = mp_scaler_defaults();
    cfg.init_scale = 100.0f, cfg.max_scale = 300.0f, cfg.growth_interval = 1;
    mp_scaler_init(&s, &cfg);
    mp_scaler_update(&s, 0);
    CHECK(s.scale == 200.0f, "grow");
    mp_scaler_update(&s, 0);
    CHECK(s.scale == 300.0f, "clamped at max");
    mp_scaler_update(&s, 0);
    CHECK(s.scale == 300.0f && s.growths == 2, "stays at max, growth not counted");
    /* never grows to inf without a ceiling */
    cfg = mp_scaler_defaults();
    cfg.init_scale = FLT_MAX, cfg.growth_interval = 1;
    mp_scaler_init(&s, &cfg);
    mp_scaler_update(&s, 0);
    CHECK(s.scale == FLT_MAX && s.growths == 0, "no growth to inf");

    /* static */
    cfg = mp_scaler_defaults();
    cfg.dynamic = 0, cfg.init_scale = 4096.0f, cfg.growth_interval = 1;
    mp_scaler_init(&s, &cfg);
    for (int i = 0; i < 10; i++) CHECK(mp_scaler_update(&s, i % 2) == MP_OK, "static update");
    CHECK(s.scale == 4096.0f && s.skipped == 5 && s.steps == 10 && s.growths == 0 && s.backoffs == 0, "static scale");
}

static void check_configs(void) {
    mp_scaler s;
    const mp_scaler_config d = mp_scaler_defaults();
    CHECK(d.init_scale == 65536.0f && d.growth_factor == 2.0f && d.backoff_factor == 0.5f &&
              d.growth_interval == 2000 && d.hysteresis == 1 && d.min_scale == 0 && d.max_scale == 0 && d.dynamic == 1,
          "defaults");
    CHECK(mp_scaler_init(&s, NULL) == MP_OK && s.scale == 65536.0f, "NULL config = defaults");
    struct {
        const char *field;
        mp_scaler_config c;
    } bad[12];
    for (int i = 0; i < 12; i++) bad[i].c = d;
    bad[0].field = "init_scale", bad[0].c.init_scale = 0;
    bad[1].field = "init_scale", bad[1].c.init_scale = INFINITY;
    bad[2].field = "growth_factor", bad[2].c.growth_factor = 1.0f;
    bad[3].field = "backoff_factor", bad[3].c.backoff_factor = 1.0f;
    bad[4].field = "backoff_factor", bad[4].c.backoff_factor = 0.0f;
    bad[5].field = "growth_interval", bad[5].c.growth_interval = 0;
    bad[6].field = "hysteresis", bad[6].c.hysteresis = 0;
    bad[7].field = "min_scale", bad[7].c.min_scale = -1;
    bad[8].field = "max_scale", bad[8].c.max_scale = NAN;
    bad[9].field = "min_scale", bad[9].c.min_scale = 10, bad[9].c.max_scale = 5, bad[9].c.init_scale = 7;
    bad[10].field = "init_scale", bad[10].c.max_scale = 1000;
    bad[11].field = "dynamic", bad[11].c.dynamic = 2;
    for (int i = 0; i < 12; i++)
        CHECK(mp_scaler_init(&s, &bad[i].c) == MP_EINVAL && strstr(mp_last_error(), bad[i].field), "bad config %d: %s",
              i, mp_last_error());
}

static void check_blob(void) {
    mp_scaler_config cfg = mp_scaler_defaults();
    cfg.growth_interval = 7, cfg.hysteresis = 2, cfg.min_scale = 1.0f, cfg.max_scale = 1e6f;
    mp_scaler a, b;
    mp_scaler_init(&a, &cfg);
    int flags[400];
    for (int i = 0; i < 400; i++) flags[i] = next_u32() % 5 == 0;
    for (int i = 0; i < 200; i++) mp_scaler_update(&a, flags[i]);
    uint8_t blob[MP_SCALER_BLOB_SIZE];
    CHECK(mp_scaler_save(&a, blob) == MP_OK, "save");
    CHECK(mp_scaler_load(&b, blob, sizeof blob) == MP_OK, "load");
    CHECK(memcmp(&a, &b, sizeof a) == 0, "loaded state equals saved");
    for (int i = 200; i < 400; i++) {
        mp_scaler_update(&a, flags[i]);
        mp_scaler_update(&b, flags[i]);
    }
    CHECK(memcmp(&a, &b, sizeof a) == 0, "a resumed scaler continues identically");
    mp_scaler keep = b;
    for (size_t i = 0; i < sizeof blob; i++) {
        uint8_t c[MP_SCALER_BLOB_SIZE];
        memcpy(c, blob, sizeof c);
        c[i] ^= 0x10;
        CHECK(mp_scaler_load(&b, c, sizeof c) == MP_ECORRUPT, "flipped bit in byte %zu accepted", i);
    }
    CHECK(memcmp(&keep, &b, sizeof b) == 0, "a failed load leaves the scaler untouched");
    CHECK(mp_scaler_load(&b, blob, sizeof blob - 1) == MP_ECORRUPT, "short blob");
    /* a well-formed blob with an impossible state */
    uint8_t c[MP_SCALER_BLOB_SIZE];
    memcpy(c, blob, sizeof c);
    mp_put_u32(c + 48, 99); /* growth tracker >= interval */
    mp_put_u32(c + 100, mp_crc32(0, c, 100));
    CHECK(mp_scaler_load(&b, c, sizeof c) == MP_ECORRUPT, "tracker out of range");
    memcpy(c, blob, sizeof c);
    mp_put_u32(c + 4, 2);
    mp_put_u32(c + 100, mp_crc32(0, c, 100));
    CHECK(mp_scaler_load(&b, c, sizeof c) == MP_ECORRUPT && strstr(mp_last_error(), "version"), "version");
}

/* ---- unscale ---- */

static void check_unscale(void) {
    const size_t sizes[] = {1, 15, 16, 33, 1000, (1u << 19) + 7};
    const float inv = (float)(1.0 / 65536.0);
    for (int t = 0; t < MP_NUM_DTYPES; t++) {
        const mp_dtype dt = (mp_dtype)t;
        const size_t es = mp_format(dt)->size;
        if (dt == MP_E8M0 || dt == MP_E2M1) { /* block scales and fp4 elements: refused, the buffer untouched */
            uint8_t b[4] = {0x7f, 0xff, 0x07, 0x0f};
            int found = 0;
            CHECK(mp_unscale_check(b, dt, 4, inv, &found) == MP_EINVAL &&
                      strstr(mp_last_error(), mp_format(dt)->name) && !found && b[1] == 0xff && b[3] == 0x0f,
                  "%s refused", mp_format(dt)->name);
            void *const bufs[1] = {b};
            const size_t ns[1] = {4};
            CHECK(mp_unscale_check_list(bufs, &dt, ns, 1, inv, &found) == MP_EINVAL && !found, "%s refused in a list",
                  mp_format(dt)->name);
            continue;
        }
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            const size_t n = sizes[si];
            float *x = malloc(n * 4);
            uint8_t *buf = malloc(n * es), *orig = malloc(n * es);
            const int emax = dt == MP_E4M3 ? 10 : 20; /* e4m3 tops out at 448 */
            for (size_t i = 0; i < n; i++)
                x[i] = ldexpf((float)(next_u32() % 2000) - 1000.0f, (int)(next_u32() % (uint32_t)emax) - 14);
            mp_convert(orig, dt, x, MP_F32, n, NULL);
            /* clean buffer: values are x * inv rounded to the format, found_inf stays 0 */
            memcpy(buf, orig, n * es);
            int found = 0;
            CHECK(mp_unscale_check(buf, dt, n, inv, &found) == MP_OK && found == 0, "%s n=%zu clean",
                  mp_format(dt)->name, n);
            long bad = 0;
            for (size_t i = 0; i < n; i++) {
                const float want = elem_f32(orig, dt, i) * inv;
                uint8_t tmp[4];
                mp_convert(tmp, dt, &want, MP_F32, 1, NULL);
                bad += memcmp(buf + i * es, tmp, es) != 0;
            }
            CHECK(bad == 0, "%s n=%zu: %ld values differ from x * inv", mp_format(dt)->name, n, bad);
            /* found_inf is never cleared */
            found = 1;
            memcpy(buf, orig, n * es);
            mp_unscale_check(buf, dt, n, inv, &found);
            CHECK(found == 1, "found_inf cleared");
            /* inf or NaN at the first, a middle and the last element */
            const size_t where[3] = {0, n / 2, n - 1};
            for (int w = 0; w < 3; w++)
                for (int kind = 0; kind < 2; kind++) {
                    memcpy(buf, orig, n * es);
                    const float bad_v = kind ? NAN : -INFINITY;
                    mp_convert(buf + where[w] * es, dt, &bad_v, MP_F32, 1, NULL);
                    found = 0;
                    mp_unscale_check(buf, dt, n, inv, &found);
                    CHECK(found == 1, "%s n=%zu: %s at %zu not found", mp_format(dt)->name, n, kind ? "NaN" : "inf",
                          where[w]);
                }
            /* inv == 1: a check only, bits untouched (PyTorch skips the multiply), NaN payloads included */
            memcpy(buf, orig, n * es);
            found = 0;
            mp_unscale_check(buf, dt, n, 1.0f, &found);
            CHECK(found == 0 && memcmp(buf, orig, n * es) == 0, "inv 1 leaves the buffer alone");
            for (int w = 0; w < 3; w++)
                for (int kind = 0; kind < 2; kind++) {
                    memcpy(buf, orig, n * es);
                    const float bad_v = kind ? NAN : INFINITY;
                    mp_convert(buf + where[w] * es, dt, &bad_v, MP_F32, 1, NULL);
                    memcpy(orig, buf, n * es); /* orig now holds the inf/NaN */
                    found = 0;
                    mp_unscale_check(buf, dt, n, 1.0f, &found);
                    CHECK(found == 1 && memcmp(buf, orig, n * es) == 0, "%s n=%zu inv 1: %s at %zu",
                          mp_format(dt)->name, n, kind ? "NaN" : "inf", where[w]);
                    mp_convert(orig, dt, x, MP_F32, n, NULL);
                }
            free(x);
            free(buf);
            free(orig);
        }
    }
    float g[3] = {1.0f, 2.0f, 3.0f};
    int found = 0;
    CHECK(mp_unscale_check(g, MP_F32, 3, 0.5f, &found) == MP_OK && g[2] == 1.5f && !found, "simple");
    CHECK(mp_unscale_check(g, MP_F32, 3, 0.5f, NULL) == MP_EINVAL, "NULL found_inf");
    CHECK(mp_unscale_check(g, (mp_dtype)9, 3, 0.5f, &found) == MP_EINVAL, "bad dtype");
    CHECK(mp_unscale_check(g, MP_F32, 3, INFINITY, &found) == MP_EINVAL, "inf inv");
    /* list: validated before anything is touched */
    float a[2] = {2, 4}, b[2] = {8, INFINITY};
    void *bufs[3] = {a, b, NULL};
    mp_dtype types[3] = {MP_F32, MP_F32, MP_F32};
    size_t ns[3] = {2, 2, 5};
    found = 0;
    CHECK(mp_unscale_check_list(bufs, types, ns, 3, 0.5f, &found) == MP_EINVAL && a[0] == 2, "list refused untouched");
    CHECK(mp_unscale_check_list(bufs, types, ns, 2, 0.5f, &found) == MP_OK && found == 1 && a[0] == 1 && b[0] == 4,
          "list");
}

/* The AVX-512 kernels against the scalar ones, bit for bit, with subnormals,
 * tiny inverses (results underflow) and non-finite values. */
static void check_unscale_paths(void) {
#ifdef MP_X86
    if (mp_cpu_detected() < MP_ISA_AVX512) return;
    const size_t n = 100003;
    float *a = malloc(n * 4), *b = malloc(n * 4);
    uint16_t *h = malloc(n * 2), *h2 = malloc(n * 2);
    const float invs[] = {(float)(1.0 / 65536), 0x1p-140f, 0.3f, 3.0e30f};
    for (size_t k = 0; k < sizeof invs / sizeof invs[0]; k++) {
        for (size_t i = 0; i < n; i++) a[i] = u2f(next_u32());
        memcpy(b, a, n * 4);
        const int f1 = mp_unscale_scalar.f32(a, n, invs[k]), f2 = mp_unscale_avx512.f32(b, n, invs[k]);
        CHECK(f1 == f2 && memcmp(a, b, n * 4) == 0, "f32 paths differ (inv %g)", (double)invs[k]);
        for (int t = 0; t < 2; t++) {
            for (size_t i = 0; i < n; i++) h[i] = (uint16_t)next_u32();
            memcpy(h2, h, n * 2);
            const int g1 = t ? mp_unscale_scalar.bf16(h, n, invs[k]) : mp_unscale_scalar.f16(h, n, invs[k]);
            const int g2 = t ? mp_unscale_avx512.bf16(h2, n, invs[k]) : mp_unscale_avx512.f16(h2, n, invs[k]);
            CHECK(g1 == g2 && memcmp(h, h2, n * 2) == 0, "%s paths differ (inv %g)", t ? "bf16" : "f16",
                  (double)invs[k]);
        }
    }
    /* the checks alone (inv_scale 1): one inf/NaN code at every position of every length up to 300,
     * past the vector loops and their tails, and random codes */
    for (size_t len = 0; len <= 300; len++)
        for (size_t at = 0; at <= len; at++) { /* at == len: none */
            for (size_t i = 0; i < len; i++) a[i] = 1.0f, h[i] = 0x3c00;
            if (at < len) a[at] = (at % 2) ? NAN : -INFINITY, h[at] = (at % 2) ? 0x7e01 : 0xfc00;
            const int want = at < len;
            CHECK(mp_unscale_avx512.check32((const uint32_t *)a, len) == want &&
                      mp_unscale_scalar.check32((const uint32_t *)a, len) == want &&
                      mp_unscale_avx512.check16(h, len, 0x7c00) == want &&
                      mp_unscale_scalar.check16(h, len, 0x7c00) == want,
                  "check at %zu of %zu", at, len);
        }
    for (int r = 0; r < 20; r++) {
        for (size_t i = 0; i < n; i++) a[i] = u2f(next_u32() & 0xbf7fffffu), h[i] = (uint16_t)(next_u32() & 0xbfff);
        a[next_u32() % n] = r % 2 ? INFINITY : 1.0f; /* half the time, one inf */
        for (int t = 0; t < 2; t++) {
            const uint16_t e = t ? 0x7f80 : 0x7c00;
            CHECK(mp_unscale_avx512.check16(h, n, e) == mp_unscale_scalar.check16(h, n, e), "check16 paths differ");
        }
        CHECK(mp_unscale_avx512.check32((const uint32_t *)a, n) == mp_unscale_scalar.check32((const uint32_t *)a, n) &&
                  mp_unscale_scalar.check32((const uint32_t *)a, n) == r % 2,
              "check32 paths differ");
    }
    free(a);
    free(b);
    free(h);
    free(h2);
#endif
}

int main(void) {
    check_torch_trajectories();
    check_hysteresis_and_bounds();
    check_configs();
    check_blob();
    check_unscale();
    check_unscale_paths();
    return check_report("test_scaler");
}
