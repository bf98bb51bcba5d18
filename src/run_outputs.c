/* run_outputs.c - the files a run writes at its end: the checkpoint (never
 * over a better one), the summary, the gradients, and one line for those
 * that could not be written. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run_state.h"

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
        return snprintf(why, cap, "the run ended with a %s loss of %s",
                        isfinite(r->last_loss) ? "evaluation" : "training",
                        isnan(isfinite(r->last_loss) ? r->eval_loss : (double)r->last_loss) ? "NaN" : "inf"),
               1;
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
            mp_run_output_failed(s, e, mp_last_error());
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
        snprintf(msg, sizeof msg,
                 "%.300s: %s, so it is not written over; this run's state is not written "
                 "either (%.600s)",
                 name, why, mp_last_error());
    mp_run_output_failed(s, MP_EOVERFLOW, msg);
    s->wrote[2] = -1;
}

/* The outputs: the checkpoint first (the training is in it), then the summary
 * and the gradients; one that cannot be written (one line) does not keep the
 * others from being written (s->out_failed). */
void mp_run_write_outputs(run_state *s) {
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
        cJSON *j = mp_run_summary(s);
        r->summary = j ? mp_json_print(j, 1) : NULL;
        cJSON_Delete(j);
        e = !r->summary  ? mp_error(MP_ENOMEM, "%s: out of memory", o->summary ? o->summary : "the summary")
            : o->summary ? mp_write_file_atomic(o->summary, &(mp_chunk){r->summary, strlen(r->summary)}, 1)
                         : MP_OK;
        if (e != MP_OK && (o->summary || !s->status)) mp_run_output_failed(s, e, mp_last_error());
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
        if (e != MP_OK) mp_run_output_failed(s, e, gt ? mp_last_error() : "out of memory");
        else OUT("gradients of step %ld written to %s\n", mp_trainer_step_count(s->tr), o->dump_grads);
        s->wrote[3] = e == MP_OK ? 1 : -1;
    }
}

/* After a run that trained to its end and could not write every output at
 * its end: one line, why each of those was not written (each as it was), and
 * the outputs that were. */
void mp_run_say_outputs(const run_state *s) {
    if (!s->out_why[0] || !s->writer || !s->io.err) return;
    const char *const opt[4] = {"--log", "--summary", "--save", "--dump-grads"};
    const char *const path[4] = {s->o.log, s->o.summary, s->o.save, s->o.dump_grads};
    char written[1200] = "";
    size_t n = 0;
    for (int k = 0; k < 4; k++)
        if (s->wrote[k] > 0 && n < sizeof written) {
            char name[4200];
            n += (size_t)snprintf(written + n, sizeof written - n, "%s%.500s",
                                  n ? ", " : "; written: ", shown(s, opt[k], path[k], name, sizeof name));
        }
    char rank[32] = "";
    if (size_of(s) > 1 && rank_of(s) > 0) snprintf(rank, sizeof rank, "rank %d: ", rank_of(s));
    fprintf(s->io.err, "%s: %s%s%s\n", s->io.prefix, rank, s->out_why, written);
}
