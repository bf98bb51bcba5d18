/* gemm.c - C = alpha * op(A) op(B) + beta * C with fp32 accumulation.
 *
 * BLIS structure: for each NC-column block of B, for each KC-deep slice, pack
 * the slice of B into NR-wide micro-panels (shared by the threads), then each
 * thread takes MC-row blocks of A, packs them into MR-row micro-panels and runs
 * the micro-kernel over every MR x NR tile. Half inputs are converted to fp32
 * (or, for the bf16 dot-product kernel, paired) while packing; panels are zero
 * padded so edge tiles run the same micro-kernel into a scratch tile. */
#define _DEFAULT_SOURCE // madvise
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "internal.h"
#include "gemm_epilogue.h"

/* ---- the reference: plain loops ---- */

static float load_f32(const void *p, mp_dtype t, size_t i) {
    switch (t) {
    case MP_F16: return mp_f16_to_f32(((const uint16_t *)p)[i]);
    case MP_BF16: return mp_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

/* The final value of a C element from its fp32 accumulator. */
static inline float apply_ab(float acc, float alpha, float beta, float c_old) {
    return beta == 0.0f ? alpha * acc : fmaf(alpha, acc, beta * c_old);
}

static mp_status check_args(const char *fn, int trans_a, int trans_b, size_t m, size_t n, size_t k, const void *a,
                            mp_dtype at, size_t lda, const void *b, mp_dtype bt, size_t ldb, const void *c, mp_dtype ct,
                            size_t ldc) {
    const mp_dtype ts[3] = {at, bt, ct};
    for (int i = 0; i < 3; i++)
        if (ts[i] != MP_F32 && ts[i] != MP_F16 && ts[i] != MP_BF16)
            return mp_error(MP_EINVAL, "%s: %c must be fp32, fp16 or bf16 (dtype %d)", fn, "abc"[i], (int)ts[i]);
    if (m && n && !c) return mp_error(MP_EINVAL, "%s: C is NULL", fn);
    if (m && n && k && (!a || !b)) return mp_error(MP_EINVAL, "%s: A or B is NULL", fn);
    if (ldc < n || lda < (trans_a ? m : k) || ldb < (trans_b ? k : n))
        return mp_error(MP_EINVAL, "%s: leading dimension too small (lda %zu, ldb %zu, ldc %zu for m %zu n %zu k %zu)",
                        fn, lda, ldb, ldc, m, n, k);
    return MP_OK;
}

/* Stores one row of fp32 results into C (any format) with statistics. */
static void store_row(const mp_kernels *k, void *c, mp_dtype ct, size_t ldc, size_t i, const float *row, size_t n,
                      mp_convert_stats *st) {
    mp_from_f32(k, (uint8_t *)c + i * ldc * mp_format(ct)->size, ct, row, n, st);
}

mp_status mp_gemm_ref(int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha, const void *a, mp_dtype at,
                      size_t lda, const void *b, mp_dtype bt, size_t ldb, float beta, void *c, mp_dtype ct, size_t ldc,
                      mp_convert_stats *st) {
    mp_status s = check_args("mp_gemm_ref", trans_a, trans_b, m, n, k, a, at, lda, b, bt, ldb, c, ct, ldc);
    if (s != MP_OK || m == 0 || n == 0) return s;
    float *row = malloc(n * sizeof *row);
    if (!row) return mp_error(MP_ENOMEM, "mp_gemm_ref: out of memory");
    const mp_kernels *k_ref = mp_kernels_current();
    for (size_t i = 0; i < m; i++) {
        for (size_t j = 0; j < n; j++) {
            float acc = 0.0f;
            if (alpha != 0.0f)
                for (size_t p = 0; p < k; p++)
                    acc = fmaf(load_f32(a, at, trans_a ? p * lda + i : i * lda + p),
                               load_f32(b, bt, trans_b ? j * ldb + p : p * ldb + j), acc);
            row[j] = apply_ab(acc, alpha, beta, beta == 0.0f ? 0.0f : load_f32(c, ct, i * ldc + j));
        }
        store_row(k_ref, c, ct, ldc, i, row, n, st);
    }
    free(row);
    return MP_OK;
}

/* ---- packing to fp32 (any input format), shared by the fp32 kernels ---- */

/* Converts `len` values at stride 1 starting at element `off` of p into out,
 * exactly, by the portable conversions (the kernel of the portable path). */
static void run_f32(float *out, const void *p, mp_dtype t, size_t off, size_t len) {
    mp_to_f32(mp_kernels_of(MP_ISA_SCALAR), out, (const uint8_t *)p + off * mp_format(t)->size, t, len);
}

/* One micro-panel in fp32, (kc, width): for each k, `width` values of the
 * panel's dimension (rows of op(A) or columns of op(B)) starting at w0, of
 * which `valid` are real and the rest zero. `along` says how the source is
 * laid out: 1 when those width values are consecutive in memory (element
 * (p0+p)*ld + w0 + w), 0 when each of them is a run over k (element
 * (w0+w)*ld + p0 + p). op(A) is "along" when transposed, op(B) when not. */
static void pack_f32(float *d, // (kc, width) fp32
                     const void *src, mp_dtype t, size_t ld, int along, size_t w0, size_t valid, size_t p0, size_t kc,
                     size_t width) {
    if (along) {
        for (size_t p = 0; p < kc; p++) {
            run_f32(d + p * width, src, t, (p0 + p) * ld + w0, valid);
            for (size_t w = valid; w < width; w++) d[p * width + w] = 0.0f;
        }
        return;
    }
    float run[512];
    for (size_t w = 0; w < width; w++)
        for (size_t q = 0; q < kc; q += 512) {
            const size_t len = kc - q < 512 ? kc - q : 512;
            if (w < valid) run_f32(run, src, t, (w0 + w) * ld + p0 + q, len);
            for (size_t p = 0; p < len; p++) d[(q + p) * width + w] = w < valid ? run[p] : 0.0f;
        }
}

/* ---- the epilogue: a tile's fp32 sums into C (gemm_epilogue.h) ---- */

void mp_gemm_epilogue_scalar(const mp_gemm_ep *e, float *tile, size_t ts, size_t i0, size_t j0, size_t rows,
                             size_t cols, mp_convert_stats *st, uint64_t *zeros) {
    mp_gemm_epilogue_body(e, tile, ts, i0, j0, rows, cols, st, zeros);
}

uint64_t mp_gemm_zeros_scalar(const float *c, size_t ldc, size_t rows, size_t cols) {
    return tile_zeros(c, ldc, rows, cols);
}

void mp_gemm_row_sums_scalar(float *sums, const void *a, mp_dtype t, size_t lda, int trans, size_t i0, size_t rows,
                             size_t p0, size_t kc) {
    for (size_t p = 0; p < kc; p++)
        for (size_t r = 0; r < rows; r++)
            sums[r] += load_f32(a, t, trans ? (p0 + p) * lda + i0 + r : (i0 + r) * lda + p0 + p);
}

/* ---- portable kernel ---- */

enum { SCALAR_MR = 4, SCALAR_NR = 16 };

static void pack_a_scalar(void *dst, const void *a, mp_dtype t, size_t lda, int trans, size_t i0, size_t rows,
                          size_t p0, size_t kc) {
    pack_f32(dst, a, t, lda, trans, i0, rows, p0, kc, SCALAR_MR);
}

static void pack_b_scalar(void *dst, const void *b, mp_dtype t, size_t ldb, int trans, size_t p0, size_t kc, size_t j0,
                          size_t cols) {
    pack_f32(dst, b, t, ldb, !trans, j0, cols, p0, kc, SCALAR_NR);
}

static inline __attribute__((always_inline)) void micro_scalar_body(size_t kc, const void *ap, const void *bp, float *c,
                                                                    size_t ldc, float alpha, float beta) {
    const float *A = ap, *B = bp;
    float acc[SCALAR_MR][SCALAR_NR] = {{0}};
    for (size_t p = 0; p < kc; p++)
        for (int i = 0; i < SCALAR_MR; i++)
            for (int j = 0; j < SCALAR_NR; j++) acc[i][j] = fmaf(A[p * SCALAR_MR + i], B[p * SCALAR_NR + j], acc[i][j]);
    for (int i = 0; i < SCALAR_MR; i++)
        for (int j = 0; j < SCALAR_NR; j++)
            c[i * ldc + j] = apply_ab(acc[i][j], alpha, beta, beta == 0.0f ? 0.0f : c[i * ldc + j]);
}

#if defined(__x86_64__) && defined(__GNUC__)
/* The same loops where fmaf is one instruction: on x86-64 CPUs with FMA (those
 * of the avx2 path), where the baseline build calls libm's fmaf for each
 * product. fmaf is correctly rounded either way: the same bits. Every build's
 * tests run this path (test_gemm on it alone under gcc's ASan + UBSan: 48.7 s
 * with the libm calls, 17.3 s with the instruction, on an Intel Xeon VM). */
__attribute__((target("fma"))) static void micro_scalar_fma(size_t kc, const void *ap, const void *bp, float *c,
                                                            size_t ldc, float alpha, float beta) {
    micro_scalar_body(kc, ap, bp, c, ldc, alpha, beta);
}
#endif

static void micro_scalar(size_t kc, const void *ap, const void *bp, float *c, size_t ldc, float alpha, float beta) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (mp_cpu_features()->avx2) {
        micro_scalar_fma(kc, ap, bp, c, ldc, alpha, beta);
        return;
    }
#endif
    micro_scalar_body(kc, ap, bp, c, ldc, alpha, beta);
}

const mp_gemm_kernel mp_gemm_scalar = {
    .name = "scalar",
    .mr = SCALAR_MR,
    .nr = SCALAR_NR,
    .kpack = 1,
    .kc = 512,
    .mc = 64,
    .nc = 2048,
    .esize = 4,
    .pack_a = pack_a_scalar,
    .pack_b = pack_b_scalar,
    .micro = micro_scalar,
    .epilogue = mp_gemm_epilogue_scalar,
    .zeros = mp_gemm_zeros_scalar,
    .row_sums = mp_gemm_row_sums_scalar,
};

/* ---- the blocked driver ---- */

/* Packing buffers live as long as the thread that uses them and only grow:
 * allocating megabytes per call would cost page faults every call. Aligned to
 * 2 MiB and marked for transparent huge pages (fewer TLB misses on panels).
 * A thread-specific key frees them when the thread exits. */
typedef struct {
    void *buf[4]; /* packed B, packed A, the strip of a row block's sums, a row block's sums of A's rows */
    size_t cap[4];
} pack_buffers;

static pthread_key_t pack_key;
static pthread_once_t pack_once = PTHREAD_ONCE_INIT;

static void pack_free(void *v) {
    pack_buffers *b = v;
    for (int i = 0; i < 4; i++) free(b->buf[i]);
    free(b);
}

static void pack_key_init(void) { pthread_key_create(&pack_key, pack_free); }

static void *pack_buffer(int which, size_t bytes) {
    pthread_once(&pack_once, pack_key_init);
    pack_buffers *b = pthread_getspecific(pack_key);
    if (!b) {
        if (!(b = calloc(1, sizeof *b)) || pthread_setspecific(pack_key, b) != 0) {
            free(b);
            return NULL;
        }
    }
    if (b->cap[which] >= bytes) return b->buf[which];
    const size_t align = (size_t)2 << 20, size = (bytes + align - 1) / align * align;
    void *p = aligned_alloc(align, size);
    if (!p) return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, size, MADV_HUGEPAGE);
#endif
    free(b->buf[which]);
    b->buf[which] = p, b->cap[which] = size;
    return p;
}

