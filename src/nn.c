/* nn.c - the MLP: forward/backward pairs over gemm and ops. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

#define L_MAX MP_MLP_MAX_LAYERS

struct mp_mlp {
    mp_mlp_config cfg;
    mp_dtype ct;
    mp_dtype acc;             /* where reductions round: MP_F32 or ct (mp_mlp_set_reductions) */
    mp_master_weights master; /* where the parameters live */
    size_t max_batch;
    mp_param *w[L_MAX], *b[L_MAX], *lnw[L_MAX], *lnb[L_MAX];
    void *act[L_MAX + 1]; /* act[l]: input of Linear l (B, widths[l]), compute format */
    void *z[L_MAX];       /* output of Linear l (B, widths[l+1]) */
    void *h[L_MAX];       /* after layer norm (== z without it): the activation's input */
    float *mean[L_MAX], *rstd[L_MAX];
    void *g0, *g1;   /* gradient buffers (B, max width) */
    float *dwf;      /* a weight gradient in fp32 before its rounding (histogram), eval rows */
    float *fscratch; /* fp32 copies of pure-bf16 biases and layer-norm parameters */
    mp_tensor_stats stats[L_MAX];
    uint64_t *hist, *hist_zeros; /* gradient histogram (mp_mlp_histogram) */
    int hist_lo, hist_n;
    mp_recipe recipe;      /* kind MP_RECIPE_NONE: the Linear layers' GEMMs read ct; else the first layer's */
    mp_recipe lrec[L_MAX]; /* with a recipe: each layer's own (kind NONE: it reads ct) */
    mp_qtensor *q;         /* with a recipe: per layer, input, weight and gradient */
    uint16_t *qa, *qb;     /* the quantized operands of one GEMM */
};

void mp_mlp_histogram(mp_mlp *m, uint64_t *bins, int lo, int nbins, uint64_t *zeros) {
    m->hist = bins, m->hist_lo = lo, m->hist_n = nbins, m->hist_zeros = zeros;
}

mp_status mp_mlp_parse(const char *spec, mp_mlp_config *c) {
    memset(c, 0, sizeof *c);
    if (!spec || strncmp(spec, "mlp:", 4) != 0)
        return mp_error(MP_EINVAL, "model '%s': expected mlp:IN-H1-...-OUT, e.g. mlp:784-1024-1024-10",
                        spec ? spec : "");
    const char *p = spec + 4;
    int n = 0;
    while (*p) {
        char *end;
        const long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 65536 || (*end && *end != '-'))
            return mp_error(MP_EINVAL, "model '%s': widths are whole numbers 1..65536 joined by '-'", spec);
        if (n > L_MAX) return mp_error(MP_EINVAL, "model '%s': at most %d layers", spec, L_MAX);
        c->widths[n++] = (int)v;
        p = *end ? end + 1 : end;
        if (*end && !*p) return mp_error(MP_EINVAL, "model '%s': trailing '-'", spec);
    }
    if (n < 2) return mp_error(MP_EINVAL, "model '%s': needs at least an input and an output width", spec);
    c->nlayers = n - 1;
    return MP_OK;
}

static double uniform01(uint64_t *s) { return (double)(mp_splitmix64(s) >> 11) * 0x1p-53; }

static void free_recipe(mp_mlp *m) {
    for (int i = 0; m->q && i < 3 * m->cfg.nlayers; i++) mp_qtensor_free(&m->q[i]);
    free(m->q), free(m->qa), free(m->qb);
    m->q = NULL, m->qa = m->qb = NULL, m->recipe.kind = MP_RECIPE_NONE;
}

void mp_mlp_free(mp_mlp *m) {
    if (!m) return;
    free_recipe(m);
    for (int l = 0; l <= m->cfg.nlayers; l++) free(m->act[l]);
    for (int l = 0; l < m->cfg.nlayers; l++) {
        free(m->z[l]);
        if (m->h[l] != m->z[l]) free(m->h[l]);
        free(m->mean[l]), free(m->rstd[l]);
    }
    free(m->g0), free(m->g1), free(m->dwf), free(m->fscratch);
    free(m);
}

