/* mixprec/run.h - one training run from a spec, as a library call: what
 * `mixprec train` runs, what `mixprec compare` runs once per mode, what the
 * Python package's mixprec.train() runs.
 *
 *   mp_run_spec spec;
 *   mp_run_defaults(&spec);                       the CLI's defaults
 *   mp_run_option(&spec, "model", "gpt:2-2-64-64"); options by their CLI names
 *   mp_run_option(&spec, "precision", "bf16");     (or set the fields directly)
 *   mp_run_result r;
 *   mp_status st = mp_run(&spec, NULL, &r);       NULL: silent, one process
 *   ... r.eval_loss, r.warnings, r.summary (the JSON of docs/LOGS.md) ...
 *   mp_run_result_free(&r);
 *
 * mp_run builds the model from its string, reads the data, applies the
 * precision mode with its switches (mp_precision_parse: compute format,
 * master weights, reductions, rounding, recipe, loss scaling, the static
 * scale of "fp16-static:S"), trains through the trainer (train.h), keeps the
 * run's per-tensor totals, writes the CSV log, the checkpoint, the JSON
 * summary and the gradients where the spec names them (docs/LOGS.md), and
 * returns the results and the warnings.
 */
#ifndef MIXPREC_RUN_H
#define MIXPREC_RUN_H

#include <stdint.h>
#include <stdio.h>

#include "convert.h"
#include "format.h"
#include "model.h"
#include "nn.h"
#include "gpt.h"
#include "optim.h"
#include "recipe.h"
#include "report.h"
#include "scaler.h"
#include "status.h"
#include "train.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mp_run_optimizer { MP_RUN_ADAMW = 0, MP_RUN_SGD } mp_run_optimizer;

/* What the data-parallel ranks' gradient all-reduces did since the run
 * began, on this rank. The counts of sums are the job's (every rank sees the
 * same sums); the time and the conversion counts are this rank's. */
typedef struct mp_allreduce_stats {
    mp_dtype wire;           /* the gradients' format on the wire */
    double mpi_seconds;      /* in the reductions' calls (the combines included) */
    uint64_t allreduces;     /* gradient all-reduces: one per step */
    uint64_t values;         /* gradient values in one all-reduce */
    uint64_t wire_bytes;     /* the buffer one all-reduce sums */
    mp_convert_stats packed; /* this rank's gradients rounded into the wire format, summed over the all-reduces */
    long lost_sums;          /* all-reduces whose sum held an inf or NaN where every rank's fp32 gradients were
                                finite: the steps the narrow wire format cost (0 with fp32) */
} mp_allreduce_stats;

/* The data-parallel ranks, for a run that is one of several processes (the
 * mixprec command implements it over MPI: tools/dist.c). Every rank calls
 * mp_run with the same spec; each trains on its contiguous share batch /
 * size of every micro-batch; rank 0 alone writes files and the results. */
typedef struct mp_run_ranks {
    int rank, size;            /* this process, and how many (size >= 1) */
    const mp_train_dist *dist; /* the trainer's reductions; NULL with one rank */
    void *ctx;                 /* passed to each function */
    /* Collective: every rank's code (0: ready); returns the code of the lowest
     * rank whose code is nonzero (0 when none), that rank in *first. */
    int (*agree)(void *ctx, int code, int *first);
    /* Collective: 1 on every rank when flag is nonzero on any. */
    int (*any)(void *ctx, int flag);
    /* A failure of this rank alone during training: the others wait for it in
     * a reduction, so this ends the job (may return with one rank). */
    void (*abort)(void *ctx, int code);
    /* Sets the gradients' wire format for the run and zeroes the statistics. */
    void (*set_allreduce)(void *ctx, mp_dtype wire);
    /* The statistics since set_allreduce. */
    const mp_allreduce_stats *(*stats)(void *ctx);
    /* Called after each step (fault injection in the tests); may be NULL. */
    void (*after_step)(void *ctx, long step, mp_optim *opt);
} mp_run_ranks;

/* A model of the caller's own (model.h) for mp_run to train in place of the
 * MLP or the GPT, with its data. Its evaluation is reported as a
 * classifier's (test loss and accuracy), as the MLP's. */
typedef struct mp_run_model {
    void *ctx; /* passed to each function */
    /* Creates the model for a run: its parameters registered with opt as the
     * mode asks (mp_optim_add_as with p->compute and p->master_weights),
     * rows: the micro-batch's rows (the evaluation's may differ: at most
     * max(rows, 1000)). A recipe (p->recipe) may be refused with MP_EINVAL.
     * Per-layer assignments (p->layers, train.h) are the model's to resolve
     * against its own layer names with mp_precision_layer_recipes (as the
     * library's GPT and MLP do), or to refuse with MP_EINVAL. */
    mp_status (*create)(void *ctx, const mp_precision *p, mp_optim *opt, size_t rows, uint64_t seed, mp_model *out);
    /* Its data: a loader of micro-batches of `rows` rows (train.h), shuffled
     * from seed or in order, and how many micro-batches make an epoch. */
    mp_status (*loader)(void *ctx, size_t rows, int shuffle, uint64_t seed, mp_loader *out, long *batches_per_epoch);
} mp_run_model;

