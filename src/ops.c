/* ops.c - activations, softmax, cross-entropy, layer norm, column sums: fp32
 * arithmetic on rows loaded from any format, stores through mp_convert. */
#include <math.h>
#include <stdlib.h>

#include "internal.h"

static int is_compute_type(mp_dtype t) { return t == MP_F32 || t == MP_F16 || t == MP_BF16; }

static mp_status check_types(const char *fn, mp_dtype a, mp_dtype b, mp_dtype c) {
    if (!is_compute_type(a) || !is_compute_type(b) || !is_compute_type(c))
        return mp_error(MP_EINVAL, "%s: buffers must be fp32, fp16 or bf16", fn);
    return MP_OK;
}

static const uint8_t *at(const void *p, mp_dtype t, size_t i) { return (const uint8_t *)p + i * mp_format(t)->size; }

/* Loads n values from element i of p into out (fp32, exact). Rows and chunks
 * are converted by the call's kernels (k, read once at the op's entry)
 * directly: the bits and counts of mp_convert, without its per-call setup
 * (the ops are already split over threads). */
static void load(const mp_kernels *k, float *out, const void *p, mp_dtype t, size_t i, size_t n) {
    mp_to_f32(k, out, at(p, t, i), t, n);
}

/* Stores n fp32 values into element i of p, counting into st (may be NULL). */
static void store(const mp_kernels *k, void *p, mp_dtype t, size_t i, const float *v, size_t n, mp_convert_stats *st) {
    mp_from_f32(k, (uint8_t *)p + i * mp_format(t)->size, t, v, n, st);
}

/* Scratch rows: `count` rows of n floats. */
static float *scratch(size_t count, size_t n) { return malloc((count * n + 16) * sizeof(float)); }

/* st (may be NULL) += the per-share statistics part[0 .. shares) */
static void add_parts(mp_convert_stats *st, const mp_convert_stats *part, int shares) {
    for (int t = 0; st && t < shares; t++) mp_convert_stats_add(st, &part[t]);
}

#define CHUNK 4096 /* element-wise ops work through fp32 chunks of this size */

typedef float (*unary_fn)(float x);
typedef float (*binary_fn)(float dy, float x);
typedef void (*unary_chunk)(float *y, size_t n);                  /* y in place */
typedef void (*binary_chunk)(float *g, const float *x, size_t n); /* g = f(g, x) in place */

/* Element-wise work in parallel: shares of whole chunks, per-share statistics
 * summed afterwards (counts are exact whatever the split). A chunk is computed
 * by k1/k2 (whole-chunk kernels: GELU) when set, else by f1/f2 per element. */
typedef struct {
    void *out;
    mp_dtype ot, at, bt;
    const void *a, *b; /* b NULL for unary */
    unary_fn f1;
    binary_fn f2;
    unary_chunk k1;
    binary_chunk k2;
    mp_convert_stats part[MP_MAX_THREADS];
    const mp_kernels *k; /* the op's kernels, read once at its entry */
} elem_job;

static float relu(float x);
static float relu_grad(float dy, float x);
static float add2(float a, float b);

static void elem_share(void *ctx, size_t i0, size_t i1, int t) {
    elem_job *j = ctx;
    float g[CHUNK], v[CHUNK];
    for (size_t i = i0; i < i1; i += CHUNK) {
        const size_t m = i1 - i < CHUNK ? i1 - i : CHUNK;
        load(j->k, g, j->a, j->at, i, m);
        if (j->b) {
            load(j->k, v, j->b, j->bt, i, m);
            if (j->k2) j->k2(g, v, m);
            else if (j->f2 == relu_grad) /* the common case, inlined so that it vectorizes */
                for (size_t k = 0; k < m; k++) g[k] = v[k] > 0.0f ? g[k] : 0.0f;
            else if (j->f2 == add2)
                for (size_t k = 0; k < m; k++) g[k] += v[k];
            else
                for (size_t k = 0; k < m; k++) g[k] = j->f2(g[k], v[k]);
        } else if (j->k1) {
            j->k1(g, m);
        } else if (j->f1 == relu) {
            for (size_t k = 0; k < m; k++) g[k] = g[k] > 0.0f ? g[k] : 0.0f;
        } else {
            for (size_t k = 0; k < m; k++) g[k] = j->f1(g[k]);
        }
        store(j->k, j->out, j->ot, i, g, m, &j->part[t]);
    }
}

#define ELEM_PARALLEL_MIN ((size_t)1 << 16)

static mp_status run_elem(elem_job *j, size_t n, mp_convert_stats *st) {
    memset(j->part, 0, sizeof j->part);
    const int shares = mp_parallel_for(n, ELEM_PARALLEL_MIN, CHUNK, elem_share, j);
    add_parts(st, j->part, shares);
    return MP_OK;
}

/* ReLU on fp16/bf16 buffers of one format, on the bits: a value passes when it
 * is positive, nonzero and not NaN (the float path's x > 0), NaN dy comes out
 * quiet (as the float path's round trip makes it); the same bits and counts
 * as converting to fp32 and back, without the conversions. */
typedef struct {
    uint16_t *out;
    const uint16_t *a, *b; /* forward: a = x; backward: a = dy, b = x */
    mp_relu16_codes codes;
    mp_convert_stats part[MP_MAX_THREADS];
    const mp_kernels *k; /* the op's kernels, read once at its entry */
} relu16_job;

