/* recipe.c - the quantized operands of fp8 and fp4 GEMMs (recipe.h).
 *
 * mp_qoperand takes the per-tensor scale (or nvfp4's amax), then hands
 * shares of rows to a kernel table (internal.h's mp_recipe_kernels): the
 * fused one-pass kernels of src/cpu/recipe_avx512.c on AVX-512, those of
 * recipe_kernels.h in plain C below it (built for AVX2, and portable here),
 * and the reference here, which every table must match bit for bit (values,
 * counts, stream use):
 *
 * The reference quantizes an operand in panels that fit in L1/L2 with the
 * quantizers of mx.h: with the reduction along the columns, a panel is a few
 * whole rows, quantized as one array (blocks of 32 or 16 consecutive values
 * never cross a row since a row is padded to whole blocks); with the
 * reduction along the rows, a panel is bk rows (the block) by up to PW
 * columns, transposed first so that each column's bk values are
 * consecutive, quantized, and the values written back transposed.
 *
 * Shares are whole units (a block height of rows, or a panel's); every
 * unit's result is a function of its own values, the per-tensor scale and
 * its elements' stream indices (recipe.h), so results do not depend on the
 * number of threads.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>

#include "internal.h"

/* Below this many elements one thread is faster than waking a second. */
#define PARALLEL_MIN ((size_t)1 << 16)

#define TILE 8192 /* floats in a tile */
#define PW 256    /* tile width (columns) when the reduction runs along the rows (PW x 32 = TILE) */
#define PR 8      /* rows in a tile when it runs along the columns and a row is short */

mp_status mp_recipe_parse(const char *name, mp_recipe *out) {
    static const struct {
        const char *name;
        mp_recipe_kind k;
    } names[] = {{"fp8-delayed", MP_RECIPE_FP8_DELAYED},
                 {"fp8-current", MP_RECIPE_FP8_CURRENT},
                 {"mxfp8", MP_RECIPE_MXFP8},
                 {"nvfp4", MP_RECIPE_NVFP4}};
    for (size_t i = 0; name && i < sizeof names / sizeof names[0]; i++)
        if (strcmp(name, names[i].name) == 0) {
            *out = (mp_recipe){.kind = names[i].k,
                               .mx_rule = MP_MX_RCEIL,
                               .amax_history_len = 1024,
                               .nvfp4_2d_weights = 1,
                               .nvfp4_sr = 1,
                               .nvfp4_rht = 1,
                               .rht_signs = 0xD7E8};
            return MP_OK;
        }
    return mp_error(MP_EINVAL, "unknown recipe '%s' (expected fp8-delayed, fp8-current, mxfp8 or nvfp4)",
                    name ? name : "(null)");
}

const char *mp_qrole_name(mp_qrole role) {
    switch (role) {
    case MP_QROLE_INPUT: return "input";
    case MP_QROLE_WEIGHT: return "weight";
    default: return "grad";
    }
}

const char *mp_recipe_name(mp_recipe_kind k) {
    switch (k) {
    case MP_RECIPE_FP8_DELAYED: return "fp8-delayed";
    case MP_RECIPE_FP8_CURRENT: return "fp8-current";
    case MP_RECIPE_MXFP8: return "mxfp8";
    case MP_RECIPE_NVFP4: return "nvfp4";
    default: return "";
    }
}

mp_dtype mp_qrole_format(const mp_recipe *r, mp_qrole role) {
    switch (r->kind) {
    case MP_RECIPE_MXFP8: return MP_E4M3;
    case MP_RECIPE_NVFP4: return MP_E2M1;
    default: return role == MP_QROLE_GRAD ? MP_E5M2 : MP_E4M3;
    }
}

mp_status mp_qtensor_init(mp_qtensor *q, const mp_recipe *r, mp_qrole role, uint64_t seed) {
    *q = (mp_qtensor){.role = role, .rng = {seed, 0}, .scale = 1.0f};
    if (r->kind == MP_RECIPE_FP8_DELAYED) {
        if (r->amax_history_len == 0)
            return mp_error(MP_EINVAL, "fp8-delayed: the amax history needs at least 1 entry");
        q->hist = (mp_fp8_history){.amax = calloc(r->amax_history_len, sizeof(float)),
                                   .len = r->amax_history_len,
                                   .most_recent = r->amax_most_recent,
                                   .margin = r->margin,
                                   .scale = 1.0f};
        if (!q->hist.amax) return mp_error(MP_ENOMEM, "fp8-delayed: out of memory for the amax history");
    }
    return MP_OK;
}

