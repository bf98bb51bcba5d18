/* internal.h - helpers shared by mixprec's own sources; not installed. */
#ifndef MIXPREC_INTERNAL_H
#define MIXPREC_INTERNAL_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

#include "mixprec/mixprec.h"

/* The kernel context (mp_kernels, at the end): a public entry point reads it
 * once (mp_kernels_current) and passes it to everything under it. */
struct mp_kernels;

#if defined(__GNUC__)
#define MP_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define MP_PRINTF(a, b)
#endif

/* paths.c: a file a command reads or writes, by identity. An existing file
 * is its device and inode (links, hard links and "./" spellings are the same
 * file); a new one is its directory's real path and its name. */
typedef struct {
    const char *option; /* "--log" */
    const char *path;
    int exists, is_dir;
    dev_t dev;
    ino_t ino;
    char where[4096]; /* a new file's directory, as realpath gives it, then '/' and its name */
} mp_file_id;
void mp_file_identify(mp_file_id *f, const char *option, const char *path);
int mp_file_same(const mp_file_id *a, const mp_file_id *b);
/* Whether out's directory is d (an existing directory). */
int mp_file_inside(const mp_file_id *out, const mp_file_id *d);
/* Where output f can be written: an existing file must be a regular one (not
 * a directory, a device or a FIFO); its directory must exist and be writable
 * (pending: a directory the caller makes before writing, so not yet there).
 * MP_EIO + message naming the option and the path when not. */
mp_status mp_file_writable(const mp_file_id *f, const char *pending);

/* A file being read (input.c): every reader opens its files with
 * mp_input_open, which refuses anything but a regular file before it could
 * block (a FIFO, a device, a directory, a socket: MP_EIO, one line naming
 * `what` (the option, or NULL) and the path and what it is). mp_input_read
 * reads exactly n bytes (MP_EIO "changed while read" when the file ends
 * first); mp_input_check, after the last read, MP_EIO when the file's size or
 * modification time is no longer what it was at the open. */
typedef struct mp_input {
    int fd;
    uint64_t size, done, ino; /* at the open; bytes mp_input_read has read */
    int64_t mtime_s, mtime_ns;
    const char *what, *path;
} mp_input;
mp_status mp_input_open(mp_input *in, const char *what, const char *path);
mp_status mp_input_read(mp_input *in, void *buf, size_t n);
mp_status mp_input_check(const mp_input *in);
void mp_input_close(mp_input *in); /* twice is harmless */
/* The check a command makes on an input before it works, without opening it:
 * MP_EIO, the message as mp_input_open's, when path exists and is neither a
 * regular file nor (dir_ok) a directory; MP_OK otherwise (a missing file is
 * the reader's to report). */
mp_status mp_input_kind(const char *what, const char *path, int dir_ok);
/* Tests only (tests/test_text.c): called after each piece mp_input_read reads
 * and as mp_input_check starts (fd, the bytes mp_input_read has read so far),
 * to change the file under the reader (zlib's reads are not seen).
 * NULL in every program. */
extern void (*mp_input_test_hook)(int fd, uint64_t done);
/* A new file created exclusively for writing (O_CREAT | O_EXCL | O_NOFOLLOW:
 * never a link's target, never a file already there): its descriptor, or -1
 * with errno. */
int mp_create_excl(const char *path);
/* Whether this thread holds path's lock (mp_output_lock). */
int mp_output_held(const char *path);
/* While on (this thread), mp_write_file_atomic never replaces a file: a path
 * where one is already fails with MP_EIO ("a file is there already"). */
void mp_write_no_replace(int on);
/* Removes DIR's regular files named BASE INFIX PID or BASE INFIX PID.SUFFIX
 * (infix ".tmp.": a killed writer's temporary files) whose process is gone. */
void mp_remove_stale(const char *dir, const char *base, const char *infix);

/* Records a formatted message for mp_last_error() and returns `s`. */
mp_status mp_error(mp_status s, const char *fmt, ...) MP_PRINTF(2, 3);

/* splitmix64's finalizer (Stafford's Mix13): a bijection of 64-bit words. */
static inline uint64_t mp_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* splitmix64: the next word of the stream whose state is *s. */
static inline uint64_t mp_splitmix64(uint64_t *s) { return mp_mix64(*s += 0x9e3779b97f4a7c15ull); }

/* threads.c: MIXPREC_THREADS as a whole decimal number from 1 to
 * MP_MAX_THREADS; 0 when unset or empty, -1 when it is something else
 * (mp_cpu_env_check says so). */
int mp_threads_env(void);

/* threads.c: splits [0, n) into up to mp_get_threads() shares of whole `align`-element
 * blocks (one share when n < min_parallel) and runs fn(ctx, i0, i1, t) for
 * share t on its own thread. Returns the number of shares, at most
 * MP_MAX_THREADS, so callers can keep per-share results in an array. */
#define MP_MAX_THREADS 64
int mp_parallel_for(size_t n, size_t min_parallel, size_t align, void (*fn)(void *ctx, size_t i0, size_t i1, int t),
                    void *ctx);

/* x rounded to acc (nearest even) and widened back: one step of a naive
 * reduction in a half format (train.h's MP_REDUCE_HALF); MP_F32 leaves x.
 * The same values as mp_f32_to_f16/bf16 and back (tested), inline: NaN
 * stays NaN, overflow gives inf, fp16 subnormals round to multiples of 2^-24. */
static inline float mp_round_to(mp_dtype acc, float x) {
    uint32_t b;
    memcpy(&b, &x, 4);
    const uint32_t a = b & 0x7fffffffu;
    if (acc == MP_F32 || a >= 0x7f800000u) return x; /* and inf, NaN */
    if (acc == MP_BF16) {
        b = (b + 0x7fffu + ((b >> 16) & 1u)) & 0xffff0000u;
    } else if (a < 0x38800000u) { /* below 2^-14: fp16 subnormals, multiples of 2^-24 */
        float m;
        memcpy(&m, &a, 4);
        m = (m + 0.5f) - 0.5f; /* fp32's ulp at 0.5 is 2^-24: rounds to nearest even there */
        const uint32_t sign = b & 0x80000000u;
        memcpy(&b, &m, 4);
        b |= sign;
    } else {
        b = (b + 0xfffu + ((b >> 13) & 1u)) & 0xffffe000u;
        if ((b & 0x7fffffffu) > 0x477fe000u) b = (b & 0x80000000u) | 0x7f800000u; /* above 65504: inf */
    }
    memcpy(&x, &b, 4);
    return x;
}

/* A model's reductions round to fp32 or to its compute format ct: MP_EINVAL
 * (naming the model kind) for another acc. */
static inline mp_status mp_check_reductions(const char *kind, mp_dtype ct, mp_dtype acc) {
    if (acc == MP_F32 || acc == ct) return MP_OK;
    return mp_error(MP_EINVAL, "%s: reductions run in fp32 or in the compute format %s, not %s", kind,
                    mp_format(ct)->name, mp_format(acc)->name);
}

/* One row of ops.h's softmax in place (log_softmax when log != 0) with
 * reductions in acc; returns the row's log-sum-exp. The attention's rows use
 * it too. */
float mp_softmax_row(const struct mp_kernels *kc, float *r, size_t C, int log, mp_dtype acc);
/* mp_softmax_row (log = 0) keeping what mp_softmax_row_again needs to redo
 * it from the same scores: the row's max, and 1 / sum (acc fp32) or the sum
 * (a naive acc). mp_softmax_row_again gives the same bits (the attention's
 * backward recomputes its probabilities so). */
