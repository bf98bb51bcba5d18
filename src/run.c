/* run.c - one training run from a spec (mixprec/run.h): the model, the data
 * and the mode from the spec, the trainer, the run's totals, the CSV log, the
 * checkpoint, the summary and the results. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "models.h"

void mp_run_result_free(mp_run_result *r) {
    if (!r) return;
    free(r->loss), free(r->scale), free(r->skipped), free(r->tensor_names), free(r->tensor_underflow);
    free(r->tensor_totals), free(r->skips), free(r->skip_text);
    free(r->eval_steps), free(r->eval_losses), free(r->sample), free(r->summary);
    free(r->quant_names), free(r->quant_totals), free(r->quant_scale), free(r->quant_saturated), free(r->quant_flushed);
    memset(r, 0, sizeof *r);
}

/* Prints to the run's output stream, when it has one. */
#define OUT(...) (out ? fprintf(out, __VA_ARGS__) : 0)

size_t mp_run_spec_size(void) { return sizeof(mp_run_spec); }
size_t mp_run_result_size(void) { return sizeof(mp_run_result); }
const char *mp_run_result_summary(const mp_run_result *r) { return r ? r->summary : NULL; }

long mp_run_result_steps(const mp_run_result *r, const float **loss, const float **scale, const uint8_t **skipped) {
    if (loss) *loss = r ? r->loss : NULL;
    if (scale) *scale = r ? r->scale : NULL;
    if (skipped) *skipped = r ? r->skipped : NULL;
    return r ? r->nsteps : 0;
}

double mp_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Peak resident memory of this run: the kernel's high-water mark, reset at
 * the start of each run (so compare measures each mode on its own). */
static void peak_reset(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f) fputs("5", f), fclose(f);
}

static double peak_mib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &kb) == 1) break;
    if (f) fclose(f);
    if (kb < 0) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        kb = ru.ru_maxrss;
    }
    return (double)kb / 1024.0;
}

typedef struct {
    long step;
    float scale;
    uint64_t zeros, bins[MP_RUN_HIST_N];
} hist_snap;

/* ---- the run ---- */

/* Everything a run allocates, freed in one place. */
typedef struct {
    const mp_model_row *row; /* the model's row of the table (models.h) */
    void *mctx;              /* the context its row opened: the model's configuration and data */
    mp_optim *opt;
    mp_model model;
    mp_loader loader;
    mp_trainer *tr;
    int log_fd;          /* the CSV log, written as log_partial; -1: none */
    char log_partial[4200]; /* PATH.partial.PID: the rows as they come, renamed to PATH when the log is whole */
    const char *locked[4];  /* the outputs whose locks this run holds (mp_output_lock) */
    off_t log_size;      /* its complete rows, in bytes */
    long log_rows;
    char *line;          /* the log's row being written */
    size_t line_len;
    double *ms;
    double *mpi_ms;      /* with ranks: each step's time in MPI */
    cJSON *skips; /* the skipped steps, for the summary: {step, scale, tensors, first_activation} */
    hist_snap *hs;
    mp_named_qtensor *qt; /* with a recipe: the quantized tensors (nq) */
    size_t nq;
    mp_run_result res;
    /* the spec resolved, and where the run prints */
    mp_run_spec o;       /* the caller's, its defaults resolved (weight decay, min_lr, batch; the mode's scale) */
    mp_precision prec;   /* the mode with its switches */
    const mp_run_ranks *ranks;
    mp_run_io io;
    /* failures: the first one's status and message (what mp_run returns) */
    mp_status status;
    char msg[960];
    int deferring;       /* with ranks, before training: messages are held until the ranks agree */
    char deferred[1024];
    /* the run under way */
    int writer, hist_on;        /* rank 0; gradient histograms taken */
    size_t T;                   /* positions per row (the GPT's context; 1 for the MLP) */
    long steps_per_epoch, total; /* steps: per epoch, and to the end of the run (counted from 0) */
    long step, done_steps;      /* the next step's number, and the steps this run took */
    long nan_step;              /* the first step whose loss was not finite, or -1 */
    long nh, nh_max;            /* gradient histograms taken, and room for them */
    const char *meta[16];       /* what checkpoints keep about the model */
    uint64_t lost_updates, params_updated, act_over, grad_over; /* over the run */
    const char *stopped;        /* why the run stopped early (in stop_msg), or NULL */
    char stop_msg[512];
    int out_failed;             /* an output (the log, the checkpoint, the summary) could not be written */
    signed char wrote[4];       /* --log, --summary, --save, --dump-grads: 1 written, -1 not (as it was), 0 not asked */
    char out_why[2048];         /* why the outputs written at the end were not, said in one line (say_outputs) */
    int finished;               /* the training ended (every step taken, or stopped early): outputs follow */
    double t_start, elapsed, mpi_median;
} run_state;

static void state_free(run_state *s) {
    mp_trainer_free(s->tr);
    mp_loader_free(&s->loader);
    mp_model_free(&s->model);
    mp_optim_free(s->opt);
    if (s->mctx) s->row->close(s->mctx);
    free(s->ms), free(s->mpi_ms), free(s->hs), free(s->qt);
    cJSON_Delete(s->skips);
}

/* A step that was skipped, or whose loss or gradient norm is not finite: one
 * console line naming where the inf/NaN was, e.g. "step 412 skipped, scale
 * 65536 -> 32768: inf in transformer.h.3.mlp.c_fc.weight (grad) and 2 more;
 * first overflowing activation h.3.mlp.c_fc", and, if it was skipped, an
 * entry of the summary's "skipped" array. Returns nonzero when out of memory. */
static int report_nonfinite(FILE *out, FILE *bar, cJSON *skips, const mp_step_info *si, const mp_trainer *tr,
                            mp_run_result *res) {
    char where[512];
    size_t k = 0;
#define ADD(...) k += (size_t)snprintf(where + k, k < sizeof where ? sizeof where - k : 0, __VA_ARGS__)
    if (si->nbad) {
        ADD("%s in %s (grad)", si->bad_grad_inf ? "inf" : "NaN", si->bad_grads[0]);
        if (si->nbad > 1) ADD(" and %zu more", si->nbad - 1);
    } else {
        ADD("no gradient held inf or NaN");
    }
    if (si->first_activation) ADD("; first overflowing activation %s", si->first_activation);
#undef ADD
    if (bar) fputc('\n', bar);
    const mp_scaler *sc = mp_trainer_scaler(tr);
    if (si->skipped)
        OUT("  step %ld skipped, scale %g -> %g: %s\n", si->step, (double)si->scale,
                sc ? (double)mp_scaler_get_scale(sc) : 1.0, where);
    else
        OUT("  step %ld: loss %g, gradient norm %g: %s\n", si->step, (double)si->loss, si->grad_norm, where);
    if (!si->skipped) return 0;
    if (res->nskips < MP_RUN_SKIPS_KEPT && res->skips && res->skip_text) { /* for the report */
        snprintf(res->skip_text[res->nskips], sizeof res->skip_text[0], "%s", where);
        res->skips[res->nskips] = (mp_report_skip){si->step, (double)si->scale, res->skip_text[res->nskips]};
        res->nskips++;
    }
    cJSON *e = cJSON_CreateObject(), *names = cJSON_CreateArray();
    if (!e || !names || !cJSON_AddItemToArray(skips, e)) return cJSON_Delete(e), cJSON_Delete(names), 1;
    cJSON_AddNumberToObject(e, "step", (double)si->step);
    cJSON_AddNumberToObject(e, "scale", (double)si->scale);
    cJSON_AddItemToObject(e, "tensors", names);
    for (size_t i = 0; i < si->nbad && i < MP_STEP_NAMES; i++) cJSON_AddItemToArray(names, cJSON_CreateString(si->bad_grads[i]));
    if (si->nbad > MP_STEP_NAMES) cJSON_AddNumberToObject(e, "tensors_total", (double)si->nbad);
    if (si->first_activation) cJSON_AddStringToObject(e, "first_activation", si->first_activation);
    else cJSON_AddNullToObject(e, "first_activation");
    return 0;
}

/* Internal codes of a run's steps (mp_run turns them into a status): */
enum { RUN_OK = 0, RUN_FAILED = 1, RUN_INVALID = 2 };

/* One process: the ranks of a run that is not data-parallel. */
static int one_agree(void *ctx, int code, int *first) { (void)ctx; return *first = code ? 0 : -1, code; }
static int one_any(void *ctx, int flag) { (void)ctx; return flag != 0; }
static void one_abort(void *ctx, int code) { (void)ctx, (void)code; }
static void one_set_allreduce(void *ctx, mp_dtype wire) { *(mp_allreduce_stats *)ctx = (mp_allreduce_stats){.wire = wire}; }
static const mp_allreduce_stats *one_stats(void *ctx) { return ctx; }

static int rank_of(const run_state *s) { return s->ranks->rank; }
static int size_of(const run_state *s) { return s->ranks->size; }

/* A failure: its message into the status, kept if it is the run's first, and
 * printed as "PREFIX: [rank R: ]message" (with ranks, before training, held
 * back until the ranks agree: agree_ready). Returns RUN_FAILED. */
static int fail(run_state *s, mp_status st, const char *fmt, ...) MP_PRINTF(3, 4);
static int fail(run_state *s, mp_status st, const char *fmt, ...) {
    char msg[960];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!s->status || s->status == MP_EOVERFLOW) /* a failure outranks an early stop */
        s->status = st ? st : MP_EIO, snprintf(s->msg, sizeof s->msg, "%s", msg);
    char rank[32] = "";
    if (size_of(s) > 1 && rank_of(s) > 0) snprintf(rank, sizeof rank, "rank %d: ", rank_of(s));
    if (s->deferring) {
        if (!s->deferred[0]) snprintf(s->deferred, sizeof s->deferred, "%s: %s%s\n", s->io.prefix, rank, msg);
    } else if (s->io.err) {
        fprintf(s->io.err, "%s: %s%s\n", s->io.prefix, rank, msg);
    }
    return RUN_FAILED;
}

