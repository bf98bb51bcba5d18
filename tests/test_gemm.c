/* test_gemm.c - mp_gemm against an fp64 reference with error bounds derived
 * from the formats, and against mp_gemm_ref bit for bit where the arithmetic
 * order is the same; every input/output format pair, transposes, leading
 * dimensions, alpha/beta, edge shapes, k = 0, threads, inf/NaN, stats. */
#include <float.h>
#include <math.h>

#include "check.h"
#include "internal.h"

static uint64_t rng = 0x1234567887654321ull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}
static float frand(void) { return (float)((double)rnd() * 0x1p-32 * 2.0 - 1.0); }

typedef struct {
    int ta, tb;
    size_t m, n, k, lda, ldb, ldc;
    float alpha, beta;
    mp_dtype at, bt, ct;
} shape;

typedef struct {
    void *a, *b, *c, *c0;
    double *exact, *bound;
} bufs;

static size_t rows_a(const shape *s) { return s->ta ? s->k : s->m; }
static size_t rows_b(const shape *s) { return s->tb ? s->n : s->k; }

static void fill(void *p, mp_dtype t, size_t count, int tiny) {
    for (size_t i = 0; i < count; i++) {
        float v = frand();
        if (tiny && rnd() % 8 == 0) v *= 0x1p-127f; /* bf16/fp32 subnormals now and then */
        mp_convert((uint8_t *)p + i * mp_format(t)->size, t, &v, MP_F32, 1, NULL);
    }
}

static void alloc_fill(const shape *s, bufs *b, int tiny) {
    const size_t na = rows_a(s) * s->lda, nb = rows_b(s) * s->ldb, nc = s->m * s->ldc;
    b->a = malloc(na * 4 + 4), b->b = malloc(nb * 4 + 4), b->c = malloc(nc * 4 + 4), b->c0 = malloc(nc * 4 + 4);
    b->exact = malloc(s->m * s->n * sizeof(double) + 8), b->bound = malloc(s->m * s->n * sizeof(double) + 8);
    fill(b->a, s->at, na, tiny);
    fill(b->b, s->bt, nb, tiny);
    fill(b->c0, s->ct, nc, 0);
}

static void free_bufs(bufs *b) { free(b->a), free(b->b), free(b->c), free(b->c0), free(b->exact), free(b->bound); }

/* fp64 value of alpha*op(A)op(B) + beta*C and a bound on the fp32 computation's
 * error: k+4 roundings of unit u = 2^-24 on sum |a||b| (products of fp32-exact
 * inputs are exact in fp64; fp16/bf16 products are exact in fp32), the final
 * alpha/beta, terms that vdpbf16ps flushes (bf16 subnormal inputs), fp32
 * subnormal flushes, and the rounding of a half C. */
static void reference(const shape *s, bufs *b, int dpbf16) {
    const double u = 0x1p-24;
    const mp_format_info *cf = mp_format(s->ct);
    /* A's rows and B's columns as fp64 rows of k, read once */
    double *ra = malloc(((s->m + s->n) * s->k + 1) * sizeof *ra), *rb = ra + s->m * s->k;
    if (!ra) abort();
    for (size_t i = 0; i < s->m; i++)
        for (size_t p = 0; p < s->k; p++)
            ra[i * s->k + p] = elem_f32(b->a, s->at, s->ta ? p * s->lda + i : i * s->lda + p);
    for (size_t j = 0; j < s->n; j++)
        for (size_t p = 0; p < s->k; p++)
            rb[j * s->k + p] = elem_f32(b->b, s->bt, s->tb ? j * s->ldb + p : p * s->ldb + j);
    for (size_t i = 0; i < s->m; i++)
        for (size_t j = 0; j < s->n; j++) {
            double sum = 0, mag = 0, flushed = 0;
            const double *xa = ra + i * s->k, *yb = rb + j * s->k;
            for (size_t p = 0; p < s->k; p++) {
                const double x = xa[p], y = yb[p];
                sum += x * y;
                mag += fabs(x * y);
                if (dpbf16 && (fabs(x) < 0x1p-126 || fabs(y) < 0x1p-126)) flushed += fabs(x * y);
            }
            const double c0 = s->beta == 0 ? 0 : elem_f32(b->c0, s->ct, i * s->ldc + j);
            const double v = s->alpha * sum + s->beta * c0;
            double bound = (double)(s->k + 4) * u * (fabs(s->alpha) * mag + fabs(s->beta * c0)) +
                           fabs(s->alpha) * (flushed + (double)(s->k + 2) * 0x1p-126);
            if (s->ct != MP_F32) bound += (fabs(v) + bound) * ldexp(1.0, -cf->mantissa_bits - 1) + cf->min_subnormal;
            b->exact[i * s->n + j] = v;
            b->bound[i * s->n + j] = bound;
        }
    free(ra);
}

/* The kernel run() uses instead of mp_gemm's choice (NULL: mp_gemm's). */
/* The context of the CPU path in use with its GEMM kernels replaced by kr. */
static const mp_kernels *with_gemm(mp_kernels *ctx, const mp_gemm_kernel *kr) {
    *ctx = *mp_kernels_current();
    ctx->gemm = ctx->gemm_bf16 = kr;
    return ctx;
}
#define WITH(kr) with_gemm(&(mp_kernels){0}, (kr))

static const mp_gemm_kernel *forced;

/* kr with the driver's row blocks only (its panels_b_max 0), so that the AMX kernel and its model, which take
 * row panels where B's packed block is small, run the other order too (the same bits) */
static mp_gemm_kernel row_blocks_of(const mp_gemm_kernel *kr, const char *name) {
    mp_gemm_kernel k = *kr;
    k.name = name;
    k.panels_b_max = 0;
    return k;
}

static int run(const shape *s, bufs *b, int ref, mp_convert_stats *st) {
    memcpy(b->c, b->c0, s->m * s->ldc * mp_format(s->ct)->size);
    if (forced && !ref) {
        const mp_gemm_epilogue ep = {.round_to = MP_F32, .stats = st};
        return mp_gemm_run(WITH(forced), s->ta, s->tb, s->m, s->n, s->k, s->alpha, b->a, s->at, s->lda, b->b, s->bt,
                           s->ldb, s->beta, b->c, s->ct, s->ldc, &ep);
    }
    return (ref ? mp_gemm_ref : mp_gemm)(s->ta, s->tb, s->m, s->n, s->k, s->alpha, b->a, s->at, s->lda, b->b, s->bt,
                                         s->ldb, s->beta, b->c, s->ct, s->ldc, st);
}

static const char *shape_str(const shape *s) {
    static char buf[160];
    snprintf(buf, sizeof buf, "%s%s m%zu n%zu k%zu ld %zu/%zu/%zu alpha %g beta %g %s x %s -> %s", s->ta ? "At" : "A",
             s->tb ? "Bt" : "B", s->m, s->n, s->k, s->lda, s->ldb, s->ldc, (double)s->alpha, (double)s->beta,
             mp_format(s->at)->name, mp_format(s->bt)->name, mp_format(s->ct)->name);
    return buf;
}

/* One shape on the active path: within the bound of the fp64 value, equal to
 * mp_gemm_ref where the order is the same, and leaving ldc padding alone. */
static void check_shape(const shape *s, size_t kc_exact, int tiny) {
    bufs b;
    alloc_fill(s, &b, tiny);
    const int dpbf16 = (forced || mp_cpu_isa() >= MP_ISA_AVX512_BF16) && s->at == MP_BF16 && s->bt == MP_BF16;
    reference(s, &b, dpbf16);
    mp_convert_stats st = {0}, st_ref = {0};
    CHECK(run(s, &b, 0, &st) == MP_OK, "%s: %s", shape_str(s), mp_last_error());
    long out = 0, pad = 0;
    double worst = 0;
    for (size_t i = 0; i < s->m; i++)
        for (size_t j = 0; j < s->ldc; j++) {
            const double got = elem_f32(b.c, s->ct, i * s->ldc + j);
            if (j >= s->n) {
                pad += got != elem_f32(b.c0, s->ct, i * s->ldc + j);
                continue;
            }
            const double e = fabs(got - b.exact[i * s->n + j]), bd = b.bound[i * s->n + j];
            out += !(e <= bd);
            if (bd > 0 && e / bd > worst) worst = e / bd;
        }
    CHECK(out == 0 && pad == 0, "%s on %s: %ld outside the bound (worst %.2f of it), %ld padding changed", shape_str(s),
          forced ? forced->name : mp_isa_name(mp_cpu_isa()), out, worst, pad);
    /* bit for bit against the plain loops when one KC block covers k */
    if (!dpbf16 && s->k <= kc_exact) {
        void *fast = malloc(s->m * s->ldc * 4 + 4);
        memcpy(fast, b.c, s->m * s->ldc * mp_format(s->ct)->size);
        run(s, &b, 1, &st_ref);
        CHECK(memcmp(fast, b.c, s->m * s->ldc * mp_format(s->ct)->size) == 0 && st.underflow == st_ref.underflow &&
                  st.subnormal == st_ref.subnormal && st.overflow == st_ref.overflow,
              "%s on %s differs from mp_gemm_ref", shape_str(s), mp_isa_name(mp_cpu_isa()));
        free(fast);
    }
    free_bufs(&b);
}

