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

/* Loads n values from element i of p into out (fp32, exact). */
static void load(float *out, const void *p, mp_dtype t, size_t i, size_t n) {
    mp_convert(out, MP_F32, at(p, t, i), t, n, NULL);
}

/* Stores n fp32 values into element i of p, counting into st. */
static void store(void *p, mp_dtype t, size_t i, const float *v, size_t n, mp_convert_stats *st) {
    mp_convert((uint8_t *)p + i * mp_format(t)->size, t, v, MP_F32, n, st);
}

/* Scratch rows: `count` rows of n floats. */
static float *scratch(size_t count, size_t n) { return malloc((count * n + 16) * sizeof(float)); }

#define CHUNK 4096 /* element-wise ops work through fp32 chunks of this size */

typedef float (*unary_fn)(float x);
typedef float (*binary_fn)(float dy, float x);

/* Element-wise work in parallel: shares of whole chunks, per-share statistics
 * summed afterwards (counts are exact whatever the split). */
typedef struct {
    void *out;
    mp_dtype ot, at, bt;
    const void *a, *b; /* b NULL for unary */
    unary_fn f1;
    binary_fn f2;
    mp_convert_stats part[MP_MAX_THREADS];
} elem_job;

static float relu(float x);
static float relu_grad(float dy, float x);
static float add2(float a, float b);

static void elem_share(void *ctx, size_t i0, size_t i1, int t) {
    elem_job *j = ctx;
    float g[CHUNK], v[CHUNK];
    for (size_t i = i0; i < i1; i += CHUNK) {
        const size_t m = i1 - i < CHUNK ? i1 - i : CHUNK;
        load(g, j->a, j->at, i, m);
        if (j->b) {
            load(v, j->b, j->bt, i, m);
            if (j->f2 == relu_grad) /* the common case, inlined so that it vectorizes */
                for (size_t k = 0; k < m; k++) g[k] = v[k] > 0.0f ? g[k] : 0.0f;
            else if (j->f2 == add2)
                for (size_t k = 0; k < m; k++) g[k] += v[k];
            else
                for (size_t k = 0; k < m; k++) g[k] = j->f2(g[k], v[k]);
        } else if (j->f1 == relu) {
            for (size_t k = 0; k < m; k++) g[k] = g[k] > 0.0f ? g[k] : 0.0f;
        } else {
            for (size_t k = 0; k < m; k++) g[k] = j->f1(g[k]);
        }
        store(j->out, j->ot, i, g, m, &j->part[t]);
    }
}

#define ELEM_PARALLEL_MIN ((size_t)1 << 16)

static mp_status run_elem(elem_job *j, size_t n, mp_convert_stats *st) {
    memset(j->part, 0, sizeof j->part);
    const int shares = mp_parallel_for(n, ELEM_PARALLEL_MIN, CHUNK, elem_share, j);
    if (st)
        for (int t = 0; t < shares; t++) mp_convert_stats_add(st, &j->part[t]);
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
} relu16_job;

