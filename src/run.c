/* run.c - one training run from a spec (mixprec/run.h), in its phases: the
 * model from its row of the table (models.h), its data and the mode, the
 * trainer, the steps with the run's totals, the end; what the run prints
 * and writes is in run_print.c, run_log.c, run_summary.c and run_outputs.c. */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "run_state.h"

void mp_run_result_free(mp_run_result *r) {
    if (!r) return;
    free(r->loss), free(r->scale), free(r->skipped), free(r->tensor_names), free(r->tensor_underflow);
    free(r->tensor_totals), free(r->skips), free(r->skip_text);
    free(r->eval_steps), free(r->eval_losses), free(r->sample), free(r->summary);
    free(r->assigned_names), free(r->assigned_recipes);
    free(r->probe_names), free(r->probe_sums);
    free(r->quant_names), free(r->quant_totals), free(r->quant_scale), free(r->quant_saturated), free(r->quant_flushed);
    memset(r, 0, sizeof *r);
}

size_t mp_run_spec_size(void) { return sizeof(mp_run_spec); }

size_t mp_run_result_size(void) { return sizeof(mp_run_result); }

const char *mp_run_result_summary(const mp_run_result *r) { return r ? r->summary : NULL; }

long mp_run_result_steps(const mp_run_result *r, const float **loss, const float **scale, const uint8_t **skipped) {
    if (loss) *loss = r ? r->loss : NULL;
    if (scale) *scale = r ? r->scale : NULL;
    if (skipped) *skipped = r ? r->skipped : NULL;
    return r ? r->nsteps : 0;
}

double mp_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void state_free(run_state *s) {
    mp_trainer_free(s->tr);
    mp_loader_free(&s->loader);
    mp_model_free(&s->model);
    mp_optim_free(s->opt);
    if (s->mctx) s->row->close(s->mctx);
    free(s->ms), free(s->mpi_ms), free(s->hs), free(s->qt);
    cJSON_Delete(s->skips);
}

/* The optimizer of the spec (MP_EINVAL: its settings cannot work). */
static mp_status make_optim(const mp_run_spec *o, mp_optim **out) {
    if (o->optimizer == MP_RUN_ADAMW) {
        mp_adamw_config ac = mp_adamw_defaults();
        ac.lr = o->lr, ac.weight_decay = o->weight_decay, ac.beta1 = o->beta1, ac.beta2 = o->beta2;
        return mp_optim_adamw(out, &ac);
    }
    mp_sgd_config sc = mp_sgd_defaults();
    sc.lr = o->lr, sc.momentum = o->momentum, sc.weight_decay = o->weight_decay;
    return mp_optim_sgd(out, &sc);
}

/* The model's row opens it (its string parsed), the memory it needs is
 * checked, its data read; the optimizer, the model in the mode and its
 * loader made, as for a model of the caller's. */
static int setup(run_state *s) {
    const mp_run_spec *o = &s->o;
    const mp_model_row *row = s->row;
    const size_t B = (size_t)o->batch;
    int bad_spec = 0;
    long per = 0;
    mp_status st = row->open(o, &s->mctx, &s->T);
    if (st != MP_OK) return mp_run_invalid(s, mp_last_error());
    if (mp_run_fits(s) != RUN_OK) return RUN_FAILED;
    if (row->data && (st = row->data(s->mctx, &bad_spec)) != MP_OK)
        return bad_spec ? mp_run_invalid(s, mp_last_error()) : mp_run_failed(s, st);
    if (make_optim(o, &s->opt) != MP_OK) return mp_run_invalid(s, mp_last_error());
    if ((st = row->create(s->mctx, &s->prec, s->opt, B, (uint64_t)o->seed, &s->model)) != MP_OK ||
        (st = row->loader(s->mctx, B, o->shuffle, (uint64_t)o->seed, &s->loader, &per)) != MP_OK)
        return mp_run_failed(s, st);
    if (!s->model.ops || !s->loader.train_batch)
        return mp_run_fail(s, MP_ESTATE, "model %s: no model or loader made", o->model);
    mp_recipe pr;
    if (o->probe && ((st = mp_recipe_parse(o->probe, &pr)) != MP_OK ||
                     (st = row->probe(s->mctx, &pr, (uint64_t)o->seed ^ 0x9E3779B97F4A7C15ull)) != MP_OK))
        return st == MP_EINVAL ? mp_run_invalid(s, mp_last_error()) : mp_run_failed(s, st);
    s->steps_per_epoch = per / o->accum > 0 ? per / o->accum : 1;
    return RUN_OK;
}

