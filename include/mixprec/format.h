/* mixprec/format.h - scalar number formats: fp32, fp16, bf16, fp8 (E4M3, E5M2),
 * the MX scale E8M0 and fp4 E2M1.
 *
 * fp16, bf16, E4M3, E5M2 and E2M1 round to nearest, ties to even, produce and
 * read subnormals exactly (never flush to zero) and keep the sign of zero.
 * Every conversion uses integer arithmetic only, so it gives the same bits
 * whatever the FPU rounding mode and FTZ/DAZ settings are.
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
 *  E8M0  OCP MX scale (ml_dtypes.float8_e8m0fnu): 8 exponent bits (bias 127),
 *        no sign, no mantissa, no zero, no inf; code c is 2^(c - 127), so
 *        2^-127 (0x00) .. 2^127 (0xFE); 0xFF is NaN. A positive x becomes the
 *        nearest power of two, ties (x = 1.5 * 2^k) rounding UP: 0.75 -> 1,
 *        3 -> 4, 7 -> 8. Below 2^-127 there is nothing smaller: positive x
 *        under 1.5 * 2^-127 gives 2^-127 (0x00), so 2^-128 -> 0x00. Overflow
 *        (x >= 1.5 * 2^127) gives NaN. +-0, every negative number, +-inf and
 *        NaN give NaN (0xFF). Widening: 0x00 is the fp32 subnormal 2^-127;
 *        0xFF gives the quiet NaN 0x7fc00000.
 *  E2M1  OCP MX fp4 (ml_dtypes.float4_e2m1fn): 1 sign, 2 exponent (bias 1),
 *        1 mantissa bit: +-{0, 0.5, 1, 1.5, 2, 3, 4, 6}, 0.5 the one
 *        subnormal; no inf, no NaN. Ties to even: 0.25 -> 0, 0.75 -> 1,
 *        1.25 -> 1, 5 -> 4. Saturating: anything past 6, +-inf included, gives
 *        +-6. One code per byte in the low 4 bits (S.EE.M); mp_e2m1_to_f32
 *        ignores the high 4 bits, and narrowing leaves them 0.
 *
 * NaN stays NaN (but in E2M1, below), keeps its sign and comes out quiet:
 * narrowing keeps the top payload bits and sets the quiet bit (as x86
 * vcvtps2ph does); widening shifts the payload up and sets the quiet bit.
 * E4M3 has a single NaN code per sign, E8M0 a single one without sign (0xFF).
 *
 * E2M1 has no NaN, and mixprec follows ml_dtypes 0.7 exactly, surprising as
 * its choice is: +NaN (sign bit clear) becomes 0x8, which is -0, and -NaN
 * becomes 0x0, +0. (ml_dtypes takes its quiet_NaN, 0x8, and negates it for a
 * negative input.) A NaN is thus silently a zero of the OPPOSITE sign; count
 * NaNs before (mp_convert's stats do) if they matter.
 *
 * The fp8 and fp4 conversions equal ml_dtypes 0.7 on all 2^32 fp32 inputs and
 * every code (E4M3: float8_e4m3fn, which also gives NaN on overflow; E4M3
 * saturating: np.clip to +-448, then float8_e4m3fn; E5M2: float8_e5m2; E8M0:
 * float8_e8m0fnu; E2M1: float4_e2m1fn), bit for bit but for one thing: E5M2
 * NaNs keep their payload here, where ml_dtypes writes the canonical 0x7e/0xfe
 * and widens to 0x7fc00000 (the sign agrees). bench/crosscheck_formats.py
 * checks it.
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
    MP_E5M2,
    MP_E8M0, /* OCP MX scale: unsigned powers of two 2^-127 .. 2^127, 0xFF = NaN */
    MP_E2M1, /* OCP MX fp4: +-{0, 0.5, 1, 1.5, 2, 3, 4, 6}; one code per byte (low 4 bits) */
    MP_U8    /* raw bytes, no number format (mp_format: NULL): quantized optimizer states' codes in
                checkpoints (safetensors "U8") */
} mp_dtype;

#define MP_NUM_DTYPES 7 /* the number formats: MP_F32 .. MP_E2M1 */

uint16_t mp_f32_to_f16(float x);
float mp_f16_to_f32(uint16_t h);
uint16_t mp_f32_to_bf16(float x);
float mp_bf16_to_f32(uint16_t h);
uint8_t mp_f32_to_e4m3(float x);
uint8_t mp_f32_to_e4m3_sat(float x); /* overflow and +-inf clamp to +-448 */
float mp_e4m3_to_f32(uint8_t v);
uint8_t mp_f32_to_e5m2(float x);
float mp_e5m2_to_f32(uint8_t v);
uint8_t mp_f32_to_e8m0(float x); /* nearest power of two, ties up; x <= 0, inf, NaN -> 0xFF */
float mp_e8m0_to_f32(uint8_t v); /* 2^(v - 127); 0xFF -> NaN */
uint8_t mp_f32_to_e2m1(float x); /* saturating to +-6; +NaN -> 0x8 (-0), -NaN -> 0x0 */
float mp_e2m1_to_f32(uint8_t v); /* reads the low 4 bits of v */

/* Limits of a format, the numbers numpy.finfo (and ml_dtypes.finfo) print. */
typedef struct mp_format_info {
    mp_dtype dtype;
    const char *name; /* "fp32", "fp16", "bf16", "e4m3", "e5m2", "e8m0", "e2m1" */
    size_t size;      /* bytes per element in a buffer (E2M1: 1, a code per byte) */
    int exponent_bits;
    int mantissa_bits;    /* stored fraction bits, without the hidden bit */
    int bias;             /* exponent bias */
    int has_inf;          /* 0 for E4M3, E8M0 and E2M1 */
    double max;           /* largest finite value */
    double min_normal;    /* smallest positive normal value (finfo.tiny) */
    double min_subnormal; /* smallest positive subnormal value; E8M0 has no
                             subnormals: 2^-127, its min_normal, as
                             ml_dtypes.finfo's smallest_subnormal says */
    double eps;           /* distance from 1.0 to the next larger value
                             (E8M0: 1, from 1 to 2; E2M1: 0.5) */
} mp_format_info;

/* The limits of `t`, or NULL if `t` is not an mp_dtype. */
const mp_format_info *mp_format(mp_dtype t);

/* Parses "fp32"/"f32"/"float32", "fp16"/"f16"/"float16"/"half", "bf16"/"bfloat16",
 * "e4m3"/"fp8e4m3"/"float8_e4m3fn", "e5m2"/"fp8e5m2"/"float8_e5m2",
 * "e8m0"/"float8_e8m0fnu", "e2m1"/"fp4"/"float4_e2m1fn"
 * into *out. MP_EINVAL (with a message) for any other name. */
mp_status mp_dtype_parse(const char *name, mp_dtype *out);

#ifdef __cplusplus
}
#endif
#endif