/* A run. Strings are the caller's and must outlive mp_run. */
typedef struct mp_run_spec {
    /* model and data */
    const char *model;          /* "mlp:784-1024-1024-10" (widths) or "gpt:L-H-C-T"; with custom, its name */
    const mp_run_model *custom; /* the caller's own model and data, or NULL */
    mp_act act;                 /* MLP activation */
    int layernorm;              /* MLP: layer norm after each hidden layer */
    mp_gelu_form gelu;          /* GPT: tanh (GPT-2) or erf (nanoGPT) */
    const char *data;           /* MLP: a Fashion-MNIST directory (NULL: Debian's); GPT: "text:PATH[,PATH...]"
                                   (NULL: MP_TEXT_DEFAULT_CORPUS) */
    /* precision */
    const char *precision; /* MODE[:S][+switch=...] (mp_precision_parse) */
    int master_weights;    /* switches applied to the mode: an mp_master_weights, an mp_state_format, */
    int optim_state;
    int reductions; /* an mp_reductions, an mp_mx_rule; -1: the mode's own setting */
    int mx_rule;
    const char *layer_precision; /* a file of per-layer assignments (mp_precision_load_layers), or NULL */
    mp_scaler_config scaler;     /* the loss scaler (scaled modes; fp16-static:S sets init_scale to S) */
    /* optimization */
    mp_run_optimizer optimizer;
    double lr, min_lr; /* min_lr < 0: lr / 10 */
    mp_lr_schedule schedule;
    long warmup;
    double beta1, beta2, momentum;
    double weight_decay;       /* < 0: 0.01 for AdamW, 0 for SGD */
    double clip;               /* 0: no clipping */
    long batch;                /* 0: 256 examples (MLP), 16 sequences (GPT) */
    long accum, epochs, steps; /* steps 0: epochs (0: 1) epochs */
    long seed;
    int shuffle;
    int threads; /* 0: as set (mp_set_threads) */
    long eval_every, eval_windows;
    /* files (NULL: none) */
    const char *init, *save, *resume, *log, *summary, *dump_grads;
    mp_dtype save_dtype;
    const char *outputs_shown_in; /* a caller that moves the outputs when the run is done (compare, into
                                     its DIR): the directory the messages name them in, by file name and
                                     without the option (NULL: the outputs as given) */
    /* diagnostics */
    long hist_every;   /* MLP: a gradient histogram every this many steps (0: none) */
    long sample_bytes; /* GPT: bytes sampled from the final model into the result (0: none) */
    const char *probe; /* a recipe's name (fp8-delayed, fp8-current, mxfp8, nvfp4): what it would do to each
                          Linear layer's GEMMs measured on every training batch, the training's bits unchanged
                          (mp_gpt_set_probe; bf16 compute with fp32 master weights); NULL: none */
    /* data parallelism */
    const mp_run_ranks *ranks; /* NULL: one process */
    mp_dtype allreduce;        /* the gradients' format on the wire: fp32, bf16 or fp16 */
    long check_every;          /* compare the ranks' state every this many steps (0: at the end only) */
    int shard_optimizer;       /* the optimizer state sharded over the ranks (train.h's mp_train_config) */
} mp_run_spec;

/* Where a run prints. Every stream may be NULL (nothing printed there). */
typedef struct mp_run_io {
    FILE *out;          /* the run's progress and results, as `mixprec train` prints them */
    FILE *err;          /* each failure, one line: "PREFIX: message" */
    const char *prefix; /* "mixprec train" (NULL: "mixprec") */
    FILE *bar;          /* a progress bar redrawn in place (a terminal) instead of out's step lines */
} mp_run_io;

#define MP_RUN_HIST_LO (-64)
#define MP_RUN_HIST_N MP_REPORT_HIST_BINS /* log2 bins 2^-64 .. 2^19 (the ends clamp) */
#define MP_RUN_SKIPS_KEPT 100
#define MP_RUN_WARNINGS 6

/* What a run leaves: the figures of its summary, per step and per tensor,
 * for tables and the report. Owned by the result (mp_run_result_free). */
