/* trainer.h - the trainer's state, shared by its files (not installed):
 * train.c (the step), train_dist.c (data parallelism: shares, reductions,
 * the sharded optimizer, the ranks compared) and checkpoint.c. */
#ifndef MIXPREC_TRAINER_H
#define MIXPREC_TRAINER_H

#include "internal.h"

struct mp_trainer {
    mp_train_config cfg;
    mp_model model;
    mp_optim *opt;
    mp_loader loader;
    mp_mode_applied mode;      /* what the precision mode decided (mp_precision_apply): the scaler, the norm's sums */
    long step;                 /* steps taken */
    const mp_train_dist *dist; /* size > 1, or NULL */
    /* with dist: the gradients' addresses and sizes for sum_grads, and the
     * quantized tensors (fp8-delayed: their amaxes go through max_f32) */
    float **gx;
    size_t *gn, ngrads;
    mp_named_qtensor *qt;
    mp_fp8_history *hsave; /* (nq,) each tensor's history before a micro-batch */
    float *hslot, *amax;   /* (nq,) the history slot it may overwrite; the amaxes reduced */
    size_t nq;
    size_t *first;  /* shard_optimizer: rank r owns parameters [first[r], first[r + 1]); else NULL */
    void **wx;      /* shard_optimizer: each parameter's weights as the ranks share them (fp32 masters, or */
    size_t *wbytes; /* the half weights without them) and their size */
};

#define TRY(call)                     \
    do {                              \
        const mp_status st_ = (call); \
        if (st_ != MP_OK) return st_; \
    } while (0)

/* train_dist.c */
/* A reduction's status, with a message when it failed (the hook sets none). */
mp_status mp_train_reduced(mp_status st, const char *what);
/* This rank's rows of a micro-batch: rows [rank n / size, (rank + 1) n / size). */
mp_status mp_train_take_share(const mp_train_dist *d, mp_batch *b);
/* The gradients' addresses and the quantized tensors, for the reductions. */
mp_status mp_train_dist_prepare(mp_trainer *t);
/* fp8-delayed: each quantized tensor's history kept before a micro-batch, and
 * after it the largest amax of all ranks recorded instead of this rank's. */
void mp_train_amax_save(mp_trainer *t);
mp_status mp_train_amax_reduce(mp_trainer *t, const mp_recipe *r);
/* shard_optimizer: the parameters split over the ranks, and after a sharded
 * update every parameter's weights from its owner. */
mp_status mp_train_shard(mp_trainer *t);
mp_status mp_train_share_weights(mp_trainer *t);

/* checkpoint.c: a quantized tensor's small state, little-endian: the
 * stochastic-rounding stream's seed and counter (u64 each), the delayed
 * scaling's history position (u64) and scale (fp32 bits); its amax history is
 * a tensor. */
enum { MP_QBLOB = 28 };
void mp_qblob_save(const mp_qtensor *q, uint8_t b[MP_QBLOB]);

#endif
