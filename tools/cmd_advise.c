/* cmd_advise.c - `mixprec advise`: which Linear layers of a GPT can take an
 * fp8/fp4 recipe. Each layer's sensitivity measured two ways (the recipe
 * probe on a bf16 run; the validation loss with that layer alone in the
 * recipe, two seeds), the layers ranked, an assignment proposed from the
 * probe and verified by training it. Every run goes through mp_run. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "run.h"

#define MAXL 256 /* Linear layers */

static const char usage[] =
    "usage: mixprec advise --recipe RECIPE [--budget PCT] [--layers-out FILE] [train options]\n\n"
    "Which Linear layers of a GPT can run in RECIPE (fp8-delayed, fp8-current,\n"
    "mxfp8, nvfp4) within PCT percent (1) of bf16's validation loss, measured:\n"
    "  (a) cheaply: a bf16 run with the recipe probe (train --probe): the relative\n"
    "      error the recipe gives each layer's GEMM products, forward, input and\n"
    "      weight gradient; a layer's score is their root mean square;\n"
    "  (b) by the loss: the validation loss with that layer alone in the recipe,\n"
    "      against bf16's, seeds S and S+1 (--seed, 1), two runs per layer.\n"
    "It prints the layers ranked by (a) with (b) beside them and the rank\n"
    "correlation of the two, proposes the fewest layers kept in bf16 for which\n"
    "(a) predicts the recipe within the budget (the whole recipe's measured cost\n"
    "shared among the layers in proportion to their squared scores), then trains\n"
    "the proposal with both seeds and says whether it held, with each\n"
    "assignment's validation loss, bytes per parameter and step time.\n"
    "Runs: 2 x (layers + 3), each as `mixprec train` with the options given.\n\n"
    "  --recipe RECIPE     fp8-delayed, fp8-current, mxfp8 or nvfp4\n"
    "  --budget PCT        the validation loss allowed above bf16's, percent (1)\n"
    "  --layers-out FILE   the proposal as a --layer-precision file\n"
    "  --summary FILE      everything measured, as JSON (docs/LOGS.md)\n\n"
    "The training options (all but --precision, --layer-precision, --probe, --log,\n"
    "--save, --resume and --dump-grads, which advise sets or excludes):\n";

typedef struct {
    mp_run_spec base;
    const char *recipe, *layers_out, *summary;
    double budget;
} advise_opts;

/* What a run gave. */
typedef struct {
    double val, ms, bytes;
} outcome;

static int run_advise(int argc, char **argv);

const cli_command cmd_advise = {"advise", "which layers of a GPT can take an fp8/fp4 recipe, measured and verified",
                                NULL, run_advise};

static int parse(int argc, char **argv, advise_opts *a) {
    static const char *const taken[] = {"precision", "layer-precision", "probe", "log", "save", "resume", "dump-grads"};
    mp_run_defaults(&a->base);
    a->budget = 1.0;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *name = strncmp(arg, "--", 2) == 0 ? arg + 2 : "";
        const int own = !strcmp(name, "recipe") || !strcmp(name, "budget") || !strcmp(name, "layers-out") ||
                        !strcmp(name, "summary");
        const int takes = own ? 1 : mp_run_option_takes_value(name);
        if (takes < 0) return cli_usage_error("advise", "unknown option '%s'", arg);
        for (size_t k = 0; k < sizeof taken / sizeof taken[0]; k++)
            if (!strcmp(name, taken[k])) return cli_usage_error("advise", "%s is set by advise itself", arg);
        if (cli_given_before(argc, argv, i)) return cli_usage_error("advise", "%s is given twice", arg);
        const char *v = takes ? cli_value("advise", argc, argv, &i) : NULL;
        if (takes && !v) return CLI_USAGE;
        char *end;
        if (!strcmp(name, "recipe")) a->recipe = v;
        else if (!strcmp(name, "layers-out")) a->layers_out = v;
        else if (!strcmp(name, "summary")) a->summary = v;
        else if (!strcmp(name, "budget")) {
            a->budget = strtod(v, &end);
            if (end == v || *end || !(a->budget >= 0 && a->budget <= 100))
                return cli_usage_error("advise", "--budget wants a percentage in [0, 100], not '%s'", v);
        } else if (mp_run_option(&a->base, name, v) != MP_OK) return cli_usage_error("advise", "%s", mp_last_error());
    }
    mp_recipe r;
    if (!a->recipe) return cli_usage_error("advise", "--recipe is needed (fp8-delayed, fp8-current, mxfp8 or nvfp4)");
    if (mp_recipe_parse(a->recipe, &r) != MP_OK) return cli_usage_error("advise", "--recipe: %s", mp_last_error());
    a->base.precision = "bf16", a->base.probe = a->recipe; /* the first run's: checked whole before any runs */
    if (mp_run_check(&a->base, NULL) != MP_OK) return cli_usage_error("advise", "%s", mp_last_error());
    a->base.probe = NULL;
    if (a->layers_out && a->summary && mp_output_check("--summary", a->summary, "--layers-out", a->layers_out))
        return cli_usage_error("advise", "%s", mp_last_error());
    const char *const opt[2] = {"--layers-out", "--summary"}, *const path[2] = {a->layers_out, a->summary};
    for (int k = 0; k < 2; k++) { /* checked, and held for the whole of advise, before the first run */
        if (!path[k]) continue;
        const mp_status st = mp_output_check(opt[k], path[k], NULL, NULL);
        if (st == MP_EINVAL) return cli_usage_error("advise", "%s", mp_last_error());
        if (st != MP_OK || mp_output_lock(opt[k], path[k]) != MP_OK)
            return fprintf(stderr, "mixprec advise: %s\n", mp_last_error()), 1;
    }
    return 0;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* One run in mode precision (with the layer file, or NULL) from seed; its
 * line printed. 0, or 1 after the run's message (a run that diverged is an
 * outcome: its loss is not finite). */
