/* test_train.c - the precision table, learning-rate schedules, and the
 * trainer driving a model written here (a user's own, through model.h):
 * loss falls, overflow skips steps and backs the scale off, errors stop the
 * step, checkpoints resume bit-identically, no_decay parameters keep their
 * values under weight decay, and two data-parallel ranks (threads here, over
 * train.h's mp_train_dist) train as one process and find a difference. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <unistd.h>

#include "check.h"
#include "internal.h"

/* ---- a user's model: y = x w (one output), squared error, in fp32 or fp16 ---- */

enum { D = 4, NB = 8 };

typedef struct {
    mp_param *w;
    mp_dtype ct;
    mp_tensor_stats st;
    float boost; /* multiplies the gradient: large values make fp16 overflow */
} lin;

static mp_status lin_train(void *impl, const mp_batch *b, float scale, int acc, float *loss) {
    lin *m = impl;
    double l = 0;
    float g[D] = {0};
    for (size_t i = 0; i < b->n; i++) {
        float z = 0;
        for (int d = 0; d < D; d++) z += b->x[i * D + d] * m->w->master[d];
        const float e = z - (float)b->targets[i];
        l += 0.5 * (double)e * (double)e;
        for (int d = 0; d < D; d++) g[d] += e * b->x[i * D + d] * scale * m->boost / (float)b->n;
    }
    /* the gradient as a half-precision backward would store it, counted */
    uint16_t h[D];
    float back[D];
    if (m->ct == MP_F16) {
        mp_convert(h, MP_F16, g, MP_F32, D, &m->st.bwd);
        mp_convert(back, MP_F32, h, MP_F16, D, NULL);
    } else {
        memcpy(back, g, sizeof back);
    }
    m->st.bwd_elements += D;
    for (int d = 0; d < D; d++) m->w->grad[d] = acc ? m->w->grad[d] + back[d] : back[d];
    *loss = (float)(l / (double)b->n);
    return MP_OK;
}

static mp_status lin_eval(void *impl, const mp_batch *b, double *ls, double *count, double *correct) {
    float l;
    lin *m = impl;
    mp_param keep = *m->w;
    float grad[D];
    keep.grad = grad;
    mp_param *w = m->w;
    m->w = &keep;
    const mp_status st = lin_train(m, b, 1.0f, 0, &l);
    m->w = w;
    *ls += (double)l * (double)b->n, *count += (double)b->n, *correct += 0;
    return st;
}

static size_t lin_nstats(const void *impl) {
    (void)impl;
    return 1;
}
static const mp_tensor_stats *lin_stats(const void *impl, size_t i) {
    (void)i;
    return &((const lin *)impl)->st;
}
static void lin_reset(void *impl) {
    lin *m = impl;
    memset(&m->st, 0, sizeof m->st);
    snprintf(m->st.name, sizeof m->st.name, "w");
}
static mp_status lin_load(void *impl, const mp_safetensors *st) {
    lin *m = impl;
    const mp_tensor *t = mp_safetensors_find(st, "w");
    if (!t || t->dtype != MP_F32 || mp_tensor_numel(t) != D) return mp_error(MP_ECORRUPT, "no w");
    memcpy(m->w->master, t->data, D * 4);
    if (m->w->half) mp_convert(m->w->half, m->w->half_type, m->w->master, MP_F32, D, NULL);
    return MP_OK;
}
static size_t lin_tensors(const void *impl, mp_tensor *out, size_t cap) {
    const lin *m = impl;
    if (cap) {
        memset(out, 0, sizeof *out);
        snprintf(out->name, sizeof out->name, "w");
        out->dtype = MP_F32, out->ndim = 1, out->shape[0] = D, out->nbytes = D * 4, out->data = m->w->master;
    }
    return 1;
}
static void lin_free(void *impl) { (void)impl; }

static const mp_model_ops lin_ops = {.kind = "lin",
                                     .train_batch = lin_train,
                                     .eval_batch = lin_eval,
                                     .nstats = lin_nstats,
                                     .stats = lin_stats,
                                     .reset_stats = lin_reset,
                                     .load = lin_load,
                                     .tensors = lin_tensors,
                                     .free = lin_free};

/* ---- its data: targets = x . (1, -2, 3, 0.5), rounded ---- */

typedef struct {
    float x[NB * D];
    int32_t y[NB];
    int fail_at; /* micro-batch that fails, -1 never */
} data;

static mp_status data_batch(void *impl, uint64_t s, mp_batch *b) {
    data *d = impl;
    if ((long)s == d->fail_at) return mp_error(MP_EIO, "loader: disk gone at micro-batch %llu", (unsigned long long)s);
    uint64_t r = s * 0x9e3779b97f4a7c15ull + 1;
    for (int i = 0; i < NB; i++) {
        float z = 0;
        for (int k = 0; k < D; k++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            d->x[i * D + k] = (float)(r % 2001) / 1000.0f - 1.0f;
            z += d->x[i * D + k] * (k == 0 ? 1.0f : k == 1 ? -2.0f : k == 2 ? 3.0f : 0.5f);
        }
        d->y[i] = (int32_t)lrintf(4 * z) / 4;
    }
    *b = (mp_batch){.n = NB, .t = 1, .x = d->x, .targets = d->y, .features = D};
    return MP_OK;
}

