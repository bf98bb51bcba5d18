#ifndef MP_GEMM_EPILOGUE_H
#define MP_GEMM_EPILOGUE_H
/* gemm_epilogue.h - the GEMM epilogue in plain C: a tile's fp32 sums into C.
 * Built three times from this one source: portable in gemm.c
 * (mp_gemm_epilogue_scalar), for AVX2 + FMA in cpu/gemm_epilogue_avx2.c, where
 * the loops vectorize and fmaf is one instruction instead of a call, and for
 * AVX-512 in cpu/gemm_epilogue_avx512.c, which takes it for post steps and
 * does the other operations by hand. fmaf is exactly rounded either way, so
 * all give the same bits.
 *
 * Per element, from the tile's sum t over all of k:
 *   v  = fma(alpha, t, beta C)         when C is read (beta != 0, no round_to)
 *      = alpha t                       otherwise
 *   v += bias[j]
 *   C  = v in C's format (counted), or with round_to: C = beta C + r, r = v
 *        rounded to round_to (counted) and back to fp32.
 * The counts' amax is the largest finite magnitude of C's values (with
 * round_to: of C's new fp32 values, so that a gradient accumulated into C over
 * micro-batches is measured as it stands; with a post step that replaces
 * them, of the values rounded, never stored).
 * zeros (may be NULL) gets the number of v that are +-0 (bits, so the same
 * under DAZ). Then, without round_to, the post step (gemm.h) on C's values as
 * stored, through the same GELU kernels and additions as ops.c's, rounded and
 * counted into st[1]. st: NULL, or C's counts and the post step's. */
#include <math.h>

#include "internal.h"

/* The tile's rows (cols values, row stride ts) to 16-bit codes of format t in h
 * (same stride): one call when the rows are contiguous. */
static inline void tile_to_half(const mp_gemm_ep *e, mp_dtype t, uint16_t *h, const float *tile, size_t ts, size_t rows,
                                size_t cols, mp_convert_stats *st) {
    void (*f)(uint16_t *, const float *, size_t, mp_convert_stats *, int) =
        t == MP_F16 ? e->k->convert->f32_to_f16 : e->k->convert->f32_to_bf16;
    if (cols == ts) {
        f(h, tile, rows * ts, st, 0);
        return;
    }
    for (size_t r = 0; r < rows; r++) f(h + r * ts, tile + r * ts, cols, st, 0);
}

/* The number of +-0 among the tile's rows x cols values (row stride ts); a
 * row's count in 32 bits, so the compiler vectorizes it. */
static inline uint64_t tile_zeros(const float *tile, size_t ts, size_t rows, size_t cols) {
    uint64_t z = 0;
    for (size_t r = 0; r < rows; r++) {
        const float *restrict t = tile + r * ts;
        uint32_t zr = 0;
        for (size_t j = 0; j < cols; j++) zr += (mp_f32_bits(t[j]) & 0x7fffffffu) == 0;
        z += zr;
    }
    return z;
}

/* Adds the counts of fp32 stores of the tile's rows x cols values (row stride
 * ts) to st: one mp_stats_f32 call (the CPU path's vectorized kernel) for the
 * whole tile when its rows are contiguous. */
static inline void tile_stats32(const mp_gemm_ep *e, mp_convert_stats *st, const float *tile, size_t ts, size_t rows,
                                size_t cols) {
    if (cols == ts) mp_stats_f32(e->k, st, tile, rows * ts);
    else
        for (size_t r = 0; r < rows; r++) mp_stats_f32(e->k, st, tile + r * ts, cols);
}

/* Rows of a tile (row stride ts) into p (format t, at ldc, rows from i0 and
 * columns from j0): fp32 values from tile, or 16-bit codes from h; fp32
 * stores counted into st by e's kernels (may be NULL; half codes were counted
 * when rounded). */
static inline void tile_store(const mp_gemm_ep *e, void *p, mp_dtype t, size_t ldc, const float *tile,
                              const uint16_t *h, size_t ts, size_t i0, size_t j0, size_t rows, size_t cols,
                              mp_convert_stats *st) {
    for (size_t r = 0; r < rows; r++) {
        if (t == MP_F32) {
            float *restrict c = (float *)p + (i0 + r) * ldc + j0;
            const float *restrict s = tile + r * ts;
            for (size_t j = 0; j < cols; j++) c[j] = s[j];
        } else {
            uint16_t *restrict c = (uint16_t *)p + (i0 + r) * ldc + j0;
            const uint16_t *restrict s = h + r * ts;
            for (size_t j = 0; j < cols; j++) c[j] = s[j];
        }
    }
    if (t == MP_F32 && st) tile_stats32(e, st, tile, ts, rows, cols);
}

