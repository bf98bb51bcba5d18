/* train.c - precision modes, learning-rate schedules and the training loop. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

/* ---- the precision modes: one table ---- */

static const mp_precision modes[] = {
    {.name = "fp32", .compute = MP_F32, .master_weights = MP_MASTER_FP32,
     .rounding = MP_ROUND_NEAREST, .scaling = MP_SCALING_NONE, .color = "#3b3b3b",
     .help = "fp32 everywhere (the baseline)"},
    {.name = "fp16-naive", .compute = MP_F16, .master_weights = MP_MASTER_NONE,
     .reductions = MP_REDUCE_HALF, .rounding = MP_ROUND_NEAREST, .scaling = MP_SCALING_NONE, .color = "#8c564b",
     .help = "everything cast to fp16: no master weights, fp16 reductions, no loss scaling"},
    {.name = "fp16", .compute = MP_F16, .master_weights = MP_MASTER_FP32,
     .rounding = MP_ROUND_NEAREST, .scaling = MP_SCALING_NONE, .color = "#d62728",
     .help = "fp16 compute, fp32 master weights, NO loss scaling"},
    {.name = "fp16-static", .compute = MP_F16, .master_weights = MP_MASTER_FP32,
     .rounding = MP_ROUND_NEAREST, .scaling = MP_SCALING_STATIC, .color = "#ff7f0e",
     .help = "fp16 with a fixed loss scale S (65536 without :S)"},
    {.name = "fp16-dynamic", .compute = MP_F16, .master_weights = MP_MASTER_FP32,
     .rounding = MP_ROUND_NEAREST, .scaling = MP_SCALING_DYNAMIC, .color = "#1f77b4",
     .help = "fp16 with dynamic loss scaling: the AMP recipe"},
    {.name = "bf16", .compute = MP_BF16, .master_weights = MP_MASTER_FP32,
     .rounding = MP_ROUND_NEAREST, .scaling = MP_SCALING_NONE, .color = "#2ca02c",
     .help = "bf16 compute, fp32 master weights"},
    {.name = "bf16-pure", .compute = MP_BF16, .master_weights = MP_MASTER_PURE_BF16,
     .rounding = MP_ROUND_STOCHASTIC, .scaling = MP_SCALING_NONE, .color = "#9467bd",
     .help = "bf16 weights only, updates rounded stochastically"},
    {.name = "fp8-delayed", .compute = MP_BF16, .master_weights = MP_MASTER_FP32,
     .rounding = MP_ROUND_NEAREST, .scaling = MP_SCALING_NONE, .recipe = MP_RECIPE_FP8_DELAYED, .color = "#e377c2",
     .help = "bf16 with fp8 Linear GEMMs, per-tensor scales from a 1024-step amax history (TE DelayedScaling)"},
    {.name = "fp8-current", .compute = MP_BF16, .master_weights = MP_MASTER_FP32,
     .rounding = MP_ROUND_NEAREST, .scaling = MP_SCALING_NONE, .recipe = MP_RECIPE_FP8_CURRENT, .color = "#bcbd22",
     .help = "bf16 with fp8 Linear GEMMs, per-tensor scales from each tensor's amax (TE Float8CurrentScaling)"},
    {.name = "mxfp8", .compute = MP_BF16, .master_weights = MP_MASTER_FP32,
     .rounding = MP_ROUND_NEAREST, .scaling = MP_SCALING_NONE, .recipe = MP_RECIPE_MXFP8, .mx_rule = MP_MX_RCEIL,
     .color = "#17becf", .help = "bf16 with MXFP8 Linear GEMMs: E4M3 in blocks of 32 with E8M0 scales"},
    {.name = "nvfp4", .compute = MP_BF16, .master_weights = MP_MASTER_FP32,
     .rounding = MP_ROUND_NEAREST, .scaling = MP_SCALING_NONE, .recipe = MP_RECIPE_NVFP4, .color = "#7f7f7f",
     .help = "bf16 with NVFP4 Linear GEMMs: E2M1 in blocks of 16, E4M3 and fp32 scales (TE's NVFP4 recipe)"},
};

const mp_precision *mp_precisions(size_t *count) {
    if (count) *count = sizeof modes / sizeof modes[0];
    return modes;
}

const char *mp_master_weights_name(mp_master_weights m) {
    return m == MP_MASTER_NONE ? "none" : m == MP_MASTER_PURE_BF16 ? "sr" : m == MP_MASTER_KAHAN ? "kahan" : "fp32";
}

mp_state_format mp_precision_state_format(const mp_precision *p) {
    if (p->optim_state != MP_STATE_AUTO) return p->optim_state;
    if (p->master_weights != MP_MASTER_NONE) return MP_STATE_FP32;
    return p->compute == MP_BF16 ? MP_STATE_BF16 : MP_STATE_FP16;
}

const char *mp_reductions_name(mp_reductions r) { return r == MP_REDUCE_HALF ? "half" : "fp32"; }

static const mp_precision *row_of(const char *name) {
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
        if (strcmp(name, modes[i].name) == 0) return &modes[i];
    return NULL;
}

/* p->label: its base (up to the first '+') and the switches that differ from its table row. */
static mp_status relabel(mp_precision *p) {
    const mp_precision *row = p->name ? row_of(p->name) : NULL;
    if (!row) return mp_error(MP_EINVAL, "precision '%s' is not a mode of the table", p->name ? p->name : "(null)");
    char lab[sizeof p->label];
    size_t k = strcspn(p->label, "+");
    memcpy(lab, p->label, k);
    lab[k] = '\0';
    if (p->master_weights != row->master_weights)
        k += (size_t)snprintf(lab + k, sizeof lab - k, "+master-weights=%s", mp_master_weights_name(p->master_weights));
    if (p->optim_state != MP_STATE_AUTO && k < sizeof lab)
        k += (size_t)snprintf(lab + k, sizeof lab - k, "+optim-state=%s", mp_state_format_name(p->optim_state));
    if (p->reductions != row->reductions && k < sizeof lab)
        k += (size_t)snprintf(lab + k, sizeof lab - k, "+reductions=%s", mp_reductions_name(p->reductions));
    if (p->mx_rule != row->mx_rule && k < sizeof lab)
        k += (size_t)snprintf(lab + k, sizeof lab - k, "+mx-rule=%s", p->mx_rule == MP_MX_FLOOR ? "floor" : "rceil");
    if (k >= sizeof lab) return mp_error(MP_EINVAL, "precision '%s' is too long", p->label);
    memcpy(p->label, lab, k + 1);
    return MP_OK;
}