static mp_status data_eval(void *impl, size_t i, mp_batch *b) {
    if (i > 0) return *b = (mp_batch){0}, MP_OK;
    return data_batch(impl, 1000, b);
}

typedef struct {
    mp_optim *opt;
    lin m;
    data d;
    mp_trainer *t;
    mp_precision prec; /* the trainer's mode: outlives it */
} rig;

static mp_status rig_make_dist(rig *r, const char *prec, float boost, double clip, const mp_train_dist *dist,
                               int shard) {
    memset(r, 0, sizeof *r);
    const mp_precision *p = &r->prec;
    mp_status st = mp_precision_parse(prec, &r->prec);
    if (st != MP_OK) return st;
    mp_adamw_config ac = mp_adamw_defaults();
    ac.lr = 0.05;
    if ((st = mp_optim_adamw(&r->opt, &ac)) != MP_OK) return st;
    const float w0[D] = {0.1f, 0.2f, -0.1f, 0.0f};
    if ((st = mp_optim_add(r->opt, "w", w0, D, p->compute == MP_F32 ? MP_F32 : p->compute, &r->m.w)) != MP_OK)
        return st;
    r->m.ct = p->compute, r->m.boost = boost;
    lin_reset(&r->m);
    r->d.fail_at = -1;
    mp_train_config c = {.precision = p,
                         .scaler = mp_scaler_defaults(),
                         .lr = {.lr = 0.05},
                         .accum = 2,
                         .clip = clip,
                         .dist = dist,
                         .shard_optimizer = shard};
    const mp_model model = {&lin_ops, &r->m};
    const mp_loader loader = {&r->d, data_batch, data_eval, NULL};
    return mp_trainer_create(&r->t, &c, model, r->opt, loader);
}

static mp_status rig_make(rig *r, const char *prec, float boost, double clip) {
    return rig_make_dist(r, prec, boost, clip, NULL, 0);
}

static void rig_free(rig *r) {
    mp_trainer_free(r->t);
    mp_optim_free(r->opt);
}