/* One call's blocking and operands, shared by the threads. All of k is packed
 * at once: B for a column block (nc columns) by every thread together, A for
 * a row block by the thread that takes it; a block of k is kc deep (its
 * packed depth kcp, the last one kpad), and the sums of a row block by one
 * column panel (row blocks; rows x NR fp32), or of a row panel by the column
 * block (row panels; MR x nc fp32), collect over every block of k in the
 * thread's strip, in cache, rather than in C: each C element is written once. */
typedef struct {
    const mp_gemm_kernel *kr;
    int ta, tb, trivial, team; /* team: run by an OpenMP team (else by the calling thread alone) */
    size_t m, n, k, MR, NR, KP, es, lda, ldb;
    const void *a, *b;
    mp_dtype at, bt;
    const mp_gemm_ep *ep;
    float *row_sums;        /* (m,): op(A)'s row sums added (mp_gemm_epilogue's a_row_sums), or NULL */
    size_t kc, kcp, nk, K2; /* block depth, its packed depth, blocks of k, packed depth of all of k */
    size_t nc, panels, nblocks, mc;
    int row_panels; /* the kernel's row panels (its panels_b_max), */
    size_t gw;      /* their epilogue's groups of column panels */
    void *bpack;
    size_t bK2; /* packed depth of a column panel of bpack: K2, or a packed B's (a prefix of it used) */
    int packed; /* bpack is a B packed before the call (one column block, nothing to pack) */
} gemm_plan;

