/* compare.c - the same network in several precision modes (mixprec/compare.h):
 * one mp_run per mode, the table, the ablation, the reading in words, the
 * report and summary.json. */
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

#include "models.h"
#include "mixprec/compare.h"

typedef struct cmp cmp;

/* A comparison under way: where it prints, and its first failure. */
struct cmp {
    mp_run_io io;
    FILE *out;       /* io.out, or NULL */
    int writer;      /* rank 0: writes DIR and prints the table */
    mp_status status;
    char msg[960];
    int nfailed;                           /* modes whose run failed (an early stop is no failure) */
    char failed[MP_COMPARE_MAX][64], failed_why[MP_COMPARE_MAX][512];
    const char *dir;  /* DIR */
    char stage[4200]; /* DIR/.partial, where the files are written before they replace DIR's */
    char lock[4200];  /* DIR/.partial/compare: its lock (mp_output_lock) is held while DIR is written */
    int made_dir;     /* DIR did not exist before */
};

/* A comparison writes its files into DIR/.partial and moves them into DIR
 * together once its report and summary are whole (commit). Its summary.json
 * says that mixprec wrote it (WRITTEN_BY) and names the files that came with
 * it: those alone are ever replaced or removed. The commit first renames
 * DIR/.partial/summary.json to DIR/.partial/.commit (from then on the
 * comparison is decided: .commit names the new files, in DIR or still in
 * DIR/.partial), moves the files, removes the old summary's files that the new
 * one does not name, and renames .commit to DIR/summary.json last. A
 * comparison cut anywhere in between leaves .commit, and the next comparison
 * into DIR completes it before it starts. What a mode writes, as suffixes of
 * its label: */
#define STAGE ".partial"
#define DECIDED ".commit"
#define WRITTEN_BY "mixprec compare"
#define DUMP_GRADS_REFUSED "--dump-grads names one file, which each mode would write over the last's: give it to train"
static const char *const mode_ext[] = {".csv", ".csv.partial", ".json", ".ckpt", ".ckpt.rejected", ".txt"};
enum {
    MODE_EXT = 6,
    MAX_FILES = MP_COMPARE_MAX * MODE_EXT + 1,
    LIST_MAX = MP_COMPARE_MAX * 64 + 1 /* --precisions: as many labels of up to 63 bytes, each with its comma */
};
typedef char file_name[80]; /* a file of DIR, by name */

static void path_of(char out[4200], const char *dir, const char *name, const char *ext) {
    snprintf(out, 4200, "%.4000s/%.63s%s", dir, name, ext);
}

/* The mode failed (for summary.json), unless it is there already. */
static void add_failed(cmp *x, const char *mode, const char *why) {
    for (int i = 0; i < x->nfailed; i++)
        if (!strcmp(x->failed[i], mode)) return;
    if (x->nfailed == MP_COMPARE_MAX) return;
    snprintf(x->failed[x->nfailed], sizeof x->failed[0], "%s", mode);
    snprintf(x->failed_why[x->nfailed++], sizeof x->failed_why[0], "%s", why);
}



static const mp_run_result *find(const mp_compare_mode *runs, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(runs[i].name, name) == 0) return &runs[i].result;
    return NULL;
}

static double mean_tensor(const mp_run_result *r, int l) {
    double m = 0;
    for (long s = 0; s < r->nsteps; s++) m += r->tensor_underflow[(size_t)s * (size_t)r->ntensors + (size_t)l];
    return r->nsteps ? m / (double)r->nsteps : 0;
}

/* Whether r is a language model's run (its row reports a validation loss), not a classifier's. */
static int language(const mp_run_result *r) {
    return mp_model_row_kind(r->model_kind)->report == MP_REPORT_LANGUAGE;
}

/* The evaluation figure in words: "87.91% test accuracy" or "validation loss 1.6234". */
static const char *eval_text(char *buf, size_t cap, const mp_run_result *r) {
    if (language(r) && !isfinite(r->eval_loss)) snprintf(buf, cap, "a validation loss of NaN/inf");
    else if (language(r)) snprintf(buf, cap, "validation loss %.4f", r->eval_loss);
    else snprintf(buf, cap, "%.2f%% test accuracy", 100 * r->eval_accuracy);
    return buf;
}

/* How far r is from the baseline b: "0.25 points below" or "0.8% above". */
static const char *eval_diff(char *buf, size_t cap, const mp_run_result *r, const mp_run_result *b) {
    if (language(r)) {
        const double rel = 100 * (r->eval_loss - b->eval_loss) / b->eval_loss;
        snprintf(buf, cap, "%.2f%% %s", fabs(rel), rel > 0 ? "above (worse than)" : "below (better than)");
    } else {
        const double d = 100 * (r->eval_accuracy - b->eval_accuracy);
        snprintf(buf, cap, "%.2f points %s", fabs(d), d >= 0 ? "above" : "below");
    }
    return buf;
}

static int color_taken(const mp_report_run *rr, int n, const char *c) {
    for (int i = 0; i < n; i++)
        if (strcmp(rr[i].color, c) == 0) return 1;
    return 0;
}

/* want, unless one of the first n runs has it already (a mode with switches has its mode's colour): then the first
 * colour of a spare palette that none of them has. */
