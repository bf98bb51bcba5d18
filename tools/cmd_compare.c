/* cmd_compare.c - `mixprec compare` and `mixprec demo`: the same network trained
 * in several precision modes, one after the other in this process through the
 * library's run (mp_run, mixprec/run.h), a summary table and DIR/report.html. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "dist.h"
#include "run.h"

static const char usage_head[] =
    "usage: mixprec compare [--precisions LIST] [--out DIR] [train options]\n\n"
    "Trains the same network with the same seed, data and initial weights once per\n"
    "precision mode (default fp32,fp16,fp16-dynamic,bf16), prints a summary table\n"
    "and writes DIR/report.html (one self-contained page: training and evaluation\n"
    "loss curves, the loss scale with every skipped step, gradient underflow by\n"
    "tensor and over time with a heat map of tensors x steps per mode, where the\n"
    "gradients lie against fp16's range, every tensor's figures per mode, what\n"
    "each protection buys against fp16-dynamic, a text sample from each final\n"
    "GPT, for fp8/fp4 recipes the shares of values saturated and flushed to zero\n"
    "per step and a table of their quantized tensors, and a reading of what\n"
    "happened) with the logs behind it: DIR/MODE.csv\n"
    "(per step), DIR/MODE.json (per run), DIR/MODE.txt (the run's output) and\n"
    "DIR/summary.json (docs/LOGS.md).\n"
    "The modes run one after the other in this process; peak memory is measured\n"
    "per mode (the kernel's high-water mark, reset before each).\n\n"
    "  --precisions LIST   comma-separated modes (see below)\n"
    "  --out DIR           output directory (mixprec-compare)\n"
    "  --checkpoints       also write each mode's checkpoint, DIR/MODE.ckpt (as --save)\n\n"
    "The training options (all but --precision, --log, --summary and --save, which\n"
    "compare sets):\n";

static const char demo_usage[] =
    "usage: mixprec demo [--mlp] [--out DIR]\n\n"
    "The main job: what each protection of mixed precision buys. A small GPT\n"
    "trained on the fortunes corpus in fp32, fp16-naive (everything cast to fp16),\n"
    "fp16 (fp32 master weights and reductions, no loss scaling), fp16-dynamic (the\n"
    "AMP recipe), fp16-dynamic without master weights, fp16-dynamic with fp16\n"
    "reductions, and bf16; about 2 minutes on 2 cores. --mlp runs the earlier demo\n"
    "instead: a deep MLP on Fashion-MNIST where fp16's gradient underflow costs\n"
    "accuracy. It prints the `mixprec compare` command that reproduces it.\n";

typedef struct {
    char name[64];
    mp_run_result r;
} run_data;

/* A GPT run's sample for the report: bytes its final model writes after "\n". */
#define COMPARE_SAMPLE_BYTES 300

static const mp_run_result *find(const run_data *runs, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(runs[i].name, name) == 0) return &runs[i].r;
    return NULL;
}

static double mean_tensor(const mp_run_result *r, int l) {
    double m = 0;
    for (long s = 0; s < r->nsteps; s++) m += r->tensor_underflow[(size_t)s * (size_t)r->ntensors + (size_t)l];
    return r->nsteps ? m / (double)r->nsteps : 0;
}

/* The evaluation figure in words: "87.91% test accuracy" or "validation loss 1.6234". */
static const char *eval_text(char *buf, size_t cap, const mp_run_result *r) {
    if (strcmp(r->model_kind, "gpt") == 0 && !isfinite(r->eval_loss)) snprintf(buf, cap, "a validation loss of NaN/inf");
    else if (strcmp(r->model_kind, "gpt") == 0) snprintf(buf, cap, "validation loss %.4f", r->eval_loss);
    else snprintf(buf, cap, "%.2f%% test accuracy", 100 * r->eval_accuracy);
    return buf;
}

