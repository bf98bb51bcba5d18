/* optim.c - parameters with fp32 master weights, SGD / AdamW, clipping, and the
 * loss-scaled step protocol (stages READY -> UNSCALED -> STEPPED). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "mixprec/io.h"
#include "optim_kernels.h"

#ifdef MP_X86
#include <xmmintrin.h>
#endif

const mp_optim_kernels mp_optim_scalar = MP_OPTIM_KERNELS(k_dequant, k_quant, NULL);

typedef enum { KIND_SGD, KIND_ADAMW } optim_kind;

struct mp_optim {
    optim_kind kind;
    mp_sgd_config sgd;
    mp_adamw_config adamw;
    mp_param **params; /* each allocated on its own: pointers to them stay valid */
    size_t count, cap;
    uint64_t steps;       /* real steps taken */
    mp_rounding rounding; /* for bf16 half copies */
    uint64_t seed;
    int scaled;        /* driven by a scaler (mp_scaler_unscale / mp_scaler_step seen) */
    int keep_denormal; /* 0 (default): updates run with FTZ/DAZ */
    mp_stage stage;    /* valid while stage_epoch == the scaler's steps */
    uint64_t stage_epoch;
    int found_inf;   /* from the unscale of this epoch */
    float clip_coef; /* a clip coefficient below 1 the next update applies (mp_optim_unscale_clip), else 1 */
    uint64_t lost_updates, updated; /* the last step's (mp_optim_lost_updates) */
    mp_state_format state_format;   /* as asked (mp_optim_set_state_format); each parameter's in its state_format */
    /* a shard (mp_optim_set_shard): this rank updates parameters [own0, own1); ranks_sum joins the ranks' values */
    int sharded;
    size_t own0, own1;
    mp_status (*ranks_sum)(void *ctx, double *x, size_t n);
    void *ranks_ctx;
};

static int owns(const mp_optim *o, size_t i) { return !o->sharded || (i >= o->own0 && i < o->own1); }

/* ---- the block formats' maps (torchao 0.18, torchao/optim/quant_utils.py and subclass_{8,4}bit.py) ---- */

static mp_state_map map8_signed, map8_unsigned, map4_signed, map4_linear, map_e4m3, map_e4m3_sq;
static int maps_exact;
static pthread_once_t maps_once = PTHREAD_ONCE_INIT;

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* create_dynamic_map(signed, max_exponent_bits E, total_bits): for each
 * exponent i < E the midpoints of torch.linspace(0.1, 1, n) (in fp32, as
 * ATen's vectorized CPU kernel computes it: fused multiply-adds, the second
 * half from the end) scaled by 10^(i - E + 1), with their negatives when
 * signed; then 0 and 1; sorted. */
static void dynamic_map(float *out, int is_signed, int E, int total_bits) {
    const int N = total_bits - 1;
    int k = 0;
    for (int i = 0; i < E; i++) {
        const int n = is_signed ? (1 << (i + N - E)) + 1 : (1 << (i + N - E + 1)) + 1;
        float b[130];
        const float start = 0.1f, end = 1.0f, step = (end - start) / (float)(n - 1);
        for (int j = 0; j < n; j++)
            b[j] = j < n / 2 ? fmaf(step, (float)j, start) : fmaf(-step, (float)(n - 1 - j), end);
        const float scale = (float)pow(10.0, (double)(i - (E - 1)));
        for (int j = 0; j + 1 < n; j++) {
            const float v = scale * ((b[j] + b[j + 1]) / 2.0f);
            out[k++] = v;
            if (is_signed) out[k++] = -v;
        }
    }
    out[k++] = 0.0f, out[k++] = 1.0f;
    qsort(out, (size_t)k, sizeof *out, cmp_float);
}

/* torchao's code of y: a binary search for the last entry <= y, moved up
 * one when y - q[c] >= (q[c+1] - q[c]) / 2 (in fp32: ties go up); NaN 0.
 * e4m3: the code of |y| (0 .. 0x7e) without the sign. The tables are
 * built from it. */
static int torchao_code(const mp_state_map *m, float y) {
    if (m->sign_magnitude) return mp_f32_to_e4m3_sat(fabsf(y)) & 0x7f;
    const float *q = m->value;
    int c = 0;
    for (int k = m->entries / 2; k >= 1; k /= 2)
        if (y >= q[c + k]) c += k;
    if (c + 1 < m->entries && y - q[c] >= (q[c + 1] - q[c]) * 0.5f) c++;
    return c;
}

/* ... and the floor of a second moment's map: a y > 0 codes at least least_positive. */
int mp_state_map_code_ref(const mp_state_map *m, float y) {
    const int c = torchao_code(m, y);
    return y > 0.0f && c < m->least_positive ? m->least_positive : c;
}

/* Floats in value order as unsigned keys (-0 just below +0), and back. */
static uint32_t order_key(float y) {
    const uint32_t u = mp_f32_bits(y);
    return u >> 31 ? ~u : u | 0x80000000u;
}
static float key_float(uint32_t k) { return mp_bits_f32(k >> 31 ? k & 0x7fffffffu : ~k); }

/* The thresholds (the least y of each code: codes rise with y). */
static void build_thresholds(mp_state_map *m) {
    const float from = m->sign_magnitude ? 0.0f : -INFINITY;
    for (int c = 1; c < m->entries; c++) {
        uint32_t a = order_key(from), b = order_key(INFINITY); /* code(a) < c <= code(b) */
        while (b - a > 1) {
            const uint32_t mid = a + (b - a) / 2;
            *(torchao_code(m, key_float(mid)) >= c ? &b : &a) = mid;
        }
        m->thresh[c] = key_float(b);
    }
    m->thresh[0] = -INFINITY, m->thresh[m->entries] = NAN;
}

/* The buckets of |y| by its bits above `shift`, from the one under the least
 * threshold's to the one over the greatest's; 0 when a bucket holds more than
 * one threshold (or the table would not fit). */
static int build_buckets(mp_state_map *m, uint32_t shift) {
    float tmin = INFINITY, tmax = 0.0f;
    for (int c = 1; c < m->entries; c++) {
        const float t = fabsf(m->thresh[c]);
        if (t > 0.0f) tmin = fminf(tmin, t), tmax = fmaxf(tmax, t);
    }
    m->shift = shift, m->lo = (mp_f32_bits(tmin) >> shift) - 1;
    m->top = (int32_t)((mp_f32_bits(tmax) >> shift) + 1 - m->lo);
    const int32_t one = (int32_t)((mp_f32_bits(1.0f) >> shift) - m->lo); /* the bucket of 1.0 (internal.h) */
    if (m->top < one) m->top = one;
    if (m->top >= MP_MAP_BUCKETS) return 0;
    const uint32_t span = 1u << shift; /* cut: a bucket of `span` magnitudes has none past span - 1 */
    for (int sign = 0; sign < (m->sign_magnitude ? 1 : 2); sign++)
        for (int32_t k = 0; k <= m->top; k++) { /* bucket k's magnitudes: bits [least, most] */
            const uint32_t least = k == 0 ? 0 : (m->lo + (uint32_t)k) << shift;
            const uint32_t most = k == m->top ? 0x7f800000u : ((m->lo + (uint32_t)k + 1) << shift) - 1;
            const float y0 = mp_bits_f32(sign ? most | 0x80000000u : least);
            const float y1 = mp_bits_f32(sign ? least | 0x80000000u : most);
            const int c = torchao_code(m, y0), c1 = torchao_code(m, y1);
            uint32_t cut = span; /* no threshold in the bucket */
            if (c1 == c + 1) {
                if (k == 0 || k == m->top) return 0;
                const uint32_t t = mp_f32_bits(m->thresh[c1]) & 0x7fffffffu;
                cut = sign ? most - t : t - least; /* y >= -t: |y| <= t */
            } else if (c1 != c) {
                return 0;
            }
            m->lut[k + sign * MP_MAP_BUCKETS] = ((uint32_t)c << 24) + ((1u << 24) - cut);
        }
    return 1;
}

