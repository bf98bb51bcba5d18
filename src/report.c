/* report.c - the comparison report: HTML with inline SVG charts. */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "internal.h"

static void esc_char(FILE *f, char c) {
    switch (c) {
    case '<': fputs("&lt;", f); break;
    case '>': fputs("&gt;", f); break;
    case '&': fputs("&amp;", f); break;
    case '"': fputs("&quot;", f); break;
    case '\'': fputs("&#39;", f); break;
    default: fputc(c, f);
    }
}

void mp_html_escape(FILE *f, const char *s) {
    for (; s && *s; s++) esc_char(f, *s);
}

/* fprintf for the page, with every %s argument HTML-escaped: names, titles
 * and labels can come from a user (mode names, module names of a PyTorch
 * model, file names), and markup only ever comes from the format. Takes the
 * conversions this file uses: flags, width and precision on d i u x c e f g
 * (with l, ll or z), %s without width or precision, and %%. */
__attribute__((format(printf, 2, 3))) static void hprintf(FILE *f, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    for (const char *p = fmt; *p;) {
        if (*p != '%') {
            const size_t n = strcspn(p, "%");
            fwrite(p, 1, n, f);
            p += n;
            continue;
        }
        char spec[16];
        size_t k = 0;
        spec[k++] = *p++;
        while (*p && strchr("-+ #0123456789.", *p) && k < 8) spec[k++] = *p++;
        int l = 0, z = 0;
        for (; *p == 'l' || *p == 'z'; p++) {
            l += *p == 'l', z |= *p == 'z';
            spec[k++] = *p;
        }
        const char c = *p ? *p++ : '%';
        spec[k++] = c, spec[k] = 0;
        switch (c) {
        case 's': mp_html_escape(f, va_arg(ap, const char *)); break;
        case 'd':
        case 'i':
        case 'c':
            if (z) fprintf(f, spec, va_arg(ap, ptrdiff_t));
            else if (l == 2) fprintf(f, spec, va_arg(ap, long long));
            else if (l == 1) fprintf(f, spec, va_arg(ap, long));
            else fprintf(f, spec, va_arg(ap, int));
            break;
        case 'u':
        case 'x':
            if (z) fprintf(f, spec, va_arg(ap, size_t));
            else if (l == 2) fprintf(f, spec, va_arg(ap, unsigned long long));
            else if (l == 1) fprintf(f, spec, va_arg(ap, unsigned long));
            else fprintf(f, spec, va_arg(ap, unsigned));
            break;
        case 'e':
        case 'f':
        case 'g': fprintf(f, spec, va_arg(ap, double)); break;
        case '%': fputc('%', f); break;
        default: abort(); /* a conversion this function does not take: it would misread the arguments */
        }
    }
    va_end(ap);
}

typedef struct {
    double x0, x1, y0, y1;
    int w, h, ml, mr, mt, mb;
} axes;

/* The axes of a full-width chart of the given height. */
static axes plot_axes(double x0, double x1, double y0, double y1, int h) {
    return (axes){x0, x1, y0, y1, 960, h, 60, 20, 30, 40};
}

static double px(const axes *a, double x) { return a->ml + (x - a->x0) / (a->x1 - a->x0) * (a->w - a->ml - a->mr); }
static double py(const axes *a, double y) {
    return a->mt + (1.0 - (y - a->y0) / (a->y1 - a->y0)) * (a->h - a->mt - a->mb);
}

/* Nice tick step for a range. */
static double tick_step(double range, int want) {
    const double raw = range / want, mag = pow(10, floor(log10(raw))), r = raw / mag;
    return (r < 1.5 ? 1 : r < 3.5 ? 2 : r < 7.5 ? 5 : 10) * mag;
}

/* The figure and its plot area, x ticks (when xticks), y ticks every ystep (none when ystep <= 0), the axis labels. */
static void frame(FILE *f, const axes *a, const char *id, const char *title, const char *xlabel, const char *ylabel,
                  double ystep, const char *yfmt, int ylog2, int xticks) {
    hprintf(f,
            "<figure><figcaption>%s</figcaption>\n<svg class=\"chart\" id=\"%s\" viewBox=\"0 0 %d %d\" "
            "xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" aria-label=\"%s\">\n",
            title, id, a->w, a->h, title);
    hprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#fafafa\" stroke=\"#ccc\"/>\n", a->ml, a->mt,
            a->w - a->ml - a->mr, a->h - a->mt - a->mb);
    const double xs = tick_step(a->x1 - a->x0, 6);
    for (double x = ceil(a->x0 / xs) * xs; xticks && x <= a->x1 + 1e-9; x += xs) {
        hprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#e3e3e3\"/>", px(a, x), px(a, x), a->mt,
                a->h - a->mb);
        hprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"tick\" text-anchor=\"middle\">%g</text>\n", px(a, x),
                a->h - a->mb + 14, x);
    }
    for (double y = ystep > 0 ? ceil(a->y0 / ystep) * ystep : a->y1 + 1; y <= a->y1 + 1e-12; y += ystep) {
        hprintf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#e3e3e3\"/>", a->ml, a->w - a->mr,
                py(a, y), py(a, y));
        char lab[32];
        if (ylog2) snprintf(lab, sizeof lab, "2^%.0f", y);
        else snprintf(lab, sizeof lab, yfmt, y);
        hprintf(f, "<text x=\"%d\" y=\"%.1f\" class=\"tick\" text-anchor=\"end\">%s</text>\n", a->ml - 5, py(a, y) + 4,
                lab);
    }
    hprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"label\" text-anchor=\"middle\">%s</text>\n",
            (a->ml + a->w - a->mr) / 2.0, a->h - 6, xlabel);
    hprintf(f, "<text transform=\"translate(14 %.1f) rotate(-90)\" class=\"label\" text-anchor=\"middle\">%s</text>\n",
            (a->mt + a->h - a->mb) / 2.0, ylabel);
}

static void chart_end(FILE *f) { fputs("</svg></figure>\n", f); }

/* The legend: the shown runs' colours and names left to right, wrapping at
 * the chart's width onto rows above the plot (with_legend makes the room). */
#define LEGEND_ROW 14

/* A chart's legend entries: a label and a colour each. */
typedef struct {
    int n;
    const char *label[256], *color[256];
} keys;

/* The shown runs' names and colours. */
static keys run_keys(const mp_report *r, const int *show) {
    keys k = {0};
    for (int i = 0; i < r->nruns && k.n < 256; i++)
        if (!show || show[i]) k.label[k.n] = r->runs[i].name, k.color[k.n++] = r->runs[i].color;
    return k;
}

/* Lays the labels out from row y down, written to f unless f is NULL;
 * returns the rows they take. A label is its swatch, 6.6 px a byte of 12 px
 * text and a gap: it wraps when its text would pass the plot's right edge. */
static int legend_flow(FILE *f, const axes *a, const keys *k, int y) {
    int rows = 1;
    for (int i = 0, x = 0; i < k->n; i++) {
        const double w = 34 + 6.6 * (double)strlen(k->label[i]);
        if (x > 0 && a->ml + 10 + x + w - 16 > a->w - a->mr) rows++, y += LEGEND_ROW, x = 0;
        if (f) {
            hprintf(f,
                    "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"4\" fill=\"%s\"/><text x=\"%d\" y=\"%d\" "
                    "class=\"legend\">",
                    a->ml + 10 + x, y, k->color[i], a->ml + 28 + x, y + 5);
            mp_html_escape(f, k->label[i]);
            fputs("</text>\n", f);
        }
        x += (int)ceil(w);
    }
    return rows;
}

/* a with its top margin and height grown by the legend's extra rows. */
static axes with_keys(axes a, const keys *k) {
    const int extra = LEGEND_ROW * (legend_flow(NULL, &a, k, 0) - 1);
    a.mt += extra, a.h += extra;
    return a;
}

static axes with_legend(axes a, const mp_report *r, const int *show) {
    const keys k = run_keys(r, show);
    return with_keys(a, &k);
}

static void legend_keys(FILE *f, const axes *a, const keys *k) {
    legend_flow(f, a, k, a->mt - 12 - LEGEND_ROW * (legend_flow(NULL, a, k, 0) - 1));
}

static void legend(FILE *f, const axes *a, const mp_report *r, const int *show) {
    const keys k = run_keys(r, show);
    legend_keys(f, a, &k);
}

/* Opens a data polyline; its points follow, then polyline_end. */
static void polyline_begin(FILE *f, const char *color, int dash) {
    hprintf(f, "<polyline class=\"series\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.8\"", color);
    fputs(dash ? " stroke-dasharray=\"5 3\" points=\"" : " points=\"", f);
}

static void polyline_end(FILE *f) { fputs("\"/>\n", f); }

