/* run.c - one training run: options, the library's trainer, logs, results. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "dist.h"
#include "run.h"
#include "sample.h"
#include "wire.h"

const char run_options_help[] =
    "model and data\n"
    "  --model SPEC           mlp:784-1024-1024-10 (widths; input 784, output >= 10) or\n"
    "                         gpt:L-H-C-T (layers, heads, width, context), e.g. gpt:4-4-128-128\n"
    "  --act relu|gelu        MLP activation (relu)\n"
    "  --layernorm            MLP: layer norm after each hidden layer\n"
    "  --gelu tanh|erf        GPT: GELU's tanh approximation (GPT-2, llm.c; default) or erf (nanoGPT)\n"
    "  --data DIR             MLP: the four Fashion-MNIST files (.gz or plain)\n"
    "  --data text:PATH[,PATH...]  GPT: text files or directories (default: the fortunes\n"
    "                         corpus, " MP_TEXT_DEFAULT_CORPUS ")\n"
    "precision\n"
    "  --precision MODE       fp32 (default); fp16: fp16 compute, NO loss scaling;\n"
    "                         fp16-static[:S]: fixed scale S (65536); fp16-dynamic:\n"
    "                         the AMP recipe; bf16: bf16 compute, fp32 master\n"
    "                         weights; bf16-pure: bf16 weights only, stochastic\n"
    "                         rounding; fp8-delayed, fp8-current, mxfp8, nvfp4:\n"
    "                         bf16 with the Linear layers' GEMMs on fp8/fp4\n"
    "                         operands (docs/TRAINING.md).\n"
    "  --master-weights fp32|none  fp32 (default): fp32 master weights and optimizer\n"
    "                         state; none: weights and both moments only in the\n"
    "                         compute format (fp16/bf16), each update computed in\n"
    "                         fp32 and rounded to nearest (updates under half an ulp\n"
    "                         are lost), as torch.optim on model.half(). Also as a\n"
    "                         mode suffix: fp16-dynamic+master-weights=none.\n"
    "  --mx-rule floor|rceil  mxfp8's block-scale rule: rceil (default, as Transformer\n"
    "                         Engine and cuBLAS) or floor (OCP MX v1.0, torchao's default)\n"
    "  --reductions fp32|half fp32 (default): softmax, layer-norm statistics and\n"
    "                         their backward sums, the loss's log-sum-exp, bias-\n"
    "                         gradient column sums and (with --clip) the gradient\n"
    "                         norm use fp32 accumulators; half: a naive loop in the\n"
    "                         compute format, every partial result rounded. Also as\n"
    "                         a suffix: fp16-dynamic+reductions=half. Matrix\n"
    "                         multiplies accumulate in fp32 in every mode (as tensor\n"
    "                         cores do). fp16-naive is fp16 with master weights\n"
    "                         none, reductions half and no loss scaling.\n"
    CLI_SCALER_HELP
    "optimization\n"
    "  --optimizer sgd|adamw  (adamw)\n"
    "  --lr LR                (peak) learning rate (1e-3)\n"
    "  --lr-schedule constant|cosine  (constant); cosine decays to --min-lr at the last step\n"
    "  --warmup N             linear warmup steps (0), as nanoGPT: lr (step+1) / (N+1)\n"
    "  --min-lr LR            the end of the cosine schedule (lr / 10)\n"
    "  --betas B1,B2          AdamW betas (0.9,0.999)\n"
    "  --momentum M           SGD momentum (0)\n"
    "  --weight-decay WD      (0.01 for adamw, 0 for sgd); the GPT decays only its\n"
    "                         2-D weights (not biases or layer norms), as nanoGPT\n"
    "  --batch B              micro-batch: examples (256) or sequences (16)\n"
    "  --accum N              micro-batches per step (1)\n"
    "  --epochs E | --steps N length (1 epoch): an epoch is 60000 / (B N) steps for the\n"
    "                         MLP, training bytes / (B T N) for the GPT\n"
    "  --clip NORM            clip the global gradient norm (unscaled gradients)\n"
    "  --seed S               initialisation and shuffling (1)\n"
    "  --no-shuffle           MLP: batch k is examples kB .. kB+B-1 in file order; GPT: row b\n"
    "                         of micro-batch s is the window at ((sB + b) T) mod (N_train - T)\n"
    "  --threads N            threads for the kernels\n"
    "files\n"
    "  --init FILE            initial weights (safetensors, PyTorch's names)\n"
    "  --save FILE            checkpoint at the end: weights, optimizer state, scaler, step\n"
    "  --save-dtype fp32|fp16|bf16  the weights' dtype in --save (fp32; a half file\n"
    "                         is smaller but does not resume bit-identically)\n"
    "  --resume FILE          continue a checkpoint (bit-identical to not stopping)\n"
    "  --log FILE             CSV, one row per step (docs/LOGS.md)\n"
    "  --eval-every N         evaluation every N steps (0: only at the end)\n"
    "  --eval-windows K       GPT: evaluate on the first K validation windows (0: all)\n"
    "diagnostics\n"
    "  --summary FILE         JSON: results, per-tensor underflow, skipped steps, lost and\n"
    "                         dead weight gradients, lost updates, gradient histograms,\n"
    "                         warnings (docs/LOGS.md)\n"
    "  --hist-every N         MLP: log2 histogram of the weight gradients every N steps (0: off)\n"
    "  --dump-grads FILE      the last step's fp32 weight gradients (unscaled) as safetensors\n"
    "                         (NAME.grad), for mixprec underflow --from FILE\n"
    "data parallelism (mpirun -np N mixprec train ...: N ranks, each on its contiguous share\n"
    "B / N of every micro-batch, the gradients summed before the unscale; rank 0 writes)\n"
    "  --check-every K        compare the ranks' weights, optimizer and scaler state (a CRC-32)\n"
    "                         every K steps (100; 0: only at the end); a difference stops the run\n"
    "  --allreduce fp32|bf16|fp16  the gradients' format in the all-reduce (fp32); bf16 and fp16\n"
    "                         send half the bytes: each combine widens, adds in fp32 and rounds\n"
    "                         once; an overflow on the wire is an overflow (with loss scaling:\n"
    "                         the step is skipped) and is reported (docs/DISTRIBUTED.md)\n";

static int is_gpt(const char *model) { return strncmp(model, "gpt:", 4) == 0; }

mp_status run_switches(const run_opts *o, mp_precision *p) {
    mp_status st = o->master_given ? mp_precision_set_master_weights(p, o->master) : MP_OK;
    if (st == MP_OK && o->reductions_given) st = mp_precision_set_reductions(p, o->reductions);
    if (st == MP_OK && o->mx_rule_given) st = mp_precision_set_mx_rule(p, o->mx_rule);
    return st;
}

int run_parse(const char *cmd, int argc, char **argv, run_opts *o) {
    memset(o, 0, sizeof *o);
    o->model = "mlp:784-1024-1024-10", o->adamw = 1, o->shuffle = 1, o->lr = 1e-3, o->wd = -1, o->min_lr = -1;
    o->beta1 = 0.9, o->beta2 = 0.999, o->batch = 0, o->accum = 1, o->seed = 1, o->check_every = 100;
    o->scaler = mp_scaler_defaults();
    mp_status ps = mp_precision_parse("fp32", &o->prec, NULL);
    (void)ps;
    snprintf(o->prec_name, sizeof o->prec_name, "fp32");
    float static_scale = 0;
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
        if ((rc = cli_scaler_option(cmd, argc, argv, &i, &o->scaler)) != 0) {
            if (rc != 1) return rc;
        } else if (!strcmp(a, "--model")) { VAL(); o->model = v; }
        else if (!strcmp(a, "--act")) {
            VAL();
            if (!strcmp(v, "relu")) o->act = MP_ACT_RELU;
            else if (!strcmp(v, "gelu")) o->act = MP_ACT_GELU;
            else return cli_usage_error(cmd, "--act is relu or gelu, not '%s'", v);
        } else if (!strcmp(a, "--gelu")) {
            VAL();
            if (!strcmp(v, "tanh")) o->gelu = MP_GELU_TANH;
            else if (!strcmp(v, "erf")) o->gelu = MP_GELU_ERF;
            else return cli_usage_error(cmd, "--gelu is tanh or erf, not '%s'", v);
        } else if (!strcmp(a, "--layernorm")) o->layernorm = 1;
        else if (!strcmp(a, "--data")) { VAL(); o->data = v; }
        else if (!strcmp(a, "--precision")) {
            VAL();
            if (mp_precision_parse(v, &o->prec, &static_scale) != MP_OK)
                return cli_usage_error(cmd, "%s", mp_last_error());
            memcpy(o->prec_name, o->prec.label, sizeof o->prec_name);
            if (static_scale > 0) o->scaler.init_scale = static_scale;
        } else if (!strcmp(a, "--optimizer")) {
            VAL();
            if (!strcmp(v, "sgd")) o->adamw = 0;
            else if (!strcmp(v, "adamw")) o->adamw = 1;
            else return cli_usage_error(cmd, "--optimizer is sgd or adamw, not '%s'", v);
        } else if (!strcmp(a, "--lr")) { NUM(o->lr, 0, 1e6); }
        else if (!strcmp(a, "--min-lr")) { NUM(o->min_lr, 0, 1e6); }
        else if (!strcmp(a, "--lr-schedule")) {
            VAL();
            if (!strcmp(v, "constant")) o->schedule = MP_LR_CONSTANT;
            else if (!strcmp(v, "cosine")) o->schedule = MP_LR_COSINE;
            else return cli_usage_error(cmd, "--lr-schedule is constant or cosine, not '%s'", v);
        } else if (!strcmp(a, "--warmup")) { INT(o->warmup, 0, 100000000); }
        else if (!strcmp(a, "--betas")) {
            VAL();
            char *end, *end2;
            const double b1 = strtod(v, &end), b2 = *end == ',' ? strtod(end + 1, &end2) : -1;
            if (*end != ',' || end2 == end + 1 || *end2 || !(b1 >= 0 && b1 < 1) || !(b2 >= 0 && b2 < 1))
                return cli_usage_error(cmd, "--betas wants B1,B2 in [0, 1), not '%s'", v);
            o->beta1 = b1, o->beta2 = b2;
        } else if (!strcmp(a, "--momentum")) { NUM(o->momentum, 0, 1e6); }
        else if (!strcmp(a, "--weight-decay")) { NUM(o->wd, 0, 1e6); }
        else if (!strcmp(a, "--clip")) { NUM(o->clip, 1e-30, 1e30); }
        else if (!strcmp(a, "--batch")) { INT(o->batch, 1, 60000); }
        else if (!strcmp(a, "--accum")) { INT(o->accum, 1, 60000); }
        else if (!strcmp(a, "--epochs")) { INT(o->epochs, 1, 100000); }
        else if (!strcmp(a, "--steps")) { INT(o->steps, 1, 100000000); }
        else if (!strcmp(a, "--eval-every")) { INT(o->eval_every, 0, 100000000); }
        else if (!strcmp(a, "--eval-windows")) { INT(o->eval_windows, 0, 100000000); }
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
            if (mp_dtype_parse(v, &o->save_dtype) != MP_OK ||
                (o->save_dtype != MP_F32 && o->save_dtype != MP_F16 && o->save_dtype != MP_BF16))
                return cli_usage_error(cmd, "--save-dtype is fp32, fp16 or bf16, not '%s'", v);
        }
        else if (!strcmp(a, "--resume")) { VAL(); o->resume = v; }
        else if (!strcmp(a, "--log")) { VAL(); o->log = v; }
        else if (!strcmp(a, "--summary")) { VAL(); o->summary = v; }
        else if (!strcmp(a, "--dump-grads")) { VAL(); o->dump_grads = v; }
        else if (!strcmp(a, "--master-weights")) {
            VAL();
            if (!strcmp(v, "fp32")) o->master = MP_MASTER_FP32;
            else if (!strcmp(v, "none")) o->master = MP_MASTER_NONE;
            else return cli_usage_error(cmd, "--master-weights is fp32 or none, not '%s'", v);
            o->master_given = 1;
        }
        else if (!strcmp(a, "--reductions")) {
            VAL();
            if (!strcmp(v, "fp32")) o->reductions = MP_REDUCE_FP32;
            else if (!strcmp(v, "half")) o->reductions = MP_REDUCE_HALF;
            else return cli_usage_error(cmd, "--reductions is fp32 or half, not '%s'", v);
            o->reductions_given = 1;
        }
        else if (!strcmp(a, "--mx-rule")) {
            VAL();
            if (mp_mx_rule_parse(v, &o->mx_rule) != MP_OK) return cli_usage_error(cmd, "--mx-rule is floor or rceil, not '%s'", v);
            o->mx_rule_given = 1;
        }
        else if (!strcmp(a, "--hist-every")) { INT(o->hist_every, 0, 100000000); }
        else if (!strcmp(a, "--check-every")) { INT(o->check_every, 0, 100000000); }
        else if (!strcmp(a, "--allreduce")) {
            VAL();
            if (wire_parse(v, &o->allreduce) != MP_OK)
                return cli_usage_error(cmd, "--allreduce is fp32, bf16 or fp16, not '%s'", v);
        }
        else if (!strcmp(a, "--frozen-every"))
            return cli_usage_error(cmd, "--frozen-every is gone (it counted dead units): --log and --summary have "
                                        "lost_updates and dead_gradients (and lost_gradients) instead");
        else return cli_usage_error(cmd, "unknown option '%s'", a);
#undef VAL
#undef NUM
#undef INT
    }
    if (strcmp(cmd, "compare") != 0) { /* compare applies them to each of its precisions */
        if (run_switches(o, &o->prec) != MP_OK) return cli_usage_error(cmd, "%s", mp_last_error());
        memcpy(o->prec_name, o->prec.label, sizeof o->prec_name);
    }
    if (o->epochs && o->steps) return cli_usage_error(cmd, "--epochs and --steps exclude each other");
    if (o->init && o->resume) return cli_usage_error(cmd, "--init and --resume exclude each other");
    if (o->wd < 0) o->wd = o->adamw ? 0.01 : 0.0;
    if (o->min_lr < 0) o->min_lr = o->lr / 10;
    if (!o->batch) o->batch = is_gpt(o->model) ? 16 : 256;
    if (o->batch % dist_size() != 0)
        return cli_usage_error(cmd, "--batch %ld does not split into %d equal shares: with mpirun -np %d each rank takes "
                               "its contiguous share of every micro-batch, so N must divide --batch", o->batch,
                               dist_size(), dist_size());
    if (o->data && is_gpt(o->model) != (strncmp(o->data, "text:", 5) == 0))
        return cli_usage_error(cmd, is_gpt(o->model) ? "a GPT trains on text: --data text:PATH[,PATH...]"
                                                      : "an MLP trains on Fashion-MNIST: --data DIR");
    mp_scaler s;
    mp_scaler_config sc = o->scaler;
    sc.dynamic = o->prec.scaling == MP_SCALING_DYNAMIC;
    if (o->prec.scaling != MP_SCALING_NONE && mp_scaler_init(&s, &sc) != MP_OK)
        return cli_usage_error(cmd, "%s", mp_last_error());
    return 0;
}