static shape random_shape(void) {
    static const size_t dims[] = {1, 2, 3, 7, 12, 13, 31, 32, 33, 47, 64, 97, 131};
    static const float alphas[] = {1.0f, -0.5f, 2.0f, 0.0f}, betas[] = {0.0f, 1.0f, -0.75f};
    shape s;
    s.ta = rnd() & 1, s.tb = rnd() & 1;
    s.m = dims[rnd() % 13], s.n = dims[rnd() % 13], s.k = dims[rnd() % 13];
    s.lda = (s.ta ? s.m : s.k) + (rnd() % 3 == 0 ? rnd() % 5 : 0);
    s.ldb = (s.tb ? s.k : s.n) + (rnd() % 3 == 0 ? rnd() % 5 : 0);
    s.ldc = s.n + (rnd() % 3 == 0 ? 1 + rnd() % 4 : 0);
    s.alpha = alphas[rnd() % 4 == 0 ? 1 + rnd() % 3 : 0];
    s.beta = betas[rnd() % 3];
    const mp_dtype ts[3] = {MP_F32, MP_F16, MP_BF16};
    s.at = ts[rnd() % 3], s.bt = ts[rnd() % 3], s.ct = ts[rnd() % 3];
    return s;
}

static void check_paths(int quick) {
    const mp_isa best = mp_cpu_detected();
    for (int isa = MP_ISA_SCALAR; isa <= (int)best; isa++) {
        mp_cpu_set_isa((mp_isa)isa);
        const long mark = check_failures;
        const size_t kc_exact = isa >= MP_ISA_AVX512 ? mp_gemm_avx512.kc
                                : isa == MP_ISA_AVX2 ? mp_gemm_avx2.kc
                                                     : mp_gemm_scalar.kc;
        for (int t = 0; t < 150; t++) {
            const shape s = random_shape();
            check_shape(&s, kc_exact, t % 5 == 0);
        }
        /* bigger: several blocks of every loop, two threads, k across the KC edge */
        const shape big[] = {
            {0, 0, 300, 200, 2100, 2100, 200, 200, 1.0f, 0.0f, MP_F32, MP_F32, MP_F32},
            {1, 1, 257, 129, 700, 257, 700, 129, 1.0f, 0.5f, MP_F16, MP_F16, MP_F32},
            {0, 1, 200, 3100, 64, 64, 64, 3100, -1.0f, 1.0f, MP_BF16, MP_BF16, MP_F32},
            {0, 0, 130, 70, 4500, 4500, 70, 70, 1.0f, 0.0f, MP_BF16, MP_BF16, MP_BF16},
            {0, 0, 256, 1024, 784, 784, 1024, 1024, 1.0f, 0.0f, MP_BF16, MP_F16, MP_F16},
        };
        /* under sanitizers (--quick) one of them: the fp64 reference is slow there */
        const size_t nbig = quick ? 1 : sizeof big / sizeof big[0];
        for (size_t i = 0; i < nbig; i++) check_shape(&big[i], kc_exact, 0);
        /* k = KC exactly: one whole block, bit for bit; k = KC + 1: a second
         * block of one k (edge tiles in m and n, every input and C format) */
        for (int d = 0; d < 2; d++)
            for (int f = 0; f < 3; f++) {
                const mp_dtype ts[3] = {MP_F32, MP_F16, MP_BF16};
                const shape edge = {f & 1,
                                    d,
                                    29,
                                    37,
                                    kc_exact + (size_t)d,
                                    f & 1 ? 29 : kc_exact + (size_t)d,
                                    d ? kc_exact + 1 : 37,
                                    37,
                                    1.0f,
                                    f == 2 ? 0.5f : 0.0f,
                                    ts[f],
                                    ts[(f + 1) % 3],
                                    ts[(f + 2) % 3]};
                check_shape(&edge, kc_exact, 0);
            }
        CHECK_SAY(mark, "  %s: %zu shapes within the fp64 bound, equal to mp_gemm_ref for k <= %zu\n",
                  mp_isa_name((mp_isa)isa), 150 + nbig + 6, kc_exact);
    }
    mp_cpu_set_isa(best);
}

/* The epilogue (bias, a half C, round_to with beta 0 or 1, counts, zeros)
 * on every CPU path equals the same steps done one at a time after a plain
 * fp32 mp_gemm of the same path: its sums are the epilogue's sums. Shapes
 * with edge tiles, and one deeper than every kernel's block of k (alpha 1
 * there, where the plain GEMM adds the blocks in the same order). The first
 * 3 rows of A and C are 0, so values without bias are +-0 there: zeros. */
static void check_epilogue_case(mp_dtype in, size_t m, size_t n, size_t k, float alpha, float beta, mp_dtype ct,
                                mp_dtype round_to, int with_bias, int stats, const char *what) {
    const size_t mn = m * n;
    void *a = malloc(m * k * 2), *b = malloc(k * n * 2), *c = malloc(mn * 4), *c0 = malloc(mn * 4);
    float *plain = malloc(mn * 4), *want = malloc(mn * 4), bias[64];
    fill(a, in, m * k, 0), fill(b, in, k * n, 0), fill(c0, ct, mn, 0);
    memset(a, 0, 3 * k * 2), memset(c0, 0, 3 * n * mp_format(ct)->size);
    for (size_t j = 0; j < n; j++) bias[j] = frand() * alpha;
    const mp_dtype half = round_to != MP_F32 ? round_to : ct;
    /* the steps one at a time */
    mp_convert_stats want_st = {0}, got_st = {0};
    uint64_t want_z = 0, got_z = 0;
    mp_gemm(0, 1, m, n, k, alpha, a, in, k, b, in, k, 0.0f, plain, MP_F32, n, NULL);
    uint16_t hw;
    const mp_isa path = mp_cpu_isa();
    mp_cpu_set_isa(MP_ISA_SCALAR); /* the conversions of the steps one at a time: the portable ones */
    for (size_t i = 0; i < mn; i++) {
        float v = plain[i];
        if (beta != 0.0f && round_to == MP_F32) { /* C read: v = fma(1, sum, beta C) with alpha 1 */
            float cold;
            mp_convert(&cold, MP_F32, (uint8_t *)c0 + i * mp_format(ct)->size, ct, 1, NULL);
            v = fmaf(1.0f, v, beta * cold);
        }
        if (with_bias) v += bias[i % n];
        want_z += v == 0.0f;
        if (half == MP_F32) {
            want[i] = v;
            mp_convert(&want[i], MP_F32, &v, MP_F32, 1, &want_st);
            continue;
        }
        mp_convert(&hw, half, &v, MP_F32, 1, &want_st);
        mp_convert(&want[i], MP_F32, &hw, half, 1, NULL);
        if (round_to != MP_F32 && beta != 0.0f) want[i] = beta * ((float *)c0)[i] + want[i];
    }
    mp_cpu_set_isa(path);
    if (round_to != MP_F32) { /* the counts' amax: of C's new fp32 values, not of the rounded terms */
        want_st.amax = 0.0f;
        for (size_t i = 0; i < mn; i++)
            if (isfinite(want[i]) && fabsf(want[i]) > want_st.amax) want_st.amax = fabsf(want[i]);
    }
    memcpy(c, c0, mn * mp_format(ct)->size);
    const mp_gemm_epilogue ep = {
        .bias = with_bias ? bias : NULL, .round_to = round_to, .stats = stats ? &got_st : NULL, .zeros = &got_z};
    const mp_status rc = mp_gemm_ex(0, 1, m, n, k, alpha, a, in, k, b, in, k, beta, c, ct, n, &ep);
    long bad = 0;
    for (size_t i = 0; i < mn; i++) {
        float g;
        mp_convert(&g, MP_F32, (uint8_t *)c + i * mp_format(ct)->size, ct, 1, NULL);
        bad += memcmp(&g, &want[i], 4) != 0;
    }
    const int same_st = !stats || (got_st.underflow == want_st.underflow && got_st.subnormal == want_st.subnormal &&
                                   got_st.overflow == want_st.overflow && got_st.nan == want_st.nan &&
                                   mp_f32_bits(got_st.amax) == mp_f32_bits(want_st.amax));
    CHECK(rc == MP_OK && bad == 0 && same_st && got_z == want_z && (with_bias || want_z >= 3 * n),
          "epilogue %s (%s, %s inputs, %zux%zux%zu): %ld differ, counts %s, zeros %llu (want %llu)", what,
          mp_isa_name(mp_cpu_isa()), mp_format(in)->name, m, n, k, bad, same_st ? "equal" : "differ",
          (unsigned long long)got_z, (unsigned long long)want_z);
    free(a), free(b), free(c), free(c0), free(plain), free(want);
}

