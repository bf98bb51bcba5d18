/* cmd_bench.c - `mixprec bench`: speed of mixprec's kernels, as medians.
 * bench/compare.py runs these next to numpy and PyTorch and prints ratios. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "cli.h"
#include "dist.h"
#include "wire.h"

static const char usage[] =
    "usage: mixprec bench convert|unscale [--n N] [--reps R] [--json]\n"
    "       mixprec bench gemm [--reps R] [--max N] [--json]\n"
    "       mixprec bench peak [--json]\n"
    "       mixprec bench optim [--n N] [--reps R] [--json]\n"
    "       mpirun -np N mixprec bench allreduce [--n N] [--reps R] [--json]\n\n"
    "gemm     mp_gemm for m = n = k in {256, 512, 1024, 2048} and MLP training\n"
    "         shapes (batch 256, widths 784-1024), fp32 / fp16 / bf16 inputs with\n"
    "         an fp32 C; GFLOP/s and the fraction of the measured peak\n"
    "         (--max N: only shapes with m, n, k <= N)\n"
    "peak     the machine's FMA (fp32) and vdpbf16ps (bf16) peak on the threads\n"
    "allreduce  under mpirun (N >= 2 ranks): the trainer's gradient all-reduce\n"
    "         (tools/dist.c) on 2^k values, 256 .. N (default 16777216), with each --allreduce\n"
    "         format: the median time of the whole sum (packing included), of its\n"
    "         MPI_Allreduce, and of one combine of all values on one rank (widen,\n"
    "         add, round; fp32: a plain add), for docs/DISTRIBUTED.md's cost model\n"
    "convert  times bulk conversions on N elements (default 16777216: a 64 MiB\n"
    "         fp32 array)\n"
    "unscale  times the fused unscale + inf/NaN check (mp_unscale_check) in place\n"
    "         on 64 MiB buffers: N fp32 and 2N fp16 / bf16 elements\n"
    "optim    times one AdamW step (mp_optim_step) of N parameters in one tensor\n"
    "         with bf16 compute copies, for each way of keeping the weights and\n"
    "         the state (fp32 masters with fp32, bf16, fp8, 8-bit and 4-bit state;\n"
    "         Kahan bf16 weights with 8-bit state); bytes are those the step\n"
    "         reads and writes\n\n"
    "Each is run R times (default 15) after a warm-up, next to a plain memory copy\n"
    "on the same threads; the median is reported, with bandwidth counted as bytes\n"
    "read plus bytes written, and 'vs copy' = time / time of a copy moving as many\n"
    "bytes.\n\n"
    "  --n N      elements (of fp32)\n"
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
    {"f32->f16", MP_F32, MP_F16, 0},   {"f32->f16+stats", MP_F32, MP_F16, 1},   {"f16->f32", MP_F16, MP_F32, 0},
    {"f32->bf16", MP_F32, MP_BF16, 0}, {"f32->bf16+stats", MP_F32, MP_BF16, 1}, {"bf16->f32", MP_BF16, MP_F32, 0},
};
#define NCASES (sizeof cases / sizeof cases[0])

static double median_seconds(int reps, double *t) {
    qsort(t, (size_t)reps, sizeof *t, cmp_double);
    return reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
}

typedef struct {
    long n, reps;
    int json;
} bench_opts;

static int parse_opts(int argc, char **argv, bench_opts *o) {
    o->n = 1L << 24, o->reps = 15, o->json = 0;
    for (int i = 2; i < argc; i++) {
        const char *v;
        if (cli_is_help(&cmd_bench, argv[i])) return -1;
        if (strcmp(argv[i], "--json") == 0) o->json = 1;
        else if (strcmp(argv[i], "--n") == 0) {
            if (!(v = cli_value("bench", argc, argv, &i))) return CLI_USAGE;
            if (cli_parse_long(v, 1, 1L << 31, &o->n))
                return cli_usage_error("bench", "--n wants 1 .. 2^31, not '%s'", v);
        } else if (strcmp(argv[i], "--reps") == 0) {
            if (!(v = cli_value("bench", argc, argv, &i))) return CLI_USAGE;
            if (cli_parse_long(v, 1, 10000, &o->reps))
                return cli_usage_error("bench", "--reps wants 1 .. 10000, not '%s'", v);
        } else return cli_usage_error("bench", "unknown option '%s'", argv[i]);
    }
    return 0;
}

/* Median time of `reps` copies of `bytes` on nt threads. */
static double time_copy(void *dst, const void *src, size_t bytes, long reps, double *t) {
    const int nt = mp_get_threads();
    copy_threads(dst, src, bytes, nt);
    for (long r = 0; r < reps; r++) {
        const double t0 = now();
        copy_threads(dst, src, bytes, nt);
        t[r] = now() - t0;
    }
    return median_seconds((int)reps, t);
}

