/* gemm_epilogue_avx2.c - gemm_epilogue.h's plain-C epilogue built for AVX2 + FMA
 * (-O3: the loops vectorize, fmaf is one instruction): the same source and
 * operations as the portable build in gemm.c, hence the same bits. */
#include "../gemm_epilogue.h"

void mp_gemm_epilogue_avx2(const mp_gemm_ep *e, float *tile, size_t ts, size_t i0, size_t j0, size_t rows, size_t cols,
                           mp_convert_stats *st, uint64_t *zeros) {
    mp_gemm_epilogue_body(e, tile, ts, i0, j0, rows, cols, st, zeros);
}

uint64_t mp_gemm_zeros_avx2(const float *c, size_t ldc, size_t rows, size_t cols) {
    return tile_zeros(c, ldc, rows, cols);
}
