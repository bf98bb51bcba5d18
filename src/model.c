/* model.c - what all models share behind the interface of model.h. */
#include "internal.h"

void mp_model_free(mp_model *m) {
    if (!m || !m->impl) return;
    m->ops->free(m->impl);
    m->impl = NULL;
}

const mp_recipe *mp_model_recipe(const mp_model *m) {
    return m && m->impl && m->ops->recipe ? m->ops->recipe(m->impl) : NULL;
}

size_t mp_model_qtensors(const mp_model *m, mp_named_qtensor *out, size_t cap) {
    return m && m->impl && m->ops->qtensors ? m->ops->qtensors(m->impl, out, cap) : 0;
}
