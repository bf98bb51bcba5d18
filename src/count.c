/* count.c - counting without storing: what a scaled store into a format would
 * do (mp_convert_count, through mp_convert's own kernels and statistics), and
 * the values as they are in their own format (mp_count_values). Plain C loops
 * on bit patterns that -O3 vectorizes; large inputs are split over threads
 * (integer counts: the same result for any thread count). */
#include <float.h>

#include "internal.h"

/* Below this many elements one thread is faster than waking a second. */
#define PARALLEL_MIN ((size_t)1 << 18)
enum { CHUNK = 1024 }; /* fp32 elements of the stack buffer: stays in L1 */

#define VBLOCK ((size_t)1 << 20) /* short enough for 32-bit lane counters */

/* ---- mp_convert_count ---- */

typedef struct {
    const mp_kernels *k;
    mp_dtype fmt, t;
    const void *x;
    float scale;
    mp_convert_stats part[MP_MAX_THREADS];
} count_job;

/* v[i] = x[i] * s; adds the nonzero inputs whose product is 0 to *under and
 * the infinite products (infinite inputs, or past fp32's range) to *over. NaN
 * products are NaN, and mp_convert's statistics count them. The tests are on
 * the bits, so that DAZ (subnormals compared as 0) cannot change a count. */
static void scale_chunk(float *v, const float *x, size_t m, float s, uint64_t *under, uint64_t *over) {
    uint32_t u = 0, o = 0;
    for (size_t i = 0; i < m; i++) {
        const float p = x[i] * s;
        const uint32_t a = mp_f32_bits(x[i]) & 0x7fffffffu, b = mp_f32_bits(p) & 0x7fffffffu;
        u += (uint32_t)(a != 0) & (uint32_t)(b == 0);
        o += b == 0x7f800000u;
        v[i] = p;
    }
    *under += u, *over += o;
}

/* the infinite elements of x */
static uint64_t count_inf(const float *x, size_t m) {
    uint32_t o = 0;
    for (size_t i = 0; i < m; i++) o += (mp_f32_bits(x[i]) & 0x7fffffffu) == 0x7f800000u;
    return o;
}

static void count_share(void *ctx, size_t i0, size_t i1, int t) {
    count_job *j = ctx; /* each share adds into its own slot */
    mp_convert_stats *st = &j->part[t];
    float v[CHUNK];
    uint16_t out[CHUNK]; /* the discarded results: 2 bytes or fewer per element */
    const size_t es = mp_format(j->t)->size;
    uint64_t under = 0, over = 0;
    for (size_t i = i0; i < i1; i += CHUNK) {
        const size_t m = i1 - i < CHUNK ? i1 - i : CHUNK;
        const float *w = v; /* the chunk in fp32, scaled */
        if (j->t == MP_F32 && j->scale == 1.0f) w = (const float *)j->x + i, over += count_inf(w, m);
        else if (j->t == MP_F32) scale_chunk(v, (const float *)j->x + i, m, j->scale, &under, &over);
        else {
            mp_to_f32(j->k, v, (const uint8_t *)j->x + i * es, j->t, m);
            if (j->scale != 1.0f) scale_chunk(v, v, m, j->scale, &under, &over);
            else over += count_inf(v, m);
        }
        /* fp32 is the identity: counted in place */
        mp_from_f32(j->k, j->fmt == MP_F32 ? (void *)w : (void *)out, j->fmt, w, m, st);
    }
    st->underflow += under, st->overflow += over;
}