/* A polyline of y over steps, averaged into at most 400 points. */
static void series(FILE *f, const axes *a, const float *y, long n, size_t stride, const char *color, int log2y,
                   int dash) {
    const long per = n > 400 ? (n + 399) / 400 : 1;
    polyline_begin(f, color, dash);
    for (long i = 0; i < n; i += per) {
        double s = 0;
        long c = 0;
        for (long k = i; k < i + per && k < n; k++)
            if (isfinite(y[(size_t)k * stride])) s += y[(size_t)k * stride], c++;
        if (!c) continue;
        double v = s / (double)c;
        if (log2y) v = log2(v > 0 ? v : 1e-30);
        if (v > a->y1) v = a->y1;
        if (v < a->y0) v = a->y0;
        hprintf(f, "%.1f,%.1f ", px(a, (double)(i + per / 2 + 1)), py(a, v));
    }
    polyline_end(f);
}

/* The longest run, in steps (at least 1). */
static long max_steps(const mp_report *r) {
    long maxn = 1;
    for (int i = 0; i < r->nruns; i++) maxn = r->runs[i].nsteps > maxn ? r->runs[i].nsteps : maxn;
    return maxn;
}

static double layer_underflow_at(const mp_report_run *u, long s, int l) {
    return u->layer_underflow[(size_t)s * (size_t)u->nlayers + (size_t)l];
}

static double nsteps_or_one(const mp_report_run *u) { return u->nsteps > 0 ? (double)u->nsteps : 1.0; }

/* All values the histogram counted, zeros included. */
static double hist_total(const mp_report_run *u) {
    double t = u->hist_zeros;
    for (int b = 0; b < MP_REPORT_HIST_BINS; b++) t += u->hist[b];
    return t;
}

