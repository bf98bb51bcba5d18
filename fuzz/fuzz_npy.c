/* fuzz_npy.c - the .npy reader of `mixprec underflow --from` (tools/
 * gradients.c) on any bytes. When it succeeds on a file that starts with
 * numpy's magic, the file is a version 1-3 .npy of a little-endian float
 * dtype (C or Fortran order) whose data section holds at least its shape's
 * elements, and the values read are the magnitudes of its finite elements,
 * in the file's order;
 * a file without the magic is raw fp32 and read the same way. */
#define _GNU_SOURCE
#include <math.h>

#include "fuzz.h"
#include "gradients.h"

/* Where the value of key begins in a header ('key' or "key", spaces, ':',
 * spaces), or NULL; the reader refuses a key given twice, so the first is it. */
static const char *value_of(const char *hdr, const char *key) {
    const size_t k = strlen(key);
    for (const char *p = hdr; (p = strstr(p, key)) != NULL; p++) {
        if (p == hdr || (p[-1] != '\'' && p[-1] != '"') || p[k] != p[-1]) continue;
        const char *v = p + k + 1;
        while (*v == ' ' || *v == '\t' || *v == '\n' || *v == '\r') v++;
        if (*v++ != ':') continue;
        while (*v == ' ' || *v == '\t' || *v == '\n' || *v == '\r') v++;
        return v;
    }
    return NULL;
}

/* The element count of a header's 'shape': (d0, d1, ...) or -1. */
static long long shape_count(const char *hdr) {
    const char *p = value_of(hdr, "shape");
    if (!p || *p++ != '(') return -1;
    long long n = 1;
    while (*p != ')') {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
        if (*p == ')') break;
        if (*p < '0' || *p > '9') return -1;
        long long d = 0;
        for (; *p >= '0' && *p <= '9'; p++) {
            if (d > (1LL << 40)) return -1;
            d = 10 * d + (*p - '0');
        }
        if (d && n > (1LL << 40) / d) return -1;
        n *= d;
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
        if (*p == ',') p++;
        else if (*p != ')') return -1;
    }
    return n;
}

/* Element i of the data as fp32, as the reader converts it. */
static float element(const uint8_t *p, size_t es, size_t i, int big) {
    uint8_t q[8]; /* least significant byte first */
    for (size_t k = 0; k < es; k++) q[k] = p[es * i + (big ? es - 1 - k : k)];
    if (es == 2) return mp_f16_to_f32((uint16_t)(q[0] | q[1] << 8));
    if (es == 8) {
        double x;
        memcpy(&x, q, 8);
        return (float)x;
    }
    float x;
    memcpy(&x, q, 4);
    return x;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    grad_set s;
    char err[512] = "";
    if (grads_read(&s, fuzz_file(data, size), 1, err, sizeof err) != 0) {
        FUZZ_CHECK(!s.g && !s.n && err[0]);
        return 0;
    }
    uint64_t hl8 = 0; /* a safetensors file by its bytes: read by mp_safetensors_read (fuzz_safetensors) */
    for (int k = 7; size >= 9 && k >= 0; k--) hl8 = hl8 << 8 | data[k];
    if (!(size >= 6 && memcmp(data, "\x93NUMPY", 6) == 0) && size >= 9 && hl8 >= 2 && hl8 <= size - 8 &&
        data[8] == '{') {
        grads_free(&s);
        return 0;
    }
    const uint8_t *body = data;
    size_t es = 4, count = size / 4;
    int big = 0;
    if (size >= 6 && memcmp(data, "\x93NUMPY", 6) == 0) {
        FUZZ_CHECK(size >= 10 && data[6] >= 1 && data[6] <= 3);
        const size_t ho = data[6] == 1 ? 10 : 12;
        FUZZ_CHECK(size >= ho);
        size_t hl = (size_t)data[8] | (size_t)data[9] << 8;
        if (ho == 12) hl |= (size_t)data[10] << 16 | (size_t)data[11] << 24;
        FUZZ_CHECK(hl <= size - ho);
        char *hdr = malloc(hl + 1);
        FUZZ_CHECK(hdr);
        memcpy(hdr, data + ho, hl);
        hdr[hl] = 0;
        const char *d = value_of(hdr, "descr"); /* C or Fortran order: the same set of values */
        FUZZ_CHECK(d && (*d == '\'' || *d == '"') && (d[1] == '<' || d[1] == '=' || d[1] == '>') && d[4] == d[0]);
        d += 1;
        big = *d == '>';
        es = !strncmp(d + 1, "f4", 2) ? 4 : !strncmp(d + 1, "f2", 2) ? 2 : !strncmp(d + 1, "f8", 2) ? 8 : 0;
        const long long n = shape_count(hdr);
        free(hdr);
        FUZZ_CHECK(es && n >= 0);
        body = data + ho + hl, count = (size_t)n;
        FUZZ_CHECK(size - ho - hl >= count * es);
    } else {
        FUZZ_CHECK(size % 4 == 0);
    }
    size_t k = 0;
    for (size_t i = 0; i < count; i++) {
        const float v = element(body, es, i, big);
        if (!isfinite(v)) continue;
        FUZZ_CHECK(k < s.n && memcmp(&s.g[k], &(float){fabsf(v)}, 4) == 0);
        k++;
    }
    FUZZ_CHECK(k == s.n && k > 0);
    grads_free(&s);
    return 0;
}
