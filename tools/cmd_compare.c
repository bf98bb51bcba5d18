/* cmd_compare.c - `mixprec compare` and `mixprec demo`: the same network trained
 * in several precision modes: the options into mp_compare (mixprec/compare.h). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>

#include "run.h"

#define DIGITS_(n) #n
#define DIGITS(n) DIGITS_(n) /* a number macro as its digits */

static const char usage_head[] =
    "usage: mixprec compare [--precisions LIST] [--out DIR] [train options]\n\n"
    "Trains the same network with the same seed, data and initial weights once per\n"
    "precision mode (default fp32,fp16,fp16-dynamic,bf16), prints a summary table\n"
    "and writes DIR/report.html (one self-contained page: training and evaluation\n"
    "loss curves, the loss scale with every skipped step, gradient underflow by\n"
    "tensor and over time with a heat map of tensors x steps per mode, where the\n"
    "gradients lie against fp16's range, every tensor's figures per mode, what\n"
    "each protection buys against fp16-dynamic, a text sample from each final\n"
    "GPT, for fp8/fp4 recipes the shares of values saturated and flushed to zero\n"
    "per step and a table of their quantized tensors, and a reading of what\n"
    "happened) with the logs behind it: DIR/MODE.csv\n"
    "(per step), DIR/MODE.json (per run), DIR/MODE.txt (the run's output) and\n"
    "DIR/summary.json (docs/LOGS.md).\n"
    "The modes run one after the other in this process; peak memory is measured\n"
    "per mode (the kernel's high-water mark, reset before each).\n\n"
    "  --precisions LIST   comma-separated modes, at most " DIGITS(
        MP_COMPARE_MAX) " (see below)\n"
                        "  --out DIR           output directory (mixprec-compare)\n"
                        "  --checkpoints       also write each mode's checkpoint, DIR/MODE.ckpt (as --save)\n\n"
                        "The training options (all but --precision, --log, --summary and --save, which\n"
                        "compare sets):\n";

static const char demo_usage[] = "usage: mixprec demo [--mlp] [--out DIR]\n\n"
                                 "The main job: what each protection of mixed precision buys. A small GPT\n"
                                 "trained on the fortunes corpus in fp32, fp16-naive (everything cast to fp16),\n"
                                 "fp16 (fp32 master weights and reductions, no loss scaling), fp16-dynamic (the\n"
                                 "AMP recipe), fp16-dynamic without master weights, fp16-dynamic with fp16\n"
                                 "reductions, and bf16; about 2 minutes on 2 cores. --mlp runs the earlier demo\n"
                                 "instead: a deep MLP on Fashion-MNIST where fp16's gradient underflow costs\n"
                                 "accuracy. It prints the `mixprec compare` command that reproduces it.\n";

static int run_compare(int argc, char **argv);

const cli_command cmd_compare = {"compare", "train in several precisions side by side; summary and HTML report", NULL,
                                 run_compare};

static int run_compare(int argc, char **argv) {
    mp_compare_spec c;
    mp_compare_defaults(&c);
    char cmdline[4096] = "mixprec compare";
    size_t cl = strlen(cmdline);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *name = strncmp(a, "--", 2) == 0 ? a + 2 : "";
        if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            return fputs(usage_head, stdout), fputs(mp_run_options_help(), stdout), 0;
        const int takes = !strcmp(name, "precisions") || !strcmp(name, "out") ? 1
                          : !strcmp(name, "checkpoints")                      ? 0
                                                                              : mp_run_option_takes_value(name);
        if (takes < 0) return cli_usage_error("compare", "unknown option '%s'", a);
        if (cli_given_before(argc, argv, i)) return cli_usage_error("compare", "%s is given twice", a);
        const char *v = takes ? cli_value("compare", argc, argv, &i) : NULL;
        if (takes && !v) return CLI_USAGE;
        if (mp_compare_option(&c, name, v) != MP_OK) return cli_usage_error("compare", "%s", mp_last_error());
        cl += (size_t)snprintf(cmdline + cl, cl < sizeof cmdline ? sizeof cmdline - cl : 0, " %s%s%s", a, v ? " " : "",
                               v ? v : "");
    }
    run_ranks(&c.run);
    c.command = cmdline;
    const mp_run_io io = run_io("compare", stdout);
    mp_compare_result r;
    const mp_status st = mp_compare(&c, &io, &r);
    const int rc = st == MP_OK ? 0 : r.invalid ? CLI_USAGE : 1;
    mp_compare_result_free(&r);
    return rc;
}

/* The demo's configuration: a deep MLP with PyTorch's default initialisation
 * and large batches: per-example gradients are divided by the batch size and
 * shrink through six ReLU layers, so in fp16 many fall below 6e-8. */
/* The two demos as `mixprec compare` arguments. */
static char *const demo_gpt_args[] = {
    "compare",
    "--model",
    "gpt:2-4-64-64",
    "--batch",
    "16",
    "--steps",
    "400",
    "--lr",
    "6e-3",
    "--lr-schedule",
    "cosine",
    "--warmup",
    "20",
    "--weight-decay",
    "0.1",
    "--betas",
    "0.9,0.95",
    "--clip",
    "1",
    "--seed",
    "1",
    "--eval-every",
    "100",
    "--precisions",
    "fp32,fp16-naive,fp16,fp16-dynamic,fp16-dynamic+master-weights=none,fp16-dynamic+reductions=half,bf16",
    NULL};
static char *const demo_mlp_args[] = {"compare",     "--model",        "mlp:784-256-256-256-256-256-256-10",
                                      "--optimizer", "adamw",          "--lr",
                                      "2e-3",        "--weight-decay", "0",
                                      "--batch",     "2048",           "--epochs",
                                      "20",          "--seed",         "1",
                                      NULL};

static int run_demo(int argc, char **argv) {
    const char *out = "mixprec-demo";
    int mlp = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return fputs(demo_usage, stdout), 0;
        if (!strcmp(argv[i], "--mlp")) {
            mlp = 1;
        } else if (!strcmp(argv[i], "--out")) {
            const char *v = cli_value("demo", argc, argv, &i);
            if (!v) return CLI_USAGE;
            out = v;
        } else {
            return cli_usage_error("demo", "unknown option '%s'", argv[i]);
        }
    }
    char *const *demo = mlp ? demo_mlp_args : demo_gpt_args;
    char *args[48];
    int n = 0;
    for (; demo[n]; n++) args[n] = demo[n];
    args[n++] = (char *)"--out";
    args[n++] = (char *)out;
    args[n] = NULL;
    if (mlp)
        printf(
            "mixprec demo --mlp: the same deep MLP trained in fp32, fp16 without loss scaling, fp16 with dynamic loss\n"
            "scaling and bf16, on Fashion-MNIST. Reproduce with:\n  mixprec");
    else
        printf("mixprec demo: a GPT trained on text with each protection of mixed precision removed in turn (fp32\n"
               "master weights, fp32 reductions, loss scaling), with all three removed at once (fp16-naive), and in\n"
               "bf16. Reproduce with:\n  mixprec");
    for (int i = 0; i < n; i++) printf(" %s", args[i]);
    printf("\n\n");
    return run_compare(n, args);
}

const cli_command cmd_demo = {"demo", "the main job: what each protection of mixed precision buys, on a GPT",
                              demo_usage, run_demo};
