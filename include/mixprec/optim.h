/* mixprec/optim.h - parameters with fp32 master weights, SGD and AdamW, clipping,
 * and the loss-scaled step protocol.
 *
 * A parameter owns an fp32 master tensor, an fp32 gradient, and optionally a
 * half copy (fp16 or bf16) that forward/backward read. After every real step
 * the half copy is refreshed from the master: round to nearest even, or for
 * bf16 stochastic rounding (seeded, reproducible). In pure-bf16 mode a
 * parameter has no master copy: the weights live only in bf16 and each update
 * is rounded stochastically (saves 4 bytes per weight; costs accuracy, see
 * docs/SCALING.md). A half-only parameter (mp_optim_add_half, what
 * `--master-weights none` registers) has no fp32 copy of anything: its
 * weights and its optimizer state (momentum buffer, exp_avg, exp_avg_sq) live
 * in fp16 or bf16; each update widens them to fp32, runs the same fp32
 * arithmetic as the master path and rounds every stored result to nearest
 * even, as torch.optim on a model.half() stores it (updates under half an ulp
 * of the weight are lost; moments of small gradients underflow).
 *
 * The update rules are PyTorch's torch.optim.SGD and torch.optim.AdamW
 * (single-tensor implementation): hyperparameters are doubles, coefficients
 * derived from them (1 - lr*wd, bias corrections, ...) are computed in double
 * as Python does and rounded to fp32, element arithmetic is fp32 with a fused
 * multiply-add where PyTorch's CPU kernels use one.
 */
#ifndef MIXPREC_OPTIM_H
#define MIXPREC_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "format.h"
#include "scaler.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mp_sgd_config {
    double lr;           /* 1e-3 */
    double momentum;     /* 0 */
    double dampening;    /* 0 */
    double weight_decay; /* 0: L2 term added to the gradient */
    int nesterov;        /* 0; needs momentum > 0 and dampening == 0 */
} mp_sgd_config;

typedef struct mp_adamw_config {
    double lr;           /* 1e-3 */
    double beta1, beta2; /* 0.9, 0.999 */
    double eps;          /* 1e-8 */
    double weight_decay; /* 1e-2: decoupled, w *= 1 - lr * weight_decay */
} mp_adamw_config;

mp_sgd_config mp_sgd_defaults(void);
mp_adamw_config mp_adamw_defaults(void);

typedef enum mp_rounding { MP_ROUND_NEAREST = 0, MP_ROUND_STOCHASTIC } mp_rounding;

/* Where the weights and the optimizer state live (the --master-weights switch). */
typedef enum mp_master_weights {
    MP_MASTER_FP32 = 0,  /* fp32 master weights and fp32 optimizer state, updates in fp32; the compute
                            copies rounded from the masters (--master-weights fp32, the default) */
    MP_MASTER_PURE_BF16, /* bf16-pure: weights only in bf16, fp32 optimizer state, each update rounded
                            stochastically; a mode of its own, not a setting of the switch */
    MP_MASTER_NONE,      /* --master-weights none: weights and optimizer state only in the compute format
                            (fp16 or bf16), every parameter (biases and layer norms too); each update
                            computed in fp32 from the widened values, every result rounded to nearest
                            even (mp_optim_add_half), as torch.optim on a model.half() */
    MP_MASTER_KAHAN,     /* --master-weights kahan: weights only in the compute format (fp16 or bf16) with a
                            compensation buffer in the same format that keeps what each rounding lost, as
                            torch-optimi's kahan_sum (mp_optim_add_kahan) */
} mp_master_weights;

/* How the optimizer state (SGD's momentum buffer, AdamW's two moments) is
 * stored between steps (the --optim-state switch); every update widens it to
 * fp32, runs the fp32 arithmetic and stores it back. */
typedef enum mp_state_format {
    MP_STATE_AUTO = 0, /* fp32, or for a parameter without fp32 weights its compute format (what
                          --master-weights none stores, as torch.optim on a model.half()) */
    MP_STATE_FP32,
    MP_STATE_BF16, /* rounded to nearest even */
    MP_STATE_FP16, /* the same (a half-only fp16 parameter's AUTO) */
    MP_STATE_FP8,  /* e4m3, one fp32 scale per block of 256 (torchao's AdamWFp8) */
    MP_STATE_8BIT, /* 8-bit codes into torchao's dynamic maps, one fp32 scale per block of 256 (AdamW8bit) */
    MP_STATE_4BIT, /* 4-bit codes, blocks of 128: exp_avg into a signed dynamic map, exp_avg_sq into the
                      linear map k/16, k = 1..16 (AdamW4bit) */
} mp_state_format;

