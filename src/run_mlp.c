/* run_mlp.c - the MLP as a run trains it (a row of models.h): "mlp:WIDTHS"
 * on Fashion-MNIST, its gradient histograms. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "models.h"

enum { EVAL_ROWS = 1000 }; /* the evaluation's batch: the model is made for at least as many rows */

typedef struct {
    const mp_run_spec *s;
    mp_mlp_config c;
    mp_dataset train, test;
    mp_mlp *mlp;                       /* the model made (its mp_model owns it) */
    char names[MP_MLP_MAX_LAYERS][24]; /* its layers ("fc0", ...) and their recipes, once made */
    mp_recipe_kind kinds[MP_MLP_MAX_LAYERS];
    size_t nl;
} mlp_run;

static mp_status mlp_open(const mp_run_spec *s, void **ctx, size_t *T) {
    mlp_run *m = calloc(1, sizeof *m);
    if (!m) return mp_error(MP_ENOMEM, "out of memory");
    const mp_status st = mp_mlp_parse(s->model, &m->c);
    if (st != MP_OK) return free(m), st;
    m->s = s, m->c.act = s->act, m->c.layernorm = s->layernorm;
    *ctx = m, *T = 1;
    return MP_OK;
}

static void mlp_close(void *ctx) {
    mlp_run *m = ctx;
    if (!m) return;
    mp_dataset_free(&m->train), mp_dataset_free(&m->test);
    free(m);
}

static void mlp_size(const void *ctx, size_t rows, double es, double *params, double *act) {
    const mp_mlp_config *mc = &((const mlp_run *)ctx)->c;
    const double B = (double)(rows > EVAL_ROWS ? rows : EVAL_ROWS);
    double widths = 0;
    *params = 0;
    for (int l = 0; l <= mc->nlayers; l++) {
        widths += mc->widths[l];
        if (l) *params += (double)mc->widths[l - 1] * mc->widths[l] + mc->widths[l];
    }
    *act = B * widths * (4 + 3 * es);
}

static mp_status mlp_data(void *ctx, int *bad_spec) {
    mlp_run *m = ctx;
    const mp_run_spec *s = m->s;
    const mp_status st = mp_fashion_mnist_load(&m->train, &m->test, s->data);
    if (st != MP_OK) return st;
    const size_t D = m->train.rows * m->train.cols;
    *bad_spec = 1;
    if ((size_t)m->c.widths[0] != D || m->c.widths[m->c.nlayers] < m->test.num_classes)
        return mp_error(MP_EINVAL, "model %s: the input width must be %zu and the output at least %d", s->model, D,
                        m->train.num_classes);
    if ((size_t)s->batch * (size_t)s->accum > m->train.n)
        return mp_error(MP_EINVAL, "batch x accum is larger than the training set");
    *bad_spec = 0;
    return MP_OK;
}

/* Mode p's recipe for each layer ("fc0", ...) into each and m->kinds. */
static mp_status mlp_assign_into(mlp_run *m, const mp_precision *p, mp_recipe *each) {
    const char *names[MP_MLP_MAX_LAYERS] = {0};
    const size_t n = (size_t)m->c.nlayers;
    for (size_t l = 0; l < n; l++) snprintf(m->names[l], sizeof m->names[l], "fc%zu", l), names[l] = m->names[l];
    const mp_status st = mp_precision_layer_recipes(p, names, n, n, each);
    for (size_t l = 0; st == MP_OK && l < n; l++) m->kinds[l] = each[l].kind;
    m->nl = st == MP_OK ? n : 0;
    return st;
}

static mp_status mlp_assign(void *ctx, const mp_precision *p) {
    mp_recipe each[MP_MLP_MAX_LAYERS];
    return mlp_assign_into(ctx, p, each);
}

static mp_status mlp_create(void *ctx, const mp_precision *p, mp_optim *opt, size_t rows, uint64_t seed,
                            mp_model *out) {
    mlp_run *m = ctx;
    mp_status st =
        mp_mlp_create(&m->mlp, &m->c, p->compute, p->master_weights, rows > EVAL_ROWS ? rows : EVAL_ROWS, opt, seed);
    if (st == MP_ENOMEM && rows < EVAL_ROWS) {
        char why[512];
        snprintf(why, sizeof why, "%s", mp_last_error());
        return mp_error(st, "%s (the evaluation's batch of %d rows; --batch is %zu)", why, EVAL_ROWS, rows);
    }
    if (st != MP_OK) return st;
    *out = mp_mlp_model(m->mlp);
    mp_recipe each[MP_MLP_MAX_LAYERS];
    if ((st = mlp_assign_into(m, p, each)) == MP_OK) st = mp_mlp_set_layer_recipes(m->mlp, each, seed);
    return st;
}

static mp_status mlp_loader(void *ctx, size_t rows, int shuffle, uint64_t seed, mp_loader *out, long *per) {
    mlp_run *m = ctx;
    *per = (long)(m->train.n / rows);
    return mp_image_loader(out, &m->train, &m->test, rows, shuffle, seed, EVAL_ROWS);
}

static size_t mlp_layers(const void *ctx, const char **names, mp_recipe_kind *kinds, size_t cap) {
    const mlp_run *m = ctx;
    for (size_t i = 0; i < m->nl && i < cap; i++) names[i] = m->names[i], kinds[i] = m->kinds[i];
    return m->nl;
}

static int mlp_meta(const mp_run_spec *s, const char **kv) {
    kv[0] = "act", kv[1] = s->act ? "gelu" : "relu";
    kv[2] = "layernorm", kv[3] = s->layernorm ? "1" : "0";
    return 4;
}

static const char *mlp_describe(const mp_run_spec *s) { return s->act ? " gelu" : " relu"; }

/* Fashion-MNIST's four files in the data directory, each plain or .gz, those that exist. */
static size_t mlp_inputs(const mp_run_spec *s, mp_file_id *in, char (*paths)[4096], size_t cap) {
    static const char *const names[] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                                        "t10k-labels-idx1-ubyte"};
    const char *dir = s->data ? s->data : MP_FASHION_MNIST_DIR;
    size_t n = 0;
    for (int k = 0; k < 8 && n < cap; k++) {
        snprintf(paths[n], sizeof paths[n], "%s/%s%s", dir, names[k / 2], k % 2 ? ".gz" : "");
        struct stat st;
        if (stat(paths[n], &st) == 0) mp_file_identify(&in[n], "--data", paths[n]), n++;
    }
    return n;
}

static void mlp_histogram(void *ctx, uint64_t *bins, int lo, int nbins, uint64_t *zeros) {
    mp_mlp_histogram(((mlp_run *)ctx)->mlp, bins, lo, nbins, zeros);
}

const mp_model_row mp_mlp_row = {.prefix = "mlp:",
                                 .kind = "mlp",
                                 .what = "the MLP",
                                 .report = MP_REPORT_CLASSIFIER,
                                 .batch = 256,
                                 .options = MP_OPT_ACT | MP_OPT_LAYERNORM | MP_OPT_HIST,
                                 .text = 0,
                                 .data_use = "an MLP trains on Fashion-MNIST: --data DIR",
                                 .open = mlp_open,
                                 .close = mlp_close,
                                 .size = mlp_size,
                                 .data = mlp_data,
                                 .create = mlp_create,
                                 .loader = mlp_loader,
                                 .assign = mlp_assign,
                                 .layers = mlp_layers,
                                 .meta = mlp_meta,
                                 .describe = mlp_describe,
                                 .inputs = mlp_inputs,
                                 .histogram = mlp_histogram};
