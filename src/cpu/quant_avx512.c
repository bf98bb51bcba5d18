/* quant_avx512.c - the optimizer state's block formats (quant_kernels.h's
 * k_dequant, k_quant) with AVX-512F/BW/DQ intrinsics, 16 values a vector:
 * 4-bit codes by a binary search of the map's 15 thresholds held in one
 * register (optim.c's heap), their values by one permute; e4m3 (fp8) codes
 * and values by arithmetic on the bits; the 8-bit maps' codes through their
 * bucket table (one 16-lane gather), their values by VBMI byte permutes
 * (cpu/dequant_vbmi.c) where the CPU has them, else by the AVX2 gathers.
 * The same bits as the portable loops; used by the avx512 paths. */
#include <immintrin.h>

#include "../quant_kernels.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* A map's constants, broadcast once per call. */
typedef struct {
    __m512 heap; /* a 16-entry map's thresholds in heap order */
    __m512i lo, top, mask, nan_code, least_positive;
    __m128i shift;
    const uint32_t *lut; /* an 8-bit map's buckets */
} map_consts;

static map_consts consts_of(const mp_state_map *m) {
    map_consts k;
    k.heap = _mm512_loadu_ps(m->heap);
    k.lo = _mm512_set1_epi32((int)m->lo), k.top = _mm512_set1_epi32(m->top);
    k.mask = _mm512_set1_epi32((int)((1u << m->shift) - 1));
    k.nan_code = _mm512_set1_epi32(m->nan_code), k.least_positive = _mm512_set1_epi32(m->least_positive);
    k.shift = _mm_cvtsi32_si128((int)m->shift);
    k.lut = m->lut;
    return k;
}

/* What the code functions below are told, as constants: whether a quotient
 * can be NaN (only where the block's scale is), and whether the map has a
 * floor for y > 0 (least_positive). */
enum { CAN_NAN = 1, FLOOR = 2 };

/* A NaN quotient's code, then the map's floor for y > 0. */
ALWAYS_INLINE __m512i nan_and_floor(__m512i c, __m512 y, const map_consts *k, const int how) {
    if (how & CAN_NAN) c = _mm512_mask_mov_epi32(c, _mm512_cmp_ps_mask(y, y, _CMP_UNORD_Q), k->nan_code);
    if (how & FLOOR)
        c = _mm512_mask_max_epi32(c, _mm512_cmp_ps_mask(y, _mm512_setzero_ps(), _CMP_GT_OQ), c, k->least_positive);
    return c;
}

/* The codes of 16 quotients y of a 16-entry map, as map_code: the number of
 * thresholds at or below y, by a binary search down the heap (nodes 1-15):
 * h = 2 h + (y >= heap[h]) four times, the code h - 16. */
ALWAYS_INLINE __m512i codes16(__m512 y, const map_consts *k, const int how) {
    const __m512i one = _mm512_set1_epi32(1);
    __m512i h = one;
    for (int d = 0; d < 4; d++) {
        const __m512i h2 = _mm512_add_epi32(h, h);
        h = _mm512_mask_add_epi32(h2, _mm512_cmp_ps_mask(y, _mm512_permutexvar_ps(h, k->heap), _CMP_GE_OQ), h2, one);
    }
    return nan_and_floor(_mm512_sub_epi32(h, _mm512_set1_epi32(16)), y, k, how);
}

/* The e4m3 codes of 16 quotients y, as map_code of the fp8 map
 * (mp_f32_to_e4m3_sat(|y|) & 0x7f, y's sign in bit 7), the MXCSR's
 * rounding, FTZ and DAZ never mattering: |y| >= 2^-6 rounds its mantissa to
 * 3 bits, nearest even, by integer arithmetic on its bits (the carry may
 * raise the exponent), and rebiases; below, the code is |y| 2^9 (exact, or
 * under 2^-117) converted with rounding to nearest even given in the
 * instruction; every code past 0x7e (448) saturates to it, +inf too; NaN
 * codes nan_code. */
