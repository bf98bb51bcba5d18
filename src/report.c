/* report.c - the comparison report: HTML with inline SVG charts. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "internal.h"

static void esc(FILE *f, const char *s) {
    for (; s && *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

typedef struct {
    double x0, x1, y0, y1;
    int w, h, ml, mr, mt, mb;
} axes;

static double px(const axes *a, double x) { return a->ml + (x - a->x0) / (a->x1 - a->x0) * (a->w - a->ml - a->mr); }
static double py(const axes *a, double y) {
    return a->mt + (1.0 - (y - a->y0) / (a->y1 - a->y0)) * (a->h - a->mt - a->mb);
}

/* Nice tick step for a range. */
static double tick_step(double range, int want) {
    const double raw = range / want, mag = pow(10, floor(log10(raw))), r = raw / mag;
    return (r < 1.5 ? 1 : r < 3.5 ? 2 : r < 7.5 ? 5 : 10) * mag;
}

static void frame(FILE *f, const axes *a, const char *id, const char *title, const char *xlabel, const char *ylabel,
                  double ystep, const char *yfmt, int ylog2, int xticks) {
    fprintf(f, "<figure><figcaption>%s</figcaption>\n<svg class=\"chart\" id=\"%s\" viewBox=\"0 0 %d %d\" "
               "xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" aria-label=\"%s\">\n",
            title, id, a->w, a->h, title);
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#fafafa\" stroke=\"#ccc\"/>\n", a->ml, a->mt,
            a->w - a->ml - a->mr, a->h - a->mt - a->mb);
    const double xs = tick_step(a->x1 - a->x0, 6);
    for (double x = ceil(a->x0 / xs) * xs; xticks && x <= a->x1 + 1e-9; x += xs) {
        fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#e3e3e3\"/>", px(a, x), px(a, x), a->mt,
                a->h - a->mb);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"tick\" text-anchor=\"middle\">%g</text>\n", px(a, x), a->h - a->mb + 14, x);
    }
    for (double y = ceil(a->y0 / ystep) * ystep; y <= a->y1 + 1e-12; y += ystep) {
        fprintf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#e3e3e3\"/>", a->ml, a->w - a->mr, py(a, y),
                py(a, y));
        char lab[32];
        if (ylog2) snprintf(lab, sizeof lab, "2^%.0f", y);
        else snprintf(lab, sizeof lab, yfmt, y);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" class=\"tick\" text-anchor=\"end\">%s</text>\n", a->ml - 5, py(a, y) + 4, lab);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"label\" text-anchor=\"middle\">%s</text>\n", (a->ml + a->w - a->mr) / 2.0,
            a->h - 6, xlabel);
    fprintf(f, "<text transform=\"translate(14 %.1f) rotate(-90)\" class=\"label\" text-anchor=\"middle\">%s</text>\n",
            (a->mt + a->h - a->mb) / 2.0, ylabel);
}

static void legend(FILE *f, const axes *a, const mp_report *r, const int *show) {
    int k = 0;
    for (int i = 0; i < r->nruns; i++) {
        if (show && !show[i]) continue;
        const double x = a->ml + 10 + 130 * k++;
        fprintf(f, "<rect x=\"%.0f\" y=\"%d\" width=\"14\" height=\"4\" fill=\"%s\"/><text x=\"%.0f\" y=\"%d\" "
                   "class=\"legend\">%s</text>\n",
                x, a->mt - 12, r->runs[i].color, x + 18, a->mt - 7, r->runs[i].name);
    }
}

/* A polyline of y over steps, averaged into at most 400 points. */
static void series(FILE *f, const axes *a, const float *y, long n, size_t stride, const char *color, int log2y, int dash) {
    const long per = n > 400 ? (n + 399) / 400 : 1;
    fprintf(f, "<polyline class=\"series\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.8\"%s points=\"", color,
            dash ? " stroke-dasharray=\"5 3\"" : "");
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
        fprintf(f, "%.1f,%.1f ", px(a, (double)(i + per / 2 + 1)), py(a, v));
    }
    fprintf(f, "\"/>\n");
}

