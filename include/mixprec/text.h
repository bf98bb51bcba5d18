/* mixprec/text.h - byte-level text corpora for language models: bytes are
 * tokens (vocabulary 256).
 *
 * A corpus is files, or directories whose regular files (not symlinks, not
 * hidden files, not the binary *.dat indexes that the fortunes package keeps
 * beside its texts; no recursion into subdirectories) are taken in strcmp
 * order of their names, all concatenated in the order given. The first
 * floor(0.9 N) bytes are the training split, the rest the validation split.
 */
#ifndef MIXPREC_TEXT_H
#define MIXPREC_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The default corpus: plain English from Debian's fortunes packages
 * (scripts/deps.sh installs them), separated by commas: 740,038 bytes in
 * fortunes 1:1.99.1-7.3 (Debian 12); literature comes from fortunes-min,
 * the others from fortunes, which depends on it. */
#define MP_TEXT_DEFAULT_CORPUS                                                                                 \
    "/usr/share/games/fortunes/literature,/usr/share/games/fortunes/science,"                                  \
    "/usr/share/games/fortunes/songs-poems,/usr/share/games/fortunes/wisdom,/usr/share/games/fortunes/people," \
    "/usr/share/games/fortunes/work"

typedef struct mp_text {
    uint8_t *data;  /* (n,) all bytes */
    size_t n;       /* bytes in all */
    size_t n_train; /* floor(0.9 n): data[0 .. n_train) trains, data[n_train .. n) validates */
    size_t nfiles;  /* files read */
} mp_text;

/* The largest corpus mp_text_load reads, in bytes (1 GiB). */
#define MP_TEXT_MAX_BYTES ((uint64_t)1 << 30)

/* Reads the corpus into t (which the caller provides; its previous contents
 * are not freed): paths is a comma-separated list of files and directories
 * (a path cannot itself contain a comma). Named paths are followed if they
 * are symlinks; entries inside a directory are not.
 * Only regular files are read (named, or in a named directory): a device, a
 * FIFO or a socket named in the list is MP_EIO naming it and what it is,
 * before anything could block on it (entries of a directory that are not
 * regular files are skipped); each file's size is checked against
 * MP_TEXT_MAX_BYTES before it is read (MP_EINVAL naming the file), and a file
 * that is truncated, grows or is rewritten while read is MP_EIO "changed
 * while read" naming it (never a shorter corpus).
 * Returns MP_EINVAL when t or paths is NULL or the list has an empty entry
 * ("", "a,,b", "a,"), MP_EIO "PATH: cannot open (reason)" naming the path
 * when one is missing or unreadable, MP_ECORRUPT when the corpus is empty
 * (no bytes in all), MP_ENOMEM. On failure t is left zeroed. On success t
 * owns the bytes: free them with mp_text_free. */
mp_status mp_text_load(mp_text *t, const char *paths);
void mp_text_free(mp_text *t); /* NULL-safe; leaves t zeroed */

/* MP_EINVAL (with a message giving the sizes) unless a corpus is loaded,
 * T >= 1 and both splits hold at least T + 2 bytes. The window functions
 * below assume this check passed. */
mp_status mp_text_check(const mp_text *t, size_t T);

/* Row b of training micro-batch s (s counts micro-batches from 0 over the
 * whole run), B rows of T tokens:
 *   shuffle = 0: offset o = ((s*B + b) * T) mod (n_train - T), computed
 *                exactly (no overflow) for every 64-bit s
 *   shuffle = 1: o drawn uniformly from [0, n_train - T) by a generator keyed
 *                by (seed, s, b): the same window for the same (seed, s, b)
 *                in any run and for any B, so a resumed run continues the
 *                sequence. The generator is stateless: a splitmix64 stream
 *                keyed by a hash of (seed, s, b), mapped onto the range by
 *                Lemire's multiply-high with rejection, so every offset is
 *                exactly equally likely (no modulo bias).
 * tokens[b*T + i] = data[o + i], targets[b*T + i] = data[o + 1 + i]: every
 * byte read lies in the training split. Both outputs are zero-filled when
 * the training split holds fewer than T + 2 bytes (or no corpus is loaded, or
 * T is 0); a validation split too short for T, which mp_text_check also
 * refuses, leaves the training windows defined. */
void mp_text_train_batch(const mp_text *t, uint64_t s, size_t B, size_t T, int shuffle, uint64_t seed,
                         int32_t *tokens,   // (B, T)
                         int32_t *targets); // (B, T)

/* Validation windows: offsets 0, T, 2T, ... of the validation split (which
 * starts at data + n_train) while offset + T + 1 <= its length; 0 when
 * T == 0 or t holds no corpus. */
size_t mp_text_val_windows(const mp_text *t, size_t T);

/* Validation windows w0 .. w0+B-1 into tokens/targets (B, T): row b holds
 * tokens[b*T + i] = data[n_train + (w0+b)*T + i] and targets the byte after
 * each. Rows past the last window (mp_text_val_windows) are zero-filled. */
void mp_text_val_batch(const mp_text *t, size_t w0, size_t B, size_t T, int32_t *tokens, int32_t *targets);

/* 1 if the word (bytes w[0..len)) occurs in the corpus with whitespace
 * (space, \n, \t, \r) or an end of the corpus on each side, else 0 (also
 * for len == 0). For judging sampled text; a memmem scan of the corpus. */
int mp_text_has_word(const mp_text *t, const char *w, size_t len);

/* How much sampled text s[0..n) looks like the corpus: its bytes that are
 * printable ASCII (0x20 .. 0x7e) or a newline (a tab is not counted: the
 * default corpus itself scores 98.9%), and its words (maximal runs of bytes
 * other than space, newline, tab and carriage return) that mp_text_has_word
 * finds in the corpus. The measure of issue 11: at least 95% printable and
 * at least half of the words found. */
typedef struct mp_text_quality {
    size_t bytes, printable; /* bytes judged, and how many are printable ASCII or newline */
    size_t words, found;     /* words in s, and how many occur in the corpus as words */
} mp_text_quality;
mp_text_quality mp_text_judge(const mp_text *t, const uint8_t *s, size_t n);

#ifdef __cplusplus
}
#endif
#endif
