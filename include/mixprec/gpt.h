/* mixprec/gpt.h - a GPT (GPT-2 / nanoGPT architecture), byte-level by default.
 *
 *   x = wte[tokens] + wpe[positions]
 *   L blocks: x = x + attn(ln_1(x)); x = x + mlp(ln_2(x))
 *     attn: qkv = Linear(C, 3C) (bias), H heads of C/H, scores / sqrt(C/H),
 *           causal mask, softmax, Linear(C, C) (bias)
 *     mlp:  Linear(C, 4C) (bias), GELU (tanh form, or erf), Linear(4C, C) (bias)
 *   logits = ln_f(x) wte^T (the head is tied to the token embedding, no bias)
 *   loss = mean cross-entropy of the next token
 * Layer norms have weight and bias, eps 1e-5; no dropout.
 *
 * Precision: matrix multiplies read the compute format (fp32, fp16, bf16)
 * and accumulate in fp32; softmax, layer-norm statistics and the loss are
 * computed in fp32 (or naively in the compute format: mp_gpt_set_reductions); activations (the residual stream
 * included) and their gradients are stored in the compute format, every store counted per named tensor
 * (mp_tensor_stats). Weight gradients are rounded to the compute format and added to the fp32 gradients, as autocast +
 * AccumulateGrad do.
 *
 * In detail (N = B T rows, ct the compute format):
 *  - x0 = wte[tok] + wpe[pos] is added in fp32 and rounded once to ct. A
 *    residual add x + branch (the branch's output already stored in ct) is
 *    added in fp32 and rounded once; in the backward the residual gradient
 *    goes to the branch as it is, and the branch's gradient (stored in ct by
 *    the layer norm's backward) is added to it, rounded once.
 *  - Attention, per (sequence, head): scores q k^T / sqrt(C/H) in fp32 (the
 *    scale is the GEMM's alpha), causal, softmax in fp32 (max-subtracted),
 *    probabilities stored in ct, y = p v. Backward: dp = dy v^T in fp32,
 *    ds = p (dp - sum(dp p)) in fp32, stored in ct, then dq = ds k / sqrt(C/H),
 *    dk = ds^T q / sqrt(C/H), dv = p^T dy. Sequences x heads run in parallel
 *    (OpenMP); results do not depend on the number of threads.
 *  - Linear biases are added in the GEMM's epilogue (fp32) and their
 *    gradients are fp32 column sums; layer norms read fp32 parameters and
 *    give fp32 gradients (pure bf16: the bf16 values widened to fp32).
 *  - Loss: dlogits = grad_scale (softmax - onehot) / N, stored in ct. The
 *    head's weight gradient dlogits^T ln_f(x) is rounded to ct and written
 *    (accumulate = 0) or added to wte's fp32 gradient first; then every row
 *    of dx0 (in ct) is added in fp32 to wte's gradient at its token and to
 *    wpe's at its position, rows in order (deterministic).
 *
 * Statistics (model.h's mp_tensor_stats; fwd: the store of the activation,
 * bwd: the store of its gradient, fp32 stores count subnormals and NaNs):
 *   "wte" (x0; bwd: dx0, both of its stores), per block i
 *   "h.{i}.ln_1", "h.{i}.attn.c_attn" (qkv; bwd dq, dk, dv),
 *   "h.{i}.attn.att" (probabilities, causal part only; bwd: the gradient of
 *   the scores, ds above), "h.{i}.attn.y", "h.{i}.attn.c_proj" (the branch
 *   output; bwd: none, its gradient is res_1's), "h.{i}.res_1" (bwd: the
 *   layer norm's gradient and the sum, 2 stores per value), "h.{i}.ln_2",
 *   "h.{i}.mlp.c_fc", "h.{i}.mlp.gelu", "h.{i}.mlp.c_proj", "h.{i}.res_2",
 *   then "ln_f", "lm_head" (logits; bwd dlogits), then the weight gradients'
 *   rounding to ct in bwd: "wte.weight" (the head's part; the embedding's
 *   part is summed in fp32 and not rounded), "wpe.weight" (never rounded:
 *   always 0), "h.{i}.attn.c_attn.weight", "h.{i}.attn.c_proj.weight",
 *   "h.{i}.mlp.c_fc.weight", "h.{i}.mlp.c_proj.weight" (in fp32 nothing
 *   rounds and these count nothing; their elements are still counted).
 *   These but "wpe.weight" have has_wgrad = 1: wgrad_lost is their
 *   underflow, wgrad_dead their gradient values exactly 0 in fp32.
 *   Evaluation and mp_gpt_next_logits count nothing.
 *
 * Parameters are registered with the mp_optim under nanoGPT's state_dict
 * names and layouts (Linear weights [out, in]):
 *   transformer.wte.weight [V, C], transformer.wpe.weight [T, C],
 *   transformer.h.{i}.ln_1.weight|bias [C],
 *   transformer.h.{i}.attn.c_attn.weight [3C, C] | bias [3C],
 *   transformer.h.{i}.attn.c_proj.weight [C, C] | bias [C],
 *   transformer.h.{i}.ln_2.weight|bias [C],
 *   transformer.h.{i}.mlp.c_fc.weight [4C, C] | bias [4C],
 *   transformer.h.{i}.mlp.c_proj.weight [C, 4C] | bias [C],
 *   transformer.ln_f.weight|bias [C].
 * Tensors of two dimensions get weight decay; biases and layer-norm
 * parameters do not (mp_param.no_decay), as nanoGPT's configure_optimizers.
 */
