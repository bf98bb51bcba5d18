/* kernels.c - the kernel context of each CPU path (internal.h): which
 * conversion, amax, unscale, optimizer, GELU, softmax, ReLU, MX, recipe and GEMM
 * kernels run. Each path takes the best kernel its instructions allow; a path
 * without its own kernel for a job names the next one down. */
#include "internal.h"

static const mp_kernels ctx_scalar = {
    .isa = MP_ISA_SCALAR,
    .convert = &mp_convert_scalar,
    .amax = &mp_amax_scalar,
    .unscale = &mp_unscale_scalar,
    .optim = &mp_optim_scalar,
    .gelu = &mp_gelu_scalar,
    .softmax = &mp_softmax_scalar,
    .relu16 = mp_relu16_scalar,
    .mx = &mp_mx_scalar,
    .recipe = &mp_recipe_portable,
    .gemm = &mp_gemm_scalar,
    .gemm_bf16 = &mp_gemm_scalar,
};

#ifdef MP_X86
/* 20 chains a turn (src/cpu/peak.h): FMAs of 8 or 16 lanes (2 flops each), vdpbf16ps of 16 lanes (2 products
 * of 2 flops each); 4 TDPBF16PS of 16 x 16 x 32 products a turn */
static const mp_peak_kernels peak_avx2 = {.fma = mp_peak_fma_avx2, .fma_flops = 20.0 * 8 * 2};
static const mp_peak_kernels peak_avx512 = {.fma = mp_peak_fma_avx512, .fma_flops = 20.0 * 16 * 2};
static const mp_peak_kernels peak_avx512bf16 = {.fma = mp_peak_fma_avx512,
                                                .dpbf16 = mp_peak_dpbf16_avx512,
                                                .fma_flops = 20.0 * 16 * 2,
                                                .dpbf16_flops = 20.0 * 16 * 4};
static const mp_peak_kernels peak_amx = {.fma = mp_peak_fma_avx512,
                                         .dpbf16 = mp_peak_dpbf16_avx512,
                                         .tdpbf16 = mp_peak_tdpbf16_amx,
                                         .fma_flops = 20.0 * 16 * 2,
                                         .dpbf16_flops = 20.0 * 16 * 4,
                                         .tdpbf16_flops = 4.0 * 16 * 16 * 32 * 2};

static const mp_kernels ctx_avx2 = {
    .isa = MP_ISA_AVX2,
    .convert = &mp_convert_avx2,
    .amax = &mp_amax_avx2,
    .unscale = &mp_unscale_scalar,
    .optim = &mp_optim_avx2,
    .gelu = &mp_gelu_avx2,
    .softmax = &mp_softmax_avx2,
    .relu16 = mp_relu16_scalar,
    .mx = &mp_mx_scalar,
    .recipe = &mp_recipe_avx2,
    .gemm = &mp_gemm_avx2,
    .gemm_bf16 = &mp_gemm_avx2,
    .peak = &peak_avx2,
};

/* what the AVX-512 paths share */
#define AVX512_KERNELS                                                                                                 \
    .amax = &mp_amax_avx2, .unscale = &mp_unscale_avx512, .optim = &mp_optim_avx512, .gelu = &mp_gelu_avx512,          \
    .softmax = &mp_softmax_avx512, .relu16 = mp_relu16_avx512, .layernorm = &mp_layernorm_avx512, .mx = &mp_mx_avx512, \
    .recipe = &mp_recipe_avx512, .gemm = &mp_gemm_avx512

static const mp_kernels ctx_avx512 = {
    .isa = MP_ISA_AVX512,
    .convert = &mp_convert_avx512,
    .gemm_bf16 = &mp_gemm_avx512,
    .peak = &peak_avx512,
    AVX512_KERNELS,
};

static const mp_kernels ctx_avx512bf16 = {
    .isa = MP_ISA_AVX512_BF16,
    .convert = &mp_convert_avx512bf16,
    .gemm_bf16 = &mp_gemm_avx512bf16,
    .peak = &peak_avx512bf16,
    AVX512_KERNELS,
};

static const mp_kernels ctx_amx = {
    .isa = MP_ISA_AMX,
    .convert = &mp_convert_avx512bf16,
    .gemm_bf16 = &mp_gemm_amx,
    .peak = &peak_amx,
    AVX512_KERNELS,
};
#endif

static const mp_kernels *const contexts[] = {
    [MP_ISA_SCALAR] = &ctx_scalar,
#ifdef MP_X86
    [MP_ISA_AVX2] = &ctx_avx2,     [MP_ISA_AVX512] = &ctx_avx512, [MP_ISA_AVX512_BF16] = &ctx_avx512bf16,
    [MP_ISA_AMX] = &ctx_amx,
#endif
};

const mp_kernels *mp_kernels_of(mp_isa isa) {
    return (unsigned)isa < sizeof contexts / sizeof contexts[0] ? contexts[isa] : NULL;
}

const mp_kernels *mp_kernels_current(void) {
    const mp_kernels *k = mp_kernels_of(mp_cpu_isa());
    return k ? k : &ctx_scalar;
}
