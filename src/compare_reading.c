/* compare_reading.c - a comparison's reading in words, from its numbers:
 * what fp16 lost without loss scaling, what the scale recovered, bf16, the
 * naive cast, the recipes, what each protection buys, the speed. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "compare_state.h"

const mp_run_result *mp_compare_find(const mp_compare_mode *runs, int n, const char *name) {
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
int mp_compare_language(const mp_run_result *r) {
    return mp_model_row_kind(r->model_kind)->report == MP_REPORT_LANGUAGE;
}

/* The evaluation figure in words: "87.91% test accuracy" or "validation loss 1.6234". */
static const char *eval_text(char *buf, size_t cap, const mp_run_result *r) {
    if (mp_compare_language(r) && !isfinite(r->eval_loss)) snprintf(buf, cap, "a validation loss of NaN/inf");
    else if (mp_compare_language(r)) snprintf(buf, cap, "validation loss %.4f", r->eval_loss);
    else snprintf(buf, cap, "%.2f%% test accuracy", 100 * r->eval_accuracy);
    return buf;
}

/* How far r is from the baseline b: "0.25 points below" or "0.8% above". */
static const char *eval_diff(char *buf, size_t cap, const mp_run_result *r, const mp_run_result *b) {
    if (mp_compare_language(r)) {
        const double rel = 100 * (r->eval_loss - b->eval_loss) / b->eval_loss;
        snprintf(buf, cap, "%.2f%% %s", fabs(rel), rel > 0 ? "above (worse than)" : "below (better than)");
    } else {
        const double d = 100 * (r->eval_accuracy - b->eval_accuracy);
        snprintf(buf, cap, "%.2f points %s", fabs(d), d >= 0 ? "above" : "below");
    }
    return buf;
}

/* An eval figure as the tables show it: "87.91%", "1.6234" or "not finite". */
static const char *eval_figure(char *buf, size_t cap, const mp_report *rep, double v) {
    if (!isfinite(v)) snprintf(buf, cap, "not finite");
    else if (rep->eval_percent) snprintf(buf, cap, "%.2f%%", 100 * v);
    else snprintf(buf, cap, "%.4f", v);
    return buf;
}

/* Text appended to out (cap bytes) as snprintf appends it: k counts what was
 * asked for, the text is cut at cap. */
typedef struct {
    char *out;
    size_t cap, k;
} text;

static void add(text *t, const char *fmt, ...) MP_PRINTF(2, 3);
static void add(text *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    t->k += (size_t)vsnprintf(t->out + (t->k < t->cap ? t->k : t->cap), t->k < t->cap ? t->cap - t->k : 0, fmt, ap);
    va_end(ap);
}

/* The rows of "what each protection buys" in words, each with only its measured difference: under 0.5% of the
 * reference's figure it says there is no measurable difference. */
static void reading_ablation(text *t, const mp_report *rep, const mp_report_ablation *ab, int nab, int ref) {
    const mp_report_run *b = &rep->runs[ref];
    const int higher_is_worse = !rep->eval_percent; /* a loss; else an accuracy */
    char e1[32], e2[32];
    add(t, "What each protection buys, measured against fp16-dynamic (every protection on: %s %s, %ld skipped step%s):",
        rep->eval_name, eval_figure(e1, sizeof e1, rep, b->eval), b->skipped_total, b->skipped_total == 1 ? "" : "s");
    for (int i = 0; i < nab; i++) {
        const mp_report_run *u = &rep->runs[ab[i].run];
        const double rel = b->eval != 0 ? fabs(ab[i].delta / b->eval) : INFINITY;
        add(t, "%s without %s (%s), %s %s", i ? ";" : "", ab[i].protection, u->name, rep->eval_name,
            eval_figure(e1, sizeof e1, rep, ab[i].eval));
        if (!isfinite(ab[i].delta)) add(t, " (inf or NaN)");
        else if (rel < 0.005)
            add(t, ", no measurable difference in this run (%.2f%% of the reference's figure, under 0.5%%)", 100 * rel);
        else if (rep->eval_percent)
            add(t, ", %.2f points %s", 100 * fabs(ab[i].delta), ab[i].delta < 0 ? "lower (worse)" : "higher (better)");
        else
            add(t, ", %s (%.2f%%) %s", eval_figure(e2, sizeof e2, rep, fabs(ab[i].delta)), 100 * rel,
                (ab[i].delta > 0) == higher_is_worse ? "higher (worse)" : "lower (better)");
        add(t, ", %ld skipped step%s", u->skipped_total, u->skipped_total == 1 ? "" : "s");
    }
    add(t, ".\n\n");
}