/* The portable kernel, without branches on the data (signs are random). */
void mp_relu16_scalar(uint16_t *out, const uint16_t *a, const uint16_t *x, size_t n, const mp_relu16_codes *k,
                      uint64_t *sub, uint64_t *nan) {
    uint64_t ns = 0, nn = 0;
    for (size_t i = 0; i < n; i++) {
        const uint16_t xi = x ? x[i] : a[i];
        const uint16_t pass = (uint16_t)(xi - 1u) <= (uint16_t)(k->inf - 1u); /* 0 < x <= +inf */
        uint16_t v = (uint16_t)(a[i] & (uint16_t)-pass);
        const uint16_t av = v & 0x7fffu, is_nan = av > k->inf;
        v |= (uint16_t)(k->quiet & (uint16_t)-is_nan);
        nn += is_nan;
        ns += (uint16_t)(av - 1u) <= (uint16_t)(k->mant - 1u);
        out[i] = v;
    }
    *sub += ns, *nan += nn;
}

/* In chunks that stay in L1, each one's amax taken while it is there. */
static void relu16_share(void *ctx, size_t i0, size_t i1, int t) {
    relu16_job *j = ctx;
    const mp_kernels *k = j->k;
    uint16_t am = 0;
    for (size_t i = i0; i < i1; i += CHUNK) {
        const size_t m = i1 - i < CHUNK ? i1 - i : CHUNK;
        k->relu16(j->out + i, j->a + i, j->b ? j->b + i : NULL, m, &j->codes, &j->part[t].subnormal, &j->part[t].nan);
        const uint16_t c = k->amax->amax16(j->out + i, m, j->codes.inf);
        am = c > am ? c : am;
    }
    mp_stats_amax(&j->part[t], mp_f32_bits(j->codes.inf == 0x7c00 ? mp_f16_to_f32(am) : mp_bf16_to_f32(am)));
}

static int relu16(const mp_kernels *k, void *out, mp_dtype ot, const void *a, mp_dtype at, const void *b, mp_dtype bt,
                  size_t n, mp_convert_stats *st) {
    if (ot != at || (b && bt != at) || (ot != MP_F16 && ot != MP_BF16)) return 0;
    relu16_job j = {
        out,   a, b, {ot == MP_F16 ? 0x7c00 : 0x7f80, ot == MP_F16 ? 0x0200 : 0x0040, ot == MP_F16 ? 0x03ff : 0x007f},
        {{0}}, k};
    const int shares = mp_parallel_for(n, ELEM_PARALLEL_MIN, 64, relu16_share, &j);
    add_parts(st, j.part, shares);
    return 1;
}

/* f per element, or c per chunk when f is NULL, with the kernels k */
static mp_status unary(const mp_kernels *k, const char *fn, void *y, mp_dtype yt, const void *x, mp_dtype xt, size_t n,
                       unary_fn f, unary_chunk c, mp_convert_stats *st) {
    mp_status s = check_types(fn, yt, xt, MP_F32);
    if (s != MP_OK) return s;
    if (n && (!y || !x)) return mp_error(MP_EINVAL, "%s: NULL buffer", fn);
    if (f == relu && relu16(k, y, yt, x, xt, NULL, xt, n, st)) return MP_OK;
    elem_job j = {y, yt, xt, MP_F32, x, NULL, f, NULL, c, NULL, {{0}}, k};
    return run_elem(&j, n, st);
}

static mp_status binary(const mp_kernels *k, const char *fn, void *dx, mp_dtype dxt, const void *dy, mp_dtype dyt,
                        const void *x, mp_dtype xt, size_t n, binary_fn f, binary_chunk c, mp_convert_stats *st) {
    mp_status s = check_types(fn, dxt, dyt, xt);
    if (s != MP_OK) return s;
    if (n && (!dx || !dy || !x)) return mp_error(MP_EINVAL, "%s: NULL buffer", fn);
    if (f == relu_grad && relu16(k, dx, dxt, dy, dyt, x, xt, n, st)) return MP_OK;
    elem_job j = {dx, dxt, dyt, xt, dy, x, NULL, f, NULL, c, {{0}}, k};
    return run_elem(&j, n, st);
}

static float relu(float x) { return x > 0.0f ? x : 0.0f; }
static float relu_grad(float dy, float x) { return x > 0.0f ? dy : 0.0f; }

/* GELU, both forms: src/cpu/gelu_kernels.h (fp64 inside, vectorized), one
 * build per CPU path, all giving the same bits. Each op reads the kernel
 * context once, here at its entry. */

static float add2(float a, float b) { return a + b; }

mp_status mp_relu_forward(void *y, mp_dtype yt, const void *x, mp_dtype xt, size_t n, mp_convert_stats *st) {
    return unary(mp_kernels_current(), "mp_relu_forward", y, yt, x, xt, n, relu, NULL, st);
}
mp_status mp_relu_backward(void *dx, mp_dtype dxt, const void *dy, mp_dtype dyt, const void *x, mp_dtype xt, size_t n,
                           mp_convert_stats *st) {
    return binary(mp_kernels_current(), "mp_relu_backward", dx, dxt, dy, dyt, x, xt, n, relu_grad, NULL, st);
}
mp_status mp_gelu_forward(void *y, mp_dtype yt, const void *x, mp_dtype xt, size_t n, mp_convert_stats *st) {
    const mp_kernels *k = mp_kernels_current();
    return unary(k, "mp_gelu_forward", y, yt, x, xt, n, NULL, k->gelu->tanh_fwd, st);
}
mp_status mp_gelu_backward(void *dx, mp_dtype dxt, const void *dy, mp_dtype dyt, const void *x, mp_dtype xt, size_t n,
                           mp_convert_stats *st) {
    const mp_kernels *k = mp_kernels_current();
    return binary(k, "mp_gelu_backward", dx, dxt, dy, dyt, x, xt, n, NULL, k->gelu->tanh_bwd, st);
}

