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
static void store_row(void *c, mp_dtype ct, size_t ldc, size_t i, const float *row, size_t n, mp_convert_stats *st) {
    mp_convert((uint8_t *)c + i * ldc * mp_format(ct)->size, ct, row, MP_F32, n, st);
}

mp_status mp_gemm_ref(int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha, const void *a, mp_dtype at,
                      size_t lda, const void *b, mp_dtype bt, size_t ldb, float beta, void *c, mp_dtype ct, size_t ldc,
                      mp_convert_stats *st) {
    mp_status s = check_args("mp_gemm_ref", trans_a, trans_b, m, n, k, a, at, lda, b, bt, ldb, c, ct, ldc);
    if (s != MP_OK || m == 0 || n == 0) return s;
    float *row = malloc(n * sizeof *row);
    if (!row) return mp_error(MP_ENOMEM, "mp_gemm_ref: out of memory");
    for (size_t i = 0; i < m; i++) {
        for (size_t j = 0; j < n; j++) {
            float acc = 0.0f;
            if (alpha != 0.0f)
                for (size_t p = 0; p < k; p++)
                    acc = fmaf(load_f32(a, at, trans_a ? p * lda + i : i * lda + p),
                               load_f32(b, bt, trans_b ? j * ldb + p : p * ldb + j), acc);
            row[j] = apply_ab(acc, alpha, beta, beta == 0.0f ? 0.0f : load_f32(c, ct, i * ldc + j));
        }
        store_row(c, ct, ldc, i, row, n, st);
    }
    free(row);
    return MP_OK;
}

/* ---- packing to fp32 (any input format), shared by the fp32 kernels ---- */

/* Converts `len` values at stride 1 starting at element `off` of p into out. */
static void run_f32(float *out, const void *p, mp_dtype t, size_t off, size_t len) {
    mp_convert(out, MP_F32, (const uint8_t *)p + off * mp_format(t)->size, t, len, NULL);
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

const mp_gemm_kernel mp_gemm_scalar = {"scalar", SCALAR_MR, SCALAR_NR, 1, 256, 128, 2048, 4,
                                       pack_a_scalar, pack_b_scalar, micro_scalar};

/* ---- the blocked driver ---- */

static const mp_gemm_kernel *pick_kernel(mp_dtype at, mp_dtype bt) {
#ifdef MP_X86
    const mp_isa isa = mp_cpu_isa();
    if (isa >= MP_ISA_AVX512_BF16 && at == MP_BF16 && bt == MP_BF16) return &mp_gemm_avx512bf16;
    if (isa >= MP_ISA_AVX512) return &mp_gemm_avx512;
#endif
    (void)at, (void)bt;
    return &mp_gemm_scalar;
}

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

/* Computes W = alpha * op(A) op(B) + beta * W for fp32 W (row stride ldw). */
static mp_status gemm_f32(const mp_gemm_kernel *kr, int ta, int tb, size_t m, size_t n, size_t k, float alpha,
                          const void *a, mp_dtype at, size_t lda, const void *b, mp_dtype bt, size_t ldb, float beta,
                          float *w, size_t ldw) {
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
    const size_t bsize = nc * kcp * kr->esize;
    void *bpack = pack_buffer(0, bsize);
    if (!bpack) return mp_error(MP_ENOMEM, "mp_gemm: out of memory for a packed B block");
    int oom = 0;
#ifdef _OPENMP
#pragma omp parallel num_threads(nt)
#endif
    {
        const size_t asize = mc * kdepth * kr->esize; /* mc is whole panels; kdepth bounds every kpad */
        void *apack = pack_buffer(1, asize);
        if (!apack) {
#ifdef _OPENMP
#pragma omp atomic write
#endif
            oom = 1;
        }
        float tile[32 * 64];
        for (size_t jc = 0; jc < n; jc += nc) {
            const size_t ncur = n - jc < nc ? n - jc : nc;
            const size_t npanels = (ncur + NR - 1) / NR;
            for (size_t pc = 0; pc < k; pc += kc_max) {
                const size_t kcur = k - pc < kc_max ? k - pc : kc_max;
                const size_t kpad = (kcur + KP - 1) / KP * KP;
                const float bet = pc == 0 ? beta : 1.0f;
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
                        kr->pack_a((uint8_t *)apack + ip * MR * kpad * kr->esize, a, at, lda, ta, ic + ip * MR, rows,
                                   pc, kcur);
                    }
                    for (size_t jp = 0; jp < npanels; jp++) {
                        const size_t j0 = jc + jp * NR, cols = n - j0 < NR ? n - j0 : NR;
                        const void *bp = (const uint8_t *)bpack + jp * NR * kpad * kr->esize;
                        for (size_t ip = 0; ip * MR < mcur; ip++) {
                            const size_t i0 = ic + ip * MR, rows = mcur - ip * MR < MR ? mcur - ip * MR : MR;
                            const void *ap = (const uint8_t *)apack + ip * MR * kpad * kr->esize;
                            float *cp = w + i0 * ldw + j0;
                            if (rows == MR && cols == NR) {
                                kr->micro(kpad, ap, bp, cp, ldw, alpha, bet);
                            } else { /* edge: full tile into scratch, then the same arithmetic */
                                kr->micro(kpad, ap, bp, tile, NR, 1.0f, 0.0f);
                                for (size_t i = 0; i < rows; i++)
                                    for (size_t j = 0; j < cols; j++)
                                        cp[i * ldw + j] = apply_ab(tile[i * NR + j], alpha, bet,
                                                                   bet == 0.0f ? 0.0f : cp[i * ldw + j]);
                            }
                        }
                    }
                }
            }
        }
    }
    return oom ? mp_error(MP_ENOMEM, "mp_gemm: out of memory for a packed A block") : MP_OK;
}

