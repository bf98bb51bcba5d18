/* gpt.c - a GPT (nanoGPT's architecture, llm.c's layout) as forward/backward
 * pairs over gemm and ops.
 *
 * Buffers (N = B T rows; "ct" the compute format, fp32 statistics):
 *   x0 (N, C)                   wte[tok] + wpe[pos], the residual stream's start
 *   per block: ln1 (N, C), qkv (N, 3C), sm (B, H, T, 2) the attention rows'
 *              softmax statistics, y (N, C), res1 (N, C), ln2 (N, C),
 *              fc (N, 4C), gelu (N, 4C), res2 (N, C); mean and rstd of both
 *              layer norms
 *   lnf (N, C), logits (N, V)   (the logits' buffer then holds dlogits)
 *   tmp (N, C)                  a branch's output before its residual add
 *   gradients: g_res, g_a (N, C) and g_big (N, 4C), reused by every block
 * Attention is mp_attention_forward/backward (attention.c): one fused kernel
 * per (sequence, head) and block of query rows, its scratch per thread held
 * here (att_scr). The element-wise
 * work of the other layers runs in the GEMMs' epilogues: bias + GELU after
 * c_fc, the residual sums after the c_proj layers, GELU's gradient after
 * mlp.c_proj's input gradient.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "internal.h"

/* activations of a block, in forward order: the stats entries "h.{i}.NAME" */
enum { A_LN1, A_QKV, A_ATT, A_Y, A_APROJ, A_RES1, A_LN2, A_FC, A_GELU, A_MPROJ, A_RES2, A_PER_LAYER };
static const char *const act_names[A_PER_LAYER] = {"ln_1",        "attn.c_attn", "attn.att", "attn.y",
                                                   "attn.c_proj", "res_1",       "ln_2",     "mlp.c_fc",
                                                   "mlp.gelu",    "mlp.c_proj",  "res_2"};
/* weights of a block whose gradients are rounded to ct: "h.{i}.NAME" */
enum { W_ATT, W_APR, W_FC, W_MPR, W_PER_LAYER };
static const char *const w_names[W_PER_LAYER] = {"attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight",
                                                 "mlp.c_proj.weight"};

typedef struct block {
    mp_param *ln1w, *ln1b, *attw, *attb, *aprw, *aprb, *ln2w, *ln2b, *fcw, *fcb, *mprw, *mprb;
    void *ln1, *qkv, *y, *res1, *ln2, *fc, *gelu, *res2;
    float *sm; /* (B, H, T, 2): each attention row's softmax max and normalizer (mp_softmax_row_keep) */
    float *mean1, *rstd1, *mean2, *rstd2;
} block;

/* A block's parameters in nanoGPT's state_dict order: the name after
 * "transformer.h.L.", the shape in units of C (d1 0: a vector), the initial
 * values (init 0: the constant c; 1: N(0, 0.02); 2: N(0, 0.02 / sqrt(2 L)),
 * the residual projections) and the block's field. */
typedef struct {
    const char *name;
    int d0, d1, init;
    float c;
    size_t field;
} block_param;
enum { P_PER_LAYER = 12 };
static const block_param block_params[P_PER_LAYER] = {
    {"ln_1.weight", 1, 0, 0, 1, offsetof(block, ln1w)},        {"ln_1.bias", 1, 0, 0, 0, offsetof(block, ln1b)},
    {"attn.c_attn.weight", 3, 1, 1, 0, offsetof(block, attw)}, {"attn.c_attn.bias", 3, 0, 0, 0, offsetof(block, attb)},
    {"attn.c_proj.weight", 1, 1, 2, 0, offsetof(block, aprw)}, {"attn.c_proj.bias", 1, 0, 0, 0, offsetof(block, aprb)},
    {"ln_2.weight", 1, 0, 0, 1, offsetof(block, ln2w)},        {"ln_2.bias", 1, 0, 0, 0, offsetof(block, ln2b)},
    {"mlp.c_fc.weight", 4, 1, 1, 0, offsetof(block, fcw)},     {"mlp.c_fc.bias", 4, 0, 0, 0, offsetof(block, fcb)},
    {"mlp.c_proj.weight", 1, 4, 2, 0, offsetof(block, mprw)},  {"mlp.c_proj.bias", 1, 0, 0, 0, offsetof(block, mprb)},
};

struct mp_gpt {
    mp_gpt_config cfg;
    mp_dtype ct;
    mp_dtype acc;             /* where reductions round: MP_F32 or ct (mp_gpt_set_reductions) */
    mp_master_weights master; /* where the parameters live */
    size_t max_batch, es;
    size_t last_rows; /* B T of the last mp_gpt_train_batch (mp_gpt_activation) */
    mp_param *wte, *wpe, *lnfw, *lnfb;
    mp_param **params; /* registration order */
    size_t (*shape)[2];
    int *ndim;
    size_t nparams;
    block *h;
    void *x0, *lnf, *logits, *tmp;
    float *meanf, *rstdf;
    void *g_res, *g_a, *g_big;
    float *fscratch; /* 2 slots of 4C: fp32 copies of pure-bf16 biases and layer norms */
    float *row;      /* max(2C, V) fp32: embedding rows, eval logits */
    float *dacc;     /* (V + T) x C fp32, on the first accumulating micro-batch: its dwte and dwpe */
    float *att_scr;  /* per thread: the attention's scratch (mp_attention_scratch_floats) */
    size_t att_stride;
    int att_threads;
    mp_tensor_stats *stats;
    size_t nstats;
    int counting;
    mp_recipe recipe;  /* kind MP_RECIPE_NONE: the Linear layers' GEMMs read ct; else the first layer's recipe */
    mp_recipe *lrec;   /* with a recipe: per block and Linear (W_*), its own (kind NONE: it reads ct) */
    mp_qtensor *q;     /* with a recipe: per block and Linear (W_*), input, weight and gradient */
    uint16_t *qa, *qb; /* the quantized operands of one GEMM (N x 4C and max(N, 4C) x 4C) */
    mp_recipe probe;   /* kind MP_RECIPE_NONE: no probe; else the recipe the bf16 GEMMs are measured against */
    mp_qtensor *pq;    /* with a probe: its tensors, as q's */
    mp_qprobe *pst;    /* with a probe: per block, Linear and direction (forward, input and weight gradient) */
    uint16_t *pa, *pb; /* with a probe: its quantized operands, as qa and qb */
    float *pscr;       /* with a probe: 2 products of max(N x 4C, 4C x 4C) */
    void **mem;
    size_t nmem, capmem;
};

/* ---- small helpers ---- */

static void *buffer(mp_gpt *g, size_t bytes) {
    if (g->nmem == g->capmem) return NULL;
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (p) g->mem[g->nmem++] = p;
    return p;
}

static size_t s_act(const mp_gpt *g, int l, int a) {
    (void)g;
    return 1 + (size_t)l * A_PER_LAYER + (size_t)a;
}
static size_t s_lnf(const mp_gpt *g) { return 1 + (size_t)g->cfg.n_layer * A_PER_LAYER; }
static size_t s_head(const mp_gpt *g) { return s_lnf(g) + 1; }
static size_t s_wte_w(const mp_gpt *g) { return s_lnf(g) + 2; }
static size_t s_wpe_w(const mp_gpt *g) { return s_lnf(g) + 3; }
static size_t s_w(const mp_gpt *g, int l, int w) { return s_lnf(g) + 4 + (size_t)l * W_PER_LAYER + (size_t)w; }

/* Statistics of a forward store of n values into entry i (NULL when not counting). */
static mp_convert_stats *fst(mp_gpt *g, size_t i, size_t n) {
    if (!g->counting) return NULL;
    g->stats[i].fwd_elements += n;
    return &g->stats[i].fwd;
}
static mp_convert_stats *bst(mp_gpt *g, size_t i, size_t n) {
    g->stats[i].bwd_elements += n;
    return &g->stats[i].bwd;
}

/* A weight gradient: rounded to ct (counted) and written or added to the fp32
 * gradient in the GEMM's epilogue, its exact zeros counted, the amax of the
 * gradient as it then stands taken there; nothing rounds in fp32 (weight_amax
 * takes it then). */
static mp_gemm_epilogue wgrad(mp_gpt *g, size_t i, size_t n) {
    mp_gemm_epilogue ep = {.bias = NULL, .round_to = MP_F32, .stats = NULL, .zeros = &g->stats[i].wgrad_dead};
    g->stats[i].bwd_elements += n, g->stats[i].wgrad_elements += n;
    if (g->ct != MP_F32) ep.round_to = g->ct, ep.stats = &g->stats[i].bwd;
    return ep;
}

