/* scaler.c - the loss scaler state machine, its blob, and fused unscale. */
#include <math.h>

#include "internal.h"

mp_scaler_config mp_scaler_defaults(void) {
    mp_scaler_config c = {65536.0f, 2.0f, 0.5f, 2000, 1, 0.0f, 0.0f, 1};
    return c;
}

static mp_status check_config(const mp_scaler_config *c) {
    if (!(isfinite(c->init_scale) && c->init_scale > 0))
        return mp_error(MP_EINVAL, "scaler: init_scale must be finite and > 0 (got %g)", (double)c->init_scale);
    if (!(isfinite(c->growth_factor) && c->growth_factor > 1))
        return mp_error(MP_EINVAL, "scaler: growth_factor must be > 1 (got %g)", (double)c->growth_factor);
    if (!(c->backoff_factor > 0 && c->backoff_factor < 1))
        return mp_error(MP_EINVAL, "scaler: backoff_factor must be in (0, 1) (got %g)", (double)c->backoff_factor);
    if (c->growth_interval < 1)
        return mp_error(MP_EINVAL, "scaler: growth_interval must be >= 1 (got %d)", c->growth_interval);
    if (c->hysteresis < 1) return mp_error(MP_EINVAL, "scaler: hysteresis must be >= 1 (got %d)", c->hysteresis);
    if (!(isfinite(c->min_scale) && c->min_scale >= 0))
        return mp_error(MP_EINVAL, "scaler: min_scale must be finite and >= 0 (got %g)", (double)c->min_scale);
    if (!(isfinite(c->max_scale) && c->max_scale >= 0))
        return mp_error(MP_EINVAL, "scaler: max_scale must be finite and >= 0 (got %g)", (double)c->max_scale);
    if (c->max_scale > 0 && c->min_scale > c->max_scale)
        return mp_error(MP_EINVAL, "scaler: min_scale %g is above max_scale %g", (double)c->min_scale,
                        (double)c->max_scale);
    if (c->init_scale < c->min_scale || (c->max_scale > 0 && c->init_scale > c->max_scale))
        return mp_error(MP_EINVAL, "scaler: init_scale %g is outside [min_scale, max_scale]", (double)c->init_scale);
    if (c->dynamic != 0 && c->dynamic != 1) return mp_error(MP_EINVAL, "scaler: dynamic must be 0 or 1");
    return MP_OK;
}

mp_status mp_scaler_init(mp_scaler *s, const mp_scaler_config *cfg) {
    if (!s) return mp_error(MP_EINVAL, "mp_scaler_init: NULL scaler");
    const mp_scaler_config c = cfg ? *cfg : mp_scaler_defaults();
    const mp_status st = check_config(&c);
    if (st != MP_OK) return st;
    memset(s, 0, sizeof *s);
    s->cfg = c;
    s->scale = c.init_scale;
    s->hysteresis_left = c.hysteresis;
    s->last_overflow_step = -1;
    return MP_OK;
}

float mp_scaler_get_scale(const mp_scaler *s) { return s->scale; }
int mp_scaler_growth_tracker(const mp_scaler *s) { return s->growth_tracker; }
float mp_scaler_inv_scale(const mp_scaler *s) { return (float)(1.0 / (double)s->scale); }

mp_status mp_scaler_update(mp_scaler *s, int found_inf) {
    const uint64_t step = s->steps++;
    const mp_scaler_config *c = &s->cfg;
    if (!found_inf) {
        if (!c->dynamic) return MP_OK;
        const int32_t successful = s->growth_tracker + 1;
        if (successful == c->growth_interval) {
            /* float * double, rounded to float: PyTorch's arithmetic */
            float grown = (float)((double)s->scale * (double)c->growth_factor);
            if (c->max_scale > 0 && grown > c->max_scale) grown = c->max_scale;
            if (isfinite(grown)) {
                s->growths += grown != s->scale;
                s->scale = grown;
            }
            s->growth_tracker = 0;
            s->hysteresis_left = c->hysteresis;
        } else {
            s->growth_tracker = successful;
        }
        return MP_OK;
    }
    s->skipped++;
    s->last_overflow_step = (int64_t)step;
    if (!c->dynamic) return MP_OK;
    s->growth_tracker = 0;
    if (s->hysteresis_left > 1) {
        s->hysteresis_left--;
        return MP_OK;
    }
    s->hysteresis_left = 0;
    if (s->scale == 0 || (c->min_scale > 0 && s->scale <= c->min_scale))
        return mp_error(MP_EOVERFLOW,
                        "loss scale already at minimum (%g) and gradients still overflow at step %llu: "
                        "the model produces inf/NaN at any scale",
                        (double)s->scale, (unsigned long long)step);
    float reduced = (float)((double)s->scale * (double)c->backoff_factor);
    if (c->min_scale > 0 && reduced < c->min_scale) reduced = c->min_scale;
    s->scale = reduced;
    s->backoffs++;
    return MP_OK;
}