/* The document head and its style sheet, up to the opening body tag. */
static void section_head(FILE *f, const mp_report *r) {
    hprintf(f, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>");
    mp_html_escape(f, r->title);
    hprintf(f,
            "</title>\n<style>\n"
            "body{font:15px/1.5 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:#222;max-width:1020px;"
            "margin:2em auto;padding:0 1em;background:#fff}\n"
            "h1{font-size:1.6em;margin-bottom:.2em}h2{font-size:1.2em;margin-top:1.8em;border-bottom:1px solid #ddd}\n"
            "table{border-collapse:collapse;width:100%%;font-size:.92em}th,td{padding:.35em .6em;text-align:right;"
            "border-bottom:1px solid "
            "#e5e5e5}th:first-child,td:first-child{text-align:left;white-space:nowrap}th{background:#f4f4f4}\n"
            "figure{margin:1.2em 0}figcaption{font-weight:600;margin-bottom:.3em}svg.chart{width:100%%;height:auto}\n"
            ".tick{font-size:11px;fill:#666}.label{font-size:12px;fill:#444}.legend{font-size:12px;fill:#222}\n"
            ".note{color:#555;font-size:.92em}.warn{color:#a00}code{background:#f3f3f3;padding:0 .25em}\n"
            ".swatch{display:inline-block;width:.8em;height:.8em;border-radius:2px;margin-right:.4em}\n"
            "#ablation td:nth-child(2),#ablation th:nth-child(2){text-align:left}\n"
            "h3{font-size:1em;margin:1.2em 0 .2em}pre.sample{white-space:pre-wrap;background:#f6f6f6;padding:.6em;"
            "font-size:.88em;margin:.3em 0}\n"
            "details.tensors,details.quant{margin:.5em 0}details summary{cursor:pointer}table.tensors{font-size:.82em}"
            "table.tensors th{text-align:center}tr.bad td{background:#fde0dc}\n"
            "#summary{font-size:.84em}#summary th,#summary td{padding:.35em .4em}#summary .format{text-align:left}\n"
            "</style>\n</head>\n<body>\n");
}

/* The heading and the command that reproduces the comparison. */
static void section_title(FILE *f, const mp_report *r) {
    fputs("<h1>", f);
    mp_html_escape(f, r->title);
    fputs("</h1>\n<p class=\"note\">Reproduce: <code>", f);
    mp_html_escape(f, r->command);
    fputs("</code></p>\n", f);
}

/* The plain-language reading, one paragraph per blank-line-separated block. */
static void section_reading(FILE *f, const mp_report *r) {
    fputs("<h2>What happened</h2>\n<div class=\"reading\"><p>", f);
    for (const char *s = r->reading; s && *s; s++) {
        if (s[0] == '\n' && s[1] == '\n') {
            fputs("</p>\n<p>", f);
            s++;
        } else {
            esc_char(f, *s);
        }
    }
    fputs("</p></div>\n", f);
}

/* One row of the summary table. */
static void summary_row(FILE *f, const mp_report *r, const mp_report_run *u, const mp_report_run *base) {
    char speed[48] = "", loss[32], ev[32], mem[32] = "-";
    if (base && u->ms_per_step > 0) snprintf(speed, sizeof speed, "<td>%.2fx</td>", base->ms_per_step / u->ms_per_step);
    else if (base) snprintf(speed, sizeof speed, "<td></td>");
    if (isfinite(u->memory_mib) && u->memory_mib > 0) snprintf(mem, sizeof mem, "%.0f MiB", u->memory_mib);
    snprintf(loss, sizeof loss, isfinite(u->last_loss) ? "%.4f" : "NaN/inf", u->last_loss);
    snprintf(ev, sizeof ev,
             !isfinite(u->eval) ? "NaN/inf"
             : r->eval_percent  ? "%.2f%%"
                                : "%.4f",
             r->eval_percent ? 100 * u->eval : u->eval);
    hprintf(f,
            "<tr data-mode=\"%s\"><td><span class=\"swatch\" style=\"background:%s\"></span>%s</td>"
            "<td class=\"format\">%s</td><td>%s</td><td class=\"acc\">%s</td><td>%ld</td><td>%g</td><td "
            "class=\"under\">%.4f%%</td>"
            "<td>%.4f%%</td><td>%.2f%%</td><td>%.4f%%</td><td>%.1f</td><td>%s</td>%s</tr>\n",
            u->name, u->color, u->name, u->format ? u->format : "", loss, ev, u->skipped_total, u->final_scale,
            100 * u->underflow, 100 * u->lost_gradients, 100 * u->dead_gradients, 100 * u->lost_updates, u->ms_per_step,
            mem, speed);
}

/* The summary table: one row per run, speed-ups against the baseline run. */
static void section_summary(FILE *f, const mp_report *r) {
    const mp_report_run *base = r->baseline >= 0 && r->baseline < r->nruns ? &r->runs[r->baseline] : NULL;
    fputs("<h2>Summary</h2>\n<table id=\"summary\">\n<tr><th>mode</th><th class=\"format\" title=\"the compute format, "
          "and the formats "
          "of the Linear layers' quantized GEMM operands (inputs and weights / gradients)\">format</th>"
          "<th>final train loss</th><th>",
          f);
    mp_html_escape(f, r->eval_name);
    hprintf(f, "</th><th>skipped steps</th><th>final scale</th><th>gradients underflowed</th>"
               "<th title=\"weight-gradient values nonzero in fp32 and 0 when stored\">weight gradients lost</th>"
               "<th title=\"weight-gradient values exactly 0 in fp32 (dead units)\">dead weight gradients</th>"
               "<th title=\"nonzero updates that left the stored weight unchanged\">updates lost</th><th>ms/step</th>"
               "<th title=\"the run's peak resident memory, where the caller measured it\">peak memory</th>");
    if (base) { /* speed-ups only against a baseline run */
        fputs("<th>speed-up vs ", f);
        mp_html_escape(f, base->name);
        fputs("</th>", f);
    }
    hprintf(f, "</tr>\n");
    for (int i = 0; i < r->nruns; i++) summary_row(f, r, &r->runs[i], base);
    fputs("</table>\n", f);
}

/* Each run's warnings, one paragraph each. */
static void section_warnings(FILE *f, const mp_report *r) {
    for (int i = 0; i < r->nruns; i++)
        for (int k = 0; k < r->runs[i].nwarnings; k++) {
            hprintf(f, "<p class=\"warn\">%s: ", r->runs[i].name);
            mp_html_escape(f, r->runs[i].warnings[k]);
            fputs("</p>\n", f);
        }
}

/* An eval figure as the tables show it: "87.91%", "1.6234" or "not finite". */
static void eval_value(FILE *f, const mp_report *r, double v) {
    if (!isfinite(v)) fputs("not finite", f);
    else if (r->eval_percent) hprintf(f, "%.2f%%", 100 * v);
    else hprintf(f, "%.4f", v);
}

/* A difference of eval figures, signed: "-0.25 points" or "+0.0433 (+1.76%)" (relative to ref). */
static void eval_delta(FILE *f, const mp_report *r, double delta, double ref) {
    if (!isfinite(delta)) fputs("-", f);
    else if (r->eval_percent) hprintf(f, "%+.2f points", 100 * delta);
    else if (ref != 0) hprintf(f, "%+.4f (%+.2f%%)", delta, 100 * delta / ref);
    else hprintf(f, "%+.4f", delta);
}

/* The protection p lacks against ref when that is their only difference, else NULL. */
static const char *removed_protection(const mp_precision *ref, const mp_precision *p) {
    if (p->compute != ref->compute || p->rounding != ref->rounding) return NULL;
    const int dm = p->master_weights != ref->master_weights, dr = p->reductions != ref->reductions,
              ds = p->scaling != ref->scaling;
    if (dm + dr + ds != 1) return NULL;
    if (dm)
        return ref->master_weights == MP_MASTER_FP32 && p->master_weights == MP_MASTER_NONE ? "fp32 master weights"
                                                                                            : NULL;
    if (dr) return ref->reductions == MP_REDUCE_FP32 && p->reductions == MP_REDUCE_HALF ? "fp32 reductions" : NULL;
    return ref->scaling != MP_SCALING_NONE && p->scaling == MP_SCALING_NONE ? "loss scaling" : NULL;
}

int mp_report_ablation_rows(const mp_report *r, mp_report_ablation *rows, int cap, int *ref) {
    int k = -1, n = 0;
    for (int i = 0; r && i < r->nruns && k < 0; i++)
        if (r->runs[i].precision && r->runs[i].name && strcmp(r->runs[i].name, "fp16-dynamic") == 0) k = i;
    if (ref) *ref = k;
    for (int i = 0; k >= 0 && i < r->nruns && n < cap; i++) {
        const mp_report_run *u = &r->runs[i];
        const char *what = u->precision && i != k ? removed_protection(r->runs[k].precision, u->precision) : NULL;
        if (what) rows[n++] = (mp_report_ablation){what, i, u->eval, u->eval - r->runs[k].eval};
    }
    return n;
}

/* "What each protection buys": the reference, then one row per run that lacks one of its protections. */
static void section_ablation(FILE *f, const mp_report *r) {
    mp_report_ablation rows[64];
    int ref;
    const int n = mp_report_ablation_rows(r, rows, 64, &ref);
    if (n == 0) return;
    const mp_report_run *b = &r->runs[ref];
    fputs("<h2>What each protection buys</h2>\n<p class=\"note\">The reference is <b>fp16-dynamic</b>: fp16 compute "
          "with fp32 master weights, fp32 reductions and dynamic loss scaling, ",
          f);
    mp_html_escape(f, r->eval_name);
    fputc(' ', f);
    eval_value(f, r, b->eval);
    hprintf(f,
            " with %ld skipped step%s. Each row is a run of this comparison with one of these protections removed "
            "and nothing else changed.</p>\n<table id=\"ablation\">\n<tr><th>protection removed</th><th>run</th><th>",
            b->skipped_total, b->skipped_total == 1 ? "" : "s");
    mp_html_escape(f, r->eval_name);
    fputs("</th><th>difference from fp16-dynamic</th><th>skipped steps</th></tr>\n", f);
    for (int k = 0; k < n; k++) {
        const mp_report_run *u = &r->runs[rows[k].run];
        hprintf(f, "<tr data-ablation=\"%s\"><td>%s</td><td>%s</td><td>", u->name, rows[k].protection, u->name);
        eval_value(f, r, rows[k].eval);
        fputs("</td><td>", f);
        eval_delta(f, r, rows[k].delta, b->eval);
        hprintf(f, "</td><td>%ld</td></tr>\n", u->skipped_total);
    }
    fputs("</table>\n", f);
}

/* Training loss per step, all runs; the y range is set by the first steps. */
static void chart_loss(FILE *f, const mp_report *r) {
    double lmax = 0.1;
    for (int i = 0; i < r->nruns; i++)
        for (long s = 0; s < r->runs[i].nsteps && s < 3; s++)
            if (isfinite(r->runs[i].loss[s]) && r->runs[i].loss[s] > lmax) lmax = r->runs[i].loss[s];
    const axes a = with_legend(plot_axes(0, (double)max_steps(r), 0, lmax * 1.05, 300), r, NULL);
    frame(f, &a, "loss", "Training loss per step (all modes)", "step", "loss", tick_step(lmax, 5), "%g", 0, 1);
    legend(f, &a, r, NULL);
    for (int i = 0; i < r->nruns; i++) series(f, &a, r->runs[i].loss, r->runs[i].nsteps, 1, r->runs[i].color, 0, 0);
    chart_end(f);
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Flags in show the runs with a finite evaluation loss; *lo gets the smallest, *top the lower median over those
 * runs of each one's largest (so that one run that diverges does not flatten the others); returns how many runs. */
static int eval_runs(const mp_report *r, int show[64], double *lo, double *top) {
    double most[64];
    int n = 0;
    for (int i = 0; i < r->nruns; i++) { /* nruns <= 64: mp_report_write */
        const mp_report_run *u = &r->runs[i];
        double hi = -INFINITY;
        for (long k = 0; k < u->neval; k++)
            if (isfinite(u->eval_losses[k]))
                show[i] = 1, *lo = fmin(*lo, u->eval_losses[k]), hi = fmax(hi, u->eval_losses[k]);
        if (show[i]) most[n++] = hi;
    }
    qsort(most, (size_t)n, sizeof *most, cmp_double);
    *top = n ? most[(n - 1) / 2] : 0;
    return n;
}

/* u's finite evaluations, those above the axes at their top edge: a line through them when there are two or more,
 * and a marker with its figure at each. Returns how many were above. */
static long eval_points(FILE *f, const axes *a, const mp_report_run *u) {
    long nf = 0, above = 0;
    for (long k = 0; k < u->neval; k++)
        nf += isfinite(u->eval_losses[k]) != 0, above += isfinite(u->eval_losses[k]) && u->eval_losses[k] > a->y1;
    if (nf >= 2) {
        polyline_begin(f, u->color, 0);
        for (long k = 0; k < u->neval; k++)
            if (isfinite(u->eval_losses[k]))
                hprintf(f, "%.1f,%.1f ", px(a, (double)u->eval_steps[k]), py(a, fmin(u->eval_losses[k], a->y1)));
        polyline_end(f);
    }
    for (long k = 0; k < u->neval; k++)
        if (isfinite(u->eval_losses[k]))
            hprintf(f,
                    "<circle class=\"series\" cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"><title>%s step %ld: %.4f"
                    "</title></circle>\n",
                    px(a, (double)u->eval_steps[k]), py(a, fmin(u->eval_losses[k], a->y1)), u->color, u->name,
                    u->eval_steps[k], u->eval_losses[k]);
    return above;
}

/* The evaluation loss at each evaluation, one line per run; omitted when no run has a finite one. */
static void chart_val_loss(FILE *f, const mp_report *r) {
    int show[64] = {0};
    double lo = INFINITY, hi = 0;
    if (!eval_runs(r, show, &lo, &hi)) return;
    const double pad = hi > lo ? 0.08 * (hi - lo) : 0.05 * fabs(hi) + 1e-3;
    const char *what = r->eval_loss_name ? r->eval_loss_name : "evaluation loss";
    char title[160];
    snprintf(title, sizeof title, "%s at each evaluation (the last one at the end of the run)", what);
    title[0] = (char)toupper((unsigned char)title[0]);
    const axes a = with_legend(plot_axes(0, (double)max_steps(r), lo - pad, hi + pad, 260), r, show);
    frame(f, &a, "val_loss", title, "step", what, tick_step(hi - lo + 2 * pad, 5), "%g", 0, 1);
    legend(f, &a, r, show);
    long above[64] = {0};
    for (int i = 0; i < r->nruns; i++)
        if (show[i]) above[i] = eval_points(f, &a, &r->runs[i]);
    chart_end(f);
    for (int i = 0; i < r->nruns; i++) { /* a note for each run drawn in part or not at all */
        if (!above[i] && (show[i] || r->runs[i].neval == 0)) continue;
        fputs("<p class=\"note\">", f);
        mp_html_escape(f, r->runs[i].name);
        if (above[i])
            hprintf(f, ": %ld evaluation%s above %.4g, drawn on the top edge.</p>\n", above[i],
                    above[i] == 1 ? "" : "s", a.y1);
        else hprintf(f, ": the %s was not finite (inf or NaN) at any evaluation.</p>\n", what);
    }
}

/* Each run's evaluation figure against the bytes per parameter it held, a
 * point per run with its name; omitted unless two runs have both. */
static void chart_bytes(FILE *f, const mp_report *r) {
    double x0 = INFINITY, x1 = 0, y0 = INFINITY, y1 = -INFINITY;
    int n = 0;
    for (int i = 0; i < r->nruns; i++) {
        const mp_report_run *u = &r->runs[i];
        if (!(u->bytes_per_param > 0) || !isfinite(u->eval)) continue;
        x0 = fmin(x0, u->bytes_per_param), x1 = fmax(x1, u->bytes_per_param), y0 = fmin(y0, u->eval),
        y1 = fmax(y1, u->eval);
        n++;
    }
    if (n < 2) return;
    const double xp = x1 > x0 ? 0.08 * (x1 - x0) : 1, yp = y1 > y0 ? 0.12 * (y1 - y0) : 0.05 * fabs(y1) + 1e-3;
    const char *what = r->eval_name ? r->eval_name : "evaluation";
    char title[160];
    snprintf(title, sizeof title,
             "%s against the bytes each parameter holds (weights, copies, gradient, compensation, "
             "optimizer state)",
             what);
    title[0] = (char)toupper((unsigned char)title[0]);
    const axes a = plot_axes(fmax(0, x0 - xp), x1 + xp, y0 - yp, y1 + yp, 260);
    frame(f, &a, "bytes", title, "bytes per parameter", what, tick_step(y1 - y0 + 2 * yp, 5),
          r->eval_percent ? "%.3f" : "%g", 0, 1);
    for (int i = 0; i < r->nruns; i++) {
        const mp_report_run *u = &r->runs[i];
        if (!(u->bytes_per_param > 0) || !isfinite(u->eval)) continue;
        hprintf(f, "<circle class=\"series\" cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"%s\"><title>",
                px(&a, u->bytes_per_param), py(&a, u->eval), u->color);
        mp_html_escape(f, u->name);
        hprintf(f, ": %.2f bytes per parameter, %.4g</title></circle><text x=\"%.1f\" y=\"%.1f\" class=\"legend\">",
                u->bytes_per_param, u->eval, px(&a, u->bytes_per_param) + 8, py(&a, u->eval) - 6);
        mp_html_escape(f, u->name);
        fputs("</text>\n", f);
    }
    chart_end(f);
}

/* A circle on the scale curve at each skipped step of u. */
static void skip_marks(FILE *f, const axes *a, const mp_report_run *u) {
    for (long s = 0; s < u->nsteps; s++)
        if (u->skipped[s])
            hprintf(f, "<circle class=\"skip\" cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"none\" stroke=\"#d00\"/>\n",
                    px(a, (double)(s + 1)), py(a, log2(u->scale[s])));
}

/* Flags in show the runs whose scale ever left 1; widens [*smin, *smax] to their log2 scales; returns how many. */
static int scaled_runs(const mp_report *r, int show[64], double *smin, double *smax) {
    int nscaled = 0;
    for (int i = 0; i < r->nruns; i++) { /* nruns <= 64: mp_report_write */
        const mp_report_run *u = &r->runs[i];
        for (long s = 0; s < u->nsteps; s++)
            if (u->scale[s] != 1.0f) show[i] = 1;
        if (!show[i]) continue;
        nscaled++;
        for (long s = 0; s < u->nsteps; s++) {
            const double l = log2(u->scale[s]);
            *smin = l < *smin ? l : *smin, *smax = l > *smax ? l : *smax;
        }
    }
    return nscaled;
}

/* The loss scale of the runs that used one (log2 axis), with their skipped steps; a note when none did. */
static void chart_scale(FILE *f, const mp_report *r) {
    int show[64] = {0};
    double smin = 1e30, smax = -1e30;
    if (!scaled_runs(r, show, &smin, &smax)) {
        fputs("<p class=\"note\">No mode in this comparison used a loss scale.</p>\n", f);
        return;
    }
    const axes b = with_legend(plot_axes(0, (double)max_steps(r), floor(smin) - 1, ceil(smax) + 1, 240), r, show);
    const double ystep = tick_step(b.y1 - b.y0, 5);
    frame(f, &b, "scale", "Loss scale (log2 axis); red marks: skipped steps (inf/NaN in the gradients)", "step",
          "loss scale", ystep < 1 ? 1 : ystep, "%g", 1, 1);
    legend(f, &b, r, show);
    for (int i = 0; i < r->nruns; i++) {
        if (!show[i]) continue;
        series(f, &b, r->runs[i].scale, r->runs[i].nsteps, 1, r->runs[i].color, 1, 0);
        skip_marks(f, &b, &r->runs[i]);
    }
    chart_end(f);
}

/* A bar of each layer in the per-layer chart and a line in the over-time chart: one of a run's layer_series, or
 * its layer_underflow. */
typedef struct {
    const mp_report_run *u;
    char label[160];
    const char *color;
    const float *values; /* (u->nsteps, u->nlayers): fractions */
} layer_src;

#define LAYER_SRC_MAX 128

/* The runs' sources in order (at most cap); *title gets the first run's layer_title among those with series,
 * NULL where none has: the charts then count values that became zero when stored. */
static int layer_srcs(const mp_report *r, layer_src *out, int cap, const char **title) {
    int n = 0;
    *title = NULL;
    for (int i = 0; i < r->nruns; i++) {
        const mp_report_run *u = &r->runs[i];
        if (u->layer_series && u->nlayer_series > 0) {
            if (!*title && u->layer_title) *title = u->layer_title;
            for (int k = 0; k < u->nlayer_series && n < cap; k++, n++) {
                const mp_report_layer_series *e = &u->layer_series[k];
                out[n].u = u, out[n].color = e->color, out[n].values = e->values;
                if (r->nruns > 1) snprintf(out[n].label, sizeof out[n].label, "%s: %s", u->name, e->label);
                else snprintf(out[n].label, sizeof out[n].label, "%s", e->label);
            }
        } else if (n < cap && u->layer_underflow) {
            out[n].u = u, out[n].color = u->color, out[n].values = u->layer_underflow;
            snprintf(out[n].label, sizeof out[n].label, "%s", u->name);
            n++;
        }
    }
    return n;
}

static double src_at(const layer_src *c, long s, int l) {
    return c->values[(size_t)s * (size_t)c->u->nlayers + (size_t)l];
}

/* The source's mean over steps of layer l. */
static double src_mean(const layer_src *c, int l) {
    double m = 0;
    for (long s = 0; s < c->u->nsteps; s++) m += src_at(c, s, l);
    return m / nsteps_or_one(c->u);
}

/* Whether any source has a nonzero value. */
static int srcs_any(const layer_src *c, int n) {
    for (int i = 0; i < n; i++)
        for (long s = 0; s < c[i].u->nsteps; s++)
            for (int l = 0; l < c[i].u->nlayers; l++)
                if (src_at(&c[i], s, l) != 0) return 1;
    return 0;
}

static keys src_keys(const layer_src *c, int n) {
    keys k = {0};
    for (int i = 0; i < n && k.n < 256; i++) k.label[k.n] = c[i].label, k.color[k.n++] = c[i].color;
    return k;
}

/* Source i's bars: its mean per layer, in its slot of each group; a nonzero mean is at least 1 px tall, so that
 * it does not look like none. */
static void layer_bars(FILE *f, const axes *a, const layer_src *c, int i, double gw) {
    for (int l = 0; l < c->u->nlayers; l++) {
        const double m = 100 * src_mean(c, l);
        const double x = px(a, l + 0.1) + gw * i, h = m > 0 ? fmax(py(a, 0) - py(a, m), 1.0) : 0.0;
        hprintf(f,
                "<rect class=\"series\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"><title>%s %s: "
                "%.4g%%</title></rect>\n",
                x, py(a, 0) - h, gw * 0.92, h, c->color, c->label, c->u->layer_names[l], m);
    }
}

#define LABEL_MAX 20 /* characters of a layer's name under a chart (the whole name on hover) */

/* Mean per layer: one group of bars per layer, one bar per source (a run, or each of its series). Where every value
 * is 0, one sentence stands for this chart and the next (chart_underflow), not two empty charts. */
static void chart_layers(FILE *f, const mp_report *r) {
    layer_src src[LAYER_SRC_MAX];
    const char *what;
    const int ns = layer_srcs(r, src, LAYER_SRC_MAX, &what);
    if (!srcs_any(src, ns)) {
        fputs("<p class=\"note\">", f);
        if (what) hprintf(f, "%s: none, in any layer on any step.</p>\n", what);
        else fputs("No gradient value became zero when stored, in any mode, layer or step.</p>\n", f);
        return;
    }
    int nl = 0;
    double umax = 1e-4;
    const char(*names)[64] = NULL;
    for (int i = 0; i < r->nruns; i++)
        if (r->runs[i].nlayers > nl) nl = r->runs[i].nlayers, names = r->runs[i].layer_names;
    for (int i = 0; i < ns; i++)
        for (int l = 0; l < src[i].u->nlayers; l++) umax = fmax(umax, src_mean(&src[i], l));
    umax *= 100 * 1.1;
    /* long names (a transformer's "transformer.h.0.mlp.c_fc") or many layers: labels turned, their ends
     * shown (the whole name on hover), in a taller bottom margin */
    size_t longest = 0;
    for (int l = 0; l < nl; l++) longest = strlen(names[l]) > longest ? strlen(names[l]) : longest;
    const int turn = nl > 0 && (size_t)nl * (longest < LABEL_MAX ? longest : LABEL_MAX) * 7 > 860;
    const keys k = src_keys(src, ns);
    axes c = with_keys(plot_axes(0, (double)(nl > 0 ? nl : 1), 0, umax, 260), &k);
    if (turn) c.mb += 90, c.h += 90;
    char title[400];
    snprintf(title, sizeof title, "%s, by layer (mean over steps)",
             what ? what : "Gradient values that became exactly zero when stored");
    frame(f, &c, "layers", title, "tensor (first layer on the left)", "% of values", tick_step(umax, 5), "%g%%", 0, 0);
    legend_keys(f, &c, &k);
    const double gw = (px(&c, 1) - px(&c, 0)) * 0.8 / (ns > 0 ? ns : 1);
    for (int i = 0; i < ns; i++) layer_bars(f, &c, &src[i], i, gw);
    for (int l = 0; l < nl; l++) {
        const double x = px(&c, l + 0.5);
        const int y = c.h - c.mb + 14;
        const size_t len = strlen(names[l]);
        if (turn)
            hprintf(f,
                    "<text x=\"%.1f\" y=\"%d\" class=\"tick\" text-anchor=\"end\" "
                    "transform=\"rotate(-40 %.1f %d)\"><title>",
                    x, y, x, y);
        else hprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"tick\" text-anchor=\"middle\"><title>", x, y);
        mp_html_escape(f, names[l]);
        fputs("</title>", f);
        if (len > LABEL_MAX) fputs("\xe2\x80\xa6", f); /* an ellipsis, then the name's end */
        mp_html_escape(f, names[l] + (len > LABEL_MAX ? len - (LABEL_MAX - 1) : 0));
        fputs("</text>\n", f);
    }
    chart_end(f);
}

/* log2(limit / amax): doublings left before a store of amax overflows; NAN where nothing finite and nonzero was
 * stored (amax 0). */
static double headroom_log2(double limit, float amax) { return amax > 0 ? log2(limit / (double)amax) : NAN; }

/* Tensor l's activation headroom against fp16's largest value; NAN where u has no tensors or l none. */
static double headroom16(const mp_report *r, const mp_report_run *u, int l) {
    return u->tensors && l < u->nlayers ? headroom_log2(r->fp16_max, u->tensors[l].fwd.amax) : NAN;
}

/* The inf values tensor l's stored activations held in run u (it overflowed). */
static uint64_t overflowed(const mp_report_run *u, int l) {
    return u->tensors && l < u->nlayers ? u->tensors[l].fwd.overflow : 0;
}

/* Activation headroom per tensor against fp16's largest value (in every mode,
 * so the runs compare): one group of bars per tensor that stored activations,
 * one bar per run. */
static void chart_headroom(FILE *f, const mp_report *r) {
    int nl = 0, col[1024], ncol = 0;
    double hmin = 0, hmax = 1;
    const char(*names)[64] = NULL;
    for (int i = 0; i < r->nruns; i++)
        if (r->runs[i].tensors && r->runs[i].nlayers > nl) nl = r->runs[i].nlayers, names = r->runs[i].layer_names;
    for (int l = 0; l < nl && ncol < 1024; l++) { /* the tensors with a figure in some run, in the model's order */
        int any = 0;
        for (int i = 0; i < r->nruns; i++) {
            const double h = headroom16(r, &r->runs[i], l);
            if (overflowed(&r->runs[i], l)) any = 1, hmin = fmin(hmin, -1); /* drawn below 0, whatever its amax */
            if (isnan(h)) continue;
            any = 1, hmax = fmax(hmax, h), hmin = fmin(hmin, h);
        }
        if (any) col[ncol++] = l;
    }
    if (ncol == 0) return;
    const axes c = with_legend(plot_axes(0, (double)ncol, floor(hmin), hmax * 1.1, 260), r, NULL);
    frame(f, &c, "headroom",
          "Activation headroom: doublings left before the largest activation stored reaches fp16's 65504 "
          "(log2 of the ratio; at or below 0 it would overflow in fp16; a red bar down to -1: the tensor held inf)",
          "tensor (forward order)", "doublings", tick_step(hmax * 1.1 - floor(hmin), 5), "%g", 0, 0);
    legend(f, &c, r, NULL);
    const double gw = (px(&c, 1) - px(&c, 0)) * 0.8 / (r->nruns > 0 ? r->nruns : 1);
    for (int i = 0; i < r->nruns; i++) {
        const mp_report_run *u = &r->runs[i];
        for (int k = 0; k < ncol; k++) {
            const double x = px(&c, k + 0.1) + gw * i, y0 = py(&c, 0);
            const uint64_t inf = overflowed(u, col[k]);
            if (inf) { /* an overflowed tensor: drawn, not a zero-height bar */
                hprintf(f,
                        "<rect class=\"series overflow\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                        "fill=\"#d62728\"><title>",
                        x, y0, gw * 0.92, fabs(py(&c, -1) - y0));
                mp_html_escape(f, u->name);
                fputc(' ', f);
                mp_html_escape(f, u->layer_names[col[k]]);
                hprintf(f, ": overflowed (%llu values inf)</title></rect>\n", (unsigned long long)inf);
                continue;
            }
            const double h = headroom16(r, u, col[k]);
            if (isnan(h)) continue;
            const double y = py(&c, h);
            hprintf(f,
                    "<rect class=\"series\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"><title>",
                    x, fmin(y, y0), gw * 0.92, fabs(y0 - y), u->color);
            mp_html_escape(f, u->name);
            fputc(' ', f);
            mp_html_escape(f, u->layer_names[col[k]]);
            hprintf(f, ": %.2f</title></rect>\n", h);
        }
    }
    for (int k = 0; k < ncol; k++) {
        hprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"tick\" text-anchor=\"middle\">", px(&c, k + 0.5),
                c.h - c.mb + 14 + 10 * (k % 2));
        mp_html_escape(f, names[col[k]]);
        fputs("</text>\n", f);
    }
    chart_end(f);
}