/* How far r is from the baseline b: "0.25 points below" or "0.8% above". */
static const char *eval_diff(char *buf, size_t cap, const mp_run_result *r, const mp_run_result *b) {
    if (strcmp(r->model_kind, "gpt") == 0) {
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
                                        "#2ca02c"};
    if (!color_taken(rr, n, want)) return want;
    for (size_t k = 0; k < sizeof spare / sizeof spare[0]; k++)
        if (!color_taken(rr, n, spare[k])) return spare[k];
    return want; /* compare runs at most 8 modes, so n < 8 and a spare is free */
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
static void print_ablation(const mp_report *rep, const mp_report_ablation *ab, int nab, int ref) {
    char e[32];
    printf("\nwhat each protection buys, against fp16-dynamic (%s %s, %ld skipped):\n", rep->eval_name,
           eval_figure(e, sizeof e, rep, rep->runs[ref].eval), rep->runs[ref].skipped_total);
    printf("%-20s %-36s %10s %18s %8s\n", "protection removed", "run", rep->eval_percent ? "test acc" : "val loss",
           "difference", "skipped");
    for (int i = 0; i < nab; i++) {
        const mp_report_run *u = &rep->runs[ab[i].run];
        char d[32];
        if (!isfinite(ab[i].delta)) snprintf(d, sizeof d, "-");
        else if (rep->eval_percent) snprintf(d, sizeof d, "%+.2f points", 100 * ab[i].delta);
        else snprintf(d, sizeof d, "%+.4f (%+.2f%%)", ab[i].delta, 100 * ab[i].delta / rep->runs[ref].eval);
        printf("%-20s %-36s %10s %18s %8ld\n", ab[i].protection, u->name, eval_figure(e, sizeof e, rep, ab[i].eval), d,
               u->skipped_total);
    }
}

/* The plain-language reading, from the numbers. */
static void reading(char *out, size_t cap, const run_data *runs, int n, const char *model, const mp_report *rep,
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
            const int worse = strcmp(f16->model_kind, "gpt") == 0 ? f16->eval_loss > f32->eval_loss * 1.005
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
        const mp_run_result *u = &runs[i].r;
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
        const int gpt = strcmp(f32->model_kind, "gpt") == 0;
        double spread = 0;
        for (int i = 0; i < n; i++)
            spread = fmax(spread, gpt ? fabs(runs[i].r.eval_loss - f32->eval_loss) / f32->eval_loss
                                      : fabs(runs[i].r.eval_accuracy - f32->eval_accuracy));
        if (spread > 0.005)
            ADD("The modes round differently, so after the first step each follows its own path through training. "
                "Their results differ by up to %.2f %s from fp32's; this comparison trains each mode once, with one "
                "seed, so it does not measure how much of that the path alone would move.\n\n",
                100 * spread, gpt ? "percent" : "points");
    }
    if (f32 && bf && bf->ms_per_step > 0)
        ADD("Speed: a bf16 step took %.1f ms against %.1f ms in fp32 (%.2fx, medians); its matrix multiplies read bf16%s.",
            bf->ms_per_step, f32->ms_per_step, f32->ms_per_step / bf->ms_per_step,
            mp_cpu_isa() >= MP_ISA_AVX512_BF16 ? " and use the CPU's bf16 dot-product instruction"
                                                : ", widened to fp32 (this CPU has no bf16 dot-product instruction)");
#undef ADD
}

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int write_summary(const char *out, const char *cmdline, const run_data *runs, int n,
                         const mp_report_ablation *ab, int nab) {
    cJSON *all = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(all, "runs");
    cJSON_AddStringToObject(all, "command", cmdline);
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
        cJSON *j = runs[r].r.summary ? cJSON_Parse(runs[r].r.summary) : NULL;
        if (j) cJSON_AddItemToArray(arr, j);
        else bad = 1;
    }
    char path[4200];
    snprintf(path, sizeof path, "%.4000s/summary.json", out);
    char *text = cJSON_Print(all);
    cJSON_Delete(all);
    if (!text) return fprintf(stderr, "mixprec compare: %s: out of memory\n", path), 1;
    const mp_status st = mp_write_file_atomic(path, &(mp_chunk){text, strlen(text)}, 1);
    free(text);
    if (st != MP_OK) return fprintf(stderr, "mixprec compare: %s\n", mp_last_error()), 1;
    return bad ? fprintf(stderr, "mixprec compare: %s: a run's summary was missing or could not be parsed\n", path), 1 : 0;
}

