/* mx.c - MX block quantization (OCP Microscaling: 32 values, one E8M0 scale):
 * validation, threading, dispatch, and the scalar reference every fast path
 * must match bit for bit.
 *
 * The reference spells out the arithmetic torchao and Transformer Engine do
 * in fp32, emulated with integers (no FPU: the same bits under any rounding
 * mode and FTZ/DAZ):
 *
 *   scale     FLOOR: s = exponent field of amax - emax (emax 8 for E4M3, 15
 *             for E5M2), at least 0: floor(log2(amax)) - emax + 127, with zero
 *             and fp32-subnormal amax counting as 2^-127.
 *             RCEIL: d = fl32(amax * fl32(1 / max)), then s = the smallest
 *             code with 2^(s-127) >= d (normal d: its exponent field, plus one
 *             if any mantissa bit is set; subnormal d: 1 if d > 2^-127, else
 *             0). torchao divides, fl32(amax / max): the scale is the same for
 *             every finite amax (checked exhaustively when this was written).
 *   element   fl32(x * 2^(127-s)), then rounded to nearest even in the element
 *             format and saturated to its max (torchao clamps to +-max, then
 *             casts). Rounding twice is the same as rounding x * 2^(127-s)
 *             once: the fp32 product is exact unless it is below 2^-126, and
 *             anything that small is far below half the element's smallest
 *             subnormal (2^-10, 2^-17), so either way it becomes +-0.
 *   value     code * 2^(s-127): always exact in fp32 (the codes have at most
 *             4 significant bits, the smallest product is 2^-143), or inf
 *             past FLT_MAX.
 *
 * A block holding an inf or NaN gets scale 0xFF and NaN codes (mx.h).
 */
#include "internal.h"

/* m * 2^e (0 < m < 2^48: a significand or a product of two) rounded to
 * nearest even in fp32, subnormals and overflow to inf included; returns the
 * magnitude's bits. */
static uint32_t round_f32(uint64_t m, int e) {
    const int msb = 63 - __builtin_clzll(m);
    const int L = msb + e; /* the value is in [2^L, 2^(L+1)) */
    if (L > 127) return 0x7f800000u;
    const int lo = L < -126 ? -126 : L; /* the binade whose quantum applies */
    const int q = lo - 23;              /* quantum 2^q */
    uint64_t r;
    if (q <= e) {
        r = m << (e - q); /* exact */
    } else {
        const int sh = q - e;
        if (sh > 63) return 0; /* below 2^(q-15): rounds to 0 */
        const uint64_t rem = m & ((1ull << sh) - 1), half = 1ull << (sh - 1);
        r = m >> sh;
        r += (rem > half) | ((rem == half) & r);
    }
    /* normal: r holds the hidden bit, which adds one to the exponent field;
     * subnormal: the field is 0. A carry out of r moves to the next binade
     * (or to inf). */
    return ((uint32_t)(lo + 126) << 23) + (uint32_t)r;
}

/* A finite nonzero fp32 magnitude (bits a) as m * 2^e, m < 2^24. */
static uint64_t split_f32(uint32_t a, int *e) {
    const uint32_t f = a >> 23;
    *e = (f ? (int)f : 1) - 150;
    return f ? (a & 0x7fffffu) | 0x800000u : a;
}

/* fl32(x * 2^k) for fp32 bits x; inf and NaN pass through. */
static uint32_t mul_pow2(uint32_t x, int k) {
    const uint32_t a = x & 0x7fffffffu, sign = x & 0x80000000u;
    if (a == 0 || a >= 0x7f800000u) return x;
    const int f = (int)(a >> 23) + k;
    if (a >= 0x800000u && f >= 1 && f <= 254) return x + (uint32_t)(k * (1 << 23)); /* normal to normal: exact */
    int e;
    const uint64_t m = split_f32(a, &e);
    return sign | round_f32(m, e + k);
}

typedef struct {
    int emax;     /* floor(log2(max)) */
    uint32_t max; /* the largest finite value, fp32 bits */
    uint8_t nan;  /* the positive NaN code */
} elem_info;

static elem_info info(mp_dtype elem) {
    if (elem == MP_E4M3) return (elem_info){8, 0x43e00000u, 0x7f}; /* 448 */
    return (elem_info){15, 0x47600000u, 0x7e};                     /* 57344 */
}

