/* loader.c - the trainer's data: image datasets and text corpora as mp_loader. */
#include <stdlib.h>

#include "internal.h"

/* ---- images ---- */

typedef struct {
    const mp_dataset *train, *eval;
    size_t B, eval_b, D;
    int shuffle;
    uint64_t seed;
    long epoch;     /* of perm; -1 before the first */
    uint32_t *perm; /* (train->n,) */
    uint32_t *idx;  /* (eval_b,) */
    float *x;       /* (max(B, eval_b), D) */
    int32_t *y;
} image_loader;

/* The examples of micro-batch s: epoch-wise permutations from (seed, epoch). */
static const uint32_t *batch_indices(image_loader *l, uint64_t s) {
    const uint64_t per_epoch = l->train->n / l->B;
    const long e = (long)(s / per_epoch);
    const size_t n = l->train->n;
    if (e != l->epoch) {
        for (size_t i = 0; i < n; i++) l->perm[i] = (uint32_t)i;
        if (l->shuffle) {
            uint64_t r = l->seed * 0x9e3779b97f4a7c15ull ^ ((uint64_t)e + 1) * 0xd1b54a32d192ed03ull;
            for (size_t i = n - 1; i > 0; i--) {
                r ^= r << 13, r ^= r >> 7, r ^= r << 17;
                const size_t j = (size_t)(r % (i + 1));
                const uint32_t t = l->perm[i];
                l->perm[i] = l->perm[j], l->perm[j] = t;
            }
        }
        l->epoch = e;
    }
    return l->perm + (size_t)(s % per_epoch) * l->B;
}

static mp_status image_train(void *impl, uint64_t s, mp_batch *b) {
    image_loader *l = impl;
    mp_dataset_batch(l->train, batch_indices(l, s), l->B, l->x, l->y);
    *b = (mp_batch){.n = l->B, .t = 1, .x = l->x, .features = l->D, .targets = l->y};
    return MP_OK;
}

static mp_status image_eval(void *impl, size_t i, mp_batch *b) {
    image_loader *l = impl;
    const size_t n = l->eval ? l->eval->n : 0, i0 = i * l->eval_b;
    const size_t rows = i0 < n ? (n - i0 < l->eval_b ? n - i0 : l->eval_b) : 0;
    for (size_t k = 0; k < rows; k++) l->idx[k] = (uint32_t)(i0 + k);
    if (rows) mp_dataset_batch(l->eval, l->idx, rows, l->x, l->y);
    *b = (mp_batch){.n = rows, .t = 1, .x = l->x, .features = l->D, .targets = l->y};
    return MP_OK;
}

static void image_free(void *impl) {
    image_loader *l = impl;
    free(l->perm), free(l->idx), free(l->x), free(l->y);
    free(l);
}

mp_status mp_image_loader(mp_loader *out, const mp_dataset *train, const mp_dataset *eval, size_t B, int shuffle,
                          uint64_t seed, size_t eval_b) {
    if (!out || !train || train->n == 0 || B == 0 || eval_b == 0)
        return mp_error(MP_EINVAL, "mp_image_loader: bad argument");
    if (B > train->n)
        return mp_error(MP_EINVAL, "a batch of %zu is larger than the %zu training examples", B, train->n);
    if (eval && eval->rows * eval->cols != train->rows * train->cols)
        return mp_error(MP_EINVAL, "mp_image_loader: training and evaluation images differ in size");
    image_loader *l = calloc(1, sizeof *l);
    const size_t rows = B > eval_b ? B : eval_b, D = train->rows * train->cols;
    if (l) {
        *l = (image_loader){train, eval, B, eval_b, D, shuffle, seed, -1, NULL, NULL, NULL, NULL};
        l->perm = malloc(train->n * sizeof *l->perm), l->idx = malloc(eval_b * sizeof *l->idx);
        l->x = malloc(rows * D * sizeof *l->x), l->y = malloc(rows * sizeof *l->y);
    }
    if (!l || !l->perm || !l->idx || !l->x || !l->y) {
        if (l) image_free(l);
        return mp_error(MP_ENOMEM, "mp_image_loader: out of memory");
    }
    *out = (mp_loader){l, image_train, image_eval, image_free};
    return MP_OK;
}

/* ---- text ---- */

typedef struct {
    const mp_text *text;
    size_t B, T, nval;
    int shuffle;
    uint64_t seed;
    int32_t *tokens, *targets; /* (B, T) */
} text_loader;

static mp_status text_train(void *impl, uint64_t s, mp_batch *b) {
    text_loader *l = impl;
    mp_text_train_batch(l->text, s, l->B, l->T, l->shuffle, l->seed, l->tokens, l->targets);
    *b = (mp_batch){.n = l->B, .t = l->T, .tokens = l->tokens, .targets = l->targets};
    return MP_OK;
}

static mp_status text_eval(void *impl, size_t i, mp_batch *b) {
    text_loader *l = impl;
    const size_t w0 = i * l->B, rows = w0 < l->nval ? (l->nval - w0 < l->B ? l->nval - w0 : l->B) : 0;
    if (rows) mp_text_val_batch(l->text, w0, rows, l->T, l->tokens, l->targets);
    *b = (mp_batch){.n = rows, .t = l->T, .tokens = l->tokens, .targets = l->targets};
    return MP_OK;
}

static void text_free(void *impl) {
    text_loader *l = impl;
    free(l->tokens), free(l->targets);
    free(l);
}

mp_status mp_text_loader(mp_loader *out, const mp_text *text, size_t B, size_t T, int shuffle, uint64_t seed,
                         size_t eval_windows) {
    if (!out || !text || B == 0 || T == 0) return mp_error(MP_EINVAL, "mp_text_loader: bad argument");
    mp_status st = mp_text_check(text, T);
    if (st != MP_OK) return st;
    text_loader *l = calloc(1, sizeof *l);
    if (l) {
        const size_t all = mp_text_val_windows(text, T);
        *l = (text_loader){text,    B,    T,    eval_windows && eval_windows < all ? eval_windows : all,
                           shuffle, seed, NULL, NULL};
        l->tokens = malloc(B * T * sizeof *l->tokens), l->targets = malloc(B * T * sizeof *l->targets);
    }
    if (!l || !l->tokens || !l->targets) {
        if (l) text_free(l);
        return mp_error(MP_ENOMEM, "mp_text_loader: out of memory");
    }
    *out = (mp_loader){l, text_train, text_eval, text_free};
    return MP_OK;
}
