/* run_gpt.c - the GPT as a run trains it (a row of models.h): "gpt:L-H-C-T"
 * on a text corpus, a sample of its final model. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "models.h"

typedef struct {
    const mp_run_spec *s;
    mp_gpt_config c;
    mp_text text;
    mp_gpt *gpt;  /* the model made (its mp_model owns it) */
    char **names; /* its layers (gpt_layer_names) and their recipes, once assigned (gpt_assign) */
    mp_recipe *each;
    size_t nl;
} gpt_run;

static mp_status gpt_open(const mp_run_spec *s, void **ctx, size_t *T) {
    gpt_run *g = calloc(1, sizeof *g);
    if (!g) return mp_error(MP_ENOMEM, "out of memory");
    const mp_status st = mp_gpt_parse(s->model, &g->c);
    if (st != MP_OK) return free(g), st;
    g->s = s, g->c.gelu = s->gelu;
    *ctx = g, *T = (size_t)g->c.block_size;
    return MP_OK;
}

static void gpt_close(void *ctx) {
    gpt_run *g = ctx;
    if (!g) return;
    mp_text_free(&g->text);
    if (g->names) free(g->names[0]);
    free(g->names), free(g->each);
    free(g);
}

static void gpt_size(const void *ctx, size_t rows, double es, double *params, double *act) {
    const mp_gpt_config *gc = &((const gpt_run *)ctx)->c;
    const double L = gc->n_layer, C = gc->n_embd, T = gc->block_size, V = gc->vocab_size, B = (double)rows;
    *params = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C;
    *act = B * T * (L * (20 * C * es + 4 * 4) + 2 * V * 4 + 4 * C * 4); /* the layers' stores, logits, residuals */
}

static mp_status gpt_data(void *ctx, int *bad_spec) {
    gpt_run *g = ctx;
    mp_status st = mp_text_load(&g->text, g->s->data ? g->s->data + 5 : MP_TEXT_DEFAULT_CORPUS);
    if (st == MP_OK) st = mp_text_check(&g->text, (size_t)g->c.block_size);
    *bad_spec = 0; /* a corpus too short for the context is the data's failure, not the spec's */
    return st;
}

/* The GPT's layer names (nanoGPT's, without ".weight"), its Linear layers
 * block by block in mp_gpt_set_layer_recipes's order, then the tied lm_head
 * (no recipe); NULL when out of memory. */