static int train(const advise_opts *a, const char *precision, const char *layers, const char *shown, long seed,
                 int probe, outcome *o, mp_run_result *keep) {
    mp_run_spec s = a->base;
    s.precision = precision, s.layer_precision = layers, s.seed = seed, s.probe = probe ? a->recipe : NULL;
    const mp_run_io io = {.out = NULL, .err = stderr, .prefix = "mixprec advise"};
    mp_run_result r;
    const double t0 = now();
    const mp_status st = mp_run(&s, &io, &r);
    if (st != MP_OK && st != MP_EOVERFLOW) return mp_run_result_free(&r), 1; /* said by mp_run */
    *o = (outcome){st == MP_OK ? r.eval_loss : NAN, r.ms_per_step, mp_bytes_per_param(&r.bytes)};
    printf("  %-52s seed %ld: validation loss %.4f, %.1f ms/step (%.0f s)\n", shown, seed, o->val, o->ms, now() - t0);
    fflush(stdout);
    if (keep) *keep = r;
    else mp_run_result_free(&r);
    return 0;
}

/* Both seeds of a mode. */
static int train2(const advise_opts *a, const char *precision, const char *layers, const char *shown, outcome o[2]) {
    for (int k = 0; k < 2; k++)
        if (train(a, precision, layers, shown, a->base.seed + k, 0, &o[k], NULL)) return 1;
    return 0;
}

/* The mean over the seeds of the validation loss against bf16's, percent, and half their spread. */
static double cost(const outcome o[2], const outcome b[2], double *spread) {
    const double d0 = 100 * (o[0].val - b[0].val) / b[0].val, d1 = 100 * (o[1].val - b[1].val) / b[1].val;
    *spread = fabs(d0 - d1) / 2;
    return (d0 + d1) / 2;
}

/* Ranks of x (1 = the largest; ties share their mean rank). */
static void ranks_of(const double *x, int n, double *rank) {
    for (int i = 0; i < n; i++) {
        int above = 0, same = 0;
        for (int j = 0; j < n; j++) above += x[j] > x[i], same += x[j] == x[i];
        rank[i] = above + (same + 1) / 2.0;
    }
}

/* Spearman's rank correlation of x and y: Pearson's on their ranks. */
static double spearman(const double *x, const double *y, int n) {
    double rx[MAXL], ry[MAXL], mx = 0, my = 0, sxy = 0, sxx = 0, syy = 0;
    for (int i = 0; i < n; i++)
        if (!isfinite(x[i]) || !isfinite(y[i])) return NAN; /* a run that diverged, a layer not probed */
    ranks_of(x, n, rx), ranks_of(y, n, ry);
    for (int i = 0; i < n; i++) mx += rx[i] / n, my += ry[i] / n;
    for (int i = 0; i < n; i++)
        sxy += (rx[i] - mx) * (ry[i] - my), sxx += (rx[i] - mx) * (rx[i] - mx), syy += (ry[i] - my) * (ry[i] - my);
    return sxx > 0 && syy > 0 ? sxy / sqrt(sxx * syy) : NAN;
}

