/* run_print.c - what a run prints: its first line, its progress, the
 * steps that were skipped, its results and its warnings. */
#include <math.h>
#include <stdio.h>

#include "run_state.h"

/* A step that was skipped, or whose loss or gradient norm is not finite: one
 * console line naming where the inf/NaN was, e.g. "step 412 skipped, scale
 * 65536 -> 32768: inf in transformer.h.3.mlp.c_fc.weight (grad) and 2 more;
 * first overflowing activation h.3.mlp.c_fc", and, if it was skipped, an
 * entry of the summary's "skipped" array. Returns nonzero when out of memory. */
int mp_run_report_nonfinite(run_state *s, const mp_step_info *si) {
    FILE *out = s->io.out, *bar = s->writer ? s->io.bar : NULL;
    mp_run_result *res = &s->res;
    char where[512];
    size_t k = 0;
#define ADD(...) k += (size_t)snprintf(where + k, k < sizeof where ? sizeof where - k : 0, __VA_ARGS__)
    if (si->nbad) {
        ADD("%s in %s (grad)", si->bad_grad_inf ? "inf" : "NaN", si->bad_grads[0]);
        if (si->nbad > 1) ADD(" and %zu more", si->nbad - 1);
    } else {
        ADD("no gradient held inf or NaN");
    }
    if (si->first_activation) ADD("; first overflowing activation %s", si->first_activation);
#undef ADD
    if (bar) fputc('\n', bar);
    const mp_scaler *sc = mp_trainer_scaler(s->tr);
    if (si->skipped)
        OUT("  step %ld skipped, scale %g -> %g: %s\n", si->step, (double)si->scale,
            sc ? (double)mp_scaler_get_scale(sc) : 1.0, where);
    else OUT("  step %ld: loss %g, gradient norm %g: %s\n", si->step, (double)si->loss, si->grad_norm, where);
    if (!si->skipped) return 0;
    if (res->nskips < MP_RUN_SKIPS_KEPT && res->skips && res->skip_text) { /* for the report */
        snprintf(res->skip_text[res->nskips], sizeof res->skip_text[0], "%s", where);
        res->skips[res->nskips] = (mp_report_skip){si->step, (double)si->scale, res->skip_text[res->nskips]};
        res->nskips++;
    }
    cJSON *e = cJSON_CreateObject(), *names = cJSON_CreateArray();
    if (!e || !names || !cJSON_AddItemToArray(s->skips, e)) return cJSON_Delete(e), cJSON_Delete(names), 1;
    cJSON_AddNumberToObject(e, "step", (double)si->step);
    cJSON_AddNumberToObject(e, "scale", (double)si->scale);
    cJSON_AddItemToObject(e, "tensors", names);
    for (size_t i = 0; i < si->nbad && i < MP_STEP_NAMES; i++)
        cJSON_AddItemToArray(names, cJSON_CreateString(si->bad_grads[i]));
    if (si->nbad > MP_STEP_NAMES) cJSON_AddNumberToObject(e, "tensors_total", (double)si->nbad);
    if (si->first_activation) cJSON_AddStringToObject(e, "first_activation", si->first_activation);
    else cJSON_AddNullToObject(e, "first_activation");
    return 0;
}

/* The run's first line. */
void mp_run_print_start(const run_state *s) {
    const mp_run_spec *o = &s->o;
    FILE *out = s->io.out;
    char ranks[64] = "";
    if (size_of(s) > 1) snprintf(ranks, sizeof ranks, " on %d ranks (%ld each)", size_of(s), o->batch / size_of(s));
    const int language = s->row->report == MP_REPORT_LANGUAGE;
    OUT("train: %s%s, %s, %s lr %g%s, batch %ld x %ld%s%s, %ld steps (%ld per epoch), seed %ld%s\n", o->model,
        s->row->describe(o), s->prec.label, o->optimizer == MP_RUN_ADAMW ? "adamw" : "sgd", o->lr,
        o->schedule == MP_LR_COSINE ? " cosine" : "", o->batch, o->accum, language ? " sequences" : "", ranks, s->total,
        s->steps_per_epoch, o->seed, o->resume ? " (resumed)" : "");
    if (out && s->row->print_start) s->row->print_start(s->mctx, out);
}

/* The step's progress: a bar on a terminal, else a line every 5% of the run; an evaluation's line. */
void mp_run_print_step(const run_state *s, const mp_step_info *si, int eval_now, double eval_loss, double eval_acc) {
    FILE *out = s->io.out, *bar = s->writer ? s->io.bar : NULL;
    const long total = s->total, every = total / 20 > 0 ? total / 20 : 1;
    if (bar) {
        const int w = 30, fill = (int)((double)si->step / (double)total * w);
        fprintf(bar, "\r  [%-*.*s] %ld/%ld loss %.4f scale %g %.1f steps/s ", w, fill,
                "==============================", si->step, total, (double)si->loss, (double)si->scale,
                (double)(s->done_steps + 1) / (mp_now() - s->t_start));
        fflush(bar);
    } else if (si->step % every == 0 || si->step == total) {
        OUT("  step %ld/%ld loss %.4f scale %g%s\n", si->step, total, (double)si->loss, (double)si->scale,
            si->skipped ? " (skipped)" : "");
    }
    if (!eval_now) return;
    if (bar) fputc('\n', bar);
    if (s->row->report == MP_REPORT_LANGUAGE)
        OUT("  eval at step %ld: validation loss %.4f (%.4f bits per byte)\n", si->step, eval_loss,
            eval_loss / log(2.0));
    else OUT("  eval at step %ld: test accuracy %.2f%%, loss %.4f\n", si->step, 100 * eval_acc, eval_loss);
}

