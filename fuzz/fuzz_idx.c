/* fuzz_idx.c - mp_idx_read (Fashion-MNIST's IDX files, plain or gzip) on any
 * bytes: it fails cleanly (*data NULL, a message), or it returns 1 to 4
 * nonzero dimensions whose product is the number of bytes returned, and the
 * header written back from them followed by those bytes is the file (for a
 * gzip file: what zlib inflates from it), exactly, with nothing after. A
 * header is not trusted with memory: failing for lack of it is a finding. */
#define _GNU_SOURCE
#include <zlib.h>

#include "fuzz.h"

/* The bytes a gzip file holds: its members, one after another, up to the
 * first thing that is not a member (ignored, as zlib's gzread does); NULL if
 * a member is damaged. *n gets the length. */
static uint8_t *gunzip(const uint8_t *data, size_t size, size_t *n) {
    size_t cap = 4 * size + 64;
    uint8_t *out = malloc(cap);
    z_stream z;
    memset(&z, 0, sizeof z);
    if (!out || inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) return free(out), NULL;
    z.next_in = (uint8_t *)data, z.avail_in = (uInt)size;
    *n = 0;
    while (z.avail_in >= 2 && z.next_in[0] == 0x1f && z.next_in[1] == 0x8b) {
        int r = Z_OK;
        while (r == Z_OK) {
            if (*n == cap) {
                uint8_t *q = realloc(out, cap *= 2);
                if (!q) break;
                out = q;
            }
            z.next_out = out + *n, z.avail_out = (uInt)(cap - *n);
            r = inflate(&z, Z_NO_FLUSH);
            *n = cap - z.avail_out;
        }
        if (r != Z_STREAM_END) {
            inflateEnd(&z);
            return free(out), NULL;
        }
        inflateReset(&z);
    }
    inflateEnd(&z);
    return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static uint8_t sentinel;
    uint8_t *v = &sentinel; /* a failure must set it to NULL */
    uint32_t dims[4];
    int ndim = 0;
    const mp_status st = mp_idx_read(fuzz_file(data, size), &v, dims, &ndim);
    if (st != MP_OK) {
        /* an input gets 2 GiB (replay.c, libFuzzer): a small file must not need more */
        FUZZ_CHECK(!v && mp_last_error()[0] && st != MP_ENOMEM);
        return 0;
    }
    FUZZ_CHECK(v && ndim >= 1 && ndim <= 4);
    size_t total = 1;
    for (int i = 0; i < ndim; i++) {
        FUZZ_CHECK(dims[i] > 0);
        total *= dims[i];
    }
    size_t n = size;
    const int gz = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
    uint8_t *plain = gz ? gunzip(data, size, &n) : (uint8_t *)data;
    FUZZ_CHECK(plain);
    const size_t head = 4 + 4 * (size_t)ndim;
    FUZZ_CHECK(n == head + total && plain[0] == 0 && plain[1] == 0 && plain[2] == 0x08 && plain[3] == ndim);
    for (int i = 0; i < ndim; i++)
        FUZZ_CHECK(dims[i] == ((uint32_t)plain[4 + 4 * i] << 24 | (uint32_t)plain[5 + 4 * i] << 16 |
                               (uint32_t)plain[6 + 4 * i] << 8 | plain[7 + 4 * i]));
    FUZZ_CHECK(memcmp(v, plain + head, total) == 0);
    if (gz) free(plain);
    free(v);
    return 0;
}