mp_status mp_gelu_erf_forward(void *y, mp_dtype yt, const void *x, mp_dtype xt, size_t n, mp_convert_stats *st) {
    const mp_kernels *k = mp_kernels_current();
    return unary(k, "mp_gelu_erf_forward", y, yt, x, xt, n, NULL, k->gelu->erf_fwd, st);
}
mp_status mp_gelu_erf_backward(void *dx, mp_dtype dxt, const void *dy, mp_dtype dyt, const void *x, mp_dtype xt,
                               size_t n, mp_convert_stats *st) {
    const mp_kernels *k = mp_kernels_current();
    return binary(k, "mp_gelu_erf_backward", dx, dxt, dy, dyt, x, xt, n, NULL, k->gelu->erf_bwd, st);
}
mp_status mp_add(void *y, mp_dtype yt, const void *a, mp_dtype at, const void *b, mp_dtype bt, size_t n,
                 mp_convert_stats *st) {
    return binary(mp_kernels_current(), "mp_add", y, yt, a, at, b, bt, n, add2, NULL, st);
}

/* ---- row-wise operations ---- */

/* fp32 sums of a row in 16 lanes, element j in lane j % 16, the lanes added
 * by halves at the end (as the softmax's rows, ops.h): 16 independent
 * chains, not one that waits for every addition. Of x, of (x - m)^2, of a b. */
/* The 16 lanes added by halves: lane k += lane k + h for h = 8, 4, 2, 1. */
static float fold16(float l[16]) {
    for (int h = 8; h; h >>= 1)
        for (int k = 0; k < h; k++) l[k] += l[k + h];
    return l[0];
}

static float lanes_sum(const float *x, size_t n) {
    float l[16] = {0};
    size_t j = 0;
    for (; j + 16 <= n; j += 16)
        for (int k = 0; k < 16; k++) l[k] += x[j + k];
    for (int k = 0; j + (size_t)k < n; k++) l[k] += x[j + (size_t)k];
    return fold16(l);
}

static float lanes_dev2(const float *x, size_t n, float m) {
    float l[16] = {0};
    size_t j = 0;
    for (; j + 16 <= n; j += 16)
        for (int k = 0; k < 16; k++) l[k] += (x[j + k] - m) * (x[j + k] - m);
    for (int k = 0; j + (size_t)k < n; k++) l[k] += (x[j + (size_t)k] - m) * (x[j + (size_t)k] - m);
    return fold16(l);
}

static float lanes_dot(const float *a, const float *b, size_t n) {
    float l[16] = {0};
    size_t j = 0;
    for (; j + 16 <= n; j += 16)
        for (int k = 0; k < 16; k++) l[k] += a[j + k] * b[j + k];
    for (int k = 0; j + (size_t)k < n; k++) l[k] += a[j + (size_t)k] * b[j + (size_t)k];
    return fold16(l);
}

static mp_status rows_args(const char *fn, const void *p, const void *q, size_t B, size_t C) {
    if (B && C && (!p || !q)) return mp_error(MP_EINVAL, "%s: NULL buffer", fn);
    return MP_OK;
}

typedef struct {
    void *y;
    mp_dtype yt, xt;
    const void *x;
    const float *bias;
    size_t C;
    int oom;
    mp_convert_stats part[MP_MAX_THREADS];
    const mp_kernels *k; /* the op's kernels, read once at its entry */
} bias_job;

static void bias_share(void *ctx, size_t r0, size_t r1, int t) {
    bias_job *j = ctx;
    float *row = scratch(1, j->C);
    if (!row) {
        j->oom = 1;
        return;
    }
    for (size_t b = r0; b < r1; b++) {
        load(j->k, row, j->x, j->xt, b * j->C, j->C);
        for (size_t k = 0; k < j->C; k++) row[k] += j->bias[k];
        store(j->k, j->y, j->yt, b * j->C, row, j->C, &j->part[t]);
    }
    free(row);
}

mp_status mp_bias_add(void *y, mp_dtype yt, const void *x, mp_dtype xt, const float *bias, size_t B, size_t C,
                      mp_convert_stats *st) {
    mp_status s = check_types("mp_bias_add", yt, xt, MP_F32);
    if (s != MP_OK || (s = rows_args("mp_bias_add", y, x, B, C)) != MP_OK) return s;
    if (B && C && !bias) return mp_error(MP_EINVAL, "mp_bias_add: NULL bias");
    bias_job j = {y, yt, xt, x, bias, C, 0, {{0}}, mp_kernels_current()};
    const int shares = mp_parallel_for(B, C ? ELEM_PARALLEL_MIN / C + 1 : B + 1, 1, bias_share, &j);
    if (j.oom) return mp_error(MP_ENOMEM, "mp_bias_add: out of memory");
    add_parts(st, j.part, shares);
    return MP_OK;
}

/* Column sums: each share owns a range of columns and walks all rows, so the
 * order of additions (row by row) does not depend on the split. */
typedef struct {
    float *out;
    const void *x;
    mp_dtype xt, acc;
    size_t B, C;
    int oom;
    const mp_kernels *k; /* the op's kernels, read once at its entry */
} colsum_job;

