/* mixprec/train.h - precision modes and the training loop.
 *
 * One step, for any model behind model.h and any data behind mp_loader:
 *
 *   lr = schedule(step)                      mp_lr_at
 *   for each micro-batch k of accum:
 *       loader -> batch; model forward + backward of (S / accum) * loss
 *   with ranks (mp_train_dist): sum the gradients over them
 *   unscale (x 1/S, inf/NaN check)           mp_scaler_unscale     (scaled modes)
 *   clip by global norm (unscaled)           mp_clip_grad_norm
 *   optimizer step, skipped on inf/NaN       mp_scaler_step / mp_optim_step
 *   scale update (grow, or back off)         mp_scaler_update
 *
 * Every status is checked: a failure ends the step with that status and the
 * message in mp_last_error(). MP_EOVERFLOW means the gradients overflowed
 * with the loss scale already at its floor, or backed off so far that 1/S is
 * not finite in fp32 (below about 2^-127): the step was skipped and the run
 * should stop.
 */
#ifndef MIXPREC_TRAIN_H
#define MIXPREC_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "data.h"
#include "format.h"
#include "model.h"
#include "optim.h"
#include "scaler.h"
#include "status.h"
#include "text.h"
#include "recipe.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- precision modes ---- */

typedef enum mp_scaling { MP_SCALING_NONE = 0, MP_SCALING_STATIC, MP_SCALING_DYNAMIC } mp_scaling;

/* Where the reductions run: softmax (max, exp, sum), layer-norm statistics
 * and their backward sums, the loss's log-sum-exp, bias-gradient column sums
 * and the gradient norm. FP32: fp32 accumulators (the default: what autocast
 * does). HALF: in the compute format, as a naive loop does: left to right
 * along the reduced dimension, every partial result rounded to the compute
 * format (ops.h, acc argument). Matrix multiplies accumulate in fp32 in every
 * mode, as tensor cores do. */
typedef enum mp_reductions { MP_REDUCE_FP32 = 0, MP_REDUCE_HALF } mp_reductions;

/* A precision mode: one row of the table, or a row with switches applied
 * (a value the caller holds, from mp_precision_parse). */
typedef struct mp_precision {
    const char *name;                 /* the table row: "fp16-dynamic" */
    mp_dtype compute;                 /* activations, gradients and the weight copies the kernels read */
    mp_master_weights master_weights; /* how the weights are kept */
    mp_state_format optim_state;      /* how the optimizer state is kept (MP_STATE_AUTO: fp32, or the compute
                                         format under master-weights none; mp_precision_state_format) */
    mp_reductions reductions;         /* fp32 accumulators, or the compute format */
    mp_rounding rounding;             /* how the fp32 masters are rounded into the compute copies */
    mp_scaling scaling;               /* loss scaling */
    float static_scale;    /* fp16-static:S: the scale S; 0 when not given (the scaler config's init_scale) */
    mp_recipe_kind recipe; /* fp8/fp4 Linear GEMMs (recipe.h; bf16 compute, fp32 masters), or MP_RECIPE_NONE */
    mp_mx_rule mx_rule;    /* mxfp8's scale rule (MP_MX_RCEIL by default) */
    const char *color;     /* the report's colour for this mode */
    const char *help;      /* one line for --help */
    char label[64];        /* the mode with its switches, as runs are labelled:
                              "fp16-dynamic+master-weights=none", "fp16-static:1024" (name in a table row) */
    char layers[192];      /* the per-layer assignments in the order given: "+RECIPE=PATTERN..." ("": none) */
    char layers_from[32];  /* the --layer-precision file's name without directory and extension, or "" */
} mp_precision;

/* The modes, in the order help and reports list them (fp32 first: the
 * baseline). *count gets their number. A row's label is empty:
 * mp_precision_parse fills it. */
const mp_precision *mp_precisions(size_t *count);

