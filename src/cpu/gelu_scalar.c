/* gelu_scalar.c - the GELU kernels of gelu_kernels.h built for the baseline
 * CPU (on x86-64: SSE2, 2 doubles a register); the portable path, which the
 * AVX2 and AVX-512 builds of the same source equal bit for bit. */
#include "../internal.h"
#include "gelu_kernels.h"

const mp_gelu_kernels mp_gelu_scalar = MP_GELU_KERNELS;
