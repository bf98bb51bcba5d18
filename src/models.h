/* models.h - the table of models a run trains (run.h; not installed): the
 * library's MLP and GPT, each named by its string ("mlp:...", "gpt:..."),
 * and the caller's own (mp_run_spec.custom). A row makes the model and its
 * data from the spec and the resolved mode; the model then goes through
 * mp_model_ops (model.h) exactly as a caller's model does, and the run
 * (run.c, run_spec.c, compare.c) reads the row, never a model's name. */
#ifndef MIXPREC_MODELS_H
#define MIXPREC_MODELS_H

#include "internal.h"

/* How a run reports a model: its console lines and its summary's fields. */
typedef enum mp_model_report {
    /* test loss and accuracy (the summary's test_*), every tensor's gradient
     * stores on one line, the summary's histograms (empty without) */
    MP_REPORT_CLASSIFIER = 0,
    /* a language model: validation loss in nats and bits per byte (val_*),
     * rows are sequences of T tokens (tokens/s), the tensor that lost most */
    MP_REPORT_LANGUAGE
} mp_model_report;

/* The options of the spec that belong to some models only (the others refuse them). */
enum { MP_OPT_ACT = 1, MP_OPT_LAYERNORM = 2, MP_OPT_HIST = 4, MP_OPT_GELU = 8, MP_OPT_EVAL_WINDOWS = 16 };

typedef struct mp_model_row {
    const char *prefix; /* "mlp:", "gpt:"; NULL: the caller's model */
    const char *kind;   /* its mp_model_ops.kind ("mlp"); NULL: the caller's */
    const char *what;   /* "the MLP", as messages name it */
    mp_model_report report;
    long batch;           /* --batch's default: examples, or sequences */
    unsigned options;     /* the MP_OPT_* it uses */
    int text;             /* it trains on text (--data text:PATH...), else on a directory */
    const char *data_use; /* the message for --data of the other kind */
    /* The model string parsed (MP_EINVAL + message) into a new context for
     * the functions below, which keeps s (by pointer: the run's spec with its
     * defaults resolved); *T: positions per row (1, or the GPT's context). */
    mp_status (*open)(const mp_run_spec *s, void **ctx, size_t *T);
    void (*close)(void *ctx);
    /* About what the model takes for micro-batches of `rows` rows, each stored
     * value es bytes: its parameters (a count) and activations (bytes). NULL:
     * not known (nothing is refused before it is allocated). */
    void (*size)(const void *ctx, size_t rows, double es, double *params, double *act_bytes);
    /* Its data read and checked against the model and the spec, *bad_spec set
     * when the spec cannot work with them (MP_EINVAL + message). NULL: the
     * library reads no data for it (the caller's loader does). */
    mp_status (*data)(void *ctx, int *bad_spec);
    /* As mp_run_model's (run.h): the model with its parameters registered in
     * opt as mode p asks, its recipe set; on failure *out may hold the model
     * made so far (the caller frees it). Then the loader of its data. */
    mp_status (*create)(void *ctx, const mp_precision *p, mp_optim *opt, size_t rows, uint64_t seed, mp_model *out);
    mp_status (*loader)(void *ctx, size_t rows, int shuffle, uint64_t seed, mp_loader *out, long *batches_per_epoch);
    /* Mode p's assignments resolved against the model's layers
     * (mp_precision_layer_recipes): MP_EINVAL + message for a pattern that
     * matches none; create resolves them again. NULL: the caller's model,
     * whose create resolves them (or refuses them) itself. */
    mp_status (*assign)(void *ctx, const mp_precision *p);
    /* The model's layers by name, each with the recipe create gave it
     * (MP_RECIPE_NONE: the compute format), at most cap into names and
     * kinds; returns how many (0 before create). NULL: the model names none. */
    size_t (*layers)(const void *ctx, const char **names, mp_recipe_kind *kinds, size_t cap);
    /* Measures what recipe r would do to each Linear layer's GEMMs from the
     * next training batch on, training unchanged (mp_gpt_set_probe; streams
     * from seed): MP_EINVAL + message where the mode cannot take it. Then
     * the probed layers' names and their sums per direction (forward, input
     * gradient, weight gradient), at most cap; returns how many. NULL: the
     * model has no probe. */
    mp_status (*probe)(void *ctx, const mp_recipe *r, uint64_t seed);
    size_t (*probed)(const void *ctx, const char **names, mp_qprobe (*sums)[3], size_t cap);
    /* The pairs a checkpoint keeps about the model besides its string, into
     * kv (key, value, ...); returns how many strings. */
    int (*meta)(const mp_run_spec *s, const char **kv);
    /* What follows the model's string in the run's first line (" relu"). */
    const char *(*describe)(const mp_run_spec *s);
    /* Lines after the run's first (out not NULL), or NULL: none. */
    void (*print_start)(const void *ctx, FILE *out);
    /* The files of its data when --data names no text (the MLP's four), into
     * in and paths (at most cap); returns how many. NULL: none. */
    size_t (*inputs)(const mp_run_spec *s, mp_file_id *in, char (*paths)[4096], size_t cap);
    /* Optional outputs (NULL: the model has none). While bins is set, each
     * weight gradient the model computes into a log2 histogram (nn.h's
     * mp_mlp_histogram); bins NULL stops it. */
    void (*histogram)(void *ctx, uint64_t *bins, int lo, int nbins, uint64_t *zeros);
    /* n bytes from the final model (after "\n", temperature 1, seed 1) into a
     * new *text, escaped as mp_sample_escape_byte does, and their judgement
     * against the corpus (mp_text_judge: the shares of printable bytes and of
     * words found, NAN without words). MP_ENOMEM, or the sampler's status. */
    mp_status (*sample)(void *ctx, long n, char **text, double *printable, double *words);
} mp_model_row;

/* The library's rows (run_mlp.c, run_gpt.c). */
extern const mp_model_row mp_mlp_row, mp_gpt_row;

/* The row of s's model: the caller's (s->custom), the row whose prefix
 * s->model starts with, or else the first row (the MLP, the default model:
 * its parser says what a model string is). */
const mp_model_row *mp_model_row_of(const mp_run_spec *s);

/* The row whose models are of kind (mp_model_ops.kind, mp_run_result's
 * model_kind), or the caller's row. */
const mp_model_row *mp_model_row_kind(const char *kind);

#endif
