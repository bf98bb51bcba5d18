/* text.c - byte-level text corpora: loading files and directories, the
 * train/validation split, training windows (in order or shuffled by a
 * stateless generator) and validation windows. */
#define _GNU_SOURCE /* memmem */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

/* ---- loading ---- */

typedef struct text_buf {
    uint8_t *data;
    size_t n, cap;
} text_buf;

static mp_status buf_reserve(text_buf *b, size_t more, const char *path) {
    if (more <= b->cap - b->n) return MP_OK;
    if (more > SIZE_MAX - b->n) return mp_error(MP_ENOMEM, "%s: the corpus does not fit in memory", path);
    size_t cap = b->cap ? b->cap : 65536;
    while (cap < b->n + more) cap = cap > SIZE_MAX / 2 ? b->n + more : 2 * cap;
    uint8_t *p = realloc(b->data, cap);
    if (!p) return mp_error(MP_ENOMEM, "%s: out of memory for %zu bytes", path, cap);
    b->data = p, b->cap = cap;
    return MP_OK;
}

/* Appends the whole of one regular file (mp_input_open: a FIFO, a device or a
 * socket refused before it could block), its size checked against what the
 * corpus may still take before anything is allocated; a file that shrinks,
 * grows or is rewritten while read is an error, not a shorter corpus. */
static mp_status append_file(text_buf *b, const char *path) {
    mp_input in;
    mp_status st = mp_input_open(&in, NULL, path);
    if (st != MP_OK) return st;
    if (in.size > MP_TEXT_MAX_BYTES - b->n)
        st = mp_error(MP_EINVAL, "%s: %llu bytes would make the corpus larger than %llu bytes", path,
                      (unsigned long long)in.size, (unsigned long long)MP_TEXT_MAX_BYTES);
    if (st == MP_OK) st = buf_reserve(b, (size_t)in.size + 1, path);
    if (st == MP_OK && (st = mp_input_read(&in, b->data + b->n, (size_t)in.size)) == MP_OK) {
        uint8_t extra; /* the byte past its size: none, or it grew */
        if (read(in.fd, &extra, 1) > 0)
            st = mp_error(MP_EIO, "%s: changed while read: it grew past its %llu bytes", path,
                          (unsigned long long)in.size);
    }
    if (st == MP_OK) st = mp_input_check(&in);
    if (st == MP_OK) b->n += (size_t)in.size;
    mp_input_close(&in);
    return st;
}

static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Whether a directory entry is one of the corpus's texts: not hidden, not a
 * *.dat index (the fortunes packages keep one beside every text). */
static int text_name(const char *name) {
    const size_t len = strlen(name);
    if (name[0] == '.') return 0;
    return !(len >= 4 && strcmp(name + len - 4, ".dat") == 0);
}