static const char *distinct_color(const mp_report_run *rr, int n, const char *want) {
    static const char *const spare[] = {"#e377c2", "#17becf", "#bcbd22", "#7f7f7f", "#9467bd", "#8c564b", "#ff7f0e",
                                        "#2ca02c", "#393b79", "#8c6d31", "#843c39", "#637939"};
    _Static_assert(sizeof spare / sizeof spare[0] >= MP_COMPARE_MAX, "a spare colour for every mode");
    if (!color_taken(rr, n, want)) return want;
    for (size_t k = 0; k < sizeof spare / sizeof spare[0]; k++)
        if (!color_taken(rr, n, spare[k])) return spare[k];
    return want; /* n < MP_COMPARE_MAX, and the spares are as many: one is free */
}

/* An eval figure as the tables show it: "87.91%", "1.6234" or "not finite". */
static const char *eval_figure(char *buf, size_t cap, const mp_report *rep, double v) {
    if (!isfinite(v)) snprintf(buf, cap, "not finite");
    else if (rep->eval_percent) snprintf(buf, cap, "%.2f%%", 100 * v);
    else snprintf(buf, cap, "%.4f", v);
    return buf;
}

/* The rows of "what each protection buys" in words, each with only its measured difference: under 0.5% of the
 * reference's figure it says there is no measurable difference. Returns the length it needed (as snprintf). */
static size_t reading_ablation(char *out, size_t cap, const mp_report *rep, const mp_report_ablation *ab, int nab,
                               int ref) {
    const mp_report_run *b = &rep->runs[ref];
    const int higher_is_worse = !rep->eval_percent; /* a loss; else an accuracy */
    char e1[32], e2[32];
    size_t k = 0;
#define ADD(...) k += (size_t)snprintf(out + (k < cap ? k : cap), k < cap ? cap - k : 0, __VA_ARGS__)
    ADD("What each protection buys, measured against fp16-dynamic (every protection on: %s %s, %ld skipped step%s):",
        rep->eval_name, eval_figure(e1, sizeof e1, rep, b->eval), b->skipped_total, b->skipped_total == 1 ? "" : "s");
    for (int i = 0; i < nab; i++) {
        const mp_report_run *u = &rep->runs[ab[i].run];
        const double rel = b->eval != 0 ? fabs(ab[i].delta / b->eval) : INFINITY;
        ADD("%s without %s (%s), %s %s", i ? ";" : "", ab[i].protection, u->name, rep->eval_name,
            eval_figure(e1, sizeof e1, rep, ab[i].eval));
        if (!isfinite(ab[i].delta))
            ADD(" (inf or NaN)");
        else if (rel < 0.005)
            ADD(", no measurable difference in this run (%.2f%% of the reference's figure, under 0.5%%)", 100 * rel);
        else if (rep->eval_percent)
            ADD(", %.2f points %s", 100 * fabs(ab[i].delta), ab[i].delta < 0 ? "lower (worse)" : "higher (better)");
        else
            ADD(", %s (%.2f%%) %s", eval_figure(e2, sizeof e2, rep, fabs(ab[i].delta)), 100 * rel,
                (ab[i].delta > 0) == higher_is_worse ? "higher (worse)" : "lower (better)");
        ADD(", %ld skipped step%s", u->skipped_total, u->skipped_total == 1 ? "" : "s");
    }
    ADD(".\n\n");
#undef ADD
    return k;
}

/* "What each protection buys" as a console table. */
static void print_ablation(FILE *out, const mp_report *rep, const mp_report_ablation *ab, int nab, int ref) {
    char e[32];
    fprintf(out, "\nwhat each protection buys, against fp16-dynamic (%s %s, %ld skipped):\n", rep->eval_name,
           eval_figure(e, sizeof e, rep, rep->runs[ref].eval), rep->runs[ref].skipped_total);
    fprintf(out, "%-20s %-36s %10s %18s %8s\n", "protection removed", "run", rep->eval_percent ? "test acc" : "val loss",
           "difference", "skipped");
    for (int i = 0; i < nab; i++) {
        const mp_report_run *u = &rep->runs[ab[i].run];
        char d[32];
        if (!isfinite(ab[i].delta)) snprintf(d, sizeof d, "-");
        else if (rep->eval_percent) snprintf(d, sizeof d, "%+.2f points", 100 * ab[i].delta);
        else snprintf(d, sizeof d, "%+.4f (%+.2f%%)", ab[i].delta, 100 * ab[i].delta / rep->runs[ref].eval);
        fprintf(out, "%-20s %-36s %10s %18s %8ld\n", ab[i].protection, u->name, eval_figure(e, sizeof e, rep, ab[i].eval), d,
               u->skipped_total);
    }
}

/* What half precision bought in time on this CPU, and why: bf16 GEMMs run on
 * the CPU's bf16 units where it has them (vdpbf16ps, AMX tiles), widened to
 * fp32 for the FMA units where not; fp16 is widened on every CPU (mixprec
 * has no AVX512_FP16 or AMX-FP16 kernels), so it saves memory, not time. */