void run_result_free(run_result *r) {
    if (!r) return;
    free(r->loss), free(r->scale), free(r->skipped), free(r->tensor_names), free(r->tensor_underflow);
    free(r->tensor_totals), free(r->skips), free(r->skip_text);
    free(r->eval_steps), free(r->eval_losses), free(r->sample);
    free(r->quant_names), free(r->quant_totals), free(r->quant_scale), free(r->quant_saturated), free(r->quant_flushed);
    memset(r, 0, sizeof *r);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Peak resident memory of this run: the kernel's high-water mark, reset at
 * the start of each run (so compare measures each mode on its own). */
static void peak_reset(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f) fputs("5", f), fclose(f);
}

static double peak_mib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &kb) == 1) break;
    if (f) fclose(f);
    if (kb < 0) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        kb = ru.ru_maxrss;
    }
    return (double)kb / 1024.0;
}

typedef struct {
    long step;
    float scale;
    uint64_t zeros, bins[RUN_HIST_N];
} hist_snap;

/* ---- the run ---- */

/* Everything a run allocates, freed in one place. */
typedef struct {
    mp_dataset train, test;
    mp_text text;
    mp_optim *opt;
    mp_model model;
    mp_mlp *mlp;
    mp_gpt *gpt;
    mp_loader loader;
    mp_trainer *tr;
    int log_fd;          /* the CSV log; -1: none */
    off_t log_size;      /* its complete rows, in bytes */
    long log_rows;
    char *row;           /* the row being written */
    size_t row_len;
    double *ms;
    double *mpi_ms;      /* with ranks: each step's time in MPI */
    cJSON *skips; /* the skipped steps, for the summary: {step, scale, tensors, first_activation} */
    hist_snap *hs;
    mp_named_qtensor *qt; /* with a recipe: the quantized tensors (nq) */
    size_t nq;
    run_result res;
} run_state;

static void state_free(run_state *s) {
    mp_trainer_free(s->tr);
    mp_loader_free(&s->loader);
    mp_model_free(&s->model);
    mp_optim_free(s->opt);
    mp_dataset_free(&s->train), mp_dataset_free(&s->test);
    mp_text_free(&s->text);
    free(s->ms), free(s->mpi_ms), free(s->hs), free(s->qt);
    cJSON_Delete(s->skips);
}

/* A step that was skipped, or whose loss or gradient norm is not finite: one
 * console line naming where the inf/NaN was, e.g. "step 412 skipped, scale
 * 65536 -> 32768: inf in transformer.h.3.mlp.c_fc.weight (grad) and 2 more;
 * first overflowing activation h.3.mlp.c_fc", and, if it was skipped, an
 * entry of the summary's "skipped" array. Returns nonzero when out of memory. */