/* The E8M0 scale of a finite amax (bits, sign clear). */
static uint8_t scale_ref(uint32_t amax, mp_dtype elem, mp_mx_rule rule) {
    const elem_info E = info(elem);
    if (rule == MP_MX_FLOOR) {
        const int s = (int)(amax >> 23) - E.emax;
        return (uint8_t)(s < 0 ? 0 : s);
    }
    static const float inv_max[2] = {1.0f / 448.0f, 1.0f / 57344.0f}; /* rounded to fp32 at compile time */
    if (amax == 0) return 0;
    int ea, ec;
    const uint64_t ma = split_f32(amax, &ea);
    const uint64_t mc = split_f32(mp_f32_bits(inv_max[elem == MP_E5M2]), &ec);
    const uint32_t d = round_f32(ma * mc, ea + ec);
    if (d < 0x800000u) return d > 0x400000u; /* subnormal (or zero) d: 2^-126 or 2^-127 */
    return (uint8_t)((d >> 23) + ((d & 0x7fffffu) != 0));
}

static void scales_scalar(uint8_t *s,           // (n,) E8M0
                          const uint32_t *amax, // (n,) fp32 bits, finite, sign clear
                          size_t n, mp_dtype elem, mp_mx_rule rule) {
    for (size_t i = 0; i < n; i++) s[i] = scale_ref(amax[i], elem, rule);
}

static void quantize_scalar(uint8_t *codes,   // (nb * 32,) elem
                            uint8_t *scales,  // (nb,) E8M0
                            const float *src, // (nb * 32,) fp32
                            size_t nb, mp_dtype elem, mp_mx_rule rule, mp_quant_stats *st) {
    const elem_info E = info(elem);
    for (size_t b = 0; b < nb; b++) {
        const float *x = src + b * MP_MX_BLOCK;
        uint8_t *c = codes + b * MP_MX_BLOCK;
        uint32_t amax = 0, fin = 0; /* all magnitudes (inf, NaN above every finite one); finite ones */
        unsigned nonfinite = 0;
        for (int i = 0; i < MP_MX_BLOCK; i++) {
            const uint32_t a = mp_f32_bits(x[i]) & 0x7fffffffu;
            amax = a > amax ? a : amax;
            if (a >= 0x7f800000u) nonfinite++;
            else fin = a > fin ? a : fin;
        }
        if (st) {
            st->nonfinite += nonfinite;
            mp_quant_amax(st, fin);
        }
        if (nonfinite) {
            scales[b] = 0xff;
            memset(c, E.nan, MP_MX_BLOCK);
            continue;
        }
        const uint8_t s = scale_ref(amax, elem, rule);
        scales[b] = s;
        for (int i = 0; i < MP_MX_BLOCK; i++) {
            const uint32_t xb = mp_f32_bits(x[i]);
            const uint32_t p = mul_pow2(xb, 127 - (int)s); /* the fp32 product */
            const uint32_t pa = p & 0x7fffffffu;
            int past; /* the product rounds past the element's max */
            if (elem == MP_E4M3) {
                c[i] = mp_f32_to_e4m3_sat(mp_bits_f32(p));
                past = (mp_f32_to_e4m3(mp_bits_f32(p)) & 0x7f) == 0x7f; /* NaN: overflow without saturation */
            } else {
                /* clamped first, as torchao does: then the cast cannot overflow */
                c[i] = mp_f32_to_e5m2(mp_bits_f32(pa > E.max ? (p & 0x80000000u) | E.max : p));
                past = (mp_f32_to_e5m2(mp_bits_f32(p)) & 0x7f) == 0x7c; /* inf */
            }
            if (st) {
                st->saturated += (uint64_t)past;
                st->flushed += (uint64_t)((xb & 0x7fffffffu) != 0 && (c[i] & 0x7f) == 0);
            }
        }
    }
    if (st) st->n += (uint64_t)nb * MP_MX_BLOCK;
}

static void dequantize_scalar(float *dst,            // (nb * 32,) fp32
                              const uint8_t *codes,  // (nb * 32,) elem
                              const uint8_t *scales, // (nb,) E8M0
                              size_t nb, mp_dtype elem) {
    for (size_t b = 0; b < nb; b++)
        for (int i = 0; i < MP_MX_BLOCK; i++) {
            const size_t j = b * MP_MX_BLOCK + (size_t)i;
            const float v = elem == MP_E4M3 ? mp_e4m3_to_f32(codes[j]) : mp_e5m2_to_f32(codes[j]);
            dst[j] =
                scales[b] == 0xff ? mp_bits_f32(0x7fc00000u) : mp_bits_f32(mul_pow2(mp_f32_bits(v), scales[b] - 127));
        }
}

const mp_mx_kernels mp_mx_scalar = {
    .quantize = quantize_scalar,
    .dequantize = dequantize_scalar,
    .scales = scales_scalar,
};

