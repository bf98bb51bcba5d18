/* custom_model.c - your own model and data behind mixprec's interfaces
 * (model.h, train.h's mp_loader), trained by the library's comparison
 * (compare.h: one mp_run per precision mode) in fp32 and in fp16 with dynamic
 * loss scaling, with the logs, the summaries and the HTML report written.
 * The model is a softmax classifier, logits = x W^T, computing in the mode's
 * format with fp32 accumulation; the data are three Gaussian blobs in 8
 * dimensions.
 *   cc custom_model.c $(pkg-config --cflags --libs mixprec) -o custom_model
 *   ./custom_model [DIR]       (DIR: custom-model, where the report goes) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mixprec/mixprec.h>

enum { N = 1536, D = 8, K = 3 }; /* examples, features, classes */

/* ---- the data: N points, the first 5/6 to train on, the rest to evaluate ---- */

typedef struct {
    float x[N * D];
    int32_t y[N];
    size_t rows; /* a training micro-batch */
    int shuffle;
    uint64_t seed;
} blobs;

static uint64_t next(uint64_t *s) { return (*s = *s * 6364136223846793005ull + 1442695040888963407ull) >> 33; }
static float uniform(uint64_t *s) { return (float)next(s) / 2147483648.0f; }

static void blobs_make(blobs *d) {
    uint64_t s = 7;
    for (int i = 0; i < N; i++) { /* class c: a blob around 2 e_c, noise uniform in [-1, 1) */
        d->y[i] = i % K;
        for (int j = 0; j < D; j++) d->x[i * D + j] = (j == d->y[i] ? 2.0f : 0.0f) + 2.0f * uniform(&s) - 1.0f;
    }
}

enum { NTRAIN = N / 6 * 5 };

/* Micro-batch s: rows [s rows, (s + 1) rows) of an epoch's order, in file
 * order or shuffled by (seed, epoch), as the library's loaders do. */
static mp_status blobs_train(void *impl, uint64_t s, mp_batch *b) {
    blobs *d = impl;
    static float x[NTRAIN * D];
    static int32_t y[NTRAIN];
    const size_t per = NTRAIN / d->rows, first = (size_t)(s % per) * d->rows;
    uint64_t rng = d->seed ^ (s / per + 1) * 0x9e3779b97f4a7c15ull;
    for (size_t r = 0; r < d->rows; r++) {
        const size_t i = d->shuffle ? (size_t)next(&rng) % NTRAIN : first + r;
        memcpy(x + r * D, d->x + i * D, D * sizeof *x), y[r] = d->y[i];
    }
    *b = (mp_batch){.n = d->rows, .t = 1, .x = x, .targets = y, .features = D};
    return MP_OK;
}

static mp_status blobs_eval(void *impl, size_t i, mp_batch *b) {
    blobs *d = impl;
    const size_t n = i == 0 ? N - NTRAIN : 0; /* one batch: all of the held-out points */
    *b = (mp_batch){.n = n, .t = 1, .x = d->x + NTRAIN * D, .targets = d->y + NTRAIN, .features = D};
    return MP_OK;
}

static void blobs_free(void *impl) { (void)impl; } /* the data outlive the runs */

static mp_status data_loader(void *ctx, size_t rows, int shuffle, uint64_t seed, mp_loader *out, long *per_epoch) {
    blobs *d = ctx;
    if (rows == 0 || rows > NTRAIN) return mp_set_error(MP_EINVAL, "blobs: %zu rows a batch (1 .. %d)", rows, NTRAIN);
    d->rows = rows, d->shuffle = shuffle, d->seed = seed;
    *out = (mp_loader){d, blobs_train, blobs_eval, blobs_free};
    *per_epoch = (long)(NTRAIN / rows);
    return MP_OK;
}

/* ---- the model ---- */

typedef struct {
    mp_dtype ct;                /* the compute format */
    mp_param *w;                /* fc.weight (K, D) */
    void *x, *logits, *dlogits; /* (rows, D), (rows, K), (rows, K) in ct */
    float *wide;                /* (rows, K) fp32: logits for the evaluation's argmax */
    size_t cap;                 /* rows the buffers hold */
    mp_tensor_stats st; /* the stores of the logits (forward), of their gradient and of the weight's (backward) */
} softmax;