static void colsum_share(void *ctx, size_t j0, size_t j1, int t) {
    (void)t;
    colsum_job *j = ctx;
    const size_t m = j1 - j0;
    float *row = scratch(2, m), *sum = row + m;
    if (!row) {
        j->oom = 1;
        return;
    }
    /* the column's sum (in acc), then added to out once: as PyTorch adds a
     * micro-batch's gradient to .grad, and so that accumulating micro-batches
     * gives the same bits as summing their gradients afterwards (the ranks'
     * all-reduce, train.h) */
    const mp_dtype acc = j->acc;
    memset(sum, 0, m * sizeof *sum);
    for (size_t b = 0; b < j->B; b++) {
        load(j->k, row, j->x, j->xt, b * j->C + j0, m);
        if (acc == MP_F32)
            for (size_t k = 0; k < m; k++) sum[k] += row[k];
        else /* naive */
            for (size_t k = 0; k < m; k++) sum[k] = mp_round_to(acc, sum[k] + mp_round_to(acc, row[k]));
    }
    for (size_t k = 0; k < m; k++) j->out[j0 + k] += sum[k];
    free(row);
}

mp_status mp_colsum(float *out, const void *x, mp_dtype xt, size_t B, size_t C, int accumulate, mp_dtype acc) {
    mp_status s = check_types("mp_colsum", xt, acc, MP_F32);
    if (s != MP_OK || (s = rows_args("mp_colsum", out, x, B ? B : 1, C)) != MP_OK) return s;
    if (!accumulate) memset(out, 0, C * sizeof *out);
    colsum_job j = {out, x, xt, acc, B, C, 0, mp_kernels_current()};
    mp_parallel_for(C, B * C >= ELEM_PARALLEL_MIN ? 64 : C + 1, 16, colsum_share, &j);
    return j.oom ? mp_error(MP_ENOMEM, "mp_colsum: out of memory") : MP_OK;
}

/* e^x and the rows' loops: src/cpu/softmax_kernels.h (<= 0.874 ulp, lanes
 * summed in a fixed order), the same bits on every CPU path */

/* In place over one fp32 row: softmax (or log_softmax), max-subtracted.
 * Returns log(sum(exp(x - max))) + max, the log-sum-exp; with log = 0, keep
 * (may be NULL) gets the max and 1 / sum, from which mp_softmax_row_again
 * redoes the row. */
static float softmax_row(const mp_softmax_kernels *k, float *r, size_t C, int log, float *keep) {
    float mx = k->max(r, C);
    if (mx == -INFINITY) mx = 0.0f; /* a row of -inf: all terms exp(-inf) = 0 */
    /* log keeps the inputs; softmax keeps the terms */
    const float sum = log ? k->exp_sum(r, C, mx) : k->exp_sum_store(r, C, mx);
    const float lse = logf(sum) + mx;
    if (log)
        for (size_t j = 0; j < C; j++) r[j] -= lse;
    else {
        const float inv = 1.0f / sum;
        for (size_t j = 0; j < C; j++) r[j] *= inv;
        if (keep) keep[0] = mx, keep[1] = inv;
    }
    return lse;
}

#define EXP_CHUNK 256 /* the naive loops take e^x from the kernel this many at a time */

/* softmax_row as a naive loop in acc does it (ops.h): every partial result
 * rounded; keep gets the max and the sum. */
static float softmax_row_naive(const mp_softmax_kernels *k, float *r, size_t C, int log, mp_dtype acc, float *keep) {
    float mx = k->max(r, C);
    if (mx == -INFINITY) mx = 0.0f;
    for (size_t j = 0; j < C; j++) r[j] = mp_round_to(acc, r[j] - mx);
    float sum = 0.0f, e[EXP_CHUNK];
    for (size_t j0 = 0; j0 < C; j0 += EXP_CHUNK) {
        const size_t m = C - j0 < EXP_CHUNK ? C - j0 : EXP_CHUNK;
        k->exp(e, r + j0, m);
        for (size_t j = 0; j < m; j++) {
            const float ej = mp_round_to(acc, e[j]);
            sum = mp_round_to(acc, sum + ej);
            if (!log) r[j0 + j] = ej;
        }
    }
    if (keep) keep[0] = mx, keep[1] = sum;
    const float ls = mp_round_to(acc, logf(sum));
    if (log)
        for (size_t j = 0; j < C; j++) r[j] = mp_round_to(acc, r[j] - ls);
    else
        for (size_t j = 0; j < C; j++) r[j] = mp_round_to(acc, r[j] / sum);
    return mp_round_to(acc, ls + mx);
}

float mp_softmax_row(const mp_kernels *kc, float *r, size_t C, int log, mp_dtype acc) {
    return acc == MP_F32 ? softmax_row(kc->softmax, r, C, log, NULL)
                         : softmax_row_naive(kc->softmax, r, C, log, acc, NULL);
}

void mp_softmax_row_keep(const mp_kernels *kc, float *r, size_t C, mp_dtype acc, float keep[2]) {
    if (acc == MP_F32) softmax_row(kc->softmax, r, C, 0, keep);
    else softmax_row_naive(kc->softmax, r, C, 0, acc, keep);
}

/* The operations of softmax_row and softmax_row_naive on each value, from
 * the kept max and 1 / sum (or sum): the same bits. */
void mp_softmax_row_again(const mp_kernels *kc, float *r, size_t C, mp_dtype acc, const float keep[2]) {
    const mp_softmax_kernels *sk = kc->softmax;
    const float mx = keep[0], k = keep[1];
    if (acc == MP_F32) {
        sk->exp_scale(r, C, mx, k);
        return;
    }
    for (size_t j = 0; j < C; j++) r[j] = mp_round_to(acc, r[j] - mx);
    sk->exp(r, r, C);
    for (size_t j = 0; j < C; j++) r[j] = mp_round_to(acc, mp_round_to(acc, r[j]) / k);
}