/* Activation and gradient buffers start on cache lines, as the GEMM's tiles do. */
static void *buffer(size_t bytes) { return aligned_alloc(64, (bytes + 63) / 64 * 64); }

static mp_status add(mp_mlp *m, mp_optim *opt, const char *fmt, int l, const float *init, size_t n, mp_dtype half,
                     mp_param **out) {
    char name[64];
    snprintf(name, sizeof name, fmt, l);
    return mp_optim_add_as(opt, name, init, n, m->ct, m->master, half, out);
}

mp_status mp_mlp_create(mp_mlp **out, const mp_mlp_config *c, mp_dtype ct, mp_master_weights master, size_t max_batch,
                        mp_optim *opt, uint64_t seed) {
    if (!out || !c || !opt || max_batch == 0) return mp_error(MP_EINVAL, "mp_mlp_create: bad argument");
    *out = NULL;
    if (ct != MP_F32 && ct != MP_F16 && ct != MP_BF16) return mp_error(MP_EINVAL, "mp_mlp_create: compute format");
    mp_status st = mp_master_weights_check("mp_mlp_create", ct, master);
    if (st != MP_OK) return st;
    if (c->nlayers < 1 || c->nlayers > L_MAX) return mp_error(MP_EINVAL, "mp_mlp_create: %d layers", c->nlayers);
    for (int l = 0; l <= c->nlayers; l++)
        if (c->widths[l] < 1 || c->widths[l] > 65536)
            return mp_error(MP_EINVAL, "mp_mlp_create: width %d of layer %d (1 .. 65536)", c->widths[l], l);
    mp_mlp *m = calloc(1, sizeof *m);
    if (!m) return mp_error(MP_ENOMEM, "mp_mlp_create: out of memory");
    m->cfg = *c, m->ct = ct, m->acc = MP_F32, m->master = master, m->max_batch = max_batch;
    const size_t es = mp_format(ct)->size, B = max_batch;
    size_t maxw = 0, maxwn = 0;
    for (int l = 0; l <= c->nlayers; l++) maxw = (size_t)c->widths[l] > maxw ? (size_t)c->widths[l] : maxw;
    int ok = 1;
    for (int l = 0; l <= c->nlayers; l++) ok = ok && (m->act[l] = buffer(B * (size_t)c->widths[l] * es));
    for (int l = 0; l < c->nlayers; l++) {
        const size_t w = (size_t)c->widths[l + 1];
        ok = ok && (m->z[l] = buffer(B * w * es));
        m->h[l] = m->z[l];
        if (c->layernorm && l < c->nlayers - 1) {
            ok = ok && (m->h[l] = buffer(B * w * es)) && (m->mean[l] = malloc(B * 4)) && (m->rstd[l] = malloc(B * 4));
        }
        const size_t wn = w * (size_t)c->widths[l];
        maxwn = wn > maxwn ? wn : maxwn;
    }
    ok = ok && (m->g0 = buffer(B * maxw * es)) && (m->g1 = buffer(B * maxw * es)) && (m->dwf = malloc(maxwn * 4)) &&
         (m->fscratch = malloc(3 * maxw * 4));
    float *init = ok ? malloc((maxwn > maxw ? maxwn : maxw) * 4) : NULL;
    if (!ok || !init) {
        free(init);
        mp_mlp_free(m);
        return mp_error(MP_ENOMEM, "mp_mlp_create: out of memory for a batch of %zu", B);
    }
    uint64_t rng = seed;
    st = MP_OK;
    const mp_dtype half = ct == MP_F32 ? MP_F32 : ct;
    for (int l = 0; l < c->nlayers && st == MP_OK; l++) {
        const size_t in = (size_t)c->widths[l], outw = (size_t)c->widths[l + 1];
        const double bound = 1.0 / sqrt((double)in); /* kaiming_uniform(a=sqrt 5) and the bias rule of nn.Linear */
        for (size_t i = 0; i < outw * in; i++) init[i] = (float)((2.0 * uniform01(&rng) - 1.0) * bound);
        st = add(m, opt, "fc%d.weight", l, init, outw * in, half, &m->w[l]);
        for (size_t i = 0; i < outw; i++) init[i] = (float)((2.0 * uniform01(&rng) - 1.0) * bound);
        if (st == MP_OK) st = add(m, opt, "fc%d.bias", l, init, outw, MP_F32, &m->b[l]);
        if (st == MP_OK && c->layernorm && l < c->nlayers - 1) {
            for (size_t i = 0; i < outw; i++) init[i] = 1.0f;
            st = add(m, opt, "ln%d.weight", l, init, outw, MP_F32, &m->lnw[l]);
            for (size_t i = 0; i < outw; i++) init[i] = 0.0f;
            if (st == MP_OK) st = add(m, opt, "ln%d.bias", l, init, outw, MP_F32, &m->lnb[l]);
        }
    }
    free(init);
    if (st != MP_OK) {
        mp_mlp_free(m);
        return st;
    }
    mp_mlp_reset_stats(m);
    *out = m;
    return MP_OK;
}