/* Packed B holds at most this many bytes (a larger k gives narrower column blocks). */
#define MP_GEMM_BPACK_MAX ((size_t)16 << 20)

/* g's kernel shape and blocks of k (g->k > 0): kc deep, each packed kcp deep, all of k K2 deep (each whole
 * block kcp, the last rounded up to kpack); B's panels K2 deep. */
static void k_blocks(gemm_plan *g) {
    const mp_gemm_kernel *kr = g->kr;
    g->MR = (size_t)kr->mr, g->NR = (size_t)kr->nr, g->KP = (size_t)kr->kpack, g->es = kr->esize;
    g->kc = kr->kc, g->kcp = (kr->kc + g->KP - 1) / g->KP * g->KP;
    g->nk = (g->k + g->kc - 1) / g->kc;
    g->K2 = (g->nk - 1) * g->kcp + ((g->k - (g->nk - 1) * g->kc) + g->KP - 1) / g->KP * g->KP;
    g->bK2 = g->K2;
}

/* The blocking of g's GEMM on nt threads; pb: B packed before (NULL: packed here, block by block). */
static mp_status plan(gemm_plan *g, int nt, const mp_gemm_packed_b *pb) {
    const mp_gemm_kernel *kr = g->kr;
    k_blocks(g);
    size_t nc = kr->nc < g->n ? kr->nc : (g->n + g->NR - 1) / g->NR * g->NR; /* kr->nc is a multiple of NR */
    const size_t nc_max = MP_GEMM_BPACK_MAX / (g->K2 * g->es) / g->NR * g->NR;
    g->nc = pb ? (g->n + g->NR - 1) / g->NR * g->NR : nc < nc_max ? nc : nc_max > g->NR ? nc_max : g->NR;
    if (pb) g->bK2 = pb->K2;
    /* Row blocks: whole MR-row panels, spread evenly over a multiple of the threads; a block of A (rows x kc)
     * should stay in L2, so shallow k allows taller blocks than kr->mc, which is sized for the deepest kc. */
    g->panels = (g->m + g->MR - 1) / g->MR;
    const size_t kdepth = g->nk == 1 ? g->K2 : g->kcp;
    size_t mc_rows = kr->mc * g->kcp / kdepth;
    if (mc_rows < g->MR) mc_rows = g->MR;
    size_t nblocks = (g->panels * g->MR + mc_rows - 1) / mc_rows;
    nblocks = (nblocks + (size_t)nt - 1) / (size_t)nt * (size_t)nt;
    g->nblocks = nblocks > g->panels ? g->panels : nblocks;
    g->mc = (g->panels + g->nblocks - 1) / g->nblocks * g->MR; /* the tallest block */
    g->row_panels = g->nc * g->K2 * g->es <= kr->panels_b_max;
    /* the row panels' epilogue groups: as many column panels as MP_GEMM_STRIP and MP_GEMM_EPILOGUE_COLS allow */
    const size_t gw_cols = MP_GEMM_EPILOGUE_COLS / g->NR, gw_strip = MP_GEMM_STRIP / (g->MR * g->NR);
    g->gw = !gw_cols || !gw_strip ? 1 : gw_cols < gw_strip ? gw_cols : gw_strip;
    g->packed = pb != NULL;
    if (!(g->bpack = pb ? pb->data : pack_buffer(0, g->nc * g->K2 * g->es)))
        return mp_error(MP_ENOMEM, "mp_gemm: out of memory for a packed B block");
    return MP_OK;
}

/* Block bi of k: its first k, depth and packed depth. */
static size_t kblock(const gemm_plan *g, size_t bi, size_t *kcur, size_t *kpad) {
    const size_t pc = bi * g->kc;
    *kcur = g->k - pc < g->kc ? g->k - pc : g->kc;
    *kpad = (*kcur + g->KP - 1) / g->KP * g->KP;
    return pc;
}