/* The metadata a checkpoint keeps about the model, checked on resume. */
static void model_meta(const mp_model_row *row, const mp_run_spec *o, const char **kv) {
    int k = 0;
    kv[k++] = "model", kv[k++] = o->model;
    k += row->meta(o, kv + k);
    kv[k++] = "optimizer", kv[k++] = o->optimizer == MP_RUN_ADAMW ? "adamw" : "sgd";
    kv[k] = NULL;
}

/* n bytes from the final model into r->sample (its row's sample) and their
 * judgement. RUN_OK, or RUN_FAILED after a message. */
static int take_sample(run_state *s, long n, mp_run_result *r) {
    const mp_status st = s->row->sample(s->mctx, n, &r->sample, &r->sample_printable, &r->sample_words);
    return st == MP_OK ? RUN_OK : mp_run_fail(s, st, "sampling: %s", mp_last_error());
}

/* The spec resolved, the model, data and trainer made, the initial weights or
 * the checkpoint read. */
static int begin(run_state *s) {
    mp_run_spec *o = &s->o;
    if (o->weight_decay < 0) o->weight_decay = o->optimizer == MP_RUN_ADAMW ? 0.01 : 0.0;
    if (o->min_lr < 0) o->min_lr = o->lr / 10;
    s->row = mp_model_row_of(o);
    if (!o->batch) o->batch = s->row->batch;
    if (o->threads) mp_set_threads(o->threads);
    mp_run_peak_reset();
    s->writer = rank_of(s) == 0; /* with ranks, rank 0 alone writes files and the console */
    if (s->writer) {             /* one writer per output: each locked for the whole run, before anything is read */
        const char *const opt[4] = {"--log", "--summary", "--save", "--dump-grads"};
        const char *const path[4] = {o->log, o->summary, o->save, o->dump_grads};
        for (int k = 0; k < 4; k++) {
            if (!path[k] || mp_output_held(path[k])) continue; /* a lock the caller holds stays the caller's */
            const mp_status ls = mp_output_lock(opt[k], path[k]);
            if (ls != MP_OK) return mp_run_failed(s, ls);
            s->locked[k] = path[k];
        }
    }
    mp_status ts = mp_threads_check(); /* before OpenMP's runtime would end the process for it */
    if (ts != MP_OK) return mp_run_failed(s, ts);
    s->T = 1, s->steps_per_epoch = 1;
    int ret = setup(s);
    if (ret != RUN_OK) return ret;
    mp_train_config tc = {.precision = &s->prec,
                          .scaler = o->scaler,
                          .lr = {o->lr, o->schedule, o->warmup, 0, o->min_lr},
                          .accum = o->accum,
                          .clip = o->clip,
                          .dist = s->ranks->dist,
                          .shard_optimizer = o->shard_optimizer,
                          .seed = (uint64_t)o->seed};
    s->total = o->steps ? o->steps : (o->epochs ? o->epochs : 1) * s->steps_per_epoch;
    /* the cosine reaches min_lr at the last step, as nanoGPT's lr_decay_iters = max_iters */
    tc.lr.decay_steps = s->total;
    if (o->warmup >= s->total) {
        char msg[200];
        snprintf(msg, sizeof msg,
                 "--warmup %ld is not shorter than the run's %ld steps: the rate would never reach --lr", o->warmup,
                 s->total);
        return mp_run_invalid(s, msg);
    }
    if (mp_trainer_create(&s->tr, &tc, s->model, s->opt, s->loader) != MP_OK) return mp_run_invalid(s, mp_last_error());
    struct rlimit fl; /* ulimit -f: a checkpoint that cannot be written whole is refused now, not after training */
    const mp_optim_bytes held = mp_optim_bytes_held(s->opt);
    const double ckpt = held.weights + held.comp + held.params * mp_run_state_bytes(s);
    if (o->save && getrlimit(RLIMIT_FSIZE, &fl) == 0 && fl.rlim_cur != RLIM_INFINITY && (double)fl.rlim_cur < ckpt)
        return mp_run_fail(s, MP_EIO,
                           "--save %s: the checkpoint holds at least %.0f bytes (weights and optimizer state), "
                           "and this process may write files of at most %llu bytes (ulimit -f)",
                           o->save, ckpt, (unsigned long long)fl.rlim_cur);
    model_meta(s->row, o, s->meta);
    if (o->init) {
        mp_safetensors st;
        mp_status e = mp_safetensors_read(o->init, &st);
        const char *holds = e == MP_OK ? mp_safetensors_meta(&st, "model") : NULL;
        if (holds && s->row->prefix && strcmp(holds, o->model) != 0) { /* a checkpoint of a model named by its string */
            const int r = mp_run_fail(s, MP_EINVAL, "--init %s holds the weights of model %s, this run's model is %s",
                                      o->init, holds, o->model);
            mp_safetensors_free(&st);
            return r;
        }
        if (e == MP_OK) e = s->model.ops->load(s->model.impl, &st), mp_safetensors_free(&st);
        if (e != MP_OK) return mp_run_failed_file(s, e, o->init);
    }
    const mp_status e = o->resume ? mp_trainer_resume(s->tr, o->resume, s->meta) : MP_OK;
    if (e != MP_OK) return mp_run_failed_file(s, e, o->resume);
    s->step = mp_trainer_step_count(s->tr);
    if (s->step >= s->total)
        return mp_run_fail(s, MP_ESTATE, "%s is at step %ld already; ask for more steps than that (this run: %ld)",
                           o->resume, s->step, s->total);
    return RUN_OK;
}