void mp_qtensor_free(mp_qtensor *q) {
    if (q) free(q->hist.amax), q->hist.amax = NULL;
}

void mp_qtensor_begin(mp_qtensor *q, int first) {
    if (first) q->stats = (mp_quant_stats){0};
    q->scaled = 0;
}

void mp_qtensor_end(mp_qtensor *q, const mp_recipe *r) {
    if (r->kind == MP_RECIPE_FP8_DELAYED)
        mp_fp8_history_update(&q->hist, mp_qrole_format(r, q->role), q->stats.nonfinite ? NAN : q->stats.amax);
}

/* ---- the reference: panels ---- */

/* The bf16 bits of an exact value (every value written here is one). */
static inline uint16_t bf16_exact(float v) { return (uint16_t)(mp_f32_bits(v) >> 16); }

static size_t block_len(const mp_qop *op) {
    return op->kind == MP_RECIPE_MXFP8 ? MP_MX_BLOCK : op->kind == MP_RECIPE_NVFP4 ? 16 : 1;
}

/* Rows per tile with the reduction along the columns. */
static size_t panel_height(const mp_qop *op) {
    const size_t bk = block_len(op), cp = (op->cols + bk - 1) / bk * bk;
    return op->tile16 ? 16 : cp <= TILE / PR ? PR : 1;
}

/* Element (i, jj) of the source as fp32; the zeros that pad the operand to
 * whole blocks beyond its last row or column. */
static inline float src_at(const mp_qop *op, size_t i, size_t jj) {
    if (i >= op->rows || jj >= op->cols) return 0.0f;
    if (op->st == MP_F32) return ((const float *)op->src)[i * op->lds + jj];
    return mp_bf16_to_f32(((const uint16_t *)op->src)[i * op->lds + jj]);
}

static inline void dst_put(const mp_qop *op, size_t i, size_t jj, float v) {
    if (i < op->rows && jj < op->cols) op->dst[i * op->ldd + jj] = bf16_exact(v);
}

/* Quantizes n fp32 values of x (consecutive blocks; nrows rows of 1x16
 * blocks, or 16 rows of 16x16 tiles, for nvfp4) and writes their exact values
 * into v. first: the stream index of x[0] (stochastic rounding). */