/* The spec cannot work: printed on rank 0 only (the others have the same
 * spec), with a pointer to the help. Returns RUN_INVALID. */
static int invalid(run_state *s, const char *msg) {
    if (!s->status) s->status = MP_EINVAL, snprintf(s->msg, sizeof s->msg, "%s", msg);
    if (rank_of(s) == 0 && s->io.err) fprintf(s->io.err, "%s: %s (see '%s --help')\n", s->io.prefix, msg, s->io.prefix);
    return RUN_INVALID;
}

/* Every rank's code before training: the lowest rank that failed prints its
 * message and every rank returns its code. */
static int agree_ready(run_state *s, int code) {
    if (size_of(s) == 1) return s->deferring = 0, code;
    int first;
    const int agreed = s->ranks->agree(s->ranks->ctx, code, &first);
    if (agreed && first == rank_of(s) && s->io.err) {
        if (s->deferred[0]) fputs(s->deferred, s->io.err);
        else if (first != 0) /* a spec that cannot work, which only rank 0 prints */
            fprintf(s->io.err, "%s: rank %d: its options could not be used (exit status %d)\n", s->io.prefix, first,
                    code);
    }
    if (agreed && !s->status) s->status = agreed == RUN_INVALID ? MP_EINVAL : MP_EIO,
                                 snprintf(s->msg, sizeof s->msg, "rank %d failed before training", first);
    s->deferring = 0, s->deferred[0] = '\0';
    return agreed;
}

/* A failure of this rank alone during training: the others wait for it in a
 * reduction, so the job ends (one process: returns RUN_FAILED). */
static int fail_alone(run_state *s) {
    s->ranks->abort(s->ranks->ctx, 1);
    return RUN_FAILED;
}

/* ---- memory before it is taken ---- */

/* The bytes the machine can still give this process: /proc/meminfo's
 * MemAvailable, or less where a cgroup (v2) limit or the address-space limit
 * (RLIMIT_AS, ulimit -v, less what is mapped already) leaves less; 0 when
 * none can be read (no check then). */
static uint64_t memory_available(void) {
    uint64_t avail = 0;
    char line[256];
    FILE *f = fopen("/proc/meminfo", "r");
    while (f && fgets(line, sizeof line, f)) {
        unsigned long long kb;
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) avail = (uint64_t)kb * 1024;
    }
    if (f) fclose(f);
    unsigned long long max = 0, cur = 0;
    f = fopen("/sys/fs/cgroup/memory.max", "r");
    const int limited = f && fscanf(f, "%llu", &max) == 1; /* "max": no limit */
    if (f) fclose(f);
    f = fopen("/sys/fs/cgroup/memory.current", "r");
    if (f && fscanf(f, "%llu", &cur) != 1) cur = 0;
    if (f) fclose(f);
    if (limited && max > cur && (avail == 0 || max - cur < avail)) avail = max - cur;
    struct rlimit rl; /* ulimit -v: the address space this process may still map */
    unsigned long long pages = 0;
    f = fopen("/proc/self/statm", "r");
    if (f && fscanf(f, "%llu", &pages) != 1) pages = 0;
    if (f) fclose(f);
    const uint64_t mapped = (uint64_t)pages * (uint64_t)sysconf(_SC_PAGESIZE);
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        const uint64_t left = rl.rlim_cur > mapped ? (uint64_t)rl.rlim_cur - mapped : 1;
        if (avail == 0 || left < avail) avail = left;
    }
    return avail;
}

/* The optimizer state's bytes per parameter, as it will be kept. */
static double state_bytes(const run_state *s) {
    const mp_state_format sf = mp_precision_state_format(&s->prec);
    const double nstates = s->o.optimizer == MP_RUN_ADAMW ? 2 : s->o.momentum != 0 ? 1 : 0;
    const double sb = sf == MP_STATE_FP32 ? 4 : sf == MP_STATE_BF16 || sf == MP_STATE_FP16 ? 2
                      : sf == MP_STATE_4BIT ? 0.5 + 4.0 / 128 : 1 + 4.0 / 256;
    return nstates * sb;
}

/* About what a model takes: its parameters with their gradients, optimizer
 * state and half copies, and its largest activations (forward and backward),
 * from its configuration alone (its row's size). An estimate, on the large
 * side of the allocations made (nn.c, gpt.c, optim.c). */
static uint64_t model_bytes(const run_state *s) {
    const double es = (double)mp_format(s->prec.compute)->size;
    double params = 0, act = 0;
    s->row->size(s->mctx, (size_t)s->o.batch, es, &params, &act);
    /* per parameter: the weights as kept, the fp32 gradient, the optimizer state as kept */
    const mp_master_weights mw = s->prec.master_weights;
    const double w = mw == MP_MASTER_FP32 ? 4 + (es < 4 ? es : 0) : mw == MP_MASTER_KAHAN ? 4 : 2;
    const double per = w + 4 + state_bytes(s);
    return (uint64_t)(params * per + act);
}

/* Refuses a model that would not fit before anything is allocated for it. */
static int fits(run_state *s) {
    if (!s->row->size) return RUN_OK;
    const uint64_t need = model_bytes(s), avail = memory_available();
    if (!avail || need <= avail) return RUN_OK;
    return fail(s, MP_ENOMEM, "model %s with batch %ld needs about %.1f GiB (parameters, gradients, optimizer state "
                              "and activations), and %.1f GiB are available", s->o.model, s->o.batch,
                (double)need / 1073741824.0, (double)avail / 1073741824.0);
}

/* A library call failed with st: its message (mp_last_error) as the run's. */
static int failed(run_state *s, mp_status st) { return fail(s, st, "%s", mp_last_error()); }

/* An output written at the end that could not be: the run's status as fail()
 * keeps it, the message kept for say_outputs' one line. */
static void output_failed(run_state *s, mp_status st, const char *msg) {
    if (!s->status || s->status == MP_EOVERFLOW) s->status = st ? st : MP_EIO, snprintf(s->msg, sizeof s->msg, "%s", msg);
    const size_t n = strlen(s->out_why);
    snprintf(s->out_why + n, sizeof s->out_why - n, "%s%s", n ? "; " : "", msg);
    s->out_failed = 1;
}

/* The same for a call that read file path: the message names it. */
static int failed_file(run_state *s, mp_status st, const char *path) {
    const int named = strstr(mp_last_error(), path) != NULL;
    return fail(s, st, "%s%s%s", named ? "" : path, named ? "" : ": ", mp_last_error());
}

/* The optimizer of the spec (MP_EINVAL: its settings cannot work). */
static mp_status make_optim(const mp_run_spec *o, mp_optim **out) {
    if (o->optimizer == MP_RUN_ADAMW) {
        mp_adamw_config ac = mp_adamw_defaults();
        ac.lr = o->lr, ac.weight_decay = o->weight_decay, ac.beta1 = o->beta1, ac.beta2 = o->beta2;
        return mp_optim_adamw(out, &ac);
    }
    mp_sgd_config sc = mp_sgd_defaults();
    sc.lr = o->lr, sc.momentum = o->momentum, sc.weight_decay = o->weight_decay;
    return mp_optim_sgd(out, &sc);
}

/* The model's row opens it (its string parsed), the memory it needs is
 * checked, its data read; the optimizer, the model in the mode and its
 * loader made, as for a model of the caller's. */
static int setup(run_state *s) {
    const mp_run_spec *o = &s->o;
    const mp_model_row *row = s->row;
    const size_t B = (size_t)o->batch;
    int bad_spec = 0;
    long per = 0;
    mp_status st = row->open(o, &s->mctx, &s->T);
    if (st != MP_OK) return invalid(s, mp_last_error());
    if (fits(s) != RUN_OK) return RUN_FAILED;
    if (row->data && (st = row->data(s->mctx, &bad_spec)) != MP_OK)
        return bad_spec ? invalid(s, mp_last_error()) : failed(s, st);
    if (make_optim(o, &s->opt) != MP_OK) return invalid(s, mp_last_error());
    if ((st = row->create(s->mctx, &s->prec, s->opt, B, (uint64_t)o->seed, &s->model)) != MP_OK ||
        (st = row->loader(s->mctx, B, o->shuffle, (uint64_t)o->seed, &s->loader, &per)) != MP_OK)
        return failed(s, st);
    if (!s->model.ops || !s->loader.train_batch) return fail(s, MP_ESTATE, "model %s: no model or loader made", o->model);
    s->steps_per_epoch = per / o->accum > 0 ? per / o->accum : 1;
    return RUN_OK;
}

/* The metadata a checkpoint keeps about the model, checked on resume. */
static void model_meta(const mp_model_row *row, const mp_run_spec *o, const char **kv) {
    int k = 0;
    kv[k++] = "model", kv[k++] = o->model;
    k += row->meta(o, kv + k);
    kv[k++] = "optimizer", kv[k++] = o->optimizer == MP_RUN_ADAMW ? "adamw" : "sgd";
    kv[k] = NULL;
}

static double frac(uint64_t a, uint64_t b) { return b ? (double)a / (double)b : 0.0; }

/* The per-tensor count columns of the CSV, in order: NAME_TENSOR, then the value. */
enum { TCOLS = 7 };
static const char *const tcol_names[TCOLS] = {"underflow",     "subnormal", "act_overflow", "act_underflow",
                                              "act_subnormal", "overflow",  "nan"};
static void tcol_value(FILE *log, const mp_tensor_stats *t, int c) {
    switch (c) {
    case 0: fprintf(log, ",%.6g", frac(t->bwd.underflow, t->bwd_elements)); break;
    case 1: fprintf(log, ",%.6g", frac(t->bwd.subnormal, t->bwd_elements)); break;
    case 2: fprintf(log, ",%llu", (unsigned long long)t->fwd.overflow); break;
    case 3: fprintf(log, ",%.6g", frac(t->fwd.underflow, t->fwd_elements)); break;
    case 4: fprintf(log, ",%.6g", frac(t->fwd.subnormal, t->fwd_elements)); break;
    case 5: fprintf(log, ",%llu", (unsigned long long)t->bwd.overflow); break;
    default: fprintf(log, ",%llu", (unsigned long long)(t->fwd.nan + t->bwd.nan)); break;
    }
}