#ifndef MIXPREC_GPT_H
#define MIXPREC_GPT_H

#include <stddef.h>
#include <stdint.h>

#include "format.h"
#include "io.h"
#include "model.h"
#include "optim.h"
#include "recipe.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mp_gelu_form { MP_GELU_TANH = 0, MP_GELU_ERF } mp_gelu_form;

typedef struct mp_gpt_config {
    int n_layer, n_head, n_embd, block_size; /* L, H, C, T */
    int vocab_size;                          /* 256 for bytes */
    mp_gelu_form gelu;
} mp_gpt_config;

/* Parses "gpt:L-H-C-T" (e.g. gpt:6-6-384-256): 1 <= L <= 64, 1 <= H,
 * C % H == 0, C <= 8192, 1 <= T <= 8192; vocab 256, GELU tanh.
 * MP_EINVAL with a message naming the problem. */
mp_status mp_gpt_parse(const char *spec, mp_gpt_config *c);

typedef struct mp_gpt mp_gpt;

/* Builds the model for micro-batches of up to max_batch sequences of up to
 * block_size tokens, computing in `compute` (MP_F32, MP_F16 or MP_BF16), and
 * adds its parameters to opt, initialised as nanoGPT from seed: Linear and
 * Embedding weights N(0, 0.02), the c_proj weights N(0, 0.02 / sqrt(2 L)),
 * biases 0, layer-norm weights 1 and biases 0. The normal values are drawn
 * parameter by parameter in registration order (above), from a splitmix64
 * stream started at seed: each pair of values takes two 53-bit uniforms u1,
 * u2 in [0, 1) and gives std r cos(2 pi u2), std r sin(2 pi u2) with
 * r = sqrt(-2 ln(1 - u1)), in double, rounded to fp32 (an odd count drops
 * the last sine); constant parameters draw nothing. Weights and embeddings
 * get a half copy in the compute format; biases and layer norms stay fp32.
 * master: MP_MASTER_FP32 (0) as above; MP_MASTER_PURE_BF16 (1): every
 * parameter only in bf16 (compute must be MP_BF16); MP_MASTER_NONE: every
 * parameter, biases and layer norms too, only in the compute format (fp16
 * or bf16), optimizer state too (mp_optim_add_half).
 * Activations take about (16 C + H T) values of the compute format per
 * token and layer. MP_EINVAL for a bad configuration, MP_ENOMEM. *out is
 * NULL on failure; on MP_OK the caller owns *out (mp_gpt_free). A failure
 * while registering leaves the parameters added so far in opt. */
mp_status mp_gpt_create(mp_gpt **out, const mp_gpt_config *c, mp_dtype compute, mp_master_weights master,
                        size_t max_batch, mp_optim *opt, uint64_t seed);
void mp_gpt_free(mp_gpt *g); /* NULL is a no-op */

const mp_gpt_config *mp_gpt_get_config(const mp_gpt *g);