const mp_mlp_config *mp_mlp_get_config(const mp_mlp *m) { return &m->cfg; }

mp_status mp_mlp_set_recipe(mp_mlp *m, const mp_recipe *recipe, uint64_t seed) {
    if (!m) return mp_error(MP_EINVAL, "mp_mlp_set_recipe: NULL model");
    const mp_recipe none = {.kind = MP_RECIPE_NONE};
    mp_recipe each[L_MAX];
    for (int l = 0; l < m->cfg.nlayers; l++) each[l] = recipe ? *recipe : none;
    return mp_mlp_set_layer_recipes(m, each, seed);
}

mp_status mp_mlp_set_layer_recipes(mp_mlp *m, const mp_recipe *each, uint64_t seed) {
    if (!m || !each) return mp_error(MP_EINVAL, "mp_mlp_set_layer_recipes: NULL argument");
    mp_recipe lrec[L_MAX];
    int first = -1;
    for (int l = m->cfg.nlayers; l-- > 0;)
        if ((lrec[l] = each[l]).kind != MP_RECIPE_NONE) first = l; /* copied: each may be m's own */
    free_recipe(m);
    if (first < 0) return MP_OK;
    if (m->ct != MP_BF16 || m->master != MP_MASTER_FP32)
        return mp_error(MP_EINVAL, "mlp: the %s recipe runs with bf16 compute and fp32 master weights",
                        mp_recipe_name(lrec[first].kind));
    size_t maxw = 0, maxwn = 0;
    for (int l = 0; l <= m->cfg.nlayers; l++) maxw = (size_t)m->cfg.widths[l] > maxw ? (size_t)m->cfg.widths[l] : maxw;
    for (int l = 0; l < m->cfg.nlayers; l++) {
        const size_t wn = (size_t)m->cfg.widths[l] * (size_t)m->cfg.widths[l + 1];
        maxwn = wn > maxwn ? wn : maxwn;
    }
    const size_t na = m->max_batch * maxw, nb = na > maxwn ? na : maxwn;
    m->q = calloc(3 * (size_t)m->cfg.nlayers, sizeof *m->q);
    m->qa = buffer(na * 2), m->qb = buffer(nb * 2);
    if (!m->q || !m->qa || !m->qb) return free_recipe(m), mp_error(MP_ENOMEM, "mlp: out of memory for the recipe");
    memcpy(m->lrec, lrec, sizeof lrec);
    m->recipe = lrec[first];
    for (int i = 0; i < 3 * m->cfg.nlayers; i++) {
        if (lrec[i / 3].kind == MP_RECIPE_NONE) continue; /* a layer in the compute format */
        const mp_status st = mp_qtensor_init(&m->q[i], &lrec[i / 3], (mp_qrole)(i % 3), seed + (uint64_t)i);
        if (st) return free_recipe(m), st;
    }
    return MP_OK;
}