/* The amax of a weight's gradient as it stands, where no epilogue took it. */
static void weight_amax(mp_gpt *g, const mp_param *w, size_t i) {
    mp_stats_amax(&g->stats[i].bwd, mp_f32_bits(mp_amax(w->grad, MP_F32, w->n)));
}

/* A weight's entry counts only its gradient's rounding: all of its
 * underflow is lost gradient values. */
static void count_lost(mp_gpt *g) {
    for (size_t i = s_wte_w(g); i < g->nstats; i++) g->stats[i].wgrad_lost = g->stats[i].bwd.underflow;
}

/* The compute-format values a GEMM reads. */
static const void *wct(const mp_gpt *g, const mp_param *p) {
    return g->ct == MP_F32 ? (const void *)p->master : p->half;
}

/* An fp32 view of a small parameter: the master, or the pure bf16 values in scratch slot k. */
static const float *fparam(mp_gpt *g, const mp_param *p, int k) {
    if (p->master) return p->master;
    float *s = g->fscratch + (size_t)k * 4 * (size_t)g->cfg.n_embd;
    mp_convert(s, MP_F32, p->half, p->half_type, p->n, NULL);
    return s;
}

static uint8_t *at(const mp_gpt *g, const void *p, size_t i) { return (uint8_t *)p + i * g->es; }

/* ---- configuration ---- */

static mp_status check_config(const mp_gpt_config *c, const char *what) {
    if (c->n_layer < 1 || c->n_layer > 64) return mp_error(MP_EINVAL, "%s: %d layers (1..64)", what, c->n_layer);
    if (c->n_embd < 1 || c->n_embd > 8192) return mp_error(MP_EINVAL, "%s: width %d (1..8192)", what, c->n_embd);
    if (c->n_head < 1 || c->n_embd % c->n_head != 0)
        return mp_error(MP_EINVAL, "%s: %d heads do not divide the width %d", what, c->n_head, c->n_embd);
    if (c->block_size < 1 || c->block_size > 8192)
        return mp_error(MP_EINVAL, "%s: context %d (1..8192)", what, c->block_size);
    if (c->vocab_size < 1 || c->vocab_size > (1 << 24))
        return mp_error(MP_EINVAL, "%s: vocabulary of %d (1..2^24)", what, c->vocab_size);
    if (c->gelu != MP_GELU_TANH && c->gelu != MP_GELU_ERF) return mp_error(MP_EINVAL, "%s: unknown GELU form", what);
    return MP_OK;
}

mp_status mp_gpt_parse(const char *spec, mp_gpt_config *c) {
    if (!c) return mp_error(MP_EINVAL, "mp_gpt_parse: NULL config");
    memset(c, 0, sizeof *c);
    if (!spec || strncmp(spec, "gpt:", 4) != 0)
        return mp_error(MP_EINVAL,
                        "model '%s': expected gpt:L-H-C-T (layers, heads, width, context), e.g. gpt:6-6-384-256",
                        spec ? spec : "");
    const size_t len = strlen(spec);
    if (spec[len - 1] == '-') return mp_error(MP_EINVAL, "model '%s': trailing '-'", spec);
    long v[4];
    const char *p = spec + 4;
    for (int i = 0; i < 4; i++) {
        char *end = NULL;
        if (*p < '0' || *p > '9') goto bad;
        v[i] = strtol(p, &end, 10);
        if (v[i] > 1000000) v[i] = 1000000; /* out of every range below */
        if (i < 3 && *end != '-') goto bad;
        if (i == 3 && *end) goto bad;
        p = end + 1;
    }
    c->n_layer = (int)v[0], c->n_head = (int)v[1], c->n_embd = (int)v[2], c->block_size = (int)v[3];
    c->vocab_size = 256, c->gelu = MP_GELU_TANH;
    char what[96];
    snprintf(what, sizeof what, "model '%.80s'", spec);
    mp_status st = check_config(c, what);
    if (st != MP_OK) memset(c, 0, sizeof *c);
    return st;
bad:
    return mp_error(MP_EINVAL, "model '%s': expected four whole numbers L-H-C-T joined by '-', e.g. gpt:6-6-384-256",
                    spec);
}

/* ---- creation ---- */

/* n values of N(0, std^2): Box-Muller on pairs of splitmix64 uniforms
 * u1, u2 in [0, 1) (53 bits): r = sqrt(-2 ln(1 - u1)), v[2i] = std r cos(2 pi u2),
 * v[2i+1] = std r sin(2 pi u2), in double, rounded to fp32; an odd n drops
 * the last sine. */
static void normal_fill(float *v, size_t n, double std, uint64_t *rng) {
    for (size_t i = 0; i < n; i += 2) {
        const double u1 = (double)(mp_splitmix64(rng) >> 11) * 0x1p-53,
                     u2 = (double)(mp_splitmix64(rng) >> 11) * 0x1p-53;
        const double r = sqrt(-2.0 * log(1.0 - u1)), th = 6.283185307179586 * u2;
        v[i] = (float)(std * r * cos(th));
        if (i + 1 < n) v[i + 1] = (float)(std * r * sin(th));
    }
}

static size_t nq(const mp_gpt *g) { return (size_t)g->cfg.n_layer * W_PER_LAYER * 3; }

/* The quantized operands of one Linear GEMM, in elements: A (N x 4C) and B
 * (max(N, 4C) x 4C), N the largest batch's rows; into 64-byte-aligned bf16 buffers. */
static mp_status alloc_operands(const mp_gpt *g, uint16_t **a, uint16_t **b) {
    const size_t C = (size_t)g->cfg.n_embd, N = g->max_batch * (size_t)g->cfg.block_size;
    const size_t na = N * 4 * C, nb = (N > 4 * C ? N : 4 * C) * 4 * C;
    *a = aligned_alloc(64, (na * 2 + 63) / 64 * 64);
    *b = aligned_alloc(64, (nb * 2 + 63) / 64 * 64);
    return *a && *b ? MP_OK : MP_ENOMEM;
}

static void free_probe(mp_gpt *g) {
    for (size_t i = 0; g->pq && i < nq(g); i++) mp_qtensor_free(&g->pq[i]);
    free(g->pq), free(g->pst), free(g->pa), free(g->pb), free(g->pscr);
    g->pq = NULL, g->pst = NULL, g->pa = g->pb = NULL, g->pscr = NULL, g->probe.kind = MP_RECIPE_NONE;
}

static void free_recipe(mp_gpt *g) {
    for (size_t i = 0; g->q && i < nq(g); i++) mp_qtensor_free(&g->q[i]);
    free(g->q), free(g->qa), free(g->qb), free(g->lrec);
    g->q = NULL, g->qa = g->qb = NULL, g->lrec = NULL, g->recipe.kind = MP_RECIPE_NONE;
}

void mp_gpt_free(mp_gpt *g) {
    if (!g) return;
    for (size_t i = 0; i < g->nmem; i++) free(g->mem[i]);
    free(g->att_scr), free(g->dacc);
    free_recipe(g);
    free_probe(g);
    free(g->mem), free(g->h), free(g->params), free(g->shape), free(g->ndim), free(g->stats);
    free(g);
}

static mp_status ensure_att_scratch(mp_gpt *g, int nt) {
    if (nt <= g->att_threads) return MP_OK;
    free(g->att_scr);
    g->att_scr = aligned_alloc(64, (size_t)nt * g->att_stride * sizeof(float));
    g->att_threads = g->att_scr ? nt : 0;
    return g->att_scr ? MP_OK : mp_error(MP_ENOMEM, "gpt: out of memory for the attention scratch");
}

static int att_thread_count(void) {
    int nt = mp_get_threads();
    return nt < 1 ? 1 : nt > MP_MAX_THREADS ? MP_MAX_THREADS : nt;
}

/* Registers one parameter: name from fmt and layer l, shape [d0] or
 * [d0, d1] (d1 == 0: a vector); init N(0, std) (std > 0) or the constant c.
 * Matrices have a half copy in ct and decay; vectors (biases, layer norms)
 * are fp32 only and do not decay. */
static mp_status add_param(mp_gpt *g, mp_optim *opt, const char *name, size_t d0, size_t d1, double std, float c,
                           float *init, uint64_t *rng, mp_param **out) {
    const size_t n = d0 * (d1 ? d1 : 1);
    if (std > 0) normal_fill(init, n, std, rng);
    else
        for (size_t i = 0; i < n; i++) init[i] = c;
    const int weight = d1 != 0;
    mp_status st = mp_optim_add_as(opt, name, init, n, g->ct, g->master, weight ? g->ct : MP_F32, out);
    if (st != MP_OK) return st;
    (*out)->no_decay = !weight;
    g->params[g->nparams] = *out;
    g->shape[g->nparams][0] = d0, g->shape[g->nparams][1] = d1;
    g->ndim[g->nparams] = weight ? 2 : 1;
    g->nparams++;
    return MP_OK;
}

