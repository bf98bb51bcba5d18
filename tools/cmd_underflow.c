/* cmd_underflow.c - `mixprec underflow` and `mixprec explore`: a gradient
 * distribution against a format at several loss scales, in the terminal and
 * as an interactive page whose every number mixprec computed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gradients.h"

static const char usage[] =
    "usage: mixprec underflow [--dist lognormal:MU,SIGMA | --from FILE] [--n N]\n"
    "                         [--format fp16|bf16|e4m3|e5m2] [--scales S,...] [--seed S] [--json]\n\n"
    "Draws N gradient magnitudes (default: |x| with ln x ~ N(-17.5, 1.6), 200000\n"
    "values, the textbook distribution) or reads real ones (.npy, .safetensors or\n"
    "raw float32), then prints the median and 5th percentile, the fraction that\n"
    "becomes exactly zero in the format, and for each loss scale the share that\n"
    "survives, lands in the subnormal range and overflows; a histogram of log10|g|\n"
    "with the format's limits; and the best power-of-two scale (most survivors,\n"
    "no overflow). Counts come from mp_convert's statistics.\n\n"
    "  --dist lognormal:MU,SIGMA   ln|g| ~ N(MU, SIGMA)\n"
    "  --from FILE                 gradients from a file instead\n"
    "  --n N                       values to draw (200000)\n"
    "  --format F                  fp16 (default), bf16, e4m3, e5m2\n"
    "  --scales LIST               (1,256,4096,65536,1048576)\n"
    "  --seed S                    (0)\n"
    "  --json                      one JSON object\n";

static const char explore_usage[] =
    "usage: mixprec explore --out FILE.html [--dist ... | --from FILE] [--n N] [--seed S]\n\n"
    "Writes a self-contained interactive page: the histogram of the gradients'\n"
    "magnitudes (log axis) against the format's floor and ceiling, a loss-scale\n"
    "slider from 2^0 to 2^24 and a format selector (fp16, bf16, e5m2, e4m3), with a\n"
    "readout of how many values round to zero, become subnormal or overflow. mixprec\n"
    "computes every slider position for every format into the page (the page's\n"
    "script only looks numbers up). FILE.html#k=10&fmt=e4m3 opens at 2^10, e4m3.\n";

typedef struct {
    grad_set g;
    mp_dtype fmt;
    double scales[32];
    int nscales, json;
    char desc[256];
} uf_opts;

static int parse_common(const char *cmd, int argc, char **argv, uf_opts *o, const char **out) {
    double mu = -17.5, sigma = 1.6;
    long n = 200000, seed = 0;
    const char *from = NULL;
    o->fmt = MP_F16, o->nscales = 0, o->json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--json") && !out) o->json = 1;
        else if (!strcmp(a, "--dist")) {
            if (!(v = cli_value(cmd, argc, argv, &i))) return CLI_USAGE;
            char *e1, *e2;
            if (strncmp(v, "lognormal:", 10) != 0) return cli_usage_error(cmd, "--dist is lognormal:MU,SIGMA, not '%s'", v);
            mu = strtod(v + 10, &e1);
            if (*e1 != ',') return cli_usage_error(cmd, "--dist is lognormal:MU,SIGMA, not '%s'", v);
            sigma = strtod(e1 + 1, &e2);
            /* six sigmas either side must stay inside fp32: ln(FLT_MAX) = 88.7, ln(2^-149) = -103.3 */
            if (*e2 || !isfinite(mu) || !(sigma >= 0) || mu + 6 * sigma > 88.7 || mu - 6 * sigma < -103.3)
                return cli_usage_error(cmd, "--dist lognormal:MU,SIGMA must keep MU +- 6 SIGMA within fp32's range "
                                            "(-103.3 .. 88.7), not '%s'", v);
        } else if (!strcmp(a, "--from")) {
            if (!(v = cli_value(cmd, argc, argv, &i))) return CLI_USAGE;
            from = v;
        } else if (!strcmp(a, "--n")) {
            if (!(v = cli_value(cmd, argc, argv, &i))) return CLI_USAGE;
            if (cli_parse_long(v, 1, 100000000, &n)) return cli_usage_error(cmd, "--n wants 1 .. 1e8, not '%s'", v);
        } else if (!strcmp(a, "--seed")) {
            if (!(v = cli_value(cmd, argc, argv, &i))) return CLI_USAGE;
            if (cli_parse_long(v, 0, 2147483647L, &seed)) return cli_usage_error(cmd, "--seed wants 0 .. 2^31-1, not '%s'", v);
        } else if (!strcmp(a, "--format") && !out) {
            if (!(v = cli_value(cmd, argc, argv, &i))) return CLI_USAGE;
            if (mp_dtype_parse(v, &o->fmt) != MP_OK || o->fmt == MP_F32)
                return cli_usage_error(cmd, "--format is fp16, bf16, e4m3 or e5m2, not '%s'", v);
        } else if (!strcmp(a, "--scales") && !out) {
            if (!(v = cli_value(cmd, argc, argv, &i))) return CLI_USAGE;
            char buf[512];
            snprintf(buf, sizeof buf, "%s", v);
            for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
                float f;
                if (o->nscales == 32 || cli_parse_float(t, &f) || !(f > 0) || !isfinite(f))
                    return cli_usage_error(cmd, "--scales wants up to 32 positive numbers, not '%s'", t);
                o->scales[o->nscales++] = f;
            }
        } else if (!strcmp(a, "--out") && out) {
            if (!(v = cli_value(cmd, argc, argv, &i))) return CLI_USAGE;
            *out = v;
        } else {
            return cli_usage_error(cmd, "unknown option '%s'", a);
        }
    }
    if (!o->nscales) {
        const double d[5] = {1, 256, 4096, 65536, 1048576};
        for (int k = 0; k < 5; k++) o->scales[o->nscales++] = d[k];
    }
    if (from) {
        char err[600];
        if (grads_read(&o->g, from, err, sizeof err) != 0) {
            fprintf(stderr, "mixprec %s: %s\n", cmd, err);
            return 1;
        }
        snprintf(o->desc, sizeof o->desc, "%zu gradient magnitudes from %s", o->g.n, from);
    } else {
        if (grads_lognormal(&o->g, mu, sigma, (size_t)n, (uint64_t)seed) != 0 || o->g.n == 0) {
            fprintf(stderr, "mixprec %s: out of memory\n", cmd);
            return 1;
        }
        snprintf(o->desc, sizeof o->desc, "%ld magnitudes |g|, ln|g| ~ N(%g, %g), seed %ld", n, mu, sigma, seed);
    }
    return 0;
}

