/* mixprec/sample.h - text from a GPT, one byte at a time, as nanoGPT's sample.py:
 * each byte drawn from softmax(logits / temperature) over the top k, the
 * context the last T bytes. Used by `mixprec sample` and by runs that
 * sample their final model (run.h). */
#ifndef MIXPREC_SAMPLE_H
#define MIXPREC_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "gpt.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mp_sampler {
    mp_gpt *g;
    int32_t *ctx;     /* (cap,) the prompt, then the bytes drawn */
    size_t n, cap, T; /* bytes in ctx, its room, the model's context */
    float *logits;    /* (V,) */
    int V, topk;
    double temperature;
    uint64_t rng;
} mp_sampler;

/* Starts a sample of up to `tokens` bytes after the np >= 1 bytes of prompt
 * (temperature > 0; topk 0: all bytes; the model's vocabulary at most 1024).
 * MP_EINVAL + message for an empty prompt or a vocabulary over 1024 bytes,
 * MP_ENOMEM; free s with mp_sampler_free in every case. g must outlive s. */
mp_status mp_sampler_init(mp_sampler *s, mp_gpt *g, const uint8_t *prompt, size_t np, size_t tokens, double temperature,
                          int topk, uint64_t seed);

/* The next byte (0 .. V-1), or -1 when the model fails (mp_last_error says
 * why) or `tokens` bytes were drawn already. */
int mp_sampler_next(mp_sampler *s);

void mp_sampler_free(mp_sampler *s); /* leaves s zeroed; NULL is a no-op */

/* Byte b as `mixprec sample` prints it: printable ASCII, newline and tab as
 * themselves, any other byte as \xNN. Writes a NUL-terminated string of at
 * most 4 characters into out; returns its length. */
int mp_sample_escape_byte(int b, char out[5]);

#ifdef __cplusplus
}
#endif
#endif
