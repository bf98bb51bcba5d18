/* test_gpt.c - the GPT: gradients of every parameter against central
 * differences of an fp64 forward written here (both GELU forms, the tied
 * head and the position embedding included), accumulation, learning in every
 * precision, per-tensor statistics, thread-count independence, parsing,
 * weights in and out, weight-decay flags, evaluation and next-token logits;
 * and the ops the GPT added (erf GELU, mp_add) against fp64. */
#include <math.h>
#include <unistd.h>

#define PI 3.14159265358979323846

#include "check.h"
#include "internal.h"

static int quick;

static mp_param *param(mp_optim *o, const char *name) {
    for (size_t i = 0; i < mp_optim_count(o); i++)
        if (strcmp(mp_optim_param(o, i)->name, name) == 0) return mp_optim_param(o, i);
    return NULL;
}

static uint64_t rng_state = 12345;
static double urand(void) { /* [0, 1) */
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) * 0x1p-53;
}

static void random_tokens(int32_t *t, size_t n, int V) {
    for (size_t i = 0; i < n; i++) t[i] = (int32_t)(urand() * V);
}

/* ---- the fp64 reference: parameters by registration index (as double) ---- */

typedef struct ref_model {
    mp_gpt_config c;
    size_t np;
    double **p; /* p[i]: parameter i of the optimizer (the GPT's registration order) */
} ref_model;

static ref_model ref_from(const mp_gpt_config *c, mp_optim *o) {
    ref_model r = {*c, mp_optim_count(o), NULL};
    r.p = calloc(r.np, sizeof *r.p);
    for (size_t i = 0; i < r.np; i++) {
        const mp_param *p = mp_optim_param(o, i);
        r.p[i] = malloc(p->n * sizeof(double));
        for (size_t k = 0; k < p->n; k++) r.p[i][k] = p->master[k];
    }
    return r;
}

static void ref_free(ref_model *r) {
    for (size_t i = 0; i < r->np; i++) free(r->p[i]);
    free(r->p);
}

static void ref_linear(double *out, const double *in, const double *W, const double *b, size_t N, size_t I, size_t O) {
    for (size_t n = 0; n < N; n++)
        for (size_t o = 0; o < O; o++) {
            double s = b ? b[o] : 0.0;
            for (size_t i = 0; i < I; i++) s += in[n * I + i] * W[o * I + i];
            out[n * O + o] = s;
        }
}