mp_status mp_mlp_set_reductions(mp_mlp *m, mp_dtype acc) {
    if (!m) return mp_error(MP_EINVAL, "mp_mlp_set_reductions: NULL model");
    const mp_status st = mp_check_reductions("mlp", m->ct, acc);
    if (st != MP_OK) return st;
    m->acc = acc;
    return MP_OK;
}
const mp_tensor_stats *mp_mlp_stats(const mp_mlp *m, int l) {
    return l >= 0 && l < m->cfg.nlayers ? &m->stats[l] : NULL;
}

void mp_mlp_reset_stats(mp_mlp *m) {
    memset(m->stats, 0, sizeof m->stats);
    for (int l = 0; l < m->cfg.nlayers; l++) {
        snprintf(m->stats[l].name, sizeof m->stats[l].name, "fc%d", l);
        m->stats[l].has_wgrad = 1;
    }
}

/* The compute-format weights Linear l reads. */
static const void *weights(const mp_mlp *m, int l) { return m->ct == MP_F32 ? m->w[l]->master : m->w[l]->half; }

/* An fp32 view of a small parameter (bias, layer norm): the master, or the
 * pure bf16 values converted into scratch slot k. */
static const float *fparam(mp_mlp *m, const mp_param *p, int k) {
    if (p->master) return p->master;
    float *s = m->fscratch + (size_t)k * (p->n);
    mp_convert(s, MP_F32, p->half, p->half_type, p->n, NULL);
    return s;
}

/* Statistics of a forward store of n values in layer l (NULL when not counting). */
static mp_convert_stats *fst(mp_mlp *m, int l, size_t n, int counting) {
    if (!counting) return NULL;
    m->stats[l].fwd_elements += n;
    return &m->stats[l].fwd;
}

/* ---- the Linear layers' GEMMs: plain, or on quantized operands (recipe.h) ---- */

static mp_qtensor *qt(mp_mlp *m, int l, mp_qrole role) { return &m->q[3 * l + (int)role]; }

/* Layer l's recipe, or NULL when its GEMMs read ct. */
static const mp_recipe *lrec(const mp_mlp *m, int l) {
    return m->q && m->lrec[l].kind != MP_RECIPE_NONE ? &m->lrec[l] : NULL;
}

/* z (B x out) = x (B x in) W^T, with ep */
static mp_status lin_fwd(mp_mlp *m, int l, size_t B, size_t out, size_t in, const mp_gemm_epilogue *ep) {
    if (!lrec(m, l))
        return mp_gemm_ex(0, 1, B, out, in, 1.0f, m->act[l], m->ct, in, weights(m, l), m->ct, in, 0.0f, m->z[l], m->ct,
                          out, ep);
    return mp_qgemm(lrec(m, l), 0, 1, B, out, in, m->act[l], m->ct, in, qt(m, l, MP_QROLE_INPUT), m->qa,
                    m->w[l]->master, MP_F32, in, qt(m, l, MP_QROLE_WEIGHT), m->qb, 0.0f, m->z[l], m->ct, out, ep);
}

/* c (out x in, fp32) = beta c + dz^T x, with ep */
static mp_status lin_wgrad(mp_mlp *m, int l, size_t B, size_t out, size_t in, const void *dz, float beta, float *c,
                           const mp_gemm_epilogue *ep) {
    if (!lrec(m, l))
        return mp_gemm_ex(1, 0, out, in, B, 1.0f, dz, m->ct, out, m->act[l], m->ct, in, beta, c, MP_F32, in, ep);
    return mp_qgemm(lrec(m, l), 1, 0, out, in, B, dz, m->ct, out, qt(m, l, MP_QROLE_GRAD), m->qa, m->act[l], m->ct, in,
                    qt(m, l, MP_QROLE_INPUT), m->qb, beta, c, MP_F32, in, ep);
}

/* dx (B x in) = dz W */
static mp_status lin_dgrad(mp_mlp *m, int l, size_t B, size_t out, size_t in, const void *dz, void *dx,
                           mp_convert_stats *st) {
    if (!lrec(m, l))
        return mp_gemm(0, 0, B, in, out, 1.0f, dz, m->ct, out, weights(m, l), m->ct, in, 0.0f, dx, m->ct, in, st);
    const mp_gemm_epilogue ep = {.round_to = MP_F32, .stats = st};
    return mp_qgemm(lrec(m, l), 0, 0, B, in, out, dz, m->ct, out, qt(m, l, MP_QROLE_GRAD), m->qa, m->w[l]->master,
                    MP_F32, in, qt(m, l, MP_QROLE_WEIGHT), m->qb, 0.0f, dx, m->ct, in, &ep);
}