static void check_table(void) {
    size_t n;
    const mp_precision *t = mp_precisions(&n);
    CHECK(n == 11 && strcmp(t[0].name, "fp32") == 0 && t[0].compute == MP_F32, "table starts with fp32");
    mp_precision pv;
    const mp_precision *p = &pv;
    CHECK(mp_precision_parse("fp16-dynamic", &pv) == MP_OK && p->scaling == MP_SCALING_DYNAMIC &&
              p->compute == MP_F16 && p->master_weights == MP_MASTER_FP32 && p->static_scale == 0,
          "fp16-dynamic");
    CHECK(mp_precision_parse("bf16-pure", &pv) == MP_OK && p->master_weights == MP_MASTER_PURE_BF16 &&
              p->rounding == MP_ROUND_STOCHASTIC,
          "bf16-pure");
    CHECK(mp_precision_parse("fp16-static:1024", &pv) == MP_OK && p->scaling == MP_SCALING_STATIC &&
              p->static_scale == 1024,
          "static scale");
    CHECK(mp_precision_parse("fp16-static:-1", &pv) == MP_EINVAL, "negative scale");
    CHECK(mp_precision_parse("fp8", &pv) == MP_EINVAL && strstr(mp_last_error(), "bf16-pure"), "unknown: %s",
          mp_last_error());
    /* the recipes: bf16 compute, fp32 masters, no loss scaling; mxfp8's rule switch */
    CHECK(mp_precision_parse("mxfp8", &pv) == MP_OK && p->recipe == MP_RECIPE_MXFP8 && p->compute == MP_BF16 &&
              p->master_weights == MP_MASTER_FP32 && p->scaling == MP_SCALING_NONE && p->mx_rule == MP_MX_RCEIL,
          "mxfp8");
    CHECK(mp_precision_parse("mxfp8+mx-rule=floor", &pv) == MP_OK && p->mx_rule == MP_MX_FLOOR &&
              strcmp(p->label, "mxfp8+mx-rule=floor") == 0,
          "mxfp8+mx-rule=floor: %s", p->label);
    CHECK(mp_precision_parse("mxfp8+mx-rule=ceil", &pv) == MP_EINVAL, "mx-rule=ceil");
    CHECK(mp_precision_parse("fp8-delayed+mx-rule=floor", &pv) == MP_EINVAL && strstr(mp_last_error(), "mxfp8"),
          "mx-rule on fp8-delayed: %s", mp_last_error());
    CHECK(mp_precision_parse("nvfp4+master-weights=none", &pv) == MP_EINVAL, "nvfp4 without masters");
    CHECK(mp_precision_parse("fp8-current", &pv) == MP_OK && p->recipe == MP_RECIPE_FP8_CURRENT, "fp8-current");
    CHECK(mp_precision_parse("fp16-dynamic", &pv) == MP_OK && p->recipe == MP_RECIPE_NONE, "no recipe");
    CHECK(mp_precision_parse("fp16-dynamic+master-weights=none", &pv) == MP_OK && p->master_weights == MP_MASTER_NONE &&
              p->scaling == MP_SCALING_DYNAMIC && strcmp(p->label, "fp16-dynamic+master-weights=none") == 0 &&
              strcmp(p->name, "fp16-dynamic") == 0,
          "fp16-dynamic+master-weights=none: %s", p->label);
    CHECK(mp_precision_set_master_weights(&pv, MP_MASTER_FP32) == MP_OK && strcmp(p->label, "fp16-dynamic") == 0,
          "back to fp32 masters");
    CHECK(mp_precision_parse("fp32+master-weights=none", &pv) == MP_EINVAL && !strchr(mp_last_error(), '\n'),
          "none on fp32");
    CHECK(mp_precision_parse("bf16-pure+master-weights=none", &pv) == MP_EINVAL, "none on bf16-pure");
    CHECK(mp_precision_parse("fp16+master-weights=half", &pv) == MP_EINVAL, "unknown value");
    CHECK(mp_precision_parse("bf16+master-weights=none", &pv) == MP_OK && p->compute == MP_BF16 &&
              p->master_weights == MP_MASTER_NONE,
          "bf16 none");
    /* reductions, and the modes as presets of the switches */
    CHECK(mp_precision_parse("fp16-naive", &pv) == MP_OK && p->compute == MP_F16 &&
              p->master_weights == MP_MASTER_NONE && p->reductions == MP_REDUCE_HALF && p->scaling == MP_SCALING_NONE &&
              strcmp(p->label, "fp16-naive") == 0,
          "fp16-naive: %s", p->label);
    CHECK(mp_precision_parse("fp16-naive+master-weights=fp32+reductions=fp32", &pv) == MP_OK &&
              p->master_weights == MP_MASTER_FP32 && p->reductions == MP_REDUCE_FP32 &&
              strcmp(p->label, "fp16-naive+master-weights=fp32+reductions=fp32") == 0,
          "fp16-naive with protections: %s", p->label);
    CHECK(mp_precision_parse("fp16-dynamic+reductions=half+master-weights=none", &pv) == MP_OK &&
              p->reductions == MP_REDUCE_HALF && p->master_weights == MP_MASTER_NONE &&
              strcmp(p->label, "fp16-dynamic+master-weights=none+reductions=half") == 0,
          "both switches, labelled in order: %s", p->label);
    CHECK(mp_precision_set_reductions(&pv, MP_REDUCE_FP32) == MP_OK &&
              strcmp(p->label, "fp16-dynamic+master-weights=none") == 0,
          "reductions back to fp32: %s", p->label);
    CHECK(mp_precision_parse("fp16-static:1024+reductions=half", &pv) == MP_OK && p->static_scale == 1024 &&
              strcmp(p->label, "fp16-static:1024+reductions=half") == 0,
          "static with a switch: %s", p->label);
    CHECK(mp_precision_parse("fp32+reductions=half", &pv) == MP_EINVAL && strstr(mp_last_error(), "fp32"),
          "half reductions on fp32");
    CHECK(mp_precision_parse("bf16+reductions=fp16", &pv) == MP_EINVAL && strstr(mp_last_error(), "reductions"),
          "unknown reductions value");
    CHECK(strcmp(mp_reductions_name(MP_REDUCE_HALF), "half") == 0 &&
              strcmp(mp_reductions_name(MP_REDUCE_FP32), "fp32") == 0,
          "reductions names");
    for (size_t i = 0; i < n; i++) CHECK(t[i].color && t[i].color[0] == '#' && t[i].help, "%s colour", t[i].name);
}

static void check_lr(void) {
    /* nanoGPT: warmup 10, decay 100, lr 6e-4, min 6e-5 */
    const mp_lr_config c = {6e-4, MP_LR_COSINE, 10, 100, 6e-5};
    CHECK(fabs(mp_lr_at(&c, 0) - 6e-4 * 1 / 11) < 1e-15, "warmup 0");
    CHECK(fabs(mp_lr_at(&c, 9) - 6e-4 * 10 / 11) < 1e-15, "warmup 9");
    CHECK(fabs(mp_lr_at(&c, 10) - 6e-4) < 1e-15, "peak");
    CHECK(fabs(mp_lr_at(&c, 55) - (6e-5 + 0.5 * (6e-4 - 6e-5))) < 1e-15, "half way");
    CHECK(fabs(mp_lr_at(&c, 100) - 6e-5) < 1e-15 && mp_lr_at(&c, 500) == 6e-5, "end");
    const mp_lr_config k = {1e-3, MP_LR_CONSTANT, 3, 0, 0};
    CHECK(mp_lr_at(&k, 1) == 1e-3 * 2 / 4 && mp_lr_at(&k, 3) == 1e-3 && mp_lr_at(&k, 99) == 1e-3, "constant");
}