static void check_epilogue(void) {
    const long mark = check_failures;
    const mp_isa best = mp_cpu_detected();
    const float tiny = 0x1p-20f; /* sums near fp16's subnormals: underflow and subnormal counts */
    for (int isa = MP_ISA_SCALAR; isa <= (int)best; isa++) {
        mp_cpu_set_isa((mp_isa)isa);
        for (int bf = 0; bf < 2; bf++) {
            const mp_dtype in = bf ? MP_BF16 : MP_F16, h = bf ? MP_BF16 : MP_F16;
            check_epilogue_case(in, 37, 45, 70, 0.75f, 0.0f, MP_F32, MP_F32, 1, 1, "fp32 C + bias");
            check_epilogue_case(in, 37, 45, 70, tiny, 0.0f, MP_F16, MP_F32, 1, 1, "fp16 C + bias");
            check_epilogue_case(in, 37, 45, 70, 1.0f, 0.5f, h, MP_F32, 1, 1, "half C, beta 0.5");
            check_epilogue_case(in, 37, 45, 70, 1.0f, 0.0f, h, MP_F32, 0, 1, "half C, zero rows");
            check_epilogue_case(in, 37, 45, 70, 1.0f, 0.0f, h, MP_F32, 0, 0, "half C, zero rows, no counts");
            /* sums at fp32's subnormals (vcvtneps2bf16 reads them as 0): bf16 subnormals and underflows */
            check_epilogue_case(in, 37, 45, 70, 0x1p-130f, 0.0f, h, MP_F32, 0, 1, "half C, fp32 subnormal sums");
            check_epilogue_case(in, 37, 45, 70, 0x1p-130f, 0.0f, MP_F32, h, 0, 1, "round_to, fp32 subnormal sums");
            check_epilogue_case(in, 37, 45, 70, tiny, 0.0f, MP_F32, MP_F16, 0, 1, "round_to fp16, beta 0");
            check_epilogue_case(in, 37, 45, 70, 0.75f, 1.0f, MP_F32, h, 0, 1, "round_to, beta 1");
            check_epilogue_case(in, 37, 45, 70, -0.75f, 0.0f, MP_F32, h, 0, 1, "round_to, alpha < 0: -0 sums");
            check_epilogue_case(in, 13, 33, 5000, 1.0f, 1.0f, MP_F32, h, 1, 1, "round_to, deep k");
            check_epilogue_case(in, 13, 33, 5000, 1.0f, 0.0f, h, MP_F32, 1, 1, "half C, deep k");
            check_epilogue_case(in, 13, 33, 5000, 1.0f, 0.0f, MP_F32, MP_F32, 1, 0, "fp32 C + bias, deep k");
            check_epilogue_case(in, 37, 45, 70, 1.0f, 0.5f, MP_F32, MP_F32, 0, 0, "fp32 C, beta 0.5");
            check_epilogue_case(in, 13, 33, 5000, 1.0f, 0.0f, MP_F32, MP_F32, 0, 0, "fp32 C, deep k");
        }
    }
    mp_cpu_set_isa(best);
    mp_convert_stats st = {0};
    const mp_gemm_epilogue fp16c = {.round_to = MP_F16, .stats = &st}, e4m3 = {.round_to = MP_E4M3};
    float x = 1, y = 1;
    uint16_t h;
    CHECK(mp_gemm_ex(0, 0, 1, 1, 1, 1.0f, &x, MP_F32, 1, &x, MP_F32, 1, 0.0f, &h, MP_F16, 1, &fp16c) == MP_EINVAL,
          "round_to with a half C");
    CHECK(mp_gemm_ex(0, 0, 1, 1, 1, 1.0f, &x, MP_F32, 1, &x, MP_F32, 1, 0.0f, &y, MP_F32, 1, &e4m3) == MP_EINVAL,
          "round_to e4m3");
    /* no products: the epilogue still runs (beta C + bias, rounded and counted) */
    float c2[2] = {3, 5}, bias2[2] = {0.5f, 1e-9f};
    const mp_gemm_epilogue rb = {.bias = bias2, .round_to = MP_F16, .stats = &st, .zeros = NULL};
    CHECK(mp_gemm_ex(0, 0, 1, 2, 0, 1.0f, NULL, MP_F32, 0, NULL, MP_F32, 2, 1.0f, c2, MP_F32, 2, &rb) == MP_OK &&
              c2[0] == 3.5f && c2[1] == 5.0f && st.underflow == 1,
          "k = 0 with round_to: %g %g, %llu underflow", (double)c2[0], (double)c2[1], (unsigned long long)st.underflow);
    CHECK_SAY(mark, "  epilogue: bias, half C, round_to (beta 0/1), counts, deep k: equal to the steps one at a time "
                    "on every path\n");
}

/* One post step (gemm.h) against the GEMM and then the separate op: the same
 * bits in C and in the output, the same counts (amax included), with the
 * output apart or in place of C, through kernel kr. Variant v: 0 with a bias,
 * 1 without, 2 with a bias, alpha 0.75, beta 0.5 (C read) and zeros counted,
 * 3 with a bias and nothing counted (the values alone compared).
 * x holds a NaN with a payload and an infinity. */
static void check_post_case(const mp_gemm_kernel *kr, mp_dtype ct, mp_gemm_post post, int in_place, size_t m, size_t n,
                            size_t k, int v) {
    const size_t mn = m * n, es = mp_format(ct)->size;
    const mp_dtype in = kr->esize == 2 ? MP_BF16 : ct;
    void *a = malloc(m * k * 4), *b = malloc(k * n * 4), *x = malloc(mn * es);
    void *cref = malloc(mn * es), *oref = malloc(mn * es), *c = malloc(mn * es), *o = malloc(mn * es);
    float bias[64];
    fill(a, in, m * k, 0), fill(b, in, k * n, 0), fill(x, ct, mn, 0);
    if (es == 2) { /* a NaN with a payload and an infinity among the GELU's inputs (or the residual) */
        ((uint16_t *)x)[3] = ct == MP_F16 ? 0x7e05 : 0x7fc5;
        ((uint16_t *)x)[mn - 2] = ct == MP_F16 ? 0xfc00 : 0xff80;
    }
    for (size_t j = 0; j < n; j++) bias[j] = frand();
    const float alpha = v == 2 ? 0.75f : 1.0f, beta = v == 2 ? 0.5f : 0.0f;
    memset(c, 0x55, mn * es);
    if (beta != 0.0f) fill(c, ct, mn, 0);
    memcpy(cref, c, mn * es);
    /* the steps one at a time */
    mp_convert_stats w0 = {0}, w1 = {0}, g0 = {0}, g1 = {0};
    uint64_t z0 = 0, z1 = 0;
    const mp_gemm_epilogue plain = {.bias = v == 1 ? NULL : bias, .stats = &w0, .zeros = v == 2 ? &z0 : NULL};
    mp_gemm_run(WITH(kr), 0, 1, m, n, k, alpha, a, in, k, b, in, k, beta, cref, ct, n, &plain);
    switch (post) {
    case MP_POST_GELU: mp_gelu_forward(oref, ct, cref, ct, mn, &w1); break;
    case MP_POST_GELU_ERF: mp_gelu_erf_forward(oref, ct, cref, ct, mn, &w1); break;
    case MP_POST_GELU_GRAD: mp_gelu_backward(oref, ct, cref, ct, x, ct, mn, &w1); break;
    case MP_POST_GELU_ERF_GRAD: mp_gelu_erf_backward(oref, ct, cref, ct, x, ct, mn, &w1); break;
    default: mp_add(oref, ct, x, ct, cref, ct, mn, &w1); break;
    }
    memset(o, 0x55, mn * es);
    const mp_gemm_epilogue ep = {.bias = v == 1 ? NULL : bias,
                                 .stats = v == 3 ? NULL : &g0,
                                 .zeros = v == 2 ? &z1 : NULL,
                                 .post = post,
                                 .post_x = x,
                                 .post_out = in_place ? NULL : o,
                                 .post_stats = v == 3 ? NULL : &g1};
    const mp_status rc = mp_gemm_run(WITH(kr), 0, 1, m, n, k, alpha, a, in, k, b, in, k, beta, c, ct, n, &ep);
    const int same = in_place ? !memcmp(c, oref, mn * es) : !memcmp(c, cref, mn * es) && !memcmp(o, oref, mn * es);
    const int counts = v == 3 || (convert_stats_eq(&g0, &w0) && convert_stats_eq(&g1, &w1) && z0 == z1);
    CHECK(rc == MP_OK && same && counts && w1.amax > 0,
          "post %d %s, variant %d (%s, %s C, %zux%zux%zu): values %s, counts %s", (int)post,
          in_place ? "in place" : "apart", v, kr->name, mp_format(ct)->name, m, n, k, same ? "equal" : "differ",
          counts ? "equal" : "differ");
    free(a), free(b), free(x), free(cref), free(oref), free(c), free(o);
}

