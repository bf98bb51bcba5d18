/* test_probe.c - the recipe probe: mp_qgemm_probe's sums against the same
 * quantities computed here in double from mp_qoperand's operands, and the
 * GPT's probe: training bit for bit as without it, every bf16 Linear GEMM
 * measured in each direction, a layer under a recipe of its own left out,
 * and NVFP4 measured coarser than fp8 on every GEMM. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "internal.h"

static const char *const recipes[] = {"fp8-delayed", "fp8-current", "mxfp8", "nvfp4"};

static float urand(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xffffff) / 16777216.0f - 0.5f;
}

/* 1. mp_qgemm_probe on a 48 x 40 x 64 GEMM (trans_b, as a forward) and a
 * transposed-A one (as a weight gradient), against the sums from operands
 * quantized here by mp_qoperand with tensors in the same state. */
static void check_sums(const char *name, int trans_a) {
    enum { M = 48, N = 40, K = 64 };
    mp_recipe r;
    CHECK(mp_recipe_parse(name, &r) == MP_OK, "%s", name);
    uint64_t s = 11;
    float a32[M * K], b32[N * K];
    uint16_t a16[M * K], b16[N * K];
    for (int i = 0; i < M * K; i++) a32[i] = urand(&s) * (i % 7 == 0 ? 64.0f : 1.0f), a16[i] = mp_f32_to_bf16(a32[i]);
    for (int i = 0; i < N * K; i++) b32[i] = urand(&s) * 0.05f, b16[i] = mp_f32_to_bf16(b32[i]);
    /* A as stored: M x K, or K x M when trans_a (then a16 holds its transpose's values) */
    const int ta = trans_a, tb = !trans_a;
    const size_t ra = ta ? K : M, ca = ta ? M : K, rb = tb ? N : K, cb = tb ? K : N;
    mp_qtensor qa, qb, qa2, qb2;
    const mp_qrole role_a = ta ? MP_QROLE_GRAD : MP_QROLE_INPUT, role_b = ta ? MP_QROLE_INPUT : MP_QROLE_WEIGHT;
    CHECK(mp_qtensor_init(&qa, &r, role_a, 5) == MP_OK && mp_qtensor_init(&qb, &r, role_b, 6) == MP_OK &&
              mp_qtensor_init(&qa2, &r, role_a, 5) == MP_OK && mp_qtensor_init(&qb2, &r, role_b, 6) == MP_OK,
          "init");
    mp_qtensor_begin(&qa, 1), mp_qtensor_begin(&qb, 1), mp_qtensor_begin(&qa2, 1), mp_qtensor_begin(&qb2, 1);
    uint16_t wa[M * K], wb[N * K], wa2[M * K], wb2[N * K];
    float scratch[2 * M * N];
    mp_qprobe p;
    memset(&p, 0, sizeof p);
    /* B's source: the fp32 values (a weight's master) where B is a weight, else its bf16 values */
    const void *bsrc = tb ? (const void *)b32 : (const void *)b16;
    const mp_dtype bst = tb ? MP_F32 : MP_BF16;
    CHECK(mp_qgemm_probe(&r, ta, tb, M, N, K, a16, MP_BF16, ca, a16, MP_BF16, ca, &qa, wa, b16, MP_BF16, cb, bsrc, bst,
                         cb, &qb, wb, scratch, &p) == MP_OK,
          "%s: probe: %s", name, mp_last_error());
    float fa, fb;
    CHECK(mp_qoperand(wa2, ca, &fa, a16, MP_BF16, ca, ra, ca, ta, &r, &qa2) == MP_OK &&
              mp_qoperand(wb2, cb, &fb, bsrc, bst, cb, rb, cb, !tb, &r, &qb2) == MP_OK,
          "%s: qoperand", name);
    CHECK(!memcmp(wa, wa2, sizeof wa) && !memcmp(wb, wb2, sizeof wb), "%s: the probe's operands are mp_qoperand's",
          name);
    /* the sums in double */
    double od2 = 0, or2 = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double q = 0, x = 0;
            for (int k = 0; k < K; k++) {
                const size_t ia = ta ? (size_t)k * ca + i : (size_t)i * ca + k;
                const size_t ib = tb ? (size_t)j * cb + k : (size_t)k * cb + j;
                q += (double)mp_bf16_to_f32(wa2[ia]) * fa * mp_bf16_to_f32(wb2[ib]) * fb;
                x += (double)mp_bf16_to_f32(a16[ia]) * mp_bf16_to_f32(b16[ib]);
            }
            od2 += (q - x) * (q - x), or2 += x * x;
        }
    const double out = sqrt(od2 / or2), got = mp_qprobe_error(&p, -1);
    CHECK(p.calls == 1 && fabs(got - out) <= 1e-3 * out && out > 0, "%s: product error %g, expected %g", name, got,
          out);
    /* NVFP4's Hadamard transform: along the reduction, on the operands that are not weights, whole blocks */
    const int nv = r.kind == MP_RECIPE_NVFP4 && r.nvfp4_rht;
    const int rht[2] = {nv && ta && role_a != MP_QROLE_WEIGHT && ra % 16 == 0,
                        nv && !tb && role_b != MP_QROLE_WEIGHT && rb % 16 == 0};
    for (int o = 0; o < 2; o++) {
        const uint16_t *w = o ? wb2 : wa2;
        const float f = o ? fb : fa;
        const size_t n = o ? (size_t)N * K : (size_t)M * K;
        double d2 = 0, r2 = 0;
        for (size_t i = 0; i < n; i++) {
            const double x = o ? (tb ? (double)b32[i] : mp_bf16_to_f32(b16[i])) : mp_bf16_to_f32(a16[i]);
            const double d = (double)mp_bf16_to_f32(w[i]) * f - x;
            d2 += d * d, r2 += x * x;
        }
        const double want = sqrt(d2 / r2), e = mp_qprobe_error(&p, o);
        if (rht[o]) CHECK(p.transformed[o] == 1 && isnan(e), "%s: a transformed operand has no error (%g)", name, e);
        else
            CHECK(p.transformed[o] == 0 && fabs(e - want) <= 1e-9 * want && want > 0,
                  "%s: operand %d error %g, expected %g", name, o, e, want);
        CHECK(p.op_n[o] == n, "%s: operand %d: %llu elements", name, o, (unsigned long long)p.op_n[o]);
    }
    CHECK(p.flushed[0] == qa2.stats.flushed && p.saturated[0] == qa2.stats.saturated &&
              p.flushed[1] == qb2.stats.flushed && p.saturated[1] == qb2.stats.saturated,
          "%s: the counts are the tensors'", name);
    printf("  %-12s %s: product %.4g, operands %.4g / %.4g\n", name, ta ? "A^T B" : "A B^T", got,
           mp_qprobe_error(&p, 0), mp_qprobe_error(&p, 1));
    mp_qtensor_free(&qa), mp_qtensor_free(&qb), mp_qtensor_free(&qa2), mp_qtensor_free(&qb2);
}