static void check_training(void) {
    const char *modes[] = {"fp32", "fp16", "fp16-dynamic"};
    for (int k = 0; k < 3; k++) {
        rig r;
        CHECK(rig_make(&r, modes[k], 1.0f, 0) == MP_OK, "%s: %s", modes[k], mp_last_error());
        mp_step_info si;
        float first = 0;
        for (int s = 0; s < 60; s++) {
            CHECK(mp_trainer_step(r.t, &si) == MP_OK, "%s step: %s", modes[k], mp_last_error());
            if (s == 0) first = si.loss;
        }
        CHECK(si.step == 60 && mp_trainer_step_count(r.t) == 60, "steps counted");
        CHECK(si.loss < 0.1f * first, "%s: loss %g -> %g", modes[k], (double)first, (double)si.loss);
        CHECK((mp_trainer_scaler(r.t) != NULL) == (k == 2), "scaler only in the scaled mode");
        CHECK(si.scale == (k == 2 ? 65536.0f : 1.0f) && si.lr == 0.05 && si.bwd_elements == 2 * D, "info");
        double el;
        CHECK(mp_trainer_evaluate(r.t, &el, NULL) == MP_OK && el < 0.1, "eval %g", el);
        rig_free(&r);
    }
    /* overflow in fp16: gradients x 1e6 at scale 65536 overflow, the step is
     * skipped (weights unchanged) and the scale halves until they fit */
    rig r;
    CHECK(rig_make(&r, "fp16-dynamic", 1e6f, 1.0) == MP_OK, "overflow rig");
    float w[D];
    memcpy(w, r.m.w->master, sizeof w);
    mp_step_info si;
    CHECK(mp_trainer_step(r.t, &si) == MP_OK && si.skipped && si.bwd.overflow > 0, "skipped on overflow");
    CHECK(si.nbad == 1 && strcmp(si.bad_grads[0], "w") == 0 && !si.first_activation,
          "the skipped step names the gradient: %zu, %s", si.nbad, si.nbad ? si.bad_grads[0] : "-");
    CHECK(memcmp(w, r.m.w->master, sizeof w) == 0 && mp_optim_steps(r.opt) == 0 && si.params_updated == 0 &&
              si.lost_updates == 0,
          "skipped step changes nothing");
    int skipped = 1;
    for (int s = 0; s < 30; s++) {
        CHECK(mp_trainer_step(r.t, &si) == MP_OK, "step");
        skipped += si.skipped;
    }
    CHECK(!si.skipped && skipped >= 5 && si.scale < 65536.0f / 16, "backed off: %d skipped, scale %g", skipped,
          (double)si.scale);
    CHECK(si.nbad == 0 && !si.first_activation, "a clean step names nothing");
    CHECK(si.grad_norm > 1.0, "norm measured before clipping: %g", si.grad_norm);
    /* a failing loader stops the step with its error */
    r.d.fail_at = (int)(mp_trainer_step_count(r.t) * 2 + 1);
    CHECK(mp_trainer_step(r.t, &si) == MP_EIO && strstr(mp_last_error(), "disk gone"), "loader error passed on");
    rig_free(&r);
    /* a static scale never changes */
    CHECK(rig_make(&r, "fp16-static:256", 1.0f, 0) == MP_OK, "static rig");
    for (int s = 0; s < 5; s++) mp_trainer_step(r.t, &si);
    CHECK(si.scale == 256.0f && mp_scaler_get_scale(mp_trainer_scaler(r.t)) == 256.0f, "static");
    rig_free(&r);
    /* bad configurations */
    CHECK(rig_make(&r, "fp32", 1.0f, -1.0) == MP_EINVAL, "negative clip");
    rig_free(&r);
    /* gradients that overflow at any scale: the scale backs off until 1/S is not
     * finite in fp32 (step 144 backs off 2^16 to 2^-128, 1/S = 2^128), then the run stops */
    CHECK(rig_make(&r, "fp16-dynamic", INFINITY, 0) == MP_OK, "inf rig");
    mp_status st = MP_OK;
    long taken = 0;
    while (st == MP_OK && taken < 1000) st = mp_trainer_step(r.t, &si), taken++;
    CHECK(st == MP_EOVERFLOW && strstr(mp_last_error(), "inverse") && taken == 144 && si.skipped,
          "stopped after %ld steps: %s", taken, mp_last_error());
    rig_free(&r);
    CHECK(rig_make(&r, "fp16-dynamic+reductions=half", 1.0f, 0) == MP_EINVAL && strstr(mp_last_error(), "lin") &&
              strstr(mp_last_error(), "reductions"),
          "a model without set_reductions refuses half reductions: %s", mp_last_error());
    rig_free(&r);
}