mp_status mp_precision_set_master_weights(mp_precision *p, mp_master_weights m) {
    if (!p) return mp_error(MP_EINVAL, "mp_precision_set_master_weights: NULL argument");
    if ((unsigned)m > MP_MASTER_KAHAN) return mp_error(MP_EINVAL, "--master-weights is fp32, none, kahan or sr");
    const char *name = mp_master_weights_name(m);
    if (!strcmp(p->name, "bf16-pure"))
        return mp_error(MP_EINVAL, "--master-weights %s does not apply to bf16-pure, which is bf16+master-weights=sr: "
                                   "use bf16+master-weights=%s", name, name);
    if (m != MP_MASTER_FP32 && p->recipe != MP_RECIPE_NONE)
        return mp_error(MP_EINVAL, "--master-weights %s does not apply to %s: its recipe quantizes the fp32 master "
                                   "weights", name, p->name);
    if ((m == MP_MASTER_NONE || m == MP_MASTER_KAHAN) && p->compute == MP_F32)
        return mp_error(MP_EINVAL, "--master-weights %s needs fp16 or bf16 compute; %s has no half copy to keep alone",
                        name, p->name);
    if (m == MP_MASTER_PURE_BF16 && p->compute != MP_BF16)
        return mp_error(MP_EINVAL, "--master-weights sr rounds updates stochastically into bf16 weights: it needs bf16 "
                                   "compute, not %s", p->name);
    const mp_precision old = *p;
    p->master_weights = m;
    if (m == MP_MASTER_PURE_BF16 && !strcmp(p->name, "bf16")) { /* the mode bf16-pure */
        const mp_precision *row = row_of("bf16-pure");
        p->name = row->name, p->rounding = row->rounding, p->color = row->color, p->help = row->help;
        memmove(p->label + strlen("bf16-pure"), p->label + strlen("bf16"), sizeof p->label - strlen("bf16-pure"));
        memcpy(p->label, "bf16-pure", strlen("bf16-pure"));
        p->label[sizeof p->label - 1] = '\0';
    }
    if (p->optim_state == mp_precision_state_format(&(mp_precision){.master_weights = m, .compute = p->compute}))
        p->optim_state = MP_STATE_AUTO; /* the setting's default */
    const mp_status st = relabel(p);
    if (st != MP_OK) *p = old;
    return st;
}

mp_status mp_precision_set_optim_state(mp_precision *p, mp_state_format f) {
    if (!p) return mp_error(MP_EINVAL, "mp_precision_set_optim_state: NULL argument");
    if (f != MP_STATE_FP32 && f != MP_STATE_BF16 && f != MP_STATE_FP8 && f != MP_STATE_8BIT && f != MP_STATE_4BIT)
        return mp_error(MP_EINVAL, "--optim-state is fp32, bf16, fp8, 8bit or 4bit");
    const mp_precision old = *p;
    p->optim_state = MP_STATE_AUTO;
    if (mp_precision_state_format(p) != f) p->optim_state = f; /* the default stays out of the label */
    const mp_status st = relabel(p);
    if (st != MP_OK) *p = old;
    return st;
}

mp_status mp_precision_recipe(const mp_precision *p, mp_recipe *out) {
    if (!p || !out) return mp_error(MP_EINVAL, "mp_precision_recipe: NULL argument");
    if (p->recipe == MP_RECIPE_NONE) {
        *out = (mp_recipe){.kind = MP_RECIPE_NONE};
        return MP_OK;
    }
    const mp_status st = mp_recipe_parse(mp_recipe_name(p->recipe), out);
    out->mx_rule = p->mx_rule;
    return st;
}

mp_status mp_precision_set_mx_rule(mp_precision *p, mp_mx_rule r) {
    if (!p) return mp_error(MP_EINVAL, "mp_precision_set_mx_rule: NULL argument");
    if (p->recipe != MP_RECIPE_MXFP8) return mp_error(MP_EINVAL, "%s: the MX scale rule applies to mxfp8 only", p->label);
    if (r != MP_MX_FLOOR && r != MP_MX_RCEIL) return mp_error(MP_EINVAL, "mx rule %d: floor or rceil", (int)r);
    const mp_mx_rule old = p->mx_rule;
    p->mx_rule = r;
    const mp_status st = relabel(p);
    if (st != MP_OK) p->mx_rule = old;
    return st;
}

mp_status mp_precision_set_reductions(mp_precision *p, mp_reductions r) {
    if (!p) return mp_error(MP_EINVAL, "mp_precision_set_reductions: NULL argument");
    if (r != MP_REDUCE_FP32 && r != MP_REDUCE_HALF) return mp_error(MP_EINVAL, "--reductions is fp32 or half");
    if (r == MP_REDUCE_HALF && p->compute == MP_F32)
        return mp_error(MP_EINVAL, "--reductions half needs fp16 or bf16 compute; %s computes in fp32", p->name);
    const mp_reductions old = p->reductions;
    p->reductions = r;
    const mp_status st = relabel(p);
    if (st != MP_OK) p->reductions = old;
    return st;
}

static const mp_precision *find_mode(const char *base, float *static_scale, mp_status *st) {
    const size_t n = sizeof modes / sizeof modes[0];
    *st = MP_OK;
    const mp_precision *row = row_of(base);
    if (row) return row;
    if (strncmp(base, "fp16-static:", 12) == 0) {
        char *end;
        const double s = strtod(base + 12, &end);
        if (end == base + 12 || *end || !((float)s > 0) || !isfinite((float)s) || /* 1e-50 > 0 is 0 in fp32 */
            !isfinite((float)(1.0 / (double)(float)s))) {
            *st = mp_error(MP_EINVAL, "fp16-static:S wants a positive finite scale whose inverse is finite in fp32 "
                           "(S above 2^-128), not '%s'", base + 12);
            return NULL;
        }
        if (static_scale) *static_scale = (float)s;
        for (size_t i = 0; i < n; i++)
            if (modes[i].scaling == MP_SCALING_STATIC) return &modes[i];
    }
    char names[320];
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += (size_t)snprintf(names + k, sizeof names - k, "%s%s", i ? (i + 1 == n ? " or " : ", ") : "",
                              modes[i].scaling == MP_SCALING_STATIC ? "fp16-static[:S]" : modes[i].name);
    *st = mp_error(MP_EINVAL, "the precision is %s (with +master-weights=..., +optim-state=..., +reductions=...), not '%s'",
                   names, base);
    return NULL;
}

mp_status mp_precision_parse(const char *spec, mp_precision *out) {
    if (!spec || !out) return mp_error(MP_EINVAL, "mp_precision_parse: NULL argument");
    const char *plus = strchr(spec, '+');
    const size_t bl = plus ? (size_t)(plus - spec) : strlen(spec);
    mp_precision p;
    if (bl >= sizeof p.label) return mp_error(MP_EINVAL, "precision '%.*s...' is too long", 40, spec);
    char base[sizeof p.label];
    memcpy(base, spec, bl);
    base[bl] = '\0';
    mp_status st;
    float static_scale = 0.0f;
    const mp_precision *mode = find_mode(base, &static_scale, &st);
    if (!mode) return st;
    p = *mode;
    p.static_scale = static_scale;
    memcpy(p.label, base, bl + 1);
    for (const char *sw = plus; sw; sw = strchr(sw + 1, '+')) {
        const char *v = sw + 1, *next = strchr(v, '+');
        const size_t len = next ? (size_t)(next - v) : strlen(v);
        char key[32] = "", val[16] = "";
        const char *eq = memchr(v, '=', len);
        if (eq && (size_t)(eq - v) < sizeof key && len - (size_t)(eq - v) - 1 < sizeof val)
            memcpy(key, v, (size_t)(eq - v)), memcpy(val, eq + 1, len - (size_t)(eq - v) - 1);
        mp_mx_rule r;
        const int mw = !strcmp(key, "master-weights"), os = !strcmp(key, "optim-state"), rd = !strcmp(key, "reductions");
        mp_state_format f = MP_STATE_AUTO;
        for (int k = MP_STATE_FP32; os && k <= MP_STATE_4BIT; k++)
            if (k != MP_STATE_FP16 && !strcmp(val, mp_state_format_name((mp_state_format)k))) f = (mp_state_format)k;
        if (!strcmp(key, "mx-rule") && mp_mx_rule_parse(val, &r) == MP_OK) st = mp_precision_set_mx_rule(&p, r);
        else if (mw && !strcmp(val, "none")) st = mp_precision_set_master_weights(&p, MP_MASTER_NONE);
        else if (mw && !strcmp(val, "fp32")) st = mp_precision_set_master_weights(&p, MP_MASTER_FP32);
        else if (mw && !strcmp(val, "kahan")) st = mp_precision_set_master_weights(&p, MP_MASTER_KAHAN);
        else if (mw && !strcmp(val, "sr")) st = mp_precision_set_master_weights(&p, MP_MASTER_PURE_BF16);
        else if (os && f != MP_STATE_AUTO) st = mp_precision_set_optim_state(&p, f);
        else if (rd && !strcmp(val, "half")) st = mp_precision_set_reductions(&p, MP_REDUCE_HALF);
        else if (rd && !strcmp(val, "fp32")) st = mp_precision_set_reductions(&p, MP_REDUCE_FP32);
        else
            st = mp_error(MP_EINVAL,
                          "unknown switch '+%.*s' in precision '%s' (the switches are master-weights=fp32|none|kahan|sr, "
                          "optim-state=fp32|bf16|fp8|8bit|4bit, reductions=fp32|half and mx-rule=floor|rceil)",
                          (int)len, v, spec);
        if (st != MP_OK) return st;
    }
    *out = p;
    return MP_OK;
}

