/* peak_avx512.c - loops that run nothing but FMAs / vdpbf16ps on independent
 * accumulators: the machine's peak, for reporting GEMM as a fraction of it. */
#include <immintrin.h>

#include "../internal.h"

#define CHAINS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15) \
                  X(16) X(17) X(18) X(19)

double mp_peak_fma_avx512(uint64_t iters) {
#define DECL(i) __m512 a##i = _mm512_set1_ps(1.0f + (float)(i) * 1e-3f);
    CHAINS(DECL)
#undef DECL
    const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
    for (uint64_t t = 0; t < iters; t++) {
#define STEP(i) a##i = _mm512_fmadd_ps(a##i, x, y);
        CHAINS(STEP)
#undef STEP
        __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3));
    }
    __m512 s = _mm512_setzero_ps();
#define SUM(i) s = _mm512_add_ps(s, a##i);
    CHAINS(SUM)
#undef SUM
    return (double)_mm512_reduce_add_ps(s);
}
