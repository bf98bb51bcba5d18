/* train_loop.c - your own model and training loop on mixprec's public API: the
 * PyTorch AMP recipe in C (scale the loss, backward, unscale, clip, step,
 * update). A softmax classifier computing in fp16 with fp32 master weights and
 * dynamic loss scaling learns three Gaussian blobs in 8 dimensions.
 *   cc train_loop.c $(pkg-config --cflags --libs mixprec) -o train_loop */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <mixprec/mixprec.h>

enum { N = 768, D = 8, K = 3, B = 64, STEPS = 300 };

#define CHECK(call)                                                          \
    do {                                                                     \
        if ((call) != MP_OK) {                                               \
            fprintf(stderr, "train_loop: %s: %s\n", #call, mp_last_error()); \
            return 1;                                                        \
        }                                                                    \
    } while (0)

static float uniform(unsigned *s) { return (float)((*s = *s * 1664525u + 1013904223u) >> 8) / 16777216.0f; }

int main(void) {
    static float x[N * D];
    static int32_t y[N];
    unsigned seed = 1;
    for (int i = 0; i < N; i++) { /* class c: a blob around 2 e_c, unit noise */
        y[i] = i % K;
        for (int d = 0; d < D; d++) x[i * D + d] = (d == y[i] ? 2.0f : 0.0f) + 2.0f * uniform(&seed) - 1.0f;
    }
    static uint16_t xh[N * D];
    CHECK(mp_convert(xh, MP_F16, x, MP_F32, N * D, NULL)); /* inputs in the compute format */

    mp_optim *opt;
    mp_adamw_config ac = mp_adamw_defaults();
    ac.lr = 1e-2;
    CHECK(mp_optim_adamw(&opt, &ac));
    static float w0[K * D];
    for (int i = 0; i < K * D; i++) w0[i] = 0.1f * (uniform(&seed) - 0.5f);
    mp_param *w;
    CHECK(mp_optim_add(opt, "fc.weight", w0, K * D, MP_F16, &w)); /* fp32 master + fp16 copy */
    mp_scaler scaler;
    CHECK(mp_scaler_init(&scaler, NULL)); /* PyTorch GradScaler's defaults: 65536, x2 every 2000 */

    static uint16_t logits[B * K], dlogits[B * K];
    float first = 0, loss = 0;
    for (int step = 0; step < STEPS; step++) {
        const int i0 = (step * B) % N;
        const uint16_t *xb = xh + i0 * D;
        const float S = mp_scaler_get_scale(&scaler);
        /* forward: logits = x W^T in fp16 (fp32 accumulation), loss in fp32,
         * backward seed = S dloss/dlogits stored in fp16 */
        CHECK(mp_gemm(0, 1, B, K, D, 1.0f, xb, MP_F16, D, w->half, MP_F16, D, 0.0f, logits, MP_F16, K, NULL));
        CHECK(mp_cross_entropy(&loss, dlogits, MP_F16, logits, MP_F16, y + i0, B, K, S, MP_F32, NULL));
        /* backward: dW = dlogits^T x, rounded to fp16, into the fp32 gradient */
        const mp_gemm_epilogue ep = {.round_to = MP_F16};
        CHECK(mp_gemm_ex(1, 0, K, D, B, 1.0f, dlogits, MP_F16, K, xb, MP_F16, D, 0.0f, w->grad, MP_F32, D, &ep));
        int found_inf = 0;
        double norm;
        CHECK(mp_scaler_unscale(&scaler, opt, &found_inf));         /* grad *= 1/S, inf/NaN check */
        CHECK(mp_clip_grad_norm(opt, &scaler, 1.0, MP_F32, &norm)); /* on unscaled gradients */
        CHECK(mp_scaler_step(&scaler, opt, &found_inf));            /* skipped on inf/NaN */
        const mp_status up = mp_scaler_update(&scaler, found_inf);  /* grow or back off */
        if (up != MP_OK) return fprintf(stderr, "train_loop: %s\n", mp_last_error()), 1;
        if (step == 0) first = loss;
    }
    int right = 0; /* accuracy over all points with the fp16 weights */
    for (int i = 0; i < N; i++) {
        float best = -INFINITY;
        int arg = 0;
        for (int c = 0; c < K; c++) {
            float z = 0;
            for (int d = 0; d < D; d++) z += x[i * D + d] * mp_f16_to_f32(((const uint16_t *)w->half)[c * D + d]);
            if (z > best) best = z, arg = c;
        }
        right += arg == y[i];
    }
    printf("loss %.4f -> %.4f, accuracy %.1f%%, loss scale %g, %llu skipped steps\n", first, loss, 100.0 * right / N,
           mp_scaler_get_scale(&scaler), (unsigned long long)scaler.skipped);
    mp_optim_free(opt);
    return loss < 0.5f * first && right > N * 9 / 10 ? 0 : 1;
}