/* The layers' indices into order, the largest score first (one that is not finite before all). */
static void by_score(const double *score, int n, int *order) {
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = 1; i < n; i++) /* insertion sort */
        for (int j = i; j > 0 && !(score[order[j]] <= score[order[j - 1]]); j--) {
            const int t = order[j];
            order[j] = order[j - 1], order[j - 1] = t;
        }
}

/* The layers of set (in[i] != 0) as --layer-precision lines "PATTERN = target" into buf: the GPT's
 * "transformer.h.N.SUB" of consecutive blocks as one range N-M per SUB, other names as they are. Returns the
 * number of lines. */
static int pattern_lines(char (*names)[64], int n, const int *in, const char *target, char *buf, size_t cap) {
    int lines = 0, done[MAXL] = {0}, blk[MAXL], at[MAXL]; /* at: where SUB begins, 0 for another name */
    for (int i = 0; i < n; i++)
        if (at[i] = 0, sscanf(names[i], "transformer.h.%d.%n", &blk[i], &at[i]) != 1) at[i] = 0;
    size_t k = strlen(buf);
    for (int i = 0; i < n; i++) {
        if (!in[i] || done[i]) continue;
        done[i] = 1, lines++;
        if (!at[i]) {
            k += (size_t)snprintf(buf + k, k < cap ? cap - k : 0, "%s = %s\n", names[i], target);
            continue;
        }
        int last = blk[i]; /* the run of consecutive blocks from blk[i] with this SUB in the set */
        for (int j = 0; j < n; j++)
            if (in[j] && !done[j] && at[j] && blk[j] == last + 1 && !strcmp(names[j] + at[j], names[i] + at[i]))
                last = blk[j], done[j] = 1, j = -1; /* the next block's, from the first layer again */
        if (last > blk[i])
            k += (size_t)snprintf(buf + k, k < cap ? cap - k : 0, "transformer.h.%d-%d.%s = %s\n", blk[i], last,
                                  names[i] + at[i], target);
        else
            k += (size_t)snprintf(buf + k, k < cap ? cap - k : 0, "transformer.h.%d.%s = %s\n", blk[i],
                                  names[i] + at[i], target);
    }
    return k < cap ? lines : -1; /* -1: buf was too small */
}

/* The proposal from the probe's scores: the layers kept in bf16 (keep[i]), the largest squared scores first,
 * until the whole recipe's cost, shared among the layers in the recipe in proportion to their squared scores,
 * is within the budget. Returns how many are kept. */
static int propose(const double *score, int n, double whole_cost, double budget, int *keep, double *predicted) {
    double total = 0, left;
    int order[MAXL], kept = 0;
    for (int i = 0; i < n; i++) total += isfinite(score[i]) ? score[i] * score[i] : 0, keep[i] = 0;
    by_score(score, n, order);
    left = total;
    while (kept < n && !isfinite(score[order[kept]])) keep[order[kept++]] = 1; /* not measured: kept in bf16 */
    while (kept < n && !(total > 0 ? whole_cost * left / total <= budget : whole_cost <= budget)) {
        keep[order[kept]] = 1;
        left -= isfinite(score[order[kept]]) ? score[order[kept]] * score[order[kept]] : 0;
        kept++;
    }
    *predicted = total > 0 ? whole_cost * (left > 0 ? left : 0) / total : whole_cost;
    return kept;
}

/* What advise measured: per layer, the probe's errors and score, the loss with it alone in the recipe. */
typedef struct {
    int n;
    char (*names)[64];
    double err[MAXL][3], score[MAXL], cost[MAXL], spread[MAXL];
    outcome base[2], whole[2], alone[MAXL][2], advised[2];
    int keep[MAXL], kept; /* the proposal: the layers kept in bf16 */
    double predicted;     /* (a)'s prediction of its cost */
    const char *mode;     /* its --precision */
    char text[33000];     /* its --layer-precision file */
} measures;

/* (a) and (b) for every layer: the probe's bf16 run (seed S), bf16 with seed S + 1, the whole recipe, each
 * layer alone in it. 0, or 1 after a message. */