/* The all-reduce's figures: rank 0's values on the wire, and what each rank
 * sends in a ring all-reduce of the buffer, 2 (N-1)/N of it (with 2 ranks
 * every algorithm sends the buffer once). */
uint64_t mp_run_wire_values(const mp_allreduce_stats *ds) { return ds->allreduces * ds->values; }

double mp_run_ring_bytes(const run_state *s, const mp_allreduce_stats *ds) {
    return 2.0 * (size_of(s) - 1) / size_of(s) * (double)ds->wire_bytes;
}

/* With a probe: each layer's product error per direction. */
static void print_probe(const mp_run_result *r, FILE *out) {
    int w = 0;
    for (int i = 0; i < r->nprobe; i++) w = (int)strlen(r->probe_names[i]) > w ? (int)strlen(r->probe_names[i]) : w;
    OUT("        probe %s, the relative error of each GEMM's product (forward / input gradient / weight gradient):\n",
        r->probe_recipe);
    for (int i = 0; i < r->nprobe; i++) {
        if (!r->probe_sums[i][0].calls) { /* the layer ran in a recipe of its own */
            OUT("          %-*s - (in its own recipe)\n", w, r->probe_names[i]);
            continue;
        }
        OUT("          %-*s %.4f / %.4f / %.4f\n", w, r->probe_names[i], mp_qprobe_error(&r->probe_sums[i][0], -1),
            mp_qprobe_error(&r->probe_sums[i][1], -1), mp_qprobe_error(&r->probe_sums[i][2], -1));
    }
}

