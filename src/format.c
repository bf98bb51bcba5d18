/* format.c - scalar conversions between fp32 and fp16, bf16, E4M3, E5M2, E8M0, E2M1.
 *
 * Integer arithmetic only: results do not depend on the FPU rounding mode or on
 * FTZ/DAZ. fp16, E5M2, E4M3 and E2M1 share one narrowing and one widening
 * routine, parameterised by the format's field widths and its overflow/NaN
 * encodings; the compiler specialises each call since the parameters are
 * constants. E8M0 (a bare exponent) has its own few lines.
 */
#include <string.h>

#include "internal.h"

/* fp32 bits -> a narrow format with E exponent bits, M mantissa bits and the
 * given bias. max_code is the largest finite magnitude code; ovf_code what a
 * finite value that rounds past it becomes; inf_code what +-inf becomes.
 * ieee_nan: NaN keeps its top payload bits and gets the quiet bit; otherwise
 * the format has one NaN, all exponent and mantissa bits set (E4M3). E2M1,
 * which has no NaN, handles NaN before calling this. */
static inline uint32_t narrow(uint32_t x, const int E, const int M, const int bias, const uint32_t max_code,
                              const uint32_t ovf_code, const uint32_t inf_code, const int ieee_nan) {
    const uint32_t sign = (x >> 31) << (E + M);
    const uint32_t a = x & 0x7fffffffu;
    if (a >= 0x7f800000u) {
        if (a == 0x7f800000u) return sign | inf_code;
        if (ieee_nan) return sign | (((1u << E) - 1) << M) | (1u << (M - 1)) | ((a & 0x7fffffu) >> (23 - M));
        return sign | ((1u << (E + M)) - 1);
    }
    /* fp32 zeros and subnormals (< 2^-126) are below half the smallest
     * subnormal of every narrow format here: they round to a signed zero. */
    if ((a >> 23) == 0) return sign;
    const int e = (int)(a >> 23) - 127 + bias; /* biased exponent in the target */
    uint32_t m = a & 0x7fffffu;
    uint32_t v;
    int shift;
    if (e >= 1) {
        if (e > (int)(max_code >> M)) return sign | ovf_code;
        shift = 23 - M;
        v = ((uint32_t)e << M) | (m >> shift);
    } else {
        shift = 24 - M - e;          /* quanta of the subnormal range */
        if (shift > 24) return sign; /* below half the smallest subnormal */
        m |= 0x800000u;
        v = m >> shift;
    }
    const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    v += (rem > half) | ((rem == half) & v); /* ties to even; carries into the exponent */
    return v > max_code ? sign | ovf_code : sign | v;
}

/* What the all-ones exponent means when widening: inf and NaNs with payloads
 * (IEEE: fp16, E5M2), one NaN at all-ones mantissa (E4M3), nothing special
 * (E2M1: no inf, no NaN). */
enum { TOP_IEEE, TOP_ONE_NAN, TOP_FINITE };

/* A narrow format (as above) -> fp32 bits, exact. */
static inline uint32_t widen(uint32_t h, const int E, const int M, const int bias, const int top) {
    const uint32_t sign = ((h >> (E + M)) & 1u) << 31;
    const uint32_t e = (h >> M) & ((1u << E) - 1), m = h & ((1u << M) - 1);
    if (e == (1u << E) - 1) {
        if (top == TOP_IEEE) {
            if (m == 0) return sign | 0x7f800000u;
            return sign | 0x7fc00000u | (m << (23 - M));
        }
        if (top == TOP_ONE_NAN && m == (1u << M) - 1) return sign | 0x7fc00000u;
    }
    if (e != 0) return sign | ((e - bias + 127) << 23) | (m << (23 - M));
    if (m == 0) return sign;
    const int p = 31 - __builtin_clz(m); /* leading bit of the subnormal */
    return sign | ((uint32_t)(p + 1 - bias - M + 127) << 23) | ((m << (23 - p)) & 0x7fffffu);
}

uint16_t mp_f32_to_f16(float x) { return (uint16_t)narrow(mp_f32_bits(x), 5, 10, 15, 0x7bffu, 0x7c00u, 0x7c00u, 1); }
float mp_f16_to_f32(uint16_t h) { return mp_bits_f32(widen(h, 5, 10, 15, TOP_IEEE)); }

uint8_t mp_f32_to_e5m2(float x) { return (uint8_t)narrow(mp_f32_bits(x), 5, 2, 15, 0x7bu, 0x7cu, 0x7cu, 1); }
float mp_e5m2_to_f32(uint8_t v) { return mp_bits_f32(widen(v, 5, 2, 15, TOP_IEEE)); }

uint8_t mp_f32_to_e4m3(float x) { return (uint8_t)narrow(mp_f32_bits(x), 4, 3, 7, 0x7eu, 0x7fu, 0x7fu, 0); }
uint8_t mp_f32_to_e4m3_sat(float x) { return (uint8_t)narrow(mp_f32_bits(x), 4, 3, 7, 0x7eu, 0x7eu, 0x7eu, 0); }
float mp_e4m3_to_f32(uint8_t v) { return mp_bits_f32(widen(v, 4, 3, 7, TOP_ONE_NAN)); }