static int bench_convert(int argc, char **argv) {
    bench_opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    const long n = o.n, reps = o.reps;
    const int json = o.json;
    const size_t bytes = (size_t)n * 4, alloc = (bytes + 63) & ~(size_t)63; /* aligned_alloc wants multiples */
    float *f32 = aligned_alloc(64, alloc), *f32b = aligned_alloc(64, alloc);
    uint16_t *h = aligned_alloc(64, alloc);
    double *t = malloc((size_t)reps * sizeof *t);
    if (!f32 || !f32b || !h || !t) {
        fprintf(stderr, "mixprec bench: out of memory for %ld elements\n", n);
        free(f32);
        free(f32b);
        free(h);
        free(t);
        return 1;
    }
    /* gradient-like data: a spread of magnitudes, some tiny */
    uint64_t s = 0x2545f4914f6cdd1dull;
    for (long i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        f32[i] = (float)((double)(int32_t)(s >> 32) * 0x1p-31 * 0x1p-6 * (double)(1u << ((s >> 8) & 15)));
    }
    memset(f32b, 0, bytes);
    mp_convert(h, MP_F16, f32, MP_F32, (size_t)n, NULL);
    const int nt = mp_get_threads();
    const double copy_s = time_copy(f32b, f32, bytes, reps, t), copy_traffic = 2.0 * (double)bytes;
    if (json)
        printf("{\"bench\": \"convert\", \"n\": %ld, \"threads\": %d, \"isa\": \"%s\", \"reps\": %ld, \"results\": [\n"
               "  {\"op\": \"copy\", \"median_s\": %.6e, \"gbps\": %.3f}",
               n, nt, mp_isa_name(mp_cpu_isa()), reps, copy_s, copy_traffic / copy_s * 1e-9);
    else
        printf("bench convert: n = %ld (%.0f MiB of fp32), %d thread(s), path %s, median of %ld\n\n"
               "%-16s %10s %10s %9s\n%-16s %10.3f %10.2f %9s\n",
               n, (double)bytes / (1 << 20), nt, mp_isa_name(mp_cpu_isa()), reps, "op", "ms", "GB/s", "vs copy", "copy",
               copy_s * 1e3, copy_traffic / copy_s * 1e-9, "1.00");
    for (size_t c = 0; c < NCASES; c++) {
        const void *src = cases[c].src == MP_F32 ? (const void *)f32 : (const void *)h;
        void *dst = cases[c].dst == MP_F32 ? (void *)f32b : (void *)h;
        mp_convert_stats st = {0, 0, 0, 0, 0.0f};
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
        else printf("%-16s %10.3f %10.2f %9.2f\n", cases[c].name, med * 1e3, traffic / med * 1e-9, vs_copy);
    }
    if (json) printf("\n]}\n");
    free(f32);
    free(f32b);
    free(h);
    free(t);
    return 0;
}

/* In-place unscale of 64 MiB (by default) fp32, fp16 and bf16 gradient buffers.
 * The scale alternates 2^-16 / 2^16 so the values stay where they started. */
