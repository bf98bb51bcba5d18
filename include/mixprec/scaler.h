/* mixprec/scaler.h - loss scaling: the scaler state machine and fused unscale.
 *
 * The loss is multiplied by the scale S before backward, so every gradient is
 * S times larger and small ones survive in fp16; the fp32 master gradients are
 * then multiplied by 1/S ("unscaled") before the optimizer uses them. With the
 * default config, mp_scaler_update gives exactly the scales and growth-tracker
 * values of PyTorch's torch.amp.GradScaler (its _amp_update_scale_ kernel):
 *
 *   overflow (inf/NaN found):  scale *= backoff_factor; tracker = 0
 *   otherwise:                 tracker += 1; if tracker == growth_interval:
 *                                  scale *= growth_factor (only if finite); tracker = 0
 *
 * scale is fp32, the product is taken in double and rounded to fp32, as
 * PyTorch does with its double factors. Extras:
 *   hysteresis N (DeepSpeed / Megatron-LM): back off only on the N-th overflow
 *     since the last growth; every later overflow backs off again until the
 *     scale grows (which restores N). 1 = PyTorch.
 *   min_scale (Apex, DeepSpeed): backoff never goes below it; an overflow when
 *     the scale is already at the floor makes mp_scaler_update return
 *     MP_EOVERFLOW ("loss scale already at minimum"), as DeepSpeed raises.
 *   max_scale (Apex): growth never goes above it.
 *   dynamic = 0: a static scale; update only counts steps and skipped steps.
 *
 * Per training step, for each optimizer (the order PyTorch enforces):
 *   loss * S -> backward -> mp_scaler_unscale (optional, needed for clipping)
 *   -> mp_clip_grad_norm (optional) -> mp_scaler_step (skips on inf/NaN)
 *   -> mp_scaler_update(s, found_inf).
 */
#ifndef MIXPREC_SCALER_H
#define MIXPREC_SCALER_H

#include <stddef.h>
#include <stdint.h>

#include "format.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mp_scaler_config {
    float init_scale;     /* 65536 */
    float growth_factor;  /* 2.0, must be > 1 */
    float backoff_factor; /* 0.5, must be in (0, 1) */
    int growth_interval;  /* 2000, must be >= 1 */
    int hysteresis;       /* 1 = PyTorch behaviour; N = back off only after N overflows (DeepSpeed/Megatron) */
    float min_scale;      /* 0 = no floor */
    float max_scale;      /* 0 = no ceiling (growth still never reaches inf) */
    int dynamic;          /* 0 = static scale init_scale, never changes */
} mp_scaler_config;

/* The scaler: a plain struct, embed it anywhere. Fields are readable; change
 * them only through the functions. */
typedef struct mp_scaler {
    mp_scaler_config cfg;
    float scale;                /* current loss scale S */
    int32_t growth_tracker;     /* clean steps since the last growth or overflow */
    int32_t hysteresis_left;    /* overflows still tolerated before backing off */
    uint64_t steps;             /* calls to mp_scaler_update */
    uint64_t skipped;           /* of those, steps with inf/NaN (optimizer step skipped) */
    uint64_t growths;           /* times the scale grew */
    uint64_t backoffs;          /* times the scale was reduced */
    int64_t last_overflow_step; /* step index (0-based) of the last overflow, -1 if none */
} mp_scaler;

/* PyTorch GradScaler's defaults: 65536, x2, x0.5, 2000, hysteresis 1, no
 * bounds, dynamic. */
mp_scaler_config mp_scaler_defaults(void);

/* Starts a scaler. MP_EINVAL + message on a bad config (NULL cfg means defaults). */
mp_status mp_scaler_init(mp_scaler *s, const mp_scaler_config *cfg);

float mp_scaler_get_scale(const mp_scaler *s);
int mp_scaler_growth_tracker(const mp_scaler *s);

/* The fp32 multiplier for unscaling: 1/S computed in double, rounded to fp32
 * (what GradScaler uses). */
float mp_scaler_inv_scale(const mp_scaler *s);

/* Ends a step: found_inf != 0 means the gradients had inf/NaN and the step was
 * skipped. Updates the scale (dynamic) and the counters. Returns MP_EOVERFLOW
 * when the overflow happened with the scale already at its floor (min_scale, or
 * 0 when the scale has underflowed): the caller should stop or change the setup. */
mp_status mp_scaler_update(mp_scaler *s, int found_inf);

/* A small versioned, checksummed blob of the whole state (config, scale,
 * trackers, counters): MP_SCALER_BLOB_SIZE bytes, little-endian. */
#define MP_SCALER_BLOB_SIZE 104
/* Writes the blob; MP_EINVAL for a NULL s or blob, nothing else fails. */
mp_status mp_scaler_save(const mp_scaler *s, uint8_t blob[MP_SCALER_BLOB_SIZE]);
/* MP_ECORRUPT (state untouched) on a wrong magic, version, size or checksum,
 * or for a state that mp_scaler_update cannot reach from mp_scaler_init (an
 * invalid config; a scale that is not finite and > 0, whose fp32 inverse is
 * not finite, outside [min_scale, max_scale], or not init_scale when static;
 * trackers out of range; counters that do not add up), the message naming
 * the field and its value.
 * MP_EINVAL for a NULL s or blob. */
mp_status mp_scaler_load(mp_scaler *s, const uint8_t *blob, size_t len);

/* Fused unscale + check, one pass over memory: grad[i] *= inv_scale (in fp32,
 * rounded back to the buffer's format, which may be fp32, fp16, bf16, e4m3 or
 * e5m2), and *found_inf = 1 if any element (before scaling, as in PyTorch) is
 * inf or NaN. *found_inf is never cleared. Two threads for large buffers.
 * MP_EINVAL for e8m0 and e2m1 buffers (scales and block-scaled fp4 elements,
 * not gradients under a loss scale). Also MP_EINVAL + message (grad not
 * touched) for an unknown dtype, a NULL found_inf, a NULL grad with n > 0 or
 * an inv_scale that is not finite. */
mp_status mp_unscale_check(void *grad, mp_dtype type, size_t n, float inv_scale, int *found_inf);

/* The same over several buffers (e.g. all gradients of a model). MP_EINVAL +
 * message, before any buffer is touched, for NULL arrays (count > 0), a NULL
 * found_inf, or a buffer whose dtype mp_unscale_check refuses or that is NULL
 * with elements, or an inv_scale that is not finite. */
mp_status mp_unscale_check_list(void *const *grads, const mp_dtype *types, const size_t *ns, size_t count,
                                float inv_scale, int *found_inf);

#ifdef __cplusplus
}
#endif
#endif