/* E2M1 (ml_dtypes.float4_e2m1fn): the generic rounding with every overflow,
 * +-inf included, saturating to +-6. E2M1 has no NaN: ml_dtypes writes its
 * quiet_NaN, the code 0x8 (-0), and then applies the input's sign as a
 * negation (which flips bit 3), so +NaN -> 0x8 (-0) and -NaN -> 0x0 (+0). */
uint8_t mp_f32_to_e2m1(float x) {
    const uint32_t u = mp_f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint8_t)((~u >> 31) << 3);
    return (uint8_t)narrow(u, 2, 1, 1, 0x7u, 0x7u, 0x7u, 0);
}
/* Only the low 4 bits are read: the high half of the byte is ignored. */
float mp_e2m1_to_f32(uint8_t v) { return mp_bits_f32(widen(v & 0xfu, 2, 1, 1, TOP_FINITE)); }

/* E8M0 (ml_dtypes.float8_e8m0fnu): the code is a biased exponent, value
 * 2^(code - 127). A positive normal fp32 already has that exponent field: it
 * rounds up one when its mantissa is at least 0.5 (x >= 1.5 * 2^e: nearest
 * power of two, ties up), and 255 is NaN (x >= 1.5 * 2^127 overflows). Positive
 * fp32 subnormals are below 2^-126: those from 1.5 * 2^-127 (bits 0x00600000)
 * up round to 2^-126 (code 1), the rest to 2^-127 (code 0; there is no zero).
 * +-0, negative numbers, +-inf and NaN give NaN (0xFF). */
uint8_t mp_f32_to_e8m0(float x) {
    const uint32_t u = mp_f32_bits(x);
    if (u == 0 || u >= 0x7f800000u) return 0xffu; /* +0, sign set, +inf, NaN */
    if ((u >> 23) == 0) return u >= 0x00600000u;
    const uint32_t c = (u >> 23) + ((u >> 22) & 1u);
    return c > 254u ? 0xffu : (uint8_t)c;
}
float mp_e8m0_to_f32(uint8_t v) {
    if (v == 0xffu) return mp_bits_f32(0x7fc00000u);
    return mp_bits_f32(v == 0 ? 0x00400000u : (uint32_t)v << 23); /* 2^-127 is an fp32 subnormal */
}

/* bf16 has fp32's exponent: rounding the low 16 bits away is the whole job,
 * subnormals and overflow to inf included. */
uint16_t mp_f32_to_bf16(float x) { return mp_bf16_round(x); }
float mp_bf16_to_f32(uint16_t h) { return mp_bf16_widen(h); }

static const mp_format_info formats[MP_NUM_DTYPES] = {
    {MP_F32, "fp32", 4, 8, 23, 127, 1, 0x1.fffffep127, 0x1p-126, 0x1p-149, 0x1p-23},
    {MP_F16, "fp16", 2, 5, 10, 15, 1, 65504.0, 0x1p-14, 0x1p-24, 0x1p-10},
    {MP_BF16, "bf16", 2, 8, 7, 127, 1, 0x1.fep127, 0x1p-126, 0x1p-133, 0x1p-7},
    {MP_E4M3, "e4m3", 1, 4, 3, 7, 0, 448.0, 0x1p-6, 0x1p-9, 0x1p-3},
    {MP_E5M2, "e5m2", 1, 5, 2, 15, 1, 57344.0, 0x1p-14, 0x1p-16, 0x1p-2},
    /* no subnormals: min_subnormal = min_normal (ml_dtypes.finfo); eps = 1 (1 -> 2) */
    {MP_E8M0, "e8m0", 1, 8, 0, 127, 0, 0x1p127, 0x1p-127, 0x1p-127, 1.0},
    /* one byte per element in mixprec's buffers (the code in the low 4 bits) */
    {MP_E2M1, "e2m1", 1, 2, 1, 1, 0, 6.0, 1.0, 0.5, 0.5},
};

const mp_format_info *mp_format(mp_dtype t) {
    if ((unsigned)t >= MP_NUM_DTYPES) return NULL;
    return &formats[t];
}

mp_status mp_dtype_parse(const char *name, mp_dtype *out) {
    static const struct {
        const char *name;
        mp_dtype t;
    } names[] = {
        {"fp32", MP_F32},
        {"f32", MP_F32},
        {"float32", MP_F32},
        {"fp16", MP_F16},
        {"f16", MP_F16},
        {"float16", MP_F16},
        {"half", MP_F16},
        {"bf16", MP_BF16},
        {"bfloat16", MP_BF16},
        {"e4m3", MP_E4M3},
        {"fp8e4m3", MP_E4M3},
        {"float8_e4m3fn", MP_E4M3},
        {"e5m2", MP_E5M2},
        {"fp8e5m2", MP_E5M2},
        {"float8_e5m2", MP_E5M2},
        {"e8m0", MP_E8M0},
        {"float8_e8m0fnu", MP_E8M0},
        {"e2m1", MP_E2M1},
        {"fp4", MP_E2M1},
        {"float4_e2m1fn", MP_E2M1},
    };
    for (size_t i = 0; name && i < sizeof names / sizeof names[0]; i++)
        if (strcmp(name, names[i].name) == 0) {
            *out = names[i].t;
            return MP_OK;
        }
    return mp_error(MP_EINVAL, "unknown format '%s' (expected fp32, fp16, bf16, e4m3, e5m2, e8m0 or e2m1)",
                    name ? name : "(null)");
}
