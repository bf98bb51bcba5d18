/* step_probe.c - the GPT step's heaviest calls one at a time, as
 * gpt:6-6-384-256 at batch 16 makes them (N = 4096 tokens, C = 384, 6
 * heads, bf16): its bf16 GEMMs with their epilogues (the bias, C's counts,
 * and the post step: GELU after c_fc, the residual add after the
 * projections, GELU's gradient after the MLP projection's dX), and the
 * attention's forward and backward. Each is run repeatedly on the same
 * operands for the given seconds; it prints the best time. The operands stay
 * in the caches between calls where they fit, so these are the calls'
 * costs without the step's traffic around them.
 *
 *   make build && taskset -c 1 build/step_probe [threads] [seconds]
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

enum { N = 4096, C = 384, H = 6, B = 16, T = 256 };

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint16_t *bf16_buffer(size_t n, float scale, unsigned seed) {
    uint16_t *p = aligned_alloc(64, (n * 2 + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "step_probe: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = mp_f32_to_bf16(scale * ((float)(seed >> 8) * 0x1p-23f - 1.0f));
    }
    return p;
}

/* The best time (ms) of one GEMM N x n x k, x W^T (tb 1) or dy W (tb 0), with epilogue post. */
static double gemm_ms(size_t n, size_t k, int tb, mp_gemm_post post, double secs) {
    uint16_t *a = bf16_buffer(N * k, 1.0f, 1), *w = bf16_buffer(n * k, 0.05f, 2), *x = bf16_buffer(N * n, 1.0f, 3);
    uint16_t *c = bf16_buffer(N * n, 0.0f, 4), *o = bf16_buffer(N * n, 0.0f, 5);
    float *bias = calloc(n, sizeof *bias);
    mp_convert_stats st[2];
    memset(st, 0, sizeof st);
    mp_gemm_epilogue ep = {.bias = post == MP_POST_GELU_GRAD ? NULL : bias,
                           .stats = &st[0],
                           .post = post,
                           .post_x = post == MP_POST_GELU_GRAD || post == MP_POST_ADD ? x : NULL,
                           .post_out = post == MP_POST_GELU ? o : NULL,
                           .post_stats = &st[1]};
    double best = 1e9;
    for (double t0 = now(); now() - t0 < secs;) {
        const double t = now();
        if (mp_gemm_ex(0, tb, N, n, k, 1.0f, a, MP_BF16, k, w, MP_BF16, tb ? k : n, 0.0f, c, MP_BF16, n, &ep) !=
            MP_OK) {
            fprintf(stderr, "step_probe: %s\n", mp_last_error());
            exit(1);
        }
        const double d = now() - t;
        best = d < best ? d : best;
    }
    free(a), free(w), free(x), free(c), free(o), free(bias);
    return best * 1e3;
}

int main(int argc, char **argv) {
    const int threads = argc > 1 ? atoi(argv[1]) : 1;
    const double secs = argc > 2 ? atof(argv[2]) : 2.0;
    if (threads < 1 || threads > MP_MAX_THREADS || !(secs > 0)) {
        fprintf(stderr, "usage: step_probe [threads 1..%d] [seconds > 0]\n", MP_MAX_THREADS);
        return 2;
    }
    mp_set_threads(threads);
    printf("step_probe: path %s, %d thread(s), best of %.1f s each\n\n", mp_isa_name(mp_cpu_isa()), threads, secs);
    const struct {
        const char *name;
        size_t n, k;
        int tb;
        mp_gemm_post post;
    } gemms[] = {
        {"qkv: x W^T + bias", 3 * C, C, 1, MP_POST_NONE},
        {"c_fc: x W^T + bias, GELU", 4 * C, C, 1, MP_POST_GELU},
        {"c_proj (MLP): x W^T + bias + residual", C, 4 * C, 1, MP_POST_ADD},
        {"c_proj (MLP) dX: dy W, GELU's gradient", 4 * C, C, 0, MP_POST_GELU_GRAD},
        {"c_fc dX: dy W", C, 4 * C, 0, MP_POST_NONE},
    };
    for (size_t i = 0; i < sizeof gemms / sizeof gemms[0]; i++) {
        const double ms = gemm_ms(gemms[i].n, gemms[i].k, gemms[i].tb, gemms[i].post, secs);
        printf("%-42s %5d x %4zu x %4zu  %7.3f ms  %6.0f GFLOP/s\n", gemms[i].name, N, gemms[i].n, gemms[i].k, ms,
               2.0 * N * (double)gemms[i].n * (double)gemms[i].k / ms * 1e-6);
    }
    /* the attention of one layer */
    const size_t stride = mp_attention_scratch_floats(T, C / H, 2);
    uint16_t *qkv = bf16_buffer((size_t)N * 3 * C, 1.0f, 6), *dy = bf16_buffer((size_t)N * C, 1e-3f, 7);
    uint16_t *y = bf16_buffer((size_t)N * C, 0.0f, 8), *dqkv = bf16_buffer((size_t)N * 3 * C, 0.0f, 9);
    float *sm = malloc((size_t)B * H * T * 2 * sizeof *sm);
    float *scratch = aligned_alloc(64, ((size_t)threads * stride * 4 + 63) / 64 * 64);
    if (!sm || !scratch) return 1;
    const mp_attention att = {.B = B,
                              .T = T,
                              .H = H,
                              .C = C,
                              .T_max = T,
                              .ct = MP_BF16,
                              .acc = MP_F32,
                              .scale = 0.125f,
                              .qkv = qkv,
                              .y = y,
                              .sm = sm,
                              .dy = dy,
                              .dqkv = dqkv,
                              .scratch = scratch,
                              .stride = stride,
                              .threads = threads};
    mp_convert_stats st[4];
    memset(st, 0, sizeof st);
    double fwd = 1e9, bwd = 1e9;
    for (double t0 = now(); now() - t0 < 2 * secs;) {
        const double t = now();
        if (mp_attention_forward(mp_kernels_current(), &att, &st[0], &st[1]) != MP_OK) return 1;
        const double t1 = now();
        if (mp_attention_backward(mp_kernels_current(), &att, &st[2], &st[3]) != MP_OK) return 1;
        const double t2 = now();
        fwd = t1 - t < fwd ? t1 - t : fwd, bwd = t2 - t1 < bwd ? t2 - t1 : bwd;
    }
    printf("%-42s %7.3f ms\n%-42s %7.3f ms\n", "attention forward (B16 T256 C384 H6)", fwd * 1e3, "attention backward",
           bwd * 1e3);
    free(qkv), free(dy), free(y), free(dqkv), free(sm), free(scratch);
    return 0;
}