void mp_softmax_row_keep(const struct mp_kernels *kc, float *r, size_t C, mp_dtype acc, float keep[2]);
/* mp_layernorm_backward into a residual stream: out = res + dx, where dx is
 * rounded to t and counted into st_dx as mp_layernorm_backward stores it, but
 * not stored, and the sum is as mp_add's (counted into st_sum); every tensor
 * in t; out may be res. One pass instead of the two ops. */
mp_status mp_layernorm_backward_add(void *out, mp_dtype t, float *dw, float *db, const void *dy, const void *x,
                                    const float *mean, const float *rstd, const float *w, size_t B, size_t C,
                                    int accumulate, mp_dtype acc, const void *res, mp_convert_stats *st_dx,
                                    mp_convert_stats *st_sum);
void mp_softmax_row_again(const struct mp_kernels *kc, float *r, size_t C, mp_dtype acc, const float keep[2]);
/* One row of ops.h's softmax backward in place: g (dy in, dx out) from the
 * forward's output y, sums in acc. */
void mp_softmax_backward_row(const struct mp_kernels *kc, float *g, const float *y, size_t C, int log, mp_dtype acc);

/* CRC-32 of data, continuing from crc (start with 0); zlib's crc32. */
uint32_t mp_crc32(uint32_t crc, const void *data, size_t len);

