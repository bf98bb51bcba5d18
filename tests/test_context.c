/* test_context.c - the kernel context is read once and passed down: a whole
 * GEMM on the AMX model's context, a conversion with counts and an AdamW
 * step, each given a context whose kernels count their calls (the portable
 * kernels underneath), reach every kernel they need through it while the CPU
 * path in use is another, and give the bits and counts of the portable
 * path's own context. */
#include "check.h"
#include "internal.h"

enum { F32_F16, F16_F32, F32_BF16, BF16_F32, STATS32, AMAX16, GELU_FWD, ADAMW, NCALLS };
static long calls[NCALLS];
static const char *const call_names[NCALLS] = {"f32_to_f16", "f16_to_f32", "f32_to_bf16",   "bf16_to_f32",
                                               "stats32",    "amax16",     "gelu tanh_fwd", "adamw"};

static void hit(int which) { __atomic_fetch_add(&calls[which], 1, __ATOMIC_RELAXED); }

static void f32_to_f16(uint16_t *d, const float *s, size_t n, mp_convert_stats *st, int stream) {
    hit(F32_F16), mp_convert_scalar.f32_to_f16(d, s, n, st, stream);
}
static void f16_to_f32(float *d, const uint16_t *s, size_t n, mp_convert_stats *st) {
    hit(F16_F32), mp_convert_scalar.f16_to_f32(d, s, n, st);
}
static void f32_to_bf16(uint16_t *d, const float *s, size_t n, mp_convert_stats *st, int stream) {
    hit(F32_BF16), mp_convert_scalar.f32_to_bf16(d, s, n, st, stream);
}
static void bf16_to_f32(float *d, const uint16_t *s, size_t n, mp_convert_stats *st) {
    hit(BF16_F32), mp_convert_scalar.bf16_to_f32(d, s, n, st);
}
static uint32_t stats32(const uint32_t *x, size_t n, uint32_t *sub, uint32_t *nan) {
    return hit(STATS32), mp_amax_scalar.stats32(x, n, sub, nan);
}
static uint16_t amax16(const uint16_t *h, size_t n, uint16_t inf) {
    return hit(AMAX16), mp_amax_scalar.amax16(h, n, inf);
}
static void gelu_fwd(float *y, size_t n) { hit(GELU_FWD), mp_gelu_scalar.tanh_fwd(y, n); }
static uint64_t adamw(float *w, const float *g, float *m, float *v, size_t n, const mp_adamw_coef *c) {
    return hit(ADAMW), mp_optim_scalar.adamw(w, g, m, v, n, c);
}

static mp_convert_kernels counted_convert;
static mp_amax_kernels counted_amax;
static mp_gelu_kernels counted_gelu;
static mp_optim_kernels counted_optim;

/* The portable path's context with counting kernels, the AMX model as its
 * bf16 GEMM; `plain`: the same without the counting. */
static void contexts(mp_kernels *counted, mp_kernels *plain) {
    *plain = *mp_kernels_of(MP_ISA_SCALAR);
    plain->gemm_bf16 = &mp_gemm_amx_model;
    counted_convert = (mp_convert_kernels){f32_to_f16, f16_to_f32, f32_to_bf16, bf16_to_f32};
    counted_amax = *plain->amax, counted_amax.stats32 = stats32, counted_amax.amax16 = amax16;
    counted_gelu = *plain->gelu, counted_gelu.tanh_fwd = gelu_fwd;
    counted_optim = *plain->optim, counted_optim.adamw = adamw;
    *counted = *plain;
    counted->convert = &counted_convert, counted->amax = &counted_amax, counted->gelu = &counted_gelu;
    counted->optim = &counted_optim;
}

static void fill(float *x, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(seed >> 40) * 0x1p-24 * 2.0 - 1.0);
    }
}

