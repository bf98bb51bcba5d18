/* cmd_bench.c - `mixprec bench`: speed of mixprec's kernels, as medians.
 * bench/compare.py runs these next to numpy and PyTorch and prints ratios. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "cli.h"

static const char usage[] =
    "usage: mixprec bench convert [--n N] [--reps R] [--json]\n\n"
    "Times bulk conversions on N elements (default 16777216: a 64 MiB fp32 array)\n"
    "and a plain memory copy on the same threads. Each is run R times (default 15)\n"
    "after a warm-up; the median is reported, with bandwidth counted as bytes read\n"
    "plus bytes written, and 'vs copy' = time / time of a copy moving as many bytes.\n\n"
    "  --n N      elements per array\n"
    "  --reps R   timed repetitions\n"
    "  --json     one JSON object\n";

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void copy_threads(void *dst, const void *src, size_t bytes, int nt) {
    const size_t share = ((bytes + (size_t)nt - 1) / (size_t)nt + 4095) & ~(size_t)4095;
#pragma omp parallel for num_threads(nt)
    for (int t = 0; t < nt; t++) {
        const size_t off = (size_t)t * share;
        if (off < bytes) memcpy((char *)dst + off, (const char *)src + off, bytes - off < share ? bytes - off : share);
    }
}

typedef struct {
    const char *name;
    mp_dtype src, dst;
    int stats;
} conv_case;

static const conv_case cases[] = {
    {"f32->f16", MP_F32, MP_F16, 0}, {"f32->f16+stats", MP_F32, MP_F16, 1}, {"f16->f32", MP_F16, MP_F32, 0},
    {"f32->bf16", MP_F32, MP_BF16, 0}, {"f32->bf16+stats", MP_F32, MP_BF16, 1}, {"bf16->f32", MP_BF16, MP_F32, 0},
};
#define NCASES (sizeof cases / sizeof cases[0])

static double median_seconds(int reps, double *t) {
    qsort(t, (size_t)reps, sizeof *t, cmp_double);
    return reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
}

static int bench_convert(int argc, char **argv) {
    long n = 1L << 24, reps = 15;
    int json = 0;
    for (int i = 2; i < argc; i++) {
        const char *v;
        if (cli_is_help(&cmd_bench, argv[i])) return 0;
        if (strcmp(argv[i], "--json") == 0) json = 1;
        else if (strcmp(argv[i], "--n") == 0) {
            if (!(v = cli_value("bench", argc, argv, &i))) return CLI_USAGE;
            if (cli_parse_long(v, 1, 1L << 31, &n)) return cli_usage_error("bench", "--n wants 1 .. 2^31, not '%s'", v);
        } else if (strcmp(argv[i], "--reps") == 0) {
            if (!(v = cli_value("bench", argc, argv, &i))) return CLI_USAGE;
            if (cli_parse_long(v, 1, 10000, &reps)) return cli_usage_error("bench", "--reps wants 1 .. 10000, not '%s'", v);
        } else return cli_usage_error("bench", "unknown option '%s'", argv[i]);
    }
    const size_t bytes = (size_t)n * 4, alloc = (bytes + 63) & ~(size_t)63; /* aligned_alloc wants multiples */
    float *f32 = aligned_alloc(64, alloc), *f32b = aligned_alloc(64, alloc);
    uint16_t *h = aligned_alloc(64, alloc);
    double *t = malloc((size_t)reps * sizeof *t);
    if (!f32 || !f32b || !h || !t) {
        fprintf(stderr, "mixprec bench: out of memory for %ld elements\n", n);
        free(f32); free(f32b); free(h); free(t);
        return 1;
    }
    /* gradient-like data: a spread of magnitudes, some tiny */
    uint64_t s = 0x2545f4914f6cdd1dull;
    for (long i = 0; i < n; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        f32[i] = (float)((double)(int32_t)(s >> 32) * 0x1p-31 * 0x1p-6 * (double)(1u << ((s >> 8) & 15)));
    }
    memset(f32b, 0, bytes);
    mp_convert(h, MP_F16, f32, MP_F32, (size_t)n, NULL);
    const int nt = mp_get_threads();
    copy_threads(f32b, f32, bytes, nt);
    for (long r = 0; r < reps; r++) {
        const double t0 = now();
        copy_threads(f32b, f32, bytes, nt);
        t[r] = now() - t0;
    }
    const double copy_s = median_seconds((int)reps, t), copy_traffic = 2.0 * (double)bytes;
    if (json)
        printf("{\"bench\": \"convert\", \"n\": %ld, \"threads\": %d, \"isa\": \"%s\", \"reps\": %ld, \"results\": [\n"
               "  {\"op\": \"copy\", \"median_s\": %.6e, \"gbps\": %.3f}",
               n, nt, mp_isa_name(mp_cpu_isa()), reps, copy_s, copy_traffic / copy_s * 1e-9);
    else
        printf("bench convert: n = %ld (%.0f MiB of fp32), %d thread(s), path %s, median of %ld\n\n"
               "%-16s %10s %10s %9s\n%-16s %10.3f %10.2f %9s\n",
               n, (double)bytes / (1 << 20), nt, mp_isa_name(mp_cpu_isa()), reps, "op", "ms", "GB/s", "vs copy",
               "copy", copy_s * 1e3, copy_traffic / copy_s * 1e-9, "1.00");
    for (size_t c = 0; c < NCASES; c++) {
        const void *src = cases[c].src == MP_F32 ? (const void *)f32 : (const void *)h;
        void *dst = cases[c].dst == MP_F32 ? (void *)f32b : (void *)h;
        mp_convert_stats st = {0, 0, 0, 0};
        mp_convert(dst, cases[c].dst, src, cases[c].src, (size_t)n, cases[c].stats ? &st : NULL);
        for (long r = 0; r < reps; r++) {
            const double t0 = now();
            mp_convert(dst, cases[c].dst, src, cases[c].src, (size_t)n, cases[c].stats ? &st : NULL);
            t[r] = now() - t0;
        }
        const double med = median_seconds((int)reps, t);
        const double traffic = (double)n * (double)(mp_format(cases[c].src)->size + mp_format(cases[c].dst)->size);
        const double vs_copy = med / (copy_s * traffic / copy_traffic);
        if (json)
            printf(",\n  {\"op\": \"%s\", \"median_s\": %.6e, \"gbps\": %.3f, \"vs_copy\": %.3f}", cases[c].name, med,
                   traffic / med * 1e-9, vs_copy);
        else
            printf("%-16s %10.3f %10.2f %9.2f\n", cases[c].name, med * 1e3, traffic / med * 1e-9, vs_copy);
    }
    if (json) printf("\n]}\n");
    free(f32); free(f32b); free(h); free(t);
    return 0;
}

static int run(int argc, char **argv) {
    if (argc < 2) return cli_usage_error("bench", "which benchmark? (convert)");
    if (cli_is_help(&cmd_bench, argv[1])) return 0;
    if (strcmp(argv[1], "convert") == 0) return bench_convert(argc, argv);
    return cli_usage_error("bench", "unknown benchmark '%s' (convert)", argv[1]);
}

const cli_command cmd_bench = {"bench", "time mixprec's kernels (make bench compares them with peers)", usage, run};