ALWAYS_INLINE __m512i e4m3_codes16(__m512 y, const map_consts *k, const int how) {
    const __m512i u = _mm512_and_si512(_mm512_castps_si512(y), _mm512_set1_epi32(0x7fffffff));
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 20), _mm512_set1_epi32(1));
    const __m512i normal =
        _mm512_sub_epi32(_mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7ffff))), 20),
                         _mm512_set1_epi32(120 << 3));
    const __m512i sub = _mm512_cvt_roundps_epi32(_mm512_mul_ps(_mm512_castsi512_ps(u), _mm512_set1_ps(512.0f)),
                                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __mmask16 small = _mm512_cmplt_epu32_mask(u, _mm512_set1_epi32(0x3c800000)); /* 2^-6 */
    const __m512i c = _mm512_min_epi32(_mm512_mask_mov_epi32(normal, small, sub), _mm512_set1_epi32(0x7e));
    return _mm512_or_si512(nan_and_floor(c, y, k, how),
                           _mm512_and_si512(_mm512_srai_epi32(_mm512_castps_si512(y), 31), _mm512_set1_epi32(0x80)));
}

/* The values of 16 e4m3 codes, as mp_e4m3_to_f32: exponent and mantissa
 * moved into fp32's fields and rebiased; a subnormal code's mantissa times
 * 2^-9 (exact); 0x7f (either sign) a quiet NaN. */
ALWAYS_INLINE __m512 e4m3_values16(__m512i c) {
    const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(c, _mm512_set1_epi32(0x80)), 24);
    const __m512i e = _mm512_and_si512(_mm512_srli_epi32(c, 3), _mm512_set1_epi32(15));
    const __m512i m = _mm512_and_si512(c, _mm512_set1_epi32(7));
    __m512i v =
        _mm512_or_si512(_mm512_slli_epi32(_mm512_add_epi32(e, _mm512_set1_epi32(120)), 23), _mm512_slli_epi32(m, 20));
    const __m512 sub = _mm512_mul_ps(_mm512_cvtepi32_ps(m), _mm512_set1_ps(0x1p-9f));
    v = _mm512_mask_mov_epi32(v, _mm512_testn_epi32_mask(e, e), _mm512_castps_si512(sub));
    const __mmask16 nan =
        _mm512_cmpeq_epi32_mask(_mm512_and_si512(c, _mm512_set1_epi32(0x7f)), _mm512_set1_epi32(0x7f));
    v = _mm512_mask_mov_epi32(v, nan, _mm512_set1_epi32(0x7fc00000));
    return _mm512_castsi512_ps(_mm512_or_si512(v, sign));
}

/* The codes of 16 quotients y of an 8-bit map, as map_code: the bucket of
 * |y|'s bits (one gather from the map's table) gives a code and the bucket's
 * one threshold, which the low bits reach or not (a carry into the code).
 * A finite scale gives |y| <= 1, in bucket top or under: the clamp to top
 * only where y can be NaN. */
ALWAYS_INLINE __m512i map_codes16(__m512 y, const map_consts *k, const int how) {
    const __m512i u = _mm512_castps_si512(y), mag = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
    const __m512i neg = _mm512_srai_epi32(u, 31);
    __m512i b = _mm512_max_epi32(_mm512_sub_epi32(_mm512_srl_epi32(mag, k->shift), k->lo), _mm512_setzero_si512());
    if (how & CAN_NAN) b = _mm512_min_epi32(b, k->top);
    /* b | (neg & MP_MAP_BUCKETS): b < MP_MAP_BUCKETS */
    b = _mm512_ternarylogic_epi32(b, neg, _mm512_set1_epi32(MP_MAP_BUCKETS), 0xf8);
    const __m512i e = _mm512_i32gather_epi32(b, (const void *)k->lut, 4);
    const __m512i l = _mm512_xor_si512(_mm512_and_si512(mag, k->mask), _mm512_and_si512(neg, k->mask));
    return nan_and_floor(_mm512_srli_epi32(_mm512_add_epi32(e, l), 24), y, k, how);
}

/* The largest magnitude of a block (a multiple of 32 values), as
 * block_amax: the unsigned maximum of the magnitudes' bits (a NaN's exceed
 * every number's; then the first NaN's bits, by the portable loop). */
static float amax_of(const float *x, size_t n) {
    const __m512i abs = _mm512_set1_epi32(0x7fffffff);
    __m512i mx0 = _mm512_setzero_si512(), mx1 = _mm512_setzero_si512();
    for (size_t i = 0; i < n; i += 32) {
        mx0 = _mm512_max_epu32(mx0, _mm512_and_si512(_mm512_loadu_si512((const void *)(x + i)), abs));
        mx1 = _mm512_max_epu32(mx1, _mm512_and_si512(_mm512_loadu_si512((const void *)(x + i + 16)), abs));
    }
    const uint32_t m = _mm512_reduce_max_epu32(_mm512_max_epu32(mx0, mx1));
    return m > 0x7f800000u ? block_amax(x, n) : mp_bits_f32(m);
}

