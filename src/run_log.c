/* run_log.c - a run's CSV log (docs/LOGS.md): its columns, streamed a
 * complete row at a time into PATH.partial.PID, renamed over PATH when whole. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run_state.h"

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
void mp_run_quant_step(const mp_named_qtensor *qt, size_t nq, double *sat, double *flush) {
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
    mp_run_quant_step(qt, nq, &sat, &flush);
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
    return mp_run_fail(s, MP_EIO,
                       "%s: cannot append to the log (%s); %s keeps the %ld complete lines before%s, %s is as it was",
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
        return mp_run_fail(s, MP_EIO, "%s: the log could not be written (%s); its rows are in %s", path, strerror(e),
                           s->log_partial);
    }
    if (close(fd) != 0)
        return mp_run_fail(s, MP_EIO, "%s: the log could not be written (%s); its rows are in %s", path,
                           strerror(errno), s->log_partial);
    if (rename(s->log_partial, path) != 0)
        return mp_run_fail(s, MP_EIO, "%s: the log could not replace it (%s); its rows are in %s", path,
                           strerror(errno), s->log_partial);
    return RUN_OK;
}

/* PATH.partial.PID: this run's own, created exclusively (never through a
 * link, never over another's rows), and its header. RUN_OK, or RUN_FAILED
 * after a message. */
int mp_run_log_open(run_state *s) {
    const char *log = s->o.log;
    snprintf(s->log_partial, sizeof s->log_partial, "%.4000s.partial.%ld", log ? log : "", (long)getpid());
    if (log && s->writer && (s->log_fd = mp_create_excl(s->log_partial)) < 0)
        return mp_run_fail(s, MP_EIO, "%s: cannot create the log (%s)", s->log_partial,
                           errno == EEXIST ? "a file is there already" : strerror(errno));
    if (s->log_fd < 0) return RUN_OK;
    FILE *row = log_row(s);
    if (row) csv_header(row, &s->model, s->qt, s->nq);
    return log_commit(s, log, row) ? RUN_FAILED : RUN_OK;
}

/* The step's row. A row that cannot be written stops the run (s->stopped);
 * the checkpoint and the summary are still written. */
int mp_run_log_step(run_state *s, const mp_step_info *si, double ms, double eval_loss) {
    if (s->log_fd < 0) return RUN_OK;
    FILE *row = log_row(s);
    if (row) csv_row(row, &s->model, si, ms, eval_loss, s->res.headroom_format->max, s->qt, s->nq);
    if (!log_commit(s, s->o.log, row)) return RUN_OK;
    close(s->log_fd), s->log_fd = -1;
    snprintf(s->stop_msg, sizeof s->stop_msg, "%s: the log could not be written", s->o.log);
    s->stopped = s->stop_msg, s->out_failed = 1;
    return RUN_FAILED;
}

/* The log at the run's end: whole (every row of the run: also after an
 * early stop or a failed output, not after a failure of the run itself),
 * renamed over its path (s->wrote[0]); else closed, its rows left in
 * PATH.partial. RUN_OK, or RUN_FAILED after a message. */
int mp_run_log_close(run_state *s, int whole) {
    if (s->log_fd < 0) return RUN_OK;
    if (!whole) return close(s->log_fd), s->log_fd = -1, RUN_OK;
    if (log_finish(s) != RUN_OK) return RUN_FAILED;
    s->wrote[0] = 1;
    return RUN_OK;
}
