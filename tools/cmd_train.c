/* cmd_train.c - `mixprec train`: an MLP on Fashion-MNIST in any precision mode. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli.h"

static const char usage[] =
    "usage: mixprec train [options]\n\n"
    "Trains an MLP on Fashion-MNIST (Debian's dataset-fashion-mnist, or --data DIR)\n"
    "and reports test accuracy, loss, skipped steps, the loss scale, time per step\n"
    "and peak memory.\n\n"
    "model and data\n"
    "  --model mlp:784-1024-1024-10   widths, input 784 and output >= 10\n"
    "  --act relu|gelu        activation (relu)\n"
    "  --layernorm            layer norm after each hidden layer\n"
    "  --data DIR             the four Fashion-MNIST files (.gz or plain)\n"
    "precision\n"
    "  --precision MODE       fp32 (default); fp16: fp16 compute, NO loss scaling;\n"
    "                         fp16-static[:S]: fixed scale S (65536); fp16-dynamic:\n"
    "                         the AMP recipe; bf16: bf16 compute, fp32 master\n"
    "                         weights; bf16-pure: bf16 weights only, stochastic\n"
    "                         rounding\n"
    CLI_SCALER_HELP
    "optimization\n"
    "  --optimizer sgd|adamw  (adamw)\n"
    "  --lr LR                learning rate (1e-3)\n"
    "  --momentum M           SGD momentum (0)\n"
    "  --weight-decay WD      (0.01 for adamw, 0 for sgd)\n"
    "  --batch B              micro-batch size (256)\n"
    "  --accum N              micro-batches per step (1)\n"
    "  --epochs E | --steps N length (1 epoch); an epoch is 60000 / (B * N) steps\n"
    "  --clip NORM            clip the global gradient norm (unscaled gradients)\n"
    "  --seed S               initialisation and shuffling (1)\n"
    "  --no-shuffle           batch k is training examples k*B .. k*B+B-1 in file order\n"
    "  --threads N            threads for the kernels\n"
    "files\n"
    "  --init FILE            initial weights (safetensors: fc{i}.weight [out, in], fc{i}.bias)\n"
    "  --save FILE            checkpoint at the end: weights, optimizer state, scaler, step\n"
    "  --save-dtype fp32|fp16|bf16  the weights' dtype in --save (fp32; a half file\n"
    "                         is smaller but does not resume bit-identically)\n"
    "  --resume FILE          continue a checkpoint (bit-identical to not stopping)\n"
    "  --log FILE             CSV, one row per step: step, loss, scale, skipped,\n"
    "                         grad_norm, underflow, overflow, ms, then per layer the\n"
    "                         fractions of gradient values stored as 0 and as subnormals\n"
    "  --eval-every N         test-set evaluation every N steps (0: only at the end)\n"
    "diagnostics\n"
    "  --summary FILE         JSON: results, per-layer underflow, skipped steps, frozen\n"
    "                         weights, gradient histograms, warnings\n"
    "  --hist-every N         log2 histogram of the weight gradients every N steps (0: off)\n"
    "  --frozen-every K       fraction of weights unchanged over each K steps (50; 0: off)\n"
    "  --dump-grads FILE      the last step's fp32 weight gradients (unscaled) as safetensors\n"
    "                         (fc{i}.weight.grad), for mixprec underflow --from FILE\n";

typedef enum { P_FP32, P_FP16, P_FP16_STATIC, P_FP16_DYNAMIC, P_BF16, P_BF16_PURE } precision;
static const char *const prec_names[] = {"fp32", "fp16", "fp16-static", "fp16-dynamic", "bf16", "bf16-pure"};

typedef struct {
    const char *model, *data, *init, *save, *resume, *log, *summary, *dump_grads;
    mp_dtype save_dtype;
    long hist_every, frozen_every;
    mp_act act;
    int layernorm, adamw, shuffle, threads;
    precision prec;
    mp_scaler_config scaler;
    double lr, momentum, wd, clip;
    long batch, accum, epochs, steps, eval_every, seed;
} train_opts;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int parse(int argc, char **argv, train_opts *o) {
    const char *cmd = "train";
    memset(o, 0, sizeof *o);
    o->model = "mlp:784-1024-1024-10", o->adamw = 1, o->shuffle = 1, o->lr = 1e-3, o->wd = -1;
    o->batch = 256, o->accum = 1, o->seed = 1, o->frozen_every = 50;
    o->scaler = mp_scaler_defaults();
    int rc;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        float f;
#define VAL() if (!(v = cli_value(cmd, argc, argv, &i))) return CLI_USAGE
#define NUM(dst, lo, hi) \
    VAL();               \
    if (cli_parse_float(v, &f) != 0 || !(f >= (lo) && f <= (hi))) return cli_usage_error(cmd, "%s wants a number in [%g, %g], not '%s'", a, (double)(lo), (double)(hi), v); \
    dst = f
#define INT(dst, lo, hi) \
    VAL();               \
    if (cli_parse_long(v, lo, hi, &dst) != 0) return cli_usage_error(cmd, "%s wants %ld .. %ld, not '%s'", a, (long)(lo), (long)(hi), v)
        if (cli_is_help(&cmd_train, a)) return -1;
        if ((rc = cli_scaler_option(cmd, argc, argv, &i, &o->scaler)) != 0) {
            if (rc != 1) return rc;
        } else if (!strcmp(a, "--model")) { VAL(); o->model = v; }
        else if (!strcmp(a, "--act")) {
            VAL();
            if (!strcmp(v, "relu")) o->act = MP_ACT_RELU;
            else if (!strcmp(v, "gelu")) o->act = MP_ACT_GELU;
            else return cli_usage_error(cmd, "--act is relu or gelu, not '%s'", v);
        } else if (!strcmp(a, "--layernorm")) o->layernorm = 1;
        else if (!strcmp(a, "--data")) { VAL(); o->data = v; }
        else if (!strcmp(a, "--precision")) {
            VAL();
            int found = 0;
            for (int k = 0; k < 6; k++)
                if (!strcmp(v, prec_names[k])) o->prec = (precision)k, found = 1;
            if (!found && !strncmp(v, "fp16-static:", 12)) {
                if (cli_parse_float(v + 12, &f) != 0 || !(f > 0) || !isfinite(f))
                    return cli_usage_error(cmd, "fp16-static:S wants a positive scale, not '%s'", v + 12);
                o->prec = P_FP16_STATIC, o->scaler.init_scale = f, found = 1;
            }
            if (!found)
                return cli_usage_error(cmd, "--precision is fp32, fp16, fp16-static[:S], fp16-dynamic, bf16 or bf16-pure, not '%s'", v);
        } else if (!strcmp(a, "--optimizer")) {
            VAL();
            if (!strcmp(v, "sgd")) o->adamw = 0;
            else if (!strcmp(v, "adamw")) o->adamw = 1;
            else return cli_usage_error(cmd, "--optimizer is sgd or adamw, not '%s'", v);
        } else if (!strcmp(a, "--lr")) { NUM(o->lr, 0, 1e6); }
        else if (!strcmp(a, "--momentum")) { NUM(o->momentum, 0, 1e6); }
        else if (!strcmp(a, "--weight-decay")) { NUM(o->wd, 0, 1e6); }
        else if (!strcmp(a, "--clip")) {
            NUM(o->clip, 1e-30, 1e30);
        } else if (!strcmp(a, "--batch")) { INT(o->batch, 1, 60000); }
        else if (!strcmp(a, "--accum")) { INT(o->accum, 1, 60000); }
        else if (!strcmp(a, "--epochs")) { INT(o->epochs, 1, 100000); }
        else if (!strcmp(a, "--steps")) { INT(o->steps, 1, 100000000); }
        else if (!strcmp(a, "--eval-every")) { INT(o->eval_every, 0, 100000000); }
        else if (!strcmp(a, "--seed")) { INT(o->seed, 0, 2147483647L); }
        else if (!strcmp(a, "--threads")) {
            long t;
            INT(t, 1, 256);
            o->threads = (int)t;
        } else if (!strcmp(a, "--no-shuffle")) o->shuffle = 0;
        else if (!strcmp(a, "--init")) { VAL(); o->init = v; }
        else if (!strcmp(a, "--save")) { VAL(); o->save = v; }
        else if (!strcmp(a, "--save-dtype")) {
            VAL();
            if (mp_dtype_parse(v, &o->save_dtype) != MP_OK || o->save_dtype == MP_E4M3 || o->save_dtype == MP_E5M2)
                return cli_usage_error(cmd, "--save-dtype is fp32, fp16 or bf16, not '%s'", v);
        }
        else if (!strcmp(a, "--resume")) { VAL(); o->resume = v; }
        else if (!strcmp(a, "--log")) { VAL(); o->log = v; }
        else if (!strcmp(a, "--summary")) { VAL(); o->summary = v; }
        else if (!strcmp(a, "--dump-grads")) { VAL(); o->dump_grads = v; }
        else if (!strcmp(a, "--hist-every")) { INT(o->hist_every, 0, 100000000); }
        else if (!strcmp(a, "--frozen-every")) { INT(o->frozen_every, 0, 100000000); }
        else return cli_usage_error(cmd, "unknown option '%s'", a);
#undef VAL
#undef NUM
#undef INT
    }
    if (o->epochs && o->steps) return cli_usage_error(cmd, "--epochs and --steps exclude each other");
    if (o->init && o->resume) return cli_usage_error(cmd, "--init and --resume exclude each other");
    if (o->wd < 0) o->wd = o->adamw ? 0.01 : 0.0;
    if (o->prec == P_FP16_STATIC) o->scaler.dynamic = 0;
    mp_scaler s;
    if ((o->prec == P_FP16_STATIC || o->prec == P_FP16_DYNAMIC) && mp_scaler_init(&s, &o->scaler) != MP_OK)
        return cli_usage_error(cmd, "%s", mp_last_error());
    return 0;
}

/* The examples of micro-batch mb: epoch-wise permutations from (seed, epoch). */
typedef struct {
    uint32_t *perm;
    long epoch;
    size_t n;
    int shuffle;
    uint64_t seed;
} sampler;