/* The codes of 16 quotients of a map with `bits` (a constant), stored. */
ALWAYS_INLINE void store_codes16(uint8_t *codes, size_t at, __m512 y, const map_consts *k, const int bits,
                                 const int how) {
    if (bits == 4) { /* two a byte, the first in the high nibble: each 64-bit lane's low byte */
        const __m512i c = codes16(y, k, how), two = _mm512_or_si512(_mm512_slli_epi64(c, 4), _mm512_srli_epi64(c, 32));
        _mm_storel_epi64((__m128i *)(void *)(codes + at / 2), _mm512_cvtepi64_epi8(two));
        return;
    }
    const __m512i c = bits == 8 ? map_codes16(y, k, how) : e4m3_codes16(y, k, how);
    _mm_storeu_si128((__m128i *)(void *)(codes + at), _mm512_cvtepi32_epi8(c));
}

/* One block's codes for the scale s: quotients by IEEE division, as
 * k_quant. bits (8, 4 or 0) and floor (FLOOR or 0) are constants. */
ALWAYS_INLINE void code_block(uint8_t *codes, const float *x, float s, const map_consts *k, size_t block,
                              const int bits, const int floor) {
    const __m512 sv = _mm512_set1_ps(s);
    if (isfinite(s)) /* every quotient finite */
        for (size_t i = 0; i < block; i += 16)
            store_codes16(codes, i, _mm512_div_ps(_mm512_loadu_ps(x + i), sv), k, bits, floor);
    else /* an infinite or NaN scale: NaN quotients */
        for (size_t i = 0; i < block; i += 16)
            store_codes16(codes, i, _mm512_div_ps(_mm512_loadu_ps(x + i), sv), k, bits, floor | CAN_NAN);
}

/* Blocks of an 8-bit map (bits 8), a 16-entry map (bits 4) or of e4m3
 * (bits 0), with or without the floor (floor: FLOOR or 0); both constants. */
ALWAYS_INLINE void quant_blocks(uint8_t *codes, float *scale, const float *x, const mp_state_map *map, size_t n,
                                size_t block, const int bits, const int floor) {
    const map_consts k = consts_of(map);
    for (size_t b = 0; b < n / block; b++) {
        const float *xb = x + b * block;
        const float s = block_scale(amax_of(xb, block), bits);
        scale[b] = s;
        code_block(codes + (bits == 4 ? b * block / 2 : b * block), xb, s, &k, block, bits, floor);
    }
}

#define QUANT_BLOCKS(bits)                                                           \
    (map->least_positive ? quant_blocks(codes, scale, x, map, n, block, bits, FLOOR) \
                         : quant_blocks(codes, scale, x, map, n, block, bits, 0))

/* Which of quant_blocks' forms codes a map's blocks: its bits (8, 4 or 0),
 * or -1 (none: mp_quant_avx2's or the portable loop's). */
static int quant_form(const mp_state_map *map, int bits, size_t block) {
    if (block % 64) return -1;
    if (bits == 4 && map->levels == 4 && !map->sign_magnitude) return 4;
    if (bits == 0 && map->sign_magnitude) return 0;
    if (bits == 8 && !map->sign_magnitude) return 8;
    return -1;
}

void mp_quant_avx512(uint8_t *codes, float *scale, const float *x, const mp_state_map *map, int bits, size_t n,
                     size_t block) {
    switch (quant_form(map, bits, block)) {
    case 4: QUANT_BLOCKS(4); break;
    case 0: QUANT_BLOCKS(0); break;
    case 8: QUANT_BLOCKS(8); break;
    default:
        block % 64 ? k_quant(codes, scale, x, map, bits, n, block)
                   : mp_quant_avx2(codes, scale, x, map, bits, n, block);
    }
}