/* The portable kernel, without branches on the data (signs are random). */
static void relu16_scalar(uint16_t *out, const uint16_t *a, const uint16_t *x, size_t n, const mp_relu16_codes *k,
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

static void relu16_share(void *ctx, size_t i0, size_t i1, int t) {
    relu16_job *j = ctx;
    void (*f)(uint16_t *, const uint16_t *, const uint16_t *, size_t, const mp_relu16_codes *, uint64_t *,
              uint64_t *) = relu16_scalar;
#ifdef MP_X86
    if (mp_cpu_isa() >= MP_ISA_AVX512) f = mp_relu16_avx512;
#endif
    f(j->out + i0, j->a + i0, j->b ? j->b + i0 : NULL, i1 - i0, &j->codes, &j->part[t].subnormal, &j->part[t].nan);
}

static int relu16(void *out, mp_dtype ot, const void *a, mp_dtype at, const void *b, mp_dtype bt, size_t n,
                  mp_convert_stats *st) {
    if (ot != at || (b && bt != at) || (ot != MP_F16 && ot != MP_BF16)) return 0;
    relu16_job j = {out, a, b, {ot == MP_F16 ? 0x7c00 : 0x7f80, ot == MP_F16 ? 0x0200 : 0x0040, ot == MP_F16 ? 0x03ff : 0x007f},
                    {{0}}};
    const int shares = mp_parallel_for(n, ELEM_PARALLEL_MIN, 64, relu16_share, &j);
    if (st)
        for (int t = 0; t < shares; t++) mp_convert_stats_add(st, &j.part[t]);
    return 1;
}

static mp_status unary(const char *fn, void *y, mp_dtype yt, const void *x, mp_dtype xt, size_t n, unary_fn f,
                       mp_convert_stats *st) {
    mp_status s = check_types(fn, yt, xt, MP_F32);
    if (s != MP_OK) return s;
    if (n && (!y || !x)) return mp_error(MP_EINVAL, "%s: NULL buffer", fn);
    if (f == relu && relu16(y, yt, x, xt, NULL, xt, n, st)) return MP_OK;
    elem_job j = {y, yt, xt, MP_F32, x, NULL, f, NULL, {{0}}};
    return run_elem(&j, n, st);
}

static mp_status binary(const char *fn, void *dx, mp_dtype dxt, const void *dy, mp_dtype dyt, const void *x,
                        mp_dtype xt, size_t n, binary_fn f, mp_convert_stats *st) {
    mp_status s = check_types(fn, dxt, dyt, xt);
    if (s != MP_OK) return s;
    if (n && (!dx || !dy || !x)) return mp_error(MP_EINVAL, "%s: NULL buffer", fn);
    if (f == relu_grad && relu16(dx, dxt, dy, dyt, x, xt, n, st)) return MP_OK;
    elem_job j = {dx, dxt, dyt, xt, dy, x, NULL, f, {{0}}};
    return run_elem(&j, n, st);
}

static float relu(float x) { return x > 0.0f ? x : 0.0f; }
static float relu_grad(float dy, float x) { return x > 0.0f ? dy : 0.0f; }

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f

static float gelu(float x) { return 0.5f * x * (1.0f + tanhf(GELU_K * (x + GELU_C * x * x * x))); }
static float gelu_grad(float dy, float x) {
    const float u = GELU_K * (x + GELU_C * x * x * x), t = tanhf(u);
    const float du = GELU_K * (1.0f + 3.0f * GELU_C * x * x);
    return dy * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
}

/* the erf form, in fp32: Phi(x) = 0.5 (1 + erf(x / sqrt 2)), phi(x) = exp(-x^2 / 2) / sqrt(2 pi).
 * Phi is computed as 0.5 erfc(-x / sqrt 2): the same function without the
 * cancellation of 1 + erf for negative x (relative error ~1e-7 everywhere). */
#define SQRT1_2 0.7071067811865476f
#define INV_SQRT_2PI 0.3989422804014327f

static float gelu_erf(float x) { return 0.5f * x * erfcf(-x * SQRT1_2); }
static float gelu_erf_grad(float dy, float x) {
    const float cdf = 0.5f * erfcf(-x * SQRT1_2), pdf = INV_SQRT_2PI * expf(-0.5f * x * x);
    return dy * (cdf + x * pdf);
}

static float add2(float a, float b) { return a + b; }

mp_status mp_relu_forward(void *y, mp_dtype yt, const void *x, mp_dtype xt, size_t n, mp_convert_stats *st) {
    return unary("mp_relu_forward", y, yt, x, xt, n, relu, st);
}
mp_status mp_relu_backward(void *dx, mp_dtype dxt, const void *dy, mp_dtype dyt, const void *x, mp_dtype xt, size_t n,
                           mp_convert_stats *st) {
    return binary("mp_relu_backward", dx, dxt, dy, dyt, x, xt, n, relu_grad, st);
}
mp_status mp_gelu_forward(void *y, mp_dtype yt, const void *x, mp_dtype xt, size_t n, mp_convert_stats *st) {
    return unary("mp_gelu_forward", y, yt, x, xt, n, gelu, st);
}
mp_status mp_gelu_backward(void *dx, mp_dtype dxt, const void *dy, mp_dtype dyt, const void *x, mp_dtype xt, size_t n,
                           mp_convert_stats *st) {
    return binary("mp_gelu_backward", dx, dxt, dy, dyt, x, xt, n, gelu_grad, st);
}

mp_status mp_gelu_erf_forward(void *y, mp_dtype yt, const void *x, mp_dtype xt, size_t n, mp_convert_stats *st) {
    return unary("mp_gelu_erf_forward", y, yt, x, xt, n, gelu_erf, st);
}
mp_status mp_gelu_erf_backward(void *dx, mp_dtype dxt, const void *dy, mp_dtype dyt, const void *x, mp_dtype xt,
                               size_t n, mp_convert_stats *st) {
    return binary("mp_gelu_erf_backward", dx, dxt, dy, dyt, x, xt, n, gelu_erf_grad, st);
}
mp_status mp_add(void *y, mp_dtype yt, const void *a, mp_dtype at, const void *b, mp_dtype bt, size_t n,
                 mp_convert_stats *st) {
    return binary("mp_add", y, yt, a, at, b, bt, n, add2, st);
}

/* ---- row-wise operations ---- */

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
} bias_job;

