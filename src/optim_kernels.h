/* optim_kernels.h - the optimizer's element loops, written once and compiled
 * twice: by optim.c for any CPU and by cpu/optim_avx512.c with AVX-512 flags
 * (the compiler vectorizes the loops). Both builds give the same bits: the
 * arithmetic is the same fp32 operations in the same order, -ffp-contract=off,
 * and fmaf() wherever PyTorch's vectorized CPU kernels fuse (add with alpha,
 * lerp, addcmul). Checked against torch's own kernels by bench/crosscheck_optim.py.
 * Not installed; include from exactly those two files. */
#ifndef MIXPREC_OPTIM_KERNELS_H
#define MIXPREC_OPTIM_KERNELS_H

#include <math.h>

#include "internal.h"
#include "quant_kernels.h"

/* The element-wise helpers stochastic rounding needs: a counter-based hash, so
 * the random bits depend only on (key, i), not on threads or vector width. */
static inline uint32_t mp_sr_bits(uint64_t key, uint64_t i) {
    return (uint32_t)(mp_mix64(key + i * 0x9e3779b97f4a7c15ull) >> 48);
}

/* fp32 -> bf16 with stochastic rounding: rounds away from zero with
 * probability equal to the discarded fraction. NaN as mp_f32_to_bf16. */
static inline uint16_t mp_sr_bf16(float x, uint64_t key, uint64_t i) {
    const uint32_t u = mp_f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    if ((u & 0x7fffffffu) == 0x7f800000u) return (uint16_t)(u >> 16);
    return (uint16_t)((u + mp_sr_bits(key, i)) >> 16);
}

/* The element updates return the new weight and set *u to what the update
 * adds to w in fp32 (SGD: -lr d, d with weight decay and momentum; AdamW:
 * the decay's change w (1 - lr wd) - w plus -step_size m / denom), computed
 * apart from the new weight, whose arithmetic it does not change. */
static inline float sgd_elem(float w, float g, float *buf, const mp_sgd_coef *c, float *u) {
    float d = c->wd != 0.0f ? fmaf(w, c->wd, g) : g; /* d_p.add(param, alpha=wd) */
    if (c->use_momentum) {
        const float b = c->first ? d : fmaf(d, c->one_minus_damp, *buf * c->momentum);
        *buf = b;
        d = c->nesterov ? fmaf(b, c->momentum, d) : b;
    }
    *u = d * c->neg_lr;
    return fmaf(d, c->neg_lr, w); /* param.add_(d_p, alpha=-lr) */
}

/* sqrt(v) / bc2_sqrt, rounded as the division. The builds for CPUs with FMA
 * units (MP_OPTIM_FMA: cpu/optim_avx2.c, cpu/optim_avx512.c) divide without a
 * division: with r = 1 / b rounded (bc2_inv), q = a r and the remainder
 * e = a - q b exact (an FMA), q + e r rounded is a / b rounded to nearest
 * (Markstein's theorem: r within half an ulp of 1 / b, q within one ulp of
 * a / b), wherever the remainder is exact. Here it always is: b =
 * sqrt(1 - beta2^t) is in [2^-27, 1] (1 - beta2^t is at least 2^-53 in
 * double for beta2 < 1), a = sqrt(v) is 0 or at least 2^-75 (the least
 * subnormal's root) and at most 2^64, so q is a normal number and a - q b a
 * multiple of 2^-149. tests/test_optim.c checks it against the division. An
 * infinite or NaN q is the division's (e would be NaN); a -0 comes out +0,
 * which the eps added next makes the same. */
static inline float unbiased_sqrt(float v, const mp_adamw_coef *c) {
    const float a = sqrtf(v);
#ifdef MP_OPTIM_FMA
    const float q = a * c->bc2_inv;
    const float r = fmaf(fmaf(-q, c->bc2_sqrt, a), c->bc2_inv, q);
    return isfinite(q) ? r : q;
#else
    return a / c->bc2_sqrt;
#endif
}