static char **gpt_layer_names(int L, size_t *n) {
    static const char *const w[4] = {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"};
    *n = (size_t)L * 4 + 1;
    char **names = calloc(*n, sizeof *names);
    char *text = calloc(*n, 48);
    if (!names || !text) return free(names), free(text), NULL;
    for (size_t i = 0; i < *n; i++) {
        names[i] = text + 48 * i;
        if (i + 1 < *n) snprintf(names[i], 48, "transformer.h.%zu.%s", i / 4, w[i % 4]);
        else snprintf(names[i], 48, "lm_head");
    }
    return names;
}

/* Mode p's recipe for each layer into g->each (names and recipes made on the first call). */
static mp_status gpt_assign(void *ctx, const mp_precision *p) {
    gpt_run *g = ctx;
    if (!g->names) {
        g->names = gpt_layer_names(g->c.n_layer, &g->nl);
        g->each = calloc(g->nl, sizeof *g->each); /* the last, lm_head's, stays NONE */
        if (!g->names || !g->each) return mp_error(MP_ENOMEM, "out of memory");
    }
    return mp_precision_layer_recipes(p, (const char *const *)g->names, g->nl, g->nl - 1, g->each);
}

static size_t gpt_layers(const void *ctx, const char **names, mp_recipe_kind *kinds, size_t cap) {
    const gpt_run *g = ctx;
    for (size_t i = 0; i < g->nl && i < cap; i++) names[i] = g->names[i], kinds[i] = g->each[i].kind;
    return g->nl;
}

static mp_status gpt_create(void *ctx, const mp_precision *p, mp_optim *opt, size_t rows, uint64_t seed,
                            mp_model *out) {
    gpt_run *g = ctx;
    const mp_status st = mp_gpt_create(&g->gpt, &g->c, p->compute, p->master_weights, rows, opt, seed);
    if (st != MP_OK) return st;
    *out = mp_gpt_model(g->gpt);
    const mp_status sa = gpt_assign(g, p);
    return sa == MP_OK ? mp_gpt_set_layer_recipes(g->gpt, g->each, seed) : sa;
}

static mp_status gpt_probe(void *ctx, const mp_recipe *r, uint64_t seed) {
    return mp_gpt_set_probe(((gpt_run *)ctx)->gpt, r, seed);
}

/* The blocks' Linear layers (lm_head, the tied embedding, runs in bf16 in every mode: not probed). */
static size_t gpt_probed(const void *ctx, const char **names, mp_qprobe (*sums)[3], size_t cap) {
    const gpt_run *g = ctx;
    const size_t n = g->nl ? g->nl - 1 : 0;
    for (size_t i = 0; i < n && i < cap; i++) {
        names[i] = g->names[i];
        for (int d = 0; d < 3; d++) {
            const mp_qprobe *p = mp_gpt_probe(g->gpt, (int)(i / 4), (int)(i % 4), d);
            sums[i][d] = p ? *p : (mp_qprobe){0};
        }
    }
    return n;
}

static mp_status gpt_loader(void *ctx, size_t rows, int shuffle, uint64_t seed, mp_loader *out, long *per) {
    gpt_run *g = ctx;
    const size_t T = (size_t)g->c.block_size;
    *per = (long)(g->text.n_train / (rows * T));
    return mp_text_loader(out, &g->text, rows, T, shuffle, seed, (size_t)g->s->eval_windows);
}

static int gpt_meta(const mp_run_spec *s, const char **kv) {
    kv[0] = "gelu", kv[1] = s->gelu == MP_GELU_ERF ? "erf" : "tanh";
    return 2;
}

static const char *gpt_describe(const mp_run_spec *s) { return s->gelu ? " gelu-erf" : ""; }

/* --eval-windows beyond the corpus's: the value as given, and as used. */
static void gpt_print_start(const void *ctx, FILE *out) {
    const gpt_run *g = ctx;
    const size_t windows = mp_text_val_windows(&g->text, (size_t)g->c.block_size);
    if (g->s->eval_windows > 0 && (size_t)g->s->eval_windows > windows)
        fprintf(out, "  --eval-windows %ld: the corpus has %zu validation windows, all of them are used\n",
                g->s->eval_windows, windows);
}

static mp_status gpt_sample(void *ctx, long n, char **text, double *printable, double *words) {
    gpt_run *g = ctx;
    mp_sampler smp = {0};
    uint8_t *bytes = malloc((size_t)n);
    char *out = malloc(4 * (size_t)n + 1);
    mp_status st = bytes && out ? mp_sampler_init(&smp, g->gpt, (const uint8_t *)"\n", 1, (size_t)n, 1.0, 0, 1)
                                : mp_error(MP_ENOMEM, "out of memory");
    size_t k = 0;
    for (long i = 0; st == MP_OK && i < n; i++) {
        const int b = mp_sampler_next(&smp);
        if (b < 0) st = MP_EIO;
        else bytes[i] = (uint8_t)b, k += (size_t)mp_sample_escape_byte(b, out + k);
    }
    if (st == MP_OK) {
        const mp_text_quality q = mp_text_judge(&g->text, bytes, (size_t)n);
        *printable = q.bytes ? (double)q.printable / (double)q.bytes : 0.0;
        *words = q.words ? (double)q.found / (double)q.words : NAN;
        *text = out, out = NULL;
    }
    mp_sampler_free(&smp);
    free(bytes), free(out);
    return st;
}

const mp_model_row mp_gpt_row = {.prefix = "gpt:",
                                 .kind = "gpt",
                                 .what = "the GPT",
                                 .report = MP_REPORT_LANGUAGE,
                                 .batch = 16,
                                 .options = MP_OPT_GELU | MP_OPT_EVAL_WINDOWS,
                                 .text = 1,
                                 .data_use = "a GPT trains on text: --data text:PATH[,PATH...]",
                                 .open = gpt_open,
                                 .close = gpt_close,
                                 .size = gpt_size,
                                 .data = gpt_data,
                                 .create = gpt_create,
                                 .loader = gpt_loader,
                                 .assign = gpt_assign,
                                 .layers = gpt_layers,
                                 .probe = gpt_probe,
                                 .probed = gpt_probed,
                                 .meta = gpt_meta,
                                 .describe = gpt_describe,
                                 .print_start = gpt_print_start,
                                 .sample = gpt_sample};
