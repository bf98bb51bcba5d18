/* explore_page.c - the explorer page (mp_explore_write, underflow.h): the
 * values' log2 histogram against each format's floor and ceiling, a loss
 * scale slider, and every count the page shows, computed by underflow.c
 * before the page is written. */
#include <math.h>
#include <stdio.h>

#include "internal.h"

const mp_dtype mp_explore_formats[4] = {MP_F16, MP_BF16, MP_E5M2, MP_E4M3};

enum { PAGE_K = MP_EXPLORE_K, HLO = MP_EXPLORE_HLO, HN = MP_EXPLORE_HN }; /* slider 2^0..2^24; bins log2 -150 .. 19 */
enum { W = 940, H = 320, ML = 50, MR = 10, MT = 20, MB = 40 };            /* the chart's size and margins */

/* The page's head, its note and its controls. */
static void page_head(FILE *f, const char *desc) {
    fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>mixprec explorer: "
               "gradients against a number format</title>\n<style>\n"
               "body{font:15px/1.5 system-ui,sans-serif;color:#222;max-width:980px;margin:2em auto;padding:0 1em}\n"
               "h1{font-size:1.5em}.controls{display:flex;gap:2em;align-items:center;flex-wrap:wrap;margin:1em 0}\n"
               "input[type=range]{width:360px}.readout{display:grid;grid-template-columns:repeat(4,1fr);gap:.6em}\n"
               ".box{background:#f5f5f5;border-radius:6px;padding:.6em .8em}.big{font-size:1.4em;font-weight:600}\n"
               ".zero .big{color:#c62828}.over .big{color:#6a1b9a}.sub .big{color:#ef6c00}.ok .big{color:#2e7d32}\n"
               "svg{width:100%%;height:auto}.note{color:#555;font-size:.92em}\n</style>\n</head>\n<body>\n"
               "<h1>Gradients against a number format</h1>\n<p class=\"note\">");
    mp_html_escape(f, desc);
    fputs(". Move the loss scale: every gradient is multiplied by it before it is stored; the bars slide right. "
          "Values left of the floor become zero; right of the ceiling, infinity (NaN in e4m3, which has no infinity). "
          "Every count below was computed by mixprec's own conversion code (mp_convert), for every slider position and "
          "format, when this page was written.</p>\n",
          f);
    fprintf(f, "<div class=\"controls\"><label>format <select id=\"fmt\">");
    for (int k = 0; k < 4; k++)
        fprintf(f, "<option value=\"%s\">%s</option>", mp_format(mp_explore_formats[k])->name,
                mp_format(mp_explore_formats[k])->name);
    fprintf(f,
            "</select></label><label>loss scale <input id=\"k\" type=\"range\" min=\"0\" max=\"%d\" step=\"1\" "
            "value=\"0\"> "
            "<b id=\"scale\">2^0 = 1</b></label></div>\n",
            PAGE_K - 1);
    fprintf(f,
            "<div class=\"readout\"><div class=\"box zero\">become zero<div class=\"big\" id=\"zero\"></div><span "
            "id=\"zero_pct\"></span></div>"
            "<div class=\"box sub\">subnormal<div class=\"big\" id=\"sub\"></div><span id=\"sub_pct\"></span></div>"
            "<div class=\"box over\">overflow<div class=\"big\" id=\"over\"></div><span id=\"over_pct\"></span></div>"
            "<div class=\"box ok\">survive<div class=\"big\" id=\"survive\"></div><span "
            "id=\"survive_pct\"></span></div></div>\n");
}

/* The chart: the histogram's bars (bins [blo, bhi]) in a group the script
 * translates by k bins, each format's zones; *lo_out and *bw_out: the
 * chart's first bin and the width of one. */
