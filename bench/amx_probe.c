/* amx_probe.c - what bounds the AMX GEMM's micro-kernel: the kernel's own
 * tile loads and TDPBF16PS on one core, with the operands where the driver
 * keeps them and elsewhere, and the layout of the B panel.
 *
 * Each variant runs the micro-kernel of src/cpu/gemm_amx.c (a 32 x 32 block
 * of C in tiles 4-7, per 32-deep slice of k two A tiles and two B tiles
 * loaded, four TDPBF16PS; A's by TILELOADDT1 as the kernel's, or by TILELOADD) over a row block of A (MB panels of 32
 * rows) and a column block of B (NB panels of 32 columns), kc deep, and stores each block's sums into an L1 buffer as
 * the driver's strip. It prints GFLOP/s and the share of the TDPBF16PS peak (16 x 16 x 32 x 2 flops per 16 cycles at
 * the frequency measured by a dependent TDPBF16PS chain).
 *
 * A second table places the stores of C (one 64-byte line per row of a tile,
 * as a bf16 C's; a 4096-row C of 36 column panels, 9 MiB, as the GPT's qkv)
 * around the same products, as the driver visits the tiles (a row block of
 * MB panels at a time, each column panel over its row panels, the sums of a
 * column panel's tiles in a strip): none; after every second tile, as the
 * driver's epilogue runs; or each tile's rows stored in pieces between the
 * slices of the next tile's products (the first tile of a column panel
 * without, the last one's after it).
 *
 *   make build && taskset -c 1 build/amx_probe [kc]     (kc: 384 by default)
 *
 * Needs a CPU with AMX-BF16 and Linux 5.16+ (arch_prctl permission). */
#define _GNU_SOURCE
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cpu/amx_tiles.h" /* the library's tile configuration and compiler barrier */

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static float sums[32 * 32] __attribute__((aligned(64)));

/* The accumulators, tiles 4-7, zeroed. */
static inline void zero_tiles(void) {
    _tile_zero(4);
    _tile_zero(5);
    _tile_zero(6);
    _tile_zero(7);
}

/* The 32 x 32 sums in tiles 4-7 stored at out, row stride 32 floats. */
static inline void store_tiles(float *out) {
    MP_TILE_BARRIER();
    _tile_stored(4, out, 128);
    _tile_stored(5, out + 16, 128);
    _tile_stored(6, out + 512, 128);
    _tile_stored(7, out + 528, 128);
    MP_TILE_BARRIER();
}

/* One 32-deep slice's loads and products: A panel (32 rows x 64 bytes), B
 * panel with its two 16-column halves interleaved (row stride 128 bytes, the
 * driver's layout) or one after the other (compact: row stride 64). */
static inline __attribute__((always_inline)) void slice(const uint8_t *A, const uint8_t *B, int compact, int stream) {
    const long bs = compact ? 64 : 128, b1 = compact ? 1024 : 64;
    MP_TILE_BARRIER();
    if (stream) _tile_stream_loadd(0, A, 64);
    else _tile_loadd(0, A, 64);
    _tile_loadd(2, B, bs);
    _tile_loadd(3, B + b1, bs);
    _tile_dpbf16ps(4, 0, 2);
    if (stream) _tile_stream_loadd(1, A + 1024, 64);
    else _tile_loadd(1, A + 1024, 64);
    _tile_dpbf16ps(5, 0, 3);
    _tile_dpbf16ps(6, 1, 2);
    _tile_dpbf16ps(7, 1, 3);
    MP_TILE_BARRIER();
}

/* One 32 x 32 block over kc, its sums stored as the driver's strip. */
static __attribute__((noinline)) void block(size_t kc, const uint8_t *A, const uint8_t *B, int compact, int stream) {
    zero_tiles();
    for (size_t s = 0; s < kc; s += 32, A += 2048, B += 2048) slice(A, B, compact, stream);
    store_tiles(sums);
}