static int measure(const advise_opts *a, measures *m, mp_run_result *probed) {
    if (train(a, "bf16", NULL, "bf16, with the probe", a->base.seed, 1, &m->base[0], probed) ||
        train(a, "bf16", NULL, "bf16", a->base.seed + 1, 0, &m->base[1], NULL) ||
        train2(a, a->recipe, NULL, a->recipe, m->whole))
        return 1;
    m->base[0].ms = m->base[1].ms; /* bf16's step time is its run without the probe's (the probe computes every
                                       GEMM again, quantized) */
    if (probed->nprobe == 0 || probed->nprobe > MAXL)
        return fprintf(stderr, "mixprec advise: the probe measured %d Linear layers (advise takes 1 to %d)\n",
                       probed->nprobe, MAXL),
               1;
    m->n = probed->nprobe, m->names = probed->probe_names;
    for (int i = 0; i < m->n; i++) {
        double ss = 0;
        for (int d = 0; d < 3; d++)
            m->err[i][d] = mp_qprobe_error(&probed->probe_sums[i][d], -1), ss += m->err[i][d] * m->err[i][d];
        m->score[i] = sqrt(ss / 3);
        char mode[64];
        snprintf(mode, sizeof mode, "bf16+%s=%s", a->recipe, m->names[i]);
        if (train2(a, mode, NULL, mode, m->alone[i])) return 1;
        m->cost[i] = cost(m->alone[i], m->base, &m->spread[i]);
    }
    return 0;
}

/* The layers ranked by the probe, with the loss beside; the rank correlation. */
static void print_ranking(const advise_opts *a, const measures *m) {
    int order[MAXL];
    double whole_spread, share = 0;
    const double whole = cost(m->whole, m->base, &whole_spread);
    for (int i = 0; i < m->n; i++) share += m->score[i] * m->score[i];
    by_score(m->score, m->n, order);
    printf("\nthe layers ranked by (a), the probe: %s's relative error of the product (forward / input gradient /\n"
           "weight gradient) and its root mean square; (b) the validation loss with the layer alone in %s, against\n"
           "bf16's (mean of the two seeds, +- half their difference); (a)'s prediction of (b): the whole recipe's\n"
           "%+.2f%% in proportion to the squared scores\n\n",
           a->recipe, a->recipe, whole);
    printf("  %-30s %-26s %8s %18s %11s\n", "layer", "(a) fwd / dgrad / wgrad", "score", "(b) vs bf16", "predicted");
    for (int k = 0; k < m->n; k++) {
        const int i = order[k];
        char e[64];
        snprintf(e, sizeof e, "%.4f / %.4f / %.4f", m->err[i][0], m->err[i][1], m->err[i][2]);
        printf("  %-30s %-26s %8.4f %+9.3f%% +-%.3f%% %+10.3f%%\n", m->names[i], e, m->score[i], m->cost[i],
               m->spread[i], share > 0 ? whole * m->score[i] * m->score[i] / share : NAN);
    }
    printf("\n  rank correlation of (a)'s scores and (b)'s costs (Spearman): %.3f over %d layers\n",
           spearman(m->score, m->cost, m->n), m->n);
}

/* The proposal as a --layer-precision file's text, in the form with fewer lines: the recipe with the kept
 * layers in bf16, or bf16 with the others in the recipe; *mode the --precision it goes with. */
static int proposal_text(const advise_opts *a, const measures *m, const int *keep, const char **mode, char *buf,
                         size_t cap) {
    int quant[MAXL];
    char kept_lines[16384] = "", quant_lines[16384] = "";
    for (int i = 0; i < m->n; i++) quant[i] = !keep[i];
    const int nk = pattern_lines(m->names, m->n, keep, "bf16", kept_lines, sizeof kept_lines);
    const int nq = pattern_lines(m->names, m->n, quant, a->recipe, quant_lines, sizeof quant_lines);
    if (nk < 0 || nq < 0) return fprintf(stderr, "mixprec advise: the proposal's file is too long\n"), 1;
    *mode = nk <= nq ? a->recipe : "bf16";
    snprintf(buf, cap, "# mixprec advise: %s within %g%% of bf16's validation loss (%s), with --precision %s\n%s",
             a->recipe, a->budget, a->base.model, *mode, nk <= nq ? kept_lines : quant_lines);
    return 0;
}