/* "What each protection buys" as a console table. */
void mp_compare_print_ablation(FILE *out, const mp_report *rep, const mp_report_ablation *ab, int nab, int ref) {
    char e[32];
    fprintf(out, "\nwhat each protection buys, against fp16-dynamic (%s %s, %ld skipped):\n", rep->eval_name,
            eval_figure(e, sizeof e, rep, rep->runs[ref].eval), rep->runs[ref].skipped_total);
    fprintf(out, "%-20s %-36s %10s %18s %8s\n", "protection removed", "run",
            rep->eval_percent ? "test acc" : "val loss", "difference", "skipped");
    for (int i = 0; i < nab; i++) {
        const mp_report_run *u = &rep->runs[ab[i].run];
        char d[32];
        if (!isfinite(ab[i].delta)) snprintf(d, sizeof d, "-");
        else if (rep->eval_percent) snprintf(d, sizeof d, "%+.2f points", 100 * ab[i].delta);
        else snprintf(d, sizeof d, "%+.4f (%+.2f%%)", ab[i].delta, 100 * ab[i].delta / rep->runs[ref].eval);
        fprintf(out, "%-20s %-36s %10s %18s %8ld\n", ab[i].protection, u->name,
                eval_figure(e, sizeof e, rep, ab[i].eval), d, u->skipped_total);
    }
}

/* What half precision bought in time on this CPU, and why: bf16 GEMMs run on
 * the CPU's bf16 units where it has them (vdpbf16ps, AMX tiles), widened to
 * fp32 for the FMA units where not; fp16 is widened on every CPU (mixprec
 * has no AVX512_FP16 or AMX-FP16 kernels), so what it saves is memory and
 * memory traffic, not arithmetic. */
static void speed(text *t, const mp_run_result *f32, const mp_run_result *bf, const mp_run_result *h,
                  const char *hname) {
    const size_t at = t->k;
    const mp_isa isa = mp_cpu_isa();
    if (bf && bf->ms_per_step > 0) {
        add(t,
            "Speed on this CPU (path %s): a bf16 step took %.1f ms against %.1f ms in fp32 (%.2fx as fast, medians) "
            "and held %.0f MiB against %.0f. ",
            mp_isa_name(isa), bf->ms_per_step, f32->ms_per_step, f32->ms_per_step / bf->ms_per_step, bf->memory_mib,
            f32->memory_mib);
        if (isa >= MP_ISA_AMX) add(t, "Its matrix multiplies read bf16 into the CPU's AMX tiles (TDPBF16PS).");
        else if (isa >= MP_ISA_AVX512_BF16)
            add(t, "Its matrix multiplies read bf16 and use the CPU's bf16 dot-product instruction (vdpbf16ps, twice "
                   "the values of an fp32 FMA per instruction); what is left of the step (softmax, layer norm, GELU, "
                   "the optimizer) computes in fp32 in both modes.");
        else
            add(t, "This CPU has no bf16 arithmetic units: bf16 values are widened to fp32 for its FMA units, so bf16 "
                   "saves memory and memory traffic, not arithmetic.");
    }
    if (h && h->ms_per_step > 0) {
        const mp_cpu_feature_set *f = mp_cpu_features();
        add(t,
            "%s%s: %.1f ms a step against fp32's %.1f (%.2fx as fast). mixprec widens fp16 to fp32 for the FMA units "
            "on every CPU%s, so fp16 saves memory and memory traffic, not arithmetic.",
            t->k > at ? "\n\n" : "", hname, h->ms_per_step, f32->ms_per_step, f32->ms_per_step / h->ms_per_step,
            f->avx512_fp16 || f->amx_fp16 ? " (it has no AVX512_FP16 or AMX-FP16 kernels, which this CPU would run)"
                                          : " (this one has no fp16 arithmetic units)");
    }
}