void mp_dequant_avx512(float *out, const uint8_t *codes, const float *scale, const mp_state_map *map, int bits,
                       size_t n, size_t block) {
    if (block % 16) {
        k_dequant(out, codes, scale, map, bits, n, block);
        return;
    }
    const float *q = map->value;
    if (bits == 4) { /* 16 entries: one permute */
        const __m512 t = _mm512_loadu_ps(q);
        const __m128i low = _mm_set1_epi8(15);
        for (size_t b = 0; b < n / block; b++) {
            const __m512 sv = _mm512_set1_ps(scale[b]);
            const uint8_t *c = codes + b * block / 2;
            float *o = out + b * block;
            for (size_t i = 0; i < block; i += 16) {
                const __m128i v = _mm_loadl_epi64((const __m128i *)(const void *)(c + i / 2));
                const __m128i nib = _mm_unpacklo_epi8(_mm_and_si128(_mm_srli_epi16(v, 4), low), _mm_and_si128(v, low));
                const __m512 val = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(nib), t);
                _mm512_storeu_ps(o + i, _mm512_mul_ps(val, sv));
            }
        }
        return;
    }
    if (map->sign_magnitude) { /* e4m3: each code's value from its bits */
        for (size_t b = 0; b < n / block; b++) {
            const __m512 sv = _mm512_set1_ps(scale[b]);
            for (size_t i = 0; i < block; i += 16) {
                const __m512i c =
                    _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(codes + b * block + i)));
                _mm512_storeu_ps(out + b * block + i, _mm512_mul_ps(e4m3_values16(c), sv));
            }
        }
        return;
    }
    if (bits == 8 && block % 64 == 0 && mp_cpu_features()->avx512_vbmi)
        mp_dequant8_vbmi(out, codes, scale, map, n, block);
    else mp_dequant_avx2(out, codes, scale, map, bits, n, block);
}

/* AdamW's constants, broadcast once per call. */
typedef struct {
    __m512 decay, w1, beta2, c2, bc2_sqrt, bc2_inv, eps, neg_step_size;
} adamw_consts;

/* 16 fp32 master weights updated with their moments (m, v: in and out), as
 * optim_kernels.h's adamw_elem built with MP_OPTIM_FMA: the same fp32
 * operations in the same order. *lost gets the lanes whose update was lost
 * (mp_lost32: a finite nonzero update that left the weight's bits). */
ALWAYS_INLINE __m512 adamw16(__m512 w, __m512 g, __m512 *m, __m512 *v, const adamw_consts *c, __mmask16 *lost) {
    const __m512 inf = _mm512_set1_ps(INFINITY);
    const __m512 wd = _mm512_mul_ps(w, c->decay);
    const __m512 mm = _mm512_fmadd_ps(c->w1, _mm512_sub_ps(g, *m), *m);
    const __m512 vv = _mm512_fmadd_ps(_mm512_mul_ps(c->c2, g), g, _mm512_mul_ps(*v, c->beta2));
    const __m512 a = _mm512_sqrt_ps(vv), q = _mm512_mul_ps(a, c->bc2_inv);
    const __m512 r = _mm512_fmadd_ps(_mm512_fnmadd_ps(q, c->bc2_sqrt, a), c->bc2_inv, q);
    const __m512 root = _mm512_mask_mov_ps(q, _mm512_cmp_ps_mask(_mm512_abs_ps(q), inf, _CMP_LT_OQ), r);
    const __m512 step = _mm512_div_ps(_mm512_mul_ps(c->neg_step_size, mm), _mm512_add_ps(root, c->eps));
    const __m512 u = _mm512_add_ps(_mm512_sub_ps(wd, w), step), now = _mm512_add_ps(wd, step);
    *lost = _mm512_cmp_ps_mask(u, _mm512_setzero_ps(), _CMP_NEQ_OQ) &
            _mm512_cmp_ps_mask(_mm512_abs_ps(u), inf, _CMP_LT_OQ) &
            _mm512_cmpeq_epi32_mask(_mm512_castps_si512(w), _mm512_castps_si512(now));
    *m = mm, *v = vv;
    return now;
}

/* The bytes ahead of the update that it asks for while it computes: about
 * what the memory delivers in the time a block takes, so the next blocks'
 * weights, gradients and codes arrive while this one is coded. */
enum { AHEAD = 4096 };

/* One block's codes for the scale of its largest magnitude amax (bits: the
 * unsigned maximum of the magnitudes' bits), as k_quant. */
static void code_block_of(uint8_t *codes, float *scale, const float *x, uint32_t amax, const mp_state_map *map,
                          const map_consts *k, int bits, size_t block) {
    const int form = quant_form(map, bits, block);
    if (form < 0) {
        mp_quant_avx512(codes, scale, x, map, bits, block, block);
        return;
    }
    const float s = block_scale(amax > 0x7f800000u ? block_amax(x, block) : mp_bits_f32(amax), bits);
    *scale = s;
#define CODE_BLOCK(b) \
    (map->least_positive ? code_block(codes, x, s, k, block, b, FLOOR) : code_block(codes, x, s, k, block, b, 0))
    switch (form) {
    case 8: CODE_BLOCK(8); break;
    case 4: CODE_BLOCK(4); break;
    default: CODE_BLOCK(0);
    }
#undef CODE_BLOCK
}