/* Parses a mode with optional switches into *out (caller-provided):
 * NAME[:S][+master-weights=fp32|none|kahan|sr][+optim-state=fp32|bf16|fp8|8bit|4bit]
 * [+reductions=fp32|half][+mx-rule=floor|rceil]. bf16+master-weights=sr is
 * the mode bf16-pure.
 * "fp16-static:S" is fp16-static with the scale S (out->static_scale; 0
 * when not given: the trainer then starts from its scaler config's
 * init_scale). out->label gets the mode as given followed by
 * the switches that differ from the mode's own setting, in the order above.
 * MP_EINVAL + message (one line) for an unknown name or switch, a bad scale,
 * or a switch the mode cannot take (the setters below). */
mp_status mp_precision_parse(const char *spec, mp_precision *out);

/* Precision per layer. A mode may end in assignments "+RECIPE=PATTERN":
 * the Linear layers whose names match PATTERN run in RECIPE (fp8-delayed,
 * fp8-current, mxfp8, nvfp4, or the compute format's name, "bf16": no
 * recipe), the later assignment winning where two match; the others run
 * as the mode does. Names are the model's (the GPT's nanoGPT parameter
 * names without ".weight": "transformer.h.3.mlp.c_fc", "lm_head"; the MLP's
 * "fc0", "fc1", ...); in a pattern '*' matches any characters (dots too) and
 * "N-M" any number from N to M ("transformer.h.0-2.*"). No comma: a mode
 * stays one item of a comma-separated list.
 *
 * mp_precision_add_layers appends one assignment to p (its layers and its
 * label: the assignments follow the switches). MP_EINVAL + message for an unknown target, a recipe in a mode
 * without bf16 compute and fp32 master weights, an empty pattern or one with
 * a character other than letters, digits, '.', '_', '*' and '-', or when the
 * assignments outgrow p->layers or the label (p then unchanged; a longer
 * assignment goes into a file). */
mp_status mp_precision_add_layers(mp_precision *p, const char *recipe, const char *pattern);

/* Reads a --layer-precision file into p: one "pattern = recipe" per line,
 * '#' to the end of a line a comment, blank lines skipped; the label then
 * ends in "+layers=NAME", NAME the file's name without its directory and
 * extension (p->layers_from), in place of the assignments. MP_EIO (cannot
 * read), or MP_EINVAL + "FILE:LINE: why" for a bad line (p then unchanged). */
mp_status mp_precision_load_layers(mp_precision *p, const char *path);

/* Whether a mode's assignments put some layer in a recipe. */
int mp_precision_layers_quantize(const mp_precision *p);

/* The one recipe a mode runs its layers in (its own or its assignments'),
 * or MP_RECIPE_NONE: none, or several. */
mp_recipe_kind mp_precision_layers_kind(const mp_precision *p);

/* Whether t (len bytes) names a target of an assignment. */
int mp_precision_is_layer_target(const mp_precision *p, const char *t, size_t len);

/* 1 when name matches pattern (the syntax above), else 0. */
int mp_layer_match(const char *pattern, const char *name);

/* The recipe of each of a model's layers under p: names[0..n) the model's
 * layer names, of which the first nq can take a recipe (the others, as the
 * GPT's tied lm_head, stay in the compute format); out[0..nq) gets p's own
 * recipe (mp_precision_recipe) with the assignments applied in order.
 * MP_EINVAL + message for a pattern that matches no layer, or that names
 * only layers that take no recipe with a recipe. */
mp_status mp_precision_layer_recipes(const mp_precision *p, const char *const *names, size_t n, size_t nq,
                                     mp_recipe *out);

/* Sets how the optimizer state is kept (relabels p): MP_STATE_FP32, BF16,
 * FP8, 8BIT or 4BIT; a setting equal to the mode's default (fp32, or the
 * compute format under master-weights none) is the default (no switch in
 * the label). MP_EINVAL + message for another f (p unchanged). */
mp_status mp_precision_set_optim_state(mp_precision *p, mp_state_format f);

/* The optimizer state's format p resolves to (never MP_STATE_AUTO). */
mp_state_format mp_precision_state_format(const mp_precision *p);