/* AdamW's moments updated and its step (-step_size m / denom) returned. */
static inline float adamw_step(float g, float *m, float *v, const mp_adamw_coef *c) {
    const float mm = fmaf(c->w1, g - *m, *m); /* exp_avg.lerp_(grad, 1 - beta1) */
    /* exp_avg_sq.mul_(beta2).addcmul_(g, g, value=1-beta2): PyTorch's kernel computes
     * self + value * t1 * t2, which its GCC build fuses into fma(value * t1, t2, self) */
    const float vv = fmaf(c->c2 * g, g, *v * c->beta2);
    *m = mm;
    *v = vv;
    const float denom = unbiased_sqrt(vv, c) + c->eps;
    return c->neg_step_size * mm / denom;
}

static inline float adamw_elem(float w, float g, float *m, float *v, const mp_adamw_coef *c, float *u) {
    const float wd = w * c->decay; /* param.mul_(1 - lr * wd) */
    const float step = adamw_step(g, m, v, c);
    *u = (wd - w) + step;
    return wd + step; /* param.addcdiv_(exp_avg, denom, value=-step_size) */
}

/* A finite update u != 0 whose stored weight kept its bits (before: old, after:
 * now). A NaN or infinite update is not a lost one: the weight is already
 * broken (a NaN weight keeps its bits under any update). */
static inline uint64_t mp_lost32(float u, float old, float now) {
    return u != 0.0f && isfinite(u) && mp_f32_bits(old) == mp_f32_bits(now);
}
static inline uint64_t mp_lost16(float u, uint16_t old, uint16_t now) { return u != 0.0f && isfinite(u) && old == now; }

/* Each kernel returns its updates lost: mp_lost32 / mp_lost16 over the elements. */
static uint64_t k_sgd(float *w,       // (n,) fp32 master weights
                      const float *g, // (n,) fp32 gradients
                      float *buf,     // (n,) momentum buffer, or NULL without momentum
                      size_t n, const mp_sgd_coef *c) {
    float dummy = 0.0f, u;
    uint64_t lost = 0;
    for (size_t i = 0; i < n; i++) {
        const float old = w[i];
        w[i] = sgd_elem(old, g[i], buf ? &buf[i] : &dummy, c, &u);
        lost += mp_lost32(u, old, w[i]);
    }
    return lost;
}

static uint64_t k_adamw(float *w,           // (n,) fp32 master weights
                        const float *g,     // (n,) fp32 gradients
                        float *m, float *v, // (n,) exp_avg, exp_avg_sq
                        size_t n, const mp_adamw_coef *c) {
    float u;
    uint64_t lost = 0;
    for (size_t i = 0; i < n; i++) {
        const float old = w[i];
        w[i] = adamw_elem(old, g[i], &m[i], &v[i], c, &u);
        lost += mp_lost32(u, old, w[i]);
    }
    return lost;
}

/* The stochastic-rounding kernels take `base`, the index of element 0 in the
 * whole parameter, so a parameter split across threads draws the same bits. */
static uint64_t k_sgd_bf16(uint16_t *w, // (n,) bf16 weights (no master)
                           const float *g, float *buf, size_t n, const mp_sgd_coef *c, uint64_t key, uint64_t base) {
    float dummy = 0.0f, u;
    uint64_t lost = 0;
    for (size_t i = 0; i < n; i++) {
        const uint16_t old = w[i];
        w[i] = mp_sr_bf16(sgd_elem(mp_bf16_widen(old), g[i], buf ? &buf[i] : &dummy, c, &u), key, base + i);
        lost += mp_lost16(u, old, w[i]);
    }
    return lost;
}

static uint64_t k_adamw_bf16(uint16_t *w, // (n,) bf16 weights (no master)
                             const float *g, float *m, float *v, size_t n, const mp_adamw_coef *c, uint64_t key,
                             uint64_t base) {
    float u;
    uint64_t lost = 0;
    for (size_t i = 0; i < n; i++) {
        const uint16_t old = w[i];
        w[i] = mp_sr_bf16(adamw_elem(mp_bf16_widen(old), g[i], &m[i], &v[i], c, &u), key, base + i);
        lost += mp_lost16(u, old, w[i]);
    }
    return lost;
}

/* Weights only in fp16 (bf == 0) or bf16 (bf == 1), the state in fp32 (the
 * caller widens a state kept in a smaller format and stores it back): each
 * weight is widened to fp32, updated by sgd_elem / adamw_elem (the master
 * path's arithmetic) and rounded to nearest even (mp_f32_to_f16 /
 * mp_f32_to_bf16: integer bit arithmetic, the same under FTZ/DAZ). */
