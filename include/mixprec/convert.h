/* mixprec/convert.h - bulk conversion between formats, with exact statistics.
 *
 * mp_convert converts n elements from any format to any format (through fp32;
 * widening to fp32 is exact, so the only rounding is the final one). The
 * result is bit-identical to calling the scalar functions of format.h on each
 * element, on every CPU path (scalar, AVX2+F16C, AVX-512, AVX512_BF16) and for
 * every input, subnormals and NaNs included.
 *
 * Large conversions run on two threads (or mp_set_threads()).
 */
#ifndef MIXPREC_CONVERT_H
#define MIXPREC_CONVERT_H

#include <stddef.h>
#include <stdint.h>

#include "format.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What happened to values on the way into the destination format. Counts are
 * added to, never reset, so one struct can gather a whole model. Infinite
 * inputs are in none of the counts (mp_convert_count counts them as overflow).
 *
 * Into E2M1 (saturating, no inf, no NaN): underflow, subnormal (+-0.5) as
 * above; overflow counts the finite inputs with |x| >= 7, which round past 6
 * (7 is a tie that goes to the even 8) and are saturated to +-6 (6 < |x| < 7
 * round to 6 as any value rounds: not counted); nan counts NaN inputs, which
 * E2M1 stores as a zero (format.h).
 * Into E8M0 (no zero, no subnormals, no sign, 0xFF = NaN): underflow and
 * subnormal are never counted (a positive value below 2^-127 becomes 2^-127);
 * overflow counts the positive finite inputs that became NaN (>= 1.5 * 2^127);
 * nan counts NaN inputs AND the finite inputs <= 0 (+-0 and negative numbers,
 * which E8M0 cannot hold and which become NaN): every 0xFF result from a finite
 * or NaN input is in exactly one of overflow and nan. */
typedef struct mp_convert_stats {
    uint64_t underflow; /* nonzero finite inputs that became +-0 */
    uint64_t subnormal; /* results that are subnormal in the destination format */
    uint64_t overflow;  /* finite inputs that became inf or NaN; into E2M1: that saturated */
    uint64_t nan;       /* NaN inputs; into E8M0 also finite inputs <= 0 */
    float amax;         /* the largest finite magnitude among the results (mp_amax of what was
                           stored); 0 when there is none. Counted wherever the other fields are,
                           so a tensor's amax needs no pass of its own */
} mp_convert_stats;

/* Converts n elements of src (src_type) into dst (dst_type). src and dst must
 * not overlap unless they are the same pointer and the types have the same size.
 * stats may be NULL. Returns MP_EINVAL for an unknown dtype or a NULL buffer
 * with n > 0 (or dst == src with formats of different sizes); nothing is
 * written then, and nothing else fails.
 * E4M3 destinations use the non-saturating rule (overflow -> NaN).
 * Every dtype is accepted, E8M0 and E2M1 included (one code per byte; E2M1
 * sources are read from the low 4 bits, E2M1 results have the high 4 bits 0):
 * those two always take the scalar functions of format.h, on every CPU path. */
mp_status mp_convert(void *dst, mp_dtype dst_type, const void *src, mp_dtype src_type, size_t n,
                     mp_convert_stats *stats);

/* Adds b's counts to a; a's amax becomes the larger of the two. */
void mp_convert_stats_add(mp_convert_stats *a, const mp_convert_stats *b);

/* The largest finite magnitude among n elements of x (type t: fp32, fp16 or
 * bf16); infinities and NaNs are skipped (mp_convert counts them); 0 when
 * there is none. Another type (fp8, E8M0, E2M1, or not a dtype): NaN, with
 * MP_EINVAL's message in mp_last_error(); x is not read. */
float mp_amax(const void *x, mp_dtype t, size_t n);

/* What storing n elements of x (type t) multiplied by scale (in fp32) into
 * fmt would do, without storing them: counts added to *stats as mp_convert's,
 * with two differences: underflow counts every nonzero finite input whose
 * product is 0 in fmt (the multiply's own underflow included), and overflow
 * counts infinite inputs too (a value already lost). fmt: fp32, fp16, bf16,
 * e4m3 (non-saturating), e5m2 or e2m1 (the counts above); not e8m0, which
 * holds scales, not scaled values. x: any dtype. MP_EINVAL for a bad dtype,
 * fmt e8m0, or a scale that is not finite and > 0 (also for a NULL stats, or
 * a NULL x with n > 0); nothing counted then. */
mp_status mp_convert_count(mp_dtype fmt, const void *x, mp_dtype t, size_t n, float scale, mp_convert_stats *stats);

/* The values of n elements as they are in their own format. */
typedef struct mp_value_counts {
    uint64_t zero;      /* +0 and -0 */
    uint64_t subnormal; /* subnormal in t */
    uint64_t inf;       /* +-inf */
    uint64_t nan;
    float amax; /* the largest finite magnitude (mp_amax); 0 when none */
} mp_value_counts;

/* Counts n elements of x (type t: fp32, fp16 or bf16) into *c (overwritten).
 * MP_EINVAL for another type or a NULL buffer with n > 0. */
mp_status mp_count_values(const void *x, mp_dtype t, size_t n, mp_value_counts *c);

#ifdef __cplusplus
}
#endif
#endif