static void bias_share(void *ctx, size_t r0, size_t r1, int t) {
    bias_job *j = ctx;
    float *row = scratch(1, j->C);
    if (!row) {
        j->oom = 1;
        return;
    }
    for (size_t b = r0; b < r1; b++) {
        load(row, j->x, j->xt, b * j->C, j->C);
        for (size_t k = 0; k < j->C; k++) row[k] += j->bias[k];
        store(j->y, j->yt, b * j->C, row, j->C, &j->part[t]);
    }
    free(row);
}

mp_status mp_bias_add(void *y, mp_dtype yt, const void *x, mp_dtype xt, const float *bias, size_t B, size_t C,
                      mp_convert_stats *st) {
    mp_status s = check_types("mp_bias_add", yt, xt, MP_F32);
    if (s != MP_OK || (s = rows_args("mp_bias_add", y, x, B, C)) != MP_OK) return s;
    if (B && C && !bias) return mp_error(MP_EINVAL, "mp_bias_add: NULL bias");
    bias_job j = {y, yt, xt, x, bias, C, 0, {{0}}};
    const int shares = mp_parallel_for(B, C ? ELEM_PARALLEL_MIN / C + 1 : B + 1, 1, bias_share, &j);
    if (j.oom) return mp_error(MP_ENOMEM, "mp_bias_add: out of memory");
    if (st)
        for (int t = 0; t < shares; t++) mp_convert_stats_add(st, &j.part[t]);
    return MP_OK;
}

/* Column sums: each share owns a range of columns and walks all rows, so the
 * order of additions (row by row) does not depend on the split. */
typedef struct {
    float *out;
    const void *x;
    mp_dtype xt;
    size_t B, C;
    int oom;
} colsum_job;

static void colsum_share(void *ctx, size_t j0, size_t j1, int t) {
    (void)t;
    colsum_job *j = ctx;
    float *row = scratch(1, j1 - j0);
    if (!row) {
        j->oom = 1;
        return;
    }
    for (size_t b = 0; b < j->B; b++) {
        load(row, j->x, j->xt, b * j->C + j0, j1 - j0);
        for (size_t k = j0; k < j1; k++) j->out[k] += row[k - j0];
    }
    free(row);
}

mp_status mp_colsum(float *out, const void *x, mp_dtype xt, size_t B, size_t C, int accumulate) {
    mp_status s = check_types("mp_colsum", xt, MP_F32, MP_F32);
    if (s != MP_OK || (s = rows_args("mp_colsum", out, x, B ? B : 1, C)) != MP_OK) return s;
    if (!accumulate) memset(out, 0, C * sizeof *out);
    colsum_job j = {out, x, xt, B, C, 0};
    mp_parallel_for(C, B * C >= ELEM_PARALLEL_MIN ? 64 : C + 1, 16, colsum_share, &j);
    return j.oom ? mp_error(MP_ENOMEM, "mp_colsum: out of memory") : MP_OK;
}