/* Little-endian stores and loads for blobs and files. */
static inline void mp_put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void mp_put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint32_t mp_get_u32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static inline uint64_t mp_get_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static inline uint32_t mp_f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}
static inline float mp_bits_f32(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* mp_f32_to_bf16 and mp_bf16_to_f32 (format.h), inline for loops the
 * compiler vectorizes: integer bit arithmetic, the same under FTZ/DAZ. */
static inline uint16_t mp_bf16_round(float x) {
    const uint32_t u = mp_f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static inline float mp_bf16_widen(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    if ((u & 0x7fffffffu) > 0x7f800000u) u |= 0x400000u;
    return mp_bits_f32(u);
}

/* st->amax = max(st->amax, a) for the bits a of a finite magnitude, compared
 * on the bits (a magnitude's pattern is ordered as its value; no FPU compare,
 * which DAZ could change). */
static inline void mp_stats_amax(mp_convert_stats *st, uint32_t a) {
    if (a > mp_f32_bits(st->amax)) st->amax = mp_bits_f32(a);
}

/* Bulk conversion kernels of one CPU path. Each converts n elements and, when
 * st is not NULL, adds exact statistics. NULL entries fall back to scalar. */
typedef struct mp_convert_kernels {
    /* stream: the results may be stored non-temporally (where the path can and dst is aligned), unfenced:
     * the caller fences (mp_store_fence) before another thread reads them. The widenings decide for
     * themselves (MP_STREAM_MIN_BYTES of results) and fence. */
    void (*f32_to_f16)(uint16_t *dst, const float *src, size_t n, mp_convert_stats *st, int stream);
    void (*f16_to_f32)(float *dst, const uint16_t *src, size_t n, mp_convert_stats *st);
    void (*f32_to_bf16)(uint16_t *dst, const float *src, size_t n, mp_convert_stats *st, int stream);
    void (*bf16_to_f32)(float *dst, const uint16_t *src, size_t n, mp_convert_stats *st);
} mp_convert_kernels;

extern const mp_convert_kernels mp_convert_scalar;

/* Adds the counts of an fp32 -> fp32 store of x (subnormals and NaNs; convert.c),
 * through k's amax kernels. */
void mp_stats_f32(const struct mp_kernels *k, mp_convert_stats *st, const float *x, size_t n);

/* One thread's conversions through fp32 with k's kernels (convert.c): n
 * elements of src (type t) widened exactly into dst (no statistics), and n
 * fp32 elements narrowed into dst (type t) with statistics added to st (may
 * be NULL); for t = MP_F32, dst may be src. */
void mp_to_f32(const struct mp_kernels *k, float *dst, const void *src, mp_dtype t, size_t n);
void mp_from_f32(const struct mp_kernels *k, void *dst, mp_dtype t, const float *src, size_t n, mp_convert_stats *st);

/* mp_convert (convert.h) with k's kernels: what the library's own work calls. */
mp_status mp_convert_in(const struct mp_kernels *k, void *dst, mp_dtype dst_type, const void *src, mp_dtype src_type,
                        size_t n, mp_convert_stats *stats);

/* Writes what print(f, ctx) prints (an HTML page) to path atomically: into
 * memory first, made valid UTF-8 (a byte that starts no UTF-8 sequence, from
 * a path echoed in the page, becomes U+FFFD), then mp_write_file_atomic
 * (io.h). MP_ENOMEM, or mp_write_file_atomic's status. */
mp_status mp_print_file_atomic(const char *path, void (*print)(FILE *f, const void *ctx), const void *ctx);

/* Writes s to f with <, >, &, " and ' escaped for HTML text and quoted
 * attributes (report.c); NULL writes nothing. */
void mp_html_escape(FILE *f, const char *s);

/* precision.c: a precision mode applied to a training run's parts, in one
 * place. The model reads the mode when it is created (its compute format,
 * master weights and recipe: mp_run_model's create); mp_precision_apply,
 * called by mp_trainer_create once the model and the optimizer exist, sets
 * the rest and says what it decided, which the trainer reads: */
typedef struct mp_mode_applied {
    int scaled;       /* the mode scales the loss: scaler runs */
    mp_scaler scaler; /* as mp_precision_scaler configures it */
    mp_dtype reduce;  /* where the model's reductions round: MP_F32, or the compute format (+reductions=half) */
    mp_dtype norm;    /* where the gradient norm sums: the compute format only with half reductions and a clip
                         (the norm is measured either way) */
} mp_mode_applied;
/* The loss scaler's config in mode p: base (the run's --init-scale, ...)
 * made dynamic or static as the mode says, with fp16-static:S's scale. */
mp_scaler_config mp_precision_scaler(const mp_precision *p, const mp_scaler_config *base);
/* Applies p to the optimizer (the rounding of its compute copies, with
 * seed's stream when stochastic; its state format), to the model (where its
 * reductions round: ops->set_reductions) and to a loss scaler (initialised
 * from mp_precision_scaler(p, scaler) in a scaled mode), into *out. clip: the
 * trainer's (> 0: the norm is used). MP_EINVAL + message for half reductions
 * on a model without set_reductions, or what the optimizer, the scaler or
 * the model refuses. */
mp_status mp_precision_apply(const mp_precision *p, const mp_scaler_config *scaler, double clip, uint64_t seed,
                             mp_model model, mp_optim *opt, mp_mode_applied *out);

/* explore_page.c: the explorer page (mp_explore_write) of the values' log2
 * histogram (bins of 2^(HLO + b), b < HN) and their counts in each of the
 * formats at loss scales 2^0 .. 2^(K - 1), all computed by underflow.c. */
enum { MP_EXPLORE_K = 25, MP_EXPLORE_HLO = -150, MP_EXPLORE_HN = 170 };
extern const mp_dtype mp_explore_formats[4]; /* fp16, bf16, e5m2, e4m3 */
typedef struct mp_explore_page {
    const char *desc; /* what the values are, escaped into the page */
    uint64_t n;       /* the finite values */
    const uint64_t *bins;
    mp_scale_counts (*counts)[MP_EXPLORE_K]; /* [format][k] */
} mp_explore_page;
void mp_explore_print(FILE *f, const void *page); /* page: an mp_explore_page (mp_print_file_atomic's print) */

/* attention.c: causal multi-head self-attention over a GPT block's q, k and
 * v (gpt.h states its numerics), fused per (sequence, head) and block of
 * MP_ATTN_RB query rows; its results do not depend on the threads. */
#define MP_ATTN_RB 64
typedef struct mp_attention {
    size_t B, T, H, C; /* sequences, positions, heads, width (head size C / H) */
    size_t T_max;      /* positions per (sequence, head) in sm and the scratch: the model's context */
    mp_dtype ct, acc;  /* the stored format; where the reductions round (MP_F32 or ct) */
    float scale;       /* the scores' scale: 1 / sqrt(C / H) */
    const void *qkv;   /* (B T, 3C) ct: q, k, v */
    void *y;           /* forward: (B T, C) ct, the heads' outputs side by side */
    float *sm;         /* (B, H, T_max, 2): each row's softmax max and normalizer (forward writes, backward reads) */
    const void *dy;    /* backward: (B T, C) ct, y's gradient */
    void *dqkv;        /* backward: (B T, 3C) ct */
    float *scratch;    /* threads x stride floats (stride >= mp_attention_scratch_floats(T_max, C / H, ct's size)) */
    size_t stride;
    int threads; /* 1 .. MP_MAX_THREADS */
} mp_attention;
size_t mp_attention_scratch_floats(size_t T, size_t hs, size_t es);
/* y and sm; the probabilities, where they are rounded for P V, counted into
 * probs and y's stores into y (both NULL: nothing counted). MP_ENOMEM. */
mp_status mp_attention_forward(const struct mp_kernels *kc, const mp_attention *a, mp_convert_stats *probs,
                               mp_convert_stats *y);
/* dq, dk and dv into dqkv from dy, the probabilities recomputed from sm (not
 * counted again); the scores' gradient counted into dscores, dqkv's stores
 * into dqkv (either may be NULL). MP_ENOMEM. */
mp_status mp_attention_backward(const struct mp_kernels *kc, const mp_attention *a, mp_convert_stats *dscores,
                                mp_convert_stats *dqkv);

/* run_spec.c: the spec's mode with its switches into *p (may be NULL),
 * after its options, models, data and loss scaler are checked as they will
 * be used; what mp_run_check checks besides the files. */
struct mp_run_spec;
mp_status mp_run_resolve(const struct mp_run_spec *s, mp_precision *p);

/* run.c: a monotonic clock, in seconds (runs and comparisons time themselves). */
double mp_now(void);

/* mp_run_check_files, where outputs inside the directory pending (exactly as
 * the paths spell it; NULL: none) are not asked to have an existing
 * directory: the caller makes it before the run (compare's DIR). */
mp_status mp_run_check_files_in(const struct mp_run_spec *s, const char *pending);

/* The option of s that reads path ("--init", "--resume", "--data": the file
 * by identity, or a file inside a corpus directory), or NULL: none does, or
 * out of memory. */
const char *mp_run_reader(const struct mp_run_spec *s, const char *path);

/* text with each byte that starts no UTF-8 sequence (RFC 3629: no overlong
 * forms, surrogates or code points past U+10FFFF) replaced by replacement,
 * in a new string the caller frees; NULL when out of memory (json.c). */
char *mp_utf8_repair(const char *text, const char *replacement);
/* A cJSON tree as text (indented when formatted), valid UTF-8: a string's
 * bytes that are not become \ufffd. The caller frees it with free(); NULL
 * when out of memory. Every JSON file the library writes is printed so. */
struct cJSON;
char *mp_json_print(const struct cJSON *j, int formatted);

/* Fused unscale + inf/NaN check kernels of one CPU path: x[i] *= inv for
 * i in [0, n); returns nonzero if any x[i] (before scaling) is inf or NaN.
 * check32 and check16 only read (inv_scale 1): nonzero if any of the n codes
 * has every bit of expmask set (fp32: 0x7f800000; fp16 0x7c00, bf16 0x7f80). */
typedef struct mp_unscale_kernels {
    int (*f32)(float *x, size_t n, float inv);
    int (*f16)(uint16_t *x, size_t n, float inv);
    int (*bf16)(uint16_t *x, size_t n, float inv);
    int (*check32)(const uint32_t *x, size_t n);
    int (*check16)(const uint16_t *x, size_t n, uint16_t expmask);
} mp_unscale_kernels;

extern const mp_unscale_kernels mp_unscale_scalar;

/* ReLU on fp16/bf16 bits (ops.c): the format's infinity, quiet-NaN bit and
 * largest subnormal mantissa. */
typedef struct mp_relu16_codes {
    uint16_t inf, quiet, mant;
} mp_relu16_codes;

/* Per-step coefficients of the optimizers, in fp32 (see optim.c for how they
 * are derived from the double hyperparameters). */
typedef struct mp_sgd_coef {
    float neg_lr, momentum, one_minus_damp, wd;
    int use_momentum, nesterov, first;
} mp_sgd_coef;

typedef struct mp_adamw_coef {
    float decay, w1, beta2, c2, bc2_sqrt, eps, neg_step_size;
    float bc2_inv; /* 1 / bc2_sqrt rounded (optim_kernels.h's unbiased_sqrt) */
} mp_adamw_coef;

/* The updates (sgd, adamw and their bf16 and half variants) return how many
 * elements' nonzero fp32 update left the stored weight's bits unchanged
 * (optim_kernels.h). */
/* A block format's codes (optim.c builds one per format and state): the
 * value of each code, and what finds the code of a value y (its quotient by
 * the block's scale) without a search. Codes in value order; thresh[c] is
 * the least y whose code is c or above, so the code of y is the number of
 * thresholds at or below it. The buckets of |y| by its bits above `shift`
 * hold at most one threshold each; lut[] holds each bucket's code at its
 * least y (code, bits 24-31) and where in the bucket the next code begins
 * (cut: the low `shift` bits of that threshold's |t|, counted down from
 * the bucket's top for negative y; 2^shift when none does) as 2^24 - cut
 * (bits 0-24), so that l >= cut carries into the code:
 *   b = clamp((bits(|y|) >> shift) - lo, 0, top) (+ MP_MAP_BUCKETS if y < 0)
 *   l = bits(|y|) mod 2^shift (negative y: 2^shift - 1 - that)
 *   code = (lut[b] + l) >> 24
 * The first and last buckets (everything under and over) hold no threshold.
 * e4m3 (sign_magnitude) codes |y| so and puts y's sign in bit 7. NaN codes
 * nan_code (with its sign for e4m3). The thresholds and buckets are
 * torchao's code; then a y > 0 whose code is under least_positive takes
 * least_positive: the second moment's maps that hold a 0 (8-bit unsigned,
 * e4m3) set it to their least positive entry, so that a positive
 * exp_avg_sq is never stored as 0 (exp_avg / (sqrt(0) + eps) would be an
 * update 1e8 times the moment: docs/TRAINING.md); 0 for the others. */
#define MP_MAP_BUCKETS 8192
typedef struct mp_state_map {
    float value[256]; /* each code's value (e4m3: the format's values, sign included) */
    uint32_t lut[2 * MP_MAP_BUCKETS];
    uint32_t lo, shift;
    int32_t top; /* the last bucket: 1.0's or above, so that a quotient by a finite block scale (at most 1
                  * in magnitude) needs no clamp from above (cpu/quant_avx512.c) */
    int entries, sign_magnitude, nan_code;
    int least_positive; /* the least code of a y > 0 (0: torchao's code as it is) */
    float thresh[257];  /* thresh[entries] is NaN: no y reaches it */
    /* The thresholds as a search tree in heap order, for a branch-free binary
     * search in registers (cpu/quant_avx512.c): levels = log2 of entries
     * rounded up; node h (1 <= h < 2^levels) at depth d holds thresh[(2 (h -
     * 2^d) + 1) 2^(levels - 1 - d)] (NaN past thresh[entries - 1]); from
     * h = 1, h = 2 h + (y >= heap[h]) levels times, and the code is
     * h - 2^levels (e4m3: of |y|). */
    float heap[256];
    int levels;
    /* A 256-entry map's values as four byte planes (plane[k][c]: bits 8k to
     * 8k + 7 of value[c]), for byte permutes (cpu/dequant_vbmi.c). */
    uint8_t plane[4][256];
} mp_state_map;

/* Block-formatted optimizer state from an update's first element: the codes
 * and scales of exp_avg or the momentum buffer ([0]) and of exp_avg_sq ([1];
 * NULL for SGD), their maps, the codes' bits (8, 4 or 0 for e4m3) and the
 * block. */
typedef struct mp_qstate {
    uint8_t *codes[2];
    float *scale[2];
    const mp_state_map *map[2];
    int bits;
    size_t block;
} mp_qstate;

typedef struct mp_optim_kernels {
    uint64_t (*sgd)(float *w, const float *g, float *buf, size_t n, const mp_sgd_coef *c);
    uint64_t (*adamw)(float *w, const float *g, float *m, float *v, size_t n, const mp_adamw_coef *c);
    uint64_t (*sgd_bf16)(uint16_t *w, const float *g, float *buf, size_t n, const mp_sgd_coef *c, uint64_t key,
                         uint64_t base);
    uint64_t (*adamw_bf16)(uint16_t *w, const float *g, float *m, float *v, size_t n, const mp_adamw_coef *c,
                           uint64_t key, uint64_t base);
    void (*sumsq)(double acc[8], const float *g, size_t n); /* adds into 8 partial sums (optim_kernels.h) */
    void (*scale)(float *g, size_t n, float c);
    void (*round_sr)(uint16_t *dst, const float *src, size_t n, uint64_t key, uint64_t base);
    /* weights only in fp16 (bf = 0) or bf16 (bf = 1), rounded to nearest even (--master-weights none) */
    uint64_t (*sgd_half)(uint16_t *w, const float *g, float *buf, size_t n, const mp_sgd_coef *c, int bf);
    uint64_t (*adamw_half)(uint16_t *w, const float *g, float *m, float *v, size_t n, const mp_adamw_coef *c, int bf);
    /* ... with a compensation buffer in the same format (--master-weights kahan) */
    uint64_t (*sgd_kahan)(uint16_t *w, uint16_t *comp, const float *g, float *buf, size_t n, const mp_sgd_coef *c,
                          int bf);
    uint64_t (*adamw_kahan)(uint16_t *w, uint16_t *comp, const float *g, float *m, float *v, size_t n,
                            const mp_adamw_coef *c, int bf);
    /* the optimizer state's formats (optim.c): widened into fp32 for an update and stored back */
    void (*widen)(float *out, const uint16_t *h, size_t n, int bf);
    void (*narrow)(uint16_t *h, const float *x, size_t n, int bf);
    /* blocks of `block` values: codes of map (bits 8: a byte each; 4: two to a byte, the first in the high
     * nibble; 0: e4m3, a byte each); one fp32 scale per block */
    void (*dequant)(float *out, const uint8_t *codes, const float *scale, const mp_state_map *map, int bits, size_t n,
                    size_t block);
    void (*quant)(uint8_t *codes, float *scale, const float *x, const mp_state_map *map, int bits, size_t n,
                  size_t block);
    /* fp32 master weights, the moments in fp16 (bf = 0) or bf16 (bf = 1): widen, adamw, narrow in one pass */
    uint64_t (*adamw_hstate)(float *w, const float *g, uint16_t *m, uint16_t *v, size_t n, const mp_adamw_coef *c,
                             int bf);
    /* fp32 master weights, the moments in a block format (n whole blocks): dequantized, updated and quantized
     * block by block, the same bits as dequant, adamw and quant in turn; NULL where no build has one (optim.c
     * then does those in turn) */
    uint64_t (*adamw_qstate)(float *w, const float *g, const mp_qstate *s, size_t n, const mp_adamw_coef *c);
} mp_optim_kernels;

extern const mp_optim_kernels mp_optim_scalar;

/* The codes of a block format: MP_STATE_8BIT (256 sorted values) or
 * MP_STATE_4BIT (16), for state 1 (exp_avg, the momentum buffer: signed
 * dynamic) or 2 (exp_avg_sq: unsigned dynamic for 8-bit, k/16 for 4-bit),
 * built once as torchao 0.18 builds them (optim.c); MP_STATE_FP8: e4m3,
 * saturating; NULL for another format. State 2's maps code a positive y
 * at least as their least positive entry (least_positive). */
const mp_state_map *mp_optim_state_map(mp_state_format f, int state);
/* The code of y by its definition (a search of the sorted values, or e4m3's
 * rounding, then least_positive for y > 0): what the map's tables and
 * least_positive must reproduce. */
int mp_state_map_code_ref(const mp_state_map *m, float y);
/* 1 when every bucket of every map holds at most one threshold. */
int mp_state_maps_exact(void);

/* The block formats' loops vectorized for AVX2 (cpu/quant_avx2.c, the avx2
 * path) and for AVX-512 (cpu/quant_avx512.c, the avx512 paths). */
void mp_dequant_avx2(float *out, const uint8_t *codes, const float *scale, const mp_state_map *map, int bits, size_t n,
                     size_t block);
void mp_quant_avx2(uint8_t *codes, float *scale, const float *x, const mp_state_map *map, int bits, size_t n,
                   size_t block);
void mp_dequant_avx512(float *out, const uint8_t *codes, const float *scale, const mp_state_map *map, int bits,
                       size_t n, size_t block);
void mp_quant_avx512(uint8_t *codes, float *scale, const float *x, const mp_state_map *map, int bits, size_t n,
                     size_t block);
/* A 256-entry map's blocks (block a multiple of 64) dequantized with
 * AVX512_VBMI byte permutes (cpu/dequant_vbmi.c): mp_dequant_avx512's 8-bit
 * maps where the CPU has VBMI. */
void mp_dequant8_vbmi(float *out, const uint8_t *codes, const float *scale, const mp_state_map *map, size_t n,
                      size_t block);
/* mp_optim_kernels.adamw_qstate for the avx512 paths (cpu/quant_avx512.c). */
uint64_t mp_adamw_qstate_avx512(float *w, const float *g, const mp_qstate *s, size_t n, const mp_adamw_coef *c);

/* The eight partial sums of mp_optim_kernels.sumsq, added in a fixed order. */
static inline double mp_sumsq_total(const double acc[8]) {
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* The trainer's fused form of mp_scaler_unscale (s not NULL) and
 * mp_clip_grad_norm with an fp32 norm (optim.c): one pass over each gradient
 * unscales it, checks it for inf/NaN and sums its squares (the same norm, to
 * the bit); the clip coefficient, when below 1, is applied in the update's
 * pass (mp_scaler_step or mp_optim_step), which writes the clipped gradient
 * back. The results and the gradients after the step are mp_scaler_unscale's
 * and mp_clip_grad_norm's (found_inf, may be NULL, is 0 without a scaler).
 * Other norm formats take those two calls. Errors as theirs, but a bad
 * max_norm is refused before anything is unscaled. Why not one pass
 * with the update too: a step with inf or NaN anywhere is skipped entirely,
 * so every gradient is checked before any weight changes (as PyTorch's fused
 * AdamW takes found_inf from GradScaler's check). */
mp_status mp_optim_unscale_clip(mp_optim *o, mp_scaler *s, double max_norm, mp_dtype acc, double *total_norm,
                                int *found_inf);

/* mp_optim_step (optim.h) with the kernels of k. */
mp_status mp_optim_step_in(const struct mp_kernels *k, mp_optim *o);

/* Destinations at least this large (bytes: a conversion's per call, a
 * GEMM's half C or post step output) are written with non-temporal stores:
 * they would not stay in cache anyway, and streaming saves reading each
 * destination line before it is overwritten. */
#define MP_STREAM_MIN_BYTES ((size_t)8 << 20)

/* Non-temporal stores before it are visible to other threads after it (x86's sfence). */
static inline void mp_store_fence(void) {
#if defined(__x86_64__)
    __builtin_ia32_sfence();
#endif
}

/* One GEMM call's epilogue (mp_gemm_epilogue) as the driver hands it to the
 * kernels: the tile's fp32 sums over all of k become C. */
typedef struct mp_gemm_ep {
    float alpha, beta;
    void *c;
    mp_dtype ct;
    size_t ldc;
    const float *bias; /* (n,) or NULL */
    mp_dtype round_to; /* MP_F32: none */
    mp_gemm_post post; /* gemm.h's post step: MP_POST_NONE, or post_x (ldc) and post_out (ldc, or NULL: C) */
    const void *post_x;
    void *post_out;
    const struct mp_kernels *k; /* the conversions, counts and GELU of the call's context */
    int stream;                 /* a half C (and post_out) of MP_STREAM_MIN_BYTES or more: the kernels may store it
                                 * non-temporally (the driver fences each thread's stores at its end) */
} mp_gemm_ep;

/* The most fp32 values the driver hands the epilogue at once: the tiles of
 * the last block of k for consecutive row panels of one column panel (row
 * blocks), or of one row panel by consecutive column panels up to
 * MP_GEMM_EPILOGUE_COLS columns (row panels), up to this many (every
 * kernel's mr x nr fits), so that the epilogue's per-call work is spread
 * over a strip of C rather than one tile. */
#define MP_GEMM_STRIP 2048
/* The most columns of C in one epilogue call (its row buffers, gemm_epilogue.h) */
#define MP_GEMM_EPILOGUE_COLS 64

/* A GEMM micro-architecture: packing routines and a micro-kernel computing an
 * mr x nr tile of C from packed panels, plus its cache blocking. Packed A
 * micro-panel: for each group of kpack k values, mr rows of kpack values;
 * packed B micro-panel: for each group, nr columns of kpack values; both zero
 * padded to whole groups, rows and columns. esize: bytes of one packed value. */
typedef struct mp_gemm_kernel {
    const char *name;
    int mr, nr, kpack;
    size_t kc, mc, nc, esize;
    /* one micro-panel of op(A): rows [i0, i0+rows) (rows <= mr), k [p0, p0+kc) */
    void (*pack_a)(void *dst, const void *a, mp_dtype t, size_t lda, int trans, size_t i0, size_t rows, size_t p0,
                   size_t kc);
    /* one micro-panel of op(B): k [p0, p0+kc), columns [j0, j0+cols) (cols <= nr) */
    void (*pack_b)(void *dst, const void *b, mp_dtype t, size_t ldb, int trans, size_t p0, size_t kc, size_t j0,
                   size_t cols);
    /* C[0..mr)[0..nr) = alpha * A.B + beta * C (beta == 0: C not read), kc k values */
    void (*micro)(size_t kc, const void *ap, const void *bp, float *c, size_t ldc, float alpha, float beta);
    /* micro reading mr whole rows of op(A) where they are, lda elements apart
     * from the block's first k (op(A) not transposed, kc a multiple of kpack:
     * the packed panel's layout along k); NULL: A is always packed */
    void (*micro_rows)(size_t kc, const void *a, size_t lda, const void *bp, float *c, size_t ldc, float alpha,
                       float beta);
    /* micro_rows in row blocks only for GEMMs of at most this many columns
     * (0: any), where a packed block of A would be reused by fewer column
     * panels than pay for its copy (row panels read A in place at any width:
     * a panel's slice of k stays in L1 over every column panel) */
    size_t rows_max_n;
    /* Row panels: where op(B)'s packed column block takes at most this many
     * bytes (0: never), the driver runs each MR-row panel of a row block over
     * every column panel, so that A's block of k is reused by all of them while
     * B's panels stream from L2 (by micro_stream_b and micro_rows_stream_b:
     * micro and micro_rows with that reuse's cache hints, which a kernel with
     * panels_b_max names), and writes each group of column panels of C (up to
     * MP_GEMM_EPILOGUE_COLS columns) right after its last micro-kernel, C's
     * rows in order */
    size_t panels_b_max;
    void (*micro_stream_b)(size_t kc, const void *ap, const void *bp, float *c, size_t ldc, float alpha, float beta);
    void (*micro_rows_stream_b)(size_t kc, const void *a, size_t lda, const void *bp, float *c, size_t ldc, float alpha,
                                float beta);
    /* C[i0.., j0..] from a rows x cols tile of fp32 sums (row stride ts; the
     * tile is overwritten; rows x ts <= MP_GEMM_STRIP, cols <=
     * MP_GEMM_EPILOGUE_COLS); counts into st[0]
     * (C's store) and st[1] (the post step's) and adds the +-0 results to
     * zeros (gemm_epilogue.h; st and zeros may be NULL) */
    void (*epilogue)(const mp_gemm_ep *e, float *tile, size_t ts, size_t i0, size_t j0, size_t rows, size_t cols,
                     mp_convert_stats *st, uint64_t *zeros);
    /* the number of +-0 among rows x cols fp32 values of c (row stride ldc) */
    uint64_t (*zeros)(const float *c, size_t ldc, size_t rows, size_t cols);
    /* adds each of op(A)'s values in rows [i0, i0+rows), k [p0, p0+kc) to its
     * row's sum (sums[0..rows)), one fp32 addition each in k order
     * (mp_gemm_row_sums_scalar's bits, which any kernel may name) */
    void (*row_sums)(float *sums, const void *a, mp_dtype t, size_t lda, int trans, size_t i0, size_t rows, size_t p0,
                     size_t kc);
    /* called by each thread before its first and after its last micro-kernel
     * of a call (AMX: configure and release the tiles); NULL: nothing */
    void (*begin)(void);
    void (*end)(void);
} mp_gemm_kernel;

extern const mp_gemm_kernel mp_gemm_scalar;

/* mp_gemm_ex in the context kc: its GEMM kernel for the inputs (gemm_bf16
 * for bf16 x bf16, else gemm), its conversions, counts and GELU, with
 * mp_gemm_ex's checks and results (MP_EINVAL too for a bf16-only kernel given
 * other inputs); mp_gemm_ex passes the context of the CPU path in use. Tests
 * run contexts no path has (the AMX model's). */
mp_status mp_gemm_run(const struct mp_kernels *kc, int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha,
                      const void *a, mp_dtype at, size_t lda, const void *b, mp_dtype bt, size_t ldb, float beta,
                      void *c, mp_dtype ct, size_t ldc, const mp_gemm_epilogue *ep);
/* mp_gemm (gemm.h) in the context kc. */
mp_status mp_gemm_in(const struct mp_kernels *kc, int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha,
                     const void *a, mp_dtype at, size_t lda, const void *b, mp_dtype bt, size_t ldb, float beta,
                     void *c, mp_dtype ct, size_t ldc, mp_convert_stats *st);

/* op(B) (k x n, trans_b as mp_gemm's) packed once in kr's column panels, for GEMMs that read it or a
 * part of it again (the attention's K and V per head): mp_gemm_in_packed's results are mp_gemm_in's
 * with B, bit for bit. */
typedef struct mp_gemm_packed_b {
    const mp_gemm_kernel *kr;
    int trans_b;
    mp_dtype bt;
    size_t k, n, K2; /* op(B)'s depth and width; a column panel's packed depth */
    size_t ldb;
    const void *b; /* B itself, for the GEMMs the panels do not fit */
    void *data;
} mp_gemm_packed_b;
/* The bytes mp_gemm_pack_b writes for op(B) of k x n through kr. */
size_t mp_gemm_packed_b_bytes(const mp_gemm_kernel *kr, size_t k, size_t n);
/* Packs op(B) into data (mp_gemm_packed_b_bytes, 64-byte aligned) and describes it in *pb. */
void mp_gemm_pack_b(const mp_gemm_kernel *kr, int trans_b, size_t k, size_t n, const void *b, mp_dtype bt, size_t ldb,
                    void *data, mp_gemm_packed_b *pb);
/* mp_gemm_in with op(B)'s first n columns and first k (n <= pb->n, k <= pb->k), from the panels where they
 * fit (pb's kernel is the one kc runs for at x bt, and k is pb->k or its last block of k a multiple of the
 * kernel's kpack: the panels' zero padding), else packed again from pb->b; threads as mp_gemm_in. */
mp_status mp_gemm_in_packed(const struct mp_kernels *kc, int trans_a, size_t m, size_t n, size_t k, float alpha,
                            const void *a, mp_dtype at, size_t lda, const mp_gemm_packed_b *pb, float beta, void *c,
                            mp_dtype ct, size_t ldc, mp_convert_stats *st);

/* ---- AMX (gemm_amx_model.c, cpu/gemm_amx.c) ----
 * The bf16 x bf16 kernel on AMX tiles: a 32 x 32 block of C in four 16 x 16
 * fp32 accumulator tiles, A in two 16 x 32 bf16 tiles, B in two tiles of 16
 * k pairs x 16 columns. Packed A micro-panel: for each 32-deep slice of k, 32
 * rows of 32 values (one 64-byte tile row each); packed B: for each k pair,
 * 32 columns of pairs (as vdpbf16ps's). mp_gemm_amx runs TDPBF16PS;
 * mp_gemm_amx_model is the same blocking, packing layout and edge handling
 * with the tile registers as arrays and the instruction as
 * mp_tdpbf16ps_model, in portable C: it runs on every CPU. */
enum { MP_AMX_MR = 32, MP_AMX_NR = 32, MP_AMX_KB = 32 };
#define MP_AMX_KC 512
#define MP_AMX_MC 128
#define MP_AMX_NC 3072
/* A's tiles read in place (micro_rows) for at most this many columns (docs/GEMM.md) */
#define MP_AMX_ROWS_MAX_N 512
/* row panels for packed B blocks of at most 1.25 MiB (docs/GEMM.md) */
#define MP_AMX_PANELS_B_MAX ((size_t)5 << 18)
extern const mp_gemm_kernel mp_gemm_amx_model;

/* One TDPBF16PS as measured on an Intel Xeon (docs/GEMM.md): for each of the
 * 16 x 16 elements, the even-k products (a[2q] b[2q]) are summed in q order in
 * fp32 from 0, the odd-k products likewise, and c += (even + odd); every sum
 * is rounded to nearest even and flushed to 0 when subnormal, bf16 subnormal
 * inputs read as 0, products below 2^-126 are flushed. a: 16 rows of 32 bf16
 * (row stride lda elements), b: 16 k pairs of 16 columns x 2 bf16 (row stride
 * ldb elements), c: 16 x 16 fp32 (row stride ldc). */
void mp_tdpbf16ps_model(float *c, size_t ldc, const uint16_t *a, size_t lda, const uint16_t *b, size_t ldb);
/* The portable epilogue (gemm.c), for any kernel: conversions through e->conv. */
void mp_gemm_epilogue_scalar(const mp_gemm_ep *e, float *tile, size_t ts, size_t i0, size_t j0, size_t rows,
                             size_t cols, mp_convert_stats *st, uint64_t *zeros);
uint64_t mp_gemm_zeros_scalar(const float *c, size_t ldc, size_t rows, size_t cols);
/* The row sums of mp_gemm_kernel (gemm.c): any format, exact widening. */
void mp_gemm_row_sums_scalar(float *sums, const void *a, mp_dtype t, size_t lda, int trans, size_t i0, size_t rows,
                             size_t p0, size_t kc);
#if defined(__x86_64__) || defined(_M_X64)
#define MP_X86 1
extern const mp_convert_kernels mp_convert_avx2;
extern const mp_convert_kernels mp_convert_avx512;
extern const mp_convert_kernels mp_convert_avx512bf16;
extern const mp_unscale_kernels mp_unscale_avx512;
/* out = a where 0 < x <= inf (x = a when NULL), else 0; NaN quieted; adds the
 * subnormal and NaN counts of out. */
void mp_relu16_avx512(uint16_t *out, const uint16_t *a, const uint16_t *x, size_t n, const mp_relu16_codes *k,
                      uint64_t *sub, uint64_t *nan);
extern const mp_optim_kernels mp_optim_avx2;
extern const mp_optim_kernels mp_optim_avx512;
extern const mp_gemm_kernel mp_gemm_avx2;
extern const mp_gemm_kernel mp_gemm_avx512;
extern const mp_gemm_kernel mp_gemm_avx512bf16;
extern const mp_gemm_kernel mp_gemm_amx;
void mp_gemm_epilogue_avx2(const mp_gemm_ep *e, float *tile, size_t ts, size_t i0, size_t j0, size_t rows, size_t cols,
                           mp_convert_stats *st, uint64_t *zeros);
void mp_gemm_epilogue_avx512(const mp_gemm_ep *e, float *tile, size_t ts, size_t i0, size_t j0, size_t rows,
                             size_t cols, mp_convert_stats *st, uint64_t *zeros);
void mp_gemm_epilogue_avx512bf16(const mp_gemm_ep *e, float *tile, size_t ts, size_t i0, size_t j0, size_t rows,
                                 size_t cols, mp_convert_stats *st, uint64_t *zeros);
uint64_t mp_gemm_zeros_avx2(const float *c, size_t ldc, size_t rows, size_t cols);
uint64_t mp_gemm_zeros_avx512(const float *c, size_t ldc, size_t rows, size_t cols);
/* mp_gemm_row_sums_scalar with AVX-512 for a transposed A (cpu/gemm_avx512.c): the same bits. */
void mp_gemm_row_sums_avx512(float *sums, const void *a, mp_dtype t, size_t lda, int trans, size_t i0, size_t rows,
                             size_t p0, size_t kc);
/* Peak loops: iters x 20 independent 16-lane FMAs (vdpbf16ps: 32 multiply-adds;
 * AVX2: 8-lane FMAs). */
double mp_peak_fma_avx2(uint64_t iters);
double mp_peak_fma_avx512(uint64_t iters);
double mp_peak_dpbf16_avx512(uint64_t iters);
/* iters x 4 TDPBF16PS (16 x 16 x 32 multiply-adds each); needs the AMX path */
double mp_peak_tdpbf16_amx(uint64_t iters);
#endif

/* ---- largest finite magnitude (convert.c's mp_amax; src/amax_kernels.h built per ISA) ---- */
typedef struct mp_amax_kernels {
    uint16_t (*amax16)(const uint16_t *h, size_t n, uint16_t inf); /* fp16/bf16 codes */
    uint32_t (*amax32)(const uint32_t *x, size_t n);               /* fp32 bit patterns */
    /* the subnormals and NaNs of n < 2^32 fp32 bit patterns, added; their amax returned */
    uint32_t (*stats32)(const uint32_t *x, size_t n, uint32_t *subnormal, uint32_t *nan);
} mp_amax_kernels;
#ifdef MP_X86
extern const mp_amax_kernels mp_amax_avx2;
#endif

/* ---- GELU kernels (ops.c; src/cpu/gelu_kernels.h built per ISA) ----
 * On fp32 chunks: fwd y[i] = gelu(y[i]) in place; bwd g[i] = g[i] * gelu'(x[i])
 * (g holds dy on entry). Every ISA's table gives the same bits. */
typedef struct mp_gelu_kernels {
    void (*tanh_fwd)(float *y, size_t n);
    void (*tanh_bwd)(float *g, const float *x, size_t n);
    void (*erf_fwd)(float *y, size_t n);
    void (*erf_bwd)(float *g, const float *x, size_t n);
} mp_gelu_kernels;
extern const mp_gelu_kernels mp_gelu_scalar;
#ifdef MP_X86
extern const mp_gelu_kernels mp_gelu_avx2;
extern const mp_gelu_kernels mp_gelu_avx512;
#endif

/* The GELU of every 16-bit input (src/gelu_table.c): y[code] = the kernels'
 * forward of the code's value, d[code] = the fp64 derivative their backward
 * multiplies by (the backward of g at x is mp_gelu_table_bwd1). */
typedef struct mp_gelu_table {
    float y[65536];
    double d[65536];
} mp_gelu_table;
/* The table of the tanh form (erf 0) or the erf form for bf16 or fp16 codes,
 * built on first use; NULL for another format or when out of memory (then
 * the kernels compute). */
const mp_gelu_table *mp_gelu_table_of(int erf, mp_dtype t);

/* The kernels' backward g * gelu'(x) for x = the code's value xv: the
 * product in fp64 rounded once, x itself (its quiet bit set, as a
 * conversion through fp64 sets it) when it is NaN. */
static inline float mp_gelu_table_bwd1(const mp_gelu_table *tb, uint16_t code, float xv, float g) {
    return xv != xv ? mp_bits_f32(mp_f32_bits(xv) | 0x00400000u) : (float)((double)g * tb->d[code]);
}

/* ---- softmax kernels (ops.c; src/cpu/softmax_kernels.h built per ISA) ----
 * e^x on fp32 (<= 0.874 ulp, no libm) and the fp32 softmax rows' loops on it,
 * lanes combined in a fixed order. Every ISA's table gives the same bits. */
typedef struct mp_softmax_kernels {
    void (*exp)(float *y, const float *x, size_t n);                  /* y[i] = e^x[i]; y may be x */
    float (*max)(const float *r, size_t n);                           /* NaNs skipped; -inf when none */
    float (*exp_sum)(float *r, size_t n, float mx);                   /* sum of e^(r[j] - mx), r unchanged */
    float (*exp_sum_store)(float *r, size_t n, float mx);             /* the same, r[j] = e^(r[j] - mx) */
    void (*exp_scale)(float *r, size_t n, float mx, float k);         /* r[j] = e^(r[j] - mx) k */
    void (*exp_sub_mul)(float *g, const float *y, size_t n, float d); /* g[j] -= e^y[j] d */
} mp_softmax_kernels;
extern const mp_softmax_kernels mp_softmax_scalar;
#ifdef MP_X86
extern const mp_softmax_kernels mp_softmax_avx2;
extern const mp_softmax_kernels mp_softmax_avx512;
#endif

/* ---- MX block quantization (mx.c; src/cpu/mx_avx512.c) ----
 * nb blocks of MP_MX_BLOCK fp32 values to element codes and E8M0 scales, and
 * back; elem (MP_E4M3 or MP_E5M2) and rule are checked by the caller. The
 * quantizer adds exact counts to st (may be NULL). scales: the E8M0 scale of
 * each of n finite block amaxes (fp32 bit patterns, sign clear), exposed so
 * that tests can sweep the rule over every amax. Every table gives the same
 * bits and counts. */
typedef struct mp_mx_kernels {
    void (*quantize)(uint8_t *codes, uint8_t *scales, const float *src, size_t nb, mp_dtype elem, mp_mx_rule rule,
                     mp_quant_stats *st);
    void (*dequantize)(float *dst, const uint8_t *codes, const uint8_t *scales, size_t nb, mp_dtype elem);
    void (*scales)(uint8_t *s, const uint32_t *amax, size_t n, mp_dtype elem, mp_mx_rule rule);
} mp_mx_kernels;
extern const mp_mx_kernels mp_mx_scalar;
#ifdef MP_X86
extern const mp_mx_kernels mp_mx_avx512;
#endif
/* Whether this thread's multiplies may read subnormal operands as 0: x86's
 * DAZ bit (MXCSR is per thread); elsewhere assume it (AArch64's FZ flushes
 * inputs too). fp8_scale.c. */
int mp_inputs_flushed(void);

/* st->amax = max(st->amax, a) for a finite magnitude's bits a, on the bits (no
 * FPU compare, which DAZ could change); a negative or NaN st->amax (bits above
 * inf's) is replaced. */
static inline void mp_quant_amax(mp_quant_stats *st, uint32_t a) {
    const uint32_t cur = mp_f32_bits(st->amax);
    if (a > cur || cur > 0x7f800000u) st->amax = mp_bits_f32(a);
}

/* ---- recipe operands (recipe.c's panels; src/cpu/recipe_avx512.c) ----
 * One mp_qoperand call as its kernels see it. quantize: rows [r0, r1) of the
 * operand (r0 a multiple of the block height: 32 or 16 when the blocks run
 * down the columns, 16 for 16x16 tiles; r1 as well, or rows), their exact
 * bf16 values into dst and their counts into st (all but n, which the caller
 * sets; the zeros that pad a block are quantized with it, and what they give,
 * after the Hadamard transform too, is counted as recipe.c's panels count
 * it); MP_OK, or a quantizer's error. rht_amax: the bits of the largest finite
 * |x| of rows [r0, r1) (multiples of 16, or r1 = rows; zero rows pad the last
 * block) after the transform. Every table gives the bits and counts of the
 * reference, mp_recipe_ref. */
typedef struct mp_qop {
    uint16_t *dst;   /* (rows, ldd) bf16 */
    const void *src; /* (rows, lds) fp32 or bf16 */
    size_t ldd, lds, rows, cols;
    mp_dtype st;         /* MP_F32 or MP_BF16 */
    mp_recipe_kind kind; /* MP_RECIPE_FP8_DELAYED and _CURRENT alike: one per-tensor scale */
    int k_rows;          /* mxfp8, nvfp4 1x16: the blocks run down the columns */
    mp_dtype fmt;        /* per-tensor fp8: MP_E4M3 or MP_E5M2 */
    float scale;         /* per-tensor fp8: x * scale is coded; nvfp4: the amax of the global scale */
    mp_mx_rule rule;     /* mxfp8 */
    int tile16;          /* nvfp4: 16x16 blocks */
    int rht;             /* nvfp4: each column's 16-row blocks are transformed first (mp_rht16) */
    uint16_t signs;      /* the transform's sign mask */
    const mp_rng *rng;   /* nvfp4 stochastic rounding (recipe.h: each element's byte), or NULL */
} mp_qop;
typedef struct mp_recipe_kernels {
    mp_status (*quantize)(const mp_qop *op, size_t r0, size_t r1, mp_quant_stats *st);
    uint32_t (*rht_amax)(const mp_qop *op, size_t r0, size_t r1);
} mp_recipe_kernels;
extern const mp_recipe_kernels mp_recipe_ref;
/* recipe_kernels.h's one-pass kernels, portable and built for AVX2 */
extern const mp_recipe_kernels mp_recipe_portable;
#ifdef MP_X86
extern const mp_recipe_kernels mp_recipe_avx2;
extern const mp_recipe_kernels mp_recipe_avx512;
#endif

/* mp_qoperand through the recipe kernels k (mp_qoperand passes the CPU
 * path's; the tests pass mp_recipe_ref and every table). */
mp_status mp_qoperand_with(const mp_recipe_kernels *k, uint16_t *dst, size_t ldd, float *factor, const void *src,
                           mp_dtype src_type, size_t lds, size_t rows, size_t cols, int k_along_rows,
                           const mp_recipe *r, mp_qtensor *q);

/* Philox4x32-10's ten rounds on the words c0..c3 with the key k0, k1 (all
 * lvalues of type T, scalar or vector: the same steps lane by lane);
 * MULHILO(a, K, &lo) returns the high half of a * K and stores the low. */
#define MP_PHILOX4X32_10(T, MULHILO, c0, c1, c2, c3, k0, k1)                                    \
    for (int round_ = 0; round_ < 10; round_++) {                                               \
        T lo0_, lo1_;                                                                           \
        const T hi0_ = MULHILO(c0, 0xD2511F53u, &lo0_), hi1_ = MULHILO(c2, 0xCD9E8D57u, &lo1_); \
        c0 = hi1_ ^ c1 ^ k0;                                                                    \
        c1 = lo1_;                                                                              \
        c2 = hi0_ ^ c3 ^ k1;                                                                    \
        c3 = lo0_;                                                                              \
        k0 += 0x9E3779B9u;                                                                      \
        k1 += 0xBB67AE85u;                                                                      \
    }

/* Bytes j0 .. j0 + n - 1 of the stochastic-rounding stream of seed (nvfp4.c:
 * Philox4x32-10, byte j = byte j mod 16 of the block j / 16). */
void mp_sr_bytes(uint64_t seed, uint64_t j0, size_t n, uint8_t *r);

/* ---- the kernel context: every module's kernels for one CPU path ----
 * One table per path (kernels.c, designated initializers), as BLIS has one
 * context per architecture; the path in use (mp_cpu_isa: detected once,
 * capped by MIXPREC_ISA or mp_cpu_set_isa) names the one every module reads.
 * A new ISA path is its kernel files, its detection (cpu.c) and one table. */
typedef void (*mp_relu16_fn)(uint16_t *out, const uint16_t *a, const uint16_t *x, size_t n, const mp_relu16_codes *k,
                             uint64_t *sub, uint64_t *nan);
/* Layer norm on rows of C 16-bit values (f16: fp16, else bf16; every row of the call in it) with fp32
 * reductions, ops.c's operations and bits; fwd16 and dx16 take one row. fwd16: y = (x - mean) rstd w + b (w NULL: 1, b
 * NULL: +0), rounded and counted into st, the row's mean and rstd into *mean, *rstd. dx16: dx = rstd (dy w - a - n c)
 * from n = (x - mean) rstd, rounded and counted into st_dx; with res, out = res + dx rounded and counted
 * into st_sum, else out = dx. An output may be one of the inputs: each value is read before its own is
 * written. */
typedef struct mp_layernorm_kernels {
    void (*fwd16)(uint16_t *y, const uint16_t *x, const float *w, const float *b, float eps, size_t C, int f16,
                  float *mean, float *rstd, mp_convert_stats *st);
    void (*dx16)(uint16_t *out, const uint16_t *dy, const uint16_t *x, const uint16_t *res, const float *w, float mean,
                 float rstd, size_t C, int f16, mp_convert_stats *st_dx, mp_convert_stats *st_sum);
    /* the weight's and bias's gradients over m columns of B rows (row stride C; dy and x from the first
     * column): dw[k] = the sum in row order of dy (x - mean) rstd, db[k] of dy, each from +0 (either may be
     * NULL: not summed) */
    void (*dwdb16)(float *dw, float *db, const uint16_t *dy, const uint16_t *x, const float *mean, const float *rstd,
                   size_t B, size_t C, size_t m, int f16);
} mp_layernorm_kernels;
extern const mp_layernorm_kernels mp_layernorm_avx512;
void mp_relu16_scalar(uint16_t *out, const uint16_t *a, const uint16_t *x, size_t n, const mp_relu16_codes *k,
                      uint64_t *sub, uint64_t *nan);
extern const mp_amax_kernels mp_amax_scalar;

/* The path's peak loops, for `mixprec bench peak` (src/cpu/peak_*.c): one
 * thread's `iters` turns of nothing but fp32 FMAs, vdpbf16ps or TDPBF16PS
 * (NULL where the path has no such instruction), each turn `*_flops`
 * floating-point operations. */
typedef struct mp_peak_kernels {
    double (*fma)(uint64_t iters);
    double (*dpbf16)(uint64_t iters);
    double (*tdpbf16)(uint64_t iters);
    double fma_flops, dpbf16_flops, tdpbf16_flops;
} mp_peak_kernels;
#ifdef MP_X86
double mp_peak_fma_avx2(uint64_t iters);
double mp_peak_fma_avx512(uint64_t iters);
double mp_peak_dpbf16_avx512(uint64_t iters);
double mp_peak_tdpbf16_amx(uint64_t iters);
#endif

typedef struct mp_kernels {
    mp_isa isa;
    const mp_convert_kernels *convert;
    const mp_amax_kernels *amax;
    const mp_unscale_kernels *unscale;
    const mp_optim_kernels *optim;
    const mp_gelu_kernels *gelu;
    const mp_softmax_kernels *softmax;
    mp_relu16_fn relu16;
    const mp_layernorm_kernels *layernorm; /* NULL: ops.c's rows through the conversions */
    const mp_mx_kernels *mx;
    const mp_recipe_kernels *recipe;
    const mp_gemm_kernel *gemm;      /* any pair of input formats */
    const mp_gemm_kernel *gemm_bf16; /* bf16 x bf16 */
    const mp_peak_kernels *peak;     /* NULL: no vector peak loop (the portable path) */
} mp_kernels;

/* The context of a path (NULL for a value that is not an mp_isa), and of
 * the path in use. */
const mp_kernels *mp_kernels_of(mp_isa isa);
const mp_kernels *mp_kernels_current(void);

/* p->label rebuilt from its base (up to the first '+'), the switches that
 * differ from its table row, then its layer assignments (precision.c);
 * MP_EINVAL + message when that is too long for the label (p unchanged). */
mp_status mp_precision_relabel(mp_precision *p);

#endif