/* a / b; 0 when b is 0 (as the run's JSON). */
static double share(uint64_t a, uint64_t b) { return b ? (double)a / (double)b : 0.0; }

/* The share of t's gradient stores that became zero. */
static double grad_underflow(const mp_tensor_stats *t) { return share(t->bwd.underflow, t->bwd_elements); }

/* Whether t stored an overflow or a NaN, activation or gradient. */
static int tensor_bad(const mp_tensor_stats *t) {
    return (t->fwd.overflow | t->fwd.nan | t->bwd.overflow | t->bwd.nan) != 0;
}

/* The five cells of one kind of store of a tensor (n values over the run, the largest finite magnitude amax):
 * underflow and subnormal shares, overflow and NaN counts, headroom against limit. All "-" where there was no such
 * store; the headroom "-" where nothing finite and nonzero was stored. */
static void store_cells(FILE *f, const mp_convert_stats *c, uint64_t n, float amax, double limit) {
    if (n == 0) {
        fputs("<td>-</td><td>-</td><td>-</td><td>-</td><td>-</td>", f);
        return;
    }
    hprintf(f, "<td>%.4f%%</td><td>%.4f%%</td><td>%llu</td><td>%llu</td>", 100 * share(c->underflow, n),
            100 * share(c->subnormal, n), (unsigned long long)c->overflow, (unsigned long long)c->nan);
    const double h = headroom_log2(limit, amax);
    if (isnan(h)) fputs("<td>-</td>", f);
    else hprintf(f, "<td>%.2f</td>", h);
}