enum { B = 4, T = 16 };

static mp_gpt *make(mp_optim **o, mp_dtype ct) {
    mp_gpt_config c;
    mp_gpt_parse("gpt:2-2-32-16", &c);
    c.vocab_size = 32;
    mp_adamw_config ac = mp_adamw_defaults();
    ac.lr = 1e-2;
    mp_optim_adamw(o, &ac);
    mp_gpt *g = NULL;
    CHECK(mp_gpt_create(&g, &c, ct, MP_MASTER_FP32, B, *o, 5) == MP_OK, "create: %s", mp_last_error());
    return g;
}

/* Three steps; the losses into loss[3]. */
static void train(mp_gpt *g, mp_optim *o, float *loss) {
    int32_t tok[B * T + 1];
    uint64_t s = 3;
    for (int i = 0; i < B * T + 1; i++) tok[i] = (int32_t)((urand(&s) + 0.5f) * 31.99f);
    for (int step = 0; step < 3; step++) {
        CHECK(mp_gpt_train_batch(g, tok, tok + 1, B, T, 1.0f, 0, &loss[step]) == MP_OK, "batch: %s", mp_last_error());
        CHECK(mp_optim_step(o) == MP_OK, "step");
    }
}

/* 2. the GPT's probe */
static void check_gpt(void) {
    mp_optim *o0;
    mp_gpt *g0 = make(&o0, MP_BF16);
    float l0[3];
    train(g0, o0, l0);
    double out[4][2][4][3]; /* recipe, block, Linear, direction */
    for (int k = 0; k < 4; k++) {
        mp_optim *o;
        mp_gpt *g = make(&o, MP_BF16);
        mp_recipe r;
        mp_recipe_parse(recipes[k], &r);
        CHECK(mp_gpt_set_probe(g, &r, 1) == MP_OK, "%s: %s", recipes[k], mp_last_error());
        float l[3];
        train(g, o, l);
        CHECK(!memcmp(l, l0, sizeof l), "%s: the probe changed the losses", recipes[k]);
        long differ = 0;
        for (size_t i = 0; i < mp_optim_count(o); i++) {
            const mp_param *a = mp_optim_param(o, i), *b = mp_optim_param(o0, i);
            differ += a->n != b->n || memcmp(a->master, b->master, a->n * sizeof(float)) != 0;
        }
        CHECK(differ == 0 && mp_optim_count(o) == mp_optim_count(o0), "%s: the probe changed %ld weight tensors",
              recipes[k], differ);
        for (int b = 0; b < 2; b++)
            for (int w = 0; w < 4; w++)
                for (int d = 0; d < 3; d++) {
                    const mp_qprobe *p = mp_gpt_probe(g, b, w, d);
                    out[k][b][w][d] = p ? mp_qprobe_error(p, -1) : NAN;
                    CHECK(p && p->calls == 3 && out[k][b][w][d] > 0 && out[k][b][w][d] < 1,
                          "%s: block %d Linear %d direction %d: %llu calls, product error %g", recipes[k], b, w, d,
                          p ? (unsigned long long)p->calls : 0ull, out[k][b][w][d]);
                }
        CHECK(!mp_gpt_probe(g, 2, 0, 0) && !mp_gpt_probe(g, 0, 4, 0) && !mp_gpt_probe(g, 0, 0, 3), "out of range");
        /* a layer under a recipe of its own is not probed */
        if (k == 3) {
            mp_recipe each[8] = {{0}};
            each[5] = r; /* block 1's attention c_proj */
            CHECK(mp_gpt_set_layer_recipes(g, each, 1) == MP_OK && mp_gpt_set_probe(g, &r, 1) == MP_OK, "%s",
                  mp_last_error());
            train(g, o, l);
            CHECK(mp_gpt_probe(g, 1, 1, 0)->calls == 0 && mp_gpt_probe(g, 1, 0, 0)->calls == 3,
                  "a layer in a recipe is not probed");
        }
        CHECK(mp_gpt_set_probe(g, NULL, 0) == MP_OK && !mp_gpt_probe(g, 0, 0, 0), "probe off");
        mp_gpt_free(g), mp_optim_free(o);
    }
    int coarser = 0;
    for (int b = 0; b < 2; b++)
        for (int w = 0; w < 4; w++)
            for (int d = 0; d < 3; d++) coarser += out[3][b][w][d] > 2 * out[1][b][w][d];
    CHECK(coarser == 24, "nvfp4's product error above twice fp8-current's on %d of 24 GEMMs", coarser);
    printf("  gpt: block 0 c_fc forward: fp8-delayed %.4g, fp8-current %.4g, mxfp8 %.4g, nvfp4 %.4g\n", out[0][0][2][0],
           out[1][0][2][0], out[2][0][2][0], out[3][0][2][0]);
    /* only bf16 with fp32 masters */
    mp_optim *o;
    mp_gpt *g = make(&o, MP_F32);
    mp_recipe r;
    mp_recipe_parse("mxfp8", &r);
    CHECK(mp_gpt_set_probe(g, &r, 1) == MP_EINVAL, "an fp32 model");
    mp_gpt_free(g), mp_optim_free(o);
    mp_gpt_free(g0), mp_optim_free(o0);
}

int main(int argc, char **argv) {
    (void)test_mode(argc, argv);
    for (int k = 0; k < 4; k++) check_sums(recipes[k], 0), check_sums(recipes[k], 1);
    check_gpt();
    return check_report("test_probe");
}
