/* run_summary.c - a run's summary document (docs/LOGS.md). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "run_state.h"

/* The summary document (docs/LOGS.md), or NULL when out of memory. */
cJSON *mp_run_summary(run_state *s) {
    const mp_run_spec *o = &s->o;
    const mp_precision *prec = &s->prec;
    mp_run_result *r = &s->res;
    const mp_tensor_stats *run_stats = r->tensor_totals;
    const mp_allreduce_stats *ds = s->ranks->stats(s->ranks->ctx);
    const mp_recipe *recipe = mp_model_recipe(&s->model);
    const int language = s->row->report == MP_REPORT_LANGUAGE, nt = r->ntensors;
    const long done_steps = s->done_steps, nh = s->nh;
    const uint64_t act_over = s->act_over, grad_over = s->grad_over, wire_n = mp_run_wire_values(ds);
    const double limit = r->headroom_format->max, ring = mp_run_ring_bytes(s, ds), mpi_ms = s->mpi_median;
    const mp_format_info *hfmt = r->headroom_format;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "precision", prec->label);
    cJSON_AddStringToObject(j, "master_weights", mp_master_weights_name(prec->master_weights));
    cJSON_AddStringToObject(j, "optim_state", mp_state_format_name(mp_precision_state_format(prec)));
    cJSON_AddStringToObject(j, "reductions", mp_reductions_name(prec->reductions));
    cJSON_AddStringToObject(j, "model", o->model);
    cJSON_AddStringToObject(j, "compute_format", r->compute_format);
    cJSON_AddStringToObject(j, "format", r->format);
    cJSON_AddNumberToObject(j, "steps", (double)done_steps);
    if (language) {
        cJSON_AddNumberToObject(j, "val_loss", r->eval_loss);
        cJSON_AddNumberToObject(j, "val_bits_per_byte", r->eval_loss / log(2.0));
        cJSON_AddNumberToObject(j, "val_accuracy", r->eval_accuracy);
        cJSON_AddNumberToObject(j, "tokens_per_s", r->tokens_per_s);
        if (r->sample) {
        cJSON_AddStringToObject(j, "sample", r->sample);
        cJSON_AddNumberToObject(j, "sample_printable", r->sample_printable);
        if (isnan(r->sample_words)) cJSON_AddNullToObject(j, "sample_words");
        else cJSON_AddNumberToObject(j, "sample_words", r->sample_words);
        }
    } else {
        cJSON_AddNumberToObject(j, "test_accuracy", r->eval_accuracy);
        cJSON_AddNumberToObject(j, "test_loss", r->eval_loss);
    }
    cJSON_AddNumberToObject(j, "last_train_loss", r->last_loss);
    cJSON_AddItemToObject(j, "skipped", s->skips);
    s->skips = NULL; /* j owns it now */
    cJSON_AddNumberToObject(j, "final_scale", r->final_scale);
    cJSON_AddNumberToObject(j, "ms_per_step", r->ms_per_step);
    if (size_of(s) > 1) {
        cJSON *a = cJSON_AddObjectToObject(j, "allreduce");
        cJSON_AddNumberToObject(a, "ranks", size_of(s));
        cJSON_AddBoolToObject(a, "shard_optimizer", o->shard_optimizer);
        cJSON_AddStringToObject(a, "format", mp_format(ds->wire)->name);
        cJSON_AddNumberToObject(a, "values", (double)ds->values);
        cJSON_AddNumberToObject(a, "buffer_bytes", (double)ds->wire_bytes);
        cJSON_AddNumberToObject(a, "ring_bytes_sent", ring);
        cJSON_AddNumberToObject(a, "mpi_ms_per_step", mpi_ms);
        cJSON_AddNumberToObject(a, "wire_underflow", frac(ds->packed.underflow, wire_n));
        cJSON_AddNumberToObject(a, "wire_overflow", (double)ds->packed.overflow);
        cJSON_AddNumberToObject(a, "lost_steps", (double)ds->lost_sums);
    }
    cJSON_AddNumberToObject(j, "peak_memory_mib", r->memory_mib);
    const mp_optim_bytes *by = &r->bytes;
    cJSON_AddNumberToObject(j, "bytes_per_param", mp_bytes_per_param(by));
    cJSON *bp = cJSON_AddObjectToObject(j, "bytes_per_param_parts");
    const double np = by->params > 0 ? by->params : 1;
    cJSON_AddNumberToObject(bp, "weights", by->weights / np), cJSON_AddNumberToObject(bp, "copies", by->copy / np);
    cJSON_AddNumberToObject(bp, "gradients", by->grad / np), cJSON_AddNumberToObject(bp, "compensation", by->comp / np);
    cJSON_AddNumberToObject(bp, "optimizer_state", by->state / np);
    cJSON_AddNumberToObject(j, "underflow_fraction", r->underflow);
    cJSON_AddNumberToObject(j, "gradient_overflow", (double)grad_over);
    cJSON_AddNumberToObject(j, "activation_overflow", (double)act_over);
    cJSON_AddNumberToObject(j, "lost_gradients", r->lost_gradients);
    cJSON_AddNumberToObject(j, "dead_gradients", r->dead_gradients);
    cJSON_AddNumberToObject(j, "lost_updates", r->lost_updates);
    cJSON_AddStringToObject(j, "headroom_against", hfmt->name);
    cJSON *ly = cJSON_AddArrayToObject(j, "tensors");
    for (int i = 0; i < nt; i++) {
        const mp_tensor_stats *ls = &run_stats[i];
        cJSON *o1 = cJSON_CreateObject();
        cJSON_AddStringToObject(o1, "name", r->tensor_names[i]);
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
        cJSON_AddItemToArray(ly, o1);
    }
    if (s->nq && recipe) { /* the recipe's quantized tensors over the run */
        cJSON_AddStringToObject(j, "recipe", mp_recipe_name(recipe->kind));
        cJSON_AddNumberToObject(j, "quant_saturated_fraction", r->quant_saturated_total);
        cJSON_AddNumberToObject(j, "quant_flushed_fraction", r->quant_flushed_total);
        cJSON *qa = cJSON_AddArrayToObject(j, "quantized");
        for (size_t i = 0; i < s->nq; i++) {
        const mp_quant_stats *q = &r->quant_totals[i];
        cJSON *o1 = cJSON_CreateObject();
        cJSON_AddStringToObject(o1, "name", r->quant_names[i]);
        cJSON_AddStringToObject(o1, "format", mp_format(mp_qrole_format(recipe, s->qt[i].q->role))->name);
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
    if (!language) {
        const mp_format_info *fi = mp_format(prec->compute == MP_F32 ? MP_F16 : prec->compute);
        cJSON *hj = cJSON_AddObjectToObject(j, "histograms");
        cJSON_AddNumberToObject(hj, "log2_lo", MP_RUN_HIST_LO);
        cJSON_AddStringToObject(hj, "limits_of", fi->name);
        cJSON_AddNumberToObject(hj, "min_subnormal", fi->min_subnormal);
        cJSON_AddNumberToObject(hj, "min_normal", fi->min_normal);
        cJSON_AddNumberToObject(hj, "max", fi->max);
        cJSON *snaps = cJSON_AddArrayToObject(hj, "snapshots");
        for (long k = 0; k < nh; k++) {
        cJSON *o1 = cJSON_CreateObject();
        cJSON_AddNumberToObject(o1, "step", (double)s->hs[k].step);
        cJSON_AddNumberToObject(o1, "scale", (double)s->hs[k].scale);
        cJSON_AddNumberToObject(o1, "zeros", (double)s->hs[k].zeros);
        cJSON *c = cJSON_AddArrayToObject(o1, "counts");
        for (int b = 0; b < MP_RUN_HIST_N; b++) cJSON_AddItemToArray(c, cJSON_CreateNumber((double)s->hs[k].bins[b]));
        cJSON_AddItemToArray(snaps, o1);
        }
    }
    cJSON *wa = cJSON_AddArrayToObject(j, "warnings");
    for (int k = 0; k < r->nwarnings; k++) cJSON_AddItemToArray(wa, cJSON_CreateString(r->warnings[k]));
    return j;
}
