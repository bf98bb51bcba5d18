/* cpu.c - the CPU's features and which kernels to run on it (the threads: threads.c). */
#define _DEFAULT_SOURCE /* syscall */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#ifdef MP_X86
#include <cpuid.h>
#ifdef __linux__
#include <sys/syscall.h>
#include <unistd.h>
#endif

static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

/* Linux keeps AMX's 8 KiB of tile data out of a process's state until it
 * asks (Documentation/arch/x86/xstate.rst); without it the first tile
 * instruction raises SIGILL. 1 when granted. */
static int amx_permission(void) {
#if defined(__linux__) && defined(SYS_arch_prctl)
    enum { ARCH_GET_XCOMP_PERM = 0x1022, ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) return 0;
    unsigned long mask = 0;
    return syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &mask) == 0 && ((mask >> XFEATURE_XTILEDATA) & 1);
#else
    return 0;
#endif
}

static void read_features(mp_cpu_feature_set *f) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    const int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, f16c = (c >> 29) & 1;
    if (!osxsave || __get_cpuid_max(0, NULL) < 7) return;
    const uint64_t xcr0 = xgetbv0();
    __cpuid_count(7, 0, a, b, c, d);
    const unsigned b7 = b, c7 = c, d7 = d;
    __cpuid_count(7, 1, a, b, c, d);
    const unsigned a71 = a;
    f->avx2 = avx && fma && f16c && ((b7 >> 5) & 1) && (xcr0 & 0x6) == 0x6; /* OS saves SSE and AVX state */
    f->avx512 = f->avx2 && ((b7 >> 16) & 1) && ((b7 >> 17) & 1) && ((b7 >> 30) & 1) && ((b7 >> 31) & 1) &&
                (xcr0 & 0xe0) == 0xe0; /* F, DQ, BW, VL + opmask and ZMM state */
    f->avx512_bf16 = f->avx512 && ((a71 >> 5) & 1);
    f->avx512_fp16 = f->avx512 && ((d7 >> 23) & 1);
    f->avx512_vbmi = f->avx512 && ((c7 >> 1) & 1);
    f->amx_tile = ((d7 >> 24) & 1) && (xcr0 & 0x60000) == 0x60000; /* XTILECFG and XTILEDATA */
    f->amx_bf16 = f->amx_tile && ((d7 >> 22) & 1);
    f->amx_fp16 = f->amx_tile && ((a71 >> 21) & 1);
    f->amx_allowed = f->amx_tile && amx_permission();
}
#else
static void read_features(mp_cpu_feature_set *f) { (void)f; }
#endif

static mp_cpu_feature_set features;
static pthread_once_t features_once = PTHREAD_ONCE_INIT;

static void features_init(void) { read_features(&features); }

const mp_cpu_feature_set *mp_cpu_features(void) {
    pthread_once(&features_once, features_init);
    return &features;
}

char *mp_cpu_describe(char *buf, size_t size) {
    const mp_cpu_feature_set *f = mp_cpu_features();
    const struct {
        int on;
        const char *name;
    } w[] = {{f->avx2, "avx2"},
             {f->avx512, "avx512"},
             {f->avx512_bf16, "avx512_bf16"},
             {f->avx512_vbmi, "avx512_vbmi"},
             {f->avx512_fp16, "avx512_fp16"},
             {f->amx_tile, "amx_tile"},
             {f->amx_bf16, "amx_bf16"},
             {f->amx_fp16, "amx_fp16"},
             {f->amx_tile && !f->amx_allowed, "(amx not permitted by the OS)"}};
    size_t len = 0;
    if (size) buf[0] = 0;
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
        if (w[i].on && len < size) len += (size_t)snprintf(buf + len, size - len, "%s%s", len ? " " : "", w[i].name);
    if (size && len == 0) snprintf(buf, size, "none");
    return buf;
}

/* The best path the features allow. AMX present but refused by the OS: one
 * line on stderr, and the next path down. */
static mp_isa detect(void) {
    const mp_cpu_feature_set *f = mp_cpu_features();
    if (f->amx_bf16 && f->avx512_bf16) {
        if (f->amx_allowed) return MP_ISA_AMX;
        fprintf(stderr, "mixprec: the CPU has AMX but the OS did not grant its tile state "
                        "(arch_prctl ARCH_REQ_XCOMP_PERM); using avx512bf16\n");
    }
    if (f->avx512_bf16) return MP_ISA_AVX512_BF16;
    if (f->avx512) return MP_ISA_AVX512;
    if (f->avx2) return MP_ISA_AVX2;
    return MP_ISA_SCALAR;
}

static const char *const isa_names[] = {"scalar", "avx2", "avx512", "avx512bf16", "amx"};
enum { NISA = sizeof isa_names / sizeof isa_names[0] };

const char *mp_isa_name(mp_isa isa) { return (unsigned)isa < NISA ? isa_names[isa] : "unknown"; }

mp_status mp_isa_parse(const char *name, mp_isa *out) {
    for (int i = 0; name && i < NISA; i++)
        if (strcmp(name, isa_names[i]) == 0) {
            *out = (mp_isa)i;
            return MP_OK;
        }
    return mp_error(MP_EINVAL, "unknown ISA '%s' (expected scalar, avx2, avx512, avx512bf16 or amx)",
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
    if ((unsigned)isa >= NISA) return mp_error(MP_EINVAL, "mp_cpu_set_isa: %d is not an mp_isa", (int)isa);
    if (isa > mp_cpu_detected())
        return mp_error(MP_EUNSUPPORTED, "this CPU does not support %s (best: %s)", mp_isa_name(isa),
                        mp_isa_name(mp_cpu_detected()));
    atomic_store_explicit(&active_isa, (int)isa, memory_order_relaxed);
    return MP_OK;
}

mp_status mp_cpu_env_check(void) {
    const char *isa = getenv("MIXPREC_ISA");
    mp_isa cap;
    if (isa && *isa && mp_isa_parse(isa, &cap) != MP_OK)
        return mp_error(MP_EINVAL, "MIXPREC_ISA=%.40s%s: not a CPU path (scalar, avx2, avx512, avx512bf16 or amx)", isa,
                        strlen(isa) > 40 ? "..." : "");
    if (mp_threads_env() < 0) {
        const char *t = getenv("MIXPREC_THREADS");
        return mp_error(MP_EINVAL, "MIXPREC_THREADS=%.40s%s: not a number of threads from 1 to %d", t,
                        strlen(t) > 40 ? "..." : "", MP_MAX_THREADS);
    }
    return MP_OK;
}
