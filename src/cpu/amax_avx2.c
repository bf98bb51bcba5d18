/* amax_avx2.c - amax_kernels.h built for AVX2 (-O3 vectorizes the integer max). */
#include "../internal.h"
#include "../amax_kernels.h"

const mp_amax_kernels mp_amax_avx2 = MP_AMAX_KERNELS;