static mp_status quantize_values(const mp_qop *op, float *x, float *v, size_t n, size_t nrows, size_t first,
                                 mp_quant_stats *st) {
    uint8_t codes[TILE];
    uint8_t scales[TILE / 16];
    mp_status s;
    switch (op->kind) {
    case MP_RECIPE_FP8_DELAYED:
    case MP_RECIPE_FP8_CURRENT:
        if ((s = mp_fp8_quantize(codes, x, n, op->fmt, op->scale, st))) return s;
        /* the codes' values, without the per-tensor scale (it goes into the GEMM's alpha) */
        for (size_t i = 0; i < n; i++) v[i] = op->fmt == MP_E4M3 ? mp_e4m3_to_f32(codes[i]) : mp_e5m2_to_f32(codes[i]);
        return MP_OK;
    case MP_RECIPE_MXFP8:
        if ((s = mp_mx_quantize(codes, scales, x, n, MP_E4M3, op->rule, st))) return s;
        if ((s = mp_mx_dequantize(v, codes, scales, n, MP_E4M3))) return s;
        for (size_t i = 0; i < n;
             i++) { /* below bf16's normal range: read as 0 by vdpbf16ps (on the bits: DAZ-proof) */
            const uint32_t a = mp_f32_bits(v[i]) & 0x7fffffffu;
            if (a != 0 && a < 0x00800000u) v[i] = copysignf(0.0f, v[i]), st->flushed++;
        }
        return MP_OK;
    case MP_RECIPE_NVFP4: {
        mp_rng rng, *sr = NULL;
        if (op->rng) rng = (mp_rng){op->rng->seed, op->rng->counter + first}, sr = &rng;
        const size_t cols = n / nrows, nb = cols / 16;
        const mp_nvfp4_block nvb = op->tile16 ? MP_NVFP4_16X16 : MP_NVFP4_1X16;
        if ((s = mp_nvfp4_quantize(codes, scales, x, nrows, cols, nvb, op->scale, sr, st))) return s;
        /* the amax again, on the bits: mp_nvfp4_quantize compares its threads' amaxes as floats, which
           DAZ reads as 0 when they are subnormal */
        uint32_t am = 0;
        for (size_t i = 0; i < n; i++) {
            const uint32_t a = mp_f32_bits(x[i]) & 0x7fffffffu;
            if (a < 0x7f800000u && a > am) am = a;
        }
        mp_quant_amax(st, am);
        /* the values without 1/g: the E2M1 value times its block's E4M3
         * scale, an exact product (at most 2 + 4 significant bits) */
        for (size_t r = 0; r < nrows; r++)
            for (size_t c = 0; c < cols; c++) {
                const size_t i = r * cols + c;
                const uint8_t sc = scales[op->tile16 ? (r / 16) * nb + c / 16 : r * nb + c / 16];
                v[i] = mp_e2m1_to_f32((uint8_t)(codes[i / 2] >> (4 * (i & 1)))) * mp_e4m3_to_f32(sc);
            }
        return MP_OK;
    }
    default: return mp_error(MP_EINVAL, "mp_qoperand: no recipe");
    }
}

/* Rows [r0, r1) with the reduction along the columns (and 16x16 weight
 * tiles): tiles of `per` rows (16 for 16x16 blocks) by up to TILE / per
 * columns, row-major as in the source; a row is padded with zeros to whole
 * blocks (cp columns), and 16x16 tiles with zero rows. With cp > TILE / per
 * a row takes several tiles; then per is 1 (or 16 for 16x16 tiles, which
 * have no stochastic rounding), so a tile's first element's stream index
 * i * cp + c0 keeps every element's the row-major i * cp + c. */
static mp_status panel_rows(const mp_qop *op, size_t r0, size_t r1, mp_quant_stats *st) {
    float x[TILE], v[TILE];
    const size_t bk = block_len(op), per = panel_height(op), cp = (op->cols + bk - 1) / bk * bk;
    const size_t pw = cp < TILE / per ? cp : TILE / per / 32 * 32;
    mp_status s;
    for (size_t i = r0; i < r1; i += per) {
        const size_t nr = op->tile16 || i + per <= op->rows ? per : op->rows - i;
        for (size_t c0 = 0; c0 < cp; c0 += pw) {
            const size_t w = cp - c0 < pw ? cp - c0 : pw;
            for (size_t r = 0; r < nr; r++)
                for (size_t c = 0; c < w; c++) x[r * w + c] = src_at(op, i + r, c0 + c);
            if ((s = quantize_values(op, x, v, nr * w, nr, i * cp + c0 * nr, st))) return s;
            for (size_t r = 0; r < nr; r++)
                for (size_t c = 0; c < w; c++) dst_put(op, i + r, c0 + c, v[r * w + c]);
        }
    }
    return MP_OK;
}

/* Rows [r0, r1) (whole blocks of bk rows) with the reduction along the rows:
 * tiles of bk rows by up to PW columns, transposed so that each column's bk
 * values are consecutive (and the Hadamard transform, when on, runs along
 * them); the last block is padded with zero rows. The stream index of
 * element (r, c) of the tile is i * cols + (c0 + c) * bk + r. */