const char *mp_precision_formats(const mp_precision *p, char *out, size_t cap) {
    mp_recipe r;
    if (!out || !cap) return out;
    const char *c = p ? mp_format(p->compute)->name : "?";
    if (!p || p->recipe == MP_RECIPE_NONE || mp_precision_recipe(p, &r) != MP_OK) {
        snprintf(out, cap, "%s", c);
        return out;
    }
    const mp_dtype a = mp_qrole_format(&r, MP_QROLE_INPUT), g = mp_qrole_format(&r, MP_QROLE_GRAD);
    const int fp8 = r.kind == MP_RECIPE_FP8_DELAYED || r.kind == MP_RECIPE_FP8_CURRENT;
    snprintf(out, cap, "%s + %s %s%s%s", c, fp8 ? "fp8" : mp_recipe_name(r.kind), mp_format(a)->name, a == g ? "" : "/",
             a == g ? "" : mp_format(g)->name);
    return out;
}

/* ---- learning rate ---- */

double mp_lr_at(const mp_lr_config *c, long step) {
    if (step < c->warmup) return c->lr * (double)(step + 1) / (double)(c->warmup + 1);
    if (c->schedule == MP_LR_CONSTANT) return c->lr;
    if (step > c->decay_steps) return c->min_lr;
    const double span = (double)(c->decay_steps - c->warmup);
    const double r = span > 0 ? (double)(step - c->warmup) / span : 1.0;
    return c->min_lr + 0.5 * (1.0 + cos(3.14159265358979323846 * r)) * (c->lr - c->min_lr);
}

void mp_loader_free(mp_loader *l) {
    if (!l || !l->impl) return;
    if (l->free) l->free(l->impl);
    l->impl = NULL;
}

/* ---- the trainer ---- */

struct mp_trainer {
    mp_train_config cfg;
    mp_model model;
    mp_optim *opt;
    mp_loader loader;
    int scaled;
    mp_scaler scaler;
    mp_dtype norm_acc; /* where the gradient norm is summed (mp_clip_grad_norm) */
    long step; /* steps taken */
    const mp_train_dist *dist; /* size > 1, or NULL */
    /* with dist: the gradients' addresses and sizes for sum_grads, and the
     * quantized tensors (fp8-delayed: their amaxes go through max_f32) */
    float **gx;
    size_t *gn, ngrads;
    mp_named_qtensor *qt;
    mp_fp8_history *hsave; /* (nq,) each tensor's history before a micro-batch */
    float *hslot, *amax;   /* (nq,) the history slot it may overwrite; the amaxes reduced */
    size_t nq;
    size_t *first;         /* shard_optimizer: rank r owns parameters [first[r], first[r + 1]); else NULL */
    void **wx;             /* shard_optimizer: each parameter's weights as the ranks share them (fp32 masters, or */
    size_t *wbytes;        /* the half weights without them) and their size */
};

/* The parameters split over the ranks on their boundaries, about 1/size of
 * the elements each (a parameter goes to the rank its middle falls in), and
 * the optimizer told which are this rank's. */
static mp_status shard(mp_trainer *t) {
    const mp_train_dist *d = t->dist;
    const size_t np = mp_optim_count(t->opt);
    t->first = calloc((size_t)d->size + 1, sizeof *t->first);
    t->wx = malloc((np + 1) * sizeof *t->wx), t->wbytes = malloc((np + 1) * sizeof *t->wbytes);
    if (!t->first || !t->wx || !t->wbytes) return mp_error(MP_ENOMEM, "trainer: out of memory");
    for (size_t i = 0; i < np; i++) {
        mp_param *p = mp_optim_param(t->opt, i);
        t->wx[i] = p->master ? (void *)p->master : p->half, t->wbytes[i] = p->n * (p->master ? 4 : 2);
    }
    double total = 0, before = 0;
    for (size_t i = 0; i < np; i++) total += (double)mp_optim_param(t->opt, i)->n;
    size_t i = 0;
    for (int r = 1; r < d->size; r++) {
        const double target = total * r / d->size;
        while (i < np && before + (double)mp_optim_param(t->opt, i)->n / 2 < target)
            before += (double)mp_optim_param(t->opt, i++)->n;
        t->first[r] = i;
    }
    t->first[d->size] = np;
    return mp_optim_set_shard(t->opt, t->first[d->rank], t->first[d->rank + 1], d->sum_f64, d->ctx);
}

/* The rank that owns parameter i. */
static int owner(const mp_trainer *t, size_t i) {
    int r = 0;
    while (i >= t->first[r + 1]) r++;
    return r;
}

/* After a sharded update: every parameter's weights from its owner (fp32
 * masters, or the half weights without them), the half copies of the
 * others' rounded here as the owner rounded its own. */
static mp_status share_weights(mp_trainer *t) {
    const mp_train_dist *d = t->dist;
    const size_t np = mp_optim_count(t->opt);
    const mp_status st = d->all_gather(d->ctx, t->wx, t->wbytes, np, t->first);
    if (st != MP_OK) return mp_error(st, "the ranks' all-gather of the weights failed (%s)", mp_status_str(st));
    for (size_t i = 0; i < np; i++)
        if (!mp_optim_owns(t->opt, i)) mp_optim_refresh_half(t->opt, i);
    return MP_OK;
}