/* With a recipe or layer assignments: each layer the row names and its recipe (r->assigned_*). */
static mp_status assigned_layers(run_state *s) {
    mp_run_result *r = &s->res;
    if (!s->row->layers || (s->prec.recipe == MP_RECIPE_NONE && !s->prec.layers[0])) return MP_OK;
    const size_t n = s->row->layers(s->mctx, NULL, NULL, 0);
    const char **names = calloc(n + 1, sizeof *names);
    mp_recipe_kind *kinds = calloc(n + 1, sizeof *kinds);
    r->assigned_names = calloc(n + 1, sizeof *r->assigned_names);
    r->assigned_recipes = calloc(n + 1, sizeof *r->assigned_recipes);
    const int ok = names && kinds && r->assigned_names && r->assigned_recipes;
    if (ok) s->row->layers(s->mctx, names, kinds, n);
    for (size_t i = 0; ok && i < n; i++) {
        const char *rn = kinds[i] == MP_RECIPE_NONE ? mp_format(s->prec.compute)->name : mp_recipe_name(kinds[i]);
        snprintf(r->assigned_names[i], sizeof r->assigned_names[i], "%s", names[i]);
        snprintf(r->assigned_recipes[i], sizeof r->assigned_recipes[i], "%s", rn);
    }
    if (ok) r->nassigned = (int)n;
    free(names), free(kinds);
    return ok ? MP_OK : MP_ENOMEM;
}

