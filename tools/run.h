/* run.h - one training run as `mixprec train` and `mixprec compare` do it:
 * options, the library's trainer, the logs (docs/LOGS.md) and what the
 * report needs, kept in memory. */
#ifndef MIXPREC_TOOLS_RUN_H
#define MIXPREC_TOOLS_RUN_H

#include <stdio.h>

#include "cli.h"

typedef struct run_opts {
    const char *model, *data, *init, *save, *resume, *log, *summary, *dump_grads;
    mp_precision prec;        /* the mode with its switches (--master-weights applied) */
    char prec_name[64];       /* its label: "fp16-static:1024", "fp16-dynamic+master-weights=none" */
    int master_given;         /* --master-weights was given: master applies to prec */
    mp_master_weights master;
    int reductions_given;     /* --reductions was given: reductions applies to prec */
    mp_reductions reductions;
    mp_mx_rule mx_rule;       /* --mx-rule */
    int mx_rule_given;        /* --mx-rule was given: mx_rule applies to prec */
    mp_dtype save_dtype;
    long hist_every;
    mp_act act;
    mp_gelu_form gelu;
    int layernorm, adamw, shuffle, threads;
    mp_scaler_config scaler;
    double lr, momentum, wd, clip, beta1, beta2, min_lr;
    mp_lr_schedule schedule;
    long warmup;
    long batch, accum, epochs, steps, eval_every, eval_windows, seed;
    mp_dtype allreduce;       /* with ranks: the gradients' format on the wire (--allreduce: fp32, bf16, fp16) */
    long check_every;         /* with ranks: compare their state every this many steps (0: at the end only) */
    long sample_bytes;        /* GPT: bytes to sample from the final model (run_result.sample); 0: none */
} run_opts;

/* Defaults, then the options of argv[1..argc) (argv[0] is the command name).
 * Returns 0, -1 after --help, or CLI_USAGE after a message. compare: the
 * options compare sets itself are refused. */
int run_parse(const char *cmd, int argc, char **argv, run_opts *o);

/* Applies the switches given as options (--master-weights, --reductions) to p. */
mp_status run_switches(const run_opts *o, mp_precision *p);

/* The usage text of the training options (shared by train and compare). */
extern const char run_options_help[];

#define RUN_HIST_LO (-64)
#define RUN_HIST_N 84 /* log2 bins 2^-64 .. 2^19 (ends clamp) */

/* What a run leaves for the report and the comparison table. */
typedef struct run_result {
    char model_kind[8];          /* "mlp" or "gpt" */
    const char *compute_format;
    long nsteps;                 /* steps taken in this run */
    float *loss, *scale;         /* (nsteps,) */
    uint8_t *skipped;            /* (nsteps,) */
    int ntensors;
    char (*tensor_names)[64];    /* (ntensors,) */
    float *tensor_underflow;     /* (nsteps, ntensors): fraction of gradient stores that became 0 */
    double eval_loss, eval_accuracy, last_loss, underflow, ms_per_step, memory_mib, final_scale;
    double lost_gradients, dead_gradients; /* fractions of the run's weight-gradient values (model.h) */
    double lost_updates;         /* fraction of the run's parameter updates (mp_optim_lost_updates) */
    double tokens_per_s;         /* gpt */
    long skipped_total;
    int has_hist;
    double hist[RUN_HIST_N], hist_zeros, hist_scale;
    char warnings[6][256];
    int nwarnings;
    mp_tensor_stats *tensor_totals; /* (ntensors,): each tensor's counts and largest magnitudes over the run (the
                                       summary's "tensors"; names in tensor_names) */
    const mp_format_info *headroom_format; /* the format whose largest value the headroom figures are against: the
                                              compute format, fp16 in an fp32 run */
    mp_report_skip *skips;       /* the first RUN_SKIPS_KEPT skipped steps, where pointing into skip_text */
    char (*skip_text)[512];
    long nskips;
    long neval;                  /* evaluations: each --eval-every step's, then the one at the end */
    long *eval_steps;            /* (neval,) the step each followed, counted from the start of this run */
    double *eval_losses;         /* (neval,) its mean loss (GPT: validation, MLP: test) */
    char *sample;                /* with sample_bytes: the text the final model wrote after "\n" (temperature 1,
                                    seed 1), escaped as `mixprec sample` prints it; else NULL */
    double sample_printable;     /* mp_text_judge on the sample against the corpus: the share of printable bytes */
    double sample_words;         /* and of words found in the corpus (NAN: no words) */
    char format[48];             /* the formats in words: "bf16", or with a recipe "bf16 + fp8 e4m3/e5m2" */
    /* With a recipe (recipe.h; nquant 0 without): the quantized tensors */
    int nquant;
    char (*quant_names)[64];     /* (nquant,) "h.0.attn.c_attn.input" ... */
    mp_quant_stats *quant_totals;/* (nquant,) counts summed over the run, amax the largest */
    float *quant_scale;          /* (nquant,) the scale of the last step */
    float *quant_saturated, *quant_flushed; /* (nsteps,) fractions of the step's quantized values, all tensors */
    double quant_saturated_total, quant_flushed_total; /* the same over the run */
} run_result;

#define RUN_SKIPS_KEPT 100

void run_result_free(run_result *r);

/* Writes a JSON document whole or not at all (mp_write_file_atomic); NULL on
 * success, else why not (nothing written, a previous file untouched). */
struct cJSON;
const char *run_write_json(const char *path, struct cJSON *j);

/* Runs the training o describes, printing progress and results to out.
 * Returns 0 when it completed, 1 when it stopped early or failed (after a
 * one-line message on stderr), CLI_USAGE for options that cannot work
 * together (after a message). r (may be NULL) receives the results. */
int run_training(const run_opts *o, FILE *out, run_result *r);

#endif