/* The thresholds in heap order (internal.h). */
static void build_heap(mp_state_map *m) {
    m->levels = 0;
    while (1 << m->levels < m->entries) m->levels++;
    for (int d = 0; d < m->levels; d++)
        for (int h = 1 << d; h < 2 << d; h++) {
            const int c = (2 * (h - (1 << d)) + 1) << (m->levels - 1 - d);
            m->heap[h] = c < m->entries ? m->thresh[c] : NAN;
        }
    m->heap[0] = NAN;
}

/* The coarsest buckets that hold at most one threshold each. */
static int build_tables(mp_state_map *m) {
    build_thresholds(m);
    build_heap(m);
    for (int c = 0; c < 256; c++)
        for (int k = 0; k < 4; k++) m->plane[k][c] = (uint8_t)(mp_f32_bits(m->value[c]) >> 8 * k);
    for (uint32_t mbits = 1; mbits <= 10; mbits++)
        if (build_buckets(m, 23 - mbits)) return 1;
    return 0;
}

static void build_maps(void) {
    dynamic_map(map8_signed.value, 1, 7, 8), dynamic_map(map8_unsigned.value, 0, 7, 8);
    dynamic_map(map4_signed.value, 1, 3, 4);
    for (int k = 0; k < 16; k++) map4_linear.value[k] = (float)(k + 1) / 16.0f; /* torch.linspace(0, 1, 17)[1:] */
    map8_signed.entries = map8_unsigned.entries = 256, map4_signed.entries = map4_linear.entries = 16;
    for (int k = 0; k < 256; k++) map_e4m3.value[k] = mp_e4m3_to_f32((uint8_t)k);
    map_e4m3.entries = 0x7f, map_e4m3.sign_magnitude = 1, map_e4m3.nan_code = mp_f32_to_e4m3_sat(NAN) & 0x7f;
    maps_exact = build_tables(&map8_signed) & build_tables(&map8_unsigned) & build_tables(&map4_signed) &
                 build_tables(&map4_linear) & build_tables(&map_e4m3);
    /* exp_avg_sq: a positive value never coded as 0 (map8_unsigned's 0 is code 0 and its least positive entry
     * code 1, 3.25e-7; e4m3's +0 is code 0 and 2^-9 code 1; map4_linear holds no 0) */
    map_e4m3_sq = map_e4m3;
    map8_unsigned.least_positive = map_e4m3_sq.least_positive = 1;
}

const mp_state_map *mp_optim_state_map(mp_state_format f, int state) {
    pthread_once(&maps_once, build_maps);
    if (f == MP_STATE_8BIT) return state == 1 ? &map8_signed : &map8_unsigned;
    if (f == MP_STATE_4BIT) return state == 1 ? &map4_signed : &map4_linear;
    if (f == MP_STATE_FP8) return state == 1 ? &map_e4m3 : &map_e4m3_sq;
    return NULL;
}

int mp_state_maps_exact(void) {
    pthread_once(&maps_once, build_maps);
    return maps_exact;
}

static int block_format(mp_state_format f) { return f == MP_STATE_FP8 || f == MP_STATE_8BIT || f == MP_STATE_4BIT; }
static size_t block_of(mp_state_format f) { return f == MP_STATE_4BIT ? 128 : 256; }
static int bits_of(mp_state_format f) { return f == MP_STATE_8BIT ? 8 : f == MP_STATE_4BIT ? 4 : 0; }

const char *mp_state_format_name(mp_state_format f) {
    static const char *const names[] = {"auto", "fp32", "bf16", "fp16", "fp8", "8bit", "4bit"};
    return (unsigned)f < sizeof names / sizeof names[0] ? names[f] : "?";
}

mp_sgd_config mp_sgd_defaults(void) {
    mp_sgd_config c = {1e-3, 0.0, 0.0, 0.0, 0};
    return c;
}

mp_adamw_config mp_adamw_defaults(void) {
    mp_adamw_config c = {1e-3, 0.9, 0.999, 1e-8, 1e-2};
    return c;
}

static mp_status check_lr(double lr) {
    if (!(isfinite(lr) && lr >= 0)) return mp_error(MP_EINVAL, "optimizer: lr must be finite and >= 0 (got %g)", lr);
    return MP_OK;
}

static mp_status new_optim(mp_optim **out, optim_kind kind) {
    if (!out) return mp_error(MP_EINVAL, "optimizer: NULL output pointer");
    mp_optim *o = calloc(1, sizeof *o);
    if (!o) return mp_error(MP_ENOMEM, "optimizer: out of memory");
    o->kind = kind;
    o->clip_coef = 1.0f;
    *out = o;
    return MP_OK;
}

mp_status mp_optim_sgd(mp_optim **out, const mp_sgd_config *cfg) {
    const mp_sgd_config c = cfg ? *cfg : mp_sgd_defaults();
    mp_status st = check_lr(c.lr);
    if (st != MP_OK) return st;
    if (!(isfinite(c.momentum) && c.momentum >= 0))
        return mp_error(MP_EINVAL, "sgd: momentum must be >= 0 (got %g)", c.momentum);
    if (!isfinite(c.dampening)) return mp_error(MP_EINVAL, "sgd: dampening must be finite");
    if (!(isfinite(c.weight_decay) && c.weight_decay >= 0))
        return mp_error(MP_EINVAL, "sgd: weight_decay must be >= 0 (got %g)", c.weight_decay);
    if (c.nesterov && (c.momentum <= 0 || c.dampening != 0))
        return mp_error(MP_EINVAL, "sgd: nesterov momentum requires a momentum and zero dampening");
    if ((st = new_optim(out, KIND_SGD)) != MP_OK) return st;
    (*out)->sgd = c;
    return MP_OK;
}

mp_status mp_optim_adamw(mp_optim **out, const mp_adamw_config *cfg) {
    const mp_adamw_config c = cfg ? *cfg : mp_adamw_defaults();
    mp_status st = check_lr(c.lr);
    if (st != MP_OK) return st;
    if (!(c.beta1 >= 0 && c.beta1 < 1)) return mp_error(MP_EINVAL, "adamw: beta1 must be in [0, 1) (got %g)", c.beta1);
    if (!(c.beta2 >= 0 && c.beta2 < 1)) return mp_error(MP_EINVAL, "adamw: beta2 must be in [0, 1) (got %g)", c.beta2);
    if (!(isfinite(c.eps) && c.eps >= 0)) return mp_error(MP_EINVAL, "adamw: eps must be >= 0 (got %g)", c.eps);
    if (!(isfinite(c.weight_decay) && c.weight_decay >= 0))
        return mp_error(MP_EINVAL, "adamw: weight_decay must be >= 0 (got %g)", c.weight_decay);
    if ((st = new_optim(out, KIND_ADAMW)) != MP_OK) return st;
    (*out)->adamw = c;
    return MP_OK;
}