/* Rows [r0, r1) of a tile's sums t (row stride 32 floats) stored to their lines of C, ldc bytes apart. */
static inline void store_rows(uint8_t *c, size_t ldc, const float *t, size_t r0, size_t r1) {
    for (size_t r = r0; r < r1; r++) _mm512_storeu_si512(c + r * ldc, _mm512_loadu_si512(t + r * 32));
}

/* One tile's products (the driver's kernel: A by TILELOADDT1) into out (row stride 32 floats), with rows
 * [s 32 / parts, (s + 1) 32 / parts) of the tile before (prev, NULL: none) stored to prev_c after slice s. */
static __attribute__((noinline)) void tile_beside(size_t kc, const uint8_t *A, const uint8_t *B, float *out,
                                                  const float *prev, uint8_t *prev_c, size_t ldc) {
    const size_t parts = kc / 32;
    zero_tiles();
    for (size_t s = 0; s < parts; s++, A += 2048, B += 2048) {
        slice(A, B, 0, 1);
        if (prev) store_rows(prev_c, ldc, prev, s * 32 / parts, (s + 1) * 32 / parts);
    }
    store_tiles(out);
}

/* ns per 32 x 32 tile with C's stores placed as `how` says (0: none, 1: after every second tile, 2: beside). */
static double c_stores(size_t kc, const uint8_t *A, const uint8_t *B, float *strip, uint8_t *C, int how) {
    enum { M = 4096, MB = 5, NB = 36 };
    const size_t pb = 32 * kc * 2, ldc = NB * 64;
    double best = 1e9;
    for (int r = 0; r < 5; r++) {
        const double t = now();
        size_t tiles = 0;
        for (size_t i0 = 0; i0 < M; i0 += 32 * MB)
            for (size_t jp = 0; jp < NB; jp++) {
                const size_t nt = (M - i0) / 32 < MB ? (M - i0) / 32 : MB;
                for (size_t ip = 0; ip < nt; ip++, tiles++) {
                    uint8_t *c = C + (i0 + ip * 32) * ldc + jp * 64;
                    const int beside = how == 2 && ip > 0;
                    tile_beside(kc, A + ip * pb, B + jp * pb, strip + ip * 1024,
                                beside ? strip + (ip - 1) * 1024 : NULL, beside ? c - 32 * ldc : NULL, ldc);
                    if (how == 1 && (ip % 2 == 1 || ip + 1 == nt))
                        for (size_t q = ip % 2 == 1 ? ip - 1 : ip; q <= ip; q++)
                            store_rows(C + (i0 + q * 32) * ldc + jp * 64, ldc, strip + q * 1024, 0, 32);
                    if (how == 2 && ip + 1 == nt) store_rows(c, ldc, strip + ip * 1024, 0, 32);
                }
            }
        const double dt = (now() - t) / (double)tiles;
        if (dt < best) best = dt;
    }
    return best * 1e9;
}

/* Dependent TDPBF16PS: one every 16 cycles at the core's clock. */
static double tdp_per_second(void) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(4);
    double best = 0;
    for (int r = 0; r < 5; r++) {
        const double t = now();
        for (int i = 0; i < 200000; i++) _tile_dpbf16ps(4, 0, 1);
        const double rate = 200000 / (now() - t);
        if (rate > best) best = rate;
    }
    return best;
}

typedef struct {
    const char *name;
    size_t mb, nb; /* panels of A and B in the blocks */
    int a_outer;   /* loop order: 0 = B panel outer (held in L1 over the row panels), 1 = A panel outer */
    int compact;   /* B halves one after the other */
    int stream;    /* A tiles by TILELOADDT1 (the library's kernel): a hint not to keep them in L1 */
} variant;