/* Where the reductions round (ops.h's acc: softmax and the attention's
 * softmax, layer norms, the loss's log-sum-exp, bias-gradient column sums):
 * MP_F32 (the default) or the compute format, a naive half loop. In the
 * naive form the attention's scores and their gradient dp are rounded to
 * the compute format before their softmax rows, as a half matmul would
 * store them. Evaluation (mp_gpt_eval_batch) runs the same forward but
 * sums its loss with fp32 reductions, so that every mode is measured alike.
 * MP_EINVAL for another format. */
mp_status mp_gpt_set_reductions(mp_gpt *g, mp_dtype acc);

/* Runs the Linear layers' GEMMs (c_attn, attention c_proj, c_fc, MLP
 * c_proj: forward, input gradient and weight gradient) on operands quantized
 * by the recipe r (recipe.h), with one mp_qtensor per layer and operand
 * (input, weight from the fp32 master, gradient), stochastic-rounding
 * streams started from seed; everything else (layer norms, GELU, softmax, the
 * attention's matmuls, the tied head, residuals) stays in bf16. NULL or
 * MP_RECIPE_NONE turns it off. A training batch is one step of the recipe
 * (delayed scaling updates its histories after it); evaluation and sampling
 * quantize with the same scales and change no state. MP_EINVAL unless the
 * model computes in bf16 with fp32 master weights; MP_ENOMEM. The recipe in
 * use is dropped first: after a failure the model has none. */
mp_status mp_gpt_set_recipe(mp_gpt *g, const mp_recipe *r, uint64_t seed);

/* As mp_gpt_set_recipe, a recipe per Linear layer: each[4 l + w] for Linear
 * w (as mp_gpt_qtensor's) of block l, n_layer * 4 of them (the caller's,
 * copied); kind MP_RECIPE_NONE keeps that layer's GEMMs in bf16. Every
 * layer's quantization state is what mp_gpt_set_recipe gives it, so all
 * layers in one recipe train as mp_gpt_set_recipe does, bit for bit, and
 * none as without a recipe. Fails as mp_gpt_set_recipe. */
mp_status mp_gpt_set_layer_recipes(mp_gpt *g, const mp_recipe *each, uint64_t seed);

/* The quantization state of Linear layer w (0 c_attn, 1 attention c_proj,
 * 2 c_fc, 3 MLP c_proj) of block l for role: NULL when the layer has no
 * recipe or for an index out of range. Its stats are the last training batch's. */
const mp_qtensor *mp_gpt_qtensor(const mp_gpt *g, int l, int w, mp_qrole role);

/* Measures, without changing the training, what the recipe r would do to
 * each Linear layer's GEMMs that run in bf16: every training batch's
 * forward, input-gradient and weight-gradient GEMMs are computed again on
 * operands quantized by r (the weight from its fp32 master), with tensors of
 * the probe's own (its scales and histories as a recipe's, streams from
 * seed), and mp_qgemm_probe's sums kept per layer and direction. The
 * training's bits are those without the probe. NULL or MP_RECIPE_NONE
 * turns it off (and drops the sums). MP_EINVAL unless the model computes in
 * bf16 with fp32 master weights; MP_ENOMEM. */
mp_status mp_gpt_set_probe(mp_gpt *g, const mp_recipe *r, uint64_t seed);

/* The probe's sums for Linear layer w of block l (as mp_gpt_qtensor's) in
 * direction dir (0 forward, 1 input gradient, 2 weight gradient): NULL
 * without a probe or for an index out of range. A layer under a recipe of
 * its own is not probed (calls 0). */
const mp_qprobe *mp_gpt_probe(const mp_gpt *g, int l, int w, int dir);

/* Parameters; non_embedding != 0 leaves out the position embedding (as
 * nanoGPT's get_num_params, used for its MFU estimate). */
size_t mp_gpt_num_params(const mp_gpt *g, int non_embedding);

/* Forward, loss and backward of B sequences of T tokens (T <= block_size):
 * tokens (B, T) and targets (B, T) in [0, vocab). The gradients of
 * grad_scale * mean loss are written (accumulate = 0) or added. *loss gets
 * the mean loss (unscaled). MP_EINVAL, with a message, for a token or target
 * out of range, B = 0 or B > max_batch, T = 0 or T > block_size (or a NULL
 * argument); MP_ENOMEM (scratch buffers), after which the gradients may be
 * partly written. */