static void free_param(mp_param *p) {
    free(p->master);
    free(p->grad);
    free(p->half);
    free(p->comp);
    free(p->state1), free(p->state2), free(p->hstate1), free(p->hstate2);
    free(p->qstate1), free(p->qstate2), free(p->qscale1), free(p->qscale2);
}

void mp_optim_free(mp_optim *o) {
    if (!o) return;
    for (size_t i = 0; i < o->count; i++) {
        free_param(o->params[i]);
        free(o->params[i]);
    }
    free(o->params);
    free(o);
}

static void *alloc_zero(size_t n, size_t size) {
    const size_t bytes = (n * size + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, bytes ? bytes : 64);
    if (p) memset(p, 0, bytes ? bytes : 64);
    return p;
}

/* The random key of a stochastic rounding: one per (seed, step, parameter). */
static uint64_t sr_key(const mp_optim *o, size_t param_index) {
    return mp_sr_bits(o->seed, o->steps) * 0x100000001b3ull ^ ((uint64_t)param_index << 32) ^ o->seed;
}

/* Element-wise work over one parameter, split across the threads. */
typedef enum { JOB_SGD, JOB_ADAMW, JOB_REFRESH, JOB_ROUND_SR, JOB_SUMSQ, JOB_SCALE, JOB_UNSCALE_SUMSQ } job_kind;

typedef struct {
    job_kind kind;
    const mp_kernels *k; /* the call's kernels, read once at its entry */
    mp_param *p;
    const mp_sgd_coef *sc;
    const mp_adamw_coef *ac;
    uint64_t key;
    float coef;                  /* JOB_SCALE: the factor; JOB_UNSCALE_SUMSQ: the inverse scale; an update: the clip
                                    coefficient applied to the gradient first (1: none) */
    int flush;                   /* FTZ/DAZ during the work */
    int refresh;                 /* after an update: round the share's master into the half copy */
    double part[MP_MAX_THREADS]; /* per share: the sum of squares (JOB_SUMSQ, JOB_UNSCALE_SUMSQ) or the updates
                                    lost (JOB_SGD, JOB_ADAMW; whole numbers, exact in a double) */
    int found[MP_MAX_THREADS];   /* JOB_UNSCALE_SUMSQ: the share held inf or NaN */
} param_job;

/* Pieces of a share that stay in L1/L2 while two steps run over them (a
 * multiple of 8: k_sumsq's pieces sum as one call). */
#define PIECE 1024

static void param_share_body(const param_job *j, job_kind kind, size_t i0, size_t i1, int t);

/* Each thread sets its own MXCSR: FTZ/DAZ for the update unless asked not to. */
static void share_flushed(param_job *j, job_kind kind, size_t i0, size_t i1, int t) {
#ifdef MP_X86
    const unsigned csr = _mm_getcsr();
    if (j->flush) _mm_setcsr(csr | 0x8040);
    param_share_body(j, kind, i0, i1, t);
    if (j->flush) _mm_setcsr(csr);
#else
    param_share_body(j, kind, i0, i1, t);
#endif
}

static void param_share(void *ctx, size_t i0, size_t i1, int t) {
    param_job *j = ctx; /* shared by the threads: read only here, but for this share's slots of part[], found[] */
    const int update = j->kind == JOB_SGD || j->kind == JOB_ADAMW;
    if (!update) {
        share_flushed(j, j->kind, i0, i1, t);
        return;
    }
    /* an update piece by piece: the gradient scaled by a clip coefficient (without FTZ/DAZ, as
     * mp_clip_grad_norm scales it), updated, and the half copy refreshed while the piece is in cache */
    double lost = 0;
    for (size_t c = i0; c < i1; c += PIECE) {
        const size_t c1 = i1 - c < PIECE ? i1 : c + PIECE;
        if (j->coef != 1.0f) param_share_body(j, JOB_SCALE, c, c1, t);
        share_flushed(j, j->kind, c, c1, t);
        lost += j->part[t];
        if (j->refresh) param_share_body(j, JOB_REFRESH, c, c1, t);
    }
    j->part[t] = lost;
}

/* The weights' kernel over elements [i0, i1) of j->p with its state in fp32
 * at m and v (NULL: none). Returns the updates lost. */
static uint64_t update_weights(const param_job *j, size_t i0, size_t i1, float *m, float *v) {
    const mp_param *p = j->p;
    const mp_optim_kernels *k = j->k->optim;
    const size_t n = i1 - i0;
    const float *g = p->grad + i0;
    uint16_t *h = p->half ? (uint16_t *)p->half + i0 : NULL;
    const int bf = p->half_type == MP_BF16, sgd = j->kind == JOB_SGD;
    switch (p->weights) {
    case MP_MASTER_FP32:
        return sgd ? k->sgd(p->master + i0, g, m, n, j->sc) : k->adamw(p->master + i0, g, m, v, n, j->ac);
    case MP_MASTER_PURE_BF16:
        return sgd ? k->sgd_bf16(h, g, m, n, j->sc, j->key, i0) : k->adamw_bf16(h, g, m, v, n, j->ac, j->key, i0);
    case MP_MASTER_NONE: return sgd ? k->sgd_half(h, g, m, n, j->sc, bf) : k->adamw_half(h, g, m, v, n, j->ac, bf);
    case MP_MASTER_KAHAN:
        return sgd ? k->sgd_kahan(h, p->comp + i0, g, m, n, j->sc, bf)
                   : k->adamw_kahan(h, p->comp + i0, g, m, v, n, j->ac, bf);
    }
    return 0;
}

/* p's block-formatted moments from element c (a whole number of blocks). */
static mp_qstate qstate_at(const mp_param *p, size_t c) {
    const mp_state_format f = p->state_format;
    const size_t block = block_of(f);
    const int bits = bits_of(f);
    const size_t at = bits == 4 ? c / 2 : c;
    return (mp_qstate){{p->qstate1 + at, p->qstate2 ? p->qstate2 + at : NULL},
                       {p->qscale1 + c / block, p->qscale2 ? p->qscale2 + c / block : NULL},
                       {mp_optim_state_map(f, 1), mp_optim_state_map(f, 2)},
                       bits,
                       block};
}

/* State k (1 or 2) of p, elements [c, c + n), widened or dequantized into x
 * (store 0), or x stored into it (store 1). c and n are whole blocks. */
static void state_io(const param_job *j, int k, float *x, size_t c, size_t n, int store) {
    const mp_param *p = j->p;
    const mp_state_format f = p->state_format;
    if (f == MP_STATE_FP16 || f == MP_STATE_BF16) {
        uint16_t *h = (k == 1 ? p->hstate1 : p->hstate2) + c;
        if (store) j->k->optim->narrow(h, x, n, f == MP_STATE_BF16);
        else j->k->optim->widen(x, h, n, f == MP_STATE_BF16);
        return;
    }
    const mp_qstate q = qstate_at(p, c);
    if (store) j->k->optim->quant(q.codes[k - 1], q.scale[k - 1], x, q.map[k - 1], q.bits, n, q.block);
    else j->k->optim->dequant(x, q.codes[k - 1], q.scale[k - 1], q.map[k - 1], q.bits, n, q.block);
}

/* The update of elements [i0, i1) of j->p: a state kept in fp32 is updated
 * where it is; another is widened (or dequantized) piece by piece into fp32,
 * updated with the weights and stored back while the piece is in cache.
 * Returns the updates lost. */
