/* test_text.c - byte-level corpora: which files a directory contributes and in
 * what order, the 90/10 split, every error, in-order and shuffled training
 * windows (exact offsets, determinism, range, uniformity), validation windows
 * and whole-word lookup. Files live in a mkdtemp directory, removed at the end. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "internal.h" /* mp_input_test_hook */

static char root[512];
static void remove_tree(const char *path);

static const char *p(const char *name) {
    static char path[4][1024];
    static int k;
    k = (k + 1) % 4;
    snprintf(path[k], sizeof path[k], "%s/%s", root, name);
    return path[k];
}

static void put(const char *name, const void *data, size_t n) {
    FILE *f = fopen(p(name), "wb");
    if (!f) {
        fprintf(stderr, "cannot create %s: %s\n", p(name), strerror(errno));
        remove_tree(root);
        exit(1);
    }
    if (n) fwrite(data, 1, n, f);
    fclose(f);
}
static void puts_file(const char *name, const char *s) { put(name, s, strlen(s)); }

static void mkdir_p(const char *name) {
    if (mkdir(p(name), 0755) != 0) {
        fprintf(stderr, "cannot create %s: %s\n", p(name), strerror(errno));
        remove_tree(root);
        exit(1);
    }
}

/* rm -r of a directory tree (links removed, never followed) */
static void remove_tree(const char *path) {
    struct stat sb;
    if (lstat(path, &sb) != 0) return;
    if (S_ISDIR(sb.st_mode)) {
        DIR *d = opendir(path);
        if (d) {
            const struct dirent *e;
            while ((e = readdir(d)) != NULL) {
                if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
                char sub[1024];
                snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
                remove_tree(sub);
            }
            closedir(d);
        }
        rmdir(path);
    } else {
        unlink(path);
    }
}

/* a fixed pseudo-random byte stream (splitmix64) */
static uint64_t rng_state;
static uint64_t rng(void) {
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static uint8_t *random_bytes(size_t n, uint64_t seed) {
    uint8_t *b = malloc(n);
    rng_state = seed;
    for (size_t i = 0; i < n; i++) b[i] = (uint8_t)(rng() >> 56);
    return b;
}

static int is_zeroed(const mp_text *t) { return !t->data && t->n == 0 && t->n_train == 0 && t->nfiles == 0; }

static void check_order(void) {
    puts_file("f1", "one\n");
    puts_file("f2", "two\n");
    mkdir_p("d");
    puts_file("d/b", "bbb");
    puts_file("d/a", "aa");
    puts_file("d/c.dat", "DAT");   /* fortunes index: skipped */
    puts_file("d/.hidden", "HID"); /* hidden: skipped */
    puts_file("d/xdat", "");       /* ends in "dat", not ".dat": read (empty) */
    mkdir_p("d/sub");              /* no recursion */
    puts_file("d/sub/x", "SUB");
    CHECK(symlink(p("f1"), p("d/ab")) == 0, "symlink: %s", strerror(errno)); /* symlink: skipped */
    CHECK(symlink(p("d/b"), p("link")) == 0, "symlink: %s", strerror(errno));

    char list[4096];
    snprintf(list, sizeof list, "%s,%s,%s", p("f2"), p("f1"), p("d"));
    mp_text t;
    CHECK(mp_text_load(&t, list) == MP_OK, "load: %s", mp_last_error());
    const char *want = "two\none\naabbb";
    CHECK(t.n == strlen(want) && memcmp(t.data, want, t.n) == 0, "contents '%.*s'", (int)t.n, (const char *)t.data);
    CHECK(t.nfiles == 5, "nfiles %zu (f2, f1, d/a, d/b, d/xdat)", t.nfiles);
    CHECK(t.n_train == 11, "n_train %zu of 13", t.n_train);
    mp_text_free(&t);
    CHECK(is_zeroed(&t), "free leaves t zeroed");
    mp_text_free(&t); /* twice: harmless */
    mp_text_free(NULL);

    /* a directory named with a trailing slash, the same directory twice, and a
     * symlink named explicitly (followed) */
    snprintf(list, sizeof list, "%s/,%s,%s", p("d"), p("d"), p("link"));
    CHECK(mp_text_load(&t, list) == MP_OK, "load: %s", mp_last_error());
    want = "aabbbaabbbbbb";
    CHECK(t.n == strlen(want) && memcmp(t.data, want, t.n) == 0, "contents '%.*s'", (int)t.n, (const char *)t.data);
    mp_text_free(&t);
}

static void check_split(void) {
    const struct {
        size_t n, train;
    } cases[] = {
        {1, 0}, {2, 1}, {9, 8}, {10, 9}, {11, 9}, {19, 17}, {20, 18}, {1000003, 900002},
    };
    uint8_t *bytes = random_bytes(1000003, 7);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        put("split", bytes, cases[c].n);
        mp_text t;
        CHECK(mp_text_load(&t, p("split")) == MP_OK, "load %zu: %s", cases[c].n, mp_last_error());
        CHECK(t.n == cases[c].n && t.n_train == cases[c].train && t.n_train == t.n * 9 / 10 && t.nfiles == 1,
              "n %zu: n_train %zu, want %zu", t.n, t.n_train, cases[c].train);
        CHECK(t.n == cases[c].n && memcmp(t.data, bytes, t.n) == 0, "n %zu: contents", cases[c].n);
        mp_text_free(&t);
    }
    free(bytes);
}

