/* mixprec/cpu.h - run-time CPU dispatch and threads.
 *
 * mixprec is built for any x86-64 (or any other CPU with the scalar path) and
 * picks its kernels when first used: the CPU's features are read once (a set:
 * mp_cpu_features) and name the best of the paths below that the CPU and the
 * OS support. The environment variable MIXPREC_ISA (scalar, avx2, avx512,
 * avx512bf16, amx) caps the choice, as OPENBLAS_CORETYPE does for OpenBLAS;
 * it can only step down.
 */
#ifndef MIXPREC_CPU_H
#define MIXPREC_CPU_H

#include <stddef.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mp_isa {
    MP_ISA_SCALAR = 0,  /* portable C */
    MP_ISA_AVX2,        /* AVX2 + FMA + F16C */
    MP_ISA_AVX512,      /* AVX-512 F/BW/VL/DQ + FMA + F16C */
    MP_ISA_AVX512_BF16, /* the above + AVX512_BF16 (vcvtneps2bf16, vdpbf16ps) */
    MP_ISA_AMX          /* the above + AMX-TILE + AMX-BF16 (TDPBF16PS), with the OS's permission */
} mp_isa;

/* What the CPU and the OS offer, read once (CPUID, XCR0 and, for AMX on
 * Linux, arch_prctl(ARCH_REQ_XCOMP_PERM)); every field is 0 or 1. */
typedef struct mp_cpu_feature_set {
    int avx2;        /* AVX2 + FMA + F16C, YMM state saved by the OS */
    int avx512;      /* AVX-512 F, BW, VL, DQ, ZMM state saved by the OS */
    int avx512_bf16; /* CPUID leaf 7 sub-leaf 1 EAX bit 5 */
    int avx512_fp16; /* leaf 7 EDX bit 23 */
    int amx_tile;    /* leaf 7 EDX bit 24, tile state (XCR0 bits 17-18) enabled by the OS */
    int amx_bf16;    /* leaf 7 EDX bit 22 */
    int amx_fp16;    /* leaf 7 sub-leaf 1 EAX bit 21 */
    int amx_allowed; /* the kernel granted this process tile data (Linux >= 5.16) */
    int avx512_vbmi; /* leaf 7 ECX bit 1 (vpermb, vpermt2b), with avx512 */
} mp_cpu_feature_set;

/* The features found (the same object on every call). */
const mp_cpu_feature_set *mp_cpu_features(void);

/* The features as words, "avx2 avx512 avx512_bf16 ... amx_bf16", into buf
 * (always terminated; "none" when there are none). Returns buf. */
char *mp_cpu_describe(char *buf, size_t size);

/* The best path this CPU and OS support. */
mp_isa mp_cpu_detected(void);

/* The path in use (detected, capped by MIXPREC_ISA or mp_cpu_set_isa). */
mp_isa mp_cpu_isa(void);

/* Selects a path; MP_EUNSUPPORTED if the CPU lacks it, MP_EINVAL for a value
 * that is no mp_isa (the path in use unchanged either way). */
mp_status mp_cpu_set_isa(mp_isa isa);

/* "scalar", "avx2", "avx512", "avx512bf16", "amx". */
const char *mp_isa_name(mp_isa isa);

/* Parses a name as printed by mp_isa_name; MP_EINVAL if unknown. */
mp_status mp_isa_parse(const char *name, mp_isa *out);

/* The peak of one kind of instruction on the CPU path in use, in GFLOP/s on
 * mp_get_threads() threads: nothing but fp32 FMAs (8 or 16 lanes), bf16
 * vdpbf16ps, or AMX TDPBF16PS, best of three runs of its loop (about a
 * second in all); 0 when the path has no such instruction. */
typedef enum { MP_PEAK_FMA, MP_PEAK_DPBF16, MP_PEAK_TDPBF16 } mp_peak_unit;
double mp_cpu_peak(mp_peak_unit unit);

/* Number of threads the library's kernels may use. The default is OpenMP's
 * (the number of CPUs, or OMP_NUM_THREADS); MIXPREC_THREADS overrides it.
 * n < 1 restores the default. */
void mp_set_threads(int n);
int mp_get_threads(void);

/* Whether the threads the library's kernels will use (mp_get_threads) can be
 * started: that many threads, the stack OpenMP gives them (OMP_STACKSIZE or
 * the default) each, alive at once, then joined. MP_OK, or MP_ENOMEM with one
 * line saying how many could not be started and why. Called before a run's
 * first step, since OpenMP's runtime ends the process when it cannot start
 * its threads. */
mp_status mp_threads_check(void);

/* The environment's settings checked: MIXPREC_ISA, when set and not empty,
 * must be a name mp_isa_parse takes (exactly: "SCALAR" and "avx2 " are not),
 * and MIXPREC_THREADS a whole decimal number from 1 to 64. MP_OK, or
 * MP_EINVAL with one line naming the variable, its value and what it takes.
 * The library itself never fails on them: a value this refuses is ignored
 * (the detected path; OpenMP's default threads). The mixprec command refuses
 * to run with one (usage error); the Python package warns on import. */
mp_status mp_cpu_env_check(void);

#ifdef __cplusplus
}
#endif
#endif
