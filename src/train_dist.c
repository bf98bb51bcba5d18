/* train_dist.c - the trainer over data-parallel ranks (train.h's
 * mp_train_dist): each rank's share of a micro-batch, the fp8-delayed
 * amaxes reduced, the optimizer state sharded (ZeRO stage 1) and gathered
 * for a checkpoint, and the ranks' states compared. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "trainer.h"

/* ---- shares and reductions ---- */

mp_status mp_train_reduced(mp_status st, const char *what) {
    return st == MP_OK ? MP_OK : mp_error(st, "the ranks' reduction of %s failed (%s)", what, mp_status_str(st));
}

mp_status mp_train_take_share(const mp_train_dist *d, mp_batch *b) {
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
mp_status mp_train_dist_prepare(mp_trainer *t) {
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
void mp_train_amax_save(mp_trainer *t) {
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
mp_status mp_train_amax_reduce(mp_trainer *t, const mp_recipe *r) {
    for (size_t i = 0; i < t->nq; i++) {
        const mp_qtensor *q = t->qt[i].q;
        t->amax[i] = q->stats.nonfinite ? INFINITY : q->stats.amax;
    }
    TRY(mp_train_reduced(t->dist->max_f32(t->dist->ctx, t->amax, t->nq), "the amaxes"));
    for (size_t i = 0; i < t->nq; i++) {
        mp_fp8_history *h = &t->qt[i].q->hist;
        if (h->len) h->amax[t->hsave[i].pos % h->len] = t->hslot[i];
        h->pos = t->hsave[i].pos, h->scale = t->hsave[i].scale;
        mp_fp8_history_update(h, mp_qrole_format(r, t->qt[i].q->role), isinf(t->amax[i]) ? NAN : t->amax[i]);
    }
    return MP_OK;
}

/* The parameters split over the ranks on their boundaries, about 1/size of
 * the elements each (a parameter goes to the rank its middle falls in), and
 * the optimizer told which are this rank's. */
mp_status mp_train_shard(mp_trainer *t) {
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
mp_status mp_train_share_weights(mp_trainer *t) {
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
    for (size_t i = t->first[1]; d->rank == 0 && i < np && made == MP_OK; i++)
        made = mp_optim_hold_state(t->opt, i, hold);
    if (!hold) return made;
    double failed = made != MP_OK;
    const mp_status agreed = d->sum_f64(d->ctx, &failed, 1);
    if (agreed != MP_OK || failed > 0) {
        for (size_t i = t->first[1]; d->rank == 0 && i < np; i++) mp_optim_hold_state(t->opt, i, 0);
        if (agreed != MP_OK)
            return mp_error(agreed, "the ranks could not agree to gather the optimizer state (%s)",
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
        if (st != MP_OK)
            return mp_error(st, "the ranks' transfer of the optimizer state of '%s' failed (%s)", p->name,
                            mp_status_str(st));
        const int same = memcmp(own, hdr, sizeof own) == 0, mine = d->rank == from || (d->rank == 0 && same);
        if (d->rank == 0 && !same && hdr[0] == 0) mp_optim_hold_state(t->opt, i, 0);
        else if (d->rank == 0 && !same && bad == MP_OK)
            bad = mp_error(MP_ECORRUPT, "the optimizer state of '%s' differs in layout between rank 0 and rank %d",
                           p->name, from);
        for (size_t j = 0; j < (size_t)hdr[0]; j++) {
            const mp_status tr = d->broadcast(d->ctx, mine ? (void *)ts[j].data : NULL, (size_t)hdr[j + 1], from);
            if (tr != MP_OK)
                return mp_error(tr, "the ranks' transfer of the optimizer state of '%s' failed (%s)", p->name,
                                mp_status_str(tr));
        }
    }
    return bad;
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
    uint8_t b[MP_SCALER_BLOB_SIZE > MP_QBLOB ? MP_SCALER_BLOB_SIZE : MP_QBLOB];
    mp_put_u64(b, (uint64_t)t->step), mp_put_u64(b + 8, mp_optim_steps(t->opt));
    crc = mp_crc32(crc, b, 16);
    if (t->mode.scaled && mp_scaler_save(&t->mode.scaler, b) == MP_OK) crc = mp_crc32(crc, b, MP_SCALER_BLOB_SIZE);
    mp_model_qtensors(&t->model, qt, nq);
    for (size_t i = 0; i < nq; i++) {
        mp_qblob_save(qt[i].q, b);
        crc = mp_crc32(crc, b, MP_QBLOB);
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
    mp_status st = mp_train_reduced(d->sum_f64(d->ctx, h, (size_t)d->size), "the state's CRC-32");
    for (int r = 0; st == MP_OK && r < d->size; r++)
        if (h[r] < 0)
            st = mp_error(MP_ENOMEM, "step %ld: rank %d could not compute the CRC-32 of its state (out of memory)",
                          t->step, r);
    for (int r = 1; st == MP_OK && r < d->size; r++)
        if (h[r] != h[0])
            st = mp_error(MP_ECORRUPT,
                          "step %ld: the ranks' weights, optimizer and scaler state differ: CRC-32 0x%08lx "
                          "on rank 0, 0x%08lx on rank %d",
                          t->step, (unsigned long)h[0], (unsigned long)h[r], r);
    free(h);
    return st;
}