static void check_post(void) {
    const long mark = check_failures;
    const mp_isa best = mp_cpu_detected();
    const mp_dtype cts[3] = {MP_F32, MP_F16, MP_BF16};
    int cases = 0;
    const mp_gemm_kernel model_blocks = row_blocks_of(&mp_gemm_amx_model, "amx-model-row-blocks");
    for (int isa = MP_ISA_SCALAR; isa <= (int)best + 2; isa++) { /* the AMX model on its own, in both orders */
        mp_cpu_set_isa(isa <= (int)best ? (mp_isa)isa : best);
        const mp_kernels *kc = mp_kernels_current();
        for (int f = 0; f < 3; f++) {
            const mp_gemm_kernel *kr = isa > (int)best + 1 ? &model_blocks
                                       : isa > (int)best   ? &mp_gemm_amx_model
                                       : f == 2            ? kc->gemm_bf16
                                                           : kc->gemm;
            if (isa > (int)best && cts[f] != MP_BF16) continue;
            for (int p = MP_POST_GELU; p <= MP_POST_ADD; p++)
                for (int ip = 0; ip < 2; ip++)
                    for (int v = 0; v < 4; v++, cases++) {
                        check_post_case(kr, cts[f], (mp_gemm_post)p, ip, 37, 45, 70, v);
                        check_post_case(kr, cts[f], (mp_gemm_post)p, ip, 20, 64, 70, v); /* whole vectors */
                        if (p == MP_POST_ADD)                                            /* deep k */
                            check_post_case(kr, cts[f], (mp_gemm_post)p, ip, 13, 33, 5000, v);
                    }
        }
    }
    mp_cpu_set_isa(best);
    float v = 1, y = 1;
    const mp_gemm_epilogue bad = {.post = MP_POST_ADD}, with_round = {.round_to = MP_BF16, .post = MP_POST_GELU},
                           unknown = {.post = (mp_gemm_post)99};
    CHECK(mp_gemm_ex(0, 0, 1, 1, 1, 1.0f, &v, MP_F32, 1, &v, MP_F32, 1, 0.0f, &y, MP_F32, 1, &bad) == MP_EINVAL &&
              strstr(mp_last_error(), "reads x"),
          "post add without x");
    CHECK(mp_gemm_ex(0, 0, 1, 1, 1, 1.0f, &v, MP_F32, 1, &v, MP_F32, 1, 0.0f, &y, MP_F32, 1, &with_round) == MP_EINVAL,
          "post with round_to");
    CHECK(mp_gemm_ex(0, 0, 1, 1, 1, 1.0f, &v, MP_F32, 1, &v, MP_F32, 1, 0.0f, &y, MP_F32, 1, &unknown) == MP_EINVAL,
          "unknown post");
    CHECK_SAY(mark,
              "  post steps (GELU, its gradient, both forms; residual add), apart and in place: equal to the "
              "separate ops on every path and the AMX model in row panels and row blocks (%d cases)\n",
              cases);
}

/* A half C and a post step's output of MP_STREAM_MIN_BYTES or more are stored non-temporally on the
 * AVX-512 paths: the same bits and counts as the same GEMM in two halves of its rows (each too small to
 * stream), with rows 64-byte aligned (whole vectors stream) and not (ldc odd: they fall back). */
static void check_stream_case(const mp_gemm_kernel *kr, mp_gemm_post post, size_t ldc) {
    const size_t m = 2048, n = 2048, k = 40, half = m / 2;
    uint16_t *a = malloc(m * k * 2), *b = malloc(k * n * 2), *x = malloc(m * ldc * 2);
    uint16_t *c[2], *o[2];
    float bias[2048];
    fill(a, MP_BF16, m * k, 0), fill(b, MP_BF16, k * n, 0), fill(x, MP_BF16, m * ldc, 0);
    for (size_t j = 0; j < n; j++) bias[j] = frand();
    mp_convert_stats st[2][2] = {{{0}}};
    for (int w = 0; w < 2; w++) { /* 64-byte aligned: with ldc 2048 every row's whole vectors stream */
        c[w] = aligned_alloc(64, m * ldc * 2), o[w] = aligned_alloc(64, m * ldc * 2);
        memset(c[w], 0x55, m * ldc * 2), memset(o[w], 0x55, m * ldc * 2);
    }
    CHECK(m * n * 2 >= MP_STREAM_MIN_BYTES && half * n * 2 < MP_STREAM_MIN_BYTES, "stream case sizes");
    for (int w = 0; w < 2; w++) /* w 0: the whole C at once (streamed); 1: two halves of its rows */
        for (size_t i0 = 0; i0 < m; i0 += w ? half : m) {
            const size_t rows = w ? half : m;
            const mp_gemm_epilogue ep = {.bias = bias,
                                         .stats = &st[w][0],
                                         .post = post,
                                         .post_x = post == MP_POST_NONE ? NULL : x + i0 * ldc,
                                         .post_out = post == MP_POST_NONE ? NULL : o[w] + i0 * ldc,
                                         .post_stats = &st[w][1]};
            CHECK(mp_gemm_run(WITH(kr), 0, 0, rows, n, k, 1.0f, a + i0 * k, MP_BF16, k, b, MP_BF16, n, 0.0f,
                              c[w] + i0 * ldc, MP_BF16, ldc, &ep) == MP_OK,
                  "stream GEMM runs");
        }
    int same = 1;
    for (size_t i = 0; i < m; i++)
        same &= !memcmp(c[0] + i * ldc, c[1] + i * ldc, n * 2) && !memcmp(o[0] + i * ldc, o[1] + i * ldc, n * 2);
    CHECK(same && convert_stats_eq(&st[0][0], &st[1][0]) && convert_stats_eq(&st[0][1], &st[1][1]) && st[0][0].amax > 0,
          "streamed C (%s, post %d, ldc %zu): values %s, counts %s", kr->name, (int)post, ldc,
          same ? "equal" : "differ",
          convert_stats_eq(&st[0][0], &st[1][0]) && convert_stats_eq(&st[0][1], &st[1][1]) ? "equal" : "differ");
    free(a), free(b), free(x);
    for (int w = 0; w < 2; w++) free(c[w]), free(o[w]);
}

static void check_stream(void) {
    const long mark = check_failures;
    const mp_isa best = mp_cpu_detected();
    int cases = 0;
    for (int isa = MP_ISA_AVX512; isa <= (int)best; isa++) { /* the paths whose epilogue streams */
        mp_cpu_set_isa((mp_isa)isa);
        const mp_gemm_kernel *kr = mp_kernels_current()->gemm_bf16;
        const mp_gemm_post posts[3] = {MP_POST_NONE, MP_POST_GELU, MP_POST_ADD};
        for (int p = 0; p < 3; p++)
            for (size_t pad = 0; pad < 2; pad++, cases++) check_stream_case(kr, posts[p], 2048 + pad);
    }
    mp_cpu_set_isa(best);
    CHECK_SAY(mark,
              "  a half C and a post step's output of 8 MiB or more (streamed): equal to the GEMM in two "
              "halves (%d cases)\n",
              cases);
}

/* B packed once (mp_gemm_pack_b) and read by GEMMs of its first n columns and first k: C equal bit for bit
 * to mp_gemm_in's with B itself, in both layouts of B, an fp32 C and a half C with counts, k a whole number
 * of packed slices and not (then the GEMM packs B itself), op(B)'s value past k infinite, through the
 * context's kernel for the inputs. */
static int check_packed_case(const mp_kernels *kc, mp_dtype in, int tb, size_t K, size_t N, size_t m, size_t n,
                             size_t k, mp_dtype ct) {
    const mp_gemm_kernel *kr = in == MP_BF16 ? kc->gemm_bf16 : kc->gemm;
    const size_t es = mp_format(in)->size, ldb = (tb ? K : N) + 3, lda = k + 5, cs = mp_format(ct)->size;
    void *a = malloc(m * lda * es), *b = malloc((tb ? N : K) * ldb * es), *c0 = malloc(m * n * cs),
         *c1 = malloc(m * n * cs);
    void *data = aligned_alloc(64, (mp_gemm_packed_b_bytes(kr, K, N) + 63) / 64 * 64);
    fill(a, in, m * lda, 0), fill(b, in, (tb ? N : K) * ldb, 0);
    if (k < K) { /* op(B)'s first value past k infinite: 0 x inf would make NaN of a product the GEMM has not */
        const float inf = INFINITY;
        mp_convert((uint8_t *)b + (tb ? k : k * ldb) * es, in, &inf, MP_F32, 1, NULL);
    }
    memset(c0, 0x55, m * n * cs), memset(c1, 0x55, m * n * cs);
    mp_gemm_packed_b pb;
    mp_gemm_pack_b(kr, tb, K, N, b, in, ldb, data, &pb);
    mp_convert_stats s0 = {0}, s1 = {0};
    const mp_status r0 = mp_gemm_in(kc, 0, tb, m, n, k, 0.75f, a, in, lda, b, in, ldb, 0.0f, c0, ct, n, &s0);
    const mp_status r1 = mp_gemm_in_packed(kc, 0, m, n, k, 0.75f, a, in, lda, &pb, 0.0f, c1, ct, n, &s1);
    const int same = r0 == MP_OK && r1 == MP_OK && !memcmp(c0, c1, m * n * cs) && convert_stats_eq(&s0, &s1);
    CHECK(same, "packed B (%s, %s, tb %d, packed %zux%zu, GEMM %zux%zux%zu, %s C): %s", kr->name, mp_format(in)->name,
          tb, K, N, m, n, k, mp_format(ct)->name, same ? "equal" : "differ");
    free(a), free(b), free(c0), free(c1), free(data);
    return 1;
}

