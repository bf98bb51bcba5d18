/* model.c - what all models share behind the interface of model.h. */
#include "internal.h"

void mp_model_free(mp_model *m) {
    if (!m || !m->impl) return;
    m->ops->free(m->impl);
    m->impl = NULL;
}