/* ---- blob: "MPSC", version, size, fields, CRC-32 of everything before it ---- */

#define BLOB_VERSION 1u

static uint32_t fbits(float x) { return mp_f32_bits(x); }

mp_status mp_scaler_save(const mp_scaler *s, uint8_t b[MP_SCALER_BLOB_SIZE]) {
    if (!s || !b) return mp_error(MP_EINVAL, "mp_scaler_save: NULL argument");
    memset(b, 0, MP_SCALER_BLOB_SIZE);
    memcpy(b, "MPSC", 4);
    mp_put_u32(b + 4, BLOB_VERSION);
    mp_put_u32(b + 8, MP_SCALER_BLOB_SIZE);
    const mp_scaler_config *c = &s->cfg;
    mp_put_u32(b + 12, fbits(c->init_scale));
    mp_put_u32(b + 16, fbits(c->growth_factor));
    mp_put_u32(b + 20, fbits(c->backoff_factor));
    mp_put_u32(b + 24, (uint32_t)c->growth_interval);
    mp_put_u32(b + 28, (uint32_t)c->hysteresis);
    mp_put_u32(b + 32, fbits(c->min_scale));
    mp_put_u32(b + 36, fbits(c->max_scale));
    mp_put_u32(b + 40, (uint32_t)c->dynamic);
    mp_put_u32(b + 44, fbits(s->scale));
    mp_put_u32(b + 48, (uint32_t)s->growth_tracker);
    mp_put_u32(b + 52, (uint32_t)s->hysteresis_left);
    mp_put_u64(b + 56, s->steps);
    mp_put_u64(b + 64, s->skipped);
    mp_put_u64(b + 72, s->growths);
    mp_put_u64(b + 80, s->backoffs);
    mp_put_u64(b + 88, (uint64_t)s->last_overflow_step);
    mp_put_u32(b + 100, mp_crc32(0, b, 100));
    return MP_OK;
}