static const void *weights(const softmax *m) { return m->ct == MP_F32 ? m->w->master : m->w->half; }

/* x into the compute format, logits = x W^T (fp32 accumulation, stored in ct;
 * counted when training: the counts describe the training steps). */
static mp_status forward(softmax *m, const mp_batch *b, int count) {
    if (b->n > m->cap) return mp_set_error(MP_EINVAL, "softmax: a batch of %zu rows (at most %zu)", b->n, m->cap);
    mp_status st = mp_convert(m->x, m->ct, b->x, MP_F32, b->n * D, NULL);
    if (st == MP_OK)
        st = mp_gemm(0, 1, b->n, K, D, 1.0f, m->x, m->ct, D, weights(m), m->ct, D, 0.0f, m->logits, m->ct, K,
                     count ? &m->st.fwd : NULL);
    if (count) m->st.fwd_elements += b->n * K;
    return st;
}

static mp_status train_batch(void *impl, const mp_batch *b, float grad_scale, int accumulate, float *loss) {
    softmax *m = impl;
    mp_status st = forward(m, b, 1);
    /* the loss in fp32, its gradient (scaled by the loss scale) stored in ct: counted */
    if (st == MP_OK)
        st = mp_cross_entropy(loss, m->dlogits, m->ct, m->logits, m->ct, b->targets, b->n, K, grad_scale, MP_F32,
                              &m->st.bwd);
    m->st.bwd_elements += b->n * K;
    /* dW = dlogits^T x in fp32, rounded to ct as a half-precision weight gradient is, into the fp32 gradient;
     * its stores counted (lost: nonzero in fp32, 0 in ct) and its exact zeros (dead) */
    mp_convert_stats ws = {0, 0, 0, 0, 0.0f};
    const mp_gemm_epilogue ep = {.round_to = m->ct, .stats = m->ct == MP_F32 ? NULL : &ws, .zeros = &m->st.wgrad_dead};
    if (st == MP_OK)
        st = mp_gemm_ex(1, 0, K, D, b->n, 1.0f, m->dlogits, m->ct, K, m->x, m->ct, D, accumulate ? 1.0f : 0.0f,
                        m->w->grad, MP_F32, D, &ep);
    mp_convert_stats_add(&m->st.bwd, &ws);
    m->st.wgrad_lost += ws.underflow, m->st.wgrad_elements += K * D, m->st.bwd_elements += K * D;
    return st;
}

static mp_status eval_batch(void *impl, const mp_batch *b, double *loss_sum, double *count, double *correct) {
    softmax *m = impl;
    float loss;
    mp_status st = forward(m, b, 0);
    if (st == MP_OK)
        st = mp_cross_entropy(&loss, NULL, m->ct, m->logits, m->ct, b->targets, b->n, K, 1.0f, MP_F32, NULL);
    if (st == MP_OK) st = mp_convert(m->wide, MP_F32, m->logits, m->ct, b->n * K, NULL);
    if (st != MP_OK) return st;
    for (size_t i = 0; i < b->n; i++) {
        int best = 0;
        for (int c = 1; c < K; c++) best = m->wide[i * K + c] > m->wide[i * K + best] ? c : best;
        *correct += best == b->targets[i];
    }
    *loss_sum += (double)loss * (double)b->n, *count += (double)b->n;
    return MP_OK;
}

static size_t nstats(const void *impl) { return (void)impl, 1; }
static const mp_tensor_stats *stats(const void *impl, size_t i) { return (void)i, &((const softmax *)impl)->st; }

static void reset_stats(void *impl) {
    softmax *m = impl;
    memset(&m->st.fwd, 0, sizeof m->st.fwd), memset(&m->st.bwd, 0, sizeof m->st.bwd);
    m->st.fwd_elements = m->st.bwd_elements = m->st.wgrad_elements = m->st.wgrad_lost = m->st.wgrad_dead = 0;
}