static int bench_unscale(int argc, char **argv) {
    bench_opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    const size_t bytes = (size_t)o.n * 4, alloc = (bytes + 63) & ~(size_t)63;
    float *buf = aligned_alloc(64, alloc), *tmp = aligned_alloc(64, alloc);
    double *t = malloc((size_t)o.reps * sizeof *t);
    if (!buf || !tmp || !t) {
        fprintf(stderr, "mixprec bench: out of memory for %ld elements\n", o.n);
        free(buf);
        free(tmp);
        free(t);
        return 1;
    }
    memset(tmp, 0, bytes);
    const double copy_s = time_copy(tmp, buf, bytes, o.reps, t);
    static const mp_dtype types[3] = {MP_F32, MP_F16, MP_BF16};
    if (o.json)
        printf(
            "{\"bench\": \"unscale\", \"bytes\": %zu, \"threads\": %d, \"isa\": \"%s\", \"reps\": %ld, \"results\": [\n"
            "  {\"op\": \"copy\", \"median_s\": %.6e, \"gbps\": %.3f}",
            bytes, mp_get_threads(), mp_isa_name(mp_cpu_isa()), o.reps, copy_s, 2.0 * (double)bytes / copy_s * 1e-9);
    else
        printf("bench unscale: %.0f MiB buffers, in place, %d thread(s), path %s, median of %ld\n\n"
               "%-16s %10s %10s %9s\n%-16s %10.3f %10.2f %9s\n",
               (double)bytes / (1 << 20), mp_get_threads(), mp_isa_name(mp_cpu_isa()), o.reps, "op", "ms", "GB/s",
               "vs copy", "copy", copy_s * 1e3, 2.0 * (double)bytes / copy_s * 1e-9, "1.00");
    for (int k = 0; k < 3; k++) {
        const size_t n = bytes / mp_format(types[k])->size;
        uint64_t s = 0x9e3779b97f4a7c15ull;
        for (size_t i = 0; i < (size_t)o.n; i++) { /* scaled-gradient-like values */
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            tmp[i] = (float)((double)(int32_t)(s >> 32) * 0x1p-31 * 8.0);
        }
        if (types[k] == MP_F32) memcpy(buf, tmp, bytes);
        else
            for (size_t h = 0; h < 2; h++)
                mp_convert((uint16_t *)buf + h * (size_t)o.n, types[k], tmp, MP_F32, (size_t)o.n, NULL);
        int found = 0;
        mp_unscale_check(buf, types[k], n, 0x1p-16f, &found);
        mp_unscale_check(buf, types[k], n, 0x1p16f, &found);
        for (long r = 0; r < o.reps; r++) {
            const double t0 = now();
            mp_unscale_check(buf, types[k], n, r % 2 ? 0x1p16f : 0x1p-16f, &found);
            t[r] = now() - t0;
        }
        const double med = median_seconds((int)o.reps, t);
        for (long r = 0; r < o.reps; r++) { /* inv_scale 1: the check alone, reading only */
            const double t0 = now();
            mp_unscale_check(buf, types[k], n, 1.0f, &found);
            t[r] = now() - t0;
        }
        const double med1 = median_seconds((int)o.reps, t);
        for (int c = 0; c < 2; c++) {
            char name[32];
            snprintf(name, sizeof name, "%s %s", c ? "check" : "unscale", mp_format(types[k])->name);
            const double m = c ? med1 : med, moved = c ? (double)bytes : 2.0 * (double)bytes;
            if (o.json)
                printf(",\n  {\"op\": \"%s\", \"n\": %zu, \"median_s\": %.6e, \"gbps\": %.3f, \"vs_copy\": %.3f, "
                       "\"found_inf\": %d}",
                       name, n, m, moved / m * 1e-9, m / copy_s, found);
            else printf("%-16s %10.3f %10.2f %9.2f\n", name, m * 1e3, moved / m * 1e-9, m / copy_s);
        }
    }
    if (o.json) printf("\n]}\n");
    free(buf);
    free(tmp);
    free(t);
    return 0;
}

/* One AdamW step's median time for a setting of weights and state. */
typedef struct {
    const char *name;
    mp_master_weights weights;
    mp_state_format state;
} optim_case;