/* Applies --master-weights to a mode: MP_MASTER_FP32, MP_MASTER_NONE,
 * MP_MASTER_KAHAN or MP_MASTER_PURE_BF16 ("sr": bf16 weights, each update
 * rounded stochastically; bf16 with it is bf16-pure). MP_EINVAL + message
 * for none or kahan on an fp32 mode (there is no compute copy to keep
 * alone), sr outside bf16 compute, a switch on bf16-pure (write
 * bf16+master-weights=...), and any other value; also for a setting other
 * than fp32 on a mode with a recipe (it quantizes the fp32 masters).
 * Updates p->label. */
mp_status mp_precision_set_master_weights(mp_precision *p, mp_master_weights m);

/* Applies --reductions to a mode: MP_REDUCE_FP32 or MP_REDUCE_HALF.
 * MP_EINVAL + message for half on an fp32 mode (nothing to round to) and for
 * any other value. Updates p->label. */
mp_status mp_precision_set_reductions(mp_precision *p, mp_reductions r);

/* The recipe of a mode (TE's defaults, recipe.h, with the mode's MX rule)
 * into *out: kind MP_RECIPE_NONE for a mode without one. MP_EINVAL for a NULL
 * p or out; nothing else fails. */
mp_status mp_precision_recipe(const mp_precision *p, mp_recipe *out);

/* Applies --mx-rule to an mxfp8 mode; MP_EINVAL + message for another mode
 * or rule. Updates p->label. */
mp_status mp_precision_set_mx_rule(mp_precision *p, mp_mx_rule r);

/* The formats of a mode in words, as runs, tables and reports name them:
 * the compute format ("bf16"), and with a recipe the element formats of its
 * GEMM operands: "bf16 + fp8 e4m3/e5m2" (inputs and weights / gradients),
 * "bf16 + mxfp8 e4m3", "bf16 + nvfp4 e2m1". Into out (cap bytes); returns
 * out. */
const char *mp_precision_formats(const mp_precision *p, char *out, size_t cap);

/* "fp32", "bf16-pure" or "none": the value checkpoints and logs record. */
const char *mp_master_weights_name(mp_master_weights m);

/* "fp32" or "half". */
const char *mp_reductions_name(mp_reductions r);

/* ---- learning-rate schedules (nanoGPT's get_lr) ---- */

typedef enum mp_lr_schedule { MP_LR_CONSTANT = 0, MP_LR_COSINE } mp_lr_schedule;

typedef struct mp_lr_config {
    double lr; /* the peak learning rate */
    mp_lr_schedule schedule;
    long warmup;      /* steps of linear warmup: lr (step + 1) / (warmup + 1) */
    long decay_steps; /* cosine: reaches min_lr at this step, stays there after */
    double min_lr;
} mp_lr_config;

/* The learning rate of step `step` (0-based):
 *   step < warmup:                 lr (step + 1) / (warmup + 1)
 *   constant:                      lr
 *   cosine, step > decay_steps:    min_lr
 *   cosine:                        min_lr + (1 + cos(pi r)) / 2 (lr - min_lr),
 *                                  r = (step - warmup) / (decay_steps - warmup) */
double mp_lr_at(const mp_lr_config *c, long step);

/* ---- data ---- */

/* Where the batches come from. Batches point into the loader's memory,
 * valid until its next call. */
typedef struct mp_loader {
    void *impl;
    /* Training micro-batch s (counted from 0 over the whole run, so a
     * resumed run continues the same sequence). */
    mp_status (*train_batch)(void *impl, uint64_t s, mp_batch *b);
    /* Evaluation batch i = 0, 1, ...; b->n = 0 after the last. */
    mp_status (*eval_batch)(void *impl, size_t i, mp_batch *b);
    void (*free)(void *impl);
} mp_loader;

void mp_loader_free(mp_loader *l); /* a loader with impl NULL is a no-op */