/* In place over one fp32 row: softmax (or log_softmax), max-subtracted.
 * Returns log(sum(exp(x - max))) + max, the log-sum-exp. */
static float softmax_row(float *r, size_t C, int log) {
    float mx = -INFINITY;
    for (size_t j = 0; j < C; j++) mx = r[j] > mx ? r[j] : mx;
    if (mx == -INFINITY) mx = 0.0f; /* a row of -inf: all terms exp(-inf) = 0 */
    float sum = 0.0f;
    for (size_t j = 0; j < C; j++) sum += expf(r[j] - mx);
    const float lse = logf(sum) + mx;
    if (log)
        for (size_t j = 0; j < C; j++) r[j] -= lse;
    else {
        const float inv = 1.0f / sum;
        for (size_t j = 0; j < C; j++) r[j] = expf(r[j] - mx) * inv;
    }
    return lse;
}

mp_status mp_softmax_forward(void *y, mp_dtype yt, const void *x, mp_dtype xt, size_t B, size_t C, int log,
                             mp_convert_stats *st) {
    mp_status s = check_types("mp_softmax_forward", yt, xt, MP_F32);
    if (s != MP_OK || (s = rows_args("mp_softmax_forward", y, x, B, C)) != MP_OK) return s;
    float *row = scratch(1, C);
    if (!row) return mp_error(MP_ENOMEM, "mp_softmax_forward: out of memory");
    for (size_t b = 0; b < B; b++) {
        load(row, x, xt, b * C, C);
        softmax_row(row, C, log);
        store(y, yt, b * C, row, C, st);
    }
    free(row);
    return MP_OK;
}

mp_status mp_softmax_backward(void *dx, mp_dtype dxt, const void *y, mp_dtype yt, const void *dy, mp_dtype dyt,
                              size_t B, size_t C, int log, mp_convert_stats *st) {
    mp_status s = check_types("mp_softmax_backward", dxt, yt, dyt);
    if (s != MP_OK || (s = rows_args("mp_softmax_backward", dx, y, B, C)) != MP_OK) return s;
    if (B && C && !dy) return mp_error(MP_EINVAL, "mp_softmax_backward: NULL dy");
    float *r = scratch(2, C);
    if (!r) return mp_error(MP_ENOMEM, "mp_softmax_backward: out of memory");
    float *yr = r, *g = r + C;
    for (size_t b = 0; b < B; b++) {
        load(yr, y, yt, b * C, C);
        load(g, dy, dyt, b * C, C);
        float dot = 0.0f;
        if (log) {
            for (size_t j = 0; j < C; j++) dot += g[j];
            for (size_t j = 0; j < C; j++) g[j] -= expf(yr[j]) * dot;
        } else {
            for (size_t j = 0; j < C; j++) dot += g[j] * yr[j];
            for (size_t j = 0; j < C; j++) g[j] = yr[j] * (g[j] - dot);
        }
        store(dx, dxt, b * C, g, C, st);
    }
    free(r);
    return MP_OK;
}

mp_status mp_cross_entropy(float *loss, void *dlogits, mp_dtype dt, const void *logits, mp_dtype lt,
                           const int32_t *labels, size_t B, size_t C, float scale, mp_convert_stats *st) {
    mp_status s = check_types("mp_cross_entropy", dlogits ? dt : MP_F32, lt, MP_F32);
    if (s != MP_OK || (s = rows_args("mp_cross_entropy", logits, labels, B, C)) != MP_OK) return s;
    if (!loss) return mp_error(MP_EINVAL, "mp_cross_entropy: NULL loss");
    if (B == 0 || C == 0) return mp_error(MP_EINVAL, "mp_cross_entropy: empty batch (B %zu, C %zu)", B, C);
    for (size_t b = 0; b < B; b++)
        if (labels[b] < 0 || (size_t)labels[b] >= C)
            return mp_error(MP_EINVAL, "mp_cross_entropy: label %d of row %zu is outside [0, %zu)", (int)labels[b], b, C);
    float *row = scratch(1, C);
    if (!row) return mp_error(MP_ENOMEM, "mp_cross_entropy: out of memory");
    float total = 0.0f;
    const float g = scale / (float)B;
    for (size_t b = 0; b < B; b++) {
        load(row, logits, lt, b * C, C);
        const float target = row[labels[b]];
        const float lse = softmax_row(row, C, 0); /* row now holds the probabilities */
        total += lse - target;
        if (dlogits) {
            row[labels[b]] -= 1.0f;
            for (size_t j = 0; j < C; j++) row[j] *= g;
            store(dlogits, dt, b * C, row, C, st);
        }
    }
    *loss = total / (float)B;
    free(row);
    return MP_OK;
}

