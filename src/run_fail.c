/* run_fail.c - a run's failures: the first one's status and message, what
 * each rank prints, and the ranks' agreement before and during training. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "run_state.h"

/* One process: the ranks of a run that is not data-parallel. */
static int one_agree(void *ctx, int code, int *first) {
    (void)ctx;
    return *first = code ? 0 : -1, code;
}

static int one_any(void *ctx, int flag) {
    (void)ctx;
    return flag != 0;
}

static void one_abort(void *ctx, int code) { (void)ctx, (void)code; }

static void one_set_allreduce(void *ctx, mp_dtype wire) {
    *(mp_allreduce_stats *)ctx = (mp_allreduce_stats){.wire = wire};
}

static const mp_allreduce_stats *one_stats(void *ctx) { return ctx; }

mp_run_ranks mp_run_one_process(mp_allreduce_stats *stats) {
    *stats = (mp_allreduce_stats){.wire = MP_F32};
    return (mp_run_ranks){0, 1, NULL, stats, one_agree, one_any, one_abort, one_set_allreduce, one_stats, NULL};
}

int mp_run_fail(run_state *s, mp_status st, const char *fmt, ...) {
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
int mp_run_invalid(run_state *s, const char *msg) {
    if (!s->status) s->status = MP_EINVAL, snprintf(s->msg, sizeof s->msg, "%s", msg);
    if (rank_of(s) == 0 && s->io.err) fprintf(s->io.err, "%s: %s (see '%s --help')\n", s->io.prefix, msg, s->io.prefix);
    return RUN_INVALID;
}

/* Every rank's code before training: the lowest rank that failed prints its
 * message and every rank returns its code. */
int mp_run_agree_ready(run_state *s, int code) {
    if (size_of(s) == 1) return s->deferring = 0, code;
    int first;
    const int agreed = s->ranks->agree(s->ranks->ctx, code, &first);
    if (agreed && first == rank_of(s) && s->io.err) {
        if (s->deferred[0]) fputs(s->deferred, s->io.err);
        else if (first != 0) /* a spec that cannot work, which only rank 0 prints */
            fprintf(s->io.err, "%s: rank %d: its options could not be used (exit status %d)\n", s->io.prefix, first,
                    code);
    }
    if (agreed && !s->status)
        s->status = agreed == RUN_INVALID ? MP_EINVAL : MP_EIO,
        snprintf(s->msg, sizeof s->msg, "rank %d failed before training", first);
    s->deferring = 0, s->deferred[0] = '\0';
    return agreed;
}

/* A failure of this rank alone during training: the others wait for it in a
 * reduction, so the job ends (one process: returns RUN_FAILED). */
int mp_run_fail_alone(run_state *s) {
    s->ranks->abort(s->ranks->ctx, 1);
    return RUN_FAILED;
}

/* A library call failed with st: its message (mp_last_error) as the run's. */
int mp_run_failed(run_state *s, mp_status st) { return mp_run_fail(s, st, "%s", mp_last_error()); }

/* An output written at the end that could not be: the run's status as mp_run_fail()
 * keeps it, the message kept for say_outputs' one line. */
void mp_run_output_failed(run_state *s, mp_status st, const char *msg) {
    if (!s->status || s->status == MP_EOVERFLOW)
        s->status = st ? st : MP_EIO, snprintf(s->msg, sizeof s->msg, "%s", msg);
    const size_t n = strlen(s->out_why);
    snprintf(s->out_why + n, sizeof s->out_why - n, "%s%s", n ? "; " : "", msg);
    s->out_failed = 1;
}

/* The same for a call that read file path: the message names it. */
int mp_run_failed_file(run_state *s, mp_status st, const char *path) {
    const int named = strstr(mp_last_error(), path) != NULL;
    return mp_run_fail(s, st, "%s%s%s", named ? "" : path, named ? "" : ": ", mp_last_error());
}

/* The ranks' states compared (a CRC-32 of each); a difference ends the run. */
int mp_run_check_ranks(run_state *s) {
    const mp_status cs = mp_trainer_check_ranks(s->tr);
    if (cs == MP_OK) return RUN_OK;
    if (s->writer || cs != MP_ECORRUPT) mp_run_failed(s, cs); /* every rank has the same message: rank 0 says it */
    else if (!s->status) s->status = cs, snprintf(s->msg, sizeof s->msg, "%s", mp_last_error());
    if (cs != MP_ECORRUPT) return mp_run_fail_alone(s);
    return RUN_FAILED;
}