static void histogram_terminal(const grad_set *g, mp_dtype t) {
    const mp_format_info *f = mp_format(t);
    double lo = 1e300, hi = -1e300;
    for (size_t i = 0; i < g->n; i++)
        if (g->g[i] > 0 && isfinite(g->g[i])) lo = fmin(lo, log10(g->g[i])), hi = fmax(hi, log10(g->g[i]));
    if (lo > hi) return;
    const double marks[3] = {log10(f->min_subnormal), log10(f->min_normal), log10(f->max)};
    const char *names[3] = {"smallest subnormal", "smallest normal", "largest"};
    double a = floor(fmin(lo, marks[0] - 1) * 2) / 2, b = ceil(fmax(hi, marks[0] + 1) * 2) / 2;
    if (b - a > 40) a = floor(lo * 2) / 2 - 1, b = ceil(hi * 2) / 2 + 1;
    const int nb = (int)((b - a) * 2);
    uint64_t *c = calloc((size_t)nb + 1, sizeof *c), mx = 1;
    if (!c) return;
    for (size_t i = 0; i < g->n; i++) {
        if (!(g->g[i] > 0) || !isfinite(g->g[i])) continue;
        int k = (int)((log10(g->g[i]) - a) * 2);
        k = k < 0 ? 0 : k >= nb ? nb - 1 : k;
        c[k]++;
    }
    for (int k = 0; k < nb; k++) mx = c[k] > mx ? c[k] : mx;
    printf("\nlog10|g| histogram (each row half a decade; %s limits marked):\n", f->name);
    for (int k = nb - 1; k >= 0; k--) {
        const double x0 = a + k * 0.5;
        char mark[80] = "";
        for (int m = 0; m < 3; m++)
            if (marks[m] >= x0 && marks[m] < x0 + 0.5) snprintf(mark, sizeof mark, "  <-- %s %s (%.3g)", f->name, names[m], pow(10, marks[m]));
        if (!c[k] && !mark[0]) continue;
        const int w = (int)(50.0 * (double)c[k] / (double)mx + 0.5);
        printf("%6.1f %-50.*s %7.3f%%%s\n", x0, w, "##################################################",
               100.0 * (double)c[k] / (double)g->n, mark);
    }
    free(c);
}