static void check_resume(void) {
    char path[] = "/tmp/mixprec_test_train_XXXXXX";
    const int fd = mkstemp(path);
    CHECK(fd >= 0, "temp file");
    close(fd);
    rig a, b;
    mp_step_info si;
    rig_make(&a, "fp16-dynamic", 1.0f, 0);
    for (int s = 0; s < 12; s++) mp_trainer_step(a.t, &si);
    rig_make(&b, "fp16-dynamic", 1.0f, 0);
    for (int s = 0; s < 5; s++) mp_trainer_step(b.t, &si);
    const char *meta[] = {"model", "lin", NULL};
    CHECK(mp_trainer_save(b.t, path, meta, MP_F32) == MP_OK, "save: %s", mp_last_error());
    rig_free(&b);
    rig_make(&b, "fp16-dynamic", 1.0f, 0);
    const char *wrong[] = {"model", "other", NULL};
    CHECK(mp_trainer_resume(b.t, path, wrong) == MP_EINVAL && strstr(mp_last_error(), "model"), "refused");
    CHECK(mp_trainer_resume(b.t, path, meta) == MP_OK && mp_trainer_step_count(b.t) == 5, "resumed: %s",
          mp_last_error());
    for (int s = 5; s < 12; s++) mp_trainer_step(b.t, &si);
    CHECK(memcmp(a.m.w->master, b.m.w->master, D * 4) == 0 && memcmp(a.m.w->state2, b.m.w->state2, D * 4) == 0,
          "resume is bit-identical");
    rig_free(&b);
    rig_make(&b, "bf16", 1.0f, 0);
    CHECK(mp_trainer_resume(b.t, path, meta) == MP_EINVAL && strstr(mp_last_error(), "precision"), "other mode");
    rig_free(&b);
    rig_free(&a);
    unlink(path);
}

static void check_no_decay(void) {
    mp_optim *o;
    mp_adamw_config ac = mp_adamw_defaults();
    ac.weight_decay = 0.5, ac.lr = 0.1;
    mp_optim_adamw(&o, &ac);
    const float v[2] = {1.0f, 1.0f};
    mp_param *a, *b;
    mp_optim_add(o, "a", v, 2, MP_F32, &a);
    mp_optim_add(o, "b", v, 2, MP_F32, &b);
    b->no_decay = 1;
    mp_optim_zero_grad(o);
    CHECK(mp_optim_step(o) == MP_OK, "step");
    CHECK(a->master[0] == (float)(1.0 - 0.1 * 0.5) && b->master[0] == 1.0f, "decay %g, none %g", (double)a->master[0],
          (double)b->master[0]);
    mp_optim_free(o);
}

/* The step's precision losses (mp_step_info) on an MLP in fp16 without
 * master weights, SGD at lr 1e-3 (the updates of small gradients are under
 * half an ulp, the others move their weight): lost_updates equals the
 * recount from every parameter's stored bits before and after the step (SGD
 * without decay or momentum: the update is nonzero where the gradient is),
 * and the weight-gradient counts are those of the model's entries. */
typedef struct {
    float x[16 * 8];
    int32_t y[16];
} mlp_data;

static mp_status mlp_batch(void *impl, uint64_t s, mp_batch *b) {
    mlp_data *d = impl;
    (void)s;
    *b = (mp_batch){.n = 16, .t = 1, .x = d->x, .targets = d->y};
    return MP_OK;
}

static void check_precision_losses(void) {
    mp_precision p;
    mp_sgd_config sc = mp_sgd_defaults();
    mp_mlp_config c;
    mp_optim *o;
    mp_mlp *m;
    mp_trainer *t;
    CHECK(mp_precision_parse("fp16+master-weights=none", &p) == MP_OK && mp_optim_sgd(&o, &sc) == MP_OK &&
              mp_mlp_parse("mlp:8-16-4", &c) == MP_OK &&
              mp_mlp_create(&m, &c, MP_F16, MP_MASTER_NONE, 16, o, 1) == MP_OK,
          "mlp");
    mlp_data d;
    for (int i = 0; i < 16 * 8; i++) d.x[i] = (float)((i * 37) % 101) / 101.0f;
    for (int i = 0; i < 16; i++) d.y[i] = i % 4;
    const mp_train_config tc = {.precision = &p, .scaler = mp_scaler_defaults(), .lr = {.lr = 1e-3}, .accum = 1};
    CHECK(mp_trainer_create(&t, &tc, mp_mlp_model(m), o, (mp_loader){&d, mlp_batch, NULL, NULL}) == MP_OK, "trainer");
    static uint16_t before[8 * 16 + 16 + 16 * 4 + 4];
    for (int step = 0; step < 3; step++) {
        size_t off = 0;
        for (size_t i = 0; i < mp_optim_count(o); i++) {
            const mp_param *q = mp_optim_param(o, i);
            memcpy(before + off, q->half, q->n * 2), off += q->n;
        }
        mp_step_info si;
        CHECK(mp_trainer_step(t, &si) == MP_OK, "step");
        uint64_t lost = 0, nonzero = 0, lg = 0, dg = 0, wn = 0;
        off = 0;
        for (size_t i = 0; i < mp_optim_count(o); i++) {
            const mp_param *q = mp_optim_param(o, i);
            for (size_t k = 0; k < q->n; k++) {
                nonzero += q->grad[k] != 0.0f;
                lost += q->grad[k] != 0.0f && ((uint16_t *)q->half)[k] == before[off + k];
            }
            off += q->n;
        }
        for (int l = 0; l < c.nlayers; l++) {
            const mp_tensor_stats *e = mp_mlp_stats(m, l);
            lg += e->wgrad_lost, dg += e->wgrad_dead, wn += e->wgrad_elements;
        }
        CHECK(si.lost_updates == lost && lost > 0 && lost < nonzero && si.params_updated == off &&
                  wn == 8 * 16 + 16 * 4 && si.wgrad_elements == wn && si.lost_gradients == lg &&
                  si.dead_gradients == dg,
              "step %ld: %llu lost updates (recount %llu, %llu nonzero) of %llu; weight gradients %llu/%llu lost, "
              "%llu/%llu dead",
              si.step, (unsigned long long)si.lost_updates, (unsigned long long)lost, (unsigned long long)nonzero,
              (unsigned long long)si.params_updated, (unsigned long long)si.lost_gradients, (unsigned long long)lg,
              (unsigned long long)si.dead_gradients, (unsigned long long)dg);
    }
    mp_trainer_free(t);
    mp_mlp_free(m);
    mp_optim_free(o);
}

