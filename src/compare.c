/* compare.c - the same network in several precision modes (mixprec/compare.h):
 * one mp_run per mode, the table, the ablation, the report and summary.json;
 * the reading in words is compare_reading.c's, DIR's transaction
 * compare_dir.c's. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "compare_state.h"

const char *const mp_compare_mode_ext[] = {".csv", ".csv.partial", ".json", ".ckpt", ".ckpt.rejected", ".txt"};

#define DUMP_GRADS_REFUSED "--dump-grads names one file, which each mode would write over the last's: give it to train"

/* The mode failed (for summary.json), unless it is there already. */
static void add_failed(cmp *x, const char *mode, const char *why) {
    for (int i = 0; i < x->nfailed; i++)
        if (!strcmp(x->failed[i], mode)) return;
    if (x->nfailed == MP_COMPARE_MAX) return;
    snprintf(x->failed[x->nfailed], sizeof x->failed[0], "%s", mode);
    snprintf(x->failed_why[x->nfailed++], sizeof x->failed_why[0], "%s", why);
}

static int color_taken(const mp_report_run *rr, int n, const char *c) {
    for (int i = 0; i < n; i++)
        if (strcmp(rr[i].color, c) == 0) return 1;
    return 0;
}

/* want, unless one of the first n runs has it already (a mode with switches has its mode's colour): then the first
 * colour of a spare palette that none of them has. */
static const char *distinct_color(const mp_report_run *rr, int n, const char *want) {
    static const char *const spare[] = {"#e377c2", "#17becf", "#bcbd22", "#7f7f7f", "#9467bd", "#8c564b",
                                        "#ff7f0e", "#2ca02c", "#393b79", "#8c6d31", "#843c39", "#637939"};
    _Static_assert(sizeof spare / sizeof spare[0] >= MP_COMPARE_MAX, "a spare colour for every mode");
    if (!color_taken(rr, n, want)) return want;
    for (size_t k = 0; k < sizeof spare / sizeof spare[0]; k++)
        if (!color_taken(rr, n, spare[k])) return spare[k];
    return want; /* n < MP_COMPARE_MAX, and the spares are as many: one is free */
}

/* DIR/summary.json: the command, the ablation and every mode's summary, kept
 * in res->summary too. */
static mp_status write_summary(const cmp *x, const char *out, const char *cmdline, mp_compare_result *res,
                               const mp_report_ablation *ab, int nab, const file_name *files, int nfiles) {
    const mp_compare_mode *runs = res->modes;
    const int n = res->n;
    cJSON *all = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(all, "runs");
    cJSON_AddStringToObject(all, "written_by", WRITTEN_BY); /* what old_files() trusts: a summary.json of mixprec's */
    cJSON_AddStringToObject(all, "command", cmdline);
    cJSON *fl = cJSON_AddArrayToObject(all, "files"); /* DIR's files from this run, besides summary.json */
    for (int i = 0; i < nfiles; i++) cJSON_AddItemToArray(fl, cJSON_CreateString(files[i]));
    if (x->nfailed) { /* the modes whose run failed, and why (only when some did) */
        cJSON *fa = cJSON_AddArrayToObject(all, "failed");
        for (int i = 0; i < x->nfailed; i++) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "mode", x->failed[i]);
            cJSON_AddStringToObject(o, "error", x->failed_why[i]);
            cJSON_AddItemToArray(fa, o);
        }
    }
    cJSON *abl = cJSON_AddArrayToObject(all, "ablation");
    for (int i = 0; i < nab; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "protection", ab[i].protection);
        cJSON_AddStringToObject(o, "run", runs[ab[i].run].name);
        cJSON_AddNumberToObject(o, "eval", ab[i].eval);
        cJSON_AddNumberToObject(o, "delta", ab[i].delta);
        cJSON_AddItemToArray(abl, o);
    }
    int bad = 0;
    for (int r = 0; r < n; r++) { /* the per-mode summaries, side by side */
        cJSON *j = runs[r].result.summary ? cJSON_Parse(runs[r].result.summary) : NULL;
        if (j) cJSON_AddItemToArray(arr, j);
        else bad = 1;
    }
    char path[4200];
    snprintf(path, sizeof path, "%.4000s/summary.json", out);
    char *text = mp_json_print(all, 1);
    cJSON_Delete(all);
    if (!text) return mp_error(MP_ENOMEM, "%s: out of memory", path);
    res->summary = text;
    const mp_status st = mp_write_file_atomic(path, &(mp_chunk){text, strlen(text)}, 1);
    if (st != MP_OK) return st;
    return bad ? mp_error(MP_ECORRUPT, "%s: a run's summary was missing or could not be parsed", path) : MP_OK;
}