static void name_stats(mp_gpt *g) {
    const int L = g->cfg.n_layer;
    snprintf(g->stats[0].name, sizeof g->stats[0].name, "wte");
    for (int l = 0; l < L; l++)
        for (int a = 0; a < A_PER_LAYER; a++)
            snprintf(g->stats[s_act(g, l, a)].name, sizeof g->stats[0].name, "h.%d.%s", l, act_names[a]);
    snprintf(g->stats[s_lnf(g)].name, sizeof g->stats[0].name, "ln_f");
    snprintf(g->stats[s_head(g)].name, sizeof g->stats[0].name, "lm_head");
    snprintf(g->stats[s_wte_w(g)].name, sizeof g->stats[0].name, "wte.weight");
    snprintf(g->stats[s_wpe_w(g)].name, sizeof g->stats[0].name, "wpe.weight");
    for (int l = 0; l < L; l++)
        for (int w = 0; w < W_PER_LAYER; w++)
            snprintf(g->stats[s_w(g, l, w)].name, sizeof g->stats[0].name, "h.%d.%s", l, w_names[w]);
    g->stats[s_wte_w(g)].has_wgrad = 1; /* wpe's gradient is never stored in ct */
    for (int l = 0; l < L; l++)
        for (int w = 0; w < W_PER_LAYER; w++) g->stats[s_w(g, l, w)].has_wgrad = 1;
}

static void reset_stats(mp_gpt *g) {
    memset(g->stats, 0, g->nstats * sizeof *g->stats);
    name_stats(g);
}

mp_status mp_gpt_create(mp_gpt **out, const mp_gpt_config *c, mp_dtype ct, mp_master_weights master, size_t max_batch,
                        mp_optim *opt, uint64_t seed) {
    if (!out || !c || !opt || max_batch == 0) return mp_error(MP_EINVAL, "mp_gpt_create: bad argument");
    *out = NULL;
    if (ct != MP_F32 && ct != MP_F16 && ct != MP_BF16) return mp_error(MP_EINVAL, "mp_gpt_create: compute format");
    mp_status st = mp_master_weights_check("mp_gpt_create", ct, master);
    if (st != MP_OK) return st;
    st = check_config(c, "mp_gpt_create");
    if (st != MP_OK) return st;
    const size_t L = (size_t)c->n_layer, H = (size_t)c->n_head, C = (size_t)c->n_embd, T = (size_t)c->block_size,
                 V = (size_t)c->vocab_size, B = max_batch, es = mp_format(ct)->size;
    /* every buffer's size must fit: bound the largest products in double first */
    const double rows = (double)B * (double)T, attn = (double)B * (double)H * (double)T * (double)T;
    if (rows * (double)(4 * C > V ? 4 * C : V) * 4 > 0x1p50 || attn * 4 > 0x1p50)
        return mp_error(MP_ENOMEM, "mp_gpt_create: a batch of %zu x %zu tokens is too large", B, T);
    const size_t N = B * T;
    mp_gpt *g = calloc(1, sizeof *g);
    if (!g) return mp_error(MP_ENOMEM, "mp_gpt_create: out of memory");
    g->cfg = *c, g->ct = ct, g->acc = MP_F32, g->master = master, g->max_batch = B, g->es = es;
    g->capmem = 16 + 13 * L;
    g->nstats = 5 + (A_PER_LAYER + W_PER_LAYER) * L;
    const size_t np = 4 + P_PER_LAYER * L;
    g->mem = calloc(g->capmem, sizeof *g->mem);
    g->h = calloc(L, sizeof *g->h);
    g->params = calloc(np, sizeof *g->params);
    g->shape = calloc(np, sizeof *g->shape);
    g->ndim = calloc(np, sizeof *g->ndim);
    g->stats = calloc(g->nstats, sizeof *g->stats);
    int ok = g->mem && g->h && g->params && g->shape && g->ndim && g->stats;
    for (size_t l = 0; l < L && ok; l++) {
        block *h = &g->h[l];
        ok = (h->ln1 = buffer(g, N * C * es)) && (h->qkv = buffer(g, N * 3 * C * es)) &&
             (h->sm = buffer(g, B * H * T * 2 * sizeof(float))) && (h->y = buffer(g, N * C * es)) &&
             (h->res1 = buffer(g, N * C * es)) && (h->ln2 = buffer(g, N * C * es)) &&
             (h->fc = buffer(g, N * 4 * C * es)) && (h->gelu = buffer(g, N * 4 * C * es)) &&
             (h->res2 = buffer(g, N * C * es)) && (h->mean1 = buffer(g, 4 * N * sizeof(float)));
        if (ok) h->rstd1 = h->mean1 + N, h->mean2 = h->mean1 + 2 * N, h->rstd2 = h->mean1 + 3 * N;
    }
    ok = ok && (g->x0 = buffer(g, N * C * es)) && (g->lnf = buffer(g, N * C * es)) &&
         (g->logits = buffer(g, N * V * es)) && (g->tmp = buffer(g, N * C * es)) &&
         (g->meanf = buffer(g, 2 * N * sizeof(float))) && (g->g_res = buffer(g, N * C * es)) &&
         (g->g_a = buffer(g, N * C * es)) && (g->g_big = buffer(g, N * 4 * C * es)) &&
         (g->fscratch = buffer(g, 8 * C * sizeof(float))) &&
         (g->row = buffer(g, (2 * C > V ? 2 * C : V) * sizeof(float)));
    if (ok) g->rstdf = g->meanf + N;
    g->att_stride = mp_attention_scratch_floats(T, C / H, es);
    ok = ok && ensure_att_scratch(g, att_thread_count()) == MP_OK;
    const size_t maxn = V * C > 4 * C * C ? V * C : 4 * C * C;
    float *init = ok ? malloc((maxn > T * C ? maxn : T * C) * sizeof(float)) : NULL;
    if (!ok || !init) {
        free(init);
        mp_gpt_free(g);
        return mp_error(MP_ENOMEM, "mp_gpt_create: out of memory for a batch of %zu x %zu tokens", B, T);
    }
    /* parameters in nanoGPT's state_dict order; the draws follow that order */
    uint64_t rng = seed;
    const double sd = 0.02, sd_proj = 0.02 / sqrt(2.0 * (double)L);
    st = add_param(g, opt, "transformer.wte.weight", V, C, sd, 0, init, &rng, &g->wte);
    if (st == MP_OK) st = add_param(g, opt, "transformer.wpe.weight", T, C, sd, 0, init, &rng, &g->wpe);
    for (int l = 0; l < (int)L && st == MP_OK; l++)
        for (int k = 0; k < P_PER_LAYER && st == MP_OK; k++) {
            const block_param *b = &block_params[k];
            char name[64];
            snprintf(name, sizeof name, "transformer.h.%d.%s", l, b->name);
            st = add_param(g, opt, name, (size_t)b->d0 * C, (size_t)b->d1 * C,
                           b->init == 1 ? sd
                           : b->init    ? sd_proj
                                        : 0,
                           b->c, init, &rng, (mp_param **)((char *)&g->h[l] + b->field));
        }
    if (st == MP_OK) st = add_param(g, opt, "transformer.ln_f.weight", C, 0, 0, 1, init, &rng, &g->lnfw);
    if (st == MP_OK) st = add_param(g, opt, "transformer.ln_f.bias", C, 0, 0, 0, init, &rng, &g->lnfb);
    free(init);
    if (st != MP_OK) {
        mp_gpt_free(g);
        return st;
    }
    name_stats(g);
    *out = g;
    return MP_OK;
}

const mp_gpt_config *mp_gpt_get_config(const mp_gpt *g) { return g ? &g->cfg : NULL; }

mp_status mp_gpt_set_recipe(mp_gpt *g, const mp_recipe *recipe, uint64_t seed) {
    if (!g) return mp_error(MP_EINVAL, "mp_gpt_set_recipe: NULL model");
    const mp_recipe none = {.kind = MP_RECIPE_NONE}, copy = recipe ? *recipe : none; /* may be g's own */
    const size_t n = (size_t)g->cfg.n_layer * W_PER_LAYER;
    mp_recipe *each = malloc(n * sizeof *each);
    if (!each) return mp_error(MP_ENOMEM, "gpt: out of memory for the recipe");
    for (size_t i = 0; i < n; i++) each[i] = copy;
    const mp_status st = mp_gpt_set_layer_recipes(g, each, seed);
    free(each);
    return st;
}