/* ---- two ranks as two threads: mp_train_dist over shared memory ---- */

typedef struct {
    pthread_barrier_t bar;
    void *buf[2]; /* each rank's values, published for the other */
} comm;

typedef struct {
    comm *c;
    int rank;
    const char *prec;
    float boost;
    int diverge_at; /* rank 1 changes its weight after this step (0: never) */
    int shard;      /* the optimizer state sharded */
    int steps;
    float loss[40];
    int skipped[40];
    mp_status check;                /* mp_trainer_check_ranks after the last step */
    float w[8];                     /* the weights after the last step */
    uint8_t state[64];              /* rank 0's optimizer state after the last step (gathered when sharded) */
    size_t state_bytes, held_bytes; /* its size; the state this rank held before the gather */
    char msg[256];
    uint32_t crc;
    mp_status st;
} rank_run;

/* every rank gets op(rank 0's values, rank 1's values), in that order */
static void exchange(rank_run *r, void *x, size_t n, size_t es,
                     void (*op)(void *, const void *, const void *, size_t)) {
    void *tmp = malloc(n * es + 1);
    r->c->buf[r->rank] = x;
    pthread_barrier_wait(&r->c->bar);
    op(tmp, r->c->buf[0], r->c->buf[1], n);
    pthread_barrier_wait(&r->c->bar); /* both have read both before either writes */
    memcpy(x, tmp, n * es);
    free(tmp);
}

static void add_f32(void *o, const void *a, const void *b, size_t n) {
    for (size_t i = 0; i < n; i++) ((float *)o)[i] = ((const float *)a)[i] + ((const float *)b)[i];
}
static void add_f64(void *o, const void *a, const void *b, size_t n) {
    for (size_t i = 0; i < n; i++) ((double *)o)[i] = ((const double *)a)[i] + ((const double *)b)[i];
}
static void max_f32v(void *o, const void *a, const void *b, size_t n) {
    for (size_t i = 0; i < n; i++) ((float *)o)[i] = fmaxf(((const float *)a)[i], ((const float *)b)[i]);
}

static mp_status t_sum_grads(void *ctx, float *const *x, const size_t *n, size_t count) {
    size_t total = 0, k = 0;
    for (size_t i = 0; i < count; i++) total += n[i];
    float *all = malloc(total * sizeof *all + 1);
    for (size_t i = 0; i < count; i++) memcpy(all + k, x[i], n[i] * sizeof *all), k += n[i];
    exchange(ctx, all, total, sizeof *all, add_f32);
    k = 0;
    for (size_t i = 0; i < count; i++) memcpy(x[i], all + k, n[i] * sizeof *all), k += n[i];
    free(all);
    return MP_OK;
}
static mp_status t_sum_f64(void *ctx, double *x, size_t n) { return exchange(ctx, x, n, sizeof *x, add_f64), MP_OK; }
static mp_status t_max_f32(void *ctx, float *x, size_t n) { return exchange(ctx, x, n, sizeof *x, max_f32v), MP_OK; }

/* the sums, as t_sum_grads; rank r keeps those of its arrays only */
static mp_status t_reduce_scatter(void *ctx, float *const *x, const size_t *n, size_t count, const size_t *first) {
    const rank_run *r = ctx;
    float **keep = malloc((count + 1) * sizeof *keep);
    for (size_t i = 0; i < count; i++) {
        keep[i] = malloc(n[i] * sizeof(float) + 1);
        memcpy(keep[i], x[i], n[i] * sizeof(float));
    }
    t_sum_grads(ctx, x, n, count);
    for (size_t i = 0; i < count; i++) {
        if (i < first[r->rank] || i >= first[r->rank + 1]) memcpy(x[i], keep[i], n[i] * sizeof(float));
        free(keep[i]);
    }
    free(keep);
    return MP_OK;
}

static mp_status t_broadcast(void *ctx, void *x, size_t bytes, int root) {
    rank_run *r = ctx;
    r->c->buf[r->rank] = x;
    pthread_barrier_wait(&r->c->bar);
    if (r->rank != root && x) memcpy(x, r->c->buf[root], bytes);
    pthread_barrier_wait(&r->c->bar); /* the root's buffer read before it changes */
    return MP_OK;
}

static mp_status t_all_gather(void *ctx, void *const *x, const size_t *bytes, size_t count, const size_t *first) {
    rank_run *r = ctx;
    for (int root = 0; root < 2; root++)
        for (size_t i = first[root]; i < first[root + 1] && i < count; i++) t_broadcast(r, x[i], bytes[i], root);
    return MP_OK;
}