static void check_errors(void) {
    mp_text t;
    memset(&t, 0x5a, sizeof t);
    CHECK(mp_text_load(&t, p("missing")) == MP_EIO, "missing file");
    CHECK(strstr(mp_last_error(), p("missing")) && strstr(mp_last_error(), "cannot open") &&
              strstr(mp_last_error(), strerror(ENOENT)),
          "message '%s'", mp_last_error());
    CHECK(is_zeroed(&t), "t zeroed after a failure");

    char list[4096];
    snprintf(list, sizeof list, "%s,%s", p("f1"), p("nodir/x"));
    CHECK(mp_text_load(&t, list) == MP_EIO && strstr(mp_last_error(), "nodir/x") && is_zeroed(&t),
          "missing second entry: '%s'", mp_last_error());

    /* a dangling symlink named explicitly */
    CHECK(symlink(p("nowhere"), p("dangling")) == 0, "symlink: %s", strerror(errno));
    CHECK(mp_text_load(&t, p("dangling")) == MP_EIO && strstr(mp_last_error(), "dangling"), "dangling: '%s'",
          mp_last_error());

    /* empty corpora: an empty file, an empty directory, a directory of skipped entries */
    put("empty", "", 0);
    mkdir_p("emptydir");
    mkdir_p("skipdir");
    puts_file("skipdir/x.dat", "x");
    puts_file("skipdir/.x", "x");
    CHECK(symlink(p("f1"), p("skipdir/l")) == 0, "symlink: %s", strerror(errno));
    const char *empties[] = {"empty", "emptydir", "skipdir"};
    for (int i = 0; i < 3; i++) {
        CHECK(mp_text_load(&t, p(empties[i])) == MP_ECORRUPT && strstr(mp_last_error(), "is empty") && is_zeroed(&t),
              "%s: '%s'", empties[i], mp_last_error());
    }
    snprintf(list, sizeof list, "%s,%s,%s", p("empty"), p("emptydir"), p("skipdir"));
    CHECK(mp_text_load(&t, list) == MP_ECORRUPT, "all empty");

    /* empty entries in the list */
    const char *fmts[] = {"", ",", "%s,,%s", "%s,", ",%s", "%s,%s,"};
    for (int i = 0; i < 6; i++) {
        snprintf(list, sizeof list, fmts[i], p("f1"), p("f2"));
        CHECK(mp_text_load(&t, list) == MP_EINVAL && strstr(mp_last_error(), "empty entry") && is_zeroed(&t),
              "list '%s': '%s'", list, mp_last_error());
    }
    CHECK(mp_text_load(&t, NULL) == MP_EINVAL, "NULL list");
    CHECK(mp_text_load(NULL, p("f1")) == MP_EINVAL, "NULL corpus");

    /* short splits: n = 100 gives 90 + 10 bytes, enough for T = 8 (10 >= 8 + 2) only */
    uint8_t *bytes = random_bytes(100, 3);
    put("hundred", bytes, 100);
    free(bytes);
    CHECK(mp_text_load(&t, p("hundred")) == MP_OK, "load: %s", mp_last_error());
    CHECK(mp_text_check(&t, 8) == MP_OK, "T = 8: %s", mp_last_error());
    CHECK(mp_text_check(&t, 1) == MP_OK, "T = 1: %s", mp_last_error());
    CHECK(mp_text_check(&t, 9) == MP_EINVAL, "T = 9");
    CHECK(strstr(mp_last_error(), "corpus of 100 bytes") &&
              strstr(mp_last_error(), "validation split holds 10 bytes") && strstr(mp_last_error(), "T=9") &&
              strstr(mp_last_error(), "at least 11"),
          "message '%s'", mp_last_error());
    CHECK(mp_text_check(&t, 0) == MP_EINVAL, "T = 0");
    CHECK(mp_text_check(&t, SIZE_MAX) == MP_EINVAL, "T = SIZE_MAX");
    CHECK(mp_text_check(&t, SIZE_MAX - 2) == MP_EINVAL, "T = SIZE_MAX - 2");
    mp_text_free(&t);
    CHECK(mp_text_check(&t, 8) == MP_EINVAL, "no corpus");
    CHECK(mp_text_check(NULL, 8) == MP_EINVAL, "NULL corpus");

    /* n = 2: 1 + 1 bytes */
    put("two", "ab", 2);
    CHECK(mp_text_load(&t, p("two")) == MP_OK, "load: %s", mp_last_error());
    CHECK(mp_text_check(&t, 1) == MP_EINVAL && strstr(mp_last_error(), "validation split holds 1 bytes"), "'%s'",
          mp_last_error());
    mp_text_free(&t);
    /* the training split the short one (never so with a 90/10 split: a forged one) */
    CHECK(mp_text_load(&t, p("hundred")) == MP_OK, "load: %s", mp_last_error());
    t.n_train = 5;
    CHECK(mp_text_check(&t, 8) == MP_EINVAL && strstr(mp_last_error(), "training split holds 5 bytes") &&
              strstr(mp_last_error(), "at least 10"),
          "'%s'", mp_last_error());
    mp_text_free(&t);
}

