/* optim_avx512.c - the optimizer loops of optim_kernels.h, built with AVX-512
 * flags so the compiler vectorizes them; same bits as the portable build. */
#define MP_OPTIM_FMA /* the unbiased root by FMAs: optim_kernels.h */
#include "../optim_kernels.h"

const mp_optim_kernels mp_optim_avx512 = MP_OPTIM_KERNELS(mp_dequant_avx512, mp_quant_avx512, mp_adamw_qstate_avx512);
