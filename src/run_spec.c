/* run_spec.c - a run's spec: its defaults, its options by their CLI names
 * (one table: the parser and the help), and the check of the whole (run.h). */
#define _XOPEN_SOURCE 700 /* realpath */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "models.h"
#include "mixprec/mx.h"
#include "mixprec/run.h"
#include "mixprec/text.h"

void mp_run_defaults(mp_run_spec *s) {
    if (!s) return;
    memset(s, 0, sizeof *s);
    s->model = "mlp:784-1024-1024-10", s->precision = "fp32";
    s->master_weights = s->optim_state = s->reductions = s->mx_rule = -1;
    s->scaler = mp_scaler_defaults();
    s->optimizer = MP_RUN_ADAMW, s->lr = 1e-3, s->min_lr = -1, s->weight_decay = -1;
    s->beta1 = 0.9, s->beta2 = 0.999;
    s->accum = 1, s->seed = 1, s->shuffle = 1, s->check_every = 100;
    s->save_dtype = MP_F32, s->allreduce = MP_F32;
}

/* ---- the options ---- */

typedef enum {
    K_STR,    /* const char *: the value itself */
    K_FLAG,   /* int: set to lo, takes no value */
    K_REAL,   /* double: a number in [lo, hi], read as a float (as the CLI always has) */
    K_LONG,   /* long in [lo, hi] */
    K_INT,    /* int in [lo, hi] */
    K_F32,    /* float: any number */
    K_COUNT,  /* int: a whole number in [1, 2^30] */
    K_CHOICE, /* int: the value of one of the choices */
    K_BETAS,  /* beta1, beta2: "B1,B2" */
    K_GONE    /* an option that no longer exists: the error says what replaced it */
} kind;

typedef struct {
    const char *name;
    int value;
} choice;

typedef struct {
    const char *name;    /* without the dashes */
    const char *metavar; /* NULL: none (a flag), or the value's name in the help */
    kind k;
    size_t off; /* of the field in mp_run_spec (K_BETAS: beta1; K_GONE: unused) */
    double lo, hi;
    const choice *choices; /* K_CHOICE: NULL-terminated */
    const char *section;   /* the help's heading, when it starts one */
    const char *help;      /* lines after the first indented by the help's column */
} option;

#define F(field) offsetof(mp_run_spec, field)
#define SCALER(field) (offsetof(mp_run_spec, scaler) + offsetof(mp_scaler_config, field))

static const choice acts[] = {{"relu", MP_ACT_RELU}, {"gelu", MP_ACT_GELU}, {NULL, 0}};
static const choice gelus[] = {{"tanh", MP_GELU_TANH}, {"erf", MP_GELU_ERF}, {NULL, 0}};
static const choice optimizers[] = {{"sgd", MP_RUN_SGD}, {"adamw", MP_RUN_ADAMW}, {NULL, 0}};
static const choice schedules[] = {{"constant", MP_LR_CONSTANT}, {"cosine", MP_LR_COSINE}, {NULL, 0}};
static const choice masters[] = {{"fp32", MP_MASTER_FP32},
                                 {"none", MP_MASTER_NONE},
                                 {"kahan", MP_MASTER_KAHAN},
                                 {"sr", MP_MASTER_PURE_BF16},
                                 {NULL, 0}};
static const choice states[] = {{"fp32", MP_STATE_FP32}, {"bf16", MP_STATE_BF16}, {"fp8", MP_STATE_FP8},
                                {"8bit", MP_STATE_8BIT}, {"4bit", MP_STATE_4BIT}, {NULL, 0}};
static const choice reductions[] = {{"fp32", MP_REDUCE_FP32}, {"half", MP_REDUCE_HALF}, {NULL, 0}};
static const choice mx_rules[] = {{"floor", MP_MX_FLOOR}, {"rceil", MP_MX_RCEIL}, {NULL, 0}};
static const choice save_dtypes[] = {{"fp32", MP_F32}, {"fp16", MP_F16}, {"bf16", MP_BF16}, {NULL, 0}};
static const choice wires[] = {{"fp32", MP_F32}, {"bf16", MP_BF16}, {"fp16", MP_F16}, {NULL, 0}};