static void check_packed_b(void) {
    const long mark = check_failures;
    const mp_isa best = mp_cpu_detected();
    int cases = 0;
    for (int isa = MP_ISA_SCALAR; isa <= (int)best + 1; isa++) { /* and the AMX model */
        mp_cpu_set_isa(isa <= (int)best ? (mp_isa)isa : best);
        const mp_kernels *kc = isa > (int)best ? WITH(&mp_gemm_amx_model) : mp_kernels_current();
        const mp_dtype ins[2] = {MP_F32, MP_BF16};
        for (int f = 0; f < 2; f++) {
            if (isa > (int)best && ins[f] != MP_BF16) continue;
            for (int tb = 0; tb < 2; tb++) {
                /* the attention's forms: K^T (hs x T, prefixes of its columns) and V (T x hs, prefixes of k) */
                cases += check_packed_case(kc, ins[f], tb, 64, 256, 64, 192, 64, MP_F32);
                cases += check_packed_case(kc, ins[f], tb, 256, 64, 64, 64, 128, MP_BF16);
                cases += check_packed_case(kc, ins[f], tb, 256, 64, 37, 64, 256, MP_F16);
                cases += check_packed_case(kc, ins[f], tb, 256, 64, 40, 50, 100, MP_F32);   /* k not whole slices */
                cases += check_packed_case(kc, ins[f], tb, 1100, 40, 33, 40, 1088, MP_F32); /* blocks of k */
                cases += check_packed_case(kc, ins[f], tb, 70, 45, 20, 45, 70, MP_BF16);    /* edges */
                const int threads = mp_get_threads(); /* a GEMM large enough for a team of two */
                mp_set_threads(2);
                cases += check_packed_case(kc, ins[f], tb, 256, 256, 600, 192, 192, MP_BF16);
                mp_set_threads(threads);
            }
        }
    }
    mp_cpu_set_isa(best);
    CHECK_SAY(mark,
              "  B packed once: GEMMs on a prefix of its columns and of k equal to mp_gemm's bit for bit "
              "(%d cases, every path and the AMX model)\n",
              cases);
}

/* Counting zeros into an fp32 C (a weight gradient in fp32 training) keeps
 * the plain GEMM's direct stores: the same bits on every path, with C read
 * or not and k deeper than every block, and the count is that of the +-0 in
 * C (the value stored is the value counted; alpha -1 makes -0 of the zero
 * rows without beta). */
static void check_zeros_keep_bits(void) {
    const long mark = check_failures;
    const mp_isa best = mp_cpu_detected();
    const size_t m = 45, n = 70, k = 5000;
    float *a = malloc(m * k * 4), *b = malloc(k * n * 4), *c0 = malloc(m * n * 4), *c1 = malloc(m * n * 4),
          *c2 = malloc(m * n * 4);
    fill(a, MP_F32, m * k, 0), fill(b, MP_F32, k * n, 0), fill(c0, MP_F32, m * n, 0);
    memset(a, 0, 5 * k * 4), memset(c0, 0, 5 * n * 4); /* rows 0..4: zeros */
    for (int isa = MP_ISA_SCALAR; isa <= (int)best; isa++) {
        mp_cpu_set_isa((mp_isa)isa);
        for (int beta = 0; beta < 2; beta++) {
            memcpy(c1, c0, m * n * 4), memcpy(c2, c0, m * n * 4);
            uint64_t z = 0, want = 0;
            const mp_gemm_epilogue ep = {.bias = NULL, .round_to = MP_F32, .stats = NULL, .zeros = &z};
            mp_gemm(0, 0, m, n, k, -1.0f, a, MP_F32, k, b, MP_F32, n, (float)beta, c1, MP_F32, n, NULL);
            const mp_status rc =
                mp_gemm_ex(0, 0, m, n, k, -1.0f, a, MP_F32, k, b, MP_F32, n, (float)beta, c2, MP_F32, n, &ep);
            for (size_t i = 0; i < m * n; i++) want += c2[i] == 0.0f;
            CHECK(rc == MP_OK && memcmp(c1, c2, m * n * 4) == 0 && z == want && want >= 5 * n,
                  "zeros on %s, beta %d: bits %s, %llu zeros counted, %llu in C", mp_isa_name((mp_isa)isa), beta,
                  memcmp(c1, c2, m * n * 4) ? "differ" : "equal", (unsigned long long)z, (unsigned long long)want);
        }
    }
    mp_cpu_set_isa(best);
    free(a), free(b), free(c0), free(c1), free(c2);
    CHECK_SAY(mark, "  zeros: counted into an fp32 C without changing its bits on every path\n");
}

static void check_threads_shape(shape s);

/* Two threads give the bits of one: a general shape and the batch-256
 * shapes of training (plain, and with beta). */
static void check_threads_deterministic(void) {
    check_threads_shape((shape){0, 1, 333, 257, 1000, 1000, 1000, 257, 1.0f, 0.0f, MP_BF16, MP_BF16, MP_F32});
    check_threads_shape((shape){0, 1, 256, 1024, 784, 784, 784, 1024, 1.0f, 0.0f, MP_BF16, MP_BF16, MP_F32});
    check_threads_shape((shape){0, 1, 256, 1024, 784, 784, 784, 1024, 1.0f, 0.5f, MP_F16, MP_F32, MP_F32});
}

static void check_threads_shape(shape s) {
    bufs b;
    alloc_fill(&s, &b, 0);
    mp_set_threads(1);
    run(&s, &b, 0, NULL);
    float *one = malloc(s.m * s.n * 4);
    memcpy(one, b.c, s.m * s.n * 4);
    mp_set_threads(2);
    run(&s, &b, 0, NULL);
    CHECK(memcmp(one, b.c, s.m * s.n * 4) == 0, "1 and 2 threads differ: %s", shape_str(&s));
    mp_set_threads(0);
    free(one);
    free_bufs(&b);
}

/* The AVX2 kernel blocks k like the portable one (the same KC, the same
 * driver and epilogue): its results equal the portable kernel's bit for bit
 * at any depth, so moving between those two paths changes nothing. */
static void check_avx2_equals_scalar(void) {
    if (mp_cpu_detected() < MP_ISA_AVX2) return;
    const long mark = check_failures;
    const shape deep[] = {
        {0, 1, 37, 45, 1000, 1000, 1000, 45, 1.0f, 0.5f, MP_F32, MP_F32, MP_F32},
        {1, 0, 29, 40, 777, 29, 40, 41, 0.75f, 0.0f, MP_F16, MP_BF16, MP_BF16},
        {0, 0, 50, 33, 600, 600, 33, 33, 1.0f, 1.0f, MP_BF16, MP_BF16, MP_F16},
    };
    for (size_t i = 0; i < sizeof deep / sizeof deep[0]; i++) {
        const shape *s = &deep[i];
        bufs b;
        alloc_fill(s, &b, 1);
        const size_t bytes = s->m * s->ldc * mp_format(s->ct)->size;
        void *portable = malloc(bytes);
        mp_convert_stats st[2] = {{0}, {0}};
        mp_cpu_set_isa(MP_ISA_SCALAR);
        run(s, &b, 0, &st[0]);
        memcpy(portable, b.c, bytes);
        mp_cpu_set_isa(MP_ISA_AVX2);
        run(s, &b, 0, &st[1]);
        CHECK(memcmp(portable, b.c, bytes) == 0 && memcmp(&st[0], &st[1], sizeof st[0]) == 0,
              "avx2 differs from the portable kernel: %s", shape_str(s));
        free(portable);
        free_bufs(&b);
    }
    mp_cpu_set_isa(mp_cpu_detected());
    CHECK_SAY(mark, "  avx2: equal to the portable kernel bit for bit beyond KC (k up to 1000)\n");
}

