/* run_summary.c - a run's summary document (docs/LOGS.md). */
#include <math.h>

#include "run_state.h"

/* The mode, the model and the formats. */
static void add_mode(cJSON *j, const run_state *s) {
    const mp_precision *prec = &s->prec;
    const mp_run_result *r = &s->res;
    cJSON_AddStringToObject(j, "precision", prec->label);
    cJSON_AddStringToObject(j, "master_weights", mp_master_weights_name(prec->master_weights));
    cJSON_AddStringToObject(j, "optim_state", mp_state_format_name(mp_precision_state_format(prec)));
    cJSON_AddStringToObject(j, "reductions", mp_reductions_name(prec->reductions));
    cJSON_AddStringToObject(j, "model", s->o.model);
    cJSON_AddStringToObject(j, "compute_format", r->compute_format);
    cJSON_AddStringToObject(j, "format", r->format);
}

/* The evaluation, as the model's row reports it: a language model's
 * validation loss (and its sample), or a classifier's test accuracy. */
static void add_evaluation(cJSON *j, const run_state *s) {
    const mp_run_result *r = &s->res;
    if (s->row->report != MP_REPORT_LANGUAGE) {
        cJSON_AddNumberToObject(j, "test_accuracy", r->eval_accuracy);
        cJSON_AddNumberToObject(j, "test_loss", r->eval_loss);
        return;
    }
    cJSON_AddNumberToObject(j, "val_loss", r->eval_loss);
    cJSON_AddNumberToObject(j, "val_bits_per_byte", r->eval_loss / log(2.0));
    cJSON_AddNumberToObject(j, "val_accuracy", r->eval_accuracy);
    cJSON_AddNumberToObject(j, "tokens_per_s", r->tokens_per_s);
    if (!r->sample) return;
    cJSON_AddStringToObject(j, "sample", r->sample);
    cJSON_AddNumberToObject(j, "sample_printable", r->sample_printable);
    if (isnan(r->sample_words)) cJSON_AddNullToObject(j, "sample_words");
    else cJSON_AddNumberToObject(j, "sample_words", r->sample_words);
}

/* With ranks: the gradients' all-reduce. */
static void add_allreduce(cJSON *j, const run_state *s) {
    const mp_allreduce_stats *ds = s->ranks->stats(s->ranks->ctx);
    cJSON *a = cJSON_AddObjectToObject(j, "allreduce");
    cJSON_AddNumberToObject(a, "ranks", size_of(s));
    cJSON_AddBoolToObject(a, "shard_optimizer", s->o.shard_optimizer);
    cJSON_AddStringToObject(a, "format", mp_format(ds->wire)->name);
    cJSON_AddNumberToObject(a, "values", (double)ds->values);
    cJSON_AddNumberToObject(a, "buffer_bytes", (double)ds->wire_bytes);
    cJSON_AddNumberToObject(a, "ring_bytes_sent", mp_run_ring_bytes(s, ds));
    cJSON_AddNumberToObject(a, "mpi_ms_per_step", s->mpi_median);
    cJSON_AddNumberToObject(a, "wire_underflow", frac(ds->packed.underflow, mp_run_wire_values(ds)));
    cJSON_AddNumberToObject(a, "wire_overflow", (double)ds->packed.overflow);
    cJSON_AddNumberToObject(a, "lost_steps", (double)ds->lost_sums);
}

/* What the parameters hold, per parameter. */
static void add_bytes(cJSON *j, const mp_optim_bytes *by) {
    cJSON_AddNumberToObject(j, "bytes_per_param", mp_bytes_per_param(by));
    cJSON *bp = cJSON_AddObjectToObject(j, "bytes_per_param_parts");
    const double np = by->params > 0 ? by->params : 1;
    cJSON_AddNumberToObject(bp, "weights", by->weights / np), cJSON_AddNumberToObject(bp, "copies", by->copy / np);
    cJSON_AddNumberToObject(bp, "gradients", by->grad / np), cJSON_AddNumberToObject(bp, "compensation", by->comp / np);
    cJSON_AddNumberToObject(bp, "optimizer_state", by->state / np);
}