static const option options[] = {
    {"model", "SPEC", K_STR, F(model), 0, 0, NULL, "model and data",
     "mlp:784-1024-1024-10 (widths; input 784, output >= 10) or\n"
     "gpt:L-H-C-T (layers, heads, width, context), e.g. gpt:4-4-128-128"},
    {"act", "relu|gelu", K_CHOICE, F(act), 0, 0, acts, NULL, "MLP activation (relu)"},
    {"layernorm", NULL, K_FLAG, F(layernorm), 1, 0, NULL, NULL, "MLP: layer norm after each hidden layer"},
    {"gelu", "tanh|erf", K_CHOICE, F(gelu), 0, 0, gelus, NULL,
     "GPT: GELU's tanh approximation (GPT-2, llm.c; default) or erf (nanoGPT)"},
    {"data", "DIR", K_STR, F(data), 0, 0, NULL, NULL,
     "MLP: the four Fashion-MNIST files (.gz or plain)\n"
     "text:PATH[,PATH...]: GPT: text files or directories (default: the\n"
     "fortunes corpus, " MP_TEXT_DEFAULT_CORPUS ")"},
    {"precision", "MODE", K_STR, F(precision), 0, 0, NULL, "precision",
     "one of the modes below (fp32), with optional switches as suffixes:\n"
     "MODE+master-weights=none+reductions=half+mx-rule=floor (docs/TRAINING.md);\n"
     "then per-layer assignments +RECIPE=PATTERN: the Linear layers whose\n"
     "names match run in RECIPE (fp8-delayed, fp8-current, mxfp8, nvfp4, or\n"
     "bf16: no recipe), e.g. nvfp4+bf16=transformer.h.3.*+bf16=lm_head or\n"
     "bf16+mxfp8=transformer.h.0-2.mlp.c_fc; '*' any characters, N-M a range"},
    {"layer-precision", "FILE", K_STR, F(layer_precision), 0, 0, NULL, NULL,
     "per-layer assignments, one 'pattern = recipe' per line ('#'\n"
     "comments), applied after the mode's own; the label ends in +layers=FILE"},
    {"master-weights", "fp32|none|kahan|sr", K_CHOICE, F(master_weights), 0, 0, masters, NULL,
     "fp32: fp32 master weights (the mode's own setting); none:\n"
     "weights (and by default the optimizer state) only in the compute format\n"
     "(fp16/bf16), each update computed in fp32 and rounded to nearest (updates\n"
     "under half an ulp are lost), as torch.optim on model.half(); kahan: the\n"
     "weights in the compute format with a compensation buffer in the same\n"
     "format (torch-optimi's Kahan summation); sr: bf16 weights, each update\n"
     "rounded stochastically (bf16+master-weights=sr is bf16-pure)"},
    {"optim-state", "fp32|bf16|fp8|8bit|4bit", K_CHOICE, F(optim_state), 0, 0, states, NULL,
     "how the optimizer state (AdamW's moments, SGD's momentum\n"
     "buffer) is kept: fp32 (the default; the compute format under\n"
     "master-weights none), bf16, or blockwise as torchao's AdamWFp8 (e4m3,\n"
     "blocks of 256), AdamW8bit (dynamic map, 256) and AdamW4bit (128); tensors\n"
     "under 4096 values or not whole blocks keep fp32 (or the compute format)"},
    {"reductions", "fp32|half", K_CHOICE, F(reductions), 0, 0, reductions, NULL,
     "fp32: softmax, layer-norm statistics and their backward sums, the\n"
     "loss's log-sum-exp, bias-gradient column sums and (with --clip) the\n"
     "gradient norm use fp32 accumulators; half: a naive loop in the compute\n"
     "format, every partial result rounded (the mode's own setting). Matrix\n"
     "multiplies accumulate in fp32 in every mode (as tensor cores do)"},
    {"mx-rule", "floor|rceil", K_CHOICE, F(mx_rule), 0, 0, mx_rules, NULL,
     "mxfp8's block-scale rule: rceil (default, as Transformer\n"
     "Engine and cuBLAS) or floor (OCP MX v1.0, torchao's default)"},
    {"init-scale", "S", K_F32, SCALER(init_scale), 0, 0, NULL, "loss scaling", "initial loss scale (65536)"},
    {"growth-interval", "N", K_COUNT, SCALER(growth_interval), 0, 0, NULL, NULL,
     "clean steps before the scale grows (2000)"},
    {"growth-factor", "F", K_F32, SCALER(growth_factor), 0, 0, NULL, NULL, "growth multiplier, > 1 (2)"},
    {"backoff-factor", "F", K_F32, SCALER(backoff_factor), 0, 0, NULL, NULL, "multiplier on overflow, in (0, 1) (0.5)"},
    {"hysteresis", "N", K_COUNT, SCALER(hysteresis), 0, 0, NULL, NULL,
     "overflows tolerated before backing off (1 = PyTorch)"},
    {"min-scale", "S", K_F32, SCALER(min_scale), 0, 0, NULL, NULL, "floor for the scale (0 = none)"},
    {"max-scale", "S", K_F32, SCALER(max_scale), 0, 0, NULL, NULL, "ceiling for the scale (0 = none)"},
    {"optimizer", "sgd|adamw", K_CHOICE, F(optimizer), 0, 0, optimizers, "optimization", "(adamw)"},
    {"lr", "LR", K_REAL, F(lr), 0, 1e6, NULL, NULL, "(peak) learning rate (1e-3)"},
    {"lr-schedule", "constant|cosine", K_CHOICE, F(schedule), 0, 0, schedules, NULL,
     "(constant); cosine decays to --min-lr at the last step"},
    {"warmup", "N", K_LONG, F(warmup), 0, 100000000, NULL, NULL,
     "linear warmup steps (0), as nanoGPT: lr (step+1) / (N+1)"},
    {"min-lr", "LR", K_REAL, F(min_lr), 0, 1e6, NULL, NULL, "the end of the cosine schedule (lr / 10)"},
    {"betas", "B1,B2", K_BETAS, F(beta1), 0, 0, NULL, NULL, "AdamW betas (0.9,0.999)"},
    {"momentum", "M", K_REAL, F(momentum), 0, 1e6, NULL, NULL, "SGD momentum (0)"},
    {"weight-decay", "WD", K_REAL, F(weight_decay), 0, 1e6, NULL, NULL,
     "(0.01 for adamw, 0 for sgd); the GPT decays only its\n"
     "2-D weights (not biases or layer norms), as nanoGPT"},
    {"batch", "B", K_LONG, F(batch), 1, 60000, NULL, NULL, "micro-batch: examples (256) or sequences (16)"},
    {"accum", "N", K_LONG, F(accum), 1, 60000, NULL, NULL, "micro-batches per step (1)"},
    {"epochs", "E", K_LONG, F(epochs), 1, 100000, NULL, NULL,
     "length (1 epoch): an epoch is 60000 / (B N) steps for the\n"
     "MLP, training bytes / (B T N) for the GPT"},
    {"steps", "N", K_LONG, F(steps), 1, 100000000, NULL, NULL, "length in steps (excludes --epochs)"},
    {"clip", "NORM", K_REAL, F(clip), 1e-30, 1e30, NULL, NULL, "clip the global gradient norm (unscaled gradients)"},
    {"seed", "S", K_LONG, F(seed), 0, 2147483647L, NULL, NULL, "initialisation and shuffling (1)"},
    {"no-shuffle", NULL, K_FLAG, F(shuffle), 0, 0, NULL, NULL,
     "MLP: batch k is examples kB .. kB+B-1 in file order; GPT: row b\n"
     "of micro-batch s is the window at ((sB + b) T) mod (N_train - T)"},
    {"threads", "N", K_INT, F(threads), 1, MP_MAX_THREADS, NULL, NULL, "threads for the kernels"},
    {"init", "FILE", K_STR, F(init), 0, 0, NULL, "files", "initial weights (safetensors, PyTorch's names)"},
    {"save", "FILE", K_STR, F(save), 0, 0, NULL, NULL,
     "checkpoint at the end: weights, optimizer state, scaler, step\n"
     "(a run that stops early or ends NaN/inf writes FILE.rejected\n"
     "instead, never over FILE, and exits 1)"},
    {"save-dtype", "fp32|fp16|bf16", K_CHOICE, F(save_dtype), 0, 0, save_dtypes, NULL,
     "the weights' dtype in --save (fp32; a half file\n"
     "is smaller but does not resume bit-identically)"},
    {"resume", "FILE", K_STR, F(resume), 0, 0, NULL, NULL, "continue a checkpoint (bit-identical to not stopping)"},
    {"log", "FILE", K_STR, F(log), 0, 0, NULL, NULL, "CSV, one row per step (docs/LOGS.md)"},
    {"eval-every", "N", K_LONG, F(eval_every), 0, 100000000, NULL, NULL,
     "evaluation every N steps (0: only at the end)"},
    {"eval-windows", "K", K_LONG, F(eval_windows), 0, 100000000, NULL, NULL,
     "GPT: evaluate on the first K validation windows (0: all)"},
    {"summary", "FILE", K_STR, F(summary), 0, 0, NULL, "diagnostics",
     "JSON: results, per-tensor underflow, skipped steps, lost and\n"
     "dead weight gradients, lost updates, gradient histograms,\n"
     "warnings (docs/LOGS.md)"},
    {"hist-every", "N", K_LONG, F(hist_every), 0, 100000000, NULL, NULL,
     "MLP: log2 histogram of the weight gradients every N steps (0: off)"},
    {"dump-grads", "FILE", K_STR, F(dump_grads), 0, 0, NULL, NULL,
     "the last step's fp32 weight gradients (unscaled) as safetensors\n"
     "(NAME.grad), for mixprec underflow --from FILE"},
    {"probe", "RECIPE", K_STR, F(probe), 0, 0, NULL, NULL,
     "GPT in bf16: what RECIPE (fp8-delayed, fp8-current, mxfp8, nvfp4)\n"
     "would do to each Linear layer's GEMMs, measured on every training\n"
     "batch without changing the training: the relative error of each\n"
     "operand and of the product per layer and direction (forward, input\n"
     "and weight gradient), printed and in the summary (mixprec advise)"},
    {"check-every", "K", K_LONG, F(check_every), 0, 100000000, NULL,
     "data parallelism (mpirun -np N mixprec train ...: N ranks, each on its contiguous share\n"
     "B / N of every micro-batch, the gradients summed before the unscale; rank 0 writes)",
     "compare the ranks' weights, optimizer and scaler state (a CRC-32)\n"
     "every K steps (100; 0: only at the end); a difference stops the run"},
    {"allreduce", "fp32|bf16|fp16", K_CHOICE, F(allreduce), 0, 0, wires, NULL,
     "the gradients' format in the all-reduce (fp32); bf16 and fp16\n"
     "send half the bytes: each combine widens, adds in fp32 and rounds\n"
     "once; an overflow on the wire is an overflow (with loss scaling:\n"
     "the step is skipped) and is reported (docs/DISTRIBUTED.md)"},
    {"shard-optimizer", NULL, K_FLAG, F(shard_optimizer), 1, 0, NULL, NULL,
     "each rank updates and holds the optimizer state of 1/N of the\n"
     "parameters (ZeRO stage 1): the gradients reduce-scattered, the\n"
     "weights sent from their owners; the same results (bit for\n"
     "bit with 2 ranks) and checkpoints (docs/DISTRIBUTED.md)"},
    {"frozen-every", "N", K_GONE, 0, 0, 0, NULL, NULL,
     "is gone (it counted dead units): --log and --summary have lost_updates and dead_gradients (and "
     "lost_gradients) instead"},
};