static mp_status panel_cols(const mp_qop *op, size_t r0, size_t r1, mp_quant_stats *st) {
    float x[TILE], v[TILE];
    const size_t bk = block_len(op);
    mp_status s;
    for (size_t i = r0; i < r1; i += bk) {
        for (size_t c0 = 0; c0 < op->cols; c0 += PW) {
            const size_t w = op->cols - c0 < PW ? op->cols - c0 : PW;
            for (size_t c = 0; c < w; c++)
                for (size_t r = 0; r < bk; r++) x[c * bk + r] = src_at(op, i + r, c0 + c);
            if (op->rht && (s = mp_rht16(x, w, bk, op->signs))) return s;
            if ((s = quantize_values(op, x, v, w * bk, w, i * op->cols + c0 * bk, st))) return s;
            for (size_t c = 0; c < w; c++)
                for (size_t r = 0; r < bk; r++) dst_put(op, i + r, c0 + c, v[c * bk + r]);
        }
    }
    return MP_OK;
}

static mp_status quantize_ref(const mp_qop *op, size_t r0, size_t r1, mp_quant_stats *st) {
    return op->k_rows ? panel_cols(op, r0, r1, st) : panel_rows(op, r0, r1, st);
}

/* The largest finite |x| after the Hadamard transform, on the bits. */
static uint32_t rht_amax_ref(const mp_qop *op, size_t r0, size_t r1) {
    float x[TILE];
    uint32_t m = 0;
    for (size_t i = r0; i < r1; i += 16)
        for (size_t c0 = 0; c0 < op->cols; c0 += PW) {
            const size_t w = op->cols - c0 < PW ? op->cols - c0 : PW;
            for (size_t c = 0; c < w; c++)
                for (size_t r = 0; r < 16; r++) x[c * 16 + r] = src_at(op, i + r, c0 + c);
            mp_rht16(x, w, 16, op->signs);
            for (size_t k = 0; k < w * 16; k++) {
                const uint32_t a = mp_f32_bits(x[k]) & 0x7fffffffu;
                if (a < 0x7f800000u) m = a > m ? a : m;
            }
        }
    return m;
}

const mp_recipe_kernels mp_recipe_ref = {.quantize = quantize_ref, .rht_amax = rht_amax_ref};

/* ---- the call: scales, then shares of rows on threads ---- */

typedef struct qjob {
    mp_qop op;
    const mp_recipe_kernels *k;
    size_t unit; /* rows per unit of work (a block height, or a reference tile's) */
    mp_status status[MP_MAX_THREADS];
    mp_quant_stats stats[MP_MAX_THREADS];
    uint32_t amax[MP_MAX_THREADS];
} qjob;

static int per_tensor(mp_recipe_kind k) { return k == MP_RECIPE_FP8_DELAYED || k == MP_RECIPE_FP8_CURRENT; }

static void qshare(void *ctx, size_t i0, size_t i1, int t) {
    qjob *j = ctx;
    const size_t r1 = i1 * j->unit < j->op.rows ? i1 * j->unit : j->op.rows;
    /* the per-tensor fp8 kernels multiply in hardware: under DAZ the
     * reference (mp_fp8_quantize) forms products of subnormals exactly */
    const mp_recipe_kernels *k = per_tensor(j->op.kind) && mp_inputs_flushed() ? &mp_recipe_ref : j->k;
    j->status[t] = k->quantize(&j->op, i0 * j->unit, r1, &j->stats[t]);
}

/* The least number of units of `unit` rows that is worth a second thread. */
static size_t par_min(size_t unit, size_t cols) {
    const size_t n = PARALLEL_MIN / (unit * (cols ? cols : 1)) + 1;
    return n > 2 ? n : 2;
}

static void rht_share(void *ctx, size_t i0, size_t i1, int t) {
    qjob *j = ctx;
    j->amax[t] = j->k->rht_amax(&j->op, i0 * 16, i1 * 16 < j->op.rows ? i1 * 16 : j->op.rows);
}

/* The largest finite |x| of the operand after the Hadamard transform (the
 * amax of nvfp4's weight-gradient operands). */
static float rht_amax(qjob *j) {
    const int shares = mp_parallel_for((j->op.rows + 15) / 16, par_min(16, j->op.cols), 1, rht_share, j);
    uint32_t m = 0;
    for (int t = 0; t < shares; t++) m = j->amax[t] > m ? j->amax[t] : m;
    return mp_bits_f32(m);
}

/* The largest finite |x| of the operand (its rows' maxima compared on the
 * bits: DAZ cannot drop a subnormal one). */
