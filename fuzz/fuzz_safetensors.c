/* fuzz_safetensors.c - mp_safetensors_read on any bytes: it fails cleanly
 * (zeroed result, a message), or the header is one JSON object followed by
 * nothing but whitespace, every tensor it returns has a known dtype, a shape
 * matching its byte count, and bytes inside the file's data section at
 * exactly the header's data_offsets, which tile the section (no gap, no
 * overlap, nothing after); names are unique; and writing the result with
 * mp_safetensors_write and reading that back gives the same tensors and
 * metadata. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>

#include "fuzz.h"

typedef struct {
    size_t begin, end;
} range;

static int cmp_range(const void *a, const void *b) {
    const range *x = a, *y = b;
    return (x->begin > y->begin) - (x->begin < y->begin);
}

static void same(const mp_safetensors *a, const mp_safetensors *b) {
    FUZZ_CHECK(a->count == b->count && a->nmeta == b->nmeta);
    for (size_t i = 0; i < a->count; i++) {
        const mp_tensor *x = &a->tensors[i], *y = mp_safetensors_find(b, x->name);
        FUZZ_CHECK(y && x->dtype == y->dtype && x->ndim == y->ndim && x->nbytes == y->nbytes);
        FUZZ_CHECK(memcmp(x->shape, y->shape, (size_t)x->ndim * sizeof x->shape[0]) == 0);
        FUZZ_CHECK(x->nbytes == 0 || memcmp(x->data, y->data, x->nbytes) == 0);
    }
    for (size_t i = 0; i < 2 * a->nmeta; i++) FUZZ_CHECK(strcmp(a->meta[i], b->meta[i]) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mp_safetensors s;
    if (mp_safetensors_read(fuzz_file(data, size), &s) != MP_OK) {
        FUZZ_CHECK(!s.tensors && !s.count && !s.meta && !s.nmeta && !s.buffer && mp_last_error()[0]);
        return 0;
    }
    FUZZ_CHECK(size >= 8);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | data[i];
    FUZZ_CHECK(hlen <= size - 8);
    const uint8_t *base = (const uint8_t *)s.buffer + 8 + hlen;
    const size_t datalen = size - 8 - (size_t)hlen;
    const char *end = NULL;
    cJSON *h = cJSON_ParseWithLengthOpts((const char *)data + 8, (size_t)hlen, &end, 0);
    FUZZ_CHECK(cJSON_IsObject(h) && end);
    for (; end < (const char *)data + 8 + hlen; end++) /* the padding */
        FUZZ_CHECK(*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r');
    range *r = malloc((s.count ? s.count : 1) * sizeof *r);
    FUZZ_CHECK(r);
    for (size_t i = 0; i < s.count; i++) {
        const mp_tensor *t = &s.tensors[i];
        const mp_format_info *f = mp_format(t->dtype);
        FUZZ_CHECK((f || t->dtype == MP_U8) && t->ndim >= 0 && t->ndim <= 4 && strlen(t->name) < sizeof t->name);
        FUZZ_CHECK(t->nbytes == mp_tensor_numel(t) * (f ? f->size : 1));
        const uint8_t *p = t->data;
        FUZZ_CHECK(p >= base && (size_t)(p - base) <= datalen && t->nbytes <= datalen - (size_t)(p - base));
        FUZZ_CHECK(memcmp(p, data + (p - (const uint8_t *)s.buffer), t->nbytes) == 0);
        FUZZ_CHECK(mp_safetensors_find(&s, t->name) == t);
        r[i] = (range){(size_t)(p - base), (size_t)(p - base) + t->nbytes};
        const cJSON *entry = cJSON_GetObjectItemCaseSensitive(h, t->name);
        const cJSON *of = cJSON_GetObjectItemCaseSensitive(entry, "data_offsets");
        FUZZ_CHECK(cJSON_GetArraySize(of) == 2 && cJSON_GetArrayItem(of, 0)->valuedouble == (double)r[i].begin &&
                   cJSON_GetArrayItem(of, 1)->valuedouble == (double)r[i].end);
    }
    cJSON_Delete(h);
    qsort(r, s.count, sizeof *r, cmp_range);
    size_t pos = 0;
    for (size_t i = 0; i < s.count; i++) {
        FUZZ_CHECK(r[i].begin == pos);
        pos = r[i].end;
    }
    FUZZ_CHECK(pos == datalen);
    free(r);
    for (size_t i = 0; i < s.nmeta; i++) FUZZ_CHECK(mp_safetensors_meta(&s, s.meta[2 * i]) == s.meta[2 * i + 1]);

    /* round trip through the writer */
    const char **meta = calloc(2 * s.nmeta + 1, sizeof *meta);
    FUZZ_CHECK(meta);
    for (size_t i = 0; i < 2 * s.nmeta; i++) meta[i] = s.meta[i];
    const char *path = fuzz_scratch("roundtrip.safetensors");
    FUZZ_CHECK(mp_safetensors_write(path, s.tensors, s.count, meta) == MP_OK);
    free(meta);
    mp_safetensors back;
    FUZZ_CHECK(mp_safetensors_read(path, &back) == MP_OK);
    same(&s, &back);
    mp_safetensors_free(&back);
    mp_safetensors_free(&s);
    return 0;
}
