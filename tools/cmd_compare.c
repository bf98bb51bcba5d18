/* cmd_compare.c - `mixprec compare` and `mixprec demo`: the same network trained
 * in several precision modes (each a `mixprec train` child process, so each has
 * its own peak memory), a summary table and DIR/report.html. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>

#include "cli.h"

static const char usage[] =
    "usage: mixprec compare [--precisions LIST] [--out DIR] [train options]\n\n"
    "Trains the same network with the same seed, data and initial weights once per\n"
    "precision mode (default fp32,fp16,fp16-dynamic,bf16), prints a summary table\n"
    "and writes DIR/report.html (one self-contained page: loss curves, the loss\n"
    "scale with every skipped step, gradient underflow by layer and over time, where\n"
    "the gradients lie against fp16's range, and a reading of what happened) with\n"
    "the logs behind it: DIR/MODE.csv (per step), DIR/MODE.json (per run),\n"
    "DIR/MODE.txt (the run's output) and DIR/summary.json.\n\n"
    "  --precisions LIST   comma-separated modes (see mixprec train --help)\n"
    "  --out DIR           output directory (mixprec-compare)\n"
    "Every other option goes to `mixprec train` (model, optimizer, batch, steps ...).\n";

static const char demo_usage[] =
    "usage: mixprec demo [--out DIR]\n\n"
    "The main job: a comparison chosen so that fp16's failure is real on Fashion-MNIST.\n"
    "It prints every choice as the `mixprec compare` command that reproduces it.\n";

typedef struct {
    char name[32];
    mp_report_run run;
    float *loss, *scale, *layer_under;
    uint8_t *skipped;
    double grad_norm_last;
    char *warn_text[8];
    const char *warn_ptr[8];
    cJSON *summary;
} run_data;

static int split_csv_line(char *line, char **fields, int max) {
    int n = 0;
    for (char *p = line; n < max;) {
        fields[n++] = p;
        char *c = strchr(p, ',');
        if (!c) break;
        *c = 0;
        p = c + 1;
    }
    char *nl = n ? strchr(fields[n - 1], '\n') : NULL;
    if (nl) *nl = 0;
    return n;
}

/* Reads DIR/NAME.csv and DIR/NAME.json into d. */
static int load_run(const char *dir, run_data *d, char *err, size_t errlen) {
    char path[16384];
    snprintf(path, sizeof path, "%s/%s.csv", dir, d->name);
    FILE *f = fopen(path, "r");
    if (!f) return snprintf(err, errlen, "%s: cannot open", path), -1;
    char line[8192];
    char *fields[80];
    if (!fgets(line, sizeof line, f)) {
        fclose(f);
        return snprintf(err, errlen, "%s: empty log", path), -1;
    }
    const int nf = split_csv_line(line, fields, 80);
    const int nl = (nf - 8) / 2; /* underflow_fc*, then subnormal_fc* */
    long cap = 1024, n = 0;
    const size_t lw = (size_t)(nl > 0 ? nl : 1);
    d->loss = malloc(cap * sizeof(float)), d->scale = malloc(cap * sizeof(float));
    d->skipped = malloc((size_t)cap), d->layer_under = malloc((size_t)cap * lw * sizeof(float));
    while (d->loss && d->scale && d->skipped && d->layer_under && fgets(line, sizeof line, f)) {
        if (n == cap) {
            cap *= 2;
            float *l2 = realloc(d->loss, cap * sizeof(float));
            if (l2) d->loss = l2;
            float *s2 = realloc(d->scale, cap * sizeof(float));
            if (s2) d->scale = s2;
            uint8_t *k2 = realloc(d->skipped, (size_t)cap);
            if (k2) d->skipped = k2;
            float *u2 = realloc(d->layer_under, (size_t)cap * lw * sizeof(float));
            if (u2) d->layer_under = u2;
            if (!l2 || !s2 || !k2 || !u2) break;
        }
        if (split_csv_line(line, fields, 80) != nf) continue;
        d->loss[n] = strtof(fields[1], NULL), d->scale[n] = strtof(fields[2], NULL);
        d->skipped[n] = (uint8_t)atoi(fields[3]);
        for (int l = 0; l < nl; l++) d->layer_under[(size_t)n * (size_t)nl + (size_t)l] = strtof(fields[8 + l], NULL);
        n++;
    }
    fclose(f);
    if (!d->loss || !d->scale || !d->skipped || !d->layer_under) return snprintf(err, errlen, "out of memory"), -1;
    snprintf(path, sizeof path, "%s/%s.json", dir, d->name);
    f = fopen(path, "r");
    if (!f) return snprintf(err, errlen, "%s: cannot open", path), -1;
    fseek(f, 0, SEEK_END);
    const long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = sz >= 0 ? malloc((size_t)sz + 1) : NULL;
    if (!text) {
        fclose(f);
        return snprintf(err, errlen, "%s: cannot read", path), -1;
    }
    const size_t got = fread(text, 1, (size_t)sz, f);
    text[got] = 0;
    fclose(f);
    d->summary = cJSON_Parse(text);
    free(text);
    if (!d->summary) return snprintf(err, errlen, "%s: not valid JSON", path), -1;
    mp_report_run *r = &d->run;
    memset(r, 0, sizeof *r);
    r->name = d->name;
    const cJSON *j = d->summary;
#define NUM(k) cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(j, k))
    r->format = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "compute_format"));
    r->nsteps = n, r->loss = d->loss, r->scale = d->scale, r->skipped = d->skipped;
    r->nlayers = nl, r->layer_underflow = d->layer_under;
    r->test_accuracy = NUM("test_accuracy"), r->test_loss = NUM("test_loss"), r->last_loss = NUM("last_train_loss");
    r->underflow = NUM("underflow_fraction"), r->frozen = NUM("frozen_fraction"), r->ms_per_step = NUM("ms_per_step");
    r->memory_mib = NUM("peak_memory_mib"), r->final_scale = NUM("final_scale"), r->skipped_total = (long)NUM("skipped");