static float operand_amax(const mp_qop *op) {
    if (op->lds == op->cols) return mp_amax(op->src, op->st, op->rows * op->cols);
    mp_quant_stats m = {0};
    const size_t es = op->st == MP_F32 ? 4 : 2;
    for (size_t i = 0; i < op->rows; i++)
        mp_quant_amax(&m, mp_f32_bits(mp_amax((const uint8_t *)op->src + i * op->lds * es, op->st, op->cols)));
    return m.amax;
}

/* Whether mp_qoperand applies NVFP4's Hadamard transform to an operand of rows
 * rows quantized as q's: along the reduction, not a weight, whole 16-row
 * blocks only (a zero-padded last block would carry nonzero values into rows
 * the GEMM does not sum; TE requires whole blocks). */
static int transformed(const mp_recipe *r, const mp_qtensor *q, size_t rows, int k_along_rows) {
    return r->kind == MP_RECIPE_NVFP4 && r->nvfp4_rht && k_along_rows && q->role != MP_QROLE_WEIGHT && rows % 16 == 0;
}

mp_status mp_qoperand(uint16_t *dst, size_t ldd, float *factor, const void *src, mp_dtype src_type, size_t lds,
                      size_t rows, size_t cols, int k_along_rows, const mp_recipe *r, mp_qtensor *q) {
    return mp_qoperand_with(mp_kernels_current()->recipe, dst, ldd, factor, src, src_type, lds, rows, cols,
                            k_along_rows, r, q);
}

mp_status mp_qoperand_with(const mp_recipe_kernels *kern, uint16_t *dst, size_t ldd, float *factor, const void *src,
                           mp_dtype src_type, size_t lds, size_t rows, size_t cols, int k_along_rows,
                           const mp_recipe *r, mp_qtensor *q) {
    if (!dst || !factor || !src || !r || !q || (src_type != MP_F32 && src_type != MP_BF16) || ldd < cols || lds < cols)
        return mp_error(MP_EINVAL, "mp_qoperand: bad argument");
    if (!per_tensor(r->kind) && r->kind != MP_RECIPE_MXFP8 && r->kind != MP_RECIPE_NVFP4)
        return mp_error(MP_EINVAL, "mp_qoperand: no recipe");
    if (r->kind == MP_RECIPE_MXFP8 && r->mx_rule != MP_MX_FLOOR && r->mx_rule != MP_MX_RCEIL)
        return mp_error(MP_EINVAL, "mp_qoperand: MX scale rule %d (floor or rceil)", (int)r->mx_rule);
    qjob j;
    memset(&j, 0, sizeof j);
    j.op = (mp_qop){.dst = dst,
                    .ldd = ldd,
                    .src = src,
                    .st = src_type,
                    .lds = lds,
                    .rows = rows,
                    .cols = cols,
                    .kind = r->kind,
                    .k_rows = k_along_rows && !per_tensor(r->kind), /* one scale: no direction */
                    .fmt = mp_qrole_format(r, q->role),
                    .rule = r->mx_rule,
                    .signs = r->rht_signs};
    j.k = kern;
    mp_qop *op = &j.op;
    if (r->kind == MP_RECIPE_NVFP4) {
        op->rht = transformed(r, q, rows, k_along_rows);
        if (r->nvfp4_sr && q->role == MP_QROLE_GRAD) op->rng = &q->rng;
        if (q->role == MP_QROLE_WEIGHT && r->nvfp4_2d_weights) op->tile16 = 1, op->k_rows = 0;
    }
    const size_t bk = block_len(op), cp = (cols + bk - 1) / bk * bk; /* a row padded to whole blocks */

    /* the per-tensor scale: fp8's, or the amax nvfp4's global scale comes from
     * (the weight-gradient operands' is the transform's) */
    switch (r->kind) {
    case MP_RECIPE_FP8_DELAYED: op->scale = q->scale = q->hist.scale; break;
    case MP_RECIPE_FP8_CURRENT:
        if (!q->scaled)
            q->amax = operand_amax(op), q->scale = mp_fp8_scale(q->amax, op->fmt, 0.0f, NULL), q->scaled = 1;
        op->scale = q->scale;
        break;
    case MP_RECIPE_NVFP4:
        if (op->rht) op->scale = rht_amax(&j); /* the transformed operand's own */
        else {
            if (!q->scaled) q->amax = operand_amax(op), q->scale = mp_nvfp4_global_scale(q->amax), q->scaled = 1;
            op->scale = q->amax;
        }
        break;
    default: break;
    }
    if (per_tensor(r->kind) && mp_f32_bits(op->scale) - 1u >= 0x7f7fffffu)
        return mp_error(MP_EINVAL, "mp_qoperand: scale %g (finite and > 0)", (double)op->scale);

    j.unit = op->k_rows ? bk : panel_height(op);
    const int shares = mp_parallel_for((rows + j.unit - 1) / j.unit, par_min(j.unit, cols), 1, qshare, &j);
    mp_status s = MP_OK;
    for (int t = 0; t < shares; t++) {
        if (!s) s = j.status[t];
        mp_quant_stats *a = &q->stats, *b = &j.stats[t];
        a->saturated += b->saturated, a->flushed += b->flushed, a->nonfinite += b->nonfinite;
        mp_quant_amax(a, mp_f32_bits(b->amax));
    }
    if (s) return s;
    q->stats.n += (uint64_t)rows * cols; /* the padding's zeros are not elements of the operand */
    if (op->rng)                         /* the stream moves past the padded operand */
        q->rng.counter += op->k_rows ? (rows + 15) / 16 * 16 * cols : (op->tile16 ? (rows + 15) / 16 * 16 : rows) * cp;
    if (r->kind == MP_RECIPE_NVFP4) *factor = 1.0f / mp_nvfp4_global_scale(op->scale);
    else if (per_tensor(r->kind)) *factor = 1.0f / q->scale;
    else *factor = 1.0f;
    return MP_OK;
}

