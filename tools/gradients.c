/* gradients.c - gradient magnitude sets: drawn or read from a file. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gradients.h"

int grads_lognormal(grad_set *s, double mu, double sigma, size_t n, uint64_t seed) {
    s->g = malloc(n * sizeof *s->g), s->n = n;
    if (!s->g) return -1;
    uint64_t r = seed * 0x9e3779b97f4a7c15ull + 0x2545f4914f6cdd1dull;
    for (size_t i = 0; i < n; i += 2) {
        double u[2];
        for (int k = 0; k < 2; k++) {
            r ^= r << 13;
            r ^= r >> 7;
            r ^= r << 17;
            u[k] = ((double)(r >> 11) + 0.5) * 0x1p-53;
        }
        const double m = sqrt(-2.0 * log(u[0])), a = 6.283185307179586 * u[1];
        s->g[i] = (float)exp(mu + sigma * m * cos(a));
        if (i + 1 < n) s->g[i + 1] = (float)exp(mu + sigma * m * sin(a));
    }
    /* the far tail may leave fp32's range: those draws are dropped */
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(s->g[i])) s->g[k++] = s->g[i];
    s->n = k;
    return 0;
}

void grads_free(grad_set *s) {
    free(s->g);
    s->g = NULL, s->n = 0;
}

/* Keeps |x| of the n finite float32 values at p (any alignment); -1 if none. */
static int keep(grad_set *s, const void *p, size_t n) {
    s->g = malloc((n ? n : 1) * sizeof *s->g), s->n = 0;
    if (!s->g) return -1;
    for (size_t i = 0; i < n; i++) {
        float v;
        memcpy(&v, (const uint8_t *)p + 4 * i, 4);
        if (isfinite(v)) s->g[s->n++] = fabsf(v);
    }
    if (s->n == 0) grads_free(s);
    return s->n ? 0 : -1;
}

/* A .npy header as numpy reads it: a Python dict literal with exactly the
 * keys 'descr' (a string), 'fortran_order' (True or False) and 'shape' (a
 * tuple of integers), each once (Python would keep the last of a repeated
 * key; here a repeat is refused), spaces between tokens, a trailing comma
 * allowed. 0, or -1 with the reason in why. */
typedef struct {
    char descr[32];
    int fortran;
    size_t count; /* the shape's product */
} npy_header;

static void npy_space(const char **p) {
    while (**p == ' ' || **p == '\t' || **p == '\n' || **p == '\r') (*p)++;
}

/* A quoted Python string (no escapes: numpy writes none) into out; -1 if malformed. */
static int npy_string(const char **p, char *out, size_t cap) {
    const char q = **p;
    if (q != '\'' && q != '"') return -1;
    const char *e = strchr(*p + 1, q);
    if (!e || memchr(*p + 1, '\\', (size_t)(e - *p - 1))) return -1;
    snprintf(out, cap, "%.*s", (int)(e - *p - 1), *p + 1);
    *p = e + 1;
    return 0;
}

