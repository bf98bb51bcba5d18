/* attention.c - causal multi-head self-attention over a GPT block's q, k
 * and v (gpt.h states its numerics), as a forward/backward pair
 * (internal.h's mp_attention). One fused kernel per (sequence, head) and
 * block of MP_ATTN_RB query rows: the block's scores in fp32 and its
 * probabilities in ct stay in the thread's scratch (L1/L2), never in memory,
 * only the causal part (columns up to the block's last row) is computed;
 * each row keeps its softmax's max and normalizer (sm), from which the
 * backward recomputes the same probabilities instead of reading them. */
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "internal.h"

#define RB MP_ATTN_RB

/* The attention with its kernels and the size of a stored value. */
typedef struct {
    const mp_attention *a;
    const mp_kernels *kc;
    size_t es, hs, C3;
} attn_job;

/* The head's K and V packed once as the GEMMs' B (mp_gemm_pack_b), in each form they are read: */
enum { PK_KT, PK_V, PK_VT, PK_K, PK_FORMS }; /* K^T (the scores), V (P V), V^T (dp), K (dq) */

/* One thread's scratch: */
typedef struct attn_scratch {
    float *S;              /* (RB, T) fp32: scores, then the probabilities' gradient */
    float *prow;           /* (T,) fp32: a row of probabilities */
    float *dk, *dv;        /* (T, hs) fp32: the sums of dk and dv over the row blocks */
    uint8_t *P, *dS;       /* (RB, T) ct: a block's probabilities, and their gradient */
    uint8_t *pk[PK_FORMS]; /* pk_bytes each, 64-byte aligned */
} attn_scratch;

/* The bytes a form's panels may take, for every GEMM kernel (at most 32 columns a panel and 32 k a packed
 * slice, blocks of k of 512 or more, 4 bytes a value): each form is T x hs or hs x T. */
static size_t pk_bytes(size_t T, size_t hs) {
    const size_t big = T > hs ? T : hs, small = T > hs ? hs : T;
    const size_t a = (big + 31) / 32 * 32 * (small + 32) * 4,
                 b = (small + 31) / 32 * 32 * (big + 32 * (big / 512 + 1)) * 4;
    return ((a > b ? a : b) + 63) / 64 * 64;
}

size_t mp_attention_scratch_floats(size_t T, size_t hs, size_t es) {
    return (RB * T + T + 2 * T * hs + (2 * RB * T * es + 3) / 4 + 16 + PK_FORMS * pk_bytes(T, hs) / 4 + 15) / 16 * 16;
}

static attn_scratch scratch_of(const attn_job *j, int t) {
    const size_t T = j->a->T_max, hs = j->hs;
    float *base = j->a->scratch + (size_t)t * j->a->stride;
    attn_scratch s;
    s.S = base, s.prow = s.S + RB * T, s.dk = s.prow + T, s.dv = s.dk + T * hs;
    s.P = (uint8_t *)(s.dv + T * hs), s.dS = s.P + RB * T * j->es;
    uint8_t *pk = (uint8_t *)(((uintptr_t)(s.dS + RB * T * j->es) + 63) & ~(uintptr_t)63);
    for (int f = 0; f < PK_FORMS; f++) s.pk[f] = pk + (size_t)f * pk_bytes(T, hs);
    return s;
}

/* Form f of the head's K or V (at b, row stride C3) packed into s->pk[f] for the kernel the GEMMs run
 * (trans_b: op(B) is hs x T, else T x hs); where it would not fit, *pb names b alone (the GEMMs then
 * pack it themselves). */
static void pack_form(const attn_job *j, const attn_scratch *s, int f, int trans_b, const uint8_t *b,
                      mp_gemm_packed_b *pb) {
    const mp_dtype ct = j->a->ct;
    const mp_gemm_kernel *kr = ct == MP_BF16 ? j->kc->gemm_bf16 : j->kc->gemm;
    const size_t T = j->a->T, k = trans_b ? j->hs : T, n = trans_b ? T : j->hs;
    if (mp_gemm_packed_b_bytes(kr, k, n) <= pk_bytes(j->a->T_max, j->hs))
        mp_gemm_pack_b(kr, trans_b, k, n, b, ct, j->C3, s->pk[f], pb);
    else *pb = (mp_gemm_packed_b){NULL, trans_b, ct, k, n, 0, j->C3, b, NULL};
}