#undef NUM
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(j, "histograms");
    const cJSON *snaps = cJSON_GetObjectItemCaseSensitive(h, "snapshots");
    const int ns = cJSON_GetArraySize(snaps);
    if (ns > 0) {
        const cJSON *last = cJSON_GetArrayItem(snaps, ns - 1);
        const cJSON *counts = cJSON_GetObjectItemCaseSensitive(last, "counts");
        r->has_hist = cJSON_GetArraySize(counts) == MP_REPORT_HIST_BINS;
        r->hist_lo = (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(h, "log2_lo"));
        r->hist_zeros = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(last, "zeros"));
        r->hist_scale = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(last, "scale"));
        for (int b = 0; r->has_hist && b < MP_REPORT_HIST_BINS; b++)
            r->hist[b] = cJSON_GetNumberValue(cJSON_GetArrayItem(counts, b));
    }
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(j, "warnings");
    for (int k = 0; k < cJSON_GetArraySize(w) && k < 8; k++) {
        d->warn_ptr[k] = cJSON_GetStringValue(cJSON_GetArrayItem(w, k));
        r->nwarnings++;
    }
    r->warnings = d->warn_ptr;
    return 0;
}

static void free_run(run_data *d) {
    free(d->loss), free(d->scale), free(d->skipped), free(d->layer_under);
    cJSON_Delete(d->summary);
}

static double mean_layer(const mp_report_run *r, int l) {
    double m = 0;
    for (long s = 0; s < r->nsteps; s++) m += r->layer_underflow[(size_t)s * (size_t)r->nlayers + (size_t)l];
    return r->nsteps ? m / (double)r->nsteps : 0;
}

static const mp_report_run *find(const run_data *runs, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(runs[i].name, name) == 0) return &runs[i].run;
    return NULL;
}