static const uint32_t *batch_indices(sampler *s, long mb, size_t B, long mb_per_epoch) {
    const long e = mb / mb_per_epoch;
    if (e != s->epoch) {
        for (size_t i = 0; i < s->n; i++) s->perm[i] = (uint32_t)i;
        if (s->shuffle) {
            uint64_t r = s->seed * 0x9e3779b97f4a7c15ull ^ ((uint64_t)e + 1) * 0xd1b54a32d192ed03ull;
            for (size_t i = s->n - 1; i > 0; i--) {
                r ^= r << 13; r ^= r >> 7; r ^= r << 17;
                const size_t j = (size_t)(r % (i + 1));
                const uint32_t t = s->perm[i];
                s->perm[i] = s->perm[j], s->perm[j] = t;
            }
        }
        s->epoch = e;
    }
    return s->perm + (size_t)(mb % mb_per_epoch) * B;
}

/* The message of the last failure in this file's helpers (library failures
 * are copied from mp_last_error()). */
static char train_err[600];

static mp_status terr(mp_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static mp_status terr(mp_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(train_err, sizeof train_err, fmt, ap);
    va_end(ap);
    return st;
}

static mp_status lib_err(mp_status st) { return terr(st, "%s", mp_last_error()); }

static int fail(const char *what) {
    fprintf(stderr, "mixprec train: %s\n", what);
    return 1;
}

static mp_status evaluate(mp_mlp *m, const mp_dataset *d, size_t B, float *x, int32_t *y, double *acc, double *loss) {
    uint32_t *idx = malloc(B * sizeof *idx);
    if (!idx) return terr(MP_ENOMEM, "out of memory");
    double ls = 0;
    size_t correct = 0;
    mp_status st = MP_OK;
    for (size_t i = 0; i < d->n && st == MP_OK; i += B) {
        const size_t n = d->n - i < B ? d->n - i : B;
        for (size_t k = 0; k < n; k++) idx[k] = (uint32_t)(i + k);
        mp_dataset_batch(d, idx, n, x, y);
        if ((st = mp_mlp_eval_batch(m, x, y, n, &ls, &correct)) != MP_OK) lib_err(st);
    }
    free(idx);
    *acc = (double)correct / (double)d->n, *loss = ls / (double)d->n;
    return st;
}

static void hex(char *out, const uint8_t *b, size_t n) {
    for (size_t i = 0; i < n; i++) sprintf(out + 2 * i, "%02x", b[i]);
}

static int unhex(uint8_t *b, const char *s, size_t n) {
    if (!s || strlen(s) != 2 * n) return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        if (sscanf(s + 2 * i, "%2x", &v) != 1) return -1;
        b[i] = (uint8_t)v;
    }
    return 0;
}