/* fp16 without loss scaling: what it lost, and whether it cost the result. */
static void reading_fp16(text *t, const mp_run_result *f16, const mp_run_result *f32) {
    char e1[64], e2[64], e3[64];
    int worst = 0;
    for (int l = 1; l < f16->ntensors; l++) worst = mean_tensor(f16, l) > mean_tensor(f16, worst) ? l : worst;
    add(t, "fp16 without loss scaling: %.2f%% of the gradient values it stored became zero (%.2f%% in %s). ",
        100 * f16->underflow, f16->ntensors ? 100 * mean_tensor(f16, worst) : 0.0,
        f16->ntensors ? f16->tensor_names[worst] : "-");
    if (!f32) return;
    const int worse = mp_compare_language(f16) ? f16->eval_loss > f32->eval_loss * 1.005
                                               : f16->eval_accuracy < f32->eval_accuracy - 0.005;
    if (worse)
        add(t, "It ended at %s, %s fp32 (%s).\n\n", eval_text(e1, sizeof e1, f16), eval_diff(e2, sizeof e2, f16, f32),
            eval_text(e3, sizeof e3, f32));
    else
        add(t,
            "It still ended at %s against fp32's %s: in this run the values lost were too few, or too small, "
            "to change the result, but they are lost all the same and the share grows as gradients shrink "
            "(deeper networks, larger batches, later in training).\n\n",
            eval_text(e1, sizeof e1, f16), eval_text(e2, sizeof e2, f32));
}

/* fp16-dynamic: what the loss scale recovered. */
static void reading_dynamic(text *t, const mp_run_result *dyn, const mp_run_result *f16, const mp_run_result *f32) {
    char e1[64], e2[64];
    add(t,
        "fp16-dynamic multiplies the loss by a scale S before the backward pass, so every gradient is S times larger "
        "and lands inside fp16's range, then divides by S in fp32 before the update (for a power of two this is "
        "exact). It ended with S = %g after %ld skipped step%s (a step is skipped and S halved when the scaled "
        "gradients overflow to inf; S doubles again after a run of clean steps). Only %.4f%% of the gradient values "
        "became zero",
        dyn->final_scale, dyn->skipped_total, dyn->skipped_total == 1 ? "" : "s", 100 * dyn->underflow);
    if (f16 && dyn->underflow > 0) add(t, ", %.0f times fewer than without scaling", f16->underflow / dyn->underflow);
    else if (f16) add(t, " (none at all, against %.2f%% without scaling)", 100 * f16->underflow);
    if (f32) add(t, "; %s, %s fp32's", eval_text(e1, sizeof e1, dyn), eval_diff(e2, sizeof e2, dyn, f32));
    add(t, ".\n\n");
}

/* fp16-naive: where its loss broke, and the updates it lost. */
static void reading_naive(text *t, const mp_run_result *naive, const mp_run_result *dyn, const mp_run_result *f32) {
    char e1[64], e2[64];
    long bad = 0; /* the first step whose loss was not finite */
    while (bad < naive->nsteps && isfinite(naive->loss[bad])) bad++;
    add(t, "fp16-naive casts everything to fp16, as model.half() does: no master weights, fp16 reductions, no loss "
           "scaling. ");
    if (bad < naive->nsteps)
        add(t, "Its loss became NaN/inf at step %ld (its log names the first tensor that held it) and it ended at %s",
            bad + 1, eval_text(e1, sizeof e1, naive));
    else add(t, "It ended at %s", eval_text(e1, sizeof e1, naive));
    if (f32 && isfinite(naive->eval_loss)) add(t, ", %s fp32's", eval_diff(e2, sizeof e2, naive, f32));
    add(t,
        "; %.4f%% of its gradient values became zero, and %.4f%% of its weight updates were lost (finite and "
        "nonzero in fp32, no change to the stored fp16 weight)",
        100 * naive->underflow, 100 * naive->lost_updates);
    if (dyn) add(t, ", against %.4f%% in fp16-dynamic", 100 * dyn->lost_updates);
    add(t, ".\n\n");
}

