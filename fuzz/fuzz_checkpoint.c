/* fuzz_checkpoint.c - checkpoint metadata and contents (mp_trainer_resume:
 * the safetensors file, its format / precision / model keys, step and
 * optim_steps, the hex scaler blob, the weights and optimizer states) on any
 * bytes, into two trainers as `mixprec train` builds them: an MLP
 * (mlp:784-2-10) and a GPT (gpt:1-1-8-4), both fp16-dynamic with AdamW.
 * When a resume succeeds: step and optim_steps are decimal numbers (digits
 * only, at most 2^62, optim_steps <= step) and the trainer's step is that;
 * the scaler is 208 hex digits whose state the trainer now holds; saving the
 * trainer gives back every tensor it read, value for value, and resuming
 * from that file succeeds again. */
#define _GNU_SOURCE
#include "fuzz.h"
#include "internal.h"

typedef struct {
    mp_optim *opt;
    mp_mlp *mlp;
    mp_gpt *gpt;
    mp_trainer *tr;
    const char *const *expect;
} run;

static const char *const mlp_meta[] = {"model", "mlp:784-2-10", "act",   "relu", "layernorm",
                                       "0",     "optimizer",    "adamw", NULL};
static const char *const gpt_meta[] = {"model", "gpt:1-1-8-4", "gelu", "tanh", "optimizer", "adamw", NULL};

static mp_status no_batch(void *impl, uint64_t s, mp_batch *b) {
    (void)impl, (void)s, (void)b;
    return mp_error(MP_EINVAL, "fuzz_checkpoint: no data");
}

static void setup(run r[2]) {
    static mp_precision prec;
    FUZZ_CHECK(mp_precision_parse("fp16-dynamic", &prec) == MP_OK);
    const mp_adamw_config ac = mp_adamw_defaults();
    const mp_train_config tc = {&prec, mp_scaler_defaults(), {1e-3, MP_LR_CONSTANT, 0, 0, 0}, 1, 0, NULL, 0, 0};
    const mp_loader none = {NULL, no_batch, NULL, NULL};
    mp_mlp_config mc;
    mp_gpt_config gc;
    FUZZ_CHECK(mp_mlp_parse(mlp_meta[1], &mc) == MP_OK && mp_gpt_parse(gpt_meta[1], &gc) == MP_OK);
    FUZZ_CHECK(mp_optim_adamw(&r[0].opt, &ac) == MP_OK && mp_optim_adamw(&r[1].opt, &ac) == MP_OK);
    FUZZ_CHECK(mp_mlp_create(&r[0].mlp, &mc, MP_F16, MP_MASTER_FP32, 1, r[0].opt, 1) == MP_OK);
    FUZZ_CHECK(mp_gpt_create(&r[1].gpt, &gc, MP_F16, MP_MASTER_FP32, 1, r[1].opt, 1) == MP_OK);
    FUZZ_CHECK(mp_trainer_create(&r[0].tr, &tc, mp_mlp_model(r[0].mlp), r[0].opt, none) == MP_OK);
    FUZZ_CHECK(mp_trainer_create(&r[1].tr, &tc, mp_gpt_model(r[1].gpt), r[1].opt, none) == MP_OK);
    r[0].expect = mlp_meta, r[1].expect = gpt_meta;
}

/* The value of a string of decimal digits, or -1 if it is not one or is above 2^62. */
static long long decimal(const char *s) {
    if (!s || !*s) return -1;
    long long v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || v > ((1LL << 62) - (*s - '0')) / 10) return -1;
        v = 10 * v + (*s - '0');
    }
    return v;
}

static int hexval(char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* Element i of a tensor as fp32 bits. */
static uint32_t bits(const mp_tensor *t, size_t i) {
    float v;
    mp_convert(&v, MP_F32, (const uint8_t *)t->data + i * mp_format(t->dtype)->size, t->dtype, 1, NULL);
    return mp_f32_bits(v);
}

static void check_resumed(run *r, const mp_safetensors *in) {
    const long long step = decimal(mp_safetensors_meta(in, "step"));
    const long long osteps = decimal(mp_safetensors_meta(in, "optim_steps"));
    FUZZ_CHECK(step >= 0 && osteps >= 0 && osteps <= step && mp_trainer_step_count(r->tr) == step);
    const char *hex = mp_safetensors_meta(in, "scaler");
    FUZZ_CHECK(hex && strlen(hex) == 2 * MP_SCALER_BLOB_SIZE);
    uint8_t blob[MP_SCALER_BLOB_SIZE], now[MP_SCALER_BLOB_SIZE];
    for (int i = 0; i < MP_SCALER_BLOB_SIZE; i++) {
        FUZZ_CHECK(hexval(hex[2 * i]) >= 0 && hexval(hex[2 * i + 1]) >= 0);
        blob[i] = (uint8_t)(hexval(hex[2 * i]) << 4 | hexval(hex[2 * i + 1]));
    }
    FUZZ_CHECK(mp_scaler_save(mp_trainer_scaler(r->tr), now) == MP_OK && memcmp(blob, now, 96) == 0);

    const char *path = fuzz_scratch("resaved.safetensors");
    FUZZ_CHECK(mp_trainer_save(r->tr, path, r->expect, MP_F32) == MP_OK);
    mp_safetensors out;
    FUZZ_CHECK(mp_safetensors_read(path, &out) == MP_OK);
    for (size_t i = 0; i < out.count; i++) {
        const mp_tensor *o = &out.tensors[i], *t = mp_safetensors_find(in, o->name);
        if (!t && strcmp(o->name, "transformer.wte.weight") == 0) t = mp_safetensors_find(in, "lm_head.weight");
        FUZZ_CHECK(t && mp_tensor_numel(t) == mp_tensor_numel(o));
        if (t->dtype == o->dtype) FUZZ_CHECK(memcmp(t->data, o->data, o->nbytes) == 0);
        else
            for (size_t k = 0; k < mp_tensor_numel(o); k++) FUZZ_CHECK(bits(o, k) == bits(t, k));
    }
    mp_safetensors_free(&out);
    FUZZ_CHECK(mp_trainer_resume(r->tr, path, r->expect) == MP_OK && mp_trainer_step_count(r->tr) == step);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static run r[2];
    if (!r[0].tr) setup(r);
    const char *path = fuzz_file(data, size);
    for (int m = 0; m < 2; m++) {
        if (mp_trainer_resume(r[m].tr, path, r[m].expect) != MP_OK) {
            FUZZ_CHECK(mp_last_error()[0]);
            continue;
        }
        mp_safetensors in;
        FUZZ_CHECK(mp_safetensors_read(path, &in) == MP_OK);
        check_resumed(&r[m], &in);
        mp_safetensors_free(&in);
    }
    return 0;
}