mp_status mp_trainer_gather_state(mp_trainer *t, int hold) {
    if (!t) return mp_error(MP_EINVAL, "mp_trainer_gather_state: NULL trainer");
    if (!t->first) return MP_OK;
    const mp_train_dist *d = t->dist;
    const size_t np = mp_optim_count(t->opt);
    /* rank 0 makes room for the others' states first, and every rank learns whether it could, before any transfer */
    mp_status made = MP_OK;
    for (size_t i = t->first[1]; d->rank == 0 && i < np && made == MP_OK; i++) made = mp_optim_hold_state(t->opt, i, hold);
    if (!hold) return made;
    double failed = made != MP_OK;
    const mp_status agreed = d->sum_f64(d->ctx, &failed, 1);
    if (agreed != MP_OK || failed > 0) {
        for (size_t i = t->first[1]; d->rank == 0 && i < np; i++) mp_optim_hold_state(t->opt, i, 0);
        if (agreed != MP_OK) return mp_error(agreed, "the ranks could not agree to gather the optimizer state (%s)",
                                             mp_status_str(agreed));
        return made != MP_OK ? made : mp_error(MP_ENOMEM, "rank 0 has no room for the other ranks' optimizer state");
    }
    /* Every rank makes the calls the owner's header (its tensors' count and sizes) asks for, whatever it
     * keeps: rank 0 takes them where its own layout agrees, else they pass through scratch and it fails
     * after the last transfer. An owner that has taken no step yet holds no state: neither does rank 0. */
    mp_status bad = MP_OK;
    for (size_t i = t->first[1]; i < np; i++) {
        const int from = owner(t, i);
        mp_param *p = mp_optim_param(t->opt, i);
        mp_tensor ts[5];
        const size_t k = mp_optim_state_tensors(p, ts); /* on rank 0 (made above) and on the owner */
        double hdr[6] = {(double)k, 0, 0, 0, 0, 0};
        for (size_t j = 0; j < k; j++) hdr[j + 1] = (double)ts[j].nbytes;
        double own[6];
        memcpy(own, hdr, sizeof own);
        const mp_status st = d->broadcast(d->ctx, hdr, sizeof hdr, from);
        if (st != MP_OK) return mp_error(st, "the ranks' transfer of the optimizer state of '%s' failed (%s)", p->name,
                                         mp_status_str(st));
        const int same = memcmp(own, hdr, sizeof own) == 0, mine = d->rank == from || (d->rank == 0 && same);
        if (d->rank == 0 && !same && hdr[0] == 0) mp_optim_hold_state(t->opt, i, 0);
        else if (d->rank == 0 && !same && bad == MP_OK)
            bad = mp_error(MP_ECORRUPT, "the optimizer state of '%s' differs in layout between rank 0 and rank %d",
                           p->name, from);
        for (size_t j = 0; j < (size_t)hdr[0]; j++) {
            const mp_status tr = d->broadcast(d->ctx, mine ? (void *)ts[j].data : NULL, (size_t)hdr[j + 1], from);
            if (tr != MP_OK) return mp_error(tr, "the ranks' transfer of the optimizer state of '%s' failed (%s)",
                                             p->name, mp_status_str(tr));
        }
    }
    return bad;
}

mp_status mp_trainer_create(mp_trainer **out, const mp_train_config *c, mp_model model, mp_optim *opt,
                            mp_loader loader) {
    if (!out || !c || !c->precision || !model.ops || !opt || !loader.train_batch)
        return mp_error(MP_EINVAL, "mp_trainer_create: NULL argument");
    if (c->accum < 1) return mp_error(MP_EINVAL, "accum must be at least 1 (got %ld)", c->accum);
    if (!(c->clip >= 0)) return mp_error(MP_EINVAL, "clip must be >= 0 (got %g)", c->clip);
    if (!(c->lr.lr >= 0) || !(c->lr.min_lr >= 0) || c->lr.warmup < 0 ||
        (c->lr.schedule == MP_LR_COSINE && c->lr.decay_steps < c->lr.warmup))
        return mp_error(MP_EINVAL, "learning-rate schedule: lr %g, min_lr %g, warmup %ld, decay_steps %ld",
                        c->lr.lr, c->lr.min_lr, c->lr.warmup, c->lr.decay_steps);
    const int half = c->precision->reductions == MP_REDUCE_HALF;
    if (half && !model.ops->set_reductions)
        return mp_error(MP_EINVAL, "the %s model computes its reductions in fp32 only: no +reductions=half",
                        model.ops->kind);
    const mp_train_dist *d = c->dist;
    if (d && (d->size < 1 || d->rank < 0 || d->rank >= d->size ||
              (d->size > 1 && (!d->sum_grads || !d->sum_f64 || !d->max_f32))))
        return mp_error(MP_EINVAL, "mp_trainer_create: a dist needs size >= 1, 0 <= rank < size and, with size > 1, "
                                   "its three functions (size %d, rank %d)", d->size, d->rank);
    if (c->shard_optimizer && (!d || d->size < 2 || !d->reduce_scatter || !d->all_gather || !d->broadcast))
        return mp_error(MP_EINVAL, "mp_trainer_create: shard_optimizer needs a dist of 2 or more ranks with its "
                                   "reduce_scatter, all_gather and broadcast");
    if (c->shard_optimizer && half && c->clip > 0)
        return mp_error(MP_EINVAL, "a sharded optimizer sums the gradient norm in fp32: no +reductions=half with "
                                   "clipping");
    if (c->precision->optim_state != MP_STATE_AUTO) { /* the optimizer keeps its state as the mode says */
        const mp_status st = mp_optim_set_state_format(opt, c->precision->optim_state);
        if (st != MP_OK) return st;
    }
    mp_trainer *t = calloc(1, sizeof *t);
    if (!t) return mp_error(MP_ENOMEM, "mp_trainer_create: out of memory");
    t->cfg = *c, t->model = model, t->opt = opt, t->loader = loader;
    t->dist = d && d->size > 1 ? d : NULL;
    if (c->shard_optimizer) {
        const mp_status st = shard(t);
        if (st != MP_OK) {
            mp_trainer_free(t);
            return st;
        }
    }
    /* the norm is naive only when --clip uses it (it is measured either way) */
    t->norm_acc = half && c->clip > 0 ? c->precision->compute : MP_F32;
    t->scaled = c->precision->scaling != MP_SCALING_NONE;
    if (t->scaled) {
        mp_scaler_config sc = c->scaler;
        sc.dynamic = c->precision->scaling == MP_SCALING_DYNAMIC;
        if (!sc.dynamic && c->precision->static_scale > 0) sc.init_scale = c->precision->static_scale; /* fp16-static:S */
        const mp_status st = mp_scaler_init(&t->scaler, &sc);
        if (st != MP_OK) {
            free(t);
            return st;
        }
    }
    if (model.ops->set_reductions) {
        const mp_status st = model.ops->set_reductions(model.impl, half ? c->precision->compute : MP_F32);
        if (st != MP_OK) {
            free(t);
            return st;
        }
    }
    *out = t;
    return MP_OK;
}

void mp_trainer_free(mp_trainer *t) {
    if (!t) return;
    free(t->gx), free(t->gn), free(t->qt), free(t->hsave), free(t->hslot), free(t->amax), free(t->first);
    free(t->wx), free(t->wbytes);
    free(t);
}

long mp_trainer_step_count(const mp_trainer *t) { return t->step; }
const mp_scaler *mp_trainer_scaler(const mp_trainer *t) { return t->scaled ? &t->scaler : NULL; }

#define TRY(call)                          \
    do {                                   \
        const mp_status st_ = (call);      \
        if (st_ != MP_OK) return st_;      \
    } while (0)

/* ---- data parallelism (train.h's mp_train_dist) ---- */

/* A reduction's status, with a message when it failed (the hook sets none). */
static mp_status reduced(mp_status st, const char *what) {
    return st == MP_OK ? MP_OK : mp_error(st, "the ranks' reduction of %s failed (%s)", what, mp_status_str(st));
}