/* 16-bit codes of format t (row stride ts) widened into the tile. */
static inline void tile_widen(const mp_gemm_ep *e, mp_dtype t, float *tile, const uint16_t *h, size_t ts, size_t rows,
                              size_t cols) {
    void (*back)(float *, const uint16_t *, size_t, mp_convert_stats *) =
        t == MP_F16 ? e->k->convert->f16_to_f32 : e->k->convert->bf16_to_f32;
    if (cols == ts) back(tile, h, rows * ts, NULL);
    else
        for (size_t r = 0; r < rows; r++) back(tile + r * ts, h + r * ts, cols, NULL);
}

/* A GELU post step on a half C's values from the table of every code
 * (gelu_table.c; the kernels' bits): the forward from the codes h of the
 * tile's values, the backward from x's codes in post_x and its values xb. */
static inline void gelu_table_rows(const mp_gemm_ep *e, const mp_gelu_table *tb, float *tile, const uint16_t *h,
                                   const float *xb, size_t ts, size_t i0, size_t j0, size_t rows, size_t cols) {
    const int fwd = e->post == MP_POST_GELU || e->post == MP_POST_GELU_ERF;
    for (size_t r = 0; r < rows; r++) {
        float *restrict t = tile + r * ts;
        if (fwd) {
            const uint16_t *c = h + r * ts;
            for (size_t j = 0; j < cols; j++) t[j] = tb->y[c[j]];
        } else {
            const uint16_t *xc = (const uint16_t *)e->post_x + (i0 + r) * e->ldc + j0;
            const float *x = xb + r * ts;
            for (size_t j = 0; j < cols; j++) t[j] = mp_gelu_table_bwd1(tb, xc[j], x[j], t[j]);
        }
    }
}

/* gemm.h's post step on the tile's values as stored in C's format: the
 * result replaces them in the tile, is rounded to C's format (counted into
 * st) and stored into post_out, or C. h: the codes of the tile's values for
 * a half C (row stride ts), then scratch. */
static inline void post_step(const mp_gemm_ep *e, float *tile, uint16_t *h, size_t ts, size_t i0, size_t j0,
                             size_t rows, size_t cols, mp_convert_stats *st) {
    float xb[MP_GEMM_STRIP]; /* x's values in fp32, laid out as the tile */
    const size_t es = mp_format(e->ct)->size;
    if (e->post == MP_POST_GELU_GRAD || e->post == MP_POST_GELU_ERF_GRAD || e->post == MP_POST_ADD)
        for (size_t r = 0; r < rows; r++) {
            const uint8_t *xr = (const uint8_t *)e->post_x + ((i0 + r) * e->ldc + j0) * es;
            if (e->ct == MP_F32) memcpy(xb + r * ts, xr, cols * sizeof(float));
            else if (e->ct == MP_F16) e->k->convert->f16_to_f32(xb + r * ts, (const uint16_t *)xr, cols, NULL);
            else e->k->convert->bf16_to_f32(xb + r * ts, (const uint16_t *)xr, cols, NULL);
        }
    const int erf = e->post == MP_POST_GELU_ERF || e->post == MP_POST_GELU_ERF_GRAD;
    const mp_gelu_table *tb = e->post != MP_POST_ADD && e->ct != MP_F32 ? mp_gelu_table_of(erf, e->ct) : NULL;
    if (tb) gelu_table_rows(e, tb, tile, h, xb, ts, i0, j0, rows, cols);
    /* whole rows at once when the tile's rows are contiguous */
    const size_t nr = tb ? 0 : cols == ts ? 1 : rows, len = cols == ts ? rows * ts : cols;
    for (size_t r = 0; r < nr; r++) {
        float *restrict t = tile + r * ts;
        const float *restrict x = xb + r * ts;
        switch (e->post) {
        case MP_POST_GELU: e->k->gelu->tanh_fwd(t, len); break;
        case MP_POST_GELU_ERF: e->k->gelu->erf_fwd(t, len); break;
        case MP_POST_GELU_GRAD: e->k->gelu->tanh_bwd(t, x, len); break;
        case MP_POST_GELU_ERF_GRAD: e->k->gelu->erf_bwd(t, x, len); break;
        case MP_POST_ADD:
            for (size_t j = 0; j < len; j++) t[j] = x[j] + t[j];
            break;
        default: break;
        }
    }
    void *out = e->post_out ? e->post_out : e->c;
    if (e->ct == MP_F32) {
        tile_store(e, out, MP_F32, e->ldc, tile, NULL, ts, i0, j0, rows, cols, st);
    } else {
        tile_to_half(e, e->ct, h, tile, ts, rows, cols, st);
        tile_store(e, out, e->ct, e->ldc, NULL, h, ts, i0, j0, rows, cols, NULL);
    }
}