static int bench_optim(int argc, char **argv) {
    bench_opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    static const optim_case settings[] = {
        {"fp32 state", MP_MASTER_FP32, MP_STATE_FP32}, {"bf16 state", MP_MASTER_FP32, MP_STATE_BF16},
        {"fp8 state", MP_MASTER_FP32, MP_STATE_FP8},   {"8bit state", MP_MASTER_FP32, MP_STATE_8BIT},
        {"4bit state", MP_MASTER_FP32, MP_STATE_4BIT}, {"kahan+8bit", MP_MASTER_KAHAN, MP_STATE_8BIT}};
    const size_t n = ((size_t)o.n + 255) / 256 * 256;
    enum { NSET = sizeof settings / sizeof settings[0] };
    float *init = malloc(n * sizeof *init);
    double *ts = malloc((size_t)o.reps * NSET * sizeof *ts);
    if (!init || !ts) {
        free(init), free(ts);
        fprintf(stderr, "mixprec bench: out of memory for %zu parameters\n", n);
        return 1;
    }
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        init[i] = (float)((double)(int32_t)(s >> 32) * 0x1p-31 * 0.02);
    }
    if (o.json)
        printf("{\"bench\": \"optim\", \"n\": %zu, \"threads\": %d, \"isa\": \"%s\", \"reps\": %ld, \"results\": [", n,
               mp_get_threads(), mp_isa_name(mp_cpu_isa()), o.reps);
    else
        printf("bench optim: AdamW step of %zu parameters, bf16 compute, %d thread(s), path %s, median of %ld\n\n"
               "%-14s %10s %12s %9s\n",
               n, mp_get_threads(), mp_isa_name(mp_cpu_isa()), o.reps, "setting", "ms", "bytes/param", "vs fp32");
    /* every setting held at once and stepped in turn, round after round: each median comes from the same
     * moments of the machine as the others */
    mp_optim *opt[NSET] = {NULL};
    for (size_t c = 0; c < NSET; c++) {
        mp_param *p = NULL;
        if (mp_optim_adamw(&opt[c], NULL) != MP_OK || mp_optim_set_state_format(opt[c], settings[c].state) != MP_OK ||
            mp_optim_add_as(opt[c], "w", init, n, MP_BF16, settings[c].weights, MP_BF16, &p) != MP_OK) {
            fprintf(stderr, "mixprec bench: %s\n", mp_last_error());
            for (size_t k = 0; k < NSET; k++) mp_optim_free(opt[k]);
            free(init), free(ts);
            return 1;
        }
        for (size_t i = 0; i < n; i++) p->grad[i] = init[i] * 0.5f;
        mp_optim_step(opt[c]); /* the state made and warm */
    }
    for (long r = 0; r < o.reps; r++)
        for (size_t c = 0; c < NSET; c++) {
            const double t0 = now();
            mp_optim_step(opt[c]);
            ts[c * (size_t)o.reps + (size_t)r] = now() - t0;
        }
    double base = 0;
    for (size_t c = 0; c < NSET; c++) {
        const double med = median_seconds((int)o.reps, ts + c * (size_t)o.reps);
        const mp_optim_bytes b = mp_optim_bytes_held(opt[c]);
        if (!c) base = med;
        if (o.json)
            printf("%s\n  {\"setting\": \"%s\", \"median_s\": %.6e, \"bytes_per_param\": %.4f, \"vs_fp32\": %.3f}",
                   c ? "," : "", settings[c].name, med, mp_bytes_per_param(&b), med / base);
        else printf("%-14s %10.3f %12.2f %9.2f\n", settings[c].name, med * 1e3, mp_bytes_per_param(&b), med / base);
        mp_optim_free(opt[c]);
    }
    if (o.json) printf("\n]}\n");
    free(init), free(ts);
    return 0;
}

