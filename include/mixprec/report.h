/* mixprec/report.h - the HTML report of a comparison of precision modes: one
 * self-contained file (inline SVG and CSS, no script, no network). */
#ifndef MIXPREC_REPORT_H
#define MIXPREC_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MP_REPORT_HIST_BINS 84

/* A skipped step and where its inf/NaN was, in words
 * ("inf in h.3.mlp.c_fc.weight (grad) and 2 more; first overflowing activation h.3.mlp.c_fc"). */
typedef struct mp_report_skip {
    long step;
    double scale;                /* the loss scale the step used */
    const char *where;
} mp_report_skip;

/* One training run as the report shows it. Arrays are per step (nsteps). */
typedef struct mp_report_run {
    const char *name;            /* "fp16-dynamic" */
    const char *format;          /* compute format: "fp16" */
    const char *color;           /* CSS colour of its lines and bars: "#1f77b4" */
    long nsteps;
    const float *loss, *scale;   /* (nsteps,) */
    const uint8_t *skipped;      /* (nsteps,) 1 where the step was skipped */
    int nlayers;
    const char (*layer_names)[64];/* (nlayers,): "fc0" ... */
    const float *layer_underflow;/* (nsteps, nlayers): fraction of the layer's gradient stores that became 0 */
    double eval;                 /* the evaluation figure the table shows (see mp_report.eval_name) */
    double last_loss, underflow, frozen, ms_per_step, memory_mib, final_scale;
    long skipped_total;
    /* one gradient histogram: counts of floor(log2 |g|) from hist_lo, values as stored (loss scale included) */
    int has_hist;
    int hist_lo;
    double hist[MP_REPORT_HIST_BINS], hist_zeros, hist_scale;
    const char *const *warnings;
    int nwarnings;
    const float *layer_amax;     /* (nlayers,) or NULL: the largest finite activation stored in the run,
                                    0 where none was (the report shows its headroom against fp16_max) */
    const mp_report_skip *skips; /* the first nskips skipped steps (the report lists up to 20) */
    long nskips;
} mp_report_run;

typedef struct mp_report {
    const char *title;
    const char *command;         /* how to reproduce */
    const char *reading;         /* the plain-language reading (HTML-escaped by the writer) */
    double fp16_min_subnormal, fp16_min_normal, fp16_max;
    const char *eval_name;       /* the table's evaluation column: "test accuracy", "validation loss" */
    int eval_percent;            /* eval is a fraction shown as a percentage */
    int baseline;                /* index of the run speed-ups are measured against; -1: none */
    const mp_report_run *runs;
    int nruns;                   /* 0 .. 64 */
} mp_report;

/* Writes the report atomically (temporary file, rename). */
mp_status mp_report_write(const char *path, const mp_report *r);

#ifdef __cplusplus
}
#endif
#endif