/* The plain-language reading, from the numbers. */
static void reading(char *out, size_t cap, const run_data *runs, int n, const char *model) {
    const mp_report_run *f32 = find(runs, n, "fp32"), *f16 = find(runs, n, "fp16"), *dyn = find(runs, n, "fp16-dynamic");
    const mp_report_run *bf = find(runs, n, "bf16");
    size_t k = 0;
#define ADD(...) k += (size_t)snprintf(out + k, k < cap ? cap - k : 0, __VA_ARGS__)
    ADD("Every mode trained the same network (%s) from the same initial weights on the same batches. Gradients are "
        "computed in the mode's format; fp16 can only hold magnitudes between 6.0e-8 (its smallest subnormal) and "
        "65504, and anything smaller than half of 6.0e-8 is stored as exactly zero: that gradient is lost.\n\n",
        model);
    if (f16) {
        int worst = 0;
        for (int l = 1; l < f16->nlayers; l++) worst = mean_layer(f16, l) > mean_layer(f16, worst) ? l : worst;
        ADD("fp16 without loss scaling: %.2f%% of the gradient values it stored became zero (%.2f%% in layer fc%d), and "
            "%.1f%% of the weights did not change at all over the last steps measured. ",
            100 * f16->underflow, 100 * mean_layer(f16, worst), worst, 100 * f16->frozen);
        if (f32) {
            const double d = 100 * (f16->test_accuracy - f32->test_accuracy);
            if (d < -0.5)
                ADD("It ended at %.2f%% test accuracy, %.2f points below fp32 (%.2f%%): the lost gradients cost "
                    "accuracy.\n\n", 100 * f16->test_accuracy, -d, 100 * f32->test_accuracy);
            else
                ADD("It still ended at %.2f%% test accuracy against fp32's %.2f%%: in this run the values lost were "
                    "too few, or too small, to change the result, but they are lost all the same and the share grows as "
                    "gradients shrink (deeper networks, larger batches, later in training).\n\n",
                    100 * f16->test_accuracy, 100 * f32->test_accuracy);
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
        if (f32)
            ADD("; test accuracy %.2f%%, %.2f points %s fp32's %.2f%%", 100 * dyn->test_accuracy,
                fabs(100 * (dyn->test_accuracy - f32->test_accuracy)),
                dyn->test_accuracy >= f32->test_accuracy ? "above" : "below", 100 * f32->test_accuracy);
        ADD(".\n\n");
    }
    if (bf) {
        ADD("bf16 keeps fp32's 8-bit exponent, so its range reaches down to 1e-38 like fp32: %.4f%% of its gradient "
            "values became zero without any loss scaling. It has only 8 significant bits, which rounding to nearest "
            "and fp32 master weights absorb: test accuracy %.2f%%",
            100 * bf->underflow, 100 * bf->test_accuracy);
        if (f32)
            ADD(", %.2f points %s fp32's", fabs(100 * (bf->test_accuracy - f32->test_accuracy)),
                bf->test_accuracy >= f32->test_accuracy ? "above" : "below");
        ADD(".\n\n");
    }
    if (f32) {
        double spread = 0;
        for (int i = 0; i < n; i++) spread = fmax(spread, fabs(runs[i].run.test_accuracy - f32->test_accuracy));
        if (spread > 0.005)
            ADD("The modes round differently, so after the first step each follows its own path through training; "
                "differences of up to %.2f points between them in a run this short are that path, not the format: a "
                "change in the last bit of one rounding moves a run's final accuracy by about as much.\n\n",
                100 * spread);
    }
    if (f32 && bf && bf->ms_per_step > 0)
        ADD("Speed: a bf16 step took %.1f ms against %.1f ms in fp32 (%.2fx), because the matrix multiplies read bf16 "
            "and use the CPU's bf16 dot-product instruction.", bf->ms_per_step, f32->ms_per_step,
            f32->ms_per_step / bf->ms_per_step);
#undef ADD
}

static int run_child(const char *self, char **args, const char *outfile) {
    const pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        const int fd = open(outfile, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            close(fd);
        }
        execv(self, args);
        _exit(127);
    }
    int status;
    if (waitpid(pid, &status, 0) < 0) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static int compare(int argc, char **argv, const char *precisions, const char *out, const char *cmdline) {
    char self[4096];
    const ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0) return fprintf(stderr, "mixprec compare: cannot find its own executable\n"), 1;
    self[sl] = 0;
    if (mkdir(out, 0755) != 0 && errno != EEXIST)
        return fprintf(stderr, "mixprec compare: %s: cannot create (%s)\n", out, strerror(errno)), 1;
    char list[512];
    snprintf(list, sizeof list, "%s", precisions);
    run_data runs[8];
    int n = 0;
    char model[256] = "mlp:784-1024-1024-10";
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--model") && i + 1 < argc) snprintf(model, sizeof model, "%s", argv[i + 1]);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        if (n == 8) return cli_usage_error("compare", "at most 8 precisions");
        if (strpbrk(tok, "/\\") || tok[0] == '.' || strlen(tok) >= sizeof runs[n].name)
            return cli_usage_error("compare", "'%s' is not a precision mode", tok);
        memset(&runs[n], 0, sizeof runs[n]);
        snprintf(runs[n].name, sizeof runs[n].name, "%s", tok);
        n++;
    }
    if (n == 0) return cli_usage_error("compare", "--precisions is empty");
    int rc = 0;
    for (int r = 0; r < n; r++) {
        char csv[16384], js[16384], txt[16384];
        snprintf(csv, sizeof csv, "%s/%s.csv", out, runs[r].name);
        snprintf(js, sizeof js, "%s/%s.json", out, runs[r].name);
        snprintf(txt, sizeof txt, "%s/%s.txt", out, runs[r].name);
        char **args = calloc((size_t)argc + 16, sizeof *args);
        int k = 0;
        args[k++] = self, args[k++] = (char *)"train";
        int has_hist = 0;
        for (int i = 1; i < argc; i++) {
            args[k++] = argv[i];
            has_hist |= !strcmp(argv[i], "--hist-every");
        }
        args[k++] = (char *)"--precision", args[k++] = runs[r].name;
        args[k++] = (char *)"--log", args[k++] = csv, args[k++] = (char *)"--summary", args[k++] = js;
        if (!has_hist) args[k++] = (char *)"--hist-every", args[k++] = (char *)"10";
        printf("  %-14s ...", runs[r].name);
        fflush(stdout);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        const int st = run_child(self, args, txt);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        free(args);
        printf(" %s in %.1f s (log: %s)\n", st == 0 ? "done" : st == 1 ? "stopped early" : "failed",
               (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec), txt);
        if (st == 2) return fprintf(stderr, "mixprec compare: %s: bad training options (see %s)\n", runs[r].name, txt), 2;
        if (st != 0 && st != 1) {
            fprintf(stderr, "mixprec compare: %s: training failed (see %s)\n", runs[r].name, txt);
            rc = 1;
            n = r;
            break;
        }
    }
    char err[17000];
    for (int r = 0; r < n; r++)
        if (load_run(out, &runs[r], err, sizeof err) != 0) {
            fprintf(stderr, "mixprec compare: %s\n", err);
            for (int q = 0; q <= r; q++) free_run(&runs[q]);
            return 1;
        }
    const mp_report_run *f32 = find(runs, n, "fp32");
    static char acc_warn[8][200];
    for (int r = 0; f32 && r < n; r++) {
        mp_report_run *u = &runs[r].run;
        if (u == f32 || u->test_accuracy >= f32->test_accuracy - 0.005 || u->nwarnings >= 8) continue;
        snprintf(acc_warn[r], sizeof acc_warn[r], "test accuracy %.2f%% is %.2f points below the fp32 run's %.2f%%",
                 100 * u->test_accuracy, 100 * (f32->test_accuracy - u->test_accuracy), 100 * f32->test_accuracy);
        runs[r].warn_ptr[u->nwarnings++] = acc_warn[r];
        u->warnings = runs[r].warn_ptr;
    }
    printf("\n%-14s %10s %9s %8s %10s %11s %8s %9s %8s %9s\n", "mode", "train loss", "test acc", "skipped", "final scale",
           "underflow", "frozen", "ms/step", "memory", "speed-up");
    for (int r = 0; r < n; r++) {
        const mp_report_run *u = &runs[r].run;
        char sp[16] = "-";
        if (f32 && u->ms_per_step > 0) snprintf(sp, sizeof sp, "%.2fx", f32->ms_per_step / u->ms_per_step);
        printf("%-14s %10.4f %8.2f%% %8ld %10g %10.4f%% %7.2f%% %9.1f %5.0f MiB %9s\n", u->name, u->last_loss,
               100 * u->test_accuracy, u->skipped_total, u->final_scale, 100 * u->underflow, 100 * u->frozen,
               u->ms_per_step, u->memory_mib, sp);
    }
    for (int r = 0; r < n; r++)
        for (int k = 0; k < runs[r].run.nwarnings; k++) printf("warning: %s: %s\n", runs[r].name, runs[r].run.warnings[k]);
    static char text[8192];
    reading(text, sizeof text, runs, n, model);
    printf("\n%s\n", text);
    mp_report_run rr[8];
    for (int r = 0; r < n; r++) rr[r] = runs[r].run;
    const mp_format_info *h = mp_format(MP_F16);
    mp_report rep = {"mixprec: the same network in several precisions", cmdline, text, h->min_subnormal,
                     h->min_normal, h->max, rr, n};
    char html[16384];
    snprintf(html, sizeof html, "%s/report.html", out);
    if (mp_report_write(html, &rep) != MP_OK) {
        fprintf(stderr, "mixprec compare: %s\n", mp_last_error());
        rc = 1;
    } else {
        printf("\nreport: %s\n", html);
    }
    /* summary.json: the per-run summaries side by side */
    cJSON *all = cJSON_CreateObject();
    cJSON_AddStringToObject(all, "command", cmdline);
    cJSON *arr = cJSON_AddArrayToObject(all, "runs");
    for (int r = 0; r < n; r++) cJSON_AddItemReferenceToArray(arr, runs[r].summary);
    char *jt = cJSON_Print(all);
    char sp[16384];
    snprintf(sp, sizeof sp, "%s/summary.json", out);
    FILE *f = fopen(sp, "w");
    if (!f || fputs(jt, f) < 0) rc = 1;
    if (f) fclose(f);
    free(jt);
    cJSON_Delete(all);
    for (int r = 0; r < n; r++) free_run(&runs[r]);
    return rc;
}