/* op(A)'s rows along k are the packed layout already: the kernel reads whole panels in place */
static int direct_rows(const gemm_plan *g, size_t kcur, size_t rows) {
    return g->kr->micro_rows && !g->ta && kcur % g->KP == 0 && rows == g->MR &&
           (g->row_panels || !g->kr->rows_max_n || g->n <= g->kr->rows_max_n);
}

/* The k packed per piece of work: this many of every micro-panel of a block at a time, so that an operand
 * whose panels are strided lines (B not transposed, A transposed) is read in order, row after row, rather
 * than one panel's lines at a time. */
#define MP_GEMM_PIECE_K 64

/* Piece w of pack_b_block: MP_GEMM_PIECE_K k (fewer at a block's end) of a block of k, by every column panel. */
static void pack_b_piece(const gemm_plan *g, size_t jc, size_t npanels, size_t w) {
    const size_t per = (g->kc + MP_GEMM_PIECE_K - 1) / MP_GEMM_PIECE_K;
    size_t kcur, kpad;
    const size_t bi = w / per, q0 = w % per * MP_GEMM_PIECE_K, pc = kblock(g, bi, &kcur, &kpad);
    if (q0 >= kcur) return;
    const size_t len = kcur - q0 < MP_GEMM_PIECE_K ? kcur - q0 : MP_GEMM_PIECE_K;
    for (size_t jp = 0; jp < npanels; jp++) {
        const size_t j0 = jc + jp * g->NR, cols = g->n - j0 < g->NR ? g->n - j0 : g->NR;
        g->kr->pack_b((uint8_t *)g->bpack + (jp * g->bK2 + bi * g->kcp + q0) * g->NR * g->es, g->b, g->bt, g->ldb,
                      g->tb, pc + q0, len, j0, cols);
    }
}

/* Packs B's columns [jc, jc + ncur), every block of k, in pieces of MP_GEMM_PIECE_K k by all the column panels;
 * the team's threads share the pieces. */
static void pack_b_block(const gemm_plan *g, size_t jc, size_t ncur) {
    const size_t npanels = (ncur + g->NR - 1) / g->NR,
                 pieces = g->nk * ((g->kc + MP_GEMM_PIECE_K - 1) / MP_GEMM_PIECE_K);
    if (!g->team) {
        for (size_t w = 0; w < pieces; w++) pack_b_piece(g, jc, npanels, w);
        return;
    }
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
    for (size_t w = 0; w < pieces; w++) pack_b_piece(g, jc, npanels, w);
}

/* Packs the row block [ic, ic + mcur), every block of k (whole panels read in place are skipped); the
 * panels of one block of k after another, so that a transposed A's pages are visited once (all of k at once
 * would miss the TLB for every row of A: 2.6x the time at 1536 x 384 x 4096 on the AMX Xeon), and within a
 * block MP_GEMM_PIECE_K k of every panel at a time, so that a transposed A's rows are read in order. With sums
 * (mcur fp32 of scratch), op(A)'s rows are also summed, each piece right after its packing while its
 * lines are in cache, and the sums added to g->row_sums. */
static void pack_a_block(const gemm_plan *g, void *apack, size_t ic, size_t mcur, float *sums) {
    if (sums) memset(sums, 0, mcur * sizeof *sums);
    for (size_t bi = 0; bi < g->nk; bi++) {
        size_t kcur, kpad;
        const size_t pc = kblock(g, bi, &kcur, &kpad);
        for (size_t q0 = 0; q0 < kcur; q0 += MP_GEMM_PIECE_K) {
            const size_t len = kcur - q0 < MP_GEMM_PIECE_K ? kcur - q0 : MP_GEMM_PIECE_K;
            for (size_t ip = 0; ip * g->MR < mcur; ip++) {
                const size_t rows = mcur - ip * g->MR < g->MR ? mcur - ip * g->MR : g->MR, i0 = ic + ip * g->MR;
                if (!direct_rows(g, kcur, rows))
                    g->kr->pack_a((uint8_t *)apack + (ip * g->K2 + bi * g->kcp + q0) * g->MR * g->es, g->a, g->at,
                                  g->lda, g->ta, i0, rows, pc + q0, len);
            }
            if (sums) g->kr->row_sums(sums, g->a, g->at, g->lda, g->ta, ic, mcur, pc + q0, len);
        }
    }
    for (size_t i = 0; sums && i < mcur; i++) g->row_sums[ic + i] += sums[i];
}

/* The micro-kernel on panel ip of the row block at ic (rows of it) by the column panel bp, block bi of k,
 * into c (row stride ldc): alpha * sums + beta * c; stream_b: the row panels' kernels. */
static void micro_at(const gemm_plan *g, const void *apack, const void *bp, size_t ic, size_t ip, size_t rows,
                     size_t bi, float *c, size_t ldc, float alpha, float beta, int stream_b) {
    size_t kcur, kpad;
    const size_t pc = kblock(g, bi, &kcur, &kpad);
    bp = (const uint8_t *)bp + bi * g->kcp * g->NR * g->es;
    if (direct_rows(g, kcur, rows))
        (stream_b ? g->kr->micro_rows_stream_b : g->kr->micro_rows)(
            kpad, (const uint8_t *)g->a + ((ic + ip * g->MR) * g->lda + pc) * g->es, g->lda, bp, c, ldc, alpha, beta);
    else
        (stream_b ? g->kr->micro_stream_b : g->kr->micro)(
            kpad, (const uint8_t *)apack + (ip * g->K2 + bi * g->kcp) * g->MR * g->es, bp, c, ldc, alpha, beta);
}

