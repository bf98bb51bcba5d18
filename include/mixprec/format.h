/* mixprec/format.h - scalar number formats: fp32, fp16, bf16, fp8 (E4M3, E5M2).
 *
 * All conversions round to nearest, ties to even, produce and read subnormals
 * exactly (never flush to zero) and keep the sign of zero. They use integer
 * arithmetic only, so they give the same bits whatever the FPU rounding mode
 * and FTZ/DAZ settings are.
 *
 *  fp16  IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits.
 *        Overflow gives +-inf.
 *  bf16  the top 16 bits of an fp32 (8 exponent, 7 mantissa bits), rounded.
 *        Overflow gives +-inf.
 *  E5M2  OCP FP8: 5 exponent (bias 15), 2 mantissa bits, has inf; max 57344.
 *        Overflow gives +-inf.
 *  E4M3  OCP FP8 "E4M3FN": 4 exponent (bias 7), 3 mantissa bits, no inf,
 *        one NaN per sign (S.1111.111); max 448. Overflow (a value that rounds
 *        past 448) and +-inf give NaN; mp_f32_to_e4m3_sat clamps both to +-448.
 *
 * NaN stays NaN, keeps its sign and comes out quiet: narrowing keeps the top
 * payload bits and sets the quiet bit (as x86 vcvtps2ph does); widening shifts
 * the payload up and sets the quiet bit. E4M3 has a single NaN code per sign.
 */
#ifndef MIXPREC_FORMAT_H
#define MIXPREC_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mp_dtype {
    MP_F32 = 0,
    MP_F16,
    MP_BF16,
    MP_E4M3,
    MP_E5M2
} mp_dtype;

#define MP_NUM_DTYPES 5

uint16_t mp_f32_to_f16(float x);
float    mp_f16_to_f32(uint16_t h);
uint16_t mp_f32_to_bf16(float x);
float    mp_bf16_to_f32(uint16_t h);
uint8_t  mp_f32_to_e4m3(float x);
uint8_t  mp_f32_to_e4m3_sat(float x); /* overflow and +-inf clamp to +-448 */
float    mp_e4m3_to_f32(uint8_t v);
uint8_t  mp_f32_to_e5m2(float x);
float    mp_e5m2_to_f32(uint8_t v);

/* Limits of a format, the numbers numpy.finfo (and ml_dtypes.finfo) print. */
typedef struct mp_format_info {
    mp_dtype    dtype;
    const char *name;          /* "fp32", "fp16", "bf16", "e4m3", "e5m2" */
    size_t      size;          /* bytes per element */
    int         exponent_bits;
    int         mantissa_bits; /* stored fraction bits, without the hidden bit */
    int         bias;          /* exponent bias */
    int         has_inf;       /* 0 for E4M3 */
    double      max;           /* largest finite value */
    double      min_normal;    /* smallest positive normal value (finfo.tiny) */
    double      min_subnormal; /* smallest positive subnormal value */
    double      eps;           /* distance from 1.0 to the next larger value */
} mp_format_info;

/* The limits of `t`, or NULL if `t` is not an mp_dtype. */
const mp_format_info *mp_format(mp_dtype t);

/* Parses "fp32"/"f32"/"float32", "fp16"/"f16"/"float16"/"half", "bf16"/"bfloat16",
 * "e4m3"/"fp8e4m3"/"float8_e4m3fn", "e5m2"/"fp8e5m2"/"float8_e5m2"
 * into *out. MP_EINVAL (with a message) for any other name. */
mp_status mp_dtype_parse(const char *name, mp_dtype *out);

#ifdef __cplusplus
}
#endif
#endif
