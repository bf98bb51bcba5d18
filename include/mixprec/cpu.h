/* mixprec/cpu.h - run-time CPU dispatch and threads.
 *
 * mixprec is built for any x86-64 (or any other CPU with the scalar path) and
 * picks its kernels when first used: the best of the paths below that the CPU
 * and the OS support. The environment variable MIXPREC_ISA (scalar, avx2,
 * avx512, avx512bf16) caps the choice, as OPENBLAS_CORETYPE does for OpenBLAS.
 */
#ifndef MIXPREC_CPU_H
#define MIXPREC_CPU_H

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mp_isa {
    MP_ISA_SCALAR = 0,     /* portable C */
    MP_ISA_AVX2,           /* AVX2 + FMA + F16C */
    MP_ISA_AVX512,         /* AVX-512 F/BW/VL/DQ + FMA + F16C */
    MP_ISA_AVX512_BF16     /* the above + AVX512_BF16 (vcvtneps2bf16, vdpbf16ps) */
} mp_isa;

/* The best path this CPU and OS support. */
mp_isa mp_cpu_detected(void);

/* The path in use (detected, capped by MIXPREC_ISA or mp_cpu_set_isa). */
mp_isa mp_cpu_isa(void);

/* Selects a path; MP_EUNSUPPORTED if the CPU lacks it. */
mp_status mp_cpu_set_isa(mp_isa isa);

/* "scalar", "avx2", "avx512", "avx512bf16". */
const char *mp_isa_name(mp_isa isa);

/* Parses a name as printed by mp_isa_name; MP_EINVAL if unknown. */
mp_status mp_isa_parse(const char *name, mp_isa *out);

/* Number of threads the library's kernels may use. The default is OpenMP's
 * (the number of CPUs, or OMP_NUM_THREADS); MIXPREC_THREADS overrides it.
 * n < 1 restores the default. */
void mp_set_threads(int n);
int  mp_get_threads(void);

#ifdef __cplusplus
}
#endif
#endif