mp_status mp_layernorm_forward(void *y, mp_dtype yt, float *mean, float *rstd, const void *x, mp_dtype xt,
                               const float *w, const float *b, size_t B, size_t C, float eps, mp_convert_stats *st) {
    mp_status s = check_types("mp_layernorm_forward", yt, xt, MP_F32);
    if (s != MP_OK || (s = rows_args("mp_layernorm_forward", y, x, B, C)) != MP_OK) return s;
    if (B && (!mean || !rstd)) return mp_error(MP_EINVAL, "mp_layernorm_forward: NULL mean or rstd");
    if (C == 0 && B) return mp_error(MP_EINVAL, "mp_layernorm_forward: rows of 0 values");
    float *row = scratch(1, C);
    if (!row) return mp_error(MP_ENOMEM, "mp_layernorm_forward: out of memory");
    for (size_t r = 0; r < B; r++) {
        load(row, x, xt, r * C, C);
        float m = 0.0f;
        for (size_t j = 0; j < C; j++) m += row[j];
        m /= (float)C;
        float v = 0.0f; /* two passes: the variance of x - mean, never E[x^2] - E[x]^2 */
        for (size_t j = 0; j < C; j++) v += (row[j] - m) * (row[j] - m);
        v /= (float)C;
        const float rs = 1.0f / sqrtf(v + eps);
        for (size_t j = 0; j < C; j++) {
            const float n = (row[j] - m) * rs;
            row[j] = n * (w ? w[j] : 1.0f) + (b ? b[j] : 0.0f);
        }
        mean[r] = m, rstd[r] = rs;
        store(y, yt, r * C, row, C, st);
    }
    free(row);
    return MP_OK;
}

mp_status mp_layernorm_backward(void *dx, mp_dtype dxt, float *dw, float *db, const void *dy, mp_dtype dyt,
                                const void *x, mp_dtype xt, const float *mean, const float *rstd, const float *w,
                                size_t B, size_t C, int accumulate, mp_convert_stats *st) {
    mp_status s = check_types("mp_layernorm_backward", dxt, dyt, xt);
    if (s != MP_OK || (s = rows_args("mp_layernorm_backward", dx, dy, B, C)) != MP_OK) return s;
    if (B && (!x || !mean || !rstd)) return mp_error(MP_EINVAL, "mp_layernorm_backward: NULL x, mean or rstd");
    float *r = scratch(2, C);
    if (!r) return mp_error(MP_ENOMEM, "mp_layernorm_backward: out of memory");
    if (!accumulate && dw) memset(dw, 0, C * sizeof *dw);
    if (!accumulate && db) memset(db, 0, C * sizeof *db);
    float *g = r, *n = r + C;
    for (size_t i = 0; i < B; i++) {
        load(g, dy, dyt, i * C, C);
        load(n, x, xt, i * C, C);
        float sum_dn = 0.0f, sum_dn_n = 0.0f;
        for (size_t j = 0; j < C; j++) {
            n[j] = (n[j] - mean[i]) * rstd[i];
            const float dn = g[j] * (w ? w[j] : 1.0f);
            sum_dn += dn;
            sum_dn_n += dn * n[j];
            if (dw) dw[j] += g[j] * n[j];
            if (db) db[j] += g[j];
        }
        const float a = sum_dn / (float)C, c = sum_dn_n / (float)C;
        for (size_t j = 0; j < C; j++) g[j] = rstd[i] * (g[j] * (w ? w[j] : 1.0f) - a - n[j] * c);
        store(dx, dxt, i * C, g, C, st);
    }
    free(r);
    return MP_OK;
}
