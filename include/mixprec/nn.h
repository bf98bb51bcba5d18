/* mixprec/nn.h - models as explicit forward/backward pairs (llm.c style):
 * an MLP of Linear layers, ReLU or GELU, optional layer norm after each hidden
 * Linear. Activations and gradients are stored in the compute format (fp32,
 * fp16 or bf16); GEMMs accumulate in fp32; every store of a gradient is
 * counted per layer (underflow, subnormal, overflow, NaN). Parameters live in
 * an mp_optim (fp32 masters with half copies, or pure bf16), named as PyTorch
 * names them: fc{i}.weight [out, in], fc{i}.bias [out], ln{i}.weight/bias. */
#ifndef MIXPREC_NN_H
#define MIXPREC_NN_H

#include <stddef.h>
#include <stdint.h>

#include "convert.h"
#include "io.h"
#include "model.h"
#include "optim.h"
#include "recipe.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MP_MLP_MAX_LAYERS 16

typedef enum mp_act { MP_ACT_RELU = 0, MP_ACT_GELU } mp_act;

typedef struct mp_mlp_config {
    int nlayers;                       /* Linear layers */
    int widths[MP_MLP_MAX_LAYERS + 1]; /* widths[0] inputs ... widths[nlayers] outputs */
    mp_act act;
    int layernorm; /* layer norm after each hidden Linear, before the activation */
} mp_mlp_config;

/* Parses "mlp:784-1024-1024-10" (2 to 17 widths, each 1 to 65536). MP_EINVAL
 * + message naming the problem (no "mlp:" prefix, a width that is not a whole
 * number in range, too many or too few widths, a trailing '-'). */
mp_status mp_mlp_parse(const char *spec, mp_mlp_config *c);

typedef struct mp_mlp mp_mlp;

/* Builds the model for batches of up to max_batch rows, computing in `compute`
 * (MP_F32, MP_F16 or MP_BF16), and adds its parameters to opt with PyTorch's
 * default nn.Linear initialisation (uniform in +-1/sqrt(fan_in), weights and
 * biases) drawn from seed; layer norm weights 1, biases 0. master:
 * MP_MASTER_FP32 (0): fp32 masters, half copies of the weight matrices;
 * MP_MASTER_PURE_BF16 (1): every parameter only in bf16 (compute must be
 * MP_BF16); MP_MASTER_NONE: every parameter and its optimizer state only in
 * the compute format, fp16 or bf16 (mp_optim_add_half). MP_EINVAL + message
 * for a NULL argument, max_batch 0, a bad compute format, master setting,
 * layer count or width (1 .. 65536), or mp_optim_add's refusal; MP_ENOMEM. On
 * MP_OK the caller owns *out (mp_mlp_free); on failure *out is NULL and the
 * parameters registered so far stay in opt. */
mp_status mp_mlp_create(mp_mlp **out, const mp_mlp_config *c, mp_dtype compute, mp_master_weights master,
                        size_t max_batch, mp_optim *opt, uint64_t seed);
void mp_mlp_free(mp_mlp *m);

/* Forward, loss, backward for one (micro-)batch: x (B, in) fp32, labels (B,);
 * the gradients of grad_scale * mean loss go into the parameters' gradients:
 * added to them (accumulate = 1, later micro-batches of a step) or replacing
 * them (accumulate = 0: no mp_optim_zero_grad needed, as PyTorch's
 * zero_grad(set_to_none=True) before a backward). *loss gets the mean loss
 * (unscaled). MP_EINVAL + message for B = 0 or B > max_batch, a non-finite
 * input value, or a label outside [0, outputs) (found after the forward, whose
 * stores are then counted); MP_ENOMEM, after which the gradients may be
 * partly written. m, x, labels and loss must not be NULL. */
mp_status mp_mlp_train_batch(mp_mlp *m, const float *x, const int32_t *labels, size_t B, float grad_scale,
                             int accumulate, float *loss);

