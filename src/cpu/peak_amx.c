/* peak_amx.c - nothing but TDPBF16PS into four independent accumulator
 * tiles: the AMX bf16 peak (16 x 16 x 32 multiply-adds per instruction). */
#include <immintrin.h>

#include "../internal.h"
#include "amx_tiles.h"

double mp_peak_tdpbf16_amx(uint64_t iters) {
    float out[16 * 16] __attribute__((aligned(64)));
    uint16_t src[16 * 32] __attribute__((aligned(64)));
    for (int i = 0; i < 16 * 32; i++) src[i] = (uint16_t)(0x3f80 + (i * 37) % 128); /* bf16 in [1, 2): no zeros */
    _tile_loadconfig(&mp_tile_config_16x64);
    MP_TILE_BARRIER();
    _tile_loadd(0, src, 64);
    _tile_loadd(1, src, 64);
    _tile_loadd(2, src, 64);
    _tile_loadd(3, src, 64);
    _tile_zero(4);
    _tile_zero(5);
    _tile_zero(6);
    _tile_zero(7);
    for (uint64_t i = 0; i < iters; i++) {
        _tile_dpbf16ps(4, 0, 2);
        _tile_dpbf16ps(5, 0, 3);
        _tile_dpbf16ps(6, 1, 2);
        _tile_dpbf16ps(7, 1, 3);
    }
    __asm__ volatile("" ::: "memory");
    _tile_stored(4, out, 64);
    _tile_release();
    return out[0];
}