mp_status mp_gpt_set_layer_recipes(mp_gpt *g, const mp_recipe *each, uint64_t seed) {
    if (!g || !each) return mp_error(MP_EINVAL, "mp_gpt_set_layer_recipes: NULL argument");
    const size_t n = (size_t)g->cfg.n_layer * W_PER_LAYER;
    size_t first = n;
    for (size_t i = n; i-- > 0;)
        if (each[i].kind != MP_RECIPE_NONE) first = i;
    mp_recipe *lrec = first < n ? malloc(n * sizeof *lrec) : NULL;
    if (first < n && !lrec) return mp_error(MP_ENOMEM, "gpt: out of memory for the recipe");
    if (lrec) memcpy(lrec, each, n * sizeof *lrec); /* each may be g's own */
    free_recipe(g);
    if (!lrec) return MP_OK;
    g->lrec = lrec;
    if (g->ct != MP_BF16 || g->master != MP_MASTER_FP32) {
        const char *name = mp_recipe_name(lrec[first].kind); /* a static string: lrec goes with the recipe */
        free_recipe(g);
        return mp_error(MP_EINVAL, "gpt: the %s recipe runs with bf16 compute and fp32 master weights", name);
    }
    g->q = calloc(nq(g), sizeof *g->q);
    if (!g->q || alloc_operands(g, &g->qa, &g->qb) != MP_OK)
        return free_recipe(g), mp_error(MP_ENOMEM, "gpt: out of memory for the recipe");
    g->recipe = lrec[first];
    for (size_t i = 0; i < nq(g); i++) {
        const mp_recipe *r = &lrec[i / 3];
        if (r->kind == MP_RECIPE_NONE) continue; /* a layer in the compute format: its tensors stay zero */
        const mp_status st = mp_qtensor_init(&g->q[i], r, (mp_qrole)(i % 3), seed + i);
        if (st) return free_recipe(g), st;
    }
    return MP_OK;
}

mp_status mp_gpt_set_reductions(mp_gpt *g, mp_dtype acc) {
    if (!g) return mp_error(MP_EINVAL, "mp_gpt_set_reductions: NULL model");
    const mp_status st = mp_check_reductions("gpt", g->ct, acc);
    if (st != MP_OK) return st;
    g->acc = acc;
    return MP_OK;
}

size_t mp_gpt_num_params(const mp_gpt *g, int non_embedding) {
    if (!g) return 0;
    size_t n = 0;
    for (size_t i = 0; i < g->nparams; i++) n += g->params[i]->n;
    return non_embedding ? n - g->wpe->n : n;
}

/* ---- attention (attention.c) ---- */

/* The attention of block h over B sequences of T positions, on at most as
 * many threads as there are (sequence, head) pairs, with the scratch made
 * for them; dy and dqkv: the backward's (NULL in the forward). */
static mp_status attention_of(mp_gpt *g, const block *h, size_t B, size_t T, const void *dy, void *dqkv,
                              mp_attention *a) {
    const size_t H = (size_t)g->cfg.n_head, C = (size_t)g->cfg.n_embd;
    int nt = att_thread_count();
    if ((size_t)nt > B * H) nt = (int)(B * H);
    const mp_status st = ensure_att_scratch(g, nt);
    *a = (mp_attention){.B = B,
                        .T = T,
                        .H = H,
                        .C = C,
                        .T_max = (size_t)g->cfg.block_size,
                        .ct = g->ct,
                        .acc = g->acc,
                        .scale = (float)(1.0 / sqrt((double)(C / H))),
                        .qkv = h->qkv,
                        .y = h->y,
                        .sm = h->sm,
                        .dy = dy,
                        .dqkv = dqkv,
                        .scratch = g->att_scr,
                        .stride = g->att_stride,
                        .threads = nt};
    return st;
}

/* ---- forward and backward ---- */

#define TRY(x)                      \
    do {                            \
        const mp_status s_ = (x);   \
        if (s_ != MP_OK) return s_; \
    } while (0)

static mp_status check_tokens(const mp_gpt *g, const char *fn, const char *what, const int32_t *v, size_t n) {
    if (!v) return mp_error(MP_EINVAL, "%s: NULL %s", fn, what);
    for (size_t i = 0; i < n; i++)
        if (v[i] < 0 || v[i] >= g->cfg.vocab_size)
            return mp_error(MP_EINVAL, "%s: %s[%zu] = %d is outside [0, %d)", fn, what, i, (int)v[i],
                            g->cfg.vocab_size);
    return MP_OK;
}

static mp_status check_batch(const mp_gpt *g, const char *fn, const int32_t *tokens, const int32_t *targets, size_t B,
                             size_t T) {
    if (!g) return mp_error(MP_EINVAL, "%s: NULL model", fn);
    if (B == 0 || B > g->max_batch)
        return mp_error(MP_EINVAL, "%s: batch of %zu sequences (1..%zu)", fn, B, g->max_batch);
    if (T == 0 || T > (size_t)g->cfg.block_size)
        return mp_error(MP_EINVAL, "%s: %zu tokens per sequence (1..%d)", fn, T, g->cfg.block_size);
    TRY(check_tokens(g, fn, "tokens", tokens, B * T));
    return targets ? check_tokens(g, fn, "targets", targets, B * T) : MP_OK;
}

/* ---- the Linear layers' GEMMs: plain, or on quantized operands (recipe.h) ---- */

static mp_qtensor *qt(mp_gpt *g, int l, int w, mp_qrole role) {
    return &g->q[((size_t)l * W_PER_LAYER + (size_t)w) * 3 + role];
}

/* The recipe of Linear w of block l, or NULL when it reads ct. */
static const mp_recipe *lrec(const mp_gpt *g, int l, int w) {
    const mp_recipe *r = g->lrec ? &g->lrec[(size_t)l * W_PER_LAYER + (size_t)w] : NULL;
    return r && r->kind != MP_RECIPE_NONE ? r : NULL;
}

/* The probe of a training GEMM in bf16 (mp_qgemm_probe): direction dir of Linear w of block l, A quantized as
 * role ra and B as rb, each from its source (the fp32 master for a weight). */
static mp_status probe(mp_gpt *g, int l, int w, int dir, int ta, int tb, size_t m, size_t n, size_t k, const void *a,
                       size_t lda, const void *as, mp_dtype ast, mp_qrole ra, const void *b, size_t ldb, const void *bs,
                       mp_dtype bst_, mp_qrole rb) {
    if (!g->pq || !g->counting || lrec(g, l, w)) return MP_OK;
    const size_t i = ((size_t)l * W_PER_LAYER + (size_t)w) * 3; /* its tensors, as q's, and its directions */
    return mp_qgemm_probe(&g->probe, ta, tb, m, n, k, a, g->ct, lda, as, ast, lda, &g->pq[i + ra], g->pa, b, g->ct, ldb,
                          bs, bst_, ldb, &g->pq[i + rb], g->pb, g->pscr, &g->pst[i + (size_t)dir]);
}

/* y (N x out) = x (N x in) W^T, with ep */
static mp_status lin_fwd(mp_gpt *g, int l, int w, size_t N, size_t out, size_t in, const void *x, const mp_param *W,
                         void *y, const mp_gemm_epilogue *ep) {
    if (!lrec(g, l, w)) {
        TRY(mp_gemm_ex(0, 1, N, out, in, 1.0f, x, g->ct, in, wct(g, W), g->ct, in, 0.0f, y, g->ct, out, ep));
        return probe(g, l, w, 0, 0, 1, N, out, in, x, in, x, g->ct, MP_QROLE_INPUT, wct(g, W), in, W->master, MP_F32,
                     MP_QROLE_WEIGHT);
    }
    return mp_qgemm(lrec(g, l, w), 0, 1, N, out, in, x, g->ct, in, qt(g, l, w, MP_QROLE_INPUT), g->qa, W->master,
                    MP_F32, in, qt(g, l, w, MP_QROLE_WEIGHT), g->qb, 0.0f, y, g->ct, out, ep);
}

/* dx (N x in) = dy (N x out) W, with ep */
static mp_status lin_dgrad(mp_gpt *g, int l, int w, size_t N, size_t out, size_t in, const void *dy, const mp_param *W,
                           void *dx, const mp_gemm_epilogue *ep) {
    if (!lrec(g, l, w)) {
        TRY(mp_gemm_ex(0, 0, N, in, out, 1.0f, dy, g->ct, out, wct(g, W), g->ct, in, 0.0f, dx, g->ct, in, ep));
        return probe(g, l, w, 1, 0, 0, N, in, out, dy, out, dy, g->ct, MP_QROLE_GRAD, wct(g, W), in, W->master, MP_F32,
                     MP_QROLE_WEIGHT);
    }
    return mp_qgemm(lrec(g, l, w), 0, 0, N, in, out, dy, g->ct, out, qt(g, l, w, MP_QROLE_GRAD), g->qa, W->master,
                    MP_F32, in, qt(g, l, w, MP_QROLE_WEIGHT), g->qb, 0.0f, dx, g->ct, in, ep);
}