/* Images and labels (the MLP's data): micro-batches of B examples
 * (x = pixel / 255), B <= train->n. An epoch is floor(n / B) micro-batches;
 * shuffle: each epoch's order is a permutation drawn from (seed, epoch),
 * else file order. Evaluation: all of eval (may be NULL) in batches of
 * eval_b. The datasets must outlive the loader. MP_EINVAL + message for a
 * NULL out or train, an empty train, B or eval_b 0, B > train->n, or eval
 * images of another size; MP_ENOMEM. On MP_OK *out owns its buffers (not the
 * datasets): mp_loader_free. Its batches never fail. */
mp_status mp_image_loader(mp_loader *out, const mp_dataset *train, const mp_dataset *eval, size_t B, int shuffle,
                          uint64_t seed, size_t eval_b);

/* Text (a language model's data): micro-batches of B windows of T tokens as
 * mp_text_train_batch gives them; evaluation: the first eval_windows
 * validation windows (0: all), B at a time. The corpus must outlive the
 * loader; MP_EINVAL if it is too short for T (mp_text_check). Also MP_EINVAL
 * for a NULL out or text, B or T 0; MP_ENOMEM. On MP_OK *out owns its
 * buffers (not the corpus): mp_loader_free. */
mp_status mp_text_loader(mp_loader *out, const mp_text *text, size_t B, size_t T, int shuffle, uint64_t seed,
                         size_t eval_windows);

/* ---- data parallelism ---- */

/* The ranks of a data-parallel job, as the trainer sees them: the caller
 * implements the three reductions over whatever transport it has (the
 * mixprec command: MPI, tools/dist.c); the library never talks to another
 * process itself. Each function is collective: every rank calls it at the
 * same point with the same n and gets the same result; it returns MP_OK, or
 * a status when it failed (MP_ENOMEM, MP_EIO), which the trainer returns
 * with a message naming the reduction. A rank whose step fails locally (its
 * data, its memory) returns at once while the others wait in the next
 * reduction: the caller ends the job (MPI_Abort).
 *
 * With size > 1 the trainer
 *   - gives every rank its contiguous share of each micro-batch the loader
 *     returns: rows [rank n / size, (rank + 1) n / size) of its n rows
 *     (MP_EINVAL when size does not divide n; x is cut by mp_batch.features),
 *     so that the optimizer sees the same global batch as one process;
 *   - runs forward and backward on the share with the gradient scale
 *     S / (accum size): each rank's gradient is its share's mean loss
 *     divided by size, and their sum is the gradient of the whole
 *     micro-batch's mean, with the per-row values of one process;
 *   - sums the gradients (sum_grads) before the unscale, as PyTorch's DDP
 *     does: an inf or NaN on any rank reaches every rank, all skip the step
 *     together, and the loss scale, step count and optimizer state stay the
 *     same on every rank (the same update from the same sum);
 *   - with fp8-delayed, takes the largest of the ranks' amaxes of every
 *     quantized tensor after each micro-batch (max_f32) before it goes into
 *     the amax history, as Transformer Engine's reduce_amax does over the
 *     data-parallel group: every rank keeps the same history and scales,
 *     those of one process over the whole micro-batch. The other recipes keep
 *     no state that depends on the data: fp8-current, mxfp8 and nvfp4 scale a
 *     rank's inputs and gradients by its share's own amaxes (as TE does
 *     data-parallel); nvfp4's stochastic-rounding streams advance the same on
 *     every rank (the same seed, the same shapes: as Megatron's data-parallel
 *     ranks share theirs);
 *   - sums the step's loss and the evaluation's sums (sum_f64); evaluation
 *     batch i goes to rank i mod size.
 * What a step counts (mp_step_info's stores, lost and dead gradients, the
 * model's statistics) is this rank's share only; the loss, scale, gradient
 * norm, skip and lost updates are the job's. */