/* "fp32", "bf16", "fp16", "fp8", "8bit", "4bit" ("auto" for MP_STATE_AUTO). */
const char *mp_state_format_name(mp_state_format f);

/* Where a step stands for one optimizer between two mp_scaler_update calls. */
typedef enum mp_stage { MP_STAGE_READY = 0, MP_STAGE_UNSCALED, MP_STAGE_STEPPED } mp_stage;

typedef struct mp_param {
    char name[64];
    size_t n;
    float *master;             /* (n,) fp32 master weights; NULL in pure-bf16 mode and for half-only parameters */
    float *grad;               /* (n,) fp32 gradient: backward adds into it */
    void *half;                /* (n,) the compute copy in half_type; NULL when half_type is MP_F32 */
    mp_dtype half_type;        /* MP_F32 (no copy), MP_F16 or MP_BF16 */
    uint16_t *comp;            /* (n,) the Kahan compensation in half_type (MP_MASTER_KAHAN), else NULL */
    mp_master_weights weights; /* how the weights are kept */
    /* The optimizer state (state1: SGD's momentum buffer or AdamW's exp_avg; state2: exp_avg_sq), all NULL
     * until the first step (or mp_optim_restore) allocates it in state_format: */
    mp_state_format state_format; /* MP_STATE_FP32, BF16, FP16, FP8, 8BIT or 4BIT (the optimizer's format, or
                                     the fallback of a parameter too small for its blocks: mp_optim_add) */
    float *state1;                /* (n,) fp32 (MP_STATE_FP32) */
    float *state2;
    uint16_t *hstate1; /* (n,) fp16 or bf16 bits (MP_STATE_FP16, MP_STATE_BF16) */
    uint16_t *hstate2;
    uint8_t *qstate1; /* block formats: (n,) e4m3 or 8-bit codes, (n/2,) 4-bit codes (two a byte, the
                         first in the high nibble) */
    uint8_t *qstate2;
    float *qscale1; /* (n/block,) their fp32 scales */
    float *qscale2;
    int has_state; /* state holds values (SGD's buffer starts as the first gradient) */
    int no_decay;  /* weight decay is not applied to this parameter (0 when added; a model
                      sets it for biases and layer norms, as nanoGPT's configure_optimizers) */
} mp_param;

typedef struct mp_optim mp_optim;
struct mp_tensor; /* io.h */

/* Creates an optimizer; MP_EINVAL + message on bad hyperparameters. Also
 * MP_EINVAL for a NULL out, MP_ENOMEM. On MP_OK the caller owns *out: free it
 * (and every parameter in it) with mp_optim_free. cfg NULL: the defaults. */
mp_status mp_optim_sgd(mp_optim **out, const mp_sgd_config *cfg);
mp_status mp_optim_adamw(mp_optim **out, const mp_adamw_config *cfg);
void mp_optim_free(mp_optim *o); /* NULL is a no-op */

/* Adds a parameter of n elements, master weights copied from init (fp32),
 * gradient zeroed, half copy (half_type MP_F16 or MP_BF16; MP_F32 for none)
 * rounded from the master. *out (may be NULL) points into the optimizer and
 * stays valid until it is freed. MP_EINVAL + message for a NULL o or name, a
 * NULL init with n > 0, another half_type, a name of 64 bytes or more, or a
 * non-finite init value; MP_ENOMEM. Nothing is added on failure. Names are not
 * checked for uniqueness. */
mp_status mp_optim_add(mp_optim *o, const char *name, const float *init, size_t n, mp_dtype half_type, mp_param **out);

/* Adds a pure-bf16 parameter: weights only in bf16 (param->half), no master;
 * each update is rounded stochastically to bf16. Statuses and *out as
 * mp_optim_add. */
mp_status mp_optim_add_pure_bf16(mp_optim *o, const char *name, const float *init, size_t n, mp_param **out);

