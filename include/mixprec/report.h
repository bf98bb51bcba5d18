/* mixprec/report.h - the HTML report of a comparison of precision modes: one
 * self-contained file (inline SVG and CSS, no script, no network). */
#ifndef MIXPREC_REPORT_H
#define MIXPREC_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"
#include "train.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MP_REPORT_HIST_BINS 84

/* A skipped step and where its inf/NaN was, in words
 * ("inf in h.3.mlp.c_fc.weight (grad) and 2 more; first overflowing activation h.3.mlp.c_fc"). */
typedef struct mp_report_skip {
    long step;
    double scale; /* the loss scale the step used */
    const char *where;
} mp_report_skip;

/* The quantized tensors of a run whose Linear GEMMs run on fp8/fp4 operands (recipe.h). */
typedef struct mp_report_quant {
    int n;                              /* quantized tensors */
    const char (*names)[64];            /* (n,) "h.0.attn.c_attn.input" ... */
    const mp_quant_stats *stats;        /* (n,) counts summed over the run, amax the largest of the run */
    const float *scale;                 /* (n,) the scale of the last step */
    const float *saturated, *flushed;   /* (nsteps,) fractions of the step's quantized values, all tensors
                                         together, that saturated and that were flushed to zero */
    int nassigned;                      /* the model's Linear layers (0: not known) */
    const char (*assigned_names)[64];   /* (nassigned,) "transformer.h.0.attn.c_attn" ... */
    const char (*assigned_recipes)[16]; /* (nassigned,) the recipe each ran in, or the compute format */
} mp_report_quant;

/* A per-layer figure measured on every step, drawn in place of a run's layer_underflow in the per-layer and
 * over-time charts (the PyTorch monitor without its fp32 recomputation: what storing each layer's gradients in
 * each format would do, values that become 0 and values that become subnormal). */
typedef struct mp_report_layer_series {
    const char *label;   /* the legend's: "fp16: 0", "fp16: subnormal" */
    const char *color;   /* CSS colour of its bars and line */
    const float *values; /* (nsteps, nlayers) of its run: fractions of the layer's gradient values */
} mp_report_layer_series;

/* One training run as the report shows it. Arrays are per step (nsteps). */
typedef struct mp_report_run {
    const char *name;   /* "fp16-dynamic" */
    const char *format; /* the formats: "fp16", "bf16 + fp8 e4m3/e5m2" (the summary table's format column) */
    const char *color;  /* CSS colour of its lines and bars: "#1f77b4" */
    long nsteps;
    const float *loss, *scale; /* (nsteps,) */
    const uint8_t *skipped;    /* (nsteps,) 1 where the step was skipped */
    int nlayers;
    const char (*layer_names)[64]; /* (nlayers,): "fc0" ... */
    const float *layer_underflow;  /* (nsteps, nlayers): fraction of the layer's gradient stores that became 0 */
    double eval;                   /* the evaluation figure the table shows (see mp_report.eval_name) */
    double last_loss, underflow, ms_per_step, memory_mib, final_scale;
    double bytes_per_param; /* what the parameters hold per value (mp_optim_bytes); 0: not known (no chart) */
    double lost_gradients, dead_gradients; /* fractions of the weight-gradient values: nonzero in fp32 and 0
                                              when stored; 0 in fp32 already (train.h's mp_step_info) */
    double lost_updates;                   /* fraction of the parameter updates that left the weight unchanged */
    long skipped_total;
    /* one gradient histogram: counts of floor(log2 |g|) from hist_lo, values as stored (loss scale included) */
    int has_hist;
    int hist_lo;
    double hist[MP_REPORT_HIST_BINS], hist_zeros, hist_scale;
    const char *const *warnings;
    int nwarnings;
    const mp_tensor_stats *tensors; /* (nlayers,) or NULL: each tensor's store counts and largest finite magnitudes
                                    summed over the run (model.h; names: layer_names), for the activation headroom
                                    against fp16_max and the "Per tensor" table */
    const mp_format_info *headroom_format; /* with tensors: the format whose largest value the table's headroom is
                                    against (the run's JSON's "headroom_against") */
    const mp_report_skip *skips;           /* the first nskips skipped steps (the report lists up to 20) */
    long nskips;
    long neval;                /* evaluations (0: none) */
    const long *eval_steps;    /* (neval,) the step each followed */
    const double *eval_losses; /* (neval,) its loss (mp_report.eval_loss_name); inf/NaN ones are not drawn */
    const char *sample;        /* NULL, or text the run's final model wrote, non-printable bytes already written
                                  as \xNN (the writer HTML-escapes it) */
    double sample_printable, sample_words; /* mp_text_judge's shares for the sample (sample_words NAN: no words) */
    const mp_precision *precision;         /* the run's mode, for "what each protection buys"; NULL: not compared */
    const struct mp_report_quant *quant;   /* a run with an fp8/fp4 recipe: its quantized tensors; NULL: none */
    /* NULL: the per-layer and over-time charts draw layer_underflow (values that became zero when stored).
     * Else they draw these nlayer_series series, under layer_title (what they count: "Weight-gradient values
     * that would become 0 or subnormal if stored at the recorded loss scale"); the heat map stays
     * layer_underflow's. Where every value drawn would be 0, a sentence stands in for both charts. */
    const mp_report_layer_series *layer_series;
    int nlayer_series;
    const char *layer_title;
} mp_report_run;

typedef struct mp_report {
    const char *title;
    const char *command; /* how to reproduce */
    const char *reading; /* the plain-language reading (HTML-escaped by the writer) */
    double fp16_min_subnormal, fp16_min_normal, fp16_max;
    const char *eval_name;      /* the table's evaluation column: "test accuracy", "validation loss" */
    int eval_percent;           /* eval is a fraction shown as a percentage */
    const char *eval_loss_name; /* what eval_losses are: "validation loss", "test loss" */
    int baseline;               /* index of the run speed-ups are measured against; -1: none */
    const mp_report_run *runs;
    int nruns; /* 0 .. 64 */
} mp_report;

/* One row of "what each protection buys": a run whose mode is the
 * reference's (the run named exactly "fp16-dynamic": fp16 compute, fp32
 * master weights, fp32 reductions, dynamic loss scaling) with exactly one
 * protection removed: master weights fp32 -> none, reductions fp32 -> half,
 * or loss scaling -> none (the run "fp16"); compute format and rounding the
 * same. */
typedef struct mp_report_ablation {
    const char *protection; /* "fp32 master weights", "fp32 reductions" or "loss scaling" */
    int run;                /* the run's index in mp_report.runs */
    double eval, delta;     /* its eval figure, and that minus the reference's */
} mp_report_ablation;

/* The rows of "what each protection buys" in the order of the runs, at most
 * cap of them (64 holds every possible one) into rows; returns how many were
 * written, 0 when no run is named "fp16-dynamic" or no run qualifies. *ref
 * (may be NULL) gets the reference's index, -1 when there is none. Runs
 * without a precision take no part. */
int mp_report_ablation_rows(const mp_report *r, mp_report_ablation *rows, int cap, int *ref);

/* Writes the report atomically (temporary file, rename). MP_EINVAL + message
 * for a NULL path or r, an empty path or nruns outside 0 .. 64; MP_ENOMEM;
 * MP_EIO naming the file (mp_write_file_atomic: a file already at path is
 * left whole; also when another process holds path's lock). */
mp_status mp_report_write(const char *path, const mp_report *r);

#ifdef __cplusplus
}
#endif
#endif