mp_status mp_compare_say(cmp *c, mp_status st, int hint, const char *fmt, ...) {
    char msg[960];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!c->status) c->status = st, snprintf(c->msg, sizeof c->msg, "%s", msg);
    if (c->writer && c->io.err)
        fprintf(c->io.err, "%s: %s%s%s%s\n", c->io.prefix, msg, hint ? " (see '" : "", hint ? c->io.prefix : "",
                hint ? " --help')" : "");
    return st;
}

/* Each mode's files, as it writes them: in DIR/.partial. */
typedef struct {
    char csv[4200], json[4200], ckpt[4200], txt[4200];
} mode_files;

/* Whether DIR/NAMEEXT or DIR/.partial/NAMEEXT, which the comparison writes
 * (DIR/MODE.ckpt with checkpoints; the stage's it empties first), is a file
 * that a run option reads: then said, as a usage error. */
static int read_by(cmp *x, const mp_compare_spec *c, const char *name, const char *ext) {
    const mp_run_spec *base = &c->run;
    for (int in_stage = !c->checkpoints && !strcmp(ext, ".ckpt"); in_stage < 2; in_stage++) {
        char path[4200];
        path_of(path, in_stage ? x->stage : x->dir, name, ext);
        const char *reader = mp_run_reader(base, path);
        if (reader) return invalid(x, "%s is the file %s reads: an output never replaces an input", path, reader), 1;
    }
    return 0;
}

/* The files a mode's run writes in dir into opts. */
static void point_at(mp_run_spec *opts, mode_files *f, const char *dir, const char *name, int checkpoints) {
    path_of(f->csv, dir, name, ".csv"), path_of(f->json, dir, name, ".json");
    path_of(f->ckpt, dir, name, ".ckpt"), path_of(f->txt, dir, name, ".txt");
    opts->log = f->csv, opts->summary = f->json, opts->save = checkpoints ? f->ckpt : NULL;
}

/* The modes of c->precisions into each spec's precision and each mode's
 * name, and their files checked: where they end up (DIR) and where they are
 * written first (DIR/.partial). */