static void *rank_main(void *arg) {
    rank_run *r = arg;
    const mp_train_dist d = {r->rank,      2,          r, t_sum_grads, t_sum_f64, t_max_f32, t_reduce_scatter,
                             t_all_gather, t_broadcast};
    rig g;
    if ((r->st = rig_make_dist(&g, r->prec, r->boost, 0, &d, r->shard)) != MP_OK) return NULL; /* both fail alike */
    for (int s = 0; s < r->steps && r->st == MP_OK; s++) {
        mp_step_info si;
        r->st = mp_trainer_step(g.t, &si);
        r->loss[s] = si.loss, r->skipped[s] = si.skipped;
        if (r->rank == 1 && s + 1 == r->diverge_at) g.m.w->master[0] += 1e-3f;
    }
    const mp_optim_bytes held = mp_optim_bytes_held(g.opt);
    r->held_bytes = (size_t)held.state;
    if (r->st == MP_OK) r->st = mp_trainer_gather_state(g.t, 1);
    mp_tensor ts[5];
    const size_t nt = mp_optim_state_tensors(g.m.w, ts);
    r->state_bytes = 0;
    for (size_t k = 0; r->rank == 0 && k < nt && r->state_bytes + ts[k].nbytes <= sizeof r->state; k++)
        memcpy(r->state + r->state_bytes, ts[k].data, ts[k].nbytes), r->state_bytes += ts[k].nbytes;
    if (r->st == MP_OK) r->st = mp_trainer_gather_state(g.t, 0);
    memcpy(r->w, g.m.w->master, sizeof(float) * 4);
    r->check = mp_trainer_check_ranks(g.t);
    snprintf(r->msg, sizeof r->msg, "%s", mp_last_error());
    mp_trainer_state_crc(g.t, &r->crc);
    rig_free(&g);
    return NULL;
}

/* the two ranks (micro-batches of 8 rows: 4 each) of prec, and one process at the same batch */
static void run_ranks(rank_run rr[2], const char *prec, float boost, int steps, int diverge_at, int shard) {
    comm c;
    pthread_barrier_init(&c.bar, NULL, 2);
    pthread_t th[2];
    for (int k = 0; k < 2; k++) {
        rr[k] = (rank_run){
            .c = &c, .rank = k, .prec = prec, .boost = boost, .steps = steps, .diverge_at = diverge_at, .shard = shard};
        pthread_create(&th[k], NULL, rank_main, &rr[k]);
    }
    for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
    pthread_barrier_destroy(&c.bar);
}

static void check_dist(void) {
    const int mark = (int)check_failures;
    mp_set_threads(1);
    rank_run rr[2];
    const char *modes[] = {"fp32", "fp16-dynamic"};
    for (int k = 0; k < 2; k++) {
        /* fp16-dynamic with gradients x 1e6: the first steps overflow and are skipped, on both ranks together */
        const float boost = k ? 1e6f : 1.0f;
        run_ranks(rr, modes[k], boost, 30, 0, 0);
        rig one;
        CHECK(rig_make(&one, modes[k], boost, 0) == MP_OK, "one process");
        double worst = 0;
        int skips = 0, skips_differ = 0, backing_off = 1;
        for (int s = 0; s < 30; s++) {
            mp_step_info si;
            CHECK(mp_trainer_step(one.t, &si) == MP_OK, "step");
            worst = fmax(worst, fabs((double)rr[0].loss[s] - si.loss) / fabs((double)si.loss));
            /* the back-off from a scale far too large, up to the first clean step, is the same; later an fp16
             * gradient of the whole micro-batch may overflow where the ranks' halves do not (each stores its own) */
            if (backing_off) skips_differ += rr[0].skipped[s] != si.skipped || rr[1].skipped[s] != si.skipped;
            backing_off &= si.skipped;
            skips += rr[0].skipped[s];
        }
        if (k) worst = 0; /* fp16: the losses part after the first overflow that only one side has */
        CHECK(rr[0].st == MP_OK && rr[1].st == MP_OK && rr[0].check == MP_OK && rr[1].check == MP_OK &&
                  rr[0].crc == rr[1].crc && memcmp(rr[0].loss, rr[1].loss, sizeof rr[0].loss) == 0,
              "%s: the ranks differ (%s, %s; CRC %08x, %08x)", modes[k], mp_status_str(rr[0].st), rr[0].msg,
              (unsigned)rr[0].crc, (unsigned)rr[1].crc);
        CHECK(worst < 1e-6 && skips_differ == 0 && (k == 0 || skips >= 5),
              "%s: 2 ranks against one process: loss %.3g relative, %d skips, %d differ while backing off", modes[k],
              worst, skips, skips_differ);
        rig_free(&one);
    }
    /* rank 1's weight changed after step 3: both ranks learn it at the comparison after step 5 */
    run_ranks(rr, "fp32", 1.0f, 5, 3, 0);
    CHECK(rr[0].check == MP_ECORRUPT && rr[1].check == MP_ECORRUPT && strstr(rr[0].msg, "step 5: the ranks'") &&
              strstr(rr[0].msg, "on rank 1") && rr[0].crc != rr[1].crc,
          "a difference found: %s", rr[0].msg);
    /* a micro-batch of 8 rows does not split into 3 shares; a rank outside the ranks */
    rig r;
    const mp_train_dist three = {0, 3, NULL, t_sum_grads, t_sum_f64, t_max_f32, NULL, NULL, NULL},
                        bad = {2, 2, NULL, t_sum_grads, t_sum_f64, t_max_f32, NULL, NULL, NULL};
    CHECK(rig_make_dist(&r, "fp32", 1.0f, 0, &three, 0) == MP_OK, "3 ranks");
    mp_step_info si;
    CHECK(mp_trainer_step(r.t, &si) == MP_EINVAL && strstr(mp_last_error(), "8 rows does not split into 3"),
          "8 rows on 3 ranks: %s", mp_last_error());
    rig_free(&r);
    CHECK(rig_make_dist(&r, "fp32", 1.0f, 0, &bad, 0) == MP_EINVAL, "rank 2 of 2");
    rig_free(&r);
    mp_set_threads(0);
    CHECK_SAY(mark, "data parallelism: 2 ranks (threads) train as one process (fp32 loss within 1e-6; fp16-dynamic "
                    "skips together and backs off as one process), a changed weight is found at the next comparison\n");
}