static uint64_t update(const param_job *j, size_t i0, size_t i1) {
    const mp_param *p = j->p;
    const int has1 = p->state1 || p->hstate1 || p->qstate1, has2 = p->state2 || p->hstate2 || p->qstate2;
    if (p->state_format == MP_STATE_FP32 || !has1)
        return update_weights(j, i0, i1, p->state1 ? p->state1 + i0 : NULL, p->state2 ? p->state2 + i0 : NULL);
    if (p->hstate2 && p->weights == MP_MASTER_FP32 && j->kind == JOB_ADAMW) /* the common case, fused */
        return j->k->optim->adamw_hstate(p->master + i0, p->grad + i0, p->hstate1 + i0, p->hstate2 + i0, i1 - i0, j->ac,
                                         p->state_format == MP_STATE_BF16);
    if (j->kind == JOB_ADAMW && p->weights == MP_MASTER_FP32 && p->qstate1 && j->k->optim->adamw_qstate) {
        const mp_qstate s = qstate_at(p, i0);
        return j->k->optim->adamw_qstate(p->master + i0, p->grad + i0, &s, i1 - i0, j->ac);
    }
    float m[PIECE], v[PIECE];
    uint64_t lost = 0;
    for (size_t c = i0; c < i1; c += PIECE) {
        const size_t n = i1 - c < PIECE ? i1 - c : PIECE;
        state_io(j, 1, m, c, n, 0);
        if (has2) state_io(j, 2, v, c, n, 0);
        lost += update_weights(j, c, c + n, m, has2 ? v : NULL);
        state_io(j, 1, m, c, n, 1);
        if (has2) state_io(j, 2, v, c, n, 1);
    }
    return lost;
}

static void param_share_body(const param_job *j, job_kind kind, size_t i0, size_t i1, int t) {
    mp_param *p = j->p;
    const size_t n = i1 - i0;
    uint16_t *h = p->half ? (uint16_t *)p->half + i0 : NULL;
    switch (kind) {
    case JOB_SGD:
    case JOB_ADAMW: ((param_job *)j)->part[t] = (double)update(j, i0, i1); break;
    case JOB_REFRESH: /* the half copy, round to nearest even, while the share is in cache */
        mp_from_f32(j->k, h, p->half_type, p->master + i0, n, NULL);
        break;
    case JOB_ROUND_SR: j->k->optim->round_sr(h, p->master + i0, n, j->key, i0); break;
    case JOB_SUMSQ: {
        double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        j->k->optim->sumsq(acc, p->grad + i0, n);
        ((param_job *)j)->part[t] = mp_sumsq_total(acc);
        break;
    }
    case JOB_SCALE: j->k->optim->scale(p->grad + i0, n, j->coef); break;
    case JOB_UNSCALE_SUMSQ: { /* piece by piece: unscaled and checked as mp_unscale_check, then summed */
        const mp_unscale_kernels *u = j->k->unscale;
        double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int found = 0;
        for (size_t c = i0; c < i1; c += PIECE) {
            const size_t m = i1 - c < PIECE ? i1 - c : PIECE;
            found |= j->coef == 1.0f ? u->check32((const uint32_t *)(p->grad + c), m) : u->f32(p->grad + c, m, j->coef);
            j->k->optim->sumsq(acc, p->grad + c, m);
        }
        ((param_job *)j)->part[t] = mp_sumsq_total(acc), ((param_job *)j)->found[t] = found;
        break;
    }
    }
}

#define PARAM_PARALLEL_MIN ((size_t)1 << 16)

/* Runs one job over parameter p; returns the sum of the shares' part[]
 * (and ORs their found[] into *found, when not NULL). */
static double run_param_found(param_job *j, mp_param *p, int *found) {
    j->p = p;
    memset(j->part, 0, sizeof j->part);
    memset(j->found, 0, sizeof j->found);
    /* an update of block-formatted state splits at whole blocks */
    const int upd = j->kind == JOB_SGD || j->kind == JOB_ADAMW;
    const size_t align = upd && block_format(p->state_format) ? 256 : 64;
    const int shares = mp_parallel_for(p->n, PARAM_PARALLEL_MIN, align, param_share, j);
    double s = 0;
    for (int t = 0; t < shares; t++) s += j->part[t];
    for (int t = 0; found && t < shares; t++) *found |= j->found[t];
    return s;
}

static double run_param(param_job *j, mp_param *p) { return run_param_found(j, p, NULL); }

/* Rounds the master into the half copy: nearest even, or stochastic for bf16. */
static void refresh_half(const mp_kernels *k, mp_optim *o, size_t i) {
    mp_param *p = o->params[i];
    if (!p->half || !p->master) return;
    if (p->half_type == MP_BF16 && o->rounding == MP_ROUND_STOCHASTIC) {
        param_job j = {JOB_ROUND_SR, k, NULL, NULL, NULL, sr_key(o, i), 0.0f, 0, 0, {0}, {0}};
        run_param(&j, p);
    } else {
        mp_convert_in(k, p->half, p->half_type, p->master, MP_F32, p->n, NULL);
    }
}

/* master: fp32 masters (+ half copy); pure bf16 (stochastic, fp32 state); none (weights and state in
 * half_type, nearest even) */
static mp_status add_param(mp_optim *o, const char *name, const float *init, size_t n, mp_dtype half_type,
                           mp_master_weights master, mp_param **out) {
    const int pure = master != MP_MASTER_FP32; /* no fp32 master: the weights live in the half copy */
    if (!o || !name || (!init && n)) return mp_error(MP_EINVAL, "mp_optim_add: NULL argument");
    if ((master == MP_MASTER_NONE || master == MP_MASTER_KAHAN) && half_type != MP_F16 && half_type != MP_BF16)
        return mp_error(MP_EINVAL, "mp_optim_add_%s: a parameter without fp32 weights is fp16 or bf16",
                        master == MP_MASTER_KAHAN ? "kahan" : "half");
    if (half_type != MP_F32 && half_type != MP_F16 && half_type != MP_BF16)
        return mp_error(MP_EINVAL, "mp_optim_add: half copies are fp16 or bf16 (or MP_F32 for none)");
    if (strlen(name) >= sizeof((mp_param *)0)->name)
        return mp_error(MP_EINVAL, "mp_optim_add: name '%s' is longer than 63 bytes", name);
    for (size_t i = 0; i < n; i++)
        if (!isfinite(init[i]))
            return mp_error(MP_EINVAL, "mp_optim_add: parameter '%s' has a non-finite value at %zu", name, i);
    if (o->count == o->cap) {
        const size_t cap = o->cap ? 2 * o->cap : 8;
        mp_param **np = realloc(o->params, cap * sizeof *np);
        if (!np) return mp_error(MP_ENOMEM, "mp_optim_add: out of memory");
        o->params = np, o->cap = cap;
    }
    mp_param *p = calloc(1, sizeof *p);
    if (!p) return mp_error(MP_ENOMEM, "mp_optim_add: out of memory");
    snprintf(p->name, sizeof p->name, "%s", name);
    p->n = n;
    p->half_type = half_type;
    p->weights = master;
    p->grad = alloc_zero(n, 4);
    if (!pure) p->master = alloc_zero(n, 4);
    if (half_type != MP_F32) p->half = alloc_zero(n, 2);
    if (master == MP_MASTER_KAHAN) p->comp = alloc_zero(n, 2);
    if (!p->grad || (!pure && !p->master) || (half_type != MP_F32 && !p->half) ||
        (master == MP_MASTER_KAHAN && !p->comp)) {
        free_param(p);
        free(p);
        return mp_error(MP_ENOMEM, "mp_optim_add: out of memory for '%s' (%zu elements)", name, n);
    }
    const mp_kernels *k = mp_kernels_current();
    if (pure) {
        mp_convert_in(k, p->half, half_type, init, MP_F32, n, NULL);
    } else {
        memcpy(p->master, init, n * 4);
    }
    o->params[o->count++] = p;
    refresh_half(k, o, o->count - 1);
    if (out) *out = p;
    return MP_OK;
}

