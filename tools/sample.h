/* sample.h - text from a GPT, one byte at a time, as nanoGPT's sample.py:
 * each byte drawn from softmax(logits / temperature) over the top k, the
 * context the last T bytes. Shared by `mixprec sample` and `mixprec compare`. */
#ifndef MIXPREC_TOOLS_SAMPLE_H
#define MIXPREC_TOOLS_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "mixprec/mixprec.h"

typedef struct sampler {
    mp_gpt *g;
    int32_t *ctx;      /* (cap,) the prompt, then the bytes drawn */
    size_t n, cap, T;  /* bytes in ctx, its room, the model's context */
    float *logits;     /* (V,) */
    int V, topk;
    double temperature;
    uint64_t rng;
} sampler;

/* Starts a sample of up to `tokens` bytes after the np >= 1 bytes of prompt
 * (temperature > 0; topk 0: all bytes; the model's vocabulary at most 1024).
 * Returns NULL, or what is wrong ("the prompt is empty", "out of memory");
 * free s with sampler_free in every case. */
const char *sampler_init(sampler *s, mp_gpt *g, const uint8_t *prompt, size_t np, size_t tokens, double temperature,
                         int topk, uint64_t seed);

/* The next byte (0 .. V-1), or -1 when the model fails (mp_last_error says
 * why) or `tokens` bytes were drawn already. */
int sampler_next(sampler *s);

void sampler_free(sampler *s); /* leaves s zeroed */

/* Byte b as `mixprec sample` prints it: printable ASCII, newline and tab as
 * themselves, any other byte as \xNN. Writes a NUL-terminated string of at
 * most 4 characters into out; returns its length. */
int sample_escape_byte(int b, char out[5]);

#endif
