/* models.c - the table of models a run trains (models.h): the library's
 * rows (run_mlp.c, run_gpt.c) and the caller's own model (mp_run_model). */
#include "models.h"

/* ---- the caller's model: its create and loader, as given ---- */

static mp_status custom_open(const mp_run_spec *s, void **ctx, size_t *T) {
    if (!s->custom->create || !s->custom->loader)
        return mp_error(MP_EINVAL, "model %s: create and loader are both needed", s->model);
    *ctx = (void *)s->custom, *T = 1;
    return MP_OK;
}

static void custom_close(void *ctx) { (void)ctx; }

static mp_status custom_create(void *ctx, const mp_precision *p, mp_optim *opt, size_t rows, uint64_t seed,
                               mp_model *out) {
    const mp_run_model *m = ctx;
    return m->create(m->ctx, p, opt, rows, seed, out);
}

static mp_status custom_loader(void *ctx, size_t rows, int shuffle, uint64_t seed, mp_loader *out, long *per) {
    const mp_run_model *m = ctx;
    return m->loader(m->ctx, rows, shuffle, seed, out, per);
}

static int custom_meta(const mp_run_spec *s, const char **kv) { return (void)s, (void)kv, 0; }
static const char *custom_describe(const mp_run_spec *s) { return (void)s, ""; }

/* Its evaluation is reported as a classifier's (run.h). */
static const mp_model_row custom_row = {.what = "this model",
                                        .report = MP_REPORT_CLASSIFIER,
                                        .batch = 256,
                                        .open = custom_open,
                                        .close = custom_close,
                                        .create = custom_create,
                                        .loader = custom_loader,
                                        .meta = custom_meta,
                                        .describe = custom_describe};

/* ---- the table ---- */

static const mp_model_row *const rows[] = {&mp_mlp_row, &mp_gpt_row}; /* the first: the default model */

const mp_model_row *mp_model_row_of(const mp_run_spec *s) {
    if (s->custom) return &custom_row;
    for (size_t i = 0; s->model && i < sizeof rows / sizeof rows[0]; i++)
        if (!strncmp(s->model, rows[i]->prefix, strlen(rows[i]->prefix))) return rows[i];
    return rows[0];
}

const mp_model_row *mp_model_row_kind(const char *kind) {
    for (size_t i = 0; kind && i < sizeof rows / sizeof rows[0]; i++)
        if (!strcmp(kind, rows[i]->kind)) return rows[i];
    return &custom_row;
}