/* One tensor's stores over the run, its largest magnitudes against limit. */
static cJSON *tensor_json(const char *name, const mp_tensor_stats *ls, double limit) {
    cJSON *o1 = cJSON_CreateObject();
    cJSON_AddStringToObject(o1, "name", name);
    cJSON_AddNumberToObject(o1, "underflow_fraction", frac(ls->bwd.underflow, ls->bwd_elements));
    cJSON_AddNumberToObject(o1, "subnormal_fraction", frac(ls->bwd.subnormal, ls->bwd_elements));
    cJSON_AddNumberToObject(o1, "overflow", (double)ls->bwd.overflow);
    cJSON_AddNumberToObject(o1, "act_underflow_fraction", frac(ls->fwd.underflow, ls->fwd_elements));
    cJSON_AddNumberToObject(o1, "act_subnormal_fraction", frac(ls->fwd.subnormal, ls->fwd_elements));
    cJSON_AddNumberToObject(o1, "act_overflow", (double)ls->fwd.overflow);
    cJSON_AddNumberToObject(o1, "nan", (double)ls->bwd.nan);
    cJSON_AddNumberToObject(o1, "act_nan", (double)ls->fwd.nan);
    cJSON_AddNumberToObject(o1, "grad_values", (double)ls->bwd_elements);
    cJSON_AddNumberToObject(o1, "act_values", (double)ls->fwd_elements);
    for (int bwd = 0; bwd < 2; bwd++) {
        const float amax = bwd ? ls->bwd.amax : ls->fwd.amax;
        const double hr = headroom(limit, amax);
        const char *ka = bwd ? "grad_amax" : "act_amax", *kh = bwd ? "grad_headroom_log2" : "act_headroom_log2";
        if (isnan(hr)) cJSON_AddNullToObject(o1, ka), cJSON_AddNullToObject(o1, kh);
        else cJSON_AddNumberToObject(o1, ka, amax), cJSON_AddNumberToObject(o1, kh, hr);
    }
    if (ls->has_wgrad) {
        cJSON_AddNumberToObject(o1, "wgrad_values", (double)ls->wgrad_elements);
        cJSON_AddNumberToObject(o1, "wgrad_lost", (double)ls->wgrad_lost);
        cJSON_AddNumberToObject(o1, "wgrad_dead", (double)ls->wgrad_dead);
    }
    return o1;
}

/* The run's totals: its stores, lost gradients and updates, and each tensor's. */
static void add_tensors(cJSON *j, const run_state *s) {
    const mp_run_result *r = &s->res;
    cJSON_AddNumberToObject(j, "underflow_fraction", r->underflow);
    cJSON_AddNumberToObject(j, "gradient_overflow", (double)s->grad_over);
    cJSON_AddNumberToObject(j, "activation_overflow", (double)s->act_over);
    cJSON_AddNumberToObject(j, "lost_gradients", r->lost_gradients);
    cJSON_AddNumberToObject(j, "dead_gradients", r->dead_gradients);
    cJSON_AddNumberToObject(j, "lost_updates", r->lost_updates);
    cJSON_AddStringToObject(j, "headroom_against", r->headroom_format->name);
    cJSON *ly = cJSON_AddArrayToObject(j, "tensors");
    for (int i = 0; i < r->ntensors; i++)
        cJSON_AddItemToArray(ly, tensor_json(r->tensor_names[i], &r->tensor_totals[i], r->headroom_format->max));
}

/* With a recipe: its quantized tensors over the run. */
static void add_quantized(cJSON *j, const run_state *s, const mp_recipe *recipe) {
    const mp_run_result *r = &s->res;
    cJSON_AddStringToObject(j, "recipe", mp_recipe_name(recipe->kind));
    cJSON_AddNumberToObject(j, "quant_saturated_fraction", r->quant_saturated_total);
    cJSON_AddNumberToObject(j, "quant_flushed_fraction", r->quant_flushed_total);
    cJSON *qa = cJSON_AddArrayToObject(j, "quantized");
    for (size_t i = 0; i < s->nq; i++) {
        const mp_quant_stats *q = &r->quant_totals[i];
        cJSON *o1 = cJSON_CreateObject();
        cJSON_AddStringToObject(o1, "name", r->quant_names[i]);
        const mp_recipe *lr = s->qt[i].recipe ? s->qt[i].recipe : recipe; /* its layer's */
        cJSON_AddStringToObject(o1, "recipe", mp_recipe_name(lr->kind));
        cJSON_AddStringToObject(o1, "format", mp_format(mp_qrole_format(lr, s->qt[i].q->role))->name);
        cJSON_AddNumberToObject(o1, "amax", q->amax);
        cJSON_AddNumberToObject(o1, "scale", r->quant_scale[i]);
        cJSON_AddNumberToObject(o1, "values", (double)q->n);
        cJSON_AddNumberToObject(o1, "saturated", (double)q->saturated);
        cJSON_AddNumberToObject(o1, "flushed", (double)q->flushed);
        cJSON_AddNumberToObject(o1, "nonfinite", (double)q->nonfinite);
        cJSON_AddNumberToObject(o1, "saturated_fraction", frac(q->saturated, q->n));
        cJSON_AddNumberToObject(o1, "flushed_fraction", frac(q->flushed, q->n));
        cJSON_AddItemToArray(qa, o1);
    }
}

/* Each Linear layer and the recipe it ran in. */
static void add_assigned(cJSON *j, const mp_run_result *r) {
    cJSON *la = cJSON_AddArrayToObject(j, "layer_recipes");
    for (int i = 0; i < r->nassigned; i++) {
        cJSON *o1 = cJSON_CreateObject();
        cJSON_AddStringToObject(o1, "name", r->assigned_names[i]);
        cJSON_AddStringToObject(o1, "recipe", r->assigned_recipes[i]);
        cJSON_AddItemToArray(la, o1);
    }
}