/* The file the proposal is trained from: --layers-out, else a temporary one (*tmp set: the caller removes it). */
static int write_proposal(const advise_opts *a, const char *text, char *path, size_t cap, int *tmp) {
    *tmp = !a->layers_out;
    if (a->layers_out) {
        snprintf(path, cap, "%s", a->layers_out);
        const mp_chunk c = {text, strlen(text)};
        if (mp_write_file_atomic(path, &c, 1) == MP_OK) return 0;
        return fprintf(stderr, "mixprec advise: %s\n", mp_last_error()), 1;
    }
    const char *dir = getenv("TMPDIR");
    snprintf(path, cap, "%s/mixprec-advised-XXXXXX", dir && *dir ? dir : "/tmp");
    const int fd = mkstemp(path);
    const size_t n = strlen(text);
    if (fd >= 0 && write(fd, text, n) == (ssize_t)n && close(fd) == 0) return 0;
    if (fd >= 0) close(fd), unlink(path);
    return fprintf(stderr, "mixprec advise: cannot write a temporary file in %s\n", dir && *dir ? dir : "/tmp"), 1;
}

/* The proposal trained with both seeds (the whole recipe's or bf16's runs where it is one of them). */
static int verify(const advise_opts *a, measures *m) {
    const int *keep = m->keep, kept = m->kept;
    char *text = m->text, path[4200], shown[96];
    for (int k = 0; k < 2; k++) m->advised[k] = (outcome){NAN, NAN, NAN};
    if (proposal_text(a, m, keep, &m->mode, text, sizeof m->text)) return 1;
    const char *mode = m->mode;
    printf("\nthe proposal: %d of %d layers kept in bf16\n%s", kept, m->n, text);
    fflush(stdout);
    int tmp = 0, rc = 0;
    if ((a->layers_out || (kept > 0 && kept < m->n)) && write_proposal(a, text, path, sizeof path, &tmp)) return 1;
    mp_precision p; /* a mode holds 191 bytes of assignments: refused here, before its runs */
    if (kept > 0 && kept < m->n &&
        (mp_precision_parse(mode, &p) != MP_OK || mp_precision_load_layers(&p, path) != MP_OK)) {
        fprintf(stderr, "mixprec advise: the proposal cannot be trained as one mode: %s\n", mp_last_error());
        if (tmp) unlink(path);
        return 1;
    }
    if (kept == 0) memcpy(m->advised, m->whole, sizeof m->advised);
    else if (kept == m->n) memcpy(m->advised, m->base, sizeof m->advised);
    else {
        snprintf(shown, sizeof shown, "%s, %d of %d layers kept in bf16", a->recipe, kept, m->n);
        printf("\n");
        rc = train2(a, mode, path, shown, m->advised);
    }
    if (tmp) unlink(path);
    return rc;
}

static void print_row(const char *name, int nq, int n, const outcome o[2], const outcome b[2]) {
    double spread;
    const double c = cost(o, b, &spread);
    printf("  %-34s %5d/%-3d %9.4f %9.4f %+8.3f%% %8.2f %8.1f\n", name, nq, n, o[0].val, o[1].val, c, o[0].bytes,
           (o[0].ms + o[1].ms) / 2);
}

static void print_outcome(const advise_opts *a, const measures *m, int kept, double predicted) {
    double spread;
    const double got = cost(m->advised, m->base, &spread);
    printf("\n  %-34s %9s %9s %9s %9s %8s %8s\n", "assignment", "in recipe", "val s1", "val s2", "vs bf16", "bytes/p",
           "ms/step");
    print_row("bf16", 0, m->n, m->base, m->base);
    print_row(a->recipe, m->n, m->n, m->whole, m->base);
    print_row("advised", m->n - kept, m->n, m->advised, m->base);
    const int held = isfinite(got) && got <= a->budget;
    printf("\n%s: the advised assignment (%d of %d layers in %s) ended %+.3f%% from bf16 (+-%.3f%% between the "
           "seeds; predicted %+.3f%%) against a budget of %g%%\n",
           held ? "held" : "did not hold", m->n - kept, m->n, a->recipe, got, spread, predicted, a->budget);
}

static void jval(FILE *f, double v) {
    if (isfinite(v)) fprintf(f, "%.17g", v);
    else fputs("null", f);
}

static void jnum(FILE *f, const char *key, double v) { fprintf(f, "\"%s\": ", key), jval(f, v); }