/* the windows' reference formula, in 128-bit arithmetic */
__extension__ typedef unsigned __int128 u128;
static size_t ordered_ref(uint64_t s, size_t B, size_t b, size_t T, size_t m) {
    return (size_t)((((u128)s * B + b) * T) % m);
}

static void check_row(const mp_text *t, const int32_t *tok, const int32_t *tgt, size_t T, size_t o, const char *what,
                      uint64_t s, size_t b) {
    int ok = 1;
    for (size_t i = 0; i < T; i++) ok &= tok[i] == t->data[o + i] && tgt[i] == t->data[o + 1 + i];
    for (size_t i = 0; i + 1 < T; i++) ok &= tok[i + 1] == tgt[i];
    CHECK(ok, "%s: s %" PRIu64 " row %zu: not the window at %zu", what, s, b, o);
}

static void check_ordered(void) {
    const size_t n = 1000003;
    uint8_t *bytes = random_bytes(n, 11);
    put("big", bytes, n);
    free(bytes);
    mp_text t;
    CHECK(mp_text_load(&t, p("big")) == MP_OK, "load: %s", mp_last_error());
    const struct {
        uint64_t s;
        size_t B, T;
    } cases[] = {
        {0, 1, 1},
        {0, 4, 64},
        {1, 4, 64},
        {3, 8, 256},
        {439, 8, 256},    /* (439*8 + b)*256 passes m = 899746: wraps */
        {1000, 16, 1000}, /* wraps many times */
        {12345, 3, 7},
        {(1ull << 40) + 12345, 16, 64},
        {(1ull << 44) + 3, 16, 65536}, /* (s*B + b)*T above 2^64 */
        {1ull << 52, 64, 4096},        /* (s*B + b)*T above 2^70 */
        {UINT64_MAX, 7, 300},          /* s*B above 2^64 */
        {UINT64_MAX - 5, 16, 1000},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const size_t B = cases[c].B, T = cases[c].T, m = t.n_train - T;
        CHECK(mp_text_check(&t, T) == MP_OK, "check T %zu", T);
        int32_t *tok = malloc(B * T * sizeof *tok), *tgt = malloc(B * T * sizeof *tgt);
        mp_text_train_batch(&t, cases[c].s, B, T, 0, 99, tok, tgt);
        for (size_t b = 0; b < B; b++) {
            const size_t o = ordered_ref(cases[c].s, B, b, T, m);
            check_row(&t, tok + b * T, tgt + b * T, T, o, "in order", cases[c].s, b);
        }
        free(tok), free(tgt);
    }
    /* case {439, 8, 256} wraps inside the batch: row 0 at 899072, row 7 at 1118 */
    CHECK(t.n_train - 256 == 899746 && ordered_ref(439, 8, 0, 256, 899746) == 899072 &&
              ordered_ref(439, 8, 7, 256, 899746) == 1118,
          "the wrapping case");
    /* consecutive windows tile the split: micro-batch s row b follows row b-1 */
    int32_t tok[4 * 16], tgt[4 * 16];
    mp_text_train_batch(&t, 2, 4, 16, 0, 0, tok, tgt);
    for (size_t b = 0; b < 4; b++) check_row(&t, tok + b * 16, tgt + b * 16, 16, (2 * 4 + b) * 16, "tiles", 2, b);
    mp_text_free(&t);
}