/* Checkpoint: the model's tensors, optimizer states, and metadata. */
static mp_status save_checkpoint(const char *path, mp_mlp *m, mp_optim *opt, const mp_scaler *sc, const train_opts *o,
                                 long step) {
    mp_tensor *ts = calloc(4 * MP_MLP_MAX_LAYERS + 2 * mp_optim_count(opt) + 1, sizeof *ts);
    if (!ts) return terr(MP_ENOMEM, "out of memory");
    size_t n;
    mp_mlp_tensors(m, ts, &n);
    /* weights in another dtype when asked: converted copies */
    void *conv[4 * MP_MLP_MAX_LAYERS] = {0};
    const size_t nmodel = n;
    for (size_t i = 0; i < nmodel && o->save_dtype != MP_F32; i++) {
        if (ts[i].dtype == o->save_dtype) continue;
        const size_t numel = mp_tensor_numel(&ts[i]);
        if (!(conv[i] = malloc(numel * mp_format(o->save_dtype)->size))) {
            for (size_t k = 0; k < i; k++) free(conv[k]);
            free(ts);
            return terr(MP_ENOMEM, "out of memory");
        }
        mp_convert(conv[i], o->save_dtype, ts[i].data, ts[i].dtype, numel, NULL);
        ts[i].data = conv[i], ts[i].dtype = o->save_dtype, ts[i].nbytes = numel * mp_format(o->save_dtype)->size;
    }
    for (size_t i = 0; i < mp_optim_count(opt); i++) {
        const mp_param *p = mp_optim_param(opt, i);
        const float *states[2] = {p->state1, p->state2};
        for (int k = 0; k < 2; k++) {
            if (!states[k]) continue;
            mp_tensor *t = &ts[n++];
            snprintf(t->name, sizeof t->name, "optim.%s.state%d", p->name, k + 1);
            t->dtype = MP_F32, t->ndim = 1, t->shape[0] = p->n, t->nbytes = p->n * 4, t->data = states[k];
        }
    }
    char stepbuf[32], osteps[32], seed[32], blob[2 * MP_SCALER_BLOB_SIZE + 1] = "";
    snprintf(stepbuf, sizeof stepbuf, "%ld", step);
    snprintf(osteps, sizeof osteps, "%llu", (unsigned long long)mp_optim_steps(opt));
    snprintf(seed, sizeof seed, "%ld", o->seed);
    if (sc) {
        uint8_t b[MP_SCALER_BLOB_SIZE];
        mp_scaler_save(sc, b);
        hex(blob, b, sizeof b);
    }
    const char *meta[] = {"format", "mixprec-checkpoint-1", "model", o->model, "act", o->act ? "gelu" : "relu",
                          "layernorm", o->layernorm ? "1" : "0", "precision", prec_names[o->prec], "optimizer",
                          o->adamw ? "adamw" : "sgd", "step", stepbuf, "optim_steps", osteps, "seed", seed, "scaler",
                          blob, NULL};
    const mp_status st = mp_safetensors_write(path, ts, n, meta);
    for (size_t i = 0; i < nmodel; i++) free(conv[i]);
    free(ts);
    return st == MP_OK ? st : lib_err(st);
}