/* Adds a half-only parameter (`--master-weights none`): weights rounded to
 * nearest even from init into param->half (half_type MP_F16 or MP_BF16; else
 * MP_EINVAL), no master; the optimizer state, when the optimizer needs one,
 * in half_type too (state_type, hstate1, hstate2). Each update widens the
 * stored weight and state to fp32, applies the same fp32 element arithmetic
 * as a master-weight parameter and rounds each result (weight, momentum
 * buffer, exp_avg, exp_avg_sq) to nearest even into half_type. *out and the
 * other statuses as mp_optim_add. */
mp_status mp_optim_add_half(mp_optim *o, const char *name, const float *init, size_t n, mp_dtype half_type,
                            mp_param **out);

/* Whether a model computing in `compute` can keep its weights as m asks:
 * MP_EINVAL + message (naming who) for pure bf16 weights outside bf16
 * compute, no master weights in fp32 compute (there is no copy to keep
 * alone), or a value that is no setting. */
mp_status mp_master_weights_check(const char *who, mp_dtype compute, mp_master_weights m);

/* Adds a parameter as a model computing in `compute` with master-weights
 * setting m registers it: MP_MASTER_FP32, mp_optim_add with a copy in
 * copy_type (the compute format, or MP_F32 for a parameter the kernels read
 * in fp32: biases, layer norms); MP_MASTER_PURE_BF16, mp_optim_add_pure_bf16;
 * MP_MASTER_NONE, mp_optim_add_half in the compute format. Their statuses,
 * and mp_master_weights_check's. */
mp_status mp_optim_add_as(mp_optim *o, const char *name, const float *init, size_t n, mp_dtype compute,
                          mp_master_weights m, mp_dtype copy_type, mp_param **out);

/* Adds a Kahan-compensated parameter (`--master-weights kahan`): weights
 * rounded to nearest even from init into param->half (half_type MP_F16 or
 * MP_BF16; else MP_EINVAL), no master, a compensation buffer param->comp of
 * zeros in half_type. Each update computes the master path's fp32 update u
 * from the widened weight and state, then (every result rounded to nearest
 * even into half_type) comp += u, w += comp, comp += (w_before - w_after):
 * AdamW's decoupled decay first rounds into w. *out and the other statuses as
 * mp_optim_add. */
mp_status mp_optim_add_kahan(mp_optim *o, const char *name, const float *init, size_t n, mp_dtype half_type,
                             mp_param **out);

/* How the optimizer keeps its state (before its first step; MP_ESTATE
 * after). A block format (fp8, 8bit, 4bit) applies to the parameters of at
 * least 4096 elements that are a whole number of blocks (256; 128 for
 * 4bit), as torchao's; the others keep theirs in fp32, or without fp32
 * weights in their compute format (as torchao keeps them in the
 * parameter's dtype). MP_EINVAL for a NULL o or another f; SGD without
 * momentum has no state (MP_EINVAL for a format other than AUTO/FP32). */
mp_status mp_optim_set_state_format(mp_optim *o, mp_state_format f);

/* The bytes the optimizer's parameters hold, by part, as allocated (the
 * state once the first step or mp_optim_restore made it). */
typedef struct mp_optim_bytes {
    double params;  /* parameter values */
    double weights; /* the weights as kept: fp32 masters, or the compute-format weights without them */
    double copy;    /* the compute copies beside fp32 masters */
    double grad;    /* the fp32 gradients */
    double comp;    /* Kahan compensation buffers */
    double state;   /* the optimizer state, block scales included */
} mp_optim_bytes;
mp_optim_bytes mp_optim_bytes_held(const mp_optim *o);
/* (weights + copy + grad + comp + state) / params; 0 without parameters. */
static inline double mp_bytes_per_param(const mp_optim_bytes *b) {
    return b->params > 0 ? (b->weights + b->copy + b->grad + b->comp + b->state) / b->params : 0;
}

/* The optimizer state of p (and its Kahan compensation) as tensors named
 * "optim.NAME.state1", "...state1.scale" (a block format's scales),
 * "...state2", "...state2.scale", "...comp", in that order, at most 5 into
 * out (may be NULL: the count only); their data points at p's buffers, which
 * a checkpoint's restore fills (after mp_optim_restore allocated them). Codes
 * are MP_U8 (8-bit, and 4-bit two a byte) or MP_E4M3. Returns the count: 0
 * before the state exists and without compensation. */