void mp_softmax_backward_row(const mp_kernels *kc, float *g, const float *y, size_t C, int log, mp_dtype acc) {
    const mp_softmax_kernels *sk = kc->softmax;
    float dot = 0.0f;
    if (acc != MP_F32 && log) {
        for (size_t k = 0; k < C; k++) dot = mp_round_to(acc, dot + mp_round_to(acc, g[k]));
        float e[EXP_CHUNK];
        for (size_t k0 = 0; k0 < C; k0 += EXP_CHUNK) {
            const size_t m = C - k0 < EXP_CHUNK ? C - k0 : EXP_CHUNK;
            sk->exp(e, y + k0, m);
            for (size_t k = 0; k < m; k++) g[k0 + k] -= mp_round_to(acc, mp_round_to(acc, e[k]) * dot);
        }
    } else if (acc != MP_F32) {
        for (size_t k = 0; k < C; k++) dot = mp_round_to(acc, dot + mp_round_to(acc, g[k] * y[k]));
        for (size_t k = 0; k < C; k++) g[k] = y[k] * mp_round_to(acc, g[k] - dot);
    } else if (log) { /* fp32 sums in 16 lanes, as the forward's */
        dot = lanes_sum(g, C);
        sk->exp_sub_mul(g, y, C, dot);
    } else {
        dot = lanes_dot(g, y, C);
        for (size_t k = 0; k < C; k++) g[k] = y[k] * (g[k] - dot);
    }
}

/* Row-wise operations in parallel: each share owns whole rows and computes
 * each row exactly as a sequential loop would, so results do not depend on
 * the split; per-share statistics are summed afterwards, and any cross-row sum
 * (the loss, layer-norm dw/db) keeps the sequential row order. Row scratch
 * lives on the share's stack when it fits. */
#define ROW_STACK 4096 /* floats */

static float *row_scratch(float *stack, size_t n) {
    return n + 16 <= ROW_STACK ? stack : malloc((n + 16) * sizeof(float));
}
static void row_scratch_free(float *p, const float *stack) {
    if (p != stack) free(p);
}
/* rows below which a row-wise op runs on one thread */
static size_t rows_min_parallel(size_t B, size_t C) { return C ? ELEM_PARALLEL_MIN / C + 1 : B + 1; }

typedef struct {
    void *out;
    mp_dtype ot, at, bt, acc;
    const void *a, *b;
    size_t C;
    int log, oom;
    mp_convert_stats part[MP_MAX_THREADS];
    const mp_kernels *k; /* the op's kernels, read once at its entry */
} softmax_job;

static void softmax_fwd_share(void *ctx, size_t r0, size_t r1, int t) {
    softmax_job *j = ctx;
    float stack[ROW_STACK], *row = row_scratch(stack, j->C);
    if (!row) {
        j->oom = 1;
        return;
    }
    for (size_t b = r0; b < r1; b++) {
        load(j->k, row, j->a, j->at, b * j->C, j->C);
        mp_softmax_row(j->k, row, j->C, j->log, j->acc);
        store(j->k, j->out, j->ot, b * j->C, row, j->C, &j->part[t]);
    }
    row_scratch_free(row, stack);
}

mp_status mp_softmax_forward(void *y, mp_dtype yt, const void *x, mp_dtype xt, size_t B, size_t C, int log,
                             mp_dtype acc, mp_convert_stats *st) {
    mp_status s = check_types("mp_softmax_forward", yt, xt, acc);
    if (s != MP_OK || (s = rows_args("mp_softmax_forward", y, x, B, C)) != MP_OK) return s;
    softmax_job j = {y, yt, xt, MP_F32, acc, x, NULL, C, log, 0, {{0}}, mp_kernels_current()};
    const int shares = mp_parallel_for(B, rows_min_parallel(B, C), 1, softmax_fwd_share, &j);
    if (j.oom) return mp_error(MP_ENOMEM, "mp_softmax_forward: out of memory");
    add_parts(st, j.part, shares);
    return MP_OK;
}

/* a = y, b = dy */
static void softmax_bwd_share(void *ctx, size_t r0, size_t r1, int t) {
    softmax_job *j = ctx;
    const size_t C = j->C;
    float stack[ROW_STACK], *r = row_scratch(stack, 2 * C);
    if (!r) {
        j->oom = 1;
        return;
    }
    float *yr = r, *g = r + C;
    for (size_t b = r0; b < r1; b++) {
        load(j->k, yr, j->a, j->at, b * C, C);
        load(j->k, g, j->b, j->bt, b * C, C);
        mp_softmax_backward_row(j->k, g, yr, C, j->log, j->acc);
        store(j->k, j->out, j->ot, b * C, g, C, &j->part[t]);
    }
    row_scratch_free(r, stack);
}

mp_status mp_softmax_backward(void *dx, mp_dtype dxt, const void *y, mp_dtype yt, const void *dy, mp_dtype dyt,
                              size_t B, size_t C, int log, mp_dtype acc, mp_convert_stats *st) {
    mp_status s = check_types("mp_softmax_backward", dxt, yt, dyt);
    if (s == MP_OK) s = check_types("mp_softmax_backward", acc, acc, acc);
    if (s != MP_OK || (s = rows_args("mp_softmax_backward", dx, y, B, C)) != MP_OK) return s;
    if (B && C && !dy) return mp_error(MP_EINVAL, "mp_softmax_backward: NULL dy");
    softmax_job j = {dx, dxt, yt, dyt, acc, y, dy, C, log, 0, {{0}}, mp_kernels_current()};
    const int shares = mp_parallel_for(B, rows_min_parallel(B, C), 1, softmax_bwd_share, &j);
    if (j.oom) return mp_error(MP_ENOMEM, "mp_softmax_backward: out of memory");
    add_parts(st, j.part, shares);
    return MP_OK;
}

