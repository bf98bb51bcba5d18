/* cpu.c - which kernels to run on this CPU, and how many threads. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "internal.h"

#ifdef MP_X86
#include <cpuid.h>

static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static mp_isa detect(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return MP_ISA_SCALAR;
    const int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, f16c = (c >> 29) & 1;
    if (!(osxsave && avx && fma && f16c)) return MP_ISA_SCALAR;
    const uint64_t xcr0 = xgetbv0();
    if ((xcr0 & 0x6) != 0x6) return MP_ISA_SCALAR; /* OS saves SSE and AVX state */
    if (__get_cpuid_max(0, NULL) < 7) return MP_ISA_SCALAR;
    __cpuid_count(7, 0, a, b, c, d);
    if (!((b >> 5) & 1)) return MP_ISA_SCALAR; /* AVX2 */
    const int avx512 = ((b >> 16) & 1) && ((b >> 17) & 1) && ((b >> 30) & 1) && ((b >> 31) & 1);
    if (!avx512 || (xcr0 & 0xe0) != 0xe0) return MP_ISA_AVX2; /* F, DQ, BW, VL + OS state */
    __cpuid_count(7, 1, a, b, c, d);
    return ((a >> 5) & 1) ? MP_ISA_AVX512_BF16 : MP_ISA_AVX512;
}
#else
static mp_isa detect(void) { return MP_ISA_SCALAR; }
#endif

static const char *const isa_names[] = {"scalar", "avx2", "avx512", "avx512bf16"};

const char *mp_isa_name(mp_isa isa) {
    return (unsigned)isa < 4 ? isa_names[isa] : "unknown";
}

mp_status mp_isa_parse(const char *name, mp_isa *out) {
    for (int i = 0; name && i < 4; i++)
        if (strcmp(name, isa_names[i]) == 0) { *out = (mp_isa)i; return MP_OK; }
    return mp_error(MP_EINVAL, "unknown ISA '%s' (expected scalar, avx2, avx512 or avx512bf16)",
                    name ? name : "(null)");
}

/* -1 = not yet decided; the first use reads the CPU and MIXPREC_ISA. */
static atomic_int detected_isa = -1, active_isa = -1;

mp_isa mp_cpu_detected(void) {
    int d = atomic_load_explicit(&detected_isa, memory_order_relaxed);
    if (d < 0) {
        d = (int)detect();
        atomic_store_explicit(&detected_isa, d, memory_order_relaxed);
    }
    return (mp_isa)d;
}

mp_isa mp_cpu_isa(void) {
    int a = atomic_load_explicit(&active_isa, memory_order_relaxed);
    if (a < 0) {
        mp_isa isa = mp_cpu_detected(), cap;
        const char *env = getenv("MIXPREC_ISA");
        if (env && *env && mp_isa_parse(env, &cap) == MP_OK && cap < isa) isa = cap;
        a = (int)isa;
        atomic_store_explicit(&active_isa, a, memory_order_relaxed);
    }
    return (mp_isa)a;
}

mp_status mp_cpu_set_isa(mp_isa isa) {
    if ((unsigned)isa > MP_ISA_AVX512_BF16)
        return mp_error(MP_EINVAL, "mp_cpu_set_isa: %d is not an mp_isa", (int)isa);
    if (isa > mp_cpu_detected())
        return mp_error(MP_EUNSUPPORTED, "this CPU does not support %s (best: %s)", mp_isa_name(isa),
                        mp_isa_name(mp_cpu_detected()));
    atomic_store_explicit(&active_isa, (int)isa, memory_order_relaxed);
    return MP_OK;
}

static atomic_int thread_override = 0, thread_default = 0;

void mp_set_threads(int n) { atomic_store_explicit(&thread_override, n > 0 ? n : 0, memory_order_relaxed); }

int mp_get_threads(void) {
    int n = atomic_load_explicit(&thread_override, memory_order_relaxed);
    if (n > 0) return n;
    n = atomic_load_explicit(&thread_default, memory_order_relaxed);
    if (n > 0) return n;
    /* first call: MIXPREC_THREADS, else OpenMP's default; kept (getenv is slow) */
    const char *env = getenv("MIXPREC_THREADS");
    if (env && atoi(env) > 0) n = atoi(env);
    else {
#ifdef _OPENMP
        n = omp_get_max_threads();
#else
        n = 1;
#endif
    }
    atomic_store_explicit(&thread_default, n, memory_order_relaxed);
    return n;
}

int mp_parallel_for(size_t n, size_t min_parallel, size_t align,
                    void (*fn)(void *ctx, size_t i0, size_t i1, int t), void *ctx) {
    int nt = mp_get_threads();
    if (nt > MP_MAX_THREADS) nt = MP_MAX_THREADS;
    if (n < min_parallel || nt < 2) {
        fn(ctx, 0, n, 0);
        return 1;
    }
    const size_t share = ((n + (size_t)nt - 1) / (size_t)nt + align - 1) / align * align;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static, 1)
#endif
    for (int t = 0; t < nt; t++) {
        const size_t i0 = (size_t)t * share;
        if (i0 < n) fn(ctx, i0, n - i0 < share ? n : i0 + share, t);
    }
    return nt;
}
