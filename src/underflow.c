/* underflow.c - what a set of values loses in a number format at several loss
 * scales (underflow.h): the counts through mp_convert_count, the order
 * statistics by radix selection, the best power-of-two scale, and the counts
 * the explorer page shows (explore_page.c). */
#define _POSIX_C_SOURCE 200809L
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "internal.h"

/* ---- the set: x's finite elements, as magnitudes ----
 * A store is symmetric in the sign, so mp_convert_count on the raw values
 * gives the magnitudes' counts once the dropped elements are taken out: it
 * counts the infinities as overflow and the NaNs apart. No copy is made. */
typedef struct {
    const void *x;
    mp_dtype xt;
    size_t n;                    /* elements of x */
    uint64_t finite, zeros, inf; /* among them */
} value_set;

static mp_status set_init(value_set *s, const void *x, mp_dtype xt, size_t n) {
    mp_value_counts c;
    const mp_status st = mp_count_values(x, xt, n, &c);
    if (st != MP_OK) return st;
    s->x = x, s->xt = xt, s->n = n;
    s->finite = n - c.inf - c.nan, s->zeros = c.zero, s->inf = c.inf;
    return MP_OK;
}

/* The formats one loss scale is analyzed for. Not E8M0 (block scales, not
 * values) nor E2M1 (fp4 elements are scaled per block of 16 or 32 values,
 * MX/NVFP4, never by one loss scale for a whole tensor). */
static int is_store_format(mp_dtype t) { return t == MP_F16 || t == MP_BF16 || t == MP_E4M3 || t == MP_E5M2; }

/* The counts at one scale; all zero (but the scale) if t or the scale is bad. */
static mp_scale_counts set_count(const value_set *s, mp_dtype t, double scale) {
    mp_scale_counts c = {scale, 0, 0, 0, 0};
    mp_convert_stats st = {0, 0, 0, 0, 0.0f};
    if (!is_store_format(t) || mp_convert_count(t, s->x, s->xt, s->n, (float)scale, &st) != MP_OK) return c;
    c.zero = s->zeros + st.underflow, c.subnormal = st.subnormal, c.overflow = st.overflow - s->inf;
    c.survive = s->finite - c.zero - c.overflow;
    return c;
}

static double set_best_scale(const value_set *s, mp_dtype t, mp_scale_counts *best_counts) {
    double best = 1;
    mp_scale_counts bc = set_count(s, t, 1);
    for (int k = 1; k <= 126; k++) {
        const mp_scale_counts c = set_count(s, t, ldexp(1.0, k));
        if (c.overflow) break;
        if (c.survive > bc.survive || (c.survive == bc.survive && c.subnormal < bc.subnormal)) best = c.scale, bc = c;
    }
    if (best_counts) *best_counts = bc;
    return best;
}

enum { CHUNK = 1024 };

/* Calls fn(ctx, v, m) on x's elements widened to fp32, CHUNK at a time (fp32
 * ones in place, all at once). */
static void set_chunks(const value_set *s, void (*fn)(void *ctx, const float *v, size_t m), void *ctx) {
    if (s->xt == MP_F32) {
        fn(ctx, s->x, s->n);
        return;
    }
    float v[CHUNK];
    const size_t es = mp_format(s->xt)->size;
    for (size_t i = 0; i < s->n; i += CHUNK) {
        const size_t m = s->n - i < CHUNK ? s->n - i : CHUNK;
        mp_convert(v, MP_F32, (const uint8_t *)s->x + i * es, s->xt, m, NULL);
        fn(ctx, v, m);
    }
}

/* ---- order statistics of the magnitudes ----
 * The bits of a nonnegative float are ordered as its value, so the element of
 * rank r is found from a histogram of the top 16 bits of the finite
 * magnitudes, then one of the low 16 bits within the bin that holds it. */
#define HI_BINS 0x7f80u /* top 16 bits of a finite magnitude: below inf's 0x7f80 */
#define LO_BINS 0x10000u

typedef struct {
    uint64_t *h;
    int low; /* 0: top bits of all; 1: low bits of those in bin hi */
    uint32_t hi;
} key_hist;