/* The saturated and flushed shares of all qt's values quantized in the step. */
static void quant_step(const mp_named_qtensor *qt, size_t nq, double *sat, double *flush) {
    uint64_t n = 0, ns = 0, nf = 0;
    for (size_t i = 0; i < nq; i++) n += qt[i].q->stats.n, ns += qt[i].q->stats.saturated, nf += qt[i].q->stats.flushed;
    *sat = frac(ns, n), *flush = frac(nf, n);
}

/* The quantized tensors' columns (a run with a recipe): the step's shares, then per tensor amax, scale, shares. */
static const char *const qcol_names[4] = {"qamax", "qscale", "qsat", "qflush"};

static void csv_quant_header(FILE *log, const mp_named_qtensor *qt, size_t nq) {
    if (nq) fprintf(log, ",quant_saturated,quant_flushed");
    for (int c = 0; c < 4; c++)
        for (size_t i = 0; i < nq; i++) fprintf(log, ",%s_%s", qcol_names[c], qt[i].name);
}

static void csv_quant_row(FILE *log, const mp_named_qtensor *qt, size_t nq) {
    if (!nq) return;
    double sat, flush;
    quant_step(qt, nq, &sat, &flush);
    fprintf(log, ",%.6g,%.6g", sat, flush);
    for (size_t i = 0; i < nq; i++) fprintf(log, ",%.9g", (double)qt[i].q->stats.amax);
    for (size_t i = 0; i < nq; i++) fprintf(log, ",%.9g", (double)qt[i].q->scale);
    for (size_t i = 0; i < nq; i++) fprintf(log, ",%.6g", frac(qt[i].q->stats.saturated, qt[i].q->stats.n));
    for (size_t i = 0; i < nq; i++) fprintf(log, ",%.6g", frac(qt[i].q->stats.flushed, qt[i].q->stats.n));
}

static void csv_header(FILE *log, const mp_model *m, const mp_named_qtensor *qt, size_t nq) {
    fprintf(log, "step,loss,scale,skipped,grad_norm,lr,underflow,overflow,act_overflow,lost_gradients,dead_gradients,"
                 "lost_updates,ms,eval_loss");
    const size_t n = m->ops->nstats(m->impl);
    for (int c = 0; c < TCOLS; c++)
        for (size_t i = 0; i < n; i++) fprintf(log, ",%s_%s", tcol_names[c], m->ops->stats(m->impl, i)->name);
    for (size_t i = 0; i < n; i++) fprintf(log, ",headroom_%s", m->ops->stats(m->impl, i)->name);
    for (size_t i = 0; i < n; i++) fprintf(log, ",grad_headroom_%s", m->ops->stats(m->impl, i)->name);
    for (int dead = 0; dead < 2; dead++)
        for (size_t i = 0; i < n; i++)
            if (m->ops->stats(m->impl, i)->has_wgrad)
                fprintf(log, ",%s_%s", dead ? "dead" : "lost", m->ops->stats(m->impl, i)->name);
    csv_quant_header(log, qt, nq);
    fprintf(log, "\n");
}

/* log2(limit / amax): how many doublings an activation can still take before
 * it overflows; NAN when nothing was stored (no figure). */
static double headroom(double limit, float amax) { return amax > 0 ? log2(limit / (double)amax) : NAN; }

static void csv_row(FILE *log, const mp_model *m, const mp_step_info *r, double ms, double eval_loss, double limit,
                    const mp_named_qtensor *qt, size_t nq) {
    fprintf(log, "%ld,%.9g,%.9g,%d,%.6g,%.6g,%.6g,%llu,%llu,%.6g,%.6g,%.6g,%.3f,", r->step, (double)r->loss,
            (double)r->scale, r->skipped, r->grad_norm, r->lr, frac(r->bwd.underflow, r->bwd_elements),
            (unsigned long long)r->bwd.overflow, (unsigned long long)r->fwd.overflow,
            frac(r->lost_gradients, r->wgrad_elements), frac(r->dead_gradients, r->wgrad_elements),
            frac(r->lost_updates, r->params_updated), ms);
    if (!isnan(eval_loss)) fprintf(log, "%.6g", eval_loss);
    const size_t n = m->ops->nstats(m->impl);
    for (int c = 0; c < TCOLS; c++)
        for (size_t i = 0; i < n; i++) tcol_value(log, m->ops->stats(m->impl, i), c);
    for (int bwd = 0; bwd < 2; bwd++)
        for (size_t i = 0; i < n; i++) {
            const mp_tensor_stats *t = m->ops->stats(m->impl, i);
            const double hr = headroom(limit, bwd ? t->bwd.amax : t->fwd.amax);
            if (isnan(hr)) fprintf(log, ",");
            else fprintf(log, ",%.4g", hr);
        }
    for (int dead = 0; dead < 2; dead++)
        for (size_t i = 0; i < n; i++) {
            const mp_tensor_stats *t = m->ops->stats(m->impl, i);
            if (t->has_wgrad) fprintf(log, ",%.6g", frac(dead ? t->wgrad_dead : t->wgrad_lost, t->wgrad_elements));
        }
    csv_quant_row(log, qt, nq);
    fprintf(log, "\n");
}

/* The CSV log streams into PATH.partial (tail -f can follow it), a row at a
 * time, each formatted in memory (into log_row()'s stream) and written with
 * write(2) by log_commit(): a crash keeps every row written before it there
 * (and PATH as it was), and a row the disk cannot take whole is cut off
 * again, so the file holds complete rows only. At the end log_finish renames
 * it over PATH. 0, or 1 after a message. */
static FILE *log_row(run_state *s) { return open_memstream(&s->line, &s->line_len); }

static int log_commit(run_state *s, const char *path, FILE *m) {
    int err = !m || ferror(m) ? ENOMEM : 0;
    if (m && fclose(m) != 0) err = ENOMEM;
    const char *p = s->line;
    for (size_t left = err ? 0 : s->line_len; left;) {
        const ssize_t w = write(s->log_fd, p, left);
        if (w > 0) p += w, left -= (size_t)w;
        else if (w == 0 || errno != EINTR) {
            err = w == 0 ? EIO : errno;
            break;
        }
    }
    free(s->line), s->line = NULL;
    if (!err) {
        s->log_size += (off_t)s->line_len, s->log_rows++;
        return 0;
    }
    const int cut = ftruncate(s->log_fd, s->log_size) == 0;
    return fail(s, MP_EIO, "%s: cannot append to the log (%s); %s keeps the %ld complete lines before%s, %s is as it was",
                path, strerror(err), s->log_partial, s->log_rows, cut ? "" : " and part of the next", path);
}

/* The log whole: synced, closed and renamed over its path. RUN_OK, or
 * RUN_FAILED after a message (PATH as it was, the rows in PATH.partial). */
static int log_finish(run_state *s) {
    const char *path = s->o.log;
    const int fd = s->log_fd;
    s->log_fd = -1;
    if (fsync(fd) != 0 && errno != EINVAL) {
        const int e = errno;
        close(fd);
        return fail(s, MP_EIO, "%s: the log could not be written (%s); its rows are in %s", path, strerror(e),
                    s->log_partial);
    }
    if (close(fd) != 0)
        return fail(s, MP_EIO, "%s: the log could not be written (%s); its rows are in %s", path, strerror(errno),
                    s->log_partial);
    if (rename(s->log_partial, path) != 0)
        return fail(s, MP_EIO, "%s: the log could not replace it (%s); its rows are in %s", path, strerror(errno),
                    s->log_partial);
    return RUN_OK;
}

/* n bytes from the final model into r->sample (its row's sample) and their
 * judgement. RUN_OK, or RUN_FAILED after a message. */
static int take_sample(run_state *s, long n, mp_run_result *r) {
    const mp_status st = s->row->sample(s->mctx, n, &r->sample, &r->sample_printable, &r->sample_words);
    return st == MP_OK ? RUN_OK : fail(s, st, "sampling: %s", mp_last_error());
}

/* ---- the run, in its phases; each returns RUN_OK or the code it failed with ---- */

/* The spec resolved, the model, data and trainer made, the initial weights or
 * the checkpoint read. */