size_t mp_optim_state_tensors(const mp_param *p, struct mp_tensor *out);

/* Checks the optimizer state of parameter i (and its Kahan compensation)
 * as mp_optim_state_tensors names it, for state read from a file before it
 * is used (mp_trainer_resume calls it): every value finite; AdamW's second
 * moment (state2) >= 0; a block format's scales finite and > 0; its codes
 * values of the format's map (an e4m3 code that is NaN is not). MP_OK, or
 * MP_ECORRUPT naming the tensor, the element or block, the value and the
 * rule; MP_EINVAL for a NULL o or an i out of range. A parameter without
 * state (not yet stepped, or another rank's shard) passes. */
mp_status mp_optim_state_check(const mp_optim *o, size_t i);

/* Subnormal moments (|x| < 2^-126, reached by exp_avg_sq when gradients
 * fall below ~1e-19) make the update two to three times slower on x86: its
 * arithmetic then needs microcode assists. By default (flush = 1) the update
 * runs with FTZ/DAZ, flushing such values to zero, as
 * torch.set_flush_denormal(True) does; flush = 0 keeps exact IEEE subnormals
 * (PyTorch's default) at that cost. Values in the normal range are identical
 * either way. MP_EINVAL for a NULL o; nothing else fails. */
mp_status mp_optim_set_flush_denormal(mp_optim *o, int flush);

/* How bf16 half copies are refreshed after a step (fp16 copies always round
 * to nearest even): nearest even (default) or stochastic with this seed.
 * MP_EINVAL + message for another r (o must not be NULL). */
mp_status mp_optim_set_rounding(mp_optim *o, mp_rounding r, uint64_t seed);

size_t mp_optim_count(const mp_optim *o);
mp_param *mp_optim_param(mp_optim *o, size_t i);
uint64_t mp_optim_steps(const mp_optim *o); /* steps taken (skipped ones not counted) */

/* The last mp_optim_step or mp_scaler_step: returns its lost updates, the
 * parameter elements whose update was nonzero in fp32 but left the stored
 * weight's bits unchanged (what fp32 master weights recover), and sets
 * *updated (may be NULL) to the elements it updated (all of every
 * parameter). The update is what the step adds to w, in fp32 as the step
 * computes it: SGD -lr d (d with weight decay and momentum), AdamW the
 * decay's change w (1 - lr wd) - w plus -step_size m / denom; under FTZ/DAZ
 * (mp_optim_set_flush_denormal) a subnormal update is 0. The stored weight
 * is the fp32 master, or for a parameter without one the half weight after
 * its rounding (nearest even; stochastic for pure bf16). Both 0 before the
 * first step and after a skipped one. Counting does not change any result. */
uint64_t mp_optim_lost_updates(const mp_optim *o, uint64_t *updated);
/* MP_EINVAL + message (lr unchanged) unless lr is finite and >= 0; o must not be NULL. */
mp_status mp_optim_set_lr(mp_optim *o, double lr);
double mp_optim_lr(const mp_optim *o);

/* For checkpoints: sets the number of steps taken and allocates (zeroed) the
 * optimizer state of every parameter (with a shard: of this rank's) so that the caller can fill it
 * (mp_optim_state_tensors); has_state becomes
 * steps > 0. MP_ENOMEM + message naming the parameter whose state could not
 * be allocated (the step count is then unchanged); o must not be NULL. */
mp_status mp_optim_restore(mp_optim *o, uint64_t steps);

/* The optimizer state sharded over data-parallel ranks (ZeRO stage 1, as
 * PyTorch's ZeroRedundancyOptimizer): this rank updates parameters
 * [first, end) only and holds only their state (the others' is freed now and
 * never made); the weights of every parameter stay on every rank, and the
 * caller brings the other ranks' updated weights after each step (the
 * trainer: an all-gather, then mp_optim_refresh_half). Every rank must call
 * the steps together: sum (collective: the ranks' sums of n doubles, in place)
 * joins what the ranks find, so that every rank sees the job's values:
 *   - mp_optim_unscale_clip: each parameter's sum of squares comes from its
 *     owner and the sums are added in registration order (the unsharded norm
 *     to the bit); an inf or NaN anywhere is found everywhere;
 *   - mp_scaler_unscale: the inf/NaN check;
 *   - the lost and updated counts of mp_optim_lost_updates.
 * The gradients of [first, end) must hold the ranks' sums before the unscale
 * (a reduce-scatter); the others are not read. mp_clip_grad_norm (a naive
 * half-precision norm) is refused (MP_EINVAL). MP_EINVAL for a NULL o or sum
 * or a range outside the parameters. */