/* counting: the stores of layer l (its Linear's output, layer norm and
 * activation) go into the layer's forward statistics (training, not evaluation) */
static mp_status forward(mp_mlp *m, const float *x, size_t B, int counting) {
    const mp_mlp_config *c = &m->cfg;
    const mp_dtype ct = m->ct;
    if (B == 0 || B > m->max_batch) return mp_error(MP_EINVAL, "mlp: batch of %zu rows (1..%zu)", B, m->max_batch);
    for (size_t i = 0; i < B * (size_t)c->widths[0]; i++)
        if (!isfinite(x[i])) return mp_error(MP_EINVAL, "mlp: input value %zu is not finite", i);
    mp_status st = mp_convert(m->act[0], ct, x, MP_F32, B * (size_t)c->widths[0], NULL);
    for (int l = 0; l < c->nlayers && st == MP_OK; l++) {
        const size_t in = (size_t)c->widths[l], out = (size_t)c->widths[l + 1];
        const mp_gemm_epilogue ep = {
            .bias = fparam(m, m->b[l], 0), .round_to = MP_F32, .stats = fst(m, l, B * out, counting), .zeros = NULL};
        st = lin_fwd(m, l, B, out, in, &ep);
        if (st != MP_OK || l == c->nlayers - 1) continue;
        if (m->h[l] != m->z[l]) {
            st = mp_layernorm_forward(m->h[l], ct, m->mean[l], m->rstd[l], m->z[l], ct, fparam(m, m->lnw[l], 1),
                                      fparam(m, m->lnb[l], 2), B, out, 1e-5f, m->acc, fst(m, l, B * out, counting));
        }
        if (st == MP_OK)
            st = (c->act == MP_ACT_GELU ? mp_gelu_forward : mp_relu_forward)(m->act[l + 1], ct, m->h[l], ct, B * out,
                                                                             fst(m, l, B * out, counting));
    }
    return st;
}

static void count(mp_mlp *m, int l, size_t n) { m->stats[l].bwd_elements += n; }