static mp_status load(void *impl, const mp_safetensors *st) {
    return (void)impl, (void)st, mp_set_error(MP_EUNSUPPORTED, "softmax: no --init (its weights start from the seed)");
}

/* The parameters for a checkpoint: the fp32 master (or, without one, the weights as held). */
static size_t tensors(const void *impl, mp_tensor *out, size_t cap) {
    const softmax *m = impl;
    if (cap < 1) return 1;
    const int master = m->w->master != NULL;
    out[0] = (mp_tensor){.name = "fc.weight",
                         .dtype = master ? MP_F32 : m->ct,
                         .ndim = 2,
                         .shape = {K, D},
                         .nbytes = K * D * (master ? 4u : 2u),
                         .data = master ? (const void *)m->w->master : m->w->half};
    return 1;
}

static void model_free(void *impl) {
    softmax *m = impl;
    free(m->x), free(m->logits), free(m->dlogits), free(m->wide), free(m);
}

static const mp_model_ops softmax_ops = {.kind = "softmax",
                                         .train_batch = train_batch,
                                         .eval_batch = eval_batch,
                                         .nstats = nstats,
                                         .stats = stats,
                                         .reset_stats = reset_stats,
                                         .load = load,
                                         .tensors = tensors,
                                         .free = model_free};

/* The model for a run: its weight registered as the mode asks (an fp32 master
 * with a copy in the compute format, or the weights alone), from seed. */
static mp_status model_create(void *ctx, const mp_precision *p, mp_optim *opt, size_t rows, uint64_t seed,
                              mp_model *out) {
    (void)ctx;
    if (p->recipe != MP_RECIPE_NONE) return mp_set_error(MP_EINVAL, "softmax: no fp8/fp4 recipes (%s)", p->label);
    softmax *m = calloc(1, sizeof *m);
    if (!m) return mp_set_error(MP_ENOMEM, "softmax: out of memory");
    m->ct = p->compute, m->cap = rows > N - NTRAIN ? rows : N - NTRAIN;
    snprintf(m->st.name, sizeof m->st.name, "fc");
    m->st.has_wgrad = 1;
    const size_t es = mp_format(m->ct)->size;
    m->x = malloc(m->cap * D * es), m->logits = malloc(m->cap * K * es), m->dlogits = malloc(m->cap * K * es);
    m->wide = malloc(m->cap * K * sizeof *m->wide);
    float w0[K * D];
    for (int i = 0; i < K * D; i++) w0[i] = 0.1f * (uniform(&seed) - 0.5f);
    const mp_status st = !m->x || !m->logits || !m->dlogits || !m->wide
                             ? mp_set_error(MP_ENOMEM, "softmax: out of memory")
                             : mp_optim_add_as(opt, "fc.weight", w0, K * D, m->ct, p->master_weights, m->ct, &m->w);
    if (st != MP_OK) return model_free(m), st;
    *out = (mp_model){&softmax_ops, m};
    return MP_OK;
}

int main(int argc, char **argv) {
    static blobs data;
    blobs_make(&data);
    const mp_run_model custom = {.ctx = &data, .create = model_create, .loader = data_loader};
    mp_compare_spec c;
    mp_compare_defaults(&c);
    c.run.model = "softmax:8-3", c.run.custom = &custom;
    c.run.batch = 64, c.run.steps = 200, c.run.lr = 1e-2, c.run.eval_every = 50;
    c.precisions = "fp32,fp16-dynamic";
    c.out = argc > 1 ? argv[1] : "custom-model";
    c.command = "examples/custom_model.c";
    const mp_run_io io = {.out = stdout, .err = stderr, .prefix = "custom_model"};
    mp_compare_result r;
    const mp_status st = mp_compare(&c, &io, &r);
    int learned = st == MP_OK && r.n == 2;
    for (int i = 0; learned && i < r.n; i++) learned = r.modes[i].result.eval_accuracy > 0.9;
    mp_compare_result_free(&r);
    if (st != MP_OK) fprintf(stderr, "custom_model: %s\n", mp_last_error());
    return learned ? 0 : 1;
}