static int begin(run_state *s) {
    mp_run_spec *o = &s->o;
    if (o->weight_decay < 0) o->weight_decay = o->optimizer == MP_RUN_ADAMW ? 0.01 : 0.0;
    if (o->min_lr < 0) o->min_lr = o->lr / 10;
    s->row = mp_model_row_of(o);
    if (!o->batch) o->batch = s->row->batch;
    if (o->threads) mp_set_threads(o->threads);
    peak_reset();
    s->writer = rank_of(s) == 0; /* with ranks, rank 0 alone writes files and the console */
    if (s->writer) { /* one writer per output: each locked for the whole run, before anything is read */
        const char *const opt[4] = {"--log", "--summary", "--save", "--dump-grads"};
        const char *const path[4] = {o->log, o->summary, o->save, o->dump_grads};
        for (int k = 0; k < 4; k++) {
            if (!path[k] || mp_output_held(path[k])) continue; /* a lock the caller holds stays the caller's */
            const mp_status ls = mp_output_lock(opt[k], path[k]);
            if (ls != MP_OK) return failed(s, ls);
            s->locked[k] = path[k];
        }
    }
    mp_status ts = mp_threads_check(); /* before OpenMP's runtime would end the process for it */
    if (ts != MP_OK) return failed(s, ts);
    s->T = 1, s->steps_per_epoch = 1;
    int ret = setup(s);
    if (ret != RUN_OK) return ret;
    mp_train_config tc = {.precision = &s->prec, .scaler = o->scaler, .lr = {o->lr, o->schedule, o->warmup, 0, o->min_lr},
                          .accum = o->accum, .clip = o->clip, .dist = s->ranks->dist,
                          .shard_optimizer = o->shard_optimizer, .seed = (uint64_t)o->seed};
    s->total = o->steps ? o->steps : (o->epochs ? o->epochs : 1) * s->steps_per_epoch;
    tc.lr.decay_steps = s->total; /* the cosine reaches min_lr at the last step, as nanoGPT's lr_decay_iters = max_iters */
    if (o->warmup >= s->total) {
        char msg[200];
        snprintf(msg, sizeof msg, "--warmup %ld is not shorter than the run's %ld steps: the rate would never reach --lr",
                 o->warmup, s->total);
        return invalid(s, msg);
    }
    if (mp_trainer_create(&s->tr, &tc, s->model, s->opt, s->loader) != MP_OK) return invalid(s, mp_last_error());
    struct rlimit fl; /* ulimit -f: a checkpoint that cannot be written whole is refused now, not after training */
    const mp_optim_bytes held = mp_optim_bytes_held(s->opt);
    const double ckpt = held.weights + held.comp + held.params * state_bytes(s);
    if (o->save && getrlimit(RLIMIT_FSIZE, &fl) == 0 && fl.rlim_cur != RLIM_INFINITY && (double)fl.rlim_cur < ckpt)
        return fail(s, MP_EIO, "--save %s: the checkpoint holds at least %.0f bytes (weights and optimizer state), "
                    "and this process may write files of at most %llu bytes (ulimit -f)", o->save, ckpt,
                    (unsigned long long)fl.rlim_cur);
    model_meta(s->row, o, s->meta);
    if (o->init) {
        mp_safetensors st;
        mp_status e = mp_safetensors_read(o->init, &st);
        const char *holds = e == MP_OK ? mp_safetensors_meta(&st, "model") : NULL;
        if (holds && s->row->prefix && strcmp(holds, o->model) != 0) { /* a checkpoint of a model named by its string */
            const int r = fail(s, MP_EINVAL, "--init %s holds the weights of model %s, this run's model is %s", o->init,
                               holds, o->model);
            mp_safetensors_free(&st);
            return r;
        }
        if (e == MP_OK) e = s->model.ops->load(s->model.impl, &st), mp_safetensors_free(&st);
        if (e != MP_OK) return failed_file(s, e, o->init);
    }
    const mp_status e = o->resume ? mp_trainer_resume(s->tr, o->resume, s->meta) : MP_OK;
    if (e != MP_OK) return failed_file(s, e, o->resume);
    s->step = mp_trainer_step_count(s->tr);
    if (s->step >= s->total)
        return fail(s, MP_ESTATE, "%s is at step %ld already; ask for more steps than that (this run: %ld)", o->resume,
                    s->step, s->total);
    return RUN_OK;
}

/* The result's arrays for the steps to come, the tensors' names, the log and its header. */
static int prepare(run_state *s) {
    const mp_run_spec *o = &s->o;
    mp_run_result *r = &s->res;
    const int nt = (int)s->model.ops->nstats(s->model.impl);
    s->nq = mp_model_qtensors(&s->model, NULL, 0); /* the recipe's quantized tensors: 0 without one */
    mp_precision_formats(&s->prec, r->format, sizeof r->format);
    snprintf(r->model_kind, sizeof r->model_kind, "%s", s->model.ops->kind);
    r->compute_format = mp_format(s->prec.compute)->name;
    r->ntensors = nt;
    const size_t cap = (size_t)(s->total - s->step);
    r->loss = malloc(cap * sizeof *r->loss), r->scale = malloc(cap * sizeof *r->scale), r->skipped = calloc(cap, 1);
    r->tensor_names = calloc((size_t)nt + 1, sizeof *r->tensor_names);
    r->tensor_underflow = calloc(cap * (size_t)(nt ? nt : 1), sizeof *r->tensor_underflow);
    s->ms = malloc(cap * sizeof *s->ms), s->mpi_ms = malloc(cap * sizeof *s->mpi_ms);
    s->skips = cJSON_CreateArray();
    r->skips = calloc(MP_RUN_SKIPS_KEPT, sizeof *r->skips), r->skip_text = calloc(MP_RUN_SKIPS_KEPT, sizeof *r->skip_text);
    r->tensor_totals = calloc((size_t)nt + 1, sizeof *r->tensor_totals);
    const size_t neval_max = (o->eval_every ? cap / (size_t)o->eval_every : 0) + 2; /* the last one: the end's */
    r->eval_steps = malloc(neval_max * sizeof *r->eval_steps), r->eval_losses = malloc(neval_max * sizeof *r->eval_losses);
    r->nquant = (int)s->nq;
    s->qt = calloc(s->nq + 1, sizeof *s->qt), r->quant_names = calloc(s->nq + 1, sizeof *r->quant_names);
    r->quant_totals = calloc(s->nq + 1, sizeof *r->quant_totals), r->quant_scale = calloc(s->nq + 1, sizeof *r->quant_scale);
    r->quant_saturated = calloc(cap, sizeof *r->quant_saturated), r->quant_flushed = calloc(cap, sizeof *r->quant_flushed);
    s->hist_on = s->row->histogram && o->hist_every > 0;
    s->nh_max = s->hist_on ? (long)cap / o->hist_every + 2 : 0;
    s->hs = calloc((size_t)s->nh_max + 1, sizeof *s->hs);
    if (!r->loss || !r->scale || !r->skipped || !r->tensor_names || !r->tensor_underflow || !s->ms || !s->mpi_ms || !s->skips || !r->skips || !r->skip_text || !r->tensor_totals ||
        !r->eval_steps || !r->eval_losses || !s->hs || !s->qt || !r->quant_names || !r->quant_totals || !r->quant_scale ||
        !r->quant_saturated || !r->quant_flushed)
        return fail(s, MP_ENOMEM, "out of memory");
    mp_model_qtensors(&s->model, s->qt, s->nq);
    for (size_t i = 0; i < s->nq; i++) snprintf(r->quant_names[i], sizeof r->quant_names[i], "%s", s->qt[i].name);
    for (int i = 0; i < nt; i++) {
        const mp_tensor_stats *ts = s->model.ops->stats(s->model.impl, (size_t)i);
        snprintf(r->tensor_names[i], sizeof r->tensor_names[i], "%s", ts->name);
        r->tensor_totals[i].has_wgrad = ts->has_wgrad;
    }
    /* activation headroom is measured against the compute format's largest value, fp16's in an fp32 run */
    r->headroom_format = mp_format(s->prec.compute == MP_F32 ? MP_F16 : s->prec.compute);
    /* PATH.partial.PID: this run's own, created exclusively (never through a link, never over another's rows) */
    snprintf(s->log_partial, sizeof s->log_partial, "%.4000s.partial.%ld", o->log ? o->log : "", (long)getpid());
    if (o->log && s->writer && (s->log_fd = mp_create_excl(s->log_partial)) < 0)
        return fail(s, MP_EIO, "%s: cannot create the log (%s)", s->log_partial,
                    errno == EEXIST ? "a file is there already" : strerror(errno));
    if (s->log_fd >= 0) {
        FILE *row = log_row(s);
        if (row) csv_header(row, &s->model, s->qt, s->nq);
        if (log_commit(s, o->log, row)) return RUN_FAILED;
    }
    return RUN_OK;
}

/* The run's first line. */
static void print_start(const run_state *s) {
    const mp_run_spec *o = &s->o;
    FILE *out = s->io.out;
    char ranks[64] = "";
    if (size_of(s) > 1) snprintf(ranks, sizeof ranks, " on %d ranks (%ld each)", size_of(s), o->batch / size_of(s));
    const int language = s->row->report == MP_REPORT_LANGUAGE;
    OUT("train: %s%s, %s, %s lr %g%s, batch %ld x %ld%s%s, %ld steps (%ld per epoch), seed %ld%s\n", o->model,
        s->row->describe(o), s->prec.label, o->optimizer == MP_RUN_ADAMW ? "adamw" : "sgd", o->lr,
        o->schedule == MP_LR_COSINE ? " cosine" : "", o->batch, o->accum, language ? " sequences" : "", ranks, s->total,
        s->steps_per_epoch, o->seed, o->resume ? " (resumed)" : "");
    if (out && s->row->print_start) s->row->print_start(s->mctx, out);
}

/* The step's counts into the run's totals (k: the step's index in this run). */
static void add_step(run_state *s, const mp_step_info *si, long k) {
    mp_run_result *r = &s->res;
    const int nt = r->ntensors;
    mp_tensor_stats *const run_stats = r->tensor_totals;
    for (int i = 0; i < nt; i++) {
        const mp_tensor_stats *ts = s->model.ops->stats(s->model.impl, (size_t)i);
        r->tensor_underflow[(size_t)k * (size_t)nt + (size_t)i] = (float)frac(ts->bwd.underflow, ts->bwd_elements);
        mp_convert_stats_add(&run_stats[i].fwd, &ts->fwd), mp_convert_stats_add(&run_stats[i].bwd, &ts->bwd);
        run_stats[i].fwd_elements += ts->fwd_elements, run_stats[i].bwd_elements += ts->bwd_elements;
        run_stats[i].wgrad_elements += ts->wgrad_elements, run_stats[i].wgrad_lost += ts->wgrad_lost;
        run_stats[i].wgrad_dead += ts->wgrad_dead;
    }
    s->lost_updates += si->lost_updates, s->params_updated += si->params_updated;
    if (s->nq) {
        double sat, flush;
        quant_step(s->qt, s->nq, &sat, &flush);
        r->quant_saturated[k] = (float)sat, r->quant_flushed[k] = (float)flush;
    }
    for (size_t i = 0; i < s->nq; i++) {
        const mp_quant_stats *q = &s->qt[i].q->stats;
        mp_quant_stats *a = &r->quant_totals[i];
        a->n += q->n, a->saturated += q->saturated, a->flushed += q->flushed, a->nonfinite += q->nonfinite;
        a->amax = fmaxf(a->amax, q->amax);
        r->quant_scale[i] = s->qt[i].q->scale;
    }
}

