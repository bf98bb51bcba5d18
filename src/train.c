/* train.c - learning-rate schedules and the training loop (train.h). */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "trainer.h"

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

mp_status mp_trainer_create(mp_trainer **out, const mp_train_config *c, mp_model model, mp_optim *opt,
                            mp_loader loader) {
    if (!out || !c || !c->precision || !model.ops || !opt || !loader.train_batch)
        return mp_error(MP_EINVAL, "mp_trainer_create: NULL argument");
    if (c->accum < 1) return mp_error(MP_EINVAL, "accum must be at least 1 (got %ld)", c->accum);
    if (!(c->clip >= 0)) return mp_error(MP_EINVAL, "clip must be >= 0 (got %g)", c->clip);
    if (!(c->lr.lr >= 0) || !(c->lr.min_lr >= 0) || c->lr.warmup < 0 ||
        (c->lr.schedule == MP_LR_COSINE && c->lr.decay_steps < c->lr.warmup))
        return mp_error(MP_EINVAL, "learning-rate schedule: lr %g, min_lr %g, warmup %ld, decay_steps %ld", c->lr.lr,
                        c->lr.min_lr, c->lr.warmup, c->lr.decay_steps);
    const int half = c->precision->reductions == MP_REDUCE_HALF;
    const mp_train_dist *d = c->dist;
    if (d && (d->size < 1 || d->rank < 0 || d->rank >= d->size ||
              (d->size > 1 && (!d->sum_grads || !d->sum_f64 || !d->max_f32))))
        return mp_error(MP_EINVAL,
                        "mp_trainer_create: a dist needs size >= 1, 0 <= rank < size and, with size > 1, "
                        "its three functions (size %d, rank %d)",
                        d->size, d->rank);
    if (c->shard_optimizer && (!d || d->size < 2 || !d->reduce_scatter || !d->all_gather || !d->broadcast))
        return mp_error(MP_EINVAL, "mp_trainer_create: shard_optimizer needs a dist of 2 or more ranks with its "
                                   "reduce_scatter, all_gather and broadcast");
    if (c->shard_optimizer && half && c->clip > 0)
        return mp_error(MP_EINVAL, "a sharded optimizer sums the gradient norm in fp32: no +reductions=half with "
                                   "clipping");
    mp_mode_applied mode; /* the mode on the model, the optimizer and the scaler */
    const mp_status applied = mp_precision_apply(c->precision, &c->scaler, c->clip, c->seed, model, opt, &mode);
    if (applied != MP_OK) return applied;
    mp_trainer *t = calloc(1, sizeof *t);
    if (!t) return mp_error(MP_ENOMEM, "mp_trainer_create: out of memory");
    t->cfg = *c, t->model = model, t->opt = opt, t->loader = loader, t->mode = mode;
    t->dist = d && d->size > 1 ? d : NULL;
    if (c->shard_optimizer) {
        const mp_status st = mp_train_shard(t);
        if (st != MP_OK) {
            mp_trainer_free(t);
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
const mp_scaler *mp_trainer_scaler(const mp_trainer *t) { return t->mode.scaled ? &t->mode.scaler : NULL; }

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
        if (d) TRY(mp_train_take_share(d, &b));
        if (sync_amax) mp_train_amax_save(t);
        TRY(m->train_batch(t->model.impl, &b, gs, k > 0, &l));
        if (sync_amax) TRY(mp_train_amax_reduce(t, r));
        lsum += l;
    }
    if (d) TRY(mp_train_reduced(d->sum_f64(d->ctx, &lsum, 1), "the loss"));
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
    r.scale = t->mode.scaled ? mp_scaler_get_scale(&t->mode.scaler) : 1.0f;
    TRY(mp_optim_set_lr(t->opt, r.lr));
    t->model.ops->reset_stats(t->model.impl);
    if (t->dist) TRY(mp_train_dist_prepare(t));
    TRY(backward_step(t, r.scale, &r.loss));
    if (t->first) /* each rank's parameters' sums on that rank */
        TRY(mp_train_reduced(t->dist->reduce_scatter(t->dist->ctx, t->gx, t->gn, t->ngrads, t->first),
                             "the gradients"));
    else if (t->dist) /* before the unscale, as DDP */
        TRY(mp_train_reduced(t->dist->sum_grads(t->dist->ctx, t->gx, t->gn, t->ngrads), "the gradients"));
    mp_status st = MP_OK;
    if (t->mode.scaled) {
        /* unscale, check and norm in one pass; a clip is applied in the update's pass */
        TRY(mp_optim_unscale_clip(t->opt, &t->mode.scaler, clip, t->mode.norm, &r.grad_norm, &r.skipped));
        if (r.skipped || !isfinite(r.loss)) locate_nonfinite(t, &r);
        TRY(mp_scaler_step(&t->mode.scaler, t->opt, &r.skipped));
        st = mp_scaler_update(&t->mode.scaler, r.skipped); /* MP_EOVERFLOW: the step counts, the run should stop */
        if (st == MP_OK &&
            !isfinite(mp_scaler_inv_scale(&t->mode.scaler))) /* GradScaler would skip every step from here */
            st = mp_error(MP_EOVERFLOW,
                          "loss scale backed off to %g, whose inverse is not finite in fp32, and "
                          "gradients still overflow: the model produces inf/NaN at any scale",
                          (double)mp_scaler_get_scale(&t->mode.scaler));
    } else {
        TRY(mp_optim_unscale_clip(t->opt, NULL, clip, t->mode.norm, &r.grad_norm, NULL));
        if (!isfinite(r.grad_norm) || !isfinite(r.loss)) locate_nonfinite(t, &r);
        TRY(mp_optim_step(t->opt));
    }
    if (t->first && !r.skipped) TRY(mp_train_share_weights(t));
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
    for (size_t i = d ? (size_t)d->rank : 0;;
         i += d ? (size_t)d->size : 1) { /* with ranks: batch i on rank i mod size */
        mp_batch b;
        TRY(t->loader.eval_batch(t->loader.impl, i, &b));
        if (b.n == 0) break;
        TRY(t->model.ops->eval_batch(t->model.impl, &b, &sums[0], &sums[1], &sums[2]));
    }
    if (d) TRY(mp_train_reduced(d->sum_f64(d->ctx, sums, 3), "the evaluation's sums"));
    const double lsum = sums[0], count = sums[1], correct = sums[2];
    if (count == 0) return mp_error(MP_EINVAL, "evaluate: no evaluation data");
    if (loss) *loss = lsum / count;
    if (accuracy) *accuracy = correct / count;
    return MP_OK;
}