static int npy_parse(const char *h, npy_header *out, char *why, size_t whylen) {
    static const char *const keys[3] = {"descr", "fortran_order", "shape"};
    int seen[3] = {0, 0, 0};
    memset(out, 0, sizeof *out);
    const char *p = h;
    npy_space(&p);
    if (*p++ != '{') return snprintf(why, whylen, "the header is not a dict"), -1;
    for (;;) {
        npy_space(&p);
        if (*p == '}') break;
        char key[64];
        if (npy_string(&p, key, sizeof key) != 0)
            return snprintf(why, whylen, "a key of the header is not a string"), -1;
        int k = 0;
        while (k < 3 && strcmp(key, keys[k]) != 0) k++;
        if (k == 3)
            return snprintf(why, whylen, "the header has the key '%.40s' (numpy's are descr, fortran_order, shape)",
                            key),
                   -1;
        if (seen[k]++) return snprintf(why, whylen, "the header gives '%s' twice", key), -1;
        npy_space(&p);
        if (*p++ != ':') return snprintf(why, whylen, "no ':' after '%s' in the header", key), -1;
        npy_space(&p);
        if (k == 0) {
            if (*p == '[') return snprintf(why, whylen, "'descr' is a structured dtype (a list of fields)"), -1;
            if (npy_string(&p, out->descr, sizeof out->descr) != 0)
                return snprintf(why, whylen, "'descr' is not a string"), -1;
        } else if (k == 1) {
            if (!strncmp(p, "True", 4)) out->fortran = 1, p += 4;
            else if (!strncmp(p, "False", 5)) p += 5;
            else return snprintf(why, whylen, "'fortran_order' is neither True nor False"), -1;
        } else {
            if (*p++ != '(') return snprintf(why, whylen, "'shape' is not a tuple"), -1;
            size_t n = 1;
            int dims = 0;
            for (;;) {
                npy_space(&p);
                if (*p == ')') break;
                if (*p < '0' || *p > '9')
                    return snprintf(why, whylen, "'shape' holds something other than integers"), -1;
                size_t d = 0;
                for (; *p >= '0' && *p <= '9'; p++) {
                    if (d > ((size_t)1 << 40)) return snprintf(why, whylen, "'shape' is too large"), -1;
                    d = 10 * d + (size_t)(*p - '0');
                }
                if (d && n > ((size_t)1 << 40) / d) return snprintf(why, whylen, "'shape' is too large"), -1;
                n *= d, dims++;
                npy_space(&p);
                if (*p == ',') p++;
                else if (*p != ')') return snprintf(why, whylen, "'shape' is not a tuple of integers"), -1;
            }
            p++;
            if (dims > 32)
                return snprintf(why, whylen, "'shape' has %d dimensions (numpy allows 32 at most)", dims), -1;
            out->count = n;
        }
        npy_space(&p);
        if (*p == ',') p++;
        else if (*p != '}') return snprintf(why, whylen, "no ',' or '}' after '%s' in the header", key), -1;
    }
    for (int k = 0; k < 3; k++)
        if (!seen[k]) return snprintf(why, whylen, "the header has no '%s'", keys[k]), -1;
    return 0;
}

/* A safetensors file's F32, F16 and BF16 tensors, back to back. */
static int read_safetensors(grad_set *s, const char *path, char *err, size_t errlen) {
    mp_safetensors st;
    if (mp_safetensors_read(path, &st) != MP_OK) return snprintf(err, errlen, "%s", mp_last_error()), -1;
    size_t total = 0;
    for (size_t i = 0; i < st.count; i++)
        if (st.tensors[i].dtype == MP_F32 || st.tensors[i].dtype == MP_F16 || st.tensors[i].dtype == MP_BF16)
            total += mp_tensor_numel(&st.tensors[i]);
    float *v = malloc((total ? total : 1) * sizeof *v);
    size_t off = 0;
    for (size_t i = 0; v && i < st.count; i++) {
        const mp_tensor *t = &st.tensors[i];
        if (t->dtype != MP_F32 && t->dtype != MP_F16 && t->dtype != MP_BF16) continue;
        mp_convert(v + off, MP_F32, t->data, t->dtype, mp_tensor_numel(t), NULL);
        off += mp_tensor_numel(t);
    }
    mp_safetensors_free(&st);
    const int rc = v ? keep(s, v, total) : -1;
    free(v);
    if (rc) return snprintf(err, errlen, "%s: no finite F32/F16/BF16 values", path), -1;
    return 0;
}