#define NOPTIONS (sizeof options / sizeof options[0])

static const option *find(const char *name) {
    for (size_t i = 0; name && i < NOPTIONS; i++)
        if (strcmp(options[i].name, name) == 0) return &options[i];
    return NULL;
}

int mp_run_option_takes_value(const char *name) {
    const option *o = find(name);
    return !o ? -1 : o->k != K_FLAG && o->k != K_GONE;
}

const char *mp_run_option_name(size_t i) {
    for (size_t k = 0; k < NOPTIONS; k++)
        if (options[k].k != K_GONE && i-- == 0) return options[k].name;
    return NULL;
}

int mp_run_option_default(const char *name, char *buf, size_t cap) {
    const option *o = find(name);
    if (!o || o->k == K_GONE || !buf || cap == 0) return -1;
    mp_run_spec d;
    mp_run_defaults(&d);
    const void *f = (const char *)&d + o->off;
    int n = 0;
    switch (o->k) {
    case K_STR:
        if (!*(const char *const *)f) return 0;
        n = snprintf(buf, cap, "%s", *(const char *const *)f);
        break;
    case K_FLAG: n = snprintf(buf, cap, "false"); break;
    case K_REAL:
    case K_F32: {
        const double v = o->k == K_REAL ? *(const double *)f : (double)*(const float *)f;
        if (o->k == K_REAL && v < o->lo) return 0; /* a sentinel: resolved later */
        n = snprintf(buf, cap, "%.9g", v);
        if (n >= 0 && (size_t)n + 2 < cap && !strpbrk(buf, ".en")) strcat(buf, ".0"), n += 2; /* a real: "2.0" */
        break;
    }
    case K_LONG:
        if (*(const long *)f < o->lo) return 0;
        n = snprintf(buf, cap, "%ld", *(const long *)f);
        break;
    case K_INT:
    case K_COUNT:
        if (*(const int *)f < (o->k == K_COUNT ? 1 : o->lo)) return 0;
        n = snprintf(buf, cap, "%d", *(const int *)f);
        break;
    case K_CHOICE: {
        const choice *c = o->choices;
        while (c->name && c->value != *(const int *)f) c++;
        if (!c->name) return 0; /* -1: the mode's own setting */
        n = snprintf(buf, cap, "%s", c->name);
        break;
    }
    case K_BETAS: n = snprintf(buf, cap, "%.9g,%.9g", d.beta1, d.beta2); break;
    default: return -1;
    }
    return n >= 0 && (size_t)n < cap ? 1 : -1;
}