static void speed(char *out, size_t cap, size_t *at, const mp_run_result *f32, const mp_run_result *bf,
                  const mp_run_result *h, const char *hname) {
    size_t k = *at;
    const mp_isa isa = mp_cpu_isa();
#define ADD(...) k += (size_t)snprintf(out + k, k < cap ? cap - k : 0, __VA_ARGS__)
    if (bf && bf->ms_per_step > 0) {
        ADD("Speed on this CPU (path %s): a bf16 step took %.1f ms against %.1f ms in fp32 (%.2fx as fast, medians) "
            "and held %.0f MiB against %.0f. ",
            mp_isa_name(isa), bf->ms_per_step, f32->ms_per_step, f32->ms_per_step / bf->ms_per_step, bf->memory_mib,
            f32->memory_mib);
        if (isa >= MP_ISA_AMX) ADD("Its matrix multiplies read bf16 into the CPU's AMX tiles (TDPBF16PS).");
        else if (isa >= MP_ISA_AVX512_BF16)
            ADD("Its matrix multiplies read bf16 and use the CPU's bf16 dot-product instruction (vdpbf16ps, twice "
                "the values of an fp32 FMA per instruction); what is left of the step (softmax, layer norm, GELU, "
                "the optimizer) computes in fp32 in both modes.");
        else
            ADD("This CPU has no bf16 arithmetic units: bf16 values are widened to fp32 for its FMA units, so bf16 "
                "saves memory and memory traffic, not arithmetic.");
    }
    if (h && h->ms_per_step > 0) {
        const mp_cpu_feature_set *f = mp_cpu_features();
        ADD("%s%s: %.1f ms a step against fp32's %.1f (%.2fx as fast). mixprec widens fp16 to fp32 for the FMA units "
            "on every CPU%s, so fp16 saves memory, not time.",
            k > *at ? "\n\n" : "", hname, h->ms_per_step, f32->ms_per_step, f32->ms_per_step / h->ms_per_step,
            f->avx512_fp16 || f->amx_fp16 ? " (it has no AVX512_FP16 or AMX-FP16 kernels, which this CPU would run)"
                                          : " (this one has no fp16 arithmetic units)");
    }
#undef ADD
    *at = k;
}

