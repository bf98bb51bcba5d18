/* run_memory.c - a run's memory: refused before it is taken when the model
 * would not fit, and its peak measured. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "run_state.h"

/* Peak resident memory of this run: the kernel's high-water mark, reset at
 * the start of each run (so compare measures each mode on its own). */
void mp_run_peak_reset(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f) fputs("5", f), fclose(f);
}

double mp_run_peak_mib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &kb) == 1) break;
    if (f) fclose(f);
    if (kb < 0) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        kb = ru.ru_maxrss;
    }
    return (double)kb / 1024.0;
}

/* The bytes the machine can still give this process: /proc/meminfo's
 * MemAvailable, or less where a cgroup (v2) limit or the address-space limit
 * (RLIMIT_AS, ulimit -v, less what is mapped already) leaves less; 0 when
 * none can be read (no check then). */
static uint64_t memory_available(void) {
    uint64_t avail = 0;
    char line[256];
    FILE *f = fopen("/proc/meminfo", "r");
    while (f && fgets(line, sizeof line, f)) {
        unsigned long long kb;
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) avail = (uint64_t)kb * 1024;
    }
    if (f) fclose(f);
    unsigned long long max = 0, cur = 0;
    f = fopen("/sys/fs/cgroup/memory.max", "r");
    const int limited = f && fscanf(f, "%llu", &max) == 1; /* "max": no limit */
    if (f) fclose(f);
    f = fopen("/sys/fs/cgroup/memory.current", "r");
    if (f && fscanf(f, "%llu", &cur) != 1) cur = 0;
    if (f) fclose(f);
    if (limited && max > cur && (avail == 0 || max - cur < avail)) avail = max - cur;
    struct rlimit rl; /* ulimit -v: the address space this process may still map */
    unsigned long long pages = 0;
    f = fopen("/proc/self/statm", "r");
    if (f && fscanf(f, "%llu", &pages) != 1) pages = 0;
    if (f) fclose(f);
    const uint64_t mapped = (uint64_t)pages * (uint64_t)sysconf(_SC_PAGESIZE);
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        const uint64_t left = rl.rlim_cur > mapped ? (uint64_t)rl.rlim_cur - mapped : 1;
        if (avail == 0 || left < avail) avail = left;
    }
    return avail;
}

/* The optimizer state's bytes per parameter, as it will be kept. */
double mp_run_state_bytes(const run_state *s) {
    const mp_state_format sf = mp_precision_state_format(&s->prec);
    const double nstates = s->o.optimizer == MP_RUN_ADAMW ? 2 : s->o.momentum != 0 ? 1 : 0;
    const double sb = sf == MP_STATE_FP32                          ? 4
                      : sf == MP_STATE_BF16 || sf == MP_STATE_FP16 ? 2
                      : sf == MP_STATE_4BIT                        ? 0.5 + 4.0 / 128
                                                                   : 1 + 4.0 / 256;
    return nstates * sb;
}

/* About what a model takes: its parameters with their gradients, optimizer
 * state and half copies, and its largest activations (forward and backward),
 * from its configuration alone (its row's size). An estimate, on the large
 * side of the allocations made (nn.c, gpt.c, optim.c). */
static uint64_t model_bytes(const run_state *s) {
    const double es = (double)mp_format(s->prec.compute)->size;
    double params = 0, act = 0;
    s->row->size(s->mctx, (size_t)s->o.batch, es, &params, &act);
    /* per parameter: the weights as kept, the fp32 gradient, the optimizer state as kept */
    const mp_master_weights mw = s->prec.master_weights;
    const double w = mw == MP_MASTER_FP32 ? 4 + (es < 4 ? es : 0) : mw == MP_MASTER_KAHAN ? 4 : 2;
    const double per = w + 4 + mp_run_state_bytes(s);
    return (uint64_t)(params * per + act);
}

/* Refuses a model that would not fit before anything is allocated for it. */
int mp_run_fits(run_state *s) {
    if (!s->row->size) return RUN_OK;
    const uint64_t need = model_bytes(s), avail = memory_available();
    if (!avail || need <= avail) return RUN_OK;
    return mp_run_fail(s, MP_ENOMEM,
                       "model %s with batch %ld needs about %.1f GiB (parameters, gradients, optimizer state "
                       "and activations), and %.1f GiB are available",
                       s->o.model, s->o.batch, (double)need / 1073741824.0, (double)avail / 1073741824.0);
}