/* The step's progress: a bar on a terminal, else a line every 5% of the run; an evaluation's line. */
static void print_step(const run_state *s, const mp_step_info *si, int eval_now, double eval_loss, double eval_acc) {
    FILE *out = s->io.out, *bar = s->writer ? s->io.bar : NULL;
    const long total = s->total, every = total / 20 > 0 ? total / 20 : 1;
    if (bar) {
        const int w = 30, fill = (int)((double)si->step / (double)total * w);
        fprintf(bar, "\r  [%-*.*s] %ld/%ld loss %.4f scale %g %.1f steps/s ", w, fill, "==============================",
                si->step, total, (double)si->loss, (double)si->scale, (double)(s->done_steps + 1) / (mp_now() - s->t_start));
        fflush(bar);
    } else if (si->step % every == 0 || si->step == total) {
        OUT("  step %ld/%ld loss %.4f scale %g%s\n", si->step, total, (double)si->loss, (double)si->scale,
            si->skipped ? " (skipped)" : "");
    }
    if (!eval_now) return;
    if (bar) fputc('\n', bar);
    if (s->row->report == MP_REPORT_LANGUAGE)
        OUT("  eval at step %ld: validation loss %.4f (%.4f bits per byte)\n", si->step, eval_loss, eval_loss / log(2.0));
    else
        OUT("  eval at step %ld: test accuracy %.2f%%, loss %.4f\n", si->step, 100 * eval_acc, eval_loss);
}

/* The ranks' states compared (a CRC-32 of each); a difference ends the run. */
static int check_ranks(run_state *s) {
    const mp_status cs = mp_trainer_check_ranks(s->tr);
    if (cs == MP_OK) return RUN_OK;
    if (s->writer || cs != MP_ECORRUPT) failed(s, cs); /* every rank has the same message: rank 0 says it */
    else if (!s->status) s->status = cs, snprintf(s->msg, sizeof s->msg, "%s", mp_last_error());
    if (cs != MP_ECORRUPT) return fail_alone(s);
    return RUN_FAILED;
}

/* The steps, each with its counts, log row, evaluation and progress; stops
 * early (s->stopped) when the scale is at its floor or the log fails. */
static int train_steps(run_state *s) {
    const mp_run_spec *o = &s->o;
    mp_run_result *r = &s->res;
    FILE *out = s->io.out, *bar = s->writer ? s->io.bar : NULL;
    void *const rctx = s->ranks->ctx;
    const double limit = r->headroom_format->max;
    s->ranks->set_allreduce(rctx, o->allreduce);
    s->t_start = mp_now();
    for (; s->step < s->total; s->step++, s->done_steps++) {
        const long k = s->done_steps;
        const double t0 = mp_now(), mpi0 = s->ranks->stats(rctx)->mpi_seconds;
        mp_step_info si;
        const int take_hist = s->hist_on && s->step % o->hist_every == 0 && s->nh < s->nh_max;
        if (take_hist) {
            hist_snap *h = &s->hs[s->nh];
            h->step = s->step + 1;
            h->scale = mp_trainer_scaler(s->tr) ? mp_scaler_get_scale(mp_trainer_scaler(s->tr)) : 1.0f;
            s->row->histogram(s->mctx, h->bins, MP_RUN_HIST_LO, MP_RUN_HIST_N, &h->zeros);
        }
        const mp_status st = mp_trainer_step(s->tr, &si);
        if (take_hist) s->row->histogram(s->mctx, NULL, 0, 0, NULL), s->nh++;
        if (st != MP_OK && st != MP_EOVERFLOW) { /* an error: the run ends here, nothing is saved */
            fail(s, st, "step %ld: %s", s->step + 1, mp_last_error());
            return fail_alone(s);
        }
        if (s->ranks->after_step) s->ranks->after_step(rctx, si.step, s->opt);
        if (st == MP_EOVERFLOW) {
            snprintf(s->stop_msg, sizeof s->stop_msg, "%s", mp_last_error()), s->stopped = s->stop_msg;
            if (!s->status) s->status = st, snprintf(s->msg, sizeof s->msg, "%s", s->stop_msg);
        }
        const double ms = (mp_now() - t0) * 1e3;
        s->ms[k] = ms, s->mpi_ms[k] = (s->ranks->stats(rctx)->mpi_seconds - mpi0) * 1e3;
        r->loss[k] = si.loss, r->scale[k] = si.scale, r->skipped[k] = (uint8_t)si.skipped, r->nsteps = k + 1;
        if (!isfinite(si.loss) && s->nan_step < 0) s->nan_step = si.step;
        if (si.skipped) r->skipped_total++;
        if ((si.nbad || si.first_activation || si.skipped) && report_nonfinite(out, bar, s->skips, &si, s->tr, r)) {
            fail(s, MP_ENOMEM, "out of memory");
            return fail_alone(s);
        }
        add_step(s, &si, k);
        double eval_loss = NAN, eval_acc = 0;
        const int eval_now = o->eval_every && si.step % o->eval_every == 0 && si.step < s->total && !s->stopped;
        const mp_status es = eval_now ? mp_trainer_evaluate(s->tr, &eval_loss, &eval_acc) : MP_OK;
        if (es != MP_OK) {
            failed(s, es);
            return fail_alone(s);
        }
        if (eval_now) r->eval_steps[r->neval] = k + 1, r->eval_losses[r->neval++] = eval_loss;
        if (s->log_fd >= 0) {
            FILE *row = log_row(s);
            if (row) csv_row(row, &s->model, &si, ms, eval_loss, limit, s->qt, s->nq);
            if (log_commit(s, o->log, row)) { /* the run stops; the checkpoint and the summary are still written */
                close(s->log_fd), s->log_fd = -1;
                snprintf(s->stop_msg, sizeof s->stop_msg, "%s: the log could not be written", o->log);
                s->stopped = s->stop_msg, s->out_failed = 1;
            }
        }
        r->last_loss = si.loss;
        print_step(s, &si, eval_now, eval_loss, eval_acc);
        if (s->ranks->any(rctx, s->stopped != NULL) && !s->stopped) { /* rank 0's log failed: every rank stops with it */
            snprintf(s->stop_msg, sizeof s->stop_msg, "rank 0 stopped"), s->stopped = s->stop_msg;
            s->status = s->status ? s->status : MP_EIO;
        }
        if (!s->stopped && o->check_every && si.step % o->check_every == 0 && si.step < s->total && check_ranks(s))
            return RUN_FAILED;
        if (s->stopped) {
            s->done_steps++;
            break;
        }
    }
    if (bar) fputc('\n', bar);
    s->elapsed = mp_now() - s->t_start;
    return RUN_OK;
}

/* The end: the evaluation, the ranks compared, the sample, the medians and the totals. */
static int finish(run_state *s) {
    const mp_run_spec *o = &s->o;
    mp_run_result *r = &s->res;
    const long n = s->done_steps;
    r->nsteps = n;
    const mp_status e = mp_trainer_evaluate(s->tr, &r->eval_loss, &r->eval_accuracy);
    if (e != MP_OK) {
        failed(s, e);
        return fail_alone(s);
    }
    if (check_ranks(s)) return RUN_FAILED; /* at the end, before the checkpoint and the results */
    r->eval_steps[r->neval] = n, r->eval_losses[r->neval++] = r->eval_loss;
    if (s->row->sample && o->sample_bytes > 0 && s->writer && take_sample(s, o->sample_bytes, r) != 0) return RUN_FAILED;
    qsort(s->ms, (size_t)n, sizeof *s->ms, cmp_d);
    r->ms_per_step = n ? s->ms[n / 2] : 0.0;
    qsort(s->mpi_ms, (size_t)n, sizeof *s->mpi_ms, cmp_d);
    s->mpi_median = n ? s->mpi_ms[n / 2] : 0.0;
    r->tokens_per_s = s->row->report == MP_REPORT_LANGUAGE && r->ms_per_step > 0
                          ? (double)o->batch * (double)s->T * (double)o->accum / (r->ms_per_step / 1e3) : 0;
    r->memory_mib = peak_mib();
    r->bytes = mp_optim_bytes_held(s->opt);
    const mp_scaler *sc = mp_trainer_scaler(s->tr);
    r->final_scale = sc ? (double)mp_scaler_get_scale(sc) : 1.0;
    const mp_tensor_stats *run_stats = r->tensor_totals;
    uint64_t tot_under = 0, tot_elems = 0, w_elems = 0, w_lost = 0, w_dead = 0;
    for (int i = 0; i < r->ntensors; i++) {
        tot_under += run_stats[i].bwd.underflow, tot_elems += run_stats[i].bwd_elements;
        s->act_over += run_stats[i].fwd.overflow, s->grad_over += run_stats[i].bwd.overflow;
        w_elems += run_stats[i].wgrad_elements, w_lost += run_stats[i].wgrad_lost, w_dead += run_stats[i].wgrad_dead;
    }
    r->underflow = frac(tot_under, tot_elems);
    r->lost_gradients = frac(w_lost, w_elems), r->dead_gradients = frac(w_dead, w_elems);
    r->lost_updates = frac(s->lost_updates, s->params_updated);
    if (s->nh) {
        const hist_snap *h = &s->hs[s->nh - 1];
        r->has_hist = 1, r->hist_zeros = (double)h->zeros, r->hist_scale = h->scale;
        for (int b = 0; b < MP_RUN_HIST_N; b++) r->hist[b] = (double)h->bins[b];
    }
    const mp_quant_stats *qs = r->quant_totals;
    uint64_t qn = 0, qsat = 0, qfl = 0;
    for (size_t i = 0; i < s->nq; i++) qn += qs[i].n, qsat += qs[i].saturated, qfl += qs[i].flushed;
    r->quant_saturated_total = frac(qsat, qn), r->quant_flushed_total = frac(qfl, qn);
    return RUN_OK;
}