static int run_compare(int argc, char **argv) {
    const char *precisions = "fp32,fp16,fp16-dynamic,bf16", *out = "mixprec-compare";
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    int nr = 0;
    rest[nr++] = argv[0];
    char cmdline[4096] = "mixprec compare";
    size_t cl = strlen(cmdline);
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(&cmd_compare, argv[i])) return free(rest), 0;
        if (!strcmp(argv[i], "--precisions") || !strcmp(argv[i], "--out")) {
            const char *v = cli_value("compare", argc, argv, &i);
            if (!v) return free(rest), CLI_USAGE;
            if (!strcmp(argv[i - 1], "--out")) out = v;
            else precisions = v;
            cl += (size_t)snprintf(cmdline + cl, cl < sizeof cmdline ? sizeof cmdline - cl : 0, " %s %s", argv[i - 1], v);
            continue;
        }
        if (!strcmp(argv[i], "--precision") || !strcmp(argv[i], "--log") || !strcmp(argv[i], "--summary"))
            return free(rest), cli_usage_error("compare", "%s is set by compare itself", argv[i]);
        rest[nr++] = argv[i];
        cl += (size_t)snprintf(cmdline + cl, cl < sizeof cmdline ? sizeof cmdline - cl : 0, " %s", argv[i]);
    }
    const int rc = compare(nr, rest, precisions, out, cmdline);
    free(rest);
    return rc;
}