typedef struct mp_run_result {
    mp_precision precision; /* the mode with its switches; precision.label names the run */
    int invalid;            /* mp_run failed because the spec cannot work (an option out of range, options
                               that exclude each other): nothing was run */
    char model_kind[8];     /* "mlp" or "gpt" */
    const char *compute_format;
    long nsteps;         /* steps taken in this run */
    float *loss, *scale; /* (nsteps,) */
    uint8_t *skipped;    /* (nsteps,) */
    int ntensors;
    char (*tensor_names)[64]; /* (ntensors,) */
    float *tensor_underflow;  /* (nsteps, ntensors): fraction of gradient stores that became 0 */
    double eval_loss, eval_accuracy, last_loss, underflow, ms_per_step, memory_mib, final_scale;
    mp_optim_bytes bytes;                  /* what the parameters hold, by part (bytes_per_param: their sum / params) */
    double lost_gradients, dead_gradients; /* fractions of the run's weight-gradient values (model.h) */
    double lost_updates;                   /* fraction of the run's parameter updates (mp_optim_lost_updates) */
    double tokens_per_s;                   /* gpt */
    long skipped_total;
    int has_hist;
    double hist[MP_RUN_HIST_N], hist_zeros, hist_scale;
    char warnings[MP_RUN_WARNINGS][256];
    int nwarnings;
    mp_tensor_stats *tensor_totals;        /* (ntensors,): each tensor's counts and largest magnitudes over the run */
    const mp_format_info *headroom_format; /* the format the headroom figures are against: the compute format,
                                              fp16 in an fp32 run */
    mp_report_skip *skips; /* the first MP_RUN_SKIPS_KEPT skipped steps, where pointing into skip_text */
    char (*skip_text)[512];
    long nskips;
    long neval;              /* evaluations: each eval_every step's, then the one at the end */
    long *eval_steps;        /* (neval,) the step each followed, counted from the start of this run */
    double *eval_losses;     /* (neval,) its mean loss (GPT: validation, MLP: test) */
    char *sample;            /* with sample_bytes: the text the final model wrote after "\n" (temperature 1,
                                seed 1), escaped as mp_sample_escape_byte does; else NULL */
    double sample_printable; /* mp_text_judge on the sample against the corpus: the share of printable bytes */
    double sample_words;     /* and of words found in the corpus (NAN: no words) */
    char format[48];         /* the formats in words: "bf16", or with a recipe "bf16 + fp8 e4m3/e5m2" */
    /* with a recipe (recipe.h; nquant 0 without): the quantized tensors */
    int nquant;
    char (*quant_names)[64];                /* (nquant,) "h.0.attn.c_attn.input" ... */
    mp_quant_stats *quant_totals;           /* (nquant,) counts summed over the run, amax the largest */
    float *quant_scale;                     /* (nquant,) the scale of the last step */
    float *quant_saturated, *quant_flushed; /* (nsteps,) fractions of the step's quantized values, all tensors */
    double quant_saturated_total, quant_flushed_total; /* the same over the run */
    /* with a recipe or layer assignments (0 without, and for a model that names no layers): each Linear
       layer and the recipe it ran in ("nvfp4", or the compute format's name) */
    int nassigned;
    char (*assigned_names)[64];   /* (nassigned,) "transformer.h.0.attn.c_attn" ... "lm_head", or "fc0" ... */
    char (*assigned_recipes)[16]; /* (nassigned,) */
    /* with spec->probe: each Linear layer the model probed (nprobe, in the model's order) and, per direction
       (0 forward, 1 input gradient, 2 weight gradient), mp_qgemm_probe's sums over the run */
    int nprobe;
    char probe_recipe[16];      /* the recipe's name */
    char (*probe_names)[64];    /* (nprobe,) "transformer.h.0.attn.c_attn" ... */
    mp_qprobe (*probe_sums)[3]; /* (nprobe,) */
    char *summary;              /* the summary document (docs/LOGS.md) as JSON text, written to spec->summary when
                                   named; NULL on rank > 0 or when the run failed before its end */
} mp_run_result;

/* The defaults of `mixprec train` into *s: mlp:784-1024-1024-10 on
 * Fashion-MNIST, fp32, AdamW lr 1e-3, one epoch, seed 1. */
void mp_run_defaults(mp_run_spec *s);

/* Sets the option the CLI calls --NAME (name without the dashes: "lr",
 * "precision", "no-shuffle") from its text, as the CLI parses it; value is
 * NULL for a flag ("layernorm", "no-shuffle"). Strings are kept by pointer.
 * MP_EINVAL + message for an unknown option, a flag given a value, an option
 * without one, or a value out of range (nothing changed). */
mp_status mp_run_option(mp_run_spec *s, const char *name, const char *value);

/* 1 when --NAME takes a value, 0 when it is a flag, -1 when it is unknown. */
int mp_run_option_takes_value(const char *name);