mp_status mp_convert_count(mp_dtype fmt, const void *x, mp_dtype t, size_t n, float scale, mp_convert_stats *stats) {
    if (!mp_format(fmt) || !mp_format(t))
        return mp_error(MP_EINVAL, "mp_convert_count: unknown dtype %d", !mp_format(fmt) ? (int)fmt : (int)t);
    if (fmt == MP_E8M0)
        return mp_error(MP_EINVAL, "mp_convert_count: e8m0 holds scales, not scaled values (no zero, no negatives)");
    if (!(scale > 0.0f) || !(scale <= FLT_MAX))
        return mp_error(MP_EINVAL, "mp_convert_count: scale %g (finite and > 0)", (double)scale);
    if (!stats) return mp_error(MP_EINVAL, "mp_convert_count: NULL stats");
    if (n == 0) return MP_OK;
    if (!x) return mp_error(MP_EINVAL, "mp_convert_count: NULL buffer for %zu elements", n);
    count_job j;
    memset(&j, 0, sizeof j);
    j.k = mp_kernels_current(), j.fmt = fmt, j.t = t, j.x = x, j.scale = scale;
    const int shares = mp_parallel_for(n, PARALLEL_MIN, CHUNK, count_share, &j);
    for (int s = 0; s < shares; s++) mp_convert_stats_add(stats, &j.part[s]);
    return MP_OK;
}

/* ---- mp_count_values ---- */

typedef struct {
    const void *x;
    mp_dtype t;
    mp_value_counts part[MP_MAX_THREADS];
} values_job;

/* fp16 or bf16 codes: inf is the infinity's code (the exponent's all-ones),
 * mant the mantissa mask (the largest subnormal's code) */
static void values16(const uint16_t *h, size_t n, uint32_t inf, uint32_t mant, mp_value_counts *c) {
    for (size_t i0 = 0; i0 < n; i0 += VBLOCK) {
        const size_t i1 = n - i0 < VBLOCK ? n : i0 + VBLOCK;
        uint32_t z = 0, s = 0, f = 0, q = 0;
        for (size_t i = i0; i < i1; i++) {
            const uint32_t a = h[i] & 0x7fffu;
            z += a == 0;
            s += a - 1u < mant;
            f += a == inf;
            q += a > inf;
        }
        c->zero += z, c->subnormal += s, c->inf += f, c->nan += q;
    }
}

static void values32(const uint32_t *x, size_t n, mp_value_counts *c) {
    for (size_t i0 = 0; i0 < n; i0 += VBLOCK) {
        const size_t i1 = n - i0 < VBLOCK ? n : i0 + VBLOCK;
        uint32_t z = 0, s = 0, f = 0, q = 0;
        for (size_t i = i0; i < i1; i++) {
            const uint32_t a = x[i] & 0x7fffffffu;
            z += a == 0;
            s += a - 1u < 0x7fffffu;
            f += a == 0x7f800000u;
            q += a > 0x7f800000u;
        }
        c->zero += z, c->subnormal += s, c->inf += f, c->nan += q;
    }
}

static void values_share(void *ctx, size_t i0, size_t i1, int t) {
    values_job *j = ctx;
    mp_value_counts *c = &j->part[t];
    switch (j->t) {
    case MP_F32: values32((const uint32_t *)j->x + i0, i1 - i0, c); break;
    case MP_F16: values16((const uint16_t *)j->x + i0, i1 - i0, 0x7c00u, 0x3ffu, c); break;
    default: values16((const uint16_t *)j->x + i0, i1 - i0, 0x7f80u, 0x7fu, c); break;
    }
}

mp_status mp_count_values(const void *x, mp_dtype t, size_t n, mp_value_counts *c) {
    if (!c) return mp_error(MP_EINVAL, "mp_count_values: NULL counts");
    memset(c, 0, sizeof *c);
    if (t != MP_F32 && t != MP_F16 && t != MP_BF16) {
        const mp_format_info *f = mp_format(t);
        return f ? mp_error(MP_EINVAL, "mp_count_values: %s values (fp32, fp16 or bf16)", f->name)
                 : mp_error(MP_EINVAL, "mp_count_values: unknown dtype %d", (int)t);
    }
    if (n == 0) return MP_OK;
    if (!x) return mp_error(MP_EINVAL, "mp_count_values: NULL buffer for %zu elements", n);
    values_job j;
    memset(&j, 0, sizeof j);
    j.x = x, j.t = t;
    const int shares = mp_parallel_for(n, PARALLEL_MIN, 64, values_share, &j);
    for (int s = 0; s < shares; s++) {
        c->zero += j.part[s].zero, c->subnormal += j.part[s].subnormal;
        c->inf += j.part[s].inf, c->nan += j.part[s].nan;
    }
    c->amax = mp_amax(x, t, n);
    return MP_OK;
}
