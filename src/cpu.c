/* cpu.c - which kernels to run on this CPU, and how many threads. */
#define _DEFAULT_SOURCE /* syscall */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

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
    const struct { int on; const char *name; } w[] = {
        {f->avx2, "avx2"},         {f->avx512, "avx512"},     {f->avx512_bf16, "avx512_bf16"}, {f->avx512_vbmi, "avx512_vbmi"},
        {f->avx512_fp16, "avx512_fp16"}, {f->amx_tile, "amx_tile"}, {f->amx_bf16, "amx_bf16"},
        {f->amx_fp16, "amx_fp16"},  {f->amx_tile && !f->amx_allowed, "(amx not permitted by the OS)"}};
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

const char *mp_isa_name(mp_isa isa) {
    return (unsigned)isa < NISA ? isa_names[isa] : "unknown";
}

mp_status mp_isa_parse(const char *name, mp_isa *out) {
    for (int i = 0; name && i < NISA; i++)
        if (strcmp(name, isa_names[i]) == 0) { *out = (mp_isa)i; return MP_OK; }
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
    if ((unsigned)isa >= NISA)
        return mp_error(MP_EINVAL, "mp_cpu_set_isa: %d is not an mp_isa", (int)isa);
    if (isa > mp_cpu_detected())
        return mp_error(MP_EUNSUPPORTED, "this CPU does not support %s (best: %s)", mp_isa_name(isa),
                        mp_isa_name(mp_cpu_detected()));
    atomic_store_explicit(&active_isa, (int)isa, memory_order_relaxed);
    return MP_OK;
}

static atomic_int thread_override = 0, thread_default = 0;

/* MIXPREC_THREADS as a whole decimal number from 1 to MP_MAX_THREADS; 0 when
 * unset or empty, -1 when it is something else. */
static int env_threads(void) {
    const char *env = getenv("MIXPREC_THREADS");
    if (!env || !*env) return 0;
    char *end;
    errno = 0;
    const long v = strtol(env, &end, 10);
    return *end || errno || v < 1 || v > MP_MAX_THREADS || env[0] < '0' || env[0] > '9' ? -1 : (int)v;
}

mp_status mp_cpu_env_check(void) {
    const char *isa = getenv("MIXPREC_ISA");
    mp_isa cap;
    if (isa && *isa && mp_isa_parse(isa, &cap) != MP_OK)
        return mp_error(MP_EINVAL, "MIXPREC_ISA=%.40s%s: not a CPU path (scalar, avx2, avx512, avx512bf16 or amx)", isa,
                        strlen(isa) > 40 ? "..." : "");
    if (env_threads() < 0) {
        const char *t = getenv("MIXPREC_THREADS");
        return mp_error(MP_EINVAL, "MIXPREC_THREADS=%.40s%s: not a number of threads from 1 to %d", t,
                        strlen(t) > 40 ? "..." : "", MP_MAX_THREADS);
    }
    return MP_OK;
}

void mp_set_threads(int n) { atomic_store_explicit(&thread_override, n > 0 ? n : 0, memory_order_relaxed); }

int mp_get_threads(void) {
    int n = atomic_load_explicit(&thread_override, memory_order_relaxed);
    if (n > 0) return n;
    n = atomic_load_explicit(&thread_default, memory_order_relaxed);
    if (n > 0) return n;
    /* first call: MIXPREC_THREADS, else OpenMP's default; kept (getenv is slow) */
    if ((n = env_threads()) <= 0) {
#ifdef _OPENMP
        n = omp_get_max_threads();
#else
        n = 1;
#endif
    }
    atomic_store_explicit(&thread_default, n, memory_order_relaxed);
    return n;
}

/* The probe's threads wait until every one has started, so that they are all
 * alive at once, as an OpenMP team is. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int go;
} probe_gate;

static void *probe_wait(void *arg) {
    probe_gate *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->go) pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

mp_status mp_threads_check(void) {
    int nt = mp_get_threads();
    if (nt > MP_MAX_THREADS) nt = MP_MAX_THREADS;
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) != 0) return mp_error(MP_ENOMEM, "cannot set up a thread");
    /* the stack libgomp gives its threads: OMP_STACKSIZE (GOMP_STACKSIZE), else the default */
    const char *env = getenv("OMP_STACKSIZE");
    if (!env) env = getenv("GOMP_STACKSIZE");
    if (env && *env) {
        char *end;
        double v = strtod(env, &end);
        const char u = *end ? *end : 'K'; /* a number alone is in KiB */
        v *= u == 'B' || u == 'b' ? 1 : u == 'M' || u == 'm' ? 1048576.0 : u == 'G' || u == 'g' ? 1073741824.0 : 1024.0;
        if (v >= 16384 && v < 1e15) pthread_attr_setstacksize(&attr, (size_t)v);
    }
    probe_gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    pthread_t th[MP_MAX_THREADS];
    int started = 0, err = 0;
    while (started < nt - 1 && !(err = pthread_create(&th[started], &attr, probe_wait, &g))) started++;
    pthread_mutex_lock(&g.mu);
    g.go = 1;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    pthread_attr_destroy(&attr);
    if (err)
        return mp_error(MP_ENOMEM, "cannot start %d threads (the thread %d: %s): fewer with --threads or "
                        "MIXPREC_THREADS, or more memory (ulimit -v, ulimit -s)", nt, started + 2, strerror(err));
    return MP_OK;
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
