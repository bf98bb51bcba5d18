/* quant_kernels.h - the optimizer state's block formats, element by element:
 * the portable loops (optim_kernels.h puts them in its tables) and the
 * helpers cpu/quant_avx2.c shares. Not installed. */
#ifndef MIXPREC_QUANT_KERNELS_H
#define MIXPREC_QUANT_KERNELS_H

#include <math.h>

#include "internal.h"

/* Blockwise quantized state, as torchao 0.18's OptimState8bit / 4bit / Fp8
 * store it (docs/TRAINING.md): per block of `block` values the scale is the
 * largest magnitude, at least 1e-12 (NaN carried), or for e4m3 that over 448;
 * each value is divided by it (IEEE division) and coded: e4m3 rounds to
 * nearest even (saturating); a map's code is the nearest entry, ties going up
 * (mp_state_map_code_ref). Both through the map's tables (internal.h);
 * then the second moment's floor: a positive quotient never takes the code
 * of 0 (least_positive; where torchao's code is 0 for a y > 0, the map's
 * least positive entry). Dequantized: the code's value times the scale. */
static inline int map_code(float y, const mp_state_map *m) {
    const uint32_t u = mp_f32_bits(y), mag = u & 0x7fffffffu, neg = m->sign_magnitude ? 0 : u >> 31;
    const uint32_t mask = (1u << m->shift) - 1;
    int32_t b = (int32_t)(mag >> m->shift) - (int32_t)m->lo;
    b = b < 0 ? 0 : b > m->top ? m->top : b;
    const uint32_t e = m->lut[b + (int32_t)neg * MP_MAP_BUCKETS], l = (mag & mask) ^ (neg ? mask : 0);
    int c = y != y ? m->nan_code : (int)((e + l) >> 24);
    c = y > 0.0f && c < m->least_positive ? m->least_positive : c;
    return m->sign_magnitude ? (int)(u >> 31 << 7) | c : c;
}

static inline void k_dequant(float *out, const uint8_t *codes, const float *scale, const mp_state_map *map, int bits,
                             size_t n, size_t block) {
    const float *q = map->value;
    for (size_t b = 0; b < n / block; b++) {
        const float s = scale[b];
        float *o = out + b * block;
        if (bits == 4) {
            const uint8_t *c = codes + b * block / 2;
            for (size_t i = 0; i < block / 2; i++) o[2 * i] = q[c[i] >> 4] * s, o[2 * i + 1] = q[c[i] & 15] * s;
        } else {
            const uint8_t *c = codes + b * block;
            for (size_t i = 0; i < block; i++) o[i] = q[c[i]] * s;
        }
    }
}

/* The largest magnitude of a block as torch's amax: the first NaN stays. */
static inline float block_amax(const float *x, size_t n) {
    float amax = 0.0f;
    for (size_t i = 0; i < n; i++) {
        const float a = fabsf(x[i]);
        amax = a > amax || a != a ? a : amax;
        if (amax != amax) break;
    }
    return amax;
}

static inline float block_scale(float amax, int bits) {
    const float s = amax < 1e-12f ? 1e-12f : amax;
    return bits ? s : s / 448.0f;
}

static inline void k_quant(uint8_t *codes, float *scale, const float *x, const mp_state_map *map, int bits, size_t n,
                           size_t block) {
    for (size_t b = 0; b < n / block; b++) {
        const float *xb = x + b * block;
        const float s = block_scale(block_amax(xb, block), bits);
        scale[b] = s;
        if (bits == 4) {
            uint8_t *c = codes + b * block / 2;
            for (size_t i = 0; i < block / 2; i++)
                c[i] = (uint8_t)(map_code(xb[2 * i] / s, map) << 4 | map_code(xb[2 * i + 1] / s, map));
        } else {
            uint8_t *c = codes + b * block;
            for (size_t i = 0; i < block; i++) c[i] = (uint8_t)map_code(xb[i] / s, map);
        }
    }
}

#endif