static mp_status modes(cmp *x, const mp_compare_spec *c, char list[LIST_MAX], mp_run_spec *opts, mode_files *files,
                       mp_compare_result *res) {
    const mp_run_spec *base = &c->run;
    if (base->precision != NULL && strcmp(base->precision, "fp32") != 0)
        return invalid(x, "the precision is set by compare itself, one run per mode of the list");
    if (base->log || base->summary || base->save)
        return invalid(x, "%s is set by compare itself", base->log ? "--log" : base->summary ? "--summary" : "--save");
    if (base->dump_grads) return invalid(x, DUMP_GRADS_REFUSED);
    if (!c->out || strlen(c->out) > 4000) return invalid(x, "--out is %s", c->out ? "too long" : "missing");
    struct stat dst;
    const char *out_pending = stat(c->out, &dst) != 0 ? c->out : NULL; /* DIR made before the first run */
    if (!out_pending && !S_ISDIR(dst.st_mode)) return fail(x, MP_EIO, "--out %s is not a directory", c->out);
    x->dir = c->out;
    snprintf(x->stage, sizeof x->stage, "%s/" STAGE, c->out);
    const int staged = lstat(x->stage, &dst) == 0;
    if (staged && !S_ISDIR(dst.st_mode))
        return fail(x, MP_EIO, "%s is not a directory: compare writes its files there before they replace DIR's",
                    x->stage);
    const char *stage_pending = staged ? NULL : x->stage;
    if (read_by(x, c, "report", ".html") || read_by(x, c, "summary", ".json")) return x->status;
    if (c->precisions && strlen(c->precisions) >= LIST_MAX)
        return invalid(x, "--precisions is %zu bytes long: at most %d modes of up to 63 bytes each",
                       strlen(c->precisions), MP_COMPARE_MAX);
    snprintf(list, LIST_MAX, "%s", c->precisions ? c->precisions : "fp32,fp16,fp16-dynamic,bf16");
    const size_t ll = strlen(list);
    if (ll == 0 || list[0] == ',' || list[ll - 1] == ',' || strstr(list, ",,"))
        return invalid(x, "--precisions %s has an empty entry", list);
    int n = 0;
    /* the loss-scaling options serve the scaled modes of the list: the others run without them */
    int any_scaled = 0;
    char scan[LIST_MAX], *sv = NULL;
    snprintf(scan, sizeof scan, "%s", list);
    for (char *tok = strtok_r(scan, ",", &sv); tok; tok = strtok_r(NULL, ",", &sv)) {
        mp_precision q;
        any_scaled |= mp_precision_parse(tok, &q) == MP_OK && q.scaling != MP_SCALING_NONE;
    }
    char *save = NULL;
    for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (n == MP_COMPARE_MAX) return invalid(x, "at most %d precisions", MP_COMPARE_MAX);
        opts[n] = *base;
        opts[n].precision = tok;
        if (opts[n].hist_every < 0) /* the default: the MLP's histograms every 10 steps */
            opts[n].hist_every = mp_model_row_of(base)->histogram ? 10 : 0;
        mp_precision p;
        if (mp_precision_parse(tok, &p) != MP_OK) return invalid(x, "%s", mp_last_error());
        if (any_scaled && p.scaling == MP_SCALING_NONE) opts[n].scaler = mp_scaler_defaults();
        const char *name = p.label; /* tok with the switches applied */
        for (int e = 0; e < MODE_EXT; e++)
            if (read_by(x, c, name, mp_compare_mode_ext[e])) return x->status;
        point_at(&opts[n], &files[n], c->out, name, c->checkpoints);
        mp_status st = mp_run_resolve(&opts[n], &p);
        if (st == MP_OK) st = mp_run_check_files_in(&opts[n], out_pending);
        point_at(&opts[n], &files[n], x->stage, name, c->checkpoints);
        opts[n].outputs_shown_in = c->out; /* its messages name the files where the commit puts them */
        if (st == MP_OK) st = mp_run_check_files_in(&opts[n], stage_pending);
        if (st == MP_EINVAL) return invalid(x, "%s: %s", tok, mp_last_error());
        if (st != MP_OK) return fail(x, st, "%s", mp_last_error());
        for (int k = 0; k < n; k++)
            if (!strcmp(res->modes[k].name, name)) return invalid(x, "%s is in --precisions twice", name);
        snprintf(res->modes[n].name, sizeof res->modes[n].name, "%s", name);
        n++;
    }
    if (n == 0) return invalid(x, "--precisions is empty");
    res->n = n;
    return MP_OK;
}

/* Each mode's run, its output into DIR/MODE.txt and its files beside it; a
 * line on out per mode. res->n becomes the number that ran. */