/* ---- the public calls: checks, then shares of whole blocks on threads, with
 * the kernels of the path in use read once at the entry ---- */

/* Below this many elements one thread is faster than waking a second. */
#define PARALLEL_MIN ((size_t)1 << 18)

typedef struct {
    const mp_mx_kernels *k;
    uint8_t *codes, *scales;
    const float *src;
    float *dst;
    const uint8_t *ccodes, *cscales;
    mp_dtype elem;
    mp_mx_rule rule;
    mp_quant_stats *part; /* (MP_MAX_THREADS,) or NULL */
} mx_job;

static void quantize_share(void *ctx, size_t i0, size_t i1, int t) {
    const mx_job *j = ctx;
    j->k->quantize(j->codes + i0, j->scales + i0 / MP_MX_BLOCK, j->src + i0, (i1 - i0) / MP_MX_BLOCK, j->elem, j->rule,
                   j->part ? &j->part[t] : NULL);
}

static void dequantize_share(void *ctx, size_t i0, size_t i1, int t) {
    (void)t;
    const mx_job *j = ctx;
    j->k->dequantize(j->dst + i0, j->ccodes + i0, j->cscales + i0 / MP_MX_BLOCK, (i1 - i0) / MP_MX_BLOCK, j->elem);
}

static mp_status check(const char *fn, const void *a, const void *b, const void *c, size_t n, mp_dtype elem) {
    if (elem != MP_E4M3 && elem != MP_E5M2) {
        const mp_format_info *f = mp_format(elem);
        if (f) return mp_error(MP_EINVAL, "%s: MX elements are e4m3 or e5m2, not %s", fn, f->name);
        return mp_error(MP_EINVAL, "%s: unknown element dtype %d", fn, (int)elem);
    }
    if (n % MP_MX_BLOCK)
        return mp_error(MP_EINVAL, "%s: n = %zu is not a multiple of the block size %d", fn, n, MP_MX_BLOCK);
    if (n && (!a || !b || !c)) return mp_error(MP_EINVAL, "%s: NULL buffer for %zu elements", fn, n);
    return MP_OK;
}

mp_status mp_mx_quantize(uint8_t *codes, uint8_t *scales, const float *src, size_t n, mp_dtype elem, mp_mx_rule rule,
                         mp_quant_stats *st) {
    const mp_status s = check("mp_mx_quantize", codes, scales, src, n, elem);
    if (s) return s;
    if (rule != MP_MX_FLOOR && rule != MP_MX_RCEIL)
        return mp_error(MP_EINVAL, "mp_mx_quantize: unknown scale rule %d", (int)rule);
    if (n == 0) return MP_OK;
    mp_quant_stats part[MP_MAX_THREADS];
    memset(part, 0, sizeof part);
    mx_job job = {.k = mp_kernels_current()->mx,
                  .codes = codes,
                  .scales = scales,
                  .src = src,
                  .elem = elem,
                  .rule = rule,
                  .part = st ? part : NULL};
    const int shares = mp_parallel_for(n, PARALLEL_MIN, MP_MX_BLOCK, quantize_share, &job);
    if (st)
        for (int t = 0; t < shares; t++) {
            st->n += part[t].n;
            st->saturated += part[t].saturated;
            st->flushed += part[t].flushed;
            st->nonfinite += part[t].nonfinite;
            mp_quant_amax(st, mp_f32_bits(part[t].amax));
        }
    return MP_OK;
}

mp_status mp_mx_dequantize(float *dst, const uint8_t *codes, const uint8_t *scales, size_t n, mp_dtype elem) {
    const mp_status s = check("mp_mx_dequantize", dst, codes, scales, n, elem);
    if (s || n == 0) return s;
    mx_job job = {.k = mp_kernels_current()->mx, .dst = dst, .ccodes = codes, .cscales = scales, .elem = elem};
    mp_parallel_for(n, PARALLEL_MIN, MP_MX_BLOCK, dequantize_share, &job);
    return MP_OK;
}

mp_status mp_mx_rule_parse(const char *name, mp_mx_rule *out) {
    if (name && out) {
        if (strcmp(name, "floor") == 0) {
            *out = MP_MX_FLOOR;
            return MP_OK;
        }
        if (strcmp(name, "rceil") == 0) {
            *out = MP_MX_RCEIL;
            return MP_OK;
        }
    }
    return mp_error(MP_EINVAL, "unknown MX scale rule '%s' (expected floor or rceil)", name ? name : "(null)");
}