/* The lines of `rows` rows of `bytes` each, ld bytes apart, from p into the cache (for writing or reading). */
static inline void prefetch_rows(const uint8_t *p, size_t ld, size_t rows, size_t bytes, int write) {
    for (size_t i = 0; i < rows; i++, p += ld) {
        for (size_t o = 0; o < bytes; o += 64) write ? __builtin_prefetch(p + o, 1) : __builtin_prefetch(p + o, 0);
        write ? __builtin_prefetch(p + bytes - 1, 1)
              : __builtin_prefetch(p + bytes - 1, 0); /* an unaligned row's end */
    }
}

/* A tile's lines arrive while its last micro-kernel runs, for the epilogue soon after: the post step's x (a
 * residual, or GELU's input; for every kernel: on the AMX Xeon the GPT's bf16 step took 6% less, the epilogue
 * had waited on them, one line per row of the strip) and C's, but not before a tile kernel (one with begin and
 * end: AMX), whose loads need the line fill buffers (there the prefetches of C cost 10%), nor where C is
 * streamed (its lines are written whole, never read). */
static void prefetch_tile(const gemm_plan *g, size_t i0, size_t j0, size_t rows, size_t cols) {
    const size_t cs = mp_format(g->ep->ct)->size, ld = g->ep->ldc * cs, off = (i0 * g->ep->ldc + j0) * cs;
    if (g->ep->post_x) prefetch_rows((const uint8_t *)g->ep->post_x + off, ld, rows, cols * cs, 0);
    if (!g->kr->begin && !g->ep->stream) prefetch_rows((const uint8_t *)g->ep->c + off, ld, rows, cols * cs, 1);
}

/* Trivial (an fp32 C, no epilogue) with one block of k: the micro-kernel writes alpha * sums + beta * C
 * into a whole tile of C (counting the zeros of C's final values into *z); an edge tile goes through the strip
 * and the epilogue, which does the same arithmetic on its part. Tile ip of the row block at ic (rows of it) by
 * the column panel bp at j0 (cols of it); stream_b: the row panels' kernels. */
static void trivial_tile(const gemm_plan *g, const void *apack, const void *bp, float *strip, size_t ic, size_t ip,
                         size_t rows, size_t j0, size_t cols, uint64_t *z, int stream_b) {
    const mp_gemm_ep *ep = g->ep;
    const size_t i0 = ic + ip * g->MR;
    if (rows == g->MR && cols == g->NR) {
        float *cp = (float *)ep->c + i0 * ep->ldc + j0;
        micro_at(g, apack, bp, ic, ip, rows, 0, cp, ep->ldc, ep->alpha, ep->beta, stream_b);
        if (z) *z += g->kr->zeros(cp, ep->ldc, rows, cols);
    } else {
        micro_at(g, apack, bp, ic, ip, rows, 0, strip, g->NR, 1.0f, 0.0f, stream_b);
        g->kr->epilogue(ep, strip, g->NR, i0, j0, rows, cols, NULL, z);
    }
}

/* trivial_tile for every tile of a row block's column panel */
static void trivial_panel(const gemm_plan *g, const void *apack, const void *bp, float *strip, size_t ic, size_t mcur,
                          size_t j0, size_t cols, uint64_t *z) {
    for (size_t ip = 0; ip * g->MR < mcur; ip++)
        trivial_tile(g, apack, bp, strip, ic, ip, mcur - ip * g->MR < g->MR ? mcur - ip * g->MR : g->MR, j0, cols, z,
                     0);
}

/* The epilogue's panel: the sums of every block of k collect in the strip; during the last block, the
 * epilogue runs on pieces of up to MP_GEMM_STRIP values as soon as their rows are complete. */
static void epilogue_panel(const gemm_plan *g, const void *apack, const void *bp, float *strip, size_t ic, size_t mcur,
                           size_t j0, size_t cols, mp_convert_stats *st, uint64_t *z) {
    const size_t piece_rows = MP_GEMM_STRIP / g->NR;
    for (size_t bi = 0; bi < g->nk; bi++) {
        const int last = bi + 1 == g->nk;
        size_t s0 = 0, srows = 0;
        for (size_t ip = 0; ip * g->MR < mcur; ip++) {
            const size_t i0 = ic + ip * g->MR, rows = mcur - ip * g->MR < g->MR ? mcur - ip * g->MR : g->MR;
            if (last) prefetch_tile(g, i0, j0, rows, cols);
            micro_at(g, apack, bp, ic, ip, rows, bi, strip + ip * g->MR * g->NR, g->NR, 1.0f, bi ? 1.0f : 0.0f, 0);
            if (!last) continue;
            srows += rows;
            if (rows < g->MR || (ip + 1) * g->MR >= mcur || srows + g->MR > piece_rows) {
                g->kr->epilogue(g->ep, strip + s0 * g->NR, g->NR, ic + s0, j0, srows, cols, st, z);
                s0 += srows, srows = 0;
            }
        }
    }
}

/* Row panels (the kernel's panels_b_max): each MR-row panel of the row block over every column panel of the
 * column block [jc, jc + ncur), block of k by block of k, so that the panel's block of A is reused by all of
 * them while B's panels stream from L2. The sums collect in the strip over the blocks of k, in groups of gw
 * column panels side by side (group q at q MR gw NR, row stride gw NR; one group with one block of k), and a
 * group goes through the epilogue right after its last micro-kernel, so that C's rows are written in order
 * (trivial with one block of k: trivial_tile). */
