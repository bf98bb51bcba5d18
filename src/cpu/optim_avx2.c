/* optim_avx2.c - the optimizer loops of optim_kernels.h, built with AVX2 + FMA
 * flags so the compiler vectorizes them; same bits as the portable build. */
#define MP_OPTIM_FMA /* the unbiased root by FMAs: optim_kernels.h */
#include "../optim_kernels.h"

const mp_optim_kernels mp_optim_avx2 = MP_OPTIM_KERNELS(mp_dequant_avx2, mp_quant_avx2, NULL);
