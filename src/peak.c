/* peak.c - the machine's peak per instruction kind (cpu.h's mp_cpu_peak):
 * the peak loops of the CPU path in use (its kernel context's peak entry,
 * src/cpu/peak_*.c) on every thread, timed. */
#ifdef _OPENMP
#include <omp.h>
#endif

#include "internal.h"

double mp_cpu_peak(mp_peak_unit unit) {
    const mp_peak_kernels *p = mp_kernels_current()->peak;
    double (*loop)(uint64_t) = !p                        ? NULL
                               : unit == MP_PEAK_TDPBF16 ? p->tdpbf16
                               : unit == MP_PEAK_DPBF16  ? p->dpbf16
                                                         : p->fma;
    if (!loop) return 0.0;
    const double per_iter = unit == MP_PEAK_TDPBF16  ? p->tdpbf16_flops
                            : unit == MP_PEAK_DPBF16 ? p->dpbf16_flops
                                                     : p->fma_flops;
    const int nt = mp_get_threads();
    const uint64_t iters = unit == MP_PEAK_TDPBF16 ? 400000 : 20000000;
    double best = 0, sink = 0;
    for (int r = 0; r < 3; r++) {
        const double t0 = mp_now();
#pragma omp parallel num_threads(nt) reduction(+ : sink)
        sink += loop(iters);
        const double gf = (double)nt * (double)iters * per_iter / (mp_now() - t0) * 1e-9;
        if (gf > best) best = gf;
    }
    return sink == 12345.0 ? 0 : best; /* keep the loops */
}