/* The all-reduce's figures: rank 0's values on the wire, and what each rank
 * sends in a ring all-reduce of the buffer, 2 (N-1)/N of it (with 2 ranks
 * every algorithm sends the buffer once). */
static uint64_t wire_values(const mp_allreduce_stats *ds) { return ds->allreduces * ds->values; }
static double ring_bytes(const run_state *s, const mp_allreduce_stats *ds) {
    return 2.0 * (size_of(s) - 1) / size_of(s) * (double)ds->wire_bytes;
}

/* The results, as `mixprec train` prints them. */
static void print_results(const run_state *s) {
    const mp_run_result *r = &s->res;
    const mp_tensor_stats *run_stats = r->tensor_totals;
    const mp_allreduce_stats *ds = s->ranks->stats(s->ranks->ctx);
    const mp_scaler *sc = mp_trainer_scaler(s->tr);
    FILE *out = s->io.out;
    const int language = s->row->report == MP_REPORT_LANGUAGE, nt = r->ntensors;
    if (language)
        OUT("result: validation loss %.4f (%.4f bits per byte), last train loss %.4f\n", r->eval_loss,
            r->eval_loss / log(2.0), r->last_loss);
    else
        OUT("result: test accuracy %.2f%%, test loss %.4f, last train loss %.4f\n", 100 * r->eval_accuracy,
            r->eval_loss, r->last_loss);
    OUT("        %ld steps, %ld skipped, final scale %g, %.2f ms/step (median)", s->done_steps, r->skipped_total,
        r->final_scale, r->ms_per_step);
    if (language) OUT(", %.0f tokens/s", r->tokens_per_s);
    OUT(", %.1f s, peak memory %.0f MiB\n", s->elapsed, r->memory_mib);
    const mp_optim_bytes *b = &r->bytes;
    if (b->params > 0)
        OUT("        bytes per parameter %.2f: weights %.2f, copies %.2f, gradients %.2f, compensation %.2f, "
            "optimizer state %.2f%s\n", mp_bytes_per_param(b), b->weights / b->params, b->copy / b->params,
            b->grad / b->params, b->comp / b->params, b->state / b->params,
            s->o.shard_optimizer ? " (rank 0's share: --shard-optimizer)" : "");
    if (size_of(s) > 1) {
        OUT("        all-reduce %s: %llu gradient values, %.1f MB summed per step (each rank sends %.1f MB in a "
            "ring), %.2f ms/step in MPI (median)", mp_format(ds->wire)->name, (unsigned long long)ds->values,
            (double)ds->wire_bytes / 1e6, ring_bytes(s, ds) / 1e6, s->mpi_median);
        if (ds->wire != MP_F32)
            OUT("; rank 0's values on the wire: %.4f%% underflowed to 0, %llu overflowed",
                100 * frac(ds->packed.underflow, wire_values(ds)), (unsigned long long)ds->packed.overflow);
        if (ds->wire != MP_F32 && sc)
            OUT("; %ld of %ld skipped steps lost to it", ds->lost_sums, r->skipped_total);
        else if (ds->wire != MP_F32) /* no loss scaling: nothing skips, an inf reaches the update */
            OUT("; %ld steps' sums not finite because of it", ds->lost_sums);
        if (out) fputc('\n', out);
    }
    if (!language) {
        OUT("        gradient stores per layer (underflow to 0 / subnormal / overflow):");
        for (int i = 0; i < nt; i++) {
            const mp_tensor_stats *ls = &run_stats[i];
            const double ne = ls->bwd_elements ? (double)ls->bwd_elements : 1.0;
            OUT("%s %s %.3g%% / %.3g%% / %llu", i ? "," : "", r->tensor_names[i], 100 * (double)ls->bwd.underflow / ne,
                100 * (double)ls->bwd.subnormal / ne, (unsigned long long)ls->bwd.overflow);
        }
        OUT("\n");
    } else {
        int worst = -1;
        for (int i = 0; i < nt; i++)
            if (run_stats[i].bwd_elements &&
                (worst < 0 || frac(run_stats[i].bwd.underflow, run_stats[i].bwd_elements) >
                                  frac(run_stats[worst].bwd.underflow, run_stats[worst].bwd_elements)))
                worst = i;
        OUT("        gradient stores: %.4f%% underflowed to 0 (most in %s: %.4f%%), %llu overflowed; "
            "activation stores: %llu overflowed\n",
            100 * r->underflow, worst >= 0 ? r->tensor_names[worst] : "-",
            worst >= 0 ? 100 * frac(run_stats[worst].bwd.underflow, run_stats[worst].bwd_elements) : 0.0,
            (unsigned long long)s->grad_over, (unsigned long long)s->act_over);
    }
    OUT("        weight gradients: %.4f%% lost (nonzero in fp32, 0 when stored), %.4f%% dead (0 in fp32); "
        "updates: %.4f%% lost (the weight did not change)\n",
        100 * r->lost_gradients, 100 * r->dead_gradients, 100 * r->lost_updates);
    if (s->nq) {
        const mp_quant_stats *qs = r->quant_totals;
        size_t ws = 0, wf = 0; /* the tensors with the largest shares */
        for (size_t i = 0; i < s->nq; i++) {
            if (frac(qs[i].saturated, qs[i].n) > frac(qs[ws].saturated, qs[ws].n)) ws = i;
            if (frac(qs[i].flushed, qs[i].n) > frac(qs[wf].flushed, qs[wf].n)) wf = i;
        }
        OUT("        %s: %.4f%% of the quantized values saturated", r->format, 100 * r->quant_saturated_total);
        if (r->quant_saturated_total > 0)
            OUT(" (most in %s: %.4f%%)", r->quant_names[ws], 100 * frac(qs[ws].saturated, qs[ws].n));
        OUT(", %.4f%% flushed to zero", 100 * r->quant_flushed_total);
        if (r->quant_flushed_total > 0) OUT(" (most in %s: %.4f%%)", r->quant_names[wf], 100 * frac(qs[wf].flushed, qs[wf].n));
        if (out) fputc('\n', out);
    }
}

/* The warnings the literature describes, into the result and printed. */
static void add_warnings(run_state *s) {
    const mp_run_spec *o = &s->o;
    mp_run_result *r = &s->res;
    const mp_allreduce_stats *ds = s->ranks->stats(s->ranks->ctx);
    const mp_scaler *sc = mp_trainer_scaler(s->tr);
    FILE *out = s->io.out;
#define WARN(...) if (r->nwarnings < MP_RUN_WARNINGS) snprintf(r->warnings[r->nwarnings++], sizeof r->warnings[0], __VA_ARGS__)
    if (s->nan_step >= 0) WARN("the loss became NaN/inf at step %ld", s->nan_step);
    if (sc && s->prec.scaling == MP_SCALING_DYNAMIC && mp_scaler_get_scale(sc) < o->scaler.init_scale / 1024.0f)
        WARN("the loss scale collapsed from %g to %g (%ld skipped steps)", (double)o->scaler.init_scale,
             (double)mp_scaler_get_scale(sc), r->skipped_total);
    if (s->stopped) WARN("stopped: %.230s", s->stopped);
    if (s->prec.compute == MP_F16 && r->underflow > 0.01)
        WARN("%.2f%% of the gradient values stored in fp16 underflowed to zero%s", 100.0 * r->underflow,
             sc ? "" : ": use loss scaling (fp16-dynamic)");
    if (ds->lost_sums)
        WARN("%ld steps %s because the gradients overflowed in the %s all-reduce (cast or sum) where every rank's "
             "fp32 gradients were finite (--allreduce fp32 keeps them)", ds->lost_sums,
             sc ? "were skipped" : "took an inf update", mp_format(ds->wire)->name);
    if (s->act_over) WARN("%llu activation values overflowed to inf when stored in %s", (unsigned long long)s->act_over,
                          r->compute_format);
#undef WARN
    for (int k = 0; k < r->nwarnings; k++) OUT("warning: %s\n", r->warnings[k]);
}

