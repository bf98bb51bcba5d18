/* data.c - IDX reader (zlib reads gzip and plain files alike) and Fashion-MNIST. */
#define _POSIX_C_SOURCE 200809L /* stat */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <zlib.h>

#include "internal.h"

static mp_status gz_fail(gzFile f, const char *path, const char *what) {
    int err = 0;
    const char *msg = gzerror(f, &err);
    return mp_error(err == Z_ERRNO || err == Z_OK ? MP_EIO : MP_ECORRUPT, "%s: %s%s%s", path, what,
                    err != Z_OK && err != Z_ERRNO ? ": " : "", err != Z_OK && err != Z_ERRNO ? msg : "");
}

/* The header: the magic, unsigned bytes, 1 to 4 dimensions and their sizes;
 * *total their product. */
static mp_status read_header(gzFile f, const char *path, uint32_t dims[4], int *ndim, size_t *total) {
    uint8_t head[4];
    int got = gzread(f, head, 4);
    if (got != 4)
        return got < 0 ? gz_fail(f, path, "cannot read the header")
                       : mp_error(MP_ECORRUPT, "%s: truncated header", path);
    if (head[0] != 0 || head[1] != 0)
        return mp_error(MP_ECORRUPT, "%s: not an IDX file (magic %02x %02x)", path, head[0], head[1]);
    if (head[2] != 0x08)
        return mp_error(MP_ECORRUPT, "%s: IDX element type 0x%02x, only unsigned bytes (0x08) are read", path, head[2]);
    if (head[3] < 1 || head[3] > 4) return mp_error(MP_ECORRUPT, "%s: %d dimensions (1 to 4 expected)", path, head[3]);
    *ndim = head[3];
    *total = 1;
    for (int i = 0; i < *ndim; i++) {
        uint8_t b[4];
        got = gzread(f, b, 4);
        if (got != 4)
            return got < 0 ? gz_fail(f, path, "cannot read the dimensions")
                           : mp_error(MP_ECORRUPT, "%s: truncated header", path);
        dims[i] = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
        if (dims[i] == 0 || dims[i] > (1u << 28) || *total > ((size_t)1 << 34) / dims[i])
            return mp_error(MP_ECORRUPT, "%s: dimension %d is %u", path, i, dims[i]);
        *total *= dims[i];
    }
    return MP_OK;
}

/* The total data bytes into *data. The header is not trusted with memory:
 * the buffer grows with the bytes that arrive (a 20-byte file claiming 2^34
 * bytes allocates 1 MiB). Then nothing may follow them. */
static mp_status read_data(gzFile f, const char *path, size_t total, uint8_t **data) {
    size_t cap = total < ((size_t)1 << 20) ? total : (size_t)1 << 20, have = 0;
    if (!(*data = malloc(cap))) return mp_error(MP_ENOMEM, "%s: out of memory for %zu bytes", path, cap);
    while (have < total) {
        if (have == cap) {
            cap = cap > total / 2 ? total : 2 * cap;
            uint8_t *more = realloc(*data, cap);
            if (!more) return mp_error(MP_ENOMEM, "%s: out of memory for %zu bytes", path, cap);
            *data = more;
        }
        const unsigned want = cap - have > (1u << 30) ? 1u << 30 : (unsigned)(cap - have);
        const int got = gzread(f, *data + have, want);
        if (got < 0) return gz_fail(f, path, "read error");
        if (got == 0) break;
        have += (size_t)got;
    }
    if (have < total) return mp_error(MP_ECORRUPT, "%s: truncated: %zu of %zu data bytes", path, have, total);
    uint8_t extra;
    const int got = gzread(f, &extra, 1);
    int zerr = Z_OK;
    if (got == 0) gzerror(f, &zerr); /* Z_BUF_ERROR: the gzip stream stops before its end (and its checksum) */
    if (got < 0) return gz_fail(f, path, "read error");
    if (got > 0) return mp_error(MP_ECORRUPT, "%s: trailing bytes after %zu data bytes", path, total);
    if (zerr == Z_BUF_ERROR)
        return mp_error(MP_ECORRUPT, "%s: truncated gzip stream (no checksum after the data)", path);
    return MP_OK;
}

mp_status mp_idx_read(const char *path, uint8_t **data, uint32_t dims[4], int *ndim) {
    if (!path || !data || !dims || !ndim) return mp_error(MP_EINVAL, "mp_idx_read: NULL argument");
    *data = NULL;
    mp_input in; /* a regular file (a FIFO or a device refused before it could block), read through zlib */
    mp_status st = mp_input_open(&in, NULL, path);
    if (st != MP_OK) return st;
    gzFile f = gzdopen(in.fd, "rb");
    if (!f) {
        mp_input_close(&in);
        return mp_error(MP_ENOMEM, "%s: out of memory for zlib's buffers", path);
    }
    size_t total = 0;
    st = read_header(f, path, dims, ndim, &total);
    if (st == MP_OK) st = read_data(f, path, total, data);
    if (st == MP_OK) st = mp_input_check(&in); /* a file that changed while read (zlib's reads are not counted) */
    gzclose(f);                                /* closes in.fd */
    if (st != MP_OK) {
        free(*data);
        *data = NULL;
    }
    return st;
}