/* Tensor l of u as a row: its activation and gradient stores, then for a weight the shares of its weight-gradient
 * values lost and dead; class "bad" when it stored an overflow or a NaN. */
static void tensor_row(FILE *f, const mp_report_run *u, int l) {
    const mp_tensor_stats *t = &u->tensors[l];
    const double limit = u->headroom_format->max;
    fputs(tensor_bad(t) ? "<tr class=\"bad\" data-tensor=\"" : "<tr data-tensor=\"", f);
    mp_html_escape(f, u->layer_names[l]);
    fputs("\"><td>", f);
    mp_html_escape(f, u->layer_names[l]);
    fputs("</td>", f);
    store_cells(f, &t->fwd, t->fwd_elements, t->fwd.amax, limit);
    store_cells(f, &t->bwd, t->bwd_elements, t->bwd.amax, limit);
    if (t->has_wgrad)
        hprintf(f, "<td>%.4f%%</td><td>%.2f%%</td></tr>\n", 100 * share(t->wgrad_lost, t->wgrad_elements),
                100 * share(t->wgrad_dead, t->wgrad_elements));
    else fputs("<td>-</td><td>-</td></tr>\n", f);
}

/* u's tensors in one line: the one with the largest share of gradient values that became zero (the first of
 * equals), and how many stored an overflow or a NaN, the first three named. */