static int compare(const mp_run_spec *base, const char *precisions, const char *out, int checkpoints, const char *cmdline) {
    /* with ranks (dist.h) the modes train one after the other on every rank; rank 0 alone writes DIR */
    const int writer = dist_rank() == 0;
    const int bad = writer && mkdir(out, 0755) != 0 && errno != EEXIST, err = errno;
    int first;
    if (dist_agree(bad, &first)) return fprintf(stderr, "mixprec compare: %s: cannot create (%s)\n", out, strerror(err)), 1;
    if (strlen(out) > 4000) return cli_usage_error("compare", "--out is too long");
    run_data runs[8];
    mp_run_spec opts[8];
    int n = 0;
    char list[512];
    snprintf(list, sizeof list, "%s", precisions);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        if (n == 8) return cli_usage_error("compare", "at most 8 precisions");
        memset(&runs[n], 0, sizeof runs[n]);
        opts[n] = *base;
        opts[n].precision = tok;
        mp_precision p;
        if (mp_precision_parse(tok, &p, NULL) != MP_OK) return cli_usage_error("compare", "%s", mp_last_error());
        if (mp_run_check(&opts[n], &p) != MP_OK) return cli_usage_error("compare", "%s: %s", tok, mp_last_error());
        snprintf(runs[n].name, sizeof runs[n].name, "%s", p.label); /* tok with the switches applied */
        n++;
    }
    if (n == 0) return cli_usage_error("compare", "--precisions is empty");
    int rc = 0, done = 0, namew = 14; /* the mode column fits the longest label */
    for (int r = 0; r < n; r++) namew = (int)strlen(runs[r].name) > namew ? (int)strlen(runs[r].name) : namew;
    char csv[8][4200], js[8][4200], ckpt[8][4200];
    for (int r = 0; r < n; r++) {
        char txt[4200];
        snprintf(csv[r], sizeof csv[r], "%.4000s/%.63s.csv", out, runs[r].name);
        snprintf(js[r], sizeof js[r], "%.4000s/%.63s.json", out, runs[r].name);
        snprintf(ckpt[r], sizeof ckpt[r], "%.4000s/%.63s.ckpt", out, runs[r].name);
        snprintf(txt, sizeof txt, "%.4000s/%.63s.txt", out, runs[r].name);
        opts[r].log = csv[r], opts[r].summary = js[r];
        if (checkpoints) opts[r].save = ckpt[r];
        printf("  %-*s ...", namew, runs[r].name);
        fflush(stdout);
        FILE *f = fopen(writer ? txt : "/dev/null", "w");
        if (dist_agree(!f, &first)) {
            if (f) fclose(f);
            return writer ? fprintf(stderr, "\nmixprec compare: %s: cannot create\n", txt), 1 : 1;
        }
        const double t0 = seconds();
        const mp_run_io io = run_io("compare", f);
        const int st = run_exit(mp_run(&opts[r], &io, &runs[r].r), &runs[r].r);
        const int wbad = fclose(f) != 0;
        printf(" %s in %.1f s (log: %s)\n", st == 0 ? "done" : st == 1 ? "stopped early" : "failed", seconds() - t0, txt);
        if (wbad) fprintf(stderr, "mixprec compare: %s: cannot write\n", txt), rc = 1;
        if (st == CLI_USAGE) {
            for (int q = 0; q <= r; q++) mp_run_result_free(&runs[q].r);
            return CLI_USAGE;
        }
        if (st != 0 && runs[r].r.nsteps == 0) { /* nothing to show */
            fprintf(stderr, "mixprec compare: %s: training failed (see %s)\n", runs[r].name, txt);
            mp_run_result_free(&runs[r].r);
            rc = 1;
            break;
        }
        done++;
    }
    n = done;
    if (n == 0) return 1;
    if (!writer) { /* the table, the report and the summary are rank 0's */
        for (int r = 0; r < n; r++) mp_run_result_free(&runs[r].r);
        return rc;
    }
    const mp_run_result *f32 = find(runs, n, "fp32");
    const int gpt = strcmp(runs[0].r.model_kind, "gpt") == 0;
    for (int r = 0; f32 && r < n; r++) {
        mp_run_result *u = &runs[r].r;
        if (u == f32 || u->nwarnings >= 6) continue;
        if (gpt && u->eval_loss > f32->eval_loss * 1.02)
            snprintf(u->warnings[u->nwarnings++], sizeof u->warnings[0],
                     "validation loss %.4f is %.2f%% above the fp32 run's %.4f", u->eval_loss,
                     100 * (u->eval_loss / f32->eval_loss - 1), f32->eval_loss);
        else if (!gpt && u->eval_accuracy < f32->eval_accuracy - 0.005)
            snprintf(u->warnings[u->nwarnings++], sizeof u->warnings[0],
                     "test accuracy %.2f%% is %.2f points below the fp32 run's %.2f%%", 100 * u->eval_accuracy,
                     100 * (f32->eval_accuracy - u->eval_accuracy), 100 * f32->eval_accuracy);
    }
    printf("\n%-*s %10s %9s %8s %10s %11s %11s %11s %11s %9s %8s %9s\n", namew, "mode", "train loss",
           gpt ? "val loss" : "test acc", "skipped", "final scale", "underflow", "grads lost", "dead grads",
           "upd. lost", "ms/step", "memory", "speed-up");
    for (int r = 0; r < n; r++) {
        const mp_run_result *u = &runs[r].r;
        char sp[16] = "-", ev[16], tl[16];
        if (f32 && u->ms_per_step > 0) snprintf(sp, sizeof sp, "%.2fx", f32->ms_per_step / u->ms_per_step);
        if (gpt) snprintf(ev, sizeof ev, isfinite(u->eval_loss) ? "%.4f" : "NaN/inf", u->eval_loss);
        else snprintf(ev, sizeof ev, "%.2f%%", 100 * u->eval_accuracy);
        snprintf(tl, sizeof tl, isfinite(u->last_loss) ? "%.4f" : "NaN/inf", u->last_loss);
        printf("%-*s %10s %9s %8ld %10g %10.4f%% %10.4f%% %10.2f%% %10.4f%% %9.1f %5.0f MiB %9s\n", namew, runs[r].name,
               tl, ev, u->skipped_total, u->final_scale, 100 * u->underflow, 100 * u->lost_gradients,
               100 * u->dead_gradients, 100 * u->lost_updates, u->ms_per_step, u->memory_mib, sp);
    }
    for (int r = 0; r < n; r++)
        for (int k = 0; k < runs[r].r.nwarnings; k++) printf("warning: %s: %s\n", runs[r].name, runs[r].r.warnings[k]);
    static char text[8192];
    mp_report_run rr[8];
    mp_report_quant rq[8];
    const char *warn_ptr[8][6];
    int baseline = -1;
    for (int r = 0; r < n; r++) {
        const mp_run_result *u = &runs[r].r;
        const mp_precision *p = &u->precision;
        for (int k = 0; k < u->nwarnings; k++) warn_ptr[r][k] = u->warnings[k];
        if (p->compute == MP_F32 && baseline < 0) baseline = r;
        rr[r] = (mp_report_run){.name = runs[r].name, .format = u->format, .color = p->color,
                                .nsteps = u->nsteps, .loss = u->loss, .scale = u->scale, .skipped = u->skipped,
                                .nlayers = u->ntensors, .layer_names = (const char (*)[64])u->tensor_names,
                                .layer_underflow = u->tensor_underflow, .eval = gpt ? u->eval_loss : u->eval_accuracy,
                                .last_loss = u->last_loss, .underflow = u->underflow,
                                .lost_gradients = u->lost_gradients, .dead_gradients = u->dead_gradients,
                                .lost_updates = u->lost_updates,
                                .ms_per_step = u->ms_per_step, .memory_mib = u->memory_mib,
                                .final_scale = u->final_scale, .skipped_total = u->skipped_total,
                                .has_hist = u->has_hist, .hist_lo = MP_RUN_HIST_LO, .hist_zeros = u->hist_zeros,
                                .hist_scale = u->hist_scale, .warnings = warn_ptr[r], .nwarnings = u->nwarnings,
                                .tensors = u->tensor_totals, .headroom_format = u->headroom_format,
                                .skips = u->skips, .nskips = u->nskips};
        memcpy(rr[r].hist, u->hist, sizeof rr[r].hist);
        rr[r].neval = u->neval, rr[r].eval_steps = u->eval_steps, rr[r].eval_losses = u->eval_losses;
        rr[r].sample = u->sample, rr[r].sample_printable = u->sample_printable, rr[r].sample_words = u->sample_words;
        rr[r].precision = p;
        rr[r].color = distinct_color(rr, r, p->color);
        rq[r] = (mp_report_quant){u->nquant, (const char (*)[64])u->quant_names, u->quant_totals, u->quant_scale,
                                  u->quant_saturated, u->quant_flushed};
        rr[r].quant = u->nquant ? &rq[r] : NULL;
    }
    const mp_format_info *h = mp_format(MP_F16);
    const mp_report rep = {.title = "mixprec: the same network in several precisions", .command = cmdline,
                           .reading = text, .fp16_min_subnormal = h->min_subnormal, .fp16_min_normal = h->min_normal,
                           .fp16_max = h->max, .eval_name = gpt ? "validation loss" : "test accuracy",
                           .eval_percent = !gpt, .eval_loss_name = gpt ? "validation loss" : "test loss",
                           .baseline = baseline, .runs = rr, .nruns = n};
    mp_report_ablation ab[8];
    int ref;
    const int nab = mp_report_ablation_rows(&rep, ab, 8, &ref);
    if (nab) print_ablation(&rep, ab, nab, ref);
    reading(text, sizeof text, runs, n, base->model, &rep, ab, nab, ref);
    printf("\n%s\n", text);
    char html[4200];
    snprintf(html, sizeof html, "%.4000s/report.html", out);
    if (mp_report_write(html, &rep) != MP_OK) {
        fprintf(stderr, "mixprec compare: %s\n", mp_last_error());
        rc = 1;
    } else {
        printf("\nreport: %s\n", html);
    }
    if (write_summary(out, cmdline, runs, n, ab, nab)) rc = 1;
    for (int r = 0; r < n; r++) mp_run_result_free(&runs[r].r);
    return rc;
}

