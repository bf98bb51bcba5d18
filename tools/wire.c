/* wire.c - the gradients' 16-bit wire format for the all-reduce (wire.h). */
#include <string.h>

#include "wire.h"

mp_status wire_parse(const char *s, mp_dtype *t) {
    if (!strcmp(s, "fp32")) *t = MP_F32;
    else if (!strcmp(s, "bf16")) *t = MP_BF16;
    else if (!strcmp(s, "fp16")) *t = MP_F16;
    else return MP_EINVAL;
    return MP_OK;
}

/* Whether n elements of x (type t) hold an inf or NaN: the scaler's check (vectorized; an inverse scale of 1
 * only reads them). */
static int any_nonfinite(const void *x, mp_dtype t, size_t n) {
    int found = 0;
    mp_unscale_check((void *)x, t, n, 1.0f, &found);
    return found;
}

void wire_pack(uint16_t *dst, mp_dtype t, float *const *x, const size_t *n, size_t count, mp_convert_stats *stats) {
    int bad = 0;
    for (size_t i = 0; i < count; i++) {
        mp_convert(dst, t, x[i], MP_F32, n[i], stats);
        bad |= any_nonfinite(x[i], MP_F32, n[i]);
        dst += n[i];
    }
    const float flag = bad ? 1.0f : 0.0f;
    mp_convert(dst, t, &flag, MP_F32, 1, NULL);
}

void wire_combine(const uint16_t *in, uint16_t *inout, size_t n, mp_dtype t) {
    enum { CHUNK = 4096 };
    float a[CHUNK], b[CHUNK];
    for (size_t k = 0; k < n; k += CHUNK) {
        const size_t m = n - k < CHUNK ? n - k : CHUNK;
        mp_convert(a, MP_F32, in + k, t, m, NULL);
        mp_convert(b, MP_F32, inout + k, t, m, NULL);
        for (size_t i = 0; i < m; i++) a[i] += b[i];
        mp_convert(inout + k, t, a, MP_F32, m, NULL);
    }
}

int wire_unpack(float *const *x, const size_t *n, size_t count, const uint16_t *src, mp_dtype t, int *nonfinite) {
    size_t total = 0;
    for (size_t i = 0; i < count; i++) {
        mp_convert(x[i], MP_F32, src + total, t, n[i], NULL);
        total += n[i];
    }
    *nonfinite = any_nonfinite(src, t, total);
    float flags;
    mp_convert(&flags, MP_F32, src + total, t, 1, NULL);
    return (int)flags;
}