static inline float mp_half_widen(uint16_t h, int bf) { return bf ? mp_bf16_widen(h) : mp_f16_to_f32(h); }
static inline uint16_t mp_half_round(float x, int bf) { return bf ? mp_bf16_round(x) : mp_f32_to_f16(x); }

static uint64_t k_sgd_half(uint16_t *w,    // (n,) fp16/bf16 weights (no master)
                           const float *g, // (n,) fp32 gradients
                           float *buf,     // (n,) momentum buffer, or NULL without momentum
                           size_t n, const mp_sgd_coef *c, int bf) {
    float dummy = 0.0f, u;
    uint64_t lost = 0;
    for (size_t i = 0; i < n; i++) {
        const uint16_t old = w[i];
        w[i] = mp_half_round(sgd_elem(mp_half_widen(old, bf), g[i], buf ? &buf[i] : &dummy, c, &u), bf);
        lost += mp_lost16(u, old, w[i]);
    }
    return lost;
}

static inline uint64_t adamw_half_loop(uint16_t *w, const float *g, float *m, float *v, size_t n,
                                       const mp_adamw_coef *c, const int bf) {
    float u;
    uint64_t lost = 0;
    for (size_t i = 0; i < n; i++) {
        const uint16_t old = w[i];
        w[i] = mp_half_round(adamw_elem(mp_half_widen(old, bf), g[i], &m[i], &v[i], c, &u), bf);
        lost += mp_lost16(u, old, w[i]);
    }
    return lost;
}

/* (a loop for each format: the bf16 one vectorizes) */
static uint64_t k_adamw_half(uint16_t *w,        // (n,) fp16/bf16 weights (no master)
                             const float *g,     // (n,) fp32 gradients
                             float *m, float *v, // (n,) exp_avg, exp_avg_sq
                             size_t n, const mp_adamw_coef *c, int bf) {
    return bf ? adamw_half_loop(w, g, m, v, n, c, 1) : adamw_half_loop(w, g, m, v, n, c, 0);
}

/* fp32 master weights with the moments kept in fp16 (bf = 0) or bf16 (bf = 1):
 * each widened, updated as k_adamw and rounded back to nearest even, in the
 * one pass (the same bits as widening, k_adamw and narrowing in turn). */
static inline uint64_t adamw_hstate_loop(float *w, const float *g, uint16_t *hm, uint16_t *hv, size_t n,
                                         const mp_adamw_coef *c, const int bf) {
    float u;
    uint64_t lost = 0;
    for (size_t i = 0; i < n; i++) {
        const float old = w[i];
        float m = mp_half_widen(hm[i], bf), v = mp_half_widen(hv[i], bf);
        w[i] = adamw_elem(old, g[i], &m, &v, c, &u);
        hm[i] = mp_half_round(m, bf), hv[i] = mp_half_round(v, bf);
        lost += mp_lost32(u, old, w[i]);
    }
    return lost;
}

static uint64_t k_adamw_hstate(float *w, const float *g, uint16_t *hm, uint16_t *hv, size_t n, const mp_adamw_coef *c,
                               int bf) {
    return bf ? adamw_hstate_loop(w, g, hm, hv, n, c, 1) : adamw_hstate_loop(w, g, hm, hv, n, c, 0);
}

/* Kahan-compensated weights, as torch-optimi's AdamW(kahan_sum=True) stores
 * them: the weight w and its compensation k both in fp16/bf16, every result
 * rounded to nearest even. The update u (fp32, the master path's) goes into
 * k; w takes k; what w could not take goes back into k:
 *   k = rnd(k + u); w' = rnd(w + k); k = rnd(k + rnd(w - w'))
 * AdamW's decoupled decay rounds into w first (w = rnd(w (1 - lr wd))), as
 * optimi's param.mul_. An update is lost when neither w nor k changed. */
static inline void kahan_store(uint16_t *w, uint16_t *k, float wd, float u, int bf) {
    const float kk = mp_half_widen(mp_half_round(mp_half_widen(*k, bf) + u, bf), bf);
    const uint16_t now = mp_half_round(wd + kk, bf);
    *k = mp_half_round(kk + mp_half_widen(mp_half_round(wd - mp_half_widen(now, bf), bf), bf), bf);
    *w = now;
}