static void check_gemm(const mp_kernels *counted, const mp_kernels *plain) {
    enum { M = 70, N = 45, K = 100 };
    float af[M * K], bf[N * K], bias[N];
    uint16_t a[M * K], b[N * K], x[M * N], c[2][M * N], o[2][M * N];
    float c32[2][M * N];
    fill(af, M * K, 1), fill(bf, N * K, 2), fill(bias, N, 3);
    mp_convert(a, MP_BF16, af, MP_F32, M * K, NULL), mp_convert(b, MP_BF16, bf, MP_F32, N * K, NULL);
    mp_convert(x, MP_BF16, bias, MP_F32, N, NULL); /* the first row of x; the rest zero */
    memset(x + N, 0, sizeof x - N * sizeof *x);
    mp_convert_stats st[2][3];
    memset(st, 0, sizeof st);
    memset(calls, 0, sizeof calls);
    for (int w = 0; w < 2; w++) {
        const mp_kernels *k = w ? plain : counted;
        /* bias and GELU in the epilogue of a bf16 C, counted */
        const mp_gemm_epilogue ep = {
            .bias = bias, .stats = &st[w][0], .post = MP_POST_GELU, .post_out = o[w], .post_stats = &st[w][1]};
        CHECK(mp_gemm_run(k, 0, 1, M, N, K, 1.0f, a, MP_BF16, K, b, MP_BF16, K, 0.0f, c[w], MP_BF16, N, &ep) == MP_OK,
              "gemm: %s", mp_last_error());
        /* an fp32 C with GELU (a half C's GELU comes from the table of every code, gelu_table.c), counted */
        const mp_gemm_epilogue e32 = {.stats = &st[w][2], .post = MP_POST_GELU};
        CHECK(mp_gemm_run(k, 0, 1, M, N, K, 1.0f, a, MP_BF16, K, b, MP_BF16, K, 0.0f, c32[w], MP_F32, N, &e32) == MP_OK,
              "gemm fp32: %s", mp_last_error());
    }
    const int same = !memcmp(c[0], c[1], sizeof c[0]) && !memcmp(o[0], o[1], sizeof o[0]) &&
                     !memcmp(c32[0], c32[1], sizeof c32[0]) && !memcmp(st[0], st[1], sizeof st[0]);
    CHECK(same, "gemm with the counting context differs from the portable context's");
    const int need[] = {F32_BF16, BF16_F32, STATS32, GELU_FWD};
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
        CHECK(calls[need[i]] > 0, "gemm on the given context never called its %s", call_names[need[i]]);
}

static void check_convert(const mp_kernels *counted, const mp_kernels *plain) {
    enum { N = 5000 };
    float x[N], y[2][N];
    uint16_t h[2][N];
    fill(x, N, 4);
    x[7] = 0x1p-140f; /* a subnormal: counted */
    mp_convert_stats st[2][2];
    memset(st, 0, sizeof st);
    memset(calls, 0, sizeof calls);
    for (int w = 0; w < 2; w++) {
        const mp_kernels *k = w ? plain : counted;
        CHECK(mp_convert_in(k, h[w], MP_F16, x, MP_F32, N, &st[w][0]) == MP_OK, "convert: %s", mp_last_error());
        CHECK(mp_convert_in(k, y[w], MP_F32, x, MP_F32, N, &st[w][1]) == MP_OK, "convert: %s", mp_last_error());
    }
    CHECK(!memcmp(h[0], h[1], sizeof h[0]) && !memcmp(y[0], y[1], sizeof y[0]) && !memcmp(st[0], st[1], sizeof st[0]) &&
              st[0][1].subnormal == 1,
          "conversions with the counting context differ from the portable context's");
    CHECK(calls[F32_F16] > 0 && calls[STATS32] > 0,
          "conversion on the given context: f32_to_f16 %ld, stats32 %ld calls", calls[F32_F16], calls[STATS32]);
}

static void check_optim(const mp_kernels *counted, const mp_kernels *plain) {
    enum { N = 3000 };
    float w0[N], g[N];
    fill(w0, N, 5), fill(g, N, 6);
    mp_optim *o[2];
    mp_param *p[2];
    const mp_adamw_config cfg = mp_adamw_defaults();
    memset(calls, 0, sizeof calls);
    for (int w = 0; w < 2; w++) {
        CHECK(mp_optim_adamw(&o[w], &cfg) == MP_OK && mp_optim_add(o[w], "w", w0, N, MP_BF16, &p[w]) == MP_OK,
              "optimizer: %s", mp_last_error());
        for (int step = 0; step < 2; step++) {
            memcpy(p[w]->grad, g, sizeof g);
            CHECK(mp_optim_step_in(w ? plain : counted, o[w]) == MP_OK, "step: %s", mp_last_error());
        }
    }
    CHECK(!memcmp(p[0]->master, p[1]->master, N * 4) && !memcmp(p[0]->half, p[1]->half, N * 2) &&
              memcmp(p[0]->master, w0, N * 4) != 0,
          "AdamW with the counting context differs from the portable context's");
    CHECK(calls[ADAMW] > 0 && calls[F32_BF16] > 0, "AdamW on the given context: adamw %ld, f32_to_bf16 %ld calls",
          calls[ADAMW], calls[F32_BF16]);
    mp_optim_free(o[0]), mp_optim_free(o[1]);
}

int main(void) {
    mp_kernels counted, plain;
    contexts(&counted, &plain);
    /* the path in use is the best the CPU has: nothing in it counts */
    check_gemm(&counted, &plain);
    check_convert(&counted, &plain);
    check_optim(&counted, &plain);
    printf("  a GEMM on the AMX model's context, conversions with counts and AdamW steps reach their kernels "
           "through the context given (path in use: %s)\n",
           mp_isa_name(mp_cpu_isa()));
    return check_report("test_context");
}