static void page_chart(FILE *f, const uint64_t *bins, int blo, int bhi, int *lo_out, double *bw_out) {
    /* the chart: bars in a group that the script translates by k bins */
    const int x0 = blo - 2 < 0 ? 0 : blo - 2, x1 = bhi + PAGE_K + 2 > HN ? HN : bhi + PAGE_K + 2;
    int lo_lim = x0, hi_lim = x1;
    for (int k = 0; k < 4; k++) {
        const mp_format_info *fi = mp_format(mp_explore_formats[k]);
        const int a = (int)floor(log2(fi->min_subnormal)) - HLO - 1, b = (int)ceil(log2(fi->max)) - HLO + 1;
        lo_lim = a < lo_lim ? (a < 0 ? 0 : a) : lo_lim, hi_lim = b > hi_lim ? (b > HN ? HN : b) : hi_lim;
    }
    const double bw = (double)(W - ML - MR) / (hi_lim - lo_lim);
    uint64_t bmax = 1;
    for (int b = 0; b < HN; b++) bmax = bins[b] > bmax ? bins[b] : bmax;
    fprintf(f,
            "<svg id=\"chart\" viewBox=\"0 0 %d %d\" xmlns=\"http://www.w3.org/2000/svg\">\n"
            "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#fafafa\" stroke=\"#ccc\"/>\n",
            W, H, ML, MT, W - ML - MR, H - MT - MB);
    fprintf(f,
            "<rect id=\"zone_zero\" y=\"%d\" height=\"%d\" fill=\"#c62828\" opacity=\"0.08\"/>"
            "<rect id=\"zone_over\" y=\"%d\" height=\"%d\" fill=\"#6a1b9a\" opacity=\"0.08\"/>\n",
            MT, H - MT - MB, MT, H - MT - MB);
    for (int e = lo_lim; e <= hi_lim; e += 10) {
        const double x = ML + (e - lo_lim) * bw;
        fprintf(f,
                "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#e5e5e5\"/><text x=\"%.1f\" y=\"%d\" "
                "font-size=\"11\" "
                "text-anchor=\"middle\" fill=\"#666\">2^%d</text>\n",
                x, x, MT, H - MB, x, H - MB + 14, e + HLO);
    }
    fprintf(f,
            "<text x=\"%d\" y=\"%d\" font-size=\"12\" text-anchor=\"middle\" fill=\"#444\">magnitude of the scaled "
            "gradient (log2 axis)</text>\n",
            (ML + W - MR) / 2, H - 8);
    fprintf(f, "<g id=\"bars\">\n");
    for (int b = blo; b <= bhi; b++) {
        if (!bins[b]) continue;
        const double h = (double)(H - MT - MB - 10) * (double)bins[b] / (double)bmax;
        fprintf(f, "<rect class=\"bar\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#1f77b4\"/>\n",
                ML + (b - lo_lim) * bw, H - MB - h, bw * 0.9, h);
    }
    fprintf(f,
            "</g>\n<line id=\"floor\" y1=\"%d\" y2=\"%d\" stroke=\"#c62828\" stroke-dasharray=\"5 3\"/>"
            "<line id=\"ceil\" y1=\"%d\" y2=\"%d\" stroke=\"#6a1b9a\" stroke-dasharray=\"5 3\"/>\n"
            "<text id=\"floor_t\" y=\"%d\" font-size=\"11\" fill=\"#c62828\"></text><text id=\"ceil_t\" y=\"%d\" "
            "font-size=\"11\" "
            "fill=\"#6a1b9a\" text-anchor=\"end\"></text>\n</svg>\n",
            MT, H - MB, MT, H - MB, MT + 14, MT + 30);
    *lo_out = lo_lim, *bw_out = bw;
}

/* The data (every count for every format and scale) and the script. */
static void page_script(FILE *f, uint64_t n, mp_scale_counts (*counts)[MP_EXPLORE_K], int lo_lim, double bw) {
    /* the data: every count for every format and scale, computed before the page was opened */
    fprintf(f,
            "<script>\nconst N = %llu, GEO = {ml: %d, bw: %.6f, lo: %d, hlo: %d, mt: %d, h: %d, right: %d};\nconst "
            "DATA = {\n",
            (unsigned long long)n, ML, bw, lo_lim, HLO, MT, H - MT - MB, W - MR);
    for (int k = 0; k < 4; k++) {
        const mp_format_info *fi = mp_format(mp_explore_formats[k]);
        fprintf(f, "  \"%s\": {floor: %.9g, ceil: %.9g, min_normal: %.9g, counts: [", fi->name, fi->min_subnormal / 2,
                fi->max, fi->min_normal);
        for (int s = 0; s < PAGE_K; s++) {
            const mp_scale_counts *c = &counts[k][s];
            fprintf(f, "%s[%llu, %llu, %llu, %llu]", s ? ", " : "", (unsigned long long)c->zero,
                    (unsigned long long)c->subnormal, (unsigned long long)c->overflow, (unsigned long long)c->survive);
        }
        fprintf(f, "]}%s\n", k < 3 ? "," : "");
    }
    fprintf(
        f,
        "};\n"
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
        "  const zz = document.getElementById('zone_zero'); zz.setAttribute('x', GEO.ml); zz.setAttribute('width', "
        "Math.max(0, fx - GEO.ml));\n"
        "  const zo = document.getElementById('zone_over'); zo.setAttribute('x', cx); zo.setAttribute('width', "
        "Math.max(0, GEO.right - cx));\n"
        "  const ft = document.getElementById('floor_t'); ft.setAttribute('x', fx + 4); ft.textContent = fmt + ': 0 "
        "below ' + d.floor.toExponential(2);\n"
        "  const ct = document.getElementById('ceil_t'); ct.setAttribute('x', cx - 4); ct.textContent = fmt + ' max ' "
        "+ d.ceil.toExponential(2);\n"
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
}

void mp_explore_print(FILE *f, const void *ctx) {
    const mp_explore_page *p = ctx;
    int blo = HN, bhi = 0, lo_lim;
    double bw;
    for (int b = 0; b < HN; b++)
        if (p->bins[b]) blo = b < blo ? b : blo, bhi = b;
    page_head(f, p->desc);
    page_chart(f, p->bins, blo, bhi, &lo_lim, &bw);
    page_script(f, p->n, p->counts, lo_lim, bw);
}
