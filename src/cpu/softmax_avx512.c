/* softmax_avx512.c - e^x and the softmax rows' loops of softmax_kernels.h
 * built for AVX-512 (16 floats a register); the same source and operations as
 * the portable build, hence the same bits. */
#include "../internal.h"
#include "softmax_kernels.h"

const mp_softmax_kernels mp_softmax_avx512 = MP_SOFTMAX_KERNELS;