/* The optimizer state sharded over 2 ranks (threads) against the same 2
 * ranks unsharded: the same losses, skips, weights and (gathered to rank 0)
 * state, bit for bit; the rank that owns no parameter holds no state. */
static void check_shard(void) {
    const int mark = (int)check_failures;
    mp_set_threads(1);
    const char *modes[] = {"fp32", "fp16-dynamic", "bf16"};
    for (int k = 0; k < 3; k++) {
        rank_run a[2], b[2];
        const float boost = k == 1 ? 1e6f : 1.0f; /* fp16-dynamic: skipped steps while the scale backs off */
        run_ranks(a, modes[k], boost, 20, 0, 0);
        run_ranks(b, modes[k], boost, 20, 0, 1);
        int same = 1, skips = 0;
        for (int r = 0; r < 2; r++)
            same &= a[r].st == MP_OK && b[r].st == MP_OK && !memcmp(a[r].loss, b[r].loss, sizeof a[r].loss) &&
                    !memcmp(a[r].skipped, b[r].skipped, sizeof a[r].skipped) &&
                    !memcmp(a[r].w, b[r].w, sizeof a[r].w) && a[r].check == MP_OK && b[r].check == MP_OK;
        for (int s = 0; s < 20; s++) skips += b[0].skipped[s];
        same &= a[0].state_bytes > 0 && a[0].state_bytes == b[0].state_bytes &&
                !memcmp(a[0].state, b[0].state, a[0].state_bytes);
        /* one parameter: rank 1 owns it (its middle is past half the elements), rank 0 holds no state */
        CHECK(same && b[0].held_bytes == 0 && b[1].held_bytes == a[1].held_bytes && (k != 1 || skips >= 5),
              "%s: sharded 2 ranks differ from unsharded (%s %s; held %zu, %zu; %d skips)", modes[k],
              mp_status_str(b[0].st), mp_last_error(), b[0].held_bytes, b[1].held_bytes, skips);
    }
    rig r;
    const mp_train_dist one = {0,          1, NULL, t_sum_grads, t_sum_f64, t_max_f32, t_reduce_scatter, t_all_gather,
                               t_broadcast};
    CHECK(rig_make_dist(&r, "fp32", 1.0f, 0, &one, 1) == MP_EINVAL && strstr(mp_last_error(), "2 or more ranks"),
          "shard with one rank: %s", mp_last_error());
    rig_free(&r);
    /* a trainer refused for its mode (a bad scaler) after asking for a shard: nothing held (ASan's leak check) */
    const mp_train_dist two = {0,          2, NULL, t_sum_grads, t_sum_f64, t_max_f32, t_reduce_scatter, t_all_gather,
                               t_broadcast};
    mp_scaler_config bad = mp_scaler_defaults();
    bad.growth_factor = 0.5f;
    rig s;
    CHECK(rig_make_dist(&s, "fp16-dynamic", 1.0f, 0, &two, 1) == MP_OK, "shard: %s", mp_last_error());
    mp_trainer *t = NULL;
    mp_train_config c = {
        .precision = &s.prec, .scaler = bad, .lr = {.lr = 0.05}, .accum = 1, .dist = &two, .shard_optimizer = 1};
    CHECK(mp_trainer_create(&t, &c, (mp_model){&lin_ops, &s.m}, s.opt, (mp_loader){&s.d, data_batch, NULL, NULL}) ==
                  MP_EINVAL &&
              !t,
          "sharded trainer with a bad scaler: %s", mp_last_error());
    rig_free(&s);
    mp_set_threads(0);
    CHECK_SAY(mark, "sharded optimizer state: 2 ranks (threads) train bit for bit as unsharded (fp32, fp16-dynamic "
                    "with skips, bf16), the state gathered to rank 0 is the same, a rank holds only its own; a "
                    "trainer refused after asking for a shard holds nothing\n");
}

int main(void) {
    check_table();
    check_lr();
    check_training();
    check_resume();
    check_no_decay();
    check_precision_losses();
    check_dist();
    check_shard();
    return check_report("test_train");
}