void mp_dataset_free(mp_dataset *d) {
    if (!d) return;
    free(d->pixels);
    free(d->labels);
    memset(d, 0, sizeof *d);
}

mp_status mp_dataset_load(mp_dataset *d, const char *images_path, const char *labels_path) {
    memset(d, 0, sizeof *d);
    uint32_t di[4], dl[4];
    int ni, nl;
    mp_status st = mp_idx_read(images_path, &d->pixels, di, &ni);
    if (st != MP_OK) return st;
    if (ni != 3) {
        mp_dataset_free(d);
        return mp_error(MP_ECORRUPT, "%s: images need 3 dimensions (n, rows, cols), found %d", images_path, ni);
    }
    if ((st = mp_idx_read(labels_path, &d->labels, dl, &nl)) != MP_OK) {
        mp_dataset_free(d);
        return st;
    }
    if (nl != 1 || dl[0] != di[0]) {
        mp_dataset_free(d);
        return mp_error(MP_ECORRUPT, "%s: %u labels (%d-d) for %u images in %s", labels_path, dl[0], nl, di[0],
                        images_path);
    }
    d->n = di[0], d->rows = di[1], d->cols = di[2];
    int maxl = 0;
    for (size_t i = 0; i < d->n; i++) maxl = d->labels[i] > maxl ? d->labels[i] : maxl;
    d->num_classes = maxl + 1;
    return MP_OK;
}

/* dir/name or dir/name.gz, whichever exists (plain first; looked at, not
 * opened: mp_idx_read refuses what is not a regular file). */
static void find_file(char *out, size_t cap, const char *dir, const char *name) {
    snprintf(out, cap, "%s/%s", dir, name);
    struct stat sb;
    if (stat(out, &sb) == 0) return;
    snprintf(out, cap, "%s/%s.gz", dir, name);
}

mp_status mp_fashion_mnist_load(mp_dataset *train, mp_dataset *test, const char *dir) {
    if (!dir) dir = MP_FASHION_MNIST_DIR;
    char ti[1024], tl[1024], si[1024], sl[1024];
    find_file(ti, sizeof ti, dir, "train-images-idx3-ubyte");
    find_file(tl, sizeof tl, dir, "train-labels-idx1-ubyte");
    find_file(si, sizeof si, dir, "t10k-images-idx3-ubyte");
    find_file(sl, sizeof sl, dir, "t10k-labels-idx1-ubyte");
    if (test) memset(test, 0, sizeof *test); /* freeable whatever happens below */
    mp_status st = mp_dataset_load(train, ti, tl);
    if (st != MP_OK) return st;
    if ((st = mp_dataset_load(test, si, sl)) != MP_OK) {
        mp_dataset_free(train);
        return st;
    }
    if (train->rows != test->rows || train->cols != test->cols) {
        mp_status e = mp_error(MP_ECORRUPT, "%s: images are %zux%zu, the training set's %zux%zu", si, test->rows,
                               test->cols, train->rows, train->cols);
        mp_dataset_free(train), mp_dataset_free(test);
        return e;
    }
    return MP_OK;
}

typedef struct {
    const mp_dataset *d;
    const uint32_t *idx;
    float *x;
    int32_t *y;
    float scaled[256]; /* pixel / 255 in fp32, looked up (a division per pixel cost 0.3 ms a batch) */
} batch_job;

static void batch_rows(void *ctx, size_t b0, size_t b1, int t) {
    (void)t;
    const batch_job *j = ctx;
    const size_t D = j->d->rows * j->d->cols;
    for (size_t b = b0; b < b1; b++) {
        const uint8_t *p = j->d->pixels + (size_t)j->idx[b] * D;
        for (size_t k = 0; k < D; k++) j->x[b * D + k] = j->scaled[p[k]];
        j->y[b] = j->d->labels[j->idx[b]];
    }
}

void mp_dataset_batch(const mp_dataset *d, const uint32_t *idx, size_t B, float *x, int32_t *y) {
    batch_job j = {d, idx, x, y, {0}};
    for (int v = 0; v < 256; v++) j.scaled[v] = (float)v / 255.0f;
    mp_parallel_for(B, 64, 1, batch_rows, &j);
}