static void row_panels(const gemm_plan *g, const void *apack, float *strip, size_t ic, size_t mcur, size_t jc,
                       size_t ncur, mp_convert_stats *st, uint64_t *z) {
    const int direct = g->trivial && g->nk == 1;
    const size_t gw = g->gw, ts = gw * g->NR;
    for (size_t ip = 0; ip * g->MR < mcur; ip++) {
        const size_t i0 = ic + ip * g->MR, rows = mcur - ip * g->MR < g->MR ? mcur - ip * g->MR : g->MR;
        for (size_t bi = 0; bi < g->nk; bi++) {
            const int last = bi + 1 == g->nk;
            for (size_t jp = 0; jp * g->NR < ncur; jp++) {
                const size_t j0 = jc + jp * g->NR, cols = g->n - j0 < g->NR ? g->n - j0 : g->NR;
                const void *bp = (const uint8_t *)g->bpack + jp * g->bK2 * g->NR * g->es;
                if (direct) {
                    trivial_tile(g, apack, bp, strip, ic, ip, rows, j0, cols, z, 1);
                    continue;
                }
                float *grp = g->nk == 1 ? strip : strip + jp / gw * g->MR * ts;
                if (last) prefetch_tile(g, i0, j0, rows, cols);
                micro_at(g, apack, bp, ic, ip, rows, bi, grp + jp % gw * g->NR, ts, 1.0f, bi ? 1.0f : 0.0f, 1);
                if (last && ((jp + 1) % gw == 0 || (jp + 1) * g->NR >= ncur)) {
                    const size_t g0 = jc + jp / gw * ts, gcols = jc + ncur - g0 < ts ? jc + ncur - g0 : ts;
                    g->kr->epilogue(g->ep, grp, ts, i0, g0, rows, gcols, st, z);
                }
            }
        }
    }
}

/* A thread's row block ib by the column block at jc (op(A)'s rows summed in the first, into sums: scratch). */
static void row_block(const gemm_plan *g, void *apack, float *strip, float *sums, size_t ib, size_t jc, size_t ncur,
                      mp_convert_stats *st, uint64_t *z) {
    const size_t ic = ib * g->panels / g->nblocks * g->MR;
    const size_t iend = (ib + 1) * g->panels / g->nblocks * g->MR, mcur = (iend < g->m ? iend : g->m) - ic;
    pack_a_block(g, apack, ic, mcur, jc == 0 ? sums : NULL);
    if (g->row_panels) {
        row_panels(g, apack, strip, ic, mcur, jc, ncur, st, z);
        return;
    }
    for (size_t jp = 0; jp * g->NR < ncur; jp++) {
        const size_t j0 = jc + jp * g->NR, cols = g->n - j0 < g->NR ? g->n - j0 : g->NR;
        const void *bp = (const uint8_t *)g->bpack + jp * g->bK2 * g->NR * g->es;
        if (g->trivial && g->nk == 1) trivial_panel(g, apack, bp, strip, ic, mcur, j0, cols, z);
        else epilogue_panel(g, apack, bp, strip, ic, mcur, j0, cols, st, z);
    }
}

/* Thread t's part of the GEMM: every column block of B packed by the team (an implicit barrier; a B packed
 * before the call is one column block, ready), then the row blocks it takes; without a team, all of it. Counts into
 * part[t] and zpart[t]; *oom set when a buffer could not be had. */
static void gemm_thread(const gemm_plan *g, int t, mp_convert_stats (*part)[2], uint64_t *zpart, int *oom) {
    void *apack = pack_buffer(1, g->mc * g->K2 * g->es);
    /* the strip: a row block's tiles of a column panel, or a row panel's tiles of the column block */
    const size_t groups = (g->nc / g->NR + g->gw - 1) / g->gw;
    float *strip = pack_buffer(2, (g->row_panels ? g->MR * (g->nk == 1 ? 1 : groups) * g->gw * g->NR : g->mc * g->NR) *
                                      sizeof *strip);
    float *sums = g->row_sums ? pack_buffer(3, g->mc * sizeof *sums) : NULL;
    const int ready = apack && strip && (sums || !g->row_sums);
    if (!ready) {
#ifdef _OPENMP
#pragma omp atomic write
#endif
        *oom = 1;
    }
    if (g->kr->begin) g->kr->begin();
    for (size_t jc = 0; jc < g->n; jc += g->nc) {
        const size_t ncur = g->n - jc < g->nc ? g->n - jc : g->nc;
        if (!g->packed) pack_b_block(g, jc, ncur); /* implicit barrier: B is packed */
        if (!g->team) {
            for (size_t ib = 0; ib < g->nblocks && ready; ib++)
                row_block(g, apack, strip, sums, ib, jc, ncur, part ? part[t] : NULL, zpart ? &zpart[t] : NULL);
            continue;
        }
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
        for (size_t ib = 0; ib < g->nblocks; ib++)
            if (ready) row_block(g, apack, strip, sums, ib, jc, ncur, part ? part[t] : NULL, zpart ? &zpart[t] : NULL);
    }
    if (g->kr->end) g->kr->end();
    if (g->ep->stream) mp_store_fence(); /* the non-temporal stores visible before the team's barrier */
}

/* The threads of an m x n x k GEMM: one where it is too small to share. */
static int gemm_threads(size_t m, size_t n, size_t k) {
    const int nt = mp_get_threads();
    if ((double)m * (double)n * (double)k < 2e6) return 1;
    return nt > MP_MAX_THREADS ? MP_MAX_THREADS : nt;
}

/* C = alpha op(A) op(B) + beta C through the kernel, with the epilogue ep on the complete sums (on nt threads).
 * trivial: an fp32 C with no epilogue but alpha and beta, which one block of k writes straight from the micro-kernel
 * (and zpart[] counts the zeros of C's final values). Counts per thread into part[] (C's and the post step's) and
 * zpart[] (NULL: not counted); op(A)'s row sums added to row_sums (NULL: none). */