/* The result's arrays for the steps to come, the tensors' names, the log and its header. */
static int prepare(run_state *s) {
    const mp_run_spec *o = &s->o;
    mp_run_result *r = &s->res;
    const int nt = (int)s->model.ops->nstats(s->model.impl);
    s->nq = mp_model_qtensors(&s->model, NULL, 0); /* the recipe's quantized tensors: 0 without one */
    mp_precision_formats(&s->prec, r->format, sizeof r->format);
    snprintf(r->model_kind, sizeof r->model_kind, "%s", s->model.ops->kind);
    r->compute_format = mp_format(s->prec.compute)->name;
    r->ntensors = nt;
    const size_t cap = (size_t)(s->total - s->step);
    r->loss = malloc(cap * sizeof *r->loss), r->scale = malloc(cap * sizeof *r->scale), r->skipped = calloc(cap, 1);
    r->tensor_names = calloc((size_t)nt + 1, sizeof *r->tensor_names);
    r->tensor_underflow = calloc(cap * (size_t)(nt ? nt : 1), sizeof *r->tensor_underflow);
    s->ms = malloc(cap * sizeof *s->ms), s->mpi_ms = malloc(cap * sizeof *s->mpi_ms);
    s->skips = cJSON_CreateArray();
    r->skips = calloc(MP_RUN_SKIPS_KEPT, sizeof *r->skips),
    r->skip_text = calloc(MP_RUN_SKIPS_KEPT, sizeof *r->skip_text);
    r->tensor_totals = calloc((size_t)nt + 1, sizeof *r->tensor_totals);
    const size_t neval_max = (o->eval_every ? cap / (size_t)o->eval_every : 0) + 2; /* the last one: the end's */
    r->eval_steps = malloc(neval_max * sizeof *r->eval_steps),
    r->eval_losses = malloc(neval_max * sizeof *r->eval_losses);
    r->nquant = (int)s->nq;
    s->qt = calloc(s->nq + 1, sizeof *s->qt), r->quant_names = calloc(s->nq + 1, sizeof *r->quant_names);
    r->quant_totals = calloc(s->nq + 1, sizeof *r->quant_totals),
    r->quant_scale = calloc(s->nq + 1, sizeof *r->quant_scale);
    r->quant_saturated = calloc(cap, sizeof *r->quant_saturated),
    r->quant_flushed = calloc(cap, sizeof *r->quant_flushed);
    s->hist_on = s->row->histogram && o->hist_every > 0;
    s->nh_max = s->hist_on ? (long)cap / o->hist_every + 2 : 0;
    s->hs = calloc((size_t)s->nh_max + 1, sizeof *s->hs);
    if (!r->loss || !r->scale || !r->skipped || !r->tensor_names || !r->tensor_underflow || !s->ms || !s->mpi_ms ||
        !s->skips || !r->skips || !r->skip_text || !r->tensor_totals || !r->eval_steps || !r->eval_losses || !s->hs ||
        !s->qt || !r->quant_names || !r->quant_totals || !r->quant_scale || !r->quant_saturated || !r->quant_flushed)
        return mp_run_fail(s, MP_ENOMEM, "out of memory");
    mp_model_qtensors(&s->model, s->qt, s->nq);
    for (size_t i = 0; i < s->nq; i++) snprintf(r->quant_names[i], sizeof r->quant_names[i], "%s", s->qt[i].name);
    if (assigned_layers(s) != MP_OK) return mp_run_fail(s, MP_ENOMEM, "out of memory");
    for (int i = 0; i < nt; i++) {
        const mp_tensor_stats *ts = s->model.ops->stats(s->model.impl, (size_t)i);
        snprintf(r->tensor_names[i], sizeof r->tensor_names[i], "%s", ts->name);
        r->tensor_totals[i].has_wgrad = ts->has_wgrad;
    }
    /* activation headroom is measured against the compute format's largest value, fp16's in an fp32 run */
    r->headroom_format = mp_format(s->prec.compute == MP_F32 ? MP_F16 : s->prec.compute);
    return mp_run_log_open(s);
}