static void run_modes(cmp *x, const mp_compare_spec *c, mp_run_spec *opts, const mode_files *files,
                      mp_compare_result *res) {
    mp_compare_mode *runs = res->modes;
    const mp_run_ranks *ranks = c->run.ranks;
    FILE *out = x->out;
    int namew = 14, done = 0; /* the mode column fits the longest label */
    for (int r = 0; r < res->n; r++) namew = (int)strlen(runs[r].name) > namew ? (int)strlen(runs[r].name) : namew;
    for (int r = 0; r < res->n; r++) {
        const char *txt = files[r].txt;
        char shown[4200]; /* where the console says the output is: where it ends up */
        path_of(shown, c->out, runs[r].name, ".txt");
        if (out) fprintf(out, "  %-*s ...", namew, runs[r].name), fflush(out);
        /* created exclusively (discard emptied the stage of its name): never through a link */
        const int fd = x->writer ? mp_create_excl(txt) : open("/dev/null", O_WRONLY | O_CLOEXEC);
        FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
        if (fd >= 0 && !f) close(fd);
        int first;
        if (ranks && ranks->size > 1 ? ranks->agree(ranks->ctx, !f, &first) : !f) {
            if (f) fclose(f);
            if (out) fputc('\n', out);
            fail(x, MP_EIO, "%s: cannot create (%s)", txt, strerror(errno));
            break;
        }
        const double t0 = mp_now();
        const mp_run_io io = {.out = f, .err = x->io.err, .prefix = x->io.prefix};
        const mp_status st = mp_run(&opts[r], &io, &runs[r].result);
        if (st != MP_OK && st != MP_EOVERFLOW) add_failed(x, runs[r].name, mp_last_error()); /* for summary.json */
        const int wbad = fclose(f) != 0, trained = runs[r].result.nsteps > 0;
        if (x->writer && (wbad || !trained)) unlink(txt); /* nothing to show, or not whole */
        if (out)
            fprintf(out, " %s in %.1f s (log: %s)\n",
                    st == MP_OK                          ? "done"
                    : runs[r].result.invalid || !trained ? "failed"
                                                         : "stopped early",
                    mp_now() - t0, shown);
        res->invalid |= runs[r].result.invalid;
        if (st != MP_OK && st != MP_EOVERFLOW && runs[r].result.nsteps > 0 && !x->status) /* said by mp_run */
            x->status = st, snprintf(x->msg, sizeof x->msg, "%s: %s", runs[r].name, mp_last_error());
        if (wbad && x->writer) {
            char why[4300];
            snprintf(why, sizeof why, "%s: cannot write", shown);
            fail(x, MP_EIO, "%s", why);
            add_failed(x, runs[r].name, why);
        }
        if (st != MP_OK && runs[r].result.nsteps == 0) { /* nothing to show; mp_run said why, in one line */
            if (!x->status) x->status = st, snprintf(x->msg, sizeof x->msg, "%s: %s", runs[r].name, mp_last_error());
            mp_run_result_free(&runs[r].result);
            break;
        }
        done++;
    }
    res->n = done;
}

/* The warnings a comparison adds: a mode whose evaluation is off fp32's. */
static void warn_against_fp32(mp_compare_result *res) {
    const mp_run_result *f32 = mp_compare_find(res->modes, res->n, "fp32");
    for (int r = 0; f32 && r < res->n; r++) {
        mp_run_result *u = &res->modes[r].result;
        const int gpt = mp_compare_language(u);
        if (u == f32 || u->nwarnings >= MP_RUN_WARNINGS) continue;
        if (gpt && u->eval_loss > f32->eval_loss * 1.02)
            snprintf(u->warnings[u->nwarnings++], sizeof u->warnings[0],
                     "validation loss %.4f is %.2f%% above the fp32 run's %.4f", u->eval_loss,
                     100 * (u->eval_loss / f32->eval_loss - 1), f32->eval_loss);
        else if (!gpt && u->eval_accuracy < f32->eval_accuracy - 0.005)
            snprintf(u->warnings[u->nwarnings++], sizeof u->warnings[0],
                     "test accuracy %.2f%% is %.2f points below the fp32 run's %.2f%%", 100 * u->eval_accuracy,
                     100 * (f32->eval_accuracy - u->eval_accuracy), 100 * f32->eval_accuracy);
    }
}

