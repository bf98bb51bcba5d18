/* gradients.h - a set of gradient magnitudes meeting a number format: drawn
 * from a log-normal distribution or read from a file, then counted through
 * mp_convert at several loss scales (shared by underflow, explore and tour). */
#ifndef MIXPREC_GRADIENTS_H
#define MIXPREC_GRADIENTS_H

#include <stddef.h>
#include <stdint.h>

#include "mixprec/mixprec.h"

typedef struct {
    float *g;   /* magnitudes, fp32 */
    size_t n;
} grad_set;

/* What happens to the set at one scale: counts through mp_convert's stats. */
typedef struct {
    double scale;
    uint64_t zero, subnormal, overflow, survive; /* zero counts every value stored as 0 */
} scale_counts;

/* |x| for x = exp(N(mu, sigma)) (numpy's lognormal), n values from seed. */
int grads_lognormal(grad_set *s, double mu, double sigma, size_t n, uint64_t seed);

/* Reads float values from FILE: .npy (<f4, <f2 or <f8, any shape), .safetensors
 * (every F32/F16/BF16 tensor, concatenated) or raw little-endian fp32; takes
 * |x| and drops non-finite values. 0, or -1 with a message in err. */
int grads_read(grad_set *s, const char *path, char *err, size_t errlen);

void grads_free(grad_set *s);

/* Counts for the set multiplied by scale (in fp32) and stored in t. */
scale_counts grads_count(const grad_set *s, mp_dtype t, double scale);

/* The power of two with the most survivors and no overflow (ties: fewer subnormals). */
double grads_best_scale(const grad_set *s, mp_dtype t);

double grads_quantile(const grad_set *s, double q); /* of the magnitudes */

#endif