mp_status mp_optim_add(mp_optim *o, const char *name, const float *init, size_t n, mp_dtype half_type, mp_param **out) {
    return add_param(o, name, init, n, half_type, MP_MASTER_FP32, out);
}

mp_status mp_optim_add_pure_bf16(mp_optim *o, const char *name, const float *init, size_t n, mp_param **out) {
    return add_param(o, name, init, n, MP_BF16, MP_MASTER_PURE_BF16, out);
}

mp_status mp_optim_add_half(mp_optim *o, const char *name, const float *init, size_t n, mp_dtype half_type,
                            mp_param **out) {
    return add_param(o, name, init, n, half_type, MP_MASTER_NONE, out);
}

mp_status mp_optim_add_kahan(mp_optim *o, const char *name, const float *init, size_t n, mp_dtype half_type,
                             mp_param **out) {
    return add_param(o, name, init, n, half_type, MP_MASTER_KAHAN, out);
}

mp_status mp_master_weights_check(const char *who, mp_dtype compute, mp_master_weights m) {
    if (m == MP_MASTER_PURE_BF16 && compute != MP_BF16)
        return mp_error(MP_EINVAL, "%s: pure weights are bf16 only", who);
    if ((m == MP_MASTER_NONE || m == MP_MASTER_KAHAN) && compute == MP_F32)
        return mp_error(MP_EINVAL, "%s: weights without an fp32 master need fp16 or bf16", who);
    if ((unsigned)m > MP_MASTER_KAHAN) return mp_error(MP_EINVAL, "%s: master weights %d", who, (int)m);
    return MP_OK;
}

mp_status mp_optim_add_as(mp_optim *o, const char *name, const float *init, size_t n, mp_dtype compute,
                          mp_master_weights m, mp_dtype copy_type, mp_param **out) {
    const mp_status st = mp_master_weights_check("mp_optim_add_as", compute, m);
    if (st != MP_OK) return st;
    if (m == MP_MASTER_PURE_BF16) return mp_optim_add_pure_bf16(o, name, init, n, out);
    if (m == MP_MASTER_NONE) return mp_optim_add_half(o, name, init, n, compute, out);
    if (m == MP_MASTER_KAHAN) return mp_optim_add_kahan(o, name, init, n, compute, out);
    return mp_optim_add(o, name, init, n, copy_type, out);
}

mp_status mp_optim_set_flush_denormal(mp_optim *o, int flush) {
    if (!o) return mp_error(MP_EINVAL, "mp_optim_set_flush_denormal: NULL optimizer");
    o->keep_denormal = !flush;
    return MP_OK;
}

mp_status mp_optim_set_rounding(mp_optim *o, mp_rounding r, uint64_t seed) {
    if (!o) return mp_error(MP_EINVAL, "mp_optim_set_rounding: NULL optimizer");
    if (r != MP_ROUND_NEAREST && r != MP_ROUND_STOCHASTIC) return mp_error(MP_EINVAL, "unknown rounding %d", (int)r);
    o->rounding = r;
    o->seed = seed;
    return MP_OK;
}

size_t mp_optim_count(const mp_optim *o) { return o->count; }
mp_param *mp_optim_param(mp_optim *o, size_t i) { return i < o->count ? o->params[i] : NULL; }
uint64_t mp_optim_steps(const mp_optim *o) { return o->steps; }

uint64_t mp_optim_lost_updates(const mp_optim *o, uint64_t *updated) {
    if (updated) *updated = o->updated;
    return o->lost_updates;
}
double mp_optim_lr(const mp_optim *o) { return o->kind == KIND_SGD ? o->sgd.lr : o->adamw.lr; }

mp_status mp_optim_set_lr(mp_optim *o, double lr) {
    if (!o) return mp_error(MP_EINVAL, "mp_optim_set_lr: NULL optimizer");
    const mp_status st = check_lr(lr);
    if (st != MP_OK) return st;
    if (o->kind == KIND_SGD) o->sgd.lr = lr;
    else o->adamw.lr = lr;
    return MP_OK;
}

void mp_optim_zero_grad(mp_optim *o) {
    for (size_t i = 0; i < o->count; i++) memset(o->params[i]->grad, 0, o->params[i]->n * 4);
}

/* The format p's state takes: the optimizer's, but for a block format a
 * parameter under 4096 elements or not a whole number of blocks keeps its own
 * (fp32, or without fp32 weights its compute format), as torchao does. */
static mp_state_format format_of(const mp_optim *o, const mp_param *p) {
    const mp_state_format own = p->master ? MP_STATE_FP32 : p->half_type == MP_BF16 ? MP_STATE_BF16 : MP_STATE_FP16;
    const mp_state_format f = o->state_format;
    if (f == MP_STATE_AUTO) return p->weights == MP_MASTER_NONE ? own : MP_STATE_FP32;
    if (block_format(f) && (p->n < 4096 || p->n % block_of(f) != 0)) return own;
    return f;
}

/* Allocates the optimizer state of p (zeros: zero codes and scales, as
 * torchao's zeros) on first use. */
static mp_status ensure_state(mp_optim *o, mp_param *p) {
    const int need[2] = {o->kind == KIND_ADAMW || o->sgd.momentum != 0, o->kind == KIND_ADAMW};
    if (p->weights == MP_MASTER_KAHAN && !p->comp && !(p->comp = alloc_zero(p->n, 2)))
        return mp_error(MP_ENOMEM, "optimizer: out of memory for the compensation of '%s'", p->name);
    if (p->state1 || p->hstate1 || p->qstate1 || !need[0]) return MP_OK;
    const mp_state_format f = p->state_format = format_of(o, p);
    for (int k = 0; k < 2; k++) {
        if (!need[k]) continue;
        int ok;
        if (f == MP_STATE_FP32) ok = (*(k ? &p->state2 : &p->state1) = alloc_zero(p->n, 4)) != NULL;
        else if (!block_format(f)) ok = (*(k ? &p->hstate2 : &p->hstate1) = alloc_zero(p->n, 2)) != NULL;
        else
            ok = (*(k ? &p->qstate2 : &p->qstate1) = alloc_zero(bits_of(f) == 4 ? p->n / 2 : p->n, 1)) &&
                 (*(k ? &p->qscale2 : &p->qscale1) = alloc_zero(p->n / block_of(f), 4));
        if (!ok) return mp_error(MP_ENOMEM, "optimizer: out of memory for the state of '%s'", p->name);
    }
    return MP_OK;
}

