/* peak_avx512bf16.c - nothing but vdpbf16ps on independent accumulators: the
 * bf16 peak (see peak_avx512.c). */
#include "../internal.h"
#include "peak.h"

#define V __m512
#define ADD _mm512_add_ps
#define SUM _mm512_reduce_add_ps
#define INIT(i) _mm512_set1_ps((float)(i))
#define STEP(a) _mm512_dpbf16_ps(a, (__m512bh)_mm512_set1_epi32(0x3f803f80), (__m512bh)_mm512_set1_epi32(0x33d633d6))

double mp_peak_dpbf16_avx512(uint64_t iters) { MP_PEAK_LOOP(iters); }
