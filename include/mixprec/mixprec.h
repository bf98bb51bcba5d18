/* mixprec/mixprec.h - everything public in mixprec. */
#ifndef MIXPREC_MIXPREC_H
#define MIXPREC_MIXPREC_H

#define MP_VERSION_MAJOR 0
#define MP_VERSION_MINOR 1
#define MP_VERSION_PATCH 0
#define MP_VERSION_STRING "0.1.0"

#include "status.h"
#include "format.h"
#include "convert.h"
#include "cpu.h"
#include "scaler.h"
#include "optim.h"
#include "gemm.h"
#include "ops.h"
#include "data.h"
#include "io.h"
#include "nn.h"
#include "model.h"
#include "gpt.h"
#include "report.h"
#include "text.h"
#include "train.h"
#include "underflow.h"
#include "mx.h"
#include "recipe.h"
#include "sample.h"
#include "run.h"
#include "compare.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The library's version string, e.g. "0.1.0". */
const char *mp_version(void);

/* sizeof of the public struct named (e.g. "mp_report_run"), for bindings
 * that mirror the structs (the Python package checks its mirrors with it);
 * 0 for a name that is not one of the mirrored structs. */
size_t mp_struct_size(const char *name);

#ifdef __cplusplus
}
#endif
#endif