/* The probe's measures per layer and direction: the product's relative error and each operand's, with the
 * shares of its values flushed to zero and saturated (errors null where nothing was summed). */
static void add_probe(cJSON *j, const mp_run_result *r) {
    static const char *const dir[3] = {"forward", "input_gradient", "weight_gradient"};
    static const char *const operand[3][2] = {{"input", "weight"}, {"grad_output", "weight"}, {"grad_output", "input"}};
    cJSON *pj = cJSON_AddObjectToObject(j, "probe");
    cJSON_AddStringToObject(pj, "recipe", r->probe_recipe);
    cJSON *la = cJSON_AddArrayToObject(pj, "layers");
    for (int i = 0; i < r->nprobe; i++) {
        cJSON *o1 = cJSON_CreateObject();
        cJSON_AddStringToObject(o1, "name", r->probe_names[i]);
        for (int d = 0; d < 3; d++) {
            const mp_qprobe *p = &r->probe_sums[i][d];
            cJSON *dj = cJSON_AddObjectToObject(o1, dir[d]);
            cJSON_AddNumberToObject(dj, "gemms", (double)p->calls);
            cJSON_AddNumberToObject(dj, "output_error", mp_qprobe_error(p, -1));
            for (int o = 0; o < 2; o++) {
                cJSON *oj = cJSON_AddObjectToObject(dj, operand[d][o]);
                cJSON_AddNumberToObject(oj, "error", mp_qprobe_error(p, o));
                cJSON_AddNumberToObject(oj, "flushed_fraction", frac(p->flushed[o], p->op_n[o]));
                cJSON_AddNumberToObject(oj, "saturated_fraction", frac(p->saturated[o], p->op_n[o]));
                cJSON_AddNumberToObject(oj, "transformed_gemms", (double)p->transformed[o]);
            }
        }
        cJSON_AddItemToArray(la, o1);
    }
}

/* A classifier's gradient histograms (none taken: no snapshots), with the
 * limits of the format they are against: the compute format, fp16 in fp32. */
static void add_histograms(cJSON *j, const run_state *s) {
    const mp_format_info *fi = mp_format(s->prec.compute == MP_F32 ? MP_F16 : s->prec.compute);
    cJSON *hj = cJSON_AddObjectToObject(j, "histograms");
    cJSON_AddNumberToObject(hj, "log2_lo", MP_RUN_HIST_LO);
    cJSON_AddStringToObject(hj, "limits_of", fi->name);
    cJSON_AddNumberToObject(hj, "min_subnormal", fi->min_subnormal);
    cJSON_AddNumberToObject(hj, "min_normal", fi->min_normal);
    cJSON_AddNumberToObject(hj, "max", fi->max);
    cJSON *snaps = cJSON_AddArrayToObject(hj, "snapshots");
    for (long k = 0; k < s->nh; k++) {
        cJSON *o1 = cJSON_CreateObject();
        cJSON_AddNumberToObject(o1, "step", (double)s->hs[k].step);
        cJSON_AddNumberToObject(o1, "scale", (double)s->hs[k].scale);
        cJSON_AddNumberToObject(o1, "zeros", (double)s->hs[k].zeros);
        cJSON *c = cJSON_AddArrayToObject(o1, "counts");
        for (int b = 0; b < MP_RUN_HIST_N; b++) cJSON_AddItemToArray(c, cJSON_CreateNumber((double)s->hs[k].bins[b]));
        cJSON_AddItemToArray(snaps, o1);
    }
}

/* The summary document (docs/LOGS.md), or NULL when out of memory. It takes
 * the skipped steps' array (s->skips). */
cJSON *mp_run_summary(run_state *s) {
    const mp_run_result *r = &s->res;
    const mp_recipe *recipe = mp_model_recipe(&s->model);
    cJSON *j = cJSON_CreateObject();
    add_mode(j, s);
    cJSON_AddNumberToObject(j, "steps", (double)s->done_steps);
    add_evaluation(j, s);
    cJSON_AddNumberToObject(j, "last_train_loss", r->last_loss);
    cJSON_AddItemToObject(j, "skipped", s->skips);
    s->skips = NULL; /* j owns it now */
    cJSON_AddNumberToObject(j, "final_scale", r->final_scale);
    cJSON_AddNumberToObject(j, "ms_per_step", r->ms_per_step);
    if (size_of(s) > 1) add_allreduce(j, s);
    cJSON_AddNumberToObject(j, "peak_memory_mib", r->memory_mib);
    add_bytes(j, &r->bytes);
    add_tensors(j, s);
    if (s->nq && recipe) add_quantized(j, s, recipe);
    if (r->nassigned) add_assigned(j, r);
    if (r->nprobe) add_probe(j, r);
    if (s->row->report == MP_REPORT_CLASSIFIER) add_histograms(j, s);
    cJSON *wa = cJSON_AddArrayToObject(j, "warnings");
    for (int k = 0; k < r->nwarnings; k++) cJSON_AddItemToArray(wa, cJSON_CreateString(r->warnings[k]));
    return j;
}