static mp_status backward(mp_mlp *m, size_t B, void *dz, int accumulate) {
    const mp_mlp_config *c = &m->cfg;
    const mp_dtype ct = m->ct;
    mp_status st = MP_OK;
    void *other = dz == m->g0 ? m->g1 : m->g0;
    for (int l = c->nlayers - 1; l >= 0 && st == MP_OK; l--) {
        const size_t in = (size_t)c->widths[l], out = (size_t)c->widths[l + 1];
        mp_tensor_stats *ls = &m->stats[l]; /* its amaxes come with the counts of every store */
        /* dW = dZ^T X, rounded to the compute format (the value a half-precision
         * backward stores, counted) and added to the fp32 gradient in the GEMM's
         * epilogue, with its lost and dead values; the histogram wants the
         * values before that rounding */
        if (m->hist) {
            /* with a recipe, the same quantization as the gradient's below:
             * the layer's tensors (counts, random stream) are put back */
            mp_qtensor keep[3];
            if (m->q) memcpy(keep, qt(m, l, MP_QROLE_INPUT), sizeof keep);
            st = lin_wgrad(m, l, B, out, in, dz, 0.0f, m->dwf, NULL);
            if (m->q) memcpy(qt(m, l, MP_QROLE_INPUT), keep, sizeof keep);
            mp_log2_histogram(m->dwf, MP_F32, out * in, m->hist_lo, m->hist_n, m->hist, m->hist_zeros);
        }
        mp_convert_stats ws = {0, 0, 0, 0, 0.0f}; /* the weight gradient's share of the layer's stores */
        const mp_gemm_epilogue ep = {
            .bias = NULL, .round_to = ct, .stats = ct == MP_F32 ? NULL : &ws, .zeros = &ls->wgrad_dead};
        if (st == MP_OK) st = lin_wgrad(m, l, B, out, in, dz, accumulate ? 1.0f : 0.0f, m->w[l]->grad, &ep);
        mp_convert_stats_add(&ls->bwd, &ws);
        ls->wgrad_lost += ws.underflow, ls->wgrad_elements += out * in;
        count(m, l, out * in);
        if (st == MP_OK && ct == MP_F32) /* nothing rounds, nothing was counted: the gradient's amax */
            mp_stats_amax(&ls->bwd, mp_f32_bits(mp_amax(m->w[l]->grad, MP_F32, out * in)));
        if (st == MP_OK) st = mp_colsum(m->b[l]->grad, dz, ct, B, out, accumulate, m->acc);
        if (st != MP_OK || l == 0) break;
        /* dA (gradient of layer l-1's activation output) = dZ W */
        const size_t pw = (size_t)c->widths[l];
        mp_convert_stats *ps = &m->stats[l - 1].bwd;
        st = lin_dgrad(m, l, B, out, in, dz, other, ps);
        count(m, l - 1, B * in);
        /* through the activation (and layer norm) into dZ of layer l-1, in dz's buffer */
        if (st == MP_OK)
            st = (c->act == MP_ACT_GELU ? mp_gelu_backward : mp_relu_backward)(dz, ct, other, ct, m->h[l - 1], ct,
                                                                               B * pw, ps);
        count(m, l - 1, B * pw);
        if (st == MP_OK && m->h[l - 1] != m->z[l - 1]) {
            st = mp_layernorm_backward(other, ct, m->lnw[l - 1]->grad, m->lnb[l - 1]->grad, dz, ct, m->z[l - 1], ct,
                                       m->mean[l - 1], m->rstd[l - 1], fparam(m, m->lnw[l - 1], 1), B, pw, accumulate,
                                       m->acc, ps);
            count(m, l - 1, B * pw);
            void *t = dz;
            dz = other, other = t;
        }
    }
    return st;
}

mp_status mp_mlp_train_batch(mp_mlp *m, const float *x, const int32_t *labels, size_t B, float grad_scale,
                             int accumulate, float *loss) {
    const int L = m->cfg.nlayers;
    for (int i = 0; m->q && i < 3 * L; i++) mp_qtensor_begin(&m->q[i], !accumulate);
    mp_status st = forward(m, x, B, 1);
    if (st != MP_OK) return st;
    const size_t C = (size_t)m->cfg.widths[L];
    st = mp_cross_entropy(loss, m->g0, m->ct, m->z[L - 1], m->ct, labels, B, C, grad_scale, m->acc,
                          &m->stats[L - 1].bwd);
    count(m, L - 1, B * C);
    if (st == MP_OK) st = backward(m, B, m->g0, accumulate);
    for (int i = 0; st == MP_OK && m->q && i < 3 * L; i++)
        if (lrec(m, i / 3)) mp_qtensor_end(&m->q[i], lrec(m, i / 3));
    return st;
}

/* A forward that changes no recipe state (evaluation): it quantizes with this
 * step's scales, or takes fresh amaxes, and puts every tensor's state back. */
static mp_status forward_quiet(mp_mlp *m, const float *x, size_t B) {
    if (!m->q) return forward(m, x, B, 0);
    const size_t nq = 3 * (size_t)m->cfg.nlayers;
    mp_qtensor *keep = malloc(nq * sizeof *keep);
    if (!keep) return mp_error(MP_ENOMEM, "mlp: out of memory");
    memcpy(keep, m->q, nq * sizeof *keep);              /* the delayed histories are only read by forward */
    for (size_t i = 0; i < nq; i++) m->q[i].scaled = 0; /* current scaling: this batch's own amax */
    const mp_status st = forward(m, x, B, 0);
    memcpy(m->q, keep, nq * sizeof *keep);
    free(keep);
    return st;
}