/* lin_dgrad counted into st */
static mp_status lin_dgrad_st(mp_gpt *g, int l, int w, size_t N, size_t out, size_t in, const void *dy,
                              const mp_param *W, void *dx, mp_convert_stats *st) {
    const mp_gemm_epilogue ep = {.stats = st};
    return lin_dgrad(g, l, w, N, out, in, dy, W, dx, &ep);
}

/* dW (out x in) = beta dW + dy^T x, with ep */
/* dW (added to with beta 1) and the bias's gradient db (dy's column sums, as mp_colsum: added to when
 * accumulating): the sums from the dy the GEMM reads (its a_row_sums) where dy is not quantized and they run
 * in fp32, else by mp_colsum. */
static mp_status lin_wgrad(mp_gpt *g, int l, int w, size_t N, size_t out, size_t in, const void *dy, const void *x,
                           int accumulate, float *dW, float *db, mp_gemm_epilogue *ep) {
    const float beta = accumulate ? 1.0f : 0.0f;
    const int fused = !lrec(g, l, w) && g->acc == MP_F32;
    if (fused) {
        if (!accumulate) memset(db, 0, out * sizeof *db);
        ep->a_row_sums = db;
    }
    if (!lrec(g, l, w)) {
        TRY(mp_gemm_ex(1, 0, out, in, N, 1.0f, dy, g->ct, out, x, g->ct, in, beta, dW, MP_F32, in, ep));
        TRY(probe(g, l, w, 2, 1, 0, out, in, N, dy, out, dy, g->ct, MP_QROLE_GRAD, x, in, x, g->ct, MP_QROLE_INPUT));
    } else {
        TRY(mp_qgemm(lrec(g, l, w), 1, 0, out, in, N, dy, g->ct, out, qt(g, l, w, MP_QROLE_GRAD), g->qa, x, g->ct, in,
                     qt(g, l, w, MP_QROLE_INPUT), g->qb, beta, dW, MP_F32, in, ep));
    }
    return fused ? MP_OK : mp_colsum(db, dy, g->ct, N, out, accumulate, g->acc);
}

/* Forward of B sequences of T tokens up to the logits; head_last: only the
 * last row's ln_f and logits (the others are not computed). */
static mp_status forward(mp_gpt *g, const int32_t *tok, size_t B, size_t T, int head_last) {
    const mp_dtype ct = g->ct;
    const size_t C = (size_t)g->cfg.n_embd, V = (size_t)g->cfg.vocab_size, N = B * T;
    const int L = g->cfg.n_layer;
    /* x0 = wte[tok] + wpe[pos], added in fp32, rounded once */
    const void *wte = wct(g, g->wte), *wpe = wct(g, g->wpe);
    mp_convert_stats *s0 = fst(g, 0, N * C);
    float *a = g->row, *p = g->row + C;
    for (size_t n = 0; n < N; n++) {
        mp_convert(a, MP_F32, at(g, wte, (size_t)tok[n] * C), ct, C, NULL);
        mp_convert(p, MP_F32, at(g, wpe, (n % T) * C), ct, C, NULL);
        for (size_t c = 0; c < C; c++) a[c] += p[c];
        mp_convert(at(g, g->x0, n * C), ct, a, MP_F32, C, s0);
    }
    const void *x = g->x0;
    for (int l = 0; l < L; l++) {
        block *h = &g->h[l];
        TRY(mp_layernorm_forward(h->ln1, ct, h->mean1, h->rstd1, x, ct, fparam(g, h->ln1w, 0), fparam(g, h->ln1b, 1), N,
                                 C, 1e-5f, g->acc, fst(g, s_act(g, l, A_LN1), N * C)));
        mp_gemm_epilogue ep = {.bias = fparam(g, h->attb, 0), .stats = fst(g, s_act(g, l, A_QKV), N * 3 * C)};
        TRY(lin_fwd(g, l, W_ATT, N, 3 * C, C, h->ln1, h->attw, h->qkv, &ep));
        mp_attention att;
        const size_t natt = B * (size_t)g->cfg.n_head * T * (T + 1) / 2;
        TRY(attention_of(g, h, B, T, NULL, NULL, &att));
        TRY(mp_attention_forward(mp_kernels_current(), &att, fst(g, s_act(g, l, A_ATT), natt),
                                 fst(g, s_act(g, l, A_Y), N * C)));
        /* the branch's output (counted, never stored) and the residual sum res1 = x + it, in c_proj's epilogue */
        ep = (mp_gemm_epilogue){.bias = fparam(g, h->aprb, 0),
                                .stats = fst(g, s_act(g, l, A_APROJ), N * C),
                                .post = MP_POST_ADD,
                                .post_x = x,
                                .post_stats = fst(g, s_act(g, l, A_RES1), N * C)};
        TRY(lin_fwd(g, l, W_APR, N, C, C, h->y, h->aprw, h->res1, &ep));
        TRY(mp_layernorm_forward(h->ln2, ct, h->mean2, h->rstd2, h->res1, ct, fparam(g, h->ln2w, 0),
                                 fparam(g, h->ln2b, 1), N, C, 1e-5f, g->acc, fst(g, s_act(g, l, A_LN2), N * C)));
        /* bias and GELU in c_fc's epilogue: fc (its input, kept for the backward) and gelu */
        ep = (mp_gemm_epilogue){.bias = fparam(g, h->fcb, 0),
                                .stats = fst(g, s_act(g, l, A_FC), N * 4 * C),
                                .post = g->cfg.gelu == MP_GELU_ERF ? MP_POST_GELU_ERF : MP_POST_GELU,
                                .post_out = h->gelu,
                                .post_stats = fst(g, s_act(g, l, A_GELU), N * 4 * C)};
        TRY(lin_fwd(g, l, W_FC, N, 4 * C, C, h->ln2, h->fcw, h->fc, &ep));
        /* the MLP's output (counted; stored into tmp for the last layer only, mp_gpt_activation's) and res2 */
        const int last = l + 1 == L;
        ep = (mp_gemm_epilogue){.bias = fparam(g, h->mprb, 0),
                                .stats = fst(g, s_act(g, l, A_MPROJ), N * C),
                                .post = MP_POST_ADD,
                                .post_x = h->res1,
                                .post_out = last ? h->res2 : NULL,
                                .post_stats = fst(g, s_act(g, l, A_RES2), N * C)};
        TRY(lin_fwd(g, l, W_MPR, N, C, 4 * C, h->gelu, h->mprw, last ? g->tmp : h->res2, &ep));
        x = h->res2;
    }
    const size_t r0 = head_last ? N - 1 : 0, nr = N - r0;
    TRY(mp_layernorm_forward(at(g, g->lnf, r0 * C), ct, g->meanf + r0, g->rstdf + r0, at(g, x, r0 * C), ct,
                             fparam(g, g->lnfw, 0), fparam(g, g->lnfb, 1), nr, C, 1e-5f, g->acc,
                             fst(g, s_lnf(g), nr * C)));
    TRY(mp_gemm(0, 1, nr, V, C, 1.0f, at(g, g->lnf, r0 * C), ct, C, wte, ct, C, 0.0f, at(g, g->logits, r0 * V), ct, V,
                fst(g, s_head(g), nr * V)));
    return MP_OK;
}

/* The embeddings' gradients from the residual stream's (g_res): dwte[tok]
 * += its row, dwpe[t] += its rows of position t, in fp32, rows in order (no
 * rounding to the compute format: nothing is counted); added to the
 * parameters' gradients when accumulating. */
static void embeddings_backward(mp_gpt *g, const int32_t *tok, size_t N, size_t T, float *dwte, float *dwpe,
                                int accumulate) {
    const size_t C = (size_t)g->cfg.n_embd, V = (size_t)g->cfg.vocab_size;
    memset(dwpe, 0, g->wpe->n * sizeof(float));
    float *r = g->row;
    for (size_t n = 0; n < N; n++) {
        mp_convert(r, MP_F32, at(g, g->g_res, n * C), g->ct, C, NULL);
        float *dw = dwte + (size_t)tok[n] * C, *dp = dwpe + (n % T) * C;
        for (size_t c = 0; c < C; c++) dw[c] += r[c];
        for (size_t c = 0; c < C; c++) dp[c] += r[c];
    }
    for (size_t i = 0; accumulate && i < V * C; i++) g->wte->grad[i] += dwte[i];
    for (size_t i = 0; accumulate && i < g->wpe->n; i++) g->wpe->grad[i] += dwpe[i];
}