/* mp_qgemm's operands: A into wa and B into wb, each along the reduction, A first; their factors into f[2]. */
static mp_status qoperands(const mp_recipe *r, int trans_a, int trans_b, size_t m, size_t n, size_t k, const void *a,
                           mp_dtype a_type, size_t lda, mp_qtensor *qa, uint16_t *wa, const void *b, mp_dtype b_type,
                           size_t ldb, mp_qtensor *qb, uint16_t *wb, float f[2]) {
    /* as stored: A is m x k (k x m when trans_a), B k x n (n x k when trans_b) */
    const size_t ra = trans_a ? k : m, ca = trans_a ? m : k, rb = trans_b ? n : k, cb = trans_b ? k : n;
    const mp_status st = mp_qoperand(wa, ca, &f[0], a, a_type, lda, ra, ca, trans_a, r, qa);
    return st == MP_OK ? mp_qoperand(wb, cb, &f[1], b, b_type, ldb, rb, cb, !trans_b, r, qb) : st;
}

mp_status mp_qgemm(const mp_recipe *r, int trans_a, int trans_b, size_t m, size_t n, size_t k, const void *a,
                   mp_dtype a_type, size_t lda, mp_qtensor *qa, uint16_t *wa, const void *b, mp_dtype b_type,
                   size_t ldb, mp_qtensor *qb, uint16_t *wb, float beta, void *c, mp_dtype c_type, size_t ldc,
                   const mp_gemm_epilogue *ep) {
    if (ep && ep->a_row_sums) return mp_error(MP_EINVAL, "mp_qgemm: a_row_sums would sum the quantized A");
    float f[2];
    const mp_status st = qoperands(r, trans_a, trans_b, m, n, k, a, a_type, lda, qa, wa, b, b_type, ldb, qb, wb, f);
    if (st != MP_OK) return st;
    return mp_gemm_ex(trans_a, trans_b, m, n, k, f[0] * f[1], wa, MP_BF16, trans_a ? m : k, wb, MP_BF16,
                      trans_b ? k : n, beta, c, c_type, ldc, ep);
}

double mp_qprobe_error(const mp_qprobe *p, int operand) {
    if (!p || operand < -1 || operand > 1) return NAN;
    const double d2 = operand < 0 ? p->out_d2 : p->op_d2[operand], r2 = operand < 0 ? p->out_r2 : p->op_r2[operand];
    return r2 > 0 ? sqrt(d2 / r2) : d2 > 0 ? INFINITY : NAN;
}