mp_status mp_scaler_load(mp_scaler *s, const uint8_t *b, size_t len) {
    if (!s || !b) return mp_error(MP_EINVAL, "mp_scaler_load: NULL argument");
    if (len != MP_SCALER_BLOB_SIZE)
        return mp_error(MP_ECORRUPT, "scaler blob: %zu bytes, expected %d", len, MP_SCALER_BLOB_SIZE);
    if (memcmp(b, "MPSC", 4) != 0) return mp_error(MP_ECORRUPT, "scaler blob: bad magic");
    if (mp_get_u32(b + 4) != BLOB_VERSION)
        return mp_error(MP_ECORRUPT, "scaler blob: version %u, this mixprec reads %u", mp_get_u32(b + 4), BLOB_VERSION);
    if (mp_get_u32(b + 8) != MP_SCALER_BLOB_SIZE) return mp_error(MP_ECORRUPT, "scaler blob: bad size field");
    if (mp_get_u32(b + 100) != mp_crc32(0, b, 100)) return mp_error(MP_ECORRUPT, "scaler blob: checksum mismatch");
    mp_scaler t;
    memset(&t, 0, sizeof t);
    t.cfg.init_scale = mp_bits_f32(mp_get_u32(b + 12));
    t.cfg.growth_factor = mp_bits_f32(mp_get_u32(b + 16));
    t.cfg.backoff_factor = mp_bits_f32(mp_get_u32(b + 20));
    t.cfg.growth_interval = (int)mp_get_u32(b + 24);
    t.cfg.hysteresis = (int)mp_get_u32(b + 28);
    t.cfg.min_scale = mp_bits_f32(mp_get_u32(b + 32));
    t.cfg.max_scale = mp_bits_f32(mp_get_u32(b + 36));
    t.cfg.dynamic = (int)mp_get_u32(b + 40);
    t.scale = mp_bits_f32(mp_get_u32(b + 44));
    t.growth_tracker = (int32_t)mp_get_u32(b + 48);
    t.hysteresis_left = (int32_t)mp_get_u32(b + 52);
    t.steps = mp_get_u64(b + 56);
    t.skipped = mp_get_u64(b + 64);
    t.growths = mp_get_u64(b + 72);
    t.backoffs = mp_get_u64(b + 80);
    t.last_overflow_step = (int64_t)mp_get_u64(b + 88);
    const mp_scaler_config *c = &t.cfg;
    const mp_status st = check_config(c);
    if (st != MP_OK) return mp_error(MP_ECORRUPT, "scaler blob: %s", mp_last_error());
    /* only a state that mp_scaler_update can reach from mp_scaler_init, each field named when it is not */
    if (!(isfinite(t.scale) && t.scale > 0))
        return mp_error(MP_ECORRUPT, "scaler blob: scale %g is not finite and > 0", (double)t.scale);
    if (!isfinite((float)(1.0 / (double)t.scale)))
        return mp_error(MP_ECORRUPT, "scaler blob: scale %g has no finite inverse in fp32", (double)t.scale);
    if (t.scale < c->min_scale || (c->max_scale != 0 && t.scale > c->max_scale))
        return mp_error(MP_ECORRUPT, "scaler blob: scale %g is outside [min_scale %g, max_scale %g]", (double)t.scale,
                        (double)c->min_scale, (double)c->max_scale);
    if (t.growth_tracker < 0 || t.growth_tracker >= c->growth_interval)
        return mp_error(MP_ECORRUPT, "scaler blob: growth tracker %d is outside [0, growth_interval %d)",
                        (int)t.growth_tracker, c->growth_interval);
    if (t.hysteresis_left < 0 || t.hysteresis_left > c->hysteresis)
        return mp_error(MP_ECORRUPT, "scaler blob: hysteresis left %d is outside [0, hysteresis %d]",
                        (int)t.hysteresis_left, c->hysteresis);
    if (t.skipped > t.steps || t.growths > t.steps - t.skipped || t.backoffs > t.skipped ||
        (t.skipped ? t.last_overflow_step < 0 || (uint64_t)t.last_overflow_step >= t.steps
                   : t.last_overflow_step != -1))
        return mp_error(MP_ECORRUPT,
                        "scaler blob: counters out of range (steps %llu, skipped %llu, growths %llu, "
                        "backoffs %llu, last overflow at %lld)",
                        (unsigned long long)t.steps, (unsigned long long)t.skipped, (unsigned long long)t.growths,
                        (unsigned long long)t.backoffs, (long long)t.last_overflow_step);
    if (!c->dynamic && (t.scale != c->init_scale || t.growth_tracker != 0 || t.hysteresis_left != c->hysteresis ||
                        t.growths != 0 || t.backoffs != 0))
        return mp_error(MP_ECORRUPT, "scaler blob: a static scaler's state has moved (scale %g, init_scale %g)",
                        (double)t.scale, (double)c->init_scale);
    *s = t;
    return MP_OK;
}

/* ---- fused unscale + check ---- */

static int unscale_f32_scalar(float *x, size_t n, float inv) {
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        bad |= (mp_f32_bits(x[i]) & 0x7f800000u) == 0x7f800000u;
        x[i] *= inv;
    }
    return bad;
}

/* A 16-bit format: inf/NaN are the codes with every exponent bit set. */
static inline int unscale_half(uint16_t *x, size_t n, float inv, const uint16_t expmask, float (*widen)(uint16_t),
                               uint16_t (*narrow)(float)) {
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        bad |= (x[i] & expmask) == expmask;
        x[i] = narrow(widen(x[i]) * inv);
    }
    return bad;
}

static int unscale_f16_scalar(uint16_t *x, size_t n, float inv) {
    return unscale_half(x, n, inv, 0x7c00u, mp_f16_to_f32, mp_f32_to_f16);
}

static int unscale_bf16_scalar(uint16_t *x, size_t n, float inv) {
    return unscale_half(x, n, inv, 0x7f80u, mp_bf16_to_f32, mp_f32_to_bf16);
}

static int check32_scalar(const uint32_t *x, size_t n) {
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad |= (x[i] & 0x7f800000u) == 0x7f800000u;
    return bad;
}

static int check16_scalar(const uint16_t *x, size_t n, uint16_t expmask) {
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad |= (x[i] & expmask) == expmask;
    return bad;
}

const mp_unscale_kernels mp_unscale_scalar = {unscale_f32_scalar, unscale_f16_scalar, unscale_bf16_scalar,
                                              check32_scalar, check16_scalar};