typedef struct mp_train_dist {
    int rank;  /* this process: 0 .. size - 1 */
    int size;  /* the ranks (>= 1; 1 behaves as no dist at all) */
    void *ctx; /* the implementation's, passed to each function */
    /* Sums count fp32 arrays (x[i] has n[i] values: the parameters'
     * gradients in registration order) over the ranks, in place. How they
     * travel is the implementation's choice (fp32, or a narrower format): a
     * sum that overflows must come back as inf so that every rank skips. */
    mp_status (*sum_grads)(void *ctx, float *const *x, const size_t *n, size_t count);
    /* Sums n doubles over the ranks, in place (the loss, evaluation sums, hashes). */
    mp_status (*sum_f64)(void *ctx, double *x, size_t n);
    /* The largest of each of n floats over the ranks, in place (amaxes: >= 0, or +inf). */
    mp_status (*max_f32)(void *ctx, float *x, size_t n);
    /* Only with mp_train_config.shard_optimizer (else may be NULL):
     * sum_grads' sums, of which rank r keeps those of arrays [first[r],
     * first[r + 1]) (first: size + 1 indexes, first[size] = count); the
     * other arrays are left as they were (a reduce-scatter). In fp32;
     * tools/dist.c adds in rank order, as --accum adds micro-batches. */
    mp_status (*reduce_scatter)(void *ctx, float *const *x, const size_t *n, size_t count, const size_t *first);
    /* Every rank's x[i] (bytes[i] bytes) for i in [first[r], first[r + 1]) to every other rank's x[i] (an
     * all-gather). */
    mp_status (*all_gather)(void *ctx, void *const *x, const size_t *bytes, size_t count, const size_t *first);
    /* Rank root's bytes at x to every rank's x; x may be NULL on a rank
     * that does not keep them (the implementation receives them elsewhere). */
    mp_status (*broadcast)(void *ctx, void *x, size_t bytes, int root);
} mp_train_dist;

/* ---- the trainer ---- */

typedef struct mp_train_config {
    const mp_precision *precision; /* must outlive the trainer (a table row or the caller's value) */
    mp_scaler_config scaler;       /* scaled modes: static uses init_scale (or the mode's static_scale when it has one)
                                      and never changes it */
    mp_lr_config lr;
    long accum;                /* micro-batches per step (>= 1) */
    double clip;               /* clip the unscaled gradients' global norm to this; 0: off */
    const mp_train_dist *dist; /* the data-parallel ranks (must outlive the trainer), or NULL: one process */
    /* With dist (size > 1): the optimizer state sharded over the ranks (ZeRO stage 1, mp_optim_set_shard). Each
     * rank owns a contiguous run of parameters in registration order, about 1/size of the elements, on parameter
     * boundaries; the gradients are reduce-scattered instead of summed everywhere, each rank updates and holds
     * the state of its own parameters, and the weights (fp32 masters, or the half weights without them) are
     * all-gathered from their owners after the update (the half copies rounded again on the other ranks, the
     * same bits). The same results as without: with 2 ranks the sums are the same additions, so the weights,
     * state and log are bit-identical (with more ranks, as the reduce_scatter adds). The norm must be fp32
     * (no +reductions=half with clip). A checkpoint needs mp_trainer_gather_state first. */
    int shard_optimizer;
    uint64_t seed; /* the stream of a mode that rounds stochastically (bf16-pure: mp_optim_set_rounding) */
} mp_train_config;