static uint8_t *at(const attn_job *j, const void *p, size_t i) { return (uint8_t *)p + i * j->es; }

/* Rows [0, rows) of a block's probabilities in ct (row stride i1): row r is
 * query i0 + r, its causal part (n = i0 + r + 1 values) from the fp32 values
 * in S (row stride i1), zeros after it; counted into st (NULL: not counted). */
static void store_rows(const attn_job *j, uint8_t *P, const float *S, size_t i0, size_t rows, size_t i1,
                       mp_convert_stats *st) {
    const mp_dtype ct = j->a->ct;
    const mp_convert_kernels *k = j->kc->convert;
    for (size_t r = 0; r < rows; r++) {
        const size_t n = i0 + r + 1;
        uint8_t *pr = P + r * i1 * j->es;
        if (ct == MP_F32) {
            memcpy(pr, S + r * i1, n * 4);
            if (st) mp_stats_f32(j->kc, st, S + r * i1, n);
        } else {
            (ct == MP_F16 ? k->f32_to_f16 : k->f32_to_bf16)((uint16_t *)pr, S + r * i1, n, st, 0);
        }
        memset(pr + n * j->es, 0, (i1 - n) * j->es);
    }
}

/* The scores of query rows [i0, i1) against keys [0, i1) (kt: K^T packed), in fp32 (S, row
 * stride i1), as stored in acc. */
static mp_status scores(const attn_job *j, const uint8_t *q, const mp_gemm_packed_b *kt, size_t i0, size_t i1,
                        float *S) {
    const mp_attention *a = j->a;
    const size_t rows = i1 - i0;
    const mp_status s = mp_gemm_in_packed(j->kc, 0, rows, i1, j->hs, a->scale, q + i0 * j->C3 * j->es, a->ct, j->C3, kt,
                                          0.0f, S, MP_F32, i1, NULL);
    for (size_t r = 0; a->acc != MP_F32 && r < rows; r++)
        for (size_t c = 0; c <= i0 + r; c++) S[r * i1 + c] = mp_round_to(a->acc, S[r * i1 + c]);
    return s;
}

/* Forward of one (sequence, head): y, and the rows' softmax statistics.
 * st[0] counts the probabilities where they are rounded for P V, st[1] y
 * (NULL: no counts). */
static mp_status forward_one(const attn_job *j, size_t b, size_t hh, const attn_scratch *s, mp_convert_stats *st) {
    const mp_attention *a = j->a;
    const mp_dtype ct = a->ct;
    const size_t T = a->T, C = a->C, hs = j->hs, C3 = j->C3;
    const uint8_t *q = at(j, a->qkv, b * T * C3 + hh * hs), *k = q + C * j->es, *v = q + 2 * C * j->es;
    uint8_t *y = at(j, a->y, b * T * C + hh * hs);
    float *sm = a->sm + (b * a->H + hh) * a->T_max * 2;
    mp_gemm_packed_b kt, vp;
    pack_form(j, s, PK_KT, 1, k, &kt);
    pack_form(j, s, PK_V, 0, v, &vp);
    for (size_t i0 = 0; i0 < T; i0 += RB) {
        const size_t i1 = T - i0 < RB ? T : i0 + RB, rows = i1 - i0;
        mp_status e = scores(j, q, &kt, i0, i1, s->S);
        if (e != MP_OK) return e;
        for (size_t r = 0; r < rows; r++)
            mp_softmax_row_keep(j->kc, s->S + r * i1, i0 + r + 1, a->acc, sm + 2 * (i0 + r));
        store_rows(j, s->P, s->S, i0, rows, i1, st ? &st[0] : NULL);
        e = mp_gemm_in_packed(j->kc, 0, rows, hs, i1, 1.0f, s->P, ct, i1, &vp, 0.0f, y + i0 * C * j->es, ct, C,
                              st ? &st[1] : NULL);
        if (e != MP_OK) return e;
    }
    return MP_OK;
}