/* The step's counts into the run's totals (k: the step's index in this run). */
static void add_step(run_state *s, const mp_step_info *si, long k) {
    mp_run_result *r = &s->res;
    const int nt = r->ntensors;
    mp_tensor_stats *const run_stats = r->tensor_totals;
    for (int i = 0; i < nt; i++) {
        const mp_tensor_stats *ts = s->model.ops->stats(s->model.impl, (size_t)i);
        r->tensor_underflow[(size_t)k * (size_t)nt + (size_t)i] = (float)frac(ts->bwd.underflow, ts->bwd_elements);
        mp_convert_stats_add(&run_stats[i].fwd, &ts->fwd), mp_convert_stats_add(&run_stats[i].bwd, &ts->bwd);
        run_stats[i].fwd_elements += ts->fwd_elements, run_stats[i].bwd_elements += ts->bwd_elements;
        run_stats[i].wgrad_elements += ts->wgrad_elements, run_stats[i].wgrad_lost += ts->wgrad_lost;
        run_stats[i].wgrad_dead += ts->wgrad_dead;
    }
    s->lost_updates += si->lost_updates, s->params_updated += si->params_updated;
    if (s->nq) {
        double sat, flush;
        mp_run_quant_step(s->qt, s->nq, &sat, &flush);
        r->quant_saturated[k] = (float)sat, r->quant_flushed[k] = (float)flush;
    }
    for (size_t i = 0; i < s->nq; i++) {
        const mp_quant_stats *q = &s->qt[i].q->stats;
        mp_quant_stats *a = &r->quant_totals[i];
        a->n += q->n, a->saturated += q->saturated, a->flushed += q->flushed, a->nonfinite += q->nonfinite;
        a->amax = fmaxf(a->amax, q->amax);
        r->quant_scale[i] = s->qt[i].q->scale;
    }
}

/* The steps, each with its counts, log row, evaluation and progress; stops
 * early (s->stopped) when the scale is at its floor or the log fails. */
static int train_steps(run_state *s) {
    const mp_run_spec *o = &s->o;
    mp_run_result *r = &s->res;
    FILE *bar = s->writer ? s->io.bar : NULL;
    void *const rctx = s->ranks->ctx;
    s->ranks->set_allreduce(rctx, o->allreduce);
    s->t_start = mp_now();
    for (; s->step < s->total; s->step++, s->done_steps++) {
        const long k = s->done_steps;
        const double t0 = mp_now(), mpi0 = s->ranks->stats(rctx)->mpi_seconds;
        mp_step_info si;
        const int take_hist = s->hist_on && s->step % o->hist_every == 0 && s->nh < s->nh_max;
        if (take_hist) {
            hist_snap *h = &s->hs[s->nh];
            h->step = s->step + 1;
            h->scale = mp_trainer_scaler(s->tr) ? mp_scaler_get_scale(mp_trainer_scaler(s->tr)) : 1.0f;
            s->row->histogram(s->mctx, h->bins, MP_RUN_HIST_LO, MP_RUN_HIST_N, &h->zeros);
        }
        const mp_status st = mp_trainer_step(s->tr, &si);
        if (take_hist) s->row->histogram(s->mctx, NULL, 0, 0, NULL), s->nh++;
        if (st != MP_OK && st != MP_EOVERFLOW) { /* an error: the run ends here, nothing is saved */
            mp_run_fail(s, st, "step %ld: %s", s->step + 1, mp_last_error());
            return mp_run_fail_alone(s);
        }
        if (s->ranks->after_step) s->ranks->after_step(rctx, si.step, s->opt);
        if (st == MP_EOVERFLOW) {
            snprintf(s->stop_msg, sizeof s->stop_msg, "%s", mp_last_error()), s->stopped = s->stop_msg;
            if (!s->status) s->status = st, snprintf(s->msg, sizeof s->msg, "%s", s->stop_msg);
        }
        const double ms = (mp_now() - t0) * 1e3;
        s->ms[k] = ms, s->mpi_ms[k] = (s->ranks->stats(rctx)->mpi_seconds - mpi0) * 1e3;
        r->loss[k] = si.loss, r->scale[k] = si.scale, r->skipped[k] = (uint8_t)si.skipped, r->nsteps = k + 1;
        if (!isfinite(si.loss) && s->nan_step < 0) s->nan_step = si.step;
        if (si.skipped) r->skipped_total++;
        if ((si.nbad || si.first_activation || si.skipped) && mp_run_report_nonfinite(s, &si)) {
            mp_run_fail(s, MP_ENOMEM, "out of memory");
            return mp_run_fail_alone(s);
        }
        add_step(s, &si, k);
        double eval_loss = NAN, eval_acc = 0;
        const int eval_now = o->eval_every && si.step % o->eval_every == 0 && si.step < s->total && !s->stopped;
        const mp_status es = eval_now ? mp_trainer_evaluate(s->tr, &eval_loss, &eval_acc) : MP_OK;
        if (es != MP_OK) {
            mp_run_failed(s, es);
            return mp_run_fail_alone(s);
        }
        if (eval_now) r->eval_steps[r->neval] = k + 1, r->eval_losses[r->neval++] = eval_loss;
        mp_run_log_step(s, &si, ms, eval_loss);
        r->last_loss = si.loss;
        mp_run_print_step(s, &si, eval_now, eval_loss, eval_acc);
        if (s->ranks->any(rctx, s->stopped != NULL) &&
            !s->stopped) { /* rank 0's log failed: every rank stops with it */
            snprintf(s->stop_msg, sizeof s->stop_msg, "rank 0 stopped"), s->stopped = s->stop_msg;
            s->status = s->status ? s->status : MP_EIO;
        }
        if (!s->stopped && o->check_every && si.step % o->check_every == 0 && si.step < s->total &&
            mp_run_check_ranks(s))
            return RUN_FAILED;
        if (s->stopped) {
            s->done_steps++;
            break;
        }
    }
    if (bar) fputc('\n', bar);
    s->elapsed = mp_now() - s->t_start;
    return RUN_OK;
}