static void tensor_digest(FILE *f, const mp_report_run *u) {
    int worst = -1, nbad = 0;
    for (int l = 0; l < u->nlayers; l++) {
        const mp_tensor_stats *t = &u->tensors[l];
        if (t->bwd.underflow && (worst < 0 || grad_underflow(t) > grad_underflow(&u->tensors[worst]))) worst = l;
        nbad += tensor_bad(t);
    }
    if (worst < 0) {
        fputs("no gradient value became zero", f);
    } else {
        fputs("most gradient underflow in ", f);
        mp_html_escape(f, u->layer_names[worst]);
        hprintf(f, " (%.3g%%)", 100 * grad_underflow(&u->tensors[worst]));
    }
    if (nbad == 0) {
        fputs("; no overflow or NaN", f);
        return;
    }
    hprintf(f, "; overflow or NaN in %d tensor%s: ", nbad, nbad == 1 ? "" : "s");
    for (int l = 0, k = 0; l < u->nlayers && k < 3; l++)
        if (tensor_bad(&u->tensors[l])) {
            if (k++) fputs(", ", f);
            mp_html_escape(f, u->layer_names[l]);
        }
    if (nbad > 3) hprintf(f, " and %d more", nbad - 3);
}

/* u's per-tensor table in a closed <details> whose summary is the run's name and digest. */
static void tensor_table(FILE *f, const mp_report_run *u) {
    fputs("<details class=\"tensors\" data-mode=\"", f);
    mp_html_escape(f, u->name);
    fputs("\"><summary><b>", f);
    mp_html_escape(f, u->name);
    fputs("</b>: ", f);
    tensor_digest(f, u);
    fputs("</summary>\n<table class=\"tensors\">\n<tr><th rowspan=\"2\">tensor</th><th colspan=\"5\">activation "
          "stores</th><th colspan=\"5\">gradient stores</th><th colspan=\"2\">weight gradients</th></tr>\n<tr>",
          f);
    for (int k = 0; k < 2; k++) {
        fputs("<th>underflow</th><th>subnormal</th><th>overflow</th><th>NaN</th><th>headroom vs ", f);
        mp_html_escape(f, u->headroom_format->name);
        fputs("</th>", f);
    }
    fputs("<th>lost</th><th>dead</th></tr>\n", f);
    for (int l = 0; l < u->nlayers; l++) tensor_row(f, u, l);
    fputs("</table>\n</details>\n", f);
}

/* Each run's figures per tensor over the whole run (the runs that have them), one closed table per run. */
static void section_tensors(FILE *f, const mp_report *r) {
    int any = 0;
    for (int i = 0; i < r->nruns; i++) any |= r->runs[i].tensors != NULL;
    if (!any) return;
    fputs("<h2>Per tensor</h2>\n<p class=\"note\">Each tensor's stores over the whole run, as in the run's JSON: "
          "underflow, the share of the values stored that were nonzero and became zero; subnormal, the share stored "
          "as subnormals; overflow, the finite values that became inf; NaN, the NaNs stored; headroom, log2 of the "
          "format's largest value over the largest finite magnitude stored (doublings left before an overflow; "
          "gradients with the loss scale in them). For a weight: the shares of its weight-gradient values lost "
          "(nonzero in fp32, 0 when stored) and dead (0 in fp32 already). Highlighted rows stored an overflow or a "
          "NaN; \"-\": the tensor has no such store, or (headroom) stored nothing finite and nonzero.</p>\n",
          f);
    for (int i = 0; i < r->nruns; i++)
        if (r->runs[i].tensors) tensor_table(f, &r->runs[i]);
}

/* ---- recipes: the quantized tensors ---- */

/* Flags in show the runs with quantized tensors; returns how many. */
static int quant_runs(const mp_report *r, int show[64]) {
    int n = 0;
    for (int i = 0; i < r->nruns; i++) n += show[i] = r->runs[i].quant && r->runs[i].quant->n > 0;
    return n;
}

/* One chart of a per-step share of the quantized values (saturated or flushed), one line per run with a recipe. */
static void chart_quant_share(FILE *f, const mp_report *r, const int *show, int flushed) {
    const long maxn = max_steps(r);
    double vmax = 1e-4;
    float *pct = malloc(sizeof(float) * (size_t)maxn * (size_t)(r->nruns > 0 ? r->nruns : 1));
    for (int i = 0; pct && i < r->nruns; i++) {
        const mp_report_run *u = &r->runs[i];
        for (long s = 0; show[i] && s < u->nsteps; s++) {
            const float v = 100 * (flushed ? u->quant->flushed : u->quant->saturated)[s];
            pct[(size_t)i * (size_t)maxn + (size_t)s] = v;
            vmax = v > vmax ? v : vmax;
        }
    }
    const axes a = with_legend(plot_axes(0, (double)maxn, 0, vmax * 1.1, 240), r, show);
    frame(f, &a, flushed ? "quant_flushed" : "quant_saturated",
          flushed
              ? "Quantized values flushed to zero (nonzero, stored as 0), per step: all quantized tensors together"
              : "Quantized values saturated (clamped to the format's largest value), per step: all quantized tensors "
                "together",
          "step", "% of values", tick_step(vmax * 1.1, 5), "%g%%", 0, 1);
    legend(f, &a, r, show);
    for (int i = 0; pct && i < r->nruns; i++)
        if (show[i]) series(f, &a, pct + (size_t)i * (size_t)maxn, r->runs[i].nsteps, 1, r->runs[i].color, 0, 0);
    free(pct);
    chart_end(f);
}

/* The saturated and flushed shares over time of the runs with a recipe; nothing when none has one. */
static void charts_quant(FILE *f, const mp_report *r) {
    int show[64] = {0};
    if (!quant_runs(r, show)) return;
    chart_quant_share(f, r, show, 0);
    chart_quant_share(f, r, show, 1);
}

/* A row per Linear layer of u with the recipe it ran in, in a closed <details> of its own. */
static void assigned_table(FILE *f, const mp_report_run *u) {
    const mp_report_quant *qr = u->quant;
    if (!qr->nassigned) return;
    hprintf(f,
            "<details class=\"layers\" data-mode=\"%s\"><summary><b>%s</b>: the recipe of each Linear layer"
            "</summary>\n<table class=\"tensors layers\">\n<tr><th>layer</th><th>recipe</th></tr>\n",
            u->name, u->name);
    for (int k = 0; k < qr->nassigned; k++)
        hprintf(f, "<tr data-layer=\"%s\"><td>%s</td><td>%s</td></tr>\n", qr->assigned_names[k], qr->assigned_names[k],
                qr->assigned_recipes[k]);
    fputs("</table>\n</details>\n", f);
}

/* u's quantized tensors in a closed <details>: the run's shares in its summary, one row per tensor. */
static void quant_table(FILE *f, const mp_report_run *u) {
    const mp_report_quant *qr = u->quant;
    uint64_t n = 0, sat = 0, fl = 0, nonfinite = 0;
    for (int k = 0; k < qr->n; k++)
        n += qr->stats[k].n, sat += qr->stats[k].saturated, fl += qr->stats[k].flushed,
            nonfinite += qr->stats[k].nonfinite;
    hprintf(f,
            "<details class=\"quant\" data-mode=\"%s\"><summary><b>%s</b> (%s): %.4f%% of the quantized values "
            "saturated, %.4f%% flushed to zero",
            u->name, u->name, u->format ? u->format : "", 100 * share(sat, n), 100 * share(fl, n));
    if (nonfinite) hprintf(f, ", %llu inf or NaN", (unsigned long long)nonfinite);
    fputs("</summary>\n<table class=\"tensors quant\">\n<tr><th>tensor</th><th>max amax</th><th>last scale</th>"
          "<th>saturated</th><th>flushed</th><th>inf/NaN</th></tr>\n",
          f);
    for (int k = 0; k < qr->n; k++) {
        const mp_quant_stats *q = &qr->stats[k];
        hprintf(f, "<tr data-quant=\"%s\"", qr->names[k]);
        if (q->nonfinite) fputs(" class=\"bad\"", f);
        hprintf(f, "><td>%s</td><td>%.6g</td><td>%.6g</td><td>%.4f%%</td><td>%.4f%%</td><td>%llu</td></tr>\n",
                qr->names[k], (double)q->amax, (double)qr->scale[k], 100 * share(q->saturated, q->n),
                100 * share(q->flushed, q->n), (unsigned long long)q->nonfinite);
    }
    fputs("</table>\n</details>\n", f);
    assigned_table(f, u);
}

/* Each recipe run's quantized tensors over the whole run. */
static void section_quant(FILE *f, const mp_report *r) {
    int show[64] = {0};
    if (!quant_runs(r, show)) return;
    fputs(
        "<h2>Quantized tensors</h2>\n<p class=\"note\">The runs with an fp8 or fp4 recipe quantize the operands of "
        "each Linear layer's three GEMMs: its input, its weight and the gradient of its output (input, weight, grad). "
        "Per tensor over the whole run: max amax, the largest finite magnitude quantized; last scale, the per-tensor "
        "scale of the last step (x times it is coded: fp8's scale, NVFP4's global scale; 1 for MXFP8, whose scales "
        "are per block); saturated, the share of its values clamped to the format's largest value; flushed, the "
        "share of its nonzero values stored as zero; inf/NaN, such inputs (highlighted). The other runs quantize "
        "nothing.</p>\n",
        f);
    for (int i = 0; i < r->nruns; i++)
        if (show[i]) quant_table(f, &r->runs[i]);
}