/* The summary table and the warnings. */
static void print_table(FILE *out, const mp_compare_result *res) {
    const mp_compare_mode *runs = res->modes;
    const int n = res->n, gpt = mp_compare_language(&runs[0].result);
    const mp_run_result *f32 = mp_compare_find(runs, n, "fp32");
    int namew = 14;
    for (int r = 0; r < n; r++) namew = (int)strlen(runs[r].name) > namew ? (int)strlen(runs[r].name) : namew;
    fprintf(out, "\n%-*s %10s %9s %8s %10s %11s %11s %11s %11s %9s %8s %7s %9s\n", namew, "mode", "train loss",
            gpt ? "val loss" : "test acc", "skipped", "final scale", "underflow", "grads lost", "dead grads",
            "upd. lost", "ms/step", "memory", "B/param", "speed-up");
    for (int r = 0; r < n; r++) {
        const mp_run_result *u = &runs[r].result;
        char sp[16] = "-", ev[16], tl[16];
        if (f32 && u->ms_per_step > 0) snprintf(sp, sizeof sp, "%.2fx", f32->ms_per_step / u->ms_per_step);
        if (gpt) snprintf(ev, sizeof ev, isfinite(u->eval_loss) ? "%.4f" : "NaN/inf", u->eval_loss);
        else snprintf(ev, sizeof ev, "%.2f%%", 100 * u->eval_accuracy);
        snprintf(tl, sizeof tl, isfinite(u->last_loss) ? "%.4f" : "NaN/inf", u->last_loss);
        fprintf(out, "%-*s %10s %9s %8ld %10g %10.4f%% %10.4f%% %10.2f%% %10.4f%% %9.1f %5.0f MiB %7.2f %9s\n", namew,
                runs[r].name, tl, ev, u->skipped_total, u->final_scale, 100 * u->underflow, 100 * u->lost_gradients,
                100 * u->dead_gradients, 100 * u->lost_updates, u->ms_per_step, u->memory_mib,
                mp_bytes_per_param(&u->bytes), sp);
    }
    for (int r = 0; r < n; r++)
        for (int k = 0; k < runs[r].result.nwarnings; k++)
            fprintf(out, "warning: %s: %s\n", runs[r].name, runs[r].result.warnings[k]);
}

/* The report's view of the runs (pointing into res): rr, rq and warn_ptr are the caller's. */
typedef struct {
    mp_report_run rr[MP_COMPARE_MAX];
    mp_report_quant rq[MP_COMPARE_MAX];
    const char *warn_ptr[MP_COMPARE_MAX][MP_RUN_WARNINGS];
} report_runs;

static mp_report report_of(report_runs *v, const mp_compare_result *res, const char *command,
                           const char *reading_text) {
    const mp_compare_mode *runs = res->modes;
    const int n = res->n, gpt = mp_compare_language(&runs[0].result);
    int baseline = -1;
    for (int r = 0; r < n; r++) {
        const mp_run_result *u = &runs[r].result;
        const mp_precision *p = &u->precision;
        for (int k = 0; k < u->nwarnings; k++) v->warn_ptr[r][k] = u->warnings[k];
        if (p->compute == MP_F32 && baseline < 0) baseline = r;
        mp_report_run *rr = &v->rr[r];
        *rr = (mp_report_run){.name = runs[r].name,
                              .format = u->format,
                              .color = p->color,
                              .nsteps = u->nsteps,
                              .loss = u->loss,
                              .scale = u->scale,
                              .skipped = u->skipped,
                              .nlayers = u->ntensors,
                              .layer_names = (const char(*)[64])u->tensor_names,
                              .layer_underflow = u->tensor_underflow,
                              .eval = gpt ? u->eval_loss : u->eval_accuracy,
                              .last_loss = u->last_loss,
                              .underflow = u->underflow,
                              .lost_gradients = u->lost_gradients,
                              .dead_gradients = u->dead_gradients,
                              .lost_updates = u->lost_updates,
                              .ms_per_step = u->ms_per_step,
                              .memory_mib = u->memory_mib,
                              .bytes_per_param = mp_bytes_per_param(&u->bytes),
                              .final_scale = u->final_scale,
                              .skipped_total = u->skipped_total,
                              .has_hist = u->has_hist,
                              .hist_lo = MP_RUN_HIST_LO,
                              .hist_zeros = u->hist_zeros,
                              .hist_scale = u->hist_scale,
                              .warnings = v->warn_ptr[r],
                              .nwarnings = u->nwarnings,
                              .tensors = u->tensor_totals,
                              .headroom_format = u->headroom_format,
                              .skips = u->skips,
                              .nskips = u->nskips};
        memcpy(rr->hist, u->hist, sizeof rr->hist);
        rr->neval = u->neval, rr->eval_steps = u->eval_steps, rr->eval_losses = u->eval_losses;
        rr->sample = u->sample, rr->sample_printable = u->sample_printable, rr->sample_words = u->sample_words;
        rr->precision = p;
        rr->color = distinct_color(v->rr, r, p->color);
        v->rq[r] = (mp_report_quant){u->nquant,
                                     (const char(*)[64])u->quant_names,
                                     u->quant_totals,
                                     u->quant_scale,
                                     u->quant_saturated,
                                     u->quant_flushed,
                                     u->nassigned,
                                     (const char(*)[64])u->assigned_names,
                                     (const char(*)[16])u->assigned_recipes};
        rr->quant = u->nquant ? &v->rq[r] : NULL;
    }
    const mp_format_info *h = mp_format(MP_F16);
    return (mp_report){.title = "mixprec: the same network in several precisions",
                       .command = command,
                       .reading = reading_text,
                       .fp16_min_subnormal = h->min_subnormal,
                       .fp16_min_normal = h->min_normal,
                       .fp16_max = h->max,
                       .eval_name = gpt ? "validation loss" : "test accuracy",
                       .eval_percent = !gpt,
                       .eval_loss_name = gpt ? "validation loss" : "test loss",
                       .baseline = baseline,
                       .runs = v->rr,
                       .nruns = n};
}

