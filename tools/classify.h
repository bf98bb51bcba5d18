/* classify.h - what happened to one value cast to a format (for formats/cast). */
#ifndef MIXPREC_CLASSIFY_H
#define MIXPREC_CLASSIFY_H

#include <stdint.h>

#include "mixprec/mixprec.h"

typedef struct cast_result {
    uint32_t bits;      /* the code in the destination format */
    float value;        /* the code widened back to fp32 */
    const char *status; /* "exact", "rounded", "subnormal", "underflow", "overflow", "saturated",
                           "invalid" (E8M0: zero or negative), "nan" */
} cast_result;

/* Casts x to t (E4M3 saturating if sat; E2M1 always saturates) and classifies
 * it with mp_convert's statistics, so the words match the counts the library
 * reports. */
cast_result cast_one(float x, mp_dtype t, int sat);

#endif