mp_status mp_mlp_eval_batch(mp_mlp *m, const float *x, const int32_t *labels, size_t B, double *loss_sum,
                            size_t *correct) {
    mp_status st = forward_quiet(m, x, B);
    if (st != MP_OK) return st;
    const int L = m->cfg.nlayers;
    const size_t C = (size_t)m->cfg.widths[L];
    float loss;
    if ((st = mp_cross_entropy(&loss, NULL, MP_F32, m->z[L - 1], m->ct, labels, B, C, 1.0f, MP_F32, NULL)) != MP_OK)
        return st;
    *loss_sum += (double)loss * (double)B;
    float *row = m->dwf;
    for (size_t b = 0; b < B; b++) {
        mp_convert(row, MP_F32, (const uint8_t *)m->z[L - 1] + b * C * mp_format(m->ct)->size, m->ct, C, NULL);
        size_t best = 0;
        for (size_t j = 1; j < C; j++) best = row[j] > row[best] ? j : best;
        *correct += (int32_t)best == labels[b];
    }
    return MP_OK;
}

static mp_status load_param(mp_param *p, const mp_safetensors *st, size_t d0, size_t d1, int ndim) {
    const mp_tensor *t = mp_safetensors_find(st, p->name);
    if (!t) return mp_error(MP_ECORRUPT, "weights: no tensor '%s'", p->name);
    if (t->ndim != ndim || t->shape[0] != d0 || (ndim == 2 && t->shape[1] != d1))
        return mp_error(MP_ECORRUPT, "weights: '%s' has shape [%zu%s%zu], the model needs [%zu%s%zu]", p->name,
                        t->shape[0], t->ndim == 2 ? ", " : "", t->ndim == 2 ? t->shape[1] : (size_t)0, d0,
                        ndim == 2 ? ", " : "", ndim == 2 ? d1 : (size_t)0);
    if (t->dtype != MP_F32 && t->dtype != MP_F16 && t->dtype != MP_BF16)
        return mp_error(MP_ECORRUPT, "weights: '%s' is not F32, F16 or BF16", p->name);
    if (p->master) mp_convert(p->master, MP_F32, t->data, t->dtype, p->n, NULL);
    else mp_convert(p->half, p->half_type, t->data, t->dtype, p->n, NULL);
    for (size_t i = 0; i < p->n; i++) { /* in the master, or in the half copy a run without masters keeps */
        const uint16_t *h = p->half;
        const float v = p->master ? p->master[i] : p->half_type == MP_BF16 ? mp_bf16_to_f32(h[i]) : mp_f16_to_f32(h[i]);
        if (!isfinite(v)) return mp_error(MP_ECORRUPT, "weights: '%s' holds a non-finite value", p->name);
    }
    if (p->master && p->half) mp_convert(p->half, p->half_type, p->master, MP_F32, p->n, NULL);
    return MP_OK;
}

mp_status mp_mlp_load(mp_mlp *m, const mp_safetensors *st) {
    for (int l = 0; l < m->cfg.nlayers; l++) {
        const size_t in = (size_t)m->cfg.widths[l], out = (size_t)m->cfg.widths[l + 1];
        mp_status s = load_param(m->w[l], st, out, in, 2);
        if (s == MP_OK) s = load_param(m->b[l], st, out, 0, 1);
        if (s == MP_OK && m->lnw[l]) s = load_param(m->lnw[l], st, out, 0, 1);
        if (s == MP_OK && m->lnb[l]) s = load_param(m->lnb[l], st, out, 0, 1);
        if (s != MP_OK) return s;
    }
    for (size_t i = 0; i < st->count; i++) { /* then a bigger model's file is not this one's: no layer is dropped */
        int l = -1, end = 0;
        const char *n = st->tensors[i].name;
        if ((sscanf(n, "fc%d.%n", &l, &end) == 1 || sscanf(n, "ln%d.%n", &l, &end) == 1) && end > 0 &&
            (l >= m->cfg.nlayers || (n[0] == 'l' && (l >= m->cfg.nlayers - 1 || !m->cfg.layernorm))))
            return mp_error(MP_ECORRUPT, "weights: '%s' is not a tensor of this model (%d layer%s%s)", n,
                            m->cfg.nlayers, m->cfg.nlayers == 1 ? "" : "s", m->cfg.layernorm ? ", layer norms" : "");
    }
    return MP_OK;
}