/* The plain-language reading, from the numbers. */
static void reading(char *out, size_t cap, const mp_compare_mode *runs, int n, const char *model, const mp_report *rep,
                    const mp_report_ablation *ab, int nab, int ref) {
    const mp_run_result *f32 = find(runs, n, "fp32"), *f16 = find(runs, n, "fp16"), *dyn = find(runs, n, "fp16-dynamic");
    const mp_run_result *bf = find(runs, n, "bf16"), *naive = find(runs, n, "fp16-naive");
    char e1[64], e2[64], e3[64];
    size_t k = 0;
#define ADD(...) k += (size_t)snprintf(out + k, k < cap ? cap - k : 0, __VA_ARGS__)
    ADD("Every mode trained the same network (%s) from the same initial weights on the same batches. Gradients are "
        "computed in the mode's format; fp16 can only hold magnitudes between 6.0e-8 (its smallest subnormal) and "
        "65504, and anything smaller than half of 6.0e-8 is stored as exactly zero: that gradient is lost.\n\n",
        model);
    if (f16) {
        int worst = 0;
        for (int l = 1; l < f16->ntensors; l++) worst = mean_tensor(f16, l) > mean_tensor(f16, worst) ? l : worst;
        ADD("fp16 without loss scaling: %.2f%% of the gradient values it stored became zero (%.2f%% in %s). ",
            100 * f16->underflow, f16->ntensors ? 100 * mean_tensor(f16, worst) : 0.0,
            f16->ntensors ? f16->tensor_names[worst] : "-");
        if (f32) {
            const int worse = language(f16) ? f16->eval_loss > f32->eval_loss * 1.005
                                                                  : f16->eval_accuracy < f32->eval_accuracy - 0.005;
            if (worse)
                ADD("It ended at %s, %s fp32 (%s).\n\n", eval_text(e1, sizeof e1, f16),
                    eval_diff(e2, sizeof e2, f16, f32), eval_text(e3, sizeof e3, f32));
            else
                ADD("It still ended at %s against fp32's %s: in this run the values lost were too few, or too small, "
                    "to change the result, but they are lost all the same and the share grows as gradients shrink "
                    "(deeper networks, larger batches, later in training).\n\n",
                    eval_text(e1, sizeof e1, f16), eval_text(e2, sizeof e2, f32));
        }
    }
    if (dyn) {
        ADD("fp16-dynamic multiplies the loss by a scale S before the backward pass, so every gradient is S times larger "
            "and lands inside fp16's range, then divides by S in fp32 before the update (for a power of two this is "
            "exact). It ended with S = %g after %ld skipped step%s (a step is skipped and S halved when the scaled "
            "gradients overflow to inf; S doubles again after a run of clean steps). Only %.4f%% of the gradient values "
            "became zero",
            dyn->final_scale, dyn->skipped_total, dyn->skipped_total == 1 ? "" : "s", 100 * dyn->underflow);
        if (f16 && dyn->underflow > 0) ADD(", %.0f times fewer than without scaling", f16->underflow / dyn->underflow);
        else if (f16) ADD(" (none at all, against %.2f%% without scaling)", 100 * f16->underflow);
        if (f32) ADD("; %s, %s fp32's", eval_text(e1, sizeof e1, dyn), eval_diff(e2, sizeof e2, dyn, f32));
        ADD(".\n\n");
    }
    if (bf) {
        ADD("bf16 keeps fp32's 8-bit exponent, so its range reaches down to 1e-38 like fp32: %.4f%% of its gradient "
            "values became zero without any loss scaling. It has only 8 significant bits, which rounding to nearest "
            "and fp32 master weights absorb: %s",
            100 * bf->underflow, eval_text(e1, sizeof e1, bf));
        if (f32) ADD(", %s fp32's", eval_diff(e2, sizeof e2, bf, f32));
        ADD(".\n\n");
    }
    if (naive) {
        long bad = 0; /* the first step whose loss was not finite */
        while (bad < naive->nsteps && isfinite(naive->loss[bad])) bad++;
        ADD("fp16-naive casts everything to fp16, as model.half() does: no master weights, fp16 reductions, no loss "
            "scaling. ");
        if (bad < naive->nsteps)
            ADD("Its loss became NaN/inf at step %ld (its log names the first tensor that held it) and it ended at %s",
                bad + 1, eval_text(e1, sizeof e1, naive));
        else
            ADD("It ended at %s", eval_text(e1, sizeof e1, naive));
        if (f32 && isfinite(naive->eval_loss)) ADD(", %s fp32's", eval_diff(e2, sizeof e2, naive, f32));
        ADD("; %.4f%% of its gradient values became zero, and %.4f%% of its weight updates were lost (finite and "
            "nonzero in fp32, no change to the stored fp16 weight)",
            100 * naive->underflow, 100 * naive->lost_updates);
        if (dyn) ADD(", against %.4f%% in fp16-dynamic", 100 * dyn->lost_updates);
        ADD(".\n\n");
    }
    for (int i = 0; i < n; i++) { /* the recipes, against bf16 (their compute format) and fp32 */
        const mp_run_result *u = &runs[i].result;
        if (!u->nquant) continue;
        ADD("%s runs the Linear layers' GEMMs on quantized operands (%s): %.4f%% of the values it quantized saturated "
            "and %.4f%% were flushed to zero; %s",
            runs[i].name, u->format, 100 * u->quant_saturated_total, 100 * u->quant_flushed_total,
            eval_text(e1, sizeof e1, u));
        if (bf) ADD(", %s bf16's", eval_diff(e2, sizeof e2, u, bf));
        if (f32) ADD(", %s fp32's", eval_diff(e2, sizeof e2, u, f32));
        ADD(".\n\n");
    }
    if (nab) k += reading_ablation(out + (k < cap ? k : cap), k < cap ? cap - k : 0, rep, ab, nab, ref);
    if (f32 && n > 1) {
        const int gpt = language(f32);
        double spread = 0;
        for (int i = 0; i < n; i++)
            spread = fmax(spread, gpt ? fabs(runs[i].result.eval_loss - f32->eval_loss) / f32->eval_loss
                                      : fabs(runs[i].result.eval_accuracy - f32->eval_accuracy));
        if (spread > 0.005)
            ADD("The modes round differently, so after the first step each follows its own path through training. "
                "Their results differ by up to %.2f %s from fp32's; this comparison trains each mode once, with one "
                "seed, so it does not measure how much of that the path alone would move.\n\n",
                100 * spread, gpt ? "percent" : "points");
    }
    if (f32 && f32->ms_per_step > 0) speed(out, cap, &k, f32, bf, dyn ? dyn : f16, dyn ? "fp16-dynamic" : "fp16");
#undef ADD
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

/* A failure: kept if it is the first, printed as "PREFIX: message" on rank
 * 0, with a pointer to the help when the spec cannot work (hint). */
static mp_status say(cmp *c, mp_status st, int hint, const char *fmt, ...) MP_PRINTF(4, 5);
static mp_status say(cmp *c, mp_status st, int hint, const char *fmt, ...) {
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
#define fail(c, st, ...) say(c, st, 0, __VA_ARGS__)
#define invalid(c, ...) say(c, MP_EINVAL, 1, __VA_ARGS__)

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
        return invalid(x, "--precisions is %zu bytes long: at most %d modes of up to 63 bytes each", strlen(c->precisions),
                       MP_COMPARE_MAX);
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
            if (read_by(x, c, name, mode_ext[e])) return x->status;
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
                    st == MP_OK ? "done" : runs[r].result.invalid || !trained ? "failed" : "stopped early", mp_now() - t0,
                    shown);
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
            if (!x->status)
                x->status = st, snprintf(x->msg, sizeof x->msg, "%s: %s", runs[r].name, mp_last_error());
            mp_run_result_free(&runs[r].result);
            break;
        }
        done++;
    }
    res->n = done;
}