static int run_compare(int argc, char **argv);

const cli_command cmd_compare = {"compare", "train in several precisions side by side; summary and HTML report", NULL,
                                 run_compare};

static int run_compare(int argc, char **argv) {
    const char *precisions = "fp32,fp16,fp16-dynamic,bf16", *out = "mixprec-compare";
    char **rest = calloc((size_t)argc + 3, sizeof *rest);
    if (!rest) return fprintf(stderr, "mixprec compare: out of memory\n"), 1;
    int nr = 0, has_hist = 0, checkpoints = 0;
    rest[nr++] = argv[0];
    char cmdline[4096] = "mixprec compare";
    size_t cl = strlen(cmdline);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage_head, stdout);
            fputs(mp_run_options_help(), stdout);
            return free(rest), 0;
        }
        if (!strcmp(argv[i], "--precisions") || !strcmp(argv[i], "--out")) {
            const char *v = cli_value("compare", argc, argv, &i);
            if (!v) return free(rest), CLI_USAGE;
            if (!strcmp(argv[i - 1], "--out")) out = v;
            else precisions = v;
            cl += (size_t)snprintf(cmdline + cl, cl < sizeof cmdline ? sizeof cmdline - cl : 0, " %s %s", argv[i - 1], v);
            continue;
        }
        if (!strcmp(argv[i], "--checkpoints")) {
            checkpoints = 1;
            cl += (size_t)snprintf(cmdline + cl, cl < sizeof cmdline ? sizeof cmdline - cl : 0, " %s", argv[i]);
            continue;
        }
        if (!strcmp(argv[i], "--precision") || !strcmp(argv[i], "--log") || !strcmp(argv[i], "--summary") ||
            !strcmp(argv[i], "--save"))
            return free(rest), cli_usage_error("compare", "%s is set by compare itself", argv[i]);
        has_hist |= !strcmp(argv[i], "--hist-every");
        rest[nr++] = argv[i];
        cl += (size_t)snprintf(cmdline + cl, cl < sizeof cmdline ? sizeof cmdline - cl : 0, " %s", argv[i]);
    }
    if (!has_hist) rest[nr++] = (char *)"--hist-every", rest[nr++] = (char *)"10";
    mp_run_spec o;
    int rc = run_parse("compare", nr, rest, &o);
    o.sample_bytes = COMPARE_SAMPLE_BYTES;
    if (rc == 0) rc = compare(&o, precisions, out, checkpoints, cmdline);
    free(rest);
    return rc;
}