/* "relu or gelu", "fp32, fp16 or bf16" */
static void choice_list(char *out, size_t cap, const choice *c) {
    size_t n = 0, k = 0;
    while (c[n].name) n++;
    for (size_t i = 0; i < n && k < cap; i++)
        k += (size_t)snprintf(out + k, cap - k, "%s%s", i == 0 ? "" : i + 1 == n ? " or " : ", ", c[i].name);
}
/* A nonzero number that is 0 in fp32 (below its least subnormal, 1.4e-45). */
static mp_status underflowed(const char *name, const char *v) {
    return mp_error(MP_EINVAL, "--%s %s is below fp32's least subnormal (1.4e-45): it would be 0", name, v);
}

static mp_status overflowed(const char *name, const char *v) {
    return mp_error(MP_EINVAL, "--%s %s is past fp32's largest finite value (3.4e38)", name, v);
}

mp_status mp_run_option(mp_run_spec *s, const char *name, const char *v) {
    if (!s || !name) return mp_error(MP_EINVAL, "mp_run_option: NULL argument");
    const option *o = find(name);
    if (!o) return mp_error(MP_EINVAL, "unknown option '--%s'", name);
    if (o->k == K_GONE) return mp_error(MP_EINVAL, "--%s %s", name, o->help);
    if (o->k == K_FLAG) {
        if (v) return mp_error(MP_EINVAL, "--%s takes no value", name);
        *(int *)((char *)s + o->off) = (int)o->lo;
        return MP_OK;
    }
    if (!v) return mp_error(MP_EINVAL, "option --%s needs a value", name);
    void *dst = (char *)s + o->off;
    char *end;
    switch (o->k) {
    case K_STR: *(const char **)dst = v; return MP_OK;
    case K_REAL: {
        errno = 0;
        const float f = strtof(v, &end); /* read as a float, as the CLI always has */
        if (end != v && !*end && errno == ERANGE && isinf(f) && !isinf(strtod(v, NULL)) && o->hi > 3.4e38)
            return overflowed(name, v);
        if (end == v || *end || (errno == ERANGE && isinf(f)) || !(f >= o->lo && f <= o->hi))
            return mp_error(MP_EINVAL, "--%s wants a number in [%g, %g], not '%s'", name, o->lo, o->hi, v);
        if (f == 0 && strtod(v, NULL) != 0) return underflowed(name, v);
        *(double *)dst = f;
        return MP_OK;
    }
    case K_F32: {
        errno = 0;
        const float f = strtof(v, &end);
        if (end != v && !*end && errno == ERANGE && isinf(f)) return overflowed(name, v);
        if (end == v || *end) return mp_error(MP_EINVAL, "--%s wants a number, not '%s'", name, v);
        if (f == 0 && strtod(v, NULL) != 0) return underflowed(name, v);
        *(float *)dst = f;
        return MP_OK;
    }
    case K_LONG:
    case K_INT:
    case K_COUNT: {
        errno = 0;
        const long x = strtol(v, &end, 10);
        const double lo = o->k == K_COUNT ? 1 : o->lo, hi = o->k == K_COUNT ? (double)(1L << 30) : o->hi;
        if (end == v || *end || errno == ERANGE || x < lo || x > hi)
            return o->k == K_COUNT
                       ? mp_error(MP_EINVAL, "--%s wants a whole number >= 1, not '%s'", name, v)
                       : mp_error(MP_EINVAL, "--%s wants %ld .. %ld, not '%s'", name, (long)lo, (long)hi, v);
        if (o->k == K_LONG) *(long *)dst = x;
        else *(int *)dst = (int)x;
        return MP_OK;
    }
    case K_CHOICE:
        for (const choice *c = o->choices; c->name; c++)
            if (strcmp(c->name, v) == 0) {
                *(int *)dst = c->value;
                return MP_OK;
            }
        char list[96];
        choice_list(list, sizeof list, o->choices);
        return mp_error(MP_EINVAL, "--%s is %s, not '%s'", name, list, v);
    case K_BETAS: {
        char *end2 = NULL;
        const double b1 = strtod(v, &end), b2 = *end == ',' ? strtod(end + 1, &end2) : -1;
        if (*end != ',' || end2 == end + 1 || *end2 || !(b1 >= 0 && b1 < 1) || !(b2 >= 0 && b2 < 1))
            return mp_error(MP_EINVAL, "--betas wants B1,B2 in [0, 1), not '%s'", v);
        s->beta1 = b1, s->beta2 = b2;
        return MP_OK;
    }
    default: return mp_error(MP_EINVAL, "--%s: not settable", name);
    }
}