/* With a probe: its sums per layer and direction into the result. */
static int take_probe(run_state *s, mp_run_result *r) {
    const size_t n = s->row->probed(s->mctx, NULL, NULL, 0);
    const char **names = calloc(n + 1, sizeof *names);
    r->probe_names = calloc(n + 1, sizeof *r->probe_names), r->probe_sums = calloc(n + 1, sizeof *r->probe_sums);
    if (!names || !r->probe_names || !r->probe_sums) return free(names), mp_run_fail(s, MP_ENOMEM, "out of memory");
    s->row->probed(s->mctx, names, r->probe_sums, n);
    for (size_t i = 0; i < n; i++) snprintf(r->probe_names[i], sizeof r->probe_names[i], "%s", names[i]);
    snprintf(r->probe_recipe, sizeof r->probe_recipe, "%s", s->o.probe);
    r->nprobe = (int)n;
    free(names);
    return RUN_OK;
}

/* The end: the evaluation, the ranks compared, the sample, the medians and the totals. */
static int finish(run_state *s) {
    const mp_run_spec *o = &s->o;
    mp_run_result *r = &s->res;
    const long n = s->done_steps;
    r->nsteps = n;
    const mp_status e = mp_trainer_evaluate(s->tr, &r->eval_loss, &r->eval_accuracy);
    if (e != MP_OK) {
        mp_run_failed(s, e);
        return mp_run_fail_alone(s);
    }
    if (mp_run_check_ranks(s)) return RUN_FAILED; /* at the end, before the checkpoint and the results */
    r->eval_steps[r->neval] = n, r->eval_losses[r->neval++] = r->eval_loss;
    if (s->row->sample && o->sample_bytes > 0 && s->writer && take_sample(s, o->sample_bytes, r) != 0)
        return RUN_FAILED;
    if (o->probe && take_probe(s, r) != RUN_OK) return RUN_FAILED;
    qsort(s->ms, (size_t)n, sizeof *s->ms, cmp_d);
    r->ms_per_step = n ? s->ms[n / 2] : 0.0;
    qsort(s->mpi_ms, (size_t)n, sizeof *s->mpi_ms, cmp_d);
    s->mpi_median = n ? s->mpi_ms[n / 2] : 0.0;
    r->tokens_per_s = s->row->report == MP_REPORT_LANGUAGE && r->ms_per_step > 0
                          ? (double)o->batch * (double)s->T * (double)o->accum / (r->ms_per_step / 1e3)
                          : 0;
    r->memory_mib = mp_run_peak_mib();
    r->bytes = mp_optim_bytes_held(s->opt);
    const mp_scaler *sc = mp_trainer_scaler(s->tr);
    r->final_scale = sc ? (double)mp_scaler_get_scale(sc) : 1.0;
    const mp_tensor_stats *run_stats = r->tensor_totals;
    uint64_t tot_under = 0, tot_elems = 0, w_elems = 0, w_lost = 0, w_dead = 0;
    for (int i = 0; i < r->ntensors; i++) {
        tot_under += run_stats[i].bwd.underflow, tot_elems += run_stats[i].bwd_elements;
        s->act_over += run_stats[i].fwd.overflow, s->grad_over += run_stats[i].bwd.overflow;
        w_elems += run_stats[i].wgrad_elements, w_lost += run_stats[i].wgrad_lost, w_dead += run_stats[i].wgrad_dead;
    }
    r->underflow = frac(tot_under, tot_elems);
    r->lost_gradients = frac(w_lost, w_elems), r->dead_gradients = frac(w_dead, w_elems);
    r->lost_updates = frac(s->lost_updates, s->params_updated);
    if (s->nh) {
        const hist_snap *h = &s->hs[s->nh - 1];
        r->has_hist = 1, r->hist_zeros = (double)h->zeros, r->hist_scale = h->scale;
        for (int b = 0; b < MP_RUN_HIST_N; b++) r->hist[b] = (double)h->bins[b];
    }
    const mp_quant_stats *qs = r->quant_totals;
    uint64_t qn = 0, qsat = 0, qfl = 0;
    for (size_t i = 0; i < s->nq; i++) qn += qs[i].n, qsat += qs[i].saturated, qfl += qs[i].flushed;
    r->quant_saturated_total = frac(qsat, qn), r->quant_flushed_total = frac(qfl, qn);
    return RUN_OK;
}