/* What one step did. */
typedef struct mp_step_info {
    long step;   /* 1-based number of the step just taken (skipped ones count) */
    float loss;  /* mean over the micro-batches, unscaled */
    float scale; /* the loss scale used (1 without scaling) */
    double lr;
    double grad_norm;          /* global norm of the unscaled gradients before clipping (inf/NaN on overflow) */
    int skipped;               /* the optimizer step was skipped (inf/NaN in the scaled gradients) */
    mp_convert_stats fwd, bwd; /* this step's stores, all tensors together */
    uint64_t fwd_elements, bwd_elements;
    /* What the precision lost in this step (docs/LOGS.md). Weight gradients
     * (the model's entries with has_wgrad, model.h): wgrad_elements values
     * stored into the compute format, of which lost_gradients were nonzero
     * in fp32 and became 0 (what loss scaling recovers) and dead_gradients
     * were exactly 0 in fp32 already (dead units: no format's fault). The
     * optimizer (mp_optim_lost_updates): params_updated elements, of which
     * lost_updates had a nonzero update that left the stored weight
     * unchanged (what fp32 master weights recover); both 0 on a skipped step. */
    uint64_t wgrad_elements, lost_gradients, dead_gradients;
    uint64_t params_updated, lost_updates;
    /* Where the inf/NaN was, filled only on a step that was skipped or whose
     * loss or gradient norm is not finite (clean steps pay nothing):
     * the parameters whose gradient held inf or NaN, those with an inf first
     * (where the overflow happened), then those with NaN only, each group in
     * registration order (bad_grads: the first MP_STEP_NAMES of their names,
     * pointing into the optimizer; nbad counts them all; bad_grad_inf: the
     * first one holds an inf), and the first activation in forward order (the
     * model's statistics order) whose stores overflowed or held NaN in this
     * step, or NULL (pointing into the model's statistics). */
#define MP_STEP_NAMES 64
    size_t nbad;
    const char *bad_grads[MP_STEP_NAMES];
    int bad_grad_inf;
    const char *first_activation;
} mp_step_info;

typedef struct mp_trainer mp_trainer;

/* A trainer over a model and its optimizer (the model's parameters must be
 * registered with opt, in the mode's format) and a loader. The trainer does
 * not own them. It applies the rest of the mode: the optimizer's rounding
 * (stochastic from c->seed where the mode says) and state format, where the
 * model's reductions round (set_reductions), the loss scaler. MP_EINVAL for a bad config (accum < 1, bad scaler config,
 * clip < 0, a dist with size < 1, rank outside [0, size) or, with size > 1,
 * a NULL function). With a dist, every rank creates its trainer from the
 * same model, seed and data. Also MP_EINVAL + message for a NULL argument, a
 * bad learning-rate schedule, or half reductions on a model without
 * set_reductions (or its refusal); MP_ENOMEM. On MP_OK the caller owns *out
 * (mp_trainer_free, which frees none of model, opt and loader). */
mp_status mp_trainer_create(mp_trainer **out, const mp_train_config *c, mp_model model, mp_optim *opt,
                            mp_loader loader);
void mp_trainer_free(mp_trainer *t); /* NULL is a no-op */

/* One training step (above); *info (may be NULL) says what it did. MP_OK, or
 * MP_EOVERFLOW (the step is counted and *info written), or the first failing
 * call's status with its message: the loader's, the model's (MP_EINVAL for a
 * bad batch, MP_ENOMEM), MP_EINVAL for a micro-batch that does not split
 * over the ranks, a reduction's, the optimizer's (MP_ENOMEM); the step is
 * then not counted and *info not written, though gradients, and the scaler's
 * stage, may have changed. */
mp_status mp_trainer_step(mp_trainer *t, mp_step_info *info);

/* Evaluates the model over the loader's evaluation batches: *loss the mean
 * loss per prediction, *accuracy the fraction of predictions whose largest
 * logit is the target (either may be NULL). Statistics are not disturbed.
 * With ranks: collective; each evaluates its batches and the sums are
 * added (the same figures up to the order of those additions). MP_EINVAL +
 * message when there is no evaluation data (no eval_batch, or no
 * predictions); or the loader's, the model's (MP_EINVAL, MP_ENOMEM) or the
 * reduction's status. *loss and *accuracy are written only on MP_OK. */
mp_status mp_trainer_evaluate(mp_trainer *t, double *loss, double *accuracy);

/* *crc gets the CRC-32 of everything a step depends on and changes: the
 * weights as checkpoints write them (fp32 masters, or the weights themselves
 * without), the optimizer's state and step count, the trainer's step count,
 * the scaler's state and the quantization state (amax histories, scales,
 * random streams); with shard_optimizer, without the optimizer state (each
 * rank holds its own parameters'). MP_ENOMEM. */
mp_status mp_trainer_state_crc(mp_trainer *t, uint32_t *crc);

