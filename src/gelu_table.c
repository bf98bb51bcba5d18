/* gelu_table.c - the GELU forms and their derivatives for every 16-bit input
 * (a bf16 or fp16 code), for the GEMM epilogue's post steps, whose GELU input
 * is C's value as stored in a half format: 65,536 inputs, so each result is
 * read from a table instead of computed in fp64 (gelu_kernels.h; on the AMX
 * Xeon the fp64 forms were a tenth of the GPT's bf16 step).
 *
 * The same bits as the kernels by construction: y[code] is the portable
 * kernel's result for the code's fp32 value, and d[code] the fp64 derivative
 * the kernel multiplies by (gk_tanh_d, gk_erf_d), so g * d[code] rounded once
 * to fp32 is the kernel's backward; a NaN x gives x quieted, as the kernel
 * (mp_gelu_table_bwd1). Each table is built on first use (2.6 ms for a
 * forward and its derivative on the AMX Xeon), once per process. */
#include <pthread.h>
#include <stdlib.h>

#include "internal.h"
#include "cpu/gelu_kernels.h"

/* [form: 0 tanh, 1 erf][format: 0 bf16, 1 fp16] */
static mp_gelu_table *tables[2][2];
static pthread_once_t once[2][2] = {{PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT}, {PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT}};

static float widen(int f16, uint16_t code) { return f16 ? mp_f16_to_f32(code) : mp_bf16_to_f32(code); }

static void build(int erf, int f16) {
    mp_gelu_table *t = malloc(sizeof *t);
    if (!t) return; /* the callers fall back to the kernels */
    const double lim = gk_lim;
    for (uint32_t c = 0; c < 65536; c++) {
        const float x = widen(f16, (uint16_t)c);
        t->y[c] = x;
        const double xc = gk_hi(gk_lo(x, lim), lim);
        t->d[c] = erf ? gk_erf_d(xc) : gk_tanh_d(xc);
    }
    (erf ? mp_gelu_scalar.erf_fwd : mp_gelu_scalar.tanh_fwd)(t->y, 65536);
    tables[erf][f16] = t;
}

static void build_tanh_bf16(void) { build(0, 0); }
static void build_tanh_f16(void) { build(0, 1); }
static void build_erf_bf16(void) { build(1, 0); }
static void build_erf_f16(void) { build(1, 1); }

const mp_gelu_table *mp_gelu_table_of(int erf, mp_dtype t) {
    if (t != MP_BF16 && t != MP_F16) return NULL;
    static void (*const builders[2][2])(void) = {{build_tanh_bf16, build_tanh_f16}, {build_erf_bf16, build_erf_f16}};
    const int e = erf != 0, f = t == MP_F16;
    pthread_once(&once[e][f], builders[e][f]);
    return tables[e][f];
}