mp_status mp_optim_set_state_format(mp_optim *o, mp_state_format f) {
    if (!o) return mp_error(MP_EINVAL, "mp_optim_set_state_format: NULL optimizer");
    if ((unsigned)f > MP_STATE_4BIT) return mp_error(MP_EINVAL, "optimizer state format %d", (int)f);
    if (o->kind == KIND_SGD && o->sgd.momentum == 0 && f != MP_STATE_AUTO && f != MP_STATE_FP32)
        return mp_error(MP_EINVAL, "SGD without momentum keeps no optimizer state: no %s state",
                        mp_state_format_name(f));
    for (size_t i = 0; i < o->count; i++)
        if (o->params[i]->state1 || o->params[i]->hstate1 || o->params[i]->qstate1)
            return mp_error(MP_ESTATE, "mp_optim_set_state_format: the state exists already");
    o->state_format = f;
    return MP_OK;
}

mp_optim_bytes mp_optim_bytes_held(const mp_optim *o) {
    mp_optim_bytes b = {0};
    for (size_t i = 0; o && i < o->count; i++) {
        const mp_param *p = o->params[i];
        const double n = (double)p->n;
        b.params += n, b.grad += 4 * n;
        b.weights += p->master ? 4 * n : 2 * n;
        if (p->master && p->half) b.copy += 2 * n;
        if (p->comp) b.comp += 2 * n;
        mp_tensor ts[5];
        const size_t k = mp_optim_state_tensors(p, ts);
        for (size_t j = 0; j < k; j++) b.state += (double)ts[j].nbytes;
        b.state -= p->comp ? 2 * n : 0; /* the compensation, the last of them, is counted apart */
    }
    return b;
}

/* out[n] (when out is not NULL) as the 1-D tensor "optim.NAME.SUFFIX" of count values of esize bytes at data;
 * returns n + 1. */
static size_t put_tensor(mp_tensor *out, size_t n, const mp_param *p, const char *suffix, mp_dtype t, size_t count,
                         size_t esize, const void *data) {
    if (out) {
        mp_tensor *x = &out[n];
        memset(x, 0, sizeof *x);
        snprintf(x->name, sizeof x->name, "optim.%s.%s", p->name, suffix);
        x->dtype = t, x->ndim = 1, x->shape[0] = count, x->nbytes = count * esize, x->data = data;
    }
    return n + 1;
}

size_t mp_optim_state_tensors(const mp_param *p, mp_tensor *out) {
    size_t n = 0;
    const mp_state_format f = p->state_format;
    const int blocks = block_format(f);
    const void *const fp32[2] = {p->state1, p->state2}, *const half[2] = {p->hstate1, p->hstate2};
    const void *const codes[2] = {p->qstate1, p->qstate2}, *const scales[2] = {p->qscale1, p->qscale2};
    const mp_dtype t = f == MP_STATE_FP32   ? MP_F32
                       : f == MP_STATE_BF16 ? MP_BF16
                       : f == MP_STATE_FP16 ? MP_F16
                       : f == MP_STATE_FP8  ? MP_E4M3
                                            : MP_U8;
    const size_t count = f == MP_STATE_4BIT ? p->n / 2 : p->n, esize = f == MP_STATE_FP32 ? 4 : blocks ? 1 : 2;
    static const char *const name[2] = {"state1", "state2"}, *const scale_name[2] = {"state1.scale", "state2.scale"};
    for (int k = 0; k < 2; k++) {
        const void *data = f == MP_STATE_FP32 ? fp32[k] : blocks ? codes[k] : half[k];
        if (!data) continue;
        n = put_tensor(out, n, p, name[k], t, count, esize, data);
        if (!blocks) continue;
        n = put_tensor(out, n, p, scale_name[k], MP_F32, p->n / block_of(f), 4, scales[k]);
    }
    if (p->comp) n = put_tensor(out, n, p, "comp", p->half_type, p->n, 2, p->comp);
    return n;
}

mp_status mp_optim_state_check(const mp_optim *o, size_t i) {
    if (!o || i >= o->count) return mp_error(MP_EINVAL, "mp_optim_state_check: no parameter %zu", i);
    const mp_param *p = o->params[i];
    const mp_state_format f = p->state_format;
    const int adam = o->kind == KIND_ADAMW, blocks = block_format(f), bits = bits_of(f);
    for (int k = 1; k <= 2; k++) {
        const char *what = !adam ? "the momentum buffer" : k == 1 ? "exp_avg" : "exp_avg_sq";
        const int second = adam && k == 2;
        const float *s32 = k == 1 ? p->state1 : p->state2;
        const uint16_t *s16 = k == 1 ? p->hstate1 : p->hstate2;
        const uint8_t *codes = k == 1 ? p->qstate1 : p->qstate2;
        const float *scale = k == 1 ? p->qscale1 : p->qscale2;
        if (f == MP_STATE_FP32 && s32) {
            for (size_t j = 0; j < p->n; j++)
                if (!isfinite(s32[j]) || (second && s32[j] < 0))
                    return mp_error(MP_ECORRUPT, "optimizer state 'optim.%s.state%d' (%s) holds %g at element %zu: %s",
                                    p->name, k, what, (double)s32[j], j,
                                    second ? "a second moment is finite and >= 0" : "its values are finite");
        } else if ((f == MP_STATE_FP16 || f == MP_STATE_BF16) && s16) {
            for (size_t j = 0; j < p->n; j++) {
                const float v = f == MP_STATE_BF16 ? mp_bf16_to_f32(s16[j]) : mp_f16_to_f32(s16[j]);
                if (!isfinite(v) || (second && v < 0))
                    return mp_error(MP_ECORRUPT, "optimizer state 'optim.%s.state%d' (%s) holds %g at element %zu: %s",
                                    p->name, k, what, (double)v, j,
                                    second ? "a second moment is finite and >= 0" : "its values are finite");
            }
        } else if (blocks && codes) {
            const size_t block = block_of(f);
            for (size_t b = 0; b < p->n / block; b++)
                if (!isfinite(scale[b]) || !(scale[b] > 0))
                    return mp_error(MP_ECORRUPT,
                                    "optimizer state 'optim.%s.state%d.scale' (%s) holds %g at block %zu: "
                                    "a block's scale is finite and > 0",
                                    p->name, k, what, (double)scale[b], b);
            const mp_state_map *map = mp_optim_state_map(f, k);
            for (size_t j = 0; j < p->n; j++) {
                const int c = bits == 4 ? (j % 2 ? codes[j / 2] & 15 : codes[j / 2] >> 4) : codes[j];
                const float v = map->value[c];
                if (!isfinite(v) || (bits && c >= map->entries) || (second && v < 0))
                    return mp_error(MP_ECORRUPT,
                                    "optimizer state 'optim.%s.state%d' (%s) holds code %d (%g) at element "
                                    "%zu: %s",
                                    p->name, k, what, c, (double)v, j,
                                    !isfinite(v) || (bits && c >= map->entries) ? "not a value of the format's map"
                                                                                : "a second moment is >= 0");
            }
        }
    }
    if (p->comp)
        for (size_t j = 0; j < p->n; j++) {
            const float v = p->half_type == MP_BF16 ? mp_bf16_to_f32(p->comp[j]) : mp_f16_to_f32(p->comp[j]);
            if (!isfinite(v))
                return mp_error(MP_ECORRUPT,
                                "optimizer state 'optim.%s.comp' (the Kahan compensation) holds %g at "
                                "element %zu: its values are finite",
                                p->name, (double)v, j);
        }
    return MP_OK;
}