/* ---- the help ---- */

static char help[16384];
static pthread_once_t help_once = PTHREAD_ONCE_INIT;

#define COL 25 /* where the explanations start */

static size_t put(size_t k, const char *fmt, ...) MP_PRINTF(2, 3);
static size_t put(size_t k, const char *fmt, ...) {
    if (k >= sizeof help) return k;
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(help + k, sizeof help - k, fmt, ap);
    va_end(ap);
    return n > 0 ? k + (size_t)n : k;
}

/* "  --name META            first line\n" and the other lines at COL. */
static size_t put_option(size_t k, const option *o) {
    char left[64];
    snprintf(left, sizeof left, "--%s%s%s", o->name, o->metavar ? " " : "", o->metavar ? o->metavar : "");
    k = put(k, "  %-*s", COL - 3, left);
    if (strlen(left) > COL - 3) k = put(k, "\n%*s", COL, "");
    else k = put(k, " ");
    for (const char *line = o->help; *line;) {
        const size_t len = strcspn(line, "\n");
        k = put(k, "%.*s\n", (int)len, line);
        line += len;
        if (*line == '\n') line++, k = put(k, "%*s", COL, "");
    }
    return k;
}

static void build_help(void) {
    size_t k = 0;
    for (size_t i = 0; i < NOPTIONS; i++) {
        const option *o = &options[i];
        if (o->k == K_GONE) continue;
        if (o->section) k = put(k, "%s\n", o->section);
        k = put_option(k, o);
        if (strcmp(o->name, "precision") == 0) { /* the modes, from their table */
            size_t n;
            const mp_precision *m = mp_precisions(&n);
            for (size_t j = 0; j < n; j++)
                k = put(k, "%*s%-15s %s\n", COL + 2, "",
                        m[j].scaling == MP_SCALING_STATIC ? "fp16-static[:S]" : m[j].name, m[j].help);
        }
    }
}