static void key_hist_chunk(void *ctx, const float *v, size_t m) {
    key_hist *k = ctx;
    for (size_t i = 0; i < m; i++) {
        const uint32_t a = mp_f32_bits(v[i]) & 0x7fffffffu;
        if (a >= 0x7f800000u) continue;
        if (!k->low) k->h[a >> 16]++;
        else if (a >> 16 == k->hi) k->h[a & 0xffffu]++;
    }
}

/* The finite magnitude of rank r (0: the smallest); hi: the top-bits histogram. */
static float select_rank(const value_set *s, const uint64_t *hi, uint64_t *lo, uint64_t r) {
    uint32_t b = 0;
    while (r >= hi[b]) r -= hi[b++];
    memset(lo, 0, LO_BINS * sizeof *lo);
    key_hist k = {lo, 1, b};
    set_chunks(s, key_hist_chunk, &k);
    uint32_t l = 0;
    while (r >= lo[l]) r -= lo[l++];
    return mp_bits_f32(b << 16 | l);
}

/* Quantile q, linear interpolation between order statistics (numpy's default). */
static double quantile(const value_set *s, const uint64_t *hi, uint64_t *lo, double q) {
    const uint64_t nf = s->finite;
    const double pos = q * (double)(nf - 1);
    const uint64_t i = (uint64_t)pos;
    const float ci = select_rank(s, hi, lo, i);
    if (i + 1 >= nf) return ci;
    const float cj = select_rank(s, hi, lo, i + 1);
    return ci + (pos - (double)i) * (cj - ci);
}

/* ---- the public functions ---- */

mp_scale_counts mp_underflow_count(const float *g, size_t n, mp_dtype t, double scale) {
    value_set s;
    if (set_init(&s, g, MP_F32, n) != MP_OK) return (mp_scale_counts){scale, 0, 0, 0, 0};
    return set_count(&s, t, scale);
}

double mp_underflow_best_scale(const float *g, size_t n, mp_dtype t) {
    value_set s;
    if (set_init(&s, g, MP_F32, n) != MP_OK) return 1;
    return set_best_scale(&s, t, NULL);
}

static int is_value_type(mp_dtype t) { return t == MP_F32 || t == MP_F16 || t == MP_BF16; }
static const char *dtype_name(mp_dtype t) { return mp_format(t) ? mp_format(t)->name : "an unknown dtype"; }

mp_status mp_underflow_analyze(const void *x, mp_dtype xt, size_t n, mp_dtype t, const double *scales, int nscales,
                               mp_underflow *out) {
    static const char fn[] = "mp_underflow_analyze";
    if (!out) return mp_error(MP_EINVAL, "%s: NULL result", fn);
    memset(out, 0, sizeof *out);
    if (!x && n) return mp_error(MP_EINVAL, "%s: NULL buffer for %zu elements", fn, n);
    if (!is_value_type(xt)) return mp_error(MP_EINVAL, "%s: values of %s (fp32, fp16 or bf16)", fn, dtype_name(xt));
    if (t == MP_E8M0 || t == MP_E2M1)
        return mp_error(MP_EINVAL, "%s: format %s (fp16, bf16, e4m3 or e5m2; %s)", fn, dtype_name(t),
                        t == MP_E8M0 ? "e8m0 holds block scales, not values"
                                     : "fp4 values are scaled per block of 16 or 32, not by one loss scale");
    if (!is_store_format(t)) return mp_error(MP_EINVAL, "%s: format %s (fp16, bf16, e4m3 or e5m2)", fn, dtype_name(t));
    if (nscales < 0 || nscales > MP_UNDERFLOW_MAX_SCALES)
        return mp_error(MP_EINVAL, "%s: %d scales (0 .. %d)", fn, nscales, MP_UNDERFLOW_MAX_SCALES);
    if (nscales && !scales) return mp_error(MP_EINVAL, "%s: NULL scales", fn);
    for (int k = 0; k < nscales; k++) {
        const float f = (float)scales[k];
        if (!(scales[k] > 0) || !isfinite(scales[k]) || !(f > 0) || !(f <= FLT_MAX))
            return mp_error(MP_EINVAL, "%s: scale %d is %g (finite and > 0 in fp32)", fn, k, scales[k]);
    }
    value_set s;
    mp_status st = set_init(&s, x, xt, n);
    if (st != MP_OK) return st;
    if (s.finite == 0) return mp_error(MP_EINVAL, "%s: no finite value among %zu", fn, n);
    uint64_t *h = malloc((HI_BINS + LO_BINS) * sizeof *h);
    if (!h) return mp_error(MP_ENOMEM, "%s: out of memory", fn);
    memset(h, 0, HI_BINS * sizeof *h);
    key_hist k = {h, 0, 0};
    set_chunks(&s, key_hist_chunk, &k);
    out->median = quantile(&s, h, h + HI_BINS, 0.5);
    out->p5 = quantile(&s, h, h + HI_BINS, 0.05);
    free(h);
    out->format = t, out->n = (size_t)s.finite;
    out->zero_count = set_count(&s, t, 1).zero;
    out->best_scale = set_best_scale(&s, t, &out->best);
    out->nscales = nscales;
    for (int i = 0; i < nscales; i++) out->scales[i] = set_count(&s, t, scales[i]);
    return MP_OK;
}