static mp_status load_checkpoint(const char *path, mp_mlp *m, mp_optim *opt, mp_scaler *sc, const train_opts *o,
                                 long *step) {
    mp_safetensors s;
    mp_status st = mp_safetensors_read(path, &s);
    if (st != MP_OK) return lib_err(st);
    const char *fmtv = mp_safetensors_meta(&s, "format");
    const char *checks[][2] = {{"model", o->model}, {"act", o->act ? "gelu" : "relu"},
                               {"layernorm", o->layernorm ? "1" : "0"}, {"precision", prec_names[o->prec]},
                               {"optimizer", o->adamw ? "adamw" : "sgd"}};
    if (!fmtv || strcmp(fmtv, "mixprec-checkpoint-1") != 0) {
        st = terr(MP_ECORRUPT, "%s: not a mixprec checkpoint (no format metadata)", path);
        goto out;
    }
    for (int k = 0; k < 5; k++) {
        const char *v = mp_safetensors_meta(&s, checks[k][0]);
        if (!v || strcmp(v, checks[k][1]) != 0) {
            st = terr(MP_EINVAL, "%s: checkpoint has %s '%s', this run asks for '%s'", path, checks[k][0],
                          v ? v : "(none)", checks[k][1]);
            goto out;
        }
    }
    if ((st = mp_mlp_load(m, &s)) != MP_OK) {
        lib_err(st);
        goto out;
    }
    const char *sv = mp_safetensors_meta(&s, "step"), *ov = mp_safetensors_meta(&s, "optim_steps");
    char *end;
    const long stp = sv ? strtol(sv, &end, 10) : -1;
    const unsigned long long ost = ov ? strtoull(ov, NULL, 10) : 0;
    if (!sv || *end || stp < 0) {
        st = terr(MP_ECORRUPT, "%s: bad step metadata", path);
        goto out;
    }
    if ((st = mp_optim_restore(opt, ost)) != MP_OK) {
        lib_err(st);
        goto out;
    }
    for (size_t i = 0; i < mp_optim_count(opt); i++) {
        mp_param *p = mp_optim_param(opt, i);
        float *states[2] = {p->state1, p->state2};
        for (int k = 0; k < 2; k++) {
            if (!states[k]) continue;
            char name[160];
            snprintf(name, sizeof name, "optim.%s.state%d", p->name, k + 1);
            const mp_tensor *t = mp_safetensors_find(&s, name);
            if (!t || t->dtype != MP_F32 || mp_tensor_numel(t) != p->n) {
                st = terr(MP_ECORRUPT, "%s: optimizer state '%s' missing or of the wrong size", path, name);
                goto out;
            }
            memcpy(states[k], t->data, p->n * 4);
        }
    }
    if (sc) {
        uint8_t b[MP_SCALER_BLOB_SIZE];
        if (unhex(b, mp_safetensors_meta(&s, "scaler"), sizeof b) != 0 || mp_scaler_load(sc, b, sizeof b) != MP_OK) {
            st = terr(MP_ECORRUPT, "%s: scaler state missing or damaged", path);
            goto out;
        }
    }
    *step = stp;
out:
    mp_safetensors_free(&s);
    return st;
}

/* ---- diagnostics: frozen weights, histograms, the summary ---- */

/* Fraction of weight-matrix elements equal to the previous snapshot, then a
 * new snapshot; the first call only takes the snapshot and returns -1. */
static double frozen_fraction(mp_optim *opt, uint8_t *snap, size_t *cap) {
    size_t total = 0;
    for (size_t i = 0; i < mp_optim_count(opt); i++) {
        const mp_param *p = mp_optim_param(opt, i);
        if (strstr(p->name, ".weight") && p->name[0] == 'f') total += p->n * (p->master ? 4 : 2);
    }
    const int first = *cap == 0;
    size_t off = 0, same = 0, elems = 0;
    for (size_t i = 0; i < mp_optim_count(opt); i++) {
        const mp_param *p = mp_optim_param(opt, i);
        if (!(strstr(p->name, ".weight") && p->name[0] == 'f')) continue;
        const size_t es = p->master ? 4 : 2;
        const uint8_t *cur = p->master ? (const uint8_t *)p->master : (const uint8_t *)p->half;
        if (!first)
            for (size_t k = 0; k < p->n; k++) same += memcmp(cur + k * es, snap + off + k * es, es) == 0;
        memcpy(snap + off, cur, p->n * es);
        off += p->n * es, elems += p->n;
    }
    *cap = total;
    return first ? -1.0 : (double)same / (double)elems;
}

static size_t weight_bytes(mp_optim *opt) {
    size_t total = 0;
    for (size_t i = 0; i < mp_optim_count(opt); i++) {
        const mp_param *p = mp_optim_param(opt, i);
        if (strstr(p->name, ".weight") && p->name[0] == 'f') total += p->n * (p->master ? 4 : 2);
    }
    return total;
}