int main(int argc, char **argv) {
    if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) != 0) {
        fprintf(stderr, "amx_probe: no AMX tile permission on this CPU/kernel\n");
        return 1;
    }
    _tile_loadconfig(&mp_tile_config_16x64);
    const size_t kc = argc > 1 ? (size_t)atoi(argv[1]) : 384;
    if (kc < 32 || kc % 32) {
        fprintf(stderr, "amx_probe: kc must be a multiple of 32\n");
        return 1;
    }
    const double peak = tdp_per_second() * 16 * 16 * 32 * 2; /* flops per TDPBF16PS */
    const variant vs[] = {
        {"driver: B panel in L1, A block (5 panels) from L2", 5, 36, 0, 0, 1},
        {"same, A by TILELOADD (kept in L1)", 5, 36, 0, 0, 0},
        {"same, B halves compact", 5, 36, 0, 1, 0},
        {"A panel in L1, B block (36 panels) from L2", 5, 36, 1, 0, 0},
        {"same, B halves compact", 5, 36, 1, 1, 0},
        {"A and B in L1 (1 x 1 panels)", 1, 1, 0, 0, 0},
        {"same, B halves compact", 1, 1, 0, 1, 0},
        {"A and B from L2 (a new pair of panels each block)", 36, 36, 2, 0, 0},
        {"same, A by TILELOADDT1", 36, 36, 2, 0, 1},
    };
    const size_t maxp = 36, pbytes = 32 * kc * 2;
    uint8_t *A = aligned_alloc(4096, maxp * pbytes), *B = aligned_alloc(4096, maxp * pbytes);
    for (size_t i = 0; i < maxp * pbytes; i += 2) A[i] = 0, A[i + 1] = 0x3f, B[i] = 0x10, B[i + 1] = 0x3f;
    printf("kc %zu; TDPBF16PS peak %.0f GFLOP/s on this core\n", kc, peak / 1e9);
    for (size_t v = 0; v < sizeof vs / sizeof vs[0]; v++) {
        const variant *x = &vs[v];
        const size_t blocks = x->a_outer == 2 ? x->mb : x->mb * x->nb,
                     reps = (size_t)(2e9 / (2.0 * 1024 * kc * blocks)) + 1;
        double best = 1e9;
        for (int r = 0; r < 7; r++) {
            const double t = now();
            for (size_t rep = 0; rep < reps; rep++) {
                if (x->a_outer == 2)
                    for (size_t p = 0; p < x->mb; p++)
                        block(kc, A + p * pbytes, B + ((p * 7) % x->nb) * pbytes, x->compact, x->stream);
                else if (x->a_outer)
                    for (size_t ip = 0; ip < x->mb; ip++)
                        for (size_t jp = 0; jp < x->nb; jp++)
                            block(kc, A + ip * pbytes, B + jp * pbytes, x->compact, x->stream);
                else
                    for (size_t jp = 0; jp < x->nb; jp++)
                        for (size_t ip = 0; ip < x->mb; ip++)
                            block(kc, A + ip * pbytes, B + jp * pbytes, x->compact, x->stream);
            }
            const double dt = now() - t;
            if (dt < best) best = dt;
        }
        const double gf = 2.0 * 1024 * (double)kc * (double)blocks * (double)reps / best;
        printf("%-52s %7.0f GFLOP/s  %3.0f%% of peak\n", x->name, gf / 1e9, 100 * gf / peak);
    }
    const size_t csize = (size_t)4096 * 36 * 64;
    uint8_t *C = aligned_alloc(4096, csize);
    float *strip = aligned_alloc(64, 5 * 1024 * sizeof(float));
    memset(C, 0, csize), memset(strip, 0, 5 * 1024 * sizeof(float));
    static const char *const how[3] = {"no stores of C", "C stored after every second tile (the driver's epilogue)",
                                       "each tile's C stored between the next tile's slices"};
    printf("\nC's stores, 4096 x 1152 bf16 (9 MiB): row blocks of 5 panels by 36 column panels, kc %zu\n", kc);
    for (int h = 0; h < 3; h++) {
        const double ns = c_stores(kc, A, B, strip, C, h);
        printf("%-58s %6.1f ns a tile  %3.0f%% of peak\n", how[h], ns,
               100 * 2.0 * 1024 * (double)kc / (ns * 1e-9) / peak);
    }
    _tile_release();
    free(A), free(B), free(C), free(strip);
    return 0;
}