const char *mp_run_options_help(void) {
    pthread_once(&help_once, build_help);
    return help;
}

/* ---- the whole ---- */

/* Options set to something other than their default that do nothing for the
 * chosen model, optimizer, schedule or launch: MP_EINVAL + message saying so
 * (a user who set them meant something the run would not do). */
static mp_status unused_options(const mp_run_spec *s) {
    const mp_model_row *row = mp_model_row_of(s);
    const unsigned has = row->options;
    const char *bad = !(has & MP_OPT_ACT) && s->act != MP_ACT_RELU      ? "--act (the MLP's activation)"
                      : !(has & MP_OPT_LAYERNORM) && s->layernorm       ? "--layernorm (the MLP's)"
                      : !(has & MP_OPT_HIST) && s->hist_every > 0       ? "--hist-every (the MLP's gradient histograms)"
                      : !(has & MP_OPT_GELU) && s->gelu != MP_GELU_TANH ? "--gelu (the GPT's)"
                      : !(has & MP_OPT_EVAL_WINDOWS) && s->eval_windows > 0
                          ? "--eval-windows (the GPT's validation windows)"
                          : NULL;
    if (bad) return mp_error(MP_EINVAL, "%s does nothing for %s", bad, row->what);
    if (s->optimizer == MP_RUN_ADAMW && s->momentum != 0)
        return mp_error(MP_EINVAL, "--momentum is SGD's: AdamW has --betas");
    if (s->optimizer == MP_RUN_SGD && (s->beta1 != 0.9 || s->beta2 != 0.999))
        return mp_error(MP_EINVAL, "--betas are AdamW's: SGD has --momentum");
    if (s->schedule == MP_LR_CONSTANT && s->min_lr >= 0)
        return mp_error(MP_EINVAL, "--min-lr is where the cosine schedule ends: it does nothing with a constant rate "
                                   "(--lr-schedule cosine)");
    if (!s->save && s->save_dtype != MP_F32) return mp_error(MP_EINVAL, "--save-dtype does nothing without --save");
    const int ranks = s->ranks ? s->ranks->size : 1;
    if (ranks == 1 && s->allreduce != MP_F32)
        return mp_error(MP_EINVAL, "--allreduce does nothing in one process (mpirun -np N mixprec train ...)");
    if (ranks == 1 && s->shard_optimizer)
        return mp_error(MP_EINVAL, "--shard-optimizer shares the optimizer state between ranks: it needs mpirun -np N "
                                   "with N >= 2");
    if (s->shard_optimizer && s->allreduce != MP_F32)
        return mp_error(MP_EINVAL, "--shard-optimizer reduce-scatters the gradients in fp32: no --allreduce %s",
                        mp_format(s->allreduce)->name);
    if (ranks == 1 && s->check_every != 100)
        return mp_error(MP_EINVAL, "--check-every does nothing in one process (mpirun -np N mixprec train ...)");
    return MP_OK;
}

/* --probe: a recipe, a model that has a probe, a mode in bf16 with fp32 master weights. */
static mp_status probe_fits(const mp_run_spec *s, const mp_model_row *row, const mp_precision *p) {
    mp_recipe r;
    if (mp_recipe_parse(s->probe, &r) != MP_OK)
        return mp_error(MP_EINVAL, "--probe %s: the recipe is fp8-delayed, fp8-current, mxfp8 or nvfp4", s->probe);
    if (!row->probe) return mp_error(MP_EINVAL, "--probe measures the GPT's Linear layers: %s has no probe", row->what);
    if (p->compute != MP_BF16 || p->master_weights != MP_MASTER_FP32)
        return mp_error(MP_EINVAL, "--probe measures GEMMs in bf16 with fp32 master weights: not in %s", p->label);
    if (s->ranks && s->ranks->size > 1) /* each rank would measure its share of the batch alone */
        return mp_error(MP_EINVAL, "--probe measures one process's GEMMs: run it without mpirun");
    if (p->recipe != MP_RECIPE_NONE && !p->layers[0])
        return mp_error(MP_EINVAL, "--probe measures the Linear layers that run in bf16: in %s every one runs in %s",
                        p->label, mp_recipe_name(p->recipe));
    return MP_OK;
}

/* Whether the mode string sets switch `key` itself ("...+key=value..."). */
static int mode_sets(const char *mode, const char *key) {
    const size_t kl = strlen(key);
    for (const char *q = strchr(mode, '+'); q; q = strchr(q + 1, '+'))
        if (strncmp(q + 1, key, kl) == 0 && q[1 + kl] == '=') return 1;
    return 0;
}