static char *join_path(const char *dir, const char *name) {
    const size_t a = strlen(dir), c = strlen(name);
    char *p = malloc(a + c + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    size_t k = a;
    if (a == 0 || dir[a - 1] != '/') p[k++] = '/';
    memcpy(p + k, name, c + 1);
    return p;
}

/* Appends the regular files of directory `dir` (lstat: symlinks are not
 * followed), in strcmp order of their names; no recursion. */
static mp_status append_dir(text_buf *b, const char *dir, size_t *nfiles) {
    DIR *d = opendir(dir);
    if (!d) return mp_error(MP_EIO, "%s: cannot open (%s)", dir, strerror(errno));
    char **paths = NULL;
    size_t np = 0, cap = 0;
    mp_status st = MP_OK;
    for (;;) {
        errno = 0;
        const struct dirent *e = readdir(d);
        if (!e) {
            if (errno) st = mp_error(MP_EIO, "%s: cannot read the directory (%s)", dir, strerror(errno));
            break;
        }
        if (!text_name(e->d_name)) continue;
        char *p = join_path(dir, e->d_name);
        if (!p) {
            st = mp_error(MP_ENOMEM, "%s: out of memory", dir);
            break;
        }
        struct stat sb;
        if (lstat(p, &sb) != 0) {
            st = mp_error(MP_EIO, "%s: cannot open (%s)", p, strerror(errno));
            free(p);
            break;
        }
        if (!S_ISREG(sb.st_mode)) {
            free(p);
            continue;
        }
        if (np == cap) {
            const size_t nc = cap ? 2 * cap : 16;
            char **q = realloc(paths, nc * sizeof *q);
            if (!q) {
                free(p);
                st = mp_error(MP_ENOMEM, "%s: out of memory", dir);
                break;
            }
            paths = q, cap = nc;
        }
        paths[np++] = p;
    }
    closedir(d);
    if (st == MP_OK) {
        /* full paths share the prefix dir + '/': their order is the names' */
        if (np > 1) qsort(paths, np, sizeof *paths, cmp_name);
        for (size_t i = 0; i < np && st == MP_OK; i++) {
            st = append_file(b, paths[i]);
            if (st == MP_OK) (*nfiles)++;
        }
    }
    for (size_t i = 0; i < np; i++) free(paths[i]);
    free(paths);
    return st;
}

static mp_status append_entry(text_buf *b, const char *path, size_t *nfiles) {
    struct stat sb;
    if (stat(path, &sb) != 0) return mp_error(MP_EIO, "%s: cannot open (%s)", path, strerror(errno));
    if (S_ISDIR(sb.st_mode)) return append_dir(b, path, nfiles);
    const mp_status st = append_file(b, path);
    if (st == MP_OK) (*nfiles)++;
    return st;
}

/* floor(0.9 n) without overflow: n = 10q + r gives 9q + floor(9r / 10). */
static size_t train_bytes(size_t n) { return n / 10 * 9 + n % 10 * 9 / 10; }

mp_status mp_text_load(mp_text *t, const char *paths) {
    if (!t) return mp_error(MP_EINVAL, "mp_text_load: NULL corpus");
    memset(t, 0, sizeof *t);
    if (!paths) return mp_error(MP_EINVAL, "mp_text_load: NULL path list");
    /* every entry of the list must be a path: no "", "a,,b", ",a" or "a," */
    for (const char *p = paths;; p++) {
        const char *e = strchr(p, ',');
        if ((e ? (size_t)(e - p) : strlen(p)) == 0)
            return mp_error(MP_EINVAL, "corpus '%s': an empty entry in the comma-separated list of paths", paths);
        if (!e) break;
        p = e;
    }
    char *list = malloc(strlen(paths) + 1);
    if (!list) return mp_error(MP_ENOMEM, "corpus '%s': out of memory", paths);
    strcpy(list, paths);
    text_buf b = {0};
    size_t nfiles = 0;
    mp_status st = MP_OK;
    for (char *p = list; p && st == MP_OK;) {
        char *e = strchr(p, ',');
        if (e) *e = '\0';
        st = append_entry(&b, p, &nfiles);
        p = e ? e + 1 : NULL;
    }
    free(list);
    if (st == MP_OK && b.n == 0)
        st = mp_error(MP_ECORRUPT, "corpus '%s' is empty (%zu files, no bytes)", paths, nfiles);
    if (st != MP_OK) {
        free(b.data);
        return st;
    }
    if (b.n < b.cap) { /* give back the slack of the doubling */
        uint8_t *q = realloc(b.data, b.n);
        if (q) b.data = q;
    }
    t->data = b.data;
    t->n = b.n;
    t->n_train = train_bytes(b.n);
    t->nfiles = nfiles;
    return MP_OK;
}

void mp_text_free(mp_text *t) {
    if (!t) return;
    free(t->data);
    memset(t, 0, sizeof *t);
}

mp_status mp_text_check(const mp_text *t, size_t T) {
    if (!t || !t->data) return mp_error(MP_EINVAL, "mp_text_check: no corpus loaded");
    if (T == 0) return mp_error(MP_EINVAL, "mp_text_check: the context T must be at least 1");
    const size_t nv = t->n - t->n_train;
    if (T > SIZE_MAX - 2 || nv < T + 2)
        return mp_error(MP_EINVAL,
                        "corpus of %zu bytes: the validation split holds %zu bytes, the context T=%zu needs at "
                        "least %zu",
                        t->n, nv, T, T > SIZE_MAX - 2 ? SIZE_MAX : T + 2);
    if (t->n_train < T + 2)
        return mp_error(MP_EINVAL,
                        "corpus of %zu bytes: the training split holds %zu bytes, the context T=%zu needs at least "
                        "%zu",
                        t->n, t->n_train, T, T + 2);
    return MP_OK;
}

/* ---- windows ---- */

/* The 128-bit product a * b as hi:lo, in portable C. */
static void mul64(uint64_t a, uint64_t b, uint64_t *hi, uint64_t *lo) {
    const uint64_t al = a & 0xffffffffu, ah = a >> 32, bl = b & 0xffffffffu, bh = b >> 32;
    const uint64_t ll = al * bl, lh = al * bh, hl = ah * bl, hh = ah * bh;
    const uint64_t mid = (ll >> 32) + (lh & 0xffffffffu) + (hl & 0xffffffffu);
    *lo = (mid << 32) | (ll & 0xffffffffu);
    *hi = hh + (lh >> 32) + (hl >> 32) + (mid >> 32);
}

/* (a + b) mod m and (a * b) mod m for a, b < m, exact for any m > 0. */
static uint64_t addmod(uint64_t a, uint64_t b, uint64_t m) { return a >= m - b ? a - (m - b) : a + b; }
static uint64_t mulmod(uint64_t a, uint64_t b, uint64_t m) {
    uint64_t r = 0;
    for (; b; b >>= 1) {
        if (b & 1) r = addmod(r, a, m);
        a = addmod(a, a, m);
    }
    return r;
}

/* Shuffled offset of row b of micro-batch s: a splitmix64 stream keyed by a
 * hash of (seed, s, b), mapped onto [0, m) by Lemire's multiply-high with
 * rejection ("Fast random integer generation in an interval", 2019): the
 * high word of x * m for a 64-bit x, redrawing x while the low word falls
 * below 2^64 mod m, which makes every offset exactly equally likely (a
 * redraw happens with probability below m / 2^64). */
static uint64_t shuffled_offset(uint64_t seed, uint64_t s, uint64_t b, uint64_t m) {
    const uint64_t key = mp_mix64(mp_mix64(mp_mix64(seed ^ 0x243f6a8885a308d3ull) ^ s) ^ b);
    uint64_t ctr = key, hi, lo;
    mul64(mp_splitmix64(&ctr), m, &hi, &lo);
    if (lo < m) {
        const uint64_t thresh = (0 - m) % m; /* 2^64 mod m */
        while (lo < thresh) mul64(mp_splitmix64(&ctr), m, &hi, &lo);
    }
    return hi;
}

/* In-order offset ((s*B + b) * T) mod m, exact for every 64-bit s. */
static uint64_t ordered_offset(uint64_t s, uint64_t B, uint64_t b, uint64_t T, uint64_t m) {
    const uint64_t row = addmod(mulmod(s % m, B % m, m), b % m, m);
    return mulmod(row, T % m, m);
}

static void fill_row(const uint8_t *src, size_t T, int32_t *tokens, int32_t *targets) {
    for (size_t i = 0; i < T; i++) tokens[i] = src[i], targets[i] = src[i + 1];
}

void mp_text_train_batch(const mp_text *t, uint64_t s, size_t B, size_t T, int shuffle, uint64_t seed, int32_t *tokens,
                         int32_t *targets) {
    if (!t || !t->data || T == 0 || t->n_train < T + 2) { /* mp_text_check fails: defined output all the same */
        if (B && T) {
            memset(tokens, 0, B * T * sizeof *tokens);
            memset(targets, 0, B * T * sizeof *targets);
        }
        return;
    }
    const uint64_t m = (uint64_t)(t->n_train - T);
    for (size_t b = 0; b < B; b++) {
        const uint64_t o = shuffle ? shuffled_offset(seed, s, b, m) : ordered_offset(s, B, b, T, m);
        fill_row(t->data + o, T, tokens + b * T, targets + b * T);
    }
}

size_t mp_text_val_windows(const mp_text *t, size_t T) {
    if (!t || !t->data || T == 0) return 0;
    const size_t nv = t->n - t->n_train;
    return nv < T + 1 || T == SIZE_MAX ? 0 : (nv - T - 1) / T + 1;
}

void mp_text_val_batch(const mp_text *t, size_t w0, size_t B, size_t T, int32_t *tokens, int32_t *targets) {
    const size_t nw = mp_text_val_windows(t, T);
    for (size_t b = 0; b < B; b++) {
        if (w0 < nw && b < nw - w0) {
            fill_row(t->data + t->n_train + (w0 + b) * T, T, tokens + b * T, targets + b * T);
        } else if (T) {
            memset(tokens + b * T, 0, T * sizeof *tokens);
            memset(targets + b * T, 0, T * sizeof *targets);
        }
    }
}

/* ---- words ---- */

static int is_space(uint8_t c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

int mp_text_has_word(const mp_text *t, const char *w, size_t len) {
    if (!t || !t->data || !w || len == 0 || len > t->n) return 0;
    const uint8_t *d = t->data, *end = t->data + t->n;
    for (const uint8_t *p = d; (size_t)(end - p) >= len;) {
        const uint8_t *h = memmem(p, (size_t)(end - p), w, len);
        if (!h) return 0;
        if ((h == d || is_space(h[-1])) && (h + len == end || is_space(h[len]))) return 1;
        p = h + 1;
    }
    return 0;
}

mp_text_quality mp_text_judge(const mp_text *t, const uint8_t *s, size_t n) {
    mp_text_quality q = {0, 0, 0, 0};
    if (!s) return q;
    q.bytes = n;
    for (size_t i = 0; i < n; i++) q.printable += (s[i] >= 0x20 && s[i] < 0x7f) || s[i] == '\n';
    for (size_t i = 0; i < n;) {
        if (is_space(s[i])) {
            i++;
            continue;
        }
        size_t j = i;
        while (j < n && !is_space(s[j])) j++;
        q.words++;
        q.found += (size_t)mp_text_has_word(t, (const char *)s + i, j - i);
        i = j;
    }
    return q;
}
