/* gelu_avx2.c - the GELU kernels of gelu_kernels.h built for AVX2 (4 doubles a register); the
 * same source and operations as the portable build in ops.c, hence the same bits. */
#include "../internal.h"
#include "gelu_kernels.h"

const mp_gelu_kernels mp_gelu_avx2 = MP_GELU_KERNELS;