static int bench_peak(int argc, char **argv) {
    int json = 0;
    for (int i = 2; i < argc; i++) {
        if (cli_is_help(&cmd_bench, argv[i])) return 0;
        if (strcmp(argv[i], "--json") == 0) json = 1;
        else return cli_usage_error("bench", "unknown option '%s'", argv[i]);
    }
    const double fma = mp_cpu_peak(MP_PEAK_FMA), dp = mp_cpu_peak(MP_PEAK_DPBF16), tdp = mp_cpu_peak(MP_PEAK_TDPBF16);
    char feats[256];
    mp_cpu_describe(feats, sizeof feats);
    if (json) {
        printf("{\"bench\": \"peak\", \"threads\": %d, \"isa\": \"%s\", \"features\": \"%s\", "
               "\"fma_gflops\": %.2f, \"dpbf16_gflops\": %.2f",
               mp_get_threads(), mp_isa_name(mp_cpu_isa()), feats, fma, dp);
        if (tdp > 0) printf(", \"tdpbf16_gflops\": %.2f", tdp);
        printf("}\n");
    } else {
        printf("cpu features: %s; path in use: %s\n", feats, mp_isa_name(mp_cpu_isa()));
        printf("peak on %d thread(s), best of 3: fp32 FMA %.1f GFLOP/s, bf16 vdpbf16ps %.1f GFLOP/s", mp_get_threads(),
               fma, dp);
        if (tdp > 0) printf(", bf16 TDPBF16PS %.1f GFLOP/s", tdp);
        printf("%s\n", fma == 0 ? " (no AVX2 + FMA on this path)" : dp == 0 ? " (no AVX512_BF16 on this path)" : "");
    }
    return 0;
}

typedef struct {
    const char *name;
    int ta, tb;
    size_t m, n, k;
    int gpt; /* the GPT benchmark's bf16 calls: bf16 in, C bf16 (fp32 for a weight gradient) */
    mp_dtype ct;
} gemm_shape;

static const gemm_shape gemm_shapes[] = {
    {"square 256", 0, 0, 256, 256, 256, 0, MP_F32},
    {"square 512", 0, 0, 512, 512, 512, 0, MP_F32},
    {"square 1024", 0, 0, 1024, 1024, 1024, 0, MP_F32},
    {"square 2048", 0, 0, 2048, 2048, 2048, 0, MP_F32},
    {"fwd 256x1024x784", 0, 1, 256, 1024, 784, 0, MP_F32},
    {"fwd 256x1024x1024", 0, 1, 256, 1024, 1024, 0, MP_F32},
    {"dX 256x784x1024", 0, 0, 256, 784, 1024, 0, MP_F32},
    {"dW 1024x784x256", 1, 0, 1024, 784, 256, 0, MP_F32},
    /* gpt:6-6-384-256, 16 sequences: 4096 rows of x */
    {"gpt 2048^3", 0, 0, 2048, 2048, 2048, 1, MP_BF16},
    {"gpt qkv 4096x1152x384", 0, 1, 4096, 1152, 384, 1, MP_BF16},
    {"gpt fc 4096x1536x384", 0, 1, 4096, 1536, 384, 1, MP_BF16},
    {"gpt proj 4096x384x1536", 0, 1, 4096, 384, 1536, 1, MP_BF16},
    {"gpt head 4096x256x384", 0, 1, 4096, 256, 384, 1, MP_BF16},
    {"gpt dX 4096x384x1536", 0, 0, 4096, 384, 1536, 1, MP_BF16},
    {"gpt dW 1536x384x4096", 1, 0, 1536, 384, 4096, 1, MP_F32},
};
#define NSHAPES (sizeof gemm_shapes / sizeof gemm_shapes[0])

/* bench gemm's options: -1 to go on, else the exit status (0 after --help, or a usage error's). */
static int gemm_options(int argc, char **argv, long *reps, long *max_dim, int *json) {
    for (int i = 2; i < argc; i++) {
        const char *v;
        if (cli_is_help(&cmd_bench, argv[i])) return 0;
        if (strcmp(argv[i], "--json") == 0) *json = 1;
        else if (strcmp(argv[i], "--reps") == 0) {
            if (!(v = cli_value("bench", argc, argv, &i))) return CLI_USAGE;
            if (cli_parse_long(v, 1, 1000, reps))
                return cli_usage_error("bench", "--reps wants 1 .. 1000, not '%s'", v);
        } else if (strcmp(argv[i], "--max") == 0) {
            if (!(v = cli_value("bench", argc, argv, &i))) return CLI_USAGE;
            if (cli_parse_long(v, 1, 1L << 30, max_dim))
                return cli_usage_error("bench", "--max wants a size, not '%s'", v);
        } else return cli_usage_error("bench", "unknown option '%s'", argv[i]);
    }
    return -1;
}