typedef struct {
    float *terms; /* (B,) per-row loss terms, summed in row order afterwards */
    void *dlogits;
    mp_dtype dt, lt, acc;
    const void *logits;
    const int32_t *labels;
    size_t C;
    float g;
    int oom;
    mp_convert_stats part[MP_MAX_THREADS];
    const mp_kernels *k; /* the op's kernels, read once at its entry */
} ce_job;

static void ce_share(void *ctx, size_t r0, size_t r1, int t) {
    ce_job *j = ctx;
    const size_t C = j->C;
    float stack[ROW_STACK], *row = row_scratch(stack, C);
    if (!row) {
        j->oom = 1;
        return;
    }
    for (size_t b = r0; b < r1; b++) {
        load(j->k, row, j->logits, j->lt, b * C, C);
        const float target = row[j->labels[b]];
        const float lse = mp_softmax_row(j->k, row, C, 0, j->acc); /* row now holds the probabilities */
        j->terms[b] = mp_round_to(j->acc, lse - target);
        if (j->dlogits) {
            row[j->labels[b]] = mp_round_to(j->acc, row[j->labels[b]] - 1.0f);
            for (size_t k = 0; k < C; k++) row[k] *= j->g;
            store(j->k, j->dlogits, j->dt, b * C, row, C, &j->part[t]);
        }
    }
    row_scratch_free(row, stack);
}

mp_status mp_cross_entropy(float *loss, void *dlogits, mp_dtype dt, const void *logits, mp_dtype lt,
                           const int32_t *labels, size_t B, size_t C, float scale, mp_dtype acc, mp_convert_stats *st) {
    mp_status s = check_types("mp_cross_entropy", dlogits ? dt : MP_F32, lt, acc);
    if (s != MP_OK || (s = rows_args("mp_cross_entropy", logits, labels, B, C)) != MP_OK) return s;
    if (!loss) return mp_error(MP_EINVAL, "mp_cross_entropy: NULL loss");
    if (B == 0 || C == 0) return mp_error(MP_EINVAL, "mp_cross_entropy: empty batch (B %zu, C %zu)", B, C);
    for (size_t b = 0; b < B; b++)
        if (labels[b] < 0 || (size_t)labels[b] >= C)
            return mp_error(MP_EINVAL, "mp_cross_entropy: label %d of row %zu is outside [0, %zu)", (int)labels[b], b,
                            C);
    float stack[ROW_STACK], *terms = row_scratch(stack, B);
    if (!terms) return mp_error(MP_ENOMEM, "mp_cross_entropy: out of memory");
    ce_job j = {terms, dlogits, dt, lt, acc, logits, labels, C, scale / (float)B, 0, {{0}}, mp_kernels_current()};
    const int shares = mp_parallel_for(B, rows_min_parallel(B, C), 1, ce_share, &j);
    float total = 0.0f;
    for (size_t b = 0; b < B; b++) total += terms[b];
    row_scratch_free(terms, stack);
    if (j.oom) return mp_error(MP_ENOMEM, "mp_cross_entropy: out of memory");
    *loss = total / (float)B;
    add_parts(st, j.part, shares);
    return MP_OK;
}

typedef struct {
    void *y; /* forward: y; backward: dx */
    mp_dtype yt, xt, gt, acc;
    const void *x, *g;          /* g: backward dy */
    float *mean_out, *rstd_out; /* forward */
    const float *mean, *rstd;   /* backward */
    const float *w, *b;
    float *dw, *db;
    size_t B, C;
    float eps;
    int oom;
    mp_convert_stats part[MP_MAX_THREADS];
    const void *res;                        /* backward: the residual stream's gradient (yt), or NULL */
    mp_convert_stats part2[MP_MAX_THREADS]; /* backward with res: the sums' stores */
    const mp_kernels *k;                    /* the op's kernels, read once at its entry */
} ln_job;

/* A row's mean and rstd as a naive loop in acc computes them (ops.h). */
static void ln_stats_naive(const float *x, size_t C, float eps, mp_dtype acc, float *mean, float *rstd) {
    float m = 0.0f, v = 0.0f;
    for (size_t j = 0; j < C; j++) m = mp_round_to(acc, m + mp_round_to(acc, x[j]));
    m = mp_round_to(acc, m / (float)C);
    for (size_t j = 0; j < C; j++) {
        const float d = mp_round_to(acc, x[j] - m);
        v = mp_round_to(acc, v + mp_round_to(acc, d * d));
    }
    v = mp_round_to(acc, v / (float)C);
    const float sd = mp_round_to(acc, sqrtf(mp_round_to(acc, v + mp_round_to(acc, eps))));
    *mean = m, *rstd = mp_round_to(acc, 1.0f / sd);
}

/* The path's layer-norm kernels, where it has them and the rows are 16-bit values of t with fp32 sums (the
 * other format u the same), else NULL */
static const mp_layernorm_kernels *ln_rows16(const ln_job *J, mp_dtype t, mp_dtype u) {
    return (t == MP_F16 || t == MP_BF16) && u == t && J->acc == MP_F32 ? J->k->layernorm : NULL;
}

