/* peak_avx512.c - nothing but FMAs on independent accumulators: the fp32 peak,
 * for reporting GEMM as a fraction of it. */
#include "../internal.h"
#include "peak.h"

#define V __m512
#define ADD _mm512_add_ps
#define SUM _mm512_reduce_add_ps
#define INIT(i) _mm512_set1_ps(1.0f + (float)(i)*1e-3f)
#define STEP(a) _mm512_fmadd_ps(a, _mm512_set1_ps(0.999999f), _mm512_set1_ps(1e-7f))

double mp_peak_fma_avx512(uint64_t iters) { MP_PEAK_LOOP(iters); }