static int run_underflow(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (cli_is_help(&cmd_underflow, argv[i])) return 0;
    uf_opts o;
    int rc = parse_common("underflow", argc, argv, &o, NULL);
    if (rc) return rc;
    const mp_format_info *f = mp_format(o.fmt);
    const double n = (double)o.g.n, med = grads_quantile(&o.g, 0.5), p5 = grads_quantile(&o.g, 0.05);
    const scale_counts one = grads_count(&o.g, o.fmt, 1.0);
    const double best = grads_best_scale(&o.g, o.fmt);
    if (o.json) {
        printf("{\"format\": \"%s\", \"n\": %zu, \"median\": %.9g, \"p5\": %.9g, \"zero_fraction\": %.9g, \"zero_count\": %llu, "
               "\"scales\": [",
               f->name, o.g.n, med, p5, (double)one.zero / n, (unsigned long long)one.zero);
        for (int k = 0; k < o.nscales; k++) {
            const scale_counts c = grads_count(&o.g, o.fmt, o.scales[k]);
            printf("%s{\"scale\": %.9g, \"survive\": %.9g, \"subnormal\": %.9g, \"overflow\": %.9g, \"zero\": %.9g}",
                   k ? ", " : "", o.scales[k], (double)c.survive / n, (double)c.subnormal / n, (double)c.overflow / n,
                   (double)c.zero / n);
        }
        printf("], \"best_scale\": %.9g}\n", best);
    } else {
        printf("%s, stored in %s:\n", o.desc, f->name);
        printf("  median %.3e, 5th percentile %.3e\n", med, p5);
        printf("  %.2f%% become exactly zero in %s (below half its smallest subnormal, %.3g)\n\n", 100 * (double)one.zero / n,
               f->name, f->min_subnormal / 2);
        printf("%12s %10s %11s %10s %10s\n", "loss scale", "survive", "subnormal", "zero", "overflow");
        for (int k = 0; k < o.nscales; k++) {
            const scale_counts c = grads_count(&o.g, o.fmt, o.scales[k]);
            printf("%12g %9.2f%% %10.2f%% %9.2f%% %9.4f%%\n", o.scales[k], 100 * (double)c.survive / n,
                   100 * (double)c.subnormal / n, 100 * (double)c.zero / n, 100 * (double)c.overflow / n);
        }
        const scale_counts b = grads_count(&o.g, o.fmt, best);
        printf("\nbest power-of-two scale: %g (2^%.0f): %.2f%% survive, %.2f%% subnormal, no overflow\n", best, log2(best),
               100 * (double)b.survive / n, 100 * (double)b.subnormal / n);
        histogram_terminal(&o.g, o.fmt);
    }
    grads_free(&o.g);
    return 0;
}

const cli_command cmd_underflow = {"underflow", "what a gradient distribution loses in a format, at each loss scale",
                                   usage, run_underflow};