/* The operands (fp32 values, converted into a and b for each type), C and the times. */
typedef struct {
    float *a32, *b32, *c;
    void *a, *b;
    double *t;
    long reps;
    int json, first;
    double pk_fma, pk_bf16; /* the peaks an fp32 and a bf16 GEMM are measured against */
} gemm_bench;

/* One shape in each of its types: the median time and the share of the peak. */
static void bench_shape(gemm_bench *w, const gemm_shape *g) {
    static const mp_dtype types[3] = {MP_F32, MP_F16, MP_BF16};
    const double flops = 2.0 * (double)g->m * (double)g->n * (double)g->k;
    /* enough repetitions for about 0.2 s of work on small shapes */
    long r = w->reps;
    while (2 * r <= 20 * w->reps && (double)r * flops < 2e10) r *= 2;
    for (int ti = g->gpt ? 2 : 0; ti < 3; ti++) {
        const mp_dtype dt = types[ti];
        mp_convert(w->a, dt, w->a32, MP_F32, g->m * g->k, NULL);
        mp_convert(w->b, dt, w->b32, MP_F32, g->k * g->n, NULL);
        const size_t lda = g->ta ? g->m : g->k, ldb = g->tb ? g->k : g->n;
        mp_gemm(g->ta, g->tb, g->m, g->n, g->k, 1.0f, w->a, dt, lda, w->b, dt, ldb, 0.0f, w->c, g->ct, g->n, NULL);
        for (long i = 0; i < r; i++) {
            const double t0 = now();
            mp_gemm(g->ta, g->tb, g->m, g->n, g->k, 1.0f, w->a, dt, lda, w->b, dt, ldb, 0.0f, w->c, g->ct, g->n, NULL);
            w->t[i] = now() - t0;
        }
        const double med = median_seconds((int)r, w->t), gf = flops / med * 1e-9;
        const double peak = dt == MP_BF16 ? w->pk_bf16 : w->pk_fma;
        if (w->json)
            printf("%s\n  {\"shape\": \"%s\", \"m\": %zu, \"n\": %zu, \"k\": %zu, \"trans_a\": %d, \"trans_b\": %d, "
                   "\"type\": \"%s\", \"c_type\": \"%s\", \"gpt\": %d, \"median_s\": %.6e, \"gflops\": %.2f, "
                   "\"of_peak\": %.3f}",
                   w->first ? "" : ",", g->name, g->m, g->n, g->k, g->ta, g->tb, mp_format(dt)->name,
                   mp_format(g->ct)->name, g->gpt, med, gf, peak > 0 ? gf / peak : 0.0);
        else
            printf("%-24s %-5s %-5s %10.3f %10.1f %7.0f%%\n", g->name, mp_format(dt)->name, mp_format(g->ct)->name,
                   med * 1e3, gf, peak > 0 ? 100 * gf / peak : 0.0);
        w->first = 0;
    }
}