/* The epilogue for a half (or untouched) C: alpha/beta on the fp32 result and
 * the exact store with statistics, rows split across the threads. */
typedef struct {
    float *w;
    size_t n, ldc;
    float alpha, beta;
    void *c;
    mp_dtype ct;
    int direct;        /* fp32 C already holds alpha AB + beta C: only the bias and the counts */
    const float *bias; /* (n,) or NULL */
    mp_convert_stats *st;
    mp_convert_stats part[MP_MAX_THREADS];
} epilogue_job;

static void epilogue_share(void *ctx, size_t r0, size_t r1, int t) {
    epilogue_job *j = ctx;
    for (size_t i = r0; i < r1; i++) {
        float *row = j->direct ? (float *)j->c + i * j->ldc : j->w + i * j->n;
        if (!j->direct)
            for (size_t k = 0; k < j->n; k++)
                row[k] = apply_ab(row[k], j->alpha, j->beta, j->beta == 0.0f ? 0.0f : load_f32(j->c, j->ct, i * j->ldc + k));
        if (j->bias)
            for (size_t k = 0; k < j->n; k++) row[k] += j->bias[k];
        if (!j->direct || j->st) store_row(j->c, j->ct, j->ldc, i, row, j->n, j->st ? &j->part[t] : NULL);
    }
}

mp_status mp_gemm(int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha, const void *a, mp_dtype at,
                  size_t lda, const void *b, mp_dtype bt, size_t ldb, float beta, void *c, mp_dtype ct, size_t ldc,
                  mp_convert_stats *st) {
    return mp_gemm_bias(trans_a, trans_b, m, n, k, alpha, a, at, lda, b, bt, ldb, beta, c, ct, ldc, NULL, st);
}

mp_status mp_gemm_bias(int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha, const void *a,
                       mp_dtype at, size_t lda, const void *b, mp_dtype bt, size_t ldb, float beta, void *c,
                       mp_dtype ct, size_t ldc, const float *bias, mp_convert_stats *st) {
    mp_status s = check_args("mp_gemm", trans_a, trans_b, m, n, k, a, at, lda, b, bt, ldb, c, ct, ldc);
    if (s != MP_OK || m == 0 || n == 0) return s;
    const int direct = ct == MP_F32 && k > 0 && alpha != 0.0f;
    float *w = direct ? (float *)c : pack_buffer(2, m * n * sizeof *w);
    if (!w) return mp_error(MP_ENOMEM, "mp_gemm: out of memory for an fp32 result of %zu x %zu", m, n);
    if (k > 0 && alpha != 0.0f) {
        s = gemm_f32(pick_kernel(at, bt), trans_a, trans_b, m, n, k, direct ? alpha : 1.0f, a, at, lda, b, bt, ldb,
                     direct ? beta : 0.0f, w, direct ? ldc : n);
    } else {
        memset(w, 0, m * n * sizeof *w); /* no products: the accumulators are 0 */
    }
    if (s != MP_OK || (direct && !st && !bias)) return s;
    epilogue_job j = {w, n, ldc, alpha, beta, c, ct, direct, bias, st, {{0}}};
    const int shares = mp_parallel_for(m, m * n >= ((size_t)1 << 16) ? 2 : m + 1, 1, epilogue_share, &j);
    if (st)
        for (int t = 0; t < shares; t++) mp_convert_stats_add(st, &j.part[t]);
    return MP_OK;
}