/* The recipes, against bf16 (their compute format) and fp32. */
static void reading_recipes(text *t, const mp_compare_mode *runs, int n, const mp_run_result *bf,
                            const mp_run_result *f32) {
    char e1[64], e2[64];
    for (int i = 0; i < n; i++) {
        const mp_run_result *u = &runs[i].result;
        if (!u->nquant) continue;
        add(t,
            "%s runs the Linear layers' GEMMs on quantized operands (%s): %.4f%% of the values it quantized "
            "saturated and %.4f%% were flushed to zero; %s",
            runs[i].name, u->format, 100 * u->quant_saturated_total, 100 * u->quant_flushed_total,
            eval_text(e1, sizeof e1, u));
        if (bf) add(t, ", %s bf16's", eval_diff(e2, sizeof e2, u, bf));
        if (f32) add(t, ", %s fp32's", eval_diff(e2, sizeof e2, u, f32));
        add(t, ".\n\n");
    }
}

/* How far the modes' results spread from fp32's, when it is measurable. */
static void reading_spread(text *t, const mp_compare_mode *runs, int n, const mp_run_result *f32) {
    const int gpt = mp_compare_language(f32);
    double spread = 0;
    for (int i = 0; i < n; i++)
        spread = fmax(spread, gpt ? fabs(runs[i].result.eval_loss - f32->eval_loss) / f32->eval_loss
                                  : fabs(runs[i].result.eval_accuracy - f32->eval_accuracy));
    if (spread > 0.005)
        add(t,
            "The modes round differently, so after the first step each follows its own path through training. "
            "Their results differ by up to %.2f %s from fp32's; this comparison trains each mode once, with one "
            "seed, so it does not measure how much of that the path alone would move.\n\n",
            100 * spread, gpt ? "percent" : "points");
}

void mp_compare_reading(char *out, size_t cap, const mp_compare_mode *runs, int n, const char *model,
                        const mp_report *rep, const mp_report_ablation *ab, int nab, int ref) {
    const mp_run_result *f32 = mp_compare_find(runs, n, "fp32"), *f16 = mp_compare_find(runs, n, "fp16");
    const mp_run_result *dyn = mp_compare_find(runs, n, "fp16-dynamic"), *bf = mp_compare_find(runs, n, "bf16");
    const mp_run_result *naive = mp_compare_find(runs, n, "fp16-naive");
    text t = {out, cap, 0};
    add(&t,
        "Every mode trained the same network (%s) from the same initial weights on the same batches. Gradients "
        "are computed in the mode's format; fp16 can only hold magnitudes between 6.0e-8 (its smallest subnormal) and "
        "65504, and anything smaller than half of 6.0e-8 is stored as exactly zero: that gradient is lost.\n\n",
        model);
    if (f16) reading_fp16(&t, f16, f32);
    if (dyn) reading_dynamic(&t, dyn, f16, f32);
    if (bf) {
        char e1[64], e2[64];
        add(&t,
            "bf16 keeps fp32's 8-bit exponent, so its range reaches down to 1e-38 like fp32: %.4f%% of its "
            "gradient values became zero without any loss scaling. It has only 8 significant bits, which rounding to "
            "nearest and fp32 master weights absorb: %s",
            100 * bf->underflow, eval_text(e1, sizeof e1, bf));
        if (f32) add(&t, ", %s fp32's", eval_diff(e2, sizeof e2, bf, f32));
        add(&t, ".\n\n");
    }
    if (naive) reading_naive(&t, naive, dyn, f32);
    reading_recipes(&t, runs, n, bf, f32);
    if (nab) reading_ablation(&t, rep, ab, nab, ref);
    if (f32 && n > 1) reading_spread(&t, runs, n, f32);
    if (f32 && f32->ms_per_step > 0) speed(&t, f32, bf, dyn ? dyn : f16, dyn ? "fp16-dynamic" : "fp16");
}