enum { HIST_LO = -64, HIST_N = 84 }; /* log2 bins 2^-64 .. 2^19 (ends clamp) */

typedef struct {
    long step;
    float scale;
    uint64_t zeros, bins[HIST_N];
} hist_snap;

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int run(int argc, char **argv) {
    train_opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    if (o.threads) mp_set_threads(o.threads);
    mp_mlp_config mc;
    if (mp_mlp_parse(o.model, &mc) != MP_OK) return cli_usage_error("train", "%s", mp_last_error());
    mc.act = o.act, mc.layernorm = o.layernorm;

    mp_dataset train, test;
    if (mp_fashion_mnist_load(&train, &test, o.data) != MP_OK) return fail(mp_last_error());
    const size_t D = train.rows * train.cols, B = (size_t)o.batch;
    int ret = 1;
    mp_optim *opt = NULL;
    mp_mlp *m = NULL;
    float *x = NULL;
    int32_t *y = NULL;
    FILE *log = NULL;
    double *ms = NULL;
    /* diagnostics, freed at done */
    uint8_t *snap = NULL;
    long *fz_step = NULL, *skip_steps = NULL;
    double *fz = NULL;
    hist_snap *hs = NULL;
    char msg[512];
    if ((size_t)mc.widths[0] != D || mc.widths[mc.nlayers] < train.num_classes) {
        snprintf(msg, sizeof msg, "model %s: the input width must be %zu and the output at least %d", o.model, D,
                 train.num_classes);
        ret = fail(msg);
        goto done;
    }
    if (B * (size_t)o.accum > train.n) {
        ret = fail("batch x accum is larger than the training set");
        goto done;
    }
    const mp_dtype ct = o.prec == P_FP32 ? MP_F32 : o.prec == P_BF16 || o.prec == P_BF16_PURE ? MP_BF16 : MP_F16;
    mp_status st;
    if (o.adamw) {
        mp_adamw_config ac = mp_adamw_defaults();
        ac.lr = o.lr, ac.weight_decay = o.wd;
        st = mp_optim_adamw(&opt, &ac);
    } else {
        mp_sgd_config sc = mp_sgd_defaults();
        sc.lr = o.lr, sc.momentum = o.momentum, sc.weight_decay = o.wd;
        st = mp_optim_sgd(&opt, &sc);
    }
    if (st != MP_OK) {
        ret = cli_usage_error("train", "%s", mp_last_error());
        goto done;
    }
    if (o.prec == P_BF16_PURE) mp_optim_set_rounding(opt, MP_ROUND_STOCHASTIC, (uint64_t)o.seed);
    const size_t eval_b = 1000;
    if (mp_mlp_create(&m, &mc, ct, o.prec == P_BF16_PURE, B > eval_b ? B : eval_b, opt, (uint64_t)o.seed) != MP_OK) {
        ret = fail(mp_last_error());
        goto done;
    }
    const int scaled = o.prec == P_FP16_STATIC || o.prec == P_FP16_DYNAMIC;
    mp_scaler scaler;
    if (scaled) mp_scaler_init(&scaler, &o.scaler);
    long step = 0;
    if (o.init) {
        mp_safetensors s;
        if (mp_safetensors_read(o.init, &s) != MP_OK) {
            ret = fail(mp_last_error());
            goto done;
        }
        const mp_status e = mp_mlp_load(m, &s);
        mp_safetensors_free(&s);
        if (e != MP_OK) {
            snprintf(msg, sizeof msg, "%s: %s", o.init, mp_last_error());
            ret = fail(msg);
            goto done;
        }
    }
    if (o.resume && load_checkpoint(o.resume, m, opt, scaled ? &scaler : NULL, &o, &step) != MP_OK) {
        ret = fail(train_err);
        goto done;
    }
    const long mb_per_epoch = (long)(train.n / B);
    const long steps_per_epoch = mb_per_epoch / o.accum;
    const long total = o.steps ? o.steps : (o.epochs ? o.epochs : 1) * steps_per_epoch;
    if (step >= total) {
        snprintf(msg, sizeof msg, "%s is at step %ld already; ask for more steps than that (this run: %ld)", o.resume,
                 step, total);
        ret = fail(msg);
        goto done;
    }
    x = malloc((B > eval_b ? B : eval_b) * D * sizeof *x);
    y = malloc((B > eval_b ? B : eval_b) * sizeof *y);
    ms = malloc((size_t)(total > 0 ? total : 1) * sizeof *ms);
    sampler smp = {malloc(train.n * sizeof(uint32_t)), -1, train.n, o.shuffle, (uint64_t)o.seed};
    if (!x || !y || !ms || !smp.perm) {
        free(smp.perm);
        ret = fail("out of memory");
        goto done;
    }
    if (o.log && !(log = fopen(o.log, "w"))) {
        snprintf(msg, sizeof msg, "%s: cannot create the log", o.log);
        free(smp.perm);
        ret = fail(msg);
        goto done;
    }
    if (log) {
        fprintf(log, "step,loss,scale,skipped,grad_norm,underflow,overflow,ms");
        for (int l = 0; l < mc.nlayers; l++) fprintf(log, ",underflow_fc%d", l);
        for (int l = 0; l < mc.nlayers; l++) fprintf(log, ",subnormal_fc%d", l);
        fprintf(log, "\n");
    }
    /* diagnostics state */
    snap = o.frozen_every ? malloc(weight_bytes(opt) + 1) : NULL;
    size_t snap_cap = 0;
    const long nfz_max = o.frozen_every ? total / o.frozen_every + 2 : 0;
    const long nh_max = o.hist_every ? total / o.hist_every + 2 : 0;
    long nfz = 0, nh = 0;
    fz_step = calloc((size_t)nfz_max + 1, sizeof *fz_step);
    fz = calloc((size_t)nfz_max + 1, sizeof *fz);
    hs = calloc((size_t)nh_max + 1, sizeof *hs);
    skip_steps = calloc((size_t)total + 1, sizeof *skip_steps);
    if ((o.frozen_every && !snap) || !fz_step || !fz || !hs || !skip_steps) {
        free(smp.perm);
        ret = fail("out of memory");
        goto done;
    }
    if (snap) frozen_fraction(opt, snap, &snap_cap);
    const int tty = isatty(2);
    printf("train: %s %s%s, %s, %s lr %g, batch %zu x %ld, %ld steps (%ld per epoch), seed %ld%s\n", o.model,
           o.act ? "gelu" : "relu", o.layernorm ? " + layernorm" : "", prec_names[o.prec], o.adamw ? "adamw" : "sgd",
           o.lr, B, o.accum, total, steps_per_epoch, o.seed, o.resume ? " (resumed)" : "");
    mp_layer_stats run_stats[MP_MLP_MAX_LAYERS];
    memset(run_stats, 0, sizeof run_stats);
    long skipped = 0, nan_step = -1, done_steps = 0;
    float last_loss = NAN;
    const char *stopped = NULL;
    const double t_start = now();
    for (; step < total; step++, done_steps++) {
        const double t0 = now();
        mp_mlp_reset_stats(m);
        const float S = scaled ? mp_scaler_get_scale(&scaler) : 1.0f;
        const int take_hist = o.hist_every && (step % o.hist_every == 0) && nh < nh_max;
        if (take_hist) {
            hs[nh].step = step + 1, hs[nh].scale = S;
            mp_mlp_histogram(m, hs[nh].bins, HIST_LO, HIST_N, &hs[nh].zeros);
        }
        double lsum = 0;
        for (long k = 0; k < o.accum; k++) {
            const uint32_t *idx = batch_indices(&smp, step * o.accum + k, B, mb_per_epoch);
            mp_dataset_batch(&train, idx, B, x, y);
            float l;
            if (mp_mlp_train_batch(m, x, y, B, S / (float)o.accum, k > 0, &l) != MP_OK) {
                stopped = mp_last_error();
                break;
            }
            lsum += l;
        }
        if (take_hist) mp_mlp_histogram(m, NULL, 0, 0, NULL), nh++;
        if (stopped) break;
        const float loss = (float)(lsum / (double)o.accum);
        if (!isfinite(loss) && nan_step < 0) nan_step = step;
        int found = 0;
        double norm = 0;
        if (scaled) {
            mp_scaler_unscale(&scaler, opt, &found);
            mp_clip_grad_norm(opt, &scaler, o.clip > 0 ? o.clip : 1e300, &norm);
            mp_scaler_step(&scaler, opt, &found);
            if (mp_scaler_update(&scaler, found) == MP_EOVERFLOW) stopped = mp_last_error();
        } else {
            mp_clip_grad_norm(opt, NULL, o.clip > 0 ? o.clip : 1e300, &norm);
            mp_optim_step(opt);
        }
        if (found) skip_steps[skipped] = step + 1;
        skipped += found;
        if (snap && (step + 1) % o.frozen_every == 0 && nfz < nfz_max)
            fz_step[nfz] = step + 1, fz[nfz++] = frozen_fraction(opt, snap, &snap_cap);
        uint64_t under = 0, elems = 0, over = 0;
        for (int l = 0; l < mc.nlayers; l++) {
            const mp_layer_stats *ls = mp_mlp_stats(m, l);
            under += ls->grad.underflow, elems += ls->elements, over += ls->grad.overflow;
            mp_convert_stats_add(&run_stats[l].grad, &ls->grad);
            run_stats[l].elements += ls->elements;
        }
        ms[done_steps] = (now() - t0) * 1e3;
        last_loss = loss;
        if (log) {
            fprintf(log, "%ld,%.6g,%.9g,%d,%.6g,%.6g,%llu,%.3f", step + 1, (double)loss, (double)S, found, norm,
                    elems ? (double)under / (double)elems : 0.0, (unsigned long long)over, ms[done_steps]);
            for (int l = 0; l < mc.nlayers; l++) {
                const mp_layer_stats *ls = mp_mlp_stats(m, l);
                fprintf(log, ",%.6g", ls->elements ? (double)ls->grad.underflow / (double)ls->elements : 0.0);
            }
            for (int l = 0; l < mc.nlayers; l++) {
                const mp_layer_stats *ls = mp_mlp_stats(m, l);
                fprintf(log, ",%.6g", ls->elements ? (double)ls->grad.subnormal / (double)ls->elements : 0.0);
            }
            fprintf(log, "\n");
        }
        const long every = total / 20 > 0 ? total / 20 : 1;
        if (tty) {
            const int w = 30, fill = (int)((double)(step + 1) / (double)total * w);
            fprintf(stderr, "\r  [%-*.*s] %ld/%ld loss %.4f scale %g %.1f steps/s ", w, fill,
                    "==============================", step + 1, total, (double)loss, (double)S,
                    (double)(done_steps + 1) / (now() - t_start));
            fflush(stderr);
        } else if ((step + 1) % every == 0 || step + 1 == total) {
            printf("  step %ld/%ld loss %.4f scale %g%s\n", step + 1, total, (double)loss, (double)S,
                   found ? " (skipped)" : "");
        }
        if (o.eval_every && (step + 1) % o.eval_every == 0 && step + 1 < total) {
            double acc, tl;
            if (evaluate(m, &test, eval_b, x, y, &acc, &tl) == MP_OK) {
                if (tty) fprintf(stderr, "\n");
                printf("  eval at step %ld: test accuracy %.2f%%, loss %.4f\n", step + 1, 100 * acc, tl);
                if (log) fflush(log);
            }
        }
        if (stopped) break;
    }
    if (tty) fprintf(stderr, "\n");
    const double elapsed = now() - t_start;
    free(smp.perm);
    double acc = 0, tl = 0;
    if (evaluate(m, &test, eval_b, x, y, &acc, &tl) != MP_OK) {
        ret = fail(train_err);
        goto done;
    }
    qsort(ms, (size_t)(done_steps > 0 ? done_steps : 0), sizeof *ms, cmp_d);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("result: test accuracy %.2f%%, test loss %.4f, last train loss %.4f\n", 100 * acc, tl, (double)last_loss);
    printf("        %ld steps, %ld skipped, final scale %g, %.2f ms/step (median), %.1f s, peak memory %.0f MiB\n",
           done_steps, skipped, scaled ? (double)mp_scaler_get_scale(&scaler) : 1.0,
           done_steps ? ms[done_steps / 2] : 0.0, elapsed, (double)ru.ru_maxrss / 1024.0);
    printf("        gradient stores per layer (underflow to 0 / subnormal / overflow):");
    for (int l = 0; l < mc.nlayers; l++) {
        const mp_layer_stats *ls = &run_stats[l];
        const double e = ls->elements ? (double)ls->elements : 1.0;
        printf("%s fc%d %.3g%% / %.3g%% / %llu", l ? "," : "", l, 100 * (double)ls->grad.underflow / e,
               100 * (double)ls->grad.subnormal / e, (unsigned long long)ls->grad.overflow);
    }
    printf("\n");
    /* warnings the literature describes */
    char warn[4][256];
    int nw = 0;
    if (nan_step >= 0) snprintf(warn[nw++], sizeof warn[0], "the loss became NaN/inf at step %ld", nan_step + 1);
    if (scaled && o.scaler.dynamic && mp_scaler_get_scale(&scaler) < o.scaler.init_scale / 1024.0f)
        snprintf(warn[nw++], sizeof warn[0], "the loss scale collapsed from %g to %g (%ld skipped steps)",
                 (double)o.scaler.init_scale, (double)mp_scaler_get_scale(&scaler), skipped);
    if (stopped) snprintf(warn[nw++], sizeof warn[0], "stopped: %.230s", stopped);
    uint64_t tot_under = 0, tot_elems = 0;
    for (int l = 0; l < mc.nlayers; l++) tot_under += run_stats[l].grad.underflow, tot_elems += run_stats[l].elements;
    const double frozen_final = nfz ? fz[nfz - 1] : 0.0;
    if (ct == MP_F16 && tot_elems && (double)tot_under / (double)tot_elems > 0.01)
        snprintf(warn[nw++], sizeof warn[0], "%.2f%% of the gradient values stored in fp16 underflowed to zero%s",
                 100.0 * (double)tot_under / (double)tot_elems, scaled ? "" : ": use loss scaling (fp16-dynamic)");
    for (int k = 0; k < nw; k++) printf("warning: %s\n", warn[k]);
    if (o.summary) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "precision", prec_names[o.prec]);
        cJSON_AddStringToObject(j, "model", o.model);
        cJSON_AddStringToObject(j, "compute_format", mp_format(ct)->name);
        cJSON_AddNumberToObject(j, "steps", (double)done_steps);
        cJSON_AddNumberToObject(j, "test_accuracy", acc);
        cJSON_AddNumberToObject(j, "test_loss", tl);
        cJSON_AddNumberToObject(j, "last_train_loss", (double)last_loss);
        cJSON_AddNumberToObject(j, "skipped", (double)skipped);
        cJSON *sk = cJSON_AddArrayToObject(j, "skipped_steps");
        for (long k = 0; k < skipped; k++) cJSON_AddItemToArray(sk, cJSON_CreateNumber((double)skip_steps[k]));
        cJSON_AddNumberToObject(j, "final_scale", scaled ? (double)mp_scaler_get_scale(&scaler) : 1.0);
        cJSON_AddNumberToObject(j, "ms_per_step", done_steps ? ms[done_steps / 2] : 0.0);
        cJSON_AddNumberToObject(j, "peak_memory_mib", (double)ru.ru_maxrss / 1024.0);
        cJSON_AddNumberToObject(j, "underflow_fraction", tot_elems ? (double)tot_under / (double)tot_elems : 0.0);
        cJSON_AddNumberToObject(j, "frozen_fraction", frozen_final);
        cJSON_AddNumberToObject(j, "frozen_every", (double)o.frozen_every);
        cJSON *ly = cJSON_AddArrayToObject(j, "layers");
        for (int l = 0; l < mc.nlayers; l++) {
            const mp_layer_stats *ls = &run_stats[l];
            const double e = ls->elements ? (double)ls->elements : 1.0;
            cJSON *o1 = cJSON_CreateObject();
            char nm[16];
            snprintf(nm, sizeof nm, "fc%d", l);
            cJSON_AddStringToObject(o1, "name", nm);
            cJSON_AddNumberToObject(o1, "underflow_fraction", (double)ls->grad.underflow / e);
            cJSON_AddNumberToObject(o1, "subnormal_fraction", (double)ls->grad.subnormal / e);
            cJSON_AddNumberToObject(o1, "overflow", (double)ls->grad.overflow);
            cJSON_AddItemToArray(ly, o1);
        }
        cJSON *fr = cJSON_AddArrayToObject(j, "frozen");
        for (long k = 0; k < nfz; k++) {
            cJSON *o1 = cJSON_CreateObject();
            cJSON_AddNumberToObject(o1, "step", (double)fz_step[k]);
            cJSON_AddNumberToObject(o1, "fraction", fz[k]);
            cJSON_AddItemToArray(fr, o1);
        }
        const mp_format_info *fi = mp_format(ct == MP_F32 ? MP_F16 : ct); /* fp32 runs: against fp16's range */
        cJSON *hj = cJSON_AddObjectToObject(j, "histograms");
        cJSON_AddNumberToObject(hj, "log2_lo", HIST_LO);
        cJSON_AddStringToObject(hj, "limits_of", fi->name);
        cJSON_AddNumberToObject(hj, "min_subnormal", fi->min_subnormal);
        cJSON_AddNumberToObject(hj, "min_normal", fi->min_normal);
        cJSON_AddNumberToObject(hj, "max", fi->max);
        cJSON *snaps = cJSON_AddArrayToObject(hj, "snapshots");
        for (long k = 0; k < nh; k++) {
            cJSON *o1 = cJSON_CreateObject();
            cJSON_AddNumberToObject(o1, "step", (double)hs[k].step);
            cJSON_AddNumberToObject(o1, "scale", (double)hs[k].scale);
            cJSON_AddNumberToObject(o1, "zeros", (double)hs[k].zeros);
            cJSON *c = cJSON_AddArrayToObject(o1, "counts");
            for (int b = 0; b < HIST_N; b++) cJSON_AddItemToArray(c, cJSON_CreateNumber((double)hs[k].bins[b]));
            cJSON_AddItemToArray(snaps, o1);
        }
        cJSON *wa = cJSON_AddArrayToObject(j, "warnings");
        for (int k = 0; k < nw; k++) cJSON_AddItemToArray(wa, cJSON_CreateString(warn[k]));
        char *text = cJSON_Print(j);
        cJSON_Delete(j);
        FILE *f = text ? fopen(o.summary, "w") : NULL;
        const int okw = f && fputs(text, f) >= 0;
        if (f && fclose(f) != 0) ret = 1;
        free(text);
        if (!okw) {
            snprintf(msg, sizeof msg, "%s: cannot write the summary", o.summary);
            ret = fail(msg);
            goto done;
        }
    }
    if (o.dump_grads) { /* the weight gradients of the last step, as the optimizer saw them */
        mp_tensor gt[MP_MLP_MAX_LAYERS];
        size_t ng = 0;
        for (size_t i = 0; i < mp_optim_count(opt) && ng < MP_MLP_MAX_LAYERS; i++) {
            const mp_param *p = mp_optim_param(opt, i);
            if (p->name[0] != 'f' || !strstr(p->name, ".weight")) continue;
            mp_tensor *t = &gt[ng++];
            memset(t, 0, sizeof *t);
            snprintf(t->name, sizeof t->name, "%s.grad", p->name);
            t->dtype = MP_F32, t->ndim = 1, t->shape[0] = p->n, t->nbytes = p->n * 4, t->data = p->grad;
        }
        if (mp_safetensors_write(o.dump_grads, gt, ng, NULL) != MP_OK) {
            ret = fail(mp_last_error());
            goto done;
        }
        printf("gradients of step %ld written to %s\n", step, o.dump_grads);
    }
    if (o.save) {
        if (save_checkpoint(o.save, m, opt, scaled ? &scaler : NULL, &o, step) != MP_OK) {
            ret = fail(train_err);
            goto done;
        }
        printf("saved %s (step %ld)\n", o.save, step);
    }
    ret = stopped ? 1 : 0;
done:
    if (log && fclose(log) != 0) ret = fail("the log could not be written");
    free(x), free(y), free(ms);
    free(snap), free(fz_step), free(fz), free(hs), free(skip_steps);
    mp_mlp_free(m);
    mp_optim_free(opt);
    mp_dataset_free(&train), mp_dataset_free(&test);
    return ret;
}

const cli_command cmd_train = {"train", "train an MLP on Fashion-MNIST in fp32, fp16, fp16 + loss scaling, bf16", usage, run};
