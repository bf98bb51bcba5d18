/* softmax_scalar.c - e^x and the softmax rows' loops of softmax_kernels.h built
 * for the baseline CPU (on x86-64: SSE2, fmaf a libm call); the portable path,
 * which the AVX2 and AVX-512 builds of the same source equal bit for bit. */
#include "../internal.h"
#include "softmax_kernels.h"

const mp_softmax_kernels mp_softmax_scalar = MP_SOFTMAX_KERNELS;