static mp_status gemm_blocked(const mp_gemm_kernel *kr, int ta, int tb, size_t m, size_t n, size_t k, const void *a,
                              mp_dtype at, size_t lda, const void *b, mp_dtype bt, size_t ldb, const mp_gemm_ep *ep,
                              float *row_sums, int trivial, int nt, const mp_gemm_packed_b *pb,
                              mp_convert_stats (*part)[2], uint64_t *zpart) {
    gemm_plan g = {.kr = kr,
                   .ta = ta,
                   .tb = tb,
                   .trivial = trivial,
                   .m = m,
                   .n = n,
                   .k = k,
                   .lda = lda,
                   .ldb = ldb,
                   .a = a,
                   .b = b,
                   .at = at,
                   .bt = bt,
                   .ep = ep,
                   .row_sums = row_sums};
    mp_status s = plan(&g, nt, pb);
    if (s != MP_OK) return s;
    int oom = 0;
    g.team = nt > 1;
    if (!g.team) { /* one thread: no team to start (the attention's small GEMMs run inside its own team) */
        gemm_thread(&g, 0, part, zpart, &oom);
        return oom ? mp_error(MP_ENOMEM, "mp_gemm: out of memory for a packed A block") : MP_OK;
    }
#ifdef _OPENMP
#pragma omp parallel num_threads(nt)
#endif
    {
#ifdef _OPENMP
        const int t = omp_get_thread_num();
#else
        const int t = 0;
#endif
        gemm_thread(&g, t, part, zpart, &oom);
    }
    return oom ? mp_error(MP_ENOMEM, "mp_gemm: out of memory for a packed A block") : MP_OK;
}

/* No products (k == 0 or alpha == 0): the epilogue on sums of zero. */
static void epilogue_zero(const mp_gemm_ep *ep, size_t m, size_t n, mp_convert_stats st[2], uint64_t *zeros) {
    float tile[8 * MP_GEMM_EPILOGUE_COLS];
    for (size_t i0 = 0; i0 < m; i0 += 8)
        for (size_t j0 = 0; j0 < n; j0 += MP_GEMM_EPILOGUE_COLS) {
            const size_t rows = m - i0 < 8 ? m - i0 : 8,
                         cols = n - j0 < MP_GEMM_EPILOGUE_COLS ? n - j0 : MP_GEMM_EPILOGUE_COLS;
            memset(tile, 0, sizeof tile);
            mp_gemm_epilogue_scalar(ep, tile, MP_GEMM_EPILOGUE_COLS, i0, j0, rows, cols, st, zeros);
        }
}

/* op(A)'s row sums added to out without a GEMM (no products to run: k == 0 or alpha == 0). */
static void row_sums_apart(const mp_gemm_kernel *kr, float *out, const void *a, mp_dtype at, size_t lda, int ta,
                           size_t m, size_t k) {
    float s[64];
    for (size_t i0 = 0; i0 < m; i0 += 64) {
        const size_t rows = m - i0 < 64 ? m - i0 : 64;
        memset(s, 0, sizeof s);
        kr->row_sums(s, a, at, lda, ta, i0, rows, 0, k);
        for (size_t r = 0; r < rows; r++) out[i0 + r] += s[r];
    }
}

mp_status mp_gemm(int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha, const void *a, mp_dtype at,
                  size_t lda, const void *b, mp_dtype bt, size_t ldb, float beta, void *c, mp_dtype ct, size_t ldc,
                  mp_convert_stats *st) {
    return mp_gemm_in(mp_kernels_current(), trans_a, trans_b, m, n, k, alpha, a, at, lda, b, bt, ldb, beta, c, ct, ldc,
                      st);
}

mp_status mp_gemm_in(const mp_kernels *kc, int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha,
                     const void *a, mp_dtype at, size_t lda, const void *b, mp_dtype bt, size_t ldb, float beta,
                     void *c, mp_dtype ct, size_t ldc, mp_convert_stats *st) {
    const mp_gemm_epilogue ep = {.round_to = MP_F32, .stats = st};
    return mp_gemm_run(kc, trans_a, trans_b, m, n, k, alpha, a, at, lda, b, bt, ldb, beta, c, ct, ldc, &ep);
}

mp_status mp_gemm_ex(int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha, const void *a, mp_dtype at,
                     size_t lda, const void *b, mp_dtype bt, size_t ldb, float beta, void *c, mp_dtype ct, size_t ldc,
                     const mp_gemm_epilogue *epi) {
    return mp_gemm_run(mp_kernels_current(), trans_a, trans_b, m, n, k, alpha, a, at, lda, b, bt, ldb, beta, c, ct, ldc,
                       epi);
}