static void ln_fwd_share(void *ctx, size_t r0, size_t r1, int t) {
    ln_job *J = ctx;
    const size_t C = J->C;
    const float *w = J->w, *b = J->b;
    const mp_layernorm_kernels *lk = ln_rows16(J, J->yt, J->xt); /* the same bits */
    if (lk) {
        for (size_t r = r0; r < r1; r++)
            lk->fwd16((uint16_t *)J->y + r * C, (const uint16_t *)J->x + r * C, w, b, J->eps, C, J->yt == MP_F16,
                      &J->mean_out[r], &J->rstd_out[r], &J->part[t]);
        return;
    }
    float stack[ROW_STACK], *row = row_scratch(stack, C);
    if (!row) {
        J->oom = 1;
        return;
    }
    for (size_t r = r0; r < r1; r++) {
        load(J->k, row, J->x, J->xt, r * C, C);
        float m, rs;
        if (J->acc == MP_F32) { /* two passes: the variance of x - mean, never E[x^2] - E[x]^2 */
            m = lanes_sum(row, C) / (float)C;
            const float v = lanes_dev2(row, C, m) / (float)C;
            rs = 1.0f / sqrtf(v + J->eps);
        } else {
            ln_stats_naive(row, C, J->eps, J->acc, &m, &rs);
        }
        for (size_t j = 0; j < C; j++) {
            const float n = (row[j] - m) * rs;
            row[j] = n * (w ? w[j] : 1.0f) + (b ? b[j] : 0.0f);
        }
        J->mean_out[r] = m, J->rstd_out[r] = rs;
        store(J->k, J->y, J->yt, r * C, row, C, &J->part[t]);
    }
    row_scratch_free(row, stack);
}

mp_status mp_layernorm_forward(void *y, mp_dtype yt, float *mean, float *rstd, const void *x, mp_dtype xt,
                               const float *w, const float *b, size_t B, size_t C, float eps, mp_dtype acc,
                               mp_convert_stats *st) {
    mp_status s = check_types("mp_layernorm_forward", yt, xt, acc);
    if (s != MP_OK || (s = rows_args("mp_layernorm_forward", y, x, B, C)) != MP_OK) return s;
    if (B && (!mean || !rstd)) return mp_error(MP_EINVAL, "mp_layernorm_forward: NULL mean or rstd");
    if (C == 0 && B) return mp_error(MP_EINVAL, "mp_layernorm_forward: rows of 0 values");
    ln_job J = {y,
                yt,
                xt,
                MP_F32,
                acc,
                x,
                NULL,
                mean,
                rstd,
                NULL,
                NULL,
                w,
                b,
                NULL,
                NULL,
                B,
                C,
                eps,
                0,
                {{0}},
                NULL,
                {{0}},
                mp_kernels_current()};
    const int shares = mp_parallel_for(B, rows_min_parallel(B, C), 1, ln_fwd_share, &J);
    if (J.oom) return mp_error(MP_ENOMEM, "mp_layernorm_forward: out of memory");
    add_parts(st, J.part, shares);
    return MP_OK;
}

/* dw, db: each share owns columns [j0, j1) and sums row after row, the
 * sequential order, whatever the split; each column's sums (in acc) are
 * added to dw and db once, as mp_colsum does */
static void ln_dwdb_share(void *ctx, size_t j0, size_t j1, int t) {
    (void)t;
    ln_job *J = ctx;
    const size_t m = j1 - j0;
    const mp_dtype acc = J->acc;
    float stack[ROW_STACK], *r = row_scratch(stack, 4 * m);
    if (!r) {
        J->oom = 1;
        return;
    }
    float *g = r, *n = r + m;
    memset(r + 2 * m, 0, 2 * m * sizeof *r);
    float *dw = J->dw ? r + 2 * m : NULL, *db = J->db ? r + 3 * m : NULL;
    const mp_layernorm_kernels *lk = J->B ? ln_rows16(J, J->gt, J->xt) : NULL; /* the same bits */
    if (lk)
        lk->dwdb16(dw, db, (const uint16_t *)J->g + j0, (const uint16_t *)J->x + j0, J->mean, J->rstd, J->B, J->C, m,
                   J->gt == MP_F16);
    for (size_t i = 0; !lk && i < J->B; i++) {
        load(J->k, g, J->g, J->gt, i * J->C + j0, m);
        if (dw) {
            load(J->k, n, J->x, J->xt, i * J->C + j0, m);
            const float mi = J->mean[i], ri = J->rstd[i];
            if (acc == MP_F32)
                for (size_t k = 0; k < m; k++) dw[k] += g[k] * ((n[k] - mi) * ri);
            else
                for (size_t k = 0; k < m; k++)
                    dw[k] = mp_round_to(acc, dw[k] + mp_round_to(acc, g[k] * ((n[k] - mi) * ri)));
        }
        if (db && acc == MP_F32)
            for (size_t k = 0; k < m; k++) db[k] += g[k];
        else if (db)
            for (size_t k = 0; k < m; k++) db[k] = mp_round_to(acc, db[k] + mp_round_to(acc, g[k]));
    }
    for (size_t k = 0; k < m; k++) {
        if (dw) J->dw[j0 + k] += dw[k];
        if (db) J->db[j0 + k] += db[k];
    }
    row_scratch_free(r, stack);
}