/* ---- explore: the page ---- */

static const mp_dtype page_formats[4] = {MP_F16, MP_BF16, MP_E5M2, MP_E4M3};
enum { PAGE_K = 25, HLO = -150, HN = 170 }; /* slider 2^0..2^24; histogram bins log2 -150 .. 19 */

static int run_explore(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (cli_is_help(&cmd_explore, argv[i])) return 0;
    uf_opts o;
    const char *out = NULL;
    int rc = parse_common("explore", argc, argv, &o, &out);
    if (rc) return rc;
    if (!out) {
        grads_free(&o.g);
        return cli_usage_error("explore", "--out FILE.html is required");
    }
    uint64_t bins[HN] = {0};
    for (size_t i = 0; i < o.g.n; i++) {
        if (!(o.g.g[i] > 0)) continue;
        int e = (int)floor(log2(o.g.g[i])) - HLO;
        bins[e < 0 ? 0 : e >= HN ? HN - 1 : e]++;
    }
    int blo = HN, bhi = 0;
    for (int b = 0; b < HN; b++)
        if (bins[b]) blo = b < blo ? b : blo, bhi = b;
    char tmp[8192];
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        grads_free(&o.g);
        fprintf(stderr, "mixprec explore: %s: cannot create\n", out);
        return 1;
    }
    fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>mixprec explorer: "
               "gradients against a number format</title>\n<style>\n"
               "body{font:15px/1.5 system-ui,sans-serif;color:#222;max-width:980px;margin:2em auto;padding:0 1em}\n"
               "h1{font-size:1.5em}.controls{display:flex;gap:2em;align-items:center;flex-wrap:wrap;margin:1em 0}\n"
               "input[type=range]{width:360px}.readout{display:grid;grid-template-columns:repeat(4,1fr);gap:.6em}\n"
               ".box{background:#f5f5f5;border-radius:6px;padding:.6em .8em}.big{font-size:1.4em;font-weight:600}\n"
               ".zero .big{color:#c62828}.over .big{color:#6a1b9a}.sub .big{color:#ef6c00}.ok .big{color:#2e7d32}\n"
               "svg{width:100%%;height:auto}.note{color:#555;font-size:.92em}\n</style>\n</head>\n<body>\n"
               "<h1>Gradients against a number format</h1>\n<p class=\"note\">");
    fprintf(f, "%s. Move the loss scale: every gradient is multiplied by it before it is stored; the bars slide right. "
               "Values left of the floor become zero; right of the ceiling, infinity (NaN in e4m3, which has no infinity). "
               "Every count below was computed by mixprec's own conversion code (mp_convert), for every slider position and "
               "format, when this page was written.</p>\n", o.desc);
    fprintf(f, "<div class=\"controls\"><label>format <select id=\"fmt\">");
    for (int k = 0; k < 4; k++) fprintf(f, "<option value=\"%s\">%s</option>", mp_format(page_formats[k])->name,
                                         mp_format(page_formats[k])->name);
    fprintf(f, "</select></label><label>loss scale <input id=\"k\" type=\"range\" min=\"0\" max=\"%d\" step=\"1\" value=\"0\"> "
               "<b id=\"scale\">2^0 = 1</b></label></div>\n", PAGE_K - 1);
    fprintf(f, "<div class=\"readout\"><div class=\"box zero\">become zero<div class=\"big\" id=\"zero\"></div><span id=\"zero_pct\"></span></div>"
               "<div class=\"box sub\">subnormal<div class=\"big\" id=\"sub\"></div><span id=\"sub_pct\"></span></div>"
               "<div class=\"box over\">overflow<div class=\"big\" id=\"over\"></div><span id=\"over_pct\"></span></div>"
               "<div class=\"box ok\">survive<div class=\"big\" id=\"survive\"></div><span id=\"survive_pct\"></span></div></div>\n");
    /* the chart: bars in a group that the script translates by k bins */
    const int W = 940, H = 320, ML = 50, MR = 10, MT = 20, MB = 40;
    const int x0 = blo - 2 < 0 ? 0 : blo - 2, x1 = bhi + PAGE_K + 2 > HN ? HN : bhi + PAGE_K + 2;
    int lo_lim = x0, hi_lim = x1;
    for (int k = 0; k < 4; k++) {
        const mp_format_info *fi = mp_format(page_formats[k]);
        const int a = (int)floor(log2(fi->min_subnormal)) - HLO - 1, b = (int)ceil(log2(fi->max)) - HLO + 1;
        lo_lim = a < lo_lim ? (a < 0 ? 0 : a) : lo_lim, hi_lim = b > hi_lim ? (b > HN ? HN : b) : hi_lim;
    }
    const double bw = (double)(W - ML - MR) / (hi_lim - lo_lim);
    uint64_t bmax = 1;
    for (int b = 0; b < HN; b++) bmax = bins[b] > bmax ? bins[b] : bmax;
    fprintf(f, "<svg id=\"chart\" viewBox=\"0 0 %d %d\" xmlns=\"http://www.w3.org/2000/svg\">\n"
               "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#fafafa\" stroke=\"#ccc\"/>\n",
            W, H, ML, MT, W - ML - MR, H - MT - MB);
    fprintf(f, "<rect id=\"zone_zero\" y=\"%d\" height=\"%d\" fill=\"#c62828\" opacity=\"0.08\"/>"
               "<rect id=\"zone_over\" y=\"%d\" height=\"%d\" fill=\"#6a1b9a\" opacity=\"0.08\"/>\n",
            MT, H - MT - MB, MT, H - MT - MB);
    for (int e = lo_lim; e <= hi_lim; e += 10) {
        const double x = ML + (e - lo_lim) * bw;
        fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#e5e5e5\"/><text x=\"%.1f\" y=\"%d\" font-size=\"11\" "
                   "text-anchor=\"middle\" fill=\"#666\">2^%d</text>\n", x, x, MT, H - MB, x, H - MB + 14, e + HLO);
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"12\" text-anchor=\"middle\" fill=\"#444\">magnitude of the scaled gradient (log2 axis)</text>\n",
            (ML + W - MR) / 2, H - 8);
    fprintf(f, "<g id=\"bars\">\n");
    for (int b = blo; b <= bhi; b++) {
        if (!bins[b]) continue;
        const double h = (double)(H - MT - MB - 10) * (double)bins[b] / (double)bmax;
        fprintf(f, "<rect class=\"bar\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#1f77b4\"/>\n",
                ML + (b - lo_lim) * bw, H - MB - h, bw * 0.9, h);
    }
    fprintf(f, "</g>\n<line id=\"floor\" y1=\"%d\" y2=\"%d\" stroke=\"#c62828\" stroke-dasharray=\"5 3\"/>"
               "<line id=\"ceil\" y1=\"%d\" y2=\"%d\" stroke=\"#6a1b9a\" stroke-dasharray=\"5 3\"/>\n"
               "<text id=\"floor_t\" y=\"%d\" font-size=\"11\" fill=\"#c62828\"></text><text id=\"ceil_t\" y=\"%d\" font-size=\"11\" "
               "fill=\"#6a1b9a\" text-anchor=\"end\"></text>\n</svg>\n",
            MT, H - MB, MT, H - MB, MT + 14, MT + 30);
    /* the data: every count for every format and scale, computed now */
    fprintf(f, "<script>\nconst N = %zu, GEO = {ml: %d, bw: %.6f, lo: %d, hlo: %d, mt: %d, h: %d, right: %d};\nconst DATA = {\n",
            o.g.n, ML, bw, lo_lim, HLO, MT, H - MT - MB, W - MR);
    for (int k = 0; k < 4; k++) {
        const mp_format_info *fi = mp_format(page_formats[k]);
        fprintf(f, "  \"%s\": {floor: %.9g, ceil: %.9g, min_normal: %.9g, counts: [", fi->name, fi->min_subnormal / 2,
                fi->max, fi->min_normal);
        for (int s = 0; s < PAGE_K; s++) {
            const scale_counts c = grads_count(&o.g, page_formats[k], ldexp(1.0, s));
            fprintf(f, "%s[%llu, %llu, %llu, %llu]", s ? ", " : "", (unsigned long long)c.zero,
                    (unsigned long long)c.subnormal, (unsigned long long)c.overflow, (unsigned long long)c.survive);
        }
        fprintf(f, "]}%s\n", k < 3 ? "," : "");
    }
    fprintf(f, "};\n"
               "function pct(x) { return (100 * x / N).toFixed(x && x < N / 1000 ? 4 : 2) + '%%'; }\n"
               "function xOf(log2v) { return GEO.ml + (log2v - GEO.hlo - GEO.lo) * GEO.bw; }\n"
               "function update() {\n"
               "  const fmt = document.getElementById('fmt').value, k = +document.getElementById('k').value;\n"
               "  const d = DATA[fmt], c = d.counts[k];\n"
               "  document.getElementById('scale').textContent = '2^' + k + ' = ' + Math.pow(2, k);\n"
               "  const ids = ['zero', 'sub', 'over', 'survive'];\n"
               "  ids.forEach((id, i) => { document.getElementById(id).textContent = c[i];\n"
               "    document.getElementById(id + '_pct').textContent = pct(c[i]); });\n"
               "  document.getElementById('bars').setAttribute('transform', 'translate(' + (k * GEO.bw).toFixed(2) + ' 0)');\n"
               "  const fx = xOf(Math.log2(d.floor)), cx = xOf(Math.log2(d.ceil));\n"
               "  for (const [id, x] of [['floor', fx], ['ceil', cx]]) { const l = document.getElementById(id);\n"
               "    l.setAttribute('x1', x); l.setAttribute('x2', x); }\n"
               "  const zz = document.getElementById('zone_zero'); zz.setAttribute('x', GEO.ml); zz.setAttribute('width', Math.max(0, fx - GEO.ml));\n"
               "  const zo = document.getElementById('zone_over'); zo.setAttribute('x', cx); zo.setAttribute('width', Math.max(0, GEO.right - cx));\n"
               "  const ft = document.getElementById('floor_t'); ft.setAttribute('x', fx + 4); ft.textContent = fmt + ': 0 below ' + d.floor.toExponential(2);\n"
               "  const ct = document.getElementById('ceil_t'); ct.setAttribute('x', cx - 4); ct.textContent = fmt + ' max ' + d.ceil.toExponential(2);\n"
               "}\n"
               "function fromHash() {\n"
               "  const p = new URLSearchParams(location.hash.slice(1));\n"
               "  if (p.has('k')) document.getElementById('k').value = p.get('k');\n"
               "  if (p.has('fmt') && DATA[p.get('fmt')]) document.getElementById('fmt').value = p.get('fmt');\n"
               "  update();\n"
               "}\n"
               "document.getElementById('k').addEventListener('input', update);\n"
               "document.getElementById('fmt').addEventListener('change', update);\n"
               "window.addEventListener('hashchange', fromHash);\n"
               "fromHash();\n"
               "</script>\n</body>\n</html>\n");
    const int bad = ferror(f);
    grads_free(&o.g);
    if (fclose(f) != 0 || bad || rename(tmp, out) != 0) {
        remove(tmp);
        fprintf(stderr, "mixprec explore: %s: write failed\n", out);
        return 1;
    }
    printf("wrote %s: %d formats x %d loss scales, computed by mixprec\n", out, 4, PAGE_K);
    return 0;
}

const cli_command cmd_explore = {"explore", "write an interactive page: gradients, a loss-scale slider, four formats",
                                 explore_usage, run_explore};