/* The skipped steps of each run with where their inf/NaN was (the first 20 of each). */
static void section_skips(FILE *f, const mp_report *r) {
    long total = 0;
    for (int i = 0; i < r->nruns; i++) total += r->runs[i].nskips;
    if (total == 0) return;
    fputs("<h2>Skipped steps</h2>\n<table><tr><th>mode</th><th>step</th><th>loss scale</th><th>where the inf/NaN was"
          "</th></tr>\n",
          f);
    for (int i = 0; i < r->nruns; i++) {
        const mp_report_run *u = &r->runs[i];
        for (long k = 0; k < u->nskips && k < 20; k++) {
            fputs("<tr><td>", f);
            mp_html_escape(f, u->name);
            hprintf(f, "</td><td>%ld</td><td>%g</td><td>", u->skips[k].step, u->skips[k].scale);
            mp_html_escape(f, u->skips[k].where);
            fputs("</td></tr>\n", f);
        }
        if (u->skipped_total > 20) {
            fputs("<tr><td>", f);
            mp_html_escape(f, u->name);
            hprintf(f, "</td><td colspan=\"3\">and %ld more skipped steps</td></tr>\n", u->skipped_total - 20);
        }
    }
    fputs("</table>\n", f);
}

/* Over time: per step, each source's mean over layers (nothing where chart_layers found every value 0). */
static void chart_underflow(FILE *f, const mp_report *r) {
    layer_src src[LAYER_SRC_MAX];
    const char *what;
    const int ns = layer_srcs(r, src, LAYER_SRC_MAX, &what);
    if (!srcs_any(src, ns)) return;
    const long maxn = max_steps(r);
    double tmax = 1e-4;
    float *tot = malloc(sizeof(float) * (size_t)maxn * (size_t)(ns > 0 ? ns : 1));
    for (int i = 0; tot && i < ns; i++) {
        const mp_report_run *u = src[i].u;
        for (long s = 0; s < u->nsteps; s++) {
            double m = 0;
            for (int l = 0; l < u->nlayers; l++) m += src_at(&src[i], s, l);
            const float v = (float)(100 * m / (u->nlayers ? u->nlayers : 1));
            tot[(size_t)i * (size_t)maxn + (size_t)s] = v;
            tmax = v > tmax ? v : tmax;
        }
    }
    const keys k = src_keys(src, ns);
    const axes d = with_keys(plot_axes(0, (double)maxn, 0, tmax * 1.1, 240), &k);
    char title[400];
    snprintf(title, sizeof title, "%s, over time (mean over layers)", what ? what : "Gradient values that became zero");
    frame(f, &d, "underflow", title, "step", "% of values", tick_step(tmax * 1.1, 5), "%g%%", 0, 1);
    legend_keys(f, &d, &k);
    for (int i = 0; tot && i < ns; i++)
        series(f, &d, tot + (size_t)i * (size_t)maxn, src[i].u->nsteps, 1, src[i].color, 0, 0);
    free(tot);
    chart_end(f);
}

/* The fp16 limits on a log2 |g| axis: the flush-to-zero region shaded, and where zero, normal and inf begin. */
static void fp16_limits(FILE *f, const axes *e, const mp_report *r, int lo) {
    const double lsub = log2(r->fp16_min_subnormal), lnorm = log2(r->fp16_min_normal), lmaxv = log2(r->fp16_max);
    hprintf(f, "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"#d62728\" opacity=\"0.08\"/>\n",
            px(e, lo), e->mt, px(e, lsub - 1) - px(e, lo), e->h - e->mt - e->mb);
    const struct {
        double x;
        const char *t;
    } lines[3] = {{lsub - 1, "fp16: below this, 0"}, {lnorm, "fp16 smallest normal"}, {lmaxv + 1, "fp16: inf above"}};
    for (int k = 0; k < 3; k++)
        hprintf(f,
                "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#a00\" stroke-dasharray=\"4 3\"/>"
                "<text x=\"%.1f\" y=\"%d\" class=\"tick\" fill=\"#a00\">%s</text>\n",
                px(e, lines[k].x), px(e, lines[k].x), e->mt, e->h - e->mb, px(e, lines[k].x) + 3, e->mt + 12 + 12 * k,
                lines[k].t);
}

/* u's histogram as a step curve, in % of its values. */
static void hist_curve(FILE *f, const axes *e, const mp_report_run *u, int lo) {
    const double tot = hist_total(u);
    polyline_begin(f, u->color, 0);
    for (int b = 0; b < MP_REPORT_HIST_BINS; b++) {
        const double v = tot > 0 ? 100 * u->hist[b] / tot : 0;
        hprintf(f, "%.1f,%.1f %.1f,%.1f ", px(e, lo + b), py(e, v), px(e, lo + b + 1), py(e, v));
    }
    polyline_end(f);
}

/* The weight-gradient histograms of the runs that have one, against the fp16 limits, and how to read them. */
static void chart_histogram(FILE *f, const mp_report *r) {
    double hmax = 1e-9;
    int nh = 0;
    for (int i = 0; i < r->nruns; i++) {
        const mp_report_run *u = &r->runs[i];
        if (!u->has_hist) continue;
        nh++;
        const double tot = hist_total(u);
        for (int b = 0; b < MP_REPORT_HIST_BINS; b++)
            hmax = 100 * u->hist[b] / tot > hmax ? 100 * u->hist[b] / tot : hmax;
    }
    if (!nh) return;
    const int lo = r->runs[0].hist_lo;
    const axes e = with_legend(plot_axes(lo, lo + MP_REPORT_HIST_BINS, 0, hmax * 1.1, 300), r, NULL);
    frame(f, &e, "histogram",
          "Where the weight gradients are: log2 |g| as computed, before the store (loss scale included)",
          "log2 of the magnitude", "% of values", tick_step(hmax * 1.1, 5), "%g%%", 0, 1);
    legend(f, &e, r, NULL);
    fp16_limits(f, &e, r, lo);
    for (int i = 0; i < r->nruns; i++)
        if (r->runs[i].has_hist) hist_curve(f, &e, &r->runs[i], lo);
    chart_end(f);
    fputs(
        "<p class=\"note\">Each curve is one training step's weight gradients, as the backward pass computed them in "
        "fp32 just before they are stored in the mode's format. A loss scale S shifts the whole curve right by log2 S. "
        "The shaded region is where fp16 rounds to zero.</p>\n",
        f);
}

/* The heat maps' colours: ColorBrewer's YlOrRd, light to dark, for nonzero
 * values on a log scale shared by all the heat maps; zero has its own grey. */
#define HEAT_COLORS 6
static const char *const heat_colors[HEAT_COLORS] = {"#ffffb2", "#fed976", "#feb24c", "#fd8d3c", "#f03b20", "#bd0026"};
static const char heat_zero[] = "#e4e4e4";

/* A run's per-tensor underflow binned in time: ncols columns of per steps (the last may hold fewer). */
typedef struct {
    long per, ncols;
    double *v; /* (nlayers, ncols): the mean underflow fraction of the column's steps */
} heat;

/* Columns for u: at most 200, and at most about 8000 cells. */
static long heat_max_columns(const mp_report_run *u) {
    const long c = 8000 / (u->nlayers > 0 ? u->nlayers : 1);
    return c < 25 ? 25 : c > 200 ? 200 : c;
}

/* Bins u's underflow into h (h->v NULL when u has no steps or tensors, or memory ran out) and widens
 * [*lo, *hi] to its nonzero cells; returns 1 when one is nonzero. */
static int heat_bin(const mp_report_run *u, heat *h, double *lo, double *hi) {
    *h = (heat){0, 0, NULL};
    if (u->nsteps <= 0 || u->nlayers <= 0) return 0;
    const long cols = heat_max_columns(u);
    h->per = (u->nsteps + cols - 1) / cols, h->ncols = (u->nsteps + h->per - 1) / h->per;
    if (!(h->v = malloc(sizeof *h->v * (size_t)u->nlayers * (size_t)h->ncols))) return 0;
    int any = 0;
    for (int l = 0; l < u->nlayers; l++)
        for (long c = 0; c < h->ncols; c++) {
            const long s0 = c * h->per, s1 = s0 + h->per < u->nsteps ? s0 + h->per : u->nsteps;
            double m = 0;
            for (long s = s0; s < s1; s++) m += layer_underflow_at(u, s, l);
            const double v = m / (double)(s1 - s0);
            h->v[(size_t)l * (size_t)h->ncols + (size_t)c] = v;
            if (v > 0) any = 1, *lo = fmin(*lo, v), *hi = fmax(*hi, v);
        }
    return any;
}