/* The gradient of a block's scores from that of its probabilities (in
 * s->S, as dp = dy v^T): ds = p (dp - sum(dp p)), p recomputed in s->P. */
static void softmax_backward_rows(const attn_job *j, const attn_scratch *s, size_t i0, size_t rows, size_t i1) {
    const mp_dtype acc = j->a->acc;
    for (size_t r = 0; r < rows; r++) {
        const size_t n = i0 + r + 1;
        float *d = s->S + r * i1;
        mp_to_f32(j->kc, s->prow, s->P + r * i1 * j->es, j->a->ct, n);
        for (size_t c = 0; acc != MP_F32 && c < n; c++) d[c] = mp_round_to(acc, d[c]); /* dp as stored */
        mp_softmax_backward_row(j->kc, d, s->prow, n, 0, acc);
    }
}

/* dk and dv, summed in fp32 in the scratch, rounded into their rows of dqkv (counted into st): rows of a
 * head apart by the other heads' (their lines not yet in cache: each would be read before it is
 * written), so a half format's rows, where they are whole 64-byte lines, are stored non-temporally and
 * fenced once here (the backward alone 1.08x on one core of the AMX Xeon). */
static void finish_dkdv(const attn_job *j, uint8_t *dk, uint8_t *dv, const attn_scratch *s, mp_convert_stats *st) {
    const mp_attention *a = j->a;
    const size_t T = a->T, hs = j->hs, C3 = j->C3, es = j->es;
    if (a->ct != MP_F16 && a->ct != MP_BF16) {
        for (size_t i = 0; i < T; i++) {
            mp_from_f32(j->kc, dk + i * C3 * es, a->ct, s->dk + i * hs, hs, st);
            mp_from_f32(j->kc, dv + i * C3 * es, a->ct, s->dv + i * hs, hs, st);
        }
        return;
    }
    void (*f)(uint16_t *, const float *, size_t, mp_convert_stats *, int) =
        a->ct == MP_F16 ? j->kc->convert->f32_to_f16 : j->kc->convert->f32_to_bf16;
    const int stream = hs * es % 64 == 0; /* rows of whole lines (no line shared with another head's thread) */
    for (size_t i = 0; i < T; i++) {
        f((uint16_t *)(dk + i * C3 * es), s->dk + i * hs, hs, st, stream);
        f((uint16_t *)(dv + i * C3 * es), s->dv + i * hs, hs, st, stream);
    }
    if (stream) mp_store_fence();
}

/* Backward of one (sequence, head): dq, dk, dv into dqkv. Per block of query
 * rows: the probabilities recomputed from the scores and the kept
 * statistics (the forward's bits, not counted again), dp = dy v^T in fp32,
 * ds = p (dp - sum(dp p)) rounded to ct (counted into st[0]), dq = scale ds k
 * (counted into st[1]); dv += p^T dy and dk += scale ds^T q summed in fp32
 * over the blocks, in order, and rounded once at the end (st[1]). */
