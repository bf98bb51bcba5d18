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
    double scales[MP_UNDERFLOW_MAX_SCALES];
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
                if (o->nscales == MP_UNDERFLOW_MAX_SCALES || cli_parse_float(t, &f) || !(f > 0) || !isfinite(f))
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
    mp_underflow u;
    if (mp_underflow_analyze(o.g.g, MP_F32, o.g.n, o.fmt, o.scales, o.nscales, &u) != MP_OK) {
        fprintf(stderr, "mixprec underflow: %s\n", mp_last_error());
        grads_free(&o.g);
        return 1;
    }
    const mp_format_info *f = mp_format(o.fmt);
    const double n = (double)u.n;
    if (o.json) {
        printf("{\"format\": \"%s\", \"n\": %zu, \"median\": %.9g, \"p5\": %.9g, \"zero_fraction\": %.9g, \"zero_count\": %llu, "
               "\"scales\": [",
               f->name, u.n, u.median, u.p5, (double)u.zero_count / n, (unsigned long long)u.zero_count);
        for (int k = 0; k < u.nscales; k++) {
            const mp_scale_counts *c = &u.scales[k];
            printf("%s{\"scale\": %.9g, \"survive\": %.9g, \"subnormal\": %.9g, \"overflow\": %.9g, \"zero\": %.9g}",
                   k ? ", " : "", c->scale, (double)c->survive / n, (double)c->subnormal / n, (double)c->overflow / n,
                   (double)c->zero / n);
        }
        printf("], \"best_scale\": %.9g}\n", u.best_scale);
    } else {
        printf("%s, stored in %s:\n", o.desc, f->name);
        printf("  median %.3e, 5th percentile %.3e\n", u.median, u.p5);
        printf("  %.2f%% become exactly zero in %s (below half its smallest subnormal, %.3g)\n\n",
               100 * (double)u.zero_count / n, f->name, f->min_subnormal / 2);
        printf("%12s %10s %11s %10s %10s\n", "loss scale", "survive", "subnormal", "zero", "overflow");
        for (int k = 0; k < u.nscales; k++) {
            const mp_scale_counts *c = &u.scales[k];
            printf("%12g %9.2f%% %10.2f%% %9.2f%% %9.4f%%\n", c->scale, 100 * (double)c->survive / n,
                   100 * (double)c->subnormal / n, 100 * (double)c->zero / n, 100 * (double)c->overflow / n);
        }
        printf("\nbest power-of-two scale: %g (2^%.0f): %.2f%% survive, %.2f%% subnormal, no overflow\n", u.best_scale,
               log2(u.best_scale), 100 * (double)u.best.survive / n, 100 * (double)u.best.subnormal / n);
        histogram_terminal(&o.g, o.fmt);
    }
    grads_free(&o.g);
    return 0;
}

const cli_command cmd_underflow = {"underflow", "what a gradient distribution loses in a format, at each loss scale",
                                   usage, run_underflow};

/* ---- explore: the page (mp_explore_write) ---- */

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
    const mp_status st = mp_explore_write(out, o.g.g, MP_F32, o.g.n, o.desc);
    grads_free(&o.g);
    if (st != MP_OK) {
        fprintf(stderr, "mixprec explore: %s\n", mp_last_error());
        return 1;
    }
    printf("wrote %s: 4 formats x 25 loss scales, computed by mixprec\n", out);
    return 0;
}

const cli_command cmd_explore = {"explore", "write an interactive page: gradients, a loss-scale slider, four formats",
                                 explore_usage, run_explore};
