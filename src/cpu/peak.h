/* peak.h - the loop shared by the peak measurements: 20 independent vector
 * accumulators (enough to hide the latency of FMA / vdpbf16ps), each updated
 * by STEP iters times, summed at the end so that nothing is optimised away.
 * The including file defines V (the vector type), INIT(i) (the initial V of
 * chain i), STEP(a) (the new value of chain a), ADD(a, b) and SUM(v) (its
 * lanes' sum as a float). */
#ifndef MIXPREC_PEAK_H
#define MIXPREC_PEAK_H

#include <immintrin.h>

#ifndef MP_PEAK_CHAINS /* a file may use 10 chains with a STEP of two operations (still 20 a turn) */
#define MP_PEAK_CHAINS(X) \
    X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15) X(16) X(17) X(18) X(19)
#endif

#define MP_PEAK_LOOP(iters)                                                \
    do {                                                                   \
        MP_PEAK_CHAINS(MP_PEAK_DECL_)                                      \
        for (uint64_t t_ = 0; t_ < (iters); t_++) {                        \
            MP_PEAK_CHAINS(MP_PEAK_STEP_)                                  \
            __asm__ volatile("" : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3)); \
        }                                                                  \
        V s_ = a0;                                                         \
        MP_PEAK_CHAINS(MP_PEAK_SUM_)                                       \
        return (double)SUM(s_);                                            \
    } while (0)
#define MP_PEAK_DECL_(i) V a##i = INIT(i);
#define MP_PEAK_STEP_(i) a##i = STEP(a##i);
#define MP_PEAK_SUM_(i) s_ = ADD(s_, a##i);

#endif