static void ref_layernorm(double *out, const double *in, const double *w, const double *b, size_t N, size_t C) {
    for (size_t n = 0; n < N; n++) {
        const double *x = in + n * C;
        double m = 0, v = 0;
        for (size_t c = 0; c < C; c++) m += x[c];
        m /= (double)C;
        for (size_t c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
        v /= (double)C;
        for (size_t c = 0; c < C; c++) out[n * C + c] = (x[c] - m) / sqrt(v + 1e-5) * w[c] + b[c];
    }
}

/* Mean cross-entropy of B sequences of T tokens; logits (B T, V) if not NULL. */
static double ref_loss(const ref_model *r, const int32_t *tok, const int32_t *tgt, size_t B, size_t T, double *logits) {
    const size_t C = (size_t)r->c.n_embd, H = (size_t)r->c.n_head, hs = C / H, V = (size_t)r->c.vocab_size, N = B * T;
    const int L = r->c.n_layer;
    double *x = malloc(N * C * 8), *ln = malloc(N * C * 8), *qkv = malloc(N * 3 * C * 8), *y = malloc(N * C * 8),
           *t = malloc(N * C * 8), *fc = malloc(N * 4 * C * 8), *lg = malloc(N * V * 8), *s = malloc(T * 8);
    for (size_t n = 0; n < N; n++)
        for (size_t c = 0; c < C; c++) x[n * C + c] = r->p[0][(size_t)tok[n] * C + c] + r->p[1][(n % T) * C + c];
    for (int l = 0; l < L; l++) {
        double **P = r->p + 2 + 12 * l;
        ref_layernorm(ln, x, P[0], P[1], N, C);
        ref_linear(qkv, ln, P[2], P[3], N, C, 3 * C);
        for (size_t b = 0; b < B; b++)
            for (size_t h = 0; h < H; h++)
                for (size_t i = 0; i < T; i++) {
                    const double *q = qkv + (b * T + i) * 3 * C + h * hs;
                    double mx = -INFINITY, sum = 0;
                    for (size_t j = 0; j <= i; j++) {
                        const double *k = qkv + (b * T + j) * 3 * C + C + h * hs;
                        double d = 0;
                        for (size_t e = 0; e < hs; e++) d += q[e] * k[e];
                        s[j] = d / sqrt((double)hs);
                        mx = fmax(mx, s[j]);
                    }
                    for (size_t j = 0; j <= i; j++) sum += s[j] = exp(s[j] - mx);
                    for (size_t e = 0; e < hs; e++) {
                        double a = 0;
                        for (size_t j = 0; j <= i; j++) a += s[j] / sum * qkv[(b * T + j) * 3 * C + 2 * C + h * hs + e];
                        y[(b * T + i) * C + h * hs + e] = a;
                    }
                }
        ref_linear(t, y, P[4], P[5], N, C, C);
        for (size_t k = 0; k < N * C; k++) x[k] += t[k];
        ref_layernorm(ln, x, P[6], P[7], N, C);
        ref_linear(fc, ln, P[8], P[9], N, C, 4 * C);
        for (size_t k = 0; k < N * 4 * C; k++) {
            const double u = fc[k];
            fc[k] = r->c.gelu == MP_GELU_ERF ? 0.5 * u * (1 + erf(u / sqrt(2.0)))
                                             : 0.5 * u * (1 + tanh(sqrt(2 / PI) * (u + 0.044715 * u * u * u)));
        }
        ref_linear(t, fc, P[10], P[11], N, 4 * C, C);
        for (size_t k = 0; k < N * C; k++) x[k] += t[k];
    }
    ref_layernorm(ln, x, r->p[2 + 12 * L], r->p[3 + 12 * L], N, C);
    ref_linear(lg, ln, r->p[0], NULL, N, C, V);
    double total = 0;
    for (size_t n = 0; n < N && tgt; n++) {
        double mx = -INFINITY, se = 0;
        for (size_t v = 0; v < V; v++) mx = fmax(mx, lg[n * V + v]);
        for (size_t v = 0; v < V; v++) se += exp(lg[n * V + v] - mx);
        total += log(se) + mx - lg[n * V + (size_t)tgt[n]];
    }
    if (logits) memcpy(logits, lg, N * V * 8);
    free(x), free(ln), free(qkv), free(y), free(t), free(fc), free(lg), free(s);
    return total / (double)N;
}

static mp_gpt_config tiny_config(mp_gelu_form gelu) {
    mp_gpt_config c;
    mp_gpt_parse("gpt:2-2-8-5", &c);
    c.vocab_size = 13, c.gelu = gelu;
    return c;
}

/* Sets every master to a random value of a size that makes each term of the
 * model matter (the default initialisation leaves the blocks near identity). */
static void randomize(mp_optim *o) {
    for (size_t i = 0; i < mp_optim_count(o); i++) {
        mp_param *p = mp_optim_param(o, i);
        const int ln = strstr(p->name, "ln_") != NULL && strstr(p->name, "weight") != NULL;
        const double scale = strstr(p->name, "bias") ? 0.2 : strstr(p->name, ".w") ? 1.0 : 0.5;
        for (size_t k = 0; k < p->n; k++)
            p->master[k] = (float)((ln ? 1.0 : 0.0) + scale * (2 * urand() - 1) * (ln ? 0.3 : 1.0));
        if (p->half) mp_convert(p->half, p->half_type, p->master, MP_F32, p->n, NULL);
    }
}

/* 1. every gradient against central differences of the fp64 loss */
/* T beyond the attention's block of query rows (64): every gradient element
 * of the model checked against central differences would take too long,
 * so every `stride`-th is. */
static void check_gradients(mp_gelu_form gelu, size_t T) {
    mp_gpt_config c = tiny_config(gelu);
    if ((size_t)c.block_size < T) c.block_size = (int)T;
    const size_t stride = T > 5 ? 7 : 1, B = T > 5 ? 1 : 3;
    mp_optim *o;
    mp_optim_sgd(&o, NULL);
    mp_gpt *g;
    CHECK(mp_gpt_create(&g, &c, MP_F32, 0, B, o, 7) == MP_OK, "create: %s", mp_last_error());
    randomize(o);
    int32_t *tok = malloc(B * T * sizeof *tok), *tgt = malloc(B * T * sizeof *tgt);
    random_tokens(tok, B * T, c.vocab_size), random_tokens(tgt, B * T, c.vocab_size);
    for (size_t i = 0; i < mp_optim_count(o); i++) /* accumulate = 0 must overwrite these */
        for (size_t k = 0; k < mp_optim_param(o, i)->n; k++) mp_optim_param(o, i)->grad[k] = NAN;
    float loss = 0;
    CHECK(mp_gpt_train_batch(g, tok, tgt, B, T, 1.0f, 0, &loss) == MP_OK, "train: %s", mp_last_error());
    ref_model r = ref_from(&c, o);
    const double l64 = ref_loss(&r, tok, tgt, B, T, NULL);
    CHECK(fabs(loss - l64) <= 2e-6 * fabs(l64), "gelu %d T %zu: loss %.9g vs fp64 %.9g", (int)gelu, T, (double)loss,
          l64);
    long bad = 0, checked = 0;
    double worst = 0;
    for (size_t i = 0; i < r.np; i++) {
        const mp_param *p = mp_optim_param(o, i);
        for (size_t k = i % stride; k < p->n; k += stride) {
            const double keep = r.p[i][k], h = 1e-5;
            r.p[i][k] = keep + h;
            const double up = ref_loss(&r, tok, tgt, B, T, NULL);
            r.p[i][k] = keep - h;
            const double dn = ref_loss(&r, tok, tgt, B, T, NULL);
            r.p[i][k] = keep;
            const double fd = (up - dn) / (2 * h), err = fabs(p->grad[k] - fd) / fmax(1.0, fabs(fd));
            worst = fmax(worst, err);
            checked++;
            if (!(err <= 4e-6)) {
                if (bad++ < 5) fprintf(stderr, "  %s[%zu]: %.9g vs fd %.9g\n", p->name, k, (double)p->grad[k], fd);
            }
        }
    }
    CHECK(bad == 0 && checked > (stride > 1 ? 400 : 1500),
          "gelu %d T %zu: %ld of %ld gradients differ from central differences (worst %.3g)", (int)gelu, T, bad,
          checked, worst);
    if (T < 5) { /* positions never used get a zero gradient */
        const mp_param *wpe = param(o, "transformer.wpe.weight");
        long nz = 0;
        for (size_t k = T * 8; k < wpe->n; k++) nz += wpe->grad[k] != 0.0f;
        CHECK(nz == 0, "unused positions: %ld nonzero gradients", nz);
    }
    printf("gradients (gelu %s, T %zu): %ld checked, worst |g - fd| / max(1, |fd|) = %.2g\n",
           gelu == MP_GELU_ERF ? "erf" : "tanh", T, checked, worst);
    ref_free(&r);
    free(tok), free(tgt);
    mp_gpt_free(g), mp_optim_free(o);
}

/* 1b. fp16, bf16 and pure bf16 gradients are the fp32 ones, to their precision */
static void check_half_gradients(void) {
    const mp_gpt_config c = tiny_config(MP_GELU_TANH);
    enum { B = 3, T = 5 };
    int32_t tok[B * T], tgt[B * T];
    random_tokens(tok, B * T, 13), random_tokens(tgt, B * T, 13);
    mp_optim *o[4];
    mp_gpt *g[4];
    static const mp_dtype cts[4] = {MP_F32, MP_F16, MP_BF16, MP_BF16};
    float loss[4];
    for (int k = 0; k < 4; k++) {
        mp_optim_sgd(&o[k], NULL);
        CHECK(mp_gpt_create(&g[k], &c, cts[k], k == 3, B, o[k], 7) == MP_OK, "create");
        if (k == 0) randomize(o[0]);
        for (size_t i = 0; k && i < mp_optim_count(o[0]); i++) {
            mp_param *p = mp_optim_param(o[k], i);
            const float *w = mp_optim_param(o[0], i)->master;
            if (p->master) memcpy(p->master, w, p->n * 4);
            if (p->half) mp_convert(p->half, p->half_type, w, MP_F32, p->n, NULL);
        }
        CHECK(mp_gpt_train_batch(g[k], tok, tgt, B, T, 1.0f, 0, &loss[k]) == MP_OK, "train");
    }
    static const double tol[4] = {0, 8e-3, 6e-2, 6e-2}; /* ~16 units of roundoff: the randomized weights amplify */
    for (int k = 1; k < 4; k++) {
        CHECK(fabs(loss[k] - loss[0]) < 10 * tol[k] * fabs(loss[0]), "%s%s: loss %g vs fp32 %g",
              mp_format(cts[k])->name, k == 3 ? " pure" : "", (double)loss[k], (double)loss[0]);
        double worst = 0;
        const char *where = "";
        for (size_t i = 0; i < mp_optim_count(o[0]); i++) {
            const mp_param *p = mp_optim_param(o[k], i), *q = mp_optim_param(o[0], i);
            double d = 0, n = 0;
            for (size_t e = 0; e < p->n; e++)
                d += (p->grad[e] - q->grad[e]) * (double)(p->grad[e] - q->grad[e]),
                    n += (double)q->grad[e] * q->grad[e];
            if (n > 0 && sqrt(d / n) > worst) worst = sqrt(d / n), where = q->name;
        }
        CHECK(worst < tol[k], "%s%s: gradients differ from fp32 by %g (relative L2, %s)", mp_format(cts[k])->name,
              k == 3 ? " pure" : "", worst, where);
        printf("gradients in %s%s: relative L2 distance to fp32 at most %.2g (%s)\n", mp_format(cts[k])->name,
               k == 3 ? " pure" : "", worst, where);
    }
    for (int k = 0; k < 4; k++) mp_gpt_free(g[k]), mp_optim_free(o[k]);
}

/* 2. accumulate = 0 over NaN equals zero_grad + accumulate = 1; a second micro-batch adds */
static const mp_tensor_stats *stat(mp_model *m, const char *name) {
    for (size_t i = 0; i < m->ops->nstats(m->impl); i++)
        if (strcmp(m->ops->stats(m->impl, i)->name, name) == 0) return m->ops->stats(m->impl, i);
    return NULL;
}

static void check_accumulate(mp_dtype ct) {
    mp_gpt_config c;
    mp_gpt_parse("gpt:2-2-16-8", &c);
    c.vocab_size = 40;
    enum { B = 3, T = 8 };
    mp_optim *o;
    mp_optim_sgd(&o, NULL);
    mp_gpt *g;
    CHECK(mp_gpt_create(&g, &c, ct, 0, B, o, 3) == MP_OK, "create");
    int32_t t1[B * T], y1[B * T], t2[B * T], y2[B * T];
    random_tokens(t1, B * T, 40), random_tokens(y1, B * T, 40), random_tokens(t2, B * T, 40),
        random_tokens(y2, B * T, 40);
    size_t total = 0;
    for (size_t i = 0; i < mp_optim_count(o); i++) total += mp_optim_param(o, i)->n;
    float *g1 = malloc(total * 4), *g2 = malloc(total * 4), loss;
#define EACH(body)                                       \
    do {                                                 \
        size_t off_ = 0;                                 \
        for (size_t i = 0; i < mp_optim_count(o); i++) { \
            mp_param *p = mp_optim_param(o, i);          \
            body;                                        \
            off_ += p->n;                                \
            (void)off_;                                  \
        }                                                \
    } while (0)
    EACH(for (size_t k = 0; k < p->n; k++) p->grad[k] = NAN);
    CHECK(mp_gpt_train_batch(g, t2, y2, B, T, 1.0f, 0, &loss) == MP_OK, "batch 2");
    EACH(memcpy(g2 + off_, p->grad, p->n * 4));
    EACH(for (size_t k = 0; k < p->n; k++) p->grad[k] = NAN);
    CHECK(mp_gpt_train_batch(g, t1, y1, B, T, 1.0f, 0, &loss) == MP_OK, "batch 1");
    EACH(memcpy(g1 + off_, p->grad, p->n * 4));
    mp_optim_zero_grad(o);
    mp_model m = mp_gpt_model(g);
    m.ops->reset_stats(m.impl);
    CHECK(mp_gpt_train_batch(g, t1, y1, B, T, 1.0f, 1, &loss) == MP_OK, "accumulate");
    long differ = 0, not_added = 0, nonzero = 0;
    EACH(differ += memcmp(g1 + off_, p->grad, p->n * 4) != 0);
    float amax1[4 * 2]; /* the block weights' gradients' amaxes after the first micro-batch */
    const char *const wn[4] = {"attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"};
    for (int l = 0; l < 2; l++)
        for (int w = 0; w < 4; w++) {
            char pn[96];
            snprintf(pn, sizeof pn, "transformer.h.%d.%s", l, wn[w]);
            amax1[l * 4 + w] = mp_amax(param(o, pn)->grad, MP_F32, param(o, pn)->n);
        }
    CHECK(mp_gpt_train_batch(g, t2, y2, B, T, 1.0f, 1, &loss) == MP_OK, "accumulate 2");
    long bad_amax = 0; /* each micro-batch's gradient as accumulated so far: the larger amax */
    for (int l = 0; l < 2; l++)
        for (int w = 0; w < 4; w++) {
            char pn[96], sn[96];
            snprintf(pn, sizeof pn, "transformer.h.%d.%s", l, wn[w]);
            snprintf(sn, sizeof sn, "h.%d.%s", l, wn[w]);
            const float a2 = mp_amax(param(o, pn)->grad, MP_F32, param(o, pn)->n);
            bad_amax += stat(&m, sn)->bwd.amax != (a2 > amax1[l * 4 + w] ? a2 : amax1[l * 4 + w]);
        }
    CHECK(bad_amax == 0, "%s: %ld weights' accumulated gradient amax differ", mp_format(ct)->name, bad_amax);
    EACH({
        float big = 0;
        for (size_t k = 0; k < p->n; k++) big = fmaxf(big, fabsf(g1[off_ + k]) + fabsf(g2[off_ + k]));
        for (size_t k = 0; k < p->n; k++) {
            nonzero += g1[off_ + k] != 0.0f;
            not_added += !(fabsf(p->grad[k] - (g1[off_ + k] + g2[off_ + k])) <= 1e-6f * big);
        }
    });
    CHECK(
        differ == 0 && not_added == 0 && nonzero > (long)total / 2,
        "%s: accumulate 0 vs zero_grad + 1: %ld tensors differ; second micro-batch not added: %ld of %zu (%ld nonzero)",
        mp_format(ct)->name, differ, not_added, total, nonzero);
#undef EACH
    free(g1), free(g2);
    mp_gpt_free(g), mp_optim_free(o);
}

/* 3. a repeated batch is learnt in every precision */
static void check_learns(mp_dtype ct, int pure) {
    mp_gpt_config c;
    mp_gpt_parse("gpt:2-2-32-16", &c);
    c.vocab_size = 32;
    enum { B = 4, T = 16 };
    mp_adamw_config ac = mp_adamw_defaults();
    ac.lr = 1e-2;
    mp_optim *o;
    mp_optim_adamw(&o, &ac);
    mp_gpt *g;
    CHECK(mp_gpt_create(&g, &c, ct, pure, B, o, 5) == MP_OK, "create: %s", mp_last_error());
    int32_t tok[B * T + 1];
    random_tokens(tok, B * T + 1, 32);
    mp_scaler sc;
    mp_scaler_config scfg = mp_scaler_defaults();
    scfg.dynamic = 0, scfg.init_scale = ct == MP_F16 ? 1024.0f : 1.0f;
    mp_scaler_init(&sc, &scfg);
    float first = 0, last = 0;
    for (int step = 0; step < 30; step++) {
        float loss;
        CHECK(mp_gpt_train_batch(g, tok, tok + 1, B, T, mp_scaler_get_scale(&sc), 0, &loss) == MP_OK, "batch: %s",
              mp_last_error());
        int inf = 0;
        CHECK(mp_scaler_step(&sc, o, &inf) == MP_OK && !inf, "step");
        mp_scaler_update(&sc, inf);
        if (step == 0) first = loss;
        last = loss;
    }
    printf("learns %s%s: loss %.4f -> %.4f\n", mp_format(ct)->name, pure ? " pure" : "", (double)first, (double)last);
    CHECK(first > 3.0f && last < 0.1f * first, "%s%s: loss %g -> %g", mp_format(ct)->name, pure ? " pure" : "",
          (double)first, (double)last);
    mp_gpt_free(g), mp_optim_free(o);
}

/* 4. per-tensor statistics: names, underflow of tiny gradients, overflow of huge activations */
static void check_stats(void) {
    const mp_gpt_config c = tiny_config(MP_GELU_TANH);
    enum { B = 3, T = 5 };
    int32_t tok[B * T], tgt[B * T];
    random_tokens(tok, B * T, 13), random_tokens(tgt, B * T, 13);
    for (int k = 0; k < 2; k++) {
        const mp_dtype ct = k ? MP_F16 : MP_F32;
        mp_optim *o;
        mp_optim_sgd(&o, NULL);
        mp_gpt *g;
        CHECK(mp_gpt_create(&g, &c, ct, 0, B, o, 1) == MP_OK, "create");
        mp_model m = mp_gpt_model(g);
        CHECK(strcmp(m.ops->kind, "gpt") == 0 && m.ops->nstats(m.impl) == 5 + 15 * 2, "%zu entries",
              m.ops->nstats(m.impl));
        static const char *const names[] = {"wte",
                                            "h.0.ln_1",
                                            "h.0.attn.c_attn",
                                            "h.0.attn.att",
                                            "h.0.attn.y",
                                            "h.0.attn.c_proj",
                                            "h.0.res_1",
                                            "h.0.ln_2",
                                            "h.0.mlp.c_fc",
                                            "h.0.mlp.gelu",
                                            "h.0.mlp.c_proj",
                                            "h.1.res_2",
                                            "ln_f",
                                            "lm_head",
                                            "wte.weight",
                                            "wpe.weight",
                                            "h.0.attn.c_attn.weight",
                                            "h.1.attn.c_proj.weight",
                                            "h.1.mlp.c_fc.weight",
                                            "h.1.mlp.c_proj.weight"};
        for (size_t i = 0; i < sizeof names / sizeof *names; i++) CHECK(stat(&m, names[i]), "no entry %s", names[i]);
        const float scale = k ? 1e-12f : 1.0f;
        float loss;
        mp_batch b = {B, T, NULL, tok, tgt, 0};
        m.ops->reset_stats(m.impl);
        CHECK(m.ops->train_batch(m.impl, &b, scale, 0, &loss) == MP_OK, "train");
        CHECK(stat(&m, "wte")->fwd_elements == B * T * 8 && stat(&m, "lm_head")->bwd_elements == B * T * 13 &&
                  stat(&m, "h.0.attn.att")->fwd_elements == B * 2 * T * (T + 1) / 2 &&
                  stat(&m, "h.1.mlp.c_fc.weight")->bwd_elements == 32 * 8,
              "element counts");
        CHECK(stat(&m, "wte.weight")->has_wgrad && stat(&m, "h.1.mlp.c_proj.weight")->has_wgrad &&
                  !stat(&m, "wpe.weight")->has_wgrad && !stat(&m, "lm_head")->has_wgrad,
              "has_wgrad");
        if (ct == MP_F16) { /* a scale where some weight-gradient values underflow (at 1e-12 all are 0 upstream) */
            m.ops->reset_stats(m.impl);
            CHECK(m.ops->train_batch(m.impl, &b, 0x1p-14f, 0, &loss) == MP_OK, "train");
        }
        /* the block weights' gradients are their GEMMs' results (accumulate 0),
         * stored as rounded: their zeros are the dead values and the lost ones */
        uint64_t lost = 0, dead = 0, zeros = 0;
        for (size_t i = 0; i < m.ops->nstats(m.impl); i++) {
            const mp_tensor_stats *e = m.ops->stats(m.impl, i);
            if (strncmp(e->name, "h.", 2) != 0 || !strstr(e->name, ".weight")) continue;
            char pn[96];
            snprintf(pn, sizeof pn, "transformer.%s", e->name);
            const mp_param *p = param(o, pn);
            for (size_t j = 0; j < p->n; j++) zeros += p->grad[j] == 0.0f;
            CHECK(e->has_wgrad && e->wgrad_elements == p->n && e->wgrad_lost == e->bwd.underflow, "%s: counts",
                  e->name);
            CHECK(e->bwd.amax == mp_amax(p->grad, MP_F32, p->n), "%s: amax %g, the gradient's %g", e->name,
                  (double)e->bwd.amax, (double)mp_amax(p->grad, MP_F32, p->n));
            lost += e->wgrad_lost, dead += e->wgrad_dead;
        }
        const mp_param *we = param(o, "transformer.wte.weight"); /* the head's and the embedding rows' sum */
        CHECK(stat(&m, "wte.weight")->bwd.amax == mp_amax(we->grad, MP_F32, we->n), "wte.weight: amax %g, want %g",
              (double)stat(&m, "wte.weight")->bwd.amax, (double)mp_amax(we->grad, MP_F32, we->n));
        CHECK(ct == MP_F32 ? lost == 0 && dead == zeros : lost > 0 && lost + dead == zeros,
              "%s: block weights' gradients: %llu lost, %llu dead, %llu zeros", mp_format(ct)->name,
              (unsigned long long)lost, (unsigned long long)dead, (unsigned long long)zeros);
        if (ct == MP_F16) {
            m.ops->reset_stats(m.impl);
            CHECK(m.ops->train_batch(m.impl, &b, scale, 0, &loss) == MP_OK, "train");
        }
        uint64_t under = 0, fwd_under = 0;
        for (size_t i = 0; i < m.ops->nstats(m.impl); i++)
            under += m.ops->stats(m.impl, i)->bwd.underflow, fwd_under += m.ops->stats(m.impl, i)->fwd.underflow;
        if (ct == MP_F32)
            CHECK(under == 0 && fwd_under == 0, "fp32: %llu underflows", (unsigned long long)(under + fwd_under));
        else
            CHECK(stat(&m, "lm_head")->bwd.underflow > 0 && under >= stat(&m, "lm_head")->bwd.underflow,
                  "fp16 at scale 1e-12: %llu underflows", (unsigned long long)under);
        /* next logits and evaluation do not count */
        m.ops->reset_stats(m.impl);
        float lg[13];
        double ls = 0, n = 0, right = 0;
        CHECK(mp_gpt_next_logits(g, tok, T, lg) == MP_OK && m.ops->eval_batch(m.impl, &b, &ls, &n, &right) == MP_OK,
              "eval");
        CHECK(stat(&m, "wte")->fwd_elements == 0 && n == B * T, "eval counted");
        if (ct == MP_F16) { /* huge embeddings: the logits overflow */
            mp_param *wte = param(o, "transformer.wte.weight");
            for (size_t i = 0; i < wte->n; i++) wte->master[i] = (i * 7 % 3 == 0) ? 1e4f : -1e4f;
            mp_convert(wte->half, MP_F16, wte->master, MP_F32, wte->n, NULL);
            CHECK(m.ops->train_batch(m.impl, &b, 1.0f, 0, &loss) == MP_OK, "train");
            CHECK(stat(&m, "lm_head")->fwd.overflow > 0, "no forward overflow counted");
        }
        mp_model_free(&m);
        mp_optim_free(o);
    }
}

/* 5. bit-identical results on 1 and 2 threads */
static void check_threads(mp_dtype ct, mp_dtype acc) {
    mp_gpt_config c;
    mp_gpt_parse(quick ? "gpt:1-4-64-32" : "gpt:2-4-64-32", &c);
    enum { B = 4, T = 32 };
    int32_t tok[B * T + 1];
    random_tokens(tok, B * T + 1, 256);
    float loss[2];
    float *grads[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
        mp_set_threads(1); /* created for one thread, the second run grows its scratch */
        mp_optim *o;
        mp_optim_sgd(&o, NULL);
        mp_gpt *g;
        CHECK(mp_gpt_create(&g, &c, ct, 0, B, o, 9) == MP_OK && mp_gpt_set_reductions(g, acc) == MP_OK, "create");
        mp_set_threads(k + 1);
        CHECK(mp_gpt_train_batch(g, tok, tok + 1, B, T, 1.0f, 0, &loss[k]) == MP_OK, "train");
        size_t total = 0;
        for (size_t i = 0; i < mp_optim_count(o); i++) total += mp_optim_param(o, i)->n;
        grads[k] = malloc(total * 4);
        size_t off = 0;
        for (size_t i = 0; i < mp_optim_count(o); i++) {
            memcpy(grads[k] + off, mp_optim_param(o, i)->grad, mp_optim_param(o, i)->n * 4);
            off += mp_optim_param(o, i)->n;
        }
        if (k == 1)
            CHECK(memcmp(grads[0], grads[1], total * 4) == 0 && f2u(loss[0]) == f2u(loss[1]),
                  "%s (reductions %s): 1 and 2 threads differ (loss %.9g vs %.9g)", mp_format(ct)->name,
                  mp_format(acc)->name, (double)loss[0], (double)loss[1]);
        mp_gpt_free(g), mp_optim_free(o);
    }
    mp_set_threads(0);
    free(grads[0]), free(grads[1]);
}

/* The per-tensor counts against a recount from the stored activations: every
 * kept tensor's subnormals, infs, NaNs and largest finite value counted in
 * its buffer, and the underflows of two stores recomputed from their inputs
 * (gelu from fc in fp32; the last res_2 = res_1 + c_proj added in fp32) and
 * counted by threshold. ln_2's weight of about 1e-6 puts ln_2, c_fc and gelu
 * in fp16's subnormal range and below; ln_f's weight of 1e5 overflows ln_f. */
static void check_recount(void) {
    const mp_gpt_config c = tiny_config(MP_GELU_TANH);
    enum { B = 3, T = 5 };
    int32_t tok[B * T], tgt[B * T];
    random_tokens(tok, B * T, 13), random_tokens(tgt, B * T, 13);
    mp_optim *o;
    mp_optim_sgd(&o, NULL);
    mp_gpt *g;
    CHECK(mp_gpt_create(&g, &c, MP_F16, 0, B, o, 3) == MP_OK, "create");
    randomize(o);
    const char *small[] = {"transformer.h.0.ln_2.weight", "transformer.h.1.ln_2.weight"};
    for (int i = 0; i < 2; i++) {
        mp_param *p = param(o, small[i]);
        for (size_t k = 0; k < p->n; k++) p->master[k] = 3e-7f * (float)(k + 1);
        memset(param(o, i ? "transformer.h.1.ln_2.bias" : "transformer.h.0.ln_2.bias")->master, 0, 8 * 4);
        memset(param(o, i ? "transformer.h.1.mlp.c_fc.bias" : "transformer.h.0.mlp.c_fc.bias")->master, 0, 32 * 4);
    }
    mp_param *lw = param(o, "transformer.ln_f.weight");
    for (size_t k = 0; k < lw->n; k++) lw->master[k] = 1e5f;
    mp_model m = mp_gpt_model(g);
    const void *d;
    size_t n;
    CHECK(mp_gpt_activation(g, "wte", &d, &n) == MP_EINVAL, "no batch yet");
    float loss;
    CHECK(mp_gpt_train_batch(g, tok, tgt, B, T, 1.0f, 0, &loss) == MP_OK, "train");
    static float v[B * T * 32], w[B * T * 32];
    uint64_t subn = 0, over = 0, under = 0;
    int checked = 0;
    for (size_t i = 0; i < m.ops->nstats(m.impl); i++) {
        const mp_tensor_stats *e = m.ops->stats(m.impl, i);
        if (mp_gpt_activation(g, e->name, &d, &n) != MP_OK) continue;
        checked++;
        mp_convert(v, MP_F32, d, MP_F16, n, NULL);
        uint64_t sub = 0, inf = 0, nan = 0;
        float amax = 0;
        for (size_t k = 0; k < n; k++) {
            const float a = fabsf(v[k]);
            sub += a > 0 && a < 0x1p-14f, inf += isinf(a), nan += isnan(a);
            if (isfinite(a) && a > amax) amax = a;
        }
        CHECK(e->fwd_elements == n && e->fwd.subnormal == sub && e->fwd.overflow == inf && e->fwd.nan == nan &&
                  e->fwd.amax == amax,
              "%s: counted %llu subnormal %llu overflow %llu NaN, amax %g; recount %llu %llu %llu, %g", e->name,
              (unsigned long long)e->fwd.subnormal, (unsigned long long)e->fwd.overflow, (unsigned long long)e->fwd.nan,
              (double)e->fwd.amax, (unsigned long long)sub, (unsigned long long)inf, (unsigned long long)nan,
              (double)amax);
        subn += sub, over += inf;
    }
    CHECK(checked == 1 + 8 * 2 + 2 && subn > 0 && over > 0, "%d tensors recounted, %llu subnormal, %llu inf", checked,
          (unsigned long long)subn, (unsigned long long)over);
    /* underflow by threshold: gelu(fc) and res_1 + c_proj in fp32, stored as zero though nonzero */
    const char *const pairs[2][3] = {{"h.1.mlp.c_fc", NULL, "h.1.mlp.gelu"},
                                     {"h.1.res_1", "h.1.mlp.c_proj", "h.1.res_2"}};
    for (int q = 0; q < 2; q++) {
        const void *a, *b, *y;
        size_t na, nb = 0, ny;
        CHECK(mp_gpt_activation(g, pairs[q][0], &a, &na) == MP_OK &&
                  mp_gpt_activation(g, pairs[q][2], &y, &ny) == MP_OK &&
                  (!pairs[q][1] || mp_gpt_activation(g, pairs[q][1], &b, &nb) == MP_OK),
              "kept");
        if (q == 0) mp_gelu_forward(v, MP_F32, a, MP_F16, na, NULL);
        else {
            mp_convert(v, MP_F32, a, MP_F16, na, NULL), mp_convert(w, MP_F32, b, MP_F16, nb, NULL);
            for (size_t k = 0; k < na; k++) v[k] += w[k];
        }
        uint64_t u = 0;
        long wrong = 0;
        for (size_t k = 0; k < ny; k++) {
            const uint16_t want = mp_f32_to_f16(v[k]);
            u += v[k] != 0 && (want & 0x7fff) == 0, wrong += want != ((const uint16_t *)y)[k];
        }
        const mp_tensor_stats *e = NULL;
        for (size_t i = 0; i < m.ops->nstats(m.impl); i++)
            if (!strcmp(m.ops->stats(m.impl, i)->name, pairs[q][2])) e = m.ops->stats(m.impl, i);
        CHECK(e && wrong == 0 && e->fwd.underflow == u,
              "%s: stored values recomputed (%ld differ); %llu underflows "
              "counted, %llu recounted",
              pairs[q][2], wrong, e ? (unsigned long long)e->fwd.underflow : 0ull, (unsigned long long)u);
        under += u;
    }
    CHECK(under > 0, "the recount saw underflows");
    CHECK(mp_gpt_activation(g, "h.0.attn.att", &d, &n) == MP_EINVAL, "overwritten tensors are not offered");
    double ls = 0;
    mp_gpt_eval_batch(g, tok, tgt, B, T, &ls, NULL);
    CHECK(mp_gpt_activation(g, "wte", &d, &n) == MP_EINVAL, "not after an evaluation");
    mp_model_free(&m);
    mp_optim_free(o);
}

/* --reductions half: the same weights in fp16 with fp32 and with fp16
 * reductions give different gradients, both near fp32's; fp16 attention
 * scores beyond 65504 are harmless with fp32 reductions and NaN in the naive
 * softmax (inf - inf), as a model cast to fp16 gets them */
static void check_naive_reductions(void) {
    const mp_gpt_config c = tiny_config(MP_GELU_TANH);
    enum { B = 3, T = 5 };
    int32_t tok[B * T], tgt[B * T];
    random_tokens(tok, B * T, 13), random_tokens(tgt, B * T, 13);
    mp_optim *o[3];
    mp_gpt *g[3];
    static const mp_dtype cts[3] = {MP_F32, MP_F16, MP_F16}, accs[3] = {MP_F32, MP_F32, MP_F16};
    float loss[3];
    for (int k = 0; k < 3; k++) {
        mp_optim_sgd(&o[k], NULL);
        CHECK(mp_gpt_create(&g[k], &c, cts[k], 0, B, o[k], 7) == MP_OK && mp_gpt_set_reductions(g[k], accs[k]) == MP_OK,
              "create");
        if (k == 0) randomize(o[0]);
        for (size_t i = 0; k && i < mp_optim_count(o[0]); i++) {
            mp_param *p = mp_optim_param(o[k], i);
            memcpy(p->master, mp_optim_param(o[0], i)->master, p->n * 4);
            if (p->half) mp_convert(p->half, p->half_type, p->master, MP_F32, p->n, NULL);
        }
        CHECK(mp_gpt_train_batch(g[k], tok, tgt, B, T, 1.0f, 0, &loss[k]) == MP_OK && isfinite(loss[k]), "train");
    }
    double dist[3] = {0, 0, 0}, differ = 0;
    for (int k = 1; k < 3; k++) {
        double d = 0, n = 0;
        for (size_t i = 0; i < mp_optim_count(o[0]); i++) {
            const mp_param *p = mp_optim_param(o[k], i), *q = mp_optim_param(o[0], i), *r = mp_optim_param(o[1], i);
            for (size_t e = 0; e < p->n; e++) {
                d += (p->grad[e] - q->grad[e]) * (double)(p->grad[e] - q->grad[e]),
                    n += (double)q->grad[e] * q->grad[e];
                differ += k == 2 && p->grad[e] != r->grad[e];
            }
        }
        dist[k] = sqrt(d / n);
    }
    CHECK(differ > 0 && loss[2] != loss[1] && dist[2] < 0.1 && dist[1] < 8e-3,
          "naive fp16 reductions: %g gradient values differ from fp32 reductions; relative L2 to fp32 %g (fp32 "
          "reductions %g); loss %.7g vs %.7g",
          differ, dist[2], dist[1], (double)loss[2], (double)loss[1]);
    printf("fp16 gradients, relative L2 distance to fp32: %.2g with fp32 reductions, %.2g with fp16 reductions\n",
           dist[1], dist[2]);
    /* q and k biases of 300: scores 4 * 300^2 / sqrt(4) = 180000, stored in fp16 as inf */
    for (int k = 1; k < 3; k++) {
        mp_param *b = param(o[k], "transformer.h.0.attn.c_attn.bias");
        for (size_t e = 0; e < 2 * 8; e++) b->master[e] = 300.0f;
        CHECK(mp_gpt_train_batch(g[k], tok, tgt, B, T, 1.0f, 0, &loss[k]) == MP_OK, "train with large scores");
    }
    CHECK(isfinite(loss[1]) && isnan(loss[2]), "scores of 180000: loss %g with fp32 reductions, %g with fp16",
          (double)loss[1], (double)loss[2]);
    CHECK(mp_gpt_set_reductions(g[1], MP_BF16) == MP_EINVAL && mp_gpt_set_reductions(g[0], MP_F16) == MP_EINVAL,
          "reductions only in fp32 or the compute format");
    for (int k = 0; k < 3; k++) mp_gpt_free(g[k]), mp_optim_free(o[k]);
}

/* 6. parsing */
static void check_parse(void) {
    mp_gpt_config c;
    CHECK(mp_gpt_parse("gpt:6-6-384-256", &c) == MP_OK && c.n_layer == 6 && c.n_head == 6 && c.n_embd == 384 &&
              c.block_size == 256 && c.vocab_size == 256 && c.gelu == MP_GELU_TANH,
          "parse");
    static const char *const bad[] = {"gpt:6-5-384-256",
                                      "gpt:0-6-384-256",
                                      "gpt:6-0-384-256",
                                      "gpt:6-6-0-256",
                                      "gpt:6-6-384-0",
                                      "gpt:6-6-384-256-",
                                      "gpt:6-6-384",
                                      "gpt:6-6-384-256-1",
                                      "gpt:a-6-384-256",
                                      "gpt:6--6-384-256",
                                      "mlp:6-6-384-256",
                                      "gpt:",
                                      "gpt:65-1-8-8",
                                      "gpt:1-1-8193-8",
                                      "gpt:1-1-8-8193",
                                      "gpt:1-1-8-8x",
                                      "gpt:-1-1-8-8",
                                      "gpt:1-1-8-99999999999999999999",
                                      ""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const mp_status s = mp_gpt_parse(bad[i], &c);
        CHECK(s == MP_EINVAL && strlen(mp_last_error()) > 10, "'%s': %d '%s'", bad[i], (int)s, mp_last_error());
    }
    CHECK(mp_gpt_parse(NULL, &c) == MP_EINVAL, "NULL spec");
    mp_gpt_parse("gpt:6-5-384-256", &c);
    CHECK(strstr(mp_last_error(), "divide"), "C %% H message: %s", mp_last_error());
    mp_gpt_parse("gpt:6-6-384-256-", &c);
    CHECK(strstr(mp_last_error(), "trailing"), "trailing message: %s", mp_last_error());
    /* create refuses what parse would */
    mp_optim *o;
    mp_optim_sgd(&o, NULL);
    mp_gpt *g = NULL;
    c = tiny_config(MP_GELU_TANH);
    c.vocab_size = 0;
    CHECK(mp_gpt_create(&g, &c, MP_F32, 0, 1, o, 1) == MP_EINVAL && !g, "vocab 0");
    c = tiny_config(MP_GELU_TANH);
    CHECK(mp_gpt_create(&g, &c, MP_F16, 1, 1, o, 1) == MP_EINVAL, "pure fp16");
    CHECK(mp_gpt_create(&g, &c, MP_E4M3, 0, 1, o, 1) == MP_EINVAL, "fp8 compute");
    CHECK(mp_gpt_create(&g, &c, MP_F32, 0, 0, o, 1) == MP_EINVAL, "batch 0");
    CHECK(mp_optim_count(o) == 0, "nothing registered");
    mp_gpt_free(NULL);
    mp_optim_free(o);
}

/* 7. weights out and in, the tied head */
static void check_load(void) {
    const mp_gpt_config c = tiny_config(MP_GELU_TANH);
    mp_optim *o1, *o2;
    mp_optim_sgd(&o1, NULL), mp_optim_sgd(&o2, NULL);
    mp_gpt *a = NULL, *b = NULL;
    CHECK(mp_gpt_create(&a, &c, MP_F16, 0, 2, o1, 1) == MP_OK && mp_gpt_create(&b, &c, MP_F16, 0, 2, o2, 2) == MP_OK,
          "create");
    enum { NT = 4 + 12 * 2 };
    mp_tensor ts[NT + 1];
    CHECK(mp_gpt_tensors(a, NULL, 0) == NT && mp_gpt_tensors(a, ts, NT) == NT, "%d tensors", NT);
    CHECK(strcmp(ts[0].name, "transformer.wte.weight") == 0 && ts[0].ndim == 2 && ts[0].shape[0] == 13 &&
              ts[0].shape[1] == 8 && strcmp(ts[4].name, "transformer.h.0.attn.c_attn.weight") == 0 &&
              ts[4].shape[0] == 24 && ts[4].shape[1] == 8 && ts[5].ndim == 1 && ts[5].shape[0] == 24 &&
              strcmp(ts[NT - 1].name, "transformer.ln_f.bias") == 0 && ts[0].dtype == MP_F32,
          "names and shapes");
    char path[64];
    snprintf(path, sizeof path, "test_gpt_%d.safetensors", (int)getpid());
    CHECK(mp_safetensors_write(path, ts, NT, NULL) == MP_OK, "write");
    mp_safetensors st;
    CHECK(mp_safetensors_read(path, &st) == MP_OK, "read");
    CHECK(mp_gpt_load(b, &st) == MP_OK, "load: %s", mp_last_error());
    mp_safetensors_free(&st);
    long diff = 0;
    for (size_t i = 0; i < mp_optim_count(o1); i++) {
        const mp_param *p = mp_optim_param(o1, i), *q = mp_optim_param(o2, i);
        diff += memcmp(p->master, q->master, p->n * 4) != 0;
        diff += (p->half != NULL) != (q->half != NULL) || (p->half && memcmp(p->half, q->half, p->n * 2) != 0);
    }
    CHECK(diff == 0, "loaded parameters and half copies differ from the saved ones (%ld)", diff);
    /* lm_head.weight: equal accepted, different refused, alone used as wte */
    mp_param *wte_b = param(o2, "transformer.wte.weight");
    ts[NT] = ts[0];
    snprintf(ts[NT].name, sizeof ts[NT].name, "lm_head.weight");
    CHECK(mp_safetensors_write(path, ts, NT + 1, NULL) == MP_OK && mp_safetensors_read(path, &st) == MP_OK, "write");
    CHECK(mp_gpt_load(b, &st) == MP_OK, "equal lm_head: %s", mp_last_error());
    mp_safetensors_free(&st);
    float *other = malloc(13 * 8 * 4);
    for (int i = 0; i < 13 * 8; i++) other[i] = (float)i;
    ts[NT].data = other;
    CHECK(mp_safetensors_write(path, ts, NT + 1, NULL) == MP_OK && mp_safetensors_read(path, &st) == MP_OK, "write");
    const float keep = wte_b->master[5];
    CHECK(mp_gpt_load(b, &st) == MP_ECORRUPT && strstr(mp_last_error(), "lm_head"), "different lm_head: %s",
          mp_last_error());
    CHECK(wte_b->master[5] == keep, "a refused file changed the weights");
    mp_safetensors_free(&st);
    CHECK(mp_safetensors_write(path, ts + 1, NT, NULL) == MP_OK && mp_safetensors_read(path, &st) == MP_OK, "write");
    CHECK(mp_gpt_load(b, &st) == MP_OK && wte_b->master[5] == 5.0f &&
              mp_f16_to_f32(((uint16_t *)wte_b->half)[7]) == 7.0f,
          "lm_head alone: %s", mp_last_error());
    mp_safetensors_free(&st);
    /* missing, wrong shape, non-finite */
    CHECK(mp_safetensors_write(path, ts + 1, NT - 1, NULL) == MP_OK && mp_safetensors_read(path, &st) == MP_OK,
          "write");
    CHECK(mp_gpt_load(b, &st) == MP_ECORRUPT && strstr(mp_last_error(), "transformer.wte.weight"), "missing wte: %s",
          mp_last_error());
    mp_safetensors_free(&st);
    mp_tensor bad = ts[4];
    ts[4].shape[0] = 8, ts[4].shape[1] = 24;
    CHECK(mp_safetensors_write(path, ts, NT, NULL) == MP_OK && mp_safetensors_read(path, &st) == MP_OK, "write");
    CHECK(mp_gpt_load(b, &st) == MP_ECORRUPT && strstr(mp_last_error(), "c_attn.weight"), "wrong shape: %s",
          mp_last_error());
    mp_safetensors_free(&st);
    ts[4] = bad;
    float *nan = malloc(24 * 4);
    for (int i = 0; i < 24; i++) nan[i] = i == 3 ? NAN : 0.0f;
    ts[5].data = nan;
    CHECK(mp_safetensors_write(path, ts, NT, NULL) == MP_OK && mp_safetensors_read(path, &st) == MP_OK, "write");
    CHECK(mp_gpt_load(b, &st) == MP_ECORRUPT && strstr(mp_last_error(), "non-finite"), "NaN: %s", mp_last_error());
    mp_safetensors_free(&st);
    remove(path);
    free(other), free(nan);
    /* a model of another vocabulary refuses the file */
    mp_gpt_config c2 = c;
    c2.vocab_size = 14;
    mp_optim *o3;
    mp_optim_sgd(&o3, NULL);
    mp_gpt *d;
    mp_gpt_create(&d, &c2, MP_F32, 0, 1, o3, 1);
    mp_gpt_tensors(a, ts, NT);
    CHECK(mp_safetensors_write(path, ts, NT, NULL) == MP_OK && mp_safetensors_read(path, &st) == MP_OK, "write");
    CHECK(mp_gpt_load(d, &st) == MP_ECORRUPT && strstr(mp_last_error(), "[13, 8]"), "vocab mismatch: %s",
          mp_last_error());
    /* pure bf16: tensors are the bf16 weights, and they load */
    mp_optim *o4;
    mp_optim_sgd(&o4, NULL);
    mp_gpt *e;
    CHECK(mp_gpt_create(&e, &c, MP_BF16, 1, 1, o4, 1) == MP_OK, "pure");
    CHECK(mp_gpt_load(e, &st) == MP_OK, "pure load: %s", mp_last_error());
    mp_gpt_tensors(e, ts, NT);
    CHECK(ts[0].dtype == MP_BF16 && ts[0].nbytes == 13 * 8 * 2 &&
              mp_bf16_to_f32(((const uint16_t *)ts[0].data)[3]) ==
                  mp_bf16_to_f32(mp_f32_to_bf16(param(o1, "transformer.wte.weight")->master[3])),
          "pure tensors");
    mp_safetensors_free(&st);
    remove(path);
    mp_gpt_free(a), mp_gpt_free(b), mp_gpt_free(d), mp_gpt_free(e);
    mp_optim_free(o1), mp_optim_free(o2), mp_optim_free(o3), mp_optim_free(o4);
}

/* 8. weight decay: 2-D weights and embeddings only; parameter count */
static void check_decay(void) {
    const mp_gpt_config c = tiny_config(MP_GELU_TANH);
    mp_optim *o;
    mp_optim_sgd(&o, NULL);
    mp_gpt *g;
    mp_gpt_create(&g, &c, MP_BF16, 0, 1, o, 1);
    long wrong = 0;
    size_t total = 0;
    for (size_t i = 0; i < mp_optim_count(o); i++) {
        const mp_param *p = mp_optim_param(o, i);
        const int small = strstr(p->name, ".bias") || strstr(p->name, "ln_");
        wrong += p->no_decay != small;
        total += p->n;
        CHECK(small ? p->half == NULL : (p->half != NULL && p->half_type == MP_BF16), "%s: half copy", p->name);
    }
    CHECK(wrong == 0 && mp_optim_count(o) == 28, "no_decay: %ld wrong", wrong);
    CHECK(mp_gpt_num_params(g, 0) == total && mp_gpt_num_params(g, 1) == total - 5 * 8, "num_params %zu",
          mp_gpt_num_params(g, 0));
    CHECK(mp_gpt_get_config(g)->vocab_size == 13, "config");
    mp_gpt_free(g), mp_optim_free(o);
}

/* 9. evaluation and next-token logits against the forward; input checks */
static void check_eval(void) {
    const mp_gpt_config c = tiny_config(MP_GELU_ERF);
    enum { B = 3, T = 5 };
    mp_optim *o;
    mp_optim_sgd(&o, NULL);
    mp_gpt *g;
    mp_gpt_create(&g, &c, MP_F32, 0, B, o, 4);
    randomize(o);
    int32_t tok[B * T], tgt[B * T];
    random_tokens(tok, B * T, 13), random_tokens(tgt, B * T, 13);
    double ls = 0, right = 0;
    float loss;
    CHECK(mp_gpt_eval_batch(g, tok, tgt, B, T, &ls, &right) == MP_OK, "eval");
    CHECK(mp_gpt_train_batch(g, tok, tgt, B, T, 1.0f, 0, &loss) == MP_OK, "train");
    CHECK(ls / (B * T) == (double)loss, "eval loss %.9g vs train %.9g", ls / (B * T), (double)loss);
    ref_model r = ref_from(&c, o);
    double lg[B * T * 13];
    ref_loss(&r, tok, tgt, B, T, lg);
    long expect = 0;
    for (int n = 0; n < B * T; n++) {
        int best = 0;
        for (int v = 1; v < 13; v++) best = lg[n * 13 + v] > lg[n * 13 + best] ? v : best;
        expect += best == tgt[n];
    }
    CHECK(right == (double)expect, "correct %g vs %ld", right, expect);
    /* next logits of the prefix of length t of sequence 1: row t-1 of the forward */
    double worst = 0;
    for (size_t t = 1; t <= T; t++) {
        float next[13];
        CHECK(mp_gpt_next_logits(g, tok + T, t, next) == MP_OK, "next logits");
        for (int v = 0; v < 13; v++) worst = fmax(worst, fabs(next[v] - lg[(T + t - 1) * 13 + v]));
    }
    CHECK(worst < 1e-5, "next logits differ from the forward by %g", worst);
    /* bad inputs */
    int32_t badtok[B * T];
    memcpy(badtok, tok, sizeof badtok);
    badtok[7] = 13;
    CHECK(mp_gpt_train_batch(g, badtok, tgt, B, T, 1.0f, 0, &loss) == MP_EINVAL && strstr(mp_last_error(), "tokens[7]"),
          "token out of range: %s", mp_last_error());
    badtok[7] = -1;
    CHECK(mp_gpt_eval_batch(g, tgt, badtok, B, T, &ls, NULL) == MP_EINVAL && strstr(mp_last_error(), "targets"),
          "target out of range: %s", mp_last_error());
    CHECK(mp_gpt_train_batch(g, tok, tgt, B + 1, T, 1.0f, 0, &loss) == MP_EINVAL, "B > max_batch");
    CHECK(mp_gpt_train_batch(g, tok, tgt, B, T + 1, 1.0f, 0, &loss) == MP_EINVAL, "T > block_size");
    CHECK(mp_gpt_train_batch(g, tok, tgt, B, 0, 1.0f, 0, &loss) == MP_EINVAL, "T = 0");
    float next[13];
    CHECK(mp_gpt_next_logits(g, tok, 0, next) == MP_EINVAL && mp_gpt_next_logits(g, tok, T + 1, next) == MP_EINVAL,
          "next logits length");
    ref_free(&r);
    mp_gpt_free(g), mp_optim_free(o);
}

/* the ops the GPT added: erf GELU and mp_add against fp64 */
static void check_ops(void) {
    enum { N = 20001 };
    float *x = malloc(N * 4), *y = malloc(N * 4), *dy = malloc(N * 4), *dx = malloc(N * 4);
    for (int i = 0; i < N; i++) x[i] = -10.0f + 20.0f * (float)i / (N - 1), dy[i] = 1.0f - 0.5f * (float)(i % 3);
    mp_convert_stats st = {0, 0, 0, 0, 0.0f};
    CHECK(mp_gelu_erf_forward(y, MP_F32, x, MP_F32, N, &st) == MP_OK, "erf forward");
    CHECK(mp_gelu_erf_backward(dx, MP_F32, dy, MP_F32, x, MP_F32, N, &st) == MP_OK, "erf backward");
    double wf = 0, wb = 0;
    for (int i = 0; i < N; i++) {
        const double u = x[i], cdf = 0.5 * erfc(-u / sqrt(2.0)), pdf = exp(-0.5 * u * u) / sqrt(2 * PI);
        const double f = u * cdf, d = dy[i] * (cdf + u * pdf);
        /* relative to the condition number (~1 + x^2: the tail is exp(-x^2 / 2)), and for
         * the derivative to its terms' size (it crosses zero near x = -0.75) */
        const double kappa = 1 + u * u;
        if (f != 0) wf = fmax(wf, fabs(y[i] - f) / fabs(f) / kappa);
        wb = fmax(wb, fabs(dx[i] - d) / (fabs(dy[i]) * (cdf + fabs(u) * pdf)) / kappa);
    }
    CHECK(wf < 4e-7 && wb < 4e-7, "erf GELU vs fp64: forward %g, backward %g (relative, over 1 + x^2)", wf, wb);
    /* half outputs: the rounding of the fp32 results, counted */
    uint16_t *h = malloc(N * 2);
    mp_convert_stats hs = {0, 0, 0, 0, 0.0f}, want = {0, 0, 0, 0, 0.0f};
    for (int i = 0; i < N; i++) x[i] *= 1e-5f;
    mp_gelu_erf_forward(h, MP_F16, x, MP_F32, N, &hs);
    mp_gelu_erf_forward(y, MP_F32, x, MP_F32, N, NULL);
    uint16_t *h2 = malloc(N * 2);
    mp_convert(h2, MP_F16, y, MP_F32, N, &want);
    CHECK(memcmp(h, h2, N * 2) == 0 && hs.underflow == want.underflow && hs.subnormal == want.subnormal &&
              want.underflow > 0,
          "fp16 stores and counts");
    /* mp_add: one rounding of the fp32 sum, in place */
    for (int i = 0; i < N; i++) y[i] = (float)i * 1e-3f, dy[i] = 1.0f / (float)(i + 1);
    uint16_t *a = malloc(N * 2), *b = malloc(N * 2);
    mp_convert(a, MP_BF16, y, MP_F32, N, NULL), mp_convert(b, MP_BF16, dy, MP_F32, N, NULL);
    long bad = 0;
    for (int i = 0; i < N; i++) h2[i] = mp_f32_to_bf16(mp_bf16_to_f32(a[i]) + mp_bf16_to_f32(b[i]));
    CHECK(mp_add(a, MP_BF16, a, MP_BF16, b, MP_BF16, N, NULL) == MP_OK, "add");
    for (int i = 0; i < N; i++) bad += a[i] != h2[i];
    CHECK(bad == 0, "mp_add: %ld differ", bad);
    free(x), free(y), free(dy), free(dx), free(h), free(h2), free(a), free(b);
}

int main(int argc, char **argv) {
    quick = test_quick(argc, argv);
    check_ops();
    check_parse();
    check_decay();
    check_gradients(MP_GELU_TANH, 5);
    check_gradients(MP_GELU_ERF, 4);
    check_gradients(MP_GELU_TANH, 130); /* three blocks of query rows: the backward's sums over blocks */
    check_half_gradients();
    check_accumulate(MP_F32);
    check_accumulate(MP_BF16);
    check_stats();
    check_eval();
    check_load();
    check_threads(MP_BF16, MP_F32);
    check_threads(MP_F32, MP_F32);
    check_threads(MP_F16, MP_F16);
    check_naive_reductions();
    check_recount();
    check_learns(MP_F32, 0);
    check_learns(MP_F16, 0);
    check_learns(MP_BF16, 0);
    check_learns(MP_BF16, 1);
    return check_report("test_gpt");
}