/* Backward from dlogits (in the logits buffer) to every parameter gradient. */
static mp_status backward(mp_gpt *g, const int32_t *tok, size_t B, size_t T, int accumulate) {
    const mp_dtype ct = g->ct;
    const size_t C = (size_t)g->cfg.n_embd, V = (size_t)g->cfg.vocab_size, N = B * T;
    const int L = g->cfg.n_layer;
    const void *dlogits = g->logits;
    /* The embeddings' gradients (the head's and the rows' sums) are this
     * micro-batch's alone, added to the gradients at the end when
     * accumulating: the sums of micro-batches come out as the ranks'
     * all-reduce of their gradients gives them (train.h), and as PyTorch
     * adds a micro-batch's gradient to .grad */
    if (accumulate && !g->dacc &&
        !(g->dacc = malloc(((size_t)g->cfg.vocab_size + (size_t)g->cfg.block_size) * C * sizeof(float))))
        return mp_error(MP_ENOMEM, "gpt: out of memory");
    float *dwte = accumulate ? g->dacc : g->wte->grad, *dwpe = accumulate ? g->dacc + V * C : g->wpe->grad;
    /* the head: dwte (written first), d ln_f = dlogits wte */
    mp_gemm_epilogue ep = wgrad(g, s_wte_w(g), V * C);
    mp_convert_stats hs = {0, 0, 0, 0, 0.0f}; /* the head's share: its amax is not yet the gradient's */
    if (ep.stats) ep.stats = &hs;
    TRY(mp_gemm_ex(1, 0, V, C, N, 1.0f, dlogits, ct, V, g->lnf, ct, C, 0.0f, dwte, MP_F32, C, &ep));
    hs.amax = 0.0f;
    mp_convert_stats_add(&g->stats[s_wte_w(g)].bwd, &hs);
    TRY(mp_gemm(0, 0, N, C, V, 1.0f, dlogits, ct, V, wct(g, g->wte), ct, C, 0.0f, g->g_a, ct, C,
                bst(g, s_lnf(g), N * C)));
    TRY(mp_layernorm_backward(g->g_res, ct, g->lnfw->grad, g->lnfb->grad, g->g_a, ct, g->h[L - 1].res2, ct, g->meanf,
                              g->rstdf, fparam(g, g->lnfw, 0), N, C, accumulate, g->acc,
                              bst(g, s_act(g, L - 1, A_RES2), N * C)));
    for (int l = L - 1; l >= 0; l--) {
        block *h = &g->h[l];
        const void *x = l ? g->h[l - 1].res2 : g->x0;
        const size_t sx = l ? s_act(g, l - 1, A_RES2) : 0;
        /* MLP: g_res is the gradient of res2 and of the MLP's output */
        ep = wgrad(g, s_w(g, l, W_MPR), C * 4 * C);
        TRY(lin_wgrad(g, l, W_MPR, N, C, 4 * C, g->g_res, h->gelu, accumulate, h->mprw->grad, h->mprb->grad, &ep));
        /* the gradient of gelu's output (counted, never stored) and through GELU, in the epilogue */
        ep = (mp_gemm_epilogue){.stats = bst(g, s_act(g, l, A_GELU), N * 4 * C),
                                .post = g->cfg.gelu == MP_GELU_ERF ? MP_POST_GELU_ERF_GRAD : MP_POST_GELU_GRAD,
                                .post_x = h->fc,
                                .post_stats = bst(g, s_act(g, l, A_FC), N * 4 * C)};
        TRY(lin_dgrad(g, l, W_MPR, N, C, 4 * C, g->g_res, h->mprw, g->g_big, &ep));
        ep = wgrad(g, s_w(g, l, W_FC), 4 * C * C);
        TRY(lin_wgrad(g, l, W_FC, N, 4 * C, C, g->g_big, h->ln2, accumulate, h->fcw->grad, h->fcb->grad, &ep));
        TRY(lin_dgrad_st(g, l, W_FC, N, 4 * C, C, g->g_big, h->fcw, g->g_a, bst(g, s_act(g, l, A_LN2), N * C)));
        /* through ln_2 and into the residual stream's gradient, in one pass */
        TRY(mp_layernorm_backward_add(g->g_res, ct, h->ln2w->grad, h->ln2b->grad, g->g_a, h->res1, h->mean2, h->rstd2,
                                      fparam(g, h->ln2w, 0), N, C, accumulate, g->acc, g->g_res,
                                      bst(g, s_act(g, l, A_RES1), N * C), bst(g, s_act(g, l, A_RES1), N * C)));
        /* attention: g_res is now the gradient of res1 and of the attention's output */
        ep = wgrad(g, s_w(g, l, W_APR), C * C);
        TRY(lin_wgrad(g, l, W_APR, N, C, C, g->g_res, h->y, accumulate, h->aprw->grad, h->aprb->grad, &ep));
        TRY(lin_dgrad_st(g, l, W_APR, N, C, C, g->g_res, h->aprw, g->g_a, bst(g, s_act(g, l, A_Y), N * C)));
        mp_attention att;
        const size_t natt = B * (size_t)g->cfg.n_head * T * (T + 1) / 2;
        TRY(attention_of(g, h, B, T, g->g_a, g->g_big, &att));
        TRY(mp_attention_backward(mp_kernels_current(), &att, bst(g, s_act(g, l, A_ATT), natt),
                                  bst(g, s_act(g, l, A_QKV), N * 3 * C)));
        ep = wgrad(g, s_w(g, l, W_ATT), 3 * C * C);
        TRY(lin_wgrad(g, l, W_ATT, N, 3 * C, C, g->g_big, h->ln1, accumulate, h->attw->grad, h->attb->grad, &ep));
        TRY(lin_dgrad_st(g, l, W_ATT, N, 3 * C, C, g->g_big, h->attw, g->g_a, bst(g, s_act(g, l, A_LN1), N * C)));
        TRY(mp_layernorm_backward_add(g->g_res, ct, h->ln1w->grad, h->ln1b->grad, g->g_a, x, h->mean1, h->rstd1,
                                      fparam(g, h->ln1w, 0), N, C, accumulate, g->acc, g->g_res, bst(g, sx, N * C),
                                      bst(g, sx, N * C)));
    }
    embeddings_backward(g, tok, N, T, dwte, dwpe, accumulate);
    return MP_OK;
}

/* A forward that changes no recipe state (evaluation, sampling): it
 * quantizes with this step's scales, or takes fresh amaxes, and puts every
 * tensor's state back. */
static mp_status forward_quiet(mp_gpt *g, const int32_t *tok, size_t B, size_t T, int head_last) {
    if (!g->q) return forward(g, tok, B, T, head_last);
    mp_qtensor *keep = malloc(nq(g) * sizeof *keep);
    if (!keep) return mp_error(MP_ENOMEM, "gpt: out of memory");
    memcpy(keep, g->q, nq(g) * sizeof *keep);              /* the delayed histories are only read by forward */
    for (size_t i = 0; i < nq(g); i++) g->q[i].scaled = 0; /* current scaling: this batch's own amax */
    const mp_status st = forward(g, tok, B, T, head_last);
    memcpy(g->q, keep, nq(g) * sizeof *keep);
    free(keep);
    return st;
}

mp_status mp_gpt_set_probe(mp_gpt *g, const mp_recipe *r, uint64_t seed) {
    if (!g) return mp_error(MP_EINVAL, "mp_gpt_set_probe: NULL model");
    free_probe(g);
    if (!r || r->kind == MP_RECIPE_NONE) return MP_OK;
    if (g->ct != MP_BF16 || g->master != MP_MASTER_FP32)
        return mp_error(MP_EINVAL, "gpt: the %s probe measures bf16 compute with fp32 master weights",
                        mp_recipe_name(r->kind));
    const size_t C = (size_t)g->cfg.n_embd, N = g->max_batch * (size_t)g->cfg.block_size;
    const size_t np = N * 4 * C > 16 * C * C ? N * 4 * C : 16 * C * C; /* the largest product */
    g->probe = *r;
    g->pq = calloc(nq(g), sizeof *g->pq);
    g->pst = calloc(nq(g), sizeof *g->pst); /* 3 directions per Linear, as 3 roles */
    g->pscr = aligned_alloc(64, (2 * np * sizeof(float) + 63) / 64 * 64);
    if (!g->pq || !g->pst || !g->pscr || alloc_operands(g, &g->pa, &g->pb) != MP_OK)
        return free_probe(g), mp_error(MP_ENOMEM, "gpt: out of memory for the probe");
    for (size_t i = 0; i < nq(g); i++) {
        const mp_status st = mp_qtensor_init(&g->pq[i], r, (mp_qrole)(i % 3), seed + i);
        if (st) return free_probe(g), st;
    }
    return MP_OK;
}