static uint64_t k_sgd_kahan(uint16_t *w, uint16_t *k, // (n,) fp16/bf16 weights and their compensation
                            const float *g, float *buf, size_t n, const mp_sgd_coef *c, int bf) {
    float dummy = 0.0f, u;
    uint64_t lost = 0;
    for (size_t i = 0; i < n; i++) {
        const uint16_t old = w[i], oldk = k[i];
        const float x = mp_half_widen(old, bf);
        (void)sgd_elem(x, g[i], buf ? &buf[i] : &dummy, c, &u);
        kahan_store(&w[i], &k[i], x, u, bf);
        lost += mp_lost16(u, old, w[i]) && oldk == k[i];
    }
    return lost;
}

static inline uint64_t adamw_kahan_loop(uint16_t *w, uint16_t *k, const float *g, float *m, float *v, size_t n,
                                        const mp_adamw_coef *c, const int bf) {
    uint64_t lost = 0;
    for (size_t i = 0; i < n; i++) {
        const uint16_t old = w[i], oldk = k[i];
        const float x = mp_half_widen(old, bf), wd = mp_half_widen(mp_half_round(x * c->decay, bf), bf);
        const float step = adamw_step(g[i], &m[i], &v[i], c);
        const float u = (wd - x) + step;
        kahan_store(&w[i], &k[i], wd, step, bf);
        lost += mp_lost16(u, old, w[i]) & (oldk == k[i]);
    }
    return lost;
}

static uint64_t k_adamw_kahan(uint16_t *w, uint16_t *k, // (n,) fp16/bf16 weights and their compensation
                              const float *g, float *m, float *v, size_t n, const mp_adamw_coef *c, int bf) {
    return bf ? adamw_kahan_loop(w, k, g, m, v, n, c, 1) : adamw_kahan_loop(w, k, g, m, v, n, c, 0);
}

static void k_widen(float *out, const uint16_t *h, size_t n, int bf) {
    if (bf)
        for (size_t i = 0; i < n; i++) out[i] = mp_bf16_widen(h[i]);
    else
        for (size_t i = 0; i < n; i++) out[i] = mp_f16_to_f32(h[i]);
}

static void k_narrow(uint16_t *h, const float *x, size_t n, int bf) {
    if (bf)
        for (size_t i = 0; i < n; i++) h[i] = mp_bf16_round(x[i]);
    else
        for (size_t i = 0; i < n; i++) h[i] = mp_f32_to_f16(x[i]);
}

/* Sum of squares in fp64 into eight partial sums in a fixed order (element i
 * of every whole group of 8 into acc[i % 8], a last partial group from
 * acc[0]): calls on consecutive pieces whose lengths but the last are
 * multiples of 8 sum as one call does. mp_sumsq_total adds the eight. */
static void k_sumsq(double acc[8], const float *g, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += (double)g[i + j] * (double)g[i + j];
    for (int j = 0; i < n; i++, j++) acc[j] += (double)g[i] * (double)g[i];
}

static void k_scale(float *g, size_t n, float c) {
    for (size_t i = 0; i < n; i++) g[i] *= c;
}

static void k_round_sr(uint16_t *dst,    // (n,) bf16
                       const float *src, // (n,) fp32
                       size_t n, uint64_t key, uint64_t base) {
    for (size_t i = 0; i < n; i++) dst[i] = mp_sr_bf16(src[i], key, base + i);
}

/* The table of a build; dequant, quant and adamw_qstate as given (k_dequant,
 * k_quant and NULL, or intrinsics of cpu/quant_avx2.c and cpu/quant_avx512.c),
 * in columns */
// clang-format off
#define MP_OPTIM_KERNELS(dequant, quant, adamw_qstate)                                                          \
    {k_sgd,        k_adamw,       k_sgd_bf16, k_adamw_bf16, k_sumsq, k_scale, k_round_sr, k_sgd_half, k_adamw_half, \
     k_sgd_kahan,  k_adamw_kahan, k_widen,    k_narrow,     dequant, quant, k_adamw_hstate, adamw_qstate}
// clang-format on

#endif