/* This rank's rows of a micro-batch: rows [rank n / size, (rank + 1) n / size). */
static mp_status take_share(const mp_train_dist *d, mp_batch *b) {
    if (b->n % (size_t)d->size != 0)
        return mp_error(MP_EINVAL, "a micro-batch of %zu rows does not split into %d equal shares, one per rank", b->n,
                        d->size);
    if (b->x && !b->features)
        return mp_error(MP_EINVAL, "the loader's batches do not say their features (mp_batch.features): no rank's "
                                   "share can be taken");
    const size_t n = b->n / (size_t)d->size, r0 = (size_t)d->rank * n;
    if (b->x) b->x += r0 * b->features;
    if (b->tokens) b->tokens += r0 * b->t;
    if (b->targets) b->targets += r0 * (b->tokens ? b->t : 1);
    b->n = n;
    return MP_OK;
}

/* The gradients' addresses and the quantized tensors, for the reductions
 * (every step: a model may change its recipe between steps). */
static mp_status dist_prepare(mp_trainer *t) {
    const size_t np = mp_optim_count(t->opt), nq = mp_model_qtensors(&t->model, NULL, 0);
    if (!t->gx || np != t->ngrads) {
        free(t->gx), free(t->gn);
        t->gx = malloc((np + 1) * sizeof *t->gx), t->gn = malloc((np + 1) * sizeof *t->gn), t->ngrads = np;
    }
    if (!t->qt || nq != t->nq) {
        free(t->qt), free(t->hsave), free(t->hslot), free(t->amax);
        t->qt = malloc((nq + 1) * sizeof *t->qt), t->hsave = malloc((nq + 1) * sizeof *t->hsave);
        t->hslot = malloc((nq + 1) * sizeof *t->hslot), t->amax = malloc((nq + 1) * sizeof *t->amax), t->nq = nq;
    }
    if (!t->gx || !t->gn || !t->qt || !t->hsave || !t->hslot || !t->amax) {
        free(t->gx), free(t->qt), t->gx = NULL, t->qt = NULL; /* reallocated on the next call */
        return mp_error(MP_ENOMEM, "trainer: out of memory");
    }
    for (size_t i = 0; i < np; i++) t->gx[i] = mp_optim_param(t->opt, i)->grad, t->gn[i] = mp_optim_param(t->opt, i)->n;
    mp_model_qtensors(&t->model, t->qt, nq);
    return MP_OK;
}

/* fp8-delayed: the history of every quantized tensor as it was before the
 * micro-batch (mp_fp8_history_update changes pos, scale and the slot at pos
 * only: mx.h). */
static void amax_save(mp_trainer *t) {
    for (size_t i = 0; i < t->nq; i++) {
        const mp_fp8_history *h = &t->qt[i].q->hist;
        t->hsave[i] = *h;
        t->hslot[i] = h->len ? h->amax[h->pos % h->len] : 0.0f;
    }
}

/* fp8-delayed, after the micro-batch: puts each history back as it was and
 * records the largest amax of all ranks instead of this rank's (NaN when any
 * rank's tensor held an inf or NaN: + inf travels, as amaxes are >= 0), as
 * the model's mp_qtensor_end does with its own. */
static mp_status amax_reduce(mp_trainer *t, const mp_recipe *r) {
    for (size_t i = 0; i < t->nq; i++) {
        const mp_qtensor *q = t->qt[i].q;
        t->amax[i] = q->stats.nonfinite ? INFINITY : q->stats.amax;
    }
    TRY(reduced(t->dist->max_f32(t->dist->ctx, t->amax, t->nq), "the amaxes"));
    for (size_t i = 0; i < t->nq; i++) {
        mp_fp8_history *h = &t->qt[i].q->hist;
        if (h->len) h->amax[t->hsave[i].pos % h->len] = t->hslot[i];
        h->pos = t->hsave[i].pos, h->scale = t->hsave[i].scale;
        mp_fp8_history_update(h, mp_qrole_format(r, t->qt[i].q->role), isinf(t->amax[i]) ? NAN : t->amax[i]);
    }
    return MP_OK;
}

/* Forward and backward of every micro-batch of this step: the gradients of
 * S * (mean loss over the step) land in the parameters' gradients; with
 * ranks, of S / size * (this rank's share's mean loss), summed over the
 * ranks by the caller. *loss: the step's mean loss (over all ranks). */
static mp_status backward_step(mp_trainer *t, float S, float *loss) {
    const mp_model_ops *m = t->model.ops;
    const long A = t->cfg.accum;
    const mp_train_dist *d = t->dist;
    const mp_recipe *r = mp_model_recipe(&t->model);
    const int sync_amax = d && t->nq && r && r->kind == MP_RECIPE_FP8_DELAYED;
    const float gs = d ? S / ((float)A * (float)d->size) : S / (float)A;
    double lsum = 0;
    for (long k = 0; k < A; k++) {
        mp_batch b;
        float l;
        TRY(t->loader.train_batch(t->loader.impl, (uint64_t)t->step * (uint64_t)A + (uint64_t)k, &b));
        if (d) TRY(take_share(d, &b));
        if (sync_amax) amax_save(t);
        TRY(m->train_batch(t->model.impl, &b, gs, k > 0, &l));
        if (sync_amax) TRY(amax_reduce(t, r));
        lsum += l;
    }
    if (d) TRY(reduced(d->sum_f64(d->ctx, &lsum, 1), "the loss"));
    *loss = (float)(lsum / ((double)A * (d ? (double)d->size : 1.0)));
    return MP_OK;
}

/* The step's stores, all tensors together. */
static void sum_stats(const mp_model *model, mp_step_info *r) {
    const mp_model_ops *m = model->ops;
    for (size_t i = 0; i < m->nstats(model->impl); i++) {
        const mp_tensor_stats *s = m->stats(model->impl, i);
        mp_convert_stats_add(&r->fwd, &s->fwd);
        mp_convert_stats_add(&r->bwd, &s->bwd);
        r->fwd_elements += s->fwd_elements, r->bwd_elements += s->bwd_elements;
        r->wgrad_elements += s->wgrad_elements, r->lost_gradients += s->wgrad_lost;
        r->dead_gradients += s->wgrad_dead;
    }
}

/* 2 if x holds an inf, 1 if it holds NaN but no inf, else 0 */
static int nonfinite(const float *x, size_t n) {
    int nan = 0;
    for (size_t i = 0; i < n; i++) {
        if (isinf(x[i])) return 2;
        nan |= isnan(x[i]);
    }
    return nan;
}

/* Which gradients and which activation held the inf/NaN of this step: the
 * gradients holding an inf first (where an overflow happened), then those
 * holding only NaN (where it spread), each in registration order. */
static void locate_nonfinite(mp_trainer *t, mp_step_info *r) {
    for (int want = 2; want >= 1; want--)
        for (size_t i = 0; i < mp_optim_count(t->opt); i++) {
            const mp_param *p = mp_optim_param(t->opt, i);
            if (nonfinite(p->grad, p->n) != want) continue;
            if (r->nbad == 0) r->bad_grad_inf = want == 2;
            if (r->nbad < MP_STEP_NAMES) r->bad_grads[r->nbad] = p->name;
            r->nbad++;
        }
    const mp_model_ops *m = t->model.ops;
    for (size_t i = 0; i < m->nstats(t->model.impl) && !r->first_activation; i++) {
        const mp_tensor_stats *s = m->stats(t->model.impl, i);
        if (s->fwd.overflow || s->fwd.nan) r->first_activation = s->name;
    }
}