static int report_nonfinite(FILE *out, int tty, cJSON *skips, const mp_step_info *si, const mp_trainer *tr,
                            run_result *res) {
    char where[512];
    size_t k = 0;
#define ADD(...) k += (size_t)snprintf(where + k, k < sizeof where ? sizeof where - k : 0, __VA_ARGS__)
    if (si->nbad) {
        ADD("%s in %s (grad)", si->bad_grad_inf ? "inf" : "NaN", si->bad_grads[0]);
        if (si->nbad > 1) ADD(" and %zu more", si->nbad - 1);
    } else {
        ADD("no gradient held inf or NaN");
    }
    if (si->first_activation) ADD("; first overflowing activation %s", si->first_activation);
#undef ADD
    if (tty) fputc('\n', stderr);
    const mp_scaler *sc = mp_trainer_scaler(tr);
    if (si->skipped)
        fprintf(out, "  step %ld skipped, scale %g -> %g: %s\n", si->step, (double)si->scale,
                sc ? (double)mp_scaler_get_scale(sc) : 1.0, where);
    else
        fprintf(out, "  step %ld: loss %g, gradient norm %g: %s\n", si->step, (double)si->loss, si->grad_norm, where);
    if (!si->skipped) return 0;
    if (res->nskips < RUN_SKIPS_KEPT && res->skips && res->skip_text) { /* for the report */
        snprintf(res->skip_text[res->nskips], sizeof res->skip_text[0], "%s", where);
        res->skips[res->nskips] = (mp_report_skip){si->step, (double)si->scale, res->skip_text[res->nskips]};
        res->nskips++;
    }
    cJSON *e = cJSON_CreateObject(), *names = cJSON_CreateArray();
    if (!e || !names || !cJSON_AddItemToArray(skips, e)) return cJSON_Delete(e), cJSON_Delete(names), 1;
    cJSON_AddNumberToObject(e, "step", (double)si->step);
    cJSON_AddNumberToObject(e, "scale", (double)si->scale);
    cJSON_AddItemToObject(e, "tensors", names);
    for (size_t i = 0; i < si->nbad && i < MP_STEP_NAMES; i++) cJSON_AddItemToArray(names, cJSON_CreateString(si->bad_grads[i]));
    if (si->nbad > MP_STEP_NAMES) cJSON_AddNumberToObject(e, "tensors_total", (double)si->nbad);
    if (si->first_activation) cJSON_AddStringToObject(e, "first_activation", si->first_activation);
    else cJSON_AddNullToObject(e, "first_activation");
    return 0;
}

/* With ranks (dist.h), failures before training are held back until the
 * ranks agree on them (agree_ready): the lowest rank that failed says why,
 * once. */
static int deferring;
static char deferred[1024];

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...) {
    char msg[960];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char rank[32] = "";
    if (dist_size() > 1 && dist_rank() > 0) snprintf(rank, sizeof rank, "rank %d: ", dist_rank());
    if (!deferring) fprintf(stderr, "mixprec train: %s%s\n", rank, msg);
    else if (!deferred[0]) snprintf(deferred, sizeof deferred, "mixprec train: %s%s\n", rank, msg);
    return 1;
}

/* Every rank's status before training (rc: 0, 1 or CLI_USAGE): the lowest
 * rank that failed prints its message and every rank returns its status. */
static int agree_ready(int rc) {
    if (dist_size() == 1) return rc;
    int first;
    const int agreed = dist_agree(rc, &first);
    if (agreed && first == dist_rank()) {
        if (deferred[0]) fputs(deferred, stderr);
        else if (first != 0) /* a usage error, which only rank 0 prints */
            fprintf(stderr, "mixprec train: rank %d: its options could not be used (exit status %d)\n", first, rc);
    }
    deferring = 0, deferred[0] = '\0';
    return agreed;
}

/* A failure of this rank alone during training: the others wait for it in a
 * reduction, so the job ends (one process: returns 1). */
static int fail_alone(void) {
    dist_abort(1);
    return 1;
}

/* Model, data, optimizer, loader and trainer from the options. */
static int setup(const run_opts *o, run_state *s, size_t *T, long *steps_per_epoch) {
    const int gpt = is_gpt(o->model);
    mp_mlp_config mc;
    mp_gpt_config gc;
    if ((gpt ? mp_gpt_parse(o->model, &gc) : mp_mlp_parse(o->model, &mc)) != MP_OK)
        return cli_usage_error("train", "%s", mp_last_error());
    const size_t B = (size_t)o->batch;
    static const char unreadable[] = "/nonexistent/mixprec-fault-injected"; /* MIXPREC_FAULT_DIST_READ (dist.h) */
    const int fault = dist_fault_read();
    if (gpt) {
        gc.gelu = o->gelu;
        *T = (size_t)gc.block_size;
        if (mp_text_load(&s->text, fault ? unreadable : o->data ? o->data + 5 : MP_TEXT_DEFAULT_CORPUS) != MP_OK ||
            mp_text_check(&s->text, *T) != MP_OK)
            return fail("%s", mp_last_error());
        const double per = (double)B * (double)*T * (double)o->accum;
        *steps_per_epoch = (long)((double)s->text.n_train / per) > 0 ? (long)((double)s->text.n_train / per) : 1;
    } else {
        mc.act = o->act, mc.layernorm = o->layernorm;
        *T = 1;
        if (mp_fashion_mnist_load(&s->train, &s->test, fault ? unreadable : o->data) != MP_OK)
            return fail("%s", mp_last_error());
        const size_t D = s->train.rows * s->train.cols;
        if ((size_t)mc.widths[0] != D || mc.widths[mc.nlayers] < s->test.num_classes)
            return fail("model %s: the input width must be %zu and the output at least %d", o->model, D,
                        s->train.num_classes);
        if (B * (size_t)o->accum > s->train.n) return fail("batch x accum is larger than the training set");
        *steps_per_epoch = (long)(s->train.n / B) / o->accum;
    }
    mp_status st;
    if (o->adamw) {
        mp_adamw_config ac = mp_adamw_defaults();
        ac.lr = o->lr, ac.weight_decay = o->wd, ac.beta1 = o->beta1, ac.beta2 = o->beta2;
        st = mp_optim_adamw(&s->opt, &ac);
    } else {
        mp_sgd_config sc = mp_sgd_defaults();
        sc.lr = o->lr, sc.momentum = o->momentum, sc.weight_decay = o->wd;
        st = mp_optim_sgd(&s->opt, &sc);
    }
    if (st != MP_OK) return cli_usage_error("train", "%s", mp_last_error());
    if (o->prec.rounding == MP_ROUND_STOCHASTIC) mp_optim_set_rounding(s->opt, MP_ROUND_STOCHASTIC, (uint64_t)o->seed);
    const mp_dtype ct = o->prec.compute;
    const mp_master_weights pure = o->prec.master_weights;
    if (gpt) {
        if (mp_gpt_create(&s->gpt, &gc, ct, pure, B, s->opt, (uint64_t)o->seed) != MP_OK)
            return fail("%s", mp_last_error());
        s->model = mp_gpt_model(s->gpt);
        mp_recipe r;
        if (mp_precision_recipe(&o->prec, &r) != MP_OK || mp_gpt_set_recipe(s->gpt, &r, (uint64_t)o->seed) != MP_OK)
            return fail("%s", mp_last_error());
        st = mp_text_loader(&s->loader, &s->text, B, *T, o->shuffle, (uint64_t)o->seed, (size_t)o->eval_windows);
    } else {
        const size_t eval_b = 1000;
        if (mp_mlp_create(&s->mlp, &mc, ct, pure, B > eval_b ? B : eval_b, s->opt, (uint64_t)o->seed) != MP_OK)
            return fail("%s", mp_last_error());
        s->model = mp_mlp_model(s->mlp);
        mp_recipe r;
        if (mp_precision_recipe(&o->prec, &r) != MP_OK || mp_mlp_set_recipe(s->mlp, &r, (uint64_t)o->seed) != MP_OK)
            return fail("%s", mp_last_error());
        st = mp_image_loader(&s->loader, &s->train, &s->test, B, o->shuffle, (uint64_t)o->seed, eval_b);
    }
    if (st != MP_OK) return fail("%s", mp_last_error());
    return 0;
}

/* The metadata a checkpoint keeps about the model, checked on resume. */
static void model_meta(const run_opts *o, const char **kv) {
    int k = 0;
    kv[k++] = "model", kv[k++] = o->model;
    if (is_gpt(o->model)) {
        kv[k++] = "gelu", kv[k++] = o->gelu == MP_GELU_ERF ? "erf" : "tanh";
    } else {
        kv[k++] = "act", kv[k++] = o->act ? "gelu" : "relu";
        kv[k++] = "layernorm", kv[k++] = o->layernorm ? "1" : "0";
    }
    kv[k++] = "optimizer", kv[k++] = o->adamw ? "adamw" : "sgd";
    kv[k] = NULL;
}

static double frac(uint64_t a, uint64_t b) { return b ? (double)a / (double)b : 0.0; }