/* Values a turn of mp_adamw_qstate_avx512: the moments of a piece of
 * optim.c's update, dequantized in one call each (the 8-bit maps' permute
 * tables loaded once a turn). A multiple of both formats' blocks. */
enum { TURN = 1024 };

/* The update of 16 values at i of a block (weights wb, gradients gb, the
 * moments mb, vb in the turn's buffers, their codes q1, q2 of cb bytes a
 * block); the lines AHEAD bytes on asked for; the lanes whose update was
 * lost counted into *lost, the new moments' magnitudes into the unsigned
 * maxima mx1, mx2. */
ALWAYS_INLINE void update16(float *wb, const float *gb, float *mb, float *vb, const uint8_t *q1, const uint8_t *q2,
                            size_t i, size_t cb, size_t block, const adamw_consts *ac, __m512i *mx1, __m512i *mx2,
                            uint64_t *lost) {
    const __m512i abs = _mm512_set1_epi32(0x7fffffff);
    _mm_prefetch((const char *)(uintptr_t)((uintptr_t)(wb + i) + AHEAD), _MM_HINT_T0);
    _mm_prefetch((const char *)(uintptr_t)((uintptr_t)(gb + i) + AHEAD), _MM_HINT_T0);
    if (i % 64 == 0) { /* a byte a value or less */
        _mm_prefetch((const char *)(uintptr_t)((uintptr_t)(q1 + i * cb / block) + AHEAD / 4), _MM_HINT_T0);
        _mm_prefetch((const char *)(uintptr_t)((uintptr_t)(q2 + i * cb / block) + AHEAD / 4), _MM_HINT_T0);
    }
    __m512 mv = _mm512_load_ps(mb + i), vv = _mm512_load_ps(vb + i);
    __mmask16 gone;
    _mm512_storeu_ps(wb + i, adamw16(_mm512_loadu_ps(wb + i), _mm512_loadu_ps(gb + i), &mv, &vv, ac, &gone));
    *lost += (uint64_t)__builtin_popcount(gone);
    _mm512_store_ps(mb + i, mv), _mm512_store_ps(vb + i, vv);
    *mx1 = _mm512_max_epu32(*mx1, _mm512_and_si512(_mm512_castps_si512(mv), abs));
    *mx2 = _mm512_max_epu32(*mx2, _mm512_and_si512(_mm512_castps_si512(vv), abs));
}

/* A block waiting for its codes: where they go, its moments in the turn's
 * buffers and its scales (finite), broadcast. */
typedef struct {
    uint8_t *q1, *q2;
    const float *m, *v;
    __m512 s1, s2;
} pending;

/* The codes of a pending block's 16 values at i of both moments. */
ALWAYS_INLINE void code16(const pending *p, size_t i, const map_consts *k1, const map_consts *k2, const int bits,
                          const int how1, const int how2) {
    store_codes16(p->q1, i, _mm512_div_ps(_mm512_load_ps(p->m + i), p->s1), k1, bits, how1);
    store_codes16(p->q2, i, _mm512_div_ps(_mm512_load_ps(p->v + i), p->s2), k2, bits, how2);
}

/* The pass with the maps' vector coder (bits as quant_form's, how1, how2 their floors; constants) or, pipe 0,
 * without (any map, bits at run time: code_block_of). Per turn, the blocks in a pipeline: while a block is
 * updated, the one before it, whose largest magnitudes its update gave, is coded, 16 values of each at a time,
 * so that the update's divider work (its sqrt and division) and the codes' (the quotients by the scale)
 * overlap instead of taking turns. A block whose scale is infinite or NaN is coded alone by code_block_of. */
