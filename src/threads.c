/* threads.c - the library's threads: how many (mp_set_threads,
 * MIXPREC_THREADS, OpenMP's default), whether the process can start them
 * (mp_threads_check), and work split over them (mp_parallel_for). */
#define _DEFAULT_SOURCE
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

static atomic_int thread_override = 0, thread_default = 0;

/* MIXPREC_THREADS as a whole decimal number from 1 to MP_MAX_THREADS; 0 when
 * unset or empty, -1 when it is something else. */
int mp_threads_env(void) {
    const char *env = getenv("MIXPREC_THREADS");
    if (!env || !*env) return 0;
    char *end;
    errno = 0;
    const long v = strtol(env, &end, 10);
    return *end || errno || v < 1 || v > MP_MAX_THREADS || env[0] < '0' || env[0] > '9' ? -1 : (int)v;
}

void mp_set_threads(int n) { atomic_store_explicit(&thread_override, n > 0 ? n : 0, memory_order_relaxed); }

int mp_get_threads(void) {
    int n = atomic_load_explicit(&thread_override, memory_order_relaxed);
    if (n > 0) return n;
    n = atomic_load_explicit(&thread_default, memory_order_relaxed);
    if (n > 0) return n;
    /* first call: MIXPREC_THREADS, else OpenMP's default; kept (getenv is slow) */
    if ((n = mp_threads_env()) <= 0) {
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
        return mp_error(MP_ENOMEM,
                        "cannot start %d threads (the thread %d: %s): fewer with --threads or "
                        "MIXPREC_THREADS, or more memory (ulimit -v, ulimit -s)",
                        nt, started + 2, strerror(err));
    return MP_OK;
}

int mp_parallel_for(size_t n, size_t min_parallel, size_t align, void (*fn)(void *ctx, size_t i0, size_t i1, int t),
                    void *ctx) {
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
