/* cmd_scaler_sim.c - `mixprec scaler-sim`: the dynamic loss scaler running on a
 * synthetic gradient stream whose magnitude drifts, with fp16's view of it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char usage[] = "usage: mixprec scaler-sim [options] [--json | --csv]\n\n"
                            "Runs mixprec's dynamic loss scaler over a synthetic gradient stream: each step\n"
                            "draws N gradient magnitudes, log-normal around a median that drifts from\n"
                            "--start to --end (gradients shrink as training goes on), with occasional spikes\n"
                            "(a step whose gradients are --spike times larger). Each step the gradients are\n"
                            "multiplied by the current scale and stored in fp16 by mp_convert, which counts\n"
                            "what underflows to 0, what lands in the subnormal range and what overflows; an\n"
                            "overflow means inf in the gradients: the step is skipped and the scale backs off;\n"
                            "after --growth-interval clean steps it grows. The textbook 'start high, halve on\n"
                            "overflow, double after N clean steps', computed.\n\n"
                            "  --steps T           steps to simulate (3000)\n"
                            "  --n N               gradients per step (16384)\n"
                            "  --start M           median |g| at the first step (1e-3)\n"
                            "  --end M             median |g| at the last step (1e-7)\n"
                            "  --sigma S           spread, in decades (0.8)\n"
                            "  --spike-prob P      chance of a spike per step (0.003)\n"
                            "  --spike F           spike size (1e4)\n"
                            "  --seed S            random seed (1)\n"
                            "  --every K           table row every K steps (T/25); skipped steps always shown\n"
                            "  --static            a static scale (--init-scale), never changes\n"
                            "  --json              one JSON object with every step\n"
                            "  --csv               one CSV row per step\n"
                            "\nDefaults differ from PyTorch's only in --growth-interval (200 here, 2000 there),\n"
                            "so that growth shows within a short run.\n\n";

typedef struct {
    long steps, n, every;
    double start, end, sigma, spike_prob, spike;
    unsigned long long seed;
} sim_opts;

typedef struct {
    uint64_t s;
    int have;
    double spare;
} gauss_rng;

static double uniform(gauss_rng *r) {
    r->s ^= r->s << 13;
    r->s ^= r->s >> 7;
    r->s ^= r->s << 17;
    return ((double)(r->s >> 11) + 0.5) * 0x1p-53;
}

static double gauss(gauss_rng *r) { /* Box-Muller */
    if (r->have) {
        r->have = 0;
        return r->spare;
    }
    const double u = uniform(r), v = uniform(r), m = sqrt(-2.0 * log(u));
    const double two_pi = 6.283185307179586;
    r->spare = m * sin(two_pi * v);
    r->have = 1;
    return m * cos(two_pi * v);
}

typedef struct {
    long step;
    float scale;
    int found_inf, spike;
    double underflow, subnormal, underflow_unscaled;
    uint64_t overflow;
} sim_row;

static int parse_double(const char *cmd, int argc, char **argv, int *i, double *out, double lo, double hi) {
    const char *opt = argv[*i], *v = cli_value(cmd, argc, argv, i);
    float f;
    if (!v) return CLI_USAGE;
    if (cli_parse_float(v, &f) != 0 || !(f >= lo && f <= hi))
        return cli_usage_error(cmd, "%s wants a number in [%g, %g], not '%s'", opt, lo, hi, v);
    *out = f;
    return 0;
}

static int parse_long_opt(const char *cmd, int argc, char **argv, int *i, long *out, long lo, long hi) {
    const char *opt = argv[*i], *v = cli_value(cmd, argc, argv, i);
    if (!v) return CLI_USAGE;
    if (cli_parse_long(v, lo, hi, out) != 0)
        return cli_usage_error(cmd, "%s wants %ld .. %ld, not '%s'", opt, lo, hi, v);
    return 0;
}