static int bench_gemm(int argc, char **argv) {
    long reps = 7, max_dim = 1L << 30;
    int json = 0;
    const int opt = gemm_options(argc, argv, &reps, &max_dim, &json);
    if (opt >= 0) return opt;
    /* operands 64-byte aligned, as the library's models and torch's allocator give them (malloc's 16 bytes
     * past a page split every 64-byte row of a tile's C in two lines; on the AMX Xeon that cost 0-5% of the
     * GPT's GEMMs, about the VM's spread) */
    const size_t maxe = (size_t)4096 * 1536;
    gemm_bench w = {aligned_alloc(64, maxe * 4),
                    aligned_alloc(64, maxe * 4),
                    aligned_alloc(64, maxe * 4),
                    aligned_alloc(64, maxe * 4),
                    aligned_alloc(64, maxe * 4),
                    malloc(((size_t)reps + 2) * 20 * sizeof(double)),
                    reps,
                    json,
                    1,
                    0,
                    0};
    if (!w.a32 || !w.b32 || !w.c || !w.a || !w.b || !w.t) {
        fprintf(stderr, "mixprec bench: out of memory\n");
        free(w.a32), free(w.b32), free(w.c), free(w.a), free(w.b), free(w.t);
        return 1;
    }
    uint64_t s = 42;
    for (size_t i = 0; i < maxe; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        w.a32[i] = (float)((double)(s >> 40) * 0x1p-24 - 0.5);
        w.b32[i] = (float)((double)((s >> 16) & 0xffffff) * 0x1p-24 - 0.5);
    }
    const double pk_fma = mp_cpu_peak(MP_PEAK_FMA), pk_dp = mp_cpu_peak(MP_PEAK_DPBF16),
                 pk_tdp = mp_cpu_peak(MP_PEAK_TDPBF16);
    w.pk_fma = pk_fma, w.pk_bf16 = pk_tdp > 0  ? pk_tdp
                                   : pk_dp > 0 ? pk_dp
                                               : pk_fma; /* the instruction its kernel runs */
    if (json)
        printf("{\"bench\": \"gemm\", \"threads\": %d, \"isa\": \"%s\", \"reps\": %ld, \"peak_fma_gflops\": %.2f, "
               "\"peak_dpbf16_gflops\": %.2f, \"peak_tdpbf16_gflops\": %.2f, \"results\": [",
               mp_get_threads(), mp_isa_name(mp_cpu_isa()), reps, pk_fma, pk_dp, pk_tdp);
    else
        printf("bench gemm: %d thread(s), path %s, median of %ld (small shapes: of more runs); C fp32 but for the\n"
               "gpt shapes (as the GPT calls them: C bf16, fp32 for dW)\n"
               "peak: fp32 FMA %.1f GFLOP/s, bf16 vdpbf16ps %.1f GFLOP/s, bf16 TDPBF16PS %.1f GFLOP/s\n\n"
               "%-24s %-5s %-5s %10s %10s %8s\n",
               mp_get_threads(), mp_isa_name(mp_cpu_isa()), reps, pk_fma, pk_dp, pk_tdp, "shape", "type", "C", "ms",
               "GFLOP/s", "of peak");
    for (size_t si = 0; si < NSHAPES; si++) {
        const gemm_shape *g = &gemm_shapes[si];
        if (g->m <= (size_t)max_dim && g->n <= (size_t)max_dim && g->k <= (size_t)max_dim) bench_shape(&w, g);
    }
    if (json) printf("\n]}\n");
    free(w.a32), free(w.b32), free(w.c), free(w.a), free(w.b), free(w.t);
    return 0;
}

/* One combine of n values on this rank, as the reduction does it: the median of reps. */
static double time_combine(mp_dtype wire, size_t n, long reps, double *t) {
    const size_t esize = wire == MP_F32 ? 4 : 2;
    void *a = calloc(n, esize), *b = calloc(n, esize);
    if (!a || !b) return free(a), free(b), -1.0;
    for (long r = 0; r < reps; r++) {
        const double t0 = now();
        if (wire == MP_F32) {
            float *x = a;
            const float *y = b;
            for (size_t i = 0; i < n; i++) x[i] += y[i];
        } else {
            wire_combine(b, a, n, wire);
        }
        t[r] = now() - t0;
    }
    free(a), free(b);
    return median_seconds((int)reps, t);
}