/* ---- block formats against one scale per tensor ----
 * The values go through mx.h in chunks of whole blocks (BLK_CHUNK, a multiple
 * of 32 and of 16): MX blocks are independent, NVFP4 and the per-tensor
 * scales take the tensor's amax, found first. Only the last chunk is padded. */
enum { BLK_CHUNK = 1 << 14 };

static const struct {
    const char *name;
    mp_dtype elem;
    size_t block;
} block_formats[3] = {
    [MP_BLOCK_MXFP8_E4M3] = {"mxfp8-e4m3", MP_E4M3, MP_MX_BLOCK},
    [MP_BLOCK_MXFP8_E5M2] = {"mxfp8-e5m2", MP_E5M2, MP_MX_BLOCK},
    [MP_BLOCK_NVFP4] = {"nvfp4", MP_E2M1, 16},
};

mp_status mp_block_format_parse(const char *name, mp_block_format *out) {
    for (int f = 0; name && out && f < 3; f++)
        if (strcmp(name, block_formats[f].name) == 0) {
            *out = (mp_block_format)f;
            return MP_OK;
        }
    return mp_error(MP_EINVAL, "unknown block format '%s' (expected mxfp8-e4m3, mxfp8-e5m2 or nvfp4)",
                    name ? name : "(null)");
}

const char *mp_block_format_name(mp_block_format f) { return (unsigned)f < 3 ? block_formats[f].name : NULL; }

/* Adds |q - x| / |x| over the nonzero inputs x of a chunk, q their
 * dequantized values (the counts come from the quantizers' statistics). */
static void add_error(double *sum, const float *x, const float *q, size_t m) {
    for (size_t i = 0; i < m; i++)
        if (x[i] != 0) *sum += fabs(((double)q[i] - (double)x[i]) / (double)x[i]);
}

/* One comparison under way: the format, the per-tensor scale, the buffers of
 * a chunk, and the counts and summed errors of both scalings. */
typedef struct {
    int mx; /* an MX format (else NVFP4) */
    mp_dtype elem;
    size_t bs; /* the block */
    mp_mx_rule rule;
    float amax, t;  /* the tensor's amax; the per-tensor scale */
    float *pad, *q; /* (BLK_CHUNK) a chunk padded to whole blocks; its dequantized values */
    uint8_t *codes, *scales;
    mp_quant_stats bst, tst;
    mp_convert_stats e2; /* NVFP4 per tensor: the E2M1 stores' counts */
    double berr, terr;
} block_cmp;