const mp_qprobe *mp_gpt_probe(const mp_gpt *g, int l, int w, int dir) {
    if (!g || !g->pst || l < 0 || l >= g->cfg.n_layer || w < 0 || w >= W_PER_LAYER || dir < 0 || dir > 2) return NULL;
    return &g->pst[((size_t)l * W_PER_LAYER + (size_t)w) * 3 + (size_t)dir];
}

const mp_qtensor *mp_gpt_qtensor(const mp_gpt *g, int l, int w, mp_qrole role) {
    if (!g || !g->q || l < 0 || l >= g->cfg.n_layer || w < 0 || w >= W_PER_LAYER || (unsigned)role > MP_QROLE_GRAD ||
        !lrec(g, l, w))
        return NULL;
    return &g->q[((size_t)l * W_PER_LAYER + (size_t)w) * 3 + role];
}

mp_status mp_gpt_train_batch(mp_gpt *g, const int32_t *tokens, const int32_t *targets, size_t B, size_t T,
                             float grad_scale, int accumulate, float *loss) {
    TRY(check_batch(g, "gpt train", tokens, targets, B, T));
    if (!targets || !loss) return mp_error(MP_EINVAL, "gpt train: NULL targets or loss");
    const size_t N = B * T, V = (size_t)g->cfg.vocab_size;
    g->counting = 1;
    g->last_rows = 0;
    for (size_t i = 0; g->q && i < nq(g); i++) mp_qtensor_begin(&g->q[i], !accumulate);
    for (size_t i = 0; g->pq && i < nq(g); i++) mp_qtensor_begin(&g->pq[i], !accumulate);
    TRY(forward(g, tokens, B, T, 0));
    float l;
    TRY(mp_cross_entropy(&l, g->logits, g->ct, g->logits, g->ct, targets, N, V, grad_scale, g->acc,
                         bst(g, s_head(g), N * V)));
    TRY(backward(g, tokens, B, T, accumulate));
    weight_amax(g, g->wte, s_wte_w(g)); /* the tied head's gradient has the embedding rows' added */
    for (int i = 0; g->ct == MP_F32 && i < g->cfg.n_layer; i++) {
        const block *h = &g->h[i];
        const mp_param *w[W_PER_LAYER] = {[W_ATT] = h->attw, [W_APR] = h->aprw, [W_FC] = h->fcw, [W_MPR] = h->mprw};
        for (int k = 0; k < W_PER_LAYER; k++) weight_amax(g, w[k], s_w(g, i, k));
    }
    count_lost(g);
    for (size_t i = 0; g->q && i < nq(g); i++)
        if (g->lrec[i / 3].kind != MP_RECIPE_NONE) mp_qtensor_end(&g->q[i], &g->lrec[i / 3]);
    for (size_t i = 0; g->pq && i < nq(g); i++) mp_qtensor_end(&g->pq[i], &g->probe);
    *loss = l;
    g->last_rows = N;
    return MP_OK;
}

mp_status mp_gpt_activation(const mp_gpt *g, const char *name, const void **data, size_t *n) {
    if (!g || !name || !data || !n) return mp_error(MP_EINVAL, "mp_gpt_activation: NULL argument");
    const size_t N = g->last_rows, C = (size_t)g->cfg.n_embd;
    const int L = g->cfg.n_layer;
    if (N == 0) return mp_error(MP_EINVAL, "mp_gpt_activation: no training batch has run");
    *data = NULL, *n = 0;
    if (strcmp(name, "wte") == 0) *data = g->x0, *n = N * C;
    if (strcmp(name, "ln_f") == 0) *data = g->lnf, *n = N * C;
    if (strcmp(name, g->stats[s_act(g, L - 1, A_MPROJ)].name) == 0) *data = g->tmp, *n = N * C;
    for (int l = 0; l < L && !*data; l++) {
        const block *h = &g->h[l];
        const struct {
            int a;
            void *p;
            size_t width;
        } kept[] = {{A_LN1, h->ln1, C}, {A_QKV, h->qkv, 3 * C}, {A_Y, h->y, C},           {A_RES1, h->res1, C},
                    {A_LN2, h->ln2, C}, {A_FC, h->fc, 4 * C},   {A_GELU, h->gelu, 4 * C}, {A_RES2, h->res2, C}};
        for (size_t k = 0; k < sizeof kept / sizeof kept[0] && !*data; k++)
            if (strcmp(name, g->stats[s_act(g, l, kept[k].a)].name) == 0) *data = kept[k].p, *n = N * kept[k].width;
    }
    return *data ? MP_OK : mp_error(MP_EINVAL, "mp_gpt_activation: '%s' is not a kept activation", name);
}

mp_status mp_gpt_eval_batch(mp_gpt *g, const int32_t *tokens, const int32_t *targets, size_t B, size_t T,
                            double *loss_sum, double *correct) {
    TRY(check_batch(g, "gpt eval", tokens, targets, B, T));
    if (!targets || !loss_sum) return mp_error(MP_EINVAL, "gpt eval: NULL targets or loss_sum");
    const size_t N = B * T, V = (size_t)g->cfg.vocab_size;
    g->counting = 0;
    g->last_rows = 0; /* the buffers now hold this forward */
    mp_status st = forward_quiet(g, tokens, B, T, 0);
    float l = 0.0f;
    if (st == MP_OK) st = mp_cross_entropy(&l, NULL, MP_F32, g->logits, g->ct, targets, N, V, 1.0f, MP_F32, NULL);
    g->counting = 1;
    if (st != MP_OK) return st;
    *loss_sum += (double)l * (double)N;
    if (correct) {
        float *row = g->row;
        for (size_t n = 0; n < N; n++) {
            mp_convert(row, MP_F32, at(g, g->logits, n * V), g->ct, V, NULL);
            size_t best = 0;
            for (size_t c = 1; c < V; c++) best = row[c] > row[best] ? c : best;
            *correct += (int32_t)best == targets[n];
        }
    }
    return MP_OK;
}

mp_status mp_gpt_next_logits(mp_gpt *g, const int32_t *tokens, size_t T, float *logits) {
    TRY(check_batch(g, "gpt next logits", tokens, NULL, 1, T));
    if (!logits) return mp_error(MP_EINVAL, "gpt next logits: NULL logits");
    const size_t V = (size_t)g->cfg.vocab_size;
    g->counting = 0;
    g->last_rows = 0;
    const mp_status st = forward_quiet(g, tokens, 1, T, 1);
    g->counting = 1;
    if (st != MP_OK) return st;
    return mp_convert(logits, MP_F32, at(g, g->logits, (T - 1) * V), g->ct, V, NULL);
}

/* ---- weights in and out ---- */

/* t has shape (d0) (d1 0) or (d0, d1) and a float dtype the model reads. */
static mp_status tensor_fits(const mp_tensor *t, const char *name, size_t d0, size_t d1) {
    const int ndim = d1 ? 2 : 1;
    if (t->ndim != ndim || t->shape[0] != d0 || (ndim == 2 && t->shape[1] != d1))
        return mp_error(MP_ECORRUPT, "weights: '%s' has shape [%zu%s%zu], the model needs [%zu%s%zu]", name,
                        t->ndim >= 1 ? t->shape[0] : (size_t)0, t->ndim == 2 ? ", " : "",
                        t->ndim == 2 ? t->shape[1] : (size_t)0, d0, ndim == 2 ? ", " : "", ndim == 2 ? d1 : (size_t)0);
    if (t->dtype != MP_F32 && t->dtype != MP_F16 && t->dtype != MP_BF16)
        return mp_error(MP_ECORRUPT, "weights: '%s' is not F32, F16 or BF16", name);
    return MP_OK;
}

static mp_status tensor_values(const mp_tensor *t, const char *name, size_t d0, size_t d1, int ndim, float *tmp) {
    const mp_status st = tensor_fits(t, name, d0, ndim == 2 ? d1 : 0);
    if (st != MP_OK) return st;
    const size_t n = d0 * (ndim == 2 ? d1 : 1);
    mp_convert(tmp, MP_F32, t->data, t->dtype, n, NULL);
    for (size_t i = 0; i < n; i++)
        if (!isfinite(tmp[i])) return mp_error(MP_ECORRUPT, "weights: '%s' holds a non-finite value", name);
    return MP_OK;
}