/* The table, the ablation, the reading, the report and summary.json (rank
 * 0), written into DIR/.partial and moved into DIR when both are whole. */
static void conclude(cmp *x, const mp_compare_spec *c, mp_compare_result *res) {
    FILE *const out = x->out;
    warn_against_fp32(res);
    if (out) print_table(out, res);
    report_runs *view = calloc(1, sizeof *view);
    char *text = calloc(1, 8192);
    file_name *names = calloc(MAX_FILES, sizeof *names);
    if (!view || !text || !names) {
        free(view), free(text), free(names);
        fail(x, MP_ENOMEM, "out of memory");
        return;
    }
    const char *command = c->command ? c->command : "mixprec compare";
    const mp_report rep = report_of(view, res, command, text);
    mp_report_ablation ab[MP_COMPARE_MAX];
    int ref;
    const int nab = mp_report_ablation_rows(&rep, ab, MP_COMPARE_MAX, &ref);
    if (nab && out) mp_compare_print_ablation(out, &rep, ab, nab, ref);
    mp_compare_reading(text, 8192, res->modes, res->n, c->run.model, &rep, ab, nab, ref);
    res->reading = text;
    if (out) fprintf(out, "\n%s\n", text);
    char html[4200];
    path_of(html, x->stage, "report", ".html");
    char why[1024] = "";
    const int report_ok = mp_report_write(html, &rep) == MP_OK;
    if (!report_ok) snprintf(why, sizeof why, "%s", mp_last_error());
    int n = mp_compare_staged_files(x, res, report_ok, names);
    char worse[512];
    const int nworse = c->checkpoints ? mp_compare_keep_checkpoints(x, res, names, &n, worse, sizeof worse) : 0;
    const mp_status st = write_summary(x, x->stage, command, res, ab, nab, names, n);
    if (st != MP_OK && report_ok) snprintf(why, sizeof why, "%s", mp_last_error());
    if (report_ok && st == MP_OK) {
        const mp_status cs = mp_compare_commit(x, &c->run, names, n);
        if (cs == MP_OK && out) fprintf(out, "\nreport: %.4000s/report.html\n", c->out);
        if (cs == MP_OK && nworse && !x->status) /* as train's --save: a state that ended worse fails the command */
            fail(x, MP_EOVERFLOW,
                 "--checkpoints: %s ended worse: %s in %s, beside any earlier comparison's "
                 "checkpoint, which is kept",
                 worse, nworse > 1 ? "their states are MODE.ckpt.rejected" : "its state is MODE.ckpt.rejected", c->out);
    } else { /* the write's own "the previous file is untouched" is about DIR/.partial: DIR is the point */
        char *tail = strstr(why, "; the previous file is untouched");
        if (tail) *tail = 0;
        fail(x, MP_EIO, "%s: %s is as it was, this comparison's files are in %s", why, c->out, x->stage);
    }
    free(view), free(names);
}