/* The warnings a comparison adds: a mode whose evaluation is off fp32's. */
static void warn_against_fp32(mp_compare_result *res) {
    const mp_run_result *f32 = find(res->modes, res->n, "fp32");
    for (int r = 0; f32 && r < res->n; r++) {
        mp_run_result *u = &res->modes[r].result;
        const int gpt = language(u);
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
    const int n = res->n, gpt = language(&runs[0].result);
    const mp_run_result *f32 = find(runs, n, "fp32");
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

static mp_report report_of(report_runs *v, const mp_compare_result *res, const char *command, const char *reading_text) {
    const mp_compare_mode *runs = res->modes;
    const int n = res->n, gpt = language(&runs[0].result);
    int baseline = -1;
    for (int r = 0; r < n; r++) {
        const mp_run_result *u = &runs[r].result;
        const mp_precision *p = &u->precision;
        for (int k = 0; k < u->nwarnings; k++) v->warn_ptr[r][k] = u->warnings[k];
        if (p->compute == MP_F32 && baseline < 0) baseline = r;
        mp_report_run *rr = &v->rr[r];
        *rr = (mp_report_run){.name = runs[r].name, .format = u->format, .color = p->color,
                              .nsteps = u->nsteps, .loss = u->loss, .scale = u->scale, .skipped = u->skipped,
                              .nlayers = u->ntensors, .layer_names = (const char (*)[64])u->tensor_names,
                              .layer_underflow = u->tensor_underflow, .eval = gpt ? u->eval_loss : u->eval_accuracy,
                              .last_loss = u->last_loss, .underflow = u->underflow,
                              .lost_gradients = u->lost_gradients, .dead_gradients = u->dead_gradients,
                              .lost_updates = u->lost_updates,
                              .ms_per_step = u->ms_per_step, .memory_mib = u->memory_mib,
                              .bytes_per_param = mp_bytes_per_param(&u->bytes),
                              .final_scale = u->final_scale, .skipped_total = u->skipped_total,
                              .has_hist = u->has_hist, .hist_lo = MP_RUN_HIST_LO, .hist_zeros = u->hist_zeros,
                              .hist_scale = u->hist_scale, .warnings = v->warn_ptr[r], .nwarnings = u->nwarnings,
                              .tensors = u->tensor_totals, .headroom_format = u->headroom_format,
                              .skips = u->skips, .nskips = u->nskips};
        memcpy(rr->hist, u->hist, sizeof rr->hist);
        rr->neval = u->neval, rr->eval_steps = u->eval_steps, rr->eval_losses = u->eval_losses;
        rr->sample = u->sample, rr->sample_printable = u->sample_printable, rr->sample_words = u->sample_words;
        rr->precision = p;
        rr->color = distinct_color(v->rr, r, p->color);
        v->rq[r] = (mp_report_quant){u->nquant, (const char (*)[64])u->quant_names, u->quant_totals, u->quant_scale,
                                     u->quant_saturated, u->quant_flushed};
        rr->quant = u->nquant ? &v->rq[r] : NULL;
    }
    const mp_format_info *h = mp_format(MP_F16);
    return (mp_report){.title = "mixprec: the same network in several precisions", .command = command,
                       .reading = reading_text, .fp16_min_subnormal = h->min_subnormal, .fp16_min_normal = h->min_normal,
                       .fp16_max = h->max, .eval_name = gpt ? "validation loss" : "test accuracy",
                       .eval_percent = !gpt, .eval_loss_name = gpt ? "validation loss" : "test loss",
                       .baseline = baseline, .runs = v->rr, .nruns = n};
}

/* A name that compare could have written in DIR (summary.json's "files"): no
 * directory, no dot file, report.html or a mode's file by its suffix. */
static int plain_name(const char *name) {
    const size_t len = strlen(name);
    if (!len || name[0] == '.' || strchr(name, '/') || len >= sizeof(file_name)) return 0;
    if (!strcmp(name, "report.html")) return 1;
    for (int e = 0; e < MODE_EXT; e++) {
        const size_t k = strlen(mode_ext[e]);
        if (len > k && !strcmp(name + len - k, mode_ext[e])) return 1;
    }
    return 0;
}

/* The files a summary.json at path names, when it is a regular file that
 * mixprec compare wrote (its "written_by"); -1 when there is a file there
 * that is not such a summary, 0 (no files) when there is none. */
static int manifest_files(const char *path, file_name *names, int cap) {
    struct stat st;
    if (lstat(path, &st) != 0) return 0;
    if (!S_ISREG(st.st_mode)) return -1;
    uint8_t *text = NULL; /* read as every input is (a file swapped for a FIFO meanwhile is refused) */
    size_t size = 0;
    int n = 0;
    if (mp_read_file(NULL, path, (size_t)1 << 28, &text, &size) == MP_OK) {
        cJSON *j = cJSON_Parse((const char *)text);
        const cJSON *e, *fl = cJSON_GetObjectItemCaseSensitive(j, "files");
        const cJSON *by = cJSON_GetObjectItemCaseSensitive(j, "written_by");
        if (!cJSON_IsString(by) || strcmp(by->valuestring, WRITTEN_BY) != 0) n = -1;
        else
            cJSON_ArrayForEach(e, fl) if (n < cap && cJSON_IsString(e) && plain_name(e->valuestring))
                snprintf(names[n++], sizeof names[0], "%s", e->valuestring);
        cJSON_Delete(j);
    } else n = -1;
    free(text);
    return n;
}

/* The files DIR's summary.json names (none when it is not mixprec's). */
static int old_files(const char *dir, file_name *names, int cap) {
    char path[4200];
    path_of(path, dir, "summary", ".json");
    const int n = manifest_files(path, names, cap);
    return n > 0 ? n : 0;
}

/* The files this comparison left in DIR/.partial, by name: each mode's that
 * ran, then report.html when it was written. */
static int staged_files(const cmp *x, const mp_compare_result *res, int report, file_name *names) {
    int n = 0;
    for (int r = 0; r < res->n; r++)
        for (int e = 0; e < MODE_EXT; e++) {
            char path[4200];
            struct stat st;
            path_of(path, x->stage, res->modes[r].name, mode_ext[e]);
            if (!strcmp(mode_ext[e], ".csv.partial")) { /* the run's own PATH.partial.PID: its rows, by DIR's name */
                char own[4300];
                snprintf(own, sizeof own, "%s.%ld", path, (long)getpid());
                if (lstat(own, &st) == 0 && S_ISREG(st.st_mode)) rename(own, path);
            }
            if (lstat(path, &st) == 0 && S_ISREG(st.st_mode))
                snprintf(names[n++], sizeof names[0], "%.63s%s", res->modes[r].name, mode_ext[e]);
        }
    if (report) snprintf(names[n++], sizeof names[0], "report.html");
    return n;
}

/* The modes whose run ended worse (their state staged as MODE.ckpt.rejected,
 * no MODE.ckpt): an earlier comparison's MODE.ckpt in DIR stays, named by the
 * new summary too, so that the commit neither replaces nor removes it.
 * Returns how many modes ended worse, with their names in `which`. */
static int keep_checkpoints(const cmp *x, const mp_compare_result *res, file_name *names, int *n, char *which,
                            size_t cap) {
    file_name old[MAX_FILES];
    const int nold = old_files(x->dir, old, MAX_FILES);
    int worse = 0;
    which[0] = 0;
    for (int r = 0; r < res->n; r++) {
        char ckpt[80], rej[96];
        snprintf(ckpt, sizeof ckpt, "%.63s.ckpt", res->modes[r].name);
        snprintf(rej, sizeof rej, "%s.rejected", ckpt);
        int has_rej = 0, has_ckpt = 0, had = 0;
        for (int i = 0; i < *n; i++) has_rej |= !strcmp(names[i], rej), has_ckpt |= !strcmp(names[i], ckpt);
        if (!has_rej || has_ckpt) continue;
        for (int k = 0; k < nold; k++) had |= !strcmp(old[k], ckpt);
        if (had && *n < MAX_FILES) snprintf(names[(*n)++], sizeof names[0], "%s", ckpt);
        const size_t len = strlen(which);
        snprintf(which + len, cap - len, "%s%s", worse++ ? ", " : "", res->modes[r].name);
    }
    return worse;
}

/* Removes the comparison's files from DIR/.partial (each mode of the list's,
 * its log's partial files that this process or a dead one left, report.html,
 * summary.json): only names that compare writes there, in its own directory. */
static void discard(const cmp *x, const mp_compare_result *res, int nmodes) {
    char path[4300];
    for (int r = 0; r < nmodes; r++) {
        for (int e = 0; e < MODE_EXT; e++) path_of(path, x->stage, res->modes[r].name, mode_ext[e]), unlink(path);
        path_of(path, x->stage, res->modes[r].name, ".csv.partial");
        snprintf(path + strlen(path), sizeof path - strlen(path), ".%ld", (long)getpid()), unlink(path);
        char base[80];
        snprintf(base, sizeof base, "%.63s.csv", res->modes[r].name);
        mp_remove_stale(x->stage, base, ".partial.");
    }
    path_of(path, x->stage, "report", ".html"), unlink(path);
    path_of(path, x->stage, "summary", ".json"), unlink(path);
}

static mp_status commit_locked(cmp *x, const mp_run_spec *base, const file_name *names, int n);
static mp_status lock_names(cmp *x, const file_name *names, int n, int lock);

/* The decided comparison's files (names, besides summary.json) moved from
 * DIR/.partial into DIR (one already moved is skipped: a cut commit completed),
 * then the files of the run before that DIR's old summary.json (mixprec's)
 * named and this run does not (never one a run option reads: base), then
 * DIR/.partial/.commit renamed to DIR/summary.json, last. */
static mp_status finish_commit(cmp *x, const mp_run_spec *base, const file_name *names, int n) {
    file_name old[MAX_FILES];
    const int nold = old_files(x->dir, old, MAX_FILES);
    char from[4200], to[4200];
    for (int i = 0; i <= n; i++) {
        const char *name = i < n ? names[i] : DECIDED;
        snprintf(from, sizeof from, "%.4000s/%.79s", x->stage, name);
        snprintf(to, sizeof to, "%.4000s/%.79s", x->dir, i < n ? name : "summary.json");
        if (i == n) /* the old files that the new summary does not name, removed before it replaces the old one */
            for (int k = 0; k < nold; k++) {
                int kept = 0;
                for (int j = 0; j < n && !kept; j++) kept = !strcmp(old[k], names[j]);
                struct stat st;
                char stale[4200];
                snprintf(stale, sizeof stale, "%.4000s/%.79s", x->dir, old[k]);
                if (!kept && lstat(stale, &st) == 0 && S_ISREG(st.st_mode) && (!base || !mp_run_reader(base, stale)))
                    unlink(stale);
            }
        struct stat st;
        if (i < n && lstat(from, &st) != 0 && errno == ENOENT) continue; /* moved before the last cut */
        if (rename(from, to) != 0)
            return fail(x, MP_EIO, "%s: cannot move it from %s (%s): the comparison is decided (%s/" DECIDED " names "
                        "its files, in %s or %s), the next comparison into %s completes it",
                        to, x->stage, strerror(errno), x->stage, x->dir, x->stage, x->dir);
    }
    const int dfd = open(x->dir, O_RDONLY | O_CLOEXEC); /* the renames, durable */
    if (dfd >= 0) fsync(dfd), close(dfd);
    return MP_OK;
}


/* DIR/NAME's lock for each of the n names and summary.json (lock), or let go
 * of them (!lock). On a lock that another process holds (a train writing one
 * of DIR's files), those taken are let go and the failure said. */
static mp_status lock_names(cmp *x, const file_name *names, int n, int lock) {
    char path[4200];
    for (int i = 0; i <= n; i++) {
        snprintf(path, sizeof path, "%.4000s/%.79s", x->dir, i < n ? names[i] : "summary.json");
        if (!lock) mp_output_unlock(path);
        else if (mp_output_lock(NULL, path) != MP_OK) {
            fail(x, MP_EIO, "%s: %s is as it was, this comparison's files are in %s", mp_last_error(), x->dir, x->stage);
            for (int k = 0; k < i; k++) {
                snprintf(path, sizeof path, "%.4000s/%.79s", x->dir, names[k]);
                mp_output_unlock(path);
            }
            return MP_EIO;
        }
    }
    return MP_OK;
}

/* The comparison decided (DIR/.partial/summary.json renamed to .commit), then
 * finished, with each file it moves into DIR locked; DIR's files checked again
 * under those locks (foreign_files: one may have come since the start). */
static mp_status commit(cmp *x, const mp_run_spec *base, const file_name *names, int n) {
    if (lock_names(x, names, n, 1) != MP_OK) return MP_EIO;
    const mp_status st = commit_locked(x, base, names, n);
    lock_names(x, names, n, 0);
    return st;
}

static mp_status commit_locked(cmp *x, const mp_run_spec *base, const file_name *names, int n) {
    char from[4200], to[4200];
    path_of(to, x->dir, "summary", ".json");
    file_name old[MAX_FILES];
    const int nold = manifest_files(to, old, MAX_FILES);
    for (int i = -1; i < n; i++) {
        snprintf(to, sizeof to, "%.4000s/%.79s", x->dir, i < 0 ? "summary.json" : names[i]);
        struct stat st;
        int known = i < 0 ? nold >= 0 : 0; /* summary.json: replaced when it is mixprec's (or absent) */
        for (int k = 0; i >= 0 && k < nold && !known; k++) known = !strcmp(old[k], names[i]);
        if (!known && lstat(to, &st) == 0)
            return fail(x, MP_EIO, "%s came while this comparison ran and is not a file that mixprec compare wrote: "
                        "it is not replaced; %s is as it was, this comparison's files are in %s", to, x->dir, x->stage);
    }
    path_of(from, x->stage, "summary", ".json");
    path_of(to, x->stage, DECIDED, "");
    if (rename(from, to) != 0)
        return fail(x, MP_EIO, "%s: cannot rename it to %s (%s): %s is as it was, this comparison's files are in %s",
                    from, to, strerror(errno), x->dir, x->stage);
    const int sfd = open(x->stage, O_RDONLY | O_CLOEXEC); /* the decision, durable before DIR changes */
    if (sfd >= 0) fsync(sfd), close(sfd);
    return finish_commit(x, base, names, n);
}

/* A comparison that was cut during its commit (DIR/.partial/.commit there, a
 * summary mixprec wrote) completed: its files moved in, the old ones it
 * replaces removed. MP_OK also when there is none. */
static mp_status complete_cut_commit(cmp *x, const mp_run_spec *base) {
    char path[4200];
    path_of(path, x->stage, DECIDED, "");
    file_name names[MAX_FILES];
    const int n = manifest_files(path, names, MAX_FILES);
    struct stat st;
    if (n < 0 || (n == 0 && lstat(path, &st) != 0)) return n < 0 ? fail(x, MP_EIO, "%s is not a summary mixprec compare "
                                                                          "wrote: it is left alone (remove it)", path)
                                                                 : MP_OK;
    if (lock_names(x, names, n, 1) != MP_OK) return MP_EIO;
    const mp_status done = finish_commit(x, base, names, n);
    lock_names(x, names, n, 0);
    return done;
}

/* Each file this comparison may place in DIR (summary.json, report.html, each
 * mode's) that is there already must be one an earlier comparison wrote: named
 * by DIR's summary.json, which mixprec wrote. Else it is said (MP_EIO) and
 * nothing is replaced. */
static mp_status foreign_files(cmp *x, const mp_compare_result *res) {
    char path[4200];
    path_of(path, x->dir, "summary", ".json");
    file_name old[MAX_FILES];
    const int nold = manifest_files(path, old, MAX_FILES);
    if (nold < 0)
        return fail(x, MP_EIO, "--out %s: %s is not a summary that mixprec compare wrote: it is not replaced "
                    "(choose another --out)", x->dir, path);
    for (int r = -1; r < res->n; r++)
        for (int e = 0; e < (r < 0 ? 1 : MODE_EXT); e++) {
            char name[80];
            snprintf(name, sizeof name, "%.63s%s", r < 0 ? "report" : res->modes[r].name, r < 0 ? ".html" : mode_ext[e]);
            snprintf(path, sizeof path, "%.4000s/%s", x->dir, name);
            struct stat st;
            if (lstat(path, &st) != 0) continue;
            int known = 0;
            for (int k = 0; k < nold && !known; k++) known = !strcmp(old[k], name);
            if (!known)
                return fail(x, MP_EIO, "--out %s: %s is not a file that mixprec compare wrote there (its summary.json "
                            "does not name it): it is not replaced (choose another --out)", x->dir, path);
        }
    return MP_OK;
}

/* DIR and DIR/.partial made where missing and locked (rank 0), a commit that
 * was cut completed, the files of DIR this comparison would replace checked
 * (foreign_files), and the files it will write removed from DIR/.partial (a
 * comparison that was killed left them). */
static mp_status make_dirs(cmp *x, const mp_compare_spec *c, const mp_compare_result *res) {
    int bad = 0, err = 0;
    const char *what = c->out;
    if (x->writer) {
        struct stat st;
        x->made_dir = stat(c->out, &st) != 0;
        snprintf(x->lock, sizeof x->lock, "%.4000s/compare", x->stage);
        if (mkdir(c->out, 0755) != 0 && errno != EEXIST) bad = 1, err = errno;
        else if (mkdir(x->stage, 0755) != 0 && errno != EEXIST) bad = 1, err = errno, what = x->stage;
        else if (mp_output_lock(NULL, x->lock) != MP_OK) bad = 2, fail(x, MP_EIO, "--out %s: %s", c->out, mp_last_error());
        else if (complete_cut_commit(x, &c->run) != MP_OK || foreign_files(x, res) != MP_OK) bad = 2;
        else discard(x, res, res->n);
    }
    int first;
    const mp_run_ranks *ranks = c->run.ranks;
    if (ranks && ranks->size > 1 ? ranks->agree(ranks->ctx, bad, &first) : bad) {
        if (bad == 2) return x->status; /* said */
        return fail(x, MP_EIO, "%s: cannot create (%s)", what, strerror(err ? err : EIO));
    }
    return MP_OK;
}

/* DIR's lock let go; DIR/.partial removed when it is empty, and DIR too when
 * this comparison made it and wrote nothing there. */
static void release_dirs(cmp *x, int dir_too) {
    if (!x->writer || !x->lock[0]) return;
    mp_output_unlock(x->lock);
    rmdir(x->stage);
    if (dir_too && x->made_dir) rmdir(x->dir);
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
    if (nab && out) print_ablation(out, &rep, ab, nab, ref);
    reading(text, 8192, res->modes, res->n, c->run.model, &rep, ab, nab, ref);
    res->reading = text;
    if (out) fprintf(out, "\n%s\n", text);
    char html[4200];
    path_of(html, x->stage, "report", ".html");
    char why[1024] = "";
    const int report_ok = mp_report_write(html, &rep) == MP_OK;
    if (!report_ok) snprintf(why, sizeof why, "%s", mp_last_error());
    int n = staged_files(x, res, report_ok, names);
    char worse[512];
    const int nworse = c->checkpoints ? keep_checkpoints(x, res, names, &n, worse, sizeof worse) : 0;
    const mp_status st = write_summary(x, x->stage, command, res, ab, nab, names, n);
    if (st != MP_OK && report_ok) snprintf(why, sizeof why, "%s", mp_last_error());
    if (report_ok && st == MP_OK) {
        const mp_status cs = commit(x, &c->run, names, n);
        if (cs == MP_OK && out) fprintf(out, "\nreport: %.4000s/report.html\n", c->out);
        if (cs == MP_OK && nworse && !x->status) /* as train's --save: a state that ended worse fails the command */
            fail(x, MP_EOVERFLOW, "--checkpoints: %s ended worse: %s in %s, beside any earlier comparison's "
                 "checkpoint, which is kept", worse, nworse > 1 ? "their states are MODE.ckpt.rejected" :
                 "its state is MODE.ckpt.rejected", c->out);
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
        if (st == MP_OK && agreed != MP_OK) st = agreed, snprintf(x.msg, sizeof x.msg, "rank %d refused the comparison", first);
    }
    if (st == MP_OK) st = make_dirs(&x, c, res);
    if (st != MP_OK) {
        release_dirs(&x, 1);
        return free(files), res->n = 0, res->invalid = st == MP_EINVAL, mp_error(st, "%s", x.msg);
    }
    /* with ranks the modes train one after the other on every rank; rank 0 alone writes DIR */
    const int nmodes = res->n;
    run_modes(&x, c, opts, files, res);
    free(files);
    if (res->n > 0 && x.writer) conclude(&x, c, res);
    else if (x.writer) discard(&x, res, nmodes); /* no mode trained: DIR as it was */
    release_dirs(&x, res->n == 0);
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
