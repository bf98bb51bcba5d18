/* cmd_underflow.c - `mixprec underflow` and `mixprec explore`: a gradient
 * distribution against a format at several loss scales, in the terminal and
 * as an interactive page whose every number mixprec computed; for a block
 * format (mxfp8-e4m3, mxfp8-e5m2, nvfp4), block scaling against one scale
 * per tensor. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gradients.h"

static const char usage[] =
    "usage: mixprec underflow [--dist lognormal:MU,SIGMA | --from FILE] [--n N]\n"
    "                         [--format fp16|bf16|e4m3|e5m2] [--scales S,...] [--seed S] [--json]\n"
    "       mixprec underflow --format mxfp8-e4m3|mxfp8-e5m2|nvfp4 [--mx-rule floor|rceil]\n"
    "                         [--dist ... | --from FILE] [--n N] [--seed S] [--json]\n\n"
    "Draws N gradient magnitudes (default: |x| with ln x ~ N(-17.5, 1.6), 200000\n"
    "values, the textbook distribution) or reads real ones (.npy, .safetensors or\n"
    "raw float32), then prints the median and 5th percentile, the fraction that\n"
    "becomes exactly zero in the format, and for each loss scale the share that\n"
    "survives, lands in the subnormal range and overflows; a histogram of log10|g|\n"
    "with the format's limits; and the best power-of-two scale (most survivors,\n"
    "no overflow). Counts come from mp_convert's statistics.\n\n"
    "With a block format the values, in order (drawn, or the file's finite values\n"
    "as magnitudes), form one tensor cut into blocks of consecutive values (32 for\n"
    "MX, 16 for NVFP4; the last padded with zeros), quantized with one scale per\n"
    "block and, on the same data, with one scale per tensor in the same element\n"
    "format (e4m3: 448/amax, e5m2: 57344/amax, nvfp4: e2m1 with 6/amax). It prints\n"
    "both rows (nonzero values flushed to 0, saturated, kept nonzero, and the mean\n"
    "relative error of the nonzero values, a flushed one counting 1) and what\n"
    "block scaling saves; no loss-scale table (block scales replace it).\n\n"
    "  --dist lognormal:MU,SIGMA   ln|g| ~ N(MU, SIGMA)\n"
    "  --from FILE                 gradients from a file instead: .npy or safetensors\n"
    "                              (known by their bytes)\n"
    "  --raw                       --from FILE is raw little-endian float32\n"
    "  --n N                       values to draw (200000)\n"
    "  --format F                  fp16 (default), bf16, e4m3, e5m2, or a block\n"
    "                              format: mxfp8-e4m3, mxfp8-e5m2, nvfp4\n"
    "  --mx-rule floor|rceil       MX block-scale rule (rceil, Transformer Engine's;\n"
    "                              floor: OCP v1.0, torchao's)\n"
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
    int block; /* 1: --format is a block format, bfmt */
    mp_block_format bfmt;
    mp_mx_rule rule;
    double scales[MP_UNDERFLOW_MAX_SCALES];
    int nscales, json;
    char desc[256];
} uf_opts;

/* The values' source as the options give it: drawn (--dist, --n, --seed) or read (--from, --raw). */
typedef struct {
    double mu, sigma;
    long n, seed;
    const char *from, *rule;
    int raw, n_given, seed_given, dist_given;
} uf_source;

static int parse_dist(const char *cmd, const char *v, uf_source *p) {
    char *e1, *e2;
    if (strncmp(v, "lognormal:", 10) != 0) return cli_usage_error(cmd, "--dist is lognormal:MU,SIGMA, not '%s'", v);
    p->mu = strtod(v + 10, &e1);
    if (*e1 != ',') return cli_usage_error(cmd, "--dist is lognormal:MU,SIGMA, not '%s'", v);
    p->sigma = strtod(e1 + 1, &e2);
    /* six sigmas either side must stay inside fp32: ln(FLT_MAX) = 88.7, ln(2^-149) = -103.3 */
    if (*e2 || !isfinite(p->mu) || !(p->sigma >= 0) || p->mu + 6 * p->sigma > 88.7 || p->mu - 6 * p->sigma < -103.3)
        return cli_usage_error(cmd,
                               "--dist lognormal:MU,SIGMA must keep MU +- 6 SIGMA within fp32's range "
                               "(-103.3 .. 88.7), not '%s'",
                               v);
    return -1;
}

