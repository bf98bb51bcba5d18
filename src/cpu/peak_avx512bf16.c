/* peak_avx512bf16.c - vdpbf16ps on independent accumulators (see peak_avx512.c). */
#include <immintrin.h>

#include "../internal.h"

#define CHAINS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15) \
                  X(16) X(17) X(18) X(19)

double mp_peak_dpbf16_avx512(uint64_t iters) {
#define DECL(i) __m512 a##i = _mm512_set1_ps((float)(i));
    CHAINS(DECL)
#undef DECL
    const __m512bh x = (__m512bh)_mm512_set1_epi32(0x3f803f80), y = (__m512bh)_mm512_set1_epi32(0x33d633d6);
    for (uint64_t t = 0; t < iters; t++) {
#define STEP(i) a##i = _mm512_dpbf16_ps(a##i, x, y);
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