mp_status mp_trainer_step(mp_trainer *t, mp_step_info *info) {
    mp_step_info r;
    memset(&r, 0, sizeof r);
    const double clip = t->cfg.clip > 0 ? t->cfg.clip : DBL_MAX; /* the norm is measured either way */
    r.lr = mp_lr_at(&t->cfg.lr, t->step);
    r.scale = t->scaled ? mp_scaler_get_scale(&t->scaler) : 1.0f;
    TRY(mp_optim_set_lr(t->opt, r.lr));
    t->model.ops->reset_stats(t->model.impl);
    if (t->dist) TRY(dist_prepare(t));
    TRY(backward_step(t, r.scale, &r.loss));
    if (t->first) /* each rank's parameters' sums on that rank */
        TRY(reduced(t->dist->reduce_scatter(t->dist->ctx, t->gx, t->gn, t->ngrads, t->first), "the gradients"));
    else if (t->dist) /* before the unscale, as DDP */
        TRY(reduced(t->dist->sum_grads(t->dist->ctx, t->gx, t->gn, t->ngrads), "the gradients"));
    mp_status st = MP_OK;
    if (t->scaled) {
        /* unscale, check and norm in one pass; a clip is applied in the update's pass */
        TRY(mp_optim_unscale_clip(t->opt, &t->scaler, clip, t->norm_acc, &r.grad_norm, &r.skipped));
        if (r.skipped || !isfinite(r.loss)) locate_nonfinite(t, &r);
        TRY(mp_scaler_step(&t->scaler, t->opt, &r.skipped));
        st = mp_scaler_update(&t->scaler, r.skipped); /* MP_EOVERFLOW: the step counts, the run should stop */
        if (st == MP_OK && !isfinite(mp_scaler_inv_scale(&t->scaler))) /* GradScaler would skip every step from here */
            st = mp_error(MP_EOVERFLOW, "loss scale backed off to %g, whose inverse is not finite in fp32, and "
                          "gradients still overflow: the model produces inf/NaN at any scale",
                          (double)mp_scaler_get_scale(&t->scaler));
    } else {
        TRY(mp_optim_unscale_clip(t->opt, NULL, clip, t->norm_acc, &r.grad_norm, NULL));
        if (!isfinite(r.grad_norm) || !isfinite(r.loss)) locate_nonfinite(t, &r);
        TRY(mp_optim_step(t->opt));
    }
    if (t->first && !r.skipped) TRY(share_weights(t));
    t->step++;
    r.step = t->step;
    sum_stats(&t->model, &r);
    r.lost_updates = mp_optim_lost_updates(t->opt, &r.params_updated);
    if (info) *info = r;
    return st;
}

mp_status mp_trainer_evaluate(mp_trainer *t, double *loss, double *accuracy) {
    if (!t->loader.eval_batch) return mp_error(MP_EINVAL, "evaluate: the loader has no evaluation data");
    const mp_train_dist *d = t->dist;
    double sums[3] = {0, 0, 0}; /* loss, count, correct */
    for (size_t i = d ? (size_t)d->rank : 0;; i += d ? (size_t)d->size : 1) { /* with ranks: batch i on rank i mod size */
        mp_batch b;
        TRY(t->loader.eval_batch(t->loader.impl, i, &b));
        if (b.n == 0) break;
        TRY(t->model.ops->eval_batch(t->model.impl, &b, &sums[0], &sums[1], &sums[2]));
    }
    if (d) TRY(reduced(d->sum_f64(d->ctx, sums, 3), "the evaluation's sums"));
    const double lsum = sums[0], count = sums[1], correct = sums[2];
    if (count == 0) return mp_error(MP_EINVAL, "evaluate: no evaluation data");
    if (loss) *loss = lsum / count;
    if (accuracy) *accuracy = correct / count;
    return MP_OK;
}

/* ---- checkpoints ---- */

static const char checkpoint_format[] = "mixprec-checkpoint-1";

static void hex(char *out, const uint8_t *b, size_t n) {
    for (size_t i = 0; i < n; i++) snprintf(out + 2 * i, 3, "%02x", b[i]);
}