/* The bits of the largest finite magnitude among n fp32 values. */
static inline uint32_t tile_amax32(const float *x, size_t n) {
    uint32_t m = 0;
    for (size_t j = 0; j < n; j++) {
        const uint32_t a = mp_f32_bits(x[j]) & 0x7fffffffu, fin = a < 0x7f800000u ? a : 0;
        m = fin > m ? fin : m;
    }
    return m;
}

static inline void mp_gemm_epilogue_body(const mp_gemm_ep *e, float *tile, size_t ts, size_t i0, size_t j0, size_t rows,
                                         size_t cols, mp_convert_stats *st, uint64_t *zeros) {
    const float alpha = e->alpha, beta = e->beta;
    const size_t es = mp_format(e->ct)->size;
    const int read_c = beta != 0.0f && e->round_to == MP_F32;
    for (size_t r = 0; r < rows; r++) {
        float *restrict t = tile + r * ts;
        const uint8_t *crow = (const uint8_t *)e->c + ((i0 + r) * e->ldc + j0) * es;
        if (read_c) {
            float cold[MP_GEMM_EPILOGUE_COLS];
            const float *restrict c = (const float *)crow;
            if (e->ct == MP_F16) e->k->convert->f16_to_f32(cold, (const uint16_t *)crow, cols, NULL), c = cold;
            if (e->ct == MP_BF16) e->k->convert->bf16_to_f32(cold, (const uint16_t *)crow, cols, NULL), c = cold;
            for (size_t j = 0; j < cols; j++) t[j] = fmaf(alpha, t[j], beta * c[j]);
        } else if (alpha != 1.0f) {
            for (size_t j = 0; j < cols; j++) t[j] = alpha * t[j];
        }
        if (e->bias) {
            const float *restrict b = e->bias + j0;
            for (size_t j = 0; j < cols; j++) t[j] += b[j];
        }
    }
    if (zeros) *zeros += tile_zeros(tile, ts, rows, cols);
    uint16_t h[MP_GEMM_STRIP];
    if (e->round_to != MP_F32) { /* r = the half value, added to the fp32 C */
        mp_convert_stats rs = {0, 0, 0, 0, 0.0f};
        tile_to_half(e, e->round_to, h, tile, ts, rows, cols, st ? &rs : NULL);
        void (*back)(float *, const uint16_t *, size_t, mp_convert_stats *) =
            e->round_to == MP_F16 ? e->k->convert->f16_to_f32 : e->k->convert->bf16_to_f32;
        if (cols == ts) back(tile, h, rows * ts, NULL);
        else
            for (size_t r = 0; r < rows; r++) back(tile + r * ts, h + r * ts, cols, NULL);
        for (size_t r = 0; r < rows; r++) {
            float *restrict c = (float *)e->c + (i0 + r) * e->ldc + j0;
            const float *restrict t = tile + r * ts;
            if (beta == 0.0f)
                for (size_t j = 0; j < cols; j++) c[j] = t[j];
            else
                for (size_t j = 0; j < cols; j++) c[j] = beta * c[j] + t[j];
        }
        if (st) { /* the rounding's counts; the amax of C as it now stands */
            rs.amax = 0.0f;
            for (size_t r = 0; r < rows; r++)
                mp_stats_amax(&rs, tile_amax32((float *)e->c + (i0 + r) * e->ldc + j0, cols));
            mp_convert_stats_add(st, &rs);
        }
    } else {
        /* C's values, counted; kept in C unless the post step's results replace them */
        const int keep = e->post == MP_POST_NONE || e->post_out;
        if (e->ct == MP_F32) {
            if (keep) tile_store(e, e->c, MP_F32, e->ldc, tile, NULL, ts, i0, j0, rows, cols, st);
            else if (st) tile_stats32(e, st, tile, ts, rows, cols);
        } else {
            tile_to_half(e, e->ct, h, tile, ts, rows, cols, st);
            if (keep) tile_store(e, e->c, e->ct, e->ldc, NULL, h, ts, i0, j0, rows, cols, NULL);
            if (e->post != MP_POST_NONE) tile_widen(e, e->ct, tile, h, ts, rows, cols); /* the values as stored */
        }
        if (e->post != MP_POST_NONE) post_step(e, tile, h, ts, i0, j0, rows, cols, st ? st + 1 : NULL);
    }
}
#endif
