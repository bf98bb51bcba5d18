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
                     const void *src, mp_dtype t, size_t ld, int along, size_t w0, size_t valid, size_t p0,
                     size_t kc, size_t width) {
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

/* ---- portable kernel ---- */

enum { SCALAR_MR = 4, SCALAR_NR = 16 };

static void pack_a_scalar(void *dst, const void *a, mp_dtype t, size_t lda, int trans, size_t i0, size_t rows,
                          size_t p0, size_t kc) {
    pack_f32(dst, a, t, lda, trans, i0, rows, p0, kc, SCALAR_MR);
}

static void pack_b_scalar(void *dst, const void *b, mp_dtype t, size_t ldb, int trans, size_t p0, size_t kc,
                          size_t j0, size_t cols) {
    pack_f32(dst, b, t, ldb, !trans, j0, cols, p0, kc, SCALAR_NR);
}

static void micro_scalar(size_t kc, const void *ap, const void *bp, float *c, size_t ldc, float alpha, float beta) {
    const float *A = ap, *B = bp;
    float acc[SCALAR_MR][SCALAR_NR] = {{0}};
    for (size_t p = 0; p < kc; p++)
        for (int i = 0; i < SCALAR_MR; i++)
            for (int j = 0; j < SCALAR_NR; j++) acc[i][j] = fmaf(A[p * SCALAR_MR + i], B[p * SCALAR_NR + j], acc[i][j]);
    for (int i = 0; i < SCALAR_MR; i++)
        for (int j = 0; j < SCALAR_NR; j++)
            c[i * ldc + j] = apply_ab(acc[i][j], alpha, beta, beta == 0.0f ? 0.0f : c[i * ldc + j]);
}

const mp_gemm_kernel mp_gemm_scalar = {
    .name = "scalar", .mr = SCALAR_MR, .nr = SCALAR_NR, .kpack = 1, .kc = 512, .mc = 64, .nc = 2048, .esize = 4,
    .pack_a = pack_a_scalar, .pack_b = pack_b_scalar, .micro = micro_scalar, .epilogue = mp_gemm_epilogue_scalar,
    .zeros = mp_gemm_zeros_scalar,
};

/* ---- the blocked driver ---- */

/* Packing buffers live as long as the thread that uses them and only grow:
 * allocating megabytes per call would cost page faults every call. Aligned to
 * 2 MiB and marked for transparent huge pages (fewer TLB misses on panels).
 * A thread-specific key frees them when the thread exits. */
typedef struct {
    void *buf[3]; /* packed B, packed A, fp32 result for a half C */
    size_t cap[3];
} pack_buffers;

static pthread_key_t pack_key;
static pthread_once_t pack_once = PTHREAD_ONCE_INIT;

static void pack_free(void *v) {
    pack_buffers *b = v;
    for (int i = 0; i < 3; i++) free(b->buf[i]);
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

/* A strip of the last block's sums whose epilogue is pending: run in pieces
 * of `step` rows by the next strip's micro-kernels between their slices of
 * k (micro_work), the rest when the next strip is complete or the row block
 * ends. Rows are independent in the epilogue and the counts add, so the
 * pieces give the bits and counts of one call. */
typedef struct {
    const mp_gemm_kernel *kr;
    const mp_gemm_ep *e;
    float *tile; /* rows x NR sums */
    size_t i0, j0, rows, cols, done, step;
    mp_convert_stats *st;
    uint64_t *zeros;
} strip_work;

static void strip_piece(void *v) {
    strip_work *w = v;
    if (w->done >= w->rows) return;
    const size_t n = w->rows - w->done < w->step ? w->rows - w->done : w->step, nr = (size_t)w->kr->nr;
    w->kr->epilogue(w->e, w->tile + w->done * nr, nr, w->i0 + w->done, w->j0, n, w->cols, w->st, w->zeros);
    w->done += n;
}

static void strip_finish(strip_work *w) {
    w->step = w->rows;
    strip_piece(w);
}

/* C = alpha op(A) op(B) + beta C through the kernel, with the epilogue e at
 * the last block of k. Blocks before it go into W: C itself for an fp32 C
 * without round_to (holding alpha (sum) + beta C), else an fp32 workspace
 * (holding the plain sum). trivial: no epilogue at all, the micro-kernel
 * writes C directly at every block (and zpart[] counts the zeros of each
 * tile of the last block as it is written). Counts per thread into part[]
 * (C's and the post step's) and zpart[] (NULL: not counted). */
static mp_status gemm_blocked(const mp_gemm_kernel *kr, int ta, int tb, size_t m, size_t n, size_t k, const void *a,
                              mp_dtype at, size_t lda, const void *b, mp_dtype bt, size_t ldb, const mp_gemm_ep *ep,
                              int trivial, mp_convert_stats (*part)[2], uint64_t *zpart) {
    const size_t MR = (size_t)kr->mr, NR = (size_t)kr->nr, KP = (size_t)kr->kpack;
    const size_t nc = kr->nc < n ? kr->nc : (n + NR - 1) / NR * NR; /* kr->nc is a multiple of NR */
    const size_t kc_max = kr->kc;
    int nt = mp_get_threads();
    if (nt > MP_MAX_THREADS) nt = MP_MAX_THREADS;
    if ((double)m * (double)n * (double)k < 2e6) nt = 1; /* too small to share */
    /* Row blocks: whole MR-row panels, spread evenly over a multiple of the
     * threads; a block of A (rows x kc) should stay in L2, so shallow k allows
     * taller blocks than kr->mc, which is sized for the deepest kc. */
    const size_t panels = (m + MR - 1) / MR;
    const size_t kdepth = k < kc_max ? (k + KP - 1) / KP * KP : kc_max;
    size_t mc_rows = kr->mc * kc_max / kdepth;
    if (mc_rows < MR) mc_rows = MR;
    size_t nblocks = (panels * MR + mc_rows - 1) / mc_rows;
    nblocks = (nblocks + (size_t)nt - 1) / (size_t)nt * (size_t)nt;
    if (nblocks > panels) nblocks = panels;
    const size_t mc = (panels + nblocks - 1) / nblocks * MR; /* the tallest block */
    const size_t kcp = (kc_max + KP - 1) / KP * KP;
    void *bpack = pack_buffer(0, nc * kcp * kr->esize);
    if (!bpack) return mp_error(MP_ENOMEM, "mp_gemm: out of memory for a packed B block");
    /* where blocks before the last go */
    const int in_c = trivial || (ep->ct == MP_F32 && ep->round_to == MP_F32);
    float *w = in_c ? (float *)ep->c : NULL;
    const size_t ldw = in_c ? ep->ldc : n, cs = mp_format(ep->ct)->size;
    if (!in_c && k > kc_max && !(w = pack_buffer(2, m * n * sizeof *w)))
        return mp_error(MP_ENOMEM, "mp_gemm: out of memory for an fp32 result of %zu x %zu", m, n);
    int oom = 0;
#ifdef _OPENMP
#pragma omp parallel num_threads(nt)
#endif
    {
#ifdef _OPENMP
        const int t = omp_get_thread_num();
#else
        const int t = 0;
#endif
        const size_t asize = mc * kdepth * kr->esize; /* mc is whole panels; kdepth bounds every kpad */
        void *apack = pack_buffer(1, asize);
        if (!apack) {
#ifdef _OPENMP
#pragma omp atomic write
#endif
            oom = 1;
        }
        /* an edge tile, or a strip of the last block's tiles; with micro_work, two: one filled while the
         * other's epilogue is pending */
        float tiles[2][MP_GEMM_STRIP];
        float *tile = tiles[0];
        const size_t strip_rows = MP_GEMM_STRIP / NR;
        size_t srows = 0, s0 = 0;
        strip_work pend = {.kr = kr}; /* nothing pending: done == rows == 0 */
        mp_gemm_ep last = *ep;
        if (kr->begin) kr->begin();
        for (size_t jc = 0; jc < n; jc += nc) {
            const size_t ncur = n - jc < nc ? n - jc : nc;
            const size_t npanels = (ncur + NR - 1) / NR;
            for (size_t pc = 0; pc < k; pc += kc_max) {
                const size_t kcur = k - pc < kc_max ? k - pc : kc_max;
                const size_t kpad = (kcur + KP - 1) / KP * KP;
                const int final = !trivial && pc + kcur == k;
                /* op(A)'s rows along k are the packed layout already: the kernel reads them in place */
                const int direct = kr->micro_rows && !ta && kcur % KP == 0;
                const int zeros_in_c = trivial && zpart && pc + kcur == k; /* C's final values, counted as written */
                /* into W: alpha and beta at the first block when W is C, the plain sum otherwise */
                const float wa = in_c ? ep->alpha : 1.0f;
                const float wb = pc > 0 ? 1.0f : in_c ? ep->beta : 0.0f;
                last.part = !in_c && pc > 0 ? w : NULL, last.ldp = n;
                last.c_holds_part = in_c && pc > 0;
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
                for (size_t jp = 0; jp < npanels; jp++) {
                    const size_t j0 = jc + jp * NR, cols = n - j0 < NR ? n - j0 : NR;
                    kr->pack_b((uint8_t *)bpack + jp * NR * kpad * kr->esize, b, bt, ldb, tb, pc, kcur, j0, cols);
                }
                /* implicit barrier: B is packed */
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
                for (size_t ib = 0; ib < nblocks; ib++) {
                    if (!apack) continue;
                    const size_t ic = ib * panels / nblocks * MR;
                    const size_t iend = (ib + 1) * panels / nblocks * MR, mcur = (iend < m ? iend : m) - ic;
                    for (size_t ip = 0; ip * MR < mcur; ip++) {
                        const size_t rows = mcur - ip * MR < MR ? mcur - ip * MR : MR;
                        if (!(direct && rows == MR)) /* whole rows read in place need no copy */
                            kr->pack_a((uint8_t *)apack + ip * MR * kpad * kr->esize, a, at, lda, ta, ic + ip * MR,
                                       rows, pc, kcur);
                    }
                    for (size_t jp = 0; jp < npanels; jp++) {
                        const size_t j0 = jc + jp * NR, cols = n - j0 < NR ? n - j0 : NR;
                        const void *bp = (const uint8_t *)bpack + jp * NR * kpad * kr->esize;
                        for (size_t ip = 0; ip * MR < mcur; ip++) {
                            const size_t i0 = ic + ip * MR, rows = mcur - ip * MR < MR ? mcur - ip * MR : MR;
                            const void *ap = (const uint8_t *)apack + ip * MR * kpad * kr->esize;
                            const uint8_t *ar = (const uint8_t *)a + (i0 * lda + pc) * kr->esize;
#define MICRO(c_, ldc_, al_, be_)                                                                    \
    (direct && rows == MR ? kr->micro_rows(kpad, ar, lda, bp, c_, ldc_, al_, be_)                   \
                          : kr->micro(kpad, ap, bp, c_, ldc_, al_, be_))
                            if (final) {
                                /* C's lines arrive while the micro-kernel runs, for the epilogue right after
                                 * it; not for a tile kernel, whose loads need the line fill buffers and whose
                                 * epilogue runs a strip later (on the AMX Xeon the prefetches cost 10%) */
                                const uint8_t *c0 = (const uint8_t *)ep->c + (i0 * ep->ldc + j0) * cs;
                                for (size_t i = 0; i < rows && !kr->micro_work; i++) {
                                    for (size_t o = 0; o < cols * cs; o += 64)
                                        __builtin_prefetch(c0 + i * ep->ldc * cs + o, 1);
                                    __builtin_prefetch(c0 + i * ep->ldc * cs + cols * cs - 1, 1);
                                }
                                /* the tiles of consecutive row panels stack into one strip of
                                 * the column panel; the epilogue runs once per strip, or in
                                 * pieces during the next strip's micro-kernels */
                                if (kr->micro_work && !(direct && rows == MR))
                                    kr->micro_work(kpad, ap, bp, tile + srows * NR, NR, strip_piece, &pend);
                                else
                                    MICRO(tile + srows * NR, NR, 1.0f, 0.0f);
                                if (!srows) s0 = i0;
                                srows += rows;
                                if (rows < MR || (ip + 1) * MR >= mcur || srows + MR > strip_rows) {
                                    mp_convert_stats *st = part ? part[t] : NULL;
                                    uint64_t *z = zpart ? &zpart[t] : NULL;
                                    if (!kr->micro_work) {
                                        kr->epilogue(&last, tile, NR, s0, j0, srows, cols, st, z);
                                    } else { /* over the first half of the next strip's slices (as
                                              * many rows): 6-row pieces at k = 384 */
                                        strip_finish(&pend);
                                        const size_t half = ((srows + MR - 1) / MR * (kpad / KP) + 1) / 2;
                                        pend = (strip_work){kr, &last, tile, s0, j0, srows, cols, 0,
                                                            (srows + half - 1) / half, st, z};
                                        tile = tile == tiles[0] ? tiles[1] : tiles[0];
                                    }
                                    srows = 0;
                                }
                                continue;
                            }
                            float *cp = w + i0 * ldw + j0;
                            if (rows == MR && cols == NR) {
                                MICRO(cp, ldw, wa, wb);
                            } else { /* edge: full tile into scratch, then the same arithmetic */
                                MICRO(tile, NR, 1.0f, 0.0f);
                                for (size_t i = 0; i < rows; i++)
                                    for (size_t j = 0; j < cols; j++)
                                        cp[i * ldw + j] =
                                            apply_ab(tile[i * NR + j], wa, wb, wb == 0.0f ? 0.0f : cp[i * ldw + j]);
                            }
                            if (zeros_in_c) zpart[t] += kr->zeros(cp, ldw, rows, cols);
                        }
                    }
                    strip_finish(&pend);
                }
            }
        }
#undef MICRO
        if (kr->end) kr->end();
    }
    return oom ? mp_error(MP_ENOMEM, "mp_gemm: out of memory for a packed A block") : MP_OK;
}

/* No products (k == 0 or alpha == 0): the epilogue on sums of zero. */
static void epilogue_zero(const mp_gemm_ep *ep, size_t m, size_t n, mp_convert_stats st[2], uint64_t *zeros) {
    float tile[8 * 64];
    for (size_t i0 = 0; i0 < m; i0 += 8)
        for (size_t j0 = 0; j0 < n; j0 += 64) {
            const size_t rows = m - i0 < 8 ? m - i0 : 8, cols = n - j0 < 64 ? n - j0 : 64;
            memset(tile, 0, sizeof tile);
            mp_gemm_epilogue_scalar(ep, tile, 64, i0, j0, rows, cols, st, zeros);
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

mp_status mp_gemm_ex(int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha, const void *a,
                     mp_dtype at, size_t lda, const void *b, mp_dtype bt, size_t ldb, float beta, void *c,
                     mp_dtype ct, size_t ldc, const mp_gemm_epilogue *epi) {
    return mp_gemm_run(mp_kernels_current(), trans_a, trans_b, m, n, k, alpha, a, at, lda, b, bt, ldb, beta, c, ct,
                       ldc, epi);
}

mp_status mp_gemm_run(const mp_kernels *kc, int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha,
                      const void *a, mp_dtype at, size_t lda, const void *b, mp_dtype bt, size_t ldb, float beta,
                      void *c, mp_dtype ct, size_t ldc, const mp_gemm_epilogue *epi) {
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
    const int reads_x = epi->post == MP_POST_GELU_GRAD || epi->post == MP_POST_GELU_ERF_GRAD || epi->post == MP_POST_ADD;
    if (m && n && reads_x && !epi->post_x) return mp_error(MP_EINVAL, "mp_gemm: the post step reads x: NULL");
    if (m == 0 || n == 0) return MP_OK;
    const mp_gemm_ep ep = {alpha, beta, c, ct, ldc, epi->bias, epi->round_to, NULL, 0, 0, epi->post, epi->post_x,
                           epi->post_out, kc};
    mp_convert_stats part[MP_MAX_THREADS][2];
    uint64_t zpart[MP_MAX_THREADS];
    memset(part, 0, sizeof part);
    memset(zpart, 0, sizeof zpart);
    const int count = epi->stats || epi->post_stats;
    if (k == 0 || alpha == 0.0f) {
        epilogue_zero(&ep, m, n, count ? part[0] : NULL, epi->zeros ? zpart : NULL);
    } else {
        const int trivial = ct == MP_F32 && !epi->bias && epi->round_to == MP_F32 && !count && !epi->post;
        s = gemm_blocked(kr, trans_a, trans_b, m, n, k, a, at, lda, b, bt, ldb, &ep, trivial, count ? part : NULL,
                         epi->zeros ? zpart : NULL);
    }
    for (int t = 0; t < MP_MAX_THREADS; t++) {
        if (epi->stats) mp_convert_stats_add(epi->stats, &part[t][0]);
        if (epi->post_stats) mp_convert_stats_add(epi->post_stats, &part[t][1]);
    }
    if (epi->zeros)
        for (int t = 0; t < MP_MAX_THREADS; t++) *epi->zeros += zpart[t];
    return s;
}
