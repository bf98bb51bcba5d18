/* convert.c - bulk conversion: validation, threading, dispatch to a CPU path,
 * and the scalar path every fast path must match bit for bit. */
#include <math.h>

#include "amax_kernels.h"
#include "convert_stats.h"

/* ---- scalar kernels: the reference for every fast path ---- */

static void f32_to_f16_scalar(uint16_t *dst,    // (n,) fp16
                              const float *src, // (n,) fp32
                              size_t n, mp_convert_stats *st, int stream) {
    (void)stream;
    for (size_t i = 0; i < n; i++) {
        const uint16_t y = mp_f32_to_f16(src[i]);
        if (st) mp_stats_one(st, mp_f32_bits(src[i]), y, 5, 10, 1);
        dst[i] = y;
    }
}

static void f16_to_f32_scalar(float *dst, const uint16_t *src, size_t n, mp_convert_stats *st) {
    for (size_t i = 0; i < n; i++) {
        const float y = mp_f16_to_f32(src[i]);
        if (st) mp_stats_one(st, mp_f32_bits(y), mp_f32_bits(y), 8, 23, 1);
        dst[i] = y;
    }
}

static void f32_to_bf16_scalar(uint16_t *dst, const float *src, size_t n, mp_convert_stats *st, int stream) {
    (void)stream;
    for (size_t i = 0; i < n; i++) {
        const uint16_t y = mp_f32_to_bf16(src[i]);
        if (st) mp_stats_one(st, mp_f32_bits(src[i]), y, 8, 7, 1);
        dst[i] = y;
    }
}

static void bf16_to_f32_scalar(float *dst, const uint16_t *src, size_t n, mp_convert_stats *st) {
    for (size_t i = 0; i < n; i++) {
        const float y = mp_bf16_to_f32(src[i]);
        if (st) mp_stats_one(st, mp_f32_bits(y), mp_f32_bits(y), 8, 23, 1);
        dst[i] = y;
    }
}

const mp_convert_kernels mp_convert_scalar = {
    f32_to_f16_scalar,
    f16_to_f32_scalar,
    f32_to_bf16_scalar,
    bf16_to_f32_scalar,
};

/* ---- any format to fp32 and fp32 to any format ---- */

/* Widening to fp32 is exact and never under- or overflows, so only the final
 * narrowing step counts: stats are taken there, with x the exact input. */
void mp_to_f32(const mp_kernels *k, float *dst, const void *src, mp_dtype t, size_t n) {
    switch (t) {
    case MP_F32: memcpy(dst, src, n * sizeof(float)); break;
    case MP_F16: k->convert->f16_to_f32(dst, src, n, NULL); break;
    case MP_BF16: k->convert->bf16_to_f32(dst, src, n, NULL); break;
    case MP_E4M3:
        for (size_t i = 0; i < n; i++) dst[i] = mp_e4m3_to_f32(((const uint8_t *)src)[i]);
        break;
    case MP_E5M2:
        for (size_t i = 0; i < n; i++) dst[i] = mp_e5m2_to_f32(((const uint8_t *)src)[i]);
        break;
    case MP_E8M0:
        for (size_t i = 0; i < n; i++) dst[i] = mp_e8m0_to_f32(((const uint8_t *)src)[i]);
        break;
    case MP_E2M1:
        for (size_t i = 0; i < n; i++) dst[i] = mp_e2m1_to_f32(((const uint8_t *)src)[i]);
        break;
    case MP_U8: break; /* raw bytes, no number: mp_convert refuses them */
    }
}

/* E8M0 statistics (convert.h): no zero and no subnormals, so never underflow
 * or subnormal; overflow: positive finite x that became NaN (x >= 1.5 * 2^127);
 * nan: NaN inputs and finite x <= 0 (+-0 and negative numbers, which E8M0
 * cannot hold and which become NaN). Infinite inputs are not counted. */
static inline void stats_e8m0(mp_convert_stats *st, uint32_t x, uint8_t y) {
    const uint32_t a = x & 0x7fffffffu;
    const int positive = x - 1u < 0x7f7fffffu; /* 2^-149 .. FLT_MAX */
    st->nan += (uint64_t)(a > 0x7f800000u || (a < 0x7f800000u && !positive));
    st->overflow += (uint64_t)(positive && y == 0xffu);                     /* 1.5 * 2^127 .. FLT_MAX */
    if (y != 0xffu) mp_stats_amax(st, y ? (uint32_t)y << 23 : 0x00400000u); /* 2^(y - 127) */
}