/* The formats in words: "bf16", or with a recipe its element formats as "bf16 + fp8 e4m3/e5m2" (inputs and
 * weights / gradients), "bf16 + mxfp8 e4m3", "bf16 + nvfp4 e2m1". */
static void format_label(char *out, size_t cap, mp_dtype compute, const mp_recipe *r) {
    const char *c = mp_format(compute)->name;
    if (!r) {
        snprintf(out, cap, "%s", c);
        return;
    }
    const mp_dtype a = mp_qrole_format(r, MP_QROLE_INPUT), g = mp_qrole_format(r, MP_QROLE_GRAD);
    const int fp8 = r->kind == MP_RECIPE_FP8_DELAYED || r->kind == MP_RECIPE_FP8_CURRENT;
    snprintf(out, cap, "%s + %s %s%s%s", c, fp8 ? "fp8" : mp_recipe_name(r->kind), mp_format(a)->name, a == g ? "" : "/",
             a == g ? "" : mp_format(g)->name);
}

/* The per-tensor count columns of the CSV, in order: NAME_TENSOR, then the value. */
enum { TCOLS = 7 };
static const char *const tcol_names[TCOLS] = {"underflow",     "subnormal", "act_overflow", "act_underflow",
                                              "act_subnormal", "overflow",  "nan"};
static void tcol_value(FILE *log, const mp_tensor_stats *t, int c) {
    switch (c) {
    case 0: fprintf(log, ",%.6g", frac(t->bwd.underflow, t->bwd_elements)); break;
    case 1: fprintf(log, ",%.6g", frac(t->bwd.subnormal, t->bwd_elements)); break;
    case 2: fprintf(log, ",%llu", (unsigned long long)t->fwd.overflow); break;
    case 3: fprintf(log, ",%.6g", frac(t->fwd.underflow, t->fwd_elements)); break;
    case 4: fprintf(log, ",%.6g", frac(t->fwd.subnormal, t->fwd_elements)); break;
    case 5: fprintf(log, ",%llu", (unsigned long long)t->bwd.overflow); break;
    default: fprintf(log, ",%llu", (unsigned long long)(t->fwd.nan + t->bwd.nan)); break;
    }
}

/* The saturated and flushed shares of all qt's values quantized in the step. */
static void quant_step(const mp_named_qtensor *qt, size_t nq, double *sat, double *flush) {
    uint64_t n = 0, ns = 0, nf = 0;
    for (size_t i = 0; i < nq; i++) n += qt[i].q->stats.n, ns += qt[i].q->stats.saturated, nf += qt[i].q->stats.flushed;
    *sat = frac(ns, n), *flush = frac(nf, n);
}

/* The quantized tensors' columns (a run with a recipe): the step's shares, then per tensor amax, scale, shares. */
static const char *const qcol_names[4] = {"qamax", "qscale", "qsat", "qflush"};

static void csv_quant_header(FILE *log, const mp_named_qtensor *qt, size_t nq) {
    if (nq) fprintf(log, ",quant_saturated,quant_flushed");
    for (int c = 0; c < 4; c++)
        for (size_t i = 0; i < nq; i++) fprintf(log, ",%s_%s", qcol_names[c], qt[i].name);
}

static void csv_quant_row(FILE *log, const mp_named_qtensor *qt, size_t nq) {
    if (!nq) return;
    double sat, flush;
    quant_step(qt, nq, &sat, &flush);
    fprintf(log, ",%.6g,%.6g", sat, flush);
    for (size_t i = 0; i < nq; i++) fprintf(log, ",%.9g", (double)qt[i].q->stats.amax);
    for (size_t i = 0; i < nq; i++) fprintf(log, ",%.9g", (double)qt[i].q->scale);
    for (size_t i = 0; i < nq; i++) fprintf(log, ",%.6g", frac(qt[i].q->stats.saturated, qt[i].q->stats.n));
    for (size_t i = 0; i < nq; i++) fprintf(log, ",%.6g", frac(qt[i].q->stats.flushed, qt[i].q->stats.n));
}

static void csv_header(FILE *log, const mp_model *m, const mp_named_qtensor *qt, size_t nq) {
    fprintf(log, "step,loss,scale,skipped,grad_norm,lr,underflow,overflow,act_overflow,lost_gradients,dead_gradients,"
                 "lost_updates,ms,eval_loss");
    const size_t n = m->ops->nstats(m->impl);
    for (int c = 0; c < TCOLS; c++)
        for (size_t i = 0; i < n; i++) fprintf(log, ",%s_%s", tcol_names[c], m->ops->stats(m->impl, i)->name);
    for (size_t i = 0; i < n; i++) fprintf(log, ",headroom_%s", m->ops->stats(m->impl, i)->name);
    for (size_t i = 0; i < n; i++) fprintf(log, ",grad_headroom_%s", m->ops->stats(m->impl, i)->name);
    for (int dead = 0; dead < 2; dead++)
        for (size_t i = 0; i < n; i++)
            if (m->ops->stats(m->impl, i)->has_wgrad)
                fprintf(log, ",%s_%s", dead ? "dead" : "lost", m->ops->stats(m->impl, i)->name);
    csv_quant_header(log, qt, nq);
    fprintf(log, "\n");
}

/* log2(limit / amax): how many doublings an activation can still take before
 * it overflows; NAN when nothing was stored (no figure). */
static double headroom(double limit, float amax) { return amax > 0 ? log2(limit / (double)amax) : NAN; }

static void csv_row(FILE *log, const mp_model *m, const mp_step_info *r, double ms, double eval_loss, double limit,
                    const mp_named_qtensor *qt, size_t nq) {
    fprintf(log, "%ld,%.9g,%.9g,%d,%.6g,%.6g,%.6g,%llu,%llu,%.6g,%.6g,%.6g,%.3f,", r->step, (double)r->loss,
            (double)r->scale, r->skipped, r->grad_norm, r->lr, frac(r->bwd.underflow, r->bwd_elements),
            (unsigned long long)r->bwd.overflow, (unsigned long long)r->fwd.overflow,
            frac(r->lost_gradients, r->wgrad_elements), frac(r->dead_gradients, r->wgrad_elements),
            frac(r->lost_updates, r->params_updated), ms);
    if (!isnan(eval_loss)) fprintf(log, "%.6g", eval_loss);
    const size_t n = m->ops->nstats(m->impl);
    for (int c = 0; c < TCOLS; c++)
        for (size_t i = 0; i < n; i++) tcol_value(log, m->ops->stats(m->impl, i), c);
    for (int bwd = 0; bwd < 2; bwd++)
        for (size_t i = 0; i < n; i++) {
            const mp_tensor_stats *t = m->ops->stats(m->impl, i);
            const double hr = headroom(limit, bwd ? t->bwd.amax : t->fwd.amax);
            if (isnan(hr)) fprintf(log, ",");
            else fprintf(log, ",%.4g", hr);
        }
    for (int dead = 0; dead < 2; dead++)
        for (size_t i = 0; i < n; i++) {
            const mp_tensor_stats *t = m->ops->stats(m->impl, i);
            if (t->has_wgrad) fprintf(log, ",%.6g", frac(dead ? t->wgrad_dead : t->wgrad_lost, t->wgrad_elements));
        }
    csv_quant_row(log, qt, nq);
    fprintf(log, "\n");
}

/* The CSV log is appended a row at a time, each formatted in memory (into
 * log_row()'s stream) and written with write(2) by log_commit(): a crash keeps
 * every row written before it, and a row the disk cannot take whole is cut off
 * again, so the log holds complete rows only. 0, or 1 after a message. */
static FILE *log_row(run_state *s) { return open_memstream(&s->row, &s->row_len); }

static int log_commit(run_state *s, const char *path, FILE *m) {
    int err = !m || ferror(m) ? ENOMEM : 0;
    if (m && fclose(m) != 0) err = ENOMEM;
    const char *p = s->row;
    for (size_t left = err ? 0 : s->row_len; left;) {
        const ssize_t w = write(s->log_fd, p, left);
        if (w > 0) p += w, left -= (size_t)w;
        else if (w == 0 || errno != EINTR) {
            err = w == 0 ? EIO : errno;
            break;
        }
    }
    free(s->row), s->row = NULL;
    if (!err) {
        s->log_size += (off_t)s->row_len, s->log_rows++;
        return 0;
    }
    const int cut = ftruncate(s->log_fd, s->log_size) == 0;
    return fail("%s: cannot append to the log (%s); it keeps the %ld complete lines before%s", path, strerror(err),
                s->log_rows, cut ? "" : " and part of the next");
}

/* n bytes from the GPT after "\n" (temperature 1, seed 1) into r->sample,
 * escaped, and their judgement against the corpus. 0, or -1 after a message. */