/* The options into *o and *cfg; 0, -1 after --help, or CLI_USAGE after a message. */
static int parse(int argc, char **argv, sim_opts *o, mp_scaler_config *cfg, int *json, int *csv) {
    const char *cmd = "scaler-sim";
    int rc;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long seed;
        if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            return fputs(usage, stdout), fputs("loss scaling\n", stdout), cli_scaler_help(stdout), -1;
        if ((rc = cli_scaler_option(cmd, argc, argv, &i, cfg)) != 0) {
            if (rc != 1) return rc;
        } else if (!strcmp(a, "--json")) *json = 1;
        else if (!strcmp(a, "--csv")) *csv = 1;
        else if (!strcmp(a, "--static")) cfg->dynamic = 0;
        else if (!strcmp(a, "--steps")) {
            if ((rc = parse_long_opt(cmd, argc, argv, &i, &o->steps, 1, 10000000))) return rc;
        } else if (!strcmp(a, "--n")) {
            if ((rc = parse_long_opt(cmd, argc, argv, &i, &o->n, 1, 1L << 26))) return rc;
        } else if (!strcmp(a, "--every")) {
            if ((rc = parse_long_opt(cmd, argc, argv, &i, &o->every, 1, 10000000))) return rc;
        } else if (!strcmp(a, "--seed")) {
            if ((rc = parse_long_opt(cmd, argc, argv, &i, &seed, 0, 2147483647L))) return rc;
            o->seed = (unsigned long long)seed;
        } else if (!strcmp(a, "--start")) {
            if ((rc = parse_double(cmd, argc, argv, &i, &o->start, 1e-30, 1e30))) return rc;
        } else if (!strcmp(a, "--end")) {
            if ((rc = parse_double(cmd, argc, argv, &i, &o->end, 1e-30, 1e30))) return rc;
        } else if (!strcmp(a, "--sigma")) {
            if ((rc = parse_double(cmd, argc, argv, &i, &o->sigma, 0, 10))) return rc;
        } else if (!strcmp(a, "--spike-prob")) {
            if ((rc = parse_double(cmd, argc, argv, &i, &o->spike_prob, 0, 1))) return rc;
        } else if (!strcmp(a, "--spike")) {
            if ((rc = parse_double(cmd, argc, argv, &i, &o->spike, 1, 1e30))) return rc;
        } else return cli_usage_error(cmd, "unknown option '%s'", a);
    }
    if (*json && *csv) return cli_usage_error(cmd, "--json and --csv exclude each other");
    if (!o->every) o->every = o->steps / 25 > 0 ? o->steps / 25 : 1;
    return 0;
}

/* What a simulation leaves. */
typedef struct {
    sim_row *rows;
    long done;                            /* steps taken */
    double sum_under, sum_under_unscaled; /* of the steps' underflow fractions */
    const char *stopped;                  /* why the scaler stopped early, or NULL */
} sim_out;

/* The steps of o through scaler s: each step's gradients drawn, scaled, stored
 * in fp16 (counted), and the scaler updated. -1 when out of memory. */