mp_status mp_run(const mp_run_spec *spec, const mp_run_io *io, mp_run_result *res) {
    if (res) memset(res, 0, sizeof *res);
    if (!spec || !res) return mp_error(MP_EINVAL, "mp_run: NULL argument");
    run_state s;
    memset(&s, 0, sizeof s);
    s.log_fd = -1, s.nan_step = -1;
    mp_allreduce_stats one_stats;
    const mp_run_ranks one = mp_run_one_process(&one_stats);
    s.ranks = spec->ranks ? spec->ranks : &one;
    if (io) s.io = *io;
    if (!s.io.prefix) s.io.prefix = "mixprec";
    s.o = *spec;
    s.deferring = size_of(&s) > 1; /* until every rank is ready: agree_ready */
    mp_status cst = mp_run_resolve(spec, &s.prec);
    if (cst == MP_OK) cst = mp_run_check_files(spec);
    int ret = cst == MP_OK       ? begin(&s)
              : cst == MP_EINVAL ? mp_run_invalid(&s, mp_last_error())
                                 : mp_run_failed(&s, cst);
    if (ret == RUN_OK) ret = prepare(&s);
    /* every rank is ready, or the job stops here: the lowest rank that failed says why */
    ret = mp_run_agree_ready(&s, ret);
    if (ret == RUN_OK && s.writer) mp_run_print_start(&s);
    if (ret == RUN_OK) ret = train_steps(&s);
    if (ret == RUN_OK) ret = finish(&s);
    if (ret == RUN_OK) {
        s.finished = 1;
        mp_run_print_results(&s);
        mp_run_add_warnings(&s);
        mp_run_write_outputs(&s);
        ret = s.stopped || s.out_failed ? RUN_FAILED : RUN_OK;
    }
    /* the log replaces its path when it holds every row of the run: also after an early stop or a failed
     * output, not after a failure of the run itself (its rows stay in PATH.partial) */
    if (mp_run_log_close(&s, ret == RUN_OK || (s.status && s.finished)) != RUN_OK) ret = RUN_FAILED;
    if (s.finished) mp_run_say_outputs(&s);
    for (int k = 0; k < 4; k++) mp_output_unlock(s.locked[k]);
    *res = s.res, memset(&s.res, 0, sizeof s.res);
    res->precision = s.prec, res->invalid = ret == RUN_INVALID;
    state_free(&s);
    if (ret == RUN_OK) return MP_OK;
    const mp_status st = ret == RUN_INVALID ? MP_EINVAL : s.status ? s.status : MP_EIO;
    return mp_error(st, "%s", s.msg[0] ? s.msg : "the run failed");
}