/* A mode's two runs: {"val_loss": [s, s + 1], "vs_bf16", "spread", "ms_per_step", "bytes_per_param"}. */
static void jruns(FILE *f, const char *key, const outcome o[2], const outcome b[2]) {
    double spread;
    const double c = cost(o, b, &spread);
    fprintf(f, "\"%s\": {\"val_loss\": [", key);
    for (int k = 0; k < 2; k++) fputs(k ? ", " : "", f), jval(f, o[k].val);
    fprintf(f, "], "), jnum(f, "vs_bf16", c), fprintf(f, ", "), jnum(f, "spread", spread), fprintf(f, ", ");
    jnum(f, "ms_per_step", (o[0].ms + o[1].ms) / 2), fprintf(f, ", "), jnum(f, "bytes_per_param", o[0].bytes);
    fprintf(f, "}");
}

/* Everything measured (docs/LOGS.md, "mixprec advise --summary"). Names and the file's text are the model's
 * and ours: no character in them needs escaping but the newline. */
static int write_summary(const advise_opts *a, const measures *m) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return fprintf(stderr, "mixprec advise: out of memory\n"), 1;
    fprintf(f, "{\"recipe\": \"%s\", ", a->recipe), jnum(f, "budget", a->budget);
    fprintf(f, ", \"model\": \"%s\", \"seeds\": [%ld, %ld],\n ", a->base.model, a->base.seed, a->base.seed + 1);
    jruns(f, "bf16", m->base, m->base), fprintf(f, ",\n "), jruns(f, "whole", m->whole, m->base);
    fprintf(f, ",\n \"layers\": [");
    for (int i = 0; i < m->n; i++) {
        fprintf(f, "%s\n  {\"name\": \"%s\", \"probe_error\": [", i ? "," : "", m->names[i]);
        for (int d = 0; d < 3; d++) fputs(d ? ", " : "", f), jval(f, m->err[i][d]);
        fprintf(f, "], "), jnum(f, "score", m->score[i]), fprintf(f, ", "), jruns(f, "alone", m->alone[i], m->base);
        fprintf(f, ", \"kept_in_bf16\": %s}", m->keep[i] ? "true" : "false");
    }
    fprintf(f, "],\n "), jnum(f, "spearman", spearman(m->score, m->cost, m->n));
    fprintf(f, ", \"kept\": %d, ", m->kept), jnum(f, "predicted", m->predicted);
    fprintf(f, ", \"precision\": \"%s\", \"layer_precision\": \"", m->mode);
    for (const char *c = m->text; *c; c++) *c == '\n' ? fputs("\\n", f) : fputc(*c, f);
    fprintf(f, "\",\n "), jruns(f, "advised", m->advised, m->base), fprintf(f, "}\n");
    if (fclose(f) != 0) return free(buf), fprintf(stderr, "mixprec advise: out of memory\n"), 1;
    const mp_chunk c = {buf, len};
    const mp_status st = mp_write_file_atomic(a->summary, &c, 1);
    free(buf);
    return st == MP_OK ? 0 : (fprintf(stderr, "mixprec advise: %s\n", mp_last_error()), 1);
}

static int run_advise(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
            return fputs(usage, stdout), fputs(mp_run_options_help(), stdout), 0;
    advise_opts a = {0};
    const int rc = parse(argc, argv, &a);
    if (rc) return rc;
    printf("mixprec advise: %s within %g%% of bf16's validation loss, %s, seeds %ld and %ld\n\n", a.recipe, a.budget,
           a.base.model, a.base.seed, a.base.seed + 1);
    static measures m;
    mp_run_result probed;
    memset(&probed, 0, sizeof probed);
    int bad = measure(&a, &m, &probed);
    if (!bad) {
        print_ranking(&a, &m);
        double spread;
        m.kept = propose(m.score, m.n, cost(m.whole, m.base, &spread), a.budget, m.keep, &m.predicted);
        if (!isfinite(cost(m.whole, m.base, &spread)))
            printf("\nthe whole recipe's validation loss is not finite: every layer is kept in bf16\n");
        bad = verify(&a, &m);
        if (!bad) print_outcome(&a, &m, m.kept, m.predicted);
        if (a.summary && write_summary(&a, &m)) bad = 1; /* what was measured, the proposal's runs or not */
    }
    mp_run_result_free(&probed);
    if (a.layers_out) mp_output_unlock(a.layers_out);
    if (a.summary) mp_output_unlock(a.summary);
    return bad;
}