static mp_status backward_one(const attn_job *j, size_t b, size_t hh, const attn_scratch *s, mp_convert_stats *st) {
    const mp_attention *a = j->a;
    const mp_dtype ct = a->ct;
    const size_t es = j->es, T = a->T, C = a->C, hs = j->hs, C3 = j->C3;
    const uint8_t *q = at(j, a->qkv, b * T * C3 + hh * hs), *k = q + C * es, *v = q + 2 * C * es;
    const uint8_t *dy = at(j, a->dy, b * T * C + hh * hs);
    uint8_t *dq = at(j, a->dqkv, b * T * C3 + hh * hs), *dk = dq + C * es, *dv = dq + 2 * C * es;
    const float *sm = a->sm + (b * a->H + hh) * a->T_max * 2;
    const mp_kernels *kc = j->kc;
    memset(s->dk, 0, T * hs * sizeof(float)), memset(s->dv, 0, T * hs * sizeof(float));
    mp_gemm_packed_b kt, vt, kp;
    pack_form(j, s, PK_KT, 1, k, &kt);
    pack_form(j, s, PK_VT, 1, v, &vt);
    pack_form(j, s, PK_K, 0, k, &kp);
    mp_status e = MP_OK;
    for (size_t i0 = 0; i0 < T && e == MP_OK; i0 += RB) {
        const size_t i1 = T - i0 < RB ? T : i0 + RB, rows = i1 - i0;
        if ((e = scores(j, q, &kt, i0, i1, s->S)) != MP_OK) break;
        for (size_t r = 0; r < rows; r++)
            mp_softmax_row_again(kc, s->S + r * i1, i0 + r + 1, a->acc, sm + 2 * (i0 + r));
        store_rows(j, s->P, s->S, i0, rows, i1, NULL);
        /* dv[0, i1) += p^T dy */
        e = mp_gemm_in(kc, 1, 0, i1, hs, rows, 1.0f, s->P, ct, i1, dy + i0 * C * es, ct, C, 1.0f, s->dv, MP_F32, hs,
                       NULL);
        if (e == MP_OK)
            e = mp_gemm_in_packed(kc, 0, rows, i1, hs, 1.0f, dy + i0 * C * es, ct, C, &vt, 0.0f, s->S, MP_F32, i1,
                                  NULL);
        if (e != MP_OK) break;
        softmax_backward_rows(j, s, i0, rows, i1);
        store_rows(j, s->dS, s->S, i0, rows, i1, &st[0]);
        e = mp_gemm_in_packed(kc, 0, rows, hs, i1, a->scale, s->dS, ct, i1, &kp, 0.0f, dq + i0 * C3 * es, ct, C3,
                              &st[1]);
        /* dk[0, i1) += scale ds^T q */
        if (e == MP_OK)
            e = mp_gemm_in(kc, 1, 0, i1, hs, rows, a->scale, s->dS, ct, i1, q + i0 * C3 * es, ct, C3, 1.0f, s->dk,
                           MP_F32, hs, NULL);
    }
    if (e == MP_OK) finish_dkdv(j, dk, dv, s, &st[1]);
    return e;
}

/* Runs the forward (backward != 0: the backward) of every (sequence, head)
 * on a->threads threads; counts into s0 (probabilities or their gradient)
 * and s1 (y or dqkv), either may be NULL (the forward then counts nothing). */
static mp_status run(const mp_kernels *kc, const mp_attention *a, int backward, mp_convert_stats *s0,
                     mp_convert_stats *s1) {
    const attn_job j = {a, kc, mp_format(a->ct)->size, a->C / a->H, 3 * a->C};
    const size_t BH = a->B * a->H;
    const int nt = a->threads;
    mp_convert_stats part[MP_MAX_THREADS][2];
    memset(part, 0, sizeof part);
    const int count = s0 != NULL;
    int err = MP_OK;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static)
#endif
    for (size_t bh = 0; bh < BH; bh++) {
#ifdef _OPENMP
        const int t = omp_get_thread_num();
#else
        const int t = 0;
#endif
        const attn_scratch s = scratch_of(&j, t);
        const size_t b = bh / a->H, hh = bh % a->H;
        const mp_status e =
            backward ? backward_one(&j, b, hh, &s, part[t]) : forward_one(&j, b, hh, &s, count ? part[t] : NULL);
        if (e != MP_OK) {
#ifdef _OPENMP
#pragma omp atomic write
#endif
            err = (int)e;
        }
    }
    if (err != MP_OK) return mp_error((mp_status)err, "gpt: attention: out of memory");
    for (int t = 0; t < nt; t++) {
        if (s0) mp_convert_stats_add(s0, &part[t][0]);
        if (s1) mp_convert_stats_add(s1, &part[t][1]);
    }
    return MP_OK;
}

mp_status mp_attention_forward(const mp_kernels *kc, const mp_attention *a, mp_convert_stats *probs,
                               mp_convert_stats *y) {
    return run(kc, a, 0, probs, y);
}

mp_status mp_attention_backward(const mp_kernels *kc, const mp_attention *a, mp_convert_stats *dscores,
                                mp_convert_stats *dqkv) {
    return run(kc, a, 1, dscores, dqkv);
}