ALWAYS_INLINE uint64_t qstate_pass(float *w, const float *g, const mp_qstate *s, size_t n, const mp_adamw_coef *c,
                                   const int bits, const int how1, const int how2, const int pipe) {
    const size_t block = s->block;
    const adamw_consts ac = {_mm512_set1_ps(c->decay), _mm512_set1_ps(c->w1),           _mm512_set1_ps(c->beta2),
                             _mm512_set1_ps(c->c2),    _mm512_set1_ps(c->bc2_sqrt),     _mm512_set1_ps(c->bc2_inv),
                             _mm512_set1_ps(c->eps),   _mm512_set1_ps(c->neg_step_size)};
    const map_consts k1 = consts_of(s->map[0]), k2 = consts_of(s->map[1]);
    const size_t cb = bits == 4 ? block / 2 : block; /* code bytes a block */
    float m[TURN] __attribute__((aligned(64))), v[TURN] __attribute__((aligned(64)));
    uint64_t lost = 0;
    for (size_t t = 0; t < n; t += TURN) {
        const size_t nt = n - t < TURN ? n - t : TURN;
        mp_dequant_avx512(m, s->codes[0] + t / block * cb, s->scale[0] + t / block, s->map[0], bits, nt, block);
        mp_dequant_avx512(v, s->codes[1] + t / block * cb, s->scale[1] + t / block, s->map[1], bits, nt, block);
        pending p = {NULL, NULL, NULL, NULL, _mm512_setzero_ps(), _mm512_setzero_ps()};
        for (size_t b0 = 0; b0 < nt; b0 += block) {
            const size_t b = (t + b0) / block;
            float *wb = w + t + b0, *mb = m + b0, *vb = v + b0;
            const float *gb = g + t + b0;
            uint8_t *q1 = s->codes[0] + b * cb, *q2 = s->codes[1] + b * cb;
            __m512i mx1 = _mm512_setzero_si512(), mx2 = _mm512_setzero_si512();
            if (p.q1)
                for (size_t i = 0; i < block; i += 16) {
                    update16(wb, gb, mb, vb, q1, q2, i, cb, block, &ac, &mx1, &mx2, &lost);
                    code16(&p, i, &k1, &k2, bits, how1, how2);
                }
            else
                for (size_t i = 0; i < block; i += 16)
                    update16(wb, gb, mb, vb, q1, q2, i, cb, block, &ac, &mx1, &mx2, &lost);
            const uint32_t a1 = _mm512_reduce_max_epu32(mx1), a2 = _mm512_reduce_max_epu32(mx2);
            p.q1 = NULL;
            if (pipe && a1 < 0x7f800000u && a2 < 0x7f800000u) { /* finite: k_quant's scales */
                const float s1 = block_scale(mp_bits_f32(a1), bits), s2 = block_scale(mp_bits_f32(a2), bits);
                s->scale[0][b] = s1, s->scale[1][b] = s2;
                p = (pending){q1, q2, mb, vb, _mm512_set1_ps(s1), _mm512_set1_ps(s2)};
            } else {
                code_block_of(q1, s->scale[0] + b, mb, a1, s->map[0], &k1, bits, block);
                code_block_of(q2, s->scale[1] + b, vb, a2, s->map[1], &k2, bits, block);
            }
        }
        if (p.q1)
            for (size_t i = 0; i < block; i += 16) code16(&p, i, &k1, &k2, bits, how1, how2);
    }
    return lost;
}

/* mp_optim_kernels.adamw_qstate: per turn of TURN values, the moments
 * dequantized into buffers in L1; per block, the weights updated with them in
 * registers while the new moments' largest magnitudes are taken and the block
 * before it is coded (qstate_pass); the lines AHEAD bytes on asked for as the
 * update goes. The same bits as dequant, k_adamw and quant in turn
 * (tests/test_optim.c). The block divides TURN and is a multiple of 16 (the
 * formats' are 128 and 256). The formats' maps have a vector coder each: an
 * 8-bit or e4m3 first moment without a floor and a second moment with one,
 * or two 16-entry maps without. */
uint64_t mp_adamw_qstate_avx512(float *w, const float *g, const mp_qstate *s, size_t n, const mp_adamw_coef *c) {
    const int f1 = quant_form(s->map[0], s->bits, s->block), f2 = quant_form(s->map[1], s->bits, s->block);
    const int floor1 = s->map[0]->least_positive != 0, floor2 = s->map[1]->least_positive != 0;
    if (f1 == 8 && f2 == 8 && !floor1 && floor2) return qstate_pass(w, g, s, n, c, 8, 0, FLOOR, 1);
    if (f1 == 0 && f2 == 0 && !floor1 && floor2) return qstate_pass(w, g, s, n, c, 0, 0, FLOOR, 1);
    if (f1 == 4 && f2 == 4 && !floor1 && !floor2) return qstate_pass(w, g, s, n, c, 4, 0, 0, 1);
    return qstate_pass(w, g, s, n, c, s->bits, 0, 0, 0);
}
