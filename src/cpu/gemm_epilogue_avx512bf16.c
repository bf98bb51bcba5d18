/* gemm_epilogue_avx512bf16.c - gemm_epilogue_avx512.c built with AVX512_BF16
 * for the vdpbf16ps and AMX kernels: a bf16 C's codes by vcvtneps2bf16. */
#define MP_EPILOGUE_AVX512_FN mp_gemm_epilogue_avx512bf16
#define MP_EPILOGUE_CVT_BF16
#include "gemm_epilogue_avx512.c"