static inline float value_at(const void *x, mp_dtype t, size_t ld, size_t i, size_t j) {
    return t == MP_F32 ? ((const float *)x)[i * ld + j] : mp_bf16_widen(((const uint16_t *)x)[i * ld + j]);
}

/* Operand o (rows x cols, as quantized into w with factor f) against src: its sums into p. */
static void probe_operand(mp_qprobe *p, int o, const uint16_t *w, float f, const void *src, mp_dtype st, size_t lds,
                          size_t rows, size_t cols) {
    double d2 = 0, r2 = 0;
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < cols; j++) {
            const double x = value_at(src, st, lds, i, j), d = (double)mp_bf16_widen(w[i * cols + j]) * f - x;
            d2 += d * d, r2 += x * x;
        }
    p->op_d2[o] += d2, p->op_r2[o] += r2;
}

mp_status mp_qgemm_probe(const mp_recipe *r, int trans_a, int trans_b, size_t m, size_t n, size_t k, const void *a,
                         mp_dtype a_type, size_t lda, const void *a_src, mp_dtype a_src_type, size_t lda_src,
                         mp_qtensor *qa, uint16_t *wa, const void *b, mp_dtype b_type, size_t ldb, const void *b_src,
                         mp_dtype b_src_type, size_t ldb_src, mp_qtensor *qb, uint16_t *wb, float *scratch,
                         mp_qprobe *p) {
    if (!r || !a || !a_src || !qa || !wa || !b || !b_src || !qb || !wb || !scratch || !p)
        return mp_error(MP_EINVAL, "mp_qgemm_probe: NULL argument");
    const size_t ra = trans_a ? k : m, ca = trans_a ? m : k, rb = trans_b ? n : k, cb = trans_b ? k : n;
    const mp_quant_stats sa = qa->stats, sb = qb->stats;
    float f[2];
    mp_status st = qoperands(r, trans_a, trans_b, m, n, k, a_src, a_src_type, lda_src, qa, wa, b_src, b_src_type,
                             ldb_src, qb, wb, f);
    float *ref = scratch, *q = scratch + m * n;
    if (st == MP_OK)
        st = mp_gemm_ex(trans_a, trans_b, m, n, k, 1.0f, a, a_type, lda, b, b_type, ldb, 0.0f, ref, MP_F32, n, NULL);
    if (st == MP_OK)
        st = mp_gemm_ex(trans_a, trans_b, m, n, k, f[0] * f[1], wa, MP_BF16, ca, wb, MP_BF16, cb, 0.0f, q, MP_F32, n,
                        NULL);
    if (st != MP_OK) return st;
    double d2 = 0, r2 = 0;
    for (size_t i = 0; i < m * n; i++) {
        const double d = (double)q[i] - ref[i];
        d2 += d * d, r2 += (double)ref[i] * ref[i];
    }
    p->out_d2 += d2, p->out_r2 += r2, p->calls++;
    const struct {
        const uint16_t *w;
        float f;
        const void *src;
        mp_dtype st;
        size_t ld, rows, cols;
        int kr;
        const mp_qtensor *q;
        mp_quant_stats before;
    } ops[2] = {{wa, f[0], a_src, a_src_type, lda_src, ra, ca, trans_a, qa, sa},
                {wb, f[1], b_src, b_src_type, ldb_src, rb, cb, !trans_b, qb, sb}};
    for (int o = 0; o < 2; o++) {
        p->op_n[o] += ops[o].rows * ops[o].cols;
        p->flushed[o] += ops[o].q->stats.flushed - ops[o].before.flushed;
        p->saturated[o] += ops[o].q->stats.saturated - ops[o].before.saturated;
        if (transformed(r, ops[o].q, ops[o].rows, ops[o].kr)) p->transformed[o]++;
        else probe_operand(p, o, ops[o].w, ops[o].f, ops[o].src, ops[o].st, ops[o].ld, ops[o].rows, ops[o].cols);
    }
    return MP_OK;
}