/* mp_gemm_run; pb: B packed before (one thread; NULL: B packed here) */
static mp_status gemm_run(const mp_kernels *kc, int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha,
                          const void *a, mp_dtype at, size_t lda, const void *b, mp_dtype bt, size_t ldb, float beta,
                          void *c, mp_dtype ct, size_t ldc, const mp_gemm_epilogue *epi, const mp_gemm_packed_b *pb) {
    const mp_gemm_kernel *kr = at == MP_BF16 && bt == MP_BF16 ? kc->gemm_bf16 : kc->gemm;
    mp_status s = check_args("mp_gemm", trans_a, trans_b, m, n, k, a, at, lda, b, bt, ldb, c, ct, ldc);
    if (s != MP_OK) return s;
    if (kr->esize == 2 && (at != MP_BF16 || bt != MP_BF16))
        return mp_error(MP_EINVAL, "mp_gemm: the %s kernel takes bf16 inputs only", kr->name);
    const mp_gemm_epilogue none = {.round_to = MP_F32};
    if (!epi) epi = &none;
    if (epi->round_to != MP_F32 && ((epi->round_to != MP_F16 && epi->round_to != MP_BF16) || ct != MP_F32))
        return mp_error(MP_EINVAL, "mp_gemm: round_to must be fp16 or bf16, with an fp32 C");
    if ((unsigned)epi->post > MP_POST_ADD) return mp_error(MP_EINVAL, "mp_gemm: unknown post step %d", (int)epi->post);
    if (epi->post != MP_POST_NONE && epi->round_to != MP_F32)
        return mp_error(MP_EINVAL, "mp_gemm: a post step needs C without round_to");
    const int reads_x =
        epi->post == MP_POST_GELU_GRAD || epi->post == MP_POST_GELU_ERF_GRAD || epi->post == MP_POST_ADD;
    if (m && n && reads_x && !epi->post_x) return mp_error(MP_EINVAL, "mp_gemm: the post step reads x: NULL");
    if (m && k && epi->a_row_sums && !a) return mp_error(MP_EINVAL, "mp_gemm: a_row_sums of a NULL A");
    if (m == 0 || n == 0) { /* no GEMM; A's rows are summed all the same */
        if (epi->a_row_sums) row_sums_apart(kr, epi->a_row_sums, a, at, lda, trans_a, m, k);
        return MP_OK;
    }
    const int stream = ct != MP_F32 && (double)m * (double)n * 2.0 >= (double)MP_STREAM_MIN_BYTES;
    const mp_gemm_ep ep = {alpha,       beta,          c,  ct,    ldc, epi->bias, epi->round_to, epi->post,
                           epi->post_x, epi->post_out, kc, stream};
    const int products = k != 0 && alpha != 0.0f, nt = products ? gemm_threads(m, n, k) : 1;
    mp_convert_stats part[MP_MAX_THREADS][2];
    uint64_t zpart[MP_MAX_THREADS];
    memset(part, 0, (size_t)nt * sizeof part[0]); /* the threads' shares: only those that run */
    memset(zpart, 0, (size_t)nt * sizeof zpart[0]);
    const int count = epi->stats || epi->post_stats;
    if (!products) {
        epilogue_zero(&ep, m, n, count ? part[0] : NULL, epi->zeros ? zpart : NULL);
        if (epi->a_row_sums) row_sums_apart(kr, epi->a_row_sums, a, at, lda, trans_a, m, k);
    } else {
        const int trivial = ct == MP_F32 && !epi->bias && epi->round_to == MP_F32 && !count && !epi->post;
        s = gemm_blocked(kr, trans_a, trans_b, m, n, k, a, at, lda, b, bt, ldb, &ep, epi->a_row_sums, trivial, nt, pb,
                         count ? part : NULL, epi->zeros ? zpart : NULL);
    }
    for (int t = 0; t < nt; t++) {
        if (epi->stats) mp_convert_stats_add(epi->stats, &part[t][0]);
        if (epi->post_stats) mp_convert_stats_add(epi->post_stats, &part[t][1]);
        if (epi->zeros) *epi->zeros += zpart[t];
    }
    return s;
}

mp_status mp_gemm_run(const mp_kernels *kc, int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha,
                      const void *a, mp_dtype at, size_t lda, const void *b, mp_dtype bt, size_t ldb, float beta,
                      void *c, mp_dtype ct, size_t ldc, const mp_gemm_epilogue *epi) {
    return gemm_run(kc, trans_a, trans_b, m, n, k, alpha, a, at, lda, b, bt, ldb, beta, c, ct, ldc, epi, NULL);
}

/* ---- B packed once (internal.h) ---- */

size_t mp_gemm_packed_b_bytes(const mp_gemm_kernel *kr, size_t k, size_t n) {
    if (!k || !n) return 0;
    gemm_plan g = {.kr = kr, .k = k};
    k_blocks(&g);
    return (n + g.NR - 1) / g.NR * g.NR * g.K2 * g.es;
}

void mp_gemm_pack_b(const mp_gemm_kernel *kr, int trans_b, size_t k, size_t n, const void *b, mp_dtype bt, size_t ldb,
                    void *data, mp_gemm_packed_b *pb) {
    gemm_plan g = {.kr = kr, .tb = trans_b, .n = n, .k = k, .ldb = ldb, .b = b, .bt = bt, .bpack = data};
    if (k && n) k_blocks(&g);
    *pb = (mp_gemm_packed_b){kr, trans_b, bt, k, n, g.K2, ldb, b, data};
    if (k && n) pack_b_block(&g, 0, n); /* one column block, by the calling thread (no team) */
}

mp_status mp_gemm_in_packed(const mp_kernels *kc, int trans_a, size_t m, size_t n, size_t k, float alpha, const void *a,
                            mp_dtype at, size_t lda, const mp_gemm_packed_b *pb, float beta, void *c, mp_dtype ct,
                            size_t ldc, mp_convert_stats *st) {
    const mp_gemm_epilogue ep = {.round_to = MP_F32, .stats = st};
    const mp_gemm_kernel *kr = at == MP_BF16 && pb->bt == MP_BF16 ? kc->gemm_bf16 : kc->gemm;
    /* the packed panels hold op(B)'s first n columns and k: all of it, or k's last block a whole number of
     * packed slices (its depth then reads no row past k) */
    const size_t last = k ? k - (k - 1) / kr->kc * kr->kc : 0;
    const int fits = kr == pb->kr && n <= pb->n && k <= pb->k && (k == pb->k || last % (size_t)kr->kpack == 0);
    return gemm_run(kc, trans_a, pb->trans_b, m, n, k, alpha, a, at, lda, pb->b, pb->bt, pb->ldb, beta, c, ct, ldc, &ep,
                    fits ? pb : NULL);
}