/* The summary document (docs/LOGS.md), or NULL when out of memory. */
static cJSON *summary_json(run_state *s) {
    const mp_run_spec *o = &s->o;
    const mp_precision *prec = &s->prec;
    mp_run_result *r = &s->res;
    const mp_tensor_stats *run_stats = r->tensor_totals;
    const mp_allreduce_stats *ds = s->ranks->stats(s->ranks->ctx);
    const mp_recipe *recipe = mp_model_recipe(&s->model);
    const int language = s->row->report == MP_REPORT_LANGUAGE, nt = r->ntensors;
    const long done_steps = s->done_steps, nh = s->nh;
    const uint64_t act_over = s->act_over, grad_over = s->grad_over, wire_n = wire_values(ds);
    const double limit = r->headroom_format->max, ring = ring_bytes(s, ds), mpi_ms = s->mpi_median;
    const mp_format_info *hfmt = r->headroom_format;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "precision", prec->label);
    cJSON_AddStringToObject(j, "master_weights", mp_master_weights_name(prec->master_weights));
    cJSON_AddStringToObject(j, "optim_state", mp_state_format_name(mp_precision_state_format(prec)));
    cJSON_AddStringToObject(j, "reductions", mp_reductions_name(prec->reductions));
    cJSON_AddStringToObject(j, "model", o->model);
    cJSON_AddStringToObject(j, "compute_format", r->compute_format);
    cJSON_AddStringToObject(j, "format", r->format);
    cJSON_AddNumberToObject(j, "steps", (double)done_steps);
    if (language) {
        cJSON_AddNumberToObject(j, "val_loss", r->eval_loss);
        cJSON_AddNumberToObject(j, "val_bits_per_byte", r->eval_loss / log(2.0));
        cJSON_AddNumberToObject(j, "val_accuracy", r->eval_accuracy);
        cJSON_AddNumberToObject(j, "tokens_per_s", r->tokens_per_s);
        if (r->sample) {
        cJSON_AddStringToObject(j, "sample", r->sample);
        cJSON_AddNumberToObject(j, "sample_printable", r->sample_printable);
        if (isnan(r->sample_words)) cJSON_AddNullToObject(j, "sample_words");
        else cJSON_AddNumberToObject(j, "sample_words", r->sample_words);
        }
    } else {
        cJSON_AddNumberToObject(j, "test_accuracy", r->eval_accuracy);
        cJSON_AddNumberToObject(j, "test_loss", r->eval_loss);
    }
    cJSON_AddNumberToObject(j, "last_train_loss", r->last_loss);
    cJSON_AddItemToObject(j, "skipped", s->skips);
    s->skips = NULL; /* j owns it now */
    cJSON_AddNumberToObject(j, "final_scale", r->final_scale);
    cJSON_AddNumberToObject(j, "ms_per_step", r->ms_per_step);
    if (size_of(s) > 1) {
        cJSON *a = cJSON_AddObjectToObject(j, "allreduce");
        cJSON_AddNumberToObject(a, "ranks", size_of(s));
        cJSON_AddBoolToObject(a, "shard_optimizer", o->shard_optimizer);
        cJSON_AddStringToObject(a, "format", mp_format(ds->wire)->name);
        cJSON_AddNumberToObject(a, "values", (double)ds->values);
        cJSON_AddNumberToObject(a, "buffer_bytes", (double)ds->wire_bytes);
        cJSON_AddNumberToObject(a, "ring_bytes_sent", ring);
        cJSON_AddNumberToObject(a, "mpi_ms_per_step", mpi_ms);
        cJSON_AddNumberToObject(a, "wire_underflow", frac(ds->packed.underflow, wire_n));
        cJSON_AddNumberToObject(a, "wire_overflow", (double)ds->packed.overflow);
        cJSON_AddNumberToObject(a, "lost_steps", (double)ds->lost_sums);
    }
    cJSON_AddNumberToObject(j, "peak_memory_mib", r->memory_mib);
    const mp_optim_bytes *by = &r->bytes;
    cJSON_AddNumberToObject(j, "bytes_per_param", mp_bytes_per_param(by));
    cJSON *bp = cJSON_AddObjectToObject(j, "bytes_per_param_parts");
    const double np = by->params > 0 ? by->params : 1;
    cJSON_AddNumberToObject(bp, "weights", by->weights / np), cJSON_AddNumberToObject(bp, "copies", by->copy / np);
    cJSON_AddNumberToObject(bp, "gradients", by->grad / np), cJSON_AddNumberToObject(bp, "compensation", by->comp / np);
    cJSON_AddNumberToObject(bp, "optimizer_state", by->state / np);
    cJSON_AddNumberToObject(j, "underflow_fraction", r->underflow);
    cJSON_AddNumberToObject(j, "gradient_overflow", (double)grad_over);
    cJSON_AddNumberToObject(j, "activation_overflow", (double)act_over);
    cJSON_AddNumberToObject(j, "lost_gradients", r->lost_gradients);
    cJSON_AddNumberToObject(j, "dead_gradients", r->dead_gradients);
    cJSON_AddNumberToObject(j, "lost_updates", r->lost_updates);
    cJSON_AddStringToObject(j, "headroom_against", hfmt->name);
    cJSON *ly = cJSON_AddArrayToObject(j, "tensors");
    for (int i = 0; i < nt; i++) {
        const mp_tensor_stats *ls = &run_stats[i];
        cJSON *o1 = cJSON_CreateObject();
        cJSON_AddStringToObject(o1, "name", r->tensor_names[i]);
        cJSON_AddNumberToObject(o1, "underflow_fraction", frac(ls->bwd.underflow, ls->bwd_elements));
        cJSON_AddNumberToObject(o1, "subnormal_fraction", frac(ls->bwd.subnormal, ls->bwd_elements));
        cJSON_AddNumberToObject(o1, "overflow", (double)ls->bwd.overflow);
        cJSON_AddNumberToObject(o1, "act_underflow_fraction", frac(ls->fwd.underflow, ls->fwd_elements));
        cJSON_AddNumberToObject(o1, "act_subnormal_fraction", frac(ls->fwd.subnormal, ls->fwd_elements));
        cJSON_AddNumberToObject(o1, "act_overflow", (double)ls->fwd.overflow);
        cJSON_AddNumberToObject(o1, "nan", (double)ls->bwd.nan);
        cJSON_AddNumberToObject(o1, "act_nan", (double)ls->fwd.nan);
        cJSON_AddNumberToObject(o1, "grad_values", (double)ls->bwd_elements);
        cJSON_AddNumberToObject(o1, "act_values", (double)ls->fwd_elements);
        for (int bwd = 0; bwd < 2; bwd++) {
        const float amax = bwd ? ls->bwd.amax : ls->fwd.amax;
        const double hr = headroom(limit, amax);
        const char *ka = bwd ? "grad_amax" : "act_amax", *kh = bwd ? "grad_headroom_log2" : "act_headroom_log2";
        if (isnan(hr)) cJSON_AddNullToObject(o1, ka), cJSON_AddNullToObject(o1, kh);
        else cJSON_AddNumberToObject(o1, ka, amax), cJSON_AddNumberToObject(o1, kh, hr);
        }
        if (ls->has_wgrad) {
        cJSON_AddNumberToObject(o1, "wgrad_values", (double)ls->wgrad_elements);
        cJSON_AddNumberToObject(o1, "wgrad_lost", (double)ls->wgrad_lost);
        cJSON_AddNumberToObject(o1, "wgrad_dead", (double)ls->wgrad_dead);
        }
        cJSON_AddItemToArray(ly, o1);
    }
    if (s->nq && recipe) { /* the recipe's quantized tensors over the run */
        cJSON_AddStringToObject(j, "recipe", mp_recipe_name(recipe->kind));
        cJSON_AddNumberToObject(j, "quant_saturated_fraction", r->quant_saturated_total);
        cJSON_AddNumberToObject(j, "quant_flushed_fraction", r->quant_flushed_total);
        cJSON *qa = cJSON_AddArrayToObject(j, "quantized");
        for (size_t i = 0; i < s->nq; i++) {
        const mp_quant_stats *q = &r->quant_totals[i];
        cJSON *o1 = cJSON_CreateObject();
        cJSON_AddStringToObject(o1, "name", r->quant_names[i]);
        cJSON_AddStringToObject(o1, "format", mp_format(mp_qrole_format(recipe, s->qt[i].q->role))->name);
        cJSON_AddNumberToObject(o1, "amax", q->amax);
        cJSON_AddNumberToObject(o1, "scale", r->quant_scale[i]);
        cJSON_AddNumberToObject(o1, "values", (double)q->n);
        cJSON_AddNumberToObject(o1, "saturated", (double)q->saturated);
        cJSON_AddNumberToObject(o1, "flushed", (double)q->flushed);
        cJSON_AddNumberToObject(o1, "nonfinite", (double)q->nonfinite);
        cJSON_AddNumberToObject(o1, "saturated_fraction", frac(q->saturated, q->n));
        cJSON_AddNumberToObject(o1, "flushed_fraction", frac(q->flushed, q->n));
        cJSON_AddItemToArray(qa, o1);
        }
    }
    if (!language) {
        const mp_format_info *fi = mp_format(prec->compute == MP_F32 ? MP_F16 : prec->compute);
        cJSON *hj = cJSON_AddObjectToObject(j, "histograms");
        cJSON_AddNumberToObject(hj, "log2_lo", MP_RUN_HIST_LO);
        cJSON_AddStringToObject(hj, "limits_of", fi->name);
        cJSON_AddNumberToObject(hj, "min_subnormal", fi->min_subnormal);
        cJSON_AddNumberToObject(hj, "min_normal", fi->min_normal);
        cJSON_AddNumberToObject(hj, "max", fi->max);
        cJSON *snaps = cJSON_AddArrayToObject(hj, "snapshots");
        for (long k = 0; k < nh; k++) {
        cJSON *o1 = cJSON_CreateObject();
        cJSON_AddNumberToObject(o1, "step", (double)s->hs[k].step);
        cJSON_AddNumberToObject(o1, "scale", (double)s->hs[k].scale);
        cJSON_AddNumberToObject(o1, "zeros", (double)s->hs[k].zeros);
        cJSON *c = cJSON_AddArrayToObject(o1, "counts");
        for (int b = 0; b < MP_RUN_HIST_N; b++) cJSON_AddItemToArray(c, cJSON_CreateNumber((double)s->hs[k].bins[b]));
        cJSON_AddItemToArray(snaps, o1);
        }
    }
    cJSON *wa = cJSON_AddArrayToObject(j, "warnings");
    for (int k = 0; k < r->nwarnings; k++) cJSON_AddItemToArray(wa, cJSON_CreateString(r->warnings[k]));
    return j;
}

/* Whether v holds a value that is not finite (fp32, or fp16/bf16 bits). */
static int any_nonfinite(const void *v, mp_dtype t, size_t n) {
    if (!v) return 0;
    if (t == MP_F32) {
        for (size_t i = 0; i < n; i++)
            if (!isfinite(((const float *)v)[i])) return 1;
        return 0;
    }
    const uint16_t mask = t == MP_F16 ? 0x7c00 : 0x7f80; /* exponent all ones: inf or NaN */
    for (size_t i = 0; i < n; i++)
        if ((((const uint16_t *)v)[i] & mask) == mask) return 1;
    return 0;
}

/* Why the run's end is worse than a checkpoint it could replace (into why),
 * or 0: it stopped early, its last step's loss (unless the step was skipped)
 * or its final evaluation is not finite, or its weights or fp32 optimizer
 * state hold a value that is not finite (what --resume and sample refuse). */