mp_status mp_gpt_load(mp_gpt *g, const mp_safetensors *st) {
    if (!g || !st) return mp_error(MP_EINVAL, "mp_gpt_load: NULL argument");
    size_t maxn = 0;
    for (size_t i = 0; i < g->nparams; i++) maxn = g->params[i]->n > maxn ? g->params[i]->n : maxn;
    float *a = malloc(2 * maxn * sizeof(float)), *b = a ? a + maxn : NULL;
    if (!a) return mp_error(MP_ENOMEM, "mp_gpt_load: out of memory");
    const mp_tensor **src = calloc(g->nparams, sizeof *src);
    mp_status s = src ? MP_OK : mp_error(MP_ENOMEM, "mp_gpt_load: out of memory");
    /* first check everything, so that a refused file changes nothing; a deeper model's file is not this one's */
    for (size_t i = 0; i < st->count && s == MP_OK; i++) {
        unsigned long l;
        int end = 0;
        if (sscanf(st->tensors[i].name, "transformer.h.%lu.%n", &l, &end) == 1 && end > 0 &&
            l >= (unsigned long)g->cfg.n_layer)
            s = mp_error(MP_ECORRUPT, "weights: '%s' is beyond the model's %d layer%s", st->tensors[i].name,
                         g->cfg.n_layer, g->cfg.n_layer == 1 ? "" : "s");
    }
    for (size_t i = 0; i < g->nparams && s == MP_OK; i++) {
        const mp_param *p = g->params[i];
        const size_t d0 = g->shape[i][0], d1 = g->shape[i][1];
        const mp_tensor *t = mp_safetensors_find(st, p->name);
        if (p == g->wte) {
            const mp_tensor *lm = mp_safetensors_find(st, "lm_head.weight");
            if (lm) s = tensor_values(lm, "lm_head.weight", d0, d1, 2, b);
            if (s == MP_OK && t && lm) {
                s = tensor_values(t, p->name, d0, d1, 2, a);
                for (size_t k = 0; k < p->n && s == MP_OK; k++)
                    if (a[k] != b[k])
                        s = mp_error(MP_ECORRUPT, "weights: lm_head.weight differs from %s (the head is tied)",
                                     p->name);
            }
            if (!t) t = lm;
        }
        if (s != MP_OK) break;
        if (!t) {
            s = mp_error(MP_ECORRUPT, "weights: no tensor '%s'%s", p->name, p == g->wte ? " (nor lm_head.weight)" : "");
            break;
        }
        s = tensor_values(t, t == mp_safetensors_find(st, p->name) ? p->name : "lm_head.weight", d0, d1, g->ndim[i], a);
        src[i] = t;
    }
    for (size_t i = 0; i < g->nparams && s == MP_OK; i++) {
        mp_param *p = g->params[i];
        if (p->master) {
            mp_convert(p->master, MP_F32, src[i]->data, src[i]->dtype, p->n, NULL);
            if (p->half) mp_convert(p->half, p->half_type, p->master, MP_F32, p->n, NULL);
        } else {
            mp_convert(p->half, p->half_type, src[i]->data, src[i]->dtype, p->n, NULL);
        }
    }
    free(src), free(a);
    return s;
}

/* The tensor name of st with shape (d0, d1) (d1 0: a vector). */
static mp_status expect_tensor(const mp_safetensors *st, const char *name, size_t d0, size_t d1) {
    const mp_tensor *t = mp_safetensors_find(st, name);
    return t ? tensor_fits(t, name, d0, d1) : mp_error(MP_ECORRUPT, "weights: no tensor '%s'", name);
}

mp_status mp_gpt_check_file(const mp_gpt_config *c, const mp_safetensors *st) {
    if (!c || !st) return mp_error(MP_EINVAL, "mp_gpt_check_file: NULL argument");
    mp_status s = check_config(c, "mp_gpt_check_file");
    if (s != MP_OK) return s;
    const size_t L = (size_t)c->n_layer, C = (size_t)c->n_embd, T = (size_t)c->block_size, V = (size_t)c->vocab_size;
    const mp_tensor *wte = mp_safetensors_find(st, "transformer.wte.weight"),
                    *lm = mp_safetensors_find(st, "lm_head.weight");
    if (!wte && !lm) return mp_error(MP_ECORRUPT, "weights: no tensor 'transformer.wte.weight' (nor lm_head.weight)");
    if (wte) s = tensor_fits(wte, "transformer.wte.weight", V, C);
    if (s == MP_OK && lm) s = tensor_fits(lm, "lm_head.weight", V, C);
    if (s == MP_OK) s = expect_tensor(st, "transformer.wpe.weight", T, C);
    for (size_t l = 0; l < L && s == MP_OK; l++)
        for (int k = 0; k < P_PER_LAYER && s == MP_OK; k++) {
            char name[64];
            snprintf(name, sizeof name, "transformer.h.%zu.%s", l, block_params[k].name);
            s = expect_tensor(st, name, (size_t)block_params[k].d0 * C, (size_t)block_params[k].d1 * C);
        }
    if (s == MP_OK) s = expect_tensor(st, "transformer.ln_f.weight", C, 0);
    if (s == MP_OK) s = expect_tensor(st, "transformer.ln_f.bias", C, 0);
    for (size_t i = 0; i < st->count && s == MP_OK; i++) { /* a deeper model's file is not this one's */
        unsigned long l;
        int end = 0;
        if (sscanf(st->tensors[i].name, "transformer.h.%lu.%n", &l, &end) == 1 && end > 0 && l >= L)
            s = mp_error(MP_ECORRUPT, "weights: '%s' is beyond the model's %zu layer%s", st->tensors[i].name, L,
                         L == 1 ? "" : "s");
    }
    return s;
}

size_t mp_gpt_tensors(const mp_gpt *g, mp_tensor *out, size_t cap) {
    if (!g) return 0;
    for (size_t i = 0; i < g->nparams && i < cap; i++) {
        const mp_param *p = g->params[i];
        mp_tensor *t = &out[i];
        memset(t, 0, sizeof *t);
        snprintf(t->name, sizeof t->name, "%s", p->name);
        t->dtype = p->master ? MP_F32 : p->half_type;
        t->ndim = g->ndim[i], t->shape[0] = g->shape[i][0], t->shape[1] = g->shape[i][1];
        t->data = p->master ? (const void *)p->master : p->half;
        t->nbytes = p->n * mp_format(t->dtype)->size;
    }
    return g->nparams;
}

/* ---- the model interface ---- */

static mp_status model_train(void *impl, const mp_batch *b, float grad_scale, int accumulate, float *loss) {
    if (!b) return mp_error(MP_EINVAL, "gpt train: NULL batch");
    return mp_gpt_train_batch(impl, b->tokens, b->targets, b->n, b->t, grad_scale, accumulate, loss);
}

static mp_status model_eval(void *impl, const mp_batch *b, double *loss_sum, double *count, double *correct) {
    if (!b) return mp_error(MP_EINVAL, "gpt eval: NULL batch");
    const mp_status st = mp_gpt_eval_batch(impl, b->tokens, b->targets, b->n, b->t, loss_sum, correct);
    if (st == MP_OK && count) *count += (double)b->n * (double)b->t;
    return st;
}

static size_t model_nstats(const void *impl) { return ((const mp_gpt *)impl)->nstats; }
static const mp_tensor_stats *model_stats(const void *impl, size_t i) {
    const mp_gpt *g = impl;
    return i < g->nstats ? &g->stats[i] : NULL;
}
static void model_reset(void *impl) { reset_stats(impl); }
static mp_status model_reductions(void *impl, mp_dtype acc) { return mp_gpt_set_reductions(impl, acc); }
static mp_status model_load(void *impl, const mp_safetensors *st) { return mp_gpt_load(impl, st); }
static size_t model_tensors(const void *impl, mp_tensor *out, size_t cap) { return mp_gpt_tensors(impl, out, cap); }
static void model_free(void *impl) { mp_gpt_free(impl); }
static const mp_recipe *model_recipe(const void *impl) {
    const mp_gpt *g = impl;
    return g->q ? &g->recipe : NULL;
}

/* "h.{l}.attn.c_attn.input|weight|grad", ...: g->q's order (block, Linear,
 * role), the layers with a recipe only */
static size_t model_qtensors(void *impl, mp_named_qtensor *out, size_t cap) {
    mp_gpt *g = impl;
    size_t k = 0;
    for (size_t i = 0; g->q && i < nq(g); i++) {
        if (g->lrec[i / 3].kind == MP_RECIPE_NONE) continue;
        const char *w = w_names[i / 3 % W_PER_LAYER]; /* "attn.c_attn.weight": the layer without ".weight" */
        if (k < cap) {
            snprintf(out[k].name, sizeof out[k].name, "h.%zu.%.*s.%s", i / (3 * W_PER_LAYER),
                     (int)(strlen(w) - strlen(".weight")), w, mp_qrole_name(g->q[i].role));
            out[k].q = &g->q[i], out[k].recipe = &g->lrec[i / 3];
        }
        k++;
    }
    return k;
}

static const mp_model_ops gpt_ops = {
    .kind = "gpt",
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

mp_model mp_gpt_model(mp_gpt *g) {
    const mp_model model = {&gpt_ops, g};
    return model;
}
