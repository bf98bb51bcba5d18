/* amx_tiles.h - the one AMX tile configuration mixprec uses (palette 1,
 * eight tiles of 16 rows x 64 bytes), for the files built with AMX flags.
 * A constant object: GCC 12's _tile_loadconfig declares an 8-byte operand,
 * so stores into a local configuration could be deleted. */
#ifndef MP_AMX_TILES_H
#define MP_AMX_TILES_H

#include <immintrin.h>
#include <stdint.h>

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} mp_tile_config;

static const mp_tile_config mp_tile_config_16x64 __attribute__((aligned(64))) = {
    .palette = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

/* GCC 12's _tile_loadd declares no memory operand: a store into the memory
 * it reads could be moved past it without this. */
#define MP_TILE_BARRIER() __asm__ volatile("" ::: "memory")

#endif
