/* fuzz_text.c - the text corpus reader (mp_text_load) on a file of any
 * bytes, then the windows the trainer takes from it. The corpus is the file,
 * byte for byte, split at floor(0.9 n); with T, B, s, seed and the order taken
 * from the first bytes: training rows are T + 1 consecutive bytes of the
 * training split (targets are the tokens shifted by one), validation windows
 * are the split's bytes at w T, rows past the last window and every row of a
 * training split too short for T are zero; the sample judge counts within
 * bounds and finds every word of the corpus in it. */
#define _GNU_SOURCE
#include "fuzz.h"

enum { BMAX = 4 };

static size_t get(const uint8_t *data, size_t size, size_t at, int bytes) {
    size_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = v << 8 | (at + (size_t)i < size ? data[at + (size_t)i] : 0);
    return v;
}

/* Row b of (tokens, targets) as T + 1 bytes: tokens, then the last target. */
static int row_bytes(const int32_t *tok, const int32_t *tgt, size_t T, uint8_t *out) {
    for (size_t i = 0; i < T; i++) {
        if (tok[i] < 0 || tok[i] > 255 || tgt[i] < 0 || tgt[i] > 255) return -1;
        if (i + 1 < T && tgt[i] != tok[i + 1]) return -1;
        out[i] = (uint8_t)tok[i];
    }
    out[T] = (uint8_t)tgt[T - 1];
    return 0;
}

static int all_zero(const int32_t *v, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (v[i]) return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mp_text t;
    if (mp_text_load(&t, fuzz_file(data, size)) != MP_OK) {
        FUZZ_CHECK(size == 0 && !t.data && !t.n);
        return 0;
    }
    FUZZ_CHECK(t.n == size && t.nfiles == 1 && memcmp(t.data, data, size) == 0);
    FUZZ_CHECK(t.n_train == size / 10 * 9 + size % 10 * 9 / 10);

    const size_t T = 1 + get(data, size, 0, 2) % (size + 2), B = 1 + get(data, size, 2, 1) % BMAX;
    const int shuffle = (int)get(data, size, 3, 1) & 1;
    const uint64_t s = get(data, size, 4, 8), seed = get(data, size, 12, 4);
    int32_t *tok = malloc(BMAX * T * sizeof *tok), *tgt = malloc(BMAX * T * sizeof *tgt);
    uint8_t *row = malloc(T + 1);
    FUZZ_CHECK(tok && tgt && row);
    memset(tok, 0xff, BMAX * T * sizeof *tok), memset(tgt, 0xff, BMAX * T * sizeof *tgt);
    FUZZ_CHECK((mp_text_check(&t, T) == MP_OK) == (t.n_train >= T + 2 && t.n - t.n_train >= T + 2));
    mp_text_train_batch(&t, s, B, T, shuffle, seed, tok, tgt);
    for (size_t b = 0; b < B; b++) {
        if (t.n_train < T + 2) {
            FUZZ_CHECK(all_zero(tok + b * T, T) && all_zero(tgt + b * T, T));
            continue;
        }
        FUZZ_CHECK(row_bytes(tok + b * T, tgt + b * T, T, row) == 0);
        FUZZ_CHECK(memmem(t.data, t.n_train, row, T + 1) != NULL);
    }

    const size_t nv = t.n - t.n_train, nw = mp_text_val_windows(&t, T);
    FUZZ_CHECK(nw == (nv >= T + 1 ? (nv - T - 1) / T + 1 : 0));
    for (size_t w0 = 0; w0 <= nw && w0 < 64; w0 += B) {
        mp_text_val_batch(&t, w0, B, T, tok, tgt);
        for (size_t b = 0; b < B; b++) {
            if (w0 + b >= nw) {
                FUZZ_CHECK(all_zero(tok + b * T, T) && all_zero(tgt + b * T, T));
                continue;
            }
            FUZZ_CHECK(row_bytes(tok + b * T, tgt + b * T, T, row) == 0);
            FUZZ_CHECK(memcmp(row, t.data + t.n_train + (w0 + b) * T, T + 1) == 0);
        }
    }

    /* the sample judge, on the file itself and on its first half */
    const mp_text_quality q = mp_text_judge(&t, data, size), h = mp_text_judge(&t, data, size / 2);
    FUZZ_CHECK(q.bytes == size && q.printable <= q.bytes && q.found == q.words && h.found <= h.words);
    free(tok), free(tgt), free(row);
    mp_text_free(&t);
    return 0;
}