mp_status mp_gpt_train_batch(mp_gpt *g, const int32_t *tokens, const int32_t *targets, size_t B, size_t T,
                             float grad_scale, int accumulate, float *loss);

/* The values of a named activation (the statistics' names) as the last
 * mp_gpt_train_batch stored them, in the compute format, for inspection as a
 * forward hook would see them: *data and *n values (B T rows). Only the
 * tensors the backward leaves as they were: "wte" (x0), per block
 * "h.{i}.ln_1", "h.{i}.attn.c_attn", "h.{i}.attn.y", "h.{i}.res_1",
 * "h.{i}.ln_2", "h.{i}.mlp.c_fc", "h.{i}.mlp.gelu", "h.{i}.res_2", the last
 * block's "mlp.c_proj" (the branch buffer holds the last one written), and
 * "ln_f". MP_EINVAL for another name, or when no training batch has
 * completed since the model's last forward (evaluation and sampling reuse
 * the buffers). */
mp_status mp_gpt_activation(const mp_gpt *g, const char *name, const void **data, size_t *n);

/* Forward and loss only: *loss_sum += the sum of the B*T per-token losses,
 * *correct += tokens whose largest logit is the target (may be NULL).
 * MP_EINVAL + message as mp_gpt_train_batch (a NULL g, tokens, targets or
 * loss_sum too); MP_ENOMEM. Neither sum changes on failure. */
mp_status mp_gpt_eval_batch(mp_gpt *g, const int32_t *tokens, const int32_t *targets, size_t B, size_t T,
                            double *loss_sum, double *correct);

/* The logits (fp32, vocab_size values) that follow the last of T tokens
 * (1 <= T <= block_size), for sampling: the last row of the forward's
 * logits (stored in the compute format, then widened). Uses the model's
 * buffers (not thread-safe with the other calls on g); counts nothing.
 * MP_EINVAL + message for a NULL g, tokens or logits, T out of range or a
 * token outside [0, vocab); MP_ENOMEM. */
mp_status mp_gpt_next_logits(mp_gpt *g, const int32_t *tokens, size_t T, float *logits);

/* Loads the parameters by nanoGPT's names (F32, F16 or BF16; shapes must
 * match). lm_head.weight is tied: accepted when equal to
 * transformer.wte.weight, refused (MP_ECORRUPT) otherwise, and used as the
 * embedding when transformer.wte.weight is absent. Half copies are
 * refreshed. MP_ECORRUPT names a missing tensor, a wrong shape or dtype, a
 * non-finite value, or a tensor of a layer beyond the model's (a deeper
 * model's file is refused, never cut down); a refused file changes nothing. MP_EINVAL for a NULL
 * argument, MP_ENOMEM (nothing changed either). */
mp_status mp_gpt_load(mp_gpt *g, const mp_safetensors *st);

/* Whether st holds the weights of a GPT of config c, checked before any of
 * the model's memory is taken: every parameter by name, shape and dtype (F32,
 * F16 or BF16), the embedding as transformer.wte.weight or lm_head.weight
 * (both with its shape where present), and no tensor of a layer beyond c's.
 * The values are not read (mp_gpt_load checks them). MP_ECORRUPT names the
 * first tensor that differs; MP_EINVAL for a NULL argument or an invalid c. */
mp_status mp_gpt_check_file(const mp_gpt_config *c, const mp_safetensors *st);

/* The parameters as tensors with their shapes (lm_head is not written):
 * at most cap into out; returns the number of tensors (2 + 12 L + 2). */
size_t mp_gpt_tensors(const mp_gpt *g, mp_tensor *out, size_t cap);

/* The model interface over g (g stays owned by the caller unless the model
 * is freed with mp_model_free, which frees g). With a recipe, its qtensors
 * are mp_gpt_qtensor's in the order (block, Linear, role), named
 * "h.{l}.attn.c_attn.input|weight|grad", "h.{l}.attn.c_proj...",
 * "h.{l}.mlp.c_fc...", "h.{l}.mlp.c_proj...". */
mp_model mp_gpt_model(mp_gpt *g);

#ifdef __cplusplus
}
#endif
#endif