static void check_special(void) {
    /* 1x1x1, k = 0, alpha = 0 with NaN inputs, beta = 0 with NaN in C */
    float a = 3.0f, bb = -2.0f, c = 10.0f;
    CHECK(mp_gemm(0, 0, 1, 1, 1, 1.0f, &a, MP_F32, 1, &bb, MP_F32, 1, 0.5f, &c, MP_F32, 1, NULL) == MP_OK && c == -1.0f,
          "1x1x1: %g", (double)c);
    float cc[4] = {1, 2, 3, 4};
    CHECK(mp_gemm(0, 0, 2, 2, 0, 1.0f, NULL, MP_F32, 0, NULL, MP_F32, 2, 2.0f, cc, MP_F32, 2, NULL) == MP_OK &&
              cc[0] == 2 && cc[3] == 8,
          "k = 0 scales C by beta");
    float an[4] = {NAN, 1, 1, 1}, bn[4] = {1, 1, 1, 1}, cn[4] = {NAN, NAN, 5, 5};
    CHECK(mp_gemm(0, 0, 2, 2, 2, 0.0f, an, MP_F32, 2, bn, MP_F32, 2, 1.0f, cn, MP_F32, 2, NULL) == MP_OK &&
              isnan(cn[0]) && cn[2] == 5,
          "alpha = 0 does not read A");
    float c2[4] = {NAN, NAN, NAN, NAN}, a2[4] = {1, 2, 3, 4}, b2[4] = {1, 0, 0, 1};
    CHECK(mp_gemm(0, 0, 2, 2, 2, 1.0f, a2, MP_F32, 2, b2, MP_F32, 2, 0.0f, c2, MP_F32, 2, NULL) == MP_OK &&
              c2[0] == 1 && c2[3] == 4,
          "beta = 0 overwrites NaN in C");
    /* inf and NaN propagate as IEEE says, on every path */
    for (int half = 0; half < 2; half++) {
        const mp_dtype t = half ? MP_BF16 : MP_F32;
        float ai[4] = {INFINITY, 1, 1, 1}, bi[4] = {1, 0, 1, 1}, ci[4];
        uint16_t ah[4], bh[4];
        mp_convert(ah, MP_BF16, ai, MP_F32, 4, NULL), mp_convert(bh, MP_BF16, bi, MP_F32, 4, NULL);
        const void *pa = half ? (void *)ah : (void *)ai, *pb = half ? (void *)bh : (void *)bi;
        CHECK(mp_gemm(0, 0, 2, 2, 2, 1.0f, pa, t, 2, pb, t, 2, 0.0f, ci, MP_F32, 2, NULL) == MP_OK, "inf gemm");
        /* C[0][0] = inf*1 + 1*1 = inf; C[0][1] = inf*0 + 1*1 = NaN; C[1] = {2, 1} */
        CHECK(isinf(ci[0]) && ci[0] > 0 && isnan(ci[1]) && ci[2] == 2 && ci[3] == 1, "%s inf/NaN: %g %g %g %g",
              mp_format(t)->name, (double)ci[0], (double)ci[1], (double)ci[2], (double)ci[3]);
    }
    /* a half C counts its overflow like mp_convert */
    float big[4] = {300, 300, 300, 300};
    uint16_t h[4];
    mp_convert_stats st = {0};
    CHECK(mp_gemm(0, 0, 2, 2, 2, 1.0f, big, MP_F32, 2, big, MP_F32, 2, 0.0f, h, MP_F16, 2, &st) == MP_OK &&
              st.overflow == 4 && h[0] == 0x7c00,
          "fp16 C overflow counted: %llu", (unsigned long long)st.overflow);
    float tiny[4] = {1e-4f, 1e-4f, 1e-4f, 1e-4f};
    memset(&st, 0, sizeof st);
    mp_gemm(0, 0, 2, 2, 2, 1.0f, tiny, MP_F32, 2, tiny, MP_F32, 2, 0.0f, h, MP_F16, 2, &st);
    CHECK(st.underflow == 4 && h[0] == 0, "2e-8 underflows in fp16 C: %llu", (unsigned long long)st.underflow);
    /* bad arguments */
    CHECK(mp_gemm(0, 0, 2, 2, 2, 1.0f, a2, MP_E4M3, 2, b2, MP_F32, 2, 0.0f, c2, MP_F32, 2, NULL) == MP_EINVAL,
          "e4m3 A");
    CHECK(mp_gemm(0, 0, 2, 3, 2, 1.0f, a2, MP_F32, 2, b2, MP_F32, 2, 0.0f, c2, MP_F32, 2, NULL) == MP_EINVAL &&
              strstr(mp_last_error(), "leading dimension"),
          "ldb < n");
    CHECK(mp_gemm(0, 0, 2, 2, 2, 1.0f, NULL, MP_F32, 2, b2, MP_F32, 2, 0.0f, c2, MP_F32, 2, NULL) == MP_EINVAL,
          "NULL A");
}

/* One TDPBF16PS on a 16 x 16 x 32 block through mp_gemm on the AMX path, or
 * through the model: c = a (16 x 32) b (32 x 16) + 0 with the given pairs in
 * row 0 / column 0 and zeros elsewhere. */
static float one_tile(const mp_gemm_kernel *kr, const float *a_row, const float *b_col, int npairs) {
    uint16_t a[16 * 32] = {0}, b[32 * 16] = {0};
    float c[16 * 16];
    for (int p = 0; p < 2 * npairs; p++) {
        mp_convert(&a[p], MP_BF16, &a_row[p], MP_F32, 1, NULL);
        mp_convert(&b[p * 16], MP_BF16, &b_col[p], MP_F32, 1, NULL);
    }
    const mp_status s =
        kr ? mp_gemm_run(WITH(kr), 0, 0, 16, 16, 32, 1.0f, a, MP_BF16, 32, b, MP_BF16, 16, 0.0f, c, MP_F32, 16, NULL)
           : mp_gemm(0, 0, 16, 16, 32, 1.0f, a, MP_BF16, 32, b, MP_BF16, 16, 0.0f, c, MP_F32, 16, NULL);
    CHECK(s == MP_OK, "one tile: %s", mp_last_error());
    return c[0];
}

/* The AMX kernel: its model (every CPU) within the fp64 bound through the
 * same driver, packing, blocking and edges; the model's arithmetic on cases
 * that tell it from the SDM's pseudo-code; where the CPU has AMX, the real
 * tiles equal the model bit for bit (normal inputs) and give the same hand
 * cases; the AVX-512 packing equals the portable packing. */
static void check_amx(int quick) {
    const long mark = check_failures;
    const int hw = mp_cpu_isa() >= MP_ISA_AMX;
    /* the model on hand cases: run on the model, and on the tiles where present */
    for (int pass = 0; pass < 1 + hw; pass++) {
        const mp_gemm_kernel *kr = pass == 0 ? &mp_gemm_amx_model : NULL;
        const char *who = pass == 0 ? "model" : "AMX";
        /* two products of 2^-24 on 1: (2^-24 + 2^-24) is added, 1 + 2^-23; the SDM's two roundings give 1 */
        float a1[2] = {0x1p-24f, 0x1p-24f}, b1[2] = {1, 1};
        uint16_t a[16 * 32] = {0}, b[32 * 16] = {0};
        float c[16 * 16];
        for (int p = 0; p < 2; p++) {
            mp_convert(&a[p], MP_BF16, &a1[p], MP_F32, 1, NULL);
            mp_convert(&b[p * 16], MP_BF16, &b1[p], MP_F32, 1, NULL);
        }
        for (int i = 0; i < 256; i++) c[i] = 1.0f;
        const mp_status s =
            kr ? mp_gemm_run(WITH(kr), 0, 0, 16, 16, 32, 1.0f, a, MP_BF16, 32, b, MP_BF16, 16, 1.0f, c, MP_F32, 16,
                             NULL)
               : mp_gemm(0, 0, 16, 16, 32, 1.0f, a, MP_BF16, 32, b, MP_BF16, 16, 1.0f, c, MP_F32, 16, NULL);
        CHECK(s == MP_OK && c[0] == 1.0f + 0x1p-23f, "%s: 1 + 2 x 2^-24 = %a", who, (double)c[0]);
        /* even and odd k summed apart: 2^24 (k 0) + 1 (k 1) - 2^24 (k 2) is 1, where k order gives 0 */
        const float a2[4] = {0x1p24f, 1, -0x1p24f, 0}, b2[4] = {1, 1, 1, 1};
        const float r2 = one_tile(kr, a2, b2, 2);
        CHECK(r2 == 1.0f, "%s: even/odd sums: %a, want 1", who, (double)r2);
        /* in k order within each: 1 + 2^-24 + 2^-24 (k 0, 2, 4) stays 1, the odd sum 0 */
        const float a3[6] = {1, 0, 0x1p-24f, 0, 0x1p-24f, 0}, b3[6] = {1, 1, 1, 1, 1, 1};
        const float r3 = one_tile(kr, a3, b3, 3);
        CHECK(r3 == 1.0f, "%s: sequential even sum: %a, want 1", who, (double)r3);
        /* a bf16 subnormal input reads as 0 (its product 2^-120 would be normal) */
        const float a4[2] = {0x1p-130f, 0}, b4[2] = {0x1p10f, 0};
        const float r4 = one_tile(kr, a4, b4, 1);
        CHECK(r4 == 0.0f, "%s: subnormal input: %a, want 0", who, (double)r4);
    }
    /* the model through the driver, in row panels and in row blocks: random shapes, edges, k across its KC */
    const mp_gemm_kernel model_blocks = row_blocks_of(&mp_gemm_amx_model, "amx-model-row-blocks");
    forced = &mp_gemm_amx_model;
    for (int t = 0; t < (quick ? 20 : 80); t++) {
        shape s = random_shape();
        s.at = s.bt = MP_BF16;
        forced = t & 1 ? &model_blocks : &mp_gemm_amx_model;
        if (!(s.alpha == 0.0f && s.beta == 0.0f)) check_shape(&s, 0, t % 5 == 0);
    }
    const shape edges[] = {
        {0, 1, 33, 47, MP_AMX_KC + 1, MP_AMX_KC + 1, MP_AMX_KC + 1, 47, 1.0f, 0.0f, MP_BF16, MP_BF16, MP_BF16},
        {1, 0, 97, 31, MP_AMX_KC + 33, 97, 31, 33, 1.0f, 1.0f, MP_BF16, MP_BF16, MP_F32},
        {0, 0, 64, 64, 31, 31, 64, 64, -0.5f, 0.5f, MP_BF16, MP_BF16, MP_F32},
        /* whole slices of k in every block and few columns: A's tiles read in place (micro_rows), the
         * last 4 rows packed */
        {0, 0, 100, 200, 2 * MP_AMX_KC + 96, 2 * MP_AMX_KC + 104, 200, 200, 1.0f, 0.0f, MP_BF16, MP_BF16, MP_BF16},
        /* wider than MP_AMX_ROWS_MAX_N: A read in place in row panels, packed in row blocks */
        {0, 1, 64, MP_AMX_ROWS_MAX_N + 88, 96, 96, 96, MP_AMX_ROWS_MAX_N + 88, 1.0f, 0.0f, MP_BF16, MP_BF16, MP_BF16},
    };
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
        forced = &mp_gemm_amx_model;
        check_shape(&edges[i], 0, 0);
        forced = &model_blocks;
        check_shape(&edges[i], 0, 0);
    }
    forced = NULL;
    /* the real tiles against the model, bit for bit (no subnormal inputs: fill(.., 0)), each in the other's
     * order: the tiles in row panels against the model in row blocks, then the reverse */