/* Colours used for nonzero values: all of them, or only the darkest when every value is the same. */
static int heat_ncolors(double lo, double hi) { return hi > lo ? HEAT_COLORS : 1; }

/* The colour index of v > 0 on the log scale from lo to hi. */
static int heat_color_of(double v, double lo, double hi) {
    if (hi <= lo) return 0; /* one value: heat_ncolors gives one colour, the last */
    const int b = (int)floor(HEAT_COLORS * log(v / lo) / log(hi / lo));
    return b < 0 ? 0 : b >= HEAT_COLORS ? HEAT_COLORS - 1 : b;
}

/* The colour scale across the top: zero, then each colour with the values it stands for (data-lo, data-hi). */
static void heat_legend(FILE *f, double lo, double hi) {
    hprintf(
        f,
        "<rect class=\"scale\" x=\"10\" y=\"8\" width=\"14\" height=\"12\" fill=\"%s\" data-lo=\"0\" data-hi=\"0\"/>"
        "<text x=\"28\" y=\"18\" class=\"legend\">0</text>\n",
        heat_zero);
    const int nc = heat_ncolors(lo, hi);
    for (int k = 0; k < nc; k++) {
        const double a = lo * pow(hi / lo, (double)k / nc),
                     b = k == nc - 1 ? hi : lo * pow(hi / lo, (double)(k + 1) / nc);
        const double x = 50 + 145 * k;
        hprintf(f,
                "<rect class=\"scale\" x=\"%.0f\" y=\"8\" width=\"14\" height=\"12\" fill=\"%s\" data-lo=\"%.6g\" "
                "data-hi=\"%.6g\"/><text x=\"%.0f\" y=\"18\" class=\"legend\">%.2g&#8211;%.2g%%</text>\n",
                x, heat_colors[HEAT_COLORS - nc + k], a, b, x + 18, 100 * a, 100 * b);
    }
}

/* One cell: tensor l over column c, coloured by its value, with the figures in its title. */
static void heat_cell(FILE *f, const axes *a, const mp_report_run *u, const heat *h, int l, long c, double lo,
                      double hi) {
    const double v = h->v[(size_t)l * (size_t)h->ncols + (size_t)c];
    const long s0 = c * h->per + 1, s1 = s0 + h->per - 1 < u->nsteps ? s0 + h->per - 1 : u->nsteps;
    const char *fill = v > 0 ? heat_colors[HEAT_COLORS - heat_ncolors(lo, hi) + heat_color_of(v, lo, hi)] : heat_zero;
    const double x0 = px(a, (double)(s0 - 1)), y0 = py(a, (double)(u->nlayers - l));
    hprintf(f, "<rect class=\"series\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"><title>", x0,
            y0, px(a, (double)s1) - x0, py(a, (double)(u->nlayers - l - 1)) - y0, fill);
    mp_html_escape(f, u->layer_names[l]);
    if (s1 > s0) hprintf(f, ", steps %ld-%ld: %.4g%%</title></rect>\n", s0, s1, 100 * v);
    else hprintf(f, ", step %ld: %.4g%%</title></rect>\n", s0, 100 * v);
}

/* u's heat map: one row per tensor (first at the top), one column per h->per steps. */
static void heat_chart(FILE *f, const mp_report_run *u, const heat *h, double lo, double hi) {
    size_t longest = 1;
    for (int l = 0; l < u->nlayers; l++)
        longest = strlen(u->layer_names[l]) > longest ? strlen(u->layer_names[l]) : longest;
    int rh = 360 / (u->nlayers > 0 ? u->nlayers : 1); /* row height: 9 .. 18 */
    rh = rh < 9 ? 9 : rh > 18 ? 18 : rh;
    const int font = rh - 1 < 11 ? rh - 1 : 11, ml = 16 + (int)((double)longest * 0.62 * font);
    const axes a = {0, (double)u->nsteps, 0, (double)u->nlayers, 960, 48 + rh * u->nlayers + 40, ml, 20, 48, 40};
    char id[96], title[256];
    snprintf(id, sizeof id, "heatmap-%s", u->name);
    snprintf(title, sizeof title,
             "%s: gradient values that became zero when stored, per tensor and step (share of the "
             "tensor's stores; one colour scale for all the heat maps)",
             u->name);
    frame(f, &a, id, title, "step", "", 0, "%g", 0, 1);
    heat_legend(f, lo, hi);
    fputs("<g shape-rendering=\"crispEdges\">\n", f);
    for (int l = 0; l < u->nlayers; l++)
        for (long c = 0; c < h->ncols; c++) heat_cell(f, &a, u, h, l, c, lo, hi);
    fputs("</g>\n", f);
    for (int l = 0; l < u->nlayers; l++) {
        hprintf(f, "<text x=\"%d\" y=\"%.1f\" class=\"tick\" style=\"font-size:%dpx\" text-anchor=\"end\">", ml - 4,
                py(&a, u->nlayers - l - 0.5) + font * 0.35, font);
        mp_html_escape(f, u->layer_names[l]);
        fputs("</text>\n", f);
    }
    chart_end(f);
}

/* A heat map of each run in which some gradient value became zero, and a note naming the runs in which none did. */
static void charts_heatmap(FILE *f, const mp_report *r) {
    heat h[64];
    int has[64], ndrawn = 0, nzero = 0;
    double lo = INFINITY, hi = 0;
    for (int i = 0; i < r->nruns; i++) { /* nruns <= 64: mp_report_write */
        ndrawn += has[i] = heat_bin(&r->runs[i], &h[i], &lo, &hi);
        nzero += !has[i] && h[i].v;
    }
    for (int i = 0; i < r->nruns; i++)
        if (has[i]) heat_chart(f, &r->runs[i], &h[i], lo, hi);
    if (nzero) {
        fputs(ndrawn ? "<p class=\"note\">No gradient value became zero in "
                     : "<p class=\"note\">No gradient value became zero in any mode (",
              f);
        for (int i = 0, k = 0; i < r->nruns; i++)
            if (!has[i] && h[i].v) {
                if (k++) fputs(", ", f);
                mp_html_escape(f, r->runs[i].name);
            }
        fputs(ndrawn ? ".</p>\n" : "), so there is no heat map.</p>\n", f);
    }
    for (int i = 0; i < r->nruns; i++) free(h[i].v);
}

/* What each run's final model wrote, when the runs have samples, and how much of it looks like the corpus. */
static void section_samples(FILE *f, const mp_report *r) {
    int any = 0;
    for (int i = 0; i < r->nruns; i++) any |= r->runs[i].sample != NULL;
    if (!any) return;
    fputs(
        "<h2>Text from each final model</h2>\n<p class=\"note\">What each run's model wrote after a newline, every "
        "byte drawn from its predicted distribution (temperature 1, seed 1); bytes other than printable ASCII, newline "
        "and tab are shown as \\xNN. Printable: the share of bytes that are printable ASCII or a newline. Words found: "
        "the share of its words (split at whitespace) that occur as words in the corpus.</p>\n",
        f);
    for (int i = 0; i < r->nruns; i++) {
        const mp_report_run *u = &r->runs[i];
        if (!u->sample) continue;
        fputs("<h3>", f);
        mp_html_escape(f, u->name);
        hprintf(f, "</h3>\n<p class=\"note\">%.1f%% printable, ", 100 * u->sample_printable);
        if (isnan(u->sample_words)) fputs("no words", f);
        else hprintf(f, "%.1f%% of its words found in the corpus", 100 * u->sample_words);
        hprintf(f, "</p>\n<pre class=\"sample\" data-mode=\"%s\">\n", u->name); /* a browser drops this first newline */
        mp_html_escape(f, u->sample);
        fputs("</pre>\n", f);
    }
}

/* The whole page, its sections in order. */
static void write_body(FILE *f, const mp_report *r) {
    section_head(f, r);
    section_title(f, r);
    section_reading(f, r);
    section_summary(f, r);
    section_warnings(f, r);
    section_ablation(f, r);
    chart_loss(f, r);
    chart_val_loss(f, r);
    chart_bytes(f, r);
    chart_scale(f, r);
    charts_quant(f, r);
    chart_layers(f, r);
    chart_underflow(f, r);
    charts_heatmap(f, r);
    chart_headroom(f, r);
    section_tensors(f, r);
    section_quant(f, r);
    section_skips(f, r);
    chart_histogram(f, r);
    section_samples(f, r);
    fputs("</body>\n</html>\n", f);
}

static void print_body(FILE *f, const void *r) { write_body(f, r); }

mp_status mp_report_write(const char *path, const mp_report *r) {
    if (!path || !r) return mp_error(MP_EINVAL, "mp_report_write: NULL argument");
    if (r->nruns < 0 || r->nruns > 64) return mp_error(MP_EINVAL, "mp_report_write: %d runs (0 .. 64)", r->nruns);
    return mp_print_file_atomic(path, print_body, r);
}