static int parse_format(const char *cmd, const char *v, uf_opts *o) {
    o->block = mp_block_format_parse(v, &o->bfmt) == MP_OK;
    if (o->block) return -1;
    if (mp_dtype_parse(v, &o->fmt) != MP_OK || o->fmt == MP_F32)
        return cli_usage_error(cmd, "--format is fp16, bf16, e4m3, e5m2, mxfp8-e4m3, mxfp8-e5m2 or nvfp4, not '%s'", v);
    if (o->fmt == MP_E8M0 || o->fmt == MP_E2M1)
        return cli_usage_error(cmd,
                               "--format is fp16, bf16, e4m3, e5m2, mxfp8-e4m3, mxfp8-e5m2 or nvfp4, not '%s' (%s)", v,
                               o->fmt == MP_E8M0 ? "e8m0 holds block scales, not values"
                                                 : "fp4 values are scaled per block of 16 or 32, not by one loss "
                                                   "scale: nvfp4 is fp4 in blocks");
    return -1;
}

static int parse_scales(const char *cmd, const char *v, uf_opts *o) {
    char buf[512];
    if (strlen(v) >= sizeof buf) return cli_usage_error(cmd, "--scales wants up to 32 positive numbers");
    snprintf(buf, sizeof buf, "%s", v);
    for (char *t = buf, *next; t; t = next) { /* every entry, an empty one too (strtok would skip it) */
        next = strchr(t, ',');
        if (next) *next++ = '\0';
        float f;
        if (!*t) return cli_usage_error(cmd, "--scales '%s' has an empty entry", v);
        if (o->nscales == MP_UNDERFLOW_MAX_SCALES || cli_parse_float(t, &f) || !(f > 0) || !isfinite(f))
            return cli_usage_error(cmd, "--scales wants up to 32 positive numbers, not '%s'", t);
        o->scales[o->nscales++] = f;
    }
    return -1;
}

/* Option argv[*i] (its value taken): -1 to go on, else the exit status. */
static int parse_option(const char *cmd, int argc, char **argv, int *i, uf_opts *o, uf_source *p, const char **out) {
    const char *a = argv[*i], *v;
    if (!strcmp(a, "--json") && !out) o->json = 1;
    else if (!strcmp(a, "--raw")) p->raw = 1;
    else if (!strcmp(a, "--dist") || !strcmp(a, "--from") || !strcmp(a, "--n") || !strcmp(a, "--seed") ||
             (!out && (!strcmp(a, "--format") || !strcmp(a, "--mx-rule") || !strcmp(a, "--scales"))) ||
             (out && !strcmp(a, "--out"))) {
        if (!(v = cli_value(cmd, argc, argv, i))) return CLI_USAGE;
        if (!strcmp(a, "--dist")) return parse_dist(cmd, v, p);
        if (!strcmp(a, "--from")) p->from = v;
        else if (!strcmp(a, "--n")) {
            if (cli_parse_long(v, 1, 100000000, &p->n)) return cli_usage_error(cmd, "--n wants 1 .. 1e8, not '%s'", v);
        } else if (!strcmp(a, "--seed")) {
            if (cli_parse_long(v, 0, 2147483647L, &p->seed))
                return cli_usage_error(cmd, "--seed wants 0 .. 2^31-1, not '%s'", v);
        } else if (!strcmp(a, "--format")) return parse_format(cmd, v, o);
        else if (!strcmp(a, "--mx-rule")) {
            if (mp_mx_rule_parse(v, &o->rule) != MP_OK)
                return cli_usage_error(cmd, "--mx-rule is floor or rceil, not '%s'", v);
            p->rule = v;
        } else if (!strcmp(a, "--scales")) return parse_scales(cmd, v, o);
        else *out = v;
    } else {
        return cli_usage_error(cmd, "unknown option '%s'", a);
    }
    return -1;
}