#ifdef MP_X86
    const mp_gemm_kernel amx_blocks = row_blocks_of(&mp_gemm_amx, "amx-row-blocks");
#endif
    if (hw) {
        for (int t = 0; t < (quick ? 20 : 80); t++) {
            shape s = random_shape();
            s.at = s.bt = MP_BF16;
            if (t < 4) s.m = 100 + rnd() % 200, s.n = 50 + rnd() % 300, s.k = 700 + rnd() % 900;
            if (t < 2) s.ta = 0, s.k = s.k / MP_AMX_KB * MP_AMX_KB; /* A's tiles read in place */
            s.lda = s.ta ? s.m : s.k, s.ldb = s.tb ? s.k : s.n, s.ldc = s.n;
            bufs b;
            alloc_fill(&s, &b, 0);
            const size_t bytes = s.m * s.ldc * mp_format(s.ct)->size;
            mp_convert_stats st[2] = {{0}, {0}};
            void *tiles = malloc(bytes);
#ifdef MP_X86
            forced = t & 1 ? &amx_blocks : NULL;
#endif
            run(&s, &b, 0, &st[0]);
            memcpy(tiles, b.c, bytes);
            forced = t & 1 ? &mp_gemm_amx_model : &model_blocks;
            run(&s, &b, 0, &st[1]);
            forced = NULL;
            const int eq = memcmp(tiles, b.c, bytes) == 0 && memcmp(&st[0], &st[1], sizeof st[0]) == 0;
            CHECK(eq, "AMX differs from its model: %s", shape_str(&s));
            free(tiles);
            free_bufs(&b);
        }
    }
#ifdef MP_X86
    /* the AVX-512 packing against the portable packing */
    long packs = 0;
    if (mp_cpu_detected() >= MP_ISA_AVX512) {
        enum { LD = 200 };
        uint16_t *src = malloc(LD * LD * 2), *p1 = malloc(64 * 1024 * 2), *p2 = malloc(64 * 1024 * 2);
        for (size_t i = 0; i < LD * LD; i++) src[i] = (uint16_t)rnd();
        for (int t = 0; t < 400; t++) {
            const int trans = t & 1, isb = (t >> 1) & 1;
            const size_t w = 1 + rnd() % 32, kc = 1 + rnd() % 100, p0 = rnd() % 50, w0 = rnd() % 50;
            const size_t bytes = (kc + 31) / 32 * 32 * 32 * 2;
            memset(p1, 0xa5, bytes + 64), memset(p2, 0x5a, bytes + 64);
            if (isb) {
                mp_gemm_amx.pack_b(p1, src, MP_BF16, LD, trans, p0, kc, w0, w);
                mp_gemm_amx_model.pack_b(p2, src, MP_BF16, LD, trans, p0, kc, w0, w);
            } else {
                mp_gemm_amx.pack_a(p1, src, MP_BF16, LD, trans, w0, w, p0, kc);
                mp_gemm_amx_model.pack_a(p2, src, MP_BF16, LD, trans, w0, w, p0, kc);
            }
            CHECK(memcmp(p1, p2, bytes) == 0, "AMX pack_%c (trans %d, %zu lines, kc %zu) differs from the portable one",
                  isb ? 'b' : 'a', trans, w, kc);
            packs++;
        }
        free(src), free(p1), free(p2);
    }
#else
    const long packs = 0;
#endif
    CHECK_SAY(mark,
              "  amx: %s; the model within the fp64 bound (random shapes, edges, k past %d); %s; %ld packings "
              "equal to the portable ones\n",
              hw ? "ran on AMX tiles and on the C model of the tiles"
                 : "no AMX on this CPU: ran on the C model of the tiles only",
              MP_AMX_KC, hw ? "the tiles equal the model bit for bit" : "tiles not run", packs);
}

/* The AMX model's two loop orders give the same bits and counts: row panels against row blocks on an fp32
 * C written straight from the tiles (one block of k, no epilogue), a bf16 C over two column blocks (n past
 * the kernel's nc), and a transposed A over blocks of k into C read with beta. */
static void check_amx_orders(void) {
    const long mark = check_failures;
    const mp_gemm_kernel blocks = row_blocks_of(&mp_gemm_amx_model, "amx-model-row-blocks");
    const struct {
        int ta, counted;
        size_t m, n, k;
        float beta;
        mp_dtype ct;
    } cases[] = {{0, 0, 70, 100, 96, 0.0f, MP_F32},
                 {0, 0, 45, 47, 40, 0.5f, MP_F32},
                 {0, 1, 32, MP_AMX_NC + 28, 32, 0.0f, MP_BF16},
                 {1, 1, 50, 80, MP_AMX_KC + 300, 0.5f, MP_F32}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const size_t m = cases[i].m, n = cases[i].n, k = cases[i].k, es = mp_format(cases[i].ct)->size;
        uint16_t *a = malloc(m * k * 2), *b = malloc(k * n * 2);
        void *c0 = malloc(m * n * es), *c1 = malloc(m * n * es);
        fill(a, MP_BF16, m * k, 0), fill(b, MP_BF16, k * n, 0), fill(c0, cases[i].ct, m * n, 0);
        memcpy(c1, c0, m * n * es);
        mp_convert_stats st[2] = {{0}, {0}};
        const mp_gemm_epilogue e0 = {.stats = cases[i].counted ? &st[0] : NULL},
                               e1 = {.stats = cases[i].counted ? &st[1] : NULL};
        const size_t lda = cases[i].ta ? m : k;
        const mp_status r0 = mp_gemm_run(WITH(&mp_gemm_amx_model), cases[i].ta, 1, m, n, k, 1.0f, a, MP_BF16, lda, b,
                                         MP_BF16, k, cases[i].beta, c0, cases[i].ct, n, &e0),
                        r1 = mp_gemm_run(WITH(&blocks), cases[i].ta, 1, m, n, k, 1.0f, a, MP_BF16, lda, b, MP_BF16, k,
                                         cases[i].beta, c1, cases[i].ct, n, &e1);
        CHECK(r0 == MP_OK && r1 == MP_OK && memcmp(c0, c1, m * n * es) == 0 && convert_stats_eq(&st[0], &st[1]),
              "AMX model, row panels against row blocks: %zux%zux%zu%s -> %s differs", m, n, k,
              cases[i].ta ? " (A transposed)" : "", mp_format(cases[i].ct)->name);
        free(a), free(b), free(c0), free(c1);
    }
    CHECK_SAY(mark,
              "  amx model: row panels equal row blocks bit for bit (C written from the tiles, two column blocks, "
              "blocks of k)\n");
}