static int unscale_fp8(uint8_t *x, size_t n, float inv, mp_dtype t) {
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        const float v = t == MP_E4M3 ? mp_e4m3_to_f32(x[i]) : mp_e5m2_to_f32(x[i]);
        bad |= !isfinite(v);
        if (inv != 1.0f) x[i] = t == MP_E4M3 ? mp_f32_to_e4m3(v * inv) : mp_f32_to_e5m2(v * inv);
    }
    return bad;
}

/* inv_scale 1: the check alone, reading only (PyTorch leaves the values
 * untouched then: no NaN is quieted) */
static int check_only(const mp_unscale_kernels *k, const void *x, mp_dtype t, size_t n) {
    switch (t) {
    case MP_F32: return k->check32(x, n);
    case MP_F16: return k->check16(x, n, 0x7c00u);
    case MP_BF16: return k->check16(x, n, 0x7f80u);
    default: return unscale_fp8((uint8_t *)x, n, 1.0f, t); /* reads only at inv 1 */
    }
}

typedef struct {
    const mp_unscale_kernels *k;
    void *x;
    mp_dtype t;
    float inv;
    int found[MP_MAX_THREADS];
} unscale_job;

static void unscale_share(void *ctx, size_t i0, size_t i1, int t) {
    unscale_job *j = ctx;
    const size_t n = i1 - i0;
    int bad;
    if (j->inv == 1.0f) {
        j->found[t] |= check_only(j->k, (const uint8_t *)j->x + i0 * mp_format(j->t)->size, j->t, n);
        return;
    }
    switch (j->t) {
    case MP_F32: bad = j->k->f32((float *)j->x + i0, n, j->inv); break;
    case MP_F16: bad = j->k->f16((uint16_t *)j->x + i0, n, j->inv); break;
    case MP_BF16: bad = j->k->bf16((uint16_t *)j->x + i0, n, j->inv); break;
    default: bad = unscale_fp8((uint8_t *)j->x + i0, n, j->inv, j->t); break;
    }
    j->found[t] |= bad;
}

#define UNSCALE_PARALLEL_MIN ((size_t)1 << 18)

mp_status mp_unscale_check(void *grad, mp_dtype type, size_t n, float inv_scale, int *found_inf) {
    if (!mp_format(type)) return mp_error(MP_EINVAL, "mp_unscale_check: unknown dtype %d", (int)type);
    if (type == MP_E8M0 || type == MP_E2M1)
        return mp_error(MP_EINVAL, "mp_unscale_check: %s buffers are not unscaled (fp32, fp16, bf16, e4m3 or e5m2)",
                        mp_format(type)->name);
    if (!found_inf) return mp_error(MP_EINVAL, "mp_unscale_check: found_inf is NULL");
    if (n == 0) return MP_OK;
    if (!grad) return mp_error(MP_EINVAL, "mp_unscale_check: NULL buffer for %zu elements", n);
    if (!isfinite(inv_scale))
        return mp_error(MP_EINVAL, "mp_unscale_check: inv_scale %g is not finite", (double)inv_scale);
    unscale_job job;
    memset(&job, 0, sizeof job);
    job.k = mp_kernels_current()->unscale;
    job.x = grad, job.t = type, job.inv = inv_scale;
    const int shares = mp_parallel_for(n, UNSCALE_PARALLEL_MIN, 64, unscale_share, &job);
    for (int t = 0; t < shares; t++)
        if (job.found[t]) *found_inf = 1;
    return MP_OK;
}

mp_status mp_unscale_check_list(void *const *grads, const mp_dtype *types, const size_t *ns, size_t count,
                                float inv_scale, int *found_inf) {
    if (count && (!grads || !types || !ns)) return mp_error(MP_EINVAL, "mp_unscale_check_list: NULL array");
    if (!found_inf) return mp_error(MP_EINVAL, "mp_unscale_check_list: found_inf is NULL");
    for (size_t i = 0; i < count; i++) /* refuse before touching any buffer */
        if (!mp_format(types[i]) || types[i] == MP_E8M0 || types[i] == MP_E2M1 || (ns[i] && !grads[i]))
            return mp_error(MP_EINVAL, "mp_unscale_check_list: buffer %zu has a bad dtype or is NULL", i);
    for (size_t i = 0; i < count; i++) {
        const mp_status st = mp_unscale_check(grads[i], types[i], ns[i], inv_scale, found_inf);
        if (st != MP_OK) return st;
    }
    return MP_OK;
}