/* The options together: 0, or the exit status after a message. */
static int check_options(const char *cmd, uf_opts *o, const uf_source *p, const char **out) {
    if (p->rule && !(o->block && o->bfmt != MP_BLOCK_NVFP4))
        return cli_usage_error(cmd, "--mx-rule applies to --format mxfp8-e4m3 and mxfp8-e5m2 only%s",
                               o->block ? " (nvfp4's block scales are e4m3, rounded to nearest)" : "");
    if (o->block && o->nscales)
        return cli_usage_error(cmd, "--scales does not apply to %s (its block scales replace a loss scale)",
                               mp_block_format_name(o->bfmt));
    if (!o->nscales) {
        const double d[5] = {1, 256, 4096, 65536, 1048576};
        for (int k = 0; k < 5; k++) o->scales[o->nscales++] = d[k];
    }
    if (p->raw && !p->from) return cli_usage_error(cmd, "--raw says how --from FILE is read: give --from");
    if (p->from && (p->dist_given || p->n_given || p->seed_given))
        return cli_usage_error(cmd, "%s draws values, which --from FILE replaces: give one or the other",
                               p->dist_given ? "--dist"
                               : p->n_given  ? "--n"
                                             : "--seed");
    const mp_status ost = out && *out ? mp_output_check("--out", *out, p->from ? "--from" : NULL, p->from) : MP_OK;
    if (ost == MP_EINVAL) return cli_usage_error(cmd, "%s", mp_last_error());
    if (ost != MP_OK) return fprintf(stderr, "mixprec %s: %s\n", cmd, mp_last_error()), 1;
    return 0;
}

/* The values, read or drawn, and their description: 0, or 1 after a message. */
static int load_values(const char *cmd, uf_opts *o, const uf_source *p) {
    if (p->from) {
        char err[600];
        if (grads_read(&o->g, p->from, p->raw, err, sizeof err) != 0) {
            fprintf(stderr, "mixprec %s: %s\n", cmd, err);
            return 1;
        }
        snprintf(o->desc, sizeof o->desc, "%zu gradient magnitudes from %s", o->g.n, p->from);
    } else {
        if (grads_lognormal(&o->g, p->mu, p->sigma, (size_t)p->n, (uint64_t)p->seed) != 0 || o->g.n == 0) {
            fprintf(stderr, "mixprec %s: out of memory\n", cmd);
            return 1;
        }
        snprintf(o->desc, sizeof o->desc, "%ld magnitudes |g|, ln|g| ~ N(%g, %g), seed %ld", p->n, p->mu, p->sigma,
                 p->seed);
    }
    return 0;
}

static int parse_common(const char *cmd, int argc, char **argv, uf_opts *o, const char **out) {
    uf_source p = {.mu = -17.5, .sigma = 1.6, .n = 200000};
    o->fmt = MP_F16, o->nscales = 0, o->json = 0, o->block = 0, o->rule = MP_MX_RCEIL;
    const char *seen[32];
    int nseen = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        for (int k = 0; k < nseen; k++)
            if (!strcmp(seen[k], a)) return cli_usage_error(cmd, "%s is given twice", a);
        if (nseen < 32) seen[nseen++] = a;
        p.n_given |= !strcmp(a, "--n"), p.seed_given |= !strcmp(a, "--seed"), p.dist_given |= !strcmp(a, "--dist");
        const int st = parse_option(cmd, argc, argv, &i, o, &p, out);
        if (st >= 0) return st;
    }
    const int st = check_options(cmd, o, &p, out);
    return st ? st : load_values(cmd, o, &p);
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
            if (marks[m] >= x0 && marks[m] < x0 + 0.5)
                snprintf(mark, sizeof mark, "  <-- %s %s (%.3g)", f->name, names[m], pow(10, marks[m]));
        if (!c[k] && !mark[0]) continue;
        const int w = (int)(50.0 * (double)c[k] / (double)mx + 0.5);
        printf("%6.1f %-50.*s %7.3f%%%s\n", x0, w, "##################################################",
               100.0 * (double)c[k] / (double)g->n, mark);
    }
    free(c);
}

/* ---- block formats: block scaling against one scale per tensor ---- */