static int take_sample(run_state *s, long n, run_result *r) {
    sampler smp = {0};
    uint8_t *bytes = malloc((size_t)n);
    r->sample = malloc(4 * (size_t)n + 1);
    const char *why = bytes && r->sample ? sampler_init(&smp, s->gpt, (const uint8_t *)"\n", 1, (size_t)n, 1.0, 0, 1)
                                         : "out of memory";
    size_t k = 0;
    for (long i = 0; !why && i < n; i++) {
        const int b = sampler_next(&smp);
        if (b < 0) why = mp_last_error();
        else bytes[i] = (uint8_t)b, k += (size_t)sample_escape_byte(b, r->sample + k);
    }
    if (!why) {
        const mp_text_quality q = mp_text_judge(&s->text, bytes, (size_t)n);
        r->sample_printable = q.bytes ? (double)q.printable / (double)q.bytes : 0.0;
        r->sample_words = q.words ? (double)q.found / (double)q.words : NAN;
    } else {
        free(r->sample), r->sample = NULL;
        fail("sampling: %s", why);
    }
    sampler_free(&smp);
    free(bytes);
    return why ? -1 : 0;
}

const char *run_write_json(const char *path, cJSON *j) {
    char *text = cJSON_Print(j);
    if (!text) return "out of memory";
    const mp_status st = mp_write_file_atomic(path, &(mp_chunk){text, strlen(text)}, 1);
    free(text);
    return st == MP_OK ? NULL : mp_last_error();
}