mp_status mp_optim_set_shard(mp_optim *o, size_t first, size_t end, mp_status (*sum)(void *ctx, double *x, size_t n),
                             void *ctx);
/* 1 when this rank updates parameter i (always without a shard). */
int mp_optim_owns(const mp_optim *o, size_t i);
/* Makes (zeroed, hold 1) or frees (hold 0) parameter i's state and
 * compensation: a sharded checkpoint brings the other ranks' states into
 * rank 0 for the file. MP_EINVAL for no such parameter; MP_ENOMEM. */
mp_status mp_optim_hold_state(mp_optim *o, size_t i, int hold);
/* Rounds parameter i's fp32 master into its half copy as a step does
 * (nearest even, or stochastic with the step's bits): after an all-gather of
 * another rank's masters, the same copy as that rank's. */
void mp_optim_refresh_half(mp_optim *o, size_t i);

/* Sets every gradient to zero. */
void mp_optim_zero_grad(mp_optim *o);

/* One optimizer step on the gradients as they are (no loss scaling), then the
 * half copies are refreshed. Refuses (MP_ESTATE) an optimizer that is being
 * driven by a scaler: use mp_scaler_step then. MP_ENOMEM when the optimizer
 * state cannot be allocated (before any weight changes). */
mp_status mp_optim_step(mp_optim *o);

/* Clips the gradients by their global L2 norm, accumulated in fp64 (acc =
 * MP_F32), or as a naive loop in acc = MP_F16 or MP_BF16 (train.h's
 * --reductions half: parameters in registration order, every square, partial
 * sum and the square root rounded to acc): if the norm exceeds max_norm,
 * every gradient is multiplied by max_norm / (norm + 1e-6) (PyTorch's
 * clip_grad_norm_). *total_norm gets the norm before clipping. With
 * a scaler (s not NULL) the gradients must be unscaled first: MP_ESTATE
 * otherwise. A NaN norm, or an infinite fp64 norm, means non-finite
 * gradients and leaves them as they are (the scaler skips that step). A naive
 * half norm can overflow to inf on finite gradients (its sum passes 65504 in
 * fp16 at a norm of about 256): the coefficient max_norm / inf is then 0 and
 * every gradient becomes 0, as the naive loop's clip does. MP_EINVAL + message
 * for a NULL o, another acc, or a max_norm that is not finite and > 0. */
mp_status mp_clip_grad_norm(mp_optim *o, const mp_scaler *s, double max_norm, mp_dtype acc, double *total_norm);

/* Unscales o's gradients in place (fused multiply by 1/S and inf/NaN check).
 * READY -> UNSCALED; MP_ESTATE if already unscaled or stepped since the last
 * mp_scaler_update. *found_inf (may be NULL) is set to whether inf/NaN was seen.
 * MP_EINVAL + message for a NULL s or o, or when 1/S is not finite (nothing
 * unscaled). */
mp_status mp_scaler_unscale(mp_scaler *s, mp_optim *o, int *found_inf);

/* Unscales if not done yet, then steps o unless inf/NaN was found (a skipped
 * step changes nothing: weights, moments and the step count stay as they
 * were). -> STEPPED; MP_ESTATE if o already stepped since the last update.
 * *found_inf (may be NULL) tells whether the step was skipped: pass it to
 * mp_scaler_update. Also mp_scaler_unscale's statuses, and MP_ENOMEM as
 * mp_optim_step (o is then STEPPED: the update was not applied). */
mp_status mp_scaler_step(mp_scaler *s, mp_optim *o, int *found_inf);

/* o's stage relative to s. */
mp_stage mp_optim_stage(const mp_optim *o, const mp_scaler *s);

#ifdef __cplusplus
}
#endif
#endif