/* The chunk xs (m values) both ways: block scaling, then one scale per tensor. */
static mp_status compare_chunk(block_cmp *c, const float *xs, size_t m) {
    const size_t mp = (m + c->bs - 1) / c->bs * c->bs;
    memcpy(c->pad, xs, m * sizeof *c->pad);
    memset(c->pad + m, 0, (mp - m) * sizeof *c->pad);
    mp_status st;
    if (c->mx) {
        st = mp_mx_quantize(c->codes, c->scales, c->pad, mp, c->elem, c->rule, &c->bst);
        if (st == MP_OK) st = mp_mx_dequantize(c->q, c->codes, c->scales, mp, c->elem);
    } else {
        st = mp_nvfp4_quantize(c->codes, c->scales, c->pad, 1, mp, MP_NVFP4_1X16, c->amax, NULL, &c->bst);
        if (st == MP_OK) st = mp_nvfp4_dequantize(c->q, c->codes, c->scales, 1, mp, MP_NVFP4_1X16, c->amax);
    }
    if (st != MP_OK) return st;
    add_error(&c->berr, xs, c->q, m);
    if (c->mx) {
        st = mp_fp8_quantize(c->codes, xs, m, c->elem, c->t, &c->tst);
        if (st == MP_OK) st = mp_fp8_dequantize(c->q, c->codes, m, c->elem, c->t);
    } else {
        const float tinv = 1.0f / c->t;
        st = mp_convert_count(MP_E2M1, xs, MP_F32, m, c->t, &c->e2);
        for (size_t i = 0; i < m; i++) c->q[i] = mp_e2m1_to_f32(mp_f32_to_e2m1(xs[i] * c->t)) * tinv;
    }
    if (st == MP_OK) add_error(&c->terr, xs, c->q, m);
    return st;
}

/* The arguments checked, the values' amax and nonzero count. */
static mp_status compare_args(const float *x, size_t n, mp_block_format f, mp_mx_rule rule, float *amax,
                              uint64_t *nonzero) {
    static const char fn[] = "mp_block_compare_values";
    if ((unsigned)f >= 3)
        return mp_error(MP_EINVAL, "%s: block format %d (mxfp8-e4m3, mxfp8-e5m2 or nvfp4)", fn, (int)f);
    if (f != MP_BLOCK_NVFP4 && rule != MP_MX_FLOOR && rule != MP_MX_RCEIL)
        return mp_error(MP_EINVAL, "%s: MX rule %d (floor or rceil)", fn, (int)rule);
    if (!x || n == 0) return mp_error(MP_EINVAL, "%s: no values (x %s, n = %zu)", fn, x ? "given" : "NULL", n);
    *amax = 0, *nonzero = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i]))
            return mp_error(MP_EINVAL, "%s: value %zu is %g (finite values only)", fn, i, (double)x[i]);
        *nonzero += x[i] != 0;
        *amax = fmaxf(*amax, fabsf(x[i]));
    }
    return MP_OK;
}

mp_status mp_block_compare_values(const float *x, size_t n, mp_block_format f, mp_mx_rule rule, mp_block_compare *out) {
    if (!out) return mp_error(MP_EINVAL, "mp_block_compare_values: NULL result");
    memset(out, 0, sizeof *out);
    block_cmp c = {.mx = f != MP_BLOCK_NVFP4, .rule = rule};
    uint64_t nonzero = 0;
    mp_status st = compare_args(x, n, f, rule, &c.amax, &nonzero);
    if (st != MP_OK) return st;
    c.elem = block_formats[f].elem, c.bs = block_formats[f].block;
    if (c.mx) {
        c.t = mp_fp8_scale(c.amax, c.elem, 0, NULL);
    } else {
        c.t = c.amax > 0 ? 6.0f / c.amax : 1.0f; /* as mp_fp8_scale with 6 for the max */
        if (isinf(c.t)) c.t = FLT_MAX;
    }
    float *buf = malloc(2 * BLK_CHUNK * sizeof *buf);
    c.codes = malloc(BLK_CHUNK + BLK_CHUNK / 16);
    if (!buf || !c.codes) {
        free(buf), free(c.codes);
        return mp_error(MP_ENOMEM, "mp_block_compare_values: out of memory");
    }
    c.pad = buf, c.q = buf + BLK_CHUNK, c.scales = c.codes + BLK_CHUNK;
    for (size_t i0 = 0; i0 < n && st == MP_OK; i0 += BLK_CHUNK)
        st = compare_chunk(&c, x + i0, n - i0 < BLK_CHUNK ? n - i0 : BLK_CHUNK);
    free(buf), free(c.codes);
    if (st != MP_OK) return st;
    if (!c.mx) c.tst.flushed = c.e2.underflow, c.tst.saturated = c.e2.overflow;
    out->format = f, out->rule = c.mx ? rule : MP_MX_FLOOR, out->elem = c.elem, out->block = c.bs;
    out->n = n, out->nonzero_inputs = nonzero, out->amax = c.amax, out->tensor_scale = c.t;
    const mp_quant_stats *s[2] = {&c.bst, &c.tst};
    const double err[2] = {c.berr, c.terr};
    mp_block_counts *cnt[2] = {&out->block_scaling, &out->per_tensor};
    for (int k = 0; k < 2; k++) {
        cnt[k]->flushed = s[k]->flushed, cnt[k]->saturated = s[k]->saturated;
        cnt[k]->nonzero = nonzero - s[k]->flushed;
        cnt[k]->mean_rel_error = nonzero ? err[k] / (double)nonzero : 0;
    }
    return MP_OK;
}