/* Shuffled windows: the offset of every row is found back from its first 8
 * bytes, which are unique in a random corpus of this size. */
typedef struct key_off {
    uint64_t key;
    size_t off;
} key_off;
static int cmp_key(const void *a, const void *b) {
    const key_off *x = a, *y = b;
    return (x->key > y->key) - (x->key < y->key);
}
static uint64_t key_at(const int32_t *tok) {
    uint64_t k = 0;
    for (int i = 0; i < 8; i++) k = k << 8 | (uint8_t)tok[i];
    return k;
}

static void check_shuffled(void) {
    const size_t n = 200003, T = 16;
    uint8_t *bytes = random_bytes(n, 5);
    put("rand", bytes, n);
    free(bytes);
    mp_text t;
    CHECK(mp_text_load(&t, p("rand")) == MP_OK, "load: %s", mp_last_error());
    CHECK(mp_text_check(&t, T) == MP_OK, "check: %s", mp_last_error());
    const size_t m = t.n_train - T, nk = t.n - 8 + 1;
    key_off *keys = malloc(nk * sizeof *keys);
    for (size_t o = 0; o < nk; o++) {
        uint64_t k = 0;
        for (int i = 0; i < 8; i++) k = k << 8 | t.data[o + i];
        keys[o].key = k, keys[o].off = o;
    }
    qsort(keys, nk, sizeof *keys, cmp_key);
    int unique = 1;
    for (size_t i = 1; i < nk; i++) unique &= keys[i].key != keys[i - 1].key;
    CHECK(unique, "8-byte windows of the test corpus are unique");

    enum { B = 8, STEPS = 12500, NB = 16 }; /* 100k draws */
    int32_t *tok = malloc(B * T * sizeof *tok), *tgt = malloc(B * T * sizeof *tgt);
    int32_t *tok2 = malloc(B * T * sizeof *tok2), *tgt2 = malloc(B * T * sizeof *tgt2);
    size_t *offs = calloc((size_t)STEPS * B, sizeof *offs);
    long buckets[NB] = {0};
    long out_of_range = 0, lost = 0, not_same = 0, same_other_seed = 0, rows_equal = 0;
    for (uint64_t s = 0; s < STEPS; s++) {
        mp_text_train_batch(&t, s, B, T, 1, 42, tok, tgt);
        for (size_t b = 0; b < B; b++) {
            const key_off want = {key_at(tok + b * T), 0};
            const key_off *hit = bsearch(&want, keys, nk, sizeof *keys, cmp_key);
            if (!hit) {
                lost++;
                continue;
            }
            const size_t o = hit->off;
            offs[s * B + b] = o;
            if (o >= m) {
                out_of_range++;
                continue;
            }
            check_row(&t, tok + b * T, tgt + b * T, T, o, "shuffled", s, b);
            buckets[(uint64_t)o * NB / m]++;
            if (b && o == offs[s * B + b - 1]) rows_equal++;
        }
        if (s % 97 == 0) { /* the same windows again, and with another seed */
            mp_text_train_batch(&t, s, B, T, 1, 42, tok2, tgt2);
            not_same += memcmp(tok, tok2, B * T * sizeof *tok) != 0 || memcmp(tgt, tgt2, B * T * sizeof *tgt) != 0;
            mp_text_train_batch(&t, s, B, T, 1, 43, tok2, tgt2);
            for (size_t b = 0; b < B; b++) same_other_seed += memcmp(tok + b * T, tok2 + b * T, T * sizeof *tok) == 0;
        }
    }
    CHECK(lost == 0 && out_of_range == 0, "%ld windows not in the corpus, %ld past n_train - T", lost, out_of_range);
    CHECK(not_same == 0, "%ld batches differ for the same (seed, s, b)", not_same);
    CHECK(same_other_seed <= 2, "%ld windows equal under seeds 42 and 43", same_other_seed);
    CHECK(rows_equal <= 5, "%ld rows equal to the row before", rows_equal);

    /* the window of (seed, s, b) does not depend on B: row 3 of a batch of 4
     * is row 3 of a batch of 8 */
    mp_text_train_batch(&t, 777, 4, T, 1, 42, tok2, tgt2);
    int32_t *tok8 = malloc(8 * T * sizeof *tok8), *tgt8 = malloc(8 * T * sizeof *tgt8);
    mp_text_train_batch(&t, 777, 8, T, 1, 42, tok8, tgt8);
    CHECK(memcmp(tok2, tok8, 4 * T * sizeof *tok2) == 0 && memcmp(tgt2, tgt8, 4 * T * sizeof *tgt2) == 0,
          "B = 4 and B = 8 share their first rows");
    free(tok8), free(tgt8);

    /* uniform: chi-square over NB buckets, 100k draws, 15 degrees of freedom
     * (mean 15; the bound 60 is p ~ 1e-7; the draws are fixed, so no flakiness) */
    double chi2 = 0;
    const double expect = (double)STEPS * B / NB;
    for (int i = 0; i < NB; i++) chi2 += (buckets[i] - expect) * (buckets[i] - expect) / expect;
    CHECK(chi2 < 60, "chi-square %.1f over %d buckets", chi2, NB);
    /* both ends of the range are reached (the gaps average m / 100k = 1.8) */
    size_t lo = SIZE_MAX, hi = 0;
    for (size_t i = 0; i < (size_t)STEPS * B; i++) lo = offs[i] < lo ? offs[i] : lo, hi = offs[i] > hi ? offs[i] : hi;
    CHECK(lo < 100 && hi >= m - 100, "offsets drawn from %zu to %zu of [0, %zu)", lo, hi, m);

    free(tok), free(tgt), free(tok2), free(tgt2), free(offs), free(keys);
    mp_text_free(&t);

    /* a tiny range (m = 3): each offset a third of the time */
    uint8_t small[22];
    for (int i = 0; i < 22; i++) small[i] = (uint8_t)(100 + i);
    put("small", small, 22); /* n_train 19, T = 16, m = 3; validation 3 < 18: check fails, but windows are defined */
    CHECK(mp_text_load(&t, p("small")) == MP_OK, "load: %s", mp_last_error());
    CHECK(t.n_train == 19, "n_train %zu", t.n_train);
    long cnt[3] = {0}, bad = 0;
    int32_t a[16], c[16];
    for (uint64_t s = 0; s < 30000; s++) {
        mp_text_train_batch(&t, s, 1, 16, 1, 7, a, c);
        const long o = a[0] - 100;
        if (o < 0 || o > 2 || c[15] != 100 + o + 16) bad++;
        else cnt[o]++;
    }
    CHECK(bad == 0, "%ld windows out of range", bad);
    for (int i = 0; i < 3; i++) CHECK(cnt[i] > 9500 && cnt[i] < 10500, "offset %d drawn %ld times of 30000", i, cnt[i]);
    /* a context too long for the split: zeros, never a read past it */
    int32_t z[20 * 2], zt[20 * 2];
    memset(z, 1, sizeof z);
    memset(zt, 1, sizeof zt);
    mp_text_train_batch(&t, 0, 2, 18, 1, 7, z, zt);
    int zeros = 1;
    for (int i = 0; i < 36; i++) zeros &= z[i] == 0 && zt[i] == 0;
    CHECK(zeros, "T = 18 with n_train = 19: zero-filled");
    mp_text_free(&t);
}

