/* run_state.h - a run's state, shared by the files of mp_run (not
 * installed): run.c (the phases), run_fail.c (failures and the ranks'
 * agreement), run_memory.c, run_log.c (the CSV log), run_print.c (the
 * console), run_summary.c (the summary JSON), run_outputs.c (the files
 * written at the end). */
#ifndef MIXPREC_RUN_STATE_H
#define MIXPREC_RUN_STATE_H

#include <math.h>
#include <stdio.h>
#include <sys/types.h>

#include <cjson/cJSON.h>

#include "models.h"

typedef struct {
    long step;
    float scale;
    uint64_t zeros, bins[MP_RUN_HIST_N];
} hist_snap;

/* Everything a run allocates, freed in one place. */
typedef struct {
    const mp_model_row *row; /* the model's row of the table (models.h) */
    void *mctx;              /* the context its row opened: the model's configuration and data */
    mp_optim *opt;
    mp_model model;
    mp_loader loader;
    mp_trainer *tr;
    int log_fd;             /* the CSV log, written as log_partial; -1: none */
    char log_partial[4200]; /* PATH.partial.PID: the rows as they come, renamed to PATH when the log is whole */
    const char *locked[4];  /* the outputs whose locks this run holds (mp_output_lock) */
    off_t log_size;         /* its complete rows, in bytes */
    long log_rows;
    char *line; /* the log's row being written */
    size_t line_len;
    double *ms;
    double *mpi_ms; /* with ranks: each step's time in MPI */
    cJSON *skips;   /* the skipped steps, for the summary: {step, scale, tensors, first_activation} */
    hist_snap *hs;
    mp_named_qtensor *qt; /* with a recipe: the quantized tensors (nq) */
    size_t nq;
    mp_run_result res;
    /* the spec resolved, and where the run prints */
    mp_run_spec o;     /* the caller's, its defaults resolved (weight decay, min_lr, batch; the mode's scale) */
    mp_precision prec; /* the mode with its switches */
    const mp_run_ranks *ranks;
    mp_run_io io;
    /* failures: the first one's status and message (what mp_run returns) */
    mp_status status;
    char msg[960];
    int deferring; /* with ranks, before training: messages are held until the ranks agree */
    char deferred[1024];
    /* the run under way */
    int writer, hist_on;         /* rank 0; gradient histograms taken */
    size_t T;                    /* positions per row (the GPT's context; 1 for the MLP) */
    long steps_per_epoch, total; /* steps: per epoch, and to the end of the run (counted from 0) */
    long step, done_steps;       /* the next step's number, and the steps this run took */
    long nan_step;               /* the first step whose loss was not finite, or -1 */
    long nh, nh_max;             /* gradient histograms taken, and room for them */
    const char *meta[16];        /* what checkpoints keep about the model */
    uint64_t lost_updates, params_updated, act_over, grad_over; /* over the run */
    const char *stopped;                                        /* why the run stopped early (in stop_msg), or NULL */
    char stop_msg[512];
    int out_failed;       /* an output (the log, the checkpoint, the summary) could not be written */
    signed char wrote[4]; /* --log, --summary, --save, --dump-grads: 1 written, -1 not (as it was), 0 not asked */
    char out_why[2048];   /* why the outputs written at the end were not, said in one line (say_outputs) */
    int finished;         /* the training ended (every step taken, or stopped early): outputs follow */
    double t_start, elapsed, mpi_median;
} run_state;

/* Internal codes of a run's steps (mp_run turns them into a status): */
enum { RUN_OK = 0, RUN_FAILED = 1, RUN_INVALID = 2 };

/* Prints to the run's output stream, when it has one (a FILE *out in scope). */
#define OUT(...) (out ? fprintf(out, __VA_ARGS__) : 0)

static inline int rank_of(const run_state *s) { return s->ranks->rank; }
static inline int size_of(const run_state *s) { return s->ranks->size; }
static inline double frac(uint64_t a, uint64_t b) { return b ? (double)a / (double)b : 0.0; }
/* log2(limit / amax): how many doublings an activation can still take before
 * it overflows; NAN when nothing was stored (no figure). */
static inline double headroom(double limit, float amax) { return amax > 0 ? log2(limit / (double)amax) : NAN; }

/* run_fail.c: failures. A failure's message into the status, kept if it is
 * the run's first, and printed as "PREFIX: [rank R: ]message" (with ranks,
 * before training, held back until the ranks agree: mp_run_agree_ready);
 * each returns RUN_FAILED (mp_run_invalid: RUN_INVALID). */
int mp_run_fail(run_state *s, mp_status st, const char *fmt, ...) MP_PRINTF(3, 4);
int mp_run_invalid(run_state *s, const char *msg);
int mp_run_failed(run_state *s, mp_status st);
int mp_run_failed_file(run_state *s, mp_status st, const char *path);
void mp_run_output_failed(run_state *s, mp_status st, const char *msg);
int mp_run_agree_ready(run_state *s, int code);
int mp_run_fail_alone(run_state *s);
int mp_run_check_ranks(run_state *s);
/* The ranks of a run in one process. */
mp_run_ranks mp_run_one_process(mp_allreduce_stats *stats);

/* run_memory.c */
void mp_run_peak_reset(void);
double mp_run_peak_mib(void);
double mp_run_state_bytes(const run_state *s);
int mp_run_fits(run_state *s);

/* run_log.c: the CSV log (docs/LOGS.md) */
int mp_run_log_open(run_state *s);
int mp_run_log_step(run_state *s, const mp_step_info *si, double ms, double eval_loss);
int mp_run_log_close(run_state *s, int whole);
void mp_run_quant_step(const mp_named_qtensor *qt, size_t nq, double *sat, double *flush);

/* run_print.c: the console */
int mp_run_report_nonfinite(run_state *s, const mp_step_info *si);
void mp_run_print_start(const run_state *s);
void mp_run_print_step(const run_state *s, const mp_step_info *si, int eval_now, double eval_loss, double eval_acc);
void mp_run_print_results(const run_state *s);
void mp_run_add_warnings(run_state *s);
uint64_t mp_run_wire_values(const mp_allreduce_stats *ds);
double mp_run_ring_bytes(const run_state *s, const mp_allreduce_stats *ds);

/* run_summary.c: the summary document (docs/LOGS.md), or NULL when out of memory */
cJSON *mp_run_summary(run_state *s);

/* run_outputs.c: the files written at the end */
void mp_run_write_outputs(run_state *s);
void mp_run_say_outputs(const run_state *s);

#endif