mp_status mp_run_resolve(const mp_run_spec *s, mp_precision *out) {
    if (!s || !s->model || !s->precision) return mp_error(MP_EINVAL, "mp_run_check: NULL argument");
    const struct {
        int set;
        const char *key;
    } sw[] = {{s->master_weights >= 0, "master-weights"},
              {s->optim_state >= 0, "optim-state"},
              {s->reductions >= 0, "reductions"},
              {s->mx_rule >= 0, "mx-rule"}};
    for (size_t i = 0; i < sizeof sw / sizeof sw[0]; i++)
        if (sw[i].set && mode_sets(s->precision, sw[i].key))
            return mp_error(MP_EINVAL, "+%s in the mode %s and --%s both given: say it once", sw[i].key, s->precision,
                            sw[i].key);
    mp_precision p;
    mp_status st = mp_precision_parse(s->precision, &p);
    if (st == MP_OK && s->master_weights >= 0)
        st = mp_precision_set_master_weights(&p, (mp_master_weights)s->master_weights);
    if (st == MP_OK && s->optim_state >= 0) st = mp_precision_set_optim_state(&p, (mp_state_format)s->optim_state);
    if (st == MP_OK && p.optim_state != MP_STATE_AUTO && s->optimizer == MP_RUN_SGD && s->momentum == 0)
        return mp_error(MP_EINVAL, "SGD without --momentum keeps no optimizer state: %s does nothing",
                        s->optim_state >= 0 ? "--optim-state" : "+optim-state");
    if (st == MP_OK && s->reductions >= 0) st = mp_precision_set_reductions(&p, (mp_reductions)s->reductions);
    if (st == MP_OK && s->mx_rule >= 0) st = mp_precision_set_mx_rule(&p, (mp_mx_rule)s->mx_rule);
    if (st == MP_OK && s->layer_precision) st = mp_precision_load_layers(&p, s->layer_precision);
    if (st != MP_OK) return st;
    const mp_model_row *row = mp_model_row_of(s);
    void *model;
    size_t T;
    if ((st = row->open(s, &model, &T)) != MP_OK) return st;     /* the model string parsed */
    if (p.layers[0] && row->assign) st = row->assign(model, &p); /* the assignments against the model's layers */
    row->close(model);
    if (st != MP_OK) return st;
    if (s->probe && (st = probe_fits(s, row, &p)) != MP_OK) return st;
    if (s->epochs && s->steps) return mp_error(MP_EINVAL, "--epochs and --steps exclude each other");
    if (s->init && s->resume) return mp_error(MP_EINVAL, "--init and --resume exclude each other");
    if (s->batch < 0 || s->accum < 1 || s->epochs < 0 || s->steps < 0 || s->eval_every < 0 || s->eval_windows < 0 ||
        s->hist_every < 0 || s->sample_bytes < 0 || s->check_every < 0 || s->threads < 0 || s->warmup < 0)
        return mp_error(MP_EINVAL, "a count of the run is negative (or --accum below 1)");
    const int size = s->ranks ? s->ranks->size : 1;
    const long batch = s->batch ? s->batch : row->batch;
    if (batch % size != 0)
        return mp_error(MP_EINVAL,
                        "--batch %ld does not split into %d equal shares: with mpirun -np %d each rank "
                        "takes its contiguous share of every micro-batch, so N must divide --batch",
                        batch, size, size);
    if (s->data && row->data && row->text != (strncmp(s->data, "text:", 5) == 0))
        return mp_error(MP_EINVAL, "%s", row->data_use);
    if ((st = unused_options(s)) != MP_OK) return st;
    const mp_scaler_config d = mp_scaler_defaults();
    const mp_scaler_config *g = &s->scaler;
    const int scaler_set = g->init_scale != d.init_scale || g->growth_factor != d.growth_factor ||
                           g->backoff_factor != d.backoff_factor || g->growth_interval != d.growth_interval ||
                           g->hysteresis != d.hysteresis || g->min_scale != d.min_scale || g->max_scale != d.max_scale;
    if (p.scaling == MP_SCALING_NONE && scaler_set)
        return mp_error(MP_EINVAL,
                        "the loss-scaling options (--init-scale, --growth-interval, ...) do nothing for %s: "
                        "it has no loss scaling (fp16-static, fp16-dynamic)",
                        p.label);
    if (p.scaling == MP_SCALING_STATIC && p.static_scale > 0 && g->init_scale != d.init_scale)
        return mp_error(MP_EINVAL, "--init-scale does nothing for %s: the mode's S is its scale", p.label);
    if (p.scaling == MP_SCALING_STATIC &&
        (g->growth_factor != d.growth_factor || g->backoff_factor != d.backoff_factor ||
         g->growth_interval != d.growth_interval || g->hysteresis != d.hysteresis || g->min_scale != d.min_scale ||
         g->max_scale != d.max_scale))
        return mp_error(MP_EINVAL,
                        "a static scale never changes: --growth-*, --backoff-factor, --hysteresis, "
                        "--min-scale and --max-scale do nothing for %s",
                        p.label);
    const mp_scaler_config sc = mp_precision_scaler(&p, &s->scaler); /* as the trainer will make it */
    if (p.scaling != MP_SCALING_NONE && sc.init_scale > 0 && !isfinite((float)(1.0 / (double)sc.init_scale)))
        return mp_error(MP_EINVAL,
                        "%s%.3g: 1/S is not finite in fp32, so unscaling would make every gradient inf "
                        "(S must exceed 2^-128)",
                        p.static_scale > 0 ? "fp16-static:" : "--init-scale ", (double)sc.init_scale);
    mp_scaler scaler;
    if (p.scaling != MP_SCALING_NONE && (st = mp_scaler_init(&scaler, &sc)) != MP_OK) return st;
    if (out) *out = p;
    return MP_OK;
}