/* E2M1 statistics (convert.h): underflow: finite nonzero x that became +-0;
 * subnormal: +-0.5; overflow: finite |x| >= 7, which rounds past 6 (7 is a tie
 * that goes to the even 8) and is saturated to +-6; nan: NaN inputs (which
 * become zeros). Infinite inputs (-> +-6) are not counted. */
static inline void stats_e2m1(mp_convert_stats *st, uint32_t x, uint8_t y) {
    const uint32_t a = x & 0x7fffffffu;
    st->nan += (uint64_t)(a > 0x7f800000u);
    st->underflow += (uint64_t)(a != 0 && a < 0x7f800000u && (y & 7u) == 0);
    st->subnormal += (uint64_t)((y & 7u) == 1);
    st->overflow += (uint64_t)(a >= 0x40e00000u && a < 0x7f800000u); /* 7.0 .. FLT_MAX */
    mp_stats_amax(st, mp_code_f32_bits(y & 7u, 2, 1));
}

/* fp32 to fp32 (mp_from_f32): only subnormals and NaNs to count,
 * and the largest finite magnitude, through the CPU path's kernel in blocks
 * short enough for its 32-bit lane counters. */
#define STATS_BLOCK ((size_t)1 << 20)
void mp_stats_f32(const mp_kernels *k, mp_convert_stats *st, const float *x, size_t n) {
    for (size_t i0 = 0; i0 < n; i0 += STATS_BLOCK) {
        uint32_t sub = 0, nan = 0;
        const size_t m = n - i0 < STATS_BLOCK ? n - i0 : STATS_BLOCK;
        const uint32_t am = k->amax->stats32((const uint32_t *)x + i0, m, &sub, &nan);
        st->subnormal += sub, st->nan += nan;
        mp_stats_amax(st, am);
    }
}

void mp_from_f32(const mp_kernels *k, void *dst, mp_dtype t, const float *src, size_t n, mp_convert_stats *st) {
    uint8_t *d8 = dst;
    switch (t) {
    case MP_F32:
        if (dst != src) memmove(dst, src, n * sizeof(float));
        if (st) mp_stats_f32(k, st, dst, n);
        break;
    case MP_F16:
    case MP_BF16: {
        const int stream = n * 2 >= MP_STREAM_MIN_BYTES;
        (t == MP_F16 ? k->convert->f32_to_f16 : k->convert->f32_to_bf16)(dst, src, n, st, stream);
        if (stream) mp_store_fence();
        break;
    }
    case MP_E4M3:
        for (size_t i = 0; i < n; i++) {
            d8[i] = mp_f32_to_e4m3(src[i]);
            if (st) mp_stats_one(st, mp_f32_bits(src[i]), d8[i], 4, 3, 0);
        }
        break;
    case MP_E5M2:
        for (size_t i = 0; i < n; i++) {
            d8[i] = mp_f32_to_e5m2(src[i]);
            if (st) mp_stats_one(st, mp_f32_bits(src[i]), d8[i], 5, 2, 1);
        }
        break;
    case MP_E8M0:
        for (size_t i = 0; i < n; i++) {
            d8[i] = mp_f32_to_e8m0(src[i]);
            if (st) stats_e8m0(st, mp_f32_bits(src[i]), d8[i]);
        }
        break;
    case MP_E2M1:
        for (size_t i = 0; i < n; i++) {
            d8[i] = mp_f32_to_e2m1(src[i]);
            if (st) stats_e2m1(st, mp_f32_bits(src[i]), d8[i]);
        }
        break;
    case MP_U8: break;
    }
}

/* Converts elements [0, n) of one thread's share. */
static void convert_range(const mp_kernels *k, void *dst, mp_dtype dt, const void *src, mp_dtype st_, size_t n,
                          mp_convert_stats *st) {
    if (st_ == MP_F32) {
        mp_from_f32(k, dst, dt, src, n, st);
        return;
    }
    if (dt == MP_F32 && st_ == MP_F16) {
        k->convert->f16_to_f32(dst, src, n, st);
        return;
    }
    if (dt == MP_F32 && st_ == MP_BF16) {
        k->convert->bf16_to_f32(dst, src, n, st);
        return;
    }
    /* Everything else goes through an fp32 block that stays in L1. */
    enum { BLOCK = 1024 };
    float tmp[BLOCK];
    const size_t ss = mp_format(st_)->size, ds = mp_format(dt)->size;
    for (size_t i = 0; i < n; i += BLOCK) {
        const size_t m = n - i < BLOCK ? n - i : BLOCK;
        mp_to_f32(k, tmp, (const uint8_t *)src + i * ss, st_, m);
        mp_from_f32(k, (uint8_t *)dst + i * ds, dt, tmp, m, st);
    }
}