int run_training(const run_opts *o, FILE *out, run_result *res) {
    run_state s;
    memset(&s, 0, sizeof s);
    s.log_fd = -1;
    if (o->threads) mp_set_threads(o->threads);
    peak_reset();
    const int gpt = is_gpt(o->model);
    const int writer = dist_rank() == 0; /* with ranks, rank 0 alone writes files and the console */
    size_t T = 1;
    long steps_per_epoch = 1;
    deferring = dist_size() > 1; /* until every rank is ready: agree_ready */
    int agreed = 0, ret = setup(o, &s, &T, &steps_per_epoch);
    if (ret) goto done;
    ret = 1;
    const mp_train_config tc = {&o->prec, o->scaler, {o->lr, o->schedule, o->warmup, 0, o->min_lr}, o->accum, o->clip,
                                dist_hook()};
    const long total = o->steps ? o->steps : (o->epochs ? o->epochs : 1) * steps_per_epoch;
    mp_train_config tcl = tc;
    tcl.lr.decay_steps = total; /* the cosine reaches min_lr at the last step, as nanoGPT's lr_decay_iters = max_iters */
    if (tcl.lr.decay_steps < tcl.lr.warmup) tcl.lr.decay_steps = tcl.lr.warmup;
    if (mp_trainer_create(&s.tr, &tcl, s.model, s.opt, s.loader) != MP_OK) {
        ret = cli_usage_error("train", "%s", mp_last_error());
        goto done;
    }
    const char *meta[16];
    model_meta(o, meta);
    if (o->init) {
        mp_safetensors st;
        mp_status e = mp_safetensors_read(o->init, &st);
        if (e == MP_OK) e = s.model.ops->load(s.model.impl, &st), mp_safetensors_free(&st);
        if (e != MP_OK) {
            fail("%s%s%s", strstr(mp_last_error(), o->init) ? "" : o->init, strstr(mp_last_error(), o->init) ? "" : ": ",
                 mp_last_error());
            goto done;
        }
    }
    if (o->resume && mp_trainer_resume(s.tr, o->resume, meta) != MP_OK) {
        fail("%s", mp_last_error());
        goto done;
    }
    long step = mp_trainer_step_count(s.tr);
    if (step >= total) {
        fail("%s is at step %ld already; ask for more steps than that (this run: %ld)", o->resume, step, total);
        goto done;
    }
    /* results and diagnostics */
    const int nt = (int)s.model.ops->nstats(s.model.impl);
    const mp_recipe *recipe = mp_model_recipe(&s.model);
    s.nq = mp_model_qtensors(&s.model, NULL, 0); /* the recipe's quantized tensors: 0 without one */
    run_result *r = &s.res;
    format_label(r->format, sizeof r->format, o->prec.compute, recipe);
    snprintf(r->model_kind, sizeof r->model_kind, "%s", s.model.ops->kind);
    r->compute_format = mp_format(o->prec.compute)->name;
    r->ntensors = nt;
    const size_t cap = (size_t)(total - step);
    r->loss = malloc(cap * sizeof *r->loss), r->scale = malloc(cap * sizeof *r->scale), r->skipped = calloc(cap, 1);
    r->tensor_names = calloc((size_t)nt + 1, sizeof *r->tensor_names);
    r->tensor_underflow = calloc(cap * (size_t)(nt ? nt : 1), sizeof *r->tensor_underflow);
    s.ms = malloc(cap * sizeof *s.ms), s.mpi_ms = malloc(cap * sizeof *s.mpi_ms);
    s.skips = cJSON_CreateArray();
    r->skips = calloc(RUN_SKIPS_KEPT, sizeof *r->skips), r->skip_text = calloc(RUN_SKIPS_KEPT, sizeof *r->skip_text);
    r->tensor_totals = calloc((size_t)nt + 1, sizeof *r->tensor_totals);
    const size_t neval_max = (o->eval_every ? cap / (size_t)o->eval_every : 0) + 2; /* the last one: the end's */
    r->eval_steps = malloc(neval_max * sizeof *r->eval_steps), r->eval_losses = malloc(neval_max * sizeof *r->eval_losses);
    r->nquant = (int)s.nq;
    s.qt = calloc(s.nq + 1, sizeof *s.qt), r->quant_names = calloc(s.nq + 1, sizeof *r->quant_names);
    r->quant_totals = calloc(s.nq + 1, sizeof *r->quant_totals), r->quant_scale = calloc(s.nq + 1, sizeof *r->quant_scale);
    r->quant_saturated = calloc(cap, sizeof *r->quant_saturated), r->quant_flushed = calloc(cap, sizeof *r->quant_flushed);
    const int hist_on = !gpt && o->hist_every > 0;
    const long nh_max = hist_on ? (long)cap / o->hist_every + 2 : 0;
    s.hs = calloc((size_t)nh_max + 1, sizeof *s.hs);
    if (!r->loss || !r->scale || !r->skipped || !r->tensor_names || !r->tensor_underflow || !s.ms || !s.mpi_ms || !s.skips || !r->skips || !r->skip_text || !r->tensor_totals ||
        !r->eval_steps || !r->eval_losses || !s.hs || !s.qt || !r->quant_names || !r->quant_totals || !r->quant_scale ||
        !r->quant_saturated || !r->quant_flushed) {
        fail("out of memory");
        goto done;
    }
    mp_model_qtensors(&s.model, s.qt, s.nq);
    for (size_t i = 0; i < s.nq; i++) snprintf(r->quant_names[i], sizeof r->quant_names[i], "%s", s.qt[i].name);
    for (int i = 0; i < nt; i++)
        snprintf(r->tensor_names[i], sizeof r->tensor_names[i], "%s", s.model.ops->stats(s.model.impl, (size_t)i)->name);
    if (o->log && writer && (s.log_fd = open(o->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666)) < 0) {
        fail("%s: cannot create the log (%s)", o->log, strerror(errno));
        goto done;
    }
    if (s.log_fd >= 0) {
        FILE *row = log_row(&s);
        if (row) csv_header(row, &s.model, s.qt, s.nq);
        if (log_commit(&s, o->log, row)) goto done;
    }
    agreed = 1; /* every rank is ready, or the job stops here: a rank that failed before says why at done */
    if ((ret = agree_ready(0)) != 0) goto done;
    ret = 1;
    long nh = 0;
    const int tty = writer && out == stdout && isatty(2);
    /* activation headroom is measured against the compute format's largest value, fp16's in an fp32 run */
    const mp_format_info *hfmt = mp_format(o->prec.compute == MP_F32 ? MP_F16 : o->prec.compute);
    const double limit = hfmt->max;
    char ranks[64] = "";
    if (dist_size() > 1) snprintf(ranks, sizeof ranks, " on %d ranks (%ld each)", dist_size(), o->batch / dist_size());
    fprintf(out, "train: %s%s, %s, %s lr %g%s, batch %ld x %ld%s%s, %ld steps (%ld per epoch), seed %ld%s\n", o->model,
            gpt ? (o->gelu ? " gelu-erf" : "") : o->act ? " gelu" : " relu", o->prec_name,
            o->adamw ? "adamw" : "sgd", o->lr, o->schedule == MP_LR_COSINE ? " cosine" : "", o->batch, o->accum,
            gpt ? " sequences" : "", ranks, total, steps_per_epoch, o->seed, o->resume ? " (resumed)" : "");
    mp_tensor_stats *const run_stats = r->tensor_totals;
    r->headroom_format = hfmt;
    for (int i = 0; i < nt; i++) run_stats[i].has_wgrad = s.model.ops->stats(s.model.impl, (size_t)i)->has_wgrad;
    long done_steps = 0, nan_step = -1;
    uint64_t lost_updates = 0, params_updated = 0; /* over the run */
    const char *stopped = NULL;
    int out_failed = 0; /* an output (the log, the checkpoint, the summary) could not be written */
    char stop_msg[512];
    dist_set_allreduce(o->allreduce);
    const double t_start = now();
    for (; step < total; step++, done_steps++) {
        const double t0 = now(), mpi0 = dist_get_stats()->mpi_seconds;
        mp_step_info si;
        const int take_hist = hist_on && step % o->hist_every == 0 && nh < nh_max;
        if (take_hist) {
            s.hs[nh].step = step + 1;
            s.hs[nh].scale = mp_trainer_scaler(s.tr) ? mp_scaler_get_scale(mp_trainer_scaler(s.tr)) : 1.0f;
            mp_mlp_histogram(s.mlp, s.hs[nh].bins, RUN_HIST_LO, RUN_HIST_N, &s.hs[nh].zeros);
        }
        const mp_status st = mp_trainer_step(s.tr, &si);
        if (take_hist) mp_mlp_histogram(s.mlp, NULL, 0, 0, NULL), nh++;
        if (st != MP_OK && st != MP_EOVERFLOW) { /* an error: the run ends here, nothing is saved */
            fail("step %ld: %s", step + 1, mp_last_error());
            ret = fail_alone();
            goto done;
        }
        dist_fault_step(si.step, s.opt);
        if (st == MP_EOVERFLOW) snprintf(stop_msg, sizeof stop_msg, "%s", mp_last_error()), stopped = stop_msg;
        const double ms = (now() - t0) * 1e3;
        s.ms[done_steps] = ms, s.mpi_ms[done_steps] = (dist_get_stats()->mpi_seconds - mpi0) * 1e3;
        r->loss[done_steps] = si.loss, r->scale[done_steps] = si.scale, r->skipped[done_steps] = (uint8_t)si.skipped;
        if (!isfinite(si.loss) && nan_step < 0) nan_step = si.step;
        if (si.skipped) r->skipped_total++;
        if ((si.nbad || si.first_activation || si.skipped) && report_nonfinite(out, tty, s.skips, &si, s.tr, r)) {
            fail("out of memory");
            ret = fail_alone();
            goto done;
        }
        for (int i = 0; i < nt; i++) {
            const mp_tensor_stats *ts = s.model.ops->stats(s.model.impl, (size_t)i);
            r->tensor_underflow[(size_t)done_steps * (size_t)nt + (size_t)i] = (float)frac(ts->bwd.underflow, ts->bwd_elements);
            mp_convert_stats_add(&run_stats[i].fwd, &ts->fwd), mp_convert_stats_add(&run_stats[i].bwd, &ts->bwd);
            run_stats[i].fwd_elements += ts->fwd_elements, run_stats[i].bwd_elements += ts->bwd_elements;
            run_stats[i].wgrad_elements += ts->wgrad_elements, run_stats[i].wgrad_lost += ts->wgrad_lost;
            run_stats[i].wgrad_dead += ts->wgrad_dead;
        }
        lost_updates += si.lost_updates, params_updated += si.params_updated;
        if (s.nq) {
            double sat, flush;
            quant_step(s.qt, s.nq, &sat, &flush);
            r->quant_saturated[done_steps] = (float)sat, r->quant_flushed[done_steps] = (float)flush;
        }
        for (size_t i = 0; i < s.nq; i++) {
            const mp_quant_stats *q = &s.qt[i].q->stats;
            mp_quant_stats *a = &r->quant_totals[i];
            a->n += q->n, a->saturated += q->saturated, a->flushed += q->flushed, a->nonfinite += q->nonfinite;
            a->amax = fmaxf(a->amax, q->amax);
            r->quant_scale[i] = s.qt[i].q->scale;
        }
        double eval_loss = NAN, eval_acc = 0;
        const int eval_now = o->eval_every && si.step % o->eval_every == 0 && si.step < total && !stopped;
        if (eval_now && mp_trainer_evaluate(s.tr, &eval_loss, &eval_acc) != MP_OK) {
            fail("%s", mp_last_error());
            ret = fail_alone();
            goto done;
        }
        if (eval_now) r->eval_steps[r->neval] = done_steps + 1, r->eval_losses[r->neval++] = eval_loss;
        if (s.log_fd >= 0) {
            FILE *row = log_row(&s);
            if (row) csv_row(row, &s.model, &si, ms, eval_loss, limit, s.qt, s.nq);
            if (log_commit(&s, o->log, row)) { /* the run stops; the checkpoint and the summary are still written */
                close(s.log_fd), s.log_fd = -1;
                snprintf(stop_msg, sizeof stop_msg, "%s: the log could not be written", o->log), stopped = stop_msg;
                out_failed = 1;
            }
        }
        r->last_loss = si.loss;
        const long every = total / 20 > 0 ? total / 20 : 1;
        if (tty) {
            const int w = 30, fill = (int)((double)si.step / (double)total * w);
            fprintf(stderr, "\r  [%-*.*s] %ld/%ld loss %.4f scale %g %.1f steps/s ", w, fill,
                    "==============================", si.step, total, (double)si.loss, (double)si.scale,
                    (double)(done_steps + 1) / (now() - t_start));
            fflush(stderr);
        } else if (si.step % every == 0 || si.step == total) {
            fprintf(out, "  step %ld/%ld loss %.4f scale %g%s\n", si.step, total, (double)si.loss, (double)si.scale,
                    si.skipped ? " (skipped)" : "");
        }
        if (eval_now) {
            if (tty) fprintf(stderr, "\n");
            if (gpt)
                fprintf(out, "  eval at step %ld: validation loss %.4f (%.4f bits per byte)\n", si.step, eval_loss,
                        eval_loss / log(2.0));
            else
                fprintf(out, "  eval at step %ld: test accuracy %.2f%%, loss %.4f\n", si.step, 100 * eval_acc, eval_loss);
        }
        if (dist_any(stopped != NULL) && !stopped) /* rank 0's log failed: every rank stops with it */
            snprintf(stop_msg, sizeof stop_msg, "rank 0 stopped"), stopped = stop_msg;
        if (!stopped && o->check_every && si.step % o->check_every == 0 && si.step < total) {
            const mp_status cs = mp_trainer_check_ranks(s.tr);
            if (cs != MP_OK) { /* every rank has the same message: rank 0 says it */
                if (writer || cs != MP_ECORRUPT) fail("%s", mp_last_error());
                if (cs != MP_ECORRUPT) ret = fail_alone();
                goto done;
            }
        }
        if (stopped) {
            done_steps++;
            break;
        }
    }
    if (tty) fprintf(stderr, "\n");
    const double elapsed = now() - t_start;
    r->nsteps = done_steps;
    if (mp_trainer_evaluate(s.tr, &r->eval_loss, &r->eval_accuracy) != MP_OK) {
        fail("%s", mp_last_error());
        ret = fail_alone();
        goto done;
    }
    const mp_status cs = mp_trainer_check_ranks(s.tr); /* at the end, before the checkpoint and the results */
    if (cs != MP_OK) {
        if (writer || cs != MP_ECORRUPT) fail("%s", mp_last_error());
        if (cs != MP_ECORRUPT) ret = fail_alone();
        goto done;
    }
    r->eval_steps[r->neval] = done_steps, r->eval_losses[r->neval++] = r->eval_loss;
    if (gpt && o->sample_bytes > 0 && writer && take_sample(&s, o->sample_bytes, r) != 0) goto done;
    double *sorted = s.ms;
    qsort(sorted, (size_t)done_steps, sizeof *sorted, cmp_d);
    r->ms_per_step = done_steps ? sorted[done_steps / 2] : 0.0;
    qsort(s.mpi_ms, (size_t)done_steps, sizeof *s.mpi_ms, cmp_d);
    const double mpi_ms = done_steps ? s.mpi_ms[done_steps / 2] : 0.0;
    const dist_stats *ds = dist_get_stats();
    const uint64_t wire_n = ds->allreduces * ds->values; /* gradient values rounded into the wire format */
    /* what each rank sends in a ring all-reduce of the buffer: 2 (N-1)/N of it (with 2 ranks every algorithm
     * sends the buffer once) */
    const double ring_bytes = 2.0 * (dist_size() - 1) / dist_size() * (double)ds->wire_bytes;
    r->tokens_per_s = gpt && r->ms_per_step > 0 ? (double)o->batch * (double)T * (double)o->accum / (r->ms_per_step / 1e3) : 0;
    r->memory_mib = peak_mib();
    const mp_scaler *sc = mp_trainer_scaler(s.tr);
    r->final_scale = sc ? (double)mp_scaler_get_scale(sc) : 1.0;
    uint64_t tot_under = 0, tot_elems = 0, act_over = 0, grad_over = 0, w_elems = 0, w_lost = 0, w_dead = 0;
    for (int i = 0; i < nt; i++) {
        tot_under += run_stats[i].bwd.underflow, tot_elems += run_stats[i].bwd_elements;
        act_over += run_stats[i].fwd.overflow, grad_over += run_stats[i].bwd.overflow;
        w_elems += run_stats[i].wgrad_elements, w_lost += run_stats[i].wgrad_lost, w_dead += run_stats[i].wgrad_dead;
    }
    r->underflow = frac(tot_under, tot_elems);
    r->lost_gradients = frac(w_lost, w_elems), r->dead_gradients = frac(w_dead, w_elems);
    r->lost_updates = frac(lost_updates, params_updated);
    if (nh) {
        const hist_snap *h = &s.hs[nh - 1];
        r->has_hist = 1, r->hist_zeros = (double)h->zeros, r->hist_scale = h->scale;
        for (int b = 0; b < RUN_HIST_N; b++) r->hist[b] = (double)h->bins[b];
    }
    if (gpt)
        fprintf(out, "result: validation loss %.4f (%.4f bits per byte), last train loss %.4f\n", r->eval_loss,
                r->eval_loss / log(2.0), r->last_loss);
    else
        fprintf(out, "result: test accuracy %.2f%%, test loss %.4f, last train loss %.4f\n", 100 * r->eval_accuracy,
                r->eval_loss, r->last_loss);
    fprintf(out, "        %ld steps, %ld skipped, final scale %g, %.2f ms/step (median)", done_steps, r->skipped_total,
            r->final_scale, r->ms_per_step);
    if (gpt) fprintf(out, ", %.0f tokens/s", r->tokens_per_s);
    fprintf(out, ", %.1f s, peak memory %.0f MiB\n", elapsed, r->memory_mib);
    if (dist_size() > 1) {
        fprintf(out, "        all-reduce %s: %llu gradient values, %.1f MB summed per step (each rank sends %.1f MB in a "
                     "ring), %.2f ms/step in MPI (median)", mp_format(ds->wire)->name, (unsigned long long)ds->values,
                (double)ds->wire_bytes / 1e6, ring_bytes / 1e6, mpi_ms);
        if (ds->wire != MP_F32)
            fprintf(out, "; rank 0's values on the wire: %.4f%% underflowed to 0, %llu overflowed", 100 * frac(ds->packed.underflow, wire_n),
                    (unsigned long long)ds->packed.overflow);
        if (ds->wire != MP_F32 && sc)
            fprintf(out, "; %ld of %ld skipped steps lost to it", ds->lost_sums, r->skipped_total);
        else if (ds->wire != MP_F32) /* no loss scaling: nothing skips, an inf reaches the update */
            fprintf(out, "; %ld steps' sums not finite because of it", ds->lost_sums);
        fputc('\n', out);
    }
    if (!gpt) {
        fprintf(out, "        gradient stores per layer (underflow to 0 / subnormal / overflow):");
        for (int i = 0; i < nt; i++) {
            const mp_tensor_stats *ls = &run_stats[i];
            const double e = ls->bwd_elements ? (double)ls->bwd_elements : 1.0;
            fprintf(out, "%s %s %.3g%% / %.3g%% / %llu", i ? "," : "", r->tensor_names[i],
                    100 * (double)ls->bwd.underflow / e, 100 * (double)ls->bwd.subnormal / e,
                    (unsigned long long)ls->bwd.overflow);
        }
        fprintf(out, "\n");
    } else {
        int worst = -1;
        for (int i = 0; i < nt; i++)
            if (run_stats[i].bwd_elements &&
                (worst < 0 || frac(run_stats[i].bwd.underflow, run_stats[i].bwd_elements) >
                                  frac(run_stats[worst].bwd.underflow, run_stats[worst].bwd_elements)))
                worst = i;
        fprintf(out, "        gradient stores: %.4f%% underflowed to 0 (most in %s: %.4f%%), %llu overflowed; "
                     "activation stores: %llu overflowed\n",
                100 * r->underflow, worst >= 0 ? r->tensor_names[worst] : "-",
                worst >= 0 ? 100 * frac(run_stats[worst].bwd.underflow, run_stats[worst].bwd_elements) : 0.0,
                (unsigned long long)grad_over, (unsigned long long)act_over);
    }
    fprintf(out, "        weight gradients: %.4f%% lost (nonzero in fp32, 0 when stored), %.4f%% dead (0 in fp32); "
                 "updates: %.4f%% lost (the weight did not change)\n",
            100 * r->lost_gradients, 100 * r->dead_gradients, 100 * r->lost_updates);
    if (s.nq) {
        const mp_quant_stats *qs = r->quant_totals;
        uint64_t qn = 0, qsat = 0, qfl = 0;
        size_t ws = 0, wf = 0; /* the tensors with the largest shares */
        for (size_t i = 0; i < s.nq; i++) {
            qn += qs[i].n, qsat += qs[i].saturated, qfl += qs[i].flushed;
            if (frac(qs[i].saturated, qs[i].n) > frac(qs[ws].saturated, qs[ws].n)) ws = i;
            if (frac(qs[i].flushed, qs[i].n) > frac(qs[wf].flushed, qs[wf].n)) wf = i;
        }
        r->quant_saturated_total = frac(qsat, qn), r->quant_flushed_total = frac(qfl, qn);
        fprintf(out, "        %s: %.4f%% of the quantized values saturated", r->format, 100 * r->quant_saturated_total);
        if (qsat) fprintf(out, " (most in %s: %.4f%%)", r->quant_names[ws], 100 * frac(qs[ws].saturated, qs[ws].n));
        fprintf(out, ", %.4f%% flushed to zero", 100 * r->quant_flushed_total);
        if (qfl) fprintf(out, " (most in %s: %.4f%%)", r->quant_names[wf], 100 * frac(qs[wf].flushed, qs[wf].n));
        fputc('\n', out);
    }
    /* warnings the literature describes */
#define WARN(...) if (r->nwarnings < 6) snprintf(r->warnings[r->nwarnings++], sizeof r->warnings[0], __VA_ARGS__)
    if (nan_step >= 0) WARN("the loss became NaN/inf at step %ld", nan_step);
    if (sc && o->prec.scaling == MP_SCALING_DYNAMIC && mp_scaler_get_scale(sc) < o->scaler.init_scale / 1024.0f)
        WARN("the loss scale collapsed from %g to %g (%ld skipped steps)", (double)o->scaler.init_scale,
             (double)mp_scaler_get_scale(sc), r->skipped_total);
    if (stopped) WARN("stopped: %.230s", stopped);
    if (o->prec.compute == MP_F16 && r->underflow > 0.01)
        WARN("%.2f%% of the gradient values stored in fp16 underflowed to zero%s", 100.0 * r->underflow,
             sc ? "" : ": use loss scaling (fp16-dynamic)");
    if (ds->lost_sums)
        WARN("%ld steps %s because the gradients overflowed in the %s all-reduce (cast or sum) where every rank's "
             "fp32 gradients were finite (--allreduce fp32 keeps them)", ds->lost_sums,
             sc ? "were skipped" : "took an inf update", mp_format(ds->wire)->name);
    if (act_over) WARN("%llu activation values overflowed to inf when stored in %s", (unsigned long long)act_over,
                       r->compute_format);
#undef WARN
    for (int k = 0; k < r->nwarnings; k++) fprintf(out, "warning: %s\n", r->warnings[k]);
    /* the outputs: the checkpoint first (the training is in it), then the
     * summary and the gradients; one that cannot be written (one line) does
     * not keep the others from being written; the run then exits 1 */
    if (o->save && writer) {
        if (mp_trainer_save(s.tr, o->save, meta, o->save_dtype) != MP_OK) out_failed = 1, fail("%s", mp_last_error());
        else fprintf(out, "saved %s (step %ld)\n", o->save, mp_trainer_step_count(s.tr));
    }
    if (o->summary && writer) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "precision", o->prec_name);
        cJSON_AddStringToObject(j, "master_weights", mp_master_weights_name(o->prec.master_weights));
        cJSON_AddStringToObject(j, "reductions", mp_reductions_name(o->prec.reductions));
        cJSON_AddStringToObject(j, "model", o->model);
        cJSON_AddStringToObject(j, "compute_format", r->compute_format);
        cJSON_AddStringToObject(j, "format", r->format);
        cJSON_AddNumberToObject(j, "steps", (double)done_steps);
        if (gpt) {
            cJSON_AddNumberToObject(j, "val_loss", r->eval_loss);
            cJSON_AddNumberToObject(j, "val_bits_per_byte", r->eval_loss / log(2.0));
            cJSON_AddNumberToObject(j, "val_accuracy", r->eval_accuracy);
            cJSON_AddNumberToObject(j, "tokens_per_s", r->tokens_per_s);
            if (r->sample) {
                cJSON_AddStringToObject(j, "sample", r->sample);
                cJSON_AddNumberToObject(j, "sample_printable", r->sample_printable);
                if (isnan(r->sample_words)) cJSON_AddNullToObject(j, "sample_words");
                else cJSON_AddNumberToObject(j, "sample_words", r->sample_words);
            }
        } else {
            cJSON_AddNumberToObject(j, "test_accuracy", r->eval_accuracy);
            cJSON_AddNumberToObject(j, "test_loss", r->eval_loss);
        }
        cJSON_AddNumberToObject(j, "last_train_loss", r->last_loss);
        cJSON_AddItemToObject(j, "skipped", s.skips);
        s.skips = NULL; /* j owns it now */
        cJSON_AddNumberToObject(j, "final_scale", r->final_scale);
        cJSON_AddNumberToObject(j, "ms_per_step", r->ms_per_step);
        if (dist_size() > 1) {
            cJSON *a = cJSON_AddObjectToObject(j, "allreduce");
            cJSON_AddNumberToObject(a, "ranks", dist_size());
            cJSON_AddStringToObject(a, "format", mp_format(ds->wire)->name);
            cJSON_AddNumberToObject(a, "values", (double)ds->values);
            cJSON_AddNumberToObject(a, "buffer_bytes", (double)ds->wire_bytes);
            cJSON_AddNumberToObject(a, "ring_bytes_sent", ring_bytes);
            cJSON_AddNumberToObject(a, "mpi_ms_per_step", mpi_ms);
            cJSON_AddNumberToObject(a, "wire_underflow", frac(ds->packed.underflow, wire_n));
            cJSON_AddNumberToObject(a, "wire_overflow", (double)ds->packed.overflow);
            cJSON_AddNumberToObject(a, "lost_steps", (double)ds->lost_sums);
        }
        cJSON_AddNumberToObject(j, "peak_memory_mib", r->memory_mib);
        cJSON_AddNumberToObject(j, "underflow_fraction", r->underflow);
        cJSON_AddNumberToObject(j, "gradient_overflow", (double)grad_over);
        cJSON_AddNumberToObject(j, "activation_overflow", (double)act_over);
        cJSON_AddNumberToObject(j, "lost_gradients", r->lost_gradients);
        cJSON_AddNumberToObject(j, "dead_gradients", r->dead_gradients);
        cJSON_AddNumberToObject(j, "lost_updates", r->lost_updates);
        cJSON_AddStringToObject(j, "headroom_against", hfmt->name);
        cJSON *ly = cJSON_AddArrayToObject(j, "tensors");
        for (int i = 0; i < nt; i++) {
            const mp_tensor_stats *ls = &run_stats[i];
            cJSON *o1 = cJSON_CreateObject();
            cJSON_AddStringToObject(o1, "name", r->tensor_names[i]);
            cJSON_AddNumberToObject(o1, "underflow_fraction", frac(ls->bwd.underflow, ls->bwd_elements));
            cJSON_AddNumberToObject(o1, "subnormal_fraction", frac(ls->bwd.subnormal, ls->bwd_elements));
            cJSON_AddNumberToObject(o1, "overflow", (double)ls->bwd.overflow);
            cJSON_AddNumberToObject(o1, "act_underflow_fraction", frac(ls->fwd.underflow, ls->fwd_elements));
            cJSON_AddNumberToObject(o1, "act_subnormal_fraction", frac(ls->fwd.subnormal, ls->fwd_elements));
            cJSON_AddNumberToObject(o1, "act_overflow", (double)ls->fwd.overflow);
            cJSON_AddNumberToObject(o1, "nan", (double)ls->bwd.nan);
            cJSON_AddNumberToObject(o1, "act_nan", (double)ls->fwd.nan);
            cJSON_AddNumberToObject(o1, "grad_values", (double)ls->bwd_elements);
            cJSON_AddNumberToObject(o1, "act_values", (double)ls->fwd_elements);
            for (int bwd = 0; bwd < 2; bwd++) {
                const float amax = bwd ? ls->bwd.amax : ls->fwd.amax;
                const double hr = headroom(limit, amax);
                const char *ka = bwd ? "grad_amax" : "act_amax", *kh = bwd ? "grad_headroom_log2" : "act_headroom_log2";
                if (isnan(hr)) cJSON_AddNullToObject(o1, ka), cJSON_AddNullToObject(o1, kh);
                else cJSON_AddNumberToObject(o1, ka, amax), cJSON_AddNumberToObject(o1, kh, hr);
            }
            if (ls->has_wgrad) {
                cJSON_AddNumberToObject(o1, "wgrad_values", (double)ls->wgrad_elements);
                cJSON_AddNumberToObject(o1, "wgrad_lost", (double)ls->wgrad_lost);
                cJSON_AddNumberToObject(o1, "wgrad_dead", (double)ls->wgrad_dead);
            }
            cJSON_AddItemToArray(ly, o1);
        }
        if (s.nq && recipe) { /* the recipe's quantized tensors over the run */
            cJSON_AddStringToObject(j, "recipe", mp_recipe_name(recipe->kind));
            cJSON_AddNumberToObject(j, "quant_saturated_fraction", r->quant_saturated_total);
            cJSON_AddNumberToObject(j, "quant_flushed_fraction", r->quant_flushed_total);
            cJSON *qa = cJSON_AddArrayToObject(j, "quantized");
            for (size_t i = 0; i < s.nq; i++) {
                const mp_quant_stats *q = &r->quant_totals[i];
                cJSON *o1 = cJSON_CreateObject();
                cJSON_AddStringToObject(o1, "name", r->quant_names[i]);
                cJSON_AddStringToObject(o1, "format", mp_format(mp_qrole_format(recipe, s.qt[i].q->role))->name);
                cJSON_AddNumberToObject(o1, "amax", q->amax);
                cJSON_AddNumberToObject(o1, "scale", r->quant_scale[i]);
                cJSON_AddNumberToObject(o1, "values", (double)q->n);
                cJSON_AddNumberToObject(o1, "saturated", (double)q->saturated);
                cJSON_AddNumberToObject(o1, "flushed", (double)q->flushed);
                cJSON_AddNumberToObject(o1, "nonfinite", (double)q->nonfinite);
                cJSON_AddNumberToObject(o1, "saturated_fraction", frac(q->saturated, q->n));
                cJSON_AddNumberToObject(o1, "flushed_fraction", frac(q->flushed, q->n));
                cJSON_AddItemToArray(qa, o1);
            }
        }
        if (!gpt) {
            const mp_format_info *fi = mp_format(o->prec.compute == MP_F32 ? MP_F16 : o->prec.compute);
            cJSON *hj = cJSON_AddObjectToObject(j, "histograms");
            cJSON_AddNumberToObject(hj, "log2_lo", RUN_HIST_LO);
            cJSON_AddStringToObject(hj, "limits_of", fi->name);
            cJSON_AddNumberToObject(hj, "min_subnormal", fi->min_subnormal);
            cJSON_AddNumberToObject(hj, "min_normal", fi->min_normal);
            cJSON_AddNumberToObject(hj, "max", fi->max);
            cJSON *snaps = cJSON_AddArrayToObject(hj, "snapshots");
            for (long k = 0; k < nh; k++) {
                cJSON *o1 = cJSON_CreateObject();
                cJSON_AddNumberToObject(o1, "step", (double)s.hs[k].step);
                cJSON_AddNumberToObject(o1, "scale", (double)s.hs[k].scale);
                cJSON_AddNumberToObject(o1, "zeros", (double)s.hs[k].zeros);
                cJSON *c = cJSON_AddArrayToObject(o1, "counts");
                for (int b = 0; b < RUN_HIST_N; b++) cJSON_AddItemToArray(c, cJSON_CreateNumber((double)s.hs[k].bins[b]));
                cJSON_AddItemToArray(snaps, o1);
            }
        }
        cJSON *wa = cJSON_AddArrayToObject(j, "warnings");
        for (int k = 0; k < r->nwarnings; k++) cJSON_AddItemToArray(wa, cJSON_CreateString(r->warnings[k]));
        const char *bad = run_write_json(o->summary, j);
        cJSON_Delete(j);
        if (bad) out_failed = 1, fail("%s", bad);
    }
    if (o->dump_grads && writer) { /* the weight gradients of the last step, as the optimizer saw them */
        const size_t np = mp_optim_count(s.opt);
        mp_tensor *gt = calloc(np + 1, sizeof *gt);
        size_t ng = 0;
        for (size_t i = 0; gt && i < np; i++) {
            const mp_param *p = mp_optim_param(s.opt, i);
            if (!strstr(p->name, ".weight") || strstr(p->name, "ln")) continue;
            mp_tensor *t = &gt[ng++];
            snprintf(t->name, sizeof t->name, "%s.grad", p->name);
            t->dtype = MP_F32, t->ndim = 1, t->shape[0] = p->n, t->nbytes = p->n * 4, t->data = p->grad;
        }
        const mp_status e = gt ? mp_safetensors_write(o->dump_grads, gt, ng, NULL) : MP_ENOMEM;
        free(gt);
        if (e != MP_OK) out_failed = 1, fail("%s", gt ? mp_last_error() : "out of memory");
        else fprintf(out, "gradients of step %ld written to %s\n", mp_trainer_step_count(s.tr), o->dump_grads);
    }
    ret = stopped || out_failed ? 1 : 0;
done:
    if (!agreed) ret = agree_ready(ret); /* this rank failed before training: the others learn it there */
    if (s.log_fd >= 0 && close(s.log_fd) != 0 && ret == 0)
        ret = fail("%s: the log could not be written (%s)", o->log, strerror(errno));
    if (res) *res = s.res, memset(&s.res, 0, sizeof s.res);
    run_result_free(&s.res);
    state_free(&s);
    return ret;
}
