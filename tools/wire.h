/* wire.h - the gradients' format on the wire for the ranks' all-reduce
 * (dist.c, `--allreduce fp32|bf16|fp16`). No MPI here: packing, the combine
 * that MPI's user-defined reduction calls, and unpacking, each exact:
 *
 *   pack      each fp32 gradient rounded once into the wire format (RNE,
 *             mp_convert: an fp32 value past the format's range becomes inf,
 *             one below its smallest subnormal 0; the counts in *stats), and
 *             one more element, the flag: 1 when this rank's fp32 gradients
 *             hold an inf or NaN, else 0;
 *   combine   inout[i] = round(widen(in[i]) + widen(inout[i])): both widened
 *             to fp32 (exact), added in fp32, rounded once (RNE) into the wire
 *             format. A sum past the format's range becomes inf. The flags add
 *             up to the number of ranks whose gradients were not finite
 *             (exact up to 256 ranks in bf16, 2048 in fp16);
 *   unpack    widened back to fp32 (exact).
 *
 * fp32 on the wire needs none of it (MPI_FLOAT, MPI_SUM). */
#ifndef MIXPREC_TOOLS_WIRE_H
#define MIXPREC_TOOLS_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "mixprec/mixprec.h"

/* Parses "fp32", "bf16" or "fp16" into *t; MP_EINVAL otherwise. */
mp_status wire_parse(const char *s, mp_dtype *t);

/* Packs the count arrays x[i] (n[i] fp32 values each) into dst (t: MP_BF16 or
 * MP_F16), back to back, then the flag: sum of n[i] + 1 elements. The
 * conversion's counts are added to *stats (may be NULL). */
void wire_pack(uint16_t *dst, mp_dtype t, float *const *x, const size_t *n, size_t count, mp_convert_stats *stats);

/* inout[i] = round(widen(in[i]) + widen(inout[i])) for n elements of t. */
void wire_combine(const uint16_t *in, uint16_t *inout, size_t n, mp_dtype t);

/* Unpacks src (wire_pack's layout) into the arrays x[i]; returns the flags'
 * sum (the ranks whose fp32 gradients were not finite) and sets *nonfinite
 * when the unpacked sums hold an inf or NaN. */
int wire_unpack(float *const *x, const size_t *n, size_t count, const uint16_t *src, mp_dtype t, int *nonfinite);

#endif