/* p's state (and compensation) freed */
static void drop_state(mp_param *p) {
    free(p->comp), free(p->state1), free(p->state2), free(p->hstate1), free(p->hstate2);
    free(p->qstate1), free(p->qstate2), free(p->qscale1), free(p->qscale2);
    p->comp = NULL, p->state1 = p->state2 = NULL, p->hstate1 = p->hstate2 = NULL;
    p->qstate1 = p->qstate2 = NULL, p->qscale1 = p->qscale2 = NULL;
}

mp_status mp_optim_set_shard(mp_optim *o, size_t first, size_t end, mp_status (*sum)(void *ctx, double *x, size_t n),
                             void *ctx) {
    if (!o || !sum || first > end || end > o->count)
        return mp_error(MP_EINVAL, "mp_optim_set_shard: parameters [%zu, %zu) of %zu, or no sum", first, end,
                        o ? o->count : 0);
    o->sharded = 1, o->own0 = first, o->own1 = end, o->ranks_sum = sum, o->ranks_ctx = ctx;
    for (size_t i = 0; i < o->count; i++)
        if (!owns(o, i)) drop_state(o->params[i]);
    return MP_OK;
}

int mp_optim_owns(const mp_optim *o, size_t i) { return o && i < o->count && owns(o, i); }

mp_status mp_optim_hold_state(mp_optim *o, size_t i, int hold) {
    if (!o || i >= o->count) return mp_error(MP_EINVAL, "mp_optim_hold_state: no parameter %zu", i);
    if (hold) return ensure_state(o, o->params[i]);
    drop_state(o->params[i]);
    return MP_OK;
}

void mp_optim_refresh_half(mp_optim *o, size_t i) {
    if (o && i < o->count) refresh_half(mp_kernels_current(), o, i);
}

mp_status mp_optim_restore(mp_optim *o, uint64_t steps) {
    if (!o) return mp_error(MP_EINVAL, "mp_optim_restore: NULL optimizer");
    for (size_t i = 0; i < o->count; i++) {
        if (!owns(o, i)) continue;
        const mp_status st = ensure_state(o, o->params[i]);
        if (st != MP_OK) return st;
        o->params[i]->has_state = steps > 0;
    }
    o->steps = steps;
    return MP_OK;
}

/* The real update of every parameter; the caller has checked the gradients.
 * A clip coefficient left by mp_optim_unscale_clip is this step's alone. */
static mp_status apply_step(const mp_kernels *k, mp_optim *o) {
    const float clip_coef = o->clip_coef;
    o->clip_coef = 1.0f;
    o->lost_updates = o->updated = 0;
    for (size_t i = 0; i < o->count; i++) {
        const mp_status st = owns(o, i) ? ensure_state(o, o->params[i]) : MP_OK;
        if (st != MP_OK) return st;
    }
    const uint64_t t = o->steps + 1;
    mp_sgd_coef sc;
    mp_adamw_coef ac;
    memset(&sc, 0, sizeof sc);
    memset(&ac, 0, sizeof ac);
    if (o->kind == KIND_SGD) {
        const mp_sgd_config *c = &o->sgd;
        sc.neg_lr = (float)-c->lr;
        sc.momentum = (float)c->momentum;
        sc.one_minus_damp = (float)(1.0 - c->dampening);
        sc.use_momentum = c->momentum != 0;
        sc.nesterov = c->nesterov;
    } else {
        const mp_adamw_config *c = &o->adamw;
        const double bc1 = 1.0 - pow(c->beta1, (double)t), bc2 = 1.0 - pow(c->beta2, (double)t);
        ac.w1 = (float)(1.0 - c->beta1);
        ac.beta2 = (float)c->beta2;
        ac.c2 = (float)(1.0 - c->beta2);
        ac.bc2_sqrt = (float)sqrt(bc2);
        ac.bc2_inv = 1.0f / ac.bc2_sqrt;
        ac.eps = (float)c->eps;
        ac.neg_step_size = (float)-(c->lr / bc1);
    }
    for (size_t i = 0; i < o->count; i++) {
        mp_param *p = o->params[i];
        if (!owns(o, i)) { /* another rank's: its first step is the same step everywhere */
            p->has_state = 1;
            continue;
        }
        sc.first = !p->has_state;
        sc.wd = p->no_decay ? 0.0f : (float)o->sgd.weight_decay;
        ac.decay = p->no_decay ? 1.0f : (float)(1.0 - o->adamw.lr * o->adamw.weight_decay);
        /* nearest-even half copies are refreshed inside the update's pass */
        const int fused = p->master && p->half && !(p->half_type == MP_BF16 && o->rounding == MP_ROUND_STOCHASTIC);
        param_job j = {o->kind == KIND_SGD ? JOB_SGD : JOB_ADAMW,
                       k,
                       NULL,
                       &sc,
                       &ac,
                       sr_key(o, i),
                       clip_coef,
                       !o->keep_denormal,
                       fused,
                       {0},
                       {0}};
        o->lost_updates += (uint64_t)run_param(&j, p);
        o->updated += p->n;
        p->has_state = 1;
    }
    o->steps = t;
    for (size_t i = 0; i < o->count; i++) /* the stochastic ones (the others were refreshed in the update) */
        if (owns(o, i) && o->params[i]->half_type == MP_BF16 && o->rounding == MP_ROUND_STOCHASTIC)
            refresh_half(k, o, i);
    if (o->sharded) { /* the job's counts */
        double c[2] = {(double)o->lost_updates, (double)o->updated};
        const mp_status st = o->ranks_sum(o->ranks_ctx, c, 2);
        if (st != MP_OK) return mp_error(st, "the ranks' sum of the lost updates failed (%s)", mp_status_str(st));
        o->lost_updates = (uint64_t)c[0], o->updated = (uint64_t)c[1];
    }
    return MP_OK;
}

mp_status mp_optim_step(mp_optim *o) { return mp_optim_step_in(mp_kernels_current(), o); }

mp_status mp_optim_step_in(const mp_kernels *k, mp_optim *o) {
    if (o->scaled)
        return mp_error(MP_ESTATE, "mp_optim_step: this optimizer is driven by a loss scaler; its gradients are "
                                   "scaled: use mp_scaler_step");
    return apply_step(k, o);
}

mp_stage mp_optim_stage(const mp_optim *o, const mp_scaler *s) {
    return o->stage_epoch == s->steps ? o->stage : MP_STAGE_READY;
}

static void set_stage(mp_optim *o, const mp_scaler *s, mp_stage st) {
    o->stage = st;
    o->stage_epoch = s->steps;
    o->scaled = 1;
}

mp_status mp_scaler_unscale(mp_scaler *s, mp_optim *o, int *found_inf) {
    if (!s || !o) return mp_error(MP_EINVAL, "mp_scaler_unscale: NULL argument");
    const mp_stage stage = mp_optim_stage(o, s);
    if (stage == MP_STAGE_UNSCALED)
        return mp_error(MP_ESTATE, "unscale called twice for this optimizer since the last update");
    if (stage == MP_STAGE_STEPPED) return mp_error(MP_ESTATE, "unscale called after step; call update first");
    const float inv = mp_scaler_inv_scale(s);
    int found = 0;
    o->clip_coef = 1.0f; /* the separate calls clip in memory (mp_clip_grad_norm) */
    for (size_t i = 0; i < o->count; i++) {
        const mp_status st =
            owns(o, i) ? mp_unscale_check(o->params[i]->grad, MP_F32, o->params[i]->n, inv, &found) : MP_OK;
        if (st != MP_OK) return st;
    }
    if (o->sharded) { /* an inf or NaN on any rank's parameters skips the step everywhere */
        double f = found;
        const mp_status st = o->ranks_sum(o->ranks_ctx, &f, 1);
        if (st != MP_OK) return mp_error(st, "the ranks' sum of the inf/NaN check failed (%s)", mp_status_str(st));
        found = f > 0;
    }
    o->found_inf = found;
    set_stage(o, s, MP_STAGE_UNSCALED);
    if (found_inf) *found_inf = found;
    return MP_OK;
}