/* The outputs agree when k spans several blocks of the kernel's kc: on each
 * path (and the AMX model), with edges in m and n, a bf16 C is the rounding
 * of the fp32 C the same kernel writes without an epilogue, and an fp32 C
 * with counts (through the epilogue) equals the one without (alpha and beta
 * applied alike), on one thread and two. */
static void check_blocks_of_k(void) {
    const long mark = check_failures;
    const mp_isa best = mp_cpu_detected();
    int cases = 0;
    const mp_gemm_kernel model_blocks = row_blocks_of(&mp_gemm_amx_model, "amx-model-row-blocks");
    for (int isa = MP_ISA_SCALAR; isa <= (int)best + 2; isa++) { /* the AMX model in both orders */
        mp_cpu_set_isa(isa <= (int)best ? (mp_isa)isa : best);
        const mp_gemm_kernel *kr = isa <= (int)best       ? mp_kernels_current()->gemm_bf16
                                   : isa == (int)best + 1 ? &mp_gemm_amx_model
                                                          : &model_blocks;
        const size_t dims[][2] = {{70, 45}, {33, 100}};
        for (size_t d = 0; d < 2; d++) {
            const size_t m = dims[d][0], n = dims[d][1], k = 2 * kr->kc + 37, mn = m * n;
            uint16_t *a = malloc(m * k * 2), *b = malloc(k * n * 2), *h = malloc(mn * 2);
            float *c0 = malloc(mn * 4), *c1 = malloc(mn * 4), *x = malloc(mn * 4);
            fill(a, MP_BF16, m * k, 0), fill(b, MP_BF16, k * n, 0), fill(x, MP_F32, mn, 0);
            memcpy(c0, x, mn * 4), memcpy(c1, x, mn * 4);
            mp_set_threads(1 + (int)d);
            mp_convert_stats st = {0};
            const mp_gemm_epilogue plain = {.round_to = MP_F32}, counted = {.round_to = MP_F32, .stats = &st};
            CHECK(mp_gemm_run(WITH(kr), 0, 1, m, n, k, -0.5f, a, MP_BF16, k, b, MP_BF16, k, 0.75f, c0, MP_F32, n,
                              &plain) == MP_OK &&
                      mp_gemm_run(WITH(kr), 0, 1, m, n, k, -0.5f, a, MP_BF16, k, b, MP_BF16, k, 0.75f, c1, MP_F32, n,
                                  &counted) == MP_OK &&
                      mp_gemm_run(WITH(kr), 0, 1, m, n, k, 1.0f, a, MP_BF16, k, b, MP_BF16, k, 0.0f, h, MP_BF16, n,
                                  &plain) == MP_OK &&
                      mp_gemm_run(WITH(kr), 0, 1, m, n, k, 1.0f, a, MP_BF16, k, b, MP_BF16, k, 0.0f, x, MP_F32, n,
                                  &plain) == MP_OK,
                  "blocks of k on %s: %s", kr->name, mp_last_error());
            long diff = 0;
            for (size_t i = 0; i < mn; i++)
                diff += h[i] != mp_f32_to_bf16(x[i]) || mp_f32_bits(c0[i]) != mp_f32_bits(c1[i]);
            CHECK(diff == 0 && st.amax > 0, "%s, %zux%zux%zu: %ld elements differ between the outputs", kr->name, m, n,
                  k, diff);
            free(a), free(b), free(h), free(c0), free(c1), free(x);
            cases++;
        }
    }
    mp_set_threads(0);
    mp_cpu_set_isa(best);
    CHECK_SAY(mark,
              "  k across blocks of kc: bf16 C = the fp32 C rounded; fp32 C alike with and without counts (%d "
              "cases, every path and the AMX model in both orders)\n",
              cases);
}

/* a_row_sums (a weight gradient's bias gradient): each row of op(A) summed
 * in k order in fp32 from +0 and added to the value there, the bits of that
 * loop on every path and the AMX model, for transposed and plain A of each
 * format, k across blocks of kc, columns across blocks of nc (several
 * packings of each row block), one thread and two, and without products
 * (alpha 0, n 0); C as without the sums. */
static void check_row_sums(void) {
    const long mark = check_failures;
    const mp_isa best = mp_cpu_detected();
    int cases = 0;
    for (int isa = MP_ISA_SCALAR; isa <= (int)best + 1; isa++) {
        mp_cpu_set_isa(isa <= (int)best ? (mp_isa)isa : best);
        const int model = isa > (int)best;
        for (int f = 0; f < (model ? 1 : 3); f++) { /* A bf16 (the bf16 kernel), fp16 or fp32 (the fp32 kernel) */
            const mp_dtype at = f == 0 ? MP_BF16 : f == 1 ? MP_F16 : MP_F32, bt = f == 0 ? MP_BF16 : MP_F32;
            const mp_gemm_kernel *kr = model    ? &mp_gemm_amx_model
                                       : f == 0 ? mp_kernels_current()->gemm_bf16
                                                : mp_kernels_current()->gemm;
            /* c 0: A transposed; 1: plain; 2: deep k, columns across blocks of nc, two threads; 3: alpha 0; 4: n 0 */
            for (int c = 0; c < 5; c++) {
                if (model && c == 2) continue; /* the model's products are too slow for that depth */
                const int ta = c != 1;
                const size_t m = c == 2 ? 20 : 70, k = c == 2 ? 16384 : 2 * kr->kc + 37;
                const size_t n = c == 4 ? 0 : c == 2 ? (kr->esize == 2 ? 600 : 300) : 45, lda = (ta ? m : k) + 3;
                mp_set_threads(c == 2 ? 2 : 1);
                void *a = malloc((ta ? k : m) * lda * 4), *b = malloc(k * n * 4 + 4);
                float *c0 = malloc(m * n * 4 + 4), *c1 = malloc(m * n * 4 + 4), *got = malloc(m * 4),
                      *want = malloc(m * 4);
                fill(a, at, (ta ? k : m) * lda, 0), fill(b, bt, k * n, 0), fill(got, MP_F32, m, 0);
                memcpy(want, got, m * 4);
                for (size_t i = 0; i < m; i++) {
                    float sum = 0.0f;
                    for (size_t p = 0; p < k; p++) sum += elem_f32(a, at, ta ? p * lda + i : i * lda + p);
                    want[i] += sum;
                }
                const float alpha = c == 3 ? 0.0f : 1.0f;
                const mp_gemm_epilogue sums = {.a_row_sums = got}, plain = {0};
                CHECK(mp_gemm_run(WITH(kr), ta, 0, m, n, k, alpha, a, at, lda, b, bt, n, 0.0f, c0, MP_F32, n, &sums) ==
                              MP_OK &&
                          (c || mp_gemm_run(WITH(kr), ta, 0, m, n, k, alpha, a, at, lda, b, bt, n, 0.0f, c1, MP_F32, n,
                                            &plain) == MP_OK),
                      "row sums on %s: %s", kr->name, mp_last_error());
                long diff = 0;
                for (size_t i = 0; i < m; i++) diff += mp_f32_bits(got[i]) != mp_f32_bits(want[i]);
                CHECK(diff == 0, "row sums on %s (%s A%s, %zux%zux%zu, alpha %g): %ld of %zu differ", kr->name,
                      mp_format(at)->name, ta ? "t" : "", m, n, k, (double)alpha, diff, m);
                CHECK(c || memcmp(c0, c1, m * n * 4) == 0, "row sums on %s change C", kr->name);
                free(a), free(b), free(c0), free(c1), free(got), free(want);
                cases++;
            }
        }
    }
    mp_set_threads(0);
    mp_cpu_set_isa(best);
    const float one = 1.0f;
    float out = 0.0f;
    const mp_gemm_epilogue bad = {.a_row_sums = &out};
    CHECK(mp_gemm_ex(1, 0, 1, 0, 1, 1.0f, NULL, MP_F32, 1, NULL, MP_F32, 1, 0.0f, &out, MP_F32, 1, &bad) == MP_EINVAL &&
              mp_gemm_ex(1, 0, 1, 0, 1, 1.0f, &one, MP_F32, 1, NULL, MP_F32, 1, 0.0f, &out, MP_F32, 1, &bad) == MP_OK &&
              out == 1.0f,
          "row sums of a NULL A refused, of an A with n 0 taken: %g", (double)out);
    CHECK_SAY(mark,
              "  a_row_sums: op(A)'s rows summed in k order in fp32, bit for bit (%d cases: A transposed and plain, "
              "every format, blocks of k and of columns, alpha 0, n 0; every path and the AMX model)\n",
              cases);
}

int main(int argc, char **argv) {
    check_special();
    check_paths(test_quick(argc, argv));
    check_threads_deterministic();
    check_avx2_equals_scalar();
    check_amx(test_quick(argc, argv));
    check_amx_orders();
    check_epilogue();
    check_post();
    check_stream();
    check_packed_b();
    check_zeros_keep_bits();
    check_blocks_of_k();
    check_row_sums();
    return check_report("test_gemm");
}