/* ---- the log2 histogram ---- */

typedef struct {
    int lo, nbins;
    uint64_t *bins, *zeros;
} log2_hist;

static void log2_hist_chunk(void *ctx, const float *v, size_t m) {
    const log2_hist *h = ctx;
    for (size_t i = 0; i < m; i++) {
        const uint32_t a = mp_f32_bits(v[i]) & 0x7fffffffu;
        if (a == 0) {
            (*h->zeros)++;
            continue;
        }
        if (a >= 0x7f800000u) continue;
        const int e = (a >> 23) ? (int)(a >> 23) - 127 : -127 - (__builtin_clz(a) - 9); /* subnormal: its top bit */
        const int b = e - h->lo;
        h->bins[b < 0 ? 0 : b >= h->nbins ? h->nbins - 1 : b]++;
    }
}

mp_status mp_log2_histogram(const void *x, mp_dtype xt, size_t n, int lo, int nbins, uint64_t *bins, uint64_t *zeros) {
    static const char fn[] = "mp_log2_histogram";
    if (!x && n) return mp_error(MP_EINVAL, "%s: NULL buffer for %zu elements", fn, n);
    if (!is_value_type(xt)) return mp_error(MP_EINVAL, "%s: values of %s (fp32, fp16 or bf16)", fn, dtype_name(xt));
    if (nbins < 1 || !bins || !zeros) return mp_error(MP_EINVAL, "%s: no bins", fn);
    const value_set s = {x, xt, n, 0, 0, 0};
    log2_hist h = {lo, nbins, bins, zeros};
    set_chunks(&s, log2_hist_chunk, &h);
    return MP_OK;
}

/* ---- the explorer page (explore_page.c writes it) ---- */

mp_status mp_explore_write(const char *path, const void *x, mp_dtype xt, size_t n, const char *description) {
    static const char fn[] = "mp_explore_write";
    if (!path || !*path) return mp_error(MP_EINVAL, "%s: no path", fn);
    if (!x && n) return mp_error(MP_EINVAL, "%s: NULL buffer for %zu elements", fn, n);
    if (!is_value_type(xt)) return mp_error(MP_EINVAL, "%s: values of %s (fp32, fp16 or bf16)", fn, dtype_name(xt));
    value_set s;
    const mp_status st = set_init(&s, x, xt, n);
    if (st != MP_OK) return st;
    if (s.finite == 0) return mp_error(MP_EINVAL, "%s: no finite value among %zu", fn, n);
    uint64_t bins[MP_EXPLORE_HN] = {0}, zeros = 0;
    log2_hist h = {MP_EXPLORE_HLO, MP_EXPLORE_HN, bins, &zeros};
    set_chunks(&s, log2_hist_chunk, &h);
    mp_scale_counts counts[4][MP_EXPLORE_K];
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < MP_EXPLORE_K; i++) counts[k][i] = set_count(&s, mp_explore_formats[k], ldexp(1.0, i));
    const mp_explore_page p = {description, s.finite, bins, counts};
    return mp_print_file_atomic(path, mp_explore_print, &p);
}