mp_status mp_scaler_step(mp_scaler *s, mp_optim *o, int *found_inf) {
    if (!s || !o) return mp_error(MP_EINVAL, "mp_scaler_step: NULL argument");
    const mp_stage stage = mp_optim_stage(o, s);
    if (stage == MP_STAGE_STEPPED) return mp_error(MP_ESTATE, "step called twice for this optimizer before update");
    if (stage == MP_STAGE_READY) {
        const mp_status st = mp_scaler_unscale(s, o, NULL);
        if (st != MP_OK) return st;
    }
    const int found = o->found_inf;
    set_stage(o, s, MP_STAGE_STEPPED);
    if (found_inf) *found_inf = found;
    if (found) o->lost_updates = o->updated = 0, o->clip_coef = 1.0f; /* a skipped step updates nothing */
    return found ? MP_OK : apply_step(mp_kernels_current(), o);
}

/* The gradients' L2 norm as a naive loop in acc computes it: parameters in
 * registration order, each square and each partial sum rounded to acc. */
static double naive_norm(const mp_optim *o, mp_dtype acc) {
    float sum = 0.0f;
    for (size_t i = 0; i < o->count; i++) {
        const float *g = o->params[i]->grad;
        for (size_t k = 0; k < o->params[i]->n; k++) sum = mp_round_to(acc, sum + mp_round_to(acc, g[k] * g[k]));
    }
    return mp_round_to(acc, sqrtf(sum));
}

mp_status mp_clip_grad_norm(mp_optim *o, const mp_scaler *s, double max_norm, mp_dtype acc, double *total_norm) {
    if (!o) return mp_error(MP_EINVAL, "mp_clip_grad_norm: NULL optimizer");
    if (acc != MP_F32 && acc != MP_F16 && acc != MP_BF16)
        return mp_error(MP_EINVAL, "mp_clip_grad_norm: the norm is summed in fp32, fp16 or bf16");
    if (!(max_norm > 0 && isfinite(max_norm)))
        return mp_error(MP_EINVAL, "mp_clip_grad_norm: max_norm must be finite and > 0 (got %g)", max_norm);
    if (s ? mp_optim_stage(o, s) != MP_STAGE_UNSCALED : o->scaled)
        return mp_error(MP_ESTATE, "clip_grad_norm: gradients are still multiplied by the loss scale; call "
                                   "mp_scaler_unscale first (and pass the scaler)");
    if (o->sharded)
        return mp_error(MP_EINVAL, "mp_clip_grad_norm: a sharded optimizer measures the norm in fp32 only "
                                   "(mp_optim_unscale_clip)");
    o->clip_coef = 1.0f; /* this call clips in memory */
    param_job j = {JOB_SUMSQ, mp_kernels_current(), NULL, NULL, NULL, 0, 0.0f, 0, 0, {0}, {0}};
    double norm;
    if (acc == MP_F32) {
        double sum = 0;
        for (size_t i = 0; i < o->count; i++) sum += run_param(&j, o->params[i]);
        norm = sqrt(sum);
    } else {
        norm = naive_norm(o, acc);
    }
    if (total_norm) *total_norm = norm;
    /* fp64: a non-finite norm means non-finite gradients, left for the scaler to skip; a naive
     * half norm also overflows on finite gradients, and its coefficient is then 0 */
    if (isnan(norm) || (acc == MP_F32 && isinf(norm))) return MP_OK;
    const double coef = max_norm / (norm + 1e-6);
    j.kind = JOB_SCALE, j.coef = (float)coef;
    if (coef < 1.0)
        for (size_t i = 0; i < o->count; i++) run_param(&j, o->params[i]);
    return MP_OK;
}

mp_status mp_optim_unscale_clip(mp_optim *o, mp_scaler *s, double max_norm, mp_dtype acc, double *total_norm,
                                int *found_inf) {
    if (!o) return mp_error(MP_EINVAL, "mp_optim_unscale_clip: NULL optimizer");
    int found = 0;
    if (acc != MP_F32) { /* the naive norm: the two calls */
        mp_status st = s ? mp_scaler_unscale(s, o, &found) : MP_OK;
        if (st == MP_OK) st = mp_clip_grad_norm(o, s, max_norm, acc, total_norm);
        if (found_inf) *found_inf = found;
        return st;
    }
    if (!(max_norm > 0 && isfinite(max_norm)))
        return mp_error(MP_EINVAL, "mp_clip_grad_norm: max_norm must be finite and > 0 (got %g)", max_norm);
    float inv = 1.0f;
    if (s) { /* mp_scaler_unscale's checks and stage */
        const mp_stage stage = mp_optim_stage(o, s);
        if (stage == MP_STAGE_UNSCALED)
            return mp_error(MP_ESTATE, "unscale called twice for this optimizer since the last update");
        if (stage == MP_STAGE_STEPPED) return mp_error(MP_ESTATE, "unscale called after step; call update first");
        inv = mp_scaler_inv_scale(s);
        if (!isfinite(inv)) return mp_error(MP_EINVAL, "mp_unscale_check: inv_scale %g is not finite", (double)inv);
    } else if (o->scaled) {
        return mp_error(MP_ESTATE, "clip_grad_norm: gradients are still multiplied by the loss scale; call "
                                   "mp_scaler_unscale first (and pass the scaler)");
    }
    param_job j = {JOB_UNSCALE_SUMSQ, mp_kernels_current(), NULL, NULL, NULL, 0, inv, 0, 0, {0}, {0}};
    double sum = 0;
    if (!o->sharded) {
        for (size_t i = 0; i < o->count; i++) sum += run_param_found(&j, o->params[i], &found);
    } else { /* each parameter's sum from its owner (the others add 0: exact), then added in the same order */
        double *x = calloc(o->count + 1, sizeof *x);
        if (!x) return mp_error(MP_ENOMEM, "optimizer: out of memory");
        for (size_t i = o->own0; i < o->own1; i++) x[i] = run_param_found(&j, o->params[i], &found);
        x[o->count] = found;
        const mp_status st = o->ranks_sum(o->ranks_ctx, x, o->count + 1);
        for (size_t i = 0; i < o->count; i++) sum += x[i];
        found = x[o->count] > 0;
        free(x);
        if (st != MP_OK) return mp_error(st, "the ranks' sum of the gradient norm failed (%s)", mp_status_str(st));
    }
    const double norm = sqrt(sum);
    if (s) {
        o->found_inf = found;
        set_stage(o, s, MP_STAGE_UNSCALED);
    }
    if (found_inf) *found_inf = s ? found : 0; /* as mp_scaler_unscale, which only a scaler calls */
    if (total_norm) *total_norm = norm;
    /* as mp_clip_grad_norm: a non-finite norm clips nothing (the step is skipped, or the weights break) */
    const double coef = max_norm / (norm + 1e-6);
    o->clip_coef = !isnan(norm) && !isinf(norm) && coef < 1.0 ? (float)coef : 1.0f;
    return MP_OK;
}