/* The name of option i (0, 1, ...) of the table mp_run_option reads, in the
 * help's order; NULL past the last. For generated signatures (the Python
 * package's train and compare). */
const char *mp_run_option_name(size_t i);

/* The default of --NAME as text mp_run_option takes ("0.001", "adamw",
 * "0.9,0.999"; "false" for a flag) into buf (cap bytes, NUL-terminated):
 * 1 when written, 0 when the option has no fixed default (a file, or a
 * value resolved from the model, mode or optimizer: --batch, --min-lr,
 * --master-weights, ...), -1 for an unknown name or a buffer too small. */
int mp_run_option_default(const char *name, char *buf, size_t cap);

/* The options' help, as `mixprec train --help` prints it (the modes from the
 * table, mp_precisions). A static string. */
const char *mp_run_options_help(void);

/* Checks that the spec can work before anything is read or trained: its
 * options together, the mode with its switches and the loss scaler, and its
 * files (mp_run_check_files); the mode, resolved, into *p (may be NULL).
 * MP_EINVAL + message when not. */
mp_status mp_run_check(const mp_run_spec *s, mp_precision *p);

/* Checks the spec's outputs (log, summary, save, dump_grads) against its
 * inputs (init, resume, the data) and against each other, before anything
 * is read: an existing file by device and inode (links, hard links and "./"
 * spellings are the same file), a new one by its directory's real path and
 * its name. MP_EINVAL + message naming both options for an output that is an
 * input, two outputs that are one file, an output inside a text corpus's
 * directory, or an empty path; MP_EIO + message for an output that exists
 * and is not a regular file (a directory, a device, a FIFO) or whose
 * directory does not exist or is not writable, and for an input that exists
 * and is not a regular file (a text corpus's path may also be a directory),
 * naming its option, its path and what it is; MP_ENOMEM. One output may be its input: save
 * may be the checkpoint resume reads (the checkpoint advanced in place,
 * replaced whole or not at all). */
mp_status mp_run_check_files(const mp_run_spec *s);

/* Runs the training s describes, printing to io (NULL: nothing). r (not
 * NULL) is filled whatever the outcome (mp_run_result_free it in every case):
 * after a failure it holds what was trained before it.
 *   MP_OK        every step ran and every output was written;
 *   MP_EINVAL    the spec cannot work (r->invalid set; nothing was run), or
 *                an argument is NULL, or the data do not fit the model (a
 *                corpus shorter than the context; r->invalid not set);
 *   MP_EOVERFLOW the run stopped early: the gradients overflowed with the
 *                loss scale at its floor; results and outputs as at the end;
 *                also a run with s->save that ended worse (stopped early,
 *                or the last step's loss unless it was skipped, the final
 *                evaluation, a weight or fp32 optimizer state not finite): the file at s->save is left as it was and
 * the state is written to SAVE.rejected where no file is (never over one), the message naming both; another      the
 * data, a file or memory failed, or an output could not be written (the others still are), or ranks disagreed, or
 *                (MP_EIO, before anything is read) an output is being
 *                written by another process (each output is locked for the
 *                whole run: mp_output_lock): the message in mp_last_error()
 *                (and on io->err).
 * A model whose parameters, gradients, optimizer state and activations would
 * not fit in the memory available (/proc/meminfo's MemAvailable, or a cgroup's
 * limit) is refused before anything is allocated for it: MP_ENOMEM + message
 * with both figures. Each output is written whole or not at all (mp_write_file_atomic); the CSV
 * log is appended a complete row at a time to LOG.partial.PID, this run's
 * own file (created exclusively), renamed over LOG at the end. r->memory_mib is the process's
 * peak resident memory during the run: mp_run resets the kernel's high-water
 * mark (/proc/self/clear_refs) when it starts. spec->threads, when set,
 * stays set (mp_set_threads) after the run. */
mp_status mp_run(const mp_run_spec *s, const mp_run_io *io, mp_run_result *r);

/* Frees what r holds and zeroes it; NULL is a no-op. */
void mp_run_result_free(mp_run_result *r);

/* For callers that cannot embed these structs (Python's ctypes): their sizes
 * (allocate, then mp_run_defaults), and the result's summary and steps. */
size_t mp_run_spec_size(void);
size_t mp_run_result_size(void);
const char *mp_run_result_summary(const mp_run_result *r); /* r->summary (NULL: none) */
/* r->nsteps, with r->loss, r->scale and r->skipped in the pointers given (each may be NULL). */
long mp_run_result_steps(const mp_run_result *r, const float **loss, const float **scale, const uint8_t **skipped);

#ifdef __cplusplus
}
#endif
#endif