const mp_amax_kernels mp_amax_scalar = MP_AMAX_KERNELS;

typedef struct {
    const mp_amax_kernels *k;
    const void *x;
    mp_dtype t;
    uint32_t part[MP_MAX_THREADS];
} amax_job;

static void amax_share(void *ctx, size_t i0, size_t i1, int t) {
    amax_job *j = ctx; /* each share writes its own slot */
    if (j->t == MP_F32) j->part[t] = j->k->amax32((const uint32_t *)j->x + i0, i1 - i0);
    else j->part[t] = j->k->amax16((const uint16_t *)j->x + i0, i1 - i0, j->t == MP_F16 ? 0x7c00 : 0x7f80);
}

float mp_amax(const void *x, mp_dtype t, size_t n) {
    if (t != MP_F32 && t != MP_F16 && t != MP_BF16) {
        const mp_format_info *f = mp_format(t);
        if (f) mp_error(MP_EINVAL, "mp_amax: %s values (fp32, fp16 or bf16)", f->name);
        else mp_error(MP_EINVAL, "mp_amax: unknown dtype %d", (int)t);
        return NAN;
    }
    amax_job j = {mp_kernels_current()->amax, x, t, {0}};
    const int shares = mp_parallel_for(n, (size_t)1 << 16, 64, amax_share, &j);
    uint32_t m = 0;
    for (int s = 0; s < shares; s++) m = j.part[s] > m ? j.part[s] : m;
    if (t == MP_F16) return mp_f16_to_f32((uint16_t)m);
    if (t == MP_BF16) return mp_bf16_to_f32((uint16_t)m);
    float f;
    memcpy(&f, &m, sizeof f);
    return f;
}

void mp_convert_stats_add(mp_convert_stats *a, const mp_convert_stats *b) {
    a->underflow += b->underflow;
    a->subnormal += b->subnormal;
    a->overflow += b->overflow;
    a->nan += b->nan;
    mp_stats_amax(a, mp_f32_bits(b->amax));
}

/* Below this many elements one thread is faster than waking a second. */
#define PARALLEL_MIN ((size_t)1 << 18)

typedef struct {
    const mp_kernels *k;
    void *dst;
    const void *src;
    mp_dtype dt, st;
    size_t dsize, ssize;
    mp_convert_stats *part; /* (MP_MAX_THREADS,) or NULL */
} convert_job;

static void convert_share(void *ctx, size_t i0, size_t i1, int t) {
    const convert_job *j = ctx;
    convert_range(j->k, (uint8_t *)j->dst + i0 * j->dsize, j->dt, (const uint8_t *)j->src + i0 * j->ssize, j->st,
                  i1 - i0, j->part ? &j->part[t] : NULL);
}

mp_status mp_convert(void *dst, mp_dtype dst_type, const void *src, mp_dtype src_type, size_t n,
                     mp_convert_stats *stats) {
    return mp_convert_in(mp_kernels_current(), dst, dst_type, src, src_type, n, stats);
}

mp_status mp_convert_in(const mp_kernels *k, void *dst, mp_dtype dst_type, const void *src, mp_dtype src_type, size_t n,
                        mp_convert_stats *stats) {
    const mp_format_info *df = mp_format(dst_type), *sf = mp_format(src_type);
    if (!df || !sf) return mp_error(MP_EINVAL, "mp_convert: unknown dtype %d", !df ? (int)dst_type : (int)src_type);
    if (n == 0) return MP_OK;
    if (!dst || !src) return mp_error(MP_EINVAL, "mp_convert: NULL buffer for %zu elements", n);
    if (dst == src && df->size != sf->size)
        return mp_error(MP_EINVAL, "mp_convert: in place needs formats of one size (%s -> %s)", sf->name, df->name);
    mp_convert_stats part[MP_MAX_THREADS];
    memset(part, 0, sizeof part);
    convert_job job = {k, dst, src, dst_type, src_type, df->size, sf->size, stats ? part : NULL};
    /* shares are whole cache lines of the wider side: 64 elements */
    const int shares = mp_parallel_for(n, PARALLEL_MIN, 64, convert_share, &job);
    if (stats)
        for (int t = 0; t < shares; t++) mp_convert_stats_add(stats, &part[t]);
    return MP_OK;
}