static int hexdigit(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Exactly 2n hex digits (sscanf's %2x took "0@", " f" and "-1" as bytes). */
static int unhex(uint8_t *b, const char *s, size_t n) {
    if (!s || strlen(s) != 2 * n) return -1;
    for (size_t i = 0; i < n; i++) {
        const int hi = hexdigit(s[2 * i]), lo = hexdigit(s[2 * i + 1]);
        if (hi < 0 || lo < 0) return -1;
        b[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

/* The value of a string of decimal digits, as mp_trainer_save writes a step
 * count; -1 for anything else ("+3", " 3", "") and above 2^62 (strtol took
 * those, up to LONG_MAX, where the next step overflows; no run is that long). */
static long decimal(const char *s) {
    const long max = 1L << 62;
    if (!s || !*s) return -1;
    long v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || v > (max - (*s - '0')) / 10) return -1;
        v = 10 * v + (*s - '0');
    }
    return v;
}

/* ---- quantization state (recipe.h) ---- */

/* The recipe's settings a resumed run must share, as the "recipe" metadata:
 * "fp8-delayed amax_history_len=1024 amax_compute_algo=max margin=0",
 * "mxfp8 scale_rule=rceil", "nvfp4 2d_weights=1 stochastic_rounding=1 rht=1
 * rht_signs=0xd7e8", "fp8-current"; "none" without a recipe. */
static void recipe_desc(const mp_recipe *r, char *out, size_t cap) {
    const char *name = r ? mp_recipe_name(r->kind) : "";
    if (!r || !*name) snprintf(out, cap, "none");
    else if (r->kind == MP_RECIPE_FP8_DELAYED)
        snprintf(out, cap, "%s amax_history_len=%zu amax_compute_algo=%s margin=%.9g", name, r->amax_history_len,
                 r->amax_most_recent ? "most_recent" : "max", (double)r->margin);
    else if (r->kind == MP_RECIPE_MXFP8)
        snprintf(out, cap, "%s scale_rule=%s", name, r->mx_rule == MP_MX_FLOOR ? "floor" : "rceil");
    else if (r->kind == MP_RECIPE_NVFP4)
        snprintf(out, cap, "%s 2d_weights=%d stochastic_rounding=%d rht=%d rht_signs=0x%04x", name, r->nvfp4_2d_weights,
                 r->nvfp4_sr, r->nvfp4_rht, (unsigned)r->rht_signs);
    else snprintf(out, cap, "%s", name);
}

/* A quantized tensor's small state, little-endian: the stochastic-rounding
 * stream's seed and counter (u64 each), the delayed scaling's history
 * position (u64) and scale (fp32 bits); its amax history is a tensor. */
enum { QBLOB = 28 };

static void qblob_save(const mp_qtensor *q, uint8_t b[QBLOB]) {
    mp_put_u64(b, q->rng.seed), mp_put_u64(b + 8, q->rng.counter), mp_put_u64(b + 16, q->hist.pos);
    mp_put_u32(b + 24, mp_f32_bits(q->hist.scale));
}

/* Checks the state of tensor nt in checkpoint s (MP_ECORRUPT naming what is
 * missing or damaged) and, with apply, puts it into nt->q. */
static mp_status quant_restore(const char *path, const mp_safetensors *s, const mp_named_qtensor *nt, int apply) {
    mp_qtensor *q = nt->q;
    char key[96];
    uint8_t b[QBLOB];
    snprintf(key, sizeof key, "quant.%s", nt->name);
    if (unhex(b, mp_safetensors_meta(s, key), QBLOB) != 0)
        return mp_error(MP_ECORRUPT, "%s: quantization state '%s' missing or damaged", path, key);
    const uint64_t pos = mp_get_u64(b + 16);
    const float scale = mp_bits_f32(mp_get_u32(b + 24));
    const mp_tensor *h = NULL;
    if (q->hist.amax) { /* delayed scaling */
        snprintf(key, sizeof key, "quant.%s.amax_history", nt->name);
        h = mp_safetensors_find(s, key);
        if (!h || h->dtype != MP_F32 || h->ndim != 1 || h->shape[0] != q->hist.len)
            return mp_error(MP_ECORRUPT, "%s: amax history '%s' missing or not F32 [%zu] (the recipe's length)", path,
                            key, q->hist.len);
        if (pos >= q->hist.len || !(scale > 0) || !isfinite(scale))
            return mp_error(MP_ECORRUPT, "%s: quantization state 'quant.%s' damaged (history position %llu of %zu, "
                            "scale %g)", path, nt->name, (unsigned long long)pos, q->hist.len, (double)scale);
        for (size_t i = 0; i < q->hist.len; i++) { /* magnitudes: a NaN, an inf or a negative one is no amax */
            float a;
            memcpy(&a, (const uint8_t *)h->data + 4 * i, 4);
            if (!isfinite(a) || a < 0)
                return mp_error(MP_ECORRUPT, "%s: amax history '%s' holds %g at element %zu: an amax is finite and >= 0",
                                path, key, (double)a, i);
        }
    }
    if (!apply) return MP_OK;
    q->rng.seed = mp_get_u64(b), q->rng.counter = mp_get_u64(b + 8);
    if (h) memcpy(q->hist.amax, h->data, q->hist.len * sizeof(float)), q->hist.pos = (size_t)pos, q->hist.scale = scale;
    return MP_OK;
}

/* Every quantized tensor's state from s, all checked before any is changed. */
static mp_status restore_quant(mp_trainer *t, const char *path, const mp_safetensors *s) {
    const size_t nq = mp_model_qtensors(&t->model, NULL, 0);
    if (nq == 0) return MP_OK;
    mp_named_qtensor *qt = calloc(nq, sizeof *qt);
    if (!qt) return mp_error(MP_ENOMEM, "checkpoint: out of memory");
    mp_model_qtensors(&t->model, qt, nq);
    mp_status st = MP_OK;
    for (int apply = 0; apply < 2 && st == MP_OK; apply++)
        for (size_t i = 0; i < nq && st == MP_OK; i++) st = quant_restore(path, s, &qt[i], apply);
    free(qt);
    return st;
}

mp_status mp_trainer_save(mp_trainer *t, const char *path, const char *const *meta, mp_dtype wt) {
    if (wt != MP_F32 && wt != MP_F16 && wt != MP_BF16)
        return mp_error(MP_EINVAL, "checkpoint weights are fp32, fp16 or bf16");
    const mp_model_ops *m = t->model.ops;
    const size_t nmodel = m->tensors(t->model.impl, NULL, 0), np = mp_optim_count(t->opt);
    const size_t nq = mp_model_qtensors(&t->model, NULL, 0);
    size_t nmeta = 0;
    while (meta && meta[nmeta]) nmeta++;
    mp_tensor *ts = calloc(nmodel + 5 * np + nq + 1, sizeof *ts);
    void **conv = calloc(nmodel + 1, sizeof *conv);
    const char **kv = calloc(nmeta + 20 + 2 * nq, sizeof *kv);
    mp_named_qtensor *qt = calloc(nq + 1, sizeof *qt);
    char (*qkv)[2][80] = calloc(nq + 1, sizeof *qkv); /* "quant.NAME" and its state in hex */
    mp_status st = ts && conv && kv && qt && qkv ? MP_OK : mp_error(MP_ENOMEM, "checkpoint: out of memory");
    size_t n = st == MP_OK ? m->tensors(t->model.impl, ts, nmodel) : 0;
    for (size_t i = 0; i < n && st == MP_OK; i++) { /* weights in another dtype when asked: converted copies */
        if (ts[i].dtype == wt) continue;
        const size_t numel = mp_tensor_numel(&ts[i]), es = mp_format(wt)->size;
        if (!(conv[i] = malloc(numel * es))) {
            st = mp_error(MP_ENOMEM, "checkpoint: out of memory");
            break;
        }
        mp_convert(conv[i], wt, ts[i].data, ts[i].dtype, numel, NULL);
        ts[i].data = conv[i], ts[i].dtype = wt, ts[i].nbytes = numel * es;
    }
    for (size_t i = 0; i < np && st == MP_OK; i++) /* the optimizer state as it is held */
        n += mp_optim_state_tensors(mp_optim_param(t->opt, i), &ts[n]);
    if (st == MP_OK) mp_model_qtensors(&t->model, qt, nq);
    for (size_t i = 0; i < nq && st == MP_OK; i++) { /* quantization state: small parts in hex, amax histories */
        const mp_qtensor *q = qt[i].q;
        uint8_t b[QBLOB];
        qblob_save(q, b);
        snprintf(qkv[i][0], sizeof qkv[i][0], "quant.%s", qt[i].name);
        hex(qkv[i][1], b, QBLOB);
        if (!q->hist.amax) continue;
        mp_tensor *s = &ts[n++];
        snprintf(s->name, sizeof s->name, "quant.%s.amax_history", qt[i].name);
        s->dtype = MP_F32, s->ndim = 1, s->shape[0] = q->hist.len, s->nbytes = q->hist.len * 4, s->data = q->hist.amax;
    }
    char recipe[160];
    recipe_desc(mp_model_recipe(&t->model), recipe, sizeof recipe);
    char step[32], osteps[32], blob[2 * MP_SCALER_BLOB_SIZE + 1] = "";
    snprintf(step, sizeof step, "%ld", t->step);
    snprintf(osteps, sizeof osteps, "%llu", (unsigned long long)mp_optim_steps(t->opt));
    if (t->scaled) {
        uint8_t b[MP_SCALER_BLOB_SIZE];
        mp_scaler_save(&t->scaler, b);
        hex(blob, b, sizeof b);
    }
    if (st == MP_OK) {
        size_t k = 0;
        kv[k++] = "format", kv[k++] = checkpoint_format;
        for (size_t i = 0; i < nmeta; i++) kv[k++] = meta[i];
        kv[k++] = "precision", kv[k++] = t->cfg.precision->name;
        kv[k++] = "master_weights", kv[k++] = mp_master_weights_name(t->cfg.precision->master_weights);
        kv[k++] = "optim_state", kv[k++] = mp_state_format_name(mp_precision_state_format(t->cfg.precision));
        kv[k++] = "reductions", kv[k++] = mp_reductions_name(t->cfg.precision->reductions);
        kv[k++] = "step", kv[k++] = step;
        kv[k++] = "optim_steps", kv[k++] = osteps, kv[k++] = "scaler", kv[k++] = blob;
        if (nq) kv[k++] = "recipe", kv[k++] = recipe; /* none: the key is absent, as before recipes */
        for (size_t i = 0; i < nq; i++) kv[k++] = qkv[i][0], kv[k++] = qkv[i][1];
        kv[k] = NULL;
        st = mp_safetensors_write(path, ts, n, kv);
    }
    for (size_t i = 0; conv && i < nmodel; i++) free(conv[i]);
    free(conv), free(ts), free(kv), free(qt), free(qkv);
    return st;
}

static mp_status restore(mp_trainer *t, const char *path, const mp_safetensors *s, const char *const *expect) {
    const char *fmt = mp_safetensors_meta(s, "format");
    if (!fmt || strcmp(fmt, checkpoint_format) != 0)
        return mp_error(MP_ECORRUPT, "%s: not a mixprec checkpoint (no format metadata)", path);
    char recipe[160];
    recipe_desc(mp_model_recipe(&t->model), recipe, sizeof recipe);
    const mp_state_format own = mp_precision_state_format(&(mp_precision){
        .master_weights = t->cfg.precision->master_weights, .compute = t->cfg.precision->compute});
    const char *prec[] = {"precision", t->cfg.precision->name, "master_weights",
                          mp_master_weights_name(t->cfg.precision->master_weights), "reductions",
                          mp_reductions_name(t->cfg.precision->reductions), "recipe", recipe, "optim_state",
                          mp_state_format_name(mp_precision_state_format(t->cfg.precision)), NULL};
    const char *const *lists[2] = {expect, prec};
    for (int l = 0; l < 2; l++)
        for (size_t i = 0; lists[l] && lists[l][i]; i += 2) {
            const char *v = mp_safetensors_meta(s, lists[l][i]);
            if (!v && l == 1 && i == 2) /* written before the switch: the mode's own setting */
                v = strcmp(mp_safetensors_meta(s, "precision"), "bf16-pure") == 0 ? "bf16-pure" : "fp32";
            if (!v && l == 1 && i == 4) v = "fp32"; /* written before --reductions */
            if (!v && l == 1 && i == 6) v = "none"; /* no recipe (or written before recipes) */
            if (!v && l == 1 && i == 8) v = mp_state_format_name(own); /* written before --optim-state */
            if (v && l == 1 && i == 2 && !strcmp(v, "bf16-pure")) v = "sr"; /* its name before the switch */
            if (!v || strcmp(v, lists[l][i + 1]) != 0)
                return mp_error(MP_EINVAL, "%s: checkpoint has %s '%s', this run asks for '%s'", path, lists[l][i],
                                v ? v : "(none)", lists[l][i + 1]);
        }
    TRY(t->model.ops->load(t->model.impl, s));
    const long step = decimal(mp_safetensors_meta(s, "step")), osteps = decimal(mp_safetensors_meta(s, "optim_steps"));
    if (step < 0 || osteps < 0 || osteps > step) return mp_error(MP_ECORRUPT, "%s: bad step metadata", path);
    TRY(mp_optim_restore(t->opt, osteps));
    for (size_t i = 0; i < mp_optim_count(t->opt); i++) { /* each state as this run holds it */
        mp_tensor want[5];
        const size_t nw = mp_optim_state_tensors(mp_optim_param(t->opt, i), want);
        for (size_t k = 0; k < nw; k++) {
            const mp_tensor *ts = mp_safetensors_find(s, want[k].name);
            if (!ts || ts->dtype != want[k].dtype || ts->nbytes != want[k].nbytes)
                return mp_error(MP_ECORRUPT, "%s: optimizer state '%s' missing or of the wrong size or dtype", path,
                                want[k].name);
            memcpy((void *)want[k].data, ts->data, ts->nbytes);
        }
        if (mp_optim_state_check(t->opt, i) != MP_OK) /* a value the update would turn into NaN, refused now */
            return mp_error(MP_ECORRUPT, "%s: %s", path, mp_last_error());
    }
    if (t->scaled) {
        uint8_t b[MP_SCALER_BLOB_SIZE];
        if (unhex(b, mp_safetensors_meta(s, "scaler"), sizeof b) != 0)
            return mp_error(MP_ECORRUPT, "%s: scaler state missing or not %d hex bytes (metadata 'scaler')", path,
                            MP_SCALER_BLOB_SIZE);
        if (mp_scaler_load(&t->scaler, b, sizeof b) != MP_OK)
            return mp_error(MP_ECORRUPT, "%s: metadata 'scaler': %s", path, mp_last_error());
    }
    TRY(restore_quant(t, path, s));
    t->step = step;
    return MP_OK;
}

mp_status mp_trainer_resume(mp_trainer *t, const char *path, const char *const *expect) {
    mp_safetensors s;
    TRY(mp_safetensors_read(path, &s));
    const mp_status st = restore(t, path, &s, expect);
    mp_safetensors_free(&s);
    return st;
}

/* ---- the ranks agree ---- */

mp_status mp_trainer_state_crc(mp_trainer *t, uint32_t *out) {
    const mp_model_ops *m = t->model.ops;
    const size_t nt = m->tensors(t->model.impl, NULL, 0), nq = mp_model_qtensors(&t->model, NULL, 0);
    mp_tensor *ts = calloc(nt + 1, sizeof *ts);
    mp_named_qtensor *qt = calloc(nq + 1, sizeof *qt);
    if (!ts || !qt) return free(ts), free(qt), mp_error(MP_ENOMEM, "trainer: out of memory");
    uint32_t crc = 0;
    m->tensors(t->model.impl, ts, nt);
    for (size_t i = 0; i < nt; i++) crc = mp_crc32(crc, ts[i].data, ts[i].nbytes);
    for (size_t i = 0; i < mp_optim_count(t->opt); i++) { /* (sharded: each rank holds its own: not compared) */
        mp_tensor st[5];
        const size_t ns = t->first ? 0 : mp_optim_state_tensors(mp_optim_param(t->opt, i), st);
        for (size_t k = 0; k < ns; k++) crc = mp_crc32(crc, st[k].data, st[k].nbytes);
    }
    uint8_t b[MP_SCALER_BLOB_SIZE > QBLOB ? MP_SCALER_BLOB_SIZE : QBLOB];
    mp_put_u64(b, (uint64_t)t->step), mp_put_u64(b + 8, mp_optim_steps(t->opt));
    crc = mp_crc32(crc, b, 16);
    if (t->scaled && mp_scaler_save(&t->scaler, b) == MP_OK) crc = mp_crc32(crc, b, MP_SCALER_BLOB_SIZE);
    mp_model_qtensors(&t->model, qt, nq);
    for (size_t i = 0; i < nq; i++) {
        qblob_save(qt[i].q, b);
        crc = mp_crc32(crc, b, QBLOB);
        if (qt[i].q->hist.amax) crc = mp_crc32(crc, qt[i].q->hist.amax, qt[i].q->hist.len * sizeof(float));
    }
    free(ts), free(qt);
    *out = crc;
    return MP_OK;
}

mp_status mp_trainer_check_ranks(mp_trainer *t) {
    const mp_train_dist *d = t->dist;
    if (!d) return MP_OK;
    double *h = calloc((size_t)d->size, sizeof *h); /* every rank's CRC at its index: the sum gathers them */
    if (!h) return mp_error(MP_ENOMEM, "trainer: out of memory"); /* the others wait: the caller ends the job */
    uint32_t crc;
    h[d->rank] = mp_trainer_state_crc(t, &crc) == MP_OK ? (double)crc : -1.0; /* -1: no CRC (out of memory) */
    mp_status st = reduced(d->sum_f64(d->ctx, h, (size_t)d->size), "the state's CRC-32");
    for (int r = 0; st == MP_OK && r < d->size; r++)
        if (h[r] < 0)
            st = mp_error(MP_ENOMEM, "step %ld: rank %d could not compute the CRC-32 of its state (out of memory)",
                          t->step, r);
    for (int r = 1; st == MP_OK && r < d->size; r++)
        if (h[r] != h[0])
            st = mp_error(MP_ECORRUPT, "step %ld: the ranks' weights, optimizer and scaler state differ: CRC-32 0x%08lx "
                          "on rank 0, 0x%08lx on rank %d", t->step, (unsigned long)h[0], (unsigned long)h[r], r);
    free(h);
    return st;
}