static int simulate(const sim_opts *o, mp_scaler *s, sim_out *out) {
    float *g = malloc((size_t)o->n * 4), *gs = malloc((size_t)o->n * 4);
    uint16_t *h = malloc((size_t)o->n * 2);
    out->rows = malloc((size_t)o->steps * sizeof *out->rows);
    if (!g || !gs || !h || !out->rows) return free(g), free(gs), free(h), -1;
    gauss_rng r = {o->seed * 0x9e3779b97f4a7c15ull + 0x2545f4914f6cdd1dull, 0, 0};
    for (long t = 0; t < o->steps; t++, out->done++) {
        const double frac = o->steps > 1 ? (double)t / (double)(o->steps - 1) : 0.0;
        const double mu = log10(o->start) + frac * (log10(o->end) - log10(o->start));
        const int spike = uniform(&r) < o->spike_prob;
        for (long i = 0; i < o->n; i++) {
            double mag = pow(10.0, mu + o->sigma * gauss(&r)) * (spike ? o->spike : 1.0);
            g[i] = (float)(uniform(&r) < 0.5 ? -mag : mag);
        }
        const float scale = mp_scaler_get_scale(s);
        for (long i = 0; i < o->n; i++) gs[i] = g[i] * scale;
        mp_convert_stats st = {0, 0, 0, 0, 0.0f}, st1 = {0, 0, 0, 0, 0.0f};
        mp_convert(h, MP_F16, gs, MP_F32, (size_t)o->n, &st);
        mp_convert(h, MP_F16, g, MP_F32, (size_t)o->n, &st1);
        sim_row *row = &out->rows[t];
        row->step = t, row->scale = scale, row->spike = spike;
        row->found_inf = st.overflow + st.nan > 0;
        row->underflow = (double)st.underflow / (double)o->n;
        row->subnormal = (double)st.subnormal / (double)o->n;
        row->overflow = st.overflow;
        row->underflow_unscaled = (double)st1.underflow / (double)o->n;
        out->sum_under += row->underflow, out->sum_under_unscaled += row->underflow_unscaled;
        if (mp_scaler_update(s, row->found_inf) != MP_OK) {
            out->stopped = mp_last_error();
            out->done++;
            break;
        }
    }
    free(g), free(gs), free(h);
    return 0;
}

static void print_csv(const sim_out *r) {
    printf("step,scale,found_inf,spike,underflow,subnormal,overflow,underflow_unscaled\n");
    for (long t = 0; t < r->done; t++) {
        const sim_row *w = &r->rows[t];
        printf("%ld,%.9g,%d,%d,%.6g,%.6g,%llu,%.6g\n", w->step, (double)w->scale, w->found_inf, w->spike, w->underflow,
               w->subnormal, (unsigned long long)w->overflow, w->underflow_unscaled);
    }
}

static void print_json(const sim_opts *o, const mp_scaler_config *cfg, const mp_scaler *s, const sim_out *r) {
    printf("{\"config\": {\"steps\": %ld, \"n\": %ld, \"start\": %g, \"end\": %g, \"sigma\": %g, \"spike_prob\": %g, "
           "\"spike\": %g, \"seed\": %llu, \"init_scale\": %.9g, \"growth_factor\": %.9g, \"backoff_factor\": %.9g, "
           "\"growth_interval\": %d, \"hysteresis\": %d, \"min_scale\": %.9g, \"max_scale\": %.9g, \"dynamic\": %s},\n"
           "\"steps\": [",
           o->steps, o->n, o->start, o->end, o->sigma, o->spike_prob, o->spike, o->seed, (double)cfg->init_scale,
           (double)cfg->growth_factor, (double)cfg->backoff_factor, cfg->growth_interval, cfg->hysteresis,
           (double)cfg->min_scale, (double)cfg->max_scale, cfg->dynamic ? "true" : "false");
    for (long t = 0; t < r->done; t++) {
        const sim_row *w = &r->rows[t];
        printf("%s\n {\"step\": %ld, \"scale\": %.9g, \"found_inf\": %s, \"spike\": %s, \"underflow\": %.6g, "
               "\"subnormal\": %.6g, \"overflow\": %llu, \"underflow_unscaled\": %.6g}",
               t ? "," : "", w->step, (double)w->scale, w->found_inf ? "true" : "false", w->spike ? "true" : "false",
               w->underflow, w->subnormal, (unsigned long long)w->overflow, w->underflow_unscaled);
    }
    printf("],\n\"summary\": {\"steps\": %llu, \"skipped\": %llu, \"growths\": %llu, \"backoffs\": %llu, "
           "\"final_scale\": %.9g, \"last_overflow_step\": %lld, \"mean_underflow\": %.6g, "
           "\"mean_underflow_unscaled\": %.6g, \"stopped\": %s%s%s}}\n",
           (unsigned long long)s->steps, (unsigned long long)s->skipped, (unsigned long long)s->growths,
           (unsigned long long)s->backoffs, (double)s->scale, (long long)s->last_overflow_step,
           r->sum_under / (double)r->done, r->sum_under_unscaled / (double)r->done, r->stopped ? "\"" : "",
           r->stopped ? r->stopped : "null", r->stopped ? "\"" : "");
}