/* The results, as `mixprec train` prints them. */
void mp_run_print_results(const run_state *s) {
    const mp_run_result *r = &s->res;
    const mp_tensor_stats *run_stats = r->tensor_totals;
    const mp_allreduce_stats *ds = s->ranks->stats(s->ranks->ctx);
    const mp_scaler *sc = mp_trainer_scaler(s->tr);
    FILE *out = s->io.out;
    const int language = s->row->report == MP_REPORT_LANGUAGE, nt = r->ntensors;
    if (language)
        OUT("result: validation loss %.4f (%.4f bits per byte), last train loss %.4f\n", r->eval_loss,
            r->eval_loss / log(2.0), r->last_loss);
    else
        OUT("result: test accuracy %.2f%%, test loss %.4f, last train loss %.4f\n", 100 * r->eval_accuracy,
            r->eval_loss, r->last_loss);
    OUT("        %ld steps, %ld skipped, final scale %g, %.2f ms/step (median)", s->done_steps, r->skipped_total,
        r->final_scale, r->ms_per_step);
    if (language) OUT(", %.0f tokens/s", r->tokens_per_s);
    OUT(", %.1f s, peak memory %.0f MiB\n", s->elapsed, r->memory_mib);
    const mp_optim_bytes *b = &r->bytes;
    if (b->params > 0)
        OUT("        bytes per parameter %.2f: weights %.2f, copies %.2f, gradients %.2f, compensation %.2f, "
            "optimizer state %.2f%s\n",
            mp_bytes_per_param(b), b->weights / b->params, b->copy / b->params, b->grad / b->params,
            b->comp / b->params, b->state / b->params,
            s->o.shard_optimizer ? " (rank 0's share: --shard-optimizer)" : "");
    if (size_of(s) > 1) {
        OUT("        all-reduce %s: %llu gradient values, %.1f MB summed per step (each rank sends %.1f MB in a "
            "ring), %.2f ms/step in MPI (median)",
            mp_format(ds->wire)->name, (unsigned long long)ds->values, (double)ds->wire_bytes / 1e6,
            mp_run_ring_bytes(s, ds) / 1e6, s->mpi_median);
        if (ds->wire != MP_F32)
            OUT("; rank 0's values on the wire: %.4f%% underflowed to 0, %llu overflowed",
                100 * frac(ds->packed.underflow, mp_run_wire_values(ds)), (unsigned long long)ds->packed.overflow);
        if (ds->wire != MP_F32 && sc) OUT("; %ld of %ld skipped steps lost to it", ds->lost_sums, r->skipped_total);
        else if (ds->wire != MP_F32) /* no loss scaling: nothing skips, an inf reaches the update */
            OUT("; %ld steps' sums not finite because of it", ds->lost_sums);
        if (out) fputc('\n', out);
    }
    if (!language) {
        OUT("        gradient stores per layer (underflow to 0 / subnormal / overflow):");
        for (int i = 0; i < nt; i++) {
            const mp_tensor_stats *ls = &run_stats[i];
            const double ne = ls->bwd_elements ? (double)ls->bwd_elements : 1.0;
            OUT("%s %s %.3g%% / %.3g%% / %llu", i ? "," : "", r->tensor_names[i], 100 * (double)ls->bwd.underflow / ne,
                100 * (double)ls->bwd.subnormal / ne, (unsigned long long)ls->bwd.overflow);
        }
        OUT("\n");
    } else {
        int worst = -1;
        for (int i = 0; i < nt; i++)
            if (run_stats[i].bwd_elements &&
                (worst < 0 || frac(run_stats[i].bwd.underflow, run_stats[i].bwd_elements) >
                                  frac(run_stats[worst].bwd.underflow, run_stats[worst].bwd_elements)))
                worst = i;
        OUT("        gradient stores: %.4f%% underflowed to 0 (most in %s: %.4f%%), %llu overflowed; "
            "activation stores: %llu overflowed\n",
            100 * r->underflow, worst >= 0 ? r->tensor_names[worst] : "-",
            worst >= 0 ? 100 * frac(run_stats[worst].bwd.underflow, run_stats[worst].bwd_elements) : 0.0,
            (unsigned long long)s->grad_over, (unsigned long long)s->act_over);
    }
    OUT("        weight gradients: %.4f%% lost (nonzero in fp32, 0 when stored), %.4f%% dead (0 in fp32); "
        "updates: %.4f%% lost (the weight did not change)\n",
        100 * r->lost_gradients, 100 * r->dead_gradients, 100 * r->lost_updates);
    if (s->nq) {
        const mp_quant_stats *qs = r->quant_totals;
        size_t ws = 0, wf = 0; /* the tensors with the largest shares */
        for (size_t i = 0; i < s->nq; i++) {
            if (frac(qs[i].saturated, qs[i].n) > frac(qs[ws].saturated, qs[ws].n)) ws = i;
            if (frac(qs[i].flushed, qs[i].n) > frac(qs[wf].flushed, qs[wf].n)) wf = i;
        }
        OUT("        %s: %.4f%% of the quantized values saturated", r->format, 100 * r->quant_saturated_total);
        if (r->quant_saturated_total > 0)
            OUT(" (most in %s: %.4f%%)", r->quant_names[ws], 100 * frac(qs[ws].saturated, qs[ws].n));
        OUT(", %.4f%% flushed to zero", 100 * r->quant_flushed_total);
        if (r->quant_flushed_total > 0)
            OUT(" (most in %s: %.4f%%)", r->quant_names[wf], 100 * frac(qs[wf].flushed, qs[wf].n));
        if (out) fputc('\n', out);
    }
    if (r->nprobe) print_probe(r, out);
}

/* The warnings the literature describes, into the result and printed. */
void mp_run_add_warnings(run_state *s) {
    const mp_run_spec *o = &s->o;
    mp_run_result *r = &s->res;
    const mp_allreduce_stats *ds = s->ranks->stats(s->ranks->ctx);
    const mp_scaler *sc = mp_trainer_scaler(s->tr);
    FILE *out = s->io.out;
#define WARN(...) \
    if (r->nwarnings < MP_RUN_WARNINGS) snprintf(r->warnings[r->nwarnings++], sizeof r->warnings[0], __VA_ARGS__)
    if (s->nan_step >= 0) WARN("the loss became NaN/inf at step %ld", s->nan_step);
    if (sc && s->prec.scaling == MP_SCALING_DYNAMIC && mp_scaler_get_scale(sc) < o->scaler.init_scale / 1024.0f)
        WARN("the loss scale collapsed from %g to %g (%ld skipped steps)", (double)o->scaler.init_scale,
             (double)mp_scaler_get_scale(sc), r->skipped_total);
    if (s->stopped) WARN("stopped: %.230s", s->stopped);
    if (s->prec.compute == MP_F16 && r->underflow > 0.01)
        WARN("%.2f%% of the gradient values stored in fp16 underflowed to zero%s", 100.0 * r->underflow,
             sc ? "" : ": use loss scaling (fp16-dynamic)");
    if (ds->lost_sums)
        WARN("%ld steps %s because the gradients overflowed in the %s all-reduce (cast or sum) where every rank's "
             "fp32 gradients were finite (--allreduce fp32 keeps them)",
             ds->lost_sums, sc ? "were skipped" : "took an inf update", mp_format(ds->wire)->name);
    if (s->act_over)
        WARN("%llu activation values overflowed to inf when stored in %s", (unsigned long long)s->act_over,
             r->compute_format);
#undef WARN
    for (int k = 0; k < r->nwarnings; k++) OUT("warning: %s\n", r->warnings[k]);
}