static void tensor_of(const mp_param *p, size_t d0, size_t d1, int ndim, mp_tensor *t) {
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", p->name);
    t->dtype = p->master ? MP_F32 : p->half_type;
    t->ndim = ndim, t->shape[0] = d0, t->shape[1] = d1;
    t->data = p->master ? (const void *)p->master : p->half;
    t->nbytes = p->n * mp_format(t->dtype)->size;
}

size_t mp_mlp_tensors(const mp_mlp *m, mp_tensor *out, size_t cap) {
    size_t n = 0;
    for (int l = 0; l < m->cfg.nlayers; l++) {
        const size_t in = (size_t)m->cfg.widths[l], o = (size_t)m->cfg.widths[l + 1];
        const mp_param *ps[4] = {m->w[l], m->b[l], m->lnw[l], m->lnb[l]};
        for (int k = 0; k < 4; k++) {
            if (!ps[k]) continue;
            if (n < cap) tensor_of(ps[k], o, k ? 0 : in, k ? 1 : 2, &out[n]);
            n++;
        }
    }
    return n;
}

/* ---- the model interface ---- */

static mp_status model_train(void *impl, const mp_batch *b, float grad_scale, int accumulate, float *loss) {
    return mp_mlp_train_batch(impl, b->x, b->targets, b->n, grad_scale, accumulate, loss);
}

static mp_status model_eval(void *impl, const mp_batch *b, double *loss_sum, double *count, double *correct) {
    size_t right = 0;
    const mp_status st = mp_mlp_eval_batch(impl, b->x, b->targets, b->n, loss_sum, &right);
    if (st == MP_OK) *count += (double)b->n, *correct += (double)right;
    return st;
}

static size_t model_nstats(const void *impl) { return (size_t)((const mp_mlp *)impl)->cfg.nlayers; }
static const mp_tensor_stats *model_stats(const void *impl, size_t i) { return mp_mlp_stats(impl, (int)i); }
static void model_reset(void *impl) { mp_mlp_reset_stats(impl); }
static mp_status model_reductions(void *impl, mp_dtype acc) { return mp_mlp_set_reductions(impl, acc); }
static mp_status model_load(void *impl, const mp_safetensors *st) { return mp_mlp_load(impl, st); }
static size_t model_tensors(const void *impl, mp_tensor *out, size_t cap) { return mp_mlp_tensors(impl, out, cap); }
static void model_free(void *impl) { mp_mlp_free(impl); }
static const mp_recipe *model_recipe(const void *impl) {
    const mp_mlp *m = impl;
    return m->q ? &m->recipe : NULL;
}

/* "fc{l}.input|weight|grad": m->q's order (layer, role), the layers with a recipe only */
static size_t model_qtensors(void *impl, mp_named_qtensor *out, size_t cap) {
    mp_mlp *m = impl;
    size_t k = 0;
    for (size_t i = 0; m->q && i < 3 * (size_t)m->cfg.nlayers; i++) {
        if (!lrec(m, (int)(i / 3))) continue;
        if (k < cap) {
            snprintf(out[k].name, sizeof out[k].name, "fc%zu.%s", i / 3, mp_qrole_name(m->q[i].role));
            out[k].q = &m->q[i], out[k].recipe = lrec(m, (int)(i / 3));
        }
        k++;
    }
    return k;
}

static const mp_model_ops mlp_ops = {
    .kind = "mlp",
    .train_batch = model_train,
    .eval_batch = model_eval,
    .nstats = model_nstats,
    .stats = model_stats,
    .reset_stats = model_reset,
    .set_reductions = model_reductions,
    .load = model_load,
    .tensors = model_tensors,
    .free = model_free,
    .recipe = model_recipe,
    .qtensors = model_qtensors,
};

mp_model mp_mlp_model(mp_mlp *m) {
    const mp_model model = {&mlp_ops, m};
    return model;
}