static void check_val(void) {
    const size_t n = 1000;
    uint8_t *bytes = random_bytes(n, 13);
    put("val", bytes, n);
    free(bytes);
    mp_text t;
    CHECK(mp_text_load(&t, p("val")) == MP_OK, "load: %s", mp_last_error());
    CHECK(t.n_train == 900, "n_train %zu", t.n_train);
    /* validation split of 100 bytes: windows at w*T while w*T + T + 1 <= 100 */
    const struct {
        size_t T, count;
    } cases[] = {
        {1, 99}, {8, 12}, {9, 11}, {10, 9}, {33, 3}, {49, 2}, {50, 1}, {98, 1}, {99, 1}, {100, 0}, {0, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const size_t T = cases[c].T, got = mp_text_val_windows(&t, T);
        size_t want = 0;
        while (T && want * T + T + 1 <= 100) want++;
        CHECK(got == cases[c].count && got == want, "T %zu: %zu windows, want %zu", T, got, cases[c].count);
    }
    const size_t T = 8, B = 4;
    int32_t tok[4 * 8], tgt[4 * 8];
    for (size_t w0 = 0; w0 + B <= 12; w0 += 4) {
        mp_text_val_batch(&t, w0, B, T, tok, tgt);
        for (size_t b = 0; b < B; b++) check_row(&t, tok + b * T, tgt + b * T, T, 900 + (w0 + b) * T, "val", w0, b);
    }
    /* the last window (11, at 88) reads up to byte 88 + 8 of the split's 100 */
    mp_text_val_batch(&t, 11, 1, T, tok, tgt);
    CHECK(tok[0] == t.data[988] && tgt[T - 1] == t.data[996], "last window");
    /* a batch running past the last window: the rows past it are zeros */
    memset(tok, 0x7f, sizeof tok);
    mp_text_val_batch(&t, 10, B, T, tok, tgt);
    check_row(&t, tok, tgt, T, 900 + 80, "val", 10, 0);
    check_row(&t, tok + T, tgt + T, T, 900 + 88, "val", 10, 1);
    int zeros = 1;
    for (size_t i = 2 * T; i < B * T; i++) zeros &= tok[i] == 0 && tgt[i] == 0;
    CHECK(zeros, "rows past the last window are zero-filled");
    mp_text_free(&t);
    CHECK(mp_text_val_windows(&t, 8) == 0 && mp_text_val_windows(NULL, 8) == 0, "no corpus: no windows");
}

static void check_words(void) {
    puts_file("words", "hello world\nconcatenate the cat\tsat on\r\nthe mat; theory bathe\n\nend");
    mp_text t;
    CHECK(mp_text_load(&t, p("words")) == MP_OK, "load: %s", mp_last_error());
    const char *yes[] = {"hello", "world", "cat", "sat", "on", "the", "bathe", "end", "theory", "mat;", "hello world"};
    const char *no[] = {"hell",
                        "ello",
                        "hello world\nc",
                        "wor",
                        "ld",
                        "conca",
                        "catenate",
                        "at",
                        "mat",
                        "theor",
                        "heory",
                        "bath",
                        "athe",
                        "en",
                        "nd",
                        "xyz",
                        "the mat",
                        "e",
                        "concatenate the cat\tsat on\r\nthe mat; theory bathe\n\nend!"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
        CHECK(mp_text_has_word(&t, yes[i], strlen(yes[i])) == 1, "'%s' is a word", yes[i]);
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        CHECK(mp_text_has_word(&t, no[i], strlen(no[i])) == 0, "'%s' is not a word", no[i]);
    CHECK(mp_text_has_word(&t, "hello", 0) == 0, "empty word");
    CHECK(mp_text_has_word(&t, "catalog", 3) == 1, "length, not NUL, ends the word");
    /* the whole corpus: bounded by its two ends */
    CHECK(mp_text_has_word(&t, (const char *)t.data, t.n) == 1, "the whole corpus, bounded by its ends");

    /* judging a sample: 22 bytes, of which \t, \x01 and \r are not printable; words
     * "the", "cat\x01", "sat", "mat;", "ca" (split at space, tab, newline, CR) */
    const char *sample = " the\tcat\x01 sat\r\nmat; ca";
    mp_text_quality q = mp_text_judge(&t, (const uint8_t *)sample, strlen(sample));
    CHECK(q.bytes == 22 && q.printable == 19 && q.words == 5 && q.found == 3,
          "judge: %zu bytes, %zu printable, %zu words, %zu found", q.bytes, q.printable, q.words, q.found);
    q = mp_text_judge(&t, (const uint8_t *)"  \n", 3);
    CHECK(q.bytes == 3 && q.printable == 3 && q.words == 0 && q.found == 0, "judge: only spaces");
    q = mp_text_judge(&t, NULL, 5);
    CHECK(q.bytes == 0 && q.words == 0, "judge: no sample");
    mp_text_free(&t);
    q = mp_text_judge(NULL, (const uint8_t *)"the cat", 7);
    CHECK(q.bytes == 7 && q.printable == 7 && q.words == 2 && q.found == 0, "judge: no corpus finds no word");
    CHECK(mp_text_has_word(&t, "the", 3) == 0 && mp_text_has_word(NULL, "the", 3) == 0, "no corpus");

    puts_file("one", "abc");
    CHECK(mp_text_load(&t, p("one")) == MP_OK, "load: %s", mp_last_error());
    CHECK(mp_text_has_word(&t, "abc", 3) == 1 && mp_text_has_word(&t, "ab", 2) == 0 &&
              mp_text_has_word(&t, "bc", 2) == 0 && mp_text_has_word(&t, "abcd", 4) == 0,
          "one-word corpus");
    mp_text_free(&t);

    /* bytes, not C strings: a NUL inside the corpus and the word */
    put("nul", "x a\0b y", 7);
    CHECK(mp_text_load(&t, p("nul")) == MP_OK, "load: %s", mp_last_error());
    CHECK(mp_text_has_word(&t, "a\0b", 3) == 1 && mp_text_has_word(&t, "a", 1) == 0, "NUL bytes");
    mp_text_free(&t);
}

/* The default corpus, when the fortunes packages are installed (scripts/deps.sh). */
static void check_default(void) {
    mp_text t;
    const mp_status st = mp_text_load(&t, MP_TEXT_DEFAULT_CORPUS);
    if (st == MP_EIO) {
        printf("text: default corpus not installed (%s); skipped\n", mp_last_error());
        return;
    }
    CHECK(st == MP_OK, "default corpus: %s", mp_last_error());
    CHECK(t.nfiles == 6 && t.n > 500000 && t.n < 1000000, "default corpus: %zu files, %zu bytes", t.nfiles, t.n);
    CHECK(mp_text_check(&t, 256) == MP_OK, "default corpus, T = 256: %s", mp_last_error());
    CHECK(mp_text_has_word(&t, "the", 3) && !mp_text_has_word(&t, "zqxj", 4), "default corpus: words");
    printf("text: default corpus: %zu files, %zu bytes (%zu training)\n", t.nfiles, t.n, t.n_train);
    mp_text_free(&t);
}

/* ---- every input a regular file, unchanged while read (input.c, shared by
 * every reader: corpora, IDX files, safetensors, mp_read_file) ---- */

static int hook_mode; /* 1: truncate to half, 2: append a byte, 3: set the mtime; once (the fd is read-only: by path) */
static const char *hook_path;
static void change_by_path(int fd, uint64_t done) {
    (void)fd, (void)done;
    const int mode = hook_mode;
    hook_mode = 0;
    if (!mode) return;
    struct stat sb;
    if (stat(hook_path, &sb) != 0) return;
    if (mode == 1) CHECK(truncate(hook_path, sb.st_size / 2) == 0, "truncate %s", hook_path);
    if (mode == 2) {
        FILE *f = fopen(hook_path, "ab");
        CHECK(f && fputc('x', f) == 'x' && fclose(f) == 0, "append to %s", hook_path);
    }
    if (mode == 3) {
        const struct timespec t[2] = {{1000000000, 0}, {1000000000, 0}};
        CHECK(utimensat(AT_FDCWD, hook_path, t, 0) == 0, "touch %s", hook_path);
    }
}

static void check_inputs(void) {
    alarm(20); /* a reader that blocks fails the test (SIGALRM) instead of hanging it */
    mp_text t;
    CHECK(mkfifo(p("fifo"), 0600) == 0, "mkfifo");
    const char *const special[][2] = {{p("fifo"), "is a FIFO, not a regular file"},
                                      {"/dev/null", "/dev/null is a device, not a regular file"},
                                      {p("."), "is a directory, not a regular file"}};
    for (int k = 0; k < 3; k++) {
        if (k < 2) { /* a directory is a corpus of its files: IDX and safetensors only */
            mp_status st = mp_text_load(&t, special[k][0]);
            CHECK(st == MP_EIO && strstr(mp_last_error(), special[k][1]), "corpus %s: %s", special[k][0],
                  mp_last_error());
        }
        uint8_t *d = NULL;
        uint32_t dims[4];
        int nd;
        mp_status st = mp_idx_read(special[k][0], &d, dims, &nd);
        CHECK(st == MP_EIO && !d && strstr(mp_last_error(), special[k][1]), "IDX %s: %s", special[k][0],
              mp_last_error());
        mp_safetensors sf;
        st = mp_safetensors_read(special[k][0], &sf);
        CHECK(st == MP_EIO && strstr(mp_last_error(), special[k][1]), "safetensors %s: %s", special[k][0],
              mp_last_error());
        size_t n = 1;
        st = mp_read_file("--from", special[k][0], 1 << 20, &d, &n);
        CHECK(st == MP_EIO && !d && n == 0 && strstr(mp_last_error(), "--from ") &&
                  strstr(mp_last_error(), special[k][1]),
              "mp_read_file %s: %s", special[k][0], mp_last_error());
    }
    remove(p("fifo"));
    /* a 3 MiB corpus changed while it is read: cut to half, grown by a byte, rewritten (its mtime moved) */
    const size_t big = (size_t)3 << 20;
    uint8_t *text = malloc(big);
    for (size_t i = 0; i < big; i++) text[i] = (uint8_t)('a' + i % 26);
    static const char *const why[4] = {"", "changed while read: it ended after 1572864 of its 3145728 bytes",
                                       "changed while read: it grew past its 3145728 bytes",
                                       "changed while read (modified meanwhile"};
    static char big_path[1024], idx_path[1024];
    snprintf(big_path, sizeof big_path, "%s", p("big.txt")), snprintf(idx_path, sizeof idx_path, "%s", p("img.idx"));
    hook_path = big_path;
    mp_input_test_hook = change_by_path;
    for (int mode = 1; mode <= 3; mode++) {
        put("big.txt", text, big);
        hook_mode = mode;
        mp_status st = mp_text_load(&t, hook_path);
        CHECK(st == MP_EIO && strstr(mp_last_error(), why[mode]) && strstr(mp_last_error(), "big.txt"),
              "corpus changed while read (%d): %s", mode, mp_last_error());
        if (st == MP_OK) mp_text_free(&t);
        put("big.txt", text, big);
        hook_mode = mode;
        uint8_t *d = NULL;
        size_t n = 0;
        st = mp_read_file(NULL, hook_path, big + 1, &d, &n);
        CHECK(st == MP_EIO && !d && strstr(mp_last_error(), why[mode]), "mp_read_file changed (%d): %s", mode,
              mp_last_error());
        free(d);
    }
    /* an IDX file truncated under zlib's reads: refused (its header's size, or the size at the open) */
    const size_t nimg = 4096, side = 28;
    uint8_t *idx = malloc(16 + nimg * side * side);
    const uint8_t head[16] = {0, 0, 8, 3, 0, 0, nimg >> 8, nimg & 255, 0, 0, 0, side, 0, 0, 0, side};
    memcpy(idx, head, 16);
    for (size_t i = 16; i < 16 + nimg * side * side; i++) idx[i] = (uint8_t)i;
    hook_path = idx_path;
    for (int mode = 1; mode <= 3; mode += 2) {
        put("img.idx", idx, 16 + nimg * side * side);
        hook_mode = mode;
        uint8_t *d = NULL;
        uint32_t dims[4];
        int nd;
        mp_status st = mp_idx_read(hook_path, &d, dims, &nd);
        CHECK(st != MP_OK && !d && strstr(mp_last_error(), "img.idx") &&
                  (strstr(mp_last_error(), "changed while read") || strstr(mp_last_error(), "truncated")),
              "IDX changed while read (%d): %s", mode, mp_last_error());
        free(d);
    }
    /* unchanged, the same files read whole */
    mp_input_test_hook = NULL;
    put("big.txt", text, big);
    CHECK(mp_text_load(&t, p("big.txt")) == MP_OK && t.n == big && memcmp(t.data, text, big) == 0,
          "corpus read whole: %s", mp_last_error());
    mp_text_free(&t);
    uint8_t *d = NULL;
    uint32_t dims[4];
    int nd;
    CHECK(mp_idx_read(hook_path, &d, dims, &nd) == MP_OK && nd == 3 && dims[0] == nimg &&
              memcmp(d, idx + 16, nimg * side * side) == 0,
          "IDX read whole: %s", mp_last_error());
    free(d), free(idx), free(text);
    remove(p("big.txt")), remove(p("img.idx"));
    alarm(0);
}

int main(int argc, char **argv) {
    (void)argc, (void)argv;
    const char *tmp = getenv("TMPDIR");
    snprintf(root, sizeof root, "%s/mp_test_text_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(root)) {
        fprintf(stderr, "mkdtemp %s: %s\n", root, strerror(errno));
        return 1;
    }
    check_order();
    check_split();
    check_errors();
    check_ordered();
    check_shuffled();
    check_val();
    check_words();
    check_default();
    check_inputs();
    remove_tree(root);
    struct stat sb;
    CHECK(lstat(root, &sb) != 0, "%s removed", root);
    return check_report("text");
}
