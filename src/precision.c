/* precision.c - the precision modes: one table (train.h), the switches a
 * mode takes, and the mode applied to a run's parts in one place. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

/* ---- the precision modes: one table ---- */

static const mp_precision modes[] = {
    {.name = "fp32",
     .compute = MP_F32,
     .master_weights = MP_MASTER_FP32,
     .rounding = MP_ROUND_NEAREST,
     .scaling = MP_SCALING_NONE,
     .color = "#3b3b3b",
     .help = "fp32 everywhere (the baseline)"},
    {.name = "fp16-naive",
     .compute = MP_F16,
     .master_weights = MP_MASTER_NONE,
     .reductions = MP_REDUCE_HALF,
     .rounding = MP_ROUND_NEAREST,
     .scaling = MP_SCALING_NONE,
     .color = "#8c564b",
     .help = "everything cast to fp16: no master weights, fp16 reductions, no loss scaling"},
    {.name = "fp16",
     .compute = MP_F16,
     .master_weights = MP_MASTER_FP32,
     .rounding = MP_ROUND_NEAREST,
     .scaling = MP_SCALING_NONE,
     .color = "#d62728",
     .help = "fp16 compute, fp32 master weights, NO loss scaling"},
    {.name = "fp16-static",
     .compute = MP_F16,
     .master_weights = MP_MASTER_FP32,
     .rounding = MP_ROUND_NEAREST,
     .scaling = MP_SCALING_STATIC,
     .color = "#ff7f0e",
     .help = "fp16 with a fixed loss scale S (65536 without :S)"},
    {.name = "fp16-dynamic",
     .compute = MP_F16,
     .master_weights = MP_MASTER_FP32,
     .rounding = MP_ROUND_NEAREST,
     .scaling = MP_SCALING_DYNAMIC,
     .color = "#1f77b4",
     .help = "fp16 with dynamic loss scaling: the AMP recipe"},
    {.name = "bf16",
     .compute = MP_BF16,
     .master_weights = MP_MASTER_FP32,
     .rounding = MP_ROUND_NEAREST,
     .scaling = MP_SCALING_NONE,
     .color = "#2ca02c",
     .help = "bf16 compute, fp32 master weights"},
    {.name = "bf16-pure",
     .compute = MP_BF16,
     .master_weights = MP_MASTER_PURE_BF16,
     .rounding = MP_ROUND_STOCHASTIC,
     .scaling = MP_SCALING_NONE,
     .color = "#9467bd",
     .help = "bf16 weights only, updates rounded stochastically"},
    {.name = "fp8-delayed",
     .compute = MP_BF16,
     .master_weights = MP_MASTER_FP32,
     .rounding = MP_ROUND_NEAREST,
     .scaling = MP_SCALING_NONE,
     .recipe = MP_RECIPE_FP8_DELAYED,
     .color = "#e377c2",
     .help = "bf16 with fp8 Linear GEMMs, per-tensor scales from a 1024-step amax history (TE DelayedScaling)"},
    {.name = "fp8-current",
     .compute = MP_BF16,
     .master_weights = MP_MASTER_FP32,
     .rounding = MP_ROUND_NEAREST,
     .scaling = MP_SCALING_NONE,
     .recipe = MP_RECIPE_FP8_CURRENT,
     .color = "#bcbd22",
     .help = "bf16 with fp8 Linear GEMMs, per-tensor scales from each tensor's amax (TE Float8CurrentScaling)"},
    {.name = "mxfp8",
     .compute = MP_BF16,
     .master_weights = MP_MASTER_FP32,
     .rounding = MP_ROUND_NEAREST,
     .scaling = MP_SCALING_NONE,
     .recipe = MP_RECIPE_MXFP8,
     .mx_rule = MP_MX_RCEIL,
     .color = "#17becf",
     .help = "bf16 with MXFP8 Linear GEMMs: E4M3 in blocks of 32 with E8M0 scales"},
    {.name = "nvfp4",
     .compute = MP_BF16,
     .master_weights = MP_MASTER_FP32,
     .rounding = MP_ROUND_NEAREST,
     .scaling = MP_SCALING_NONE,
     .recipe = MP_RECIPE_NVFP4,
     .color = "#7f7f7f",
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

/* p->label: its base (up to the first '+'), the switches that differ from its table row, then its layer assignments. */
mp_status mp_precision_relabel(mp_precision *p) {
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
    if (k < sizeof lab && p->layers_from[0])
        k += (size_t)snprintf(lab + k, sizeof lab - k, "+layers=%s", p->layers_from);
    else if (k < sizeof lab) k += (size_t)snprintf(lab + k, sizeof lab - k, "%s", p->layers); /* the assignments last */
    if (k >= sizeof lab)
        return mp_error(MP_EINVAL,
                        "precision '%s%s' is too long for a run's label (%zu bytes at most; put the "
                        "layer assignments in a --layer-precision file)",
                        p->label, p->layers, sizeof lab - 1);
    memcpy(p->label, lab, k + 1);
    return MP_OK;
}

mp_status mp_precision_set_master_weights(mp_precision *p, mp_master_weights m) {
    if (!p) return mp_error(MP_EINVAL, "mp_precision_set_master_weights: NULL argument");
    if ((unsigned)m > MP_MASTER_KAHAN) return mp_error(MP_EINVAL, "--master-weights is fp32, none, kahan or sr");
    const char *name = mp_master_weights_name(m);
    if (!strcmp(p->name, "bf16-pure"))
        return mp_error(MP_EINVAL,
                        "--master-weights %s does not apply to bf16-pure, which is bf16+master-weights=sr: "
                        "use bf16+master-weights=%s",
                        name, name);
    if (m != MP_MASTER_FP32 && (p->recipe != MP_RECIPE_NONE || mp_precision_layers_quantize(p)))
        return mp_error(MP_EINVAL,
                        "--master-weights %s does not apply to %s: its recipe quantizes the fp32 master "
                        "weights",
                        name, p->name);
    if ((m == MP_MASTER_NONE || m == MP_MASTER_KAHAN) && p->compute == MP_F32)
        return mp_error(MP_EINVAL, "--master-weights %s needs fp16 or bf16 compute; %s has no half copy to keep alone",
                        name, p->name);
    if (m == MP_MASTER_PURE_BF16 && p->compute != MP_BF16)
        return mp_error(MP_EINVAL,
                        "--master-weights sr rounds updates stochastically into bf16 weights: it needs bf16 "
                        "compute, not %s",
                        p->name);
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
    const mp_status st = mp_precision_relabel(p);
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
    const mp_status st = mp_precision_relabel(p);
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
    if (p->recipe != MP_RECIPE_MXFP8)
        return mp_error(MP_EINVAL, "%s: the MX scale rule applies to mxfp8 only", p->label);
    if (r != MP_MX_FLOOR && r != MP_MX_RCEIL) return mp_error(MP_EINVAL, "mx rule %d: floor or rceil", (int)r);
    const mp_mx_rule old = p->mx_rule;
    p->mx_rule = r;
    const mp_status st = mp_precision_relabel(p);
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
    const mp_status st = mp_precision_relabel(p);
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
            *st = mp_error(MP_EINVAL,
                           "fp16-static:S wants a positive finite scale whose inverse is finite in fp32 "
                           "(S above 2^-128), not '%s'",
                           base + 12);
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
    *st = mp_error(MP_EINVAL,
                   "the precision is %s (with +master-weights=..., +optim-state=..., +reductions=...), not '%s'", names,
                   base);
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
        if (eq && mp_precision_is_layer_target(&p, v, (size_t)(eq - v))) { /* +RECIPE=PATTERN */
            char target[32], pat[sizeof p.layers];
            snprintf(target, sizeof target, "%.*s", (int)(eq - v), v);
            snprintf(pat, sizeof pat, "%.*s", (int)(len - (size_t)(eq - v) - 1), eq + 1);
            if ((st = mp_precision_add_layers(&p, target, pat)) != MP_OK) return st;
            continue;
        }
        if (eq && (size_t)(eq - v) < sizeof key && len - (size_t)(eq - v) - 1 < sizeof val)
            memcpy(key, v, (size_t)(eq - v)), memcpy(val, eq + 1, len - (size_t)(eq - v) - 1);
        mp_mx_rule r;
        const int mw = !strcmp(key, "master-weights"), os = !strcmp(key, "optim-state"),
                  rd = !strcmp(key, "reductions");
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
            st = mp_error(
                MP_EINVAL,
                "unknown switch '+%.*s' in precision '%s' (the switches are master-weights=fp32|none|kahan|sr, "
                "optim-state=fp32|bf16|fp8|8bit|4bit, reductions=fp32|half, mx-rule=floor|rceil and the "
                "layer assignments RECIPE=PATTERN)",
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
    const mp_recipe_kind k = p ? mp_precision_layers_kind(p) : MP_RECIPE_NONE;
    if (p && p->recipe == MP_RECIPE_NONE && mp_precision_layers_quantize(p)) { /* recipes in some layers */
        if (k == MP_RECIPE_NONE) snprintf(out, cap, "%s + recipes per layer", c);
        else if (mp_recipe_parse(mp_recipe_name(k), &r) == MP_OK) {
            const mp_dtype a = mp_qrole_format(&r, MP_QROLE_INPUT), g = mp_qrole_format(&r, MP_QROLE_GRAD);
            snprintf(out, cap, "%s + %s %s%s%s per layer", c, mp_recipe_name(k), mp_format(a)->name, a == g ? "" : "/",
                     a == g ? "" : mp_format(g)->name);
        }
        return out;
    }
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

/* ---- the mode applied to a run's parts ---- */

mp_scaler_config mp_precision_scaler(const mp_precision *p, const mp_scaler_config *base) {
    mp_scaler_config sc = *base;
    sc.dynamic = p->scaling == MP_SCALING_DYNAMIC;
    if (!sc.dynamic && p->static_scale > 0) sc.init_scale = p->static_scale; /* fp16-static:S */
    return sc;
}

mp_status mp_precision_apply(const mp_precision *p, const mp_scaler_config *scaler, double clip, uint64_t seed,
                             mp_model model, mp_optim *opt, mp_mode_applied *out) {
    const int half = p->reductions == MP_REDUCE_HALF;
    if (half && !model.ops->set_reductions)
        return mp_error(MP_EINVAL, "the %s model computes its reductions in fp32 only: no +reductions=half",
                        model.ops->kind);
    mp_mode_applied a;
    memset(&a, 0, sizeof a);
    a.reduce = half ? p->compute : MP_F32;
    a.norm = half && clip > 0 ? p->compute : MP_F32;
    a.scaled = p->scaling != MP_SCALING_NONE;
    mp_status st = mp_optim_set_rounding(opt, p->rounding, seed);
    if (st == MP_OK && p->optim_state != MP_STATE_AUTO) st = mp_optim_set_state_format(opt, p->optim_state);
    const mp_scaler_config sc = mp_precision_scaler(p, scaler);
    if (st == MP_OK && a.scaled) st = mp_scaler_init(&a.scaler, &sc);
    if (st == MP_OK && model.ops->set_reductions) st = model.ops->set_reductions(model.impl, a.reduce);
    if (st == MP_OK) *out = a;
    return st;
}