/* Collective (every rank at the same step): compares mp_trainer_state_crc
 * over the ranks. MP_OK when they agree (always without a dist, or with
 * size 1); MP_ECORRUPT on every rank when any differs, with the message
 * "step N: the ranks' weights, optimizer and scaler state differ: CRC-32
 * 0x... on rank 0, 0x... on rank R" (the first rank that differs), after
 * which the run should stop; or the transport's status. */
mp_status mp_trainer_check_ranks(mp_trainer *t);

/* Collective, with shard_optimizer (else nothing to do: MP_OK): hold 1
 * brings every parameter's optimizer state to rank 0 from its owner, so that
 * rank 0's mp_trainer_save writes the same file as an unsharded run; hold 0
 * frees on rank 0 what it brought. MP_ENOMEM on every rank when rank 0 has
 * no room for it (agreed before any transfer; nothing is left held);
 * MP_ECORRUPT on rank 0 when an owner's state differs from rank 0's in
 * layout (after every rank has made every transfer); or the transport's
 * status. A parameter whose owner holds no state yet (no step taken) has
 * none on rank 0 either. */
mp_status mp_trainer_gather_state(mp_trainer *t, int hold);

long mp_trainer_step_count(const mp_trainer *t);         /* steps taken, skipped ones included */
const mp_scaler *mp_trainer_scaler(const mp_trainer *t); /* NULL in modes without loss scaling */

/* Checkpoints: the model's tensors (weights converted to weights_dtype:
 * MP_F32 keeps them exact), each parameter's optimizer state
 * ("optim.NAME.state1|2"), and metadata: the caller's pairs (key, value,
 * ..., NULL; may be NULL), then format, precision (the table row's name),
 * master_weights (mp_master_weights_name), reductions (mp_reductions_name),
 * step, optim_steps and the
 * scaler's state. Optimizer state is written in its own dtype (F32, or
 * F16/BF16 for half-only parameters). A model with a recipe (model.h's
 * qtensors) adds "recipe" (its settings in words) and each quantized
 * tensor's state: "quant.NAME" in the metadata (hex: the stochastic-rounding
 * stream's seed and counter, the delayed history's position and scale) and,
 * for fp8-delayed, its amax history as the F32 tensor
 * "quant.NAME.amax_history". Written atomically (io.h). MP_EINVAL + message
 * for weights_dtype other than fp32/fp16/bf16 (or a tensor
 * mp_safetensors_write refuses); MP_ENOMEM; MP_EIO naming the file (a file
 * already at path is left whole; also when another process holds path's
 * lock, mp_output_lock). The caller's meta keys must not repeat
 * the keys listed here: the file would not read back. */
mp_status mp_trainer_save(mp_trainer *t, const char *path, const char *const *meta, mp_dtype weights_dtype);

/* Continues from a checkpoint written by mp_trainer_save: refuses
 * (MP_EINVAL, naming the key) one whose metadata differ from the expected
 * pairs (key, value, ..., NULL) or from this trainer's precision,
 * master_weights (a checkpoint without master_weights counts as "fp32",
 * or "bf16-pure" for that precision), reductions (without: "fp32") or recipe
 * (without: "none"); restores weights, optimizer state, scaler, quantization
 * state (all of it checked before any is changed) and step count
 * (MP_ECORRUPT for missing or damaged parts, the message naming the tensor
 * or field, the value and the rule: weights finite; optimizer state as
 * mp_optim_state_check checks it; the scaler's blob as mp_scaler_load; an
 * amax history finite and >= 0). A resumed run continues
 * bit-identically. Reading the file: mp_safetensors_read's MP_EIO,
 * MP_ECORRUPT and MP_ENOMEM (nothing changed). After an MP_ECORRUPT found
 * while restoring, weights and optimizer state may be partly restored (the
 * step count is not): do not train on. */
mp_status mp_trainer_resume(mp_trainer *t, const char *path, const char *const *expect);

#ifdef __cplusplus
}
#endif
#endif