/* ---- outputs against inputs ---- */

enum { MAX_INPUTS = 40 };

/* The files the spec reads: --init, --resume, and the data (each path of a
 * text corpus, or the files its model's row names: the MLP's four). */
static size_t inputs_of(const mp_run_spec *s, mp_file_id *in, char (*paths)[4096]) {
    size_t n = 0;
    if (s->init) mp_file_identify(&in[n++], "--init", s->init);
    if (s->resume) mp_file_identify(&in[n++], "--resume", s->resume);
    const mp_model_row *row = mp_model_row_of(s);
    if (!row->data) return n; /* the library reads no data for it */
    if (s->data && strncmp(s->data, "text:", 5) == 0) {
        for (const char *p = s->data + 5; *p && n < MAX_INPUTS;) {
            const size_t len = strcspn(p, ",");
            snprintf(paths[n], sizeof paths[n], "%.*s", (int)len, p);
            mp_file_identify(&in[n], "--data", paths[n]), n++;
            p += len + (p[len] == ',');
        }
    } else if (row->inputs) {
        n += row->inputs(s, in + n, paths + n, MAX_INPUTS - n);
    }
    return n;
}

const char *mp_run_reader(const mp_run_spec *s, const char *path) {
    mp_file_id *in = malloc(MAX_INPUTS * sizeof *in), o;
    char(*paths)[4096] = malloc(MAX_INPUTS * sizeof *paths);
    const char *reader = NULL;
    if (in && paths && s && path) {
        const size_t nin = inputs_of(s, in, paths);
        mp_file_identify(&o, "", path);
        for (size_t i = 0; i < nin && !reader; i++)
            if (mp_file_same(&o, &in[i]) || (in[i].is_dir && mp_file_inside(&o, &in[i]))) reader = in[i].option;
    }
    free(in), free(paths);
    return reader;
}

mp_status mp_run_check_files(const mp_run_spec *s) { return mp_run_check_files_in(s, NULL); }

mp_status mp_run_check_files_in(const mp_run_spec *s, const char *pending) {
    if (!s) return mp_error(MP_EINVAL, "mp_run_check_files: NULL argument");
    const char *const opt[4] = {"--log", "--summary", "--save", "--dump-grads"};
    const char *const path[4] = {s->log, s->summary, s->save, s->dump_grads};
    mp_file_id out[4], *in = malloc(MAX_INPUTS * sizeof *in);
    char(*paths)[4096] = malloc(MAX_INPUTS * sizeof *paths);
    if (!in || !paths) return free(in), free(paths), mp_error(MP_ENOMEM, "out of memory");
    const size_t nin = inputs_of(s, in, paths);
    mp_status st = MP_OK;
    int nout = 0;
    for (size_t i = 0; i < nin && st == MP_OK; i++) /* every input a regular file (a text corpus: or a directory) */
        st = mp_input_kind(in[i].option, in[i].path,
                           !strcmp(in[i].option, "--data") && s->data && !strncmp(s->data, "text:", 5));
    for (int k = 0; k < 4 && st == MP_OK; k++) {
        if (!path[k]) continue;
        if (!*path[k]) {
            st = mp_error(MP_EINVAL, "%s is empty: give a file name", opt[k]);
            break;
        }
        mp_file_id *o = &out[nout++];
        mp_file_identify(o, opt[k], path[k]);
        for (size_t i = 0; i < nin && st == MP_OK; i++)
            if (mp_file_same(o, &in[i]) &&
                !(k == 2 && !strcmp(in[i].option, "--resume"))) /* a checkpoint advanced in place */
                st = mp_error(MP_EINVAL, "%s %s is the file %s reads: an output never replaces an input", opt[k],
                              path[k], in[i].option);
            else if (in[i].is_dir && mp_file_inside(o, &in[i]))
                st = mp_error(MP_EINVAL, "%s %s is inside the corpus directory %s that --data reads", opt[k], path[k],
                              in[i].path);
        for (int j = 0; j < nout - 1 && st == MP_OK; j++)
            if (mp_file_same(o, &out[j]))
                st = mp_error(MP_EINVAL, "%s and %s name the same file (%s): each output needs its own", out[j].option,
                              opt[k], path[k]);
        if (st == MP_OK && (!s->ranks || s->ranks->rank == 0)) st = mp_file_writable(o, pending); /* rank 0 writes */
    }
    free(in), free(paths);
    return st;
}

mp_status mp_run_check(const mp_run_spec *s, mp_precision *p) {
    const mp_status st = mp_run_resolve(s, p);
    return st != MP_OK ? st : mp_run_check_files(s);
}