static void ln_dx_share(void *ctx, size_t r0, size_t r1, int t) {
    ln_job *J = ctx;
    const size_t C = J->C;
    const float *w = J->w, *mean = J->mean, *rstd = J->rstd;
    const mp_layernorm_kernels *lk = J->gt == J->yt ? ln_rows16(J, J->yt, J->xt) : NULL; /* the same bits */
    if (lk) {
        for (size_t i = r0; i < r1; i++)
            lk->dx16((uint16_t *)J->y + i * C, (const uint16_t *)J->g + i * C, (const uint16_t *)J->x + i * C,
                     J->res ? (const uint16_t *)J->res + i * C : NULL, w, mean[i], rstd[i], C, J->yt == MP_F16,
                     &J->part[t], &J->part2[t]);
        return;
    }
    float stack[ROW_STACK], *r = row_scratch(stack, 2 * C);
    uint16_t hstack[ROW_STACK]; /* dx's codes */
    uint16_t *h = J->res && J->yt != MP_F32 && C > ROW_STACK ? malloc(C * sizeof *h) : hstack;
    if (!r || !h) {
        J->oom = 1;
        row_scratch_free(r, stack);
        if (h != hstack) free(h);
        return;
    }
    float *g = r, *n = r + C;
    for (size_t i = r0; i < r1; i++) {
        load(J->k, g, J->g, J->gt, i * C, C);
        load(J->k, n, J->x, J->xt, i * C, C);
        const float mi = mean[i], ri = rstd[i];
        const mp_dtype acc = J->acc;
        float sum_dn = 0.0f, sum_dn_n = 0.0f;
        for (size_t j = 0; j < C; j++) /* g becomes dn = dy w */
            n[j] = (n[j] - mi) * ri, g[j] *= w ? w[j] : 1.0f;
        if (acc == MP_F32) {
            sum_dn = lanes_sum(g, C), sum_dn_n = lanes_dot(g, n, C);
        } else {
            for (size_t j = 0; j < C; j++) {
                sum_dn = mp_round_to(acc, sum_dn + mp_round_to(acc, g[j]));
                sum_dn_n = mp_round_to(acc, sum_dn_n + mp_round_to(acc, g[j] * n[j]));
            }
        }
        const float a = mp_round_to(acc, sum_dn / (float)C), c = mp_round_to(acc, sum_dn_n / (float)C);
        for (size_t j = 0; j < C; j++) g[j] = ri * (g[j] - a - n[j] * c);
        if (!J->res) {
            store(J->k, J->y, J->yt, i * C, g, C, &J->part[t]);
            continue;
        }
        /* dx as it would be stored (counted, as 16-bit codes in h), then res + dx (mp_add) stored */
        if (J->yt != MP_F32) {
            store(J->k, h, J->yt, 0, g, C, &J->part[t]);
            load(J->k, g, h, J->yt, 0, C);
        } else {
            mp_stats_f32(J->k, &J->part[t], g, C);
        }
        load(J->k, n, J->res, J->yt, i * C, C);
        for (size_t j = 0; j < C; j++) n[j] += g[j];
        store(J->k, J->y, J->yt, i * C, n, C, &J->part2[t]);
    }
    row_scratch_free(r, stack);
    if (h != hstack) free(h);
}

static mp_status ln_backward(void *dx, mp_dtype dxt, float *dw, float *db, const void *dy, mp_dtype dyt, const void *x,
                             mp_dtype xt, const float *mean, const float *rstd, const float *w, size_t B, size_t C,
                             int accumulate, mp_dtype acc, mp_convert_stats *st, const void *res,
                             mp_convert_stats *st_sum) {
    mp_status s = check_types("mp_layernorm_backward", dxt, dyt, xt);
    if (s == MP_OK) s = check_types("mp_layernorm_backward", acc, acc, acc);
    if (s != MP_OK || (s = rows_args("mp_layernorm_backward", dx, dy, B, C)) != MP_OK) return s;
    if (B && (!x || !mean || !rstd)) return mp_error(MP_EINVAL, "mp_layernorm_backward: NULL x, mean or rstd");
    if (!accumulate && dw) memset(dw, 0, C * sizeof *dw);
    if (!accumulate && db) memset(db, 0, C * sizeof *db);
    ln_job J = {dx,
                dxt,
                xt,
                dyt,
                acc,
                x,
                dy,
                NULL,
                NULL,
                mean,
                rstd,
                w,
                NULL,
                dw,
                db,
                B,
                C,
                0.0f,
                0,
                {{0}},
                res,
                {{0}},
                mp_kernels_current()};
    /* dw and db first: dx may alias dy or x */
    if (dw || db) mp_parallel_for(C, B * C >= ELEM_PARALLEL_MIN ? 64 : C + 1, 16, ln_dwdb_share, &J);
    const int shares = J.oom ? 0 : mp_parallel_for(B, rows_min_parallel(B, C), 1, ln_dx_share, &J);
    if (J.oom) return mp_error(MP_ENOMEM, "mp_layernorm_backward: out of memory");
    add_parts(st, J.part, shares);
    add_parts(st_sum, J.part2, shares);
    return MP_OK;
}

mp_status mp_layernorm_backward(void *dx, mp_dtype dxt, float *dw, float *db, const void *dy, mp_dtype dyt,
                                const void *x, mp_dtype xt, const float *mean, const float *rstd, const float *w,
                                size_t B, size_t C, int accumulate, mp_dtype acc, mp_convert_stats *st) {
    return ln_backward(dx, dxt, dw, db, dy, dyt, x, xt, mean, rstd, w, B, C, accumulate, acc, st, NULL, NULL);
}

mp_status mp_layernorm_backward_add(void *out, mp_dtype t, float *dw, float *db, const void *dy, const void *x,
                                    const float *mean, const float *rstd, const float *w, size_t B, size_t C,
                                    int accumulate, mp_dtype acc, const void *res, mp_convert_stats *st_dx,
                                    mp_convert_stats *st_sum) {
    if (B && C && !res) return mp_error(MP_EINVAL, "mp_layernorm_backward_add: NULL residual");
    return ln_backward(out, t, dw, db, dy, t, x, t, mean, rstd, w, B, C, accumulate, acc, st_dx, res, st_sum);
}