static void print_table(const sim_opts *o, const mp_scaler_config *cfg, const mp_scaler *s, const sim_out *r) {
    printf("scaler-sim: %ld steps of %ld gradients, median |g| %.0e -> %.0e (sigma %.1f decades), spikes %.1e x "
           "with p = %g\nscaler: %s, init %g, x%g after %d clean steps, x%g on overflow, hysteresis %d\n\n",
           o->steps, o->n, o->start, o->end, o->sigma, o->spike, o->spike_prob, cfg->dynamic ? "dynamic" : "static",
           (double)cfg->init_scale, (double)cfg->growth_factor, cfg->growth_interval, (double)cfg->backoff_factor,
           cfg->hysteresis);
    printf("%7s %12s %6s  %-7s %11s %11s %9s   %s\n", "step", "scale", "log2", "event", "underflow", "subnormal",
           "overflow", "underflow at scale 1");
    for (long t = 0; t < r->done; t++) {
        const sim_row *w = &r->rows[t];
        if (!(w->found_inf || t % o->every == 0 || t == r->done - 1)) continue;
        printf("%7ld %12.6g %6.1f  %-7s %10.3f%% %10.3f%% %9llu   %.3f%%\n", w->step, (double)w->scale,
               log2((double)w->scale), w->found_inf ? (w->spike ? "SKIP*" : "SKIP") : "", 100 * w->underflow,
               100 * w->subnormal, (unsigned long long)w->overflow, 100 * w->underflow_unscaled);
    }
    printf("\n(SKIP = inf in the fp16 gradients: step skipped, scale backed off; * = a spike step)\n"
           "steps %llu, skipped %llu, growths %llu, backoffs %llu, final scale %g (2^%.0f)\n"
           "mean fraction of gradients lost to underflow: %.3f%% with loss scaling, %.3f%% without\n",
           (unsigned long long)s->steps, (unsigned long long)s->skipped, (unsigned long long)s->growths,
           (unsigned long long)s->backoffs, (double)s->scale, log2((double)s->scale),
           100 * r->sum_under / (double)r->done, 100 * r->sum_under_unscaled / (double)r->done);
    if (r->stopped) printf("stopped: %s\n", r->stopped);
}

static int run(int argc, char **argv) {
    sim_opts o = {3000, 16384, 0, 1e-3, 1e-7, 0.8, 0.003, 1e4, 1};
    mp_scaler_config cfg = mp_scaler_defaults();
    cfg.growth_interval = 200;
    int json = 0, csv = 0;
    const int rc = parse(argc, argv, &o, &cfg, &json, &csv);
    if (rc) return rc < 0 ? 0 : rc;
    mp_scaler s;
    if (mp_scaler_init(&s, &cfg) != MP_OK) return cli_usage_error("scaler-sim", "%s", mp_last_error());
    sim_out r = {0};
    if (simulate(&o, &s, &r) != 0) {
        free(r.rows);
        return fprintf(stderr, "mixprec scaler-sim: out of memory\n"), 1;
    }
    if (csv) print_csv(&r);
    else if (json) print_json(&o, &cfg, &s, &r);
    else print_table(&o, &cfg, &s, &r);
    free(r.rows);
    return r.stopped ? 1 : 0;
}

const cli_command cmd_scaler_sim = {"scaler-sim", "the dynamic loss scaler on a drifting synthetic gradient stream",
                                    usage, run};