/* The demo's configuration: a deep MLP with PyTorch's default initialisation
 * and large batches: per-example gradients are divided by the batch size and
 * shrink through six ReLU layers, so in fp16 many fall below 6e-8. */
/* The two demos as `mixprec compare` arguments. */
static char *const demo_gpt_args[] = {
    "compare", "--model", "gpt:2-4-64-64", "--batch", "16", "--steps", "400", "--lr", "6e-3", "--lr-schedule",
    "cosine", "--warmup", "20", "--weight-decay", "0.1", "--betas", "0.9,0.95", "--clip", "1", "--seed", "1",
    "--eval-every", "100", "--precisions",
    "fp32,fp16-naive,fp16,fp16-dynamic,fp16-dynamic+master-weights=none,fp16-dynamic+reductions=half,bf16", NULL};
static char *const demo_mlp_args[] = {"compare", "--model", "mlp:784-256-256-256-256-256-256-10", "--optimizer",
                                      "adamw", "--lr", "2e-3", "--weight-decay", "0", "--batch", "2048", "--epochs",
                                      "20", "--seed", "1", NULL};

static int run_demo(int argc, char **argv) {
    const char *out = "mixprec-demo";
    int mlp = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return fputs(demo_usage, stdout), 0;
        if (!strcmp(argv[i], "--mlp")) {
            mlp = 1;
        } else if (!strcmp(argv[i], "--out")) {
            const char *v = cli_value("demo", argc, argv, &i);
            if (!v) return CLI_USAGE;
            out = v;
        } else {
            return cli_usage_error("demo", "unknown option '%s'", argv[i]);
        }
    }
    char *const *demo = mlp ? demo_mlp_args : demo_gpt_args;
    char *args[48];
    int n = 0;
    for (; demo[n]; n++) args[n] = demo[n];
    args[n++] = (char *)"--out";
    args[n++] = (char *)out;
    args[n] = NULL;
    if (mlp)
        printf("mixprec demo --mlp: the same deep MLP trained in fp32, fp16 without loss scaling, fp16 with dynamic loss\n"
               "scaling and bf16, on Fashion-MNIST. Reproduce with:\n  mixprec");
    else
        printf("mixprec demo: a GPT trained on text with each protection of mixed precision removed in turn (fp32\n"
               "master weights, fp32 reductions, loss scaling), with all three removed at once (fp16-naive), and in\n"
               "bf16. Reproduce with:\n  mixprec");
    for (int i = 0; i < n; i++) printf(" %s", args[i]);
    printf("\n\n");
    return run_compare(n, args);
}

const cli_command cmd_demo = {"demo", "the main job: what each protection of mixed precision buys, on a GPT",
                              demo_usage, run_demo};
