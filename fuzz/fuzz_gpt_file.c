/* fuzz_gpt_file.c - a GPT weights file against the model its metadata names,
 * as `mixprec sample --from` reads it: the safetensors file, its "model" key
 * parsed, then mp_gpt_check_file before any of the model's memory is taken.
 * When the check accepts: the model's parameters fit in the file (at least
 * 2 bytes a value), and the model built from the metadata loads the file, or
 * refuses it for its values only (non-finite, or lm_head.weight differing
 * from the tied embedding). When it refuses a file that holds no layer
 * beyond the model's, and the model is small enough to build, mp_gpt_load
 * refuses the file too: the check refuses nothing the loader would take. */
#define _GNU_SOURCE
#include "fuzz.h"

/* The parameters of a GPT of config c. */
static double param_count(const mp_gpt_config *c) {
    const double L = c->n_layer, C = c->n_embd, T = c->block_size, V = c->vocab_size;
    return V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C;
}

/* Whether st names a tensor of a layer at or past L. */
static int has_layer_beyond(const mp_safetensors *st, int L) {
    for (size_t i = 0; i < st->count; i++) {
        unsigned long l;
        int end = 0;
        if (sscanf(st->tensors[i].name, "transformer.h.%lu.%n", &l, &end) == 1 && end > 0 && l >= (unsigned long)L)
            return 1;
    }
    return 0;
}

/* The model of c built and st loaded into it: mp_gpt_load's status. */
static mp_status load(const mp_gpt_config *c, const mp_safetensors *st) {
    mp_optim *opt = NULL;
    mp_gpt *g = NULL;
    FUZZ_CHECK(mp_optim_sgd(&opt, NULL) == MP_OK);
    FUZZ_CHECK(mp_gpt_create(&g, c, MP_F32, MP_MASTER_FP32, 1, opt, 1) == MP_OK);
    const mp_status s = mp_gpt_load(g, st);
    if (s != MP_OK) FUZZ_CHECK(s == MP_ECORRUPT && mp_last_error()[0]);
    mp_gpt_free(g);
    mp_optim_free(opt);
    return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mp_safetensors st;
    if (mp_safetensors_read(fuzz_file(data, size), &st) != MP_OK) return 0;
    const char *model = mp_safetensors_meta(&st, "model");
    mp_gpt_config c;
    if (model && mp_gpt_parse(model, &c) == MP_OK) {
        size_t bytes = 0;
        for (size_t i = 0; i < st.count; i++) bytes += st.tensors[i].nbytes;
        const double params = param_count(&c);
        if (mp_gpt_check_file(&c, &st) == MP_OK) {
            FUZZ_CHECK(2 * params <= (double)bytes); /* memory taken from the metadata is bounded by the file */
            if (load(&c, &st) != MP_OK)
                FUZZ_CHECK(strstr(mp_last_error(), "non-finite") || strstr(mp_last_error(), "differs from"));
        } else {
            FUZZ_CHECK(mp_last_error()[0]);
            if (!has_layer_beyond(&st, c.n_layer) && params <= 1 << 20 && c.block_size <= 1024)
                FUZZ_CHECK(load(&c, &st) != MP_OK);
        }
    }
    mp_safetensors_free(&st);
    return 0;
}