/* Forward and loss only: *loss_sum += sum of per-row losses, *correct += rows
 * whose largest logit is the label. MP_EINVAL + message as
 * mp_mlp_train_batch; MP_ENOMEM. Neither sum changes on failure; no argument
 * may be NULL. */
mp_status mp_mlp_eval_batch(mp_mlp *m, const float *x, const int32_t *labels, size_t B, double *loss_sum,
                            size_t *correct);

/* Gradient histogram: while set, every weight gradient computed by
 * mp_mlp_train_batch (in fp32, as the GEMM produced it, before the store in the
 * compute format, so with the loss scale in it) adds each value to
 * bins[floor(log2|g|) - lo] (clamped to [0, nbins-1]); zeros go to *zeros.
 * bins NULL stops it. */
void mp_mlp_histogram(mp_mlp *m, uint64_t *bins, int lo, int nbins, uint64_t *zeros);

const mp_mlp_config *mp_mlp_get_config(const mp_mlp *m);

/* Runs the Linear layers' GEMMs (forward, input gradient, weight gradient)
 * on operands quantized by the recipe r (recipe.h), with one mp_qtensor per
 * layer and operand (input, weight from the fp32 master, gradient), as the
 * GPT does (gpt.h's mp_gpt_set_recipe): a reduction that is not a whole
 * number of blocks (784 pixels, 10 classes) is padded with zeros. Everything
 * else stays in bf16. NULL or MP_RECIPE_NONE turns it off. A training batch
 * is one step of the recipe; evaluation changes no state. MP_EINVAL unless
 * the model computes in bf16 with fp32 master weights; MP_ENOMEM. The recipe
 * in use is dropped first: after a failure the model has none. */
mp_status mp_mlp_set_recipe(mp_mlp *m, const mp_recipe *r, uint64_t seed);

/* As mp_mlp_set_recipe, a recipe per Linear layer: each[l] for layer l
 * ("fc{l}"), nlayers of them (copied); kind MP_RECIPE_NONE keeps that
 * layer's GEMMs in bf16. All in one recipe train as mp_mlp_set_recipe does,
 * bit for bit, none as without a recipe. Fails as mp_mlp_set_recipe. */
mp_status mp_mlp_set_layer_recipes(mp_mlp *m, const mp_recipe *each, uint64_t seed);

/* Where the reductions round (ops.h's acc: layer norms, the loss's
 * log-sum-exp, bias-gradient column sums): MP_F32 (the default) or the
 * compute format, a naive half loop. Evaluation sums its loss with fp32
 * reductions, so that every mode is measured alike. MP_EINVAL for another
 * format. */
mp_status mp_mlp_set_reductions(mp_mlp *m, mp_dtype acc);

/* Gradient stores of layer l ("fc{l}"), in bwd: its output gradient (from
 * the loss, the activation and layer-norm backward) and its weight gradient,
 * whose share is also in the wgrad_* fields (has_wgrad = 1). NULL for a
 * layer out of range. */
const mp_tensor_stats *mp_mlp_stats(const mp_mlp *m, int layer);
void mp_mlp_reset_stats(mp_mlp *m);

/* Copies fc/ln tensors (F32, F16 or BF16; shapes must match) into the
 * parameters and refreshes the half copies. MP_ECORRUPT names a missing
 * tensor or a wrong shape (or dtype, or a non-finite value), or an fc/ln
 * tensor of a layer this model does not have (a bigger model's file is
 * refused, never cut down). Parameters are
 * loaded one by one: a refused file leaves the ones before it loaded, and a
 * non-finite tensor already copied into its fp32 master. */
mp_status mp_mlp_load(mp_mlp *m, const mp_safetensors *st);

/* The model's parameter tensors for writing (fp32 masters, or bf16 weights in
 * pure mode): at most cap into out (up to 4 per layer); returns the number. */
size_t mp_mlp_tensors(const mp_mlp *m, mp_tensor *out, size_t cap);

/* The model interface over m (mp_batch: x (n, inputs) and targets (n,)
 * labels); mp_model_free frees m. */
mp_model mp_mlp_model(mp_mlp *m);

#ifdef __cplusplus
}
#endif
#endif
