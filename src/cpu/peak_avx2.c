/* peak_avx2.c - nothing but 8-lane FMAs on independent accumulators: the fp32
 * peak of a CPU with AVX2 + FMA and no AVX-512 (see peak_avx512.c). */
#include "../internal.h"
/* 16 ymm registers: 10 chains of two dependent FMAs each, 20 FMAs a turn
 * (two FMA pipes of latency 4 or 5 need 8 to 10 chains in flight) */
#define MP_PEAK_CHAINS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9)
#include "peak.h"

#define V __m256
#define ADD _mm256_add_ps
#define SUM sum8
#define INIT(i) _mm256_set1_ps(1.0f + (float)(i)*1e-3f)
#define FMA1(a) _mm256_fmadd_ps(a, _mm256_set1_ps(0.999999f), _mm256_set1_ps(1e-7f))
#define STEP(a) FMA1(FMA1(a))

static float sum8(__m256 v) {
    float f[8];
    _mm256_storeu_ps(f, v);
    return f[0] + f[1] + f[2] + f[3] + f[4] + f[5] + f[6] + f[7];
}

double mp_peak_fma_avx2(uint64_t iters) { MP_PEAK_LOOP(iters); }