static int bench_allreduce(int argc, char **argv) {
    bench_opts o;
    const int rc = parse_opts(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    const long reps = o.reps;
    const int json = o.json;
    const mp_train_dist *d = dist_hook();
    if (!d) return cli_usage_error("bench", "allreduce needs ranks: mpirun -np N mixprec bench allreduce (N >= 2)");
    const size_t max_n = (size_t)o.n;
    float *g = malloc(max_n * sizeof *g);
    double *t = malloc((size_t)reps * sizeof *t), *tm = malloc((size_t)reps * sizeof *tm);
    int bad = !g || !t || !tm;
    if (dist_agree(bad, &(int){0}))
        return free(g), free(t), free(tm), fprintf(stderr, "mixprec bench: out of memory\n"), 1;
    for (size_t i = 0; i < max_n; i++)
        g[i] = 1e-3f * (float)((i * 2654435761u) % 1000u) - 0.5f; /* finite, mixed signs */
    if (!json)
        printf("all-reduce on %d ranks, median of %ld: us for the whole sum / in MPI / one combine on one rank\n",
               d->size, reps);
    static const mp_dtype wires[] = {MP_F32, MP_BF16, MP_F16};
    for (size_t n = 256; n <= max_n && !bad; n *= 2)
        for (size_t w = 0; w < 3 && !bad; w++) {
            dist_set_allreduce(wires[w]);
            float *x[1] = {g};
            const size_t nn[1] = {n};
            bad = d->sum_grads(d->ctx, x, nn, 1) != MP_OK; /* warm-up */
            for (long r = 0; r < reps && !bad; r++) {
                for (size_t i = 0; i < n; i++) g[i] = 1e-3f * (float)((i * 2654435761u) % 1000u) - 0.5f;
                const double m0 = dist_get_stats()->mpi_seconds, t0 = now();
                bad = d->sum_grads(d->ctx, x, nn, 1) != MP_OK;
                t[r] = now() - t0, tm[r] = dist_get_stats()->mpi_seconds - m0;
            }
            if (bad) break;
            const double all = median_seconds((int)reps, t), mpi = median_seconds((int)reps, tm);
            const double comb = time_combine(wires[w], n, reps, t);
            if (comb < 0) {
                fprintf(stderr, "mixprec bench: out of memory\n");
                dist_abort(1); /* the other ranks wait in the next all-reduce */
                bad = 1;
                break;
            }
            const uint64_t bytes = dist_get_stats()->wire_bytes;
            if (json)
                printf("{\"bench\": \"allreduce\", \"ranks\": %d, \"wire\": \"%s\", \"values\": %zu, \"bytes\": %llu, "
                       "\"us\": %.2f, \"mpi_us\": %.2f, \"combine_us\": %.2f}\n",
                       d->size, mp_format(wires[w])->name, n, (unsigned long long)bytes, all * 1e6, mpi * 1e6,
                       comb * 1e6);
            else
                printf("%9zu values  %-4s %10llu bytes  %10.1f us  %10.1f us in MPI  %9.1f us combine\n", n,
                       mp_format(wires[w])->name, (unsigned long long)bytes, all * 1e6, mpi * 1e6, comb * 1e6);
        }
    free(g), free(t), free(tm);
    if (bad) { /* this rank alone: the others wait in an all-reduce, so the job ends here */
        fprintf(stderr, "mixprec bench: the all-reduce failed: %s\n", mp_last_error());
        dist_abort(1);
    }
    return bad;
}

static int run(int argc, char **argv) {
    if (argc < 2) return cli_usage_error("bench", "which benchmark? (convert, unscale, optim, gemm, peak, allreduce)");
    if (strcmp(argv[1], "allreduce") == 0) return bench_allreduce(argc, argv);
    if (strcmp(argv[1], "gemm") == 0) return bench_gemm(argc, argv);
    if (strcmp(argv[1], "peak") == 0) return bench_peak(argc, argv);
    if (cli_is_help(&cmd_bench, argv[1])) return 0;
    if (strcmp(argv[1], "convert") == 0) return bench_convert(argc, argv);
    if (strcmp(argv[1], "unscale") == 0) return bench_unscale(argc, argv);
    if (strcmp(argv[1], "optim") == 0) return bench_optim(argc, argv);
    return cli_usage_error("bench", "unknown benchmark '%s' (convert, unscale, optim, gemm, peak, allreduce)", argv[1]);
}

const cli_command cmd_bench = {"bench", "time mixprec's kernels (make bench compares them with peers)", usage, run};