/* An .npy file's values (b: its size bytes): float32, float16 or float64, C or Fortran order. */
static int read_npy(grad_set *s, const char *path, const uint8_t *b, size_t size, char *err, size_t errlen) {
    if (size >= 7 && (b[6] < 1 || b[6] > 3))
        return snprintf(err, errlen, "%s: .npy version %d (1 to 3 are read)", path, b[6]), -1;
    const size_t ho = size >= 7 && b[6] == 1 ? 10 : 12;
    if (size < ho) return snprintf(err, errlen, "%s: truncated .npy header", path), -1;
    const size_t hl =
        ho == 10 ? (size_t)(b[8] | b[9] << 8) : (size_t)(b[8] | b[9] << 8 | b[10] << 16 | (size_t)b[11] << 24);
    if (hl > size - ho) return snprintf(err, errlen, "%s: truncated .npy header", path), -1;
    char *hdr = malloc(hl + 1);
    if (!hdr) return snprintf(err, errlen, "%s: out of memory", path), -1;
    memcpy(hdr, b + ho, hl);
    hdr[hl] = 0;
    npy_header h;
    char why[160];
    const int parsed = npy_parse(hdr, &h, why, sizeof why);
    free(hdr);
    if (parsed != 0) return snprintf(err, errlen, "%s: .npy header: %s", path, why), -1;
    const size_t body = size - ho - hl, count = h.count;
    const uint8_t *p = b + ho + hl;
    const char *d = h.descr; /* numpy's '=' and '<' are both little-endian on the machines mixprec runs on */
    const int le = d[0] == '<' || d[0] == '=', be = d[0] == '>'; /* big-endian ('>'): read byte-swapped */
    const int ok = le || be;
    const size_t es = ok && !strcmp(d + 1, "f4")   ? 4
                      : ok && !strcmp(d + 1, "f2") ? 2
                      : ok && !strcmp(d + 1, "f8") ? 8
                                                   : 0;
    if (!es && strchr(d, 'O'))
        return snprintf(err, errlen,
                        "%s: .npy dtype '%s' is Python objects (pickled): not read (float32, float16 or "
                        "float64 are)",
                        path, d),
               -1;
    if (!es) return snprintf(err, errlen, "%s: .npy dtype '%s' (float32, float16 or float64 are read)", path, d), -1;
    if (count > body / es) /* short: numpy refuses it too; bytes after the data it ignores, as here */
        return snprintf(err, errlen, "%s: %zu bytes of .npy data for a shape of %zu '%s' values", path, body, count, d),
               -1;
    /* fortran_order: True changes only the values' order, which a set of magnitudes does not have: read as well */
    int rc;
    if (es == 4 && !be) rc = keep(s, p, count);
    else {
        float *v = malloc((count ? count : 1) * sizeof *v);
        for (size_t i = 0; v && i < count; i++) {
            uint8_t q[8]; /* the value's bytes, least significant first */
            for (size_t k = 0; k < es; k++) q[k] = p[es * i + (be ? es - 1 - k : k)];
            if (es == 2) v[i] = mp_f16_to_f32((uint16_t)(q[0] | q[1] << 8));
            else if (es == 4) memcpy(&v[i], q, 4);
            else {
                double x;
                memcpy(&x, q, 8);
                v[i] = (float)x;
            }
        }
        rc = v ? keep(s, v, count) : -1;
        free(v);
    }
    if (rc) return snprintf(err, errlen, "%s: no finite values", path), -1;
    return 0;
}

/* A safetensors file's first bytes: a little-endian 64-bit header length that fits the file, then '{'. */
static int looks_safetensors(const uint8_t *b, size_t size) {
    if (size < 9) return 0;
    uint64_t n = 0;
    for (int k = 7; k >= 0; k--) n = n << 8 | b[k];
    return n >= 2 && n <= size - 8 && b[8] == '{';
}

int grads_read(grad_set *s, const char *path, int raw, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    uint8_t *b;
    size_t n;
    if (mp_read_file("--from", path, (size_t)1 << 40, &b, &n) != MP_OK) /* a regular file, unchanged while read */
        return snprintf(err, errlen, "%s", mp_last_error()), -1;
    if (n == 0) return free(b), snprintf(err, errlen, "--from %s: an empty file", path), -1;
    const long size = (long)n;
    int rc;
    if (size >= 6 && memcmp(b, "\x93NUMPY", 6) == 0) rc = read_npy(s, path, b, (size_t)size, err, errlen);
    else if (looks_safetensors(b, (size_t)size)) rc = read_safetensors(s, path, err, errlen);
    else if (!raw)
        rc = (snprintf(err, errlen,
                       "%s: neither .npy nor safetensors by its bytes (raw little-endian float32 is read "
                       "with --raw)",
                       path),
              -1);
    else if (size % 4)
        rc = (snprintf(err, errlen, "%s: %ld bytes is not a whole number of float32 values", path, size), -1);
    else if ((rc = keep(s, b, (size_t)size / 4)) != 0) rc = (snprintf(err, errlen, "%s: no finite values", path), -1);
    free(b);
    return rc;
}