void block_compare_print(const mp_block_compare *c) {
    const double nz = c->nonzero_inputs ? (double)c->nonzero_inputs : 1;
    const mp_block_counts *r[2] = {&c->block_scaling, &c->per_tensor};
    char label[2][64];
    snprintf(label[0], sizeof label[0], "block scaling (%s scale per %zu)",
             c->format == MP_BLOCK_NVFP4 ? "e4m3" : "e8m0", c->block);
    snprintf(label[1], sizeof label[1], "one scale per tensor (%s, %g/amax)", mp_format(c->elem)->name,
             mp_format(c->elem)->max);
    printf("%-40s %17s %17s %17s %15s\n", "", "flushed to 0", "saturated", "kept nonzero", "mean rel.error");
    for (int k = 0; k < 2; k++)
        printf("%-40s %9llu %6.2f%% %9llu %6.2f%% %9llu %6.2f%% %15.4g\n", label[k], (unsigned long long)r[k]->flushed,
               100 * (double)r[k]->flushed / nz, (unsigned long long)r[k]->saturated,
               100 * (double)r[k]->saturated / nz, (unsigned long long)r[k]->nonzero, 100 * (double)r[k]->nonzero / nz,
               r[k]->mean_rel_error);
    const uint64_t b = c->block_scaling.nonzero, t = c->per_tensor.nonzero;
    if (b == t) printf("block scaling keeps as many values nonzero");
    else {
        const uint64_t d = b > t ? b - t : t - b;
        printf("block scaling keeps %llu %s value%s nonzero (%.2f%% of the nonzero values)", (unsigned long long)d,
               b > t ? "more" : "fewer", d == 1 ? "" : "s", 100 * (double)d / nz);
    }
    printf("; mean relative error %.3g vs %.3g\n", c->block_scaling.mean_rel_error, c->per_tensor.mean_rel_error);
}

static void block_counts_json(const char *name, const mp_block_counts *r) {
    printf("\"%s\": {\"flushed\": %llu, \"saturated\": %llu, \"nonzero\": %llu, \"mean_rel_error\": %.9g}", name,
           (unsigned long long)r->flushed, (unsigned long long)r->saturated, (unsigned long long)r->nonzero,
           r->mean_rel_error);
}

static int run_block(const uf_opts *o) {
    mp_block_compare c;
    if (mp_block_compare_values(o->g.g, o->g.n, o->bfmt, o->rule, &c) != MP_OK) {
        fprintf(stderr, "mixprec underflow: %s\n", mp_last_error());
        return 1;
    }
    const char *name = mp_block_format_name(c.format), *rule = c.format == MP_BLOCK_NVFP4 ? NULL
                                                               : c.rule == MP_MX_RCEIL    ? "rceil"
                                                                                          : "floor";
    if (o->json) {
        printf("{\"format\": \"%s\", \"rule\": %s%s%s, \"element\": \"%s\", \"block\": %zu, \"n\": %zu, \"nonzero\": "
               "%llu, "
               "\"amax\": %.9g, \"tensor_scale\": %.9g, ",
               name, rule ? "\"" : "", rule ? rule : "null", rule ? "\"" : "", mp_format(c.elem)->name, c.block, c.n,
               (unsigned long long)c.nonzero_inputs, (double)c.amax, (double)c.tensor_scale);
        block_counts_json("block_scaling", &c.block_scaling);
        printf(", ");
        block_counts_json("per_tensor", &c.per_tensor);
        printf(", \"nonzero_gain\": %lld}\n", (long long)c.block_scaling.nonzero - (long long)c.per_tensor.nonzero);
        return 0;
    }
    printf("%s, in %s%s%s: one tensor, blocks of %zu consecutive values (the last padded with zeros)\n", o->desc, name,
           rule ? ", rule " : "", rule ? rule : "", c.block);
    printf("amax %.6g, per-tensor scale %.6g; counts of the %llu nonzero values\n\n", (double)c.amax,
           (double)c.tensor_scale, (unsigned long long)c.nonzero_inputs);
    block_compare_print(&c);
    return 0;
}

static int run_underflow(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (cli_is_help(&cmd_underflow, argv[i])) return 0;
    uf_opts o;
    int rc = parse_common("underflow", argc, argv, &o, NULL);
    if (rc) return rc;
    if (o.block) {
        rc = run_block(&o);
        grads_free(&o.g);
        return rc;
    }
    mp_underflow u;
    if (mp_underflow_analyze(o.g.g, MP_F32, o.g.n, o.fmt, o.scales, o.nscales, &u) != MP_OK) {
        fprintf(stderr, "mixprec underflow: %s\n", mp_last_error());
        grads_free(&o.g);
        return 1;
    }
    const mp_format_info *f = mp_format(o.fmt);
    const double n = (double)u.n;
    if (o.json) {
        printf("{\"format\": \"%s\", \"n\": %zu, \"median\": %.9g, \"p5\": %.9g, \"zero_fraction\": %.9g, "
               "\"zero_count\": %llu, "
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
    /* one writer: --out locked from here to the end (mp_explore_write writes it under this lock) */
    mp_status st = mp_output_lock("--out", out);
    if (st == MP_OK) st = mp_explore_write(out, o.g.g, MP_F32, o.g.n, o.desc);
    mp_output_unlock(out);
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
