/* gradients.h - a set of gradient magnitudes, drawn from a log-normal
 * distribution or read from a file (shared by underflow, explore and tour,
 * which count them with the library's underflow.h). */
#ifndef MIXPREC_GRADIENTS_H
#define MIXPREC_GRADIENTS_H

#include <stddef.h>
#include <stdint.h>

#include "mixprec/mixprec.h"

typedef struct {
    float *g; /* magnitudes, fp32 */
    size_t n;
} grad_set;

/* |x| for x = exp(N(mu, sigma)) (numpy's lognormal), n values from seed. */
int grads_lognormal(grad_set *s, double mu, double sigma, size_t n, uint64_t seed);

/* Reads float values from FILE, its format known by its bytes whatever its
 * name: .npy (the magic "\x93NUMPY"; <f4, <f2 or <f8, any shape, C or
 * Fortran order; its header read as numpy reads it, a key given twice, an
 * unknown or missing key, an object or structured dtype refused by name),
 * safetensors (an 8-byte header length that fits the file, then '{'; every
 * F32/F16/BF16 tensor, concatenated), or, only when raw is set, raw
 * little-endian fp32; takes |x| and drops non-finite values. A file that is
 * none of these, not a regular file (mp_read_file: a FIFO, a device, a
 * directory), or changed while read is an error naming it. 0, or -1 with
 * a message in err. */
int grads_read(grad_set *s, const char *path, int raw, char *err, size_t errlen);

void grads_free(grad_set *s);

#endif