static int ended_worse(const run_state *s, char *why, size_t cap) {
    const mp_run_result *r = &s->res;
    if (s->stopped) return snprintf(why, cap, "the run stopped early (%.200s)", s->stopped), 1;
    /* a last step skipped for its inf/NaN (loss scaling) changed nothing: its loss says nothing of the state */
    const int last_skipped = s->done_steps > 0 && r->skipped[s->done_steps - 1];
    if ((!isfinite(r->last_loss) && !last_skipped) || !isfinite(r->eval_loss))
        return snprintf(why, cap, "the run ended with a %s loss of %s", isfinite(r->last_loss) ? "evaluation" : "training",
                        isnan(isfinite(r->last_loss) ? r->eval_loss : (double)r->last_loss) ? "NaN" : "inf"), 1;
    for (size_t i = 0; i < mp_optim_count(s->opt); i++) {
        const mp_param *p = mp_optim_param(s->opt, i);
        if (any_nonfinite(p->master, MP_F32, p->n) || any_nonfinite(p->half, p->half_type, p->n) ||
            any_nonfinite(p->state1, MP_F32, p->n) || any_nonfinite(p->state2, MP_F32, p->n))
            return snprintf(why, cap, "the run ended with a value that is not finite in '%s'", p->name), 1;
    }
    return 0;
}

/* How the messages name output `path` of option `opt` ("--save"): the option
 * and the path, or (outputs_shown_in) the file where the caller moves it. */
static const char *shown(const run_state *s, const char *opt, const char *path, char *buf, size_t cap) {
    const char *dir = s->o.outputs_shown_in, *slash = strrchr(path, '/');
    if (dir) snprintf(buf, cap, "%.2000s/%.1000s", dir, slash ? slash + 1 : path);
    else snprintf(buf, cap, "%s %.3000s", opt, path);
    return buf;
}

/* The checkpoint: over --save's path when the run ended as it should; else
 * (ended_worse) never over it: beside it, as PATH.rejected, which is not
 * replaced either, and the run fails (MP_EOVERFLOW) saying where its state is. */
static void save_checkpoint(run_state *s, mp_status gathered) {
    const mp_run_spec *o = &s->o;
    FILE *out = s->io.out;
    char why[320];
    mp_status e;
    if (!ended_worse(s, why, sizeof why)) {
        if ((e = gathered) != MP_OK || (e = mp_trainer_save(s->tr, o->save, s->meta, o->save_dtype)) != MP_OK)
            output_failed(s, e, mp_last_error());
        else OUT("saved %s (step %ld)\n", o->save, mp_trainer_step_count(s->tr));
        s->wrote[2] = e == MP_OK ? 1 : -1;
        return;
    }
    char side[4200], msg[1400], name[4200], side_name[4200];
    snprintf(side, sizeof side, "%.4000s.rejected", o->save);
    mp_write_no_replace(1);
    if ((e = gathered) == MP_OK) e = mp_trainer_save(s->tr, side, s->meta, o->save_dtype);
    mp_write_no_replace(0);
    shown(s, "--save", o->save, name, sizeof name);
    if (o->outputs_shown_in) shown(s, NULL, side, side_name, sizeof side_name);
    else snprintf(side_name, sizeof side_name, "%s", side);
    if (e == MP_OK)
        snprintf(msg, sizeof msg, "%.300s: %s, so it is not written over; this run's state (step %ld) is in %.300s",
                 name, why, mp_trainer_step_count(s->tr), side_name);
    else
        snprintf(msg, sizeof msg, "%.300s: %s, so it is not written over; this run's state is not written "
                 "either (%.600s)", name, why, mp_last_error());
    output_failed(s, MP_EOVERFLOW, msg);
    s->wrote[2] = -1;
}

/* The outputs: the checkpoint first (the training is in it), then the summary
 * and the gradients; one that cannot be written (one line) does not keep the
 * others from being written (s->out_failed). */
static void write_outputs(run_state *s) {
    const mp_run_spec *o = &s->o;
    mp_run_result *r = &s->res;
    FILE *out = s->io.out;
    const int writer = s->writer;
    mp_status e;
    /* a sharded optimizer's state comes to rank 0 for the checkpoint (every rank takes part) */
    const mp_status gathered = o->save ? mp_trainer_gather_state(s->tr, 1) : MP_OK;
    if (o->save && writer) save_checkpoint(s, gathered);
    if (o->save) mp_trainer_gather_state(s->tr, 0); /* rank 0 lets go of the others' state */
    if (writer) { /* the summary: kept in the result, written where the spec names it */
        cJSON *j = summary_json(s);
        r->summary = j ? mp_json_print(j, 1) : NULL;
        cJSON_Delete(j);
        e = !r->summary ? mp_error(MP_ENOMEM, "%s: out of memory", o->summary ? o->summary : "the summary")
            : o->summary ? mp_write_file_atomic(o->summary, &(mp_chunk){r->summary, strlen(r->summary)}, 1)
                         : MP_OK;
        if (e != MP_OK && (o->summary || !s->status)) output_failed(s, e, mp_last_error());
        if (o->summary) s->wrote[1] = e == MP_OK ? 1 : -1;
    }
    if (o->dump_grads && writer) { /* the weight gradients of the last step, as the optimizer saw them */
        const size_t np = mp_optim_count(s->opt);
        mp_tensor *gt = calloc(np + 1, sizeof *gt);
        size_t ng = 0;
        for (size_t i = 0; gt && i < np; i++) {
            const mp_param *p = mp_optim_param(s->opt, i);
            if (!strstr(p->name, ".weight") || strstr(p->name, "ln")) continue;
            mp_tensor *t = &gt[ng++];
            snprintf(t->name, sizeof t->name, "%s.grad", p->name);
            t->dtype = MP_F32, t->ndim = 1, t->shape[0] = p->n, t->nbytes = p->n * 4, t->data = p->grad;
        }
        e = gt ? mp_safetensors_write(o->dump_grads, gt, ng, NULL) : MP_ENOMEM;
        free(gt);
        if (e != MP_OK) output_failed(s, e, gt ? mp_last_error() : "out of memory");
        else OUT("gradients of step %ld written to %s\n", mp_trainer_step_count(s->tr), o->dump_grads);
        s->wrote[3] = e == MP_OK ? 1 : -1;
    }
}

/* After a run that trained to its end and could not write every output at
 * its end: one line, why each of those was not written (each as it was), and
 * the outputs that were. */
static void say_outputs(const run_state *s) {
    if (!s->out_why[0] || !s->writer || !s->io.err) return;
    const char *const opt[4] = {"--log", "--summary", "--save", "--dump-grads"};
    const char *const path[4] = {s->o.log, s->o.summary, s->o.save, s->o.dump_grads};
    char written[1200] = "";
    size_t n = 0;
    for (int k = 0; k < 4; k++)
        if (s->wrote[k] > 0 && n < sizeof written) {
            char name[4200];
            n += (size_t)snprintf(written + n, sizeof written - n, "%s%.500s", n ? ", " : "; written: ",
                                  shown(s, opt[k], path[k], name, sizeof name));
        }
    char rank[32] = "";
    if (size_of(s) > 1 && rank_of(s) > 0) snprintf(rank, sizeof rank, "rank %d: ", rank_of(s));
    fprintf(s->io.err, "%s: %s%s%s\n", s->io.prefix, rank, s->out_why, written);
}

mp_status mp_run(const mp_run_spec *spec, const mp_run_io *io, mp_run_result *res) {
    if (res) memset(res, 0, sizeof *res);
    if (!spec || !res) return mp_error(MP_EINVAL, "mp_run: NULL argument");
    run_state s;
    memset(&s, 0, sizeof s);
    s.log_fd = -1, s.nan_step = -1;
    mp_allreduce_stats one_stats_ = {.wire = MP_F32};
    const mp_run_ranks one = {0, 1, NULL, &one_stats_, one_agree, one_any, one_abort, one_set_allreduce, one_stats, NULL};
    s.ranks = spec->ranks ? spec->ranks : &one;
    if (io) s.io = *io;
    if (!s.io.prefix) s.io.prefix = "mixprec";
    s.o = *spec;
    s.deferring = size_of(&s) > 1; /* until every rank is ready: agree_ready */
    mp_status cst = mp_run_resolve(spec, &s.prec);
    if (cst == MP_OK) cst = mp_run_check_files(spec);
    int ret = cst == MP_OK ? begin(&s) : cst == MP_EINVAL ? invalid(&s, mp_last_error()) : failed(&s, cst);
    if (ret == RUN_OK) ret = prepare(&s);
    /* every rank is ready, or the job stops here: the lowest rank that failed says why */
    ret = agree_ready(&s, ret);
    if (ret == RUN_OK && s.writer) print_start(&s);
    if (ret == RUN_OK) ret = train_steps(&s);
    if (ret == RUN_OK) ret = finish(&s);
    if (ret == RUN_OK) {
        s.finished = 1;
        print_results(&s);
        add_warnings(&s);
        write_outputs(&s);
        ret = s.stopped || s.out_failed ? RUN_FAILED : RUN_OK;
    }
    /* the log replaces its path when it holds every row of the run: also after an early stop or a failed
     * output, not after a failure of the run itself (its rows stay in PATH.partial) */
    if (s.log_fd >= 0 && (ret == RUN_OK || (s.status && s.finished))) {
        if (log_finish(&s) != RUN_OK) ret = RUN_FAILED;
        else s.wrote[0] = 1;
    } else if (s.log_fd >= 0) {
        close(s.log_fd);
    }
    if (s.finished) say_outputs(&s);
    for (int k = 0; k < 4; k++) mp_output_unlock(s.locked[k]);
    *res = s.res, memset(&s.res, 0, sizeof s.res);
    res->precision = s.prec, res->invalid = ret == RUN_INVALID;
    state_free(&s);
    if (ret == RUN_OK) return MP_OK;
    const mp_status st = ret == RUN_INVALID ? MP_EINVAL : s.status ? s.status : MP_EIO;
    return mp_error(st, "%s", s.msg[0] ? s.msg : "the run failed");
}