static void write_body(FILE *f, const mp_report *r) {
    const mp_report_run *base = r->baseline >= 0 && r->baseline < r->nruns ? &r->runs[r->baseline] : NULL;
    fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>");
    esc(f, r->title);
    fprintf(f, "</title>\n<style>\n"
               "body{font:15px/1.5 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:#222;max-width:1020px;"
               "margin:2em auto;padding:0 1em;background:#fff}\n"
               "h1{font-size:1.6em;margin-bottom:.2em}h2{font-size:1.2em;margin-top:1.8em;border-bottom:1px solid #ddd}\n"
               "table{border-collapse:collapse;width:100%%;font-size:.92em}th,td{padding:.35em .6em;text-align:right;"
               "border-bottom:1px solid #e5e5e5}th:first-child,td:first-child{text-align:left;white-space:nowrap}th{background:#f4f4f4}\n"
               "figure{margin:1.2em 0}figcaption{font-weight:600;margin-bottom:.3em}svg.chart{width:100%%;height:auto}\n"
               ".tick{font-size:11px;fill:#666}.label{font-size:12px;fill:#444}.legend{font-size:12px;fill:#222}\n"
               ".note{color:#555;font-size:.92em}.warn{color:#a00}code{background:#f3f3f3;padding:0 .25em}\n"
               ".swatch{display:inline-block;width:.8em;height:.8em;border-radius:2px;margin-right:.4em}\n"
               "</style>\n</head>\n<body>\n<h1>");
    esc(f, r->title);
    fprintf(f, "</h1>\n<p class=\"note\">Reproduce: <code>");
    esc(f, r->command);
    fprintf(f, "</code></p>\n<h2>What happened</h2>\n<div class=\"reading\">");
    /* the reading: paragraphs split on blank lines */
    fputs("<p>", f);
    for (const char *s = r->reading; s && *s; s++) {
        if (s[0] == '\n' && s[1] == '\n') {
            fputs("</p>\n<p>", f);
            s++;
        } else {
            char c[2] = {*s, 0};
            esc(f, c);
        }
    }
    fputs("</p></div>\n", f);

    fprintf(f, "<h2>Summary</h2>\n<table id=\"summary\">\n<tr><th>mode</th><th>final train loss</th><th>");
    esc(f, r->eval_name);
    fprintf(f, "</th><th>skipped steps</th><th>final scale</th><th>gradients underflowed</th><th>frozen weights</th>"
               "<th>ms/step</th><th>peak memory</th><th>speed-up vs %s</th></tr>\n", base ? base->name : "-");
    for (int i = 0; i < r->nruns; i++) {
        const mp_report_run *u = &r->runs[i];
        char speed[32] = "";
        if (base && u->ms_per_step > 0) snprintf(speed, sizeof speed, "%.2fx", base->ms_per_step / u->ms_per_step);
        fprintf(f, "<tr data-mode=\"%s\"><td><span class=\"swatch\" style=\"background:%s\"></span>%s</td>"
                   "<td>%.4f</td><td class=\"acc\">%.*f%s</td><td>%ld</td><td>%g</td><td class=\"under\">%.4f%%</td>"
                   "<td>%.2f%%</td><td>%.1f</td><td>%.0f MiB</td><td>%s</td></tr>\n",
                u->name, u->color, u->name, u->last_loss, r->eval_percent ? 2 : 4,
                r->eval_percent ? 100 * u->eval : u->eval, r->eval_percent ? "%" : "", u->skipped_total,
                u->final_scale, 100 * u->underflow, 100 * u->frozen, u->ms_per_step, u->memory_mib, speed);
    }
    fprintf(f, "</table>\n");
    for (int i = 0; i < r->nruns; i++)
        for (int k = 0; k < r->runs[i].nwarnings; k++) {
            fprintf(f, "<p class=\"warn\">%s: ", r->runs[i].name);
            esc(f, r->runs[i].warnings[k]);
            fprintf(f, "</p>\n");
        }

    /* 1. loss */
    long maxn = 1;
    double lmax = 0.1;
    for (int i = 0; i < r->nruns; i++) {
        maxn = r->runs[i].nsteps > maxn ? r->runs[i].nsteps : maxn;
        for (long s = 0; s < r->runs[i].nsteps && s < 3; s++)
            if (isfinite(r->runs[i].loss[s]) && r->runs[i].loss[s] > lmax) lmax = r->runs[i].loss[s];
    }
    axes a = {0, (double)maxn, 0, lmax * 1.05, 960, 300, 60, 20, 30, 40};
    frame(f, &a, "loss", "Training loss per step (all modes)", "step", "loss", tick_step(lmax, 5), "%g", 0, 1);
    legend(f, &a, r, NULL);
    for (int i = 0; i < r->nruns; i++)
        series(f, &a, r->runs[i].loss, r->runs[i].nsteps, 1, r->runs[i].color, 0, 0);
    fprintf(f, "</svg></figure>\n");

    /* 2. scale */
    int show[64] = {0}, nscaled = 0;
    double smin = 1e30, smax = -1e30;
    for (int i = 0; i < r->nruns && i < 64; i++) {
        const mp_report_run *u = &r->runs[i];
        for (long s = 0; s < u->nsteps; s++)
            if (u->scale[s] != 1.0f) show[i] = 1;
        if (!show[i]) continue;
        nscaled++;
        for (long s = 0; s < u->nsteps; s++) {
            const double l = log2(u->scale[s]);
            smin = l < smin ? l : smin, smax = l > smax ? l : smax;
        }
    }
    if (nscaled) {
        axes b = {0, (double)maxn, floor(smin) - 1, ceil(smax) + 1, 960, 240, 60, 20, 30, 40};
        frame(f, &b, "scale", "Loss scale (log2 axis); red marks: skipped steps (inf/NaN in the gradients)", "step",
              "loss scale", tick_step(b.y1 - b.y0, 5) < 1 ? 1 : tick_step(b.y1 - b.y0, 5), "%g", 1, 1);
        legend(f, &b, r, show);
        for (int i = 0; i < r->nruns; i++) {
            if (!show[i]) continue;
            const mp_report_run *u = &r->runs[i];
            series(f, &b, u->scale, u->nsteps, 1, u->color, 1, 0);
            for (long s = 0; s < u->nsteps; s++)
                if (u->skipped[s])
                    fprintf(f, "<circle class=\"skip\" cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"none\" stroke=\"#d00\"/>\n",
                            px(&b, (double)(s + 1)), py(&b, log2(u->scale[s])));
        }
        fprintf(f, "</svg></figure>\n");
    } else {
        fprintf(f, "<p class=\"note\">No mode in this comparison used a loss scale.</p>\n");
    }

    /* 3. per-layer underflow: grouped bars */
    int nl = 0;
    double umax = 1e-4;
    const char (*names)[64] = NULL;
    for (int i = 0; i < r->nruns; i++) {
        const mp_report_run *u = &r->runs[i];
        if (u->nlayers > nl) nl = u->nlayers, names = u->layer_names;
        for (int l = 0; l < u->nlayers; l++) {
            double m = 0;
            for (long s = 0; s < u->nsteps; s++) m += u->layer_underflow[(size_t)s * (size_t)u->nlayers + (size_t)l];
            m /= u->nsteps > 0 ? (double)u->nsteps : 1.0;
            umax = m > umax ? m : umax;
        }
    }
    umax *= 100 * 1.1;
    axes c = {0, (double)(nl > 0 ? nl : 1), 0, umax, 960, 260, 60, 20, 30, 40};
    frame(f, &c, "layers", "Gradient values that became exactly zero when stored, by layer (mean over steps)",
          "tensor (first layer on the left)", "% of values", tick_step(umax, 5), "%g%%", 0, 0);
    legend(f, &c, r, NULL);
    const double gw = (px(&c, 1) - px(&c, 0)) * 0.8 / (r->nruns > 0 ? r->nruns : 1);
    for (int i = 0; i < r->nruns; i++) {
        const mp_report_run *u = &r->runs[i];
        for (int l = 0; l < u->nlayers; l++) {
            double m = 0;
            for (long s = 0; s < u->nsteps; s++) m += u->layer_underflow[(size_t)s * (size_t)u->nlayers + (size_t)l];
            m = 100 * m / (u->nsteps > 0 ? (double)u->nsteps : 1.0);
            const double x = px(&c, l + 0.1) + gw * i, y = py(&c, m);
            fprintf(f, "<rect class=\"series\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"><title>%s %s: "
                       "%.4f%%</title></rect>\n",
                    x, y, gw * 0.92, py(&c, 0) - y, u->color, u->name, u->layer_names[l], m);
        }
    }
    for (int l = 0; l < nl; l++)
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"tick\" text-anchor=\"middle\">%s</text>\n", px(&c, l + 0.5),
                c.h - c.mb + 14, names[l]);
    fprintf(f, "</svg></figure>\n");

    /* 4. underflow over time: mean over layers per step */
    double tmax = 1e-4;
    float *tot = malloc(sizeof(float) * (size_t)(maxn > 0 ? maxn : 1) * (size_t)(r->nruns > 0 ? r->nruns : 1));
    for (int i = 0; tot && i < r->nruns; i++) {
        const mp_report_run *u = &r->runs[i];
        for (long s = 0; s < u->nsteps; s++) {
            double m = 0;
            for (int l = 0; l < u->nlayers; l++) m += u->layer_underflow[(size_t)s * (size_t)u->nlayers + (size_t)l];
            tot[(size_t)i * (size_t)maxn + (size_t)s] = (float)(100 * m / (u->nlayers ? u->nlayers : 1));
            tmax = tot[(size_t)i * (size_t)maxn + (size_t)s] > tmax ? tot[(size_t)i * (size_t)maxn + (size_t)s] : tmax;
        }
    }
    axes d = {0, (double)maxn, 0, tmax * 1.1, 960, 240, 60, 20, 30, 40};
    frame(f, &d, "underflow", "Gradient values that became zero, over time (mean over layers)", "step", "% of values",
          tick_step(tmax * 1.1, 5), "%g%%", 0, 1);
    legend(f, &d, r, NULL);
    for (int i = 0; tot && i < r->nruns; i++)
        series(f, &d, tot + (size_t)i * (size_t)maxn, r->runs[i].nsteps, 1, r->runs[i].color, 0, 0);
    free(tot);
    fprintf(f, "</svg></figure>\n");

    /* 5. histogram */
    double hmax = 1e-9;
    int nh = 0;
    for (int i = 0; i < r->nruns; i++) {
        const mp_report_run *u = &r->runs[i];
        if (!u->has_hist) continue;
        nh++;
        double tot2 = u->hist_zeros;
        for (int b = 0; b < MP_REPORT_HIST_BINS; b++) tot2 += u->hist[b];
        for (int b = 0; b < MP_REPORT_HIST_BINS; b++) hmax = 100 * u->hist[b] / tot2 > hmax ? 100 * u->hist[b] / tot2 : hmax;
    }
    if (nh) {
        const int lo = r->runs[0].hist_lo;
        axes e = {lo, lo + MP_REPORT_HIST_BINS, 0, hmax * 1.1, 960, 300, 60, 20, 30, 40};
        frame(f, &e, "histogram",
              "Where the weight gradients are: log2 |g| as computed, before the store (loss scale included)",
              "log2 of the magnitude", "% of values", tick_step(hmax * 1.1, 5), "%g%%", 0, 1);
        legend(f, &e, r, NULL);
        const double lsub = log2(r->fp16_min_subnormal), lnorm = log2(r->fp16_min_normal), lmaxv = log2(r->fp16_max);
        fprintf(f, "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"#d62728\" opacity=\"0.08\"/>\n", px(&e, lo),
                e.mt, px(&e, lsub - 1) - px(&e, lo), e.h - e.mt - e.mb);
        const struct { double x; const char *t; } lines[3] = {
            {lsub - 1, "fp16: below this, 0"}, {lnorm, "fp16 smallest normal"}, {lmaxv + 1, "fp16: inf above"}};
        for (int k = 0; k < 3; k++)
            fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#a00\" stroke-dasharray=\"4 3\"/>"
                       "<text x=\"%.1f\" y=\"%d\" class=\"tick\" fill=\"#a00\">%s</text>\n",
                    px(&e, lines[k].x), px(&e, lines[k].x), e.mt, e.h - e.mb, px(&e, lines[k].x) + 3, e.mt + 12 + 12 * k,
                    lines[k].t);
        for (int i = 0; i < r->nruns; i++) {
            const mp_report_run *u = &r->runs[i];
            if (!u->has_hist) continue;
            double tot2 = u->hist_zeros;
            for (int b = 0; b < MP_REPORT_HIST_BINS; b++) tot2 += u->hist[b];
            fprintf(f, "<polyline class=\"series\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.8\" points=\"",
                    u->color);
            for (int b = 0; b < MP_REPORT_HIST_BINS; b++) {
                const double v = tot2 > 0 ? 100 * u->hist[b] / tot2 : 0;
                fprintf(f, "%.1f,%.1f %.1f,%.1f ", px(&e, lo + b), py(&e, v), px(&e, lo + b + 1), py(&e, v));
            }
            fprintf(f, "\"/>\n");
        }
        fprintf(f, "</svg></figure>\n<p class=\"note\">Each curve is one training step's weight gradients, as the "
                   "backward pass computed them in fp32 just before they are stored in the mode's format. A loss "
                   "scale S shifts the whole curve right by log2 S. The shaded region is where fp16 rounds to zero.</p>\n");
    }
    fprintf(f, "</body>\n</html>\n");
}

mp_status mp_report_write(const char *path, const mp_report *r) {
    if (!path || !r) return mp_error(MP_EINVAL, "mp_report_write: NULL argument");
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return mp_error(MP_EIO, "%s: cannot create", tmp);
    write_body(f, r);
    const int ok = !ferror(f) && fflush(f) == 0;
    if (fclose(f) != 0 || !ok) {
        unlink(tmp);
        return mp_error(MP_EIO, "%s: write failed", path);
    }
    if (rename(tmp, path) != 0) {
        unlink(tmp);
        return mp_error(MP_EIO, "%s: cannot rename into place", path);
    }
    return MP_OK;
}
