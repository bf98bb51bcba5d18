/* sample.c - text from a GPT, one byte at a time (mixprec/sample.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "mixprec/sample.h"

/* One byte drawn from softmax(logits / temperature) over the top k. */
static int draw(const float *logits, int V, double temperature, int k, uint64_t *rng) {
    double p[1024];
    float kth = -INFINITY;
    if (k > 0 && k < V) { /* the k-th largest logit: keep logits >= it, as torch.topk then masking */
        float sorted[1024];
        memcpy(sorted, logits, (size_t)V * sizeof *sorted);
        for (int i = 0; i < k; i++)
            for (int j = i + 1; j < V; j++)
                if (sorted[j] > sorted[i]) {
                    const float t = sorted[i];
                    sorted[i] = sorted[j], sorted[j] = t;
                }
        kth = sorted[k - 1];
    }
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < V; i++) mx = logits[i] >= kth && logits[i] > mx ? logits[i] : mx;
    for (int i = 0; i < V; i++) sum += p[i] = logits[i] >= kth ? exp(((double)logits[i] - mx) / temperature) : 0.0;
    double u = (double)(mp_splitmix64(rng) >> 11) * 0x1p-53 * sum;
    for (int i = 0; i < V; i++)
        if ((u -= p[i]) < 0) return i;
    for (int i = V - 1; i >= 0; i--)
        if (p[i] > 0) return i;
    return 0;
}

mp_status mp_sampler_init(mp_sampler *s, mp_gpt *g, const uint8_t *prompt, size_t np, size_t tokens, double temperature,
                          int topk, uint64_t seed) {
    const mp_gpt_config *c = mp_gpt_get_config(g);
    memset(s, 0, sizeof *s);
    if (np == 0) return mp_error(MP_EINVAL, "the prompt is empty");
    if (c->vocab_size > 1024) return mp_error(MP_EINVAL, "the vocabulary is over 1024 bytes");
    *s = (mp_sampler){.g = g,
                      .n = np,
                      .cap = np + tokens,
                      .T = (size_t)c->block_size,
                      .V = c->vocab_size,
                      .topk = topk,
                      .temperature = temperature,
                      .rng = seed};
    s->ctx = malloc(s->cap * sizeof *s->ctx);
    s->logits = malloc((size_t)s->V * sizeof *s->logits);
    if (!s->ctx || !s->logits) return mp_error(MP_ENOMEM, "sampling: out of memory");
    for (size_t i = 0; i < np; i++) s->ctx[i] = prompt[i];
    return MP_OK;
}

int mp_sampler_next(mp_sampler *s) {
    if (s->n >= s->cap) return -1;
    const size_t len = s->n < s->T ? s->n : s->T;
    if (mp_gpt_next_logits(s->g, s->ctx + s->n - len, len, s->logits) != MP_OK) return -1;
    const int b = draw(s->logits, s->V, s->temperature, s->topk, &s->rng);
    s->ctx[s->n++] = b;
    return b;
}

void mp_sampler_free(mp_sampler *s) {
    if (!s) return;
    free(s->ctx), free(s->logits);
    memset(s, 0, sizeof *s);
}

int mp_sample_escape_byte(int b, char out[5]) {
    if ((b >= 0x20 && b < 0x7f) || b == '\n' || b == '\t') return out[0] = (char)b, out[1] = 0, 1;
    return snprintf(out, 5, "\\x%02x", (unsigned)b & 0xffu);
}
