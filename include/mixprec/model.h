/* mixprec/model.h - the interface every model implements, so that one
 * training loop (train.h) drives the MLP, the GPT, or a user's own model.
 *
 * A model owns its parameters, registered with an mp_optim when it is
 * created (fp32 masters with half copies, or pure bf16, as the precision
 * mode asks), and named as PyTorch names them. For one micro-batch it runs
 * forward and backward in its compute format and writes (accumulate = 0) or
 * adds (accumulate = 1) the gradients of grad_scale * mean loss into the
 * parameters' gradients. It counts every store of an activation (forward)
 * and of a gradient (backward) into the compute format per named tensor
 * (underflow to zero, subnormal, overflow, NaN), so that the trainer and the
 * report can say which tensor lost values.
 */
#ifndef MIXPREC_MODEL_H
#define MIXPREC_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "convert.h"
#include "io.h"
#include "recipe.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One micro-batch. An MLP reads x and targets (labels, (n,)); a language
 * model reads tokens and targets ((n, t) next tokens). */
typedef struct mp_batch {
    size_t n;               /* rows: examples or sequences */
    size_t t;               /* positions per row (1 for an MLP) */
    const float *x;         /* (n, features) fp32, or NULL */
    const int32_t *tokens;  /* (n, t) input token ids, or NULL */
    const int32_t *targets; /* (n) labels or (n, t) next tokens */
    size_t features;        /* x's row length: a data-parallel trainer (train.h) cuts x by it */
} mp_batch;

/* The stores into one named tensor since the last reset_stats. */
typedef struct mp_tensor_stats {
    char name[64];        /* "fc0", "h.3.mlp.c_fc" ... */
    mp_convert_stats fwd; /* activation stores in the forward pass */
    mp_convert_stats bwd; /* gradient stores in the backward pass; bwd.amax of a weight is its
                             gradient's, as accumulated in fp32 after each micro-batch */
    uint64_t fwd_elements, bwd_elements;
    /* An entry that stores a weight matrix's gradient (has_wgrad = 1, set when
     * the model is created): the values of that gradient stored into the
     * compute format, one per weight per micro-batch (also counted in
     * bwd_elements); of those, lost: nonzero in fp32 and 0 after the store
     * (also counted in bwd.underflow; 0 in fp32 compute, where nothing
     * rounds), and dead: exactly 0 in fp32 before it (gemm.h's zeros: in
     * fp32 compute with accumulate = 1, the gradient summed so far). */
    int has_wgrad;
    uint64_t wgrad_elements, wgrad_lost, wgrad_dead;
} mp_tensor_stats;

/* One tensor a recipe quantizes (recipe.h) and its name: "h.0.attn.c_attn.input",
 * "h.0.attn.c_attn.weight", "h.0.attn.c_attn.grad", ... q is the model's own: its
 * stats describe the last training batch, its state (amax history, random
 * stream) the checkpoints save and restore (train.h). */
typedef struct mp_named_qtensor {
    char name[64];
    mp_qtensor *q;
    const mp_recipe *recipe; /* its layer's recipe; NULL: the model's (ops->recipe) */
} mp_named_qtensor;

typedef struct mp_model_ops {
    const char *kind; /* "mlp", "gpt", ... */
    /* Forward, loss and backward of one micro-batch (see above); *loss gets
     * the mean loss, unscaled. */
    mp_status (*train_batch)(void *impl, const mp_batch *b, float grad_scale, int accumulate, float *loss);
    /* Forward and loss only: *loss_sum += the sum of per-prediction losses
     * (nats), *count += predictions made, *correct += predictions whose
     * largest logit is the target. */
    mp_status (*eval_batch)(void *impl, const mp_batch *b, double *loss_sum, double *count, double *correct);
    /* Per-tensor statistics: i in [0, nstats), the activations in forward
     * order (the trainer names the first that overflowed in a step). */
    size_t (*nstats)(const void *impl);
    const mp_tensor_stats *(*stats)(const void *impl, size_t i);
    void (*reset_stats)(void *impl);
    /* Where the model's reductions round (train.h's mp_reductions): MP_F32
     * (fp32 accumulators), or its compute format (a naive loop: every
     * partial result rounded). The trainer sets it from the precision mode;
     * NULL in a model with fp32 reductions only (the trainer then refuses
     * half reductions). MP_EINVAL for another format. */
    mp_status (*set_reductions)(void *impl, mp_dtype acc);
    /* Loads parameter values from a safetensors file (names as written by
     * tensors); MP_ECORRUPT names a missing tensor or a wrong shape. */
    mp_status (*load)(void *impl, const mp_safetensors *st);
    /* The parameters as tensors for writing, with their shapes (fp32
     * masters, or the bf16 weights in pure mode): at most cap into out;
     * returns how many there are. */
    size_t (*tensors)(const void *impl, mp_tensor *out, size_t cap);
    void (*free)(void *impl);
    /* The recipe the model's GEMMs run on quantized operands (recipe.h), or
     * NULL when they do not; NULL in a model without recipes. */
    const mp_recipe *(*recipe)(const void *impl);
    /* That recipe's quantized tensors, at most cap into out, in the model's
     * order; returns how many there are (0 without a recipe). NULL in a
     * model without recipes. */
    size_t (*qtensors)(void *impl, mp_named_qtensor *out, size_t cap);
} mp_model_ops;

/* A model: its operations and its state. */
typedef struct mp_model {
    const mp_model_ops *ops;
    void *impl;
} mp_model;

/* Frees the model's state (a model with impl NULL is a no-op). */
void mp_model_free(mp_model *m);

/* ops->recipe and ops->qtensors, or NULL and 0 for a model without them. */
const mp_recipe *mp_model_recipe(const mp_model *m);
size_t mp_model_qtensors(const mp_model *m, mp_named_qtensor *out, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