const cli_command cmd_compare = {"compare", "train in several precisions side by side; summary and HTML report", usage,
                                 run_compare};

/* The demo's configuration: a deep MLP with PyTorch's default initialisation
 * and large batches: per-example gradients are divided by the batch size and
 * shrink through six ReLU layers, so in fp16 many fall below 6e-8. */
static char *const demo_args[] = {"compare", "--model", "mlp:784-256-256-256-256-256-256-10", "--optimizer", "adamw",
                                  "--lr", "2e-3", "--weight-decay", "0", "--batch", "2048", "--epochs", "20",
                                  "--seed", "1", NULL};

static int run_demo(int argc, char **argv) {
    const char *out = "mixprec-demo";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return fputs(demo_usage, stdout), 0;
        if (!strcmp(argv[i], "--out")) {
            const char *v = cli_value("demo", argc, argv, &i);
            if (!v) return CLI_USAGE;
            out = v;
        } else {
            return cli_usage_error("demo", "unknown option '%s'", argv[i]);
        }
    }
    char *args[40];
    int n = 0;
    for (; demo_args[n]; n++) args[n] = demo_args[n];
    args[n++] = (char *)"--out";
    args[n++] = (char *)out;
    args[n] = NULL;
    printf("mixprec demo: the same deep MLP trained in fp32, fp16 without loss scaling, fp16 with dynamic loss scaling\n"
           "and bf16, on Fashion-MNIST. Reproduce with:\n  mixprec");
    for (int i = 0; i < n; i++) printf(" %s", args[i]);
    printf("\n\n");
    return run_compare(n, args);
}

const cli_command cmd_demo = {"demo", "the main job: fp16's gradient underflow on Fashion-MNIST, and its fixes",
                              demo_usage, run_demo};
