/* checkpoint.c - the trainer's checkpoints (train.h): the model's tensors,
 * the optimizer state, the scaler's and the recipe's state, written and read
 * back, every part checked before a resumed run uses it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "trainer.h"

/* ---- checkpoints ---- */

static const char checkpoint_format[] = "mixprec-checkpoint-1";

static void hex(char *out, const uint8_t *b, size_t n) {
    for (size_t i = 0; i < n; i++) snprintf(out + 2 * i, 3, "%02x", b[i]);
}

static int hexdigit(char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
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

void mp_qblob_save(const mp_qtensor *q, uint8_t b[MP_QBLOB]) {
    mp_put_u64(b, q->rng.seed), mp_put_u64(b + 8, q->rng.counter), mp_put_u64(b + 16, q->hist.pos);
    mp_put_u32(b + 24, mp_f32_bits(q->hist.scale));
}

/* Checks the state of tensor nt in checkpoint s (MP_ECORRUPT naming what is
 * missing or damaged) and, with apply, puts it into nt->q. */
static mp_status quant_restore(const char *path, const mp_safetensors *s, const mp_named_qtensor *nt, int apply) {
    mp_qtensor *q = nt->q;
    char key[96];
    uint8_t b[MP_QBLOB];
    snprintf(key, sizeof key, "quant.%s", nt->name);
    if (unhex(b, mp_safetensors_meta(s, key), MP_QBLOB) != 0)
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
            return mp_error(MP_ECORRUPT,
                            "%s: quantization state 'quant.%s' damaged (history position %llu of %zu, "
                            "scale %g)",
                            path, nt->name, (unsigned long long)pos, q->hist.len, (double)scale);
        for (size_t i = 0; i < q->hist.len; i++) { /* magnitudes: a NaN, an inf or a negative one is no amax */
            float a;
            memcpy(&a, (const uint8_t *)h->data + 4 * i, 4);
            if (!isfinite(a) || a < 0)
                return mp_error(MP_ECORRUPT,
                                "%s: amax history '%s' holds %g at element %zu: an amax is finite and >= 0", path, key,
                                (double)a, i);
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
    const char **kv = calloc(nmeta + 22 + 2 * nq, sizeof *kv);
    mp_named_qtensor *qt = calloc(nq + 1, sizeof *qt);
    char(*qkv)[2][80] = calloc(nq + 1, sizeof *qkv); /* "quant.NAME" and its state in hex */
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
        uint8_t b[MP_QBLOB];
        mp_qblob_save(q, b);
        snprintf(qkv[i][0], sizeof qkv[i][0], "quant.%s", qt[i].name);
        hex(qkv[i][1], b, MP_QBLOB);
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
    if (t->mode.scaled) {
        uint8_t b[MP_SCALER_BLOB_SIZE];
        mp_scaler_save(&t->mode.scaler, b);
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
        if (t->cfg.precision->layers[0]) kv[k++] = "layers", kv[k++] = t->cfg.precision->layers; /* as recipe */
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
    const mp_state_format own = mp_precision_state_format(
        &(mp_precision){.master_weights = t->cfg.precision->master_weights, .compute = t->cfg.precision->compute});
    const char *prec[] = {"precision",
                          t->cfg.precision->name,
                          "master_weights",
                          mp_master_weights_name(t->cfg.precision->master_weights),
                          "reductions",
                          mp_reductions_name(t->cfg.precision->reductions),
                          "recipe",
                          recipe,
                          "optim_state",
                          mp_state_format_name(mp_precision_state_format(t->cfg.precision)),
                          "layers",
                          t->cfg.precision->layers[0] ? t->cfg.precision->layers : "none",
                          NULL};
    const char *const *lists[2] = {expect, prec};
    for (int l = 0; l < 2; l++)
        for (size_t i = 0; lists[l] && lists[l][i]; i += 2) {
            const char *v = mp_safetensors_meta(s, lists[l][i]);
            if (!v && l == 1 && i == 2) /* written before the switch: the mode's own setting */
                v = strcmp(mp_safetensors_meta(s, "precision"), "bf16-pure") == 0 ? "bf16-pure" : "fp32";
            if (!v && l == 1 && i == 4) v = "fp32";                    /* written before --reductions */
            if (!v && l == 1 && i == 6) v = "none";                    /* no recipe (or written before recipes) */
            if (!v && l == 1 && i == 8) v = mp_state_format_name(own); /* written before --optim-state */
            if (!v && l == 1 && i == 10) v = "none"; /* no layer assignments (or written before them) */
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
    if (t->mode.scaled) {
        uint8_t b[MP_SCALER_BLOB_SIZE];
        if (unhex(b, mp_safetensors_meta(s, "scaler"), sizeof b) != 0)
            return mp_error(MP_ECORRUPT, "%s: scaler state missing or not %d hex bytes (metadata 'scaler')", path,
                            MP_SCALER_BLOB_SIZE);
        if (mp_scaler_load(&t->mode.scaler, b, sizeof b) != MP_OK)
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