mp_status mp_compare(const mp_compare_spec *c, const mp_run_io *io, mp_compare_result *res) {
    if (res) memset(res, 0, sizeof *res);
    if (!c || !res) return mp_error(MP_EINVAL, "mp_compare: NULL argument");
    cmp x = {.writer = !c->run.ranks || c->run.ranks->rank == 0};
    if (io) x.io = *io;
    if (!x.io.prefix) x.io.prefix = "mixprec";
    x.out = x.writer ? x.io.out : NULL;
    char list[LIST_MAX];
    mp_run_spec opts[MP_COMPARE_MAX];
    mode_files *files = calloc(MP_COMPARE_MAX, sizeof *files);
    if (!files) return mp_error(MP_ENOMEM, "mp_compare: out of memory");
    mp_status st = modes(&x, c, list, opts, files, res);
    const mp_run_ranks *ranks = c->run.ranks;
    int first;
    if (ranks && ranks->size > 1) { /* rank 0 alone checks DIR: every rank stops with it, with its status */
        const mp_status agreed = (mp_status)ranks->agree(ranks->ctx, (int)st, &first);
        if (st == MP_OK && agreed != MP_OK)
            st = agreed, snprintf(x.msg, sizeof x.msg, "rank %d refused the comparison", first);
    }
    if (st == MP_OK) st = mp_compare_make_dirs(&x, c, res);
    if (st != MP_OK) {
        mp_compare_release_dirs(&x, 1);
        return free(files), res->n = 0, res->invalid = st == MP_EINVAL, mp_error(st, "%s", x.msg);
    }
    /* with ranks the modes train one after the other on every rank; rank 0 alone writes DIR */
    const int nmodes = res->n;
    run_modes(&x, c, opts, files, res);
    free(files);
    if (res->n > 0 && x.writer) conclude(&x, c, res);
    else if (x.writer) mp_compare_discard(&x, res, nmodes); /* no mode trained: DIR as it was */
    mp_compare_release_dirs(&x, res->n == 0);
    if (res->n == 0 && !x.status) x.status = MP_EIO, snprintf(x.msg, sizeof x.msg, "no mode ran");
    return x.status ? mp_error(x.status, "%s", x.msg) : MP_OK;
}

void mp_compare_result_free(mp_compare_result *r) {
    if (!r) return;
    for (int i = 0; i < MP_COMPARE_MAX; i++) mp_run_result_free(&r->modes[i].result);
    free(r->summary), free(r->reading);
    memset(r, 0, sizeof *r);
}

void mp_compare_defaults(mp_compare_spec *c) {
    if (!c) return;
    memset(c, 0, sizeof *c);
    mp_run_defaults(&c->run);
    c->run.precision = NULL, c->run.hist_every = -1, c->run.sample_bytes = 300;
    c->precisions = "fp32,fp16,fp16-dynamic,bf16", c->out = "mixprec-compare";
}

mp_status mp_compare_option(mp_compare_spec *c, const char *name, const char *value) {
    if (!c || !name) return mp_error(MP_EINVAL, "mp_compare_option: NULL argument");
    if (!strcmp(name, "precisions") || !strcmp(name, "out")) {
        if (!value) return mp_error(MP_EINVAL, "option --%s needs a value", name);
        *(!strcmp(name, "out") ? &c->out : &c->precisions) = value;
        return MP_OK;
    }
    if (!strcmp(name, "checkpoints")) {
        if (value) return mp_error(MP_EINVAL, "--checkpoints takes no value");
        c->checkpoints = 1;
        return MP_OK;
    }
    if (!strcmp(name, "precision") || !strcmp(name, "log") || !strcmp(name, "summary") || !strcmp(name, "save"))
        return mp_error(MP_EINVAL, "--%s is set by compare itself", name);
    if (!strcmp(name, "dump-grads")) return mp_error(MP_EINVAL, DUMP_GRADS_REFUSED);
    return mp_run_option(&c->run, name, value);
}

size_t mp_compare_spec_size(void) { return sizeof(mp_compare_spec); }

size_t mp_compare_result_size(void) { return sizeof(mp_compare_result); }

const char *mp_compare_result_summary(const mp_compare_result *r) { return r ? r->summary : NULL; }

const char *mp_compare_result_reading(const mp_compare_result *r) { return r ? r->reading : NULL; }
