/* peak.h - the loop shared by the peak measurements: 20 independent 16-lane
 * accumulators (enough to hide the latency of FMA / vdpbf16ps), each updated
 * by STEP iters times, summed at the end so that nothing is optimised away. */
#ifndef MIXPREC_PEAK_H
#define MIXPREC_PEAK_H

#include <immintrin.h>

#define MP_PEAK_CHAINS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15) \
                          X(16) X(17) X(18) X(19)

/* INIT(i): the initial __m512 of chain i; STEP(a): the new value of chain a. */
#define MP_PEAK_LOOP(iters, INIT, STEP)                                      \
    do {                                                                     \
        MP_PEAK_CHAINS(MP_PEAK_DECL_)                                        \
        for (uint64_t t_ = 0; t_ < (iters); t_++) {                          \
            MP_PEAK_CHAINS(MP_PEAK_STEP_)                                    \
            __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3));   \
        }                                                                    \
        __m512 s_ = _mm512_setzero_ps();                                     \
        MP_PEAK_CHAINS(MP_PEAK_SUM_)                                         \
        return (double)_mm512_reduce_add_ps(s_);                             \
    } while (0)
#define MP_PEAK_DECL_(i) __m512 a##i = INIT(i);
#define MP_PEAK_STEP_(i) a##i = STEP(a##i);
#define MP_PEAK_SUM_(i) s_ = _mm512_add_ps(s_, a##i);

#endif
